/* The host executor: runs schedules on host buffers, progressed by the calling thread. Each call to
 * commExecHostProgress moves every channel of a plan as far as it can without waiting, so one thread can
 * drive many plans (several communicators in a group) and no helper thread sits on the critical path. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "exec.h"
#include "utils.h"

#define CHECK_INTERVAL_NS 1000000LL /* ask transports whether a silent peer is still there */

static inline char* bufPtr(const commPlan* plan, commBufRef ref) {
  return (char*)plan->bufs[ref.buf] + ref.offset * plan->eltSize;
}

/* Does the op do anything for these step flags? (else data moves by memcpy) */
static inline int opActs(const commPlan* plan, int flags) {
  return ((flags & COMM_STEP_PRE) && plan->redop.kind == COMM_REDOP_PREMULSUM) ||
         ((flags & COMM_STEP_POST) && plan->redop.kind == COMM_REDOP_SUMPOSTDIV);
}

static inline void copyOp(const commPlan* plan, void* dst, const void* src, size_t n, int flags) {
  if (opActs(plan, flags)) commCopy(&plan->redop, dst, src, n, flags & COMM_STEP_PRE, flags & COMM_STEP_POST);
  else if (dst != src) memcpy(dst, src, n * plan->eltSize);
}

/* FIFO access. The sender may fill a slot while fewer than nSlots are unconsumed; the receiver may drain one
 * once the sender has advanced head past it. */
static inline char* sendSlotNow(commConn* c) {
  if (c->step - COMM_LOAD_ACQ(&c->ctrl->tail) >= (uint64_t)c->nSlots) return NULL;
  return c->slots + (c->step % (uint64_t)c->nSlots) * c->slotBytes;
}
static inline void sendPostNow(commConn* c, size_t bytes) {
  COMM_STORE_RLX(&c->ctrl->sizes[c->step % (uint64_t)c->nSlots], (uint64_t)bytes);
  c->step++;
  COMM_STORE_REL(&c->ctrl->head, c->step);
}
static inline char* recvSlotNow(commConn* c, size_t* bytes) {
  if (COMM_LOAD_ACQ(&c->ctrl->head) <= c->step) return NULL;
  *bytes = (size_t)COMM_LOAD_RLX(&c->ctrl->sizes[c->step % (uint64_t)c->nSlots]);
  return c->slots + (c->step % (uint64_t)c->nSlots) * c->slotBytes;
}
/* The connection a step names: a rank's, or the channel's collnet group (COMM_PEER_COLLNET); NULL if none. */
static inline commConn* connOf(const commChannel* ch, int peer, int isSend) {
  if (peer >= 0) return isSend ? ch->send[peer] : ch->recv[peer];
  if (peer == COMM_PEER_COLLNET) return isSend ? ch->collnetSend : ch->collnetRecv;
  return NULL;
}
/* "rank 3", or "the collnet group" */
static const char* peerStr(int peer, char* buf, size_t n) {
  if (peer == COMM_PEER_COLLNET) snprintf(buf, n, "the collnet group");
  else snprintf(buf, n, "rank %d", peer);
  return buf;
}

/* Network connections move data when progressed: the step that waits on one progresses it (and only it). */
static commResult_t connFailed(commComm* comm, commConn* c, commResult_t res) {
  char why[256];
  snprintf(why, sizeof(why), "%s", commLogLastWarn());
  char peer[32];
  commNotePeerFailure(comm, c->peer);
  WARN("rank %d: the %s connection %s %s on channel %d failed: %s", comm->rank, c->transport->name,
       c->isSend ? "to" : "from", peerStr(c->peer, peer, sizeof(peer)), c->channel, why);
  return res;
}
static inline commResult_t connProgress(commComm* comm, commConn* c) {
  commResult_t res = c->transport->progress ? c->transport->progress(comm, c) : commSuccess;
  return __builtin_expect(res == commSuccess, 1) ? res : connFailed(comm, c, res);
}
static inline char* sendSlot(commComm* comm, commConn* c, commResult_t* err) {
  char* s = sendSlotNow(c);
  if (s == NULL && c->transport->progress) {
    *err = connProgress(comm, c);
    s = sendSlotNow(c);
  }
  return s;
}
static inline char* recvSlot(commComm* comm, commConn* c, size_t* bytes, commResult_t* err) {
  char* s = recvSlotNow(c, bytes);
  if (s == NULL && c->transport->progress) {
    *err = connProgress(comm, c);
    s = recvSlotNow(c, bytes);
  }
  return s;
}

