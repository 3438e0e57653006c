/* Device buffers across hosts: the net transport's device connections and the proxy thread that moves them.
 *
 * A device connection over the network has, on each side, the same FIFO as a host connection (ctrl page:
 * head, tail, sizes; then the slots), but in pinned host memory the GPU maps (commDevHostAlloc). The CUDA
 * kernel fills the sender's slots and stores size and head (fences at system scope), and drains the
 * receiver's slots and stores tail, exactly as it does over P2P; its own position is kept in the ctrl page
 * (devSendPos, devRecvPos). Nothing on the host waits for the kernel: a proxy thread per communicator moves
 * the FIFOs with the network plugin, the same calls progress() makes for the host executor (sends of filled
 * slots, receives posted on free ones, completions in order), so every network plugin can carry device
 * buffers (tests run it over Socket, test_gpu_coll -p N -H; and over IB on the verbs fake and the example
 * NCCL plugin, tests/gpu/net_gdr_fake.sh; never on RDMA hardware).
 *
 * GPUDirect RDMA: when the plugin can read and write GPU memory (its ptrSupport has COMM_PTR_CUDA: IB with
 * dma-buf or nvidia-peermem) and COMM_NET_GDR is not 0, the slots live in device memory instead, registered
 * as CUDA memory, and the NIC moves the data without a copy through host memory; head, tail and sizes stay
 * in the ctrl page for the proxy. Before a received slot's head moves, the proxy flushes the NIC's writes
 * (iflush), so the kernel that reads the slot after head sees them. A plugin that refuses to register the
 * device memory leaves that side's slots in host memory, with a WARN saying GPUDirect RDMA is off and why
 * (each side chooses for itself: nothing about it crosses the wire).
 *
 * When to move: while a kernel that uses these connections runs, each of its blocks sets a word of
 * devBusy (mapped host memory) from its start to its end, and the proxy polls without sleeping; a launch
 * from this process also kicks it (devKickNs) so it is awake before the kernel starts; and sends the kernel
 * left behind keep it busy until they are out. Otherwise it looks at the busy words every NET_DEV_IDLE_US,
 * which is what picks up launches it was not told about (CUDA graph replays).
 *
 * Failures: a connection that fails sets devFailed in its ctrl page; a kernel waiting on that connection
 * sees it and ends with COMM_DEV_NET_FAILED (commRemoteError through commGetAsyncError), instead of
 * waiting for the timeout. A failure nobody waits on (a peer that closed after its last operation) is no
 * error, as for host connections. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "communicator.h"
#include "debug.h"
#include "net_internal.h"
#include "param.h"
#include "utils.h"

#define NET_DEV_IDLE_US 50              /* idle: how often the proxy looks for running kernels */
#define NET_DEV_KICK_NS (5ll * 1000000) /* after a launch from this process: awake at least this long */
#define NET_DEV_DRAIN_MS 5000           /* at close: at most this long for the last sends to leave */

static int devBusy(const struct commNetState* st) {
  for (int c = 0; c < COMM_MAX_CHANNELS; c++)
    if (st->devBusy[c]) return 1;
  return 0;
}

/* One pass over the device connections. *pending: sends not yet out. */
static void devProxyPass(struct commNetState* st, int active, int* pending) {
  struct commComm* comm = st->comm;
  *pending = 0;
  pthread_mutex_lock(&st->listLock);
  for (int i = 0; i < st->nDevConns; i++) {
    commConn* conn = st->devConns[i];
    netPriv* p = (netPriv*)conn->priv;
    if (p == NULL) continue;
    if (!netFailed(p)) {
      if (conn->isSend && p->sendComm) {
        netProgressSend(conn, p);
        if (p->done < COMM_LOAD_ACQ(&conn->ctrl->head)) *pending = 1;
      } else if (!conn->isSend && p->recvComm && active) {
        netProgressRecv(conn, p);
      }
    }
    if (netFailed(p) && !p->reported) { /* a kernel waiting on it learns it from devFailed */
      p->reported = 1;
      COMM_STORE_REL(&conn->ctrl->devFailed, 1u);
      INFO(COMM_NET, "NET : rank %d: device connection %s rank %d on channel %d closed or failed", comm->rank,
           conn->isSend ? "to" : "from", conn->peer, conn->channel);
    }
  }
  pthread_mutex_unlock(&st->listLock);
}

