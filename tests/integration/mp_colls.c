/* mp_colls: every collective, checked element by element against a host reference.
 *
 *   mp_colls -np N        N ranks, one forked process each
 *   mp_colls -np N -t     N ranks, one thread each, in this process
 *   mp_colls -np N -g     N communicators made by commInitAll, driven by one thread: every call is issued
 *                         for all ranks between commGroupStart and commGroupEnd (as nccl-tests does)
 *   mp_colls -np N -G     as -g, and commSplit/commFinalize of all ranks inside one group as well
 *   COMM_RANK=r COMM_NRANKS=n mp_colls
 *                         this process is rank r of n; the id comes from COMM_ROOT (launchers, two hosts)
 * Options: -q  quick: fewer types and large counts (for many ranks on few cores)
 *          -A  only the allreduce cases (and the batches)
 *          -C  only the cases collnet runs: allreduce, allgather, reducescatter (and the batches)
 *          -nb non-blocking communicators (config.blocking = 0): init and split return commInProgress
 *              and are polled with commGetAsyncError
 *          -w S  watchdog: give up (and kill the ranks) after S seconds (default 290)
 *          -v  print every case
 * Exit status 0 when every check passed. Uses the public API only.
 * The cases and the host reference are in mp_cases.c; the shared types in mp_colls.h.
 * SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mp_colls.h"

#define GUARD 64
#define GUARD_BYTE 0xA5
#define SENTINEL_BYTE 0x5A
#define MAX_PRINT 8

int N; /* ranks */
int quick;
static int verbose;
static pid_t* children; /* fork mode */
static int nchildren;

/* ---------------------------------------------------------------------------------------------- */
/* Watchdog: a hung collective must fail the test with a message, and take the forked ranks with it. */
static void onAlarm(int sig) {
  (void)sig;
  static const char msg[] = "mp_colls: FAIL: watchdog expired (a collective hung); killing the ranks\n";
  ssize_t w = write(2, msg, sizeof(msg) - 1);
  (void)w;
  for (int i = 0; i < nchildren; i++)
    if (children[i] > 0) kill(children[i], SIGKILL);
  _exit(124);
}

