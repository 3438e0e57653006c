/* The schedule verifier and the ring / pairwise generators: every collective over many rank counts, counts,
 * channels and roots must verify; corrupted schedules must not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "debug.h"
#include "algorithms.h"

#define PIECE 64
#define FIFO (8 * PIECE)
#define CHUNK (FIFO / 2)
#define MAXR 64

static int rings[COMM_MAX_CHANNELS][MAXR];

static uint64_t rngState = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(void) {
  rngState ^= rngState << 13;
  rngState ^= rngState >> 7;
  rngState ^= rngState << 17;
  return (uint32_t)(rngState >> 11);
}

/* Channel 0: identity ring; channel 1: reversed; others: a shuffled order. */
static void setArgs(commCollArgs* a, commFunc_t f, int n, size_t count, int nCh, int root) {
  memset(a, 0, sizeof(*a));
  a->func = f;
  a->nRanks = n;
  a->count = count;
  a->eltSize = 4;
  a->root = root;
  a->isReduction = 1;
  a->nChannels = nCh;
  a->chunkElems = CHUNK;
  for (int c = 0; c < nCh; c++) {
    for (int i = 0; i < n; i++) rings[c][i] = c == 1 ? n - 1 - i : i;
    if (c >= 2) {
      for (int i = n - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint32_t)(i + 1));
        int t = rings[c][i];
        rings[c][i] = rings[c][j];
        rings[c][j] = t;
      }
    }
    a->ringRanks[c] = rings[c];
  }
}

static commSchedBuilder_t builderFor(commFunc_t f) { return f == commFuncAllToAll ? commAllToAllBuild : commRingBuild; }

static void expectOk(const commCollArgs* a, commVerifyStats* st) {
  commResult_t res = commVerifyColl(a, builderFor(a->func), FIFO, PIECE, st);
  if (res != commSuccess)
    fail_msg("%s n=%d count=%zu nCh=%d root=%d: %s", commFuncName(a->func), a->nRanks, a->count, a->nChannels, a->root,
             commLogLastWarn());
}

static void sweep(commFunc_t f) {
  for (int n = 1; n <= MAXR; n++) {
    size_t counts[5] = {0, 1, 7, (size_t)n * 3 + 1, 0};
    int nCounts = 4;
    if (n <= 8) counts[nCounts++] = (size_t)1 << 20;
    int roots[3] = {0, n - 1, n / 2};
    int nRoots = (f == commFuncBroadcast || f == commFuncReduce) ? 3 : 1;
    for (int ci = 0; ci < nCounts; ci++) {
      for (int nCh = 1; nCh <= 3; nCh++) {

        for (int ri = 0; ri < nRoots; ri++) {
          if (ri > 0 && (roots[ri] == roots[0] || (ri == 2 && roots[2] == roots[1]))) continue;
          commCollArgs a;
          setArgs(&a, f, n, counts[ci], nCh, roots[ri]);
          expectOk(&a, NULL);
        }
      }
    }
  }
}

static void test_allreduce(void** state) {
  (void)state;
  sweep(commFuncAllReduce);
}
static void test_broadcast(void** state) {
  (void)state;
  sweep(commFuncBroadcast);
}
static void test_reduce(void** state) {
  (void)state;
  sweep(commFuncReduce);
}
static void test_allgather(void** state) {
  (void)state;
  sweep(commFuncAllGather);
}
static void test_reducescatter(void** state) {
  (void)state;
  sweep(commFuncReduceScatter);
}
static void test_alltoall(void** state) {
  (void)state;
  sweep(commFuncAllToAll);
}

/* One-shot allreduce: n = 1..64 (the executor uses it up to 16), small and odd counts, with and without
 * PRE/POST; and a corrupted variant (a REDUCE step dropped) must fail. */
static void test_oneshot(void** state) {
  (void)state;
  for (int n = 1; n <= MAXR; n++) {
    /* up to CHUNK: sends first, then receives; above: one SEND_RECV per peer (a FIFO cannot hold it) */
    size_t counts[5] = {0, 1, 7, (size_t)n * 3 + 1, CHUNK + 5};
    for (int ci = 0; ci < 5; ci++) {
      for (int red = 0; red <= 1; red++) {
        commCollArgs a;
        setArgs(&a, commFuncAllReduce, n, counts[ci], 1, 0);
        a.isReduction = red;
        commResult_t res = commVerifyColl(&a, commOneShotBuild, FIFO, PIECE, NULL);
        if (res != commSuccess) fail_msg("oneshot n=%d count=%zu: %s", n, counts[ci], commLogLastWarn());
      }
    }
  }
}

