/* The fake RDMA device's reliable-connected QPs: creation, the state machine (RESET -> INIT -> RTR -> RTS,
 * any -> ERR / RESET) with the attribute masks each transition requires and allows, and posting. Posting
 * only queues: ib_verbs_fake_wire.c executes. */
#include "ib_verbs_fake_int.h"

#ifdef COMM_HAVE_IBVERBS
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define LOCK() pthread_mutex_lock(&gFake.lock)
#define UNLOCK() pthread_mutex_unlock(&gFake.lock)
#define CONTAINER(ptr, type) ((type*)(void*)(ptr))

struct ibv_qp* fakeCreateQp(struct ibv_pd* ibpd, struct ibv_qp_init_attr* init) {
  int err = 0;
  if (!init || !init->send_cq || !init->recv_cq) err = EINVAL;
  else if (init->qp_type != IBV_QPT_RC || init->srq) err = EOPNOTSUPP;
  else if (init->send_cq->context != ibpd->context || init->recv_cq->context != ibpd->context) err = EINVAL;
  else if (init->cap.max_send_wr < 1 || init->cap.max_send_wr > COMM_IB_FAKE_MAX_QP_WR ||
           init->cap.max_recv_wr > COMM_IB_FAKE_MAX_QP_WR || init->cap.max_send_sge > COMM_IB_FAKE_MAX_SGE ||
           init->cap.max_recv_sge > COMM_IB_FAKE_MAX_SGE || init->cap.max_inline_data > COMM_IB_FAKE_MAX_INLINE)
    err = EINVAL;
  fakeQp* q = NULL;
  LOCK();
  if (!err) err = fakeFailNowLocked(COMM_IB_FAKE_CALL_CREATE_QP);
  if (!err && (q = calloc(1, sizeof(*q))) != NULL) {
    q->rqCap = init->cap.max_recv_wr > 0 ? (int)init->cap.max_recv_wr : 1;
    q->sq = calloc(init->cap.max_send_wr, sizeof(*q->sq));
    q->rq = calloc((size_t)q->rqCap, sizeof(*q->rq));
    if (!q->sq || !q->rq) {
      free(q->sq);
      free(q->rq);
      free(q);
      q = NULL;
    }
  }
  if (q) {
    q->ctx = CONTAINER(ibpd->context, fakeCtx);
    q->pd = CONTAINER(ibpd, fakePd);
    q->scq = CONTAINER(init->send_cq, fakeCq);
    q->rcq = CONTAINER(init->recv_cq, fakeCq);
    q->cap = init->cap;
    q->sqSigAll = init->sq_sig_all;
    q->state = IBV_QPS_RESET;
    q->qp.context = ibpd->context;
    q->qp.qp_context = init->qp_context;
    q->qp.pd = ibpd;
    q->qp.send_cq = init->send_cq;
    q->qp.recv_cq = init->recv_cq;
    q->qp.handle = ++gFake.nextHandle;
    q->qp.qp_num = gFake.nextQpn++ & 0xffffff;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = IBV_QPT_RC;
    q->scq->qps++;
    q->rcq->qps++;
    q->pd->qps++;
    q->next = gFake.qps;
    gFake.qps = q;
    gFake.stats.qps++;
  }
  UNLOCK();
  if (!q) errno = err ? err : ENOMEM;
  return q ? &q->qp : NULL;
}

int fakeDestroyQp(struct ibv_qp* ibqp) {
  fakeQp* q = CONTAINER(ibqp, fakeQp);
  LOCK();
  fakeQp** pp = &gFake.qps;
  while (*pp && *pp != q) pp = &(*pp)->next;
  if (!*pp) {
    UNLOCK();
    return EINVAL;
  }
  *pp = q->next;
  fakeQpPurgeCqes(q);
  q->scq->qps--;
  q->rcq->qps--;
  q->pd->qps--;
  gFake.stats.qps--;
  UNLOCK();
  free(q->sq);
  free(q->rq);
  free(q);
  return 0;
}

/* ---------------------------------------------------------------- state machine */

typedef struct {
  enum ibv_qp_state from, to;
  int required, optional;
} qpTransition;

#define ANY_STATE ((enum ibv_qp_state) - 1)
static const qpTransition transitions[] = {
    {IBV_QPS_RESET, IBV_QPS_RESET, 0, 0},
    {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0},
    {IBV_QPS_INIT, IBV_QPS_INIT, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS},
    {IBV_QPS_INIT, IBV_QPS_RTR,
     IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
     IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX},
    {IBV_QPS_RTR, IBV_QPS_RTS,
     IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
     IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE},
    {IBV_QPS_RTS, IBV_QPS_RTS, 0, IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE},
    {ANY_STATE, IBV_QPS_RESET, 0, 0},
    {ANY_STATE, IBV_QPS_ERR, 0, 0},
};

