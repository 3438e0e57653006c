/* The built-in "Socket" network plugin (commNet_v2_t over TCP).
 *
 * Wire protocol of one connection (sender -> receiver):
 *  - a control socket (hello index 0) and nData data sockets (hello index 1..nData); every socket starts
 *    with an 8-byte hello {magic (low 32 bits of the handle's magic), index, nData}.
 *  - messages are matched in order. Each message starts with its 8-byte size on the control socket; its
 *    top bit says whether the payload follows inline. The sender inlines messages below
 *    COMM_SOCKET_INLINE bytes (64 KiB); the caller's thread moves them in isend()/test() with non-blocking
 *    I/O (no thread handoff, for latency).
 *  - larger messages are cut into at most nData pieces of a 64 KiB-aligned length; piece j of the k-th
 *    large message travels on data socket (k + j) % nData. Helper threads (COMM_SOCKET_NTHREADS, each
 *    owning COMM_NSOCKS_PERTHREAD data sockets, started on the first large message) do blocking I/O on
 *    them and mark pieces done with atomics.
 * connect() blocks until every socket is connected and has sent its hello (the peer listens already, so
 * the kernel completes this at once; it gives up after 30 s). accept() never blocks:
 * it returns a NULL comm until the control socket and every data socket of one connection arrived.
 *
 * Paired connections (connectPaired): when a rank sends to and receives from the same peer on a channel,
 * the two directions share one more TCP socket (full duplex: each direction is its own byte stream) that
 * carries small messages (inline payloads up to COMM_SOCKET_PAIR_INLINE, 8 KiB), so the acknowledgement
 * of a small message rides on the data going the other way (8-byte allreduce of 2 ranks over loopback:
 * 7.2 -> 5.9 us). Bigger inline messages keep to the connection's own control socket ("private": one
 * direction per socket, so the kernel does not serialise the two directions' bulk data on one socket;
 * sharing it for everything cost 15-25% of busbw at 8-64 MiB). A header that changes socket says so
 * (SOCK_HDR_SWITCH): its payload and what follows come on the other socket, so messages stay in order and
 * a run of big messages costs one system call each, as unpaired. Of the two listeners involved, the side whose
 * own listener has the smaller magic is the connector: it connects the shared socket to the peer's
 * listener with the PAIRED bit in the hello's index, and its own listener takes it as the shared socket of
 * the receive connection it will accept. The other side (the acceptor) returns its send connection at
 * once: the shared socket arrives on its own listener, whose accept() publishes it to the send connection
 * (which cannot send before: its rank's init accepts first). A shared socket is closed when both
 * connections are; closing the send side first shuts down only its direction. */
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

void sockSharedRelease(sockShared* sh, int isSend) {
  int fd = __atomic_load_n(&sh->fd, __ATOMIC_ACQUIRE);
  if (isSend && fd >= 0) shutdown(fd, SHUT_WR); /* the peer's receive side sees this direction end */
  if (__atomic_sub_fetch(&sh->refs, 1, __ATOMIC_ACQ_REL) == 0) {
    if (fd >= 0) {
      /* Unread incoming bytes would make close() reset the connection and drop what this side still
       * has queued for the peer: read them away first. */
      char sink[4096];
      for (int i = 0; i < 256 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++) {
      }
      close(fd);
    }
    free(sh);
  }
}

/* ---------------------------------------------------------------- process-wide device state */

/* One device per usable interface (commSocketFindInterfaces: COMM_SOCKET_IFNAME's matches, or every
 * interface that is up with an address of the best class); device 0 is the bootstrap's interface. A
 * device is where a receiver listens; a sender connects from wherever the kernel routes to that address. */
static pthread_mutex_t sockInitLock = PTHREAD_MUTEX_INITIALIZER;
int sockInitDone;
int sockNDevs;
static char sockIfNames[SOCK_MAX_DEVS][COMM_IFNAME_MAX];
commSockAddr sockIfAddrs[SOCK_MAX_DEVS];

static commResult_t sockInit(commNetLogger_t logger) {
  (void)logger; /* built in: logs through debug.h directly */
  commResult_t res = commSuccess;
  pthread_mutex_lock(&sockInitLock);
  if (!sockInitDone) {
    res = commSocketFindInterfaces(sockIfNames, sockIfAddrs, SOCK_MAX_DEVS, &sockNDevs);
    if (res == commSuccess) {
      char buf[128];
      sockInitDone = 1;
      for (int d = 0; d < sockNDevs; d++)
        INFO(COMM_NET, "NET/Socket : device %d: interface %s %s", d, sockIfNames[d],
             commSocketAddrStr(&sockIfAddrs[d], buf, sizeof(buf)));
    } else {
      WARN("NET/Socket : no usable network interface (COMM_SOCKET_IFNAME=%s)",
           commParamStr("COMM_SOCKET_IFNAME", "<unset>"));
    }
  }
  pthread_mutex_unlock(&sockInitLock);
  return res;
}

