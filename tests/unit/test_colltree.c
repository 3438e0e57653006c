/* The hierarchical tree generator (algorithms/colltree.c): allreduce, reduce and broadcast verify over many
 * rank counts, node layouts, counts, channels and roots; the leaders rotate over the channels; the depth is
 * logarithmic in the nodes; the lookahead, the intra-node shape rule and the in-place safety hold; bad
 * arguments are refused.
 *
 * Coverage of the sweep (test_sweep_*), chosen to stay fast: for every n in 1..64 and every layout of
 * 1, 2, 4 and 8 ranks per node (contiguous, last node smaller), each of the counts 0, 1, 7, 3n+1 (not a
 * multiple of anything here) and a large count of 41 chunks + 5 elements runs once per collective, with the
 * channel count (1..4) and the root (0, n-1, n/2) rotating with n, the layout and the count, so that every
 * (count, channels) and (count, root) pair appears for every layout. Irregular layouts (round-robin nodes,
 * uneven non-contiguous nodes, one node, nodeOf NULL) run the same counts on every n with one rotation. */
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
#define MAXR 1024
#define LARGE ((size_t)41 * CHUNK + 5)

static int nodeOf[MAXR];

typedef enum { LAYOUT_BLOCK, LAYOUT_ROUNDROBIN, LAYOUT_UNEVEN, LAYOUT_ONE, LAYOUT_NULL } layout_t;

static const char* layoutName(layout_t l) {
  switch (l) {
    case LAYOUT_BLOCK: return "block";
    case LAYOUT_ROUNDROBIN: return "round-robin";
    case LAYOUT_UNEVEN: return "uneven";
    case LAYOUT_ONE: return "one node";
    default: return "own node";
  }
}

/* Fills nodeOf for n ranks; returns nNodes. BLOCK: r / rpn. ROUNDROBIN: r % ceil(n/4). UNEVEN: node sizes
 * cycle through 5, 1, 3, 8, 2, the ranks assigned in a scrambled order (so nodes are not contiguous).
 * ONE: all on node 0. NULL: nodeOf is not used. */
static int makeLayout(layout_t l, int n, int rpn) {
  switch (l) {
    case LAYOUT_BLOCK:
      for (int r = 0; r < n; r++) nodeOf[r] = r / rpn;
      return (n + rpn - 1) / rpn;
    case LAYOUT_ROUNDROBIN: {
      int nn = (n + 3) / 4;
      for (int r = 0; r < n; r++) nodeOf[r] = r % nn;
      return nn;
    }
    case LAYOUT_UNEVEN: {
      static const int sizes[5] = {5, 1, 3, 8, 2};
      int node = 0, left = sizes[0];
      for (int i = 0; i < n; i++) {
        if (left == 0) {
          node++;
          left = sizes[node % 5];
        }
        /* i -> (i * 7 + 3) mod n is a permutation when gcd(7, n) == 1; otherwise use i itself. */
        int r = n % 7 ? (int)(((long)i * 7 + 3) % n) : i;
        nodeOf[r] = node;
        left--;
      }
      return node + 1;
    }
    case LAYOUT_ONE:
      for (int r = 0; r < n; r++) nodeOf[r] = 0;
      return 1;
    default: return n;
  }
}

static void setArgs(commCollArgs* a, commFunc_t f, int n, size_t count, int nCh, int root, layout_t l, int rpn) {
  memset(a, 0, sizeof(*a));
  a->func = f;
  a->nRanks = n;
  a->count = count;
  a->eltSize = 4;
  a->root = root;
  a->isReduction = 1;
  a->nChannels = nCh;
  a->chunkElems = CHUNK;
  a->nNodes = makeLayout(l, n, rpn);
  a->nodeOf = l == LAYOUT_NULL ? NULL : nodeOf;
}

static void expectOkStats(const commCollArgs* a, commVerifyStats* st, const char* what) {
  commResult_t res = commVerifyColl(a, commCollTreeBuild, FIFO, PIECE, st);
  if (res != commSuccess)
    fail_msg("%s %s n=%d nNodes=%d count=%zu nCh=%d root=%d: %s", what, commFuncName(a->func), a->nRanks, a->nNodes,
             a->count, a->nChannels, a->root, commLogLastWarn());
}