static commResult_t oneShotDropLastReduce(const commCollArgs* a, commSchedule* out) {
  commResult_t res = commOneShotBuild(a, out);
  if (res == commSuccess && a->rank == 1 && out->nChannels > 0) out->channels[0].nSteps--;
  return res;
}

static void test_oneshot_corrupted(void** state) {
  (void)state;
  commCollArgs a;
  setArgs(&a, commFuncAllReduce, 4, 100, 1, 0);
  assert_int_equal(commVerifyColl(&a, oneShotDropLastReduce, FIFO, PIECE, NULL), commInternalError);
}

/* Non-reduction ops (isReduction 0) carry no flags and still verify. */
static void test_no_prepost(void** state) {
  (void)state;
  commFunc_t fs[3] = {commFuncAllReduce, commFuncReduce, commFuncReduceScatter};
  for (int i = 0; i < 3; i++) {
    for (int n = 1; n <= 9; n += 4) {
      commCollArgs a;
      setArgs(&a, fs[i], n, 1000, 2, n - 1);
      a.isReduction = 0;
      expectOk(&a, NULL);
      commSchedule s;
      assert_int_equal(commRingBuild(&a, &s), commSuccess);
      for (int c = 0; c < s.nChannels; c++)
        for (int k = 0; k < s.channels[c].nSteps; k++) assert_int_equal(s.channels[c].steps[k].flags, 0);
      commSchedFree(&s);
    }
  }
}

/* Empty schedule for count 0; no step carries more than chunkElems; the allreduce matches the table. */
static void test_shapes(void** state) {
  (void)state;
  commCollArgs a;
  commSchedule s;
  setArgs(&a, commFuncAllReduce, 4, 0, 3, 0);
  assert_int_equal(commRingBuild(&a, &s), commSuccess);
  for (int c = 0; c < 3; c++) assert_int_equal(s.channels[c].nSteps, 0);
  commSchedFree(&s);

  setArgs(&a, commFuncAllReduce, 4, 4 * CHUNK, 1, 0);
  a.rank = 2;
  assert_int_equal(commRingBuild(&a, &s), commSuccess);
  assert_int_equal(s.channels[0].nSteps, 7);
  int expect[7] = {COMM_PRIM_SEND,
                   COMM_PRIM_RECV_REDUCE_SEND,
                   COMM_PRIM_RECV_REDUCE_SEND,
                   COMM_PRIM_RECV_REDUCE_COPY_SEND,
                   COMM_PRIM_RECV_COPY_SEND,
                   COMM_PRIM_RECV_COPY_SEND,
                   COMM_PRIM_RECV};
  for (int k = 0; k < 7; k++) {
    const commStep* st = &s.channels[0].steps[k];
    assert_int_equal(st->prim, expect[k]);
    assert_int_equal(st->count, CHUNK);
    assert_int_equal(st->flags, k < 3 ? COMM_STEP_PRE : k == 3 ? COMM_STEP_PRE | COMM_STEP_POST : 0);
  }
  /* rank 2 at step 0 sends chunk 1 (c(1) = r - 1) to rank 3. */
  assert_int_equal(s.channels[0].steps[0].src.offset, 1 * CHUNK);
  assert_int_equal(s.channels[0].steps[0].sendPeer, 3);
  assert_int_equal(s.channels[0].steps[3].dst.offset, 2 * CHUNK);
  FILE* f = tmpfile();
  assert_non_null(f);
  commSchedPrint(&s, 2, f);
  assert_true(ftell(f) > 0);
  fclose(f);
  commSchedFree(&s);

  commFunc_t fs[6] = {commFuncAllReduce, commFuncBroadcast,     commFuncReduce,
                      commFuncAllGather, commFuncReduceScatter, commFuncAllToAll};
  for (int i = 0; i < 6; i++) {
    setArgs(&a, fs[i], 5, 100000, 3, 2);
    for (int r = 0; r < 5; r++) {
      a.rank = r;
      assert_int_equal(builderFor(fs[i])(&a, &s), commSuccess);
      for (int c = 0; c < s.nChannels; c++)
        for (int k = 0; k < s.channels[c].nSteps; k++) {
          const commStep* st = &s.channels[c].steps[k];
          if (st->prim != COMM_PRIM_COPY) assert_true(st->count <= CHUNK && st->recvCount <= CHUNK);
          assert_true(st->count > 0);
        }
      commSchedFree(&s);
    }
  }
  assert_string_equal(commFuncName(commFuncReduceScatter), "ReduceScatter");
  assert_string_equal(commPrimName(COMM_PRIM_RECV_REDUCE_COPY_SEND), "recvReduceCopySend");
}

