/* From tasks to plans: choose the algorithm and its parameters, build the schedule, find the connections
 * it needs and make sure they exist. The tuner (src/tune) will take over the choice; today every
 * collective runs the ring (alltoall and point-to-point run pairwise exchanges). */
#include <stdlib.h>
#include <string.h>

#include "enqueue.h"
#include "exec.h"
#include "utils.h"

/* Below this many bytes per rank and channel, another channel costs more latency than it gains. */
#define COMM_MIN_BYTES_PER_CHANNEL (64 * 1024)

static int isReductionFunc(commFunc_t f) {
  return f == commFuncAllReduce || f == commFuncReduce || f == commFuncReduceScatter;
}

/* Same answer on every rank: depends only on the call's arguments and the communicator. */
static int channelsFor(const commComm* comm, size_t bytesPerRank) {
  size_t n = bytesPerRank / COMM_MIN_BYTES_PER_CHANNEL;
  if (n < 1) n = 1;
  if (n > (size_t)comm->nChannels) n = (size_t)comm->nChannels;
  return (int)n;
}

static commResult_t newPlan(commComm* comm, commFunc_t func, int nBufs, commPlan** out) {
  commPlan* plan = NULL;
  COMMCHECK(commCalloc(&plan, 1, sizeof(*plan)));
  plan->comm = comm;
  plan->func = func;
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

  commCollArgs args;
  memset(&args, 0, sizeof(args));
  args.func = t->func;
  args.rank = comm->rank;
  args.nRanks = comm->nRanks;
  args.count = t->count;
  args.eltSize = plan->eltSize;
  args.root = t->root;
  args.isReduction = isReductionFunc(t->func);
  size_t perRankBytes = t->count * plan->eltSize;
  if (t->func == commFuncAllReduce || t->func == commFuncBroadcast || t->func == commFuncReduce)
    perRankBytes /= (size_t)comm->nRanks;
  args.nChannels = t->func == commFuncAllToAll ? 1 : channelsFor(comm, perRankBytes);
  /* A send-only step may carry half the FIFO, so that neighbours sending to each other never block. */
  args.chunkElems = (size_t)(comm->nSlots / 2) * (comm->slotBytes / plan->eltSize);
  for (int c = 0; c < args.nChannels; c++) args.ringRanks[c] = comm->channels[c].ringRanks;
  args.nNodes = comm->nNodes;
  args.nodeOf = comm->rankNode;
  args.proto = commProtoSimple;
  const char* algo = "Ring";
  if (t->func == commFuncAllToAll) {
    algo = "Pairwise";
    COMMCHECKGOTO(commAllToAllBuild(&args, &plan->sched), res, fail);
  } else if (t->func == commFuncAllReduce && comm->nRanks > 1 && comm->nRanks <= COMM_ONESHOT_MAX_RANKS &&
             t->count * plan->eltSize <= comm->oneShotMaxBytes) {
    algo = "OneShot";
    args.nChannels = 1;
    COMMCHECKGOTO(commOneShotBuild(&args, &plan->sched), res, fail);
  } else {
    COMMCHECKGOTO(commRingBuild(&args, &plan->sched), res, fail);
  }
  if (plan->sched.nBufs > COMM_BUF_USER0) {
    WARN("%s: schedule refers to %d buffers", commFuncName(t->func), plan->sched.nBufs);
    res = commInternalError;
    goto fail;
  }
  INFO(COMM_COLL, "%s: opCount %llu sendbuff %p recvbuff %p count %zu datatype %s op %s root %d comm %p "
       "[nranks=%d] - algo %s proto Simple channels %d chunk %zu B",
       commFuncName(t->func), (unsigned long long)plan->opCount, t->sendbuff, t->recvbuff, t->count,
       commTypeName(t->dtype), isReductionFunc(t->func) ? commOpName(t->op) : "none", t->root, (void*)comm,
       comm->nRanks, algo, args.nChannels, comm->slotBytes);
  *out = plan;
  return commSuccess;
fail:
  commPlanFree(plan);
  return res;
}

