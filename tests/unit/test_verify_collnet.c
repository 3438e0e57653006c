/* The verifier's collnet virtual peer (COMM_PEER_COLLNET): hand-made allreduce schedules whose reduction
 * between nodes is done by the network verify for every rank count, count, channel count and lookahead;
 * broken ones (a piece missing, piece sizes that differ, a contribution counted twice, PRE/POST wrong, a
 * member running too far ahead of its receives, a receive nobody feeds) are refused with a WARN that says
 * why, and never hang.
 *
 * The builders: "flat" (every rank a node of its own, the collnet member of every channel) runs, per channel
 * part and chunk, SEND in -> COLLNET (PRE) and RECV COLLNET -> out (POST), `lookahead` chunks of sends ahead
 * of the receives. "node2" (two ranks per node, the leader of channel c the node's local rank c % size):
 * the child sends its input to the leader; the leader reduces it with its own (RECV_REDUCE_SEND, PRE) into
 * COLLNET, takes the result back with POST and forwards it to the child (RECV_COPY_SEND), which receives it
 * into its output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "check.h"
#include "debug.h"
#include "schedule.h"

#define PIECE 64
#define NSLOTS 8
#define FIFO (NSLOTS * PIECE)
#define CHUNK (4 * PIECE)
#define NET COMM_PEER_COLLNET

typedef enum {
  F_NONE = 0,
  F_SHORT_SEND,      /* faultRank's last send drops its last piece (its receive still expects it) */
  F_SHORT_BOTH,      /* faultRank's last send and receive drop their last piece */
  F_SHORT_RECV_ALL,  /* every rank's last receive drops its last piece */
  F_SPLIT_SEND,      /* faultRank sends its first chunk in two steps (its pieces are cut elsewhere) */
  F_TWICE,           /* node2: the child also sends its input to COLLNET itself */
  F_NO_POST,         /* the final receive carries no POST */
  F_POST_TWICE,      /* node2: the child applies POST again */
  F_POST_EARLY,      /* flat: the send carries PRE|POST */
  F_NO_PRE,          /* faultRank sends without PRE */
  F_ORPHAN_RECV,     /* an extra channel on which rank faultRank receives from COLLNET and nobody sends */
  F_OTHER_SEND_RECV, /* flat, no flags: one SEND_RECV with COLLNET on both sides, the whole count */
} fault_t;

static struct {
  int perNode;   /* 1 (flat) or 2 (node2) */
  int lookahead; /* chunks sent ahead of the receives */
  size_t chunk;  /* elements per step */
  fault_t fault; /* what to break */
  int faultRank; /* whom it concerns */
} cfg;

static commResult_t add(commSchedule* s, int c, commPrim_t p, int flags, int sendPeer, int recvPeer, uint32_t sbuf,
                        size_t soff, uint32_t dbuf, size_t doff, size_t count) {
  commStep st = commStepMake(p, flags, sendPeer, recvPeer, commBufAt(sbuf, soff), commBufAt(dbuf, doff), count, count);
  return commSchedAdd(s, c, &st);
}

/* The last piece of a step of n elements. */
static size_t lastPiece(size_t n) { return n % PIECE ? n % PIECE : PIECE; }

