/* The Socket plugin's connections: listen, connect (plain and paired), accept, close (the protocol is described
 * at the top of net_socket.c). SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "check.h"
#include "comm_net.h"
#include "debug.h"
#include "param.h"
#include "socket.h"
#include "topo.h"
#include "transport.h"
#include "utils.h"
#include "net_socket_internal.h"

commResult_t sockListenFn(int dev, void* handle, void** listenComm) {
  *listenComm = NULL;
  if (dev < 0 || dev >= sockNDevs || !sockInitDone) {
    WARN("NET/Socket : listen on invalid device %d", dev);
    return commInvalidArgument;
  }
  sockListen* l;
  COMMCHECK(commCalloc(&l, 1, sizeof(*l)));
  commSockAddr addr = sockIfAddrs[dev];
  if (addr.sa.sa_family == AF_INET) addr.sin.sin_port = 0;
  else addr.sin6.sin6_port = 0;
  commResult_t res;
  uint64_t magic;
  COMMCHECKGOTO(commRandom64(&magic), res, fail);
  COMMCHECKGOTO(commSocketListen(&addr, &l->fd), res, fail);
  l->magic = (uint32_t)(magic & SOCK_HELLO_MAGIC_MASK);
  l->count = -1;
  l->dev = dev;
  for (int i = 0; i <= SOCK_MAX_DATA; i++) l->fds[i] = -1;
  sockHandle* h = (sockHandle*)handle;
  memset(h, 0, sizeof(*h));
  h->addr = addr;
  h->magic = l->magic;
  *listenComm = l;
  return commSuccess;
fail:
  free(l);
  return res;
}

/* Connects the sockets of send comm c to the listener of handle h: the control socket (when withCtrl) with
 * ctrlFlags in its hello, then the data sockets. */
static commResult_t sockConnectSockets(sockComm* c, const sockHandle* h, int withCtrl, uint16_t ctrlFlags) {
  int64_t deadline = commTimeNs() + (int64_t)SOCK_CONNECT_MS * 1000000;
  for (int i = withCtrl ? 0 : 1; i <= c->nData; i++) {
    int fd = -1;
    COMMCHECK(commSocketConnectListening(&h->addr, &fd, deadline, NULL));
    if (i == 0) c->ctrlFd = fd;
    else c->dataFds[i - 1] = fd;
    sockTune(fd);
    sockHello hello = {(uint32_t)(h->magic & SOCK_HELLO_MAGIC_MASK), (uint16_t)(i | (i == 0 ? ctrlFlags : 0)),
                       (uint16_t)c->nData};
    COMMCHECK(commSocketSendAll(fd, &hello, sizeof(hello), deadline, NULL));
  }
  if (c->ctrlFd >= 0) COMMCHECK(commSocketSetNonBlocking(c->ctrlFd, 1));
  for (int i = 0; i < c->nData; i++) COMMCHECK(commSocketSetNonBlocking(c->dataFds[i], 0));
  return commSuccess;
}

static commResult_t sockNewSend(int dev, const sockHandle* h, sockComm** out) {
  *out = NULL;
  if (dev < 0 || dev >= sockNDevs) {
    WARN("NET/Socket : connect on invalid device %d", dev);
    return commInvalidArgument;
  }
  int nt, ns;
  sockConfig(&nt, &ns);
  COMMCHECK(sockNewComm(1, nt * ns, out));
  (*out)->dev = dev;
  commSocketAddrStr(&h->addr, (*out)->peerStr, sizeof((*out)->peerStr));
  return commSuccess;
}

commResult_t sockConnect(int dev, void* handle, void** sendComm) {
  *sendComm = NULL;
  const sockHandle* h = (const sockHandle*)handle;
  sockComm* c;
  COMMCHECK(sockNewSend(dev, h, &c));
  commResult_t res = sockConnectSockets(c, h, 1, 0);
  if (res != commSuccess) {
    WARN("NET/Socket : could not connect to %s", c->peerStr);
    sockFreeComm(c);
    return res;
  }
  TRACE(COMM_NET, "NET/Socket : connected to %s with %d data sockets", c->peerStr, c->nData);
  *sendComm = c;
  return commSuccess;
}