#define QP_ACCESS_KNOWN \
  (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* Values of the attributes in `mask` (lock held; q's port is attr's when the mask sets it). */
static int checkValues(const fakeQp* q, const struct ibv_qp_attr* attr, int mask) {
  const commIbFakeDevice* dev = &q->ctx->dev->cfg;
  int port = (mask & IBV_QP_PORT) ? attr->port_num : q->port;
  if ((mask & IBV_QP_PORT) && (attr->port_num < 1 || attr->port_num > dev->nPorts)) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_ACCESS_FLAGS) && (attr->qp_access_flags & ~(unsigned)QP_ACCESS_KNOWN)) return EINVAL;
  const commIbFakePort* p = port >= 1 ? &dev->ports[port - 1] : NULL;
  if ((mask & IBV_QP_PATH_MTU) && (!p || attr->path_mtu < IBV_MTU_256 || attr->path_mtu > p->activeMtu)) return EINVAL;
  if (mask & IBV_QP_AV) {
    if (!p) return EINVAL;
    if (attr->ah_attr.is_global) {
      if (attr->ah_attr.grh.sgid_index >= p->nGids) return EINVAL;
    } else if (p->linkLayer == IBV_LINK_LAYER_ETHERNET || attr->ah_attr.dlid == 0) {
      return EINVAL; /* RoCE needs a GRH; InfiniBand without one needs a LID */
    }
  }
  if ((mask & IBV_QP_DEST_QPN) && attr->dest_qp_num > 0xffffff) return EINVAL;
  if ((mask & IBV_QP_RQ_PSN) && attr->rq_psn > 0xffffff) return EINVAL;
  if ((mask & IBV_QP_SQ_PSN) && attr->sq_psn > 0xffffff) return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > 16) return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > 16) return EINVAL;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31) return EINVAL;
  if ((mask & IBV_QP_TIMEOUT) && attr->timeout > 31) return EINVAL;
  if ((mask & IBV_QP_RETRY_CNT) && attr->retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) && attr->rnr_retry > 7) return EINVAL;
  return 0;
}

int fakeModifyQp(struct ibv_qp* ibqp, struct ibv_qp_attr* attr, int mask) {
  fakeQp* q = CONTAINER(ibqp, fakeQp);
  if (!attr) return EINVAL;
  LOCK();
  int err = fakeFailNowLocked(COMM_IB_FAKE_CALL_MODIFY_QP);
  enum ibv_qp_state cur = q->state;
  enum ibv_qp_state to = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
  if (!err && (mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) err = EINVAL;
  const qpTransition* t = NULL;
  for (size_t i = 0; !err && !t && i < sizeof(transitions) / sizeof(transitions[0]); i++)
    if ((transitions[i].from == cur || transitions[i].from == ANY_STATE) && transitions[i].to == to)
      t = &transitions[i];
  if (!err && !t) err = EINVAL; /* not a transition an RC QP can make */
  int given = mask & ~(IBV_QP_STATE | IBV_QP_CUR_STATE);
  if (!err && ((given & t->required) != t->required || (given & ~(t->required | t->optional)))) err = EINVAL;
  if (!err) err = checkValues(q, attr, mask);
  if (err) {
    UNLOCK();
    return err;
  }
  if (mask & IBV_QP_PORT) q->port = attr->port_num;
  if (mask & IBV_QP_PKEY_INDEX) q->pkeyIndex = attr->pkey_index;
  if (mask & IBV_QP_ACCESS_FLAGS) q->access = (int)attr->qp_access_flags;
  if (mask & IBV_QP_PATH_MTU) q->mtu = attr->path_mtu;
  if (mask & IBV_QP_AV) q->ah = attr->ah_attr;
  if (mask & IBV_QP_DEST_QPN) q->destQpn = attr->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) q->rqPsn = attr->rq_psn;
  if (mask & IBV_QP_SQ_PSN) q->sqPsn = attr->sq_psn;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) q->maxDestRdAtomic = attr->max_dest_rd_atomic;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) q->maxRdAtomic = attr->max_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) q->minRnrTimer = attr->min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) q->timeout = attr->timeout;
  if (mask & IBV_QP_RETRY_CNT) q->retryCnt = attr->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) q->rnrRetry = attr->rnr_retry;
  if (to == IBV_QPS_RESET) { /* queued work is discarded without completions, as are the QP's CQEs */
    q->sqHead = q->sqCount = 0;
    q->rqHead = q->rqCount = 0;
    q->sqRetired = q->sqPosted;
    q->retryTries = q->rnrTries = 0;
    q->port = 0;
    q->access = 0;
    memset(&q->ah, 0, sizeof(q->ah));
    fakeQpPurgeCqes(q);
  }
  q->state = to;
  q->qp.state = to;
  UNLOCK();
  return 0;
}

