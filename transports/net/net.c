/* The "net" transport: connections over any network plugin (include/comm_net.h).
 *
 * Each side keeps its FIFO in local memory. On the sender, progress() posts an isend for every slot the
 * executor filled (head) and, as sends complete in order, advances tail so the slot can be reused. On the
 * receiver, progress() keeps an irecv posted on every free slot and, as receives complete in order,
 * stores the size and advances head. progress() is called from the executor's wait loops.
 *
 * The executor stops calling progress() once its collective is done, yet its last slots may not have
 * left: a peer would then wait until this rank's next collective. So each comm with network connections
 * also has a proxy thread that moves filled send slots while the executor is away. It sleeps on a
 * condition variable until the executor, finishing a collective, finds sends still pending and calls
 * commNetKickProxy(); it then polls every NET_PROXY_BUSY_US until they have left, staying out of the way
 * while the executor is calling progress(). A per-connection try-lock makes the two callers exclusive.
 * (A proxy that polled all the time cost 2-4 us per 8-byte allreduce on 2 cores: its timer wake-ups
 * preempt the ranks.)
 *
 * Device-buffer connections (conn->onDevice) keep the same FIFO, the CUDA kernel fills and drains it, and a
 * proxy thread of their own moves it (transports/net/net_dev.c). Which network a communicator uses (a plugin
 * library, IB or Socket) and its per-communicator state: transports/net/net_plugin.c. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "comm_net.h"
#include "communicator.h"
#include "topo.h"
#include "debug.h"
#include "nccl/net_nccl.h"
#include "param.h"
#include "transport.h"
#include "utils.h"
#include "net_internal.h"

#define NET_PAGE 4096
#define NET_PROXY_BUSY_US 20

/* ---------------------------------------------------------------- connections */

/* The network device this rank uses on a channel: the plugin device named like the topology's NIC for the
 * rank on that channel (commTopoRankNic: nearest its device, ranks of one device spread over equal NICs,
 * a rank alone turning through them by channel); a NIC the plugin does not offer (COMM_SOCKET_IFNAME
 * narrowed the list, or the topology came from a file) falls back to device 0, the interface bootstrap
 * reached every rank through. The receiving side's device is the one that counts: its address is what
 * the sender connects to. */
static int netDevice(struct commComm* comm, int channel) {
  struct commNetState* st = comm->net;
  if (st->nDevs <= 1) return 0;
  int nic = comm->topo && comm->topoRanks
                ? commTopoRankNic(comm->topo, comm->topoRanks, comm->nRanks, comm->rank, channel)
                : -1;
  if (nic >= 0) {
    const commTopoNode* nd = &comm->topo->nodes[nic];
    for (int d = 0; d < st->nDevs; d++)
      if (strcmp(st->devName[d], nd->name) == 0 || strcmp(st->devName[d], nd->u.nic.netdev) == 0) return d;
  }
  return 0;
}

static void* netProxyMain(void* arg);

int netFailed(const netPriv* p) { return __atomic_load_n(&p->failed, __ATOMIC_RELAXED); }
static void netSetFailed(netPriv* p) { __atomic_store_n(&p->failed, 1, __ATOMIC_RELAXED); }

commResult_t netListAdd(struct commNetState* st, commConn*** list, int* n, int* cap, commConn* conn) {
  commResult_t res = commSuccess;
  pthread_mutex_lock(&st->listLock);
  if (*n == *cap) {
    int c = *cap ? 2 * *cap : 16;
    res = commRealloc(list, (size_t)*cap, (size_t)c, sizeof(commConn*));
    if (res == commSuccess) *cap = c;
  }
  if (res == commSuccess) (*list)[(*n)++] = conn;
  pthread_mutex_unlock(&st->listLock);
  return res;
}

void netListRemove(struct commNetState* st, commConn** list, int* n, commConn* conn) {
  if (st) pthread_mutex_lock(&st->listLock);
  for (int i = 0; i < *n; i++) {
    if (list[i] == conn) {
      list[i] = list[--*n];
      list[*n] = NULL;
      break;
    }
  }
  if (st) pthread_mutex_unlock(&st->listLock);
}