commResult_t sockConnectPaired(int dev, void* handle, void* pairListen, void** sendComm) {
  *sendComm = NULL;
  const sockHandle* h = (const sockHandle*)handle;
  sockListen* l = (sockListen*)pairListen;
  uint32_t peerMagic = (uint32_t)(h->magic & SOCK_HELLO_MAGIC_MASK);
  /* Both sides compare the same two magics, so they agree on the roles (and on not pairing at all). */
  if (l == NULL || l->magic == peerMagic) return sockConnect(dev, handle, sendComm);
  if (l->pairShared) {
    WARN("NET/Socket : listener already paired");
    return commInternalError;
  }
  int connector = l->magic < peerMagic;
  sockComm* c;
  COMMCHECK(sockNewSend(dev, h, &c));
  commResult_t res = commCalloc(&c->shared, 1, sizeof(sockShared));
  if (res != commSuccess) {
    sockFreeComm(c);
    return res;
  }
  c->shared->fd = -1;
  c->shared->refs = 1; /* the send comm's; the listener's is added below */
  /* The connection's own sockets, as unpaired; its control socket becomes the private one. */
  res = sockConnectSockets(c, h, 1, 0);
  c->privFd = c->ctrlFd;
  c->ctrlFd = -1;
  if (res == commSuccess && connector) {
    int64_t deadline = commTimeNs() + (int64_t)SOCK_CONNECT_MS * 1000000;
    int fd = -1;
    sockHello hello = {peerMagic, (uint16_t)SOCK_HELLO_PAIRED, (uint16_t)c->nData};
    res = commSocketConnectListening(&h->addr, &fd, deadline, NULL);
    if (res == commSuccess) {
      c->ctrlFd = fd;
      sockTune(fd);
      res = commSocketSendAll(fd, &hello, sizeof(hello), deadline, NULL);
    }
    if (res == commSuccess) res = commSocketSetNonBlocking(fd, 1);
  }
  if (res != commSuccess) {
    WARN("NET/Socket : could not connect to %s", c->peerStr);
    sockFreeComm(c);
    return res;
  }
  c->shared->refs = 2;
  l->pairShared = c->shared;
  if (connector) {
    __atomic_store_n(&c->shared->fd, c->ctrlFd, __ATOMIC_RELEASE); /* the receive connection's too */
  } else {
    l->pairExpect = 1;
  }
  TRACE(COMM_NET, "NET/Socket : connected to %s with %d data sockets, paired (%s)", c->peerStr, c->nData,
        connector ? "shared socket connected here" : "shared socket arriving on the paired listener");
  *sendComm = c;
  return commSuccess;
}

static void sockDropPending(sockListen* l, int i) {
  l->pending[i] = l->pending[l->nPending - 1];
  l->nPending--;
}

