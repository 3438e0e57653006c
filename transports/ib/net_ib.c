/* The "IB" network plugin over a commIbVerbs table (net_ib.h has the design). */
#include "net_ib.h"

#ifdef COMM_HAVE_IBVERBS
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "ib_gdr.h"
#include "ib_topo.h"
#include "param.h"
#include "socket.h"
#include "utils.h"

#define IB_MAX_DEVS 16
#define IB_NREQ COMM_NET_IB_FIFO_DEPTH
#define IB_MAX_QPS COMM_NET_IB_MAX_QPS
#define IB_MAGIC 0x434f4d4d49424e31ull /* "COMMIBN1" */
#define IB_MAX_MESSAGE 0x7fffffffu
#define IB_POLL_BATCH 16

/* ---------------------------------------------------------------- process-wide state */

static const commIbVerbs* ibV;
static pthread_mutex_t ibLock = PTHREAD_MUTEX_INITIALIZER;
static int ibNDevs;
static commIbPort ibPorts[IB_MAX_DEVS];
static int ibHaveIf;
static commSockAddr ibIfAddr;

/* ---------------------------------------------------------------- wire formats */

/* A "clear to send" entry: written by the receiver into the sender's FIFO slot seq % IB_NREQ. `seq`
 * (request number + 1) comes last and is what the sender waits for. */
typedef struct {
  uint64_t addr;
  uint64_t size;
  uint32_t rkey;
  int32_t tag;
  uint64_t seq;
} ibCts;

/* Connection information, exchanged over the TCP socket (sender first, receiver answers). */
typedef struct {
  uint64_t magic;
  uint64_t listenMagic; /* sender: the handle's, so a listener takes only connections meant for it */
  uint32_t nQps;
  uint32_t qpn[IB_MAX_QPS];
  uint32_t psn;
  uint32_t mtu;
  uint32_t linkLayer;
  uint32_t lid;
  uint8_t gid[16];
  uint64_t fifoAddr; /* sender only: its credit FIFO */
  uint32_t fifoRkey;
  uint32_t pad;
} ibInfo;
_Static_assert(sizeof(ibInfo) % 8 == 0, "ibInfo has no tail padding");

typedef struct {
  commSockAddr addr;
  uint64_t magic;
  /* Connect's progress, kept in the caller's handle between calls (the caller passes the same handle). */
  void* stageComm;
} ibHandle;
_Static_assert(sizeof(ibHandle) <= COMM_NET_HANDLE_MAXSIZE, "IB handle too large");

/* ---------------------------------------------------------------- comms */

typedef struct ibComm ibComm;

/* A registration (the mhandle): page-aligned ranges of one comm's PD, shared by the registrations they
 * contain, released with the last. */
typedef struct ibMr {
  struct ibMr* next;
  uintptr_t start, end;
  struct ibv_mr* mr;
  int refs;
  int gpu; /* device memory: its CUDA ordinal (registered through GPUDirect RDMA, ib_gdr.c); host: -1 */
} ibMr;
typedef struct {
  ibComm* comm;
  int used;
  uint64_t seq;
  /* send */
  char* data;
  size_t size;
  int tag;
  uint32_t lkey;
  int posted; /* data WRs posted */
  /* receive */
  size_t cap;
  size_t got; /* bytes received so far (sum of the pieces' immediates) */
  int pending; /* completions still expected (pieces: send or receive) */
} ibReq;

struct ibComm {
  int isSend;
  int dev;
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  int nQps;
  struct ibv_qp* qps[IB_MAX_QPS];
  int gidIndex;
  union ibv_gid gid;
  uint32_t psn;
  /* The sender's credit FIFO (remotely written), or the receiver's staging of the entries it writes. */
  ibCts* fifo;
  struct ibv_mr* fifoMr;
  uint64_t remFifoAddr;
  uint32_t remFifoRkey;
  ibReq reqs[IB_NREQ];
  uint64_t posted;  /* requests posted */
  uint64_t started; /* sender: requests whose data WRs are posted; receiver: whose credit is posted */
  int err;          /* sticky: a completion failed */
  int up;           /* QPs connected on both sides (the setup socket is closed) */
  ibMr* mrs;        /* the registration cache */
  char peerStr[96];
  /* connection setup */
  int fd;
  int stage;
  int64_t deadline, timeoutMs;
  ibInfo local, remote;
  size_t off;
  uint8_t ready;
};

typedef struct {
  int dev;
  int fd;
  uint64_t magic;
  ibComm* pending; /* the connection being accepted */
  commSockAddr pendingAddr;
} ibListen;

static const char* ibDevName(const ibComm* c) { return ibPorts[c->dev].devName; }

/* ---------------------------------------------------------------- init / devices */

