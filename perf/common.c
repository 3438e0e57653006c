/*
 * libcomm perf harness: buffers, timing, result checking and the nccl-tests style table.
 * Parsing the options lives in options.c, launching the ranks in launch.c, data types and the input
 * pattern in pattern.c.
 * Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "common.h"
#include "launch.h"
#include "options.h"
#include "pattern.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------------ */
/* Options (options.c parses them) */

static perfOpts_t opts;
static const perfColl_t* coll;
static const char* progName;

/* ------------------------------------------------------------------------------------------------ */
/* Device memory through the CUDA driver, loaded at run time (perf links libcomm only)               */

typedef int CUresult_t;
typedef unsigned long long CUdeviceptr_t;
typedef void* CUgraph_t;                           /* CUgraph */
typedef void* CUgraphExec_t;                       /* CUgraphExec */
#define PERF_CU_STREAM_NON_BLOCKING 0x1            /* CU_STREAM_NON_BLOCKING */
#define PERF_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1 /* CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: ranks are threads */
static struct {
  CUresult_t (*init)(unsigned);
  CUresult_t (*deviceGetCount)(int*);
  CUresult_t (*deviceGet)(int*, int);
  CUresult_t (*primaryCtxRetain)(void**, int);
  CUresult_t (*ctxSetCurrent)(void*);
  CUresult_t (*memAlloc)(CUdeviceptr_t*, size_t);
  CUresult_t (*memFree)(CUdeviceptr_t);
  CUresult_t (*memcpyHtoDAsync)(CUdeviceptr_t, const void*, size_t, commStream_t);
  CUresult_t (*memcpyDtoHAsync)(void*, CUdeviceptr_t, size_t, commStream_t);
  CUresult_t (*streamCreate)(commStream_t*, unsigned);
  CUresult_t (*streamSynchronize)(commStream_t);
  CUresult_t (*streamDestroy)(commStream_t);
  CUresult_t (*getErrorString)(CUresult_t, const char**);
  /* -G only */
  CUresult_t (*streamBeginCapture)(commStream_t, int);
  CUresult_t (*streamEndCapture)(commStream_t, CUgraph_t*);
  CUresult_t (*graphInstantiateWithFlags)(CUgraphExec_t*, CUgraph_t, unsigned long long);
  CUresult_t (*graphLaunch)(CUgraphExec_t, commStream_t);
  CUresult_t (*graphExecDestroy)(CUgraphExec_t);
  CUresult_t (*graphDestroy)(CUgraph_t);
} cu;

/* 1 when -M auto picked device memory (for the messages). */
static int memAutoPicked;
/* 1 when -G was given with host memory: rank 0 prints a note and the graphs are off. */
static int graphIgnored;
static const char* memFlag(void) { return memAutoPicked ? "-M auto (a GPU was found)" : "-M device"; }

static const char* cuErr(CUresult_t r) {
  const char* s = NULL;
  if (cu.getErrorString) cu.getErrorString(r, &s);
  return s ? s : "unknown CUDA error";
}

/* -M auto: is there a GPU? Asked of the file system and the loader only: cuInit must not run before
 * -np forks (CUDA does not survive fork()), and a machine without a GPU pays nothing. A GPU is present
 * when the NVIDIA driver lists one (/proc/driver/nvidia/gpus/<pci id>, or /dev/nvidia0) and
 * libcuda.so.1 loads (it stays loaded: cudaLoad opens it again). */
static int gpuPresent(void) {
  int found = access("/dev/nvidia0", F_OK) == 0;
  DIR* d = opendir("/proc/driver/nvidia/gpus");
  if (d) {
    struct dirent* e;
    while (!found && (e = readdir(d)) != NULL) found = e->d_name[0] != '.';
    closedir(d);
  }
  if (!found) return 0;
  if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
    dlerror();
    return 0;
  }
  return 1;
}

/* Finds libcuda before any rank starts; prints why not and returns -1 when it cannot. Runs no CUDA
 * call: cuInit waits for the ranks. */