static const commFunc_t funcs[3] = {commFuncAllReduce, commFuncReduce, commFuncBroadcast};

/* One layout over n = 1..64: every count once per collective, channels and root rotating (see the header). */
static void sweepLayout(layout_t l, int rpn, int rot) {
  for (int n = 1; n <= 64; n++) {
    size_t counts[5] = {0, 1, 7, (size_t)n * 3 + 1, LARGE};
    int roots[3] = {0, n - 1, n / 2};
    for (int ci = 0; ci < 5; ci++) {
      for (int fi = 0; fi < 3; fi++) {
        int nCh = 1 + (ci + n + rot) % 4;
        int root = roots[(ci + fi + n + rot) % 3];
        commCollArgs a;
        setArgs(&a, funcs[fi], n, counts[ci], nCh, root, l, rpn);
        expectOkStats(&a, NULL, layoutName(l));
      }
    }
  }
}

static void test_sweep_rpn1(void** state) {
  (void)state;
  sweepLayout(LAYOUT_BLOCK, 1, 0);
}
static void test_sweep_rpn2(void** state) {
  (void)state;
  sweepLayout(LAYOUT_BLOCK, 2, 1);
}
static void test_sweep_rpn4(void** state) {
  (void)state;
  sweepLayout(LAYOUT_BLOCK, 4, 2);
}
static void test_sweep_rpn8(void** state) {
  (void)state;
  sweepLayout(LAYOUT_BLOCK, 8, 3);
}
static void test_sweep_irregular(void** state) {
  (void)state;
  sweepLayout(LAYOUT_ROUNDROBIN, 0, 0);
  sweepLayout(LAYOUT_UNEVEN, 0, 1);
  sweepLayout(LAYOUT_ONE, 0, 2);
  sweepLayout(LAYOUT_NULL, 0, 3);
}

/* The collnet stage (commCollNetBuild: the network reduces between the node leaders, COMM_PEER_COLLNET): every
 * layout over n = 1..64, every count, 1-3 channels, verified with the verifier's symbolic network (each piece
 * reduced over the members, flow control as the transport's); every rank holds exactly every contribution,
 * POST once. The leaders the groups are formed from (commCollNetMembers) are the ranks whose schedules name the
 * network, one per node. */
static void test_collnet(void** state) {
  (void)state;
  const layout_t layouts[] = {LAYOUT_BLOCK, LAYOUT_BLOCK, LAYOUT_BLOCK, LAYOUT_UNEVEN, LAYOUT_ONE, LAYOUT_NULL};
  const int rpns[] = {1, 2, 8, 0, 0, 0};
  for (size_t li = 0; li < sizeof(layouts) / sizeof(layouts[0]); li++) {
    for (int n = 1; n <= 64; n++) {
      size_t counts[5] = {0, 1, 7, (size_t)n * 3 + 1, LARGE};
      for (int ci = 0; ci < 5; ci++) {
        commCollArgs a;
        setArgs(&a, commFuncAllReduce, n, counts[ci], 1 + (ci + n) % 3, 0, layouts[li], rpns[li]);
        commResult_t res = commVerifyColl(&a, commCollNetBuild, FIFO, PIECE, NULL);
        if (res != commSuccess)
          fail_msg("collnet %s n=%d nNodes=%d count=%zu nCh=%d: %s", layoutName(layouts[li]), n, a.nNodes, a.count,
                   a.nChannels, commLogLastWarn());
        if (a.nNodes < 2 || a.count == 0 || n > 32) continue;
        /* The members: one per node, each naming the network in its schedule, nobody else. */
        int members[MAXR];
        for (int c = 0; c < a.nChannels; c++) {
          assert_int_equal(commCollNetMembers(&a, c, members), commSuccess);
          int nodes = a.nodeOf ? a.nNodes : n, named[MAXR], anyNamed = 0;
          for (int r = 0; r < n; r++) {
            commCollArgs b = a;
            b.rank = r;
            commSchedule sch;
            assert_int_equal(commCollNetBuild(&b, &sch), commSuccess);
            named[r] = 0;
            for (int i = 0; i < sch.channels[c].nSteps; i++)
              named[r] |= sch.channels[c].steps[i].sendPeer == COMM_PEER_COLLNET ||
                          sch.channels[c].steps[i].recvPeer == COMM_PEER_COLLNET;
            anyNamed |= named[r];
            commSchedFree(&sch);
          }
          for (int r = 0; r < n && anyNamed; r++) { /* (a channel whose part is empty has no steps) */
            int v = a.nodeOf ? a.nodeOf[r] : r;
            assert_true(v >= 0 && v < nodes);
            if (named[r] != (members[v] == r))
              fail_msg("collnet n=%d channel %d: rank %d names the network: %d, member: %d", n, c, r, named[r],
                       members[v] == r);
          }
        }
      }
    }
  }
  commCollArgs a;
  setArgs(&a, commFuncBroadcast, 4, 10, 1, 0, LAYOUT_BLOCK, 1);
  commSchedule sch;
  assert_int_equal(commCollNetBuild(&a, &sch), commInvalidArgument); /* not over collnet */
}