static commResult_t sockDevices(int* ndev) {
  *ndev = sockInitDone ? sockNDevs : 0;
  return commSuccess;
}

static int sockReadSpeed(const char* ifName) {
  char path[128];
  snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifName);
  FILE* f = fopen(path, "r");
  int speed = 0;
  if (f) {
    if (fscanf(f, "%d", &speed) != 1) speed = 0;
    fclose(f);
  }
  return speed > 0 ? speed : 10000;
}

static commResult_t sockGetProperties(int dev, commNetProperties_t* props) {
  if (dev < 0 || dev >= sockNDevs || !sockInitDone) {
    WARN("NET/Socket : invalid device %d", dev);
    return commInvalidArgument;
  }
  memset(props, 0, sizeof(*props));
  props->name = sockIfNames[dev];
  props->pciPath = NULL;
  props->guid = 0;
  props->ptrSupport = COMM_PTR_HOST;
  props->speedMbps = sockReadSpeed(sockIfNames[dev]);
  props->port = 0;
  props->latencyUs = 0;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->maxMessageBytes = SIZE_MAX;
  return commSuccess;
}

/* ---------------------------------------------------------------- helpers */

void sockTune(int fd) {
  commSocketSetNoDelay(fd);
  int bufBytes = (int)commParamSize("COMM_SOCKET_BUFSIZE", 4 << 20, 0, 1 << 30);
  if (bufBytes > 0) commSocketSetBufferSizes(fd, bufBytes);
}

void sockConfig(int* nThreads, int* nSocksPerThread) {
  int nt = (int)commParamInt("COMM_SOCKET_NTHREADS", 2, 1, SOCK_MAX_DATA);
  int ns = (int)commParamInt("COMM_NSOCKS_PERTHREAD", 2, 1, SOCK_MAX_DATA);
  if (nt * ns > SOCK_MAX_DATA) ns = SOCK_MAX_DATA / nt;
  *nThreads = nt;
  *nSocksPerThread = ns;
}

static void* sockThreadMain(void* arg) {
  sockThread* t = (sockThread*)arg;
  int isSend = t->comm->isSend;
  for (;;) {
    pthread_mutex_lock(&t->lock);
    while (t->count == 0 && !t->stop) pthread_cond_wait(&t->cond, &t->lock);
    if (t->stop) {
      pthread_mutex_unlock(&t->lock);
      break;
    }
    sockTask task = t->queue[t->head];
    pthread_mutex_unlock(&t->lock);

    int err = 0;
    size_t off = 0;
    while (off < task.len) {
      ssize_t n = isSend ? send(task.fd, task.buf + off, task.len - off, MSG_NOSIGNAL)
                         : recv(task.fd, task.buf + off, task.len - off, 0);
      if (n > 0) {
        off += (size_t)n;
      } else if (n == 0) {
        err = -1;
        break;
      } else if (errno != EINTR) {
        err = errno ? errno : EIO;
        break;
      }
    }
    /* Free the queue entry before the request can complete and be reused. */
    pthread_mutex_lock(&t->lock);
    t->head = (t->head + 1) % t->cap;
    t->count--;
    pthread_mutex_unlock(&t->lock);
    if (err) __atomic_store_n(&task.req->err, err, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&task.req->pending, 1, __ATOMIC_RELEASE);
  }
  return NULL;
}

/* Helper threads run on the cores near their interface's NIC (its PCI device's local_cpulist in sysfs;
 * interfaces without one, such as veth or virtio without NUMA information, leave them where they are). */
static void sockBindNearDevice(sockThread* t, int dev) {
  if (dev < 0 || dev >= sockNDevs) return;
  char path[160], cpus[COMM_TOPO_CPUSET_MAX];
  /* The PCI function itself, or (virtio) the PCI device the interface's device hangs from. */
  snprintf(path, sizeof(path), "/sys/class/net/%s/device/local_cpulist", sockIfNames[dev]);
  FILE* f = fopen(path, "r");
  if (f == NULL) {
    snprintf(path, sizeof(path), "/sys/class/net/%s/device/../local_cpulist", sockIfNames[dev]);
    f = fopen(path, "r");
  }
  if (f == NULL) return;
  int got = fgets(cpus, sizeof(cpus), f) != NULL;
  fclose(f);
  if (!got) return;
  cpus[strcspn(cpus, "\n")] = '\0';
  commBindThreadToCpuList(t->thread, cpus, "NET/Socket helper thread", sockIfNames[dev]);
}