static commResult_t ibInit(commNetLogger_t logger) {
  (void)logger; /* built in: logs through debug.h */
  if (!ibV) {
    WARN("NET/IB : no verbs table");
    return commInternalError;
  }
  commIbHcaFilter filter;
  COMMCHECK(commIbHcaParse(commParamStr("COMM_IB_HCA", NULL), &filter));
  pthread_mutex_lock(&ibLock);
  commResult_t res = commIbDiscover(ibV, &filter, ibPorts, IB_MAX_DEVS, &ibNDevs);
  if (res == commSuccess && !ibHaveIf) {
    char ifName[COMM_IFNAME_MAX];
    res = commSocketFindInterface(ifName, &ibIfAddr);
    if (res == commSuccess) ibHaveIf = 1;
    else WARN("NET/IB : no interface for the connection setup (COMM_SOCKET_IFNAME)");
  }
  pthread_mutex_unlock(&ibLock);
  if (res == commSuccess)
    INFO(COMM_NET | COMM_IB, "NET/IB : %d device(s) over %s", ibNDevs, ibV->name);
  return res;
}

static commResult_t ibDevices(int* ndev) {
  *ndev = ibNDevs;
  return commSuccess;
}

static commResult_t ibGetProperties(int dev, commNetProperties_t* props) {
  if (dev < 0 || dev >= ibNDevs) {
    WARN("NET/IB : invalid device %d", dev);
    return commInvalidArgument;
  }
  memset(props, 0, sizeof(*props));
  props->name = ibPorts[dev].devName;
  props->pciPath = NULL;
  props->guid = ibPorts[dev].guid;
  props->ptrSupport = COMM_PTR_HOST | (ibGdrPathFor(0, NULL, 0) != IB_GDR_NONE ? COMM_PTR_CUDA : 0);
  props->speedMbps = ibPorts[dev].speedMbps;
  props->port = ibPorts[dev].port;
  props->latencyUs = 0;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->maxMessageBytes = IB_MAX_MESSAGE;
  return commSuccess;
}

/* ---------------------------------------------------------------- verbs resources */

/* Connection setup gives up after COMM_TIMEOUT_MS (-1: never), as libcomm's own waits. */
static void ibSetDeadline(ibComm* c) {
  c->timeoutMs = commParamInt("COMM_TIMEOUT_MS", 600000, -1, INT64_MAX / 1000000);
  c->deadline = commDeadlineNs(c->timeoutMs);
}

static int ibNumQps(void) { return (int)commParamInt("COMM_IB_QPS_PER_CONNECTION", 1, 1, IB_MAX_QPS); }

static void ibFreeComm(ibComm* c) {
  if (!c) return;
  const commIbVerbs* v = ibV;
  int err;
  while (c->mrs) { /* registrations the caller did not release */
    ibMr* m = c->mrs;
    c->mrs = m->next;
    INFO(COMM_NET | COMM_IB, "NET/IB : %s: releasing a registration left at close", ibDevName(c));
    if ((err = v->deregMr(m->mr)) != 0) WARN("NET/IB : %s: deregistration failed: %s", ibDevName(c), strerror(err));
    free(m);
  }
  const char* name = ibDevName(c);
  for (int i = 0; i < c->nQps; i++)
    if (c->qps[i] && (err = v->destroyQp(c->qps[i])) != 0)
      WARN("NET/IB : %s: destroy QP failed: %s", name, strerror(err));
  if (c->fifoMr && (err = v->deregMr(c->fifoMr)) != 0)
    WARN("NET/IB : %s: deregister FIFO failed: %s", name, strerror(err));
  if (c->cq && (err = v->destroyCq(c->cq)) != 0) WARN("NET/IB : %s: destroy CQ failed: %s", name, strerror(err));
  if (c->pd && (err = v->deallocPd(c->pd)) != 0)
    WARN("NET/IB : %s: free PD failed: %s (memory still registered?)", ibDevName(c), strerror(err));
  if (c->ctx && (err = v->closeDevice(c->ctx)) != 0) WARN("NET/IB : %s: close failed: %s", ibDevName(c), strerror(err));
  if (c->fd >= 0) close(c->fd);
  free(c->fifo);
  free(c);
}

