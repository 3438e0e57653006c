/* The fake RDMA device's wire: executes queued work requests, checks addresses and keys, moves the data,
 * consumes receives and makes completions. Called with gFake.lock held, from pollCq, commIbFakeProgress or
 * the wire thread (see ib_verbs_fake.h for the semantics). */
#include "ib_verbs_fake_int.h"

#ifdef COMM_HAVE_IBVERBS
#include <limits.h>
#include <string.h>

uint64_t fakeRandLocked(void) { /* xorshift64* */
  uint64_t x = gFake.rng ? gFake.rng : 0x9e3779b97f4a7c15ull;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  gFake.rng = x;
  return x * 0x2545f4914f6cdd1dull;
}

fakeQp* fakeFindQp(uint32_t qpn) {
  for (fakeQp* q = gFake.qps; q; q = q->next)
    if (q->qp.qp_num == qpn) return q;
  return NULL;
}

/* As on hardware, struct ibv_qp's state field is not touched: libibverbs updates it only in modify_qp, so
 * the transport learns of the error from its completions (or queryQp). */
void fakeQpSetError(fakeQp* qp) { qp->state = IBV_QPS_ERR; }

static void purgeCq(fakeCq* cq, fakeQp* qp) {
  int kept = 0;
  for (int i = 0; i < cq->count; i++) {
    fakeCqe e = cq->ring[(cq->head + i) % cq->cap];
    if (e.qp != qp) cq->ring[(cq->head + kept++) % cq->cap] = e;
  }
  cq->count = kept;
}

void fakeQpPurgeCqes(fakeQp* qp) {
  purgeCq(qp->scq, qp);
  if (qp->rcq != qp->scq) purgeCq(qp->rcq, qp);
}

static void pushCqe(fakeCq* cq, const fakeCqe* e) {
  if (cq->count == cq->cap) { /* hardware: a CQ overrun is a fatal CQ error */
    cq->overrun = 1;
    gFake.stats.cqOverruns++;
    return;
  }
  cq->ring[(cq->head + cq->count) % cq->cap] = *e;
  cq->count++;
}

/* ---------------------------------------------------------------- addressing */

static const commIbFakePort* portOf(const fakeQp* q) { return &q->ctx->dev->cfg.ports[q->port - 1]; }

/* Does `from`'s address vector (its AV from INIT->RTR) designate the port of `to`? */
static int addrReaches(const fakeQp* from, const fakeQp* to) {
  const commIbFakePort* fp = portOf(from);
  const commIbFakePort* tp = portOf(to);
  if (fp->linkLayer != tp->linkLayer) return 0; /* InfiniBand and Ethernet fabrics do not meet */
  if (from->ah.is_global) {
    int s = from->ah.grh.sgid_index;
    if (s >= fp->nGids) return 0;
    for (int g = 0; g < tp->nGids; g++)
      if (memcmp(tp->gids[g].raw, from->ah.grh.dgid.raw, 16) == 0 && tp->gids[g].type == fp->gids[s].type) return 1;
    return 0;
  }
  return tp->linkLayer == IBV_LINK_LAYER_INFINIBAND && from->ah.dlid != 0 && from->ah.dlid == tp->lid;
}

/* The connected peer of `a`, if packets can reach it and it accepts them; NULL otherwise (the sender then
 * retries, as it would time out waiting for an acknowledgement). */
static fakeQp* resolvePeer(const fakeQp* a) {
  fakeQp* b = fakeFindQp(a->destQpn);
  if (!b || (b->state != IBV_QPS_RTR && b->state != IBV_QPS_RTS)) return NULL;
  if (portOf(a)->state != IBV_PORT_ACTIVE || portOf(b)->state != IBV_PORT_ACTIVE) return NULL;
  if (!addrReaches(a, b) || !addrReaches(b, a)) return NULL;
  if (b->destQpn != a->qp.qp_num || a->sqPsn != b->rqPsn) return NULL;
  return b;
}

/* ---------------------------------------------------------------- memory */