commResult_t sockAccept(void* listenComm, void** recvComm) {
  *recvComm = NULL;
  sockListen* l = (sockListen*)listenComm;
  if (!l) return commInvalidArgument;
  char buf[96];
  /* New connections. */
  while (l->nPending < SOCK_MAX_PENDING) {
    commSockAddr addr;
    socklen_t len = sizeof(addr);
    int fd = accept4(l->fd, &addr.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      WARN("NET/Socket : accept failed: %s", strerror(errno));
      return commSystemError;
    }
    sockPending* p = &l->pending[l->nPending++];
    memset(p, 0, sizeof(*p));
    p->fd = fd;
    p->addr = addr;
  }
  /* Hellos. */
  for (int i = 0; i < l->nPending;) {
    sockPending* p = &l->pending[i];
    ssize_t s = recv(p->fd, (char*)&p->hello + p->off, sizeof(sockHello) - p->off, MSG_DONTWAIT);
    if (s < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      i++;
      continue;
    }
    if (s <= 0) {
      INFO(COMM_NET, "NET/Socket : dropping connection from %s before its hello",
           commSocketAddrStr(&p->addr, buf, sizeof(buf)));
      close(p->fd);
      sockDropPending(l, i);
      continue;
    }
    p->off += (size_t)s;
    if (p->off < sizeof(sockHello)) { /* read the rest on the next pass */
      i++;
      continue;
    }
    sockHello h = p->hello;
    if (h.index == SOCK_HELLO_PAIRED) {
      /* The shared socket of a paired connection: only where one is expected, once. */
      int ok = h.magic == l->magic && l->pairExpect && __atomic_load_n(&l->pairShared->fd, __ATOMIC_ACQUIRE) < 0;
      if (!ok) {
        WARN("NET/Socket : rejecting connection from %s (unexpected shared socket)",
             commSocketAddrStr(&p->addr, buf, sizeof(buf)));
        close(p->fd);
      } else {
        sockTune(p->fd);
        __atomic_store_n(&l->pairShared->fd, p->fd, __ATOMIC_RELEASE); /* to the send connection too */
      }
      sockDropPending(l, i);
      continue;
    }
    int ok = h.magic == l->magic && h.count >= 1 && h.count <= SOCK_MAX_DATA && h.index <= h.count &&
             (l->count < 0 || l->count == h.count) && l->fds[h.index] < 0;
    if (!ok) {
      WARN("NET/Socket : rejecting connection from %s (bad hello)", commSocketAddrStr(&p->addr, buf, sizeof(buf)));
      close(p->fd);
    } else {
      l->count = h.count;
      l->fds[h.index] = p->fd;
      if (h.index == 0) l->fdAddr = p->addr;
      l->nGot++;
    }
    sockDropPending(l, i);
  }
  if (l->count < 0 || l->nGot < l->count + 1) return commSuccess;
  if (l->pairShared && __atomic_load_n(&l->pairShared->fd, __ATOMIC_ACQUIRE) < 0) return commSuccess;

  sockComm* c;
  COMMCHECK(sockNewComm(0, l->count, &c));
  commResult_t res = l->pairShared ? commCalloc(&c->stage[1], SOCK_STAGE_BYTES, 1) : commSuccess;
  if (res != commSuccess) {
    sockFreeComm(c);
    return res;
  }
  c->ctrlFd = l->fds[0];
  c->dev = l->dev;
  if (l->pairShared) { /* the shared socket first, the own control socket is the private one */
    c->privFd = c->ctrlFd;
    c->ctrlFd = __atomic_load_n(&l->pairShared->fd, __ATOMIC_ACQUIRE);
    c->shared = l->pairShared; /* the listener's reference passes to the connection */
    l->pairShared = NULL;
    l->pairExpect = 0;
  }
  for (int i = 0; i < l->count; i++) c->dataFds[i] = l->fds[i + 1];
  for (int i = 0; i <= l->count; i++) l->fds[i] = -1;
  l->count = -1;
  l->nGot = 0;
  commSocketAddrStr(&l->fdAddr, c->peerStr, sizeof(c->peerStr));
  sockTune(c->ctrlFd);
  if (c->privFd >= 0) sockTune(c->privFd);
  for (int i = 0; i < c->nData; i++) {
    sockTune(c->dataFds[i]);
    COMMCHECKGOTO(commSocketSetNonBlocking(c->dataFds[i], 0), res, fail);
  }
  TRACE(COMM_NET, "NET/Socket : accepted %s with %d data sockets", c->peerStr, c->nData);
  *recvComm = c;
  return commSuccess;
fail:
  sockFreeComm(c);
  return res;
}

commResult_t sockCloseSend(void* sendComm) {
  sockFreeComm((sockComm*)sendComm);
  return commSuccess;
}

commResult_t sockCloseRecv(void* recvComm) {
  sockFreeComm((sockComm*)recvComm);
  return commSuccess;
}

commResult_t sockCloseListen(void* listenComm) {
  sockListen* l = (sockListen*)listenComm;
  if (!l) return commSuccess;
  for (int i = 0; i < l->nPending; i++) close(l->pending[i].fd);
  for (int i = 0; i <= SOCK_MAX_DATA; i++)
    if (l->fds[i] >= 0) close(l->fds[i]);
  if (l->pairShared) {
    /* An acceptor's send connection still waiting for the shared socket would wait forever: tell it. */
    int expected = -1;
    if (l->pairExpect)
      __atomic_compare_exchange_n(&l->pairShared->fd, &expected, SOCK_SHARED_DEAD, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE);
    sockSharedRelease(l->pairShared, 0);
  }
  if (l->fd >= 0) close(l->fd);
  free(l);
  return commSuccess;
}