/* Opens the device and makes the PD, CQ, FIFO and nQps QPs (in INIT); fills c->local. */
static commResult_t ibNewComm(int dev, int isSend, int nQps, ibComm** out) {
  const commIbVerbs* v = ibV;
  *out = NULL;
  ibComm* c;
  COMMCHECK(commCalloc(&c, 1, sizeof(*c)));
  c->isSend = isSend;
  c->dev = dev;
  c->fd = -1;
  c->nQps = nQps;
  const commIbPort* p = &ibPorts[dev];
  commResult_t res = commSystemError;
  int n = 0;
  struct ibv_device** list = v->getDeviceList(&n);
  if (!list || p->devIndex >= n) {
    WARN("NET/IB : %s: device no longer listed", p->devName);
    if (list) v->freeDeviceList(list);
    goto fail;
  }
  c->ctx = v->openDevice(list[p->devIndex]);
  v->freeDeviceList(list);
  if (!c->ctx) {
    WARN("NET/IB : cannot open %s: %s", p->devName, strerror(errno));
    goto fail;
  }
  if (!(c->pd = v->allocPd(c->ctx))) {
    WARN("NET/IB : %s: cannot allocate a PD: %s", p->devName, strerror(errno));
    goto fail;
  }
  int cqe = 2 * IB_NREQ * (nQps + 1) + 16;
  if (!(c->cq = v->createCq(c->ctx, cqe, NULL, NULL, 0))) {
    WARN("NET/IB : %s: cannot create a CQ of %d entries: %s", p->devName, cqe, strerror(errno));
    goto fail;
  }
  COMMCHECKGOTO(commCalloc(&c->fifo, IB_NREQ, sizeof(ibCts)), res, fail);
  res = commSystemError;
  int access = IBV_ACCESS_LOCAL_WRITE | (isSend ? IBV_ACCESS_REMOTE_WRITE : 0);
  if (!(c->fifoMr = v->regMr(c->pd, c->fifo, IB_NREQ * sizeof(ibCts), access))) {
    WARN("NET/IB : %s: cannot register the credit FIFO: %s", p->devName, strerror(errno));
    goto fail;
  }
  if (p->linkLayer == IBV_LINK_LAYER_ETHERNET) {
    commIbGidType_t type;
    int forced = (int)commParamInt("COMM_IB_GID_INDEX", -1, -1, 255);
    if (commIbSelectGid(v, c->ctx, p->port, forced, &c->gidIndex, &c->gid, &type) != commSuccess) goto fail;
  }
  uint64_t rnd = 0;
  COMMCHECKGOTO(commRandom64(&rnd), res, fail);
  res = commSystemError;
  c->psn = (uint32_t)(rnd & 0xffffff);
  for (int i = 0; i < nQps; i++) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = c->cq;
    ia.recv_cq = c->cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 2 * IB_NREQ;
    ia.cap.max_recv_wr = isSend ? 1 : IB_NREQ;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    if (!(c->qps[i] = v->createQp(c->pd, &ia))) {
      WARN("NET/IB : %s: cannot create QP %d: %s", p->devName, i, strerror(errno));
      goto fail;
    }
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = p->port;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    int err = v->modifyQp(c->qps[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (err) {
      WARN("NET/IB : %s: QP %u to INIT failed: %s", p->devName, c->qps[i]->qp_num, strerror(err));
      goto fail;
    }
    c->local.qpn[i] = c->qps[i]->qp_num;
  }
  c->local.magic = IB_MAGIC;
  c->local.nQps = (uint32_t)nQps;
  c->local.psn = c->psn;
  c->local.mtu = (uint32_t)p->activeMtu;
  c->local.linkLayer = p->linkLayer;
  c->local.lid = p->lid;
  memcpy(c->local.gid, c->gid.raw, 16);
  if (isSend) {
    c->local.fifoAddr = (uint64_t)(uintptr_t)c->fifo;
    c->local.fifoRkey = c->fifoMr->rkey;
  }
  *out = c;
  return commSuccess;
fail:
  ibFreeComm(c);
  return res;
}

/* INIT -> RTR -> RTS against the peer's information in c->remote. */
static commResult_t ibConnectQps(ibComm* c) {
  const commIbVerbs* v = ibV;
  const commIbPort* p = &ibPorts[c->dev];
  const ibInfo* r = &c->remote;
  int timeout = (int)commParamInt("COMM_IB_TIMEOUT", 20, 1, 31);
  int retry = (int)commParamInt("COMM_IB_RETRY_CNT", 7, 0, 7);
  enum ibv_mtu mtu = (enum ibv_mtu)(r->mtu < (uint32_t)p->activeMtu ? r->mtu : (uint32_t)p->activeMtu);
  for (int i = 0; i < c->nQps; i++) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = r->qpn[i];
    a.rq_psn = r->psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = p->port;
    if (p->linkLayer == IBV_LINK_LAYER_ETHERNET) {
      a.ah_attr.is_global = 1;
      memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
      a.ah_attr.grh.sgid_index = (uint8_t)c->gidIndex;
      a.ah_attr.grh.hop_limit = 255;
    } else {
      a.ah_attr.dlid = (uint16_t)r->lid;
    }
    int err = v->modifyQp(c->qps[i], &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (err) {
      WARN("NET/IB : %s: QP %u to RTR (peer %s QP %u) failed: %s", p->devName, c->qps[i]->qp_num, c->peerStr,
           r->qpn[i], strerror(err));
      return commSystemError;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = c->psn;
    a.timeout = (uint8_t)timeout;
    a.retry_cnt = (uint8_t)retry;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    err = v->modifyQp(c->qps[i], &a,
                      IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_MAX_QP_RD_ATOMIC);
    if (err) {
      WARN("NET/IB : %s: QP %u to RTS failed: %s", p->devName, c->qps[i]->qp_num, strerror(err));
      return commSystemError;
    }
  }
  return commSuccess;
}

/* ---------------------------------------------------------------- listen / connect / accept */

static commResult_t ibListenFn(int dev, void* handle, void** listenComm) {
  *listenComm = NULL;
  if (dev < 0 || dev >= ibNDevs || !ibHaveIf) {
    WARN("NET/IB : listen on invalid device %d", dev);
    return commInvalidArgument;
  }
  ibListen* l;
  COMMCHECK(commCalloc(&l, 1, sizeof(*l)));
  commResult_t res;
  commSockAddr addr = ibIfAddr;
  if (addr.sa.sa_family == AF_INET) addr.sin.sin_port = 0;
  else addr.sin6.sin6_port = 0;
  COMMCHECKGOTO(commRandom64(&l->magic), res, fail);
  COMMCHECKGOTO(commSocketListen(&addr, &l->fd), res, fail);
  l->dev = dev;
  ibHandle* h = (ibHandle*)handle;
  memset(h, 0, sizeof(*h));
  h->addr = addr;
  h->magic = l->magic;
  *listenComm = l;
  return commSuccess;
fail:
  free(l);
  return res;
}

/* A non-blocking TCP connect to addr: 0 (in progress or done), or an errno value. */
static int ibStartConnect(ibComm* c, const commSockAddr* addr) {
  int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  if (connect(fd, &addr->sa, (socklen_t)commSocketAddrLen(addr)) != 0 && errno != EINPROGRESS) {
    int e = errno;
    close(fd);
    return e;
  }
  c->fd = fd;
  return 0;
}

enum { CONN_TCP = 0, CONN_SEND_INFO, CONN_RECV_INFO, CONN_SEND_READY, CONN_DONE };

/* Connect stages: TCP connect (refused: retried until the deadline), send our information; connect()
 * returns the comm there, without waiting for the peer (libcomm finishes its connects before it accepts).
 * Then, from isend()/test(): receive the receiver's information, bring the QPs up, send one "ready" byte
 * (the receiver posts no credit before it, so a credit never reaches a QP that is not ready). */
static commResult_t ibConnectStep(ibComm* c, const ibHandle* h) {
  for (;;) {
    switch (c->stage) {
      case CONN_TCP: {
        if (c->fd < 0) {
          int e = ibStartConnect(c, &h->addr);
          if (e == ECONNREFUSED || e == EAGAIN || e == ETIMEDOUT || e == ENETUNREACH || e == EHOSTUNREACH)
            return commSuccess; /* retried at the next call, until the deadline */
          if (e) {
            WARN("NET/IB : connect to %s failed: %s", c->peerStr, strerror(e));
            return commSystemError;
          }
        }
        struct pollfd pfd = {c->fd, POLLOUT, 0};
        if (poll(&pfd, 1, 0) <= 0) return commSuccess;
        int soErr = 0;
        socklen_t len = sizeof(soErr);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soErr, &len) != 0) soErr = errno;
        if (soErr) { /* refused (the listener is not there yet, or never will be): try again later */
          close(c->fd);
          c->fd = -1;
          return commSuccess;
        }
        commSocketSetNoDelay(c->fd);
        c->stage = CONN_SEND_INFO;
        c->off = 0;
        break;
      }
      case CONN_SEND_INFO:
        COMMCHECK(commSocketProgress(c->fd, 1, &c->local, sizeof(c->local), &c->off));
        if (c->off < sizeof(c->local)) return commSuccess;
        c->stage = CONN_RECV_INFO; /* connect() returns here: the rest needs the peer's accept() */
        c->off = 0;
        return commSuccess;
      case CONN_RECV_INFO:
        COMMCHECK(commSocketProgress(c->fd, 0, &c->remote, sizeof(c->remote), &c->off));
        if (c->off < sizeof(c->remote)) return commSuccess;
        if (c->remote.magic != IB_MAGIC || c->remote.nQps != (uint32_t)c->nQps) {
          WARN("NET/IB : bad connection information from %s", c->peerStr);
          return commRemoteError;
        }
        COMMCHECK(ibConnectQps(c));
        c->stage = CONN_SEND_READY;
        c->off = 0;
        c->ready = 1;
        break;
      case CONN_SEND_READY:
        COMMCHECK(commSocketProgress(c->fd, 1, &c->ready, 1, &c->off));
        if (c->off < 1) return commSuccess;
        c->stage = CONN_DONE;
        c->up = 1;
        close(c->fd);
        c->fd = -1;
        INFO(COMM_NET | COMM_IB, "NET/IB : %s: QPs to %s are up", ibDevName(c), c->peerStr);
        return commSuccess;
      default:
        return commSuccess;
    }
  }
}

