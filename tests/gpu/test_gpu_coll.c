/* test_gpu_coll: the collectives on CUDA device buffers, each checked byte for byte against the same call on host
 * buffers (the host executor is the reference). Ranks are threads of one process (-p N: N forked processes), on
 * device 0 (-g G: rank r on device r % G, so -g 8 -n 8 is one rank per GPU on 8 GPUs), each passing its own
 * non-blocking stream to every call. Per rank count (-n, default 1,2,4,8),
 * on one communicator, every rank making the same calls in the same order:
 *  - allreduce (12 datatypes x sum/prod/max/min/avg), broadcast (roots n-1, 0), reduce (roots 0, n-1),
 *    allgather, reducescatter, alltoall, grouped send/recv (a ring; all to all, self included); out-of-place and
 *    in-place (NCCL's layouts; not alltoall, send/recv); counts 1, 7, 1001, 65537, and 1<<20 + 3 for float32.
 *    The host result of int32/float32 sums and data movement is also checked against values computed here.
 *    Inputs are small integers ({0,1}; prod: ones, rank 0 gives 2 where index % 97 == 0; data movement: 0..7),
 *    so results are exact in any reduction order (float avg is skipped unless n is a power of two);
 *  - pre-multiplied sums (float32): host-immediate 2.0; device-resident 0.5 (reference: host-immediate 0.5);
 *  - one case per collective on cudaMallocAsync buffers;
 *  - a host and a device buffer in one call: commInvalidArgument on every rank, nothing hangs;
 *  - the same allreduce three times with new inputs (the repeats reuse the first call's device plan);
 *  - a CUDA graph of one allreduce, replayed 5 times with new inputs;
 *  - n >= 2, fresh communicators, last: rank 0 alone starts an allreduce; with timeoutMs 1000 commGetAsyncError
 *    reports an error within 15 s; with the default timeout, commAbort from a watchdog thread frees the busy
 *    stream within 10 s.
 * -q: quick (int32, float32, bfloat16, float8e4m3; counts 1, 1001, 65537), e.g. under compute-sanitizer.
 * -p N: N forked processes (N >= 2), one N-rank communicator, the cases above but the graph, timeout and abort.
 * -H (with -p): each process a host of its own (COMM_HOSTID), so device buffers go between "hosts" through the
 *    net transport's pinned host staging and its proxy thread; the graph case runs too (replays the proxy
 *    learns of only from the kernel); last, the highest rank exits without a word and the others' next
 *    allreduce must end with commRemoteError (the failed network connection stops the waiting kernel).
 * Ranks agree through a barrier after each device call: a call that failed on some ranks only (their peers would
 * wait forever) aborts the run instead of hanging. Public API only. Exit 0 when every case passed, 77 without
 * a GPU or with fewer than -g asks for, 1 on a failure, a CUDA error at the start included (test_gpu_coll.h:
 * gpuTestDevices). SPDX-License-Identifier: Apache-2.0 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "test_gpu_coll.h"

#define MAXR 64

int ownHostsMode; /* -H */
#define BIG (((size_t)1 << 20) + 3)
#define MAX_PRINTED 20

enum { AR, BC, RD, AG, RS, A2A, SR_RING, SR_ALL, NCOLL };
static const char* collName[NCOLL] = {"allreduce",     "broadcast", "reduce",        "allgather",
                                      "reducescatter", "alltoall",  "sendrecv-ring", "sendrecv-all"};
