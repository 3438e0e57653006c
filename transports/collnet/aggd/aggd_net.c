/* An example network plugin in NCCL's shape (it exports ncclNetPlugin_v8, declared in transports/net/nccl/net_nccl.h),
 * over plain TCP: the tests load it into libcomm with COMM_NET_PLUGIN to prove the NCCL plugin adapter
 * (transports/net/nccl/net_nccl.c) end to end.
 *
 * One device: the first IPv4 interface that is up and not loopback, else loopback; NCCL_EXAMPLE_NET_ADDR=a.b.c.d
 * picks the address. listen() binds an ephemeral port on it and puts the address in the handle. connect()
 * and accept() never block: they return success with a NULL comm until the TCP connection is made and a
 * 4-byte hello went across (connect keeps its progress in the handle, as NCCL allows). Each message is a
 * 16-byte header (size, tag, magic) and the payload; isend/irecv post a request (up to NCCL_NET_MAX_REQUESTS
 * per comm) and test() moves bytes with non-blocking send/recv, handling partial transfers, completing
 * requests in the order they were posted. irecv takes one buffer (maxRecvs 1), regMr returns a dummy handle,
 * iflush has nothing to do (host memory).
 *
 * Build variants (-DNCCL_EXAMPLE_NET_VERSION=N): 8 (default) exports ncclNetPlugin_v8; 9 exports
 * ncclNetPlugin_v9; 10 exports ncclNetPlugin_v10 and a v8 table named ExampleTcpV8 (a loader must take the
 * newest); 7 exports only a dummy ncclNetPlugin_v7 (an unsupported version: a loader must refuse it).
 *
 * Build: cc -shared -fPIC -I transports/net/nccl nccl_net_example.c -o libnccl-net-example.so
 * Use:   COMM_NET_PLUGIN=/path/libnccl-net-example.so (or COMM_NET_PLUGIN=example if on the search path)
 * SPDX-License-Identifier: Apache-2.0 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define NET_NCCL_ABI_ONLY
#include "net_nccl.h"

#ifndef NCCL_EXAMPLE_NET_VERSION
#define NCCL_EXAMPLE_NET_VERSION 8
#endif

#define EX_NAME "ExampleTcp"
#define EX_EXPORT __attribute__((visibility("default")))

#if NCCL_EXAMPLE_NET_VERSION >= 8
#define EX_MAGIC 0x4c43434eU /* "NCCL" */

#define EX_WARN(...)                                                                                 \
  do {                                                                                               \
    if (exLog) exLog(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__, "NET/" EX_NAME " : " __VA_ARGS__); \
  } while (0)
#define EX_INFO(...)                                                                                             \
  do {                                                                                                           \
    if (exLog) exLog(NCCL_LOG_INFO, NCCL_NET | NCCL_INIT, __FILE__, __LINE__, "NET/" EX_NAME " : " __VA_ARGS__); \
  } while (0)

static ncclDebugLogger_t exLog;
static char exIfName[IF_NAMESIZE + 1];
static struct sockaddr_in exAddr; /* listeners bind here, port 0 */
static int exReady;

/* The handle a listener gives its peer. `pending` is the connect side's progress (NULL as sent). */
typedef struct {
  uint32_t magic;
  struct sockaddr_in addr;
  void* pending;
} exHandle;
_Static_assert(sizeof(exHandle) <= NCCL_NET_HANDLE_MAXSIZE, "the handle must fit in NCCL's");

typedef struct {
  uint64_t size;
  int32_t tag;
  uint32_t magic;
} exHeader;

struct exComm;
typedef struct {
  struct exComm* comm;
  int used; /* posted and not yet reported done by test() */
  int done;
  char* data;
  size_t size; /* send: bytes; receive: capacity, then bytes received */
  int tag;
  exHeader hdr;
  size_t off; /* bytes moved so far, header included */
} exReq;

enum { EX_CONNECTING, EX_HELLO, EX_READY };

typedef struct exComm {
  int fd;
  int isSend;
  int stage;
  uint32_t hello;
  size_t helloOff;
  uint64_t posted, completed; /* requests posted; completed in order */
  exReq reqs[NCCL_NET_MAX_REQUESTS];
} exComm;