static commResult_t ibConnect(int dev, void* handle, void** sendComm) {
  *sendComm = NULL;
  ibHandle* h = (ibHandle*)handle;
  ibComm* c = (ibComm*)h->stageComm;
  if (!c) {
    if (dev < 0 || dev >= ibNDevs) {
      WARN("NET/IB : connect on invalid device %d", dev);
      return commInvalidArgument;
    }
    COMMCHECK(ibNewComm(dev, 1, ibNumQps(), &c));
    commSocketAddrStr(&h->addr, c->peerStr, sizeof(c->peerStr));
    ibSetDeadline(c);
    c->local.listenMagic = h->magic;
    h->stageComm = c;
  }
  commResult_t res = ibConnectStep(c, h);
  if (res == commSuccess && c->stage < CONN_RECV_INFO && commTimeNs() > c->deadline) {
    WARN("NET/IB : connection to %s timed out (%s, COMM_TIMEOUT_MS=%lld)", c->peerStr,
         c->stage == CONN_TCP ? "no listener" : "no answer", (long long)c->timeoutMs);
    res = commTimeout;
  }
  if (res != commSuccess) {
    h->stageComm = NULL;
    ibFreeComm(c);
    return res;
  }
  if (c->stage < CONN_RECV_INFO) return commSuccess;
  h->stageComm = NULL;
  INFO(COMM_NET | COMM_IB, "NET/IB : %s: connected to %s with %d QP(s)", ibDevName(c), c->peerStr, c->nQps);
  *sendComm = c;
  return commSuccess;
}

