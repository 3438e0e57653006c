/* A network in NCCL's net ABI over plain TCP (declarations: transports/net/nccl/net_nccl.h), built two ways:
 *  - without NCCL_EXAMPLE_NET_VERSION, into libcomm-collnet-aggd.so (tools/aggd/CMakeLists.txt): "AggdTcp", as
 *    ncclNetPlugin_v10, _v9 and _v8. NVIDIA's NCCL uses a library's CollNet (aggd_plugin.c) only with that
 *    library's network (docs/NET_PLUGINS.md). Devices: the IPv4 interfaces up and matching NCCL_SOCKET_IFNAME as
 *    NCCL reads it (name prefixes, comma-separated; a leading '^' excludes, then '=' means exact names; unset:
 *    ib*, else all but docker* and lo*, else docker*, else lo*), up to TNET_MAX_DEVS, PCI path and speed from sysfs;
 *  - as the test plugins (tests/CMakeLists.txt, -DNCCL_EXAMPLE_NET_VERSION=N): "ExampleTcp", one device (the first
 *    IPv4 interface up and not loopback, else loopback), exporting ncclNetPlugin_vN (N = 6 .. 11; with 10 also a
 *    v8 table named ExampleTcpV8, with 11 a v10 one named ExampleTcpV10: a loader must take the newest); 5: only
 *    a dummy ncclNetPlugin_v5 (an unsupported version, to be refused). The tables: aggd_net_versions.h.
 * In both NCCL_EXAMPLE_NET_ADDR=a.b.c.d makes that address the one device. listen() binds an ephemeral port on the
 * device's address, which the handle carries. connect() and accept() never block: they return success with a NULL
 * comm until the TCP connection is made and a 4-byte hello went across (connect keeps its progress in the handle,
 * as NCCL allows; accept holds up to TNET_MAX_PENDING sockets whose hello is not in, dropping with a WARN one that
 * closes or sends another hello). A message is a 16-byte header (size, tag, magic) and the payload; isend/irecv
 * post a request (at most NCCL_NET_MAX_REQUESTS per comm, else request NULL: post again later), test() moves bytes
 * with non-blocking sendmsg/recvmsg, resuming partial transfers, completing requests in posting order. irecv takes
 * one buffer (maxRecvs 1), regMr host memory only, iflush has nothing to do. A comm's first failure is WARNed with
 * its peer and returned by every later call on it. Not part of libcomm (the top CMakeLists.txt keeps this folder
 * out; COMM_BUILDING_LIBRARY empties the file there). The example alone: cc -shared -fPIC
 * -DNCCL_EXAMPLE_NET_VERSION=8 aggd_net.c -o libnccl-net-example.so. SPDX-License-Identifier: Apache-2.0 */
#ifndef COMM_BUILDING_LIBRARY
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define NET_NCCL_ABI_ONLY
#include "../../net/nccl/net_nccl.h"

#ifdef NCCL_EXAMPLE_NET_VERSION
#define TNET_EXAMPLE 1
#define TNET_NAME "ExampleTcp"
#define TNET_MAX_DEVS 1
#define TNET_V6 (NCCL_EXAMPLE_NET_VERSION == 6)
#define TNET_V7 (NCCL_EXAMPLE_NET_VERSION == 7)
#define TNET_V8 (NCCL_EXAMPLE_NET_VERSION == 8 || NCCL_EXAMPLE_NET_VERSION == 10)
#define TNET_V9 (NCCL_EXAMPLE_NET_VERSION == 9)
#define TNET_V10 (NCCL_EXAMPLE_NET_VERSION == 10 || NCCL_EXAMPLE_NET_VERSION == 11)
#define TNET_V11 (NCCL_EXAMPLE_NET_VERSION == 11)
#else
#define TNET_EXAMPLE 0
#define TNET_NAME "AggdTcp"
#define TNET_MAX_DEVS 8
#define TNET_V6 0
#define TNET_V7 0
#define TNET_V8 1
#define TNET_V9 1
#define TNET_V10 1
#define TNET_V11 0
#endif
#define TNET_ANY (TNET_V6 || TNET_V7 || TNET_V8 || TNET_V9 || TNET_V10 || TNET_V11)