static commResult_t build(const commCollArgs* a, commSchedule* s) {
  commResult_t res = commSchedInit(s, a->nChannels + (cfg.fault == F_ORPHAN_RECV ? 1 : 0));
  if (res != commSuccess) return res;
  int r = a->rank, n = a->nRanks;
  int pre = a->isReduction ? COMM_STEP_PRE : 0, post = a->isReduction ? COMM_STEP_POST : 0;
  if (cfg.fault == F_OTHER_SEND_RECV) {
    commStep st = commStepMake(COMM_PRIM_SEND_RECV, 0, NET, NET, commBufAt(COMM_BUF_INPUT, 0),
                               commBufAt(COMM_BUF_OUTPUT, 0), a->count, a->count);
    return commSchedAdd(s, 0, &st);
  }
  if (cfg.fault == F_ORPHAN_RECV && r == cfg.faultRank)
    COMMCHECK(add(s, a->nChannels, COMM_PRIM_RECV, 0, -1, NET, 0, 0, COMM_BUF_SCRATCH, 0, PIECE));
  if (cfg.fault == F_ORPHAN_RECV) s->scratchElems = PIECE;
  int node = r / cfg.perNode, first = node * cfg.perNode;
  int size = n - first < cfg.perNode ? n - first : cfg.perNode;
  for (int c = 0; c < a->nChannels; c++) {
    size_t off, len;
    commSplitPart(a->count, (size_t)a->nChannels, (size_t)c, 1, &off, &len);
    size_t nChunks = (len + cfg.chunk - 1) / cfg.chunk;
    int leader = first + c % size;
    int child = size == 2 ? first + (c + 1) % size : -1;
    for (size_t i = 0; i < nChunks + (size_t)cfg.lookahead; i++) {
      if (i < nChunks) { /* up(i) */
        size_t o = off + i * cfg.chunk, m = len - i * cfg.chunk < cfg.chunk ? len - i * cfg.chunk : cfg.chunk;
        int last = i == nChunks - 1;
        int f = pre;
        if (cfg.fault == F_NO_PRE && r == cfg.faultRank) f = 0;
        if (cfg.fault == F_POST_EARLY) f |= post;
        if (last && r == cfg.faultRank && (cfg.fault == F_SHORT_SEND || cfg.fault == F_SHORT_BOTH)) m -= lastPiece(m);
        if (r != leader) {
          COMMCHECK(add(s, c, COMM_PRIM_SEND, f, leader, -1, COMM_BUF_INPUT, o, 0, 0, m));
          if (cfg.fault == F_TWICE) COMMCHECK(add(s, c, COMM_PRIM_SEND, f, NET, -1, COMM_BUF_INPUT, o, 0, 0, m));
        } else if (child >= 0) {
          COMMCHECK(add(s, c, COMM_PRIM_RECV_REDUCE_SEND, f, NET, child, COMM_BUF_INPUT, o, 0, 0, m));
        } else if (i == 0 && cfg.fault == F_SPLIT_SEND && r == cfg.faultRank && m > 10) {
          COMMCHECK(add(s, c, COMM_PRIM_SEND, f, NET, -1, COMM_BUF_INPUT, o, 0, 0, 10));
          COMMCHECK(add(s, c, COMM_PRIM_SEND, f, NET, -1, COMM_BUF_INPUT, o + 10, 0, 0, m - 10));
        } else {
          COMMCHECK(add(s, c, COMM_PRIM_SEND, f, NET, -1, COMM_BUF_INPUT, o, 0, 0, m));
        }
      }
      if (i >= (size_t)cfg.lookahead) { /* down(i - lookahead) */
        size_t k = i - (size_t)cfg.lookahead;
        size_t o = off + k * cfg.chunk, m = len - k * cfg.chunk < cfg.chunk ? len - k * cfg.chunk : cfg.chunk;
        int last = k == nChunks - 1;
        int f = cfg.fault == F_NO_POST ? 0 : post;
        if (last && (cfg.fault == F_SHORT_RECV_ALL || (cfg.fault == F_SHORT_BOTH && r == cfg.faultRank)))
          m -= lastPiece(m);
        if (r != leader) {
          COMMCHECK(
              add(s, c, COMM_PRIM_RECV, cfg.fault == F_POST_TWICE ? post : 0, -1, leader, 0, 0, COMM_BUF_OUTPUT, o, m));
          if (cfg.fault == F_TWICE) COMMCHECK(add(s, c, COMM_PRIM_RECV, 0, -1, NET, 0, 0, COMM_BUF_OUTPUT, o, m));
        } else if (child >= 0) {
          COMMCHECK(add(s, c, COMM_PRIM_RECV_COPY_SEND, f, child, NET, 0, 0, COMM_BUF_OUTPUT, o, m));
        } else {
          COMMCHECK(add(s, c, COMM_PRIM_RECV, f, -1, NET, 0, 0, COMM_BUF_OUTPUT, o, m));
        }
      }
    }
  }
  return commSuccess;
}

static void setArgs(commCollArgs* a, int n, size_t count, int nCh) {
  memset(a, 0, sizeof(*a));
  a->func = commFuncAllReduce;
  a->nRanks = n;
  a->count = count;
  a->eltSize = 4;
  a->isReduction = 1;
  a->nChannels = nCh;
  a->chunkElems = CHUNK;
  a->nNodes = n;
}

static void setCfg(int perNode, int lookahead, size_t chunk, fault_t fault, int faultRank) {
  cfg.perNode = perNode;
  cfg.lookahead = lookahead;
  cfg.chunk = chunk;
  cfg.fault = fault;
  cfg.faultRank = faultRank;
}

static void expectOk(int n, size_t count, int nCh, commVerifyStats* stats) {
  commCollArgs a;
  setArgs(&a, n, count, nCh);
  commLogClearLastWarn();
  if (commVerifyColl(&a, build, FIFO, PIECE, stats) != commSuccess)
    fail_msg("perNode %d lookahead %d chunk %zu: n=%d count=%zu nCh=%d: %s", cfg.perNode, cfg.lookahead, cfg.chunk, n,
             count, nCh, commLogLastWarn());
}

