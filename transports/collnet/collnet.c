/* The collnet transport: a channel's group of node members whose reductions the network does
 * (docs/ARCHITECTURE.md, "CollNet"). At init every rank runs commCollNetSetup: members listen, one bootstrap
 * allgather carries the handles, members connect, register their FIFOs and ask which types and ops the network
 * reduces, and a second allgather carries every rank's outcome, so that every rank decides the same: collnet on
 * for all channels, or off with the reason.
 *
 * At a member, the channel's schedule peer COMM_PEER_COLLNET is a pair of local FIFOs. The executor fills send
 * slots (header + payload) and drains receive slots; progress posts one or more iallreduce per filled send slot
 * (an operation is at most the plugin's maxCollBytes) into the receive slot of the same position while that
 * slot is free, tests them in order and, once a slot's operations are done, gives the receive slot the send
 * slot's header and size and moves the receive head and the send tail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bootstrap.h"
#include "check.h"
#include "collnet_internal.h"
#include "communicator.h"
#include "debug.h"
#include "op_sig.h"
#include "param.h"
#include "utils.h"

#define CN_HANDLE_BYTES COMM_NET_HANDLE_MAXSIZE
#define CN_WHY_BYTES 160
#define CN_DEFAULT_CHANNELS 2
#define CN_MIN_COLL_BYTES 4096

static commResult_t cnProgress(struct commComm* comm, commConn* conn);
static commResult_t cnCheck(struct commComm* comm, commConn* conn);

static const commTransport commTransportCollNet = {
    .name = "CollNet",
    .progress = cnProgress,
    .check = cnCheck,
};

int commCollNetWanted(struct commComm* comm) {
  commCollNetInfo* info = &comm->collnet;
  memset(info, 0, sizeof(*info));
  int64_t enable = commParamInt("COMM_COLLNET_ENABLE", -1, 0, 1);
  const char* src = "COMM_COLLNET_ENABLE";
  if (enable < 0) {
    enable = commParamInt("NCCL_COLLNET_ENABLE", 0, 0, 1);
    src = "NCCL_COLLNET_ENABLE";
  }
  if (!enable) {
    snprintf(info->why, sizeof(info->why), "COMM_COLLNET_ENABLE (or NCCL_COLLNET_ENABLE) is not 1");
    return 0;
  }
  if (comm->nNodes < 2) {
    snprintf(info->why, sizeof(info->why), "%s=1, but the communicator spans one node", src);
    return 0;
  }
  int n = (int)commParamInt("COMM_COLLNET_NCHANNELS", CN_DEFAULT_CHANNELS, 1, COMM_MAX_CHANNELS);
  return n < comm->nChannels ? n : comm->nChannels;
}

/* ---------------------------------------------------------------- setup */

typedef struct {
  int32_t status; /* commResult_t of this rank's part of the round */
  char why[CN_WHY_BYTES];
} cnStatus;

static void cnFreeChan(struct commCollNetState* st, commCollNetChan* c) {
  const commCollNet_t* p = st->plugin;
  if (c->collComm) {
    if (c->sendMh) p->deregMr(c->collComm, c->sendMh);
    if (c->recvMh) p->deregMr(c->collComm, c->recvMh);
    p->closeColl(c->collComm);
  }
  if (c->listenComm) p->closeListen(c->listenComm);
  free(c->sendSlots);
  free(c->recvSlots);
  free(c->reqs);
  free(c->nSub);
  free(c->send);
  free(c->recv);
  memset(c, 0, sizeof(*c));
}

static void cnFreeState(struct commComm* comm) {
  struct commCollNetState* st = comm->collnetState;
  if (!st) return;
  for (int c = 0; c < COMM_MAX_CHANNELS; c++) {
    comm->channels[c].collnetSend = NULL;
    comm->channels[c].collnetRecv = NULL;
    cnFreeChan(st, &st->chan[c]);
  }
  if (st->ctx) st->plugin->finalize(st->ctx);
  commCollNetRelease();
  free(st);
  comm->collnetState = NULL;
}

