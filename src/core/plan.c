/* From tasks to plans: the tuner (src/tune) chooses the algorithm, protocol, channels and step size of
 * each collective; the algorithm's generator builds the schedule; then the connections it needs are
 * found and made. Grouped point-to-point operations run as one batch of pairwise exchanges. */
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "enqueue.h"
#include "exec.h"
#include "exec_dev.h"
#include "param.h"
#include "tune.h"
#include "utils.h"

static int isReductionFunc(commFunc_t f) {
  return f == commFuncAllReduce || f == commFuncReduce || f == commFuncReduceScatter;
}

commResult_t commPlanPrepare(commPlan* plan, void* scratch) {
  if (plan->sched.scratchElems > 0) {
    if (scratch == NULL) {
      WARN("%s needs %zu elements of scratch and got none", commFuncName(plan->func), plan->sched.scratchElems);
      return commInternalError;
    }
    plan->bufs[COMM_BUF_SCRATCH] = scratch;
  }
  memset(plan->progress, 0, sizeof(plan->progress));
  plan->done = 0;
  plan->lastProgressNs = commTimeNs();
  plan->lastCheckNs = plan->lastProgressNs;
  plan->waitChannel = plan->waitPeer = -1;
  return commSuccess;
}

void commPlanFree(commPlan* plan) {
  if (plan == NULL) return;
  commSchedFree(&plan->sched);
  free(plan->bufs);
  free(plan);
}

static commResult_t newPlan(commComm* comm, commFunc_t func, int nBufs, commPlan** out) {
  commPlan* plan = NULL;
  COMMCHECK(commCalloc(&plan, 1, sizeof(*plan)));
  plan->comm = comm;
  plan->func = func;
  plan->devProto = commProtoSimple;
  plan->opCount = comm->opCount++;
  commResult_t res = commCalloc(&plan->bufs, (size_t)(nBufs < COMM_BUF_USER0 ? COMM_BUF_USER0 : nBufs), sizeof(void*));
  if (res != commSuccess) {
    free(plan);
    return res;
  }
  *out = plan;
  return commSuccess;
}

static commResult_t buildCollPlan(commComm* comm, const commTask* t, commPlan** out) {
  commPlan* plan = NULL;
  commResult_t res;
  COMMCHECK(newPlan(comm, t->func, COMM_BUF_USER0, &plan));
  plan->dtype = t->dtype;
  plan->eltSize = commTypeSize(t->dtype);
  plan->redop = t->redop;
  plan->count = t->count;
  plan->root = t->root;
  plan->bufs[COMM_BUF_INPUT] = (void*)t->sendbuff;
  plan->bufs[COMM_BUF_OUTPUT] = t->recvbuff;
  plan->onDevice = t->onDevice;
  plan->nStreams = 1;
  plan->streams[0] = t->stream;
  plan->devScalar = t->devScalar;
  plan->sig.magic = COMM_SIG_MAGIC;
  plan->sig.func = (uint8_t)t->func;
  plan->sig.op = !isReductionFunc(t->func) ? COMM_SIG_OP_NONE
                 : (int)t->op < commNumOps ? (uint8_t)t->op
                                           : COMM_SIG_OP_USER;
  plan->sig.dtype = (uint8_t)t->dtype;
  plan->sig.root = t->func == commFuncBroadcast || t->func == commFuncReduce ? t->root : -1;
  plan->sig.count = t->count;
  plan->sig.seq = t->collSeq;

  commTuneChoice choice;
  if (plan->onDevice) COMMCHECKGOTO(commTuneChooseDevice(comm, t->func, t->count, plan->eltSize, &choice), res, fail);
  else COMMCHECKGOTO(commTuneChoose(comm, t->func, t->count, plan->eltSize, &choice), res, fail);
  commTuneCollNetCheck(comm, t->func, t->dtype, &plan->redop, plan->onDevice, &choice);
  plan->repeatable = choice.repeatable;
  commCollArgs args;
  memset(&args, 0, sizeof(args));
  args.func = t->func;
  args.rank = comm->rank;
  args.nRanks = comm->nRanks;
  args.count = t->count;
  args.eltSize = plan->eltSize;
  args.root = t->root;
  args.isReduction = isReductionFunc(t->func);
  args.nChannels = choice.nChannels;
  args.proto = choice.proto;
  plan->devProto = choice.proto;
  /* A send step carries at most the protocol's step size, and never more than half the FIFO, so that
   * neighbours sending to each other never block. */
  size_t slotBytes = plan->onDevice && plan->devProto == commProtoLL
                         ? COMM_DEV_LL_PIECE                      /* LL slots carry less */
                         : comm->slotBytes - COMM_SLOT_HDR_BYTES; /* the signature */
  size_t slotElems = slotBytes / plan->eltSize;
  size_t fifoHalf = (size_t)(comm->nSlots / 2) * slotElems;
  args.chunkElems = choice.chunkBytes / plan->eltSize;
  if (args.chunkElems > fifoHalf) args.chunkElems = fifoHalf;
  if (!plan->onDevice && args.chunkElems > slotElems) args.chunkElems -= args.chunkElems % slotElems; /* whole slots */
  if (args.chunkElems < 1) args.chunkElems = 1;
  args.pieceElems = slotElems;
  if (choice.algo == commAlgoCollNet && comm->collnet.maxCollBytes / plan->eltSize < args.pieceElems)
    args.pieceElems = comm->collnet.maxCollBytes / plan->eltSize; /* one network operation per slot at most */
  for (int c = 0; c < args.nChannels; c++) {
    COMMCHECKGOTO(commChannelEnsure(comm, c), res, fail);
    args.ringRanks[c] = comm->channels[c].ringRanks;
  }
  args.nNodes = comm->nNodes;
  args.nodeOf = comm->rankNode;
  commSchedBuilder_t build = commAlgoBuilder(choice.algo, t->func);
  if (build == NULL) {
    WARN("%s: the tuner chose %s, which does not implement it", commFuncName(t->func), commAlgoName(choice.algo));
    res = commInternalError;
    goto fail;
  }
  COMMCHECKGOTO(build(&args, &plan->sched), res, fail);
  if (plan->sched.nBufs > COMM_BUF_USER0) {
    WARN("%s: schedule refers to %d buffers", commFuncName(t->func), plan->sched.nBufs);
    res = commInternalError;
    goto fail;
  }
  INFO(COMM_COLL | COMM_TUNE,
       "%s: opCount %llu sendbuff %p recvbuff %p count %zu datatype %s op %s root %d comm %p [nranks=%d] - "
       "algo %s proto %s channels %d chunk %zu B predicted %.1f us%s",
       commFuncName(t->func), (unsigned long long)plan->opCount, t->sendbuff, t->recvbuff, t->count,
       commTypeName(t->dtype), isReductionFunc(t->func) ? commOpName(t->op) : "none", t->root, (void*)comm,
       comm->nRanks, commAlgoName(choice.algo), commProtoName(choice.proto), plan->sched.nChannels,
       args.chunkElems * plan->eltSize, choice.predictedUs, plan->onDevice ? " (device buffers)" : "");
  *out = plan;
  return commSuccess;
fail:
  commPlanFree(plan);
  return res;
}