#define TNET_EXPORT __attribute__((visibility("default")))
#define TNET_UNUSED __attribute__((unused))

#if TNET_ANY
#define TNET_MAGIC 0x4c43434eU /* "NCCL" */
#define TNET_MAX_PENDING 8     /* accepted connections whose hello is not in yet, per listener */
#define TNET_PEER_LEN (INET_ADDRSTRLEN + 8)

static ncclDebugLogger_t tcpLog;
#define TNET_LOG(level, flags, ...)                                                     \
  do {                                                                                  \
    ncclDebugLogger_t lg_ = __atomic_load_n(&tcpLog, __ATOMIC_ACQUIRE);                 \
    if (lg_) lg_(level, flags, __FILE__, __LINE__, "NET/" TNET_NAME " : " __VA_ARGS__); \
  } while (0)
#define TNET_WARN(...) TNET_LOG(NCCL_LOG_WARN, NCCL_NET, __VA_ARGS__)
#define TNET_INFO(...) TNET_LOG(NCCL_LOG_INFO, NCCL_NET | NCCL_INIT, __VA_ARGS__)

/* The devices, chosen by the first init that finds one; not changed after (tcpNdev is published last). */
typedef struct {
  char name[IF_NAMESIZE + 8];
  struct sockaddr_in addr; /* listeners bind here, port 0 */
  char* pciPath;           /* realpath of /sys/class/net/NAME/device; NULL for virtual interfaces */
  int speed;               /* Mbps */
} tcpDev;
static tcpDev tcpDevs[TNET_MAX_DEVS];
static int tcpFilled; /* entries of tcpDevs being filled (under tcpInitLock) */
static int tcpNdev;   /* the devices, published (atomic) once filled; 0 until an init found some */
static pthread_mutex_t tcpInitLock = PTHREAD_MUTEX_INITIALIZER;

/* The handle a listener gives its peer. `pending` is the connect side's progress (NULL as sent). */
typedef struct {
  uint32_t magic;
  struct sockaddr_in addr;
  void* pending;
} tcpHandle;
_Static_assert(sizeof(tcpHandle) <= NCCL_NET_HANDLE_MAXSIZE, "the handle must fit in NCCL's");

typedef struct {
  uint64_t size;
  int32_t tag;
  uint32_t magic;
} tcpHeader;

struct tcpComm;
typedef struct {
  struct tcpComm* comm;
  int used, done; /* used: posted and not yet reported done by test() */
  char* data;
  size_t size; /* send: bytes; receive: capacity, then bytes received */
  int tag;
  tcpHeader hdr;
  size_t off; /* bytes moved so far, header included */
} tcpReq;

enum { TNET_CONNECTING, TNET_HELLO, TNET_READY };

typedef struct tcpComm {
  int fd, isSend, stage;
  ncclResult_t err; /* the first failure; every later call returns it */
  uint32_t hello;   /* sent by connect, read by accept */
  size_t helloOff;
  char peer[TNET_PEER_LEN];
  uint64_t posted, completed; /* requests posted; completed in order */
  tcpReq reqs[NCCL_NET_MAX_REQUESTS];
} tcpComm;

typedef struct {
  int fd;
  int npending;                       /* oldest first */
  tcpComm* pending[TNET_MAX_PENDING]; /* accepted, hello not in yet */
} tcpListenComm;

static void tcpAddrStr(const struct sockaddr_in* a, char* out, size_t len) {
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
  snprintf(out, len, "%s:%u", ip, (unsigned)ntohs(a->sin_port));
}

/* ---------------------------------------------------------------- devices */

static void tcpAddDev(const char* name, struct in_addr a) {
  tcpDev* d = &tcpDevs[tcpFilled++];
  memset(d, 0, sizeof(*d));
  snprintf(d->name, sizeof(d->name), "%s", name);
  d->addr.sin_family = AF_INET;
  d->addr.sin_addr = a;
  d->speed = 10000;
#if !TNET_EXAMPLE
  /* What NCCL's own socket network reports: the PCI device behind the interface, and its speed. */
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "/sys/class/net/%s/device", name);
  d->pciPath = realpath(path, NULL);
  snprintf(path, sizeof(path), "/sys/class/net/%s/speed", name);
  FILE* f = fopen(path, "r");
  int mbps = 0;
  if (f && fscanf(f, "%d", &mbps) == 1 && mbps > 0) d->speed = mbps; /* no speed (virtual, down): 10 Gb/s */
  if (f) fclose(f);