static const char* typeName[commNumTypes] = {"int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
                                             "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
static const size_t typeSize[commNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
static const char* opName[commNumOps] = {"sum", "prod", "max", "min", "avg"};
static uint64_t enc[commNumTypes][9]; /* little-endian bits of the values 0..8 in each type */

typedef struct {
  int coll;
  commDataType_t type;
  commRedOp_t op, dop; /* op of the host reference and of the device call (differ for a device scalar) */
  const char* opName;
  size_t count;
  int root, inplace, async;
  double scale; /* reductions: the result is scale * sum, checked for int32/float32; 0: not checked */
  uint64_t seed;
} caseT;

/* Shared by the ranks (mmap'd, so that forked ranks share it too). */
typedef struct {
  pthread_barrier_t bar;
  int flags[2][MAXR];
  int printed, passed, failed, fatal;
  int ndev; /* -p: the CUDA devices the forked ranks found (for the parent's SKIP line) */
} sharedT;
static sharedT* sh;
int verbose; /* TEST_GPU_VERBOSE=1: rank 0 prints each case's name before it runs (to find a hang) */


double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
void sleepMs(int ms) { nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL); }

/* Bits of v (a small integer) in a float format with expBits/manBits; exact for 1..8 in all four formats. */
static uint64_t miniFloat(unsigned v, int expBits, int manBits) {
  if (v == 0) return 0;
  float f = (float)v;
  uint32_t b;
  memcpy(&b, &f, 4);
  uint32_t e = ((b >> 23) & 0xff) - 127 + ((1u << (expBits - 1)) - 1);
  return ((uint64_t)e << manBits) | ((b & 0x7fffff) >> (23 - manBits));
}
static void initEncodings(void) {
  for (unsigned v = 0; v <= 8; v++) {
    float f = (float)v;
    double d = (double)v;
    uint32_t fb;
    memcpy(&fb, &f, 4);
    for (int t = 0; t < commNumTypes; t++) enc[t][v] = v; /* the integer types */
    enc[commFloat32][v] = fb;
    memcpy(&enc[commFloat64][v], &d, 8);
    enc[commFloat16][v] = miniFloat(v, 5, 10);   /* 1.0 = 0x3C00, 2.0 = 0x4000 */
    enc[commBfloat16][v] = fb >> 16;             /* 1.0 = 0x3F80, 2.0 = 0x4000 */
    enc[commFloat8e4m3][v] = miniFloat(v, 4, 3); /* 1.0 = 0x38, 2.0 = 0x40 */
    enc[commFloat8e5m2][v] = miniFloat(v, 5, 2); /* 1.0 = 0x3C, 2.0 = 0x40 */
  }
}
static int isFloatType(commDataType_t t) { return t >= commFloat16; }

static uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int isReduction(int coll) { return coll == AR || coll == RD || coll == RS; }
/* Input element k of rank r's send buffer. */
static unsigned genVal(const caseT* c, int r, size_t k) {
  uint64_t h = mix((c->seed << 40) ^ ((uint64_t)r << 32) ^ (uint64_t)k);
  if (!isReduction(c->coll)) return (unsigned)(h & 7);
  if (c->op == commProd) return r == 0 && k % 97 == 0 ? 2 : 1;
  return (unsigned)(h & 1);
}

/* Elements of the send buffer (the one buffer, in place) and of the receive buffer (0 in place). */
static size_t recvLen(const caseT* c, int n) {
  return c->coll == AG || c->coll == A2A || c->coll == SR_ALL ? (size_t)n * c->count : c->count;
}
static size_t sendElems(const caseT* c, int n) {
  switch (c->coll) {
    case AG: return c->inplace ? (size_t)n * c->count : c->count;
    case RS:
    case A2A:
    case SR_ALL: return (size_t)n * c->count;
    default: return c->count;
  }
}
static size_t recvElems(const caseT* c, int n) { return c->inplace ? 0 : recvLen(c, n); }
/* The result: element offset in the receive buffer (the send buffer in place) and length; reduce: root only. */
static size_t resultAt(const caseT* c, int n, int rank, size_t* len) {
  *len = c->coll == RD && rank != c->root ? 0 : recvLen(c, n);
  return c->inplace && c->coll == RS ? (size_t)rank * c->count : 0;
}
static double sumAll(const caseT* c, int n, size_t k) {
  double s = 0;
  for (int r = 0; r < n; r++) s += genVal(c, r, k);
  return s;
}
/* What element i of the result must be (int32/float32 checks of the host reference). */
static double expectAt(const caseT* c, int rank, int n, size_t i) {
  size_t cnt = c->count;
  switch (c->coll) {
    case AR:
    case RD: return c->scale * sumAll(c, n, i);
    case RS: return c->scale * sumAll(c, n, (size_t)rank * cnt + i);
    case BC: return genVal(c, c->root, i);
    case AG: return genVal(c, (int)(i / cnt), i % cnt);
    case SR_RING: return genVal(c, (rank - 1 + n) % n, i);
    default: return genVal(c, (int)(i / cnt), (size_t)rank * cnt + i % cnt); /* A2A, SR_ALL */
  }
}

static void describe(const caseT* c, char* buf, size_t sz) {
  char root[24] = "";
  if (c->coll == BC || c->coll == RD) snprintf(root, sizeof(root), " root %d", c->root);
  snprintf(buf, sz, "%s %s %s count %zu %s%s%s", collName[c->coll], typeName[c->type],
           isReduction(c->coll) ? c->opName : "-", c->count, c->inplace ? "in-place" : "out-of-place", root,
           c->async ? " cudaMallocAsync" : "");
}

void report(const rankCtx* x, const char* what, const char* fmt, ...) {
  int k = __atomic_fetch_add(&sh->printed, 1, __ATOMIC_RELAXED);
  if (k > MAX_PRINTED) return;
  if (k == MAX_PRINTED) {
    printf("test_gpu_coll: (more failures not printed)\n");
  } else {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    printf("test_gpu_coll: FAIL: %d ranks, rank %d: %s: %s\n", x->n, x->rank, what, msg);
  }
  fflush(stdout);
}
void hardExit(const char* what, const char* why) {
  printf("test_gpu_coll: FAIL: %s: %s; giving up\n", what, why);
  fflush(NULL);
  _exit(1);
}

/* Barrier; returns the OR of every rank's flags. Two slots: a slot is rewritten only after the barrier that
 * follows its readers. */
int agree(rankCtx* x, int f) {
  int g = (int)(x->gen++ & 1), o = 0;
  __atomic_store_n(&sh->flags[g][x->rank], f, __ATOMIC_RELEASE);
  pthread_barrier_wait(&sh->bar);
  for (int r = 0; r < x->n; r++) o |= __atomic_load_n(&sh->flags[g][r], __ATOMIC_ACQUIRE);
  return o;
}
void countCase(const rankCtx* x, int failed) {
  if (x->rank == 0) *(failed ? &sh->failed : &sh->passed) += 1;
}
int waitIdle(cudaStream_t s, double secs) {
  double t0 = now();
  while (cudaStreamQuery(s) == cudaErrorNotReady) {
    if (now() - t0 > secs) return 0;
    sleepMs(10);
  }
  return 1;
}
/* Every rank: stop using the communicator (its pending work would never complete) and stop the run. */
static void fatal(rankCtx* x, const char* what, const char* why) {
  if (x->rank == 0) report(x, what, "%s; aborting the communicator and stopping", why);
  if (x->comm != NULL) commAbort(x->comm);
  x->comm = NULL;
  if (!waitIdle(x->stream, 10.0)) hardExit(what, "the stream was still busy 10 s after commAbort");
  sh->fatal = 1;
}
/* After a call that enqueues device work on every rank: -1 fatal (it failed on some ranks only), 1 it failed
 * on every rank (nothing enqueued anywhere), 0 it succeeded everywhere. */
int agreeCall(rankCtx* x, int ok, const char* what) {
  int f = agree(x, ok ? 1 : 2);
  if (f == 3) {
    countCase(x, 1);
    fatal(x, what, "the call failed on some ranks only");
    return -1;
  }
  return f == 2;
}
/* After a case's checks: count it; a CUDA error on any rank is fatal. */
int agreeResult(rankCtx* x, int cudaBad, int bad, const char* what) {
  int f = agree(x, 1 | (bad ? 2 : 0) | (cudaBad ? 4 : 0));
  countCase(x, (f & 6) != 0);
  if (f & 4) {
    fatal(x, what, "CUDA error");
    return -1;
  }
  return 0;
}

static void fillInputs(rankCtx* x, const caseT* c) {
  size_t es = typeSize[c->type], ns = sendElems(c, x->n), nin = ns, off = 0;
  memset(x->hs, 0xEE, ns * es);
  memset(x->hr, 0xEE, recvElems(c, x->n) * es);
  if (c->coll == AG && c->inplace) {
    off = (size_t)x->rank * c->count;
    nin = c->count;
  }
  for (size_t k = 0; k < nin; k++) memcpy(x->hs + (off + k) * es, &enc[c->type][genVal(c, x->rank, k)], es);
}

/* The call of case c on buffers s (send, or the one buffer in place) and r (receive). */
static commResult_t issue(rankCtx* x, const caseT* c, char* s, char* r, commRedOp_t op) {
  size_t cnt = c->count, cb = cnt * typeSize[c->type];
  commDataType_t t = c->type;
  commStream_t st = (commStream_t)x->stream;
  comm_t cm = x->comm;
  int n = x->n, rk = x->rank;
  if (c->inplace) {
    r = s;
    if (c->coll == AG) s = r + (size_t)rk * cb;
    if (c->coll == RS) r = s + (size_t)rk * cb;
  }
  commResult_t res = commSuccess, e;
  switch (c->coll) {
    case AR: return commAllReduce(s, r, cnt, t, op, cm, st);
    case BC: return commBroadcast(s, r, cnt, t, c->root, cm, st);
    case RD: return commReduce(s, r, cnt, t, op, c->root, cm, st);
    case AG: return commAllGather(s, r, cnt, t, cm, st);
    case RS: return commReduceScatter(s, r, cnt, t, op, cm, st);
    case A2A: return commAllToAll(s, r, cnt, t, cm, st);
    default:
      if ((res = commGroupStart()) != commSuccess) return res;
      for (int p = 0; p < n; p++) {
        if (c->coll == SR_RING && p > 0) break;
        int to = c->coll == SR_RING ? (rk + 1) % n : p, from = c->coll == SR_RING ? (rk - 1 + n) % n : p;
        size_t off = c->coll == SR_RING ? 0 : (size_t)p * cb;
        if ((e = commSend(s + off, cnt, t, to, cm, st)) != commSuccess && res == commSuccess) res = e;
        if ((e = commRecv(r + off, cnt, t, from, cm, st)) != commSuccess && res == commSuccess) res = e;
      }
      e = commGroupEnd();
      return res != commSuccess ? res : e;
  }
}

static int compareBytes(rankCtx* x, const char* what, const char* got, const char* want, size_t bytes, size_t es) {
  if (memcmp(got, want, bytes) == 0) return 0;
  size_t i = 0;
  while (got[i] == want[i]) i++;
  report(x, what, "byte %zu (element %zu) differs: device 0x%02x, host reference 0x%02x", i, i / es,
         (unsigned char)got[i], (unsigned char)want[i]);
  return 1;
}
static int checkExpected(rankCtx* x, const caseT* c, const char* what, const char* h, size_t len) {
  if (c->type != commInt32 && c->type != commFloat32) return 0;
  if (isReduction(c->coll) && c->scale == 0) return 0;
  for (size_t i = 0; i < len; i++) {
    int32_t iv;
    float fv;
    memcpy(&iv, h + 4 * i, 4);
    memcpy(&fv, h + 4 * i, 4);
    double e = expectAt(c, x->rank, x->n, i), g = c->type == commInt32 ? (double)iv : (double)fv;
    if (g != e) {
      report(x, what, "host reference element %zu is %g, expected %g", i, g, e);
      return 1;
    }
  }
  return 0;
}

/* One case: host reference, then device buffers, compare. Returns -1 when the run must stop. */
static int runCase(rankCtx* x, caseT* c) {
  c->seed = ++x->seed; /* the same on every rank: the cases run in the same order */
  char what[160];
  describe(c, what, sizeof(what));
  if (verbose && x->rank == 0) {
    printf("case %s\n", what);
    fflush(stdout);
  }
  size_t es = typeSize[c->type], sb = sendElems(c, x->n) * es, rb = recvElems(c, x->n) * es, len;
  size_t off = resultAt(c, x->n, x->rank, &len) * es;
  cudaStream_t st = x->stream;
  fillInputs(x, c);
  char *ds = x->ds, *dr = x->dr;
  cudaError_t ce = cudaSuccess;
  if (c->async) {
    ds = dr = NULL;
    ce = cudaMallocAsync((void**)&ds, sb, st);
    if (ce == cudaSuccess && rb) ce = cudaMallocAsync((void**)&dr, rb, st);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);
  }
  if (ce == cudaSuccess) ce = cudaMemcpyAsync(ds, x->hs, sb, cudaMemcpyHostToDevice, st);
  if (ce == cudaSuccess && rb) ce = cudaMemcpyAsync(dr, x->hr, rb, cudaMemcpyHostToDevice, st);
  if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);
  int bad = 0, cudaBad = ce != cudaSuccess;
  if (cudaBad) report(x, what, "setting up device buffers: %s", cudaGetErrorName(ce));
  commResult_t hrc = issue(x, c, x->hs, x->hr, c->op); /* host buffers: returns when done */
  if (hrc != commSuccess) report(x, what, "host reference returned %d (%s)", (int)hrc, commGetErrorString(hrc));
  commResult_t drc = cudaBad ? commUnhandledCudaError : issue(x, c, ds, dr, c->dop);
  if (!cudaBad && drc != commSuccess)
    report(x, what, "device call returned %d (%s): %s", (int)drc, commGetErrorString(drc), commGetLastError(x->comm));
  int f = agreeCall(x, drc == commSuccess, what);
  if (f < 0) return -1;
  bad = f != 0 || hrc != commSuccess;
  if (f == 0) {
    char *dbase = c->inplace ? ds : dr, *hbase = c->inplace ? x->hs : x->hr;
    ce = cudaStreamSynchronize(st);
    if (ce == cudaSuccess && len) ce = cudaMemcpyAsync(x->res, dbase + off, len * es, cudaMemcpyDeviceToHost, st);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);
    if (ce != cudaSuccess) {
      cudaBad = 1;
      report(x, what, "after the call: %s", cudaGetErrorName(ce));
    } else if (hrc == commSuccess) {
      bad |= compareBytes(x, what, x->res, hbase + off, len * es, es);
      bad |= checkExpected(x, c, what, hbase + off, len);
    }
  }
  if (c->async && !cudaBad) {
    if (ds) cudaFreeAsync(ds, st);
    if (dr) cudaFreeAsync(dr, st);
    cudaStreamSynchronize(st);
  }
  return agreeResult(x, cudaBad, bad, what);
}