static commResult_t sockStartThreads(sockComm* c) {
  int perThread = COMM_DIV_UP(c->nData, c->nThreads);
  for (int i = 0; i < c->nThreads; i++) {
    sockThread* t = &c->threads[i];
    t->comm = c;
    t->cap = SOCK_MAX_REQS * perThread;
    COMMCHECK(commCalloc(&t->queue, (size_t)t->cap, sizeof(sockTask)));
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    int err = pthread_create(&t->thread, NULL, sockThreadMain, t);
    if (err) {
      WARN("NET/Socket : pthread_create failed: %s", strerror(err));
      pthread_cond_destroy(&t->cond);
      pthread_mutex_destroy(&t->lock);
      free(t->queue);
      t->queue = NULL;
      return commSystemError;
    }
    t->started = 1;
    sockBindNearDevice(t, c->dev);
  }
  c->threadsStarted = 1;
  INFO(COMM_NET, "NET/Socket : %s connection on device %d: %d helper threads carry messages from %zu bytes",
       c->isSend ? "send" : "receive", c->dev, c->nThreads, c->inlineBytes);
  return commSuccess;
}

static void sockStopThreads(sockComm* c) {
  for (int i = 0; i < c->nThreads; i++) {
    sockThread* t = &c->threads[i];
    if (!t->started) continue;
    pthread_mutex_lock(&t->lock);
    t->stop = 1;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
  }
  /* Unblock threads sitting in blocking I/O: the connection is going away. */
  for (int i = 0; i < c->nData; i++)
    if (c->dataFds[i] >= 0) shutdown(c->dataFds[i], SHUT_RDWR);
  for (int i = 0; i < c->nThreads; i++) {
    sockThread* t = &c->threads[i];
    if (!t->started) continue;
    pthread_join(t->thread, NULL);
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->lock);
    free(t->queue);
    t->queue = NULL;
    t->started = 0;
  }
}

/* Large messages go over the data sockets; empty ones never do. */
static inline int sockIsLarge(const sockComm* c, uint64_t size) { return size > 0 && size >= c->inlineBytes; }

/* Queue the pieces of a large message (in message order on both sides). */
static commResult_t sockQueuePieces(sockComm* c, sockReq* r) {
  if (!c->threadsStarted) COMMCHECK(sockStartThreads(c));
  size_t size = (size_t)r->size;
  if (size == 0) return commSuccess;
  size_t chunk = COMM_ALIGN_UP(COMM_DIV_UP(size, (size_t)c->nData), (size_t)SOCK_PIECE_ALIGN);
  int nPieces = (int)COMM_DIV_UP(size, chunk);
  uint64_t seq = c->largeSeq++;
  __atomic_store_n(&r->pending, nPieces, __ATOMIC_RELAXED);
  for (int j = 0; j < nPieces; j++) {
    size_t off = (size_t)j * chunk;
    int s = (int)((seq + (uint64_t)j) % (uint64_t)c->nData);
    sockThread* t = &c->threads[s % c->nThreads];
    pthread_mutex_lock(&t->lock);
    int idx = (t->head + t->count) % t->cap;
    t->queue[idx].fd = c->dataFds[s];
    t->queue[idx].buf = r->data + off;
    t->queue[idx].len = COMM_MIN(chunk, size - off);
    t->queue[idx].req = r;
    t->count++;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
  }
  return commSuccess;
}

/* A peer that closed in order (it finished and left) is not an error by itself: the transport above
 * reports it if, and only if, data was still expected. Other failures are WARNs. */
static void sockLogFailure(const sockComm* c, int err) {
  if (err < 0) INFO(COMM_NET, "NET/Socket : connection %s %s closed by peer", c->isSend ? "to" : "from", c->peerStr);
  else WARN("NET/Socket : connection %s %s failed: %s", c->isSend ? "to" : "from", c->peerStr, strerror(err));
}

static commResult_t sockCtrlError(sockComm* c, int err) {
  c->ctrlErr = err;
  sockLogFailure(c, err);
  return commRemoteError;
}