#endif
}

#if !TNET_EXAMPLE
/* NCCL's interface list (NCCL_SOCKET_IFNAME): a leading '^' excludes, then '=' makes the names exact, then
 * comma-separated names or prefixes (a ":port" suffix is ignored). A list without a name matches every name. */
static int tcpIfMatch(const char* name, const char* list) {
  int exclude = 0, exact = 0, any = 0, hit = 0;
  if (*list == '^') exclude = 1, list++;
  if (*list == '=') exact = 1, list++;
  while (*list) {
    size_t n = strcspn(list, ",:");
    if (n > 0) {
      any = 1;
      if (strncmp(name, list, n) == 0 && (!exact || name[n] == '\0')) hit = 1;
    }
    list += n;
    if (*list == ':') list += strcspn(list, ",");
    if (*list == ',') list++;
  }
  return (any ? hit : 1) ^ exclude;
}
#endif

/* Adds the IPv4 interfaces that are up and match list (NULL: every one but loopback) to the devices. */
static void tcpScan(const char* list) {
  struct ifaddrs* ifs = NULL;
  if (getifaddrs(&ifs) != 0) {
    TNET_WARN("getifaddrs: %s", strerror(errno));
    return;
  }
#if TNET_EXAMPLE
  (void)list;
#endif
  for (struct ifaddrs* i = ifs; i && tcpFilled < TNET_MAX_DEVS; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
#if TNET_EXAMPLE
    if (i->ifa_flags & IFF_LOOPBACK) continue;
#else
    if (list ? !tcpIfMatch(i->ifa_name, list) : (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
#endif
    int dup = 0;
    for (int d = 0; d < tcpFilled; d++) dup |= strcmp(tcpDevs[d].name, i->ifa_name) == 0;
    if (!dup) tcpAddDev(i->ifa_name, ((struct sockaddr_in*)i->ifa_addr)->sin_addr);
  }
  freeifaddrs(ifs);
}

/* NCCL_EXAMPLE_NET_ADDR: that address is the one device (named after its interface when one has it). */
static int tcpOverride(void) {
  const char* env = getenv("NCCL_EXAMPLE_NET_ADDR");
  if (!env) return 0;
  struct in_addr a;
  if (inet_pton(AF_INET, env, &a) != 1) {
    TNET_WARN("NCCL_EXAMPLE_NET_ADDR=%s is not an IPv4 address: ignored", env);
    return 0;
  }
  char name[IF_NAMESIZE + 8] = "env";
  struct ifaddrs* ifs = NULL;
  if (getifaddrs(&ifs) == 0) {
    for (struct ifaddrs* i = ifs; i; i = i->ifa_next)
      if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
          ((struct sockaddr_in*)i->ifa_addr)->sin_addr.s_addr == a.s_addr)
        snprintf(name, sizeof(name), "%s", i->ifa_name);
    freeifaddrs(ifs);
  }
  tcpAddDev(name, a);
  return 1;
}

/* Fills tcpDevs (under tcpInitLock; the caller publishes tcpFilled as tcpNdev). */
static ncclResult_t tcpPickDevices(void) {
  tcpFilled = 0;
  if (tcpOverride()) return ncclSuccess;
#if TNET_EXAMPLE
  tcpScan(NULL);
  if (tcpFilled == 0) {
    struct in_addr lo = {htonl(INADDR_LOOPBACK)};
    tcpAddDev("lo", lo);
  }
#else
  const char* env = getenv("NCCL_SOCKET_IFNAME");
  if (env && strlen(env) > 1) { /* as NCCL: a shorter value is ignored */
    tcpScan(env);
    if (tcpFilled == 0) TNET_WARN("NCCL_SOCKET_IFNAME=%s: no IPv4 interface that is up matches", env);
  } else {
    static const char* const order[] = {"ib", "^docker,lo", "docker", "lo"};
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]) && tcpFilled == 0; i++) tcpScan(order[i]);
    if (tcpFilled == 0) TNET_WARN("no IPv4 interface is up");
  }