typedef struct {
  int fd;
  exComm* pending; /* accepted, hello not read yet */
} exListen;

/* ---------------------------------------------------------------- setup */

static void exPickAddress(void) {
  memset(&exAddr, 0, sizeof(exAddr));
  exAddr.sin_family = AF_INET;
  const char* env = getenv("NCCL_EXAMPLE_NET_ADDR");
  if (env && inet_pton(AF_INET, env, &exAddr.sin_addr) == 1) {
    snprintf(exIfName, sizeof(exIfName), "%s", "env");
    struct ifaddrs* ifs = NULL;
    if (getifaddrs(&ifs) == 0) {
      for (struct ifaddrs* i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            ((struct sockaddr_in*)i->ifa_addr)->sin_addr.s_addr == exAddr.sin_addr.s_addr)
          snprintf(exIfName, sizeof(exIfName), "%s", i->ifa_name);
      freeifaddrs(ifs);
    }
    return;
  }
  struct ifaddrs* ifs = NULL;
  if (getifaddrs(&ifs) == 0) {
    for (struct ifaddrs* i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
      exAddr.sin_addr = ((struct sockaddr_in*)i->ifa_addr)->sin_addr;
      snprintf(exIfName, sizeof(exIfName), "%s", i->ifa_name);
      break;
    }
    freeifaddrs(ifs);
  }
  if (exAddr.sin_addr.s_addr == 0) {
    exAddr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    snprintf(exIfName, sizeof(exIfName), "%s", "lo");
  }
}

static ncclResult_t exInit(ncclDebugLogger_t logFunction) {
  exLog = logFunction;
  exPickAddress();
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &exAddr.sin_addr, ip, sizeof(ip));
  EX_INFO("example NCCL v%d network plugin on %s (%s)", NCCL_EXAMPLE_NET_VERSION, exIfName, ip);
  exReady = 1;
  return ncclSuccess;
}

static ncclResult_t exDevices(int* ndev) {
  *ndev = 1;
  return ncclSuccess;
}

static ncclResult_t exCheckDev(int dev) {
  if (dev != 0 || !exReady) {
    EX_WARN("invalid device %d", dev);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* The fields every version has. */
#define EX_FILL_PROPS(p)                                    \
  do {                                                      \
    memset(&(p), 0, sizeof(p));                             \
    (p).name = exIfName;                                    \
    (p).pciPath = NULL;                                     \
    (p).guid = ntohl(exAddr.sin_addr.s_addr);               \
    (p).ptrSupport = NCCL_PTR_HOST;                         \
    (p).regIsGlobal = 0;                                    \
    (p).speed = 10000;                                      \
    (p).port = 0;                                           \
    (p).latency = 0;                                        \
    (p).maxComms = 65536;                                   \
    (p).maxRecvs = 1;                                       \
    (p).netDeviceType = NCCL_NET_DEVICE_HOST;               \
    (p).netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION; \
  } while (0)

static void exSockOpts(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static ncclResult_t exListenFn(int dev, void* handle, void** listenComm) {
  *listenComm = NULL;
  if (exCheckDev(dev) != ncclSuccess) return ncclInvalidArgument;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    EX_WARN("socket: %s", strerror(errno));
    return ncclSystemError;
  }
  struct sockaddr_in a = exAddr;
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr*)&a, &len) != 0) {
    EX_WARN("cannot listen on %s: %s", exIfName, strerror(errno));
    close(fd);
    return ncclSystemError;
  }
  exListen* l = calloc(1, sizeof(*l));
  if (!l) {
    close(fd);
    return ncclSystemError;
  }
  l->fd = fd;
  exHandle* h = (exHandle*)handle;
  memset(h, 0, sizeof(*h));
  h->magic = EX_MAGIC;
  h->addr = a;
  *listenComm = l;
  return ncclSuccess;
}

static void exFreeComm(exComm* c) {
  if (!c) return;
  if (c->fd >= 0) close(c->fd);
  free(c);
}

static ncclResult_t exErrnoResult(int err) {
  return err == EPIPE || err == ECONNRESET || err == ECONNREFUSED || err == ETIMEDOUT ? ncclRemoteError
                                                                                      : ncclSystemError;
}