int fakeQueryQp(struct ibv_qp* ibqp, struct ibv_qp_attr* attr, int mask, struct ibv_qp_init_attr* init) {
  fakeQp* q = CONTAINER(ibqp, fakeQp);
  (void)mask; /* everything is filled */
  LOCK();
  memset(attr, 0, sizeof(*attr));
  attr->qp_state = q->state;
  attr->cur_qp_state = q->state;
  attr->path_mtu = q->mtu;
  attr->qp_access_flags = (unsigned int)q->access;
  attr->pkey_index = q->pkeyIndex;
  attr->port_num = q->port;
  attr->ah_attr = q->ah;
  attr->dest_qp_num = q->destQpn;
  attr->rq_psn = q->rqPsn;
  attr->sq_psn = q->sqPsn;
  attr->max_dest_rd_atomic = q->maxDestRdAtomic;
  attr->max_rd_atomic = q->maxRdAtomic;
  attr->min_rnr_timer = q->minRnrTimer;
  attr->timeout = q->timeout;
  attr->retry_cnt = q->retryCnt;
  attr->rnr_retry = q->rnrRetry;
  attr->cap = q->cap;
  if (init) {
    memset(init, 0, sizeof(*init));
    init->qp_context = q->qp.qp_context;
    init->send_cq = q->qp.send_cq;
    init->recv_cq = q->qp.recv_cq;
    init->cap = q->cap;
    init->qp_type = IBV_QPT_RC;
    init->sq_sig_all = q->sqSigAll;
  }
  UNLOCK();
  return 0;
}

/* ---------------------------------------------------------------- posting */

static int checkSendWr(const fakeQp* q, const struct ibv_send_wr* wr, size_t* len) {
  switch (wr->opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_READ: break;
    default: return EINVAL; /* atomics, memory windows, ...: not in the fake */
  }
  if (wr->num_sge < 0 || wr->num_sge > (int)q->cap.max_send_sge || (wr->num_sge > 0 && !wr->sg_list)) return EINVAL;
  size_t total = 0;
  for (int i = 0; i < wr->num_sge; i++) total += wr->sg_list[i].length;
  if (wr->send_flags & IBV_SEND_INLINE) {
    if (wr->opcode == IBV_WR_RDMA_READ || total > q->cap.max_inline_data) return EINVAL;
  }
  if (total > (1u << 31)) return EINVAL;
  *len = total;
  return 0;
}

int fakePostSend(struct ibv_qp* ibqp, struct ibv_send_wr* wr, struct ibv_send_wr** bad) {
  fakeQp* q = CONTAINER(ibqp, fakeQp);
  int err = 0;
  LOCK();
  err = fakeFailNowLocked(COMM_IB_FAKE_CALL_POST_SEND);
  /* A send queue accepts work in RTS, and in the error state (where it flushes); before RTS it refuses. */
  if (!err && q->state != IBV_QPS_RTS && q->state != IBV_QPS_ERR) err = EINVAL;
  for (; !err && wr; wr = wr->next) {
    size_t len = 0;
    if ((err = checkSendWr(q, wr, &len)) != 0) break;
    if (q->sqPosted - q->sqRetired >= q->cap.max_send_wr) {
      err = ENOMEM;
      break;
    }
    fakeSwr* w = &q->sq[(q->sqHead + q->sqCount) % (int)q->cap.max_send_wr];
    memset(w, 0, offsetof(fakeSwr, inl));
    w->wrId = wr->wr_id;
    w->opcode = wr->opcode;
    w->flags = wr->send_flags;
    w->imm = wr->imm_data;
    w->raddr = wr->wr.rdma.remote_addr;
    w->rkey = wr->wr.rdma.rkey;
    w->nSge = wr->num_sge;
    w->len = len;
    if (wr->send_flags & IBV_SEND_INLINE) { /* the data is taken now: the buffer is free on return */
      w->isInline = 1;
      size_t off = 0;
      for (int i = 0; i < wr->num_sge; i++) {
        memcpy(w->inl + off, (const void*)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
        off += wr->sg_list[i].length;
      }
    } else if (wr->num_sge > 0) {
      memcpy(w->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(*wr->sg_list));
    }
    w->gseq = gFake.gseq++;
    w->qseq = q->sqPosted++;
    w->eligible = gFake.step + (uint64_t)gFake.opt.delaySteps + (gFake.opt.reorder ? fakeRandLocked() % 4 : 0);
    q->sqCount++;
  }
  UNLOCK();
  if (err && bad) *bad = wr;
  return err;
}

int fakePostRecv(struct ibv_qp* ibqp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad) {
  fakeQp* q = CONTAINER(ibqp, fakeQp);
  int err = 0;
  LOCK();
  err = fakeFailNowLocked(COMM_IB_FAKE_CALL_POST_RECV);
  if (!err && q->state == IBV_QPS_RESET) err = EINVAL;
  for (; !err && wr; wr = wr->next) {
    if (wr->num_sge < 0 || wr->num_sge > (int)q->cap.max_recv_sge || (wr->num_sge > 0 && !wr->sg_list)) {
      err = EINVAL;
      break;
    }
    if (q->rqCount >= (int)q->cap.max_recv_wr) {
      err = ENOMEM;
      break;
    }
    fakeRwr* r = &q->rq[(q->rqHead + q->rqCount) % q->rqCap];
    r->wrId = wr->wr_id;
    r->nSge = wr->num_sge;
    if (wr->num_sge > 0) memcpy(r->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(*wr->sg_list));
    q->rqCount++;
  }
  UNLOCK();
  if (err && bad) *bad = wr;
  return err;
}

#else
typedef int commIbNoVerbs_t; /* without <infiniband/verbs.h>: nothing (ISO C wants a declaration) */
#endif /* COMM_HAVE_IBVERBS */
