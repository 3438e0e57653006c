/* Connection setup and teardown, independent of the transport.
 *
 * commTransportConnect runs three phases over the bootstrap, so that nobody waits on a peer that is not
 * listening yet:
 *   1. every receiver chooses the transport, runs recvSetup and sends the info to its sender;
 *   2. every sender receives the info, runs sendConnect and sends the ack back;
 *   3. every receiver receives the ack and runs recvConnect.
 * Bootstrap tags: COMM_TRANSPORT_TAG_BASE + channel * 8 + phase (phases 1 and 2 of host connections, 5 and 6
 * of device connections). Between ranks A and B, the messages of the
 * A->B connection (info B->A in phase 1, ack A->B in phase 2) and those of the B->A connection (info A->B
 * in phase 1, ack B->A in phase 2) differ in source or phase, so they can never be confused. */
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "check.h"
#include "communicator.h"
#include "debug.h"
#include "topo.h"
#include "transport.h"
#include "utils.h"

#define COMM_TRANSPORT_TAG_BASE 0x40000000
#define CONN_HDR_BYTES 8 /* transport id at the start of info and ack */

enum { PHASE_INFO = 1, PHASE_ACK = 2 };
static int connPhaseBase(const commConn* conn) { return conn->onDevice ? 4 : 0; }

#ifdef COMM_HAVE_CUDA
static const commTransport* const transports[COMM_NUM_TRANSPORTS] = {&commTransportShm, &commTransportNet,
                                                                     &commTransportP2p};
#else
static const commTransport* const transports[COMM_NUM_TRANSPORTS] = {&commTransportShm, &commTransportNet, NULL};
#endif

static int transportId(const commTransport* t) {
  for (int i = 0; i < COMM_NUM_TRANSPORTS; i++)
    if (transports[i] == t) return i;
  return -1;
}

static void putId(char* msg, int32_t id) { memcpy(msg, &id, sizeof(id)); }
static int32_t getId(const char* msg) {
  int32_t id;
  memcpy(&id, msg, sizeof(id));
  return id;
}

/* Phases 1 and 2 of host connections, 5 and 6 of device ones: distinct tags for every message between two
 * ranks on one channel. */
#define DEVICE_PHASES 4
static int connTag(int channel, int phase) { return COMM_TRANSPORT_TAG_BASE + channel * 8 + phase; }

static commConn** connSlot(struct commComm* comm, const commConnRequest* r) {
  commChannel* ch = &comm->channels[r->channel];
  commConn** arr = r->onDevice ? (r->isSend ? ch->devSend : ch->devRecv) : (r->isSend ? ch->send : ch->recv);
  return arr ? &arr[r->peer] : NULL;
}

static void connDestroy(struct commComm* comm, commConn** slot) {
  commConn* conn = *slot;
  if (!conn) return;
  if (conn->transport && conn->transport->close) conn->transport->close(comm, conn);
  free(conn);
  *slot = NULL;
}

/* Exchange with ourselves without the bootstrap (a ring of one, or a self connection). */
typedef struct {
  int used;
  int channel;
  char msg[COMM_CONN_INFO_BYTES];
} selfMsg;

static commResult_t exchangeSend(struct commComm* comm, int peer, int channel, int phase, const char* msg,
                                 selfMsg* self) {
  if (peer == comm->rank) {
    for (int i = 0; i < COMM_MAX_CHANNELS * 4; i++) {
      if (!self[i].used) {
        self[i].used = phase;
        self[i].channel = channel;
        memcpy(self[i].msg, msg, COMM_CONN_INFO_BYTES);
        return commSuccess;
      }
    }
    WARN("transport: too many self connections");
    return commInternalError;
  }
  return bootstrapSend(comm->bootstrap, peer, connTag(channel, phase), msg, COMM_CONN_INFO_BYTES);
}