static void* devProxyMain(void* arg) {
  struct commNetState* st = (struct commNetState*)arg;
  struct commComm* comm = st->comm;
  netBindProxy(comm, "NET device proxy thread");
  /* Its GPU current: flushing GPUDirect RDMA writes (iflush) acts on the current context. */
  if (commDevBindThread(comm->cudaDev) != commSuccess)
    WARN("NET : rank %d: the device proxy thread cannot make GPU %d current", comm->rank, comm->cudaDev);
  while (!__atomic_load_n(&st->devProxyStop, __ATOMIC_ACQUIRE)) {
    int active = devBusy(st) || commTimeNs() - __atomic_load_n(&st->devKickNs, __ATOMIC_ACQUIRE) < NET_DEV_KICK_NS;
    int pending = 0;
    devProxyPass(st, active, &pending);
    if (active || pending) {
      sched_yield();
    } else {
      struct timespec ts = {0, NET_DEV_IDLE_US * 1000L};
      nanosleep(&ts, NULL);
    }
  }
  return NULL;
}

commResult_t netDevRegister(struct commComm* comm, commConn* conn) {
  struct commNetState* st = comm->net;
  if (st->devBusy == NULL) {
    void* host = NULL;
    void* dev = NULL;
    COMMCHECK(commDevHostAlloc(comm->cudaDev, COMM_MAX_CHANNELS * sizeof(uint32_t), &host, &dev));
    st->devBusy = (volatile uint32_t*)host;
    st->devBusyDev = (uint32_t*)dev;
  }
  commResult_t res = netListAdd(st, &st->devConns, &st->nDevConns, &st->devConnsCap, conn);
  if (res != commSuccess || st->devProxyStarted) return res;
  int err = pthread_create(&st->devProxy, NULL, devProxyMain, st);
  if (err) {
    WARN("NET : cannot start the device proxy thread: %s", strerror(err));
    return commSystemError;
  }
  st->devProxyStarted = 1;
  INFO(COMM_NET | COMM_INIT,
       "NET : rank %d: device buffers cross hosts through pinned host memory, moved by the "
       "device proxy thread over %s",
       comm->rank, st->net->name);
  return commSuccess;
}

/* Give sends the kernel already posted a bounded chance to leave (the proxy moves them), then forget conn. */
void netDevUnregister(struct commComm* comm, commConn* conn) {
  struct commNetState* st = comm->net;
  if (st == NULL) return;
  netPriv* p = (netPriv*)conn->priv;
  if (conn->isSend && p && p->sendComm && st->devProxyStarted) {
    int64_t deadline = commDeadlineNs(NET_DEV_DRAIN_MS);
    commBackoff bo = {0};
    while (!commAborted(comm) && !netFailed(p) && COMM_LOAD_ACQ(&conn->ctrl->tail) < COMM_LOAD_ACQ(&conn->ctrl->head) &&
           commTimeNs() < deadline)
      commBackoffWait(&bo);
  }
  netListRemove(st, st->devConns, &st->nDevConns, conn);
}

void netDevStop(struct commNetState* st) {
  if (st->devProxyStarted) {
    __atomic_store_n(&st->devProxyStop, 1, __ATOMIC_RELEASE);
    pthread_join(st->devProxy, NULL);
    st->devProxyStarted = 0;
  }
  if (st->devBusy) commDevHostFree(st->comm->cudaDev, (void*)st->devBusy);
  st->devBusy = NULL;
  st->devBusyDev = NULL;
  free(st->devConns);
  st->devConns = NULL;
  st->nDevConns = st->devConnsCap = 0;
}

uint32_t* commNetDevBusyWords(struct commComm* comm) { return comm->net ? comm->net->devBusyDev : NULL; }

void commNetDevKick(struct commComm* comm) {
  if (comm->net) __atomic_store_n(&comm->net->devKickNs, commTimeNs(), __ATOMIC_RELEASE);
}

commResult_t netDevConn(const commConn* conn, commDevConn* out) {
  const netPriv* p = (const netPriv*)conn->priv;
  if (p == NULL || !p->onDevice || p->memDev == NULL) {
    WARN("NET : connection %s rank %d on channel %d is not a device connection", conn->isSend ? "to" : "from",
         conn->peer, conn->channel);
    return commInternalError;
  }
  /* The same offsets in the kernel's mapping of the FIFO. */
  char* host = (char*)p->mem;
  char* dev = (char*)p->memDev;
#define NET_DEV_ADDR(x) ((void*)(dev + ((char*)(x)-host)))
  commFifoCtrl* ctrl = conn->ctrl;
  memset(out, 0, sizeof(*out));
  out->slots = (char*)(p->slotsOnDevice ? p->slotMem : p->slotMemDev);
  out->head = (uint64_t*)NET_DEV_ADDR(&ctrl->head);
  out->sizes = (uint64_t*)NET_DEV_ADDR(ctrl->sizes);
  out->tail = (uint64_t*)NET_DEV_ADDR(&ctrl->tail);
  out->pos = (uint64_t*)NET_DEV_ADDR(conn->isSend ? &ctrl->devSendPos : &ctrl->devRecvPos);
  out->failed = (uint32_t*)NET_DEV_ADDR(&ctrl->devFailed);
#undef NET_DEV_ADDR
  out->llSlots = NULL; /* plans across hosts run Simple */
  out->sysScope = 1;   /* the proxy (the host) reads and writes the FIFO */
  return commSuccess;
}