/* Connect to the handle's address; *sendComm stays NULL until connected and the hello is out. */
static ncclResult_t exConnectCommon(int dev, void* handle, void** sendComm) {
  *sendComm = NULL;
  if (exCheckDev(dev) != ncclSuccess) return ncclInvalidArgument;
  exHandle* h = (exHandle*)handle;
  if (h->magic != EX_MAGIC) {
    EX_WARN("connect: not a handle of this plugin");
    return ncclInvalidArgument;
  }
  exComm* c = (exComm*)h->pending;
  if (!c) {
    c = calloc(1, sizeof(*c));
    if (!c) return ncclSystemError;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
      EX_WARN("socket: %s", strerror(errno));
      free(c);
      return ncclSystemError;
    }
    exSockOpts(c->fd);
    c->isSend = 1;
    c->hello = EX_MAGIC;
    int rc = connect(c->fd, (struct sockaddr*)&h->addr, sizeof(h->addr));
    if (rc != 0 && errno != EINPROGRESS && errno != EINTR) {
      int err = errno;
      EX_WARN("connect: %s", strerror(err));
      exFreeComm(c);
      return exErrnoResult(err);
    }
    c->stage = rc == 0 ? EX_HELLO : EX_CONNECTING;
    h->pending = c;
  }
  if (c->stage == EX_CONNECTING) {
    struct pollfd p = {c->fd, POLLOUT, 0};
    int n = poll(&p, 1, 0);
    if (n == 0 || (n < 0 && errno == EINTR)) return ncclSuccess; /* still connecting: call again */
    int err = 0;
    socklen_t len = sizeof(err);
    if (n < 0 || getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err) {
      EX_WARN("connect: %s", strerror(err));
      h->pending = NULL;
      exFreeComm(c);
      return exErrnoResult(err);
    }
    c->stage = EX_HELLO;
  }
  while (c->helloOff < sizeof(c->hello)) {
    ssize_t n = send(c->fd, (char*)&c->hello + c->helloOff, sizeof(c->hello) - c->helloOff, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    if (n <= 0) {
      int err = errno;
      EX_WARN("connect: sending the hello: %s", strerror(err));
      h->pending = NULL;
      exFreeComm(c);
      return exErrnoResult(err);
    }
    c->helloOff += (size_t)n;
  }
  c->stage = EX_READY;
  h->pending = NULL;
  *sendComm = c;
  return ncclSuccess;
}

static ncclResult_t exAcceptCommon(void* listenComm, void** recvComm) {
  *recvComm = NULL;
  exListen* l = (exListen*)listenComm;
  if (!l->pending) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return ncclSuccess;
      EX_WARN("accept: %s", strerror(errno));
      return ncclSystemError;
    }
    exComm* c = calloc(1, sizeof(*c));
    if (!c) {
      close(fd);
      return ncclSystemError;
    }
    c->fd = fd;
    c->stage = EX_HELLO;
    exSockOpts(fd);
    l->pending = c;
  }
  exComm* c = l->pending;
  while (c->helloOff < sizeof(c->hello)) {
    ssize_t n = recv(c->fd, (char*)&c->hello + c->helloOff, sizeof(c->hello) - c->helloOff, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    if (n <= 0) {
      EX_WARN("accept: the peer left before its hello (%s)", n == 0 ? "closed" : strerror(errno));
      l->pending = NULL;
      exFreeComm(c);
      return ncclRemoteError;
    }
    c->helloOff += (size_t)n;
  }
  l->pending = NULL;
  if (c->hello != EX_MAGIC) {
    EX_WARN("accept: bad hello 0x%x", c->hello);
    exFreeComm(c);
    return ncclRemoteError;
  }
  c->stage = EX_READY;
  *recvComm = c;
  return ncclSuccess;
}

static ncclResult_t exRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  static int dummy;
  (void)comm;
  (void)data;
  (void)size;
  if (type != NCCL_PTR_HOST) {
    EX_WARN("regMr: only host memory (type %d)", type);
    return ncclInvalidArgument;
  }
  *mhandle = &dummy;
  return ncclSuccess;
}

