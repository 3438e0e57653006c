/* nccl_compare: libcomm against NCCL, side by side, on G GPUs of this host (bench/nccl_compare.sh runs it).
 * Ranks are threads, rank r on device r, each with its own non-blocking stream, one NCCL communicator and
 * one libcomm communicator. NCCL is not linked: it is dlopen'ed (-N path, else $NCCL_LIB, else
 * libnccl.so.2); nccl.h gives the types only. Float32, sum, out-of-place, nccl-tests conventions:
 *  - the size printed is the total bytes of the largest buffer (allreduce, broadcast: count x 4; allgather:
 *    the receive buffer, G x sendcount x 4; reducescatter: the send buffer, G x recvcount x 4; alltoall: the
 *    whole buffer, G x per-peer count x 4); sizes whose count is 0 after dividing by G are skipped;
 *  - timing: all ranks meet at a barrier, record an event on their stream, issue `iters` calls back to back,
 *    record a stop event and synchronize; time per call = elapsed / iters, the slowest rank's is reported;
 *    iters = clamp(target ms / per-call time of the warmup calls, 5, 2000), fixed per size and library;
 *  - each measurement is repeated -r times, NCCL and libcomm interleaved (their order alternates from one
 *    repetition to the next), and the median is printed;
 *  - busbw = algbw x 2(G-1)/G (allreduce), (G-1)/G (allgather, reducescatter, alltoall), 1 (broadcast);
 *  - NCCL's alltoall is a group of ncclSend/ncclRecv to every peer (as nccl-tests); libcomm's commAllToAll.
 * Before the sizes of a collective, one correctness check per library at the middle size (allreduce of
 * all-ones gives G, and the like for the others); a mismatch prints FAIL and the exit status is 1 at the end.
 * Any failed CUDA, NCCL or libcomm call: the call and the rank on stderr, exit status 1. A watchdog ends
 * the run with status 2 after -t seconds. Exit status 77: no CUDA device. */
#include <cuda_runtime.h>
#include <ctype.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "comm.h"

/* NCCL's types. Without nccl.h (or with -DNCCL_COMPARE_OWN_TYPES), the few ABI-stable ones used here. */
#if !defined(NCCL_COMPARE_OWN_TYPES) && __has_include(<nccl.h>)
#include <nccl.h>
#include <type_traits>
#else
typedef struct ncclComm* ncclComm_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;
typedef enum { ncclFloat32 = 7, ncclNumTypes = 12 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclMaxRedOp = 0x7fffffff } ncclRedOp_t;
#endif

typedef ncclResult_t (*ncclGetVersion_t)(int*);
typedef ncclResult_t (*ncclGetUniqueId_t)(ncclUniqueId*);
typedef ncclResult_t (*ncclCommInitRank_t)(ncclComm_t*, int, ncclUniqueId, int);
typedef ncclResult_t (*ncclCommDestroy_t)(ncclComm_t);
typedef ncclResult_t (*ncclAllReduce_t)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                        cudaStream_t);
typedef ncclResult_t (*ncclAllGather_t)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*ncclReduceScatter_t)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                            cudaStream_t);
typedef ncclResult_t (*ncclBroadcast_t)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*ncclSend_t)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*ncclRecv_t)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*ncclGroup_t)(void);
typedef const char* (*ncclGetErrorString_t)(ncclResult_t);

#ifdef NCCL_H_ /* the pointer types above match the header's declarations */
#define SAME(fn, t) static_assert(std::is_same<decltype(&fn), t>::value, #fn " type")
SAME(ncclGetVersion, ncclGetVersion_t);
SAME(ncclGetUniqueId, ncclGetUniqueId_t);
SAME(ncclCommInitRank, ncclCommInitRank_t);
SAME(ncclCommDestroy, ncclCommDestroy_t);
SAME(ncclAllReduce, ncclAllReduce_t);
SAME(ncclAllGather, ncclAllGather_t);
SAME(ncclReduceScatter, ncclReduceScatter_t);
SAME(ncclBroadcast, ncclBroadcast_t);
SAME(ncclSend, ncclSend_t);
SAME(ncclRecv, ncclRecv_t);
SAME(ncclGroupStart, ncclGroup_t);
SAME(ncclGroupEnd, ncclGroup_t);
SAME(ncclGetErrorString, ncclGetErrorString_t);
#undef SAME
#endif

