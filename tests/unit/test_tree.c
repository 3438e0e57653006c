/* The tree generator (algorithms/tree.c): double binary tree allreduce, single-tree reduce and broadcast.
 * Every rank count 1..64 with small, odd, uneven and many-chunk counts, 1..4 channels and several roots must
 * pass the symbolic verifier (exact contributions, PRE/POST once, no deadlock with bounded FIFOs); spot
 * checks up to 1,024 ranks; the critical path is logarithmic; the final value of every element is computed
 * at one rank only (bit-identical results); the schedule is safe in place; wrong uses are refused. */
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

/* The verifier's FIFO geometry used by test_verify.c: 8 slots of 64 elements, a send step at most half. */
#define PIECE 64
#define FIFO (8 * PIECE)
#define CHUNK (FIFO / 2)

static void setArgs(commCollArgs* a, commFunc_t f, int n, size_t count, int nCh, int root) {
  memset(a, 0, sizeof(*a));
  a->func = f;
  a->nRanks = n;
  a->count = count;
  a->eltSize = 4;
  a->root = root;
  a->isReduction = f != commFuncBroadcast;
  a->nChannels = nCh;
  a->chunkElems = CHUNK;
}

static void expectOk(const commCollArgs* a, commVerifyStats* st) {
  commResult_t res = commVerifyColl(a, commTreeBuild, FIFO, PIECE, st);
  if (res != commSuccess)
    fail_msg("%s n=%d count=%zu nCh=%d root=%d: %s", commFuncName(a->func), a->nRanks, a->count, a->nChannels, a->root,
             commLogLastWarn());
}

/* n = 1..64; counts 0, 1, 7 (odd), 3n+1 (not a multiple of n nor of the channels), 20 chunks and 48 chunks
 * (more chunks per channel than the deepest lookahead, 12); 1..4 channels; roots 0, n-1 and n/2 for the
 * rooted collectives. */