/* The point-to-point tasks of one communicator in a group on host buffers become one plan, and those on
 * device buffers another (a send and its receive must both be host or both device), counted in bytes. */
static commResult_t buildP2pPlan(commComm* comm, commTask* tasks, int nP2p, int onDevice, commPlan** out) {
  commPlan* plan = NULL;
  commP2pOp* ops = NULL;
  commResult_t res;
  COMMCHECK(newPlan(comm, commFuncSendRecv, COMM_BUF_USER0 + nP2p, &plan));
  plan->dtype = commUint8;
  plan->eltSize = 1;
  plan->sig.magic = COMM_SIG_MAGIC;
  plan->sig.func = commFuncSendRecv;
  plan->sig.root = -1;
  COMMCHECKGOTO(commRedOpArgsBuiltin(commSum, commUint8, comm->nRanks, &plan->redop), res, fail);
  COMMCHECKGOTO(commCalloc(&ops, (size_t)nP2p, sizeof(*ops)), res, fail);
  plan->onDevice = onDevice;
  int i = 0;
  for (commTask* t = tasks; t; t = t->next) {
    if (t->kind == COMM_TASK_COLL || t->onDevice != onDevice) continue;
    int seen = 0;
    for (int k = 0; k < plan->nStreams && !seen; k++) seen = plan->streams[k] == t->stream;
    if (!seen && onDevice) {
      if (plan->nStreams == COMM_PLAN_MAX_STREAMS) {
        WARN("rank %d: a group's sends and receives use more than %d CUDA streams", comm->rank, COMM_PLAN_MAX_STREAMS);
        res = commInvalidUsage;
        goto fail;
      }
      plan->streams[plan->nStreams++] = t->stream;
    }
    size_t bytes = t->count * commTypeSize(t->dtype);
    ops[i].peer = t->root;
    ops[i].isSend = t->kind == COMM_TASK_SEND;
    ops[i].count = bytes;
    ops[i].buf = (uint32_t)(COMM_BUF_USER0 + i);
    plan->bufs[COMM_BUF_USER0 + i] = ops[i].isSend ? (void*)t->sendbuff : t->recvbuff;
    plan->count += bytes;
    INFO(COMM_P2P, "%s: opCount %llu %s %zu bytes %s rank %d comm %p", ops[i].isSend ? "Send" : "Recv",
         (unsigned long long)plan->opCount, ops[i].isSend ? "sends" : "receives", bytes, ops[i].isSend ? "to" : "from",
         t->root, (void*)comm);
    i++;
  }
  COMMCHECKGOTO(commP2pBuild(comm->rank, comm->nRanks, ops, nP2p, &plan->sched), res, fail);
  free(ops);
  *out = plan;
  return commSuccess;
fail:
  free(ops);
  commPlanFree(plan);
  return res;
}