/* All point-to-point tasks of one communicator in a group become one plan, counted in bytes. */
static commResult_t buildP2pPlan(commComm* comm, commTask* tasks, int nP2p, commPlan** out) {
  commPlan* plan = NULL;
  commP2pOp* ops = NULL;
  commResult_t res;
  COMMCHECK(newPlan(comm, commFuncSendRecv, COMM_BUF_USER0 + nP2p, &plan));
  plan->dtype = commUint8;
  plan->eltSize = 1;
  COMMCHECKGOTO(commRedOpArgsBuiltin(commSum, commUint8, comm->nRanks, &plan->redop), res, fail);
  COMMCHECKGOTO(commCalloc(&ops, (size_t)nP2p, sizeof(*ops)), res, fail);
  int i = 0;
  for (commTask* t = tasks; t; t = t->next) {
    if (t->kind == COMM_TASK_COLL) continue;
    size_t bytes = t->count * commTypeSize(t->dtype);
    ops[i].peer = t->root;
    ops[i].isSend = t->kind == COMM_TASK_SEND;
    ops[i].count = bytes;
    ops[i].buf = (uint32_t)(COMM_BUF_USER0 + i);
    plan->bufs[COMM_BUF_USER0 + i] = ops[i].isSend ? (void*)t->sendbuff : t->recvbuff;
    plan->count += bytes;
    INFO(COMM_P2P, "%s: opCount %llu %s %zu bytes %s rank %d comm %p", ops[i].isSend ? "Send" : "Recv",
         (unsigned long long)plan->opCount, ops[i].isSend ? "sends" : "receives", bytes,
         ops[i].isSend ? "to" : "from", t->root, (void*)comm);
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

/* The connections a plan's schedule uses that do not exist yet, without duplicates, appended to reqs. Most
 * calls need none (the ring's connections are made at init), so this costs a pointer check per step and no
 * allocation; the few missing ones are deduplicated by a scan of the short request list. */
static commResult_t collectConnections(commComm* comm, const commPlan* plan, commConnRequest** reqs, int* nReqs,
                                       int* cap) {
  for (int c = 0; c < plan->sched.nChannels; c++) {
    const commChannelSched* cs = &plan->sched.channels[c];
    if (cs->nSteps > 0) COMMCHECK(commChannelEnsure(comm, c));
    commChannel* ch = &comm->channels[c];
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
        int isSend = k == 0;
        if ((isSend ? ch->send[peer] : ch->recv[peer]) != NULL) continue;
        int dup = 0;
        for (int i = 0; i < *nReqs && !dup; i++)
          dup = (*reqs)[i].channel == c && (*reqs)[i].peer == peer && (*reqs)[i].isSend == isSend;
        if (dup) continue;
        if (*nReqs == *cap) {
          int ncap = *cap ? *cap * 2 : 16;
          COMMCHECK(commRealloc(reqs, (size_t)*cap, (size_t)ncap, sizeof(**reqs)));
          *cap = ncap;
        }
        (*reqs)[(*nReqs)++] = (commConnRequest){c, peer, isSend};
      }
    }
  }
  return commSuccess;
}

/* Plans of one communicator and the connections they still need (made by the caller). */
static commResult_t buildCommPlans(commComm* comm, commTask* tasks, commPlan*** plansOut, int* nPlansOut,
                                   commConnRequest** reqsOut, int* nReqsOut) {
  commResult_t res = commSuccess;
  int nColl = 0, nP2p = 0;
  for (commTask* t = tasks; t; t = t->next) {
    if (t->kind == COMM_TASK_COLL) nColl++;
    else nP2p++;
  }
  int nPlans = nColl + (nP2p > 0);
  commPlan** plans = NULL;
  commConnRequest* reqs = NULL;
  int nReqs = 0, cap = 0, n = 0;
  COMMCHECK(commCalloc(&plans, (size_t)nPlans, sizeof(*plans)));
  for (commTask* t = tasks; t; t = t->next) {
    if (t->kind != COMM_TASK_COLL) continue;
    COMMCHECKGOTO(buildCollPlan(comm, t, &plans[n]), res, fail);
    n++;
  }
  if (nP2p > 0) {
    COMMCHECKGOTO(buildP2pPlan(comm, tasks, nP2p, &plans[n]), res, fail);
    n++;
  }
  /* A schedule uses only channels the communicator set up; list the connections still missing. */
  for (int p = 0; p < n; p++) {
    if (plans[p]->sched.nChannels > comm->nChannels) {
      WARN("%s: schedule uses %d channels, communicator has %d", commFuncName(plans[p]->func),
           plans[p]->sched.nChannels, comm->nChannels);
      res = commInternalError;
      goto fail;
    }
    COMMCHECKGOTO(collectConnections(comm, plans[p], &reqs, &nReqs, &cap), res, fail);
  }
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

commResult_t commPlansBuildMulti(commComm** comms, commTask** lists, int nComms, commPlan*** plans, int* nPlans) {
  commResult_t res = commSuccess;
  commConnRequest** reqs = NULL;
  int* nReqs = NULL;
  COMMCHECKGOTO(commCalloc(&reqs, (size_t)nComms, sizeof(*reqs)), res, out);
  COMMCHECKGOTO(commCalloc(&nReqs, (size_t)nComms, sizeof(*nReqs)), res, out);
  for (int c = 0; c < nComms; c++) {
    commLogSetRank(comms[c]->rank);
    COMMCHECKGOTO(buildCommPlans(comms[c], lists[c], &plans[c], &nPlans[c], &reqs[c], &nReqs[c]), res, out);
  }
  /* Connections of all communicators of this thread together, phase by phase. */
  COMMCHECKGOTO(commTransportConnectMulti(comms, (const commConnRequest* const*)reqs, nReqs, nComms), res, out);
  for (int c = 0; c < nComms; c++)
    for (int p = 0; p < nPlans[c]; p++) COMMCHECKGOTO(commPlanPrepare(plans[c][p]), res, out);
out:
  if (reqs)
    for (int c = 0; c < nComms; c++) free(reqs[c]);
  free(reqs);
  free(nReqs);
  return res;
}