void netBindProxy(struct commComm* comm, const char* what) {
  if (comm->topo == NULL || comm->topoRanks == NULL) return;
  int nic = commTopoRankNic(comm->topo, comm->topoRanks, comm->nRanks, comm->rank, 0);
  commTopoBindThread(comm->topo, nic >= 0 ? nic : comm->topoRanks[comm->rank].dev, what);
}

static commResult_t netRegister(struct commComm* comm, commConn* conn) {
  if (conn->onDevice) return netDevRegister(comm, conn);
  struct commNetState* st = comm->net;
  commResult_t res = netListAdd(st, &comm->netConns, &comm->nNetConns, &comm->netConnsCap, conn);
  if (res != commSuccess || st->proxyStarted) return res;
  int err = pthread_create(&st->proxy, NULL, netProxyMain, st);
  if (err) {
    WARN("NET : cannot start the network proxy thread: %s", strerror(err));
    return commSystemError;
  }
  st->proxyStarted = 1;
  return commSuccess;
}

/* Free the (by now empty) list of network connections, under the lock the proxy thread reads it with. */
void commNetReleaseConnList(struct commComm* comm) {
  struct commNetState* st = comm->net;
  if (st) pthread_mutex_lock(&st->listLock);
  free(comm->netConns);
  comm->netConns = NULL;
  comm->nNetConns = 0;
  comm->netConnsCap = 0;
  if (st) pthread_mutex_unlock(&st->listLock);
}


static commResult_t netSetup(struct commComm* comm, commConn* conn) {
  if (!comm->net || !comm->net->net) {
    WARN("NET : network transport used before commNetInit");
    return commInternalError;
  }
  if (comm->nSlots < 1 || comm->nSlots > COMM_NSLOTS || comm->slotBytes == 0) {
    WARN("NET : invalid FIFO geometry (%d slots of %zu bytes)", comm->nSlots, comm->slotBytes);
    return commInternalError;
  }
  netPriv* p;
  COMMCHECK(commCalloc(&p, 1, sizeof(*p)));
  p->net = comm->net->net;
  p->dev = netDevice(comm, conn->channel);
  conn->priv = p;
  size_t ctrlBytes = COMM_ALIGN_UP(sizeof(commFifoCtrl), (size_t)NET_PAGE);
  size_t bytes = ctrlBytes + (size_t)comm->nSlots * comm->slotBytes;
  if (conn->onDevice) { /* the kernel fills and drains it in place (net_dev.c) */
    p->onDevice = 1;
    p->cudaDev = comm->cudaDev;
    COMMCHECK(netDevSetup(comm, conn, p, ctrlBytes, (size_t)comm->nSlots * comm->slotBytes));
  } else {
    int err = posix_memalign(&p->mem, NET_PAGE, bytes);
    if (err) {
      p->mem = NULL;
      WARN("NET : cannot allocate a FIFO of %zu bytes: %s", bytes, strerror(err));
      return commSystemError;
    }
    memset(p->mem, 0, bytes);
  }
  if (!conn->onDevice) {
    conn->ctrl = (commFifoCtrl*)p->mem;
    conn->slots = (char*)p->mem + ctrlBytes;
  }
  conn->slotBytes = comm->slotBytes;
  conn->nSlots = comm->nSlots;
  conn->step = 0;
  return commSuccess;
}

/* The connection is dead. That is only an error if the executor still needs it: a peer that finished its
 * last operation and closed makes our speculatively posted receives fail. So progress stops here quietly
 * and check() reports the failure when a wait stalls on this connection. */
static commResult_t netFail(commConn* conn, commResult_t res) {
  netPriv* p = (netPriv*)conn->priv;
  if (!netFailed(p))
    INFO(COMM_NET, "net connection %s rank %d closed or failed (%d)", conn->isSend ? "to" : "from", conn->peer,
         (int)res);
  netSetFailed(p);
  return commSuccess;
}

/* Setting a connection up failed: an error at once. */
/* A setup call of the plugin failed. commRemoteError (the plugin found the peer gone: a connect refused, a
 * connection closed) names the peer as the failure's culprit. */