/* Read up to len bytes of control socket `sock` (0: ctrlFd, 1: privFd) without blocking, as recv() does
 * (-1 with errno on failure, 0 at EOF). Bytes already staged come first; a short read refills the stage
 * with whatever has arrived, so the header and the inline payload of a small message come in one system
 * call. A long read bypasses the stage once it is empty, so big inline payloads are not copied twice. */
static ssize_t sockCtrlRead(sockComm* c, int sock, char* dst, size_t len) {
  int fd = sock ? c->privFd : c->ctrlFd;
  if (c->stageOff[sock] == c->stageLen[sock]) {
    if (len >= SOCK_STAGE_BYTES) return recv(fd, dst, len, MSG_DONTWAIT);
    ssize_t s = recv(fd, c->stage[sock], SOCK_STAGE_BYTES, MSG_DONTWAIT);
    if (s <= 0) return s;
    c->stageOff[sock] = 0;
    c->stageLen[sock] = (size_t)s;
  }
  size_t n = COMM_MIN(len, c->stageLen[sock] - c->stageOff[sock]);
  memcpy(dst, c->stage[sock] + c->stageOff[sock], n);
  c->stageOff[sock] += n;
  return (ssize_t)n;
}

/* What a non-blocking send or receive of control bytes returned: bytes moved (added to *off), or nothing
 * yet (*blocked: no room or no data; EINTR: try again at once), or the connection's failure. */
static commResult_t sockCtrlMoved(sockComm* c, ssize_t s, size_t* off, int* blocked) {
  if (s > 0) {
    *off += (size_t)s;
    return commSuccess;
  }
  if (s < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    *blocked = 1;
    return commSuccess;
  }
  if (s < 0 && errno == EINTR) return commSuccess;
  return sockCtrlError(c, s < 0 ? errno : -1);
}