static ncclResult_t exRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                  void** mhandle) {
  (void)comm;
  (void)data;
  (void)size;
  (void)type;
  (void)offset;
  (void)fd;
  *mhandle = NULL;
  return ncclInvalidUsage; /* ptrSupport does not include NCCL_PTR_DMABUF */
}

static ncclResult_t exDeregMr(void* comm, void* mhandle) {
  (void)comm;
  (void)mhandle;
  return ncclSuccess;
}

/* ---------------------------------------------------------------- data path */

/* Move request r's bytes as far as the socket takes them now. Sets r->done when all moved. */
static ncclResult_t exStep(exComm* c, exReq* r) {
  const size_t hlen = sizeof(exHeader);
  for (;;) {
    size_t total = hlen + r->size;
    if (r->off >= total && (c->isSend || r->off >= hlen)) {
      r->done = 1;
      return ncclSuccess;
    }
    struct iovec iov[2];
    int niov = 0;
    if (r->off < hlen) {
      iov[niov].iov_base = (char*)&r->hdr + r->off;
      iov[niov++].iov_len = hlen - r->off;
      /* The receiver reads the header alone: it does not know the payload size yet. */
      if (c->isSend && r->size) {
        iov[niov].iov_base = r->data;
        iov[niov++].iov_len = r->size;
      }
    } else {
      iov[niov].iov_base = r->data + (r->off - hlen);
      iov[niov++].iov_len = total - r->off;
    }
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = iov;
    msg.msg_iovlen = (size_t)niov;
    ssize_t n = c->isSend ? sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) : recvmsg(c->fd, &msg, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    if (n == 0 && !c->isSend) return ncclRemoteError; /* the peer closed */
    if (n < 0) {
      int err = errno;
      if (err != EPIPE && err != ECONNRESET) EX_WARN("%s: %s", c->isSend ? "send" : "recv", strerror(err));
      return exErrnoResult(err);
    }
    size_t before = r->off;
    r->off += (size_t)n;
    if (!c->isSend && before < hlen && r->off >= hlen) {
      /* The header is in: check it and learn the payload size. */
      if (r->hdr.magic != EX_MAGIC) {
        EX_WARN("recv: corrupt message header");
        return ncclInternalError;
      }
      if (r->hdr.size > r->size) {
        EX_WARN("recv: message of %llu bytes for a buffer of %zu", (unsigned long long)r->hdr.size, r->size);
        return ncclInternalError;
      }
      if (r->hdr.tag != r->tag) {
        EX_WARN("recv: message tag %d, expected %d", (int)r->hdr.tag, r->tag);
        return ncclInternalError;
      }
      r->size = (size_t)r->hdr.size;
    }
  }
}

/* Progress the comm's requests in the order they were posted. */
static ncclResult_t exProgress(exComm* c) {
  while (c->completed < c->posted) {
    exReq* r = &c->reqs[c->completed % NCCL_NET_MAX_REQUESTS];
    ncclResult_t res = exStep(c, r);
    if (res != ncclSuccess) return res;
    if (!r->done) break;
    c->completed++;
  }
  return ncclSuccess;
}

/* A free request slot, or NULL when all are in use (the caller then returns request NULL: try again). */
static exReq* exPost(exComm* c, void* data, size_t size, int tag) {
  exReq* r = &c->reqs[c->posted % NCCL_NET_MAX_REQUESTS];
  if (r->used) return NULL;
  memset(r, 0, sizeof(*r));
  r->comm = c;
  r->used = 1;
  r->data = (char*)data;
  r->size = size;
  r->tag = tag;
  r->hdr.size = size;
  r->hdr.tag = tag;
  r->hdr.magic = EX_MAGIC;
  c->posted++;
  return r;
}

static ncclResult_t exIsendCommon(void* sendComm, void* data, size_t size, int tag, void** request) {
  exComm* c = (exComm*)sendComm;
  *request = NULL;
  if (!c || !c->isSend) return ncclInvalidArgument;
  exReq* r = exPost(c, data, size, tag);
  if (!r) return ncclSuccess;
  *request = r;
  return exProgress(c); /* start sending at once */
}