/* Collnet allgather and reducescatter (algorithms/collnet.c: the network's gather and scatter between the node
 * leaders): nodes of one size (block layouts of 1, 2, 3 and 8 ranks, round-robin, every rank its own node), n up
 * to 24, every count, 1-3 channels, slots from a whole FIFO's piece down to one that just holds an element per
 * node, with and without a ring order; verified with the verifier's network (allgather: member w's piece at w x
 * size; reducescatter: member w receives part w). Nodes that differ in size, or more nodes than a slot has
 * elements, are refused with commInvalidArgument. */
static void test_collnet_gather(void** state) {
  (void)state;
  const layout_t layouts[] = {LAYOUT_BLOCK, LAYOUT_BLOCK, LAYOUT_BLOCK, LAYOUT_BLOCK, LAYOUT_ROUNDROBIN, LAYOUT_NULL};
  const int rpns[] = {1, 2, 3, 8, 0, 0};
  static int ring[MAXR];
  for (size_t li = 0; li < sizeof(layouts) / sizeof(layouts[0]); li++) {
    for (int n = 1; n <= 24; n++) {
      if (layouts[li] == LAYOUT_BLOCK && n % rpns[li] != 0) continue;
      if (layouts[li] == LAYOUT_ROUNDROBIN && n % ((n + 3) / 4) != 0) continue;
      size_t counts[5] = {0, 1, 7, (size_t)n * 3 + 1, 301};
      for (int ci = 0; ci < 5; ci++) {
        for (int fi = 0; fi < 2; fi++) {
          commCollArgs a;
          setArgs(&a, fi ? commFuncReduceScatter : commFuncAllGather, n, counts[ci], 1 + (ci + n + fi) % 3, 0,
                  layouts[li], rpns[li]);
          int V = a.nodeOf ? a.nNodes : n;
          a.pieceElems = (ci + fi) % 2 || (size_t)V * (1 + (size_t)ci) > PIECE ? PIECE : (size_t)V * (1 + (size_t)ci);
          if ((n + ci) % 2) { /* a ring order: reversed */
            for (int i = 0; i < n; i++) ring[i] = n - 1 - i;
            for (int c = 0; c < a.nChannels; c++) a.ringRanks[c] = ring;
          }
          commResult_t res = commVerifyColl(&a, commCollNetBuild, FIFO, PIECE, NULL);
          if (res != commSuccess)
            fail_msg("collnet %s %s n=%d nNodes=%d count=%zu nCh=%d piece=%zu: %s", commFuncName(a.func),
                     layoutName(layouts[li]), n, V, a.count, a.nChannels, a.pieceElems, commLogLastWarn());
        }
      }
    }
  }
  commCollArgs a;
  setArgs(&a, commFuncAllGather, 12, 10, 1, 0, LAYOUT_UNEVEN, 0);
  a.pieceElems = PIECE;
  commSchedule sch;
  assert_int_equal(commCollNetBuild(&a, &sch), commInvalidArgument); /* nodes of 5, 1, 3, ... ranks */
  setArgs(&a, commFuncReduceScatter, 16, 10, 1, 0, LAYOUT_BLOCK, 1);
  a.pieceElems = 15;
  assert_int_equal(commCollNetBuild(&a, &sch), commInvalidArgument); /* 16 nodes, 15 elements a slot */
  a.pieceElems = 16;
  assert_int_equal(commCollNetBuild(&a, &sch), commSuccess);
  commSchedFree(&sch);
}