/* Fails, with every needle (NULL-terminated) in the WARN. */
static void expectFail(int n, size_t count, int nCh, ...) {
  commCollArgs a;
  setArgs(&a, n, count, nCh);
  commLogClearLastWarn();
  commResult_t res = commVerifyColl(&a, build, FIFO, PIECE, NULL);
  if (res != commInternalError)
    fail_msg("fault %d (rank %d) n=%d count=%zu: returned %d", cfg.fault, cfg.faultRank, n, count, (int)res);
  va_list ap;
  va_start(ap, nCh);
  for (const char* needle; (needle = va_arg(ap, const char*)) != NULL;)
    if (strstr(commLogLastWarn(), needle) == NULL)
      fail_msg("fault %d (rank %d) n=%d count=%zu: expected '%s' in '%s'", cfg.fault, cfg.faultRank, n, count, needle,
               commLogLastWarn());
  va_end(ap);
}

static void sweep(int perNode) {
  size_t chunks[3] = {CHUNK, 3 * PIECE + 10, PIECE};
  for (int n = 1; n <= 16; n++) {
    size_t counts[5] = {0, 1, 7, (size_t)n * 3 + 1, (size_t)37 * PIECE + 5};
    for (int ci = 0; ci < 5; ci++)
      for (int nCh = 1; nCh <= 2; nCh++)
        for (int la = 0; la <= 2; la++) {
          setCfg(perNode, la, chunks[(n + ci + la) % 3], F_NONE, -1);
          expectOk(n, counts[ci], nCh, NULL);
        }
  }
}

static void test_flat(void** state) {
  (void)state;
  sweep(1);
}

static void test_node2(void** state) {
  (void)state;
  sweep(2);
}

/* Both sides of one SEND_RECV talk to COLLNET: they progress independently, any count goes. */
static void test_send_recv(void** state) {
  (void)state;
  for (int n = 1; n <= 5; n++) {
    setCfg(1, 0, CHUNK, F_OTHER_SEND_RECV, -1);
    commCollArgs a;
    setArgs(&a, n, (size_t)50 * PIECE + 3, 1);
    a.isReduction = 0;
    if (commVerifyColl(&a, build, FIFO, PIECE, NULL) != commSuccess) fail_msg("n=%d: %s", n, commLogLastWarn());
  }
}

/* Bytes sent to COLLNET count as bytes the rank sends. */
static void test_stats(void** state) {
  (void)state;
  size_t count = 10 * PIECE + 3;
  commVerifyStats st;
  setCfg(1, 1, CHUNK, F_NONE, -1);
  expectOk(4, count, 1, &st);
  assert_int_equal(st.maxBytesSent, count * 4);
  assert_int_equal(st.totalBytesSent, 4 * count * 4);
  /* node2, one channel: the leader sends to COLLNET and to its child, the child to its leader. */
  setCfg(2, 1, CHUNK, F_NONE, -1);
  expectOk(4, count, 1, &st);
  assert_int_equal(st.maxBytesSent, 2 * count * 4);
  assert_int_equal(st.totalBytesSent, 6 * count * 4);
}

/* A member may run 2 nSlots pieces ahead of its receives (nSlots posted, nSlots queued); one more
 * deadlocks, on every group size, and is reported rather than hanging. */
static void test_flow_control(void** state) {
  (void)state;
  for (int n = 1; n <= 4; n++) {
    setCfg(1, 0, 2 * NSLOTS * PIECE, F_NONE, -1);
    expectOk(n, 2 * NSLOTS * PIECE, 1, NULL);
    expectOk(n, 6 * NSLOTS * PIECE + 7, 1, NULL);
    setCfg(1, 0, (2 * NSLOTS + 1) * PIECE, F_NONE, -1);
    expectFail(n, (2 * NSLOTS + 1) * PIECE, 1, "deadlock", "collnet queue full", "ch 0", NULL);
    /* lookahead: 3 chunks of 6 pieces before the first receive is one too many */
    setCfg(1, 2, 6 * PIECE, F_NONE, -1);
    expectFail(n, 30 * PIECE, 1, "deadlock", "collnet queue full", NULL);
    setCfg(1, 1, 8 * PIECE, F_NONE, -1);
    expectOk(n, 30 * PIECE, 1, NULL);
  }
  /* node2: the leader's recvReduceSend to COLLNET blocks too, and the child behind it. */
  setCfg(2, 0, (2 * NSLOTS + 1) * PIECE, F_NONE, -1);
  expectFail(4, (2 * NSLOTS + 1) * PIECE, 1, "deadlock", "collnet queue full", NULL);
}

