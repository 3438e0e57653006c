/* A collnet lane (collnet_internal.h): the FIFO pair between a member's executor and its group in the network,
 * and the transport operations the executors call on it.
 *
 * The executor fills send slots (header + payload) and drains receive slots, as on any connection. Progress
 * posts the network operations of each filled send slot (slotPlan: one or more iallreduce of at most the
 * plugin's maxCollBytes, one iallgather or one ireducescatter, by the collective in the slot's signature) from
 * the slot's payload into the payload of the receive slot at the same position, while that receive slot is
 * free; it tests them in order and, once a slot's operations are done, gives the receive slot the send slot's
 * header and the result's size (the result carries this member's own signature) and moves the receive head
 * and the send tail. The datatype and op come from the signature too: avg and premulsum reduce as sum (the
 * executor applies their scaling with PRE and POST). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "collnet_internal.h"
#include "communicator.h"
#include "dev_conn.h"
#include "debug.h"
#include "devmem.h"
#include "op_sig.h"
#include "utils.h"

#define CN_CTRL_BYTES 4096 /* the ctrl page before the slots */

static commResult_t cnConnProgress(struct commComm* comm, commConn* conn);
static commResult_t cnConnCheck(struct commComm* comm, commConn* conn);
static commResult_t cnDevConn(const commConn* conn, struct commDevConn* out);
static uint32_t* cnBusyWords(struct commComm* comm);

static const commTransport commTransportCollNet = {
    .name = "CollNet",
    .progress = cnConnProgress,
    .check = cnConnCheck,
    .devConn = cnDevConn,
    .devBusyWords = cnBusyWords,
};

static commFifoCtrl* ctrlOf(char* area) { return (commFifoCtrl*)area; }
static char* slotsOf(char* area) { return area + CN_CTRL_BYTES; }

commResult_t commCollNetLaneMake(struct commComm* comm, struct commCollNetState* st, commCollNetLane* l, int channel,
                                 int onDevice, char* why, size_t whyLen) {
  const commCollNet_t* p = st->plugin;
  size_t slots = (size_t)comm->nSlots * comm->slotBytes, bytes = CN_CTRL_BYTES + slots;
  l->onDevice = onDevice;
  l->channel = channel;
  if (onDevice) {
    commResult_t res = commDevHostAlloc(comm->cudaDev, bytes, (void**)&l->sendArea, &l->sendDev);
    if (res == commSuccess) res = commDevHostAlloc(comm->cudaDev, bytes, (void**)&l->recvArea, &l->recvDev);
    if (res != commSuccess) {
      snprintf(why, whyLen, "pinned host memory for the device lane's FIFOs: %s", commLogLastWarn());
      return res;
    }
  } else {
    l->sendArea = aligned_alloc(CN_CTRL_BYTES, bytes);
    l->recvArea = aligned_alloc(CN_CTRL_BYTES, bytes);
    if (l->sendArea) memset(l->sendArea, 0, CN_CTRL_BYTES);
    if (l->recvArea) memset(l->recvArea, 0, CN_CTRL_BYTES);
  }
  size_t payload = comm->slotBytes - COMM_SLOT_HDR_BYTES;
  l->subBytes = st->props.maxCollBytes < payload ? st->props.maxCollBytes & ~(size_t)15 : payload;
  l->maxSub = (int)((payload + l->subBytes - 1) / l->subBytes);
  l->reqs = calloc((size_t)comm->nSlots * (size_t)l->maxSub, sizeof(void*));
  l->nSub = calloc((size_t)comm->nSlots, sizeof(int));
  l->result = calloc((size_t)comm->nSlots, sizeof(size_t));
  l->send = calloc(1, sizeof(commConn));
  l->recv = calloc(1, sizeof(commConn));
  if (!l->sendArea || !l->recvArea || !l->reqs || !l->nSub || !l->result || !l->send || !l->recv) {
    snprintf(why, whyLen, "out of memory for the collnet FIFOs");
    return commSystemError;
  }
  commResult_t res = p->regMr(l->collComm, slotsOf(l->sendArea), slots, COMM_PTR_HOST, &l->sendMh);
  if (res == commSuccess) res = p->regMr(l->collComm, slotsOf(l->recvArea), slots, COMM_PTR_HOST, &l->recvMh);
  if (res != commSuccess) {
    snprintf(why, whyLen, "regMr of the collnet FIFO failed (%s): %s", commGetErrorString(res), commLogLastWarn());
    return res;
  }
  commConn* conns[2] = {l->send, l->recv};
  for (int i = 0; i < 2; i++) {
    char* area = i == 0 ? l->sendArea : l->recvArea;
    conns[i]->ctrl = ctrlOf(area);
    conns[i]->slots = slotsOf(area);
    conns[i]->slotBytes = comm->slotBytes;
    conns[i]->nSlots = comm->nSlots;
    conns[i]->peer = COMM_PEER_COLLNET;
    conns[i]->channel = channel;
    conns[i]->isSend = i == 0;
    conns[i]->onDevice = onDevice;
    conns[i]->transport = &commTransportCollNet;
    conns[i]->priv = l;
  }
  return commSuccess;
}

