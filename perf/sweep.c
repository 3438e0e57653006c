/*
 * libcomm perf harness: the sweep over sizes. For each size and variant (out of place, in place): the input
 * laid out, warmup, the timed calls (plain, aggregated in groups with -m, blocking with -z, or a CUDA graph
 * with -G), the time across ranks, then checking calls compared on the host. Under nccl-tests' names the
 * sizes, warmup and times follow nccl-tests: every size warmed up before the sweep, one call before the
 * timed ones, a part per rank rounded down to 16 bytes, the -a time; under libcomm's names the slowest
 * rank's time after -w warmup calls of each size and variant. Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "device.h"
#include "launch.h"
#include "pattern.h"
#include "rank.h"
#include "report.h"

#define O perfOpts
#define C perfColl

typedef struct {
  commDataType_t type;
  commRedOp_t commOp;
  int op; /* opSum.., or -1 for data movement */
  int root;
  pattern_t pat;
} sweepCfg_t;

/* Where one variant's buffers are: offsets into the host mirrors (and the library's buffers). */
typedef struct {
  size_t sendOff, recvOff, sendElems, recvElems;
} place_t;

/* One call of the collective under test, reported by its name when it fails. */
static int call(rankCtx_t* c, const perfCallArgs_t* a) {
  perfCallBegin(c);
  commResult_t res = C->run(a);
  perfCallEnd(c);
  if (res != commSuccess) {
    char what[64];
    snprintf(what, sizeof(what), "comm%s", C->name);
    perfRankFailure(c, what, res);
    return -1;
  }
  return 0;
}

static int groupEnd(rankCtx_t* c) {
  perfCallBegin(c);
  commResult_t res = commGroupEnd();
  perfCallEnd(c);
  if (res != commSuccess) {
    perfRankFailure(c, "commGroupEnd (-m aggregated calls)", res);
    return -1;
  }
  return 0;
}

static int barrier(rankCtx_t* c) {
  c->meta[0] = 0;
  return perfMetaAllReduce(c, 1, commSum);
}

static int waitAll(rankCtx_t* c) {
  perfCallBegin(c);
  int rc = perfSyncStream(c);
  perfCallEnd(c);
  return rc;
}

static void fillPattern(char* host, size_t first, size_t n, commDataType_t t, const pattern_t* p, int rank) {
  if (!p) return; /* warmup: whatever the buffers hold */
  /* Pattern values are integers in [-64, 127]: encode each once. */
  unsigned char enc[192][8];
  size_t sz = perfTypes[t].size;
  for (int v = -64; v < 128; v++) perfStoreElt(enc[v + 64], 0, t, v);
  for (size_t i = 0; i < n; i++) memcpy(host + (first + i) * sz, enc[perfPatternValue(p, rank, i) + 64], sz);
}

/* Sets up the buffers of one variant (0 out-of-place, 1 in-place) and, with fill, the input on the host;
 * fill 2 also sets the output to a value no collective writes (a sentinel). -u shifts everything by unalign
 * elements. A collective without an in-place variant runs it on one buffer (nccl-tests' names). */
static void layout(rankCtx_t* c, const sweepCfg_t* s, int inplace, size_t count, perfCallArgs_t* a, place_t* pl,
                   int fill) {
  size_t sz = perfTypes[s->type].size, n = (size_t)c->nranks, u = (size_t)O.unalign;
  int sentinel = fill == 2;
  const pattern_t* pat = fill ? &s->pat : NULL;
  pl->sendElems = (C->sendMul ? C->sendMul : n) * count;
  pl->recvElems = (C->recvMul ? C->recvMul : n) * count;
  *a = (perfCallArgs_t){NULL,    NULL,      count,   s->type,   s->commOp,    s->root,
                        c->rank, c->nranks, c->comm, c->stream, perfLocalCopy};
  pl->sendOff = pl->recvOff = u * sz;
  if (!inplace) {
    fillPattern(c->hsend, u, pl->sendElems, s->type, pat, c->rank);
    if (sentinel) memset(c->hrecv + u * sz, 0xA5, pl->recvElems * sz);
    a->sendbuff = c->sendbuf + pl->sendOff, a->recvbuff = c->recvbuf + pl->recvOff;
    return;
  }
  /* In place: everything lives in recvbuf. */
  switch (C->inPlace) {
    case perfInPlaceSendInRecv:
      if (sentinel) memset(c->hrecv + u * sz, 0xA5, pl->recvElems * sz);
      pl->sendOff = (u + (size_t)c->rank * count) * sz;
      fillPattern(c->hrecv, u + (size_t)c->rank * count, pl->sendElems, s->type, pat, c->rank);
      break;
    case perfInPlaceRecvInSend:
      pl->recvOff = (u + (size_t)c->rank * count) * sz;
      fillPattern(c->hrecv, u, pl->sendElems, s->type, pat, c->rank);
      break;
    default:
      fillPattern(c->hrecv, u, pl->sendElems, s->type, pat, c->rank);
      if (pl->recvElems > pl->sendElems && sentinel)
        memset(c->hrecv + (u + pl->sendElems) * sz, 0xA5, (pl->recvElems - pl->sendElems) * sz);
      break;
  }
  a->sendbuff = c->recvbuf + pl->sendOff, a->recvbuff = c->recvbuf + pl->recvOff;
}