enum { ACC_RECV_INFO = 0, ACC_SEND_INFO, ACC_RECV_READY, ACC_DONE, ACC_DROP };

static commResult_t ibAcceptStep(ibListen* l, ibComm* c) {
  for (;;) {
    switch (c->stage) {
      case ACC_RECV_INFO: {
        /* A connection that closes or says something else is not ours: dropped, the listener goes on. */
        if (commSocketProgress(c->fd, 0, &c->remote, sizeof(c->remote), &c->off) != commSuccess) {
          c->stage = ACC_DROP;
          return commSuccess;
        }
        if (c->off < sizeof(c->remote)) return commSuccess;
        if (c->remote.magic != IB_MAGIC || c->remote.listenMagic != l->magic || c->remote.nQps < 1 ||
            c->remote.nQps > IB_MAX_QPS) {
          WARN("NET/IB : rejecting connection from %s (bad connection information)", c->peerStr);
          c->stage = ACC_DROP;
          return commSuccess;
        }
        /* The verbs resources, now that the number of QPs is known. */
        ibComm* n;
        COMMCHECK(ibNewComm(l->dev, 0, (int)c->remote.nQps, &n));
        n->fd = c->fd;
        c->fd = -1;
        n->remote = c->remote;
        n->deadline = c->deadline;
        n->timeoutMs = c->timeoutMs;
        memcpy(n->peerStr, c->peerStr, sizeof(n->peerStr));
        n->remFifoAddr = c->remote.fifoAddr;
        n->remFifoRkey = c->remote.fifoRkey;
        ibFreeComm(c);
        l->pending = c = n;
        COMMCHECK(ibConnectQps(c));
        c->stage = ACC_SEND_INFO;
        c->off = 0;
        break;
      }
      case ACC_SEND_INFO:
        COMMCHECK(commSocketProgress(c->fd, 1, &c->local, sizeof(c->local), &c->off));
        if (c->off < sizeof(c->local)) return commSuccess;
        c->stage = ACC_RECV_READY; /* accept() returns here; the ready byte is awaited by irecv()/test() */
        c->off = 0;
        return commSuccess;
      case ACC_RECV_READY:
        COMMCHECK(commSocketProgress(c->fd, 0, &c->ready, 1, &c->off));
        if (c->off < 1) return commSuccess;
        c->stage = ACC_DONE;
        c->up = 1;
        close(c->fd);
        c->fd = -1;
        return commSuccess;
      default:
        return commSuccess;
    }
  }
}

static commResult_t ibAccept(void* listenComm, void** recvComm) {
  *recvComm = NULL;
  ibListen* l = (ibListen*)listenComm;
  if (!l) return commInvalidArgument;
  if (!l->pending) {
    commSockAddr addr;
    socklen_t len = sizeof(addr);
    int fd = accept4(l->fd, &addr.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return commSuccess;
      WARN("NET/IB : accept failed: %s", strerror(errno));
      return commSystemError;
    }
    ibComm* c;
    commResult_t res = commCalloc(&c, 1, sizeof(*c)); /* a placeholder until the QP count is known */
    if (res != commSuccess) {
      close(fd);
      return res;
    }
    c->fd = fd;
    c->dev = l->dev;
    commSocketSetNoDelay(fd);
    commSocketAddrStr(&addr, c->peerStr, sizeof(c->peerStr));
    ibSetDeadline(c);
    l->pending = c;
  }
  commResult_t res = ibAcceptStep(l, l->pending);
  ibComm* c = l->pending;
  if (res == commSuccess && c->stage == ACC_DROP) {
    l->pending = NULL;
    ibFreeComm(c);
    return commSuccess;
  }
  if (res == commSuccess && c->stage < ACC_RECV_READY && commTimeNs() > c->deadline) {
    WARN("NET/IB : connection from %s timed out during setup", c->peerStr);
    res = commTimeout;
  }
  if (res != commSuccess) {
    l->pending = NULL;
    ibFreeComm(c);
    return res;
  }
  if (c->stage < ACC_RECV_READY) return commSuccess;
  l->pending = NULL;
  INFO(COMM_NET | COMM_IB, "NET/IB : %s: accepted %s with %d QP(s)", ibDevName(c), c->peerStr, c->nQps);
  *recvComm = c;
  return commSuccess;
}

/* ---------------------------------------------------------------- memory */