void commCollNetLaneFree(struct commComm* comm, struct commCollNetState* st, commCollNetLane* l) {
  const commCollNet_t* p = st->plugin;
  if (l->collComm) {
    if (l->sendMh) p->deregMr(l->collComm, l->sendMh);
    if (l->recvMh) p->deregMr(l->collComm, l->recvMh);
    p->closeColl(l->collComm);
  }
  if (l->listenComm) p->closeListen(l->listenComm);
  if (l->onDevice) {
    if (l->sendArea) commDevHostFree(comm->cudaDev, l->sendArea);
    if (l->recvArea) commDevHostFree(comm->cudaDev, l->recvArea);
  } else {
    free(l->sendArea);
    free(l->recvArea);
  }
  free(l->reqs);
  free(l->nSub);
  free(l->result);
  free(l->send);
  free(l->recv);
  memset(l, 0, sizeof(*l));
}

/* The network's op for a slot's signature. */
static int netOp(const commOpSig* sig) {
  if (sig->op <= commMin) return sig->op;
  if (sig->op == commAvg || sig->op == COMM_SIG_OP_USER) return commSum;
  return -1;
}

static commResult_t laneFail(commCollNetLane* l, commResult_t res, const char* what) {
  if (!l->failed) {
    l->failed = res;
    WARN("COLLNET : the %s group of channel %d (members 0, 1, ... are ranks %s) failed: %s (%s): %s",
         l->onDevice ? "device" : "host", l->channel, l->members, what, commGetErrorString(res), commLogLastWarn());
    COMM_STORE_REL(&ctrlOf(l->sendArea)->devFailed, 1u); /* a kernel waiting on the lane sees it */
    COMM_STORE_REL(&ctrlOf(l->recvArea)->devFailed, 1u);
  }
  return l->failed;
}

/* How a send slot of `payload` bytes maps to network operations (the collective from its signature):
 *  - allreduce: iallreduce of at most subBytes each, the result as large as the payload;
 *  - allgather: one iallgather of the payload per member, the result nMembers times larger (the schedule keeps
 *    it within a slot);
 *  - reducescatter: one ireducescatter of payload / nMembers per member, the result that large.
 * 0 when the slot fits none of these (or the groups' plugin does not offer the operation). */
static int slotPlan(const struct commComm* comm, const commCollNetLane* l, const commOpSig* sig, size_t payload,
                    int* nSub, size_t* result) {
  const struct commCollNetState* st = comm->collnetState;
  size_t elt = sig->dtype < commNumTypes ? commTypeSize((commDataType_t)sig->dtype) : 0;
  size_t members = (size_t)comm->nNodes, cap = comm->slotBytes - COMM_SLOT_HDR_BYTES;
  if (elt == 0 || payload % elt != 0) return 0;
  switch (sig->func) {
    case commFuncAllReduce:
      if (netOp(sig) < 0) return 0;
      *nSub = (int)((payload + l->subBytes - 1) / l->subBytes);
      *result = payload;
      return 1;
    case commFuncAllGather:
      if (!st->plugin->iallgather || payload > cap / members || payload * members > st->props.maxCollBytes) return 0;
      *nSub = 1;
      *result = payload * members;
      return 1;
    case commFuncReduceScatter:
      if (!st->plugin->ireducescatter || netOp(sig) < 0 || payload % (elt * members) != 0 ||
          payload > st->props.maxCollBytes)
        return 0;
      *nSub = 1;
      *result = payload / members;
      return 1;
    default: return 0;
  }
}

/* Post operation i of send slot sslot (payload bytes) into receive slot rslot. */
static commResult_t postSub(const struct commComm* comm, commCollNetLane* l, const commOpSig* sig, char* sslot,
                            char* rslot, size_t payload, int i, void** req) {
  const commCollNet_t* p = comm->collnetState->plugin;
  commDataType_t type = (commDataType_t)sig->dtype;
  size_t elt = commTypeSize(type);
  char *src = sslot + COMM_SLOT_HDR_BYTES, *dst = rslot + COMM_SLOT_HDR_BYTES;
  if (sig->func == commFuncAllGather) return p->iallgather(l->collComm, src, dst, payload, l->sendMh, l->recvMh, req);
  if (sig->func == commFuncReduceScatter)
    return p->ireducescatter(l->collComm, src, dst, payload / elt / (size_t)comm->nNodes, type, (commRedOp_t)netOp(sig),
                             l->sendMh, l->recvMh, req);
  size_t off = (size_t)i * l->subBytes;
  size_t n = payload - off < l->subBytes ? payload - off : l->subBytes;
  return p->iallreduce(l->collComm, src + off, dst + off, n / elt, type, (commRedOp_t)netOp(sig), l->sendMh, l->recvMh,
                       req);
}