static int copyIn(rankCtx_t* c, const place_t* pl, int inplace, size_t sz, int withRecv) {
  size_t sendSpan = pl->sendOff + pl->sendElems * sz, recvSpan = pl->recvOff + pl->recvElems * sz;
  if (inplace) return perfToBuf(c, c->recvbuf, c->hrecv, 0, sendSpan > recvSpan ? sendSpan : recvSpan);
  return perfToBuf(c, c->sendbuf, c->hsend, 0, sendSpan) ||
         (withRecv && perfToBuf(c, c->recvbuf, c->hrecv, 0, recvSpan));
}

/* nccl-tests moves the buffers of successive calls by one size within the allocation (no cache reuse). */
static perfCallArgs_t shifted(const perfCallArgs_t* a, size_t shift) {
  perfCallArgs_t b = *a;
  b.sendbuff = (const char*)a->sendbuff + shift, b.recvbuff = (char*)a->recvbuff + shift;
  return b;
}

/* The timed calls of one iteration: -m of them in one group; -z 1/2 wait (and line up) after each call
 * (after the group when -m > 1: a wait inside an open group would wait for nothing). */
static int iteration(rankCtx_t* c, const perfCallArgs_t* a, int it, size_t total, size_t steps, int capture) {
  int agg = O.aggIters, z = capture ? 0 : O.blocking;
  if (agg > 1) PCHECK(c, commGroupStart());
  for (int k = 0; k < agg; k++) {
    perfCallArgs_t b = shifted(a, total * ((size_t)(it * agg + k) % steps));
    if (call(c, &b)) {
      if (agg > 1) commGroupEnd();
      return -1;
    }
    if (agg == 1 && (z == 1 || z == 2) && (waitAll(c) || (z == 1 && barrier(c)))) return -1;
  }
  if (agg > 1 && groupEnd(c)) return -1;
  if (agg > 1 && (z == 1 || z == 2) && (waitAll(c) || (z == 1 && barrier(c)))) return -1;
  return 0;
}

static int cuFailed(rankCtx_t* c, const char* what, perfCuResult_t r) {
  if (r == 0) return 0;
  fprintf(stderr, "# rank %d: %s failed: %s\n", c->rank, what, perfCuErr(r));
  c->failed = 1;
  return 1;
}

/* -G: captures the iterations into one graph, launches it once (warmup), lines the ranks up, then times
 * O.graphs launches: *us is the time per call, *cpuUs the time to launch per call of one launch. */
static int timeGraph(rankCtx_t* c, const perfCallArgs_t* a, size_t total, size_t steps, double* us, double* cpuUs) {
  perfCuGraph_t graph = NULL;
  perfCuGraphExec_t exec = NULL;
  int rc = -1;
  if (cuFailed(c, "cuStreamBeginCapture",
               perfCu.streamBeginCapture(c->stream, PERF_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)))
    return -1;
  int bad = 0;
  for (int i = 0; i < O.iters && !bad; i++) bad = iteration(c, a, i, total, steps, 1);
  perfCuResult_t endRes = perfCu.streamEndCapture(c->stream, &graph); /* also after a failure: ends the capture */
  if (bad || cuFailed(c, "cuStreamEndCapture", endRes)) goto out;
  if (cuFailed(c, "cuGraphInstantiateWithFlags", perfCu.graphInstantiateWithFlags(&exec, graph, 0))) goto out;
  if (cuFailed(c, "cuGraphLaunch (warmup)", perfCu.graphLaunch(exec, c->stream))) goto out;
  if (waitAll(c) || perfCheckAsync(c) || barrier(c)) goto out;
  double t0 = perfNowSec();
  for (int g = 0; g < O.graphs; g++)
    if (cuFailed(c, "cuGraphLaunch", perfCu.graphLaunch(exec, c->stream))) goto out;
  double issued = perfNowSec() - t0;
  if (waitAll(c)) goto out;
  double calls = (double)O.iters * O.aggIters;
  *us = (perfNowSec() - t0) * 1e6 / (calls * O.graphs);
  *cpuUs = issued * 1e6 / calls;
  if (perfCheckAsync(c)) goto out;
  rc = 0;
out:
  if (exec) perfCu.graphExecDestroy(exec);
  if (graph) perfCu.graphDestroy(graph);
  return rc;
}