#endif
  return tcpFilled > 0 ? ncclSuccess : ncclSystemError;
}

static ncclResult_t tcpInitCommon(ncclDebugLogger_t logFunction, int version) {
  if (logFunction) __atomic_store_n(&tcpLog, logFunction, __ATOMIC_RELEASE);
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&tcpInitLock);
  if (__atomic_load_n(&tcpNdev, __ATOMIC_ACQUIRE) == 0) { /* the first init, or an earlier one found none */
    res = tcpPickDevices();
    int n = tcpFilled;
    if (res == ncclSuccess) {
      char ip[INET_ADDRSTRLEN] = "?";
      inet_ntop(AF_INET, &tcpDevs[0].addr.sin_addr, ip, sizeof(ip));
#if TNET_EXAMPLE
      (void)version;
      TNET_INFO("example NCCL v%d network plugin on %s (%s)", NCCL_EXAMPLE_NET_VERSION, tcpDevs[0].name, ip);
#else
      char list[TNET_MAX_DEVS * 64] = "";
      size_t len = 0;
      for (int d = 0; d < n && len < sizeof(list); d++) {
        inet_ntop(AF_INET, &tcpDevs[d].addr.sin_addr, ip, sizeof(ip));
        len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%d %s %s (%d Mbps)", d ? ", " : "", d,
                                tcpDevs[d].name, ip, tcpDevs[d].speed);
      }
      TNET_INFO("TCP network (ncclNetPlugin_v%d), %d device(s): %s", version, n, list);
#endif
      __atomic_store_n(&tcpNdev, n, __ATOMIC_RELEASE);
    }
  }
  pthread_mutex_unlock(&tcpInitLock);
  return res;
}

static ncclResult_t tcpDevices(int* ndev) {
  *ndev = __atomic_load_n(&tcpNdev, __ATOMIC_ACQUIRE);
  return ncclSuccess;
}

static ncclResult_t tcpCheckDev(int dev) {
  if (dev < 0 || dev >= __atomic_load_n(&tcpNdev, __ATOMIC_ACQUIRE)) {
    TNET_WARN("invalid device %d", dev);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* ---------------------------------------------------------------- connection setup */

static void tcpSockOpts(int fd) { setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int)); }

static ncclResult_t tcpErrnoResult(int err) {
  return err == EPIPE || err == ECONNRESET || err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH ||
                 err == ENETUNREACH
             ? ncclRemoteError
             : ncclSystemError;
}

static ncclResult_t tcpListen(int dev, void* handle, void** listenComm) {
  *listenComm = NULL;
  if (tcpCheckDev(dev) != ncclSuccess) return ncclInvalidArgument;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    TNET_WARN("listen: socket: %s", strerror(errno));
    return ncclSystemError;
  }
  struct sockaddr_in a = tcpDevs[dev].addr;
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(fd, SOMAXCONN) != 0 ||
      getsockname(fd, (struct sockaddr*)&a, &len) != 0) {
    TNET_WARN("cannot listen on %s: %s", tcpDevs[dev].name, strerror(errno));
    close(fd);
    return ncclSystemError;
  }
  tcpListenComm* l = calloc(1, sizeof(*l));
  if (!l) {
    TNET_WARN("listen: out of memory");
    close(fd);
    return ncclSystemError;
  }
  l->fd = fd;
  tcpHandle* h = (tcpHandle*)handle;
  memset(h, 0, sizeof(*h));
  h->magic = TNET_MAGIC;
  h->addr = a;
  *listenComm = l;
  return ncclSuccess;
}

static void tcpFreeComm(tcpComm* c) {
  if (!c) return;
  if (c->fd >= 0) close(c->fd);
  free(c);
}

/* Connect to the handle's address; *sendComm stays NULL until connected and the hello is out. No device offload
 * (sendDevComm: ncclNetDeviceHandle_v8_t, _v9_t and _v10_t are one type). */