/* Other FIFO geometries: pieces that do not divide the chunk, single-element pieces, two slots. A chunk must
 * take fewer pieces than the FIFO has slots (ceil(chunk/piece) < fifo/piece). */
static void test_geometries(void** state) {
  (void)state;
  struct {
    size_t fifo, piece, chunk;
  } g[3] = {{350, 100, 150}, {8, 1, 4}, {96, 48, 48}};
  commFunc_t fs[6] = {commFuncAllReduce, commFuncBroadcast,     commFuncReduce,
                      commFuncAllGather, commFuncReduceScatter, commFuncAllToAll};
  for (int gi = 0; gi < 3; gi++)
    for (int i = 0; i < 6; i++)
      for (int n = 1; n <= 12; n += 5) {
        commCollArgs a;
        setArgs(&a, fs[i], n, 1237, 3, n / 2);
        a.chunkElems = g[gi].chunk;
        commResult_t res = commVerifyColl(&a, builderFor(fs[i]), g[gi].fifo, g[gi].piece, NULL);
        if (res != commSuccess)
          fail_msg("%s n=%d fifo %zu piece %zu chunk %zu: %s", commFuncName(fs[i]), n, g[gi].fifo, g[gi].piece,
                   g[gi].chunk, commLogLastWarn());
      }
}

/* Ring and alltoall cut every part, slice and chunk on 16 bytes of elements (commSplitPart), whatever the
 * channel count, so the steps of a 16-byte aligned buffer (or rank block) stay aligned (the CUDA
 * executor's vector path);
 * the schedules stay valid (the verifier) and no step exceeds chunkElems. Odd counts and channel counts
 * that do not divide them, every element size; a chunk too small for two units falls back to unit 1. */
static void test_aligned_parts(void** state) {
  (void)state;
  const commFunc_t fs[] = {commFuncAllReduce, commFuncAllGather, commFuncReduceScatter, commFuncBroadcast,
                           commFuncAllToAll};
  const size_t counts[] = {4 * CHUNK * 3 + 7, 12345, 1000};
  const size_t elts[] = {1, 2, 4, 8};
  for (size_t fi = 0; fi < sizeof(fs) / sizeof(fs[0]); fi++)
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
      for (size_t ei = 0; ei < sizeof(elts) / sizeof(elts[0]); ei++)
        for (int nCh = 3; nCh <= 12; nCh += 9) {
          commCollArgs a;
          commSchedule s;
          setArgs(&a, fs[fi], 4, counts[ci], nCh, 1);
          a.eltSize = elts[ei];
          a.rank = 2;
          const size_t unit = commSplitUnit(a.eltSize, a.chunkElems);
          assert_int_equal(unit, 16 / a.eltSize);
          assert_int_equal(builderFor(a.func)(&a, &s), commSuccess);
          for (int c = 0; c < s.nChannels; c++)
            for (int i = 0; i < s.channels[c].nSteps; i++) {
              const commStep* st = &s.channels[c].steps[i];
              /* (offsets within a rank's block: allgather, reducescatter and alltoall have one per rank) */
              if (st->src.offset % a.count % unit || st->dst.offset % a.count % unit ||
                  (st->prim != COMM_PRIM_COPY && st->count > a.chunkElems)) /* (a local copy needs no FIFO) */
                fail_msg("%s eltSize %zu count %zu channels %d: step %d of channel %d at src %zu dst %zu count %zu",
                         commFuncName(a.func), a.eltSize, a.count, nCh, i, c, st->src.offset, st->dst.offset,
                         st->count);
            }
          commSchedFree(&s);
          if (a.eltSize == 4) expectOk(&a, NULL);
        }
  /* Parts of a small chunk: unit 1 (16 bytes of int8 would leave no room for two units). */
  assert_int_equal(commSplitUnit(1, 31), 1);
  assert_int_equal(commSplitUnit(1, 32), 16);
  size_t off, len;
  commSplitPart(10, 4, 3, 4, &off, &len); /* units {4,4,2}: parts 4, 4, 2, 0 */
  assert_int_equal(off, 10);
  assert_int_equal(len, 0);
  commSplitPart(10, 4, 2, 4, &off, &len);
  assert_int_equal(off, 8);
  assert_int_equal(len, 2);
  assert_int_equal(commSplitParts(0, 4, 3), 0);
  assert_int_equal(commSplitParts(13, 4, 2), 2);
}

