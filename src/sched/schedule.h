/* The schedule IR: the ordered primitive steps one rank runs on each channel. Algorithms emit schedules;
 * executors run them; the verifier runs them symbolically across all ranks. */
#ifndef COMM_SCHED_H_
#define COMM_SCHED_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "comm.h"
#include "comm_limits.h"
#include "op_sig.h"

/* commFunc_t, the collectives, is defined with the slot signature that names them (src/base/op_sig.h). */
const char* commFuncName(commFunc_t f);
/* The bytes an operation moves as the tuner prices it: count elements, times nRanks for allgather,
 * reducescatter and alltoall (whose count is per rank). The one place this is computed. */
size_t commFuncBytes(commFunc_t f, size_t count, size_t eltSize, int nRanks);

typedef enum {
  COMM_PRIM_NOP = 0,
  COMM_PRIM_SEND,                  /* send src to sendPeer */
  COMM_PRIM_RECV,                  /* recv from recvPeer into dst */
  COMM_PRIM_RECV_REDUCE_SEND,      /* send (recv op src) */
  COMM_PRIM_RECV_COPY_SEND,        /* dst = recv; send recv */
  COMM_PRIM_RECV_REDUCE_COPY,      /* dst = recv op src */
  COMM_PRIM_RECV_REDUCE_COPY_SEND, /* dst = recv op src; send dst */
  COMM_PRIM_COPY_SEND,             /* dst = src; send src */
  COMM_PRIM_COPY,                  /* dst = src (local) */
  COMM_PRIM_SEND_RECV,             /* send src[count] to sendPeer while receiving dst[recvCount] from recvPeer */
  COMM_PRIM_REDUCE,                /* dst = dst op src (local; PRE applies to src) */
  COMM_NUM_PRIMS
} commPrim_t;
const char* commPrimName(commPrim_t p);

/* Step flags */
#define COMM_STEP_PRE 0x1  /* src is this rank's own contribution to a reduction: apply the op's pre-multiplier */
#define COMM_STEP_POST 0x2 /* the value computed here is final: apply the op's post-operation (avg division) */
/* SEND_RECV may carry PRE (its send side sends this rank's own contribution); never POST. */

/* Buffers of a schedule: index into the plan's buffer table. */
enum { COMM_BUF_INPUT = 0, COMM_BUF_OUTPUT = 1, COMM_BUF_SCRATCH = 2, COMM_BUF_USER0 = 3 };
#define COMM_MAX_SCHED_BUFS 4096

typedef struct {
  uint32_t buf;  /* COMM_BUF_* or COMM_BUF_USER0 + i */
  size_t offset; /* in elements */
} commBufRef;

/* The virtual peer of a channel's collnet group (commAlgoCollNet): the network reduces, one member per node.
 * A step that sends to it (sendPeer == COMM_PEER_COLLNET) contributes its data, piece by piece, to the group's
 * reductions on this channel; a step that receives from it takes the results in the same order. On each
 * channel the k-th piece every member sends is reduced with the others' k-th pieces (they must have the same
 * size), and every member's k-th received piece is that reduction: the union of the members' contributions,
 * the same on each. A member may have at most a FIFO's worth of pieces (nSlots) posted and not yet received.
 * The group of a channel is the ranks whose schedule names the peer there. (COMM_PEER_COLLNET is defined in
 * comm_limits.h: the transports, below this layer, name it too.) */

typedef struct {
  uint8_t prim;     /* commPrim_t */
  uint8_t flags;    /* COMM_STEP_* */
  int32_t sendPeer; /* rank, COMM_PEER_COLLNET, or -1 */
  int32_t recvPeer; /* rank, COMM_PEER_COLLNET, or -1 */
  commBufRef src;
  commBufRef dst;
  size_t count;     /* elements sent / processed */
  size_t recvCount; /* elements received (== count except for SEND_RECV) */
} commStep;