static struct {
  ncclGetVersion_t getVersion;
  ncclGetUniqueId_t getUniqueId;
  ncclCommInitRank_t commInitRank;
  ncclCommDestroy_t commDestroy;
  ncclAllReduce_t allReduce;
  ncclAllGather_t allGather;
  ncclReduceScatter_t reduceScatter;
  ncclBroadcast_t broadcast;
  ncclSend_t send;
  ncclRecv_t recv;
  ncclGroup_t groupStart, groupEnd;
  ncclGetErrorString_t getErrorString;
} nccl;

/* ---- Errors: which call, which rank; exit without running exit handlers (other ranks may be stuck). ---- */

static FILE* outFile;
static __thread int tRank = -1; /* -1: the main thread */

static void die(int code) {
  fflush(stdout);
  if (outFile) fflush(outFile);
  _exit(code);
}
static void callFailed(const char* lib, const char* call, const char* err, int line) {
  fflush(stdout);
  if (tRank >= 0)
    fprintf(stderr, "nccl_compare: rank %d (device %d): %s call failed at line %d: %s: %s\n", tRank, tRank, lib, line,
            call, err);
  else fprintf(stderr, "nccl_compare: main thread: %s call failed at line %d: %s: %s\n", lib, line, call, err);
  die(1);
}
#define CK(call)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) callFailed("CUDA", #call, cudaGetErrorString(e_), __LINE__); \
  } while (0)
