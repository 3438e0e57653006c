/* gpu_launch_bench [-n launches] [-r runs]: the baselines the GPU issue's latency targets are relative to,
 * measured on this machine in this run:
 *  - an empty kernel launched back to back from one thread (time per launch, host clock around n
 *    launches and a final synchronize);
 *  - the same n launches captured once in a CUDA graph and replayed (time per kernel);
 *  - the host time of one cudaLaunchKernel call alone (what a collective call's host time compares to).
 * Medians of `runs`. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(call)                                                                               \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));   \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

__global__ void emptyKernel() {}

static double nowUs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
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
  double back[99], graph[99], host[99];
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
  }
  qsort(back, (size_t)runs, sizeof(double), cmpD);
  qsort(graph, (size_t)runs, sizeof(double), cmpD);
  qsort(host, (size_t)runs, sizeof(double), cmpD);
  printf("# gpu_launch_bench: %d launches per run, median of %d runs (us per kernel)\n", n, runs);
  printf("empty kernel, back to back      %8.3f us\n", back[runs / 2]);
  printf("empty kernel, in a CUDA graph   %8.3f us\n", graph[runs / 2]);
  printf("host time of one launch call    %8.3f us\n", host[runs / 2]);
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaStreamDestroy(s));
  return 0;
}