typedef struct {
  int nSteps;
  int capacity;
  commStep* steps;
} commChannelSched;

typedef struct {
  int nChannels;
  commChannelSched channels[COMM_MAX_CHANNELS];
  int nBufs;           /* buffers referenced (>= 2) */
  size_t scratchElems; /* elements of scratch needed */
} commSchedule;

/* A step, every field given (the generators' one constructor). */
static inline commStep commStepMake(commPrim_t prim, int flags, int sendPeer, int recvPeer, commBufRef src,
                                    commBufRef dst, size_t count, size_t recvCount) {
  commStep st;
  memset(&st, 0, sizeof(st));
  st.prim = (uint8_t)prim;
  st.flags = (uint8_t)flags;
  st.sendPeer = sendPeer;
  st.recvPeer = recvPeer;
  st.src = src;
  st.dst = dst;
  st.count = count;
  st.recvCount = recvCount;
  return st;
}
static inline commBufRef commBufAt(uint32_t buf, size_t offset) {
  commBufRef r = {buf, offset};
  return r;
}

commResult_t commSchedInit(commSchedule* s, int nChannels);

/* Splitting a buffer into parts (channels, slices, chunks) so that every part begins on a multiple of
 * `unit` elements: 16 bytes, so that the parts of a 16-byte aligned buffer stay aligned and the CUDA
 * executor moves them with 16-byte vectors (a part at an odd offset drops to element-wise loads, several
 * times slower). commSplitUnit: the unit for eltSize, or 1 when parts of at most maxPart elements could not
 * honour it (maxPart < 2 units). commSplitPart: part idx of `parts` over `total` elements, whole units
 * balanced over the parts (the last unit partial when unit does not divide total; parts past the end
 * empty). commSplitParts: the fewest parts that hold at most maxUnits units each (0 for total 0). With
 * unit 1 these are the plain balanced split: part idx has total/parts elements, one more for the first
 * total%parts parts. */
size_t commSplitUnit(size_t eltSize, size_t maxPart);
void commSplitPart(size_t total, size_t parts, size_t idx, size_t unit, size_t* off, size_t* len);
size_t commSplitParts(size_t total, size_t unit, size_t maxUnits);
commResult_t commSchedAdd(commSchedule* s, int channel, const commStep* step);
/* Adds the step (prim, flags, peers, src, dst, count = recvCount) unless count is 0 (both ends of a transfer skip
 * it), and declares the scratch it touches (nBufs, scratchElems). */
commResult_t commSchedEmit(commSchedule* s, int channel, commPrim_t prim, int flags, int recvPeer, int sendPeer,
                           commBufRef src, commBufRef dst, size_t count);
void commSchedFree(commSchedule* s);
/* Human-readable dump (TRACE and tools). */
void commSchedPrint(const commSchedule* s, int rank, void* file /* FILE* */);

/* What every algorithm generator is given. Same values on every rank except `rank`. */
typedef struct {
  commFunc_t func;
  int rank, nRanks;
  size_t count;    /* the API count (per-rank count for allgather/reducescatter/alltoall) */
  size_t eltSize;  /* bytes per element */
  int root;        /* broadcast/reduce */
  int isReduction; /* op is a reduction that needs PRE/POST flags */
  int nChannels;
  size_t chunkElems; /* most elements one send may carry before the receiver must drain (FIFO capacity) */
  /* Ring order per channel: ringRanks[c][i] is the rank at position i of channel c's ring (NULL: 0..n-1). */
  const int* ringRanks[COMM_MAX_CHANNELS];
  /* Nodes (hosts): nodeOf[r] in 0..nNodes-1 is rank r's node. nodeOf NULL: every rank is a node of its
   * own (nNodes == nRanks). Ranks of a node need not be contiguous. */
  int nNodes;
  const int* nodeOf;
  int proto;         /* commProto_t the schedule is built for (the host executor runs all the same way) */
  int interCollNet;  /* CollTree: the reduction between nodes is the network's (COMM_PEER_COLLNET, commAlgoCollNet) */
  size_t pieceElems; /* most elements one FIFO slot (and, for collnet, one network operation) carries; 0: unknown.
                        commAlgoCollNet's allgather/reducescatter fit each network operation in one slot */
} commCollArgs;

