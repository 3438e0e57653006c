/* Connections: one abstraction for every transport. A connection from rank A to rank B on a channel is a
 * FIFO of nSlots slots of slotBytes. The sender fills slot (step % nSlots), stores its size and advances
 * head; the receiver drains it and advances tail. The executor only waits on, fills and drains slots. */
#ifndef COMM_TRANSPORT_H_
#define COMM_TRANSPORT_H_

#include <stddef.h>
#include <stdint.h>
#include "comm.h"
#include "comm_net.h"

#define COMM_NSLOTS 8
#define COMM_CACHE_LINE 64

/* A side that closes its end of a FIFO both sides map (shm) says so in its own line (senderClosed after its
 * last head, receiverClosed), so the other side tells a peer that left in order (commDestroy) from one that is
 * still coming, and waits only for what the FIFO still holds. */
typedef struct {
  uint64_t head;         /* slots filled by the sender (written by the sender side) */
  uint64_t devSendPos;   /* a CUDA sender's own position (device connections whose FIFO is host memory) */
  uint32_t senderClosed; /* shm: the sender closed its end (after its last head) */
  char pad0[COMM_CACHE_LINE - 2 * sizeof(uint64_t) - sizeof(uint32_t)];
  uint64_t tail;           /* slots drained by the receiver (written by the receiver side) */
  uint64_t devRecvPos;     /* a CUDA receiver's own position (likewise) */
  uint32_t receiverClosed; /* shm: the receiver closed its end */
  char pad1[COMM_CACHE_LINE - 2 * sizeof(uint64_t) - sizeof(uint32_t)];
  uint64_t sizes[COMM_NSLOTS]; /* bytes in each slot, written before head moves */
  uint32_t devFailed;          /* net device connections: the proxy thread saw the connection fail */
  uint32_t localRefs;          /* shm in one process: the sides holding the FIFO (the last to close frees it) */
  char pad2[COMM_CACHE_LINE - 2 * sizeof(uint32_t)];
} commFifoCtrl;

struct commComm;
struct commTransport;
struct commDevConn;

typedef struct commConn {
  commFifoCtrl* ctrl; /* head/tail/sizes, where this side's executor sees them */
  char* slots;        /* nSlots * slotBytes */
  size_t slotBytes;
  int nSlots;
  uint64_t step; /* this side's position: sender: next slot to fill; receiver: next to drain */
  int peer;      /* the other rank */
  int channel;
  int isSend;
  int onDevice; /* a connection of the CUDA executor (device buffers) */
  const struct commTransport* transport;
  void* priv; /* transport state */
} commConn;

#define COMM_CONN_INFO_BYTES 256

/* Setup runs in three phases over the bootstrap, so that no side waits on one that is not listening:
 * recvSetup on the receiver (info -> sender), sendConnect on the sender (ack -> receiver), recvConnect on
 * the receiver. */
typedef struct commTransport {
  const char* name;
  commResult_t (*recvSetup)(struct commComm* comm, commConn* conn, void* info);
  commResult_t (*sendConnect)(struct commComm* comm, commConn* conn, const void* info, void* ack);
  commResult_t (*recvConnect)(struct commComm* comm, commConn* conn, const void* ack);
  /* Move data for this connection without blocking (network transports); NULL if nothing to do. */
  commResult_t (*progress)(struct commComm* comm, commConn* conn);
  /* commRemoteError with a WARN if the peer is known to be gone; called while a wait makes no progress. */
  commResult_t (*check)(struct commComm* comm, commConn* conn);
  commResult_t (*close)(struct commComm* comm, commConn* conn);
  /* A device connection (onDevice) as the CUDA kernel uses it (dev_conn.h); NULL: the transport
   * serves host buffers only. */
  commResult_t (*devConn)(const commConn* conn, struct commDevConn* out);

  /* Per communicator, beyond its connections (NULL: nothing to do). init at commInitRank after the peer
   * exchange (the net transport chooses its network plugin there when any connection may need it);
   * finalize at destroy, after every connection closed. */
  commResult_t (*init)(struct commComm* comm);
  commResult_t (*finalize)(struct commComm* comm);
  /* The host executor is leaving a finished operation: data still queued keeps moving (the net proxy). */
  void (*opDone)(struct commComm* comm);
  /* Device connections moved by a thread of the transport (net): the words a kernel using them sets while it
   * runs, as kernels address them, and the kick a launch of such a kernel gives the thread. */
  uint32_t* (*devBusyWords)(struct commComm* comm);
  void (*devLaunched)(struct commComm* comm);
} commTransport;