static commResult_t netSetupFail(struct commComm* comm, commConn* conn, const char* what, commResult_t res) {
  netSetFailed((netPriv*)conn->priv);
  if (res == commSuccess) res = commRemoteError;
  if (res == commRemoteError) commNotePeerFailure(comm, conn->peer);
  WARN("net connection %s rank %d on channel %d: %s failed: %s", conn->isSend ? "to" : "from", conn->peer,
       conn->channel, what,
       res == commRemoteError ? "the peer is gone or the network failed" : commGetErrorString(res));
  return res;
}

/* Calls fn until *out is non-NULL, giving up at the comm's deadline or abort. */
static commResult_t netWait(struct commComm* comm, commConn* conn, const char* what,
                            commResult_t (*fn)(void*, void*, void**), void* a, void* b, void** out) {
  int64_t deadline = commDeadlineNs(comm->timeoutMs);
  commBackoff bo = {0};
  for (;;) {
    commResult_t res = fn(a, b, out);
    if (res != commSuccess) return netSetupFail(comm, conn, what, res);
    if (*out) return commSuccess;
    if (commAborted(comm)) {
      WARN("net connection %s rank %d: %s aborted", conn->isSend ? "to" : "from", conn->peer, what);
      return commInternalError;
    }
    if (commTimeNs() > deadline) {
      WARN("net connection %s rank %d: %s timed out after %lld ms", conn->isSend ? "to" : "from", conn->peer, what,
           (long long)comm->timeoutMs);
      return commTimeout;
    }
    commBackoffWait(&bo);
  }
}

/* What a connect call needs: the plugin, the device, the peer's handle, and the partner listener (the
 * receive connection from the same peer on the same channel, made in the same round) or NULL. */
typedef struct {
  const commNet_t* net;
  int dev;
  void* pairListen;
} netConnectArgs;

static commResult_t netConnectFn(void* args, void* handle, void** out) {
  const netConnectArgs* a = (const netConnectArgs*)args;
  if (a->pairListen && a->net->connectPaired) return a->net->connectPaired(a->dev, handle, a->pairListen, out);
  return a->net->connect(a->dev, handle, out);
}

/* Pairing (connectPaired) needs both ranks to agree, so each says what it can do in the receive info it
 * sends: byte PAIR_FLAG_AT of the info is 1 when this rank is willing (the plugin has connectPaired,
 * COMM_SOCKET_PAIR is on) and makes, in this same connect round, its send connection to that peer on that
 * channel (not yet connected). A sender pairs only when the peer's flag says so and its own receive
 * connection from the peer on the channel is of this round too (its listener not accepted yet): both
 * sides then test the same two facts, "each rank makes both directions in this round". Collectives
 * always do; point-to-point calls that split the directions over separate calls do not pair. */
#define PAIR_FLAG_AT COMM_NET_HANDLE_MAXSIZE
_Static_assert(PAIR_FLAG_AT < COMM_CONN_INFO_BYTES - 8, "the pairing flag must fit in the connection info");

static int netPairWilling(const struct commComm* comm) {
  return comm->net->net->connectPaired != NULL && commParamInt("COMM_SOCKET_PAIR", 1, 0, 1) == 1;
}

/* The receive connection `conn` is being set up: will this rank pair the mirror direction? */
static int netPairOffer(struct commComm* comm, const commConn* conn) {
  if (!netPairWilling(comm)) return 0;
  commConn* snd = comm->channels[conn->channel].send ? comm->channels[conn->channel].send[conn->peer] : NULL;
  return snd != NULL && snd->transport == NULL; /* made in this round: connected in its phase 2 */
}

/* The partner listener of send connection `conn` when both sides pair (see above), else NULL. */
static void* netPairListen(struct commComm* comm, const commConn* conn, int peerOffers) {
  if (!peerOffers || !netPairWilling(comm)) return NULL;
  commConn* r = comm->channels[conn->channel].recv ? comm->channels[conn->channel].recv[conn->peer] : NULL;
  if (r == NULL || r->transport != conn->transport || r->priv == NULL) return NULL;
  netPriv* rp = (netPriv*)r->priv;
  return rp->listenComm != NULL && rp->recvComm == NULL ? rp->listenComm : NULL;
}

static commResult_t netAcceptFn(void* net, void* listenComm, void** out) {
  return ((const commNet_t*)net)->accept(listenComm, out);
}