/* The FIFO pair and its registrations, after connect. */
static commResult_t cnMakeFifos(struct commComm* comm, struct commCollNetState* st, commCollNetChan* c, int ch,
                                char* why, size_t whyLen) {
  const commCollNet_t* p = st->plugin;
  size_t bytes = (size_t)comm->nSlots * comm->slotBytes;
  c->sendSlots = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
  c->recvSlots = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
  size_t payload = comm->slotBytes - COMM_SLOT_HDR_BYTES;
  c->subBytes = st->props.maxCollBytes < payload ? st->props.maxCollBytes & ~(size_t)15 : payload;
  c->maxSub = (int)((payload + c->subBytes - 1) / c->subBytes);
  c->reqs = calloc((size_t)comm->nSlots * (size_t)c->maxSub, sizeof(void*));
  c->nSub = calloc((size_t)comm->nSlots, sizeof(int));
  c->send = calloc(1, sizeof(commConn));
  c->recv = calloc(1, sizeof(commConn));
  if (!c->sendSlots || !c->recvSlots || !c->reqs || !c->nSub || !c->send || !c->recv) {
    snprintf(why, whyLen, "out of memory for the collnet FIFOs");
    return commSystemError;
  }
  commResult_t res = p->regMr(c->collComm, c->sendSlots, bytes, COMM_PTR_HOST, &c->sendMh);
  if (res == commSuccess) res = p->regMr(c->collComm, c->recvSlots, bytes, COMM_PTR_HOST, &c->recvMh);
  if (res != commSuccess) {
    snprintf(why, whyLen, "regMr of the collnet FIFO failed (%s): %s", commGetErrorString(res), commLogLastWarn());
    return res;
  }
  commConn* conns[2] = {c->send, c->recv};
  for (int i = 0; i < 2; i++) {
    conns[i]->ctrl = i == 0 ? &c->sendCtrl : &c->recvCtrl;
    conns[i]->slots = i == 0 ? c->sendSlots : c->recvSlots;
    conns[i]->slotBytes = comm->slotBytes;
    conns[i]->nSlots = comm->nSlots;
    conns[i]->peer = COMM_PEER_COLLNET;
    conns[i]->channel = ch;
    conns[i]->isSend = i == 0;
    conns[i]->transport = &commTransportCollNet;
    conns[i]->priv = c;
  }
  return commSuccess;
}

/* This rank's part of round 1 (plugin, properties, listen on the channels it is a member of). */
static commResult_t cnPrepare(struct commComm* comm, struct commCollNetState* st, int nCh, const int* members,
                              char* handles, char* why, size_t whyLen) {
  char source[300] = "";
  st->plugin = commCollNetAcquire(why, whyLen, source, sizeof(source));
  if (!st->plugin) return commInvalidUsage;
  snprintf(comm->collnet.plugin, sizeof(comm->collnet.plugin), "%s", st->plugin->name);
  commResult_t res = st->plugin->init(&st->ctx, comm->commHash, commNetPluginLogger);
  if (res != commSuccess) {
    st->ctx = NULL;
    snprintf(why, whyLen, "%s: init failed (%s)", source, commGetErrorString(res));
    return res;
  }
  int ndev = 0;
  if (st->plugin->devices(&ndev) != commSuccess || ndev < 1) {
    snprintf(why, whyLen, "%s: the collnet plugin has no device", source);
    return commInvalidUsage;
  }
  st->dev = 0;
  res = st->plugin->getProperties(st->dev, &st->props);
  if (res == commSuccess && st->props.maxCollBytes < CN_MIN_COLL_BYTES) {
    snprintf(why, whyLen, "%s: maxCollBytes %zu is below %d", source, st->props.maxCollBytes, CN_MIN_COLL_BYTES);
    return commInvalidUsage;
  }
  if (res != commSuccess) {
    snprintf(why, whyLen, "%s: getProperties failed (%s)", source, commGetErrorString(res));
    return res;
  }
  for (int c = 0; c < nCh; c++) {
    if (members[c * comm->nNodes + comm->node] != comm->rank) continue;
    res = st->plugin->listen(st->ctx, st->dev, handles + (size_t)c * CN_HANDLE_BYTES, &st->chan[c].listenComm);
    if (res != commSuccess || !st->chan[c].listenComm) {
      snprintf(why, whyLen, "%s: listen for channel %d failed (%s)", source, c, commGetErrorString(res));
      return res != commSuccess ? res : commInternalError;
    }
  }
  INFO(COMM_COLLNET | COMM_INIT, "COLLNET : %s, plugin %s, device %s, maxCollBytes %zu", source, st->plugin->name,
       st->props.name ? st->props.name : "?", st->props.maxCollBytes);
  return commSuccess;
}