static fakeMr* findMr(const fakeQp* q, uint32_t key, int remote) {
  for (fakeMr* m = gFake.mrs; m; m = m->next)
    if ((remote ? m->mr.rkey : m->mr.lkey) == key && m->mr.context == &q->ctx->ctx) return m;
  return NULL;
}

static int inMr(const fakeMr* m, uint64_t addr, size_t len) {
  uint64_t base = (uint64_t)(uintptr_t)m->mr.addr;
  return addr >= base && len <= m->mr.length && addr - base <= m->mr.length - len;
}

/* Every non-empty local segment must lie in an MR of the QP's PD (with local write access if written). */
static int checkLocal(const fakeQp* q, const struct ibv_sge* sge, int n, int write) {
  for (int i = 0; i < n; i++) {
    if (sge[i].length == 0) continue;
    fakeMr* m = findMr(q, sge[i].lkey, 0);
    if (!m || m->mr.pd != &q->pd->pd || !inMr(m, sge[i].addr, sge[i].length)) return 0;
    if (write && !(m->access & IBV_ACCESS_LOCAL_WRITE)) return 0;
  }
  return 1;
}

typedef struct {
  uint8_t* p;
  size_t len;
} seg;

static int segsOf(const struct ibv_sge* sge, int n, seg* out) {
  for (int i = 0; i < n; i++) {
    out[i].p = (uint8_t*)(uintptr_t)sge[i].addr;
    out[i].len = sge[i].length;
  }
  return n;
}

/* Copy `len` bytes from a gather list to a scatter list (memmove: a loopback QP may overlap); device memory
 * on either side (COMM_IB_FAKE=...:gdr) moves with the host's device copy (gFake.host: libcomm's CUDA copy).
 * 0, or 1 when a device copy failed. */
static int sgCopy(const seg* src, int nSrc, const seg* dst, int nDst, size_t len) {
  int i = 0, j = 0;
  size_t si = 0, dj = 0;
  int (*isDev)(const void*) = gFake.host.isDevicePointer;
  while (len > 0 && i < nSrc && j < nDst) {
    size_t n = src[i].len - si;
    if (dst[j].len - dj < n) n = dst[j].len - dj;
    if (len < n) n = len;
    if (n && isDev && (isDev(dst[j].p + dj) || isDev(src[i].p + si))) {
      if (!gFake.host.devCopy || gFake.host.devCopy(dst[j].p + dj, src[i].p + si, n) != 0) return 1;
    } else if (n) {
      memmove(dst[j].p + dj, src[i].p + si, n);
    }
    si += n;
    dj += n;
    len -= n;
    if (si == src[i].len) i++, si = 0;
    if (dj == dst[j].len) j++, dj = 0;
  }
  return 0;
}

/* ---------------------------------------------------------------- completions */

static enum ibv_wc_opcode sendWcOpcode(enum ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    default: return IBV_WC_SEND;
  }
}

/* Complete the head WR of `q`'s send queue with `status` and remove it. A success makes a CQE only when
 * signaled; an error or flush always does. */
static void completeSendHead(fakeQp* q, enum ibv_wc_status status) {
  fakeSwr* w = &q->sq[q->sqHead];
  if (status != IBV_WC_SUCCESS || (w->flags & IBV_SEND_SIGNALED) || q->sqSigAll) {
    fakeCqe e;
    memset(&e, 0, sizeof(e));
    e.wc.wr_id = w->wrId;
    e.wc.status = status;
    e.wc.opcode = sendWcOpcode(w->opcode);
    e.wc.byte_len = status == IBV_WC_SUCCESS && w->opcode == IBV_WR_RDMA_READ ? (uint32_t)w->len : 0;
    e.wc.qp_num = q->qp.qp_num;
    e.wc.vendor_err = status == IBV_WC_SUCCESS ? 0 : 0x100u + (uint32_t)status;
    e.qp = q;
    e.qseq = w->qseq;
    e.isSend = 1;
    pushCqe(q->scq, &e);
  }
  q->sqHead = (q->sqHead + 1) % (int)q->cap.max_send_wr;
  q->sqCount--;
}