static void fatal(rankst* rk, const char* what, commResult_t res) {
  fprintf(stderr, "mp_colls: FAIL: rank %d: %s returned %d (%s): %s\n", rk ? rk->rank : -1, what, (int)res,
          commGetErrorString(res), commGetLastError(rk ? rk->comm : NULL));
  fflush(stderr);
  exit(2);
}
#define CALL(rk, expr)                             \
  do {                                             \
    commResult_t r_ = (expr);                      \
    if (r_ != commSuccess) fatal((rk), #expr, r_); \
  } while (0)

static void failf(rankst* rk, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(rankst* rk, const char* fmt, ...) {
  rk->fails++;
  if (rk->printed++ >= MAX_PRINT) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  fprintf(stderr, "mp_colls: rank %d: MISMATCH %s\n", rk->rank, buf);
}

/* ---------------------------------------------------------------------------------------------- */
static void* guardedAlloc(size_t bytes, unsigned char** block, size_t* blockBytes) {
  *blockBytes = bytes + 2 * GUARD;
  *block = malloc(*blockBytes);
  if (!*block) {
    fprintf(stderr, "mp_colls: out of memory (%zu bytes)\n", bytes);
    exit(2);
  }
  memset(*block, GUARD_BYTE, GUARD);
  memset(*block + GUARD + bytes, GUARD_BYTE, GUARD);
  return *block + GUARD;
}

static void checkGuards(rankst* rk, const tcase* c, unsigned char* block, size_t blockBytes, const char* which) {
  if (!block) return;
  for (size_t i = 0; i < GUARD; i++) {
    if (block[i] != GUARD_BYTE || block[blockBytes - GUARD + i] != GUARD_BYTE) {
      failf(rk, "%s %s %s count=%zu: write outside the %s buffer (guard byte %zu)", collName[c->coll],
            itTypeName(c->type), opName[c->op], c->count, which, block[i] != GUARD_BYTE ? i : blockBytes - GUARD + i);
      return;
    }
  }
}

static void setup(rankst* rk, caseState* cs, const tcase* c) {
  int r = rk->rank;
  size_t es = itTypeSize(c->type), n = c->count;
  cs->aBlock = cs->bBlock = NULL;
  cs->send = cs->recv = NULL;
  cs->op = commSum;
  switch (c->coll) {
    case C_ALLREDUCE:
    case C_BROADCAST:
    case C_REDUCE:
    case C_SENDRECV: cs->sendElems = cs->recvElems = n; break;
    case C_ALLGATHER:
      cs->sendElems = n;
      cs->recvElems = (size_t)N * n;
      break;
    case C_REDUCESCATTER:
      cs->sendElems = (size_t)N * n;
      cs->recvElems = n;
      break;
    case C_ALLTOALL: cs->sendElems = cs->recvElems = (size_t)N * n; break;
    case C_ALLPAIRS: {
      size_t so = 0, ro = 0;
      for (int p = 0; p < N; p++) {
        cs->scnt[p] = pairCount(c, r, p);
        cs->sdispl[p] = so;
        so += cs->scnt[p];
        cs->rcnt[p] = pairCount(c, p, r);
        cs->rdispl[p] = ro;
        ro += cs->rcnt[p];
      }
      cs->sendElems = so;
      cs->recvElems = ro;
      break;
    }
  }
  if (c->inplace) {
    size_t total = (c->coll == C_ALLGATHER) ? cs->recvElems : cs->sendElems;
    char* a = guardedAlloc(total * es, &cs->aBlock, &cs->aBytes);
    memset(a, SENTINEL_BYTE, total * es);
    if (c->coll == C_ALLGATHER) {
      cs->recv = a;
      cs->send = a + (size_t)r * n * es;
    } else if (c->coll == C_REDUCESCATTER) {
      cs->send = a;
      cs->recv = a + (size_t)r * n * es;
    } else {
      cs->send = cs->recv = a;
    }
    if (c->coll != C_BROADCAST || r == c->root)
      for (size_t j = 0; j < cs->sendElems; j++) itPut(c->type, cs->send, j, genRaw(c, r, j));
  } else {
    if (c->coll != C_BROADCAST || r == c->root) {
      cs->send = guardedAlloc(cs->sendElems * es, &cs->aBlock, &cs->aBytes);
      for (size_t j = 0; j < cs->sendElems; j++) itPut(c->type, cs->send, j, genRaw(c, r, j));
    }
    if (c->coll != C_REDUCE || r == c->root) {
      cs->recv = guardedAlloc(cs->recvElems * es, &cs->bBlock, &cs->bBytes);
      memset(cs->recv, SENTINEL_BYTE, cs->recvElems * es);
    }
  }
  if (c->op == OP_PREMUL) {
    unsigned char scalar[8];
    itPut(c->type, scalar, 0, c->scalar);
    CALL(rk, commRedOpCreatePreMulSum(&cs->op, scalar, c->type, commScalarHostImmediate, rk->comm));
    memset(scalar, 0xff, sizeof(scalar)); /* host-immediate: read at creation, so this must not matter */
    if ((int)cs->op < (int)commNumOps) failf(rk, "commRedOpCreatePreMulSum gave op %d < commNumOps", (int)cs->op);
  } else if (c->op != OP_COPY) {
    static const commRedOp_t map[] = {commSum, commProd, commMax, commMin, commAvg};
    cs->op = map[c->op];
  }
}

static commResult_t issue(rankst* rk, caseState* cs, const tcase* c) {
  commDataType_t t = c->type;
  size_t es = itTypeSize(t);
  comm_t comm = rk->comm;
  int r = rk->rank;
  switch (c->coll) {
    case C_ALLREDUCE: return commAllReduce(cs->send, cs->recv, c->count, t, cs->op, comm, NULL);
    case C_BROADCAST: return commBroadcast(cs->send, cs->recv, c->count, t, c->root, comm, NULL);
    case C_REDUCE: return commReduce(cs->send, cs->recv, c->count, t, cs->op, c->root, comm, NULL);
    case C_ALLGATHER: return commAllGather(cs->send, cs->recv, c->count, t, comm, NULL);
    case C_REDUCESCATTER: return commReduceScatter(cs->send, cs->recv, c->count, t, cs->op, comm, NULL);
    case C_ALLTOALL: return commAllToAll(cs->send, cs->recv, c->count, t, comm, NULL);
    case C_SENDRECV: {
      commResult_t res = commGroupStart();
      if (res != commSuccess) return res;
      res = commSend(cs->send, c->count, t, (r + 1) % N, comm, NULL);
      if (res == commSuccess) res = commRecv(cs->recv, c->count, t, (r + N - 1) % N, comm, NULL);
      commResult_t end = commGroupEnd();
      return res != commSuccess ? res : end;
    }
    case C_ALLPAIRS: {
      commResult_t res = commGroupStart();
      if (res != commSuccess) return res;
      for (int k = 0; k < N && res == commSuccess; k++) {
        int p = (r + k) % N; /* every rank starts with a different peer */
        res = commSend((char*)cs->send + cs->sdispl[p] * es, cs->scnt[p], t, p, comm, NULL);
        if (res == commSuccess) res = commRecv((char*)cs->recv + cs->rdispl[p] * es, cs->rcnt[p], t, p, comm, NULL);
      }
      commResult_t end = commGroupEnd();
      return res != commSuccess ? res : end;
    }
  }
  return commInternalError;
}

static void checkCase(rankst* rk, caseState* cs, const tcase* c) {
  char what[160];
  describe(c, what, sizeof(what));
  rk->cases++;
  if (cs->recv) {
    for (size_t i = 0; i < cs->recvElems; i++) {
      double expect;
      if (!expectAt(rk, cs, c, i, &expect)) continue;
      double got = itGet(c->type, cs->recv, i);
      rk->checks++;
      if (!(fabs(got - expect) <= tolerance(c, expect)))
        failf(rk, "%s: element %zu: got %.17g, expected %.17g", what, i, got, expect);
    }
  }
  /* Out of place, the input must be left as it was. */
  if (!c->inplace && cs->send) {
    for (size_t j = 0; j < cs->sendElems; j++) {
      double expect = inVal(c, rk->rank, j), got = itGet(c->type, cs->send, j);
      rk->checks++;
      if (got != expect) {
        failf(rk, "%s: send buffer element %zu changed: %.17g, was %.17g", what, j, got, expect);
        break;
      }
    }
  }
  checkGuards(rk, c, cs->aBlock, cs->aBytes, c->inplace ? "in-place" : "send");
  checkGuards(rk, c, cs->bBlock, cs->bBytes, "recv");
}

static void teardown(rankst* rk, caseState* cs, const tcase* c) {
  if (c->op == OP_PREMUL) CALL(rk, commRedOpDestroy(cs->op, rk->comm));
  free(cs->aBlock);
  free(cs->bBlock);
  cs->aBlock = cs->bBlock = NULL;
}

/* A batch of k cases on the m ranks this thread drives: all issued inside one group when k > 1 or
 * m > 1 (the library fuses them), then every result checked. */
static void runBatch(rankst** rks, int m, const tcase* const* cs, int k) {
  char what[200];
  if (verbose && rks[0]->rank == 0) {
    for (int j = 0; j < k; j++) {
      describe(cs[j], what, sizeof(what));
      fprintf(stderr, "mp_colls: %s%s\n", k > 1 ? "[batch] " : "", what);
    }
  }
  for (int r = 0; r < m; r++)
    for (int j = 0; j < k; j++) setup(rks[r], &rks[r]->cs[j], cs[j]);
  int grouped = m > 1 || k > 1;
  if (grouped) CALL(rks[0], commGroupStart());
  for (int r = 0; r < m; r++) {
    for (int j = 0; j < k; j++) {
      commResult_t res = issue(rks[r], &rks[r]->cs[j], cs[j]);
      if (res != commSuccess) {
        describe(cs[j], what, sizeof(what));
        fatal(rks[r], what, res);
      }
    }
  }
  if (grouped) CALL(rks[0], commGroupEnd());
  for (int r = 0; r < m; r++) {
    for (int j = 0; j < k; j++) {
      checkCase(rks[r], &rks[r]->cs[j], cs[j]);
      teardown(rks[r], &rks[r]->cs[j], cs[j]);
    }
  }
}
static void runCase(rankst** rks, int m, const tcase* c) { runBatch(rks, m, &c, 1); }

/* ---------------------------------------------------------------------------------------------- */
static void checkQueries(rankst* rk) {
  int v = -2;
  CALL(rk, commCount(rk->comm, &v));
  rk->checks++;
  if (v != N) failf(rk, "commCount = %d, expected %d", v, N);
  v = -2;
  CALL(rk, commUserRank(rk->comm, &v));
  rk->checks++;
  if (v != rk->rank) failf(rk, "commUserRank = %d, expected %d", v, rk->rank);
  v = -2;
  CALL(rk, commCuDevice(rk->comm, &v));
  rk->checks++;
  if (v != -1) failf(rk, "commCuDevice = %d, expected -1 (host-only communicator)", v);
}

/* Non-blocking communicators (-nb): init and split return commInProgress; poll until done (bounded). */
static int nonblocking;
static commResult_t waitInit(comm_t comm, commResult_t res) {
  if (res != commInProgress) return res;
  if (comm == NULL) return commInternalError;
  double deadline = itNowSec() + 120;
  commResult_t async = commInProgress;
  while (itNowSec() < deadline) {
    res = commGetAsyncError(comm, &async);
    if (res != commSuccess) return res;
    if (async != commInProgress) return async;
    sched_yield();
  }
  fprintf(stderr, "mp_colls: non-blocking init still in progress after 120 s\n");
  return commTimeout;
}

static commResult_t initRank(comm_t* comm, int nranks, commUniqueId id, int rank) {
  if (!nonblocking) return commInitRank(comm, nranks, id, rank);
  commConfig_t cfg = COMM_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.commName = "mp_colls-nb";
  commResult_t res = commInitRankConfig(comm, nranks, id, rank, &cfg);
  return waitInit(*comm, res);
}

/* commSplit and commFinalize talk to the other ranks before they return. With one thread driving every
 * rank (-g), they run inside commGroupStart/End when -G is given (NCCL allows that); otherwise each rank's
 * call runs on a helper thread, so the rest of -g still tests one thread driving all collectives. */
static int strictGroup;
typedef struct {
  rankst* rk;
  comm_t comm;
  int color, key;
  comm_t* out;
  int finalize;
  commResult_t res;
} blockingCall;
static void* blockingCallMain(void* p) {
  blockingCall* b = p;
  b->res = b->finalize ? commFinalize(b->comm) : commSplit(b->comm, b->color, b->key, b->out, NULL);
  /* children of a non-blocking communicator are non-blocking too */
  if (!b->finalize && b->res == commInProgress) b->res = waitInit(*b->out, b->res);
  return NULL;
}
static void runBlocking(blockingCall* calls, int m) {
  if (m == 1 || strictGroup) {
    if (m > 1) CALL(calls[0].rk, commGroupStart());
    for (int k = 0; k < m; k++)
      if (calls[k].comm) blockingCallMain(&calls[k]);
    if (m > 1) CALL(calls[0].rk, commGroupEnd());
  } else {
    pthread_t th[64];
    for (int k = 0; k < m; k++)
      if (calls[k].comm && pthread_create(&th[k], NULL, blockingCallMain, &calls[k]) != 0) exit(2);
    for (int k = 0; k < m; k++)
      if (calls[k].comm) pthread_join(th[k], NULL);
  }
  for (int k = 0; k < m; k++)
    if (calls[k].comm && calls[k].res != commSuccess)
      fatal(calls[k].rk, calls[k].finalize ? "commFinalize" : "commSplit", calls[k].res);
}

static void destroyComms(rankst** rks, comm_t* comms, int m) {
  blockingCall calls[64];
  memset(calls, 0, sizeof(calls));
  for (int k = 0; k < m; k++) calls[k] = (blockingCall){rks[k], comms[k], 0, 0, NULL, 1, commSuccess};
  runBlocking(calls, m);
  for (int k = 0; k < m; k++)
    if (comms[k]) CALL(rks[k], commDestroy(comms[k]));
}

/* Allreduce (sum of the parent ranks) on children; members[k]: whether parent rank k belongs. */
static void childAllReduce(rankst** rks, comm_t* child, int m, const int* inChild, const char* what) {
  enum { CN = 5 };
  int32_t send[64][CN], recv[64][CN];
  int32_t expect[CN] = {0};
  for (int q = 0; q < N; q++)
    if (inChild[q])
      for (int i = 0; i < CN; i++) expect[i] += q * 10 + i;
  if (m > 1) CALL(rks[0], commGroupStart());
  for (int k = 0; k < m; k++) {
    if (!child[k]) continue;
    for (int i = 0; i < CN; i++) {
      send[k][i] = rks[k]->rank * 10 + i;
      recv[k][i] = -1;
    }
    CALL(rks[k], commAllReduce(send[k], recv[k], CN, commInt32, commSum, child[k], NULL));
  }
  if (m > 1) CALL(rks[0], commGroupEnd());
  for (int k = 0; k < m; k++) {
    if (!child[k]) continue;
    for (int i = 0; i < CN; i++) {
      rks[k]->checks++;
      if (recv[k][i] != expect[i])
        failf(rks[k], "%s: allreduce on the child: element %d = %d, expected %d", what, i, recv[k][i], expect[i]);
    }
  }
}

static void testSplit(rankst** rks, int m) {
  comm_t child[64];
  int inChild[64];
  static int notAComm;

  /* Even and odd ranks, key reversing the order. */
  blockingCall calls[64];
  for (int k = 0; k < m; k++) {
    child[k] = (comm_t)&notAComm;
    calls[k] = (blockingCall){rks[k], rks[k]->comm, rks[k]->rank % 2, N - rks[k]->rank, &child[k], 0, commSuccess};
  }
  runBlocking(calls, m);
  for (int k = 0; k < m; k++) {
    rankst* rk = rks[k];
    int r = rk->rank, color = r % 2, size = 0, pos = 0;
    for (int q = 0; q < N; q++) {
      if (q % 2 != color) continue;
      size++;
      if (q > r) pos++; /* larger parent rank = smaller key = earlier */
    }
    rk->checks++;
    if (!child[k] || child[k] == (comm_t)&notAComm) {
      failf(rk, "commSplit(color %d) gave no communicator", color);
      child[k] = NULL;
      continue;
    }
    int v = -2;
    CALL(rk, commCount(child[k], &v));
    rk->checks++;
    if (v != size) failf(rk, "split child: commCount = %d, expected %d", v, size);
    v = -2;
    CALL(rk, commUserRank(child[k], &v));
    rk->checks++;
    if (v != pos) failf(rk, "split child (key reverses order): commUserRank = %d, expected %d", v, pos);
    v = -2;
    CALL(rk, commCuDevice(child[k], &v));
    rk->checks++;
    if (v != -1) failf(rk, "split child: commCuDevice = %d, expected -1", v);
  }
  for (int m2 = 0; m2 < 2; m2++) {
    /* one allreduce per color; in group mode both colors run in the same group */
    int color = m2;
    for (int q = 0; q < N; q++) inChild[q] = (q % 2 == color);
    comm_t sub[64];
    for (int k = 0; k < m; k++) sub[k] = (rks[k]->rank % 2 == color) ? child[k] : NULL;
    int any = 0;
    for (int k = 0; k < m; k++) any |= sub[k] != NULL;
    if (any) childAllReduce(rks, sub, m, inChild, "split even/odd");
  }
  destroyComms(rks, child, m);

  /* Rank 0 opts out with COMM_SPLIT_NOCOLOR. */
  for (int k = 0; k < m; k++) {
    child[k] = (comm_t)&notAComm;
    int r = rks[k]->rank;
    calls[k] = (blockingCall){rks[k], rks[k]->comm, r == 0 ? COMM_SPLIT_NOCOLOR : 7, r, &child[k], 0, commSuccess};
  }
  runBlocking(calls, m);
  for (int k = 0; k < m; k++) {
    rankst* rk = rks[k];
    rk->checks++;
    if (rk->rank == 0) {
      if (child[k] != NULL) failf(rk, "commSplit(COMM_SPLIT_NOCOLOR) gave %p, expected NULL", (void*)child[k]);
      child[k] = NULL;
      continue;
    }
    if (!child[k] || child[k] == (comm_t)&notAComm) {
      failf(rk, "commSplit(color 7) gave no communicator");
      child[k] = NULL;
      continue;
    }
    int v = -2;
    CALL(rk, commCount(child[k], &v));
    rk->checks++;
    if (v != N - 1) failf(rk, "split without rank 0: commCount = %d, expected %d", v, N - 1);
    CALL(rk, commUserRank(child[k], &v));
    rk->checks++;
    if (v != rk->rank - 1) failf(rk, "split without rank 0: commUserRank = %d, expected %d", v, rk->rank - 1);
  }
  for (int q = 0; q < N; q++) inChild[q] = q != 0;
  if (N > 1) childAllReduce(rks, child, m, inChild, "split without rank 0");
  destroyComms(rks, child, m);
}

/* A pre-multiplied sum whose scalar lives in memory the collective reads when it runs
 * (commScalarDevice; on a host-only build that memory is host memory): changing the scalar after
 * creating the op changes the result. */
static void testRunTimeScalar(rankst** rks, int m) {
  enum { CN = 16 };
  float scalar[64], send[64][CN], recv[64][CN]; /* per thread: -t runs this on every rank thread */
  commRedOp_t op[64];
  for (int k = 0; k < m; k++) {
    scalar[k] = 1.0f;
    CALL(rks[k], commRedOpCreatePreMulSum(&op[k], &scalar[k], commFloat32, commScalarDevice, rks[k]->comm));
    scalar[k] = 3.0f; /* read at run time: this is the scalar that counts */
    for (int i = 0; i < CN; i++) {
      send[k][i] = (float)(rks[k]->rank + 1 + i);
      recv[k][i] = -1;
    }
  }
  if (m > 1) CALL(rks[0], commGroupStart());
  for (int k = 0; k < m; k++) CALL(rks[k], commAllReduce(send[k], recv[k], CN, commFloat32, op[k], rks[k]->comm, NULL));
  if (m > 1) CALL(rks[0], commGroupEnd());
  for (int k = 0; k < m; k++) {
    for (int i = 0; i < CN; i++) {
      float expect = 3.0f * (float)(N * (N + 1) / 2 + N * i);
      rks[k]->checks++;
      if (recv[k][i] != expect)
        failf(rks[k], "premulsum with commScalarDevice: element %d = %g, expected %g (scalar read at run time)", i,
              recv[k][i], expect);
    }
    CALL(rks[k], commRedOpDestroy(op[k], rks[k]->comm));
  }
}

/* Everything one thread does for its m ranks. Returns the number of failures. */
static long runRanks(rankst** rks, int m) {
  double t0 = itNowSec();
  for (int k = 0; k < m; k++) {
    for (int j = 0; j < MAX_BATCH; j++) {
      caseState* cs = &rks[k]->cs[j];
      cs->scnt = calloc((size_t)N * 4, sizeof(size_t));
      if (!cs->scnt) exit(2);
      cs->sdispl = cs->scnt + N;
      cs->rcnt = cs->scnt + 2 * N;
      cs->rdispl = cs->scnt + 3 * N;
    }
    checkQueries(rks[k]);
  }
  for (size_t i = 0; i < ncases; i++) runCase(rks, m, &cases[i]);
  for (int b = 0; b < nbatches; b++) {
    const tcase* list[MAX_BATCH];
    for (int j = 0; j < batchLen[b]; j++) list[j] = &batches[b][j];
    runBatch(rks, m, list, batchLen[b]);
  }
  testRunTimeScalar(rks, m);
  /* Marker for log readers (two_hosts.sh): connections logged after it belong to split children. */
  fprintf(stderr, "mp_colls: commSplit tests\n");
  testSplit(rks, m);
  long fails = 0;
  comm_t comms[64];
  for (int k = 0; k < m; k++) {
    commResult_t async = commInternalError;
    CALL(rks[k], commGetAsyncError(rks[k]->comm, &async));
    rks[k]->checks++;
    if (async != commSuccess) failf(rks[k], "commGetAsyncError = %d after a clean run", (int)async);
    comms[k] = rks[k]->comm;
  }
  destroyComms(rks, comms, m);
  for (int k = 0; k < m; k++) {
    rankst* rk = rks[k];
    printf("mp_colls: rank %d/%d: %ld cases, %ld checks, %ld failures, %.2f s\n", rk->rank, N, rk->cases, rk->checks,
           rk->fails, itNowSec() - t0);
    fails += rk->fails;
    for (int j = 0; j < MAX_BATCH; j++) free(rk->cs[j].scnt);
  }
  fflush(stdout);
  return fails;
}

static long runOneRank(comm_t comm, int rank) {
  rankst rk;
  memset(&rk, 0, sizeof(rk));
  rk.comm = comm;
  rk.rank = rank;
  rankst* p = &rk;
  return runRanks(&p, 1);
}

/* ---------------------------------------------------------------------------------------------- */
typedef struct {
  commUniqueId id;
  int rank;
  long fails;
} threadArg;

static void* threadMain(void* a) {
  threadArg* ta = a;
  comm_t comm = NULL;
  commResult_t res = initRank(&comm, N, ta->id, ta->rank);
  if (res != commSuccess) {
    fprintf(stderr, "mp_colls: FAIL: rank %d: commInitRank returned %d (%s): %s\n", ta->rank, (int)res,
            commGetErrorString(res), commGetLastError(NULL));
    exit(2);
  }
  ta->fails = runOneRank(comm, ta->rank);
  return NULL;
}

static int usage(void) {
  fprintf(stderr, "usage: mp_colls -np N [-t | -g | -G] [-nb] [-q] [-A | -C] [-v] [-w seconds] [-rph ranks-per-host]\n"
                  "       (-A: only the allreduce cases, -C: allreduce, allgather and reducescatter; and the batches)\n"
                  "       (-rph K: forked rank r takes COMM_HOSTID=mp_colls-host-(r/K): K ranks per fake host)\n"
                  "       COMM_RANK=r COMM_NRANKS=n [COMM_ROOT=host:port] mp_colls [-q] [-v]\n");
  return 2;
}

int main(int argc, char** argv) {
  int threads = 0, group = 0, watchdog = 290, ranksPerHost = 0;
  N = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-np") && i + 1 < argc) N = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-t")) threads = 1;
    else if (!strcmp(argv[i], "-g")) group = 1;
    else if (!strcmp(argv[i], "-G")) group = strictGroup = 1;
    else if (!strcmp(argv[i], "-q")) quick = 1;
    else if (!strcmp(argv[i], "-A")) allReduceOnly = 1;
    else if (!strcmp(argv[i], "-C")) collnetOnly = 1;
    else if (!strcmp(argv[i], "-nb")) nonblocking = 1;
    else if (!strcmp(argv[i], "-v")) verbose = 1;
    else if (!strcmp(argv[i], "-w") && i + 1 < argc) watchdog = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-rph") && i + 1 < argc) ranksPerHost = atoi(argv[++i]);
    else return usage();
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = onAlarm;
  sigaction(SIGALRM, &sa, NULL);
  if (watchdog > 0) alarm((unsigned)watchdog);

  int version = 0;
  if (commGetVersion(&version) != commSuccess || version != COMM_VERSION_CODE) {
    fprintf(stderr, "mp_colls: FAIL: commGetVersion gave %d, header says %d\n", version, COMM_VERSION_CODE);
    return 1;
  }

  const char* envRank = getenv("COMM_RANK");
  const char* envN = getenv("COMM_NRANKS");
  if (envRank && envN && !N) {
    /* Launched by a launcher: one rank, the id derived from COMM_ROOT inside the library. */
    N = atoi(envN);
    int rank = atoi(envRank);
    if (N < 1 || N > 4096 || rank < 0 || rank >= N) return usage();
    buildCases();
    buildBatches();
    commUniqueId id;
    memset(&id, 0, sizeof(id));
    comm_t comm = NULL;
    commResult_t res = initRank(&comm, N, id, rank);
    if (res != commSuccess) {
      fprintf(stderr, "mp_colls: FAIL: rank %d: commInitRank (env launch) returned %d (%s): %s\n", rank, (int)res,
              commGetErrorString(res), commGetLastError(NULL));
      return 1;
    }
    long fails = runOneRank(comm, rank);
    printf("mp_colls: rank %d: %s\n", rank, fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
  }
  if (N < 1 || N > 64 || (threads && group) || ranksPerHost < 0 || (ranksPerHost && (threads || group))) return usage();
  buildCases();
  buildBatches();
  printf("mp_colls: %d ranks (%s), %zu cases per rank\n", N,
         group     ? "one thread, groups"
         : threads ? "threads"
                   : "processes",
         ncases);

  long fails = 0;
  if (group) {
    comm_t comms[64];
    CALL(NULL, commGroupStart());
    CALL(NULL, commInitAll(comms, N, NULL));
    CALL(NULL, commGroupEnd());
    rankst st[64];
    rankst* rks[64];
    memset(st, 0, sizeof(st));
    for (int k = 0; k < N; k++) {
      st[k].comm = comms[k];
      st[k].rank = k;
      rks[k] = &st[k];
      int rank = -2;
      CALL(&st[k], commUserRank(comms[k], &rank));
      if (rank != k) {
        fprintf(stderr, "mp_colls: FAIL: commInitAll: comms[%d] has rank %d\n", k, rank);
        return 1;
      }
    }
    fails = runRanks(rks, N);
  } else {
    commUniqueId id;
    if (threads) {
      CALL(NULL, commGetUniqueId(&id));
      pthread_t th[64];
      threadArg ta[64];
      for (int r = 0; r < N; r++) {
        ta[r].id = id;
        ta[r].rank = r;
        ta[r].fails = 0;
        if (pthread_create(&th[r], NULL, threadMain, &ta[r]) != 0) {
          perror("pthread_create");
          return 2;
        }
      }
      for (int r = 0; r < N; r++) {
        pthread_join(th[r], NULL);
        fails += ta[r].fails;
      }
    } else {
      /* Fork the ranks first, then make the id and hand it to them through pipes: the parent has no
       * thread of libcomm running while it forks (a fork beside running threads can leave a lock of
       * ASan's allocator held forever in the child). */
      pid_t parent = getpid();
      children = calloc((size_t)N, sizeof(pid_t));
      int* idPipe = calloc((size_t)N, sizeof(int));
      if (!children || !idPipe) return 2;
      fflush(NULL);
      for (int r = 0; r < N; r++) {
        int fds[2];
        if (pipe(fds) != 0) {
          perror("pipe");
          onAlarm(0);
        }
        pid_t pid = fork();
        if (pid < 0) {
          perror("fork");
          onAlarm(0);
        }
        if (pid == 0) {
          nchildren = 0; /* the watchdog of a rank kills nobody else */
          prctl(PR_SET_PDEATHSIG, SIGKILL);
          if (getppid() != parent) _exit(3);
          close(fds[1]);
          size_t got = 0;
          while (got < sizeof(id)) {
            ssize_t n = read(fds[0], (char*)&id + got, sizeof(id) - got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) _exit(3); /* the parent is gone */
            got += (size_t)n;
          }
          close(fds[0]);
          if (ranksPerHost > 0) {
            /* Pretend to be on host r / ranksPerHost: shm within a "host", the network across. */
            char host[64];
            snprintf(host, sizeof(host), "mp_colls-host-%d", r / ranksPerHost);
            setenv("COMM_HOSTID", host, 1);
          }
          comm_t comm = NULL;
          commResult_t res = initRank(&comm, N, id, r);
          if (res != commSuccess) {
            fprintf(stderr, "mp_colls: FAIL: rank %d: commInitRank returned %d (%s): %s\n", r, (int)res,
                    commGetErrorString(res), commGetLastError(NULL));
            _exit(2);
          }
          long f = runOneRank(comm, r);
          fflush(NULL);
          _exit(f ? 1 : 0);
        }
        children[nchildren++] = pid;
        close(fds[0]);
        idPipe[r] = fds[1];
      }
      CALL(NULL, commGetUniqueId(&id));
      for (int r = 0; r < N; r++) {
        if (write(idPipe[r], &id, sizeof(id)) != (ssize_t)sizeof(id)) {
          perror("write");
          onAlarm(0);
        }
        close(idPipe[r]);
      }
      free(idPipe);
      int left = N;
      while (left > 0) {
        int status;
        pid_t pid = wait(&status);
        if (pid < 0) {
          if (errno == EINTR) continue;
          perror("wait");
          break;
        }
        int r = -1;
        for (int i = 0; i < nchildren; i++)
          if (children[i] == pid) {
            r = i;
            children[i] = 0;
          }
        if (r < 0) continue;
        left--;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
          fails++;
          if (WIFSIGNALED(status))
            fprintf(stderr, "mp_colls: FAIL: rank %d killed by signal %d\n", r, WTERMSIG(status));
          else fprintf(stderr, "mp_colls: FAIL: rank %d exited with status %d\n", r, WEXITSTATUS(status));
          if (WIFSIGNALED(status) || WEXITSTATUS(status) >= 2) {
            /* an API error: the other ranks would wait for this one until their timeout */
            for (int i = 0; i < nchildren; i++)
              if (children[i] > 0) kill(children[i], SIGKILL);
          }
        }
      }
    }
  }
  printf("mp_colls: %s\n", fails ? "FAIL" : "PASS");
  return fails ? 1 : 0;
}