static commResult_t exchangeRecv(struct commComm* comm, int peer, int channel, int phase, char* msg, selfMsg* self) {
  if (peer == comm->rank) {
    for (int i = 0; i < COMM_MAX_CHANNELS * 4; i++) {
      if (self[i].used == phase && self[i].channel == channel) {
        memcpy(msg, self[i].msg, COMM_CONN_INFO_BYTES);
        self[i].used = 0;
        return commSuccess;
      }
    }
    WARN("transport: channel %d: self connection without its other end", channel);
    return commInternalError;
  }
  return bootstrapRecv(comm->bootstrap, peer, connTag(channel, phase), msg, COMM_CONN_INFO_BYTES);
}

/* One INFO line per connection: the transport and the topology rule behind it. Where the topology would
 * have chosen differently (GPU pairs the P2P transport would serve), a WARN says what is used instead. */
static void logConn(struct commComm* comm, const commConn* conn, int id) {
  int from = conn->isSend ? comm->rank : conn->peer;
  int to = conn->isSend ? conn->peer : comm->rank;
  commTopoTransportChoice choice;
  const char* why = "";
  if (id == COMM_TRANSPORT_P2P) {
    INFO(COMM_INIT | COMM_P2P, "Channel %02d : rank %d -> rank %d via P2P (device buffers, GPU %d -> GPU %d)",
         conn->channel, from, to, comm->peers[from].cudaDev, comm->peers[to].cudaDev);
    return;
  }
  if (conn->onDevice) {
    INFO(COMM_INIT | COMM_NET, "Channel %02d : rank %d -> rank %d via %s (device buffers, %s)", conn->channel, from, to,
         id == COMM_TRANSPORT_SHM ? "SHM" : "NET",
         id == COMM_TRANSPORT_SHM ? "through pinned host memory both GPUs map, COMM_P2P_DISABLE=1"
                                  : "moved by the device proxy thread: GPUDirect RDMA or pinned host memory");
    return;
  }
  if (comm->topoRanks &&
      commTopoChooseTransport(comm->topo, comm->topoRanks, comm->nRanks, from, to, &choice) == commSuccess) {
    why = choice.why;
    if (choice.transport == COMM_TOPO_USE_P2P)
      INFO(COMM_INIT | COMM_SHM,
           "Channel %02d : rank %d -> rank %d: %s; host buffers go through %s (device "
           "buffers: P2P)",
           conn->channel, from, to, choice.why, id == COMM_TRANSPORT_SHM ? "SHM" : "NET");
    else if (choice.fallback) WARN("Channel %02d : rank %d -> rank %d: %s", conn->channel, from, to, choice.why);
    else if (id == COMM_TRANSPORT_NET && choice.transport == COMM_TOPO_USE_SHM) why = "same node, COMM_SHM_DISABLE set";
  }
  if (id == COMM_TRANSPORT_SHM) {
    INFO(COMM_INIT | COMM_SHM, "Channel %02d : rank %d -> rank %d via SHM (%s)", conn->channel, from, to, why);
  } else {
    INFO(COMM_INIT | COMM_NET, "Channel %02d : rank %d -> rank %d via NET(%s) (%s)", conn->channel, from, to,
         commNetName(comm), why);
  }
}

/* One communicator's share of a connect call. */
typedef struct {
  struct commComm* comm;
  const commConnRequest* reqs;
  int nReqs;
  commConn** made; /* per request: the conn this call created (NULL: nothing to do) */
  selfMsg* self;
} connectState;