static commResult_t ibRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  *mhandle = NULL;
  ibComm* c = (ibComm*)comm;
  if (!c || (type != COMM_PTR_HOST && type != COMM_PTR_CUDA)) {
    WARN("NET/IB : cannot register memory of type %d (host %d or CUDA %d)", type, COMM_PTR_HOST, COMM_PTR_CUDA);
    return commInvalidArgument;
  }
  int gpu = -1;
  if (type == COMM_PTR_CUDA && (gpu = ibGdrDeviceOf(data)) < 0) {
    WARN("NET/IB : %s: %p was registered as CUDA memory but is not device memory", ibDevName(c), data);
    return commInvalidArgument;
  }
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t pg = page > 0 ? (uintptr_t)page : 4096;
  uintptr_t start = (uintptr_t)data & ~(pg - 1);
  uintptr_t end = ((uintptr_t)data + (size ? size : 1) + pg - 1) & ~(pg - 1);
  for (ibMr* m = c->mrs; m; m = m->next) { /* the registration cache: each range once */
    if (m->gpu == gpu && m->start <= start && end <= m->end) {
      m->refs++;
      *mhandle = m;
      return commSuccess;
    }
  }
  ibMr* m;
  COMMCHECK(commCalloc(&m, 1, sizeof(*m)));
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  m->gpu = gpu;
  if (gpu >= 0) {
    ibGdrReg reg;
    commResult_t res = ibGdrRegister(ibV, c->pd, ibDevName(c), gpu, data, size, access, &reg);
    if (res != commSuccess) {
      free(m);
      return res;
    }
    m->mr = reg.mr;
    INFO(COMM_NET | COMM_IB, "NET/IB : %s: registered %zu bytes of GPU %d memory through %s", ibDevName(c),
         (size_t)(reg.end - reg.start), gpu, ibGdrPathName(reg.path));
  } else if (!(m->mr = ibV->regMr(c->pd, (void*)start, end - start, access))) {
    WARN("NET/IB : %s: cannot register %zu bytes at %p: %s", ibDevName(c), size, data, strerror(errno));
    free(m);
    return commSystemError;
  }
  m->start = start;
  m->end = end;
  m->refs = 1;
  m->next = c->mrs;
  c->mrs = m;
  *mhandle = m;
  return commSuccess;
}

static commResult_t ibDeregMr(void* comm, void* mhandle) {
  ibComm* c = (ibComm*)comm;
  if (!mhandle) return commSuccess;
  if (!c) return commInvalidArgument;
  ibMr* m = (ibMr*)mhandle;
  ibMr** pp = &c->mrs;
  while (*pp && *pp != m) pp = &(*pp)->next;
  if (!*pp) {
    WARN("NET/IB : %s: deregistration of a handle this comm did not register", ibDevName(c));
    return commInvalidArgument;
  }
  if (--m->refs > 0) return commSuccess;
  *pp = m->next;
  int err = ibV->deregMr(m->mr);
  free(m);
  if (err) {
    WARN("NET/IB : %s: deregistration failed: %s", ibDevName(c), strerror(err));
    return commSystemError;
  }
  return commSuccess;
}

/* ---------------------------------------------------------------- data path */

static commResult_t ibCompletionError(ibComm* c, const struct ibv_wc* wc) {
  c->err = 1;
  WARN("NET/IB : %s: %s completion error on QP %u (peer %s): %s (status %d, vendor error %u)", ibDevName(c),
       c->isSend ? "send" : "receive", wc->qp_num, c->peerStr, ibV->wcStatusStr(wc->status), (int)wc->status,
       wc->vendor_err);
  return commRemoteError;
}

static commResult_t ibUpProgress(ibComm* c);

/* Receiver wr_ids: the request slot, | this bit for the credit (CTS) write. */
#define IB_WRID_CTS 0x100u

static commResult_t ibPollCq(ibComm* c) {
  struct ibv_wc wc[IB_POLL_BATCH];
  for (;;) {
    int n = ibV->pollCq(c->cq, IB_POLL_BATCH, wc);
    if (n < 0) {
      c->err = 1;
      WARN("NET/IB : %s: polling the CQ failed (peer %s)", ibDevName(c), c->peerStr);
      return commSystemError;
    }
    for (int i = 0; i < n; i++) {
      if (wc[i].status != IBV_WC_SUCCESS) return ibCompletionError(c, &wc[i]);
      if (wc[i].wr_id & IB_WRID_CTS) continue;
      ibReq* r = &c->reqs[wc[i].wr_id % IB_NREQ];
      if (!c->isSend) r->got += ntohl(wc[i].imm_data);
      r->pending--;
    }
    if (n < IB_POLL_BATCH) return commSuccess;
  }
}