/* The sender's side of one request: its header, then its inline payload (on the socket the header says). */
static commResult_t sockCtrlSend(sockComm* c, sockReq* r, int* blocked) {
  if (!r->started) {
    r->started = 1;
    r->hdrSock = c->mode;
    int want = c->privFd >= 0 && r->isInline ? r->size > c->pairInline : c->mode;
    if (want != c->mode) {
      r->hdr |= SOCK_HDR_SWITCH;
      c->mode = want;
    }
    r->paySock = c->mode;
  }
  size_t inlineLen = r->isInline ? (size_t)r->size : 0;
  size_t total = sizeof(uint64_t) + inlineLen;
  while (r->ctrlOff < total && !*blocked) {
    struct iovec iov[2];
    int n = 0, sock;
    if (r->ctrlOff < sizeof(uint64_t)) {
      sock = r->hdrSock;
      iov[n].iov_base = (char*)&r->hdr + r->ctrlOff;
      iov[n].iov_len = sizeof(uint64_t) - r->ctrlOff;
      n++;
      if (inlineLen && r->paySock == r->hdrSock) {
        iov[n].iov_base = r->data;
        iov[n].iov_len = inlineLen;
        n++;
      }
    } else {
      sock = r->paySock;
      size_t o = r->ctrlOff - sizeof(uint64_t);
      iov[n].iov_base = r->data + o;
      iov[n].iov_len = inlineLen - o;
      n++;
    }
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = iov;
    msg.msg_iovlen = (size_t)n;
    ssize_t s = sendmsg(sock ? c->privFd : c->ctrlFd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    COMMCHECK(sockCtrlMoved(c, s, &r->ctrlOff, blocked));
  }
  return commSuccess;
}

/* A whole header has arrived: its size and flags, and the socket its payload follows on. */
static commResult_t sockCtrlParseHeader(sockComm* c, sockReq* r) {
  r->isInline = (r->hdr & SOCK_HDR_INLINE) != 0;
  r->size = r->hdr & ~(SOCK_HDR_INLINE | SOCK_HDR_SWITCH);
  if ((r->hdr & SOCK_HDR_SWITCH) != 0) {
    if (c->privFd < 0) {
      WARN("NET/Socket : bad header from %s (switch on an unpaired connection)", c->peerStr);
      c->ctrlErr = EPROTO;
      return commRemoteError;
    }
    c->mode ^= 1;
  }
  r->paySock = c->mode;
  if (r->size > r->cap) {
    WARN("NET/Socket : message of %llu bytes from %s is larger than the posted receive (%zu bytes)",
         (unsigned long long)r->size, c->peerStr, r->cap);
    c->ctrlErr = EMSGSIZE;
    return commInternalError;
  }
  return commSuccess;
}

/* The receiver's side of one request: the header, then an inline payload or, for a large message, its
 * pieces queued for the data sockets. */
static commResult_t sockCtrlRecv(sockComm* c, sockReq* r, int* blocked) {
  if (!r->started) {
    r->started = 1;
    r->hdrSock = c->mode;
  }
  while (r->ctrlOff < sizeof(uint64_t) && !*blocked) {
    ssize_t s = sockCtrlRead(c, r->hdrSock, (char*)&r->hdr + r->ctrlOff, sizeof(uint64_t) - r->ctrlOff);
    COMMCHECK(sockCtrlMoved(c, s, &r->ctrlOff, blocked));
    if (r->ctrlOff == sizeof(uint64_t)) COMMCHECK(sockCtrlParseHeader(c, r));
  }
  size_t inlineLen = r->isInline ? (size_t)r->size : 0;
  size_t total = sizeof(uint64_t) + inlineLen;
  while (r->ctrlOff < total && !*blocked) {
    size_t o = r->ctrlOff - sizeof(uint64_t);
    ssize_t s = sockCtrlRead(c, r->paySock, r->data + o, inlineLen - o);
    COMMCHECK(sockCtrlMoved(c, s, &r->ctrlOff, blocked));
  }
  if (!*blocked && !r->isInline) COMMCHECK(sockQueuePieces(c, r));
  return commSuccess;
}

/* Move header and inline payloads on the control sockets, in order, without blocking. Unpaired, everything
 * is on ctrlFd. Paired, the sender keeps small messages on the shared socket and bigger inline ones on the
 * private socket, and says so in the header that leaves the current socket (SOCK_HDR_SWITCH); the
 * receiver follows. */
static commResult_t sockProgressCtrl(sockComm* c) {
  if (c->ctrlErr) return commRemoteError;
  if (c->ctrlFd < 0) {
    int fd = c->shared ? __atomic_load_n(&c->shared->fd, __ATOMIC_ACQUIRE) : -1;
    if (fd == SOCK_SHARED_DEAD) return sockCtrlError(c, ENOTCONN);
    if (fd < 0) return commSuccess; /* the shared control socket has not arrived yet */
    c->ctrlFd = fd;
  }
  while (c->ctrlSeq < c->posted) {
    sockReq* r = &c->reqs[c->ctrlSeq % SOCK_MAX_REQS];
    int blocked = 0;
    COMMCHECK(c->isSend ? sockCtrlSend(c, r, &blocked) : sockCtrlRecv(c, r, &blocked));
    if (blocked) return commSuccess;
    r->ctrlDone = 1;
    c->ctrlSeq++;
  }
  return commSuccess;
}

static commResult_t sockPost(sockComm* c, int isSend, void* data, size_t size, void** request) {
  *request = NULL;
  if (c->ctrlErr) return c->ctrlErr == EMSGSIZE ? commInternalError : commRemoteError;
  sockReq* r = &c->reqs[c->posted % SOCK_MAX_REQS];
  if (r->used) return commSuccess; /* too many outstanding: caller retries */
  memset(r, 0, sizeof(*r));
  r->comm = c;
  r->used = 1;
  r->isSend = isSend;
  r->data = (char*)data;
  if (isSend) {
    r->size = size;
    r->isInline = !sockIsLarge(c, size);
    r->hdr = size | (r->isInline ? SOCK_HDR_INLINE : 0);
  } else {
    r->cap = size;
  }
  c->posted++;
  if (isSend && !r->isInline) COMMCHECK(sockQueuePieces(c, r));
  *request = r;
  return sockProgressCtrl(c);
}

static commResult_t sockIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  (void)tag;
  (void)mhandle;
  sockComm* c = (sockComm*)sendComm;
  if (!c || !c->isSend) return commInvalidArgument;
  return sockPost(c, 1, data, size, request);
}

static commResult_t sockIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                              void** request) {
  (void)tags;
  (void)mhandles;
  sockComm* c = (sockComm*)recvComm;
  if (!c || c->isSend || n != 1) {
    WARN("NET/Socket : irecv supports exactly one buffer (n=%d)", n);
    return commInvalidArgument;
  }
  return sockPost(c, 0, data[0], sizes[0], request);
}

static commResult_t sockIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  (void)recvComm;
  (void)n;
  (void)data;
  (void)sizes;
  (void)mhandles;
  *request = NULL; /* host memory: nothing to flush */
  return commSuccess;
}