#define RUN(...)                        \
  do {                                  \
    caseT c_ = {__VA_ARGS__};           \
    if (runCase(x, &c_) < 0) return -1; \
  } while (0)

/* Pre-multiplied sums on float32: host-immediate 2.0; device-resident 0.5 (reference: host-immediate 0.5). */
static int runPremul(rankCtx* x) {
  float scal[2] = {2.0f, 0.5f};
  void* where[3] = {&scal[0], &scal[1], x->dScalar};
  commRedOp_t op[3] = {commSum, commSum, commSum};
  commResult_t r[3] = {commUnhandledCudaError, commUnhandledCudaError, commUnhandledCudaError};
  if (cudaMemcpyAsync(x->dScalar, &scal[1], sizeof(float), cudaMemcpyHostToDevice, x->stream) == cudaSuccess &&
      cudaStreamSynchronize(x->stream) == cudaSuccess)
    for (int k = 0; k < 3; k++)
      r[k] = commRedOpCreatePreMulSum(&op[k], where[k], commFloat32, k < 2 ? commScalarHostImmediate : commScalarDevice,
                                      x->comm);
  if (r[0] != commSuccess || r[1] != commSuccess || r[2] != commSuccess)
    report(x, "commRedOpCreatePreMulSum", "host-immediate 2.0: %d, host-immediate 0.5: %d, device 0.5: %d", (int)r[0],
           (int)r[1], (int)r[2]);
  int fHost = agree(x, r[0] == commSuccess && r[1] == commSuccess ? 1 : 2),
      fDev = agree(x, r[2] == commSuccess ? 1 : 2);
  if (fHost != 1 || fDev != 1) agreeResult(x, 0, 1, "commRedOpCreatePreMulSum");
  static const size_t full[] = {7, 65537}, quick[] = {1001};
  int rc = 0;
  for (int i = 0; i < (x->quick ? 1 : 2) && rc == 0; i++)
    for (int ip = 0; ip < 2 && rc == 0; ip++) {
      caseT a = {.coll = AR,
                 .type = commFloat32,
                 .op = op[0],
                 .dop = op[0],
                 .opName = "premulsum(host 2.0)",
                 .count = x->quick ? quick[i] : full[i],
                 .inplace = ip,
                 .scale = 2.0};
      caseT b = {.coll = AR,
                 .type = commFloat32,
                 .op = op[1],
                 .dop = op[2],
                 .opName = "premulsum(device 0.5)",
                 .count = a.count,
                 .inplace = ip,
                 .scale = 0.5};
      if (fHost == 1) rc = runCase(x, &a);
      if (rc == 0 && fHost == 1 && fDev == 1) rc = runCase(x, &b);
    }
  for (int k = 0; k < 3 && x->comm != NULL; k++) {
    commResult_t d = r[k] == commSuccess ? commRedOpDestroy(op[k], x->comm) : commSuccess;
    if (d != commSuccess) report(x, "commRedOpDestroy", "returned %d for operator %d", (int)d, k);
  }
  return rc;
}