/* Post a filled slot (bytes of payload after the header); a network connection sends it at once. */
static inline commResult_t sendPost(commComm* comm, commConn* c, size_t bytes) {
  sendPostNow(c, bytes + COMM_SLOT_HDR_BYTES);
  return connProgress(comm, c);
}

/* Elements of one slot's payload. */
static inline size_t slotPiece(const commComm* comm, size_t elt) {
  return (comm->slotBytes - COMM_SLOT_HDR_BYTES) / elt;
}

const char* commOpSigStr(const commOpSig* sig, char* buf, size_t n) {
  if (sig->func >= commNumFuncs) {
    snprintf(buf, n, "an unknown operation (%u)", (unsigned)sig->func);
  } else if (sig->func == commFuncSendRecv) {
    snprintf(buf, n, "send/recv");
  } else {
    char root[24] = "", op[40] = "";
    if (sig->root >= 0) snprintf(root, sizeof(root), "root %d, ", (int)sig->root);
    if (sig->op == COMM_SIG_OP_USER) snprintf(op, sizeof(op), "a premulsum op, ");
    else if (sig->op != COMM_SIG_OP_NONE) snprintf(op, sizeof(op), "%s, ", commOpName((commRedOp_t)sig->op));
    snprintf(buf, n, "%s(%s%s%s, count %llu, collective #%llu)", commFuncName((commFunc_t)sig->func), root, op,
             sig->dtype < commNumTypes ? commTypeName((commDataType_t)sig->dtype) : "?", (unsigned long long)sig->count,
             (unsigned long long)sig->seq);
  }
  return buf;
}

commResult_t commOpSigMismatch(struct commComm* comm, const commOpSig* mine, int peer, const commOpSig* theirs,
                               int channel, const char* where) {
  char a[160], b[160];
  commNotePeerFailure(comm, peer);
  WARN("rank %d: mismatched calls: this rank called %s, rank %d called %s (the data it sent on channel %d%s): every "
       "rank must call the same collectives in the same order with the same root, op, datatype and count",
       comm->rank, commOpSigStr(mine, a, sizeof(a)), peer, commOpSigStr(theirs, b, sizeof(b)), channel, where);
  return commInvalidUsage;
}

/* The peer's slot carries another operation's signature: the ranks called different operations. */
static commResult_t sigMismatch(commPlan* plan, int channel, int peer, const commOpSig* got) {
  return commOpSigMismatch(plan->comm, &plan->sig, peer, got, channel, "");
}

static inline void recvRelease(commConn* c) {
  c->step++;
  COMM_STORE_REL(&c->ctrl->tail, c->step);
}

static commResult_t missingConn(commPlan* plan, int channel, int peer, int isSend) {
  char p[32];
  WARN("rank %d: %s opCount %llu: no connection %s %s on channel %d", plan->comm->rank, commFuncName(plan->func),
       (unsigned long long)plan->opCount, isSend ? "to" : "from", peerStr(peer, p, sizeof(p)), channel);
  return commInternalError;
}

static commResult_t sizeMismatch(commPlan* plan, int channel, int peer, size_t got, size_t expected) {
  WARN("rank %d: %s opCount %llu: received %zu bytes from rank %d on channel %d where %zu were expected: the "
       "ranks called this operation with different counts or datatypes",
       plan->comm->rank, commFuncName(plan->func), (unsigned long long)plan->opCount, got, peer, channel, expected);
  return commInvalidUsage;
}

static inline void noteWait(commPlan* plan, int channel, int peer, int isSend) {
  plan->waitChannel = channel;
  plan->waitPeer = peer;
  plan->waitIsSend = isSend;
}

/* The payload of the next free slot of sc (its header written); NULL when there is none yet (the wait noted, for the timeout's message) or on
 * an error (in *err). */
static inline char* waitSendSlot(commPlan* plan, int channel, int peer, commConn* sc, commResult_t* err) {
  char* slot = sendSlot(plan->comm, sc, err);
  if (*err != commSuccess) return NULL;
  if (slot == NULL) {
    noteWait(plan, channel, peer, 1);
    return NULL;
  }
  memcpy(slot, &plan->sig, sizeof(plan->sig));
  return slot + COMM_SLOT_HDR_BYTES;
}