extern const commTransport commTransportShm;
extern const commTransport commTransportNet;
extern const commTransport commTransportP2p; /* transports/p2p/p2p.c: device FIFOs (builds with CUDA) */

enum { COMM_TRANSPORT_SHM = 0, COMM_TRANSPORT_NET = 1, COMM_TRANSPORT_P2P = 2, COMM_NUM_TRANSPORTS = 3 };

/* A connection the caller needs: on `channel`, to (isSend) or from `peer`; for host buffers (the host
 * executor's FIFOs) or device buffers (the CUDA executor's). The two kinds are separate connections in
 * separate tables (commChannel send/recv and devSend/devRecv). */
typedef struct {
  int channel;
  int peer;
  int isSend;
  int onDevice;
} commConnRequest;

/* transports/transport.c: establish every requested connection that does not exist yet (the peers
 * make the matching requests). Host buffers: shm within a host (unless COMM_SHM_DISABLE=1), net across
 * hosts. Device buffers: P2P within a host (shm, its FIFO in host memory both kernels map, with
 * COMM_P2P_DISABLE=1), net across hosts (each side's FIFO in mapped host memory, moved by the proxy
 * thread). Logs the choice at INFO. */
commResult_t commTransportConnect(struct commComm* comm, const commConnRequest* reqs, int nReqs);
/* The same for several communicators driven by this thread (a group): each phase runs for all of them
 * before the next, so ranks of one process never wait on each other. */
commResult_t commTransportConnectMulti(struct commComm** comms, const commConnRequest* const* reqs, const int* nReqs,
                                       int nComms);
/* Progress every network connection of comm (called from the executor's wait loops). */
commResult_t commTransportProgress(struct commComm* comm);
/* Only the sending side of every network connection: queued data keeps leaving; receives are progressed by
 * the steps that wait on them (an idle send connection costs nothing, a receive one a syscall). */
commResult_t commTransportProgressSends(struct commComm* comm);
commResult_t commTransportCloseAll(struct commComm* comm);

/* The transport layer's entry points for the layers above, each running the table operation of every
 * transport that has it: per-communicator init and finalize (core), an operation's end (host executor) and
 * a device launch that uses a transport's thread (CUDA executor). */
commResult_t commTransportInit(struct commComm* comm);
commResult_t commTransportFinalize(struct commComm* comm);
void commTransportOpDone(struct commComm* comm);
void commTransportDevLaunched(struct commComm* comm);

/* Inside the transport layer (transports/net/): the net transport's state of a communicator. */
struct commNetState;
/* Free comm->netConns under the net proxy's lock (after every connection was closed). */
void commNetReleaseConnList(struct commComm* comm);
/* Name of the network plugin comm uses ("Socket", ...), for log lines. */
const char* commNetName(const struct commComm* comm);
/* transports/net/net_plugin.c: dlopen a plugin library by name, as given, else (a name without '/')
 * libcomm-net-<name>.so, libnccl-net-<name>.so; NULL with the loader's reason in why. And the logger libcomm
 * hands to network (and collnet) plugins. */
void* commNetPluginOpen(const char* name, char* why, size_t whyLen);
void commNetPluginLogger(commNetLogLevel_t level, const char* file, int line, const char* fmt, ...);

/* transports/collnet/collnet.c: the collnet groups, made at init once the rings exist (every rank calls it;
 * members[c * nNodes + v] is node v's member on collnet channel c, for c < nChannels), and torn down at
 * destroy. Sets comm->collnet: on (nChannels > 0) or off with the reason, the same on every rank; a failure of
 * the groups is not an error of init (collnet is off, with a WARN), only a failure of the bootstrap is. */
commResult_t commCollNetSetup(struct commComm* comm, int nChannels, const int* members);
commResult_t commCollNetFree(struct commComm* comm);
/* Post and complete what the collnet groups can without waiting (the host executor, every round). */
commResult_t commCollNetProgressAll(struct commComm* comm);
/* A kernel that may use the device lanes was launched: their proxy thread stays awake (collnet_dev.c). */
void commCollNetDevLaunched(struct commComm* comm);
/* How many collnet channels init should form (COMM_COLLNET_NCHANNELS), 0 when collnet is not wanted
 * (COMM_COLLNET_ENABLE / NCCL_COLLNET_ENABLE unset, one node, one rank), with the reason in comm->collnet.why. */
int commCollNetWanted(struct commComm* comm);

/* transports/net/socket/: the built-in TCP network plugin. */
extern const commNet_t commNetSocket;

#endif
