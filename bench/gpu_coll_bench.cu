/* gpu_coll_bench [-r runs] [-n calls] [-s bytes] [-k ranks]: the GPU issue's targets, each next to its
 * baseline measured in the same run on the same GPU (medians of `runs`):
 *  - baselines: an empty kernel launched back to back (per launch), the same inside a CUDA graph (per
 *    kernel), the host time of one launch call, and the device-to-device cudaMemcpy rate (bytes read plus
 *    written);
 *  - 8-byte allreduce, 2 ranks (threads) on the GPU, n calls back to back then one synchronize (nccl-tests
 *    timing): time per call, against the empty kernel; the host time inside commAllReduce, against a
 *    launch call, both timed in bursts of BURST calls with a synchronize between bursts (so that neither
 *    waits for room in a full launch queue), also with the ranks taking turns (no two threads in the
 *    driver at once), against two threads launching empty kernels at once, and with one rank (one thread,
 *    as the baseline); and the same calls captured in a CUDA graph (per call);
 *  - allreduce of `bytes` (default 1 GiB) with k ranks (default 8) and with 2 ranks on the one GPU, Ring
 *    (COMM_ALGO=ring unless set; the 8-byte calls use the tuner's choice): device memory traffic against the copy rate. A ring allreduce over n
 *    ranks reads and writes (6n - 4) x bytes in all (per chunk of bytes/n, each rank: send 2, n-2
 *    reduce-sends 3, reduce-copy-send 4, n-2 copy-sends 3, receive 2).
 * Ranks are threads of this process, each with its own communicator and stream on device 0. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"

#define CK(call)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)
#define CC(call)                                                                             \
  do {                                                                                       \
    commResult_t r_ = (call);                                                                \
    if (r_ != commSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, commGetErrorString(r_)); \
      exit(1);                                                                               \
    }                                                                                        \
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
static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmpD);
  return v[n / 2];
}

static int runs = 7, calls = 1000;
/* Host time is measured over bursts of BURST calls, each followed by a synchronize outside the timing: back
 * to back, a GPU slower than the host fills the launch queue, and a launch call then waits for room, which
 * is the GPU's time, not the call's. The empty kernel's launch is timed the same way. */
#define BURST 50
static size_t bigBytes = 1ull << 30;

/* ---- Ranks as threads ---- */

typedef struct {
  int rank, nRanks;
  size_t bytes; /* allreduce size */
  int mode;     /* 0: back to back, 1: graph, 2: bandwidth */
  double usPerCall[16], hostUsPerCall[16];
  double aloneHostUsPerCall[16]; /* host time with the ranks taking turns (no other thread launching) */
} rankArgs;

static commUniqueId uid;
static pthread_barrier_t barrier;

/* Host time per commAllReduce over n / BURST bursts, each followed by a synchronize outside the timing.
 * takeTurns: each rank's burst runs while the others wait at the barrier (its kernels queue up on the GPU
 * until the peers' arrive), so no other thread of the process is inside the CUDA driver during the timed
 * calls; the difference to the plain bursts is the cost of launching from two threads into one context at
 * once. */
static double hostBurstUs(const rankArgs* a, comm_t comm, cudaStream_t s, float* buf, float* out, size_t count, int n,
                          int takeTurns) {
  double host = 0;
  const int turns = takeTurns ? a->nRanks : 1;
  for (int b = 0; b < n / BURST; b++) {
    for (int turn = 0; turn < turns; turn++) {
      if (takeTurns) pthread_barrier_wait(&barrier);
      if (takeTurns && turn != a->rank) continue;
      for (int i = 0; i < BURST; i++) {
        double h0 = nowUs();
        CC(commAllReduce(buf, out, count, commFloat32, commSum, comm, s));
        host += nowUs() - h0;
      }
    }
    CK(cudaStreamSynchronize(s));
  }
  return host / (n / BURST * BURST);
}