/* The payload of the next filled slot of rc, which must carry this plan's signature and hold `bytes`; NULL
 * when none has arrived (the wait noted) or on an error (in *err: the transport's, another operation's
 * signature, or a slot of another size: the ranks called with different counts). */
static inline char* waitRecvSlot(commPlan* plan, int channel, int peer, commConn* rc, size_t bytes, commResult_t* err) {
  size_t got;
  char* slot = recvSlot(plan->comm, rc, &got, err);
  if (*err != commSuccess) return NULL;
  if (slot == NULL) {
    noteWait(plan, channel, peer, 0);
    return NULL;
  }
  commOpSig sig;
  if (got < COMM_SLOT_HDR_BYTES) {
    WARN("rank %d: %s opCount %llu: a slot of %zu bytes from rank %d on channel %d is shorter than its header",
         plan->comm->rank, commFuncName(plan->func), (unsigned long long)plan->opCount, got, peer, channel);
    *err = commInternalError;
    return NULL;
  }
  memcpy(&sig, slot, sizeof(sig));
  const uint64_t *a = (const uint64_t*)&sig, *b = (const uint64_t*)&plan->sig;
  if (((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3])) != 0) {
    *err = sigMismatch(plan, channel, peer, &sig);
    return NULL;
  }
  if (got - COMM_SLOT_HDR_BYTES != bytes) {
    *err = sizeMismatch(plan, channel, peer, got - COMM_SLOT_HDR_BYTES, bytes);
    return NULL;
  }
  return slot + COMM_SLOT_HDR_BYTES;
}

/* SEND, COPY_SEND: the step's data into sc's FIFO slot by slot (COPY_SEND: into dst as well). */
static commResult_t stepSend(commPlan* plan, int c, const commStep* st, commConn* sc, commChannelProgress* pr,
                             int* finished) {
  commComm* comm = plan->comm;
  const size_t elt = plan->eltSize;
  const size_t piece = slotPiece(comm, elt);
  const int flags = st->flags;
  commResult_t perr = commSuccess;
  if (sc == NULL && st->count > 0) return missingConn(plan, c, st->sendPeer, 1);
  while (pr->workDone < st->count) {
    size_t n = COMM_MIN(piece, st->count - pr->workDone);
    char* slot = waitSendSlot(plan, c, st->sendPeer, sc, &perr);
    if (slot == NULL) return perr;
    const char* src = bufPtr(plan, st->src) + pr->workDone * elt;
    copyOp(plan, slot, src, n, flags);
    if (st->prim == COMM_PRIM_COPY_SEND) {
      char* dst = bufPtr(plan, st->dst) + pr->workDone * elt;
      if (dst != src || opActs(plan, flags)) memcpy(dst, slot, n * elt);
    }
    COMMCHECK(sendPost(comm, sc, n * elt));
    pr->workDone += n;
    plan->progressed = 1;
  }
  *finished = 1;
  return commSuccess;
}

/* RECV, RECV_REDUCE_COPY: rc's FIFO slots into dst (RECV_REDUCE_COPY: reduced with src). */
static commResult_t stepRecv(commPlan* plan, int c, const commStep* st, commConn* rc, commChannelProgress* pr,
                             int* finished) {
  commComm* comm = plan->comm;
  const size_t elt = plan->eltSize;
  const size_t piece = slotPiece(comm, elt);
  const int flags = st->flags;
  commResult_t perr = commSuccess;
  if (rc == NULL && st->count > 0) return missingConn(plan, c, st->recvPeer, 0);
  while (pr->workDone < st->count) {
    size_t n = COMM_MIN(piece, st->count - pr->workDone);
    char* slot = waitRecvSlot(plan, c, st->recvPeer, rc, n * elt, &perr);
    if (slot == NULL) return perr;
    char* dst = bufPtr(plan, st->dst) + pr->workDone * elt;
    if (st->prim == COMM_PRIM_RECV) {
      copyOp(plan, dst, slot, n, flags & COMM_STEP_POST);
    } else {
      commReduceLocal(&plan->redop, dst, slot, bufPtr(plan, st->src) + pr->workDone * elt, n, flags & COMM_STEP_PRE,
                      flags & COMM_STEP_POST);
    }
    recvRelease(rc);
    pr->workDone += n;
    plan->progressed = 1;
  }
  *finished = 1;
  return commSuccess;
}

