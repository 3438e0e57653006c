/* The IB transport's verbs table over the in-process fake RDMA device: it behaves as a reliable-connected
 * NIC on its data path (QP state machine, RDMA write with immediate, sends, reads, send-queue accounting,
 * out-of-order completions across QPs, several threads). Everything goes through the table. (Errors:
 * test_ib_verbs_errors.c; loading the real libibverbs and device discovery: test_ib_net.c.) */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ib_verbs.h"

#ifndef COMM_HAVE_IBVERBS
int main(void) {
  printf("test_ib_verbs: built without <infiniband/verbs.h>: skipped\n");
  return 77;
}
#else
#include "ib_fake_pair.h"

/* ---------------------------------------------------------------- the QP state machine */

static void testQpStateMachine(void** state) {
  (void)state;
  qpOpts o = defaultOpts(DEV_ROCE);
  endpoint a, b;
  makeEndpoint(&a, DEV_ROCE, &o, NULL);
  makeEndpoint(&b, DEV_ROCE, &o, NULL);
  struct ibv_qp_attr at;
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_INIT;
  at.port_num = 1;
  /* RESET -> INIT needs the pkey index, port and access flags. */
  assert_int_equal(V->modifyQp(a.qp, &at, IBV_QP_STATE | IBV_QP_PORT), EINVAL);
  /* A skipped state. */
  assert_int_equal(toRtr(a.qp, &b, b.qp->qp_num, 3, 0), EINVAL);
  assert_int_equal(postRecvs(a.qp, 1, 0), EINVAL); /* no receives in RESET */
  assert_int_equal(toInit(a.qp, RW), 0);
  assert_int_equal(toInit(b.qp, RW), 0);
  assert_int_equal(postRecvs(a.qp, 1, 0), 0); /* receives may be posted from INIT on */
  uint8_t buf[8];
  assert_int_equal(postWrite(a.qp, IBV_WR_RDMA_WRITE, 1, buf, 0, 0, 0, 0, 0, IBV_SEND_SIGNALED), EINVAL);
  /* RoCE needs a GRH; MTU above the port's; an unused source GID; an attribute INIT -> RTR does not take. */
  assert_int_equal(toRtr(a.qp, &b, b.qp->qp_num, -1, 0), EINVAL);
  assert_int_equal(toRtr(a.qp, &b, b.qp->qp_num, 6, 0), EINVAL);
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = IBV_MTU_4096; /* the RoCE port runs 1024 */
  at.ah_attr.is_global = 1;
  at.ah_attr.grh.sgid_index = 3;
  at.dest_qp_num = b.qp->qp_num;
  int rtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  assert_int_equal(V->modifyQp(a.qp, &at, rtrMask), EINVAL);
  at.path_mtu = IBV_MTU_1024;
  assert_int_equal(V->modifyQp(a.qp, &at, rtrMask | IBV_QP_SQ_PSN), EINVAL);
  assert_int_equal(V->modifyQp(a.qp, &at, rtrMask & ~IBV_QP_MIN_RNR_TIMER), EINVAL);
  assert_int_equal(qpState(a.qp), IBV_QPS_INIT); /* failed modifications change nothing */
  assert_int_equal(toRtr(a.qp, &b, b.qp->qp_num, 3, 5), 0);
  assert_int_equal(a.qp->state, IBV_QPS_RTR);
  assert_int_equal(postWrite(a.qp, IBV_WR_RDMA_WRITE, 1, buf, 0, 0, 0, 0, 0, IBV_SEND_SIGNALED), EINVAL);
  /* RTR -> RTS needs timeout, retry counts, SQ PSN, rd atomic; a retry count above 7 is refused. */
  o.retryCnt = 8;
  assert_int_equal(toRts(a.qp, 9, &o), EINVAL);
  o.retryCnt = 7;
  assert_int_equal(toRts(a.qp, 9, &o), 0);
  struct ibv_qp_attr qa;
  struct ibv_qp_init_attr qi;
  assert_int_equal(V->queryQp(a.qp, &qa, IBV_QP_STATE, &qi), 0);
  assert_int_equal(qa.qp_state, IBV_QPS_RTS);
  assert_int_equal(qa.dest_qp_num, b.qp->qp_num);
  assert_int_equal(qa.sq_psn, 9);
  assert_int_equal(qa.rq_psn, 5);
  assert_int_equal(qa.timeout, 14);
  assert_int_equal(qa.ah_attr.grh.sgid_index, 3);
  assert_int_equal(qi.cap.max_send_wr, 64);
  /* Any state -> RESET discards the queued receive, RESET -> RTS is not a transition. */
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_RESET;
  assert_int_equal(V->modifyQp(a.qp, &at, IBV_QP_STATE), 0);
  assert_int_equal(toRts(a.qp, 9, &o), EINVAL);
  /* Unsupported QP types and sizes. */
  struct ibv_qp_init_attr ia = {.send_cq = a.scq, .recv_cq = a.rcq, .qp_type = IBV_QPT_UD, .cap.max_send_wr = 1};
  errno = 0;
  assert_null(V->createQp(a.pd, &ia));
  assert_int_equal(errno, EOPNOTSUPP);
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_inline_data = COMM_IB_FAKE_MAX_INLINE + 1;
  assert_null(V->createQp(a.pd, &ia));
  assert_int_equal(errno, EINVAL);
  freePair(&a, &b);
}