#define CC(call)                                                                           \
  do {                                                                                     \
    commResult_t r_ = (call);                                                              \
    if (r_ != commSuccess) callFailed("libcomm", #call, commGetErrorString(r_), __LINE__); \
  } while (0)
#define CN(call)                                                                         \
  do {                                                                                   \
    ncclResult_t r_ = (call);                                                            \
    if (r_ != ncclSuccess) callFailed("NCCL", #call, nccl.getErrorString(r_), __LINE__); \
  } while (0)

/* ---- Options ---- */

enum { C_ALLREDUCE, C_ALLGATHER, C_REDUCESCATTER, C_BROADCAST, C_ALLTOALL, C_NUM };
static const char* collName[C_NUM] = {"allreduce", "allgather", "reducescatter", "broadcast", "alltoall"};
enum { L_NCCL, L_COMM, L_NUM };
static const char* libName[L_NUM] = {"NCCL", "libcomm"};

#define MAXG 64
#define MAXREPS 64
#define MAXSIZES 128

static int G;
static size_t minBytes = 8, maxBytes = 4ull << 30, factor = 2;
static int colls[C_NUM], nColls;
static int useLib[L_NUM] = {1, 1};
static int reps = 3, warmup = 5, timeoutSec = 540;
static double targetMs = 30;

static size_t counts[C_NUM][MAXSIZES]; /* per collective: the counts its sizes give */
static int nCounts[C_NUM];
static size_t allocBytes; /* send and receive buffer of each rank */

static void usage(FILE* f) {
  fprintf(f, "usage: nccl_compare [-g gpus] [-b minBytes] [-e maxBytes] [-f factor] [-c colls] [-L both|nccl|comm]\n"
             "                    [-r reps] [-w warmup] [-T targetMs] [-d float] [-N libnccl] [-o file] [-t sec]\n"
             "  -g G       GPUs = ranks (threads, rank r on device r); default: all visible\n"
             "  -b, -e     smallest and largest size in bytes, K/M/G suffixes (1024-based); default 8 and 4G\n"
             "  -f factor  size multiplier, integer >= 2; default 2\n"
             "  -c list    comma-separated, of allreduce,allgather,reducescatter,broadcast,alltoall (default: all)\n"
             "  -L which   both (default), nccl or comm\n"
             "  -r reps    repetitions of each measurement, NCCL and libcomm interleaved; median printed (default 3)\n"
             "  -w n       warmup calls per size and library (default 5; at least 2 are made)\n"
             "  -T ms      target time of one measurement: iterations = clamp(ms / warmup per-call time, 5, 2000)\n"
             "             (default 30)\n"
             "  -d float   datatype: float32 only (op: sum)\n"
             "  -N path    NCCL library to dlopen (default: $NCCL_LIB, else libnccl.so.2)\n"
             "  -o file    also write lines \"coll bytes ncclUs commUs\" (nan: not run) to file\n"
             "  -t sec     watchdog: exit status 2 after sec seconds (default 540)\n"
             "Sizes are nccl-tests': the largest buffer's bytes. Out-of-place, float32 sum. Exit status: 0 ok,\n"
             "1 failed call or check, 2 watchdog, 77 no CUDA device.\n");
}

static int parseSize(const char* s, size_t* v) {
  char* end;
  unsigned long long x = strtoull(s, &end, 0);
  if (end == s || *s == '-') return -1;
  switch (toupper((unsigned char)*end)) {
    case 'K': x <<= 10, end++; break;
    case 'M': x <<= 20, end++; break;
    case 'G': x <<= 30, end++; break;
    default: break;
  }
  if (toupper((unsigned char)*end) == 'B') end++;
  if (*end) return -1;
  *v = (size_t)x;
  return 0;
}
static int parseInt(const char* s, int lo, int hi, int* v) {
  char* end;
  long x = strtol(s, &end, 10);
  if (end == s || *end || x < lo || x > hi) return -1;
  *v = (int)x;
  return 0;
}
static int parseColls(const char* s) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  nColls = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int c = 0;
    while (c < C_NUM && strcasecmp(t, collName[c])) c++;
    if (c == C_NUM) {
      fprintf(stderr, "nccl_compare: unknown collective '%s'\n", t);
      return -1;
    }
    int dup = 0;
    for (int i = 0; i < nColls; i++) dup |= colls[i] == c;
    if (!dup) colls[nColls++] = c;
  }
  return nColls ? 0 : -1;
}

/* Elements in the send and receive buffers for a count, nccl-tests' meaning of count per collective. */
static size_t sendElems(int coll, size_t c) {
  return coll == C_REDUCESCATTER || coll == C_ALLTOALL ? (size_t)G * c : c;
}
static size_t recvElems(int coll, size_t c) { return coll == C_ALLGATHER || coll == C_ALLTOALL ? (size_t)G * c : c; }
static size_t sizeBytes(int coll, size_t c) {
  size_t s = sendElems(coll, c), r = recvElems(coll, c);
  return (s > r ? s : r) * sizeof(float);
}
static double busFactor(int coll) {
  if (coll == C_ALLREDUCE) return 2.0 * (G - 1) / G;
  if (coll == C_BROADCAST) return 1.0;
  return (double)(G - 1) / G;
}

/* ---- Ranks ---- */

typedef struct {
  int rank;
  cudaStream_t stream;
  cudaEvent_t ev0, ev1;
  float *send, *recv;
  ncclComm_t ncomm;
  comm_t ccomm;
} rankState;

static ncclUniqueId ncclId;
static commUniqueId commId;
static pthread_barrier_t barrier;
static double rankVal[MAXG];
static int anyFail;

static void barrierWait(void) { pthread_barrier_wait(&barrier); }

/* Every rank gets the max (or the sum) of the ranks' values. */
static double reduceOverRanks(int rank, double v, int sum) {
  rankVal[rank] = v;
  barrierWait();
  double m = rankVal[0];
  for (int r = 1; r < G; r++) m = sum ? m + rankVal[r] : fmax(m, rankVal[r]);
  barrierWait();
  return m;
}