static int timeLoop(rankCtx_t* c, const perfCallArgs_t* a, size_t total, size_t steps, double* us, double* cpuUs) {
  double collOnly = 0, t0 = perfNowSec();
  for (int it = 0; it < O.iters; it++) {
    double ti = perfNowSec();
    if (iteration(c, a, it, total, steps, 0)) return -1;
    if (O.blocking == 3) { /* -z 3: wait each iteration; the barrier is not timed */
      if (waitAll(c)) return -1;
      collOnly += perfNowSec() - ti;
      if (barrier(c)) return -1;
    }
  }
  double issued = O.blocking == 3 ? collOnly : perfNowSec() - t0;
  if (waitAll(c)) return -1;
  double calls = (double)O.iters * O.aggIters;
  *us = (O.blocking == 3 ? collOnly : perfNowSec() - t0) * 1e6 / calls;
  *cpuUs = issued * 1e6 / calls;
  return perfCheckAsync(c);
}

/* The reported time from every rank's: libcomm's names the slowest, nccl-tests' as -a says. */
static int rankTime(rankCtx_t* c, double* us) {
  int mode = O.nccl ? O.average : avgMax;
  c->meta[0] = mode == avgRank0 && c->rank != 0 ? 0 : *us;
  if (perfMetaAllReduce(c, 1, mode == avgMin ? commMin : mode == avgMax ? commMax : commSum)) return -1;
  *us = mode == avgMean ? c->meta[0] / c->nranks : c->meta[0];
  return 0;
}

typedef struct {
  double us, cpuUs, wrong;
  int checked;
} variant_t;

/* Runs one variant at one size. */
static int runVariant(rankCtx_t* c, const sweepCfg_t* s, int inplace, size_t count, variant_t* v) {
  size_t sz = perfTypes[s->type].size;
  perfCallArgs_t a;
  place_t pl;
  layout(c, s, inplace, count, &a, &pl, 1);
  if (copyIn(c, &pl, inplace, sz, 0)) return -1;
  /* nccl-tests: one call before the timed ones; with -G at least one, so that what the library sets up on
   * first use (connections, scratch, plan buffers) happens outside the capture. */
  int warmup = O.nccl || (O.graphs > 0 && O.warmup < 1) ? 1 : O.warmup;
  for (int i = 0; i < warmup; i++)
    if (call(c, &a)) return -1;
  if (waitAll(c) || perfCheckAsync(c) || barrier(c)) return -1; /* line the ranks up before timing */
  size_t total = (pl.sendElems > pl.recvElems ? pl.sendElems : pl.recvElems) * sz;
  size_t steps = O.nccl && total ? O.maxBytes / total : 1;
  if (steps < 1) steps = 1;
  if (O.graphs > 0 ? timeGraph(c, &a, total, steps, &v->us, &v->cpuUs)
                   : timeLoop(c, &a, total, steps, &v->us, &v->cpuUs))
    return -1;
  if (rankTime(c, &v->us)) return -1;
  v->wrong = 0;
  v->checked = O.check > 0 && !(inplace && C->inPlace == perfInPlaceNone);
  /* Check: fresh input, a sentinel where the output goes, one call, compare on the host; -c N of them. */
  for (int k = 0; v->checked && k < O.check; k++) {
    layout(c, s, inplace, count, &a, &pl, 2);
    if (copyIn(c, &pl, inplace, sz, 1) || call(c, &a) || waitAll(c) || perfCheckAsync(c)) return -1;
    if (perfFromBuf(c, c->hrecv, c->recvbuf, pl.recvOff, pl.recvElems * sz)) return -1;
    const char* out = c->hrecv + pl.recvOff;
    int tol = perfTypes[s->type].isFloat && s->op == opAvg; /* x/n may round on the way */
    double eps = (c->nranks + 1) * perfTypes[s->type].eps;
    size_t bad = 0;
    for (size_t j = 0; j < pl.recvElems; j++) {
      int srcRank;
      size_t srcIdx;
      if (!C->source(c->rank, c->nranks, s->root, count, j, &srcRank, &srcIdx)) continue;
      double exp = perfExpectedValue(&s->pat, srcRank, srcIdx), got = perfLoadElt(out, j, s->type);
      if (tol ? !(fabs(got - exp) <= eps * fmax(1.0, fabs(exp))) : !(got == exp)) bad++;
    }
    if (bad) c->errTests++;
    c->meta[0] = (double)bad;
    if (perfMetaAllReduce(c, 1, commSum)) return -1;
    v->wrong = c->meta[0];
    if (v->wrong) break;
  }
  c->wrongTotal += v->wrong;
  return 0;
}