/* Validate and create the missing conns, so that duplicate requests see them. */
static commResult_t connectPrepare(connectState* st) {
  struct commComm* comm = st->comm;
  COMMCHECK(commCalloc(&st->made, (size_t)st->nReqs, sizeof(commConn*)));
  int needSelf = 0;
  for (int i = 0; i < st->nReqs; i++) {
    const commConnRequest* r = &st->reqs[i];
    if (r->channel < 0 || r->channel >= COMM_MAX_CHANNELS || r->peer < 0 || r->peer >= comm->nRanks) {
      WARN("transport: invalid connection request (channel %d, peer %d of %d ranks)", r->channel, r->peer,
           comm->nRanks);
      return commInternalError;
    }
    commConn** slot = connSlot(comm, r);
    if (!slot) {
      WARN("transport: channel %d has no connection arrays", r->channel);
      return commInternalError;
    }
    if (*slot) continue;
    COMMCHECK(commCalloc(slot, 1, sizeof(commConn)));
    st->made[i] = *slot;
    st->made[i]->peer = r->peer;
    st->made[i]->channel = r->channel;
    st->made[i]->isSend = r->isSend ? 1 : 0;
    st->made[i]->onDevice = r->onDevice ? 1 : 0;
    if (r->peer == comm->rank) needSelf = 1;
  }
  if (needSelf) COMMCHECK(commCalloc(&st->self, COMM_MAX_CHANNELS * 4, sizeof(selfMsg)));
  return commSuccess;
}

/* Phase 1: receivers set up and publish their info. */
static commResult_t connectPhase1(connectState* st) {
  struct commComm* comm = st->comm;
  char msg[COMM_CONN_INFO_BYTES];
  for (int i = 0; i < st->nReqs; i++) {
    commConn* conn = st->made[i];
    if (!conn || conn->isSend) continue;
    int sameHost = comm->peers[conn->peer].hostHash == comm->peers[comm->rank].hostHash;
    int id = (sameHost && !comm->shmDisable) ? COMM_TRANSPORT_SHM : COMM_TRANSPORT_NET;
    if (conn->onDevice) /* P2P within a host; with COMM_P2P_DISABLE=1 the shm FIFO, and with COMM_SHM_DISABLE=1
                         * too (or across hosts) the network's */
      id = !sameHost || (comm->p2pDisable && comm->shmDisable) ? COMM_TRANSPORT_NET
           : comm->p2pDisable                                  ? COMM_TRANSPORT_SHM
                                                               : COMM_TRANSPORT_P2P;
    if (transports[id] == NULL) {
      WARN("transport: the %s transport is not in this build", id == COMM_TRANSPORT_P2P ? "P2P" : "requested");
      return commInvalidUsage;
    }
    conn->transport = transports[id];
    logConn(comm, conn, id);
    memset(msg, 0, sizeof(msg));
    putId(msg, id);
    COMMCHECK(conn->transport->recvSetup(comm, conn, msg + CONN_HDR_BYTES));
    COMMCHECK(exchangeSend(comm, conn->peer, conn->channel, PHASE_INFO + connPhaseBase(conn), msg, st->self));
  }
  return commSuccess;
}

/* Phase 2: senders connect and acknowledge. */
static commResult_t connectPhase2(connectState* st) {
  struct commComm* comm = st->comm;
  char msg[COMM_CONN_INFO_BYTES];
  for (int i = 0; i < st->nReqs; i++) {
    commConn* conn = st->made[i];
    if (!conn || !conn->isSend) continue;
    COMMCHECK(exchangeRecv(comm, conn->peer, conn->channel, PHASE_INFO + connPhaseBase(conn), msg, st->self));
    int32_t id = getId(msg);
    if (id < 0 || id >= COMM_NUM_TRANSPORTS || transports[id] == NULL) {
      WARN("transport: channel %d: rank %d sent an unknown transport id %d", conn->channel, conn->peer, (int)id);
      return commInternalError;
    }
    conn->transport = transports[id];
    logConn(comm, conn, id);
    char ack[COMM_CONN_INFO_BYTES];
    memset(ack, 0, sizeof(ack));
    putId(ack, id);
    COMMCHECK(conn->transport->sendConnect(comm, conn, msg + CONN_HDR_BYTES, ack + CONN_HDR_BYTES));
    COMMCHECK(exchangeSend(comm, conn->peer, conn->channel, PHASE_ACK + connPhaseBase(conn), ack, st->self));
  }
  return commSuccess;
}