static void issue(rankState* s, int lib, int coll, size_t c) {
  if (lib == L_NCCL) {
    switch (coll) {
      case C_ALLREDUCE: CN(nccl.allReduce(s->send, s->recv, c, ncclFloat32, ncclSum, s->ncomm, s->stream)); break;
      case C_ALLGATHER: CN(nccl.allGather(s->send, s->recv, c, ncclFloat32, s->ncomm, s->stream)); break;
      case C_REDUCESCATTER:
        CN(nccl.reduceScatter(s->send, s->recv, c, ncclFloat32, ncclSum, s->ncomm, s->stream));
        break;
      case C_BROADCAST: CN(nccl.broadcast(s->send, s->recv, c, ncclFloat32, 0, s->ncomm, s->stream)); break;
      case C_ALLTOALL:
        CN(nccl.groupStart());
        for (int p = 0; p < G; p++) {
          CN(nccl.send(s->send + (size_t)p * c, c, ncclFloat32, p, s->ncomm, s->stream));
          CN(nccl.recv(s->recv + (size_t)p * c, c, ncclFloat32, p, s->ncomm, s->stream));
        }
        CN(nccl.groupEnd());
        break;
    }
  } else {
    switch (coll) {
      case C_ALLREDUCE: CC(commAllReduce(s->send, s->recv, c, commFloat32, commSum, s->ccomm, s->stream)); break;
      case C_ALLGATHER: CC(commAllGather(s->send, s->recv, c, commFloat32, s->ccomm, s->stream)); break;
      case C_REDUCESCATTER:
        CC(commReduceScatter(s->send, s->recv, c, commFloat32, commSum, s->ccomm, s->stream));
        break;
      case C_BROADCAST: CC(commBroadcast(s->send, s->recv, c, commFloat32, 0, s->ccomm, s->stream)); break;
      case C_ALLTOALL: CC(commAllToAll(s->send, s->recv, c, commFloat32, s->ccomm, s->stream)); break;
    }
  }
}

/* n calls back to back after a barrier; the slowest rank's time per call, us. */
static double timeCalls(rankState* s, int lib, int coll, size_t c, int n) {
  barrierWait();
  CK(cudaEventRecord(s->ev0, s->stream));
  for (int i = 0; i < n; i++) issue(s, lib, coll, c);
  CK(cudaEventRecord(s->ev1, s->stream));
  CK(cudaEventSynchronize(s->ev1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, s->ev0, s->ev1));
  return reduceOverRanks(s->rank, ms * 1e3 / n, 0);
}

/* Warmup: one call, then the rest timed; the iteration count every rank uses. */
static int warmupIters(rankState* s, int lib, int coll, size_t c) {
  issue(s, lib, coll, c);
  CK(cudaStreamSynchronize(s->stream));
  double us = timeCalls(s, lib, coll, c, warmup > 2 ? warmup - 1 : 1);
  double it = us > 0 ? targetMs * 1e3 / us : 2000;
  return it < 5 ? 5 : it > 2000 ? 2000 : (int)it;
}

/* p[i] = a + b * (i / chunk) */
__global__ void fillKernel(float* p, size_t n, float a, float b, size_t chunk) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = a + b * (float)(i / chunk);
}