static commResult_t sockTest(void* request, int* done, size_t* sizes) {
  sockReq* r = (sockReq*)request;
  *done = 0;
  if (!r || !r->used) return commInvalidArgument;
  sockComm* c = r->comm;
  if (!r->ctrlDone) {
    /* Progress may complete this request and then fail on a later one (a peer that sent its last message
     * and closed): this request is still good. */
    commResult_t res = sockProgressCtrl(c);
    if (!r->ctrlDone) return res;
  }
  if (__atomic_load_n(&r->pending, __ATOMIC_ACQUIRE) != 0) return commSuccess;
  int err = __atomic_load_n(&r->err, __ATOMIC_RELAXED);
  if (err) {
    sockLogFailure(c, err);
    return commRemoteError;
  }
  *done = 1;
  if (sizes) sizes[0] = (size_t)r->size;
  r->used = 0;
  return commSuccess;
}

static commResult_t sockRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  (void)comm;
  (void)data;
  (void)size;
  *mhandle = NULL;
  if (type != COMM_PTR_HOST) {
    WARN("NET/Socket : only host memory can be registered (type %d)", type);
    return commInvalidArgument;
  }
  return commSuccess;
}

static commResult_t sockDeregMr(void* comm, void* mhandle) {
  (void)comm;
  (void)mhandle;
  return commSuccess;
}

/* Helper threads pay off when a NIC is faster than one core can copy; with few cores they only compete
 * with the ranks for them. Measured on 2 cores, 2 ranks over loopback: allreduce 1-64 MiB at 1.0-1.6 GB/s
 * with helper threads for messages from 64 KiB, 1.5-2.2 GB/s with every message moved by the calling
 * thread (docs/PERF.md). So: everything inline below 8 cores, 64 KiB and up on helper threads above. */
static int64_t sockDefaultInline(void) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  return ncpu >= 8 ? 64 * 1024 : 1 << 30;
}

commResult_t sockNewComm(int isSend, int nData, sockComm** out) {
  sockComm* c;
  COMMCHECK(commCalloc(&c, 1, sizeof(*c)));
  c->isSend = isSend;
  c->ctrlFd = -1;
  c->privFd = -1;
  c->pairInline = (size_t)commParamSize("COMM_SOCKET_PAIR_INLINE", 8192, 0, SIZE_MAX >> 2);
  c->nData = nData;
  for (int i = 0; i < SOCK_MAX_DATA; i++) c->dataFds[i] = -1;
  int nt, ns;
  sockConfig(&nt, &ns);
  c->nThreads = COMM_MIN(nt, nData);
  c->inlineBytes = (size_t)commParamSize("COMM_SOCKET_INLINE", sockDefaultInline(), 0, 1 << 30);
  if (!isSend) {
    commResult_t res = commCalloc(&c->stage[0], SOCK_STAGE_BYTES, 1);
    if (res != commSuccess) {
      free(c);
      return res;
    }
  }
  *out = c;
  return commSuccess;
}

void sockFreeComm(sockComm* c) {
  if (!c) return;
  sockStopThreads(c);
  if (c->shared) {
    /* A connector that failed before sharing its socket still owns it alone. */
    if (c->ctrlFd >= 0 && c->ctrlFd != __atomic_load_n(&c->shared->fd, __ATOMIC_ACQUIRE)) close(c->ctrlFd);
    sockSharedRelease(c->shared, c->isSend);
  } else if (c->ctrlFd >= 0) {
    close(c->ctrlFd);
  }
  if (c->privFd >= 0) close(c->privFd);
  for (int i = 0; i < c->nData; i++)
    if (c->dataFds[i] >= 0) close(c->dataFds[i]);
  free(c->stage[0]);
  free(c->stage[1]);
  free(c);
}


const commNet_t commNetSocket = {
    .name = "Socket",
    .version = COMM_NET_PLUGIN_VERSION,
    .init = sockInit,
    .devices = sockDevices,
    .getProperties = sockGetProperties,
    .listen = sockListenFn,
    .connect = sockConnect,
    .accept = sockAccept,
    .regMr = sockRegMr,
    .deregMr = sockDeregMr,
    .isend = sockIsend,
    .irecv = sockIrecv,
    .iflush = sockIflush,
    .test = sockTest,
    .closeSend = sockCloseSend,
    .closeRecv = sockCloseRecv,
    .closeListen = sockCloseListen,
    .connectPaired = sockConnectPaired,
};
