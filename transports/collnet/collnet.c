/* The collnet transport's groups (docs/ARCHITECTURE.md, "CollNet"): a channel's members, one per node, whose
 * reductions the network does. At init every rank runs commCollNetSetup: members listen (a host lane, and a
 * device lane on GPU-bound communicators: collnet_internal.h), one bootstrap allgather carries the handles,
 * members connect, make their FIFOs (collnet_lane.c) and ask which types and ops the network reduces, and a
 * second allgather carries every rank's outcome, so that every rank decides the same: collnet on for all
 * channels, or off with the reason; device buffers likewise. */
#include <stddef.h>
#include <stdint.h>
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
#define CN_WHY_BYTES 256
#define CN_DEFAULT_CHANNELS 2
#define CN_MIN_COLL_BYTES 4096

int commCollNetWanted(struct commComm* comm) {
  commCollNetInfo* info = &comm->collnet;
  memset(info, 0, sizeof(*info));
  int64_t enable = commParamInt("COMM_COLLNET_ENABLE", 0, 0, 1); /* or NCCL_COLLNET_ENABLE (param.c) */
  const char* src = commParamSource("COMM_COLLNET_ENABLE");
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

/* What each rank publishes in round 1: its status, whether it is GPU-bound (a device lane), its handles. */
typedef struct {
  cnStatus s;
  int32_t hasDevice;
  float latencyUs;         /* the plugin's, for the tuner */
  uint64_t maxCollBytes;   /* the plugin's */
  uint8_t gather, scatter; /* the plugin offers iallgather, ireducescatter */
} cnRound1;

/* Handles start 64-byte aligned (a plugin may read them as structs): the record's head is padded. */
#define CN_R1_HEAD ((sizeof(cnRound1) + 63) & ~(size_t)63)
static size_t round1Bytes(int nCh) { return CN_R1_HEAD + (size_t)nCh * CN_LANES * CN_HANDLE_BYTES; }
static char* handleAt(char* all, int nCh, int rank, int c, int lane) {
  return all + (size_t)rank * round1Bytes(nCh) + CN_R1_HEAD + ((size_t)c * CN_LANES + (size_t)lane) * CN_HANDLE_BYTES;
}

static void cnFreeState(struct commComm* comm) {
  struct commCollNetState* st = comm->collnetState;
  if (!st) return;
  commCollNetProxyStop(st);
  for (int c = 0; c < COMM_MAX_CHANNELS; c++) {
    commChannel* ch = &comm->channels[c];
    ch->collnetSend = ch->collnetRecv = ch->collnetDevSend = ch->collnetDevRecv = NULL;
    for (int l = 0; l < CN_LANES; l++) commCollNetLaneFree(comm, st, &st->chan[c].lane[l]);
  }
  if (st->ctx) st->plugin->finalize(st->ctx);
  if (st->plugin) commCollNetRelease();
  free(st);
  comm->collnetState = NULL;
}

static int isMember(const struct commComm* comm, const int* members, int c) {
  return members[c * comm->nNodes + comm->node] == comm->rank;
}

/* This rank's part of round 1: the plugin, its properties, a listen per lane on the channels it is a member of. */
static commResult_t cnPrepare(struct commComm* comm, struct commCollNetState* st, int nCh, const int* members,
                              char* all, int lanes, char* why, size_t whyLen) {
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
  if (res != commSuccess) {
    snprintf(why, whyLen, "%s: getProperties failed (%s)", source, commGetErrorString(res));
    return res;
  }
  if (st->props.maxCollBytes < CN_MIN_COLL_BYTES) {
    snprintf(why, whyLen, "%s: maxCollBytes %zu is below %d", source, st->props.maxCollBytes, CN_MIN_COLL_BYTES);
    return commInvalidUsage;
  }
  for (int c = 0; c < nCh; c++) {
    if (!isMember(comm, members, c)) continue;
    for (int l = 0; l < lanes; l++) {
      commCollNetLane* lane = &st->chan[c].lane[l];
      res = st->plugin->listen(st->ctx, st->dev, handleAt(all, nCh, comm->rank, c, l), &lane->listenComm);
      if (res != commSuccess || !lane->listenComm) {
        snprintf(why, whyLen, "%s: listen for channel %d failed (%s)", source, c, commGetErrorString(res));
        return res != commSuccess ? res : commInternalError;
      }
    }
  }
  INFO(COMM_COLLNET | COMM_INIT, "COLLNET : %s, plugin %s, device %s, maxCollBytes %zu", source, st->plugin->name,
       st->props.name ? st->props.name : "?", st->props.maxCollBytes);
  return commSuccess;
}

static void cnMembersLine(const struct commComm* comm, const int* members, char* buf, size_t n) {
  size_t len = 0;
  buf[0] = '\0';
  for (int v = 0; v < comm->nNodes && len + 12 < n; v++)
    len += (size_t)snprintf(buf + len, n - len, "%s%d", v ? "," : "", members[v]);
  if (comm->nNodes > 0 && len + 12 >= n) snprintf(buf + len, n - len, ",...");
}

/* Round 2 at a member: form lane `l`'s group on every channel and make its FIFOs. */
static commResult_t cnConnectLane(struct commComm* comm, struct commCollNetState* st, int nCh, const int* members,
                                  char* all, int l, char* why, size_t whyLen) {
  void** handles = NULL;
  COMMCHECK(commCalloc(&handles, (size_t)comm->nNodes, sizeof(void*)));
  commResult_t res = commSuccess;
  for (int c = 0; c < nCh && res == commSuccess; c++) {
    if (!isMember(comm, members, c)) continue;
    for (int v = 0; v < comm->nNodes; v++) handles[v] = handleAt(all, nCh, members[c * comm->nNodes + v], c, l);
    commCollNetLane* lane = &st->chan[c].lane[l];
    res = st->plugin->connect(handles, comm->nNodes, comm->node, lane->listenComm, &lane->collComm);
    if (res == commSuccess && !lane->collComm) res = commInternalError;
    if (res != commSuccess) {
      lane->collComm = NULL;
      snprintf(why, whyLen, "connect of the %s group of channel %d (%d members) failed (%s): %s",
               l == CN_LANE_DEVICE ? "device" : "host", c, comm->nNodes, commGetErrorString(res), commLogLastWarn());
      break;
    }
    st->plugin->closeListen(lane->listenComm);
    lane->listenComm = NULL;
    res = commCollNetLaneMake(comm, st, lane, c, l == CN_LANE_DEVICE, why, whyLen);
    cnMembersLine(comm, members + (size_t)c * (size_t)comm->nNodes, lane->members, sizeof(lane->members));
  }
  free(handles);
  return res;
}

/* The types and ops this member's network reduces (bit op of ops[type]). */
static void cnSupport(const struct commCollNetState* st, uint8_t* ops) {
  for (int t = 0; t < commNumTypes; t++) {
    ops[t] = 0;
    for (int op = commSum; op <= commMin; op++) {
      int ok = 0;
      if (st->plugin->reduceSupport((commDataType_t)t, (commRedOp_t)op, &ok) == commSuccess && ok)
        ops[t] |= (uint8_t)(1u << op);
    }
  }
}

typedef struct {
  cnStatus s;   /* the host lanes */
  cnStatus dev; /* the device lanes (when wanted) */
  uint8_t ops[commNumTypes];
} cnOutcome;

/* The first rank whose status (at offset off of each record of stride bytes) failed, or -1. */
static int cnFirstFailed(const struct commComm* comm, const char* all, size_t stride, size_t off, cnStatus* s) {
  for (int r = 0; r < comm->nRanks; r++) {
    memcpy(s, all + (size_t)r * stride + off, sizeof(*s));
    if (s->status != commSuccess) return r;
  }
  return -1;
}

static int cnUniformNodes(const struct commComm* comm) {
  int m = 0;
  for (int r = 0; r < comm->nRanks; r++) m += comm->rankNode[r] == 0;
  for (int v = 1; v < comm->nNodes; v++) {
    int k = 0;
    for (int r = 0; r < comm->nRanks; r++) k += comm->rankNode[r] == v;
    if (k != m) return 0;
  }
  return 1;
}

commResult_t commCollNetSetup(struct commComm* comm, int nCh, const int* members) {
  if (nCh <= 0) {
    INFO(COMM_COLLNET | COMM_INIT, "COLLNET : off: %s", comm->collnet.why);
    return commSuccess;
  }
  struct commCollNetState* st = NULL;
  char* all = NULL;
  cnOutcome* out = NULL;
  commResult_t res = commSuccess;
  COMMCHECK(commCalloc(&st, 1, sizeof(*st)));
  comm->collnetState = st;
  st->comm = comm;
  st->nChannels = nCh;
  /* Round 1: status, a device lane or not, handles. */
  COMMCHECKGOTO(commCalloc(&all, (size_t)comm->nRanks, round1Bytes(nCh)), res, fail);
  cnRound1 r1;
  memset(&r1, 0, sizeof(r1));
  r1.hasDevice = comm->cudaDev >= 0;
  r1.s.status = cnPrepare(comm, st, nCh, members, all, r1.hasDevice ? CN_LANES : 1, r1.s.why, sizeof(r1.s.why));
  r1.latencyUs = st->props.latencyUs;
  r1.maxCollBytes = st->props.maxCollBytes;
  r1.gather = st->plugin && st->plugin->iallgather != NULL;
  r1.scatter = st->plugin && st->plugin->ireducescatter != NULL;
  memcpy(all + (size_t)comm->rank * round1Bytes(nCh), &r1, sizeof(r1));
  COMMCHECKGOTO(bootstrapAllGather(comm->bootstrap, all, round1Bytes(nCh)), res, fail);
  cnStatus bad;
  int badRank = cnFirstFailed(comm, all, round1Bytes(nCh), 0, &bad);
  int devWanted = 1;
  commCollNetInfo* info = &comm->collnet;
  info->allGather = info->reduceScatter = 1;
  info->maxCollBytes = SIZE_MAX;
  for (int r = 0; r < comm->nRanks; r++) {
    cnRound1 o;
    memcpy(&o, all + (size_t)r * round1Bytes(nCh), sizeof(o));
    devWanted &= o.hasDevice != 0;
    if (o.latencyUs > info->latencyUs) info->latencyUs = o.latencyUs;
    if (o.maxCollBytes < info->maxCollBytes) info->maxCollBytes = (size_t)o.maxCollBytes;
    info->allGather &= o.gather;
    info->reduceScatter &= o.scatter;
  }
  info->uniformNodes = cnUniformNodes(comm);
  /* Round 2: members form the groups; everyone's outcome and what the network reduces. */
  COMMCHECKGOTO(commCalloc(&out, (size_t)comm->nRanks, sizeof(cnOutcome)), res, fail);
  cnOutcome* me = &out[comm->rank];
  memset(me->ops, 0xff, sizeof(me->ops));
  me->s.status = badRank >= 0 ? commRemoteError
                              : cnConnectLane(comm, st, nCh, members, all, CN_LANE_HOST, me->s.why, sizeof(me->s.why));
  if (me->s.status == commSuccess && devWanted)
    me->dev.status = cnConnectLane(comm, st, nCh, members, all, CN_LANE_DEVICE, me->dev.why, sizeof(me->dev.why));
  if (me->s.status == commSuccess) cnSupport(st, me->ops);
  COMMCHECKGOTO(bootstrapAllGather(comm->bootstrap, out, sizeof(cnOutcome)), res, fail);
  if (badRank < 0) badRank = cnFirstFailed(comm, (const char*)out, sizeof(cnOutcome), 0, &bad);
  if (badRank >= 0) {
    snprintf(comm->collnet.why, sizeof(comm->collnet.why), "rank %d: %s", badRank, bad.why);
    WARN_NOTICE("COLLNET : off on every rank (COMM_COLLNET_ENABLE=1): rank %d could not take part: %s; collectives "
                "run without it",
                badRank, bad.why);
    goto off;
  }
  for (int t = 0; t < commNumTypes; t++) {
    uint8_t ops = 0x0f;
    for (int r = 0; r < comm->nRanks; r++) ops &= out[r].ops[t];
    comm->collnet.opsOfType[t] = ops;
  }
  int devBad = devWanted ? cnFirstFailed(comm, (const char*)out, sizeof(cnOutcome), offsetof(cnOutcome, dev), &bad)
                         : -1;
  if (devWanted && devBad < 0) devBad = commCollNetProxyStart(st) == commSuccess ? -1 : comm->rank;
  if (devWanted && devBad >= 0) {
    WARN_NOTICE("COLLNET : device buffers do not use collnet (rank %d: %s); host buffers do", devBad, bad.why);
    for (int c = 0; c < nCh; c++) commCollNetLaneFree(comm, st, &st->chan[c].lane[CN_LANE_DEVICE]);
  }
  comm->collnet.devOn = devWanted && devBad < 0;
  for (int c = 0; c < nCh; c++) {
    commChannel* ch = &comm->channels[c];
    ch->collnetSend = st->chan[c].lane[CN_LANE_HOST].send;
    ch->collnetRecv = st->chan[c].lane[CN_LANE_HOST].recv;
    if (comm->collnet.devOn) {
      ch->collnetDevSend = st->chan[c].lane[CN_LANE_DEVICE].send;
      ch->collnetDevRecv = st->chan[c].lane[CN_LANE_DEVICE].recv;
    }
  }
  comm->collnet.nChannels = nCh;
  char line[96];
  cnMembersLine(comm, members, line, sizeof(line));
  INFO(COMM_COLLNET | COMM_INIT,
       "COLLNET : on: %d channel(s), %d members each (channel 0: ranks %s), plugin %s; allreduce%s%s%s; device "
       "buffers %s",
       nCh, comm->nNodes, line, comm->collnet.plugin, info->allGather && info->uniformNodes ? ", allgather" : "",
       info->reduceScatter && info->uniformNodes ? ", reducescatter" : "",
       (info->allGather || info->reduceScatter) && !info->uniformNodes
           ? " (not allgather/reducescatter: nodes differ in size)"
       : !info->allGather && !info->reduceScatter ? " (the plugin offers no allgather/reducescatter)"
                                                  : "",
       comm->collnet.devOn ? "too"
       : devWanted         ? "not (see WARN)"
                           : "not (host ranks)");
  free(out);
  free(all);
  return commSuccess;
off:
  free(out);
  free(all);
  cnFreeState(comm);
  return commSuccess;
fail:
  free(out);
  free(all);
  cnFreeState(comm);
  return res;
}

commResult_t commCollNetFree(struct commComm* comm) {
  cnFreeState(comm);
  return commSuccess;
}

commResult_t commCollNetProgressAll(struct commComm* comm) {
  struct commCollNetState* st = comm->collnetState;
  if (!st || comm->collnet.nChannels == 0) return commSuccess;
  commResult_t first = commSuccess;
  for (int c = 0; c < st->nChannels; c++) {
    commCollNetLane* l = &st->chan[c].lane[CN_LANE_HOST];
    if (!l->collComm) continue;
    commResult_t res = commCollNetLaneProgress(comm, l);
    if (res != commSuccess && first == commSuccess) first = res;
  }
  return first;
}