/* Large communicators, 8 ranks per node: every collective, 2 channels, a middle root. */
static void test_spot_large(void** state) {
  (void)state;
  int ns[4] = {128, 256, 1000, 1024};
  for (int i = 0; i < 4; i++)
    for (int fi = 0; fi < 3; fi++) {
      commCollArgs a;
      setArgs(&a, funcs[fi], ns[i], (size_t)5 * CHUNK + 3, 2, ns[i] / 2 + 1, LAYOUT_BLOCK, 8);
      expectOkStats(&a, NULL, "spot");
    }
}

/* ---------------------------------------------------------------------------------------------------- */
/* Depth */

/* Longest chain of dependent steps over all ranks (channel 0), with unbounded FIFOs: a step ends one unit
 * after both the previous step of its rank and the step that sent what it receives. */
typedef struct {
  int from, to;
  int n, cap, head;
  int* t;
} msgQueue;

static msgQueue* findQueue(msgQueue** qs, int* nq, int* capq, int from, int to) {
  for (int i = 0; i < *nq; i++)
    if ((*qs)[i].from == from && (*qs)[i].to == to) return &(*qs)[i];
  if (*nq == *capq) {
    *capq = *capq ? *capq * 2 : 256;
    *qs = realloc(*qs, (size_t)*capq * sizeof(msgQueue));
    assert_non_null(*qs);
  }
  msgQueue* q = &(*qs)[(*nq)++];
  memset(q, 0, sizeof(*q));
  q->from = from;
  q->to = to;
  return q;
}

static int criticalPath(const commCollArgs* args, commSchedBuilder_t build) {
  int n = args->nRanks;
  commSchedule* s = calloc((size_t)n, sizeof(commSchedule));
  int* pc = calloc((size_t)n, sizeof(int));
  int* t = calloc((size_t)n, sizeof(int));
  /* Queues indexed by receiver, so the search stays short. */
  msgQueue** qs = calloc((size_t)n, sizeof(msgQueue*));
  int* nq = calloc((size_t)n, sizeof(int));
  int* capq = calloc((size_t)n, sizeof(int));
  assert_true(s && pc && t && qs && nq && capq);
  for (int r = 0; r < n; r++) {
    commCollArgs a = *args;
    a.rank = r;
    assert_int_equal(build(&a, &s[r]), commSuccess);
  }
  int progressed = 1, longest = 0;
  while (progressed) {
    progressed = 0;
    for (int r = 0; r < n; r++) {
      const commChannelSched* cs = &s[r].channels[0];
      while (pc[r] < cs->nSteps) {
        const commStep* st = &cs->steps[pc[r]];
        int ready = t[r];
        if (st->recvPeer >= 0) {
          msgQueue* q = findQueue(&qs[r], &nq[r], &capq[r], st->recvPeer, r);
          if (q->head == q->n) break;
          int sent = q->t[q->head++];
          if (sent > ready) ready = sent;
        }
        t[r] = ready + 1;
        if (t[r] > longest) longest = t[r];
        if (st->sendPeer >= 0) {
          int to = st->sendPeer;
          msgQueue* q = findQueue(&qs[to], &nq[to], &capq[to], r, to);
          if (q->n == q->cap) {
            q->cap = q->cap ? q->cap * 2 : 8;
            q->t = realloc(q->t, (size_t)q->cap * sizeof(int));
            assert_non_null(q->t);
          }
          q->t[q->n++] = t[r];
        }
        pc[r]++;
        progressed = 1;
      }
    }
  }
  for (int r = 0; r < n; r++) {
    assert_int_equal(pc[r], s[r].channels[0].nSteps); /* no step left waiting */
    commSchedFree(&s[r]);
    for (int i = 0; i < nq[r]; i++) free(qs[r][i].t);
    free(qs[r]);
  }
  free(s);
  free(pc);
  free(t);
  free(qs);
  free(nq);
  free(capq);
  return longest;
}