static ncclResult_t exIrecvCommon(void* recvComm, int n, void** data, size_t capacity, int* tags, void** request) {
  exComm* c = (exComm*)recvComm;
  *request = NULL;
  if (!c || c->isSend || n != 1) {
    EX_WARN("irecv takes exactly one buffer (n=%d)", n);
    return ncclInvalidArgument;
  }
  exReq* r = exPost(c, data[0], capacity, tags ? tags[0] : 0);
  if (r) *request = r;
  return ncclSuccess;
}

static ncclResult_t exIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  (void)recvComm;
  (void)n;
  (void)data;
  (void)sizes;
  (void)mhandles;
  *request = NULL; /* host memory: nothing to flush */
  return ncclSuccess;
}

static ncclResult_t exTest(void* request, int* done, int* sizes) {
  exReq* r = (exReq*)request;
  *done = 0;
  if (!r || !r->used) return ncclInvalidArgument;
  ncclResult_t res = exProgress(r->comm);
  if (res != ncclSuccess) return res;
  if (!r->done) return ncclSuccess;
  *done = 1;
  if (sizes) sizes[0] = (int)r->size;
  r->used = 0;
  return ncclSuccess;
}

static ncclResult_t exCloseComm(void* comm) {
  exFreeComm((exComm*)comm);
  return ncclSuccess;
}

static ncclResult_t exCloseListen(void* listenComm) {
  exListen* l = (exListen*)listenComm;
  if (!l) return ncclSuccess;
  exFreeComm(l->pending);
  close(l->fd);
  free(l);
  return ncclSuccess;
}

/* ---------------------------------------------------------------- version 8 */

#if NCCL_EXAMPLE_NET_VERSION == 8 || NCCL_EXAMPLE_NET_VERSION == 10
static ncclResult_t exGetPropertiesV8(int dev, ncclNetProperties_v8_t* props) {
  if (exCheckDev(dev) != ncclSuccess) return ncclInvalidArgument;
  EX_FILL_PROPS(*props);
  return ncclSuccess;
}

static ncclResult_t exConnectV8(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t** sendDevComm) {
  (void)sendDevComm; /* no device offload */
  return exConnectCommon(dev, handle, sendComm);
}

static ncclResult_t exAcceptV8(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm) {
  (void)recvDevComm;
  return exAcceptCommon(listenComm, recvComm);
}

static ncclResult_t exIsendV8(void* sendComm, void* data, int size, int tag, void* mhandle, void** request) {
  (void)mhandle;
  if (size < 0) return ncclInvalidArgument;
  return exIsendCommon(sendComm, data, (size_t)size, tag, request);
}

static ncclResult_t exIrecvV8(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                              void** request) {
  (void)mhandles;
  if (n == 1 && sizes[0] < 0) return ncclInvalidArgument;
  return exIrecvCommon(recvComm, n, data, n == 1 ? (size_t)sizes[0] : 0, tags, request);
}

EX_EXPORT ncclNet_v8_t ncclNetPlugin_v8 = {
#if NCCL_EXAMPLE_NET_VERSION == 8
    .name = EX_NAME,
#else
    .name = EX_NAME "V8", /* the newest table (v10) is the one to use */
#endif
    .init = exInit,
    .devices = exDevices,
    .getProperties = exGetPropertiesV8,
    .listen = exListenFn,
    .connect = exConnectV8,
    .accept = exAcceptV8,
    .regMr = exRegMr,
    .regMrDmaBuf = exRegMrDmaBuf,
    .deregMr = exDeregMr,
    .isend = exIsendV8,
    .irecv = exIrecvV8,
    .iflush = exIflush,
    .test = exTest,
    .closeSend = exCloseComm,
    .closeRecv = exCloseComm,
    .closeListen = exCloseListen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
};
#endif

/* ---------------------------------------------------------------- version 9 */

#if NCCL_EXAMPLE_NET_VERSION == 9
static ncclResult_t exGetPropertiesV9(int dev, ncclNetProperties_v9_t* props) {
  if (exCheckDev(dev) != ncclSuccess) return ncclInvalidArgument;
  EX_FILL_PROPS(*props);
  props->forceFlush = 0;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = (size_t)1 << 30;
  props->maxCollBytes = (size_t)1 << 30;
  return ncclSuccess;
}