/* Round 2 at a member: connect every channel's group, make the FIFOs, ask what the network reduces. */
static commResult_t cnConnect(struct commComm* comm, struct commCollNetState* st, int nCh, const int* members,
                              const char* allHandles, uint8_t* ops, char* why, size_t whyLen) {
  const size_t perRank = (size_t)nCh * CN_HANDLE_BYTES + sizeof(cnStatus);
  void** handles = NULL;
  COMMCHECK(commCalloc(&handles, (size_t)comm->nNodes, sizeof(void*)));
  commResult_t res = commSuccess;
  for (int c = 0; c < nCh && res == commSuccess; c++) {
    if (members[c * comm->nNodes + comm->node] != comm->rank) continue;
    for (int v = 0; v < comm->nNodes; v++)
      handles[v] = (void*)(allHandles + (size_t)members[c * comm->nNodes + v] * perRank + (size_t)c * CN_HANDLE_BYTES);
    commCollNetChan* cc = &st->chan[c];
    res = st->plugin->connect(handles, comm->nNodes, comm->node, cc->listenComm, &cc->collComm);
    if (res == commSuccess && !cc->collComm) res = commInternalError;
    if (res != commSuccess) {
      cc->collComm = NULL;
      snprintf(why, whyLen, "connect of the group of channel %d (%d members) failed (%s): %s", c, comm->nNodes,
               commGetErrorString(res), commLogLastWarn());
      break;
    }
    st->plugin->closeListen(cc->listenComm);
    cc->listenComm = NULL;
    res = cnMakeFifos(comm, st, cc, c, why, whyLen);
  }
  free(handles);
  if (res != commSuccess) return res;
  for (int t = 0; t < commNumTypes; t++) {
    ops[t] = 0;
    for (int op = commSum; op <= commMin; op++) {
      int ok = 0;
      if (st->plugin->reduceSupport((commDataType_t)t, (commRedOp_t)op, &ok) == commSuccess && ok)
        ops[t] |= (uint8_t)(1u << op);
    }
  }
  return commSuccess;
}

/* The first rank whose status failed, or -1. */
static int cnFirstFailed(const struct commComm* comm, const char* all, size_t stride, size_t statusOff) {
  for (int r = 0; r < comm->nRanks; r++) {
    cnStatus s;
    memcpy(&s, all + (size_t)r * stride + statusOff, sizeof(s));
    if (s.status != commSuccess) return r;
  }
  return -1;
}