static commResult_t netRecvSetup(struct commComm* comm, commConn* conn, void* info) {
  COMMCHECK(netSetup(comm, conn));
  netPriv* p = (netPriv*)conn->priv;
  commResult_t res = p->net->listen(p->dev, info, &p->listenComm);
  if (res != commSuccess) return netSetupFail(comm, conn, "listen", res);
  ((char*)info)[PAIR_FLAG_AT] = (char)netPairOffer(comm, conn);
  if (comm->net->nDevs > 1)
    INFO(COMM_NET | COMM_INIT, "NET : channel %02d : rank %d receives from rank %d on device %d (%s)", conn->channel,
         comm->rank, conn->peer, p->dev, comm->net->devName[p->dev]);
  return commSuccess;
}

static commResult_t netSendConnect(struct commComm* comm, commConn* conn, const void* info, void* ack) {
  (void)ack;
  COMMCHECK(netSetup(comm, conn));
  netPriv* p = (netPriv*)conn->priv;
  char handle[COMM_NET_HANDLE_MAXSIZE];
  memcpy(handle, info, sizeof(handle));
  netConnectArgs args = {p->net, p->dev, netPairListen(comm, conn, ((const char*)info)[PAIR_FLAG_AT] == 1)};
  COMMCHECK(netWait(comm, conn, "connect", netConnectFn, &args, handle, &p->sendComm));
  commResult_t res = p->onDevice ? netDevRegMr(conn, p, p->sendComm)
                                 : p->net->regMr(p->sendComm, conn->slots, (size_t)conn->nSlots * conn->slotBytes,
                                                 COMM_PTR_HOST, &p->mhandle);
  if (res != commSuccess) return netSetupFail(comm, conn, "regMr", res);
  return netRegister(comm, conn);
}

static commResult_t netRecvConnect(struct commComm* comm, commConn* conn, const void* ack) {
  (void)ack;
  netPriv* p = (netPriv*)conn->priv;
  COMMCHECK(netWait(comm, conn, "accept", netAcceptFn, (void*)p->net, p->listenComm, &p->recvComm));
  p->net->closeListen(p->listenComm);
  p->listenComm = NULL;
  commResult_t res = p->onDevice ? netDevRegMr(conn, p, p->recvComm)
                                 : p->net->regMr(p->recvComm, conn->slots, (size_t)conn->nSlots * conn->slotBytes,
                                                 COMM_PTR_HOST, &p->mhandle);
  if (res != commSuccess) return netSetupFail(comm, conn, "regMr", res);
  return netRegister(comm, conn);
}

/* Retire posted requests in order as the plugin completes them and publish each to the executor: a send
 * frees its slot (tail), a receive fills one (its size, then head). */
static commResult_t netComplete(commConn* conn, netPriv* p) {
  commFifoCtrl* ctrl = conn->ctrl;
  while (p->done < p->posted) {
    int i = (int)(p->done % (uint64_t)conn->nSlots);
    int done = 0;
    size_t size = 0;
    commResult_t res = p->net->test(p->reqs[i], &done, &size);
    if (res != commSuccess) return netFail(conn, res);
    if (!done) break;
    p->reqs[i] = NULL;
    if (!conn->isSend && p->slotsOnDevice && size > 0 && (res = netDevFlush(conn, p, i, size)) != commSuccess)
      return netFail(conn, res);
    if (!conn->isSend) ctrl->sizes[i] = size;
    p->bytes += size;
    p->done++;
    COMM_STORE_REL(conn->isSend ? &ctrl->tail : &ctrl->head, p->done);
  }
  return commSuccess;
}

/* A post failed: the connection is done for, but requests posted before may have completed (the Socket
 * plugin's post moves the control stream, where the messages of earlier receives can arrive just before the
 * peer's EOF): those are retired first, so the data a peer sent before it closed is not lost. (Marking the
 * connection failed at once lost a broadcast root's last four messages to a peer that came to them after the
 * root had destroyed its communicator: test_destroy_alone.) */
static commResult_t netPostFailed(commConn* conn, netPriv* p, commResult_t res) {
  (void)netComplete(conn, p);
  return netFail(conn, res);
}

