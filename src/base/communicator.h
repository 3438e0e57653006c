/* The communicator record: what every layer reads of a communicator (identity, settings fixed at init,
 * the channels' connection tables, the abort flag and the error word). Plain data: core/ fills it at init
 * and frees it; each layer keeps its own state behind an opaque pointer (net, tuner, topo, dev), so this
 * header names no type above the ground layer. Internal: never exposed through include/. */
#ifndef COMM_COMMUNICATOR_H_
#define COMM_COMMUNICATOR_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "comm.h"
#include "datatype.h"
#include "comm_limits.h"

typedef struct commConn commConn;           /* transports/transport.h */
typedef struct commBootstrap commBootstrap; /* src/bootstrap/bootstrap.h */

/* What each rank tells the others at init. */
typedef struct {
  int rank;
  int pid;
  int cudaDev;        /* -1: host-only rank */
  int topoDevType;    /* the rank's device in its topology host: a commTopoNodeType (GPU, or CPU for host */
  int topoDevIndex;   /* ranks) and its index among the host's nodes of that type; -1 when unknown */
  int topoError;      /* commResult_t of loading the topology (COMM_TOPO_FILE) on that rank */
  int nCores;         /* online CPUs of its host */
  uint64_t hostHash;  /* ranks with the same hostHash form a node */
  uint64_t netIfHash; /* the network interface this rank uses (name and address); 0 if none */
  int64_t busId;      /* PCI bus id of the GPU, -1 if none */
  char hostname[COMM_HOSTNAME_MAX];
} commPeerInfo;

typedef struct {
  int id;
  int* ringRanks; /* nRanks: the rank at each ring position */
  int ringPrev, ringNext;
  commConn** send;    /* [nRanks], NULL until connected */
  commConn** recv;    /* [nRanks] */
  commConn** devSend; /* [nRanks]: device-buffer connections (CUDA executor), NULL until connected */
  commConn** devRecv; /* [nRanks] */
  /* At a member of the channel's collnet group (transports/collnet/): the FIFOs to and from the network's
   * reduction (schedule peer COMM_PEER_COLLNET); NULL elsewhere. */
  commConn* collnetSend;
  commConn* collnetRecv;
  commConn* collnetDevSend; /* the same for device buffers (the CUDA kernel's), when collnet.devOn */
  commConn* collnetDevRecv;
} commChannel;

/* What the collnet transport decided at init, the same on every rank (transports/collnet/collnet.c). */
typedef struct {
  int nChannels;                   /* channels with a collnet group (0: collnet is off) */
  int devOn;                       /* device buffers have groups of their own too (GPU-bound ranks) */
  double latencyUs;                /* one network reduction, as the plugin says (the most any rank's says) */
  uint8_t opsOfType[commNumTypes]; /* bit op (commSum..commMin): every member's network reduces type with op */
  uint8_t allGather;               /* every member's plugin offers iallgather ... */
  uint8_t reduceScatter;           /* ... ireducescatter */
  uint8_t uniformNodes;            /* every node has as many ranks (the network's gather and scatter need it) */
  size_t maxCollBytes;             /* the largest network operation every member's plugin takes */
  char plugin[64];                 /* the plugin's name, for logs */
  char why[320];                   /* collnet off: why (COMM_COLLNET_ENABLE unset, one node, a member failed ...) */
} commCollNetInfo;

typedef struct {
  int inUse;
  commRedOpArgs args;
  const void* scalarPtr; /* commScalarDevice: read at each collective; NULL: scalar captured in args */
  int scalarOnDevice;    /* scalarPtr is device memory: the CUDA executor's kernel reads it */
} commUserRedOp;

#define COMM_MAX_USER_REDOPS 256

typedef enum { COMM_INIT_NONE = 0, COMM_INIT_RUNNING, COMM_INIT_DONE, COMM_INIT_FAILED } commInitState_t;

typedef struct commComm commComm;

struct commComm {
  uint64_t magic; /* COMM_MAGIC_ALIVE while usable */
  int rank, nRanks;
  int cudaDev;
  int localRank, localRanks; /* among ranks of the same host */
  int oversubscribed;        /* more ranks on this host than cores: waits yield at once */
  int minCores;              /* fewest online CPUs of any rank's host: defaults that shape schedules (channel
                              * count, the tuner's cores per node) must be the same on every rank */
  int node, nNodes;
  int* rankNode; /* [nRanks]: node index of each rank, nodes numbered in order of their first rank */
  char name[64];
  char netName[32]; /* commConfig_t.netName: the built-in network to use ("IB", "Socket"); "" automatic */
  uint64_t commHash;
  commPeerInfo* peers; /* [nRanks] */
  commBootstrap* bootstrap;

