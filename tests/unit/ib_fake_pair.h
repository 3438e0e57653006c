/* Helpers of the fake-device tests (test_ib_verbs.c, test_ib_verbs_errors.c): endpoints (context, PD, CQs,
 * QP) on the fake's devices, connected pairs, posts and polls through the verbs table V, and the fixture
 * that configures one InfiniBand and one RoCE device and checks at teardown that nothing leaked. Include
 * after cmocka.h, only when COMM_HAVE_IBVERBS is defined. */
#ifndef COMM_TEST_IB_FAKE_PAIR_H_
#define COMM_TEST_IB_FAKE_PAIR_H_

#include "ib_verbs.h"
#include "ib_verbs_fake.h"
#include "utils.h"

#define DEADLINE_MS 30000
#define DEV_IB 0
#define DEV_ROCE 1

static const commIbVerbs* V;

/* ---------------------------------------------------------------- helpers */

typedef struct {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* scq;
  struct ibv_cq* rcq;
  struct ibv_qp* qp;
} endpoint;

typedef struct {
  int gidIndex; /* RoCE: the source GID index (-1: no GRH, LID addressing) */
  uint8_t rnrRetry, retryCnt;
  uint32_t maxSendWr, maxRecvWr;
  int cqe;
  int access; /* QP access flags */
} qpOpts;

static inline qpOpts defaultOpts(int dev) {
  qpOpts o = {dev == DEV_ROCE ? 3 : -1,
              7,
              7,
              64,
              64,
              256,
              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
  return o;
}

static inline struct ibv_context* openDev(int index) {
  int n = 0;
  struct ibv_device** list = V->getDeviceList(&n);
  assert_non_null(list);
  assert_true(index < n);
  struct ibv_context* ctx = V->openDevice(list[index]);
  V->freeDeviceList(list);
  assert_non_null(ctx);
  return ctx;
}

/* An endpoint with its own PD and CQs (share = another endpoint whose context, PD and CQs it reuses). */
static inline void makeEndpoint(endpoint* e, int dev, const qpOpts* o, const endpoint* share) {
  memset(e, 0, sizeof(*e));
  if (share) {
    e->ctx = share->ctx;
    e->pd = share->pd;
    e->scq = share->scq;
    e->rcq = share->rcq;
  } else {
    e->ctx = openDev(dev);
    assert_non_null(e->pd = V->allocPd(e->ctx));
    assert_non_null(e->scq = V->createCq(e->ctx, o->cqe, NULL, NULL, 0));
    assert_non_null(e->rcq = V->createCq(e->ctx, o->cqe, NULL, NULL, 0));
  }
  struct ibv_qp_init_attr ia = {
      .send_cq = e->scq, .recv_cq = e->rcq, .qp_type = IBV_QPT_RC, .cap = {o->maxSendWr, o->maxRecvWr, 4, 4, 64}};
  assert_non_null(e->qp = V->createQp(e->pd, &ia));
  assert_int_equal(e->qp->state, IBV_QPS_RESET);
}

static inline void freeEndpoint(endpoint* e, int ownsShared) {
  assert_int_equal(V->destroyQp(e->qp), 0);
  if (!ownsShared) return;
  assert_int_equal(V->destroyCq(e->scq), 0);
  assert_int_equal(V->destroyCq(e->rcq), 0);
  assert_int_equal(V->deallocPd(e->pd), 0);
  assert_int_equal(V->closeDevice(e->ctx), 0);
}

static inline int toInit(struct ibv_qp* qp, int access) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = (unsigned)access};
  return V->modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

/* INIT -> RTR towards `remote`'s port 1: by LID (sgid < 0) or by GRH from local GID `sgid` to the remote's
 * GID `dgid`. */