/* Appends connection (c, peer, isSend) of the plan's kind to reqs unless it exists or is asked already. */
static commResult_t requestConnection(commComm* comm, const commPlan* plan, int c, int peer, int isSend,
                                      commConnRequest** reqs, int* nReqs, int* cap) {
  commChannel* ch = &comm->channels[c];
  commConn** table = plan->onDevice ? (isSend ? ch->devSend : ch->devRecv) : (isSend ? ch->send : ch->recv);
  if (table[peer] != NULL) return commSuccess;
  for (int i = 0; i < *nReqs; i++)
    if ((*reqs)[i].channel == c && (*reqs)[i].peer == peer && (*reqs)[i].isSend == isSend &&
        (*reqs)[i].onDevice == plan->onDevice)
      return commSuccess;
  if (*nReqs == *cap) {
    int ncap = *cap ? *cap * 2 : 16;
    COMMCHECK(commRealloc(reqs, (size_t)*cap, (size_t)ncap, sizeof(**reqs)));
    *cap = ncap;
  }
  (*reqs)[(*nReqs)++] = (commConnRequest){c, peer, isSend, plan->onDevice};
  return commSuccess;
}

/* The connections a plan's schedule uses that do not exist yet, without duplicates, appended to reqs. Most
 * calls need none (the ring's connections are made at init), so this costs a pointer check per step and no
 * allocation; the few missing ones are deduplicated by a scan of the short request list. Device connections
 * are made on first use; a channel's first ones include both of its ring's (send to the next rank, receive
 * from the previous), whatever the plan: ranks whose plans differ (two broadcast roots: each only sends)
 * then still make the same connections, and the mismatch is found by the signature of the first message
 * instead of a connection exchange that waits for the timeout. */
static commResult_t collectConnections(commComm* comm, const commPlan* plan, commConnRequest** reqs, int* nReqs,
                                       int* cap) {
  for (int c = 0; c < plan->sched.nChannels; c++) {
    const commChannelSched* cs = &plan->sched.channels[c];
    if (cs->nSteps > 0) COMMCHECK(commChannelEnsure(comm, c));
    const int before = *nReqs;
    for (int s = 0; s < cs->nSteps; s++) {
      const commStep* st = &cs->steps[s];
      int peers[2] = {st->sendPeer, st->recvPeer};
      for (int k = 0; k < 2; k++) {
        int peer = peers[k];
        if (peer < 0 || peer == comm->rank) continue;
        if (peer >= comm->nRanks) {
          WARN("schedule names rank %d of %d", peer, comm->nRanks);
          return commInternalError;
        }
        COMMCHECK(requestConnection(comm, plan, c, peer, k == 0, reqs, nReqs, cap));
      }
    }
    const commChannel* ch = &comm->channels[c];
    if (plan->onDevice && *nReqs > before && comm->nRanks > 1) {
      COMMCHECK(requestConnection(comm, plan, c, ch->ringNext, 1, reqs, nReqs, cap));
      COMMCHECK(requestConnection(comm, plan, c, ch->ringPrev, 0, reqs, nReqs, cap));
    }
  }
  return commSuccess;
}

/* Plans of one communicator and the connections they still need (made by the caller). */
static commResult_t buildCommPlans(commComm* comm, commTask* tasks, commPlan*** plansOut, int* nPlansOut,
                                   commConnRequest** reqsOut, int* nReqsOut) {
  commResult_t res = commSuccess;
  int nColl = 0, nP2p[2] = {0, 0};
  for (commTask* t = tasks; t; t = t->next) {
    if (t->kind == COMM_TASK_COLL) nColl++;
    else nP2p[t->onDevice ? 1 : 0]++;
  }
  int nPlans = nColl + (nP2p[0] > 0) + (nP2p[1] > 0);
  commPlan** plans = NULL;
  commConnRequest* reqs = NULL;
  int nReqs = 0, cap = 0, n = 0;
  COMMCHECK(commCalloc(&plans, (size_t)nPlans, sizeof(*plans)));
  for (commTask* t = tasks; t; t = t->next) {
    if (t->kind != COMM_TASK_COLL) continue;
    COMMCHECKGOTO(buildCollPlan(comm, t, &plans[n]), res, fail);
    n++;
  }
  for (int dev = 0; dev < 2; dev++) {
    if (nP2p[dev] == 0) continue;
    COMMCHECKGOTO(buildP2pPlan(comm, tasks, nP2p[dev], dev, &plans[n]), res, fail);
    n++;
  }
  /* List the connections still missing (channels beyond COMM_NCHANNELS get their tables on first use:
   * the double binary tree takes two, CollTree across nodes four). */
  for (int p = 0; p < n; p++) COMMCHECKGOTO(collectConnections(comm, plans[p], &reqs, &nReqs, &cap), res, fail);
  *plansOut = plans;
  *nPlansOut = n;
  *reqsOut = reqs;
  *nReqsOut = nReqs;
  return commSuccess;
fail:
  for (int p = 0; p < n; p++) commPlanFree(plans[p]);
  free(plans);
  free(reqs);
  return res;
}