static ncclResult_t tcpConnect(int dev, void* handle, void** sendComm,
                               ncclNetDeviceHandle_v8_t** sendDevComm TNET_UNUSED) {
  *sendComm = NULL;
  if (tcpCheckDev(dev) != ncclSuccess) return ncclInvalidArgument;
  tcpHandle* h = (tcpHandle*)handle;
  if (h->magic != TNET_MAGIC) {
    TNET_WARN("connect: not a handle of this plugin");
    return ncclInvalidArgument;
  }
  tcpComm* c = (tcpComm*)h->pending;
  int err = 0;
  const char* what = "";
  if (!c) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    c = fd >= 0 ? calloc(1, sizeof(*c)) : NULL;
    if (!c) {
      TNET_WARN("connect: %s", fd < 0 ? strerror(errno) : "out of memory");
      if (fd >= 0) close(fd);
      return ncclSystemError;
    }
    c->fd = fd;
    c->isSend = 1;
    c->hello = TNET_MAGIC;
    tcpAddrStr(&h->addr, c->peer, sizeof(c->peer));
    tcpSockOpts(fd);
    h->pending = c;
    int rc = connect(fd, (struct sockaddr*)&h->addr, sizeof(h->addr));
    /* EINTR: the connection goes on in the background, as with EINPROGRESS */
    if (rc != 0 && errno != EINPROGRESS && errno != EINTR) err = errno;
    if (err) goto fail;
    c->stage = rc == 0 ? TNET_HELLO : TNET_CONNECTING;
  }
  if (c->stage == TNET_CONNECTING) {
    struct pollfd p = {c->fd, POLLOUT, 0};
    int n = poll(&p, 1, 0);
    if (n == 0 || (n < 0 && errno == EINTR)) return ncclSuccess; /* still connecting: call again */
    socklen_t len = sizeof(err);
    if (n < 0 || getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err) goto fail;
    c->stage = TNET_HELLO;
  }
  while (c->helloOff < sizeof(c->hello)) {
    ssize_t n = send(c->fd, (char*)&c->hello + c->helloOff, sizeof(c->hello) - c->helloOff, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    if (n <= 0) {
      err = n == 0 ? EPIPE : errno;
      what = "sending the hello: ";
      goto fail;
    }
    c->helloOff += (size_t)n;
  }
  c->stage = TNET_READY;
  h->pending = NULL;
  *sendComm = c;
  return ncclSuccess;
fail:
  TNET_WARN("connect to %s: %s%s", c->peer, what, strerror(err));
  h->pending = NULL;
  tcpFreeComm(c);
  return tcpErrnoResult(err);
}

static void tcpDropPending(tcpListenComm* l, int i, int freeComm) {
  if (freeComm) tcpFreeComm(l->pending[i]);
  memmove(&l->pending[i], &l->pending[i + 1], (size_t)(l->npending - i - 1) * sizeof(l->pending[0]));
  l->npending--;
}

/* accept(2) errors that mean "this connection failed, try again" (accept(2), Linux: pending network errors). */
static int tcpAcceptRetry(int err) {
  return err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED || err == EPROTO ||
         err == ENETDOWN || err == ENOPROTOOPT || err == EHOSTDOWN || err == ENONET || err == EHOSTUNREACH ||
         err == EOPNOTSUPP || err == ENETUNREACH;
}

/* Takes at most one new connection per call into the pending ones (when all TNET_MAX_PENDING slots hold a
 * connection that sent no hello, the oldest is dropped), then reads hellos: the first complete and right one
 * becomes the comm; one that closes or sends another hello is dropped. */