/* ---- The FIFO's memory, and GPUDirect RDMA ---- */

/* Why the slots cannot live in GPU memory for this plugin (NULL: they can). */
static const char* gdrUnavailable(const netPriv* p) {
  if (commParamInt("COMM_NET_GDR", 1, 0, 1) == 0) return "COMM_NET_GDR=0";
  commNetProperties_t props;
  if (p->net->getProperties(p->dev, &props) != commSuccess) return "the plugin's getProperties failed";
  if (!(props.ptrSupport & COMM_PTR_CUDA)) return "the network plugin cannot reach GPU memory";
  return NULL;
}

commResult_t netDevSetup(struct commComm* comm, commConn* conn, netPriv* p, size_t ctrlBytes, size_t slotBytes) {
  COMMCHECK(commDevHostAlloc(p->cudaDev, ctrlBytes, &p->mem, &p->memDev));
  conn->ctrl = (commFifoCtrl*)p->mem;
  const char* why = gdrUnavailable(p);
  if (why == NULL && commDevMemAlloc(p->cudaDev, slotBytes, &p->slotMem) == commSuccess) {
    p->slotsOnDevice = 1;
    p->slotMemDev = p->slotMem;
  } else {
    INFO(COMM_NET, "NET : rank %d: device connection %s rank %d on channel %d: slots in pinned host memory (%s)",
         comm->rank, conn->isSend ? "to" : "from", conn->peer, conn->channel, why ? why : "cudaMalloc failed");
    COMMCHECK(commDevHostAlloc(p->cudaDev, slotBytes, &p->slotMem, &p->slotMemDev));
  }
  conn->slots = (char*)p->slotMem;
  return commSuccess;
}

commResult_t netDevRegMr(commConn* conn, netPriv* p, void* netComm) {
  const size_t bytes = (size_t)conn->nSlots * conn->slotBytes;
  if (p->slotsOnDevice) {
    commResult_t res = p->net->regMr(netComm, conn->slots, bytes, COMM_PTR_CUDA, &p->mhandle);
    if (res == commSuccess) {
      INFO(COMM_NET,
           "NET : device connection %s rank %d on channel %d: GPUDirect RDMA, %zu bytes of slots in GPU %d "
           "memory registered with %s",
           conn->isSend ? "to" : "from", conn->peer, conn->channel, bytes, p->cudaDev, p->net->name);
      return commSuccess;
    }
    WARN("NET : device connection %s rank %d on channel %d: GPUDirect RDMA is off: %s could not register GPU %d "
         "memory (%s); its slots move to pinned host memory",
         conn->isSend ? "to" : "from", conn->peer, conn->channel, p->net->name, p->cudaDev, commGetErrorString(res));
    p->slotMemRefused = p->slotMem; /* freed at close (see net_internal.h) */
    p->slotMem = p->slotMemDev = NULL;
    p->slotsOnDevice = 0;
    COMMCHECK(commDevHostAlloc(p->cudaDev, bytes, &p->slotMem, &p->slotMemDev));
    conn->slots = (char*)p->slotMem;
  }
  return p->net->regMr(netComm, conn->slots, bytes, COMM_PTR_HOST, &p->mhandle);
}

commResult_t netDevFlush(commConn* conn, netPriv* p, int i, size_t size) {
  void* data = conn->slots + (size_t)i * conn->slotBytes;
  int sz = (int)size;
  void* req = NULL;
  commResult_t res = p->net->iflush(p->recvComm, 1, &data, &sz, &p->mhandle, &req);
  /* A plugin may flush asynchronously (an RDMA read on a loopback QP): wait for it, boundedly. */
  int64_t deadline = commDeadlineNs(NET_DEV_DRAIN_MS);
  while (res == commSuccess && req) {
    int done = 0;
    res = p->net->test(req, &done, NULL);
    if (done) break;
    if (res == commSuccess && commTimeNs() > deadline) {
      WARN("NET : flush of a GPUDirect RDMA receive from rank %d did not complete in %d ms", conn->peer,
           NET_DEV_DRAIN_MS);
      res = commRemoteError;
    }
  }
  return res;
}

void netDevFreeMem(netPriv* p) {
  if (p->slotMemRefused) commDevMemFree(p->cudaDev, p->slotMemRefused);
  p->slotMemRefused = NULL;
  if (p->slotsOnDevice) commDevMemFree(p->cudaDev, p->slotMem);
  else commDevHostFree(p->cudaDev, p->slotMem);
  commDevHostFree(p->cudaDev, p->mem);
  p->slotMem = p->slotMemDev = p->mem = p->memDev = NULL;
}