  /* Settings fixed at init. */
  int blocking;
  int64_t timeoutMs; /* every wait gives up after this long without progress (<0: never) */
  size_t slotBytes;  /* FIFO slot size of every connection */
  int nSlots;
  int shmDisable;
  int p2pDisable;         /* COMM_P2P_DISABLE=1: device buffers within a host go through shm (host memory) */
  size_t oneShotMaxBytes; /* allreduce of at most this many bytes runs one-shot (0: never) */
  int devMaxChannels;     /* device plans: most channels per collective (0: not computed yet) */

  /* Channels and connections. */
  int nChannels;
  commChannel channels[COMM_MAX_CHANNELS];
  commConn** netConns; /* connections whose transport needs progress */
  int nNetConns, netConnsCap;
  struct commNetState* net;
  struct commCollNetState* collnetState; /* transports/collnet: the plugin and the groups, NULL when off */
  commCollNetInfo collnet;
  struct commTuner* tuner;         /* src/tune: algorithm choice per call */
  struct commTopo* topo;           /* src/topo: this machine (discovered) or COMM_TOPO_FILE's machines */
  struct commTopoRankT* topoRanks; /* [nRanks] (commTopoRank): host and device of each rank in topo; host
                                    * -1 for ranks of nodes the topology does not describe */
  uint16_t* ringPos;               /* [nRanks][COMM_MAX_CHANNELS]: position of each rank in its node's part of each
                            * channel's ring (topology order); NULL: rank order */
  struct commDevState* dev;        /* the CUDA executor's state (src/exec/cuda/exec_dev.c), made on first use */
  void* scratch;                   /* staging space of the schedules, shared by this comm's plans (they run in turn) */
  size_t scratchBytes;

  /* Reduction operators made by commRedOpCreatePreMulSum: op value = commNumOps + index. */
  commUserRedOp userOps[COMM_MAX_USER_REDOPS];

  /* State. abortFlag, inFlight, asyncError and failedPeer are accessed with atomics. */
  int abortFlag;      /* COMM_ABORT_*: 0 while usable */
  int bootstrapAbort; /* 1 on commAbort: the bootstrap's waits end (not on a peer's failure: commShrink) */
  int failedPeer;     /* the first peer a layer found dead or broken (commNotePeerFailure); -1: none */
  int inFlight;       /* API calls currently inside the communicator */
  int asyncError;     /* commResult_t */
  int initState;      /* commInitState_t */
  int finalized;
  int revoked; /* commRevoke (atomic): operations end (abortFlag COMM_ABORT_USER); shrink, split, destroy remain */
  pthread_t initThread;
  uint64_t opCount;   /* operations issued (collectives, point-to-point batches, splits), for log lines */
  uint64_t collCount; /* collectives issued: the sequence number every rank's signature of one carries (atomic:
                       * the bootstrap's listener thread reads it to answer probes) */
  /* errorLock guards lastError, closing and the peer failure: set once, when another rank reported a failure
   * or this rank found one (who failed, who found it, the result and the reason), the cause every later
   * error message of this communicator names (src/core/comm_error.c). */
  pthread_mutex_t errorLock;
  int closing; /* freeComm started: the bootstrap's thread no longer touches the executors */
  int peerFailureKnown;
  int peerFailureForwarded; /* this rank passed the notice on (commErrorForward) */
  int peerFailureRank;      /* the rank that failed (-1 unknown) */
  int peerFailureReporter;  /* the rank that found it */
  int peerFailureResult;    /* commResult_t */
  uint64_t peerFailureSeq;  /* operations numbered below it may still complete (commBootstrapFailure.opSeq) */
  uint64_t failingSeq;      /* this rank: the collective sequence number of its operation that failed (0: not a
                            * collective, or not an operation) */
  uint64_t failingColl;     /* this rank: 1 + the sequence number of its collective that failed (0: none: send/recv,
                            * or not an operation); a timeout's culprit search asks who never called it */
  char peerFailureReason[256];
  char lastError[256]; /* the root cause of the first failure (errorLock) */

  /* commSplit children keep a pointer to the config they were made with. */
  struct commComm* parent;
};

/* abortFlag values. A wait gives up when it reads a non-zero value (after a peer's failure the host executor
 * still lets the collectives numbered before the failed one finish: peerFailureSeq). */
#define COMM_ABORT_NONE 0
#define COMM_ABORT_USER 1        /* commAbort */
#define COMM_ABORT_PEER_FAILED 2 /* a rank of the communicator failed (peerFailure* says which and why) */

static inline int commAborted(const struct commComm* comm) {
  return __atomic_load_n(&comm->abortFlag, __ATOMIC_ACQUIRE);
}

/* A layer that finds peer `rank` dead or broken records it (the first one found wins), so that the core can
 * tell every rank who failed rather than who noticed. */
static inline void commNotePeerFailure(struct commComm* comm, int rank) {
  int expected = -1;
  if (rank < 0) return; /* not a rank (the collnet group): no culprit to name */
  __atomic_compare_exchange_n(&comm->failedPeer, &expected, rank, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

#endif