static ncclResult_t exConnectV9(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v9_t** sendDevComm) {
  (void)sendDevComm;
  return exConnectCommon(dev, handle, sendComm);
}

static ncclResult_t exAcceptV9(void* listenComm, void** recvComm, ncclNetDeviceHandle_v9_t** recvDevComm) {
  (void)recvDevComm;
  return exAcceptCommon(listenComm, recvComm);
}

static ncclResult_t exIsendV9(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  (void)mhandle;
  return exIsendCommon(sendComm, data, size, tag, request);
}

static ncclResult_t exIrecvV9(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                              void** request) {
  (void)mhandles;
  return exIrecvCommon(recvComm, n, data, n == 1 ? sizes[0] : 0, tags, request);
}

EX_EXPORT ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = EX_NAME,
    .init = exInit,
    .devices = exDevices,
    .getProperties = exGetPropertiesV9,
    .listen = exListenFn,
    .connect = exConnectV9,
    .accept = exAcceptV9,
    .regMr = exRegMr,
    .regMrDmaBuf = exRegMrDmaBuf,
    .deregMr = exDeregMr,
    .isend = exIsendV9,
    .irecv = exIrecvV9,
    .iflush = exIflush,
    .test = exTest,
    .closeSend = exCloseComm,
    .closeRecv = exCloseComm,
    .closeListen = exCloseListen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
};
#endif

/* ---------------------------------------------------------------- version 10 */

#if NCCL_EXAMPLE_NET_VERSION == 10
static ncclProfilerCallback_t exProfiler;

static ncclResult_t exInitV10(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction) {
  exProfiler = profFunction; /* this plugin reports no network events */
  return exInit(logFunction);
}

static ncclResult_t exGetPropertiesV10(int dev, ncclNetProperties_v10_t* props) {
  if (exCheckDev(dev) != ncclSuccess) return ncclInvalidArgument;
  EX_FILL_PROPS(*props);
  props->forceFlush = 0;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = (size_t)1 << 30;
  props->maxCollBytes = (size_t)1 << 30;
  return ncclSuccess;
}

static ncclResult_t exConnectV10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                                 ncclNetDeviceHandle_v10_t** sendDevComm) {
  (void)sendDevComm;
  if (config && config->trafficClass != NCCL_NET_TRAFFIC_CLASS_UNDEF)
    EX_INFO("traffic class %d requested (ignored)", config->trafficClass);
  return exConnectCommon(dev, handle, sendComm);
}

static ncclResult_t exAcceptV10(void* listenComm, void** recvComm, ncclNetDeviceHandle_v10_t** recvDevComm) {
  (void)recvDevComm;
  return exAcceptCommon(listenComm, recvComm);
}

static ncclResult_t exIsendV10(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                               void** request) {
  (void)mhandle;
  (void)phandle;
  return exIsendCommon(sendComm, data, size, tag, request);
}

static ncclResult_t exIrecvV10(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                               void** phandles, void** request) {
  (void)mhandles;
  (void)phandles;
  return exIrecvCommon(recvComm, n, data, n == 1 ? sizes[0] : 0, tags, request);
}

EX_EXPORT ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = EX_NAME,
    .init = exInitV10,
    .devices = exDevices,
    .getProperties = exGetPropertiesV10,
    .listen = exListenFn,
    .connect = exConnectV10,
    .accept = exAcceptV10,
    .regMr = exRegMr,
    .regMrDmaBuf = exRegMrDmaBuf,
    .deregMr = exDeregMr,
    .isend = exIsendV10,
    .irecv = exIrecvV10,
    .iflush = exIflush,
    .test = exTest,
    .closeSend = exCloseComm,
    .closeRecv = exCloseComm,
    .closeListen = exCloseListen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
};
#endif

#endif /* NCCL_EXAMPLE_NET_VERSION >= 8 */

/* ---------------------------------------------------------------- an unsupported version */

#if NCCL_EXAMPLE_NET_VERSION == 7
/* Only the symbol of an older NCCL plugin ABI: a loader that takes v8 and later must refuse the library
 * (and never call into this table, which is not a real v7 table). */
EX_EXPORT struct { const char* name; } ncclNetPlugin_v7 = {EX_NAME "V7"};
#endif