static void completeRecvHead(fakeQp* q, enum ibv_wc_status status, enum ibv_wc_opcode opcode, size_t len, int withImm,
                             uint32_t imm, const fakeQp* src) {
  fakeRwr* r = &q->rq[q->rqHead];
  fakeCqe e;
  memset(&e, 0, sizeof(e));
  e.wc.wr_id = r->wrId;
  e.wc.status = status;
  e.wc.opcode = opcode;
  e.wc.byte_len = (uint32_t)len;
  e.wc.qp_num = q->qp.qp_num;
  e.wc.vendor_err = status == IBV_WC_SUCCESS ? 0 : 0x100u + (uint32_t)status;
  if (src) {
    e.wc.src_qp = src->qp.qp_num;
    e.wc.slid = portOf(src)->lid;
  }
  if (withImm) {
    e.wc.wc_flags = IBV_WC_WITH_IMM;
    e.wc.imm_data = imm;
  }
  e.qp = q;
  pushCqe(q->rcq, &e);
  q->rqHead = (q->rqHead + 1) % q->rqCap;
  q->rqCount--;
}

/* A QP in the error state: every queued WR completes, sends with the injected status while any is left,
 * else with a flush error, receives with a flush error. */
static int flushQp(fakeQp* q) {
  int n = 0;
  while (q->sqCount > 0) {
    enum ibv_wc_status st = IBV_WC_WR_FLUSH_ERR;
    if (q->injectCount > 0) {
      q->injectCount--;
      st = q->injectStatus;
    }
    completeSendHead(q, st);
    n++;
  }
  while (q->rqCount > 0) {
    completeRecvHead(q, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, 0, 0, NULL);
    n++;
  }
  return n;
}

/* ---------------------------------------------------------------- execution */

static int failHead(fakeQp* a, enum ibv_wc_status st) {
  completeSendHead(a, st);
  fakeQpSetError(a);
  return 1;
}

/* Execute the head WR of `a` (in RTS, with an eligible head). Returns the completions made (>= 1: the WR
 * finished, successfully or not), or -1 if it must wait (receiver not ready, peer unreachable). */