/* 1024 ranks on 128 nodes of 8: a chunk climbs at most 3 local + 8 inter-node levels and comes back, so the
 * dependent chain is about 2 * 11 steps plus the extra receives of interior ranks, against the ring's
 * 2(n-1); and the verifier's steps per channel stay far below the ring's for a pipelined count. */
static void test_depth(void** state) {
  (void)state;
  commCollArgs a;
  setArgs(&a, commFuncAllReduce, 1024, 1, 1, 0, LAYOUT_BLOCK, 8);
  int tree = criticalPath(&a, commCollTreeBuild);
  a.nodeOf = NULL; /* the ring ignores the layout */
  int ring = criticalPath(&a, commRingBuild);
  /* Levels of the two-level tree: the local bit tree (count 1 is latency bound) and the node tree (the
   * double binary tree of an odd node count hangs one more leaf). A level costs one step up and at most
   * three down (an interior leader serves its second child node and its local child after the first). */
  int levels = commBitTreeDepth(8) + commBitTreeDepth(128) + 1;
  int bound = 4 * levels;
  print_message("critical path at 1024 ranks, 8 per node, count 1: colltree %d steps, ring %d\n", tree, ring);
  if (tree > bound || ring < 2 * 1023) fail_msg("critical path: colltree %d (bound %d), ring %d", tree, bound, ring);

  commVerifyStats ct, rs;
  setArgs(&a, commFuncAllReduce, 1024, 16 * CHUNK, 1, 0, LAYOUT_BLOCK, 8);
  expectOkStats(&a, &ct, "depth");
  a.nodeOf = NULL;
  assert_int_equal(commVerifyColl(&a, commRingBuild, FIFO, PIECE, &rs), commSuccess);
  if (ct.maxStepsPerChannel * 10 > rs.maxStepsPerChannel)
    fail_msg("steps per channel: colltree %zu, ring %zu", ct.maxStepsPerChannel, rs.maxStepsPerChannel);
  /* Broadcast and reduce at the same scale: one direction only. */
  setArgs(&a, commFuncBroadcast, 1024, 1, 1, 517, LAYOUT_BLOCK, 8);
  int bc = criticalPath(&a, commCollTreeBuild);
  print_message("broadcast critical path: %d steps\n", bc);
  if (bc > 3 * levels) fail_msg("broadcast critical path %d (bound %d)", bc, 3 * levels);
}

/* The stats of a few sizes, printed for the cost model. */
static void test_stats(void** state) {
  (void)state;
  int ns[3] = {16, 64, 1024};
  for (int i = 0; i < 3; i++) {
    commCollArgs a;
    commVerifyStats st;
    setArgs(&a, commFuncAllReduce, ns[i], (size_t)1 << 16, 2, 0, LAYOUT_BLOCK, 8);
    expectOkStats(&a, &st, "stats");
    print_message("allreduce n=%d (8 per node) count=%zu (4-byte elements) 2 channels: %zu steps/channel, max %zu "
                  "bytes sent per rank, %zu in total\n",
                  ns[i], a.count, st.maxStepsPerChannel, st.maxBytesSent, st.totalBytesSent);
    /* Every rank sends its reduce-up share once; leaders also forward the result to up to 3 destinations. */
    assert_true(st.maxBytesSent <= 4 * a.count * 4);
  }
}

/* ---------------------------------------------------------------------------------------------------- */
/* Structure */

static int hasPeerOffNode(const commSchedule* s, int ch, int rank) {
  const commChannelSched* cs = &s->channels[ch];
  for (int k = 0; k < cs->nSteps; k++) {
    const commStep* st = &cs->steps[k];
    if ((st->sendPeer >= 0 && nodeOf[st->sendPeer] != nodeOf[rank]) ||
        (st->recvPeer >= 0 && nodeOf[st->recvPeer] != nodeOf[rank]))
      return 1;
  }
  return 0;
}