commResult_t netProgressSend(commConn* conn, netPriv* p) {
  commFifoCtrl* ctrl = conn->ctrl;
  uint64_t head = COMM_LOAD_ACQ(&ctrl->head);
  if (head == p->posted && p->done == p->posted) return commSuccess; /* idle */
  int n = conn->nSlots;
  while (p->posted < head) {
    int i = (int)(p->posted % (uint64_t)n);
    uint64_t size = ctrl->sizes[i];
    if (size > conn->slotBytes) {
      WARN("net connection to rank %d: slot of %llu bytes exceeds the slot size %zu", conn->peer,
           (unsigned long long)size, conn->slotBytes);
      netSetFailed(p);
      return commInternalError;
    }
    void* req = NULL;
    commResult_t res = p->net->isend(p->sendComm, conn->slots + (size_t)i * conn->slotBytes, (size_t)size, 0,
                                     p->mhandle, &req);
    if (res != commSuccess) return netPostFailed(conn, p, res);
    if (!req) break;
    p->reqs[i] = req;
    p->posted++;
  }
  return netComplete(conn, p);
}

commResult_t netProgressRecv(commConn* conn, netPriv* p) {
  commFifoCtrl* ctrl = conn->ctrl;
  uint64_t tail = COMM_LOAD_ACQ(&ctrl->tail);
  int n = conn->nSlots;
  while (p->posted - tail < (uint64_t)n) {
    int i = (int)(p->posted % (uint64_t)n);
    void* data = conn->slots + (size_t)i * conn->slotBytes;
    size_t cap = conn->slotBytes;
    int tag = 0;
    void* req = NULL;
    commResult_t res = p->net->irecv(p->recvComm, 1, &data, &cap, &tag, &p->mhandle, &req);
    if (res != commSuccess) return netPostFailed(conn, p, res);
    if (!req) break;
    p->reqs[i] = req;
    p->posted++;
  }
  return netComplete(conn, p);
}

static commResult_t netProgress(struct commComm* comm, commConn* conn) {
  netPriv* p = (netPriv*)conn->priv;
  if (!p) return commInternalError;
  if (netFailed(p)) return commSuccess; /* reported by check() if a wait needs this connection */
  if (comm->net) __atomic_fetch_add(&comm->net->execCalls, 1, __ATOMIC_RELAXED);
  if (__atomic_exchange_n(&p->busy, 1, __ATOMIC_ACQUIRE)) return commSuccess; /* the other thread is on it */
  commResult_t res = commSuccess;
  if (conn->isSend) {
    if (p->sendComm) res = netProgressSend(conn, p);
  } else if (p->recvComm) {
    res = netProgressRecv(conn, p);
  }
  __atomic_store_n(&p->busy, 0, __ATOMIC_RELEASE);
  return res;
}

/* Has some send connection of this comm filled slots that have not left yet? (Owner thread or proxy.) */
static int netSendsPending(struct commComm* comm) {
  for (int i = 0; i < comm->nNetConns; i++) {
    commConn* conn = comm->netConns[i];
    netPriv* p = (netPriv*)conn->priv;
    if (!conn->isSend || !p || !p->sendComm || netFailed(p)) continue;
    if (COMM_LOAD_ACQ(&conn->ctrl->tail) < COMM_LOAD_ACQ(&conn->ctrl->head)) return 1;
  }
  return 0;
}

void commNetKickProxy(struct commComm* comm) {
  struct commNetState* st = comm->net;
  if (!st || !st->proxyStarted || !netSendsPending(comm)) return;
  pthread_mutex_lock(&st->wakeLock);
  st->wanted = 1;
  pthread_cond_signal(&st->wake);
  pthread_mutex_unlock(&st->wakeLock);
}