/* Protocols: how a connection moves data. LL (low latency) favours small messages: small steps, data and
 * flag together (the CUDA executor will use 8-byte flag+data stores). Simple favours bandwidth: big
 * steps, a flag per step. The host executor runs both through the same FIFOs; the tuner prices them
 * differently and the schedule's step size follows the protocol. */
typedef enum { commProtoLL = 0, commProtoSimple = 1, commNumProtos } commProto_t;
const char* commProtoName(int proto);

/* Algorithms: schedule generators (algorithms/algorithms.h). Not every algorithm supports every collective. */
typedef enum {
  commAlgoRing = 0,
  commAlgoTree,     /* double binary tree allreduce; single-tree reduce and broadcast */
  commAlgoCollTree, /* hierarchical: intra-node reduce, inter-node tree among per-channel leaders, bcast */
  commAlgoPat,      /* Bruck-style logarithmic allgather and reducescatter */
  commAlgoOneShot,  /* small-message allreduce: all-to-all exchange, local reduction */
  commAlgoPairwise, /* alltoall (and grouped send/recv) */
  commAlgoCollNet,  /* CollTree with the reduction between nodes done by the network (COMM_PEER_COLLNET) */
  commNumAlgos
} commAlgo_t;
const char* commAlgoName(int algo);

/* Point-to-point operations of one rank in a group, for the send/recv batch schedule. */
typedef struct {
  int peer;
  int isSend;
  size_t count; /* elements */
  uint32_t buf; /* buffer index in the plan (COMM_BUF_USER0 + i) */
} commP2pOp;

/* One-shot allreduce sends (n-1) copies of the data from each rank: only for small communicators. The
 * CUDA executor's one-shot fold sizes its per-peer state by this bound. */
#define COMM_ONESHOT_MAX_RANKS 16

typedef commResult_t (*commSchedBuilder_t)(const commCollArgs* args, commSchedule* out);
/* A grouped send/recv schedule generator (algorithms/p2p.c's commP2pBuild). */
typedef commResult_t (*commP2pBuilder_t)(int rank, int nRanks, const commP2pOp* ops, int nOps, commSchedule* out);

/* What the verifier counted (for the cost model and tools). */
typedef struct {
  size_t maxStepsPerChannel; /* longest step list of any rank/channel */
  size_t maxBytesSent;       /* most bytes any rank sends */
  size_t totalBytesSent;     /* summed over ranks */
} commVerifyStats;

/* src/sched/verify.c: build the schedules of all ranks with `build` and run them symbolically, with FIFOs
 * of `fifoElems` elements per (channel, sender, receiver) connection, moved in pieces of at most
 * `pieceElems` (the executor's slot). Checks send/recv matching (peer, count), deadlock freedom, that every
 * output element holds exactly the right contributions (each rank's input once, nothing else) and that no
 * step reads or writes outside its buffer. Returns commSuccess, or commInternalError with a WARN naming
 * the rank, channel and step. stats may be NULL. */
commResult_t commVerifyColl(const commCollArgs* args, commSchedBuilder_t build, size_t fifoElems, size_t pieceElems,
                            commVerifyStats* stats);
/* src/sched/verify.c: the same for grouped send/recv. ops[r][0..nOps[r]) are rank r's operations (each on
 * its own user buffer); the schedules come from `build`; the i-th recv of rank r from p must end up
 * holding exactly the data of the i-th send of p to r. */
commResult_t commVerifyP2p(int nRanks, const commP2pOp* const* ops, const int* nOps, commP2pBuilder_t build,
                           size_t fifoElems, size_t pieceElems, commVerifyStats* stats);

#endif