/* Stats of ring allreduce: each rank sends 2(n-1)/n of the buffer. */
static void test_stats(void** state) {
  (void)state;
  commCollArgs a;
  commVerifyStats st;
  setArgs(&a, commFuncAllReduce, 4, 4096, 1, 0);
  expectOk(&a, &st);
  assert_int_equal(st.totalBytesSent, 2 * 3 * 4096 * 4);
  assert_int_equal(st.maxBytesSent, 2 * 3 * 1024 * 4);
  assert_int_equal(st.maxStepsPerChannel, 7 * 4); /* 4 slices of n * chunkElems */
}

/* ---------------------------------------------------------------------------------------------------- */
/* Negative tests: corrupted schedules must fail. */

static int corruptKind;
static int corruptRank;

static void removeStep(commChannelSched* c, int k) {
  memmove(&c->steps[k], &c->steps[k + 1], (size_t)(c->nSteps - k - 1) * sizeof(commStep));
  c->nSteps--;
}

static commResult_t corruptBuild(const commCollArgs* a, commSchedule* s) {
  commResult_t res = builderFor(a->func)(a, s);
  if (res != commSuccess || a->rank != corruptRank) return res;
  commChannelSched* c = &s->channels[0];
  switch (corruptKind) {
    case 0: /* drop one step */ removeStep(c, c->nSteps / 2); break;
    case 1: /* swap peers of a step that has both */
      for (int k = 0; k < c->nSteps; k++) {
        if (c->steps[k].sendPeer >= 0 && c->steps[k].recvPeer >= 0 && c->steps[k].sendPeer != c->steps[k].recvPeer) {
          int32_t t = c->steps[k].sendPeer;
          c->steps[k].sendPeer = c->steps[k].recvPeer;
          c->steps[k].recvPeer = t;
          break;
        }
      }
      break;
    case 2: /* remove a PRE flag */
      for (int k = 0; k < c->nSteps; k++) {
        if (c->steps[k].flags & COMM_STEP_PRE) {
          c->steps[k].flags &= (uint8_t)~COMM_STEP_PRE;
          break;
        }
      }
      break;
    case 3: /* remove a POST flag */
      for (int k = 0; k < c->nSteps; k++) {
        if (c->steps[k].flags & COMM_STEP_POST) {
          c->steps[k].flags &= (uint8_t)~COMM_STEP_POST;
          break;
        }
      }
      break;
    case 4: /* read the wrong part of the input */ c->steps[0].src.offset += 1; break;
    case 5: /* write past the end of the output */ c->steps[c->nSteps - 1].dst.offset += a->count; break;
    case 6: /* turn a recvReduceSend into a recvCopySend: contributions lost */
      for (int k = 0; k < c->nSteps; k++) {
        if (c->steps[k].prim == COMM_PRIM_RECV_REDUCE_SEND) {
          c->steps[k].prim = COMM_PRIM_RECV_COPY_SEND;
          c->steps[k].flags = 0;
          break;
        }
      }
      break;
    case 7: /* duplicate a step: double counting or leftover data */
      res = commSchedAdd(s, 0, &c->steps[c->nSteps - 1]);
      break;
    case 8: /* send count differs from the receiver's */ c->steps[0].count -= 1; break;
  }
  return res;
}

