/* The IB network plugin's connections: verbs resources (device, PD, CQ, credit FIFO, QPs) and the
 * non-blocking listen / connect / accept over a TCP socket (net_ib.h has the design, net_ib_int.h the
 * shared structures). SPDX-License-Identifier: Apache-2.0 */
#include "net_ib_int.h"

#ifdef COMM_HAVE_IBVERBS
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "param.h"
#include "utils.h"

/* ---------------------------------------------------------------- verbs resources */

/* Connection setup gives up after COMM_TIMEOUT_MS (-1: never), as libcomm's own waits. */
static void ibSetDeadline(ibComm* c) {
  c->timeoutMs = commParamInt("COMM_TIMEOUT_MS", 600000, -1, INT64_MAX / 1000000);
  c->deadline = commDeadlineNs(c->timeoutMs);
}

static int ibNumQps(void) { return (int)commParamInt("COMM_IB_QPS_PER_CONNECTION", 1, 1, IB_MAX_QPS); }

void commNetIbFreeComm(ibComm* c) {
  if (!c) return;
  const commIbVerbs* v = commNetIbTable;
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
  const commIbVerbs* v = commNetIbTable;
  *out = NULL;
  ibComm* c;
  COMMCHECK(commCalloc(&c, 1, sizeof(*c)));
  c->isSend = isSend;
  c->dev = dev;
  c->fd = -1;
  c->nQps = nQps;
  const commIbPort* p = &commNetIbPorts[dev];
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
  commNetIbFreeComm(c);
  return res;
}

/* INIT -> RTR -> RTS against the peer's information in c->remote. */
static commResult_t ibConnectQps(ibComm* c) {
  const commIbVerbs* v = commNetIbTable;
  const commIbPort* p = &commNetIbPorts[c->dev];
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
      WARN("NET/IB : %s: QP %u to RTR (peer %s QP %u) failed: %s", p->devName, c->qps[i]->qp_num, c->peerStr, r->qpn[i],
           strerror(err));
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

commResult_t commNetIbListen(int dev, void* handle, void** listenComm) {
  *listenComm = NULL;
  if (dev < 0 || dev >= commNetIbNDevs || !commNetIbHaveIf) {
    WARN("NET/IB : listen on invalid device %d", dev);
    return commInvalidArgument;
  }
  ibListen* l;
  COMMCHECK(commCalloc(&l, 1, sizeof(*l)));
  commResult_t res;
  commSockAddr addr = commNetIbIfAddr;
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
commResult_t commNetIbConnectStep(ibComm* c, const ibHandle* h) {
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
      default: return commSuccess;
    }
  }
}

commResult_t commNetIbConnect(int dev, void* handle, void** sendComm) {
  *sendComm = NULL;
  ibHandle* h = (ibHandle*)handle;
  ibComm* c = (ibComm*)h->stageComm;
  if (!c) {
    if (dev < 0 || dev >= commNetIbNDevs) {
      WARN("NET/IB : connect on invalid device %d", dev);
      return commInvalidArgument;
    }
    COMMCHECK(ibNewComm(dev, 1, ibNumQps(), &c));
    commSocketAddrStr(&h->addr, c->peerStr, sizeof(c->peerStr));
    ibSetDeadline(c);
    c->local.listenMagic = h->magic;
    h->stageComm = c;
  }
  commResult_t res = commNetIbConnectStep(c, h);
  if (res == commSuccess && c->stage < CONN_RECV_INFO && commTimeNs() > c->deadline) {
    WARN("NET/IB : connection to %s timed out (%s, COMM_TIMEOUT_MS=%lld)", c->peerStr,
         c->stage == CONN_TCP ? "no listener" : "no answer", (long long)c->timeoutMs);
    res = commTimeout;
  }
  if (res != commSuccess) {
    h->stageComm = NULL;
    commNetIbFreeComm(c);
    return res;
  }
  if (c->stage < CONN_RECV_INFO) return commSuccess;
  h->stageComm = NULL;
  INFO(COMM_NET | COMM_IB, "NET/IB : %s: connected to %s with %d QP(s)", ibDevName(c), c->peerStr, c->nQps);
  *sendComm = c;
  return commSuccess;
}

enum { ACC_RECV_INFO = 0, ACC_SEND_INFO, ACC_RECV_READY, ACC_DONE, ACC_DROP };

commResult_t commNetIbAcceptStep(ibListen* l, ibComm* c) {
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
        commNetIbFreeComm(c);
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
      default: return commSuccess;
    }
  }
}

commResult_t commNetIbAccept(void* listenComm, void** recvComm) {
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
  commResult_t res = commNetIbAcceptStep(l, l->pending);
  ibComm* c = l->pending;
  if (res == commSuccess && c->stage == ACC_DROP) {
    l->pending = NULL;
    commNetIbFreeComm(c);
    return commSuccess;
  }
  if (res == commSuccess && c->stage < ACC_RECV_READY && commTimeNs() > c->deadline) {
    WARN("NET/IB : connection from %s timed out during setup", c->peerStr);
    res = commTimeout;
  }
  if (res != commSuccess) {
    l->pending = NULL;
    commNetIbFreeComm(c);
    return res;
  }
  if (c->stage < ACC_RECV_READY) return commSuccess;
  l->pending = NULL;
  INFO(COMM_NET | COMM_IB, "NET/IB : %s: accepted %s with %d QP(s)", ibDevName(c), c->peerStr, c->nQps);
  *recvComm = c;
  return commSuccess;
}

#else
typedef int commNetIbConnNoVerbs_t; /* without <infiniband/verbs.h>: nothing */
#endif /* COMM_HAVE_IBVERBS */