static int runAll(rankCtx* x) {
  static const commDataType_t quickTypes[] = {commInt32, commFloat32, commBfloat16, commFloat8e4m3};
  static const size_t fullCounts[] = {1, 7, 1001, 65537, BIG}, quickCounts[] = {1, 1001, 65537};
  commDataType_t types[commNumTypes];
  int nt = x->quick ? 4 : commNumTypes, nc = x->quick ? 3 : 5, n = x->n;
  const size_t* counts = x->quick ? quickCounts : fullCounts;
  for (int t = 0; t < nt; t++) types[t] = x->quick ? quickTypes[t] : (commDataType_t)t;
  int roots[2] = {n - 1, 0}, nroots = n > 1 ? 2 : 1, pow2 = (n & (n - 1)) == 0;
  for (int ti = 0; ti < nt; ti++) {
    commDataType_t t = types[ti];
    for (int ci = 0; ci < nc; ci++) {
      size_t cnt = counts[ci];
      if (cnt == BIG && t != commFloat32) continue; /* the big count: float32 only */
      for (int ip = 0; ip < 2; ip++) {
        for (int op = 0; op < commNumOps; op++) {
          if (op == commAvg && isFloatType(t) && !pow2) continue; /* 1/n inexact: order-dependent */
          RUN(.coll = AR, .type = t, .op = op, .dop = op, .opName = opName[op], .count = cnt, .inplace = ip,
              .scale = op == commSum);
        }
        for (int ri = 0; ri < nroots; ri++) {
          RUN(.coll = BC, .type = t, .count = cnt, .inplace = ip, .root = roots[ri]);
          RUN(.coll = RD, .type = t, .op = commSum, .dop = commSum, .opName = "sum", .count = cnt, .inplace = ip,
              .root = roots[nroots - 1 - ri], .scale = 1);
        }
        RUN(.coll = AG, .type = t, .count = cnt, .inplace = ip);
        RUN(.coll = RS, .type = t, .op = commSum, .dop = commSum, .opName = "sum", .count = cnt, .inplace = ip,
            .scale = 1);
      }
      RUN(.coll = A2A, .type = t, .count = cnt);
      RUN(.coll = SR_RING, .type = t, .count = cnt);
      RUN(.coll = SR_ALL, .type = t, .count = cnt);
    }
  }
  if (runPremul(x) < 0) return -1;
  for (int k = 0; k < NCOLL; k++)
    RUN(.coll = k, .type = commFloat32, .op = commSum, .dop = commSum, .opName = "sum", .count = 1001, .async = 1,
        .scale = 1);
  if (runMixed(x) < 0) return -1;
  if (runRepeat(x) < 0) return -1;
  if (runStreamOrder(x) < 0) return -1;
  if ((!x->procMode || ownHostsMode) && runGraph(x) < 0) return -1; /* -H: graph replays drive the proxy */
  return 0;
}