/* Moves filled send slots while the executor is not calling progress(). */
static void* netProxyMain(void* arg) {
  struct commNetState* st = (struct commNetState*)arg;
  struct commComm* comm = st->comm;
  netBindProxy(comm, "NET proxy thread");
  for (;;) {
    pthread_mutex_lock(&st->wakeLock);
    while (!st->wanted && !__atomic_load_n(&st->proxyStop, __ATOMIC_ACQUIRE))
      pthread_cond_wait(&st->wake, &st->wakeLock);
    st->wanted = 0; /* a kick from now on wakes us again */
    pthread_mutex_unlock(&st->wakeLock);
    if (__atomic_load_n(&st->proxyStop, __ATOMIC_ACQUIRE)) break;
    uint64_t lastExec = __atomic_load_n(&st->execCalls, __ATOMIC_RELAXED);
    for (;;) {
      struct timespec ts = {0, NET_PROXY_BUSY_US * 1000L};
      nanosleep(&ts, NULL);
      if (__atomic_load_n(&st->proxyStop, __ATOMIC_ACQUIRE)) break;
      uint64_t exec = __atomic_load_n(&st->execCalls, __ATOMIC_RELAXED);
      /* The executor is back: it moves the sends itself and kicks us again if it leaves some behind. */
      if (exec != lastExec) break;
      int pending = 0;
      pthread_mutex_lock(&st->listLock);
      for (int i = 0; i < comm->nNetConns; i++) {
        commConn* conn = comm->netConns[i];
        netPriv* p = (netPriv*)conn->priv;
        if (!conn->isSend || !p || !p->sendComm || netFailed(p)) continue;
        if (__atomic_exchange_n(&p->busy, 1, __ATOMIC_ACQUIRE)) { /* the executor is back */
          pending = 1;
          continue;
        }
        if (netProgressSend(conn, p) == commSuccess && p->done < COMM_LOAD_ACQ(&conn->ctrl->head)) pending = 1;
        __atomic_store_n(&p->busy, 0, __ATOMIC_RELEASE);
      }
      pthread_mutex_unlock(&st->listLock);
      if (!pending) break;
    }
  }
  return NULL;
}

/* Called while a wait stalls on this connection (or while commDestroy drains it), so a failed connection here
 * is one the executor still needs. A peer that closes in order (commDestroy, or its process exiting) ends the
 * byte stream after all it sent: what it sent has arrived, so the data still expected will never come. */
static commResult_t netCheck(struct commComm* comm, commConn* conn) {
  netPriv* p = (netPriv*)conn->priv;
  if (!p || !netFailed(p)) return commSuccess;
  if (conn->isSend)
    WARN("rank %d destroyed its communicator (or exited, or the network failed) while this rank still had data for "
         "it: net connection to rank %d on channel %d failed with %llu of %llu slots sent",
         conn->peer, conn->peer, conn->channel, (unsigned long long)p->done,
         (unsigned long long)COMM_LOAD_ACQ(&conn->ctrl->head));
  else
    WARN("rank %d destroyed its communicator (or exited, or the network failed) while this rank still expected data "
         "from it: net connection from rank %d on channel %d ended after %llu messages (%llu bytes)",
         conn->peer, conn->peer, conn->channel, (unsigned long long)p->done, (unsigned long long)p->bytes);
  commNotePeerFailure(comm, conn->peer);
  return commRemoteError;
}

static commResult_t netClose(struct commComm* comm, commConn* conn) {
  netPriv* p = (netPriv*)conn->priv;
  if (conn->onDevice) netDevUnregister(comm, conn);
  else netListRemove(comm->net, comm->netConns, &comm->nNetConns, conn);
  if (!p) return commSuccess;
  if (p->sendComm) {
    if (p->mhandle) p->net->deregMr(p->sendComm, p->mhandle);
    p->net->closeSend(p->sendComm);
  }
  if (p->recvComm) {
    if (p->mhandle) p->net->deregMr(p->recvComm, p->mhandle);
    p->net->closeRecv(p->recvComm);
  }
  if (p->listenComm) p->net->closeListen(p->listenComm);
  if (p->onDevice) netDevFreeMem(p);
  else free(p->mem);
  free(p);
  conn->priv = NULL;
  conn->ctrl = NULL;
  conn->slots = NULL;
  return commSuccess;
}

const commTransport commTransportNet = {
    .name = "NET",
    .recvSetup = netRecvSetup,
    .sendConnect = netSendConnect,
    .recvConnect = netRecvConnect,
    .progress = netProgress,
    .check = netCheck,
    .close = netClose,
    .devConn = netDevConn,
    .init = commNetInit,
    .finalize = commNetFinalize,
    .opDone = commNetKickProxy,
    .devBusyWords = commNetDevBusyWords,
    .devLaunched = commNetDevKick,
};