/* RECV_REDUCE_SEND, RECV_COPY_SEND, RECV_REDUCE_COPY_SEND: each slot of rc, reduced with src or copied
 * (the _COPY forms: into dst too), forwarded into a slot of sc. */
static commResult_t stepRecvSend(commPlan* plan, int c, const commStep* st, commConn* sc, commConn* rc,
                                 commChannelProgress* pr, int* finished) {
  commComm* comm = plan->comm;
  const size_t elt = plan->eltSize;
  const size_t piece = slotPiece(comm, elt);
  const int flags = st->flags;
  commResult_t perr = commSuccess;
  if (st->count > 0 && sc == NULL) return missingConn(plan, c, st->sendPeer, 1);
  if (st->count > 0 && rc == NULL) return missingConn(plan, c, st->recvPeer, 0);
  while (pr->workDone < st->count) {
    size_t n = COMM_MIN(piece, st->count - pr->workDone);
    char* in = waitRecvSlot(plan, c, st->recvPeer, rc, n * elt, &perr);
    if (in == NULL) return perr;
    char* out = waitSendSlot(plan, c, st->sendPeer, sc, &perr);
    if (out == NULL) return perr;
    size_t off = pr->workDone * elt;
    if (st->prim == COMM_PRIM_RECV_REDUCE_SEND) {
      commReduceLocal(&plan->redop, out, in, bufPtr(plan, st->src) + off, n, flags & COMM_STEP_PRE,
                      flags & COMM_STEP_POST);
    } else if (st->prim == COMM_PRIM_RECV_COPY_SEND) {
      char* dst = bufPtr(plan, st->dst) + off;
      copyOp(plan, dst, in, n, flags & COMM_STEP_POST);
      memcpy(out, dst, n * elt);
    } else {
      char* dst = bufPtr(plan, st->dst) + off;
      commReduceLocal(&plan->redop, dst, in, bufPtr(plan, st->src) + off, n, flags & COMM_STEP_PRE,
                      flags & COMM_STEP_POST);
      memcpy(out, dst, n * elt);
    }
    COMMCHECK(sendPost(comm, sc, n * elt));
    recvRelease(rc);
    pr->workDone += n;
    plan->progressed = 1;
  }
  *finished = 1;
  return commSuccess;
}

/* SEND_RECV: the send half and the receive half each as far as it goes (neither waits for the other). */
static commResult_t stepSendRecv(commPlan* plan, int c, const commStep* st, commConn* sc, commConn* rc,
                                 commChannelProgress* pr, int* finished) {
  commComm* comm = plan->comm;
  const size_t elt = plan->eltSize;
  const size_t piece = slotPiece(comm, elt);
  const int flags = st->flags;
  commResult_t perr = commSuccess;
  size_t sendCount = st->sendPeer >= 0 ? st->count : 0;
  size_t recvCount = st->recvPeer >= 0 ? st->recvCount : 0;
  if (sendCount > 0 && sc == NULL) return missingConn(plan, c, st->sendPeer, 1);
  if (recvCount > 0 && rc == NULL) return missingConn(plan, c, st->recvPeer, 0);
  while (pr->sendDone < sendCount) {
    size_t n = COMM_MIN(piece, sendCount - pr->sendDone);
    char* slot = waitSendSlot(plan, c, st->sendPeer, sc, &perr);
    if (slot == NULL) {
      if (perr != commSuccess) return perr;
      break;
    }
    copyOp(plan, slot, bufPtr(plan, st->src) + pr->sendDone * elt, n, flags & COMM_STEP_PRE);
    COMMCHECK(sendPost(comm, sc, n * elt));
    pr->sendDone += n;
    plan->progressed = 1;
  }
  while (pr->recvDone < recvCount) {
    size_t n = COMM_MIN(piece, recvCount - pr->recvDone);
    char* slot = waitRecvSlot(plan, c, st->recvPeer, rc, n * elt, &perr);
    if (slot == NULL) {
      if (perr != commSuccess) return perr;
      break;
    }
    memcpy(bufPtr(plan, st->dst) + pr->recvDone * elt, slot, n * elt);
    recvRelease(rc);
    pr->recvDone += n;
    plan->progressed = 1;
  }
  *finished = pr->sendDone == sendCount && pr->recvDone == recvCount;
  return commSuccess;
}