static void expectFail(commFunc_t f, int n, size_t count, int kind, int rank, const char* needle) {
  commCollArgs a;
  setArgs(&a, f, n, count, 1, 0);
  corruptKind = kind;
  corruptRank = rank;
  commLogClearLastWarn();
  commResult_t res = commVerifyColl(&a, corruptBuild, FIFO, PIECE, NULL);
  if (res == commSuccess) fail_msg("corruption %d of %s passed verification", kind, commFuncName(f));
  if (needle && strstr(commLogLastWarn(), needle) == NULL)
    fail_msg("corruption %d of %s: expected '%s' in '%s'", kind, commFuncName(f), needle, commLogLastWarn());
}

static void test_corrupted(void** state) {
  (void)state;
  expectFail(commFuncAllReduce, 4, 1000, 0, 1, NULL);
  expectFail(commFuncAllReduce, 5, 1000, 1, 2, NULL);
  expectFail(commFuncAllReduce, 4, 1000, 2, 0, "PRE");
  expectFail(commFuncAllReduce, 4, 1000, 3, 3, "POST");
  expectFail(commFuncAllReduce, 4, 1000, 4, 0, NULL);
  expectFail(commFuncAllReduce, 4, 1000, 5, 1, "out of bounds");
  expectFail(commFuncAllReduce, 6, 1000, 6, 2, NULL);
  expectFail(commFuncAllReduce, 4, 1000, 7, 0, NULL);
  expectFail(commFuncAllReduce, 4, 1000, 8, 0, "mismatch");
  expectFail(commFuncReduceScatter, 4, 1000, 2, 1, "PRE");
  expectFail(commFuncReduce, 4, 1000, 6, 2, NULL);
  expectFail(commFuncAllGather, 4, 1000, 0, 2, NULL);
  expectFail(commFuncBroadcast, 4, 1000, 1, 1, NULL);
  expectFail(commFuncAllToAll, 4, 1000, 0, 3, NULL);
  expectFail(commFuncAllToAll, 4, 1000, 8, 3, NULL);
}

/* Every rank sends its whole buffer to the next rank before receiving from the previous one. */
static commResult_t unsplitBuild(const commCollArgs* a, commSchedule* s) {
  commResult_t res = commSchedInit(s, 1);
  if (res != commSuccess) return res;
  commStep st;
  memset(&st, 0, sizeof(st));
  st.prim = COMM_PRIM_SEND;
  st.sendPeer = (a->rank + 1) % a->nRanks;
  st.recvPeer = -1;
  st.src.buf = COMM_BUF_INPUT;
  st.count = st.recvCount = a->count;
  if ((res = commSchedAdd(s, 0, &st)) != commSuccess) return res;
  st.prim = COMM_PRIM_RECV;
  st.sendPeer = -1;
  st.recvPeer = (a->rank + a->nRanks - 1) % a->nRanks;
  st.dst.buf = COMM_BUF_OUTPUT;
  return commSchedAdd(s, 0, &st);
}