static void test_missing_piece(void** state) {
  (void)state;
  size_t count = 9 * PIECE + 5;
  /* rank 2 sends one piece fewer; everybody (rank 2 too) waits for the group's last piece */
  setCfg(1, 1, CHUNK, F_SHORT_SEND, 2);
  expectFail(4, count, 1, "deadlock", "waits for collnet piece 9: posted by 3 of 4", "rank 2 sent 9", NULL);
  setCfg(2, 1, CHUNK, F_SHORT_SEND, 4); /* a leader (node 2 of 3 on channel 0) */
  expectFail(6, count, 1, "deadlock", "waits for collnet piece 9", "rank 4 sent 9", NULL);
  /* rank 0 sends and receives one piece fewer: it finishes, the others wait */
  setCfg(1, 0, CHUNK, F_SHORT_BOTH, 0);
  expectFail(3, count, 1, "deadlock", "posted by 2 of 3", NULL);
  /* every rank receives one piece fewer than it sent */
  setCfg(1, 1, CHUNK, F_SHORT_RECV_ALL, -1);
  expectFail(3, count, 2, "sent 5 piece(s) to collnet on channel 0 and received 4", "ranks 0,1,2", "mismatch", NULL);
  setCfg(1, 0, CHUNK, F_SHORT_RECV_ALL, -1);
  expectFail(1, count, 1, "received", NULL);
}

static void test_piece_sizes(void** state) {
  (void)state;
  setCfg(1, 1, CHUNK, F_SPLIT_SEND, 1);
  expectFail(3, 9 * PIECE, 1, "piece sizes differ", "collnet piece 0 on channel 0", "rank 1 contributes 10",
             "rank 0 contributed 64", NULL);
  setCfg(1, 1, CHUNK, F_SPLIT_SEND, 0);
  expectFail(3, 9 * PIECE, 1, "piece sizes differ", "rank 1 contributes 64", "rank 0 contributed 10", NULL);
}

static void test_counted_twice(void** state) {
  (void)state;
  setCfg(2, 1, CHUNK, F_TWICE, -1);
  expectFail(4, 9 * PIECE, 1, "counted twice", "collnet reducing piece 0 of channel 0", NULL);
  expectFail(2, 9 * PIECE, 1, "counted twice", NULL);
}

static void test_pre_post(void** state) {
  (void)state;
  setCfg(1, 1, CHUNK, F_NO_POST, -1);
  expectFail(3, 9 * PIECE, 1, "POST missing", NULL);
  setCfg(2, 1, CHUNK, F_NO_POST, -1);
  expectFail(4, 9 * PIECE, 2, "POST missing", NULL);
  setCfg(2, 1, CHUNK, F_POST_TWICE, -1);
  expectFail(4, 9 * PIECE, 1, "POST applied twice", NULL);
  /* POST before the network: reducing a post-processed value (or, alone, POST twice at the receive) */
  setCfg(1, 1, CHUNK, F_POST_EARLY, -1);
  expectFail(3, 9 * PIECE, 1, "already post-processed", "collnet reducing", NULL);
  expectFail(1, 9 * PIECE, 1, "POST applied twice", NULL);
  setCfg(1, 1, CHUNK, F_NO_PRE, 1);
  expectFail(3, 9 * PIECE, 1, "without PRE", NULL);
  setCfg(1, 1, CHUNK, F_NO_PRE, 0);
  expectFail(1, 9 * PIECE, 1, "POST applied to a value without PRE", NULL);
}

static void test_orphan_recv(void** state) {
  (void)state;
  setCfg(1, 1, CHUNK, F_ORPHAN_RECV, 1);
  expectFail(3, 9 * PIECE, 1, "deadlock", "rank 1 ch 1", "waits for collnet piece 0: posted by 0 of 1", NULL);
  setCfg(1, 1, CHUNK, F_ORPHAN_RECV, 0);
  expectFail(1, 0, 1, "deadlock", "rank 0 ch 1", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_flat),        cmocka_unit_test(test_node2),         cmocka_unit_test(test_send_recv),
      cmocka_unit_test(test_stats),       cmocka_unit_test(test_flow_control),  cmocka_unit_test(test_missing_piece),
      cmocka_unit_test(test_piece_sizes), cmocka_unit_test(test_counted_twice), cmocka_unit_test(test_pre_post),
      cmocka_unit_test(test_orphan_recv),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