static ncclResult_t tcpAccept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm TNET_UNUSED) {
  *recvComm = NULL;
  tcpListenComm* l = (tcpListenComm*)listenComm;
  if (!l) return ncclInvalidArgument;
  struct sockaddr_in from;
  socklen_t fromLen = sizeof(from);
  memset(&from, 0, sizeof(from));
  int fd = accept4(l->fd, (struct sockaddr*)&from, &fromLen, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) {
    if (l->npending == TNET_MAX_PENDING) {
      TNET_WARN("accept: %d connections sent no hello; dropping the oldest, from %s", TNET_MAX_PENDING,
                l->pending[0]->peer);
      tcpDropPending(l, 0, 1);
    }
    tcpComm* c = calloc(1, sizeof(*c));
    if (!c) {
      TNET_WARN("accept: out of memory");
      close(fd);
      return ncclSystemError;
    }
    c->fd = fd;
    c->stage = TNET_HELLO;
    tcpAddrStr(&from, c->peer, sizeof(c->peer));
    tcpSockOpts(fd);
    l->pending[l->npending++] = c;
  } else if (!tcpAcceptRetry(errno)) {
    TNET_WARN("accept: %s", strerror(errno));
    return ncclSystemError;
  }
  for (int i = 0; i < l->npending;) {
    tcpComm* c = l->pending[i];
    ssize_t n = recv(c->fd, (char*)&c->hello + c->helloOff, sizeof(c->hello) - c->helloOff, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      i++;
      continue;
    }
    if (n <= 0) {
      TNET_WARN("accept: %s left before its hello (%s): dropped", c->peer, n == 0 ? "closed" : strerror(errno));
      tcpDropPending(l, i, 1);
      continue;
    }
    c->helloOff += (size_t)n;
    if (c->helloOff < sizeof(c->hello)) {
      i++;
      continue;
    }
    if (c->hello != TNET_MAGIC) {
      TNET_WARN("accept: %s sent hello 0x%x, not this plugin's: dropped", c->peer, c->hello);
      tcpDropPending(l, i, 1);
      continue;
    }
    c->stage = TNET_READY;
    tcpDropPending(l, i, 0);
    *recvComm = c;
    return ncclSuccess;
  }
  return ncclSuccess;
}

static ncclResult_t tcpRegMr(void* comm TNET_UNUSED, void* data TNET_UNUSED, size_t size TNET_UNUSED, int type,
                             void** mhandle) {
  static int dummy;
  if (type != NCCL_PTR_HOST) {
    TNET_WARN("regMr: only host memory (type %d)", type);
    return ncclInvalidArgument;
  }
  *mhandle = &dummy;
  return ncclSuccess;
}

static ncclResult_t tcpRegMrDmaBuf(void* comm TNET_UNUSED, void* data TNET_UNUSED, size_t size TNET_UNUSED,
                                   int type TNET_UNUSED, uint64_t offset TNET_UNUSED, int fd TNET_UNUSED,
                                   void** mhandle) {
  *mhandle = NULL;
  return ncclInvalidUsage; /* ptrSupport does not include NCCL_PTR_DMABUF */
}

static ncclResult_t tcpDeregMr(void* comm TNET_UNUSED, void* mhandle TNET_UNUSED) { return ncclSuccess; }

/* ---------------------------------------------------------------- data path */

/* Records the comm's first failure, WARNed once with its peer, and returns it. */
static ncclResult_t tcpFail(tcpComm* c, ncclResult_t res, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static ncclResult_t tcpFail(tcpComm* c, ncclResult_t res, const char* fmt, ...) {
  if (c->err != ncclSuccess) return c->err;
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  TNET_WARN("%s %s: %s", c->isSend ? "send to" : "receive from", c->peer, msg);
  c->err = res;
  return res;
}

/* Move request r's bytes as far as the socket takes them now. Sets r->done when all moved. */
static ncclResult_t tcpStep(tcpComm* c, tcpReq* r) {
  const size_t hlen = sizeof(tcpHeader);
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
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
    ssize_t n = c->isSend ? sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) : recvmsg(c->fd, &msg, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    if (n == 0 && !c->isSend) return tcpFail(c, ncclRemoteError, "the peer closed the connection");
    if (n <= 0) {
      int err = n == 0 ? EPIPE : errno;
      return tcpFail(c, tcpErrnoResult(err), "%s", strerror(err));
    }
    size_t before = r->off;
    r->off += (size_t)n;
    if (!c->isSend && before < hlen && r->off >= hlen) {
      /* The header is in: check it and learn the payload size. */
      if (r->hdr.magic != TNET_MAGIC) return tcpFail(c, ncclInternalError, "corrupt message header");
      if (r->hdr.size > r->size)
        return tcpFail(c, ncclInternalError, "message of %llu bytes for a buffer of %zu",
                       (unsigned long long)r->hdr.size, r->size);
      if (r->hdr.tag != r->tag)
        return tcpFail(c, ncclInternalError, "message tag %d, expected %d", (int)r->hdr.tag, r->tag);
      r->size = (size_t)r->hdr.size;
    }
  }
}