/* Sender: post the data of the requests whose credit arrived, in order. */
static commResult_t ibSendProgress(ibComm* c) {
  COMMCHECK(ibUpProgress(c));
  if (!c->up) return commSuccess;
  while (c->started < c->posted) {
    ibReq* r = &c->reqs[c->started % IB_NREQ];
    volatile ibCts* slot = &c->fifo[c->started % IB_NREQ];
    if (__atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE) != c->started + 1) return commSuccess;
    ibCts cts;
    cts.addr = slot->addr;
    cts.size = slot->size;
    cts.rkey = slot->rkey;
    cts.tag = slot->tag;
    if (cts.tag != r->tag) {
      WARN("NET/IB : %s: message %llu to %s: tag %d but the receiver posted tag %d", ibDevName(c),
           (unsigned long long)r->seq, c->peerStr, r->tag, cts.tag);
      c->err = 1;
      return commInternalError;
    }
    if (r->size > cts.size) {
      WARN("NET/IB : %s: message %llu of %zu bytes to %s is larger than the posted receive (%llu bytes)",
           ibDevName(c), (unsigned long long)r->seq, r->size, c->peerStr, (unsigned long long)cts.size);
      c->err = 1;
      return commInternalError;
    }
    /* One write per QP (possibly empty), so the receiver expects exactly nQps pieces. */
    size_t chunk = (r->size + (size_t)c->nQps - 1) / (size_t)c->nQps;
    chunk = (chunk + 127) & ~(size_t)127;
    for (int q = 0; q < c->nQps; q++) {
      size_t off = (size_t)q * chunk;
      size_t len = off < r->size ? (r->size - off < chunk ? r->size - off : chunk) : 0;
      struct ibv_sge sge;
      struct ibv_send_wr wr, *bad = NULL;
      memset(&wr, 0, sizeof(wr));
      sge.addr = (uint64_t)(uintptr_t)(r->data + (len ? off : 0));
      sge.length = (uint32_t)len;
      sge.lkey = r->lkey;
      wr.wr_id = r->seq % IB_NREQ;
      wr.sg_list = len ? &sge : NULL;
      wr.num_sge = len ? 1 : 0;
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.imm_data = htonl((uint32_t)len);
      wr.wr.rdma.remote_addr = cts.addr + (len ? off : 0);
      wr.wr.rdma.rkey = cts.rkey;
      int err = ibV->postSend(c->qps[q], &wr, &bad);
      if (err) {
        WARN("NET/IB : %s: post of %zu bytes on QP %u (peer %s) failed: %s", ibDevName(c), len,
             c->qps[q]->qp_num, c->peerStr, strerror(err));
        c->err = 1;
        return commSystemError;
      }
    }
    r->posted = 1;
    c->started++;
  }
  return commSuccess;
}

static commResult_t ibIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  *request = NULL;
  ibComm* c = (ibComm*)sendComm;
  if (!c || !c->isSend) return commInvalidArgument;
  if (c->err) return commRemoteError;
  if (size > IB_MAX_MESSAGE || (size > 0 && !mhandle)) {
    WARN("NET/IB : isend of %zu bytes %s", size, mhandle ? "is too large" : "without a registration");
    return commInvalidArgument;
  }
  ibReq* r = &c->reqs[c->posted % IB_NREQ];
  if (r->used) return commSuccess; /* no credit slot free: the caller retries */
  memset(r, 0, sizeof(*r));
  r->comm = c;
  r->used = 1;
  r->seq = c->posted++;
  r->data = (char*)data;
  r->size = size;
  r->tag = tag;
  r->lkey = mhandle ? ((ibMr*)mhandle)->mr->lkey : 0;
  r->pending = c->nQps;
  *request = r;
  return ibSendProgress(c);
}

/* Connection bring-up after connect()/accept() returned (see ibConnectStep): commTimeout past the
 * deadline. */
static commResult_t ibUpProgress(ibComm* c) {
  if (c->up) return commSuccess;
  commResult_t res = c->isSend ? ibConnectStep(c, NULL) : ibAcceptStep(NULL, c);
  if (res == commSuccess && !c->up && commTimeNs() > c->deadline) {
    WARN("NET/IB : %s: connection %s %s timed out (no answer, COMM_TIMEOUT_MS=%lld)", ibDevName(c),
         c->isSend ? "to" : "from", c->peerStr, (long long)c->timeoutMs);
    res = commTimeout;
  }
  if (res != commSuccess) c->err = 1;
  return res;
}