/* One call on known data, every element of the result compared (small integers: exact in float). */
static void check(rankState* s, int lib, int coll, size_t c) {
  int r = s->rank;
  size_t sn = sendElems(coll, c), rn = recvElems(coll, c);
  float a = 1, b = 0; /* send element i of rank r: a + b * (i / c) */
  switch (coll) {
    case C_ALLREDUCE: break;                                       /* all ones: G */
    case C_ALLGATHER: a = (float)(r + 1); break;                   /* chunk j: j + 1 */
    case C_REDUCESCATTER: a = (float)(r + 1), b = (float)G; break; /* G(G+1)/2 + r G^2 */
    case C_BROADCAST: a = (float)(r + 1); break;                   /* root 0's: 1 */
    case C_ALLTOALL: a = (float)(r * G), b = 1; break;             /* chunk j from rank j: j G + r */
  }
  fillKernel<<<1024, 256, 0, s->stream>>>(s->send, sn, a, b, c);
  CK(cudaGetLastError());
  CK(cudaMemsetAsync(s->recv, 0xff, rn * sizeof(float), s->stream)); /* NaN: untouched elements fail */
  CK(cudaStreamSynchronize(s->stream));
  barrierWait();
  issue(s, lib, coll, c);
  CK(cudaStreamSynchronize(s->stream));
  float* h = (float*)malloc(rn * sizeof(float));
  if (!h) {
    fprintf(stderr, "nccl_compare: rank %d: out of host memory\n", r);
    die(1);
  }
  CK(cudaMemcpy(h, s->recv, rn * sizeof(float), cudaMemcpyDeviceToHost));
  size_t bad = 0, first = 0;
  float firstGot = 0, firstWant = 0;
  for (size_t i = 0; i < rn; i++) {
    float want = 0;
    switch (coll) {
      case C_ALLREDUCE: want = (float)G; break;
      case C_ALLGATHER: want = (float)(i / c + 1); break;
      case C_REDUCESCATTER: want = (float)(G * (G + 1) / 2 + r * G * G); break;
      case C_BROADCAST: want = 1; break;
      case C_ALLTOALL: want = (float)((i / c) * G + r); break;
    }
    if (!(h[i] == want)) {
      if (!bad++) first = i, firstGot = h[i], firstWant = want;
    }
  }
  free(h);
  if (bad)
    printf("# FAIL %s %s %zu B rank %d: %zu of %zu elements wrong, first at %zu: got %g, expected %g\n", libName[lib],
           collName[coll], sizeBytes(coll, c), r, bad, rn, first, (double)firstGot, (double)firstWant);
  double nBad = reduceOverRanks(r, (double)bad, 1);
  if (r == 0) {
    if (nBad > 0) anyFail = 1;
    printf("# check %s %s %zu B: %s\n", libName[lib], collName[coll], sizeBytes(coll, c), nBad > 0 ? "FAIL" : "ok");
    fflush(stdout);
  }
}