/* Advance one step as far as possible. *finished = 1 when the step is complete. */
static commResult_t stepProgress(commPlan* plan, int c, const commStep* st, commChannelProgress* pr, int* finished) {
  commComm* comm = plan->comm;
  commChannel* ch = &comm->channels[c];
  commConn* sc = connOf(ch, st->sendPeer, 1);
  commConn* rc = connOf(ch, st->recvPeer, 0);
  const int flags = st->flags;
  *finished = 0;

  switch (st->prim) {
    case COMM_PRIM_NOP: *finished = 1; return commSuccess;
    case COMM_PRIM_COPY:
      copyOp(plan, bufPtr(plan, st->dst), bufPtr(plan, st->src), st->count, flags);
      plan->progressed = 1;
      *finished = 1;
      return commSuccess;
    case COMM_PRIM_REDUCE: {
      char* dst = bufPtr(plan, st->dst);
      commReduceLocal(&plan->redop, dst, dst, bufPtr(plan, st->src), st->count, flags & COMM_STEP_PRE,
                      flags & COMM_STEP_POST);
      plan->progressed = 1;
      *finished = 1;
      return commSuccess;
    }
    case COMM_PRIM_SEND:
    case COMM_PRIM_COPY_SEND: return stepSend(plan, c, st, sc, pr, finished);
    case COMM_PRIM_RECV:
    case COMM_PRIM_RECV_REDUCE_COPY: return stepRecv(plan, c, st, rc, pr, finished);
    case COMM_PRIM_RECV_REDUCE_SEND:
    case COMM_PRIM_RECV_COPY_SEND:
    case COMM_PRIM_RECV_REDUCE_COPY_SEND: return stepRecvSend(plan, c, st, sc, rc, pr, finished);
    case COMM_PRIM_SEND_RECV: return stepSendRecv(plan, c, st, sc, rc, pr, finished);
    default:
      WARN("rank %d: %s: unknown primitive %d in schedule", comm->rank, commFuncName(plan->func), st->prim);
      return commInternalError;
  }
}

static const char* opDesc(const commPlan* plan, char* buf, size_t n) {
  snprintf(buf, n, "%s (opCount %llu, count %zu, %s)", commFuncName(plan->func), (unsigned long long)plan->opCount,
           plan->count, plan->func == commFuncSendRecv ? "bytes" : commTypeName(plan->dtype));
  return buf;
}

/* No progress: is the peer we wait for still there, has the timeout passed, were we aborted? */
static commResult_t checkStalled(commPlan* plan) {
  commComm* comm = plan->comm;
  char desc[160];
  int aborted = commAborted(comm);
  if (aborted == COMM_ABORT_PEER_FAILED) {
    char why[sizeof(comm->peerFailureReason)];
    pthread_mutex_lock(&comm->errorLock);
    int culprit = comm->peerFailureRank, reporter = comm->peerFailureReporter;
    uint64_t failedSeq = comm->peerFailureSeq;
    snprintf(why, sizeof(why), "%s", comm->peerFailureReason);
    pthread_mutex_unlock(&comm->errorLock);
    /* The reporter was past this collective: it may still complete here (the failed rank did its part, as a
     * rank that destroyed its communicator after its last call did); if not, the peer check or the timeout
     * below ends it. */
    if (plan->func == commFuncSendRecv || plan->sig.seq >= failedSeq) {
      WARN("rank %d: %s stopped: rank %d failed (reported by rank %d): %s", comm->rank,
           opDesc(plan, desc, sizeof(desc)), culprit, reporter, why);
      return commRemoteError;
    }
    aborted = 0;
  }
  if (aborted) {
    WARN("rank %d: %s was aborted (commAbort)", comm->rank, opDesc(plan, desc, sizeof(desc)));
    return commInvalidUsage;
  }
  int64_t now = commTimeNs();
  if (now - plan->lastCheckNs >= CHECK_INTERVAL_NS) {
    plan->lastCheckNs = now;
    char peer[32];
    peerStr(plan->waitPeer, peer, sizeof(peer));
    if (plan->waitPeer != -1 && plan->waitChannel >= 0) {
      commConn* conn = connOf(&comm->channels[plan->waitChannel], plan->waitPeer, plan->waitIsSend);
      if (conn != NULL && conn->transport->check != NULL) {
        commResult_t res = conn->transport->check(comm, conn);
        if (res != commSuccess) {
          char why[256];
          snprintf(why, sizeof(why), "%s", commLogLastWarn());
          commNotePeerFailure(comm, plan->waitPeer);
          WARN("rank %d: %s failed: peer %s (%s) is gone: %s", comm->rank, opDesc(plan, desc, sizeof(desc)), peer,
               conn->transport->name, why);
          return res;
        }
      }
    }
    if (comm->timeoutMs >= 0 && now - plan->lastProgressNs > comm->timeoutMs * 1000000LL) {
      WARN("rank %d: %s timed out: no progress for %lld ms (COMM_TIMEOUT_MS) while %s %s on channel %d", comm->rank,
           opDesc(plan, desc, sizeof(desc)), (long long)comm->timeoutMs,
           plan->waitIsSend ? "waiting for FIFO space to" : "waiting for data from", peer, plan->waitChannel);
      return commTimeout;
    }
  }
  return commSuccess;
}