/* Receiver: post the credits of the posted receives, in order, once the QPs are up. */
static commResult_t ibRecvProgress(ibComm* c) {
  COMMCHECK(ibUpProgress(c));
  if (!c->up) return commSuccess;
  while (c->started < c->posted) {
    uint64_t seq = c->started;
    ibCts* cts = &c->fifo[seq % IB_NREQ];
    struct ibv_sge sge = {(uint64_t)(uintptr_t)cts, (uint32_t)sizeof(*cts), c->fifoMr->lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = IB_WRID_CTS | (seq % IB_NREQ);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = c->remFifoAddr + (seq % IB_NREQ) * sizeof(ibCts);
    wr.wr.rdma.rkey = c->remFifoRkey;
    int err = ibV->postSend(c->qps[0], &wr, &bad);
    if (err) {
      WARN("NET/IB : %s: posting the credit on QP %u (peer %s) failed: %s", ibDevName(c), c->qps[0]->qp_num,
           c->peerStr, strerror(err));
      c->err = 1;
      return commSystemError;
    }
    c->started++;
  }
  return commSuccess;
}

static commResult_t ibIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                            void** request) {
  *request = NULL;
  ibComm* c = (ibComm*)recvComm;
  if (!c || c->isSend || n != 1) {
    WARN("NET/IB : irecv supports exactly one buffer (n=%d)", n);
    return commInvalidArgument;
  }
  if (c->err) return commRemoteError;
  if (sizes[0] > 0 && (!mhandles || !mhandles[0])) {
    WARN("NET/IB : irecv of %zu bytes without a registration", sizes[0]);
    return commInvalidArgument;
  }
  uint64_t seq = c->posted;
  ibReq* r = &c->reqs[seq % IB_NREQ];
  if (r->used) return commSuccess;
  /* The receives first (one per QP: each piece consumes one), then the credit. */
  for (int q = 0; q < c->nQps; q++) {
    struct ibv_recv_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = seq % IB_NREQ;
    int err = ibV->postRecv(c->qps[q], &wr, &bad);
    if (err) {
      WARN("NET/IB : %s: posting a receive on QP %u (peer %s) failed: %s", ibDevName(c), c->qps[q]->qp_num,
           c->peerStr, strerror(err));
      c->err = 1;
      return commSystemError;
    }
  }
  memset(r, 0, sizeof(*r));
  r->comm = c;
  r->used = 1;
  r->seq = seq;
  r->cap = sizes[0];
  r->pending = c->nQps;
  c->posted++;
  ibCts* cts = &c->fifo[seq % IB_NREQ];
  cts->addr = (uint64_t)(uintptr_t)data[0];
  cts->size = sizes[0];
  cts->rkey = sizes[0] > 0 ? ((ibMr*)mhandles[0])->mr->rkey : 0;
  cts->tag = tags ? tags[0] : 0;
  cts->seq = seq + 1;
  *request = r;
  return ibRecvProgress(c);
}

/* Device buffers the NIC wrote: flushed where the GPU needs it (ib_gdr.c), at once; host memory needs
 * nothing. No request is left to test. */
static commResult_t ibIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  (void)recvComm;
  (void)data;
  *request = NULL;
  for (int i = 0; i < n; i++) {
    const ibMr* m = mhandles ? (const ibMr*)mhandles[i] : NULL;
    if (m && m->gpu >= 0 && sizes[i] > 0) COMMCHECK(ibGdrFlush(m->gpu));
  }
  return commSuccess;
}

static commResult_t ibTest(void* request, int* done, size_t* sizes) {
  ibReq* r = (ibReq*)request;
  *done = 0;
  if (!r || !r->used) return commInvalidArgument;
  ibComm* c = r->comm;
  if (c->err) return commRemoteError;
  COMMCHECK(c->isSend ? ibSendProgress(c) : ibRecvProgress(c));
  if (c->up) COMMCHECK(ibPollCq(c));
  if (c->isSend) COMMCHECK(ibSendProgress(c));
  if (r->pending > 0 || (c->isSend && !r->posted)) return commSuccess;
  *done = 1;
  if (sizes) sizes[0] = c->isSend ? r->size : r->got;
  r->used = 0;
  return commSuccess;
}

static commResult_t ibCloseComm(void* comm) {
  ibFreeComm((ibComm*)comm);
  return commSuccess;
}

static commResult_t ibCloseListen(void* listenComm) {
  ibListen* l = (ibListen*)listenComm;
  if (!l) return commSuccess;
  ibFreeComm(l->pending);
  if (l->fd >= 0) close(l->fd);
  free(l);
  return commSuccess;
}

struct ibv_qp* commNetIbCommQp(void* comm, int i) {
  ibComm* c = (ibComm*)comm;
  return c && i >= 0 && i < c->nQps ? c->qps[i] : NULL;
}

int commNetIbCommNumQps(void* comm) { return comm ? ((ibComm*)comm)->nQps : 0; }

static const commNet_t ibNet = {
    .name = "IB",
    .version = COMM_NET_PLUGIN_VERSION,
    .init = ibInit,
    .devices = ibDevices,
    .getProperties = ibGetProperties,
    .listen = ibListenFn,
    .connect = ibConnect,
    .accept = ibAccept,
    .regMr = ibRegMr,
    .deregMr = ibDeregMr,
    .isend = ibIsend,
    .irecv = ibIrecv,
    .iflush = ibIflush,
    .test = ibTest,
    .closeSend = ibCloseComm,
    .closeRecv = ibCloseComm,
    .closeListen = ibCloseListen,
    .connectPaired = NULL,
};

const commNet_t* commNetIbPlugin(const commIbVerbs* verbs) {
  pthread_mutex_lock(&ibLock);
  ibV = verbs;
  pthread_mutex_unlock(&ibLock);
  return &ibNet;
}

#else
typedef int commNetIbNoVerbs_t; /* without <infiniband/verbs.h>: nothing */
#endif /* COMM_HAVE_IBVERBS */