/* One rank: set up (agreeing, so that no rank waits in an init its peers skip), run, tear down. */
static void rankMain(rankCtx* x) {
  int departed = 0; /* -H: a peer left on purpose (runPeerGone): no more barriers */
  int ok = cudaSetDevice(x->dev) == cudaSuccess && cudaFree(0) == cudaSuccess &&
           cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking) == cudaSuccess &&
           cudaMalloc((void**)&x->ds, x->cap) == cudaSuccess && cudaMalloc((void**)&x->dr, x->cap) == cudaSuccess &&
           cudaMalloc((void**)&x->dScalar, sizeof(float)) == cudaSuccess;
  x->hs = malloc(x->cap);
  x->hr = malloc(x->cap);
  x->res = malloc(x->cap);
  ok = ok && x->hs && x->hr && x->res;
  if (!ok)
    report(x, "setup", "CUDA setup or allocation of %zu bytes failed: %s", x->cap,
           cudaGetErrorName(cudaGetLastError()));
  if (agree(x, ok ? 1 : 2) == 1) {
    commResult_t rc = commInitRank(&x->comm, x->n, x->ids[0], x->rank);
    if (rc != commSuccess) report(x, "commInitRank", "returned %d (%s)", (int)rc, commGetErrorString(rc));
    if (agree(x, rc == commSuccess ? 1 : 2) != 1) {
      if (rc == commSuccess) commAbort(x->comm);
      x->comm = NULL;
      agreeResult(x, 0, 1, "commInitRank");
    } else if (runAll(x) == 0) {
      if (x->procMode && ownHostsMode && x->n >= 2) {
        departed = runPeerGone(x);
      } else {
        rc = commFinalize(x->comm);
        commResult_t rd = commDestroy(x->comm);
        x->comm = NULL;
        if (rc != commSuccess || rd != commSuccess) report(x, "teardown", "commFinalize %d, commDestroy %d", rc, rd);
        if (agreeResult(x, 0, rc != commSuccess || rd != commSuccess, "teardown") == 0 && !x->procMode && x->n >= 2)
          if (runSolo(x, 0) == 0) runSolo(x, 1); /* abort last */
      }
    }
  } else {
    agreeResult(x, 0, 1, "setup");
  }
  if (!departed) agree(x, 1); /* nobody frees while a peer's kernel may still run */
  cudaFree(x->ds);
  cudaFree(x->dr);
  cudaFree(x->dScalar);
  if (x->stream) cudaStreamDestroy(x->stream);
  free(x->hs);
  free(x->hr);
  free(x->res);
}
static void* rankThread(void* p) {
  rankMain(p);
  return NULL;
}