commResult_t commCollNetLaneProgress(struct commComm* comm, commCollNetLane* l) {
  const commCollNet_t* p = comm->collnetState->plugin;
  const uint64_t nSlots = (uint64_t)comm->nSlots;
  if (l->failed) return l->failed;
  commFifoCtrl *sc = ctrlOf(l->sendArea), *rc = ctrlOf(l->recvArea);
  char *sSlots = slotsOf(l->sendArea), *rSlots = slotsOf(l->recvArea);
  uint64_t filled = COMM_LOAD_ACQ(&sc->head);
  while (l->posted < filled && l->posted - COMM_LOAD_ACQ(&rc->tail) < nSlots) {
    uint64_t k = l->posted % nSlots;
    char* sslot = sSlots + k * comm->slotBytes;
    char* rslot = rSlots + k * comm->slotBytes;
    size_t bytes = (size_t)COMM_LOAD_RLX(&sc->sizes[k]);
    commOpSig sig;
    memcpy(&sig, sslot, sizeof(sig));
    int nSub = 0;
    if (bytes < COMM_SLOT_HDR_BYTES || bytes > comm->slotBytes ||
        !slotPlan(comm, l, &sig, bytes - COMM_SLOT_HDR_BYTES, &nSub, &l->result[k])) {
      WARN("COLLNET : channel %d: a slot of %zu bytes (collective %u, type %u, op %u) is no operation the network "
           "does for %d members",
           l->channel, bytes, (unsigned)sig.func, (unsigned)sig.dtype, (unsigned)sig.op, comm->nNodes);
      return laneFail(l, commInternalError, "bad slot");
    }
    l->nSub[k] = nSub;
    while (l->nSubPosted < nSub) {
      void** req = &l->reqs[k * (uint64_t)l->maxSub + (uint64_t)l->nSubPosted];
      commResult_t res = postSub(comm, l, &sig, sslot, rslot, bytes - COMM_SLOT_HDR_BYTES, l->nSubPosted, req);
      if (res != commSuccess) return laneFail(l, res, "posting an operation");
      if (*req == NULL) break; /* the plugin cannot take it now */
      l->nSubPosted++;
    }
    if (l->nSubPosted < nSub) break;
    l->nSubPosted = 0;
    l->posted++;
  }
  /* Completions, in order; a slot whose operations are only partly posted is tested up to those. */
  while (l->completed < l->posted || (l->completed == l->posted && l->nSubPosted > 0)) {
    uint64_t k = l->completed % nSlots;
    int nSub = l->completed < l->posted ? l->nSub[k] : l->nSubPosted;
    int allDone = 1;
    for (int i = 0; i < nSub; i++) {
      void** req = &l->reqs[k * (uint64_t)l->maxSub + (uint64_t)i];
      if (*req == NULL) continue;
      int done = 0;
      commResult_t res = p->test(*req, &done, NULL);
      if (res != commSuccess) return laneFail(l, res, "a network operation");
      if (done) *req = NULL;
      else allDone = 0;
    }
    if (!allDone || l->completed == l->posted) break;
    memcpy(rSlots + k * comm->slotBytes, sSlots + k * comm->slotBytes, COMM_SLOT_HDR_BYTES);
    COMM_STORE_RLX(&rc->sizes[k], (uint64_t)(COMM_SLOT_HDR_BYTES + l->result[k]));
    l->completed++;
    COMM_STORE_REL(&rc->head, l->completed);
    COMM_STORE_REL(&sc->tail, l->completed);
  }
  return commSuccess;
}

static commResult_t cnConnProgress(struct commComm* comm, commConn* conn) {
  return commCollNetLaneProgress(comm, (commCollNetLane*)conn->priv);
}

static commResult_t cnConnCheck(struct commComm* comm, commConn* conn) {
  (void)comm;
  commCollNetLane* l = conn->priv;
  if (!l->failed) return commSuccess;
  WARN("COLLNET : the group of channel %d failed earlier (%s)", conn->channel, commGetErrorString(l->failed));
  return l->failed;
}

/* The device lane as the kernel sees it: both FIFOs in mapped host memory, fences at system scope. */
static commResult_t cnDevConn(const commConn* conn, struct commDevConn* out) {
  const commCollNetLane* l = conn->priv;
  if (!l->onDevice) {
    WARN("COLLNET : channel %d: a host lane asked for as a device connection", conn->channel);
    return commInternalError;
  }
  char* dev = (char*)(conn->isSend ? l->sendDev : l->recvDev);
  commFifoCtrl* c = (commFifoCtrl*)dev;
  memset(out, 0, sizeof(*out));
  out->slots = dev + CN_CTRL_BYTES;
  out->head = &c->head;
  out->sizes = c->sizes;
  out->tail = &c->tail;
  out->pos = conn->isSend ? &c->devSendPos : &c->devRecvPos;
  out->llSlots = NULL;
  out->failed = &c->devFailed;
  out->sysScope = 1;
  return commSuccess;
}

static uint32_t* cnBusyWords(struct commComm* comm) { return comm->collnetState ? comm->collnetState->busyDev : NULL; }