static int executeHead(fakeQp* a) {
  fakeSwr* w = &a->sq[a->sqHead];
  if (a->injectCount > 0) {
    a->injectCount--;
    return failHead(a, a->injectStatus);
  }
  int isRead = w->opcode == IBV_WR_RDMA_READ;
  int isWrite = w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  int isSend = w->opcode == IBV_WR_SEND || w->opcode == IBV_WR_SEND_WITH_IMM;
  int withImm = w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM || w->opcode == IBV_WR_SEND_WITH_IMM;
  if (!w->isInline && !checkLocal(a, w->sge, w->nSge, isRead)) return failHead(a, IBV_WC_LOC_PROT_ERR);

  fakeQp* b = resolvePeer(a);
  if (!b) {
    gFake.stats.retries++;
    if (++a->retryTries > a->retryCnt) return failHead(a, IBV_WC_RETRY_EXC_ERR);
    a->blockedStep = gFake.step;
    return -1;
  }
  a->retryTries = 0;

  seg remote = {NULL, 0};
  if ((isRead || isWrite) && w->len > 0) {
    int need = isRead ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
    fakeMr* m = findMr(b, w->rkey, 1);
    if (!(b->access & need) || !m || m->mr.pd != &b->pd->pd || !(m->access & need) || !inMr(m, w->raddr, w->len)) {
      fakeQpSetError(b);
      return failHead(a, IBV_WC_REM_ACCESS_ERR);
    }
    remote.p = (uint8_t*)(uintptr_t)w->raddr;
    remote.len = w->len;
  }

  if ((isSend || withImm) && b->rqCount == 0) { /* receiver not ready */
    gFake.stats.rnrRetries++;
    if (a->rnrRetry != 7 && ++a->rnrTries > a->rnrRetry) return failHead(a, IBV_WC_RNR_RETRY_EXC_ERR);
    a->blockedStep = gFake.step;
    return -1;
  }
  a->rnrTries = 0;

  seg local[COMM_IB_FAKE_MAX_SGE];
  int nLocal;
  if (w->isInline) {
    local[0].p = w->inl;
    local[0].len = w->len;
    nLocal = 1;
  } else {
    nLocal = segsOf(w->sge, w->nSge, local);
  }
  int made = 0;
  if (isWrite || isRead) {
    if (isWrite ? sgCopy(local, nLocal, &remote, 1, w->len) : sgCopy(&remote, 1, local, nLocal, w->len)) {
      fakeQpSetError(b);
      return failHead(a, IBV_WC_LOC_PROT_ERR); /* a CUDA copy failed: as a DMA error */
    }
  } else { /* SEND: into the receive's buffers */
    fakeRwr* r = &b->rq[b->rqHead];
    size_t cap = 0;
    for (int i = 0; i < r->nSge; i++) cap += r->sge[i].length;
    if (w->len > cap || !checkLocal(b, r->sge, r->nSge, 1)) {
      int tooLong = w->len > cap;
      completeRecvHead(b, tooLong ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR, IBV_WC_RECV, 0, 0, 0, a);
      fakeQpSetError(b);
      return 1 + failHead(a, tooLong ? IBV_WC_REM_INV_REQ_ERR : IBV_WC_REM_OP_ERR);
    }
    seg dst[COMM_IB_FAKE_MAX_SGE];
    int nDst = segsOf(r->sge, r->nSge, dst);
    if (sgCopy(local, nLocal, dst, nDst, w->len)) {
      completeRecvHead(b, IBV_WC_LOC_PROT_ERR, IBV_WC_RECV, 0, 0, 0, a);
      fakeQpSetError(b);
      return 1 + failHead(a, IBV_WC_REM_OP_ERR);
    }
  }
  if (isSend || withImm) {
    enum ibv_wc_opcode op = w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
    completeRecvHead(b, IBV_WC_SUCCESS, op, w->len, withImm, w->imm, a);
    made++;
  }
  gFake.stats.wrsExecuted++;
  gFake.stats.bytes += w->len;
  completeSendHead(a, IBV_WC_SUCCESS);
  return made + 1;
}

static int eligible(const fakeQp* q) {
  return q->state == IBV_QPS_RTS && q->sqCount > 0 && q->sq[q->sqHead].eligible <= gFake.step &&
         q->blockedStep != gFake.step;
}

int fakeWireStepLocked(void) {
  gFake.step++;
  gFake.stats.steps++;
  int done = 0;
  for (fakeQp* q = gFake.qps; q; q = q->next)
    if (q->state == IBV_QPS_ERR) done += flushQp(q);
  int budget = gFake.opt.maxPerStep > 0 ? gFake.opt.maxPerStep : INT_MAX;
  while (budget > 0) {
    fakeQp* pick = NULL;
    if (!gFake.opt.reorder) { /* the oldest eligible head WR of the process */
      for (fakeQp* q = gFake.qps; q; q = q->next)
        if (eligible(q) && (!pick || q->sq[q->sqHead].gseq < pick->sq[pick->sqHead].gseq)) pick = q;
    } else { /* any QP with an eligible head, at random */
      int n = 0;
      for (fakeQp* q = gFake.qps; q; q = q->next) n += eligible(q);
      if (n > 0) {
        int k = (int)(fakeRandLocked() % (uint64_t)n);
        for (fakeQp* q = gFake.qps; q; q = q->next)
          if (eligible(q) && k-- == 0) {
            pick = q;
            break;
          }
      }
    }
    if (!pick) break;
    int r = executeHead(pick);
    if (r >= 0) {
      done += r;
      budget--;
    }
  }
  return done;
}

#else
typedef int commIbNoVerbs_t; /* without <infiniband/verbs.h>: nothing (ISO C wants a declaration) */
#endif /* COMM_HAVE_IBVERBS */