static void sweep(commFunc_t f) {
  int rooted = f != commFuncAllReduce;
  for (int n = 1; n <= 64; n++) {
    size_t counts[6] = {0, 1, 7, (size_t)n * 3 + 1, 20 * CHUNK, 48 * CHUNK};
    int nCounts = 6;
    int roots[3] = {0, n - 1, n / 2};
    for (int ci = 0; ci < nCounts; ci++) {
      for (int nCh = 1; nCh <= 4; nCh++) {
        for (int ri = 0; ri < (rooted ? 3 : 1); ri++) {
          if ((ri == 1 && roots[1] == roots[0]) || (ri == 2 && (roots[2] == roots[0] || roots[2] == roots[1])))
            continue;
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
static void test_reduce(void** state) {
  (void)state;
  sweep(commFuncReduce);
}
static void test_broadcast(void** state) {
  (void)state;
  sweep(commFuncBroadcast);
}

/* Large communicators: allreduce at 128, 256, 1000 and 1024 ranks, reduce and broadcast at 1000, with a
 * count of several chunks per channel and an uneven split. */
static void test_large(void** state) {
  (void)state;
  int ns[4] = {128, 256, 1000, 1024};
  for (int i = 0; i < 4; i++) {
    commCollArgs a;
    setArgs(&a, commFuncAllReduce, ns[i], 10 * CHUNK + 3, 2, 0);
    expectOk(&a, NULL);
  }
  commCollArgs a;
  setArgs(&a, commFuncReduce, 1000, 6 * CHUNK + 5, 2, 617);
  expectOk(&a, NULL);
  setArgs(&a, commFuncBroadcast, 1000, 6 * CHUNK + 5, 2, 999);
  expectOk(&a, NULL);
}

/* Operations without pre/post processing (isReduction 0) carry no flags and still verify. */
static void test_no_prepost(void** state) {
  (void)state;
  commFunc_t fs[2] = {commFuncAllReduce, commFuncReduce};
  for (int i = 0; i < 2; i++) {
    for (int n = 1; n <= 11; n += 5) {
      commCollArgs a;
      setArgs(&a, fs[i], n, 5 * CHUNK + 1, 2, n - 1);
      a.isReduction = 0;
      expectOk(&a, NULL);
      for (int r = 0; r < n; r++) {
        commSchedule s;
        a.rank = r;
        assert_int_equal(commTreeBuild(&a, &s), commSuccess);
        for (int c = 0; c < s.nChannels; c++)
          for (int k = 0; k < s.channels[c].nSteps; k++) assert_int_equal(s.channels[c].steps[k].flags, 0);
        commSchedFree(&s);
      }
    }
  }
}

/* Other FIFO geometries (those of test_verify.c): pieces that do not divide the chunk, one-element pieces,
 * two slots, and a chunk of two pieces in a three-slot FIFO (the tightest case of the lookahead rule). */
static void test_geometries(void** state) {
  (void)state;
  struct {
    size_t fifo, piece, chunk;
  } g[4] = {{350, 100, 150}, {8, 1, 4}, {96, 48, 48}, {300, 100, 200}};
  commFunc_t fs[3] = {commFuncAllReduce, commFuncReduce, commFuncBroadcast};
  for (int gi = 0; gi < 4; gi++)
    for (int i = 0; i < 3; i++)
      for (int n = 2; n <= 34; n += 4) {
        commCollArgs a;
        setArgs(&a, fs[i], n, 40 * g[gi].chunk + 7, 2, n / 2);
        a.chunkElems = g[gi].chunk;
        commResult_t res = commVerifyColl(&a, commTreeBuild, g[gi].fifo, g[gi].piece, NULL);
        if (res != commSuccess)
          fail_msg("%s n=%d fifo %zu piece %zu chunk %zu: %s", commFuncName(fs[i]), n, g[gi].fifo, g[gi].piece,
                   g[gi].chunk, commLogLastWarn());
      }
}

/* Channels, step sizes and step shapes. */
static void test_shapes(void** state) {
  (void)state;
  commCollArgs a;
  commSchedule s;
  /* Allreduce uses one tree on one channel, else an even number of channels: 3 -> 4, 32 stays;
   * reduce/broadcast keep theirs. */
  int ask[4] = {1, 2, 3, COMM_MAX_CHANNELS}, got[4] = {1, 2, 4, COMM_MAX_CHANNELS};
  for (int i = 0; i < 4; i++) {
    setArgs(&a, commFuncAllReduce, 6, 1000, ask[i], 0);
    assert_int_equal(commTreeBuild(&a, &s), commSuccess);
    assert_int_equal(s.nChannels, got[i]);
    commSchedFree(&s);
    setArgs(&a, commFuncBroadcast, 6, 1000, ask[i], 0);
    assert_int_equal(commTreeBuild(&a, &s), commSuccess);
    assert_int_equal(s.nChannels, ask[i]);
    commSchedFree(&s);
  }
  /* Count 0: no steps. */
  commFunc_t fs[3] = {commFuncAllReduce, commFuncReduce, commFuncBroadcast};
  for (int i = 0; i < 3; i++) {
    setArgs(&a, fs[i], 5, 0, 3, 1);
    for (int r = 0; r < 5; r++) {
      a.rank = r;
      assert_int_equal(commTreeBuild(&a, &s), commSuccess);
      for (int c = 0; c < s.nChannels; c++) assert_int_equal(s.channels[c].nSteps, 0);
      commSchedFree(&s);
    }
  }
  /* One rank: one COPY per channel part, PRE|POST for the reductions only. */
  for (int i = 0; i < 3; i++) {
    setArgs(&a, fs[i], 1, 100 * CHUNK, 2, 0);
    assert_int_equal(commTreeBuild(&a, &s), commSuccess);
    for (int c = 0; c < s.nChannels; c++) {
      assert_int_equal(s.channels[c].nSteps, 1);
      assert_int_equal(s.channels[c].steps[0].prim, COMM_PRIM_COPY);
      assert_int_equal(s.channels[c].steps[0].count, 50 * CHUNK);
      assert_int_equal(s.channels[c].steps[0].flags, fs[i] == commFuncBroadcast ? 0 : COMM_STEP_PRE | COMM_STEP_POST);
    }
    commSchedFree(&s);
  }
  /* Every step carries at least one element and at most chunkElems, in every collective. */
  for (int i = 0; i < 3; i++) {
    setArgs(&a, fs[i], 13, 100000, 3, 4);
    for (int r = 0; r < 13; r++) {
      a.rank = r;
      assert_int_equal(commTreeBuild(&a, &s), commSuccess);
      for (int c = 0; c < s.nChannels; c++)
        for (int k = 0; k < s.channels[c].nSteps; k++) {
          const commStep* st = &s.channels[c].steps[k];
          assert_true(st->count >= 1 && st->count <= CHUNK && st->recvCount == st->count);
        }
      commSchedFree(&s);
    }
  }
  /* n = 8, tree 0 (channel 0) is the bit tree on ranks: rank 4 is interior (children 2 and 6, parent 0, depth
   * 1: lookahead 2), rank 0 the root (one child, 4). Eight full chunks per channel (16 * CHUNK over 2
   * channels: enough chunks at depth 3 not to be cut smaller). */
  setArgs(&a, commFuncAllReduce, 8, 16 * CHUNK, 2, 0);
  a.rank = 4;
  assert_int_equal(commTreeBuild(&a, &s), commSuccess);
  {
    /* up(0) up(1), then up(j) down(j-2), then down(6) down(7); up and down are 2 steps each. */
    const commChannelSched* c = &s.channels[0];
    assert_int_equal(c->nSteps, 8 * 4);
    int k = 0;
    for (int j = 0; j < 8 + 2; j++) {
      if (j < 8) {
        const commStep* st = &c->steps[k++];
        assert_int_equal(st->prim, COMM_PRIM_RECV_REDUCE_COPY);
        assert_int_equal(st->recvPeer, 2);
        assert_int_equal(st->flags, COMM_STEP_PRE);
        assert_int_equal(st->src.buf, COMM_BUF_INPUT);
        assert_int_equal(st->src.offset, (size_t)j * CHUNK);
        assert_int_equal(st->dst.buf, COMM_BUF_OUTPUT);
        assert_int_equal(st->dst.offset, (size_t)j * CHUNK);
        st = &c->steps[k++];
        assert_int_equal(st->prim, COMM_PRIM_RECV_REDUCE_SEND);
        assert_int_equal(st->recvPeer, 6);
        assert_int_equal(st->sendPeer, 0);
        assert_int_equal(st->flags, 0);
        assert_int_equal(st->src.buf, COMM_BUF_OUTPUT);
        assert_int_equal(st->src.offset, (size_t)j * CHUNK);
      }
      if (j >= 2) {
        const commStep* st = &c->steps[k++];
        assert_int_equal(st->prim, COMM_PRIM_RECV_COPY_SEND);
        assert_int_equal(st->recvPeer, 0);
        assert_int_equal(st->sendPeer, 2);
        assert_int_equal(st->dst.offset, (size_t)(j - 2) * CHUNK);
        st = &c->steps[k++];
        assert_int_equal(st->prim, COMM_PRIM_SEND);
        assert_int_equal(st->sendPeer, 6);
        assert_int_equal(st->src.buf, COMM_BUF_OUTPUT);
        assert_int_equal(st->src.offset, (size_t)(j - 2) * CHUNK);
      }
      for (int q = 0; q < k; q++) assert_int_equal(c->steps[q].count, CHUNK);
    }
  }
  /* Rank 4 is a leaf in tree 1 (channel 1): it sends 2 x depth + 1 chunks before its first receive. */
  {
    const commChannelSched* c = &s.channels[1];
    int ups = 0;
    while (ups < c->nSteps && c->steps[ups].prim == COMM_PRIM_SEND) ups++;
    int p, c0, c1, depth = 0;
    commDoubleTree(8, 1, 4, &p, &c0, &c1);
    assert_true(c0 < 0 && c1 < 0);
    for (; p >= 0; commDoubleTree(8, 1, p, &p, &c0, &c1)) depth++;
    assert_int_equal(depth, 3);
    assert_int_equal(ups, 2 * depth + 1);
    assert_int_equal(c->nSteps, 2 * 8);
    for (int k = 0; k < c->nSteps; k++) {
      const commStep* st = &c->steps[k];
      assert_true(st->prim == COMM_PRIM_SEND || st->prim == COMM_PRIM_RECV);
      assert_int_equal(st->flags, st->prim == COMM_PRIM_SEND ? COMM_STEP_PRE : 0);
    }
  }
  commSchedFree(&s);
  /* The root of tree 0 at n = 8 is rank 0 with one child (4): one reduction, PRE|POST, then a SEND down. */
  a.rank = 0;
  assert_int_equal(commTreeBuild(&a, &s), commSuccess);
  assert_int_equal(s.channels[0].steps[0].prim, COMM_PRIM_RECV_REDUCE_COPY);
  assert_int_equal(s.channels[0].steps[0].flags, COMM_STEP_PRE | COMM_STEP_POST);
  assert_int_equal(s.channels[0].steps[1].prim, COMM_PRIM_SEND);
  assert_int_equal(s.channels[0].steps[1].sendPeer, 4);
  commSchedFree(&s);
  /* Broadcast at its root: COPY_SEND from input to output and the child. Reduce: a non-root rank with two
   * children keeps partial sums in scratch, one chunk per channel. */
  setArgs(&a, commFuncBroadcast, 8, 3 * CHUNK, 1, 5);
  a.rank = 5;
  assert_int_equal(commTreeBuild(&a, &s), commSuccess);
  assert_int_equal(s.channels[0].steps[0].prim, COMM_PRIM_COPY_SEND);
  assert_int_equal(s.channels[0].steps[0].src.buf, COMM_BUF_INPUT);
  assert_int_equal(s.channels[0].steps[0].dst.buf, COMM_BUF_OUTPUT);
  commSchedFree(&s);
  setArgs(&a, commFuncReduce, 8, 100 * CHUNK, 3, 5);
  a.rank = (5 + 4) % 8; /* position 4: children at positions 2 and 6 */
  assert_int_equal(commTreeBuild(&a, &s), commSuccess);
  assert_int_equal(s.nBufs, COMM_BUF_SCRATCH + 1);
  assert_int_equal(s.scratchElems, 3 * CHUNK);
  commSchedFree(&s);
}

/* The value every rank ends with is computed once: on each channel only the tree's root applies POST (the
 * verifier demands POST on every output element, so all others received a copy of the root's value), and
 * the root of tree 0 and of tree 1 differ. */
static void test_single_final_value(void** state) {
  (void)state;
  for (int n = 2; n <= 40; n++) {
    commCollArgs a;
    setArgs(&a, commFuncAllReduce, n, 7 * CHUNK, 4, 0);
    int postRank[4] = {-1, -1, -1, -1};
    for (int r = 0; r < n; r++) {
      commSchedule s;
      a.rank = r;
      assert_int_equal(commTreeBuild(&a, &s), commSuccess);
      for (int c = 0; c < s.nChannels; c++)
        for (int k = 0; k < s.channels[c].nSteps; k++) {
          if (!(s.channels[c].steps[k].flags & COMM_STEP_POST)) continue;
          assert_true(postRank[c] == -1 || postRank[c] == r);
          postRank[c] = r;
        }
      commSchedFree(&s);
    }
    for (int c = 0; c < 4; c++) assert_int_equal(postRank[c], commDoubleTreeRoot(n, c % 2));
    assert_int_not_equal(postRank[0], postRank[1]);
  }
}

/* In place (input == output): on every channel, no step reads input elements that an earlier step of the
 * same rank wrote into output (channels own disjoint parts, so order across channels does not matter). */
static void test_in_place(void** state) {
  (void)state;
  commFunc_t fs[3] = {commFuncAllReduce, commFuncReduce, commFuncBroadcast};
  for (int i = 0; i < 3; i++) {
    for (int n = 2; n <= 20; n += 3) {
      commCollArgs a;
      setArgs(&a, fs[i], n, 30 * CHUNK + 11, 3, n - 1);
      for (int r = 0; r < n; r++) {
        commSchedule s;
        a.rank = r;
        assert_int_equal(commTreeBuild(&a, &s), commSuccess);
        for (int c = 0; c < s.nChannels; c++) {
          const commChannelSched* cs = &s.channels[c];
          for (int k = 0; k < cs->nSteps; k++) {
            const commStep* rd = &cs->steps[k];
            if (rd->src.buf != COMM_BUF_INPUT || rd->prim == COMM_PRIM_RECV || rd->prim == COMM_PRIM_RECV_COPY_SEND)
              continue;
            for (int j = 0; j < k; j++) {
              const commStep* wr = &cs->steps[j];
              int writes = wr->dst.buf == COMM_BUF_OUTPUT && wr->prim != COMM_PRIM_SEND &&
                           wr->prim != COMM_PRIM_RECV_REDUCE_SEND;
              int overlap = wr->dst.offset < rd->src.offset + rd->count && rd->src.offset < wr->dst.offset + wr->count;
              if (writes && overlap)
                fail_msg("%s n=%d rank %d ch %d: step %d reads input that step %d wrote to output", commFuncName(fs[i]),
                         n, r, c, k, j);
            }
          }
        }
        commSchedFree(&s);
      }
    }
  }
}

/* The critical path: with unbounded FIFOs, each rank runs at most one step per round and a message sent in
 * round t can be received from round t+1. Returns the rounds until every rank has finished channel 0. */
static int criticalPath(const commCollArgs* base) {
  int n = base->nRanks;
  commSchedule* s = calloc((size_t)n, sizeof(commSchedule));
  int* at = calloc((size_t)n, sizeof(int));
  int* sentRound = malloc((size_t)n * (size_t)n * sizeof(int)); /* one message per connection at most */
  assert_true(s && at && sentRound);
  for (size_t i = 0; i < (size_t)n * (size_t)n; i++) sentRound[i] = -1;
  for (int r = 0; r < n; r++) {
    commCollArgs a = *base;
    a.rank = r;
    assert_int_equal(commTreeBuild(&a, &s[r]), commSuccess);
  }
  int round = 0, left = 1;
  while (left) {
    round++;
    left = 0;
    for (int r = 0; r < n; r++) {
      const commChannelSched* c = &s[r].channels[0];
      if (at[r] >= c->nSteps) continue;
      const commStep* st = &c->steps[at[r]];
      int hasRecv = st->prim == COMM_PRIM_RECV || st->prim == COMM_PRIM_RECV_REDUCE_SEND ||
                    st->prim == COMM_PRIM_RECV_COPY_SEND || st->prim == COMM_PRIM_RECV_REDUCE_COPY ||
                    st->prim == COMM_PRIM_RECV_REDUCE_COPY_SEND;
      if (hasRecv) {
        int* m = &sentRound[(size_t)st->recvPeer * (size_t)n + (size_t)r];
        if (*m < 0 || *m >= round) {
          left = 1;
          continue;
        }
        *m = -2; /* consumed */
      }
      if (st->sendPeer >= 0) {
        int* m = &sentRound[(size_t)r * (size_t)n + (size_t)st->sendPeer];
        assert_int_equal(*m, -1); /* a count of one chunk: one message per connection */
        *m = round;
      }
      if (++at[r] < c->nSteps) left = 1;
    }
    assert_true(round < 100000);
  }
  for (int r = 0; r < n; r++) commSchedFree(&s[r]);
  free(s);
  free(at);
  free(sentRound);
  return round;
}

/* Logarithmic depth: for one element the critical path is at most 4 rounds per tree level plus a constant
 * (a level costs 2 steps up and 2 down at most), against 2n - 2 for a ring; the steps a rank runs per
 * channel do not grow with n at all (at most 4 per chunk). */
static void test_depth(void** state) {
  (void)state;
  int ns[8] = {2, 3, 8, 17, 64, 100, 512, 1024};
  int prev = 0;
  for (int i = 0; i < 8; i++) {
    int n = ns[i], lg = 0;
    while ((1 << lg) < n) lg++;
    commCollArgs a;
    setArgs(&a, commFuncAllReduce, n, 1, 2, 0);
    int ar = criticalPath(&a);
    setArgs(&a, commFuncReduce, n, 1, 1, n / 3);
    int red = criticalPath(&a);
    setArgs(&a, commFuncBroadcast, n, 1, 1, n - 1);
    int bc = criticalPath(&a);
    print_message("n=%d: critical path allreduce %d, reduce %d, broadcast %d rounds\n", n, ar, red, bc);
    assert_true(ar <= 4 * (lg + 1) + 2);
    assert_true(red <= 2 * lg + 2 && bc <= 2 * lg + 2);
    assert_true(ar >= prev); /* grows with n, never jumps beyond the bound */
    prev = ar;
    if (n <= 100) {
      commVerifyStats st;
      setArgs(&a, commFuncAllReduce, n, 2 * CHUNK, 2, 0);
      expectOk(&a, &st);
      /* one chunk per channel, cut into at most 4 smaller chunks: <= 4 x 4 steps */
      assert_true(st.maxStepsPerChannel <= 16);
    }
  }
  commCollArgs a;
  setArgs(&a, commFuncAllReduce, 1024, 1, 2, 0);
  assert_true(criticalPath(&a) < 50);
}

/* Wrong uses fail with commInvalidArgument and build nothing; a corrupted tree schedule fails verification. */
static commResult_t dropOneStep(const commCollArgs* a, commSchedule* s) {
  commResult_t res = commTreeBuild(a, s);
  if (res == commSuccess && a->rank == 3 && s->channels[1].nSteps > 0) s->channels[1].nSteps--;
  return res;
}

static void test_errors(void** state) {
  (void)state;
  commCollArgs a;
  commSchedule s;
  commFunc_t bad[4] = {commFuncAllGather, commFuncReduceScatter, commFuncAllToAll, commFuncSendRecv};
  for (int i = 0; i < 4; i++) {
    setArgs(&a, bad[i], 4, 100, 2, 0);
    assert_int_equal(commTreeBuild(&a, &s), commInvalidArgument);
  }
  setArgs(&a, commFuncReduce, 4, 100, 2, 4); /* root out of range */
  assert_int_equal(commTreeBuild(&a, &s), commInvalidArgument);
  setArgs(&a, commFuncBroadcast, 4, 100, 2, -1);
  assert_int_equal(commTreeBuild(&a, &s), commInvalidArgument);
  setArgs(&a, commFuncAllReduce, 4, 100, 0, 0); /* channels */
  assert_int_equal(commTreeBuild(&a, &s), commInvalidArgument);
  setArgs(&a, commFuncAllReduce, 4, 100, COMM_MAX_CHANNELS + 1, 0);
  assert_int_equal(commTreeBuild(&a, &s), commInvalidArgument);
  setArgs(&a, commFuncAllReduce, 4, 100, 2, 0); /* rank */
  a.rank = 4;
  assert_int_equal(commTreeBuild(&a, &s), commInvalidArgument);
  setArgs(&a, commFuncAllReduce, 4, 100, 2, 0); /* chunk */
  a.chunkElems = 0;
  assert_int_equal(commTreeBuild(&a, &s), commInvalidArgument);
  setArgs(&a, commFuncAllReduce, 4, 100, 2, 0);
  assert_int_equal(commTreeBuild(NULL, &s), commInvalidArgument);
  assert_int_equal(commTreeBuild(&a, NULL), commInvalidArgument);
  setArgs(&a, commFuncAllReduce, 6, 10 * CHUNK, 2, 0);
  assert_int_not_equal(commVerifyColl(&a, dropOneStep, FIFO, PIECE, NULL), commSuccess);
  /* The algorithm table hands out this generator for exactly the three collectives. */
  assert_ptr_equal(commAlgoBuilder(commAlgoTree, commFuncAllReduce), commTreeBuild);
  assert_ptr_equal(commAlgoBuilder(commAlgoTree, commFuncReduce), commTreeBuild);
  assert_ptr_equal(commAlgoBuilder(commAlgoTree, commFuncBroadcast), commTreeBuild);
  assert_null(commAlgoBuilder(commAlgoTree, commFuncAllGather));
}

/* Verifier statistics (for the cost model): a rank sends about twice its data in allreduce whatever n (once
 * up, once or twice down as interior in one tree, once up as leaf in the other). */
static void test_stats(void** state) {
  (void)state;
  int ns[3] = {8, 64, 1024};
  for (int i = 0; i < 3; i++) {
    commCollArgs a;
    commVerifyStats st;
    setArgs(&a, commFuncAllReduce, ns[i], 64 * CHUNK, 2, 0);
    expectOk(&a, &st);
    size_t bytes = 64 * CHUNK * 4;
    print_message("allreduce n=%d count=%d: max steps per channel %zu, max bytes sent per rank %zu (%.2f x data), "
                  "total %zu\n",
                  ns[i], 64 * CHUNK, st.maxStepsPerChannel, st.maxBytesSent, (double)st.maxBytesSent / (double)bytes,
                  st.totalBytesSent);
    assert_true(st.maxBytesSent <= 2 * bytes);
    assert_true(st.maxStepsPerChannel <= 4 * 32); /* 32 chunks per channel, at most 4 steps each */
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_no_prepost),
      cmocka_unit_test(test_geometries),
      cmocka_unit_test(test_single_final_value),
      cmocka_unit_test(test_in_place),
      cmocka_unit_test(test_depth),
      cmocka_unit_test(test_stats),
      cmocka_unit_test(test_large),
      cmocka_unit_test(test_allreduce),
      cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_broadcast),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