static int cudaLoad(void) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    fprintf(stderr, "%s: %s: %s: cannot load the CUDA driver (%s)\n", progName, memFlag(),
            commGetErrorString(commInvalidUsage), dlerror());
    return -1;
  }
#define CU_SYM(field, name)                                                          \
  do {                                                                               \
    *(void**)&cu.field = dlsym(h, name);                                             \
    if (!cu.field) {                                                                 \
      fprintf(stderr, "%s: %s: libcuda.so.1 lacks %s\n", progName, memFlag(), name); \
      return -1;                                                                     \
    }                                                                                \
  } while (0)
  CU_SYM(init, "cuInit");
  CU_SYM(deviceGetCount, "cuDeviceGetCount");
  CU_SYM(deviceGet, "cuDeviceGet");
  CU_SYM(primaryCtxRetain, "cuDevicePrimaryCtxRetain");
  CU_SYM(ctxSetCurrent, "cuCtxSetCurrent");
  CU_SYM(memAlloc, "cuMemAlloc_v2");
  CU_SYM(memFree, "cuMemFree_v2");
  CU_SYM(memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  CU_SYM(memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  CU_SYM(streamCreate, "cuStreamCreate");
  CU_SYM(streamSynchronize, "cuStreamSynchronize");
  CU_SYM(streamDestroy, "cuStreamDestroy_v2");
  CU_SYM(getErrorString, "cuGetErrorString");
  if (opts.graphs > 0) {
    CU_SYM(streamBeginCapture, "cuStreamBeginCapture_v2");
    CU_SYM(streamEndCapture, "cuStreamEndCapture");
    CU_SYM(graphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
    CU_SYM(graphLaunch, "cuGraphLaunch");
    CU_SYM(graphExecDestroy, "cuGraphExecDestroy");
    CU_SYM(graphDestroy, "cuGraphDestroy");
  }
#undef CU_SYM
  return 0; /* cuInit waits for the ranks: CUDA does not survive fork() */
}

/* ------------------------------------------------------------------------------------------------ */
/* One rank                                                                                          */

typedef struct {
  int rank, nranks, localRank;
  int cudaDev; /* the GPU of this rank (localRank % GPUs), -1 with host memory */
  commUniqueId id;
  comm_t comm;
  commStream_t stream;
  char* sendbuf; /* the buffers the collective sees (device pointers with -m device) */
  char* recvbuf;
  char* hsend; /* host copies: the same as sendbuf/recvbuf with -m host */
  char* hrecv;
  size_t bufBytes;
  double* meta; /* small host buffers for timing/error reductions */
  double busbwSum;
  long busbwCount;
  double wrongTotal;
  int failed;
} rankCtx_t;

static void reportFailure(rankCtx_t* c, const char* what, commResult_t res) {
  const char* last = commGetLastError(c->comm);
  fprintf(stderr, "# rank %d: %s failed: %s%s%s\n", c->rank, what, commGetErrorString(res), last && *last ? ": " : "",
          last && *last ? last : "");
  c->failed = 1;
}

#define PCHECK(c, call)                \
  do {                                 \
    commResult_t res_ = (call);        \
    if (res_ != commSuccess) {         \
      reportFailure((c), #call, res_); \
      return -1;                       \
    }                                  \
  } while (0)

/* One call of the collective under test, reported by its name. */
#define RUNCHECK(c, args)                                   \
  do {                                                      \
    commResult_t res_ = coll->run(args);                    \
    if (res_ != commSuccess) {                              \
      char what_[64];                                       \
      snprintf(what_, sizeof(what_), "comm%s", coll->name); \
      reportFailure((c), what_, res_);                      \
      return -1;                                            \
    }                                                       \
  } while (0)

#define CUCHECK(c, call)                                                          \
  do {                                                                            \
    CUresult_t r_ = (call);                                                       \
    if (r_ != 0) {                                                                \
      fprintf(stderr, "# rank %d: %s failed: %s\n", (c)->rank, #call, cuErr(r_)); \
      (c)->failed = 1;                                                            \
      return -1;                                                                  \
    }                                                                             \
  } while (0)

double perfNowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int syncStream(rankCtx_t* c) {
  if (opts.device) CUCHECK(c, cu.streamSynchronize(c->stream));
  return 0;
}

/* After a sync, outside any timed region and any capture: a failure a kernel of this rank reported
 * (the stream itself completes normally) fails the rank now instead of leaving its peers waiting. */
static int checkAsync(rankCtx_t* c) {
  if (!opts.device) return 0;
  commResult_t err = commSuccess;
  PCHECK(c, commGetAsyncError(c->comm, &err));
  if (err != commSuccess && err != commInProgress) {
    reportFailure(c, "a collective on the device (commGetAsyncError)", err);
    return -1;
  }
  return 0;
}

/* Copy [off, off+bytes) of a host mirror to the buffer the library sees, or back. The copies go on the
 * rank's own (non-blocking) stream, never on the legacy default stream: that one waits for the work of
 * every blocking stream of the context, so with several ranks (threads) on one GPU a copy of one rank
 * would wait for a collective of another rank that waits for this rank's next call. The host-to-device
 * copy is staged (the host mirror may change once it returns) and ordered before the next call. */
static int toBuf(rankCtx_t* c, char* buf, const char* host, size_t off, size_t bytes) {
  if (opts.device && bytes)
    CUCHECK(c, cu.memcpyHtoDAsync((CUdeviceptr_t)(uintptr_t)(buf + off), host + off, bytes, c->stream));
  return 0;
}
static int fromBuf(rankCtx_t* c, char* host, const char* buf, size_t off, size_t bytes) {
  if (!opts.device || !bytes) return 0;
  CUCHECK(c, cu.memcpyDtoHAsync(host + off, (CUdeviceptr_t)(uintptr_t)buf + off, bytes, c->stream));
  return syncStream(c);
}

static int allocBuffers(rankCtx_t* c) {
  c->bufBytes = opts.maxBytes + 64;
  c->meta = calloc(4, sizeof(double));
  if (posix_memalign((void**)&c->hsend, 4096, c->bufBytes) || posix_memalign((void**)&c->hrecv, 4096, c->bufBytes) ||
      !c->meta) {
    fprintf(stderr, "# rank %d: cannot allocate 2 x %zu bytes of host memory\n", c->rank, c->bufBytes);
    c->failed = 1;
    return -1;
  }
  memset(c->hsend, 0, c->bufBytes);
  memset(c->hrecv, 0, c->bufBytes);
  if (!opts.device) {
    c->sendbuf = c->hsend, c->recvbuf = c->hrecv;
    return 0;
  }
  CUdeviceptr_t s = 0, r = 0;
  CUCHECK(c, cu.memAlloc(&s, c->bufBytes));
  c->sendbuf = (char*)(uintptr_t)s;
  CUCHECK(c, cu.memAlloc(&r, c->bufBytes));
  c->recvbuf = (char*)(uintptr_t)r;
  CUCHECK(c, cu.streamCreate(&c->stream, PERF_CU_STREAM_NON_BLOCKING));
  return 0;
}

static void freeBuffers(rankCtx_t* c) {
  if (opts.device) {
    if (c->sendbuf) cu.memFree((CUdeviceptr_t)(uintptr_t)c->sendbuf);
    if (c->recvbuf) cu.memFree((CUdeviceptr_t)(uintptr_t)c->recvbuf);
    if (c->stream) cu.streamDestroy(c->stream);
  }
  free(c->hsend);
  free(c->hrecv);
  free(c->meta);
}

/* Reduces n doubles of c->meta in place across ranks (host memory, outside any timed region). */
static int metaAllReduce(rankCtx_t* c, size_t n, commRedOp_t op) {
  PCHECK(c, commAllReduce(c->meta, c->meta, n, commFloat64, op, c->comm, NULL));
  return 0;
}

static void fillPattern(char* host, size_t first, size_t n, size_t idx0, commDataType_t t, const pattern_t* p,
                        int rank) {
  /* Pattern values are integers in [-64, 127]: encode each once. */
  unsigned char enc[192][8];
  size_t sz = perfTypes[t].size;
  for (int v = -64; v < 128; v++) perfStoreElt(enc[v + 64], 0, t, v);
  for (size_t i = 0; i < n; i++) memcpy(host + (first + i) * sz, enc[perfPatternValue(p, rank, idx0 + i) + 64], sz);
}

typedef struct {
  commDataType_t type;
  commRedOp_t commOp;
  int op; /* opSum.., or -1 for data movement */
  pattern_t pat;
} sweepCfg_t;

/* Sets up the buffers of one variant (0 out-of-place, 1 in-place) and fills the input on the host. */
static void layout(rankCtx_t* c, const sweepCfg_t* s, int inplace, size_t count, perfCallArgs_t* a, size_t* recvOff,
                   size_t* sendOff, size_t* sendElems, size_t* recvElems, int sentinel) {
  size_t sz = perfTypes[s->type].size, n = (size_t)c->nranks;
  *sendElems = (coll->sendMul ? coll->sendMul : n) * count;
  *recvElems = (coll->recvMul ? coll->recvMul : n) * count;
  *a = (perfCallArgs_t){NULL, NULL, count, s->type, s->commOp, opts.root, c->rank, c->nranks, c->comm, c->stream};
  if (!inplace) {
    *sendOff = 0, *recvOff = 0;
    fillPattern(c->hsend, 0, *sendElems, 0, s->type, &s->pat, c->rank);
    if (sentinel) memset(c->hrecv, 0xA5, *recvElems * sz);
    a->sendbuff = c->sendbuf, a->recvbuff = c->recvbuf;
    return;
  }
  /* In place: everything lives in recvbuf. */
  char* base = c->recvbuf;
  switch (coll->inPlace) {
    case perfInPlaceSendInRecv:
      if (sentinel) memset(c->hrecv, 0xA5, *recvElems * sz);
      *sendOff = (size_t)c->rank * count * sz, *recvOff = 0;
      fillPattern(c->hrecv, (size_t)c->rank * count, *sendElems, 0, s->type, &s->pat, c->rank);
      break;
    case perfInPlaceRecvInSend:
      *sendOff = 0, *recvOff = (size_t)c->rank * count * sz;
      fillPattern(c->hrecv, 0, *sendElems, 0, s->type, &s->pat, c->rank);
      break;
    default:
      *sendOff = 0, *recvOff = 0;
      fillPattern(c->hrecv, 0, *sendElems, 0, s->type, &s->pat, c->rank);
      if (*recvElems > *sendElems && sentinel) memset(c->hrecv + *sendElems * sz, 0xA5, (*recvElems - *sendElems) * sz);
      break;
  }
  a->sendbuff = base + *sendOff, a->recvbuff = base + *recvOff;
}

static int cuFailed(rankCtx_t* c, const char* what, CUresult_t r) {
  if (r == 0) return 0;
  fprintf(stderr, "# rank %d: %s failed: %s\n", c->rank, what, cuErr(r));
  c->failed = 1;
  return 1;
}

/* -G: captures opts.iters calls on c->stream into one graph, launches it once (warmup), lines the
 * ranks up, then times opts.graphs launches: *us is the time per call. */
static int timeGraph(rankCtx_t* c, const perfCallArgs_t* a, double* us) {
  CUgraph_t graph = NULL;
  CUgraphExec_t exec = NULL;
  int rc = -1;
  if (cuFailed(c, "cuStreamBeginCapture", cu.streamBeginCapture(c->stream, PERF_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)))
    return -1;
  commResult_t res = commSuccess;
  for (int i = 0; i < opts.iters && res == commSuccess; i++) res = coll->run(a);
  CUresult_t endRes = cu.streamEndCapture(c->stream, &graph); /* also after a failed call: the stream leaves capture */
  if (res != commSuccess) {
    char what[80];
    snprintf(what, sizeof(what), "comm%s (captured into a CUDA graph)", coll->name);
    reportFailure(c, what, res);
    goto out;
  }
  if (cuFailed(c, "cuStreamEndCapture", endRes)) goto out;
  if (cuFailed(c, "cuGraphInstantiateWithFlags", cu.graphInstantiateWithFlags(&exec, graph, 0))) goto out;
  if (cuFailed(c, "cuGraphLaunch (warmup)", cu.graphLaunch(exec, c->stream))) goto out;
  if (syncStream(c) || checkAsync(c)) goto out;
  c->meta[0] = 0;
  if (metaAllReduce(c, 1, commSum)) goto out; /* line the ranks up before timing */
  double t0 = perfNowSec();
  for (int g = 0; g < opts.graphs; g++)
    if (cuFailed(c, "cuGraphLaunch", cu.graphLaunch(exec, c->stream))) goto out;
  if (syncStream(c)) goto out;
  *us = (perfNowSec() - t0) * 1e6 / ((double)opts.graphs * opts.iters);
  if (checkAsync(c)) goto out;
  rc = 0;
out:
  if (exec) cu.graphExecDestroy(exec);
  if (graph) cu.graphDestroy(graph);
  return rc;
}

/* Runs one variant at one size: the average time in us (*us) and the wrong count (*wrong). */
static int runVariant(rankCtx_t* c, const sweepCfg_t* s, int inplace, size_t count, double* us, double* wrong) {
  size_t sz = perfTypes[s->type].size, recvOff, sendOff, sendElems, recvElems;
  perfCallArgs_t a;
  layout(c, s, inplace, count, &a, &recvOff, &sendOff, &sendElems, &recvElems, 0);
  /* Bytes of the host mirrors that make up the variant's buffers. */
  size_t sendSpan = sendOff + sendElems * sz, recvSpan = recvOff + recvElems * sz;
  size_t ipSpan = sendSpan > recvSpan ? sendSpan : recvSpan;
  if (inplace ? toBuf(c, c->recvbuf, c->hrecv, 0, ipSpan) : toBuf(c, c->sendbuf, c->hsend, 0, sendSpan)) return -1;
  /* With -G, at least one plain call first: what the library sets up on first use (connections, scratch,
   * plan buffers) then happens outside the capture. */
  int warmup = opts.graphs > 0 && opts.warmup < 1 ? 1 : opts.warmup;
  for (int i = 0; i < warmup; i++) RUNCHECK(c, &a);
  if (syncStream(c) || checkAsync(c)) return -1;
  if (opts.graphs > 0) {
    if (timeGraph(c, &a, us)) return -1;
  } else {
    c->meta[0] = 0;
    if (metaAllReduce(c, 1, commSum)) return -1; /* line the ranks up before timing */
    double t0 = perfNowSec();
    for (int i = 0; i < opts.iters; i++) RUNCHECK(c, &a);
    if (syncStream(c)) return -1;
    *us = (perfNowSec() - t0) * 1e6 / opts.iters;
    if (checkAsync(c)) return -1;
  }
  *wrong = 0;
  if (!opts.check) return 0;

  /* Check: fresh input, a sentinel where the output goes, one call, compare on the host. */
  layout(c, s, inplace, count, &a, &recvOff, &sendOff, &sendElems, &recvElems, 1);
  if (inplace ? toBuf(c, c->recvbuf, c->hrecv, 0, ipSpan)
              : (toBuf(c, c->sendbuf, c->hsend, 0, sendSpan) || toBuf(c, c->recvbuf, c->hrecv, 0, recvSpan)))
    return -1;
  RUNCHECK(c, &a);
  if (syncStream(c) || checkAsync(c)) return -1;
  if (fromBuf(c, c->hrecv, c->recvbuf, recvOff, recvElems * sz)) return -1;
  const char* out = c->hrecv + recvOff;
  int tol = perfTypes[s->type].isFloat && s->op == opAvg; /* x/n may round on the way */
  double eps = (c->nranks + 1) * perfTypes[s->type].eps;
  size_t bad = 0;
  for (size_t j = 0; j < recvElems; j++) {
    int srcRank;
    size_t srcIdx;
    if (!coll->source(c->rank, c->nranks, opts.root, count, j, &srcRank, &srcIdx)) continue;
    double exp = perfExpectedValue(&s->pat, srcRank, srcIdx), got = perfLoadElt(out, j, s->type);
    if (tol ? !(fabs(got - exp) <= eps * fmax(1.0, fabs(exp))) : !(got == exp)) bad++;
  }
  *wrong = (double)bad;
  return 0;
}

static void fmtTime(char* buf, size_t n, double us) {
  if (us < 1e4) snprintf(buf, n, "%7.2f", us);
  else if (us < 1e5) snprintf(buf, n, "%7.1f", us);
  else snprintf(buf, n, "%7.0f", us);
}

static int sweep(rankCtx_t* c, sweepCfg_t* s) {
  size_t sz = perfTypes[s->type].size, n = (size_t)c->nranks;
  size_t nextSize = opts.minBytes;
  for (int more = 1; more;) {
    size_t size = nextSize;
    int ovf = opts.stepFactor > 1 ? __builtin_mul_overflow(size, opts.stepFactor, &nextSize)
                                  : __builtin_add_overflow(size, opts.stepBytes, &nextSize);
    more = !ovf && nextSize > size && nextSize <= opts.maxBytes;
    size_t count = coll->sizeIsTotal ? size / (n * sz) : size / sz;
    if (count == 0) continue;
    size_t bytes = count * sz * (coll->sizeIsTotal ? n : 1);
    double t[2] = {0, 0}, w[2] = {0, 0};
    for (int ip = 0; ip < 2; ip++) {
      if (ip && coll->inPlace == perfInPlaceNone) continue;
      if (runVariant(c, s, ip, count, &t[ip], &w[ip])) return -1;
    }
    c->meta[0] = t[0], c->meta[1] = t[1];
    if (metaAllReduce(c, 2, commMax)) return -1;
    t[0] = c->meta[0], t[1] = c->meta[1];
    c->meta[0] = w[0], c->meta[1] = w[1];
    if (metaAllReduce(c, 2, commSum)) return -1;
    w[0] = c->meta[0], w[1] = c->meta[1];
    c->wrongTotal += w[0] + w[1];
    if (c->rank != 0) continue;
    char line[256];
    int len = snprintf(line, sizeof(line), "%12zu  %12zu  %8s  %6s  %6d", bytes, bytes / sz, perfTypes[s->type].name,
                       s->op >= 0 ? perfOpNames[s->op] : "none", coll->usesRoot ? opts.root : -1);
    for (int ip = 0; ip < 2; ip++) {
      if (ip && coll->inPlace == perfInPlaceNone) {
        len += snprintf(line + len, sizeof(line) - (size_t)len, "  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
        continue;
      }
      char ts[32], ws[32];
      double algbw = (double)bytes / 1e9 / (t[ip] * 1e-6), busbw = algbw * coll->busBwFactor(c->nranks);
      fmtTime(ts, sizeof(ts), t[ip]);
      if (opts.check) snprintf(ws, sizeof(ws), "%6.0f", w[ip]);
      else snprintf(ws, sizeof(ws), "%6s", "N/A");
      len += snprintf(line + len, sizeof(line) - (size_t)len, "  %7s  %6.2f  %6.2f  %6s", ts, algbw, busbw, ws);
      c->busbwSum += busbw, c->busbwCount++;
    }
    printf("%s\n", line);
    fflush(stdout);
  }
  return 0;
}

static int printHeader(rankCtx_t* c) {
  /* Each rank writes "pid host" into its own 64-byte slot; a sum over uint8 gathers them. */
  enum { slot = 64 };
  size_t bytes = (size_t)c->nranks * slot;
  unsigned char* info = calloc(bytes, 1);
  if (!info) {
    c->failed = 1;
    return -1;
  }
  char host[48] = "?";
  gethostname(host, sizeof(host) - 1);
  snprintf((char*)info + (size_t)c->rank * slot, slot, "%d %d %s", (int)getpid(), c->cudaDev, host);
  commResult_t res = commAllReduce(info, info, bytes, commUint8, commSum, c->comm, NULL);
  if (res != commSuccess) {
    free(info);
    reportFailure(c, "commAllReduce (rank information)", res);
    return -1;
  }
  if (c->rank == 0) {
    if (graphIgnored) fprintf(stderr, "%s: -G needs device memory: ignored with host memory\n", progName);
    int ver = 0;
    commGetVersion(&ver);
    char types[256] = "", ops[128] = "";
    for (int i = 0; i < opts.ntypes; i++)
      snprintf(types + strlen(types), sizeof(types) - strlen(types), "%s%s", i ? "," : "",
               perfTypes[opts.types[i]].name);
    for (int i = 0; i < opts.nops; i++)
      snprintf(ops + strlen(ops), sizeof(ops) - strlen(ops), "%s%s", i ? "," : "", perfOpNames[opts.ops[i]]);
    printf("# %s (%s), libcomm %d.%d.%d\n", coll->name, progName, ver / 10000, ver / 100 % 100, ver % 100);
    char graphs[48] = "";
    if (opts.graphs > 0) snprintf(graphs, sizeof(graphs), " graph launches: %d", opts.graphs);
    printf("# nRanks %d nThread %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
           "validation: %d memory: %s%s\n",
           c->nranks, opts.nthreads, opts.minBytes, opts.maxBytes,
           opts.stepFactor > 1 ? opts.stepFactor : opts.stepBytes, opts.stepFactor > 1 ? "factor" : "bytes",
           opts.warmup, opts.iters, opts.check, opts.device ? "device" : "host", graphs);
    printf("# Collective %s  datatype %s  redop %s  root %d\n", coll->name, types, coll->usesOp ? ops : "none",
           coll->usesRoot ? opts.root : -1);
    printf("#\n# Using ranks\n");
    for (int r = 0; r < c->nranks; r++) {
      char* s = (char*)info + (size_t)r * slot;
      s[slot - 1] = 0;
      char* end;
      int pid = (int)strtol(s, &end, 10);
      int dev = (int)strtol(end, &end, 10);
      const char* h = *end == ' ' ? end + 1 : "?";
      char where[32];
      if (dev >= 0) snprintf(where, sizeof(where), "device %d", dev);
      else snprintf(where, sizeof(where), "host memory");
      printf("#  Rank %3d Pid %7d on %10s %s\n", r, pid, h, where);
    }
    printf("#\n");
    printf("#%51s%-33s%s\n", "", "           out-of-place", "              in-place");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop",
           "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "", "",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    fflush(stdout);
  }
  free(info);
  return 0;
}

static int rankRun(rankCtx_t* c) {
  if (opts.device) {
    int dev, ndev = 0;
    void* ctx;
    CUresult_t r = cu.init(0);
    if (r == 0) r = cu.deviceGetCount(&ndev);
    if (r != 0 || ndev < 1) {
      fprintf(stderr, "# rank %d: %s: %s: no usable CUDA device (%s); -M host runs on host memory\n", c->rank,
              memFlag(), commGetErrorString(commInvalidUsage), r ? cuErr(r) : "the driver counts none");
      c->failed = 1;
      return -1;
    }
    /* Several ranks may share a GPU (-t, -np or a launcher with more local ranks than GPUs). */
    c->cudaDev = c->localRank % ndev;
    CUCHECK(c, cu.deviceGet(&dev, c->cudaDev));
    CUCHECK(c, cu.primaryCtxRetain(&ctx, dev));
    CUCHECK(c, cu.ctxSetCurrent(ctx));
  }
  PCHECK(c, commInitRank(&c->comm, c->nranks, c->id, c->rank));
  /* Device buffers go to the library as they are: it says itself whether it takes them. */
  if (allocBuffers(c)) return -1;
  if (printHeader(c)) return -1;
  int nops = coll->usesOp ? opts.nops : 1;
  for (int ti = 0; ti < opts.ntypes; ti++) {
    for (int oi = 0; oi < nops; oi++) {
      sweepCfg_t s;
      s.type = (commDataType_t)opts.types[ti];
      s.op = coll->usesOp ? opts.ops[oi] : -1;
      s.pat = perfMakePattern(s.op, s.type, c->nranks);
      s.commOp = commSum;
      if (s.op == opPreMulSum) {
        unsigned char scalar[8];
        perfStoreElt(scalar, 0, s.type, perfScalarOf(c->rank));
        PCHECK(c, commRedOpCreatePreMulSum(&s.commOp, scalar, s.type, commScalarHostImmediate, c->comm));
      } else if (s.op >= 0) {
        s.commOp = (commRedOp_t)s.op; /* opSum..opAvg match commSum..commAvg */
      }
      int rc = sweep(c, &s);
      if (s.op == opPreMulSum) {
        commResult_t res = commRedOpDestroy(s.commOp, c->comm);
        if (rc == 0 && res != commSuccess) {
          reportFailure(c, "commRedOpDestroy", res);
          return -1;
        }
      }
      if (rc) return -1;
    }
  }
  if (c->rank == 0) {
    printf("# Out of bounds values : %.0f %s\n", c->wrongTotal, c->wrongTotal ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n#\n", c->busbwCount ? c->busbwSum / (double)c->busbwCount : 0.0);
    fflush(stdout);
  }
  PCHECK(c, commFinalize(c->comm));
  commResult_t res = commDestroy(c->comm);
  c->comm = NULL;
  if (res != commSuccess) {
    reportFailure(c, "commDestroy", res);
    return -1;
  }
  return c->wrongTotal > 0 ? 1 : 0;
}

/* One rank on the calling thread (launch.c starts them); nonzero when it failed. */
static int runRank(const commUniqueId* id, int rank, int nranks, int localRank) {
  rankCtx_t c;
  memset(&c, 0, sizeof(c));
  c.rank = rank, c.nranks = nranks, c.localRank = localRank, c.cudaDev = -1, c.id = *id;
  int rc = rankRun(&c);
  if (rc < 0 && c.comm) commAbort(c.comm); /* let the peers see the failure instead of waiting */
  if (rc < 0) c.comm = NULL;
  if (rc) c.failed = 1;
  freeBuffers(&c);
  return c.failed;
}

static int checkRoot(int nranks) {
  if (!coll->usesRoot || opts.root < nranks) return 0;
  fprintf(stderr, "%s: root %d is not a rank of %d\n", progName, opts.root, nranks);
  return -1;
}

int perfMain(const perfColl_t* c, int argc, char** argv) {
  coll = c;
  progName = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  int pr = perfParseOptions(argc, argv, progName, &opts);
  if (pr) return pr > 0 ? 0 : 2;
  if (perfBuildTables()) {
    fprintf(stderr, "%s: out of memory\n", progName);
    return 1;
  }
  if (opts.device == memAuto) opts.device = memAutoPicked = gpuPresent(); /* no GPU: host, silently */
  if (!opts.device && opts.graphs > 0) graphIgnored = 1, opts.graphs = 0; /* rank 0 says so */
  if (opts.device && cudaLoad()) return 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  perfLaunch_t l = {progName, opts.nprocs, opts.nthreads, opts.hostPerProc, checkRoot, runRank};
  return perfLaunch(&l);
}