static size_t capBytes(int n, int quick) {
  size_t c = (size_t)n * 65537 * 8, big = (size_t)n * BIG * 4, abortBytes = ((size_t)1 << 20) * 4;
  if (!quick && big > c) c = big;
  return c > abortBytes ? c : abortBytes;
}
static int initShared(int n) {
  pthread_barrierattr_t a;
  pthread_barrierattr_init(&a);
  pthread_barrierattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  int rc = pthread_barrier_init(&sh->bar, &a, (unsigned)n);
  pthread_barrierattr_destroy(&a);
  sh->passed = sh->failed = sh->fatal = 0;
  return rc;
}

/* -p N: N forked processes, one rank each, rank r on device r % nGpus. Fork first, then make the id and send
 * it down pipes: the parent never touches CUDA and has no libcomm thread running when it forks. */
static int processMode(int n, int nGpus, int quick, int ownHosts) {
  int fds[MAXR][2];
  pid_t pid[MAXR], parent = getpid();
  if (initShared(n) != 0) return 2;
  fflush(NULL);
  for (int r = 0; r < n; r++) {
    if (pipe(fds[r]) != 0 || (pid[r] = fork()) < 0) {
      perror("test_gpu_coll: pipe/fork");
      return 2;
    }
    if (pid[r] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(3);
      if (ownHosts) { /* -H: every process a host of its own, so device buffers cross "hosts" over the network */
        char host[32];
        snprintf(host, sizeof(host), "gpu-coll-host-%d", r);
        setenv("COMM_HOSTID", host, 1);
      }
      static rankCtx x = {.procMode = 1};
      x.quick = quick;
      x.n = n;
      x.rank = r;
      x.dev = r % nGpus;
      x.cap = capBytes(n, quick);
      close(fds[r][1]);
      if (read(fds[r][0], &x.ids[0], sizeof(commUniqueId)) != (ssize_t)sizeof(commUniqueId)) _exit(3);
      /* Every rank asks CUDA (the parent does not touch it before the fork). All skip (77) when one finds too few
       * devices, or none: gpuTestDevices' rule; a CUDA error on any rank fails every one, so none waits. */
      int ndev = 0, dv = gpuTestDevices("test_gpu_coll", &ndev);
      if (dv == 0 && ndev < nGpus) dv = 77;
      if (r == 0) sh->ndev = ndev;
      int f = agree(&x, dv == 0 ? 1 : dv == 77 ? 2 : 4);
      fflush(NULL); /* (_exit does not: the FAIL line naming the CUDA error would be lost) */
      if (f & 4) _exit(1);
      if (f & 2) _exit(77);
      rankMain(&x);
      fflush(NULL);
      _exit(0);
    }
    close(fds[r][0]);
  }
  commUniqueId id;
  commResult_t rc = commGetUniqueId(&id);
  for (int r = 0; r < n; r++) {
    if (rc != commSuccess || write(fds[r][1], &id, sizeof(id)) != (ssize_t)sizeof(id)) kill(pid[r], SIGKILL);
    close(fds[r][1]);
  }
  int status[MAXR] = {0}, left = n;
  double firstEnd = 0;
  while (left > 0) { /* when one child ends badly, give the others 30 s before killing them */
    for (int r = 0; r < n; r++) {
      if (pid[r] > 0 && waitpid(pid[r], &status[r], WNOHANG) == pid[r]) {
        pid[r] = 0;
        left--;
        if (!(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0) && firstEnd == 0) firstEnd = now();
      }
    }
    if (left > 0 && firstEnd > 0 && now() - firstEnd > 30.0)
      for (int r = 0; r < n; r++)
        if (pid[r] > 0) kill(pid[r], SIGKILL);
    sleepMs(100);
  }
  int skipped = 0, crashed = 0;
  for (int r = 0; r < n; r++) {
    int code = WIFEXITED(status[r]) ? WEXITSTATUS(status[r]) : 128 + WTERMSIG(status[r]);
    if (code == 77) skipped++;
    else if (code != 0) {
      crashed = 1;
      printf("test_gpu_coll: FAIL: process of rank %d ended with status %d\n", r, code);
    }
  }
  if (skipped == n) {
    if (sh->ndev == 0) printf("test_gpu_coll: SKIP (no CUDA device)\n");
    else printf("test_gpu_coll: SKIP (%d CUDA devices, %d asked for)\n", sh->ndev, nGpus);
    return 77;
  }
  printf("test_gpu_coll: %d ranks (processes) on %d GPU(s): %d cases passed, %d failed\n", n, nGpus, sh->passed,
         sh->failed);
  return crashed || skipped || sh->failed || sh->fatal || sh->passed == 0 ? 1 : 0;
}