/* ---------------------------------------------------------------- data path */

/* RDMA write with immediate lands in the remote MR, consumes one receive, and completes on both sides
 * (not before a wire step); unsignaled writes make no sender completion. Over InfiniBand (LIDs) and RoCE
 * v2 (GIDs). */
static void testWriteWithImm(void** state) {
  (void)state;
  for (int dev = 0; dev < 2; dev++) {
    qpOpts o = defaultOpts(dev);
    endpoint a, b;
    makePair(&a, &b, dev, &o);
    enum { N = 4096 };
    uint8_t* src = malloc(N);
    uint8_t* dst = calloc(1, N + 64);
    assert_true(src && dst);
    for (int i = 0; i < N; i++) src[i] = (uint8_t)(i * 7 + dev);
    struct ibv_mr* smr = V->regMr(a.pd, src, N, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr* dmr = V->regMr(b.pd, dst, N + 64, RW | (int)IBV_ACCESS_RELAXED_ORDERING);
    assert_true(smr && dmr);
    assert_int_not_equal(dmr->lkey, dmr->rkey);
    assert_int_equal(postRecvs(b.qp, 2, 100), 0);
    assert_int_equal(postWrite(a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, 7, src, N, smr->lkey, (uint64_t)(uintptr_t)(dst + 32),
                               dmr->rkey, 0xabcd1234, IBV_SEND_SIGNALED),
                     0);
    assert_int_equal(dst[32], 0); /* posting moves nothing: the wire does, later */
    struct ibv_wc wc[2];
    pollN(b.rcq, 1, wc);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    assert_true(wc[0].wc_flags & IBV_WC_WITH_IMM);
    assert_int_equal(ntohl(wc[0].imm_data), 0xabcd1234);
    assert_int_equal(wc[0].byte_len, N);
    assert_int_equal(wc[0].wr_id, 100);
    assert_int_equal(wc[0].qp_num, b.qp->qp_num);
    assert_int_equal(wc[0].src_qp, a.qp->qp_num);
    assert_memory_equal(dst + 32, src, N);
    assert_int_equal(dst[31], 0);
    assert_int_equal(dst[32 + N], 0);
    pollN(a.scq, 1, wc);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[0].opcode, IBV_WC_RDMA_WRITE);
    assert_int_equal(wc[0].wr_id, 7);
    /* An unsignaled plain write then a signaled zero-byte write with immediate (NCCL-style completion
     * marker without data): one sender completion, for the second. */
    assert_int_equal(
        postWrite(a.qp, IBV_WR_RDMA_WRITE, 8, src, 16, smr->lkey, (uint64_t)(uintptr_t)dst, dmr->rkey, 0, 0), 0);
    assert_int_equal(postWrite(a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, 9, NULL, 0, 0, 0, 0, 5, IBV_SEND_SIGNALED), 0);
    pollN(a.scq, 1, wc);
    assert_int_equal(wc[0].wr_id, 9);
    pollN(b.rcq, 1, wc);
    assert_int_equal(wc[0].wr_id, 101);
    assert_int_equal(wc[0].byte_len, 0);
    assert_int_equal(ntohl(wc[0].imm_data), 5);
    assert_memory_equal(dst, src, 16);
    assert_int_equal(V->deregMr(smr), 0);
    assert_int_equal(V->deregMr(dmr), 0);
    free(src);
    free(dst);
    freePair(&a, &b);
  }
}