/* On channel c the only rank of a node that talks to other nodes is its (c mod size)-th local rank
 * (allreduce across nodes: its (c/2 mod size)-th, each leader running both trees); for reduce and broadcast
 * the root instead, on every channel. Here nodes are interleaved (round-robin), so local index i of node v is
 * rank v + i * nNodes. */
static void test_leaders(void** state) {
  (void)state;
  const int n = 20, nCh = 4;
  for (int fi = 0; fi < 3; fi++) {
    commCollArgs a;
    setArgs(&a, funcs[fi], n, 50 * CHUNK, nCh, 13, LAYOUT_ROUNDROBIN, 0);
    int nn = a.nNodes; /* 5 nodes of 4 */
    assert_int_equal(nn, 5);
    for (int r = 0; r < n; r++) {
      commSchedule s;
      a.rank = r;
      assert_int_equal(commCollTreeBuild(&a, &s), commSuccess);
      for (int c = 0; c < nCh; c++) {
        int local = r / nn;
        int slot = funcs[fi] == commFuncAllReduce ? c / 2 : c;
        int leader = funcs[fi] != commFuncAllReduce && nodeOf[r] == nodeOf[a.root] ? r == a.root : local == slot % 4;
        if (hasPeerOffNode(&s, c, r) != leader)
          fail_msg("%s rank %d channel %d: off-node peers %d, leader %d", commFuncName(funcs[fi]), r, c,
                   hasPeerOffNode(&s, c, r), leader);
      }
      commSchedFree(&s);
    }
  }
}

/* Count 0: no steps; steps never carry 0 or more than chunkElems elements; one rank: one COPY per channel
 * part with PRE|POST for the reductions; no flags when the op needs none. */
static void test_shapes(void** state) {
  (void)state;
  commCollArgs a;
  commSchedule s;
  for (int fi = 0; fi < 3; fi++) {
    setArgs(&a, funcs[fi], 12, 0, 3, 5, LAYOUT_BLOCK, 4);
    a.rank = 5;
    assert_int_equal(commCollTreeBuild(&a, &s), commSuccess);
    for (int c = 0; c < s.nChannels; c++) assert_int_equal(s.channels[c].nSteps, 0);
    commSchedFree(&s);

    setArgs(&a, funcs[fi], 1, 1000, 3, 0, LAYOUT_BLOCK, 1);
    assert_int_equal(commCollTreeBuild(&a, &s), commSuccess);
    assert_int_equal(s.nChannels, 3);
    int flags = funcs[fi] == commFuncBroadcast ? 0 : COMM_STEP_PRE | COMM_STEP_POST;
    for (int c = 0; c < 3; c++) {
      assert_int_equal(s.channels[c].nSteps, 1);
      assert_int_equal(s.channels[c].steps[0].prim, COMM_PRIM_COPY);
      assert_int_equal(s.channels[c].steps[0].flags, flags);
    }
    commSchedFree(&s);

    for (int red = 0; red <= 1; red++) {
      setArgs(&a, funcs[fi], 27, 20 * CHUNK + 9, 3, 26, LAYOUT_UNEVEN, 0);
      a.isReduction = red;
      if (!red) expectOkStats(&a, NULL, "no PRE/POST");
      for (int r = 0; r < a.nRanks; r++) {
        a.rank = r;
        assert_int_equal(commCollTreeBuild(&a, &s), commSuccess);
        for (int c = 0; c < s.nChannels; c++)
          for (int k = 0; k < s.channels[c].nSteps; k++) {
            const commStep* st = &s.channels[c].steps[k];
            assert_true(st->count > 0 && st->count <= CHUNK && st->recvCount == st->count);
            if (!red) assert_int_equal(st->flags, 0);
          }
        commSchedFree(&s);
      }
    }
  }
}

/* In-place safety: on every rank, no step writes output element e before the last step that reads input
 * element e (the same step may do both: it works element by element). */