static double median(double* v, int n) {
  for (int i = 1; i < n; i++) /* insertion sort: n <= MAXREPS */
    for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
      double t = v[j];
      v[j] = v[j - 1], v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void printRow(int coll, size_t c, const double* us) {
  size_t bytes = sizeBytes(coll, c);
  char cell[L_NUM][2][32];
  for (int l = 0; l < L_NUM; l++) {
    if (useLib[l]) {
      snprintf(cell[l][0], sizeof cell[l][0], "%.2f", us[l]);
      snprintf(cell[l][1], sizeof cell[l][1], "%.2f", (double)bytes / (us[l] * 1e3) * busFactor(coll));
    } else {
      snprintf(cell[l][0], sizeof cell[l][0], "-");
      snprintf(cell[l][1], sizeof cell[l][1], "-");
    }
  }
  char ratio[32] = "-";
  if (useLib[L_NCCL] && useLib[L_COMM]) snprintf(ratio, sizeof ratio, "%.3f", us[L_COMM] / us[L_NCCL]);
  printf("| %12zu | %10s | %15s | %10s | %18s | %23s |\n", bytes, cell[L_NCCL][0], cell[L_NCCL][1], cell[L_COMM][0],
         cell[L_COMM][1], ratio);
  fflush(stdout);
  if (outFile) {
    fprintf(outFile, "%s %zu %.3f %.3f\n", collName[coll], bytes, useLib[L_NCCL] ? us[L_NCCL] : NAN,
            useLib[L_COMM] ? us[L_COMM] : NAN);
    fflush(outFile);
  }
}

static void* rankMain(void* p) {
  rankState* s = (rankState*)p;
  int r = s->rank;
  tRank = r;
  CK(cudaSetDevice(r));
  CK(cudaFree(0));
  CK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  CK(cudaEventCreate(&s->ev0));
  CK(cudaEventCreate(&s->ev1));
  CK(cudaMalloc((void**)&s->send, allocBytes));
  CK(cudaMalloc((void**)&s->recv, allocBytes));
  CK(cudaMemset(s->send, 0, allocBytes));
  CK(cudaMemset(s->recv, 0, allocBytes));
  if (useLib[L_NCCL]) CN(nccl.commInitRank(&s->ncomm, G, ncclId, r));
  barrierWait();
  if (useLib[L_COMM]) CC(commInitRank(&s->ccomm, G, commId, r));
  barrierWait();

  for (int ci = 0; ci < nColls; ci++) {
    int coll = colls[ci];
    if (!nCounts[coll]) continue;
    if (r == 0) {
      printf("\n## %s, %d ranks, float32 sum, out-of-place\n\n", collName[coll], G);
      fflush(stdout);
    }
    for (int l = 0; l < L_NUM; l++)
      if (useLib[l]) check(s, l, coll, counts[coll][nCounts[coll] / 2]);
    if (r == 0) {
      printf("\n| %12s | %10s | %15s | %10s | %18s | %23s |\n", "bytes", "NCCL us", "NCCL busbw GB/s", "libcomm us",
             "libcomm busbw GB/s", "libcomm/NCCL time ratio");
      printf(
          "|-------------:|-----------:|----------------:|-----------:|-------------------:|------------------------:|\n");
      fflush(stdout);
    }
    for (int si = 0; si < nCounts[coll]; si++) {
      size_t c = counts[coll][si];
      int iters[L_NUM] = {0, 0};
      double t[L_NUM][MAXREPS], med[L_NUM] = {0, 0};
      for (int l = 0; l < L_NUM; l++)
        if (useLib[l]) iters[l] = warmupIters(s, l, coll, c);
      for (int rep = 0; rep < reps; rep++)
        for (int k = 0; k < L_NUM; k++) {
          int l = rep % 2 ? L_NUM - 1 - k : k;
          if (useLib[l]) t[l][rep] = timeCalls(s, l, coll, c, iters[l]);
        }
      if (r == 0) {
        for (int l = 0; l < L_NUM; l++)
          if (useLib[l]) med[l] = median(t[l], reps);
        printRow(coll, c, med);
      }
    }
  }

  barrierWait();
  if (useLib[L_NCCL]) CN(nccl.commDestroy(s->ncomm));
  if (useLib[L_COMM]) {
    CC(commFinalize(s->ccomm));
    CC(commDestroy(s->ccomm));
  }
  CK(cudaFree(s->send));
  CK(cudaFree(s->recv));
  CK(cudaEventDestroy(s->ev0));
  CK(cudaEventDestroy(s->ev1));
  CK(cudaStreamDestroy(s->stream));
  return NULL;
}

/* ---- NCCL loading, watchdog, main ---- */

static char ncclDesc[512] = "not loaded";

static int loadNccl(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "nccl_compare: cannot dlopen NCCL '%s': %s\n", path, dlerror());
    return -1;
  }
  int missing = 0;
#define SYM(field, name)                                                                        \
  do {                                                                                          \
    void* p_ = dlsym(h, name);                                                                  \
    if (!p_) fprintf(stderr, "nccl_compare: %s: symbol %s not found\n", path, name), missing++; \
    memcpy(&nccl.field, &p_, sizeof p_);                                                        \
  } while (0)
  SYM(getVersion, "ncclGetVersion");
  SYM(getUniqueId, "ncclGetUniqueId");
  SYM(commInitRank, "ncclCommInitRank");
  SYM(commDestroy, "ncclCommDestroy");
  SYM(allReduce, "ncclAllReduce");
  SYM(allGather, "ncclAllGather");
  SYM(reduceScatter, "ncclReduceScatter");
  SYM(broadcast, "ncclBroadcast");
  SYM(send, "ncclSend");
  SYM(recv, "ncclRecv");
  SYM(groupStart, "ncclGroupStart");
  SYM(groupEnd, "ncclGroupEnd");
  SYM(getErrorString, "ncclGetErrorString");