/* The call's count, the size column and the count column of a size: nccl-tests' (a part per rank of
 * size / nranks, rounded down to 16 bytes; the count column is the call's count) or libcomm's. */
static void sizes(const rankCtx_t* c, size_t size, size_t sz, size_t* count, size_t* bytes, size_t* col) {
  size_t n = (size_t)c->nranks, elts = size / sz;
  if (O.nccl) {
    size_t part = C->sizeIsTotal ? (elts / n) & ~(16 / sz - 1) : elts;
    size_t sm = C->sendMul ? C->sendMul : n, rm = C->recvMul ? C->recvMul : n;
    *count = part, *bytes = (sm > rm ? sm : rm) * part * sz, *col = part;
  } else {
    *count = C->sizeIsTotal ? elts / n : elts;
    *bytes = *count * sz * (C->sizeIsTotal ? n : 1), *col = *bytes / sz;
  }
}

static int nextSize(size_t size, size_t* next) {
  int ovf = O.stepFactor > 1 ? __builtin_mul_overflow(size, O.stepFactor, next)
                             : __builtin_add_overflow(size, O.stepBytes, next);
  if (O.stepFactor > 1 && size == 0) *next = 1, ovf = 0;
  return !ovf && *next > size && *next <= O.maxBytes;
}

static int row(rankCtx_t* c, const sweepCfg_t* s, size_t size) {
  size_t sz = perfTypes[s->type].size, count, bytes, col;
  sizes(c, size, sz, &count, &bytes, &col);
  if (count == 0 && !O.nccl) return 0; /* libcomm's names skip sizes below one element per rank */
  variant_t v[2];
  for (int ip = 0; ip < 2; ip++) {
    if (ip && C->inPlace == perfInPlaceNone && !O.nccl) continue;
    if (runVariant(c, s, ip, count, &v[ip])) return -1;
  }
  if (c->rank != 0) return 0;
  perfReportRowStart(bytes, col, s->type, s->op, C->usesRoot ? s->root : -1);
  for (int ip = 0; ip < 2; ip++) {
    if (ip && C->inPlace == perfInPlaceNone && !O.nccl) {
      perfReportRowNone(ip);
      continue;
    }
    double algbw = (double)bytes / 1e9 / (v[ip].us * 1e-6) * (C->algBwFactor ? C->algBwFactor(c->nranks) : 1.0);
    double busbw = algbw * C->busBwFactor(c->nranks);
    perfReportRowBody(O.cputime ? v[ip].cpuUs : v[ip].us, algbw, busbw, v[ip].checked, v[ip].wrong, ip);
    c->busbwSum += busbw, c->busbwCount++;
  }
  perfReportRowEnd(O.iters);
  return 0;
}

static int sweep(rankCtx_t* c, const sweepCfg_t* s) {
  if (O.nccl) { /* nccl-tests warms up every size (doubling) before the sweep */
    size_t sz = perfTypes[s->type].size;
    for (size_t size = O.minBytes; size <= O.maxBytes; size = size ? size * 2 : 1) {
      size_t count, bytes, col;
      sizes(c, size, sz, &count, &bytes, &col);
      perfCallArgs_t a;
      place_t pl;
      layout(c, s, 0, count, &a, &pl, 0);
      for (int w = 0; w < O.warmup; w++)
        if (call(c, &a)) return -1;
      if (waitAll(c) || perfCheckAsync(c)) return -1;
      if (size > O.maxBytes / 2) break;
    }
  }
  for (long cycle = 0; O.runCycles == 0 || cycle < O.runCycles; cycle++) {
    for (size_t size = O.minBytes;;) {
      size_t next = 0;
      int more = nextSize(size, &next);
      if (row(c, s, size)) return -1;
      if (!more) break;
      size = next;
    }
  }
  return 0;
}

int perfRunSweeps(rankCtx_t* c) {
  if (C->powerOfTwo && (c->nranks & (c->nranks - 1))) { /* nccl-tests' names: said and skipped */
    if (c->rank == 0) printf("nRanks %d is not a power of 2, skipping\n", c->nranks);
    return 0;
  }
  int nops = C->usesOp ? O.nops : 1;
  int root0 = O.allRoots && C->usesRoot ? 0 : O.root, root1 = O.allRoots && C->usesRoot ? c->nranks - 1 : O.root;
  for (int ti = 0; ti < O.ntypes; ti++) {
    for (int oi = 0; oi < nops; oi++) {
      for (int root = root0; root <= root1; root++) {
        sweepCfg_t s;
        s.type = (commDataType_t)O.types[ti];
        s.op = C->usesOp ? O.ops[oi] : -1;
        s.root = root;
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
            perfRankFailure(c, "commRedOpDestroy", res);
            return -1;
          }
        }
        if (rc) return -1;
      }
    }
  }
  return 0;
}