/* One scratch buffer per communicator, kept between calls and grown when a plan needs more: its plans run one
 * after another. (A fresh calloc per call cost page faults: one-shot allreduce of 32 KiB on 4 ranks stages
 * 128 KiB.) Device plans' scratch is the CUDA executor's (its state made here too); its address in *devScratch
 * when not NULL. */
static commResult_t ensureScratch(commComm* comm, commPlan** plans, int nPlans, void** devScratch) {
  size_t need = 0, devNeed = 0;
  for (int p = 0; p < nPlans; p++) {
    size_t b = plans[p]->sched.scratchElems * plans[p]->eltSize;
    size_t* n = plans[p]->onDevice ? &devNeed : &need;
    if (b > *n) *n = b;
    if (plans[p]->onDevice) COMMCHECK(commDevEnsure(comm));
  }
  if (need > comm->scratchBytes) {
    free(comm->scratch);
    comm->scratch = NULL;
    comm->scratchBytes = 0;
    void* buf = NULL;
    int err = posix_memalign(&buf, 4096, need);
    if (err) {
      WARN("cannot allocate %zu bytes of scratch: %s", need, strerror(err));
      return commSystemError;
    }
    comm->scratch = buf;
    comm->scratchBytes = need;
  }
  void* dev = NULL;
  if (devNeed > 0) COMMCHECK(commDevScratch(comm, devNeed, &dev));
  if (devScratch) *devScratch = dev;
  return commSuccess;
}

#define BUILD_STACK_COMMS 8 /* communicators whose request lists live on the stack (most calls: one) */

commResult_t commPlansBuildMulti(commComm** comms, commTask** lists, int nComms, commPlan*** plans, int* nPlans) {
  commResult_t res = commSuccess;
  commConnRequest* reqsStack[BUILD_STACK_COMMS] = {NULL};
  int nReqsStack[BUILD_STACK_COMMS] = {0};
  commConnRequest** reqs = reqsStack;
  int* nReqs = nReqsStack;
  int onHeap = nComms > BUILD_STACK_COMMS;
  if (onHeap) {
    reqs = NULL;
    nReqs = NULL;
    COMMCHECKGOTO(commCalloc(&reqs, (size_t)nComms, sizeof(*reqs)), res, out);
    COMMCHECKGOTO(commCalloc(&nReqs, (size_t)nComms, sizeof(*nReqs)), res, out);
  }
  for (int c = 0; c < nComms; c++) {
    commLogSetRank(comms[c]->rank);
    COMMCHECKGOTO(buildCommPlans(comms[c], lists[c], &plans[c], &nPlans[c], &reqs[c], &nReqs[c]), res, out);
  }
  /* Scratch and the CUDA executor's state before the connections: once this rank has exchanged connection
   * details, its peers may launch and spin waiting for it, and allocating then could wait for their kernels. */
  for (int c = 0; c < nComms; c++) COMMCHECKGOTO(ensureScratch(comms[c], plans[c], nPlans[c], NULL), res, out);
  /* Connections of all communicators of this thread together, phase by phase. */
  COMMCHECKGOTO(commTransportConnectMulti(comms, (const commConnRequest* const*)reqs, nReqs, nComms), res, out);
  for (int c = 0; c < nComms; c++) {
    void* devScratch = NULL;
    COMMCHECKGOTO(ensureScratch(comms[c], plans[c], nPlans[c], &devScratch), res, out);
    for (int p = 0; p < nPlans[c]; p++)
      COMMCHECKGOTO(commPlanPrepare(plans[c][p], plans[c][p]->onDevice ? devScratch : comms[c]->scratch), res, out);
  }
out:
  if (reqs)
    for (int c = 0; c < nComms; c++) free(reqs[c]);
  if (onHeap) {
    free(reqs);
    free(nReqs);
  }
  return res;
}