#undef SYM
  if (missing) {
    dlclose(h);
    return -1;
  }
  int v = 0;
  CN(nccl.getVersion(&v));
  /* NCCL_VERSION: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after. */
  int major = v >= 10000 ? v / 10000 : v / 1000, minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10;
  Dl_info info;
  const char* file = path;
  void* fp;
  memcpy(&fp, &nccl.getVersion, sizeof fp);
  if (dladdr(fp, &info) && info.dli_fname) file = info.dli_fname;
  snprintf(ncclDesc, sizeof ncclDesc, "%d.%d.%d (%s)", major, minor, v % 100, file);
  return 0;
}

static void* watchdog(void* p) {
  (void)p;
  sleep((unsigned)timeoutSec);
  fflush(stdout);
  fprintf(stderr, "nccl_compare: watchdog: still running after %d s (-t): exiting\n", timeoutSec);
  die(2);
  return NULL;
}

int main(int argc, char** argv) {
  const char* ncclPath = getenv("NCCL_LIB");
  const char* outPath = NULL;
  if (!ncclPath || !*ncclPath) ncclPath = "libnccl.so.2";
  int opt;
  while ((opt = getopt(argc, argv, "g:b:e:f:c:L:r:w:T:d:N:o:t:h")) != -1) {
    int bad = 0;
    switch (opt) {
      case 'g': bad = parseInt(optarg, 1, MAXG, &G); break;
      case 'b': bad = parseSize(optarg, &minBytes); break;
      case 'e': bad = parseSize(optarg, &maxBytes); break;
      case 'f': bad = parseSize(optarg, &factor) || factor < 2; break;
      case 'c': bad = parseColls(optarg); break;
      case 'L':
        if (!strcmp(optarg, "both")) useLib[L_NCCL] = useLib[L_COMM] = 1;
        else if (!strcmp(optarg, "nccl")) useLib[L_NCCL] = 1, useLib[L_COMM] = 0;
        else if (!strcmp(optarg, "comm") || !strcmp(optarg, "libcomm")) useLib[L_NCCL] = 0, useLib[L_COMM] = 1;
        else bad = 1;
        break;
      case 'r': bad = parseInt(optarg, 1, MAXREPS, &reps); break;
      case 'w': bad = parseInt(optarg, 0, 1000000, &warmup); break;
      case 'T': {
        char* end;
        targetMs = strtod(optarg, &end);
        bad = end == optarg || *end || !(targetMs > 0);
        break;
      }
      case 'd': bad = strcmp(optarg, "float") && strcmp(optarg, "float32"); break;
      case 'N': ncclPath = optarg; break;
      case 'o': outPath = optarg; break;
      case 't': bad = parseInt(optarg, 1, 1000000, &timeoutSec); break;
      case 'h': usage(stdout); return 0;
      default: bad = 1; break;
    }
    if (bad) {
      if (opt != '?') fprintf(stderr, "nccl_compare: bad value for -%c: %s\n", opt, optarg);
      usage(stderr);
      return 2;
    }
  }
  if (optind < argc || minBytes < 1 || minBytes > maxBytes) {
    fprintf(stderr, "nccl_compare: bad arguments (-b must be >= 1 and <= -e)\n");
    usage(stderr);
    return 2;
  }
  if (!nColls) parseColls("allreduce,allgather,reducescatter,broadcast,alltoall");
  pthread_t wd;
  if (pthread_create(&wd, NULL, watchdog, NULL) || pthread_detach(wd)) {
    fprintf(stderr, "nccl_compare: cannot start the watchdog thread\n");
    return 1;
  }
  setenv("NCCL_NVLS_ENABLE", "0", 0); /* bench/nccl_compare.sh sets it; NVLink multicast stays off */

  if (useLib[L_NCCL] && loadNccl(ncclPath)) {
    if (!useLib[L_COMM]) {
      fprintf(stderr, "nccl_compare: NCCL could not be loaded and -L nccl was asked\n");
      return 1;
    }
    fprintf(stderr, "nccl_compare: NCCL could not be loaded (set -N or NCCL_LIB): running libcomm alone\n");
    useLib[L_NCCL] = 0;
    snprintf(ncclDesc, sizeof ncclDesc, "not loaded (%s)", ncclPath);
  } else if (!useLib[L_NCCL]) {
    snprintf(ncclDesc, sizeof ncclDesc, "not run (-L comm)");
  }
  int cv = 0;
  CC(commGetVersion(&cv));
  char commDesc[64];
  snprintf(commDesc, sizeof commDesc, "%d.%d.%d", cv / 10000, cv / 100 % 100, cv % 100);

  int nDev = 0;
  cudaError_t ce = cudaGetDeviceCount(&nDev);
  if (ce != cudaSuccess || nDev == 0) {
    printf("nccl_compare: no CUDA device (%s); NCCL %s, libcomm %s\n",
           ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices", ncclDesc, commDesc);
    return 77;
  }
  if (!G) G = nDev < MAXG ? nDev : MAXG;
  if (G > nDev) {
    fprintf(stderr, "nccl_compare: -g %d but only %d CUDA devices are visible\n", G, nDev);
    return 2;
  }

  /* The sizes of each collective, and the buffers' size. */
  for (int ci = 0; ci < nColls; ci++) {
    int coll = colls[ci];
    size_t unit = sizeBytes(coll, 1);
    for (size_t b = minBytes;;) {
      size_t c = b / unit;
      if (c && (!nCounts[coll] || c != counts[coll][nCounts[coll] - 1]) && nCounts[coll] < MAXSIZES) {
        counts[coll][nCounts[coll]++] = c;
        if (sizeBytes(coll, c) > allocBytes) allocBytes = sizeBytes(coll, c);
      }
      if (b > maxBytes / factor) break;
      b *= factor;
    }
    if (!nCounts[coll])
      printf("# %s: no size in [%zu, %zu] B holds one float per rank: skipped\n", collName[coll], minBytes, maxBytes);
  }
  if (!allocBytes) return 2;

  if (outPath && !(outFile = fopen(outPath, "w"))) {
    fprintf(stderr, "nccl_compare: cannot open %s\n", outPath);
    return 1;
  }
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const char* nvls = getenv("NCCL_NVLS_ENABLE");
  printf("# nccl_compare: %d GPUs (%s), NCCL %s, libcomm %s; float32 sum, out-of-place; median of %d reps, "
         "warmup %d, target %g ms/measurement; NCCL_NVLS_ENABLE=%s\n",
         G, prop.name, ncclDesc, commDesc, reps, warmup, targetMs, nvls ? nvls : "");
  fflush(stdout);

  if (useLib[L_NCCL]) CN(nccl.getUniqueId(&ncclId));
  if (useLib[L_COMM]) CC(commGetUniqueId(&commId));
  pthread_barrier_init(&barrier, NULL, (unsigned)G);
  rankState st[MAXG];
  pthread_t th[MAXG];
  memset(st, 0, sizeof st);
  for (int r = 0; r < G; r++) {
    st[r].rank = r;
    if (pthread_create(&th[r], NULL, rankMain, &st[r])) {
      fprintf(stderr, "nccl_compare: cannot start rank thread %d\n", r);
      die(1);
    }
  }
  for (int r = 0; r < G; r++) pthread_join(th[r], NULL);
  pthread_barrier_destroy(&barrier);
  if (outFile) fclose(outFile);
  outFile = NULL;
  printf("\n# nccl_compare: done%s\n", anyFail ? ": FAIL (a correctness check failed, see above)" : "");
  fflush(stdout);
  return anyFail ? 1 : 0;
}