/* SEND (inline: the buffer is taken at post; and gathered from several SGEs into several), SEND with
 * immediate, and RDMA READ over a loopback QP (connected to itself, as a GPU flush does). */
static void testSendAndRead(void** state) {
  (void)state;
  qpOpts o = defaultOpts(DEV_IB);
  endpoint a, b;
  makePair(&a, &b, DEV_IB, &o);
  uint8_t sbuf[256], rbuf[256];
  memset(rbuf, 0, sizeof(rbuf));
  for (int i = 0; i < 256; i++) sbuf[i] = (uint8_t)i;
  struct ibv_mr* smr = V->regMr(a.pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr* rmr = V->regMr(b.pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
  assert_true(smr && rmr);
  struct ibv_sge rsge[2] = {{(uintptr_t)rbuf, 10, rmr->lkey}, {(uintptr_t)(rbuf + 100), 100, rmr->lkey}};
  struct ibv_recv_wr *rbad, rwr = {.wr_id = 50, .sg_list = rsge, .num_sge = 2};
  assert_int_equal(V->postRecv(b.qp, &rwr, &rbad), 0);
  rwr.wr_id = 51;
  assert_int_equal(V->postRecv(b.qp, &rwr, &rbad), 0);
  /* Inline send of 40 bytes: changing the buffer after the post changes nothing. */
  assert_int_equal(postWrite(a.qp, IBV_WR_SEND, 1, sbuf, 40, 0 /* no lkey needed inline */, 0, 0, 0,
                             IBV_SEND_SIGNALED | IBV_SEND_INLINE),
                   0);
  sbuf[0] = 0xee;
  struct ibv_wc wc[2];
  pollN(b.rcq, 1, wc);
  assert_int_equal(wc[0].opcode, IBV_WC_RECV);
  assert_int_equal(wc[0].byte_len, 40);
  assert_false(wc[0].wc_flags & IBV_WC_WITH_IMM);
  assert_int_equal(rbuf[0], 0);
  assert_int_equal(rbuf[9], 9);
  assert_int_equal(rbuf[100], 10);
  assert_int_equal(rbuf[129], 39);
  assert_int_equal(rbuf[130], 0);
  pollN(a.scq, 1, wc);
  assert_int_equal(wc[0].opcode, IBV_WC_SEND);
  /* Inline above the QP's limit is refused at post. */
  assert_int_equal(postWrite(a.qp, IBV_WR_SEND, 2, sbuf, 65, 0, 0, 0, 0, IBV_SEND_INLINE), EINVAL);
  /* Gathered send with immediate: two SGEs. */
  struct ibv_sge ssge[2] = {{(uintptr_t)(sbuf + 200), 5, smr->lkey}, {(uintptr_t)(sbuf + 10), 5, smr->lkey}};
  struct ibv_send_wr *sbad, swr = {.wr_id = 3,
                                   .opcode = IBV_WR_SEND_WITH_IMM,
                                   .send_flags = IBV_SEND_SIGNALED,
                                   .sg_list = ssge,
                                   .num_sge = 2,
                                   .imm_data = htonl(77)};
  assert_int_equal(V->postSend(a.qp, &swr, &sbad), 0);
  pollN(b.rcq, 1, wc);
  assert_int_equal(wc[0].wr_id, 51);
  assert_true(wc[0].wc_flags & IBV_WC_WITH_IMM);
  assert_int_equal(ntohl(wc[0].imm_data), 77);
  static const uint8_t expect[10] = {200, 201, 202, 203, 204, 10, 11, 12, 13, 14};
  assert_memory_equal(rbuf, expect, 10);
  pollN(a.scq, 1, wc);

  /* Loopback RDMA READ: b reads rbuf[100..110) into rbuf[200..210) through a QP connected to itself. */
  endpoint l;
  qpOpts lo = defaultOpts(DEV_IB);
  makeEndpoint(&l, DEV_IB, &lo, &b);
  assert_int_equal(toInit(l.qp, RW), 0);
  assert_int_equal(toRtr(l.qp, &b, l.qp->qp_num, -1, 42), 0);
  assert_int_equal(toRts(l.qp, 42, &lo), 0);
  struct ibv_mr* rw = V->regMr(b.pd, rbuf, sizeof(rbuf), RW);
  assert_non_null(rw);
  assert_int_equal(postWrite(l.qp, IBV_WR_RDMA_READ, 4, rbuf + 200, 10, rw->lkey, (uintptr_t)(rbuf + 100), rw->rkey, 0,
                             IBV_SEND_SIGNALED),
                   0);
  pollN(b.scq, 1, wc);
  assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
  assert_int_equal(wc[0].opcode, IBV_WC_RDMA_READ);
  assert_int_equal(wc[0].byte_len, 10);
  assert_memory_equal(rbuf + 200, rbuf + 100, 10);
  freeEndpoint(&l, 0);
  assert_int_equal(V->deregMr(rw), 0);
  assert_int_equal(V->deregMr(smr), 0);
  assert_int_equal(V->deregMr(rmr), 0);
  freePair(&a, &b);
}

/* ---------------------------------------------------------------- flow control and errors */

/* Send-queue slots are held until a completion of the WR (or a later one) is polled; a CQ that overflows
 * is a fatal error. */
static void testQueueAccounting(void** state) {
  (void)state;
  qpOpts o = defaultOpts(DEV_IB);
  o.maxSendWr = 4;
  o.maxRecvWr = 2;
  o.cqe = 2;
  endpoint a, b;
  makePair(&a, &b, DEV_IB, &o);
  for (int i = 0; i < 4; i++)
    assert_int_equal(
        postWrite(a.qp, IBV_WR_RDMA_WRITE, (uint64_t)i, NULL, 0, 0, 0, 0, 0, i == 3 ? IBV_SEND_SIGNALED : 0), 0);
  assert_int_equal(postWrite(a.qp, IBV_WR_RDMA_WRITE, 4, NULL, 0, 0, 0, 0, 0, 0), ENOMEM);
  for (int i = 0; i < 4; i++) commIbFakeProgress(); /* executed, but not yet polled: still full */
  assert_int_equal(postWrite(a.qp, IBV_WR_RDMA_WRITE, 4, NULL, 0, 0, 0, 0, 0, 0), ENOMEM);
  struct ibv_wc wc[4];
  pollN(a.scq, 1, wc);
  assert_int_equal(wc[0].wr_id, 3);
  for (int i = 0; i < 3; i++)
    assert_int_equal(postWrite(a.qp, IBV_WR_RDMA_WRITE, 10 + (uint64_t)i, NULL, 0, 0, 0, 0, 0, IBV_SEND_SIGNALED), 0);
  assert_int_equal(postRecvs(b.qp, 2, 0), 0);
  assert_int_equal(postRecvs(b.qp, 1, 0), ENOMEM); /* the receive queue holds 2 */
  /* Three signaled completions into a CQ of 2 entries: overrun. */
  errno = 0;
  int r = 0;
  for (int i = 0; i < 4 && r >= 0; i++) r = V->pollCq(a.scq, 0, wc);
  assert_true(r < 0);
  assert_int_equal(errno, EOVERFLOW);
  commIbFakeStats s;
  commIbFakeGetStats(&s);
  assert_true(s.cqOverruns >= 1);
  freePair(&a, &b);
}

/* Out of order: with reordering on, completions of different QPs interleave differently from the posting
 * order (on the shared receive CQ and on the sender's), while each QP's own stay in order. Without it, the
 * whole process completes in posting order. */
static void testReorder(void** state) {
  (void)state;
  enum { NQP = 4, PER = 16 };
  for (int reorder = 0; reorder < 2; reorder++) {
    commIbFakeOptions opt;
    commIbFakeGetOptions(&opt);
    opt.reorder = reorder;
    opt.seed = 12345;
    opt.maxPerStep = 3;
    assert_int_equal(commIbFakeSetOptions(&opt), 0);
    qpOpts o = defaultOpts(DEV_ROCE);
    endpoint a[NQP], b[NQP];
    for (int q = 0; q < NQP; q++) {
      makeEndpoint(&a[q], DEV_ROCE, &o, q ? &a[0] : NULL);
      makeEndpoint(&b[q], DEV_ROCE, &o, q ? &b[0] : NULL);
      connectPair(&a[q], &b[q], &o);
      assert_int_equal(postRecvs(b[q].qp, PER, 0), 0);
    }
    for (int i = 0; i < PER; i++)
      for (int q = 0; q < NQP; q++)
        assert_int_equal(postWrite(a[q].qp, IBV_WR_RDMA_WRITE_WITH_IMM, (uint64_t)(q * 1000 + i), NULL, 0, 0, 0, 0,
                                   (uint32_t)(q * 1000 + i), IBV_SEND_SIGNALED),
                         0);
    struct ibv_wc rwc[NQP * PER], swc[NQP * PER];
    pollN(b[0].rcq, NQP * PER, rwc);
    pollN(a[0].scq, NQP * PER, swc);
    for (int side = 0; side < 2; side++) {
      struct ibv_wc* wc = side ? swc : rwc;
      int next[NQP] = {0}, inversions = 0;
      for (int k = 0; k < NQP * PER; k++) {
        uint32_t v = side ? (uint32_t)wc[k].wr_id : ntohl(wc[k].imm_data);
        int q = (int)(v / 1000), i = (int)(v % 1000);
        assert_int_equal(wc[k].status, IBV_WC_SUCCESS);
        assert_int_equal(wc[k].qp_num, side ? a[q].qp->qp_num : b[q].qp->qp_num);
        assert_int_equal(i, next[q]++); /* per-QP order */
        inversions += k != i * NQP + q; /* differs from the posting order */
      }
      if (reorder) assert_true(inversions > NQP * PER / 4);
      else assert_int_equal(inversions, 0);
    }
    for (int q = NQP - 1; q >= 0; q--) {
      freeEndpoint(&a[q], q == 0);
      freeEndpoint(&b[q], q == 0);
    }
  }
}

/* ---------------------------------------------------------------- threads */

typedef struct {
  endpoint* a;
  int id, n;
  uint8_t* src;
  struct ibv_mr *smr, *dmr;
  uint8_t* dst;
} poster;

static void* posterMain(void* arg) {
  poster* p = arg;
  for (int i = 0; i < p->n; i++) {
    size_t off = ((size_t)p->id * (size_t)p->n + (size_t)i) * 8;
    int err;
    while ((err = postWrite(p->a->qp, IBV_WR_RDMA_WRITE_WITH_IMM, off, p->src + off, 8, p->smr->lkey,
                            (uintptr_t)(p->dst + off), p->dmr->rkey, (uint32_t)off, IBV_SEND_SIGNALED)) == ENOMEM)
      sched_yield(); /* send queue full until the main thread polls */
    if (err) return (void*)1;
  }
  return NULL;
}

/* Two threads post on one QP while this one polls both CQs; with the wire stepped by polls and by the
 * background thread. Every write lands and completes exactly once. */
static void testThreads(void** state) {
  (void)state;
  enum { PER = 2000, NT = 2, TOTAL = PER * NT };
  for (int wireThread = 0; wireThread < 2; wireThread++) {
    commIbFakeOptions opt;
    commIbFakeGetOptions(&opt);
    opt.wireThread = wireThread;
    opt.reorder = 1;
    assert_int_equal(commIbFakeSetOptions(&opt), 0);
    qpOpts o = defaultOpts(DEV_IB);
    o.maxSendWr = 32;
    o.maxRecvWr = TOTAL;
    o.cqe = TOTAL;
    endpoint a, b;
    makePair(&a, &b, DEV_IB, &o);
    uint8_t* src = malloc(TOTAL * 8);
    uint8_t* dst = calloc(TOTAL, 8);
    assert_true(src && dst);
    for (int i = 0; i < TOTAL * 8; i++) src[i] = (uint8_t)(i * 13 + 1);
    struct ibv_mr* smr = V->regMr(a.pd, src, TOTAL * 8, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr* dmr = V->regMr(b.pd, dst, TOTAL * 8, RW);
    assert_int_equal(postRecvs(b.qp, TOTAL, 0), 0);
    poster p[NT];
    pthread_t t[NT];
    for (int i = 0; i < NT; i++) {
      p[i] = (poster){&a, i, PER, src, smr, dmr, dst};
      assert_int_equal(pthread_create(&t[i], NULL, posterMain, &p[i]), 0);
    }
    uint8_t* seen = calloc(TOTAL, 1);
    int sdone = 0, rdone = 0;
    int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
    struct ibv_wc wc[16];
    while (sdone < TOTAL || rdone < TOTAL) {
      assert_true(commTimeNs() < deadline);
      int n = V->pollCq(a.scq, 16, wc);
      assert_true(n >= 0);
      for (int i = 0; i < n; i++) assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
      sdone += n;
      n = V->pollCq(b.rcq, 16, wc);
      assert_true(n >= 0);
      for (int i = 0; i < n; i++) {
        assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
        uint32_t off = ntohl(wc[i].imm_data);
        assert_int_equal(seen[off / 8]++, 0);
        assert_memory_equal(dst + off, src + off, 8); /* the data is there when its completion is */
      }
      rdone += n;
      if (n == 0) sched_yield();
    }
    for (int i = 0; i < NT; i++) {
      void* ret;
      assert_int_equal(pthread_join(t[i], &ret), 0);
      assert_null(ret);
    }
    assert_memory_equal(dst, src, TOTAL * 8);
    free(seen);
    assert_int_equal(V->deregMr(smr), 0);
    assert_int_equal(V->deregMr(dmr), 0);
    free(src);
    free(dst);
    freePair(&a, &b);
  }
}

int main(void) {
  V = commIbFakeVerbs();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(testQpStateMachine, setup, teardown),
      cmocka_unit_test_setup_teardown(testWriteWithImm, setup, teardown),
      cmocka_unit_test_setup_teardown(testSendAndRead, setup, teardown),
      cmocka_unit_test_setup_teardown(testQueueAccounting, setup, teardown),
      cmocka_unit_test_setup_teardown(testReorder, setup, teardown),
      cmocka_unit_test_setup_teardown(testThreads, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif /* COMM_HAVE_IBVERBS */
