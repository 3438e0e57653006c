/* gpu_launch_bench [-n launches] [-r runs]: the baselines the GPU issue's latency targets are relative to,
 * measured on this machine in this run:
 *  - an empty kernel launched back to back from one thread (time per launch, host clock around n
 *    launches and a final synchronize);
 *  - the same n launches captured once in a CUDA graph and replayed (time per kernel);
 *  - the host time of one cudaLaunchKernel call alone (what a collective call's host time compares to);
 *  - the host time of a launch with B bytes of parameters (B = 256, 768, 2304: the executor's kernel carries
 *    its plan in about 800 or 2,300 bytes), of an empty launch followed by a cudaEventRecord, and of a
 *    kernel of 128 threads with 2 KB of local memory each, of an empty kernel launched through
 *    cudaLaunchKernelEx with and without the programmatic-dependent-launch attribute (the executor's launch
 *    for one-channel plans), and of 128 threads with 4 KB of dynamic shared memory (its plan copy).
 * Medians of `runs`. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(call)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

__global__ void emptyKernel() {}
static double nowUs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

template <int B>
struct Params {
  char bytes[B];
};
template <int B>
__global__ void paramKernel(const __grid_constant__ Params<B> p) {
  if (p.bytes[0] == 1 && threadIdx.x == 1000) printf("never\n");
}

/* A kernel with 2 KB of local memory per thread (as the executor's kernel has about 1.9 KB): does the
 * launch cost depend on it? */
__global__ void localKernel(int i) {
  volatile int a[512];
  a[i & 511] = i;
  if (a[(i * 7) & 511] == -1) printf("never\n");
}

/* Host time per launch of n kernels with B bytes of parameters (the stream drained after). */
template <int B>
static double paramLaunchUs(cudaStream_t s, int n) {
  Params<B> p;
  memset(&p, 0, sizeof(p));
  double t0 = nowUs();
  for (int i = 0; i < n; i++) paramKernel<B><<<1, 1, 0, s>>>(p);
  double us = (nowUs() - t0) / n;
  CK(cudaStreamSynchronize(s));
  return us;
}

/* Host time per launch through cudaLaunchKernelEx, with the early-launch attribute or none. */
static double launchExUs(cudaStream_t s, int n, int pdl, int threads, size_t smem) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  if (pdl) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  double t0 = nowUs();
  for (int i = 0; i < n; i++) CK(cudaLaunchKernelEx(&cfg, emptyKernel));
  double us = (nowUs() - t0) / n;
  CK(cudaStreamSynchronize(s));
  return us;
}

static int cmpD(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  int n = 10000, runs = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-n")) n = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-r")) runs = atoi(argv[i + 1]);
  }
  if (n < 1 || runs < 1 || runs > 99) return 2;
  int nDev = 0;
  if (cudaGetDeviceCount(&nDev) != cudaSuccess || nDev == 0) {
    printf("gpu_launch_bench: no CUDA device\n");
    return 77;
  }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < 100; i++) emptyKernel<<<1, 1, 0, s>>>();
  CK(cudaStreamSynchronize(s));
  double back[99], graph[99], host[99], p256[99], p768[99], p2304[99], withEvent[99], local[99];
  double ex[99], exPdl[99], smem[99];
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  paramLaunchUs<256>(s, 100), paramLaunchUs<768>(s, 100), paramLaunchUs<2304>(s, 100);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < n; i++) emptyKernel<<<1, 1, 0, s>>>();
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, s));
  CK(cudaStreamSynchronize(s));
  for (int r = 0; r < runs; r++) {
    double t0 = nowUs();
    for (int i = 0; i < n; i++) emptyKernel<<<1, 1, 0, s>>>();
    double t1 = nowUs();
    CK(cudaStreamSynchronize(s));
    double t2 = nowUs();
    back[r] = (t2 - t0) / n;
    host[r] = (t1 - t0) / n;
    t0 = nowUs();
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    graph[r] = (nowUs() - t0) / n;
    p256[r] = paramLaunchUs<256>(s, n);
    p768[r] = paramLaunchUs<768>(s, n);
    p2304[r] = paramLaunchUs<2304>(s, n);
    t0 = nowUs();
    for (int i = 0; i < n; i++) {
      emptyKernel<<<1, 1, 0, s>>>();
      CK(cudaEventRecord(ev, s));
    }
    withEvent[r] = (nowUs() - t0) / n;
    CK(cudaStreamSynchronize(s));
    t0 = nowUs();
    for (int i = 0; i < n; i++) localKernel<<<1, 128, 0, s>>>(i);
    local[r] = (nowUs() - t0) / n;
    CK(cudaStreamSynchronize(s));
    ex[r] = launchExUs(s, n, 0, 1, 0);
    exPdl[r] = launchExUs(s, n, 1, 1, 0);
    smem[r] = launchExUs(s, n, 0, 128, 4096);
  }
  qsort(back, (size_t)runs, sizeof(double), cmpD);
  qsort(graph, (size_t)runs, sizeof(double), cmpD);
  double* sorted[] = {host, p256, p768, p2304, withEvent, local, ex, exPdl, smem};
  for (int i = 0; i < 9; i++) qsort(sorted[i], (size_t)runs, sizeof(double), cmpD);
  printf("# gpu_launch_bench: %d launches per run, median of %d runs (us per kernel)\n", n, runs);
  printf("empty kernel, back to back      %8.3f us\n", back[runs / 2]);
  printf("empty kernel, in a CUDA graph   %8.3f us\n", graph[runs / 2]);
  printf("host time of one launch call    %8.3f us\n", host[runs / 2]);
  printf("  with 256 B of parameters      %8.3f us\n", p256[runs / 2]);
  printf("  with 768 B of parameters      %8.3f us\n", p768[runs / 2]);
  printf("  with 2304 B of parameters     %8.3f us\n", p2304[runs / 2]);
  printf("  then a cudaEventRecord        %8.3f us\n", withEvent[runs / 2]);
  printf("  128 threads, 2 KB local each  %8.3f us\n", local[runs / 2]);
  printf("  cudaLaunchKernelEx            %8.3f us\n", ex[runs / 2]);
  printf("  cudaLaunchKernelEx, early     %8.3f us (programmatic stream serialization)\n", exPdl[runs / 2]);
  printf("  128 threads, 4 KB dyn. smem   %8.3f us\n", smem[runs / 2]);
  CK(cudaEventDestroy(ev));
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaStreamDestroy(s));
  return 0;
}