/* Progress the comm's requests in the order they were posted. */
static ncclResult_t tcpProgress(tcpComm* c) {
  if (c->err != ncclSuccess) return c->err;
  while (c->completed < c->posted) {
    tcpReq* r = &c->reqs[c->completed % NCCL_NET_MAX_REQUESTS];
    ncclResult_t res = tcpStep(c, r);
    if (res != ncclSuccess) return res;
    if (!r->done) break;
    c->completed++;
  }
  return ncclSuccess;
}

/* A free request slot, or NULL when all are in use (the caller then returns request NULL: try again). */
static tcpReq* tcpPost(tcpComm* c, void* data, size_t size, int tag) {
  tcpReq* r = &c->reqs[c->posted % NCCL_NET_MAX_REQUESTS];
  if (r->used) return NULL;
  *r = (tcpReq){.comm = c, .used = 1, .data = (char*)data, .size = size, .tag = tag, .hdr = {size, tag, TNET_MAGIC}};
  c->posted++;
  return r;
}

static ncclResult_t tcpIsendCommon(void* sendComm, void* data, size_t size, int tag, void** request) {
  tcpComm* c = (tcpComm*)sendComm;
  *request = NULL;
  if (!c || !c->isSend) {
    TNET_WARN("isend: not a send comm");
    return ncclInvalidArgument;
  }
  if (c->err != ncclSuccess) return c->err;
  tcpReq* r = tcpPost(c, data, size, tag);
  if (!r) return ncclSuccess;
  *request = r;
  return tcpProgress(c); /* start sending at once */
}

static ncclResult_t tcpIrecvCommon(void* recvComm, int n, void** data, size_t capacity, int* tags, void** request) {
  tcpComm* c = (tcpComm*)recvComm;
  *request = NULL;
  if (!c || c->isSend || n != 1) {
    TNET_WARN("irecv takes exactly one buffer, on a receive comm (n=%d)", n);
    return ncclInvalidArgument;
  }
  if (c->err != ncclSuccess) return c->err;
  tcpReq* r = tcpPost(c, data[0], capacity, tags ? tags[0] : 0);
  if (r) *request = r;
  return ncclSuccess;
}

static ncclResult_t tcpIflush(void* recvComm TNET_UNUSED, int n TNET_UNUSED, void** data TNET_UNUSED,
                              int* sizes TNET_UNUSED, void** mhandles TNET_UNUSED, void** request) {
  *request = NULL; /* host memory: nothing to flush */
  return ncclSuccess;
}

static ncclResult_t tcpTest(void* request, int* done, int* sizes) {
  tcpReq* r = (tcpReq*)request;
  *done = 0;
  if (!r || !r->used) {
    TNET_WARN("test: not a pending request");
    return ncclInvalidArgument;
  }
  ncclResult_t res = tcpProgress(r->comm);
  if (res != ncclSuccess) return res;
  if (!r->done) return ncclSuccess;
  *done = 1;
  if (sizes) sizes[0] = (int)r->size;
  r->used = 0;
  return ncclSuccess;
}

static ncclResult_t tcpCloseComm(void* comm) {
  tcpFreeComm((tcpComm*)comm);
  return ncclSuccess;
}

static ncclResult_t tcpCloseListen(void* listenComm) {
  tcpListenComm* l = (tcpListenComm*)listenComm;
  if (!l) return ncclSuccess;
  for (int i = 0; i < l->npending; i++) tcpFreeComm(l->pending[i]);
  close(l->fd);
  free(l);
  return ncclSuccess;
}

#endif /* TNET_ANY */

/* The tables of each version (and the unsupported one of the refusal test). */
#include "aggd_net_versions.h"

#endif /* COMM_BUILDING_LIBRARY */