static inline int toRtrGid(struct ibv_qp* qp, const endpoint* remote, uint32_t remoteQpn, int sgid, int dgid,
                           uint32_t rqPsn) {
  struct ibv_port_attr pa;
  assert_int_equal(V->queryPort(remote->ctx, 1, &pa), 0);
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
                          .path_mtu = IBV_MTU_1024,
                          .dest_qp_num = remoteQpn,
                          .rq_psn = rqPsn,
                          .max_dest_rd_atomic = 1,
                          .min_rnr_timer = 12,
                          .ah_attr.port_num = 1};
  if (sgid >= 0) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.sgid_index = (uint8_t)sgid;
    a.ah_attr.grh.hop_limit = 255;
    assert_int_equal(V->queryGid(remote->ctx, 1, dgid, &a.ah_attr.grh.dgid), 0);
  } else {
    a.ah_attr.dlid = pa.lid;
  }
  return V->modifyQp(qp, &a,
                     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static inline int toRtr(struct ibv_qp* qp, const endpoint* remote, uint32_t remoteQpn, int gidIndex, uint32_t rqPsn) {
  return toRtrGid(qp, remote, remoteQpn, gidIndex, gidIndex, rqPsn);
}

static inline int toRts(struct ibv_qp* qp, uint32_t sqPsn, const qpOpts* o) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS,
                          .sq_psn = sqPsn,
                          .timeout = 14,
                          .retry_cnt = o->retryCnt,
                          .rnr_retry = o->rnrRetry,
                          .max_rd_atomic = 1};
  return V->modifyQp(qp, &a,
                     IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                         IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Bring `a` to RTS towards `b`, and `b` towards `a`. */
static inline void connectPair(endpoint* a, endpoint* b, const qpOpts* o) {
  assert_int_equal(toInit(a->qp, o->access), 0);
  assert_int_equal(toInit(b->qp, o->access), 0);
  assert_int_equal(toRtr(a->qp, b, b->qp->qp_num, o->gidIndex, 0x111), 0);
  assert_int_equal(toRtr(b->qp, a, a->qp->qp_num, o->gidIndex, 0x222), 0);
  assert_int_equal(toRts(a->qp, 0x222, o), 0);
  assert_int_equal(toRts(b->qp, 0x111, o), 0);
  assert_int_equal(a->qp->state, IBV_QPS_RTS);
}

/* Two connected endpoints on device `dev`, each with its own context. */
static inline void makePair(endpoint* a, endpoint* b, int dev, const qpOpts* o) {
  makeEndpoint(a, dev, o, NULL);
  makeEndpoint(b, dev, o, NULL);
  connectPair(a, b, o);
}

static inline void freePair(endpoint* a, endpoint* b) {
  freeEndpoint(a, 1);
  freeEndpoint(b, 1);
}

/* Poll until `n` completions are in wc[] (fails the test after the deadline); then check none follow. */
static inline void pollN(struct ibv_cq* cq, int n, struct ibv_wc* wc) {
  int got = 0;
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  while (got < n) {
    int r = V->pollCq(cq, n - got, wc + got);
    assert_true(r >= 0);
    got += r;
    if (r == 0) {
      assert_true(commTimeNs() < deadline);
      sched_yield();
    }
  }
  struct ibv_wc extra;
  for (int i = 0; i < 8; i++) assert_int_equal(V->pollCq(cq, 1, &extra), 0);
}

static inline int postWrite(struct ibv_qp* qp, enum ibv_wr_opcode op, uint64_t wrId, void* buf, uint32_t len,
                            uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t imm, unsigned flags) {
  struct ibv_sge sge = {(uint64_t)(uintptr_t)buf, len, lkey};
  struct ibv_send_wr *bad = NULL, wr = {.wr_id = wrId,
                                        .opcode = op,
                                        .send_flags = flags,
                                        .imm_data = htonl(imm),
                                        .sg_list = len ? &sge : NULL,
                                        .num_sge = len ? 1 : 0,
                                        .wr.rdma = {.remote_addr = raddr, .rkey = rkey}};
  int err = V->postSend(qp, &wr, &bad);
  if (err) assert_ptr_equal(bad, &wr);
  return err;
}

static inline int postRecvs(struct ibv_qp* qp, int n, uint64_t wrIdBase) {
  for (int i = 0; i < n; i++) {
    struct ibv_recv_wr *bad = NULL, wr = {.wr_id = wrIdBase + (uint64_t)i};
    int err = V->postRecv(qp, &wr, &bad);
    if (err) return err;
  }
  return 0;
}

static inline enum ibv_qp_state qpState(struct ibv_qp* qp) {
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr ia;
  assert_int_equal(V->queryQp(qp, &a, IBV_QP_STATE, &ia), 0);
  return a.qp_state;
}

#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static inline int setup(void** state) {
  (void)state;
  commIbFakeResetOptions();
  commIbFakeDevice d[2];
  commIbFakeDeviceInit(&d[0], "fakeib0", IBV_LINK_LAYER_INFINIBAND, 0);
  commIbFakeDeviceInit(&d[1], "fakeroce0", IBV_LINK_LAYER_ETHERNET, 1);
  return commIbFakeConfigure(2, d) == 0 ? 0 : -1;
}

/* Every test frees all it made: the fake counts live objects. */
static inline int teardown(void** state) {
  (void)state;
  commIbFakeResetOptions();
  commIbFakeStats s;
  commIbFakeGetStats(&s);
  if (s.contexts || s.pds || s.mrs || s.cqs || s.qps) {
    fprintf(stderr, "leak: contexts %d pds %d mrs %d cqs %d qps %d\n", s.contexts, s.pds, s.mrs, s.cqs, s.qps);
    return -1;
  }
  return 0;
}

#endif