commResult_t commCollNetSetup(struct commComm* comm, int nCh, const int* members) {
  if (nCh <= 0) {
    INFO(COMM_COLLNET | COMM_INIT, "COLLNET : off: %s", comm->collnet.why);
    return commSuccess;
  }
  struct commCollNetState* st = NULL;
  char* all = NULL;
  commResult_t res = commSuccess;
  COMMCHECK(commCalloc(&st, 1, sizeof(*st)));
  comm->collnetState = st;
  st->nChannels = nCh;
  /* Round 1: handles and status. */
  const size_t perRank = (size_t)nCh * CN_HANDLE_BYTES + sizeof(cnStatus);
  COMMCHECKGOTO(commCalloc(&all, (size_t)comm->nRanks, perRank), res, fail);
  char* mine = all + (size_t)comm->rank * perRank;
  cnStatus s = {0, ""};
  s.status = cnPrepare(comm, st, nCh, members, mine, s.why, sizeof(s.why));
  memcpy(mine + (size_t)nCh * CN_HANDLE_BYTES, &s, sizeof(s));
  COMMCHECKGOTO(bootstrapAllGather(comm->bootstrap, all, perRank), res, fail);
  int bad = cnFirstFailed(comm, all, perRank, (size_t)nCh * CN_HANDLE_BYTES);
  /* Round 2: connect (members), then everyone's outcome and the types and ops the network reduces. */
  typedef struct {
    cnStatus s;
    uint8_t ops[commNumTypes];
  } cnOutcome;
  cnOutcome* out = NULL;
  COMMCHECKGOTO(commCalloc(&out, (size_t)comm->nRanks, sizeof(cnOutcome)), res, fail);
  cnOutcome* me = &out[comm->rank];
  memset(me->ops, 0xff, sizeof(me->ops));
  if (bad < 0) {
    me->s.status = cnConnect(comm, st, nCh, members, all, me->ops, me->s.why, sizeof(me->s.why));
  } else {
    me->s.status = commRemoteError;
  }
  res = bootstrapAllGather(comm->bootstrap, out, sizeof(cnOutcome));
  if (res != commSuccess) {
    free(out);
    goto fail;
  }
  char why[CN_WHY_BYTES];
  if (bad >= 0) {
    memcpy(&s, all + (size_t)bad * perRank + (size_t)nCh * CN_HANDLE_BYTES, sizeof(s));
    snprintf(why, sizeof(why), "%s", s.why);
  } else {
    bad = cnFirstFailed(comm, (const char*)out, sizeof(cnOutcome), 0);
    if (bad >= 0) snprintf(why, sizeof(why), "%s", out[bad].s.why);
  }
  if (bad >= 0) {
    snprintf(comm->collnet.why, sizeof(comm->collnet.why), "rank %d: %s", bad, why);
    WARN_NOTICE("COLLNET : off on every rank (COMM_COLLNET_ENABLE=1): rank %d could not take part: %s; collectives "
                "run without it",
                bad, why);
    free(out);
    cnFreeState(comm);
    free(all);
    return commSuccess;
  }
  for (int t = 0; t < commNumTypes; t++) {
    uint8_t ops = 0x0f;
    for (int r = 0; r < comm->nRanks; r++) ops &= out[r].ops[t];
    comm->collnet.opsOfType[t] = ops;
  }
  free(out);
  free(all);
  for (int c = 0; c < nCh; c++) {
    comm->channels[c].collnetSend = st->chan[c].send;
    comm->channels[c].collnetRecv = st->chan[c].recv;
  }
  comm->collnet.nChannels = nCh;
  char members0[96] = "";
  int len = 0;
  for (int v = 0; v < comm->nNodes && len < (int)sizeof(members0) - 8; v++)
    len += snprintf(members0 + len, sizeof(members0) - (size_t)len, "%s%d", v ? "," : "", members[v]);
  INFO(COMM_COLLNET | COMM_INIT, "COLLNET : on: %d channel(s), %d members each (channel 0: ranks %s), plugin %s", nCh,
       comm->nNodes, members0, comm->collnet.plugin);
  return commSuccess;
fail:
  free(all);
  cnFreeState(comm);
  return res;
}

commResult_t commCollNetFree(struct commComm* comm) {
  cnFreeState(comm);
  return commSuccess;
}

/* ---------------------------------------------------------------- data path */

/* The network's op for a slot's signature: the executor applies avg's and premulsum's scaling (PRE, POST), so
 * both reduce as sum. */
static int cnNetOp(const commOpSig* sig) {
  if (sig->op <= commMin) return sig->op;
  if (sig->op == commAvg || sig->op == COMM_SIG_OP_USER) return commSum;
  return -1;
}

static commResult_t cnFail(commCollNetChan* c, commResult_t res, const char* what) {
  if (!c->failed) {
    c->failed = res;
    WARN("COLLNET : the group of channel %d failed: %s (%s): %s", c->send->channel, what, commGetErrorString(res),
         commLogLastWarn());
  }
  return c->failed;
}

