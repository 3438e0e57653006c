/* Executors run schedules. The host executor is a non-blocking state machine: progress() moves every
 * channel as far as it can without waiting and returns, so one thread can drive many plans (several
 * communicators in one group) at once. */
#ifndef COMM_EXEC_H_
#define COMM_EXEC_H_

#include "check.h"
#include "communicator.h"
#include "transport.h"
#include "reduce.h"
#include "schedule.h"
#include "op_sig.h"

typedef struct {
  int stepIdx;     /* current step */
  size_t sendDone; /* elements of the current step sent */
  size_t recvDone; /* elements of the current step received */
  size_t workDone; /* elements of the current step fully processed (for single-stream prims) */
} commChannelProgress;

/* "allreduce(sum, float, count 100, seq 5)" */
const char* commOpSigStr(const commOpSig* sig, char* buf, size_t n);
/* Peer's data on channel carried theirs where this rank's operation is mine: the WARN naming both calls
 * (where: "" or ", on device"), the peer noted as the culprit. commInvalidUsage. */
commResult_t commOpSigMismatch(struct commComm* comm, const commOpSig* mine, int peer, const commOpSig* theirs,
                               int channel, const char* where);

typedef struct commPlan {
  struct commComm* comm;
  commFunc_t func;
  commSchedule sched;
  void** bufs; /* [sched.nBufs] */
  commDataType_t dtype;
  size_t eltSize;
  commRedOpArgs redop;
  uint64_t opCount;
  commOpSig sig; /* what every slot of this plan carries, and every slot it receives must carry */
  size_t count;  /* API count, for messages */
  int root;
  int onDevice; /* device buffers: run by the CUDA executor, ordered with the callers' streams */
#define COMM_PLAN_MAX_STREAMS 8
  int devProto;   /* device plans: commProtoLL or commProtoSimple */
  int repeatable; /* an identical call gets the same plan (the tuner says so): the CUDA executor may keep it */
  int nStreams;   /* device plans: the distinct streams of the calls in the plan (grouped send/recv */
  commStream_t streams[COMM_PLAN_MAX_STREAMS]; /* may name several) */
  const void* devScalar; /* device plans: a PREMULSUM scalar in device memory, read by the kernel */
  commChannelProgress progress[COMM_MAX_CHANNELS];
  int done;
  int progressed;  /* set by each progress call that moved something */
  int waitChannel; /* where the last wait stood, for timeout messages */
  int waitPeer;
  int waitIsSend;
  int64_t lastProgressNs;
  int64_t lastCheckNs;
  struct commPlan* next; /* in a group's list */
} commPlan;

/* Advance without blocking; *done = 1 when finished. Errors: the comm's abort flag (commInternalError),
 * timeout without progress (commTimeout), a peer gone (commRemoteError), each with a WARN naming peer and
 * operation. */
commResult_t commExecHostProgress(commPlan* plan, int* done);
/* Run a list of plans (several comms) to completion from this thread. */
commResult_t commExecHostRun(commPlan** plans, int nPlans);

#endif