static void* rankMain(void* p) {
  rankArgs* a = (rankArgs*)p;
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  comm_t comm;
  CC(commInitRank(&comm, a->nRanks, uid, a->rank));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *buf, *out;
  size_t count = a->bytes / sizeof(float);
  CK(cudaMalloc((void**)&buf, a->bytes));
  CK(cudaMalloc((void**)&out, a->bytes));
  CK(cudaMemset(buf, 0, a->bytes));
  int n = a->mode == 2 ? 5 : calls;
  /* Every rank allocated before any launches: a kernel waiting for a peer still inside cudaMalloc could
   * otherwise keep that cudaMalloc waiting (both ranks share one GPU). */
  pthread_barrier_wait(&barrier);
  /* Warm up (connections are made on the first call). */
  for (int i = 0; i < 3; i++) CC(commAllReduce(buf, out, count, commFloat32, commSum, comm, s));
  CK(cudaStreamSynchronize(s));
  cudaGraphExec_t ge = NULL;
  const int perGraph = 100;
  if (a->mode == 1) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < perGraph; i++) CC(commAllReduce(buf, out, count, commFloat32, commSum, comm, s));
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphDestroy(g));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
  }
  for (int r = 0; r < runs; r++) {
    pthread_barrier_wait(&barrier);
    double t0 = nowUs(), host = 0;
    if (a->mode == 1) {
      for (int i = 0; i < n / perGraph; i++) CK(cudaGraphLaunch(ge, s));
    } else {
      for (int i = 0; i < n; i++) {
        double h0 = nowUs();
        CC(commAllReduce(buf, out, count, commFloat32, commSum, comm, s));
        host += nowUs() - h0;
      }
    }
    CK(cudaStreamSynchronize(s));
    pthread_barrier_wait(&barrier); /* the slowest rank ends the run */
    double us = nowUs() - t0;
    int done = a->mode == 1 ? n / perGraph * perGraph : n;
    a->usPerCall[r] = us / done;
    a->hostUsPerCall[r] = host / done;
    if (a->mode == 0) { /* host time again, in bursts the launch queue holds, alone and taking turns */
      a->hostUsPerCall[r] = hostBurstUs(a, comm, s, buf, out, count, n, 0);
      a->aloneHostUsPerCall[r] = hostBurstUs(a, comm, s, buf, out, count, n, 1);
    }
  }
  if (ge) CK(cudaGraphExecDestroy(ge));
  CK(cudaFree(buf));
  CK(cudaFree(out));
  CK(cudaStreamDestroy(s));
  CC(commFinalize(comm));
  CC(commDestroy(comm));
  return NULL;
}

static double aloneHostUs; /* rank 0's host time per call with the ranks taking turns (mode 0) */

/* Per-call time (median over runs, rank 0's view after the slowest rank) and rank 0's host time. */
static void runRanks(int nRanks, size_t bytes, int mode, double* us, double* hostUs) {
  CC(commGetUniqueId(&uid));
  pthread_barrier_init(&barrier, NULL, (unsigned)nRanks);
  rankArgs* a = (rankArgs*)calloc((size_t)nRanks, sizeof(rankArgs));
  pthread_t* th = (pthread_t*)calloc((size_t)nRanks, sizeof(pthread_t));
  for (int r = 0; r < nRanks; r++) {
    a[r].rank = r, a[r].nRanks = nRanks, a[r].bytes = bytes, a[r].mode = mode;
    pthread_create(&th[r], NULL, rankMain, &a[r]);
  }
  for (int r = 0; r < nRanks; r++) pthread_join(th[r], NULL);
  *us = median(a[0].usPerCall, runs);
  *hostUs = median(a[0].hostUsPerCall, runs);
  if (mode == 0) aloneHostUs = median(a[0].aloneHostUsPerCall, runs);
  pthread_barrier_destroy(&barrier);
  free(a);
  free(th);
}

/* The launch baseline under the conditions of two ranks in one process: two threads, each with its own
 * stream, launching bursts of empty kernels at the same moment (the CUDA driver serialises parts of a launch
 * per context). Returns thread 0's host time per launch call. */
typedef struct {
  int index;
  double hostUs[16];
} launcherArgs;
static void* launcherMain(void* p) {
  launcherArgs* a = (launcherArgs*)p;
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < BURST; i++) emptyKernel<<<1, 1, 0, s>>>();
  CK(cudaStreamSynchronize(s));
  for (int r = 0; r < runs; r++) {
    double h = 0;
    for (int b = 0; b < calls / BURST; b++) {
      pthread_barrier_wait(&barrier);
      for (int i = 0; i < BURST; i++) {
        double h0 = nowUs();
        emptyKernel<<<1, 1, 0, s>>>();
        h += nowUs() - h0;
      }
      CK(cudaStreamSynchronize(s));
    }
    a->hostUs[r] = h / (calls / BURST * BURST);
  }
  CK(cudaStreamDestroy(s));
  return NULL;
}
static double twoThreadLaunchUs(void) {
  launcherArgs a[2];
  pthread_t th[2];
  pthread_barrier_init(&barrier, NULL, 2);
  for (int i = 0; i < 2; i++) a[i].index = i, pthread_create(&th[i], NULL, launcherMain, &a[i]);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&barrier);
  return median(a[0].hostUs, runs);
}