static void test_inplace(void** state) {
  (void)state;
  enum { N = 19, COUNT = 9 * CHUNK + 77 };
  static int lastRead[COUNT], firstWrite[COUNT];
  for (int fi = 0; fi < 3; fi++)
    for (int l = LAYOUT_BLOCK; l <= LAYOUT_NULL; l++) {
      commCollArgs a;
      setArgs(&a, funcs[fi], N, COUNT, 2, 7, (layout_t)l, 4);
      for (int r = 0; r < N; r++) {
        commSchedule s;
        a.rank = r;
        assert_int_equal(commCollTreeBuild(&a, &s), commSuccess);
        for (int c = 0; c < s.nChannels; c++) {
          for (int e = 0; e < COUNT; e++) lastRead[e] = -1, firstWrite[e] = 1 << 30;
          for (int k = 0; k < s.channels[c].nSteps; k++) {
            const commStep* st = &s.channels[c].steps[k];
            int p = st->prim;
            int reads = p != COMM_PRIM_RECV && p != COMM_PRIM_RECV_COPY_SEND;
            int writes = p != COMM_PRIM_SEND && p != COMM_PRIM_RECV_REDUCE_SEND;
            for (size_t e = 0; e < st->count; e++) {
              if (reads && st->src.buf == COMM_BUF_INPUT) lastRead[st->src.offset + e] = k;
              if (writes && st->dst.buf == COMM_BUF_OUTPUT && firstWrite[st->dst.offset + e] > k)
                firstWrite[st->dst.offset + e] = k;
            }
          }
          for (int e = 0; e < COUNT; e++)
            if (firstWrite[e] < lastRead[e])
              fail_msg("%s %s rank %d ch %d: output[%d] written at step %d, input read at step %d",
                       commFuncName(funcs[fi]), layoutName((layout_t)l), r, c, e, firstWrite[e], lastRead[e]);
        }
        commSchedFree(&s);
      }
    }
}

/* Lookahead and intra-node shape on one node of 8 (leader rank 0 on channel 0). With many chunks the node is
 * a chain 0-1-..-7: rank 7 (level 7) sends 14 chunks up before its first receive of a final chunk, and its
 * sends and receives then alternate. With one chunk (latency bound) it is the bit tree: the leader's local
 * child is position 4. */
static void test_lookahead_and_shape(void** state) {
  (void)state;
  commCollArgs a;
  commSchedule s;
  setArgs(&a, commFuncAllReduce, 8, 40 * CHUNK, 1, 0, LAYOUT_ONE, 0);
  a.rank = 7;
  assert_int_equal(commCollTreeBuild(&a, &s), commSuccess);
  assert_int_equal(s.channels[0].nSteps, 80);
  for (int k = 0; k < 80; k++) {
    const commStep* st = &s.channels[0].steps[k];
    int isUp = k < 14 || (k >= 14 && k < 66 && (k - 14) % 2 == 0);
    assert_int_equal(st->prim, isUp ? COMM_PRIM_SEND : COMM_PRIM_RECV);
    assert_int_equal(isUp ? st->sendPeer : st->recvPeer, 6);
  }
  commSchedFree(&s);
  a.rank = 0;
  assert_int_equal(commCollTreeBuild(&a, &s), commSuccess);
  /* The leader is the root: its reduce of each chunk also sends it back down (recvReduceCopySend). */
  assert_int_equal(s.channels[0].nSteps, 40);
  for (int k = 0; k < 40; k++) {
    assert_int_equal(s.channels[0].steps[k].prim, COMM_PRIM_RECV_REDUCE_COPY_SEND);
    assert_int_equal(s.channels[0].steps[k].flags, COMM_STEP_PRE | COMM_STEP_POST);
    assert_int_equal(s.channels[0].steps[k].recvPeer, 1);
  }
  commSchedFree(&s);

  setArgs(&a, commFuncAllReduce, 8, CHUNK, 1, 0, LAYOUT_ONE, 0);
  assert_int_equal(commCollTreeBuild(&a, &s), commSuccess);
  assert_int_equal(s.channels[0].nSteps, 1);
  assert_int_equal(s.channels[0].steps[0].recvPeer, 4);
  commSchedFree(&s);
  /* Channel 1 on the same node: leader rank 1, tree positions shifted by one. */
  setArgs(&a, commFuncAllReduce, 8, 2 * CHUNK, 2, 0, LAYOUT_ONE, 0);
  a.rank = 1;
  assert_int_equal(commCollTreeBuild(&a, &s), commSuccess);
  assert_int_equal(s.channels[1].steps[0].recvPeer, 5);
  commSchedFree(&s);
}