/* Post what can be posted, then retire completed slots in order. */
static commResult_t cnProgressChan(struct commComm* comm, commCollNetChan* c) {
  struct commCollNetState* st = comm->collnetState;
  const commCollNet_t* p = st->plugin;
  const uint64_t nSlots = (uint64_t)comm->nSlots;
  if (c->failed) return c->failed;
  uint64_t filled = COMM_LOAD_ACQ(&c->sendCtrl.head);
  while (c->posted < filled && c->posted - COMM_LOAD_ACQ(&c->recvCtrl.tail) < nSlots) {
    uint64_t k = c->posted % nSlots;
    char* sslot = c->sendSlots + k * comm->slotBytes;
    char* rslot = c->recvSlots + k * comm->slotBytes;
    size_t bytes = (size_t)COMM_LOAD_RLX(&c->sendCtrl.sizes[k]);
    commOpSig sig;
    memcpy(&sig, sslot, sizeof(sig));
    int op = cnNetOp(&sig);
    size_t elt = sig.dtype < commNumTypes ? commTypeSize((commDataType_t)sig.dtype) : 0;
    if (bytes < COMM_SLOT_HDR_BYTES || op < 0 || elt == 0 || (bytes - COMM_SLOT_HDR_BYTES) % elt != 0) {
      WARN("COLLNET : channel %d: a slot of %zu bytes with type %u and op %u cannot be reduced by the network",
           c->send->channel, bytes, (unsigned)sig.dtype, (unsigned)sig.op);
      return cnFail(c, commInternalError, "bad slot");
    }
    size_t payload = bytes - COMM_SLOT_HDR_BYTES;
    int nSub = (int)((payload + c->subBytes - 1) / c->subBytes);
    c->nSub[k] = nSub;
    while (c->nSubPosted < nSub) {
      size_t off = (size_t)c->nSubPosted * c->subBytes;
      size_t n = payload - off < c->subBytes ? payload - off : c->subBytes;
      void** req = &c->reqs[k * (uint64_t)c->maxSub + (uint64_t)c->nSubPosted];
      commResult_t res = p->iallreduce(c->collComm, sslot + COMM_SLOT_HDR_BYTES + off,
                                       rslot + COMM_SLOT_HDR_BYTES + off, n / elt, (commDataType_t)sig.dtype,
                                       (commRedOp_t)op, c->sendMh, c->recvMh, req);
      if (res != commSuccess) return cnFail(c, res, "iallreduce");
      if (*req == NULL) break; /* the plugin cannot take it now */
      c->nSubPosted++;
    }
    if (c->nSubPosted < nSub) break;
    c->nSubPosted = 0;
    c->posted++;
  }
  /* Completions, in order; a slot whose operations are only partly posted is not tested past them. */
  while (c->completed < c->posted || (c->completed == c->posted && c->nSubPosted > 0)) {
    uint64_t k = c->completed % nSlots;
    int nSub = c->completed < c->posted ? c->nSub[k] : c->nSubPosted;
    int allDone = 1;
    for (int i = 0; i < nSub; i++) {
      void** req = &c->reqs[k * (uint64_t)c->maxSub + (uint64_t)i];
      if (*req == NULL) continue;
      int done = 0;
      commResult_t res = p->test(*req, &done, NULL);
      if (res != commSuccess) return cnFail(c, res, "a reduction");
      if (done) *req = NULL;
      else allDone = 0;
    }
    if (!allDone || c->completed == c->posted) break;
    char* sslot = c->sendSlots + k * comm->slotBytes;
    char* rslot = c->recvSlots + k * comm->slotBytes;
    memcpy(rslot, sslot, COMM_SLOT_HDR_BYTES); /* the result carries this member's own header */
    COMM_STORE_RLX(&c->recvCtrl.sizes[k], COMM_LOAD_RLX(&c->sendCtrl.sizes[k]));
    c->completed++;
    COMM_STORE_REL(&c->recvCtrl.head, c->completed);
    COMM_STORE_REL(&c->sendCtrl.tail, c->completed);
  }
  return commSuccess;
}

static commResult_t cnProgress(struct commComm* comm, commConn* conn) {
  return cnProgressChan(comm, (commCollNetChan*)conn->priv);
}

static commResult_t cnCheck(struct commComm* comm, commConn* conn) {
  (void)comm;
  commCollNetChan* c = conn->priv;
  if (!c->failed) return commSuccess;
  WARN("COLLNET : the group of channel %d failed earlier (%s)", conn->channel, commGetErrorString(c->failed));
  return c->failed;
}

commResult_t commCollNetProgressAll(struct commComm* comm) {
  struct commCollNetState* st = comm->collnetState;
  if (!st || comm->collnet.nChannels == 0) return commSuccess;
  commResult_t first = commSuccess;
  for (int c = 0; c < st->nChannels; c++) {
    if (!st->chan[c].collComm) continue;
    commResult_t res = cnProgressChan(comm, &st->chan[c]);
    if (res != commSuccess && first == commSuccess) first = res;
  }
  return first;
}