/* Phase 3: receivers complete. */
static commResult_t connectPhase3(connectState* st) {
  struct commComm* comm = st->comm;
  char msg[COMM_CONN_INFO_BYTES];
  for (int i = 0; i < st->nReqs; i++) {
    commConn* conn = st->made[i];
    if (!conn || conn->isSend) continue;
    COMMCHECK(exchangeRecv(comm, conn->peer, conn->channel, PHASE_ACK + connPhaseBase(conn), msg, st->self));
    if (getId(msg) != (int32_t)transportId(conn->transport)) {
      WARN("transport: channel %d: rank %d acknowledged with another transport", conn->channel, conn->peer);
      return commInternalError;
    }
    COMMCHECK(conn->transport->recvConnect(comm, conn, msg + CONN_HDR_BYTES));
  }
  return commSuccess;
}

/* Remove every conn this call created (on failure); earlier connections stay usable. */
static void connectFinish(connectState* st, int failed) {
  if (failed && st->made) {
    for (int i = 0; i < st->nReqs; i++) {
      if (!st->made[i]) continue;
      commConn** slot = connSlot(st->comm, &st->reqs[i]);
      if (slot && *slot == st->made[i]) connDestroy(st->comm, slot);
    }
  }
  free(st->self);
  free(st->made);
  st->self = NULL;
  st->made = NULL;
}

commResult_t commTransportConnectMulti(struct commComm** comms, const commConnRequest* const* reqs, const int* nReqs,
                                       int nComms) {
  commResult_t res = commSuccess;
  connectState* st = NULL;
  COMMCHECK(commCalloc(&st, (size_t)nComms, sizeof(*st)));
  for (int c = 0; c < nComms; c++) st[c] = (connectState){comms[c], reqs[c], nReqs[c], NULL, NULL};
  commResult_t (*const phases[])(connectState*) = {connectPrepare, connectPhase1, connectPhase2, connectPhase3};
  /* Each phase for every communicator before the next phase: ranks driven by this one thread never wait on
   * each other. */
  for (size_t p = 0; p < sizeof(phases) / sizeof(phases[0]) && res == commSuccess; p++) {
    for (int c = 0; c < nComms && res == commSuccess; c++) {
      if (st[c].nReqs <= 0) continue;
      commLogSetRank(st[c].comm->rank);
      res = phases[p](&st[c]);
    }
  }
  for (int c = 0; c < nComms; c++) connectFinish(&st[c], res != commSuccess);
  free(st);
  return res;
}

commResult_t commTransportConnect(struct commComm* comm, const commConnRequest* reqs, int nReqs) {
  return commTransportConnectMulti(&comm, &reqs, &nReqs, 1);
}

static commResult_t progressConns(struct commComm* comm, int sendsOnly) {
  commResult_t first = commSuccess;
  int n = comm->nNetConns;
  for (int i = 0; i < n; i++) {
    commConn* conn = comm->netConns[i];
    if (sendsOnly && !conn->isSend) continue;
    commResult_t res = conn->transport->progress(comm, conn);
    if (res != commSuccess && first == commSuccess) first = res;
  }
  return first;
}

commResult_t commTransportProgress(struct commComm* comm) { return progressConns(comm, 0); }
commResult_t commTransportProgressSends(struct commComm* comm) { return progressConns(comm, 1); }

/* Every byte this rank's operations handed to a network send connection leaves before the connection closes:
 * a peer that is slower than this rank still needs it (commDestroy without commFinalize has no barrier, so the
 * peer may come to its part of the last operation much later). The wait ends when every send connection is
 * drained, when the communicator is aborted, when a connection failed (check: the peer is gone, its data cannot
 * leave any more), or when nothing moved for comm->timeoutMs; not at a fixed time (a cap of 5 s would drop
 * what the kernel's socket buffers cannot hold for a peer that comes to its part later than that). */