/* Other FIFO geometries where a chunk is at most half the FIFO's slots. */
static void test_geometries(void** state) {
  (void)state;
  struct {
    size_t fifo, piece, chunk;
  } g[3] = {{8, 1, 4}, {96, 48, 48}, {400, 100, 150}};
  for (int gi = 0; gi < 3; gi++)
    for (int fi = 0; fi < 3; fi++)
      for (int n = 2; n <= 40; n += 19) {
        commCollArgs a;
        setArgs(&a, funcs[fi], n, 2237, 3, n / 2, LAYOUT_BLOCK, 4);
        a.chunkElems = g[gi].chunk;
        commResult_t res = commVerifyColl(&a, commCollTreeBuild, g[gi].fifo, g[gi].piece, NULL);
        if (res != commSuccess)
          fail_msg("%s n=%d fifo %zu piece %zu chunk %zu: %s", commFuncName(funcs[fi]), n, g[gi].fifo, g[gi].piece,
                   g[gi].chunk, commLogLastWarn());
      }
}

/* A corrupted schedule (one rank drops its last step) fails verification. */
static commResult_t dropLast(const commCollArgs* a, commSchedule* s) {
  commResult_t res = commCollTreeBuild(a, s);
  if (res == commSuccess && a->rank == 3 && s->channels[0].nSteps > 0) s->channels[0].nSteps--;
  return res;
}

/* Refused: collectives other than allreduce, reduce and broadcast; bad layouts, roots and channel counts. */
static void test_bad_args(void** state) {
  (void)state;
  commCollArgs a;
  commSchedule s;
  commFunc_t bad[4] = {commFuncAllGather, commFuncReduceScatter, commFuncAllToAll, commFuncSendRecv};
  for (int i = 0; i < 4; i++) {
    setArgs(&a, bad[i], 8, 100, 1, 0, LAYOUT_BLOCK, 4);
    assert_int_equal(commCollTreeBuild(&a, &s), commInvalidArgument);
  }
  setArgs(&a, commFuncReduce, 8, 100, 1, 8, LAYOUT_BLOCK, 4);
  assert_int_equal(commCollTreeBuild(&a, &s), commInvalidArgument);
  setArgs(&a, commFuncAllReduce, 8, 100, 0, 0, LAYOUT_BLOCK, 4);
  assert_int_equal(commCollTreeBuild(&a, &s), commInvalidArgument);
  setArgs(&a, commFuncAllReduce, 8, 100, 1, 0, LAYOUT_BLOCK, 4);
  a.nNodes = 3; /* node 2 has no rank */
  assert_int_equal(commCollTreeBuild(&a, &s), commInvalidArgument);
  a.nNodes = 1; /* rank 4 is on node 1, out of range */
  assert_int_equal(commCollTreeBuild(&a, &s), commInvalidArgument);
  a.nNodes = 2;
  a.chunkElems = 0;
  assert_int_equal(commCollTreeBuild(&a, &s), commInvalidArgument);
  assert_int_equal(commCollTreeBuild(NULL, &s), commInvalidArgument);

  setArgs(&a, commFuncAllReduce, 8, 1000, 1, 0, LAYOUT_BLOCK, 4);
  assert_int_equal(commVerifyColl(&a, dropLast, FIFO, PIECE, NULL), commInternalError);
  assert_true(commAlgoBuilder(commAlgoCollTree, commFuncAllReduce) == commCollTreeBuild);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_args),   cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_leaders),    cmocka_unit_test(test_lookahead_and_shape),
      cmocka_unit_test(test_inplace),    cmocka_unit_test(test_geometries),
      cmocka_unit_test(test_depth),      cmocka_unit_test(test_stats),
      cmocka_unit_test(test_spot_large), cmocka_unit_test(test_sweep_rpn1),
      cmocka_unit_test(test_sweep_rpn2), cmocka_unit_test(test_sweep_rpn4),
      cmocka_unit_test(test_sweep_rpn8), cmocka_unit_test(test_sweep_irregular),
      cmocka_unit_test(test_collnet),    cmocka_unit_test(test_collnet_gather),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