int main(int argc, char** argv) {
  const char* list = "1,2,4,8";
  int quick = 0, proc = 0, nGpus = 1, ownHosts = 0, opt;
  while ((opt = getopt(argc, argv, "n:qp:g:H")) != -1) {
    if (opt == 'n') list = optarg;
    else if (opt == 'q') quick = 1;
    else if (opt == 'H') ownHosts = ownHostsMode = 1;
    else if (opt == 'p') proc = atoi(optarg);
    else if (opt == 'g') nGpus = atoi(optarg);
    if (opt == '?' || (opt == 'p' && (proc < 2 || proc > MAXR)) || (opt == 'g' && (nGpus < 1 || nGpus > MAXR))) {
      fprintf(stderr, "usage: %s [-n 1,2,4,8] [-q] [-p processes (2..%d) [-H]] [-g GPUs]\n", argv[0], MAXR);
      return 2;
    }
  }
  initEncodings();
  verbose = getenv("TEST_GPU_VERBOSE") != NULL && atoi(getenv("TEST_GPU_VERBOSE")) != 0;
  sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 2;
  memset(sh, 0, sizeof(*sh));
  if (proc) return processMode(proc, nGpus, quick, ownHosts);
  if (ownHosts) {
    fprintf(stderr, "test_gpu_coll: -H needs -p (each process is a host)\n");
    return 2;
  }
  int ndev = 0, dv = gpuTestDevices("test_gpu_coll", &ndev);
  if (dv != 0) return dv; /* 77: no device (skipped); 1: a CUDA error */
  if (ndev < nGpus) {     /* too few for -g: a named absence */
    printf("test_gpu_coll: SKIP (%d CUDA devices, %d asked for)\n", ndev, nGpus);
    return 77;
  }
  int totalFailed = 0, totalPassed = 0;
  for (const char* p = list; *p && !sh->fatal;) {
    char* end;
    long n = strtol(p, &end, 10);
    if (end == p || n < 1 || n > MAXR) {
      fprintf(stderr, "test_gpu_coll: bad rank count list '%s' (1..%d, comma-separated)\n", list, MAXR);
      return 2;
    }
    p = *end == ',' ? end + 1 : end;
    printf("test_gpu_coll: %ld ranks (threads) on %d GPU(s), %s mode\n", n, nGpus, quick ? "quick" : "full");
    fflush(stdout);
    static rankCtx x[MAXR];
    commUniqueId ids[3];
    memset(ids, 0, sizeof(ids));
    for (int k = 0; k < (n >= 2 ? 3 : 1); k++) /* main, timeout and abort communicators */
      if (commGetUniqueId(&ids[k]) != commSuccess) hardExit("setup", "commGetUniqueId failed");
    if (initShared((int)n) != 0) return 2;
    pthread_t th[MAXR];
    for (int r = 0; r < n; r++) {
      x[r] = (rankCtx){.rank = r, .n = (int)n, .quick = quick, .dev = r % nGpus, .cap = capBytes((int)n, quick)};
      memcpy(x[r].ids, ids, sizeof(ids));
      if (pthread_create(&th[r], NULL, rankThread, &x[r]) != 0) hardExit("setup", "pthread_create failed");
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&sh->bar);
    printf("test_gpu_coll: %ld ranks: %d cases passed, %d failed\n", n, sh->passed, sh->failed);
    fflush(stdout);
    totalPassed += sh->passed;
    totalFailed += sh->failed;
  }
  return totalFailed == 0 && totalPassed > 0 && !sh->fatal ? 0 : 1;
}