static void test_deadlock(void** state) {
  (void)state;
  commCollArgs a;
  setArgs(&a, commFuncAllReduce, 4, FIFO * 4, 1, 0);
  a.isReduction = 0;
  commLogClearLastWarn();
  assert_int_not_equal(commVerifyColl(&a, unsplitBuild, FIFO, PIECE, NULL), commSuccess);
  assert_non_null(strstr(commLogLastWarn(), "deadlock"));
  /* The ring itself with chunks larger than the FIFO deadlocks in its first (send-only) step. */
  setArgs(&a, commFuncAllReduce, 4, FIFO * 8, 1, 0);
  a.chunkElems = FIFO * 2;
  commLogClearLastWarn();
  assert_int_not_equal(commVerifyColl(&a, commRingBuild, FIFO, PIECE, NULL), commSuccess);
  assert_non_null(strstr(commLogLastWarn(), "deadlock"));
  /* A chunk must leave at least one free slot: chunk == FIFO deadlocks the ring's recvReduceSend steps
   * (every FIFO full, every rank waiting for space), chunk == FIFO - piece does not. */
  setArgs(&a, commFuncAllReduce, 3, FIFO * 6, 1, 0);
  a.chunkElems = FIFO;
  commLogClearLastWarn();
  assert_int_not_equal(commVerifyColl(&a, commRingBuild, FIFO, PIECE, NULL), commSuccess);
  assert_non_null(strstr(commLogLastWarn(), "deadlock"));
  a.chunkElems = FIFO - PIECE;
  expectOk(&a, NULL);
  /* Broadcast: a send-only root step larger than the FIFO is fine when the receiver drains it. */
  setArgs(&a, commFuncBroadcast, 4, FIFO * 8, 1, 0);
  a.chunkElems = FIFO * 2;
  expectOk(&a, NULL);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Grouped send/recv */

typedef struct {
  int n;
  commP2pOp* ops[MAXR];
  int nOps[MAXR];
} p2pSet;

/* Random matched set: between each ordered pair up to 2 messages (self included); each rank's op list is a
 * random interleaving of its per-(peer, direction) queues, which keeps the matching order. */
static void p2pRandom(p2pSet* s, int n) {
  s->n = n;
  int maxOps = 4 * n;
  for (int r = 0; r < n; r++) {
    s->ops[r] = calloc((size_t)maxOps, sizeof(commP2pOp));
    assert_non_null(s->ops[r]);
    s->nOps[r] = 0;
  }
  /* queues[r][2*p + dir] of counts */
  size_t* q = calloc((size_t)n * (size_t)n * 2 * 2, sizeof(size_t));
  int* ql = calloc((size_t)n * (size_t)n * 2, sizeof(int));
  assert_non_null(q);
  assert_non_null(ql);
  for (int p = 0; p < n; p++)
    for (int d = 0; d < n; d++) {
      int m = (int)(rnd() % 3);
      for (int i = 0; i < m; i++) {
        size_t cnt = rnd() % 4 == 0 ? 0 : rnd() % 700;
        size_t sq = ((size_t)p * (size_t)n + (size_t)d) * 2 + 0; /* send queue of p to d */
        size_t rq = ((size_t)d * (size_t)n + (size_t)p) * 2 + 1; /* recv queue of d from p */
        q[sq * 2 + (size_t)ql[sq]++] = cnt;
        q[rq * 2 + (size_t)ql[rq]++] = cnt;
      }
    }
  for (int r = 0; r < n; r++) {
    int pos[2 * MAXR] = {0};
    for (;;) {
      int avail = 0;
      for (int k = 0; k < 2 * n; k++) avail += ql[(size_t)r * (size_t)n * 2 + (size_t)k] - pos[k];
      if (avail == 0) break;
      int pick = (int)(rnd() % (uint32_t)avail);
      for (int k = 0; k < 2 * n; k++) {
        size_t qi = (size_t)r * (size_t)n * 2 + (size_t)k;
        int left = ql[qi] - pos[k];
        if (pick < left) {
          commP2pOp* o = &s->ops[r][s->nOps[r]];
          o->peer = k / 2;
          o->isSend = k % 2 == 0;
          o->count = q[qi * 2 + (size_t)pos[k]++];
          o->buf = (uint32_t)(COMM_BUF_USER0 + s->nOps[r]);
          s->nOps[r]++;
          break;
        }
        pick -= left;
      }
    }
  }
  free(q);
  free(ql);
}

static void p2pFree(p2pSet* s) {
  for (int r = 0; r < s->n; r++) free(s->ops[r]);
}

/* Each SEND_RECV step pairs a send to r+k with a recv from r-k, k non-decreasing, self ops first as copies,
 * and the j-th send of p to q has the count of the j-th recv of q from p. */
static void p2pCheckPairing(const p2pSet* s) {
  int n = s->n;
  commSchedule* sc = calloc((size_t)n, sizeof(commSchedule));
  assert_non_null(sc);
  for (int r = 0; r < n; r++) assert_int_equal(commP2pBuild(r, n, s->ops[r], s->nOps[r], &sc[r]), commSuccess);
  for (int r = 0; r < n; r++) {
    const commChannelSched* c = &sc[r].channels[0];
    int lastK = 0;
    int maxBuf = 1;
    for (int i = 0; i < s->nOps[r]; i++)
      if ((int)s->ops[r][i].buf > maxBuf) maxBuf = (int)s->ops[r][i].buf;
    assert_int_equal(sc[r].nBufs, maxBuf + 1);
    for (int k = 0; k < c->nSteps; k++) {
      const commStep* st = &c->steps[k];
      if (st->prim == COMM_PRIM_COPY) {
        assert_int_equal(lastK, 0);
        continue;
      }
      assert_int_equal(st->prim, COMM_PRIM_SEND_RECV);
      int ks = st->sendPeer >= 0 ? (st->sendPeer - r + n) % n : -1;
      int kr = st->recvPeer >= 0 ? (r - st->recvPeer + n) % n : -1;
      assert_true(ks >= 0 || kr >= 0);
      if (ks >= 0 && kr >= 0) assert_int_equal(ks, kr);
      int kk = ks >= 0 ? ks : kr;
      assert_true(kk >= 1 && kk >= lastK);
      lastK = kk;
    }
  }
  for (int p = 0; p < n; p++)
    for (int q = 0; q < n; q++) {
      if (p == q) continue;
      /* sequences of counts p -> q in p's schedule and in q's */
      size_t a[2 * MAXR], b[2 * MAXR];
      int na = 0, nb = 0;
      for (int k = 0; k < sc[p].channels[0].nSteps; k++) {
        const commStep* st = &sc[p].channels[0].steps[k];
        if (st->prim == COMM_PRIM_SEND_RECV && st->sendPeer == q) a[na++] = st->count;
      }
      for (int k = 0; k < sc[q].channels[0].nSteps; k++) {
        const commStep* st = &sc[q].channels[0].steps[k];
        if (st->prim == COMM_PRIM_SEND_RECV && st->recvPeer == p) b[nb++] = st->recvCount;
      }
      assert_int_equal(na, nb);
      for (int i = 0; i < na; i++) assert_int_equal(a[i], b[i]);
    }
  for (int r = 0; r < n; r++) commSchedFree(&sc[r]);
  free(sc);
}

static void test_p2p(void** state) {
  (void)state;
  for (int iter = 0; iter < 60; iter++) {
    int n = 1 + (int)(rnd() % 16);
    if (iter == 59) n = MAXR;
    p2pSet s;
    p2pRandom(&s, n);
    p2pCheckPairing(&s);
    commResult_t res = commVerifyP2p(n, (const commP2pOp* const*)s.ops, s.nOps, commP2pBuild, FIFO, PIECE, NULL);
    if (res != commSuccess) fail_msg("p2p n=%d: %s", n, commLogLastWarn());
    p2pFree(&s);
  }
}

static void test_p2p_negative(void** state) {
  (void)state;
  int n = 3;
  commP2pOp o0[2] = {{1, 1, 100, COMM_BUF_USER0}, {2, 0, 50, COMM_BUF_USER0 + 1}};
  commP2pOp o1[1] = {{0, 0, 100, COMM_BUF_USER0}};
  commP2pOp o2[1] = {{0, 1, 50, COMM_BUF_USER0}};
  commP2pOp* ops[3] = {o0, o1, o2};
  int nOps[3] = {2, 1, 1};
  assert_int_equal(commVerifyP2p(n, (const commP2pOp* const*)ops, nOps, commP2pBuild, FIFO, PIECE, NULL), commSuccess);
  o1[0].count = 99; /* receiver expects fewer elements */
  assert_int_not_equal(commVerifyP2p(n, (const commP2pOp* const*)ops, nOps, commP2pBuild, FIFO, PIECE, NULL),
                       commSuccess);
  o1[0].count = 100;
  nOps[2] = 0; /* a recv without its send */
  assert_int_not_equal(commVerifyP2p(n, (const commP2pOp* const*)ops, nOps, commP2pBuild, FIFO, PIECE, NULL),
                       commSuccess);
  nOps[2] = 1;
  /* self send without a self recv is refused by the builder */
  commP2pOp self[1] = {{1, 1, 10, COMM_BUF_USER0}};
  commSchedule sc;
  assert_int_not_equal(commP2pBuild(1, 3, self, 1, &sc), commSuccess);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shapes),        cmocka_unit_test(test_stats),
      cmocka_unit_test(test_geometries),    cmocka_unit_test(test_no_prepost),
      cmocka_unit_test(test_corrupted),     cmocka_unit_test(test_deadlock),
      cmocka_unit_test(test_p2p),           cmocka_unit_test(test_p2p_negative),
      cmocka_unit_test(test_allreduce),     cmocka_unit_test(test_broadcast),
      cmocka_unit_test(test_reduce),        cmocka_unit_test(test_allgather),
      cmocka_unit_test(test_reducescatter), cmocka_unit_test(test_alltoall),
      cmocka_unit_test(test_oneshot),       cmocka_unit_test(test_oneshot_corrupted),
      cmocka_unit_test(test_aligned_parts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
