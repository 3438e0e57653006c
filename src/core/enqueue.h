/* Tasks: one per API call, collected by groups and turned into plans at commGroupEnd. */
#ifndef COMM_ENQUEUE_H_
#define COMM_ENQUEUE_H_

#include "exec.h"

typedef enum { COMM_TASK_COLL = 0, COMM_TASK_SEND, COMM_TASK_RECV } commTaskKind_t;

typedef struct commTask {
  commTaskKind_t kind;
  commFunc_t func; /* collectives */
  struct commComm* comm;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  commDataType_t dtype;
  commRedOp_t op;
  int root;              /* collectives: root; p2p: peer */
  uint64_t collSeq;      /* collectives: the communicator's collective sequence number (commComm.collCount) */
  commRedOpArgs redop;   /* resolved at enqueue time */
  const void* devScalar; /* a PREMULSUM scalar in device memory (device buffers), else NULL */
  int onDevice;          /* the buffers are device memory (checked at the API) */
  commStream_t stream;
  struct commTask* next;
} commTask;

/* src/core/group.c: run the task now, or keep it for the outermost commGroupEnd. */
commResult_t commEnqueue(const commTask* task);
/* Depth of the calling thread's group nesting. */
int commGroupDepth(void);

/* A blocking call made inside a group (init, split, finalize) is deferred: at the outermost commGroupEnd
 * every deferred call runs in a thread of its own, all at once, so one thread can set up or tear down
 * several communicators whose ranks wait on each other. `run` owns and frees `arg`. Phase 0 runs before the
 * group's collectives, phase 1 after them. */
typedef commResult_t (*commGroupJobFn)(void* arg);
commResult_t commGroupDefer(commGroupJobFn run, void* arg, int phase);

/* src/core/plan.c: turn each communicator's tasks into plans (collectives in order, then one batch of
 * point-to-point operations) and establish the connections they need. lists[c] holds comms[c]'s tasks;
 * plans[c] gets an array of nPlans[c] plans. */
/* Bind the scratch buffer (sched.scratchElems elements at least; the communicator's, shared by its plans,
 * which run one after another) and reset the executor's progress. The plan owns its schedule. */
commResult_t commPlanPrepare(commPlan* plan, void* scratch);
void commPlanFree(commPlan* plan);
commResult_t commPlansBuildMulti(struct commComm** comms, commTask** lists, int nComms, commPlan*** plans, int* nPlans);

/* src/core/comm.c: API entry/exit bookkeeping. Enter fails with a WARN on a bad or dead comm. */
commResult_t commApiEnter(comm_t comm, const char* api);
/* The same, but an earlier asynchronous error of the communicator does not refuse the call (commShrink). */
commResult_t commApiEnterAfterError(comm_t comm, const char* api);
/* Like commApiEnter, but a revoked communicator (commRevoke) is taken: commSplit, and the calls that release
 * what a communicator gave out (commDeregister, commRedOpDestroy). commApiEnterAfterError takes one too. */
commResult_t commApiEnterRevoked(comm_t comm, const char* api);
void commApiLeave(comm_t comm);

/* src/core/comm.c, shared with comm_split.c: a config check (commInvalidArgument with a WARN), and calls
 * deferred to the group's end (their arguments copied; the config up to the caller's size). */
commResult_t commCheckConfig(const commConfig_t* config);
typedef struct {
  comm_t* newcomm;
  int nranks, rank;
  commUniqueId id;
  comm_t parent;
  int color, key;
  int hasConfig;
  commConfig_t config;
  int cudaDev; /* init: the CUDA device current in the caller's thread when it called (-1: none) */
} commDeferredCall;
commResult_t commDeferCall(const commDeferredCall* call, commGroupJobFn run, int phase);
void commDeferCopyConfig(commDeferredCall* call, const commConfig_t* config);
/* commInitRankConfig for the CUDA device cudaDev (-1: host ranks) instead of the one current in this thread:
 * for inits that run on threads other than the caller's (a group's end, commInitAll, a split's child). */
commResult_t commInitRankOnDevice(comm_t* newcomm, int nranks, commUniqueId commId, int rank, commConfig_t* config,
                                  int cudaDev);
/* On a thread of the library's that runs an init: make cudaDev (>= 0) current there, as it was in the caller's. */
void commInitBindWorkerThread(int cudaDev);

#endif
