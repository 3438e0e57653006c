/* The fake RDMA device's failures, through the IB transport's verbs table, as a reliable-connected NIC
 * reports them: receiver-not-ready retries, remote access and length errors, injected completion errors and
 * the flushes after them, retry exhaustion, forced failures of calls and objects still in use. (The data
 * path: test_ib_verbs.c.) */
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
  printf("test_ib_verbs_errors: built without <infiniband/verbs.h>: skipped\n");
  return 77;
}
#else
#include "ib_fake_pair.h"

/* A write with immediate and no posted receive: receiver not ready. With rnr_retry 7 it waits (and so do
 * the QP's later WRs, in order) until a receive is posted; with rnr_retry 2 it fails after 3 tries with
 * IBV_WC_RNR_RETRY_EXC_ERR, the sender QP goes to error and flushes the rest; the receiver is unaffected. */
static void testReceiverNotReady(void** state) {
  (void)state;
  for (int rnr = 7; rnr >= 2; rnr -= 5) {
    qpOpts o = defaultOpts(DEV_IB);
    o.rnrRetry = (uint8_t)rnr;
    endpoint a, b;
    makePair(&a, &b, DEV_IB, &o);
    assert_int_equal(postWrite(a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, 1, NULL, 0, 0, 0, 0, 1, IBV_SEND_SIGNALED), 0);
    assert_int_equal(postWrite(a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, 2, NULL, 0, 0, 0, 0, 2, IBV_SEND_SIGNALED), 0);
    struct ibv_wc wc[2];
    commIbFakeStats s0, s1;
    commIbFakeGetStats(&s0);
    for (int i = 0; i < 10 && rnr == 7; i++) assert_int_equal(V->pollCq(a.scq, 2, wc), 0);
    if (rnr == 7) {
      commIbFakeGetStats(&s1);
      assert_true(s1.rnrRetries >= s0.rnrRetries + 10);
      assert_int_equal(postRecvs(b.qp, 1, 10), 0); /* one credit: the first write completes, the second waits */
      pollN(b.rcq, 1, wc);
      assert_int_equal(ntohl(wc[0].imm_data), 1);
      pollN(a.scq, 1, wc);
      assert_int_equal(wc[0].wr_id, 1);
      assert_int_equal(postRecvs(b.qp, 1, 11), 0);
      pollN(b.rcq, 1, wc);
      assert_int_equal(ntohl(wc[0].imm_data), 2);
      pollN(a.scq, 1, wc);
      assert_int_equal(wc[0].wr_id, 2);
    } else {
      pollN(a.scq, 2, wc);
      commIbFakeGetStats(&s1);
      assert_int_equal(s1.rnrRetries - s0.rnrRetries, 3); /* the first try and rnr_retry = 2 retries */
      assert_int_equal(wc[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
      assert_int_equal(wc[0].wr_id, 1);
      assert_int_equal(wc[1].status, IBV_WC_WR_FLUSH_ERR);
      assert_int_equal(wc[1].wr_id, 2);
      assert_int_equal(qpState(a.qp), IBV_QPS_ERR);
      assert_int_equal(qpState(b.qp), IBV_QPS_RTS);
      assert_int_equal(postWrite(a.qp, IBV_WR_RDMA_WRITE, 3, NULL, 0, 0, 0, 0, 0, 0), 0); /* accepted, flushed */
      pollN(a.scq, 1, wc);
      assert_int_equal(wc[0].status, IBV_WC_WR_FLUSH_ERR);
      assert_int_equal(wc[0].wr_id, 3);
      struct ibv_wc none;
      assert_int_equal(V->pollCq(b.rcq, 1, &none), 0);
    }
    freePair(&a, &b);
  }
}

/* Remote access errors complete with IBV_WC_REM_ACCESS_ERR and put both QPs in error (the responder's
 * receives flush); a bad local key gives IBV_WC_LOC_PROT_ERR to the sender only; a zero-byte write checks
 * no key. */
static void testAccessErrors(void** state) {
  (void)state;
  enum { BAD_RKEY, OUT_OF_BOUNDS, NO_REMOTE_WRITE_MR, NO_REMOTE_WRITE_QP, OTHER_PD, BAD_LKEY, ZERO_BYTES, NCASES };
  for (int c = 0; c < NCASES; c++) {
    qpOpts o = defaultOpts(DEV_ROCE);
    if (c == NO_REMOTE_WRITE_QP) o.access = IBV_ACCESS_LOCAL_WRITE;
    endpoint a, b;
    makePair(&a, &b, DEV_ROCE, &o);
    uint8_t src[64] = {1}, dst[64] = {0};
    struct ibv_mr* smr = V->regMr(a.pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr* dmr = V->regMr(c == OTHER_PD ? a.pd : b.pd, dst, sizeof(dst),
                                  c == NO_REMOTE_WRITE_MR ? IBV_ACCESS_LOCAL_WRITE : RW);
    assert_true(smr && dmr);
    assert_int_equal(postRecvs(b.qp, 2, 0), 0);
    uint32_t rkey = c == BAD_RKEY ? dmr->rkey ^ 0x100 : dmr->rkey;
    uint32_t lkey = c == BAD_LKEY ? smr->rkey : smr->lkey; /* an rkey is not an lkey */
    uint32_t len = c == ZERO_BYTES ? 0 : (c == OUT_OF_BOUNDS ? 33 : 32);
    if (c == ZERO_BYTES) rkey = 0xdead;
    assert_int_equal(
        postWrite(a.qp, IBV_WR_RDMA_WRITE, 1, src, len, lkey, (uintptr_t)(dst + 32), rkey, 0, IBV_SEND_SIGNALED), 0);
    struct ibv_wc wc[2];
    pollN(a.scq, 1, wc);
    enum ibv_wc_status want = c == ZERO_BYTES ? IBV_WC_SUCCESS
                              : c == BAD_LKEY ? IBV_WC_LOC_PROT_ERR
                                              : IBV_WC_REM_ACCESS_ERR;
    assert_int_equal(wc[0].status, want);
    assert_int_equal(wc[0].wr_id, 1);
    int responderFails = want == IBV_WC_REM_ACCESS_ERR;
    assert_int_equal(qpState(a.qp), want == IBV_WC_SUCCESS ? IBV_QPS_RTS : IBV_QPS_ERR);
    assert_int_equal(qpState(b.qp), responderFails ? IBV_QPS_ERR : IBV_QPS_RTS);
    if (responderFails) {
      pollN(b.rcq, 2, wc);
      assert_int_equal(wc[0].status, IBV_WC_WR_FLUSH_ERR);
      assert_int_equal(wc[0].opcode, IBV_WC_RECV);
      assert_int_equal(wc[1].wr_id, 1);
    }
    assert_int_equal(dst[32], 0);
    assert_int_equal(V->deregMr(smr), 0);
    assert_int_equal(V->deregMr(dmr), 0);
    freePair(&a, &b);
  }
}

/* Injected completion errors: the next 2 WRs fail with the given status, the rest flush (unsignaled ones
 * too), new posts flush; then the QP is reset and reconnected and carries data again. */
static void testInjectedErrors(void** state) {
  (void)state;
  qpOpts o = defaultOpts(DEV_IB);
  endpoint a, b;
  makePair(&a, &b, DEV_IB, &o);
  assert_int_equal(commIbFakeInjectError(a.qp, 2, IBV_WC_RETRY_EXC_ERR), 0);
  assert_int_equal(postRecvs(b.qp, 8, 0), 0);
  for (int i = 0; i < 4; i++)
    assert_int_equal(postWrite(a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, (uint64_t)i, NULL, 0, 0, 0, 0, 0,
                               i == 2 ? 0 : IBV_SEND_SIGNALED),
                     0);
  struct ibv_wc wc[4];
  pollN(a.scq, 4, wc);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(wc[i].wr_id, i);
    assert_int_equal(wc[i].status, i < 2 ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR);
    assert_int_equal(wc[i].qp_num, a.qp->qp_num);
  }
  assert_string_equal(V->wcStatusStr(IBV_WC_RETRY_EXC_ERR), "transport retry counter exceeded");
  assert_int_equal(qpState(a.qp), IBV_QPS_ERR);
  assert_int_equal(a.qp->state, IBV_QPS_RTS); /* as libibverbs: the struct's field changes only in modifyQp */
  struct ibv_wc none;
  assert_int_equal(V->pollCq(b.rcq, 1, &none), 0); /* nothing reached the receiver */
  assert_int_equal(qpState(b.qp), IBV_QPS_RTS);
  /* Recover: a -> RESET -> INIT -> RTR -> RTS with the same PSNs; b never noticed. */
  struct ibv_qp_attr at;
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_RESET;
  assert_int_equal(V->modifyQp(a.qp, &at, IBV_QP_STATE), 0);
  assert_int_equal(toInit(a.qp, RW), 0);
  assert_int_equal(toRtr(a.qp, &b, b.qp->qp_num, -1, 0x111), 0);
  assert_int_equal(toRts(a.qp, 0x222, &o), 0);
  assert_int_equal(postWrite(a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, 9, NULL, 0, 0, 0, 0, 99, IBV_SEND_SIGNALED), 0);
  pollN(b.rcq, 1, wc);
  assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
  assert_int_equal(ntohl(wc[0].imm_data), 99);
  pollN(a.scq, 1, wc);
  assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
  /* Moving b to error flushes its remaining 7 receives. */
  at.qp_state = IBV_QPS_ERR;
  assert_int_equal(V->modifyQp(b.qp, &at, IBV_QP_STATE), 0);
  struct ibv_wc flushed[7];
  pollN(b.rcq, 7, flushed);
  for (int i = 0; i < 7; i++) assert_int_equal(flushed[i].status, IBV_WC_WR_FLUSH_ERR);
  freePair(&a, &b);
}

/* A peer that cannot be reached or does not accept (no such QP, PSN mismatch, a RoCE v1 packet towards a
 * port that has only RoCE v2 GIDs) makes the sender retry retry_cnt times and fail with
 * IBV_WC_RETRY_EXC_ERR. */
static void testRetryExceeded(void** state) {
  (void)state;
  commIbFakeDevice d[2];
  commIbFakeDeviceInit(&d[0], "roceA", IBV_LINK_LAYER_ETHERNET, 1);
  commIbFakeDeviceInit(&d[1], "roceB", IBV_LINK_LAYER_ETHERNET, 2);
  d[1].ports[0].gids[0] = d[1].ports[0].gids[1]; /* B: link-local v2, 10.0.2.1 v2 only */
  d[1].ports[0].gids[1] = d[1].ports[0].gids[3];
  d[1].ports[0].nGids = 2;
  assert_int_equal(commIbFakeConfigure(2, d), 0);
  for (int c = 0; c < 4; c++) {
    qpOpts o = defaultOpts(DEV_ROCE);
    o.retryCnt = 3;
    endpoint a, b;
    makeEndpoint(&a, 0, &o, NULL);
    makeEndpoint(&b, 1, &o, NULL);
    assert_int_equal(toInit(a.qp, RW), 0);
    assert_int_equal(toInit(b.qp, RW), 0);
    uint32_t dest = c == 0 ? 0xfffff0 : b.qp->qp_num;
    assert_int_equal(toRtrGid(a.qp, &b, dest, c == 2 ? 2 : 3, 1, 1), 0); /* A's index 2 is RoCE v1 */
    assert_int_equal(toRtrGid(b.qp, &a, a.qp->qp_num, 1, 3, c == 1 ? 77 : 2), 0);
    assert_int_equal(toRts(a.qp, 2, &o), 0);
    assert_int_equal(toRts(b.qp, 1, &o), 0);
    assert_int_equal(postRecvs(b.qp, 1, 0), 0);
    commIbFakeStats s0, s1;
    commIbFakeGetStats(&s0);
    assert_int_equal(postWrite(a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, 5, NULL, 0, 0, 0, 0, 0, IBV_SEND_SIGNALED), 0);
    struct ibv_wc wc;
    pollN(a.scq, 1, &wc);
    commIbFakeGetStats(&s1);
    if (c == 3) { /* the control case: v2 to v2 with matching PSNs works */
      assert_int_equal(wc.status, IBV_WC_SUCCESS);
      assert_int_equal(s1.retries, s0.retries);
      pollN(b.rcq, 1, &wc);
    } else {
      assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
      assert_int_equal(s1.retries - s0.retries, 4); /* the first try and 3 retries */
      assert_int_equal(V->pollCq(b.rcq, 1, &wc), 0);
    }
    freePair(&a, &b);
  }
}

/* Failing calls (as a real device can: out of resources), and objects that are still in use. */
static void testFailuresAndBusy(void** state) {
  (void)state;
  qpOpts o = defaultOpts(DEV_IB);
  endpoint a, b;
  makePair(&a, &b, DEV_IB, &o);
  uint8_t buf[64];
  assert_int_equal(commIbFakeFailCall(COMM_IB_FAKE_CALL_REG_MR, 1, ENOMEM), 0);
  struct ibv_mr* m1 = V->regMr(a.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
  assert_non_null(m1);
  errno = 0;
  assert_null(V->regMr(a.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE));
  assert_int_equal(errno, ENOMEM);
  assert_null(V->regMr(a.pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE)); /* remote write needs local write */
  assert_int_equal(errno, EINVAL);
  assert_null(V->regDmabufMr(a.pd, 0, 4096, 0, 3, IBV_ACCESS_LOCAL_WRITE));
  assert_int_equal(errno, EOPNOTSUPP);
  assert_int_equal(commIbFakeFailCall(COMM_IB_FAKE_CALL_POST_SEND, 0, EIO), 0);
  assert_int_equal(postWrite(a.qp, IBV_WR_RDMA_WRITE, 1, NULL, 0, 0, 0, 0, 0, 0), EIO);
  assert_int_equal(commIbFakeFailCall(COMM_IB_FAKE_CALL_MODIFY_QP, 0, EIO), 0);
  assert_int_equal(toRts(a.qp, 0x222, &o), EIO);
  assert_int_equal(commIbFakeFailCall(COMM_IB_FAKE_CALL_CREATE_QP, 0, ENOMEM), 0);
  struct ibv_qp_init_attr ia = {.send_cq = a.scq, .recv_cq = a.rcq, .qp_type = IBV_QPT_RC, .cap.max_send_wr = 1};
  assert_null(V->createQp(a.pd, &ia));
  assert_int_equal(errno, ENOMEM);
  assert_int_equal(V->destroyCq(a.scq), EBUSY);   /* a QP uses it */
  assert_int_equal(V->deallocPd(a.pd), EBUSY);    /* a QP and an MR */
  assert_int_equal(V->closeDevice(a.ctx), EBUSY); /* a PD and CQs */
  assert_int_equal(V->deregMr(m1), 0);
  freePair(&a, &b);
}

int main(void) {
  V = commIbFakeVerbs();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(testReceiverNotReady, setup, teardown),
      cmocka_unit_test_setup_teardown(testAccessErrors, setup, teardown),
      cmocka_unit_test_setup_teardown(testInjectedErrors, setup, teardown),
      cmocka_unit_test_setup_teardown(testRetryExceeded, setup, teardown),
      cmocka_unit_test_setup_teardown(testFailuresAndBusy, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif /* COMM_HAVE_IBVERBS */