static void drainSends(struct commComm* comm) {
  if (commAborted(comm) == COMM_ABORT_USER || comm->nNetConns == 0) return;
  /* After a failure (this rank's or one another rank reported) peers still in an earlier collective may need
   * what is queued (a failure travels while they finish it); a peer that takes nothing for a short while is
   * failing too. */
  int failed = commAborted(comm) || __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE) != commSuccess;
  int64_t quietMs = failed && (comm->timeoutMs < 0 || comm->timeoutMs > 2000) ? 2000 : comm->timeoutMs;
  int64_t deadline = commDeadlineNs(quietMs);
  uint64_t lastLeft = UINT64_MAX;
  commBackoff bo = {0};
  char* dead = calloc((size_t)comm->nNetConns, 1); /* connections check found failed (reported once) */
  for (;;) {
    uint64_t left = 0; /* slots still queued, over every connection that can still move them */
    const commConn* waitOn = NULL;
    for (int i = 0; i < comm->nNetConns; i++) {
      commConn* conn = comm->netConns[i];
      if (!conn->isSend || !conn->ctrl || (dead && dead[i])) continue;
      uint64_t head = COMM_LOAD_ACQ(&conn->ctrl->head), tail = COMM_LOAD_ACQ(&conn->ctrl->tail);
      if (tail >= head) continue;
      if (conn->transport->progress(comm, conn) != commSuccess ||
          (conn->transport->check && conn->transport->check(comm, conn) != commSuccess)) {
        if (dead) dead[i] = 1; /* failed: check said why (WARN); nothing more can leave */
        continue;
      }
      head = COMM_LOAD_ACQ(&conn->ctrl->head);
      tail = COMM_LOAD_ACQ(&conn->ctrl->tail);
      if (tail < head) {
        left += head - tail;
        waitOn = conn;
      }
    }
    if (left == 0 || commAborted(comm) == COMM_ABORT_USER) break;
    if (left != lastLeft) { /* progress: the timeout counts from here */
      lastLeft = left;
      deadline = commDeadlineNs(quietMs);
      commBackoffReset(&bo);
    } else if (quietMs >= 0 && commTimeNs() > deadline) {
      WARN("rank %d: commDestroy: %llu queued network send slot(s) could not leave in %lld ms (%s); rank %d "
           "(channel %d) has not taken them",
           comm->rank, (unsigned long long)left, (long long)quietMs, failed ? "after a failure" : "COMM_TIMEOUT_MS",
           waitOn->peer, waitOn->channel);
      break;
    }
    commBackoffWait(&bo);
  }
  free(dead);
}

commResult_t commTransportInit(struct commComm* comm) {
  for (int t = 0; t < COMM_NUM_TRANSPORTS; t++)
    if (transports[t] && transports[t]->init) COMMCHECK(transports[t]->init(comm));
  return commSuccess;
}

commResult_t commTransportFinalize(struct commComm* comm) {
  commResult_t first = commSuccess;
  for (int t = 0; t < COMM_NUM_TRANSPORTS; t++) {
    if (!transports[t] || !transports[t]->finalize) continue;
    commResult_t res = transports[t]->finalize(comm);
    if (first == commSuccess) first = res;
  }
  return first;
}

void commTransportOpDone(struct commComm* comm) {
  for (int t = 0; t < COMM_NUM_TRANSPORTS; t++)
    if (transports[t] && transports[t]->opDone) transports[t]->opDone(comm);
}

void commTransportDevLaunched(struct commComm* comm) {
  for (int t = 0; t < COMM_NUM_TRANSPORTS; t++)
    if (transports[t] && transports[t]->devLaunched) transports[t]->devLaunched(comm);
  commCollNetDevLaunched(comm);
}

commResult_t commTransportCloseAll(struct commComm* comm) {
  drainSends(comm);
  commCollNetFree(comm);
  for (int c = 0; c < COMM_MAX_CHANNELS; c++) {
    commChannel* ch = &comm->channels[c];
    for (int p = 0; p < comm->nRanks; p++) {
      if (ch->send) connDestroy(comm, &ch->send[p]);
      if (ch->recv) connDestroy(comm, &ch->recv[p]);
      if (ch->devSend) connDestroy(comm, &ch->devSend[p]);
      if (ch->devRecv) connDestroy(comm, &ch->devRecv[p]);
    }
  }
  commNetReleaseConnList(comm);
  return commSuccess;
}