int main(int argc, char** argv) {
  int bigRanks = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-r")) runs = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-n")) calls = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-s")) bigBytes = strtoull(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "-k")) bigRanks = atoi(argv[i + 1]);
  }
  if (runs < 1 || runs > 16 || calls < 100 || bigRanks < 2 || bigRanks > 64) return 2;
  int nDev = 0;
  if (cudaGetDeviceCount(&nDev) != cudaSuccess || nDev == 0) {
    printf("gpu_coll_bench: no CUDA device\n");
    return 77;
  }
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  /* Baselines. */
  double back[16], graph[16], host[16], copy[16];
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; i++) emptyKernel<<<1, 1, 0, s>>>();
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, s));
  CK(cudaStreamSynchronize(s));
  void *src, *dst;
  CK(cudaMalloc(&src, bigBytes));
  CK(cudaMalloc(&dst, bigBytes));
  CK(cudaMemset(src, 1, bigBytes));
  CK(cudaMemcpyAsync(dst, src, bigBytes, cudaMemcpyDeviceToDevice, s));
  CK(cudaStreamSynchronize(s));
  for (int r = 0; r < runs; r++) {
    double t0 = nowUs(), h = 0;
    for (int i = 0; i < calls; i++) emptyKernel<<<1, 1, 0, s>>>();
    CK(cudaStreamSynchronize(s));
    back[r] = (nowUs() - t0) / calls;
    for (int b = 0; b < calls / BURST; b++) {
      for (int i = 0; i < BURST; i++) {
        double h0 = nowUs();
        emptyKernel<<<1, 1, 0, s>>>();
        h += nowUs() - h0;
      }
      CK(cudaStreamSynchronize(s));
    }
    host[r] = h / (calls / BURST * BURST);
    t0 = nowUs();
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    graph[r] = (nowUs() - t0) / calls;
    t0 = nowUs();
    CK(cudaMemcpyAsync(dst, src, bigBytes, cudaMemcpyDeviceToDevice, s));
    CK(cudaStreamSynchronize(s));
    copy[r] = 2.0 * (double)bigBytes / ((nowUs() - t0) * 1e3); /* GB/s, read + written */
  }
  CK(cudaFree(src));
  CK(cudaFree(dst));
  double backUs = median(back, runs), graphUs = median(graph, runs), hostUs = median(host, runs);
  double copyGBs = median(copy, runs);
  printf("gpu_coll_bench: medians of %d runs, %d calls each\n", runs, calls);
  printf("baseline empty kernel back to back   %8.2f us per launch\n", backUs);
  printf("baseline empty kernel in a graph     %8.2f us per kernel\n", graphUs);
  printf("baseline host time of a launch call  %8.2f us\n", hostUs);
  printf("baseline cudaMemcpy D2D %zu B        %8.1f GB/s (read + written)\n", bigBytes, copyGBs);
  double twoHostUs = twoThreadLaunchUs();
  printf("baseline launch call, 2 threads      %8.2f us = %.2fx one thread (both launching at once)\n", twoHostUs,
         twoHostUs / hostUs);

  double us, hus;
  runRanks(2, 8, 0, &us, &hus);
  printf("allreduce 8 B, 2 ranks, back to back %8.2f us per call = %.2fx the empty kernel (target <= 2.5x)\n", us,
         us / backUs);
  printf("host time in commAllReduce (8 B)     %8.2f us = %.2fx a launch call (target <= 1.5x); %.2fx the "
         "2-thread launch\n",
         hus, hus / hostUs, hus / twoHostUs);
  printf("  the same, ranks taking turns       %8.2f us = %.2fx a launch call (no other thread launching)\n",
         aloneHostUs, aloneHostUs / hostUs);
  /* One rank: the same call path (a cached plan, one launch of the executor's kernel: a copy) from one
   * thread, as the baseline's launch call is timed. */
  double us1, hus1;
  runRanks(1, 8, 0, &us1, &hus1);
  printf("host time in commAllReduce, 1 rank  %8.2f us = %.2fx a launch call (one thread, as the baseline)\n", hus1,
         hus1 / hostUs);
  runRanks(2, 8, 1, &us, &hus);
  printf("allreduce 8 B, 2 ranks, CUDA graph   %8.2f us per call (target <= 5 us)\n", us);
  /* The same calls with every call joined through the communicator's own stream (two events each way). */
  setenv("COMM_DEV_STREAM_JOIN", "1", 1);
  runRanks(2, 8, 0, &us, &hus);
  printf("allreduce 8 B, 2 ranks, joined       %8.2f us per call = %.2fx the empty kernel; host %.2f us = %.2fx "
         "(COMM_DEV_STREAM_JOIN=1)\n",
         us, us / backUs, hus, hus / hostUs);
  unsetenv("COMM_DEV_STREAM_JOIN");
  int sizes[2] = {2, bigRanks};
  setenv("COMM_ALGO", "ring", 0); /* the traffic formula is the ring's (the small calls above: the tuner's) */
  for (int i = 0; i < 2; i++) {
    int n = sizes[i];
    runRanks(n, bigBytes, 2, &us, &hus);
    double traffic = (6.0 * n - 4.0) * (double)bigBytes / (us * 1e3);
    printf("allreduce %zu B, %d ranks, ring    %8.0f us, memory traffic %.1f GB/s = %.2fx the copy rate "
           "(target >= 0.70)\n",
           bigBytes, n, us, traffic, traffic / copyGBs);
  }
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return 0;
}