commResult_t commExecHostProgress(commPlan* plan, int* done) {
  commComm* comm = plan->comm;
  plan->progressed = 0;
  *done = plan->done;
  if (plan->done) return commSuccess;
  if (comm->nNetConns > 0) {
    commResult_t res = commTransportProgressSends(comm);
    if (res != commSuccess) {
      char desc[160], why[256];
      snprintf(why, sizeof(why), "%s", commLogLastWarn());
      WARN("rank %d: %s failed in the network transport: %s", comm->rank, opDesc(plan, desc, sizeof(desc)), why);
      return res;
    }
  }
  if (comm->collnet.nChannels > 0) {
    commResult_t res = commCollNetProgressAll(comm);
    if (res != commSuccess) {
      char desc[160];
      WARN("rank %d: %s failed in the collnet transport", comm->rank, opDesc(plan, desc, sizeof(desc)));
      return res;
    }
  }
  int allDone = 1;
  for (int c = 0; c < plan->sched.nChannels; c++) {
    commChannelSched* cs = &plan->sched.channels[c];
    commChannelProgress* pr = &plan->progress[c];
    while (pr->stepIdx < cs->nSteps) {
      int finished;
      COMMCHECK(stepProgress(plan, c, &cs->steps[pr->stepIdx], pr, &finished));
      if (!finished) break;
      pr->stepIdx++;
      pr->sendDone = pr->recvDone = pr->workDone = 0;
    }
    if (pr->stepIdx < cs->nSteps) allDone = 0;
  }
  if (plan->progressed) plan->lastProgressNs = commTimeNs();
  if (allDone) {
    plan->done = 1;
    *done = 1;
    if (comm->nNetConns > 0) commTransportOpDone(comm);
    return commSuccess;
  }
  if (!plan->progressed) COMMCHECK(checkStalled(plan));
  return commSuccess;
}

commResult_t commExecHostRun(commPlan** plans, int nPlans) {
  commResult_t res = commSuccess;
  commBackoff backoff = {0};
  int netWaits = 0, oversubscribed = 0;
  for (int i = 0; i < nPlans; i++) {
    netWaits |= plans[i]->comm->nNetConns > 0;
    oversubscribed |= plans[i]->comm->oversubscribed;
  }
  for (;;) {
    int allDone = 1, progressed = 0;
    for (int i = 0; i < nPlans; i++) {
      commPlan* p = plans[i];
      if (p->done) continue;
      allDone = 0;
      /* Plans of one communicator run in order: wait for the earlier ones. */
      int blocked = 0;
      for (int j = 0; j < i && !blocked; j++) blocked = plans[j]->comm == p->comm && !plans[j]->done;
      if (blocked) continue;
      int done;
      commLogSetRank(p->comm->rank);
      res = commExecHostProgress(p, &done);
      if (res != commSuccess) return res; /* the caller marks the unfinished plans' communicators */
      progressed |= p->progressed;
    }
    if (allDone) break;
    if (progressed) {
      commBackoffReset(&backoff);
    } else if (netWaits || oversubscribed) {
      /* Polling sockets in a tight loop starves the kernel's delivery of the very packets we wait for (on
       * 2 cores: 23 us per 8-byte hop spinning, 7 us yielding between polls); and with more ranks on this
       * host than cores, the rank we wait for may need this very core. Give it away at once. */
      sched_yield();
    } else {
      commBackoffWait(&backoff);
    }
  }
  return res;
}
