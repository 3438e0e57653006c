/* An example CollNet (in-network reduction) plugin in NCCL's shape (transports/collnet/nccl/collnet_nccl.h,
 * docs/COLLNET_ABI.md), over TCP: built into one library with the example network plugin
 * (transports/collnet/aggd/aggd_net.c), as a SHARP plugin library is, to test libcomm's CollNet adapter end to end.
 *
 * One device. listen() binds an ephemeral port on the address aggd_net.c picks (NCCL_EXAMPLE_NET_ADDR,
 * else the first IPv4 interface up and not loopback, else loopback); the handle holds a magic, the address, the
 * port and a random 64-bit nonce (handles[0]'s names the group). connect() forms a star: the others connect to
 * member 0 and send a hello (rank, size, nonce); member 0 answers them all once all are in; it waits up to
 * NCCL_EXAMPLE_COLLNET_TIMEOUT_MS (30000). iallreduce() queues a request (64 per collComm at most; beyond that
 * *request is NULL: retry); a worker thread per collComm runs them in order over blocking socket I/O, every wait
 * bounded by the timeout: each member sends a header (magic, seq, bytes, type, op) and its data to member 0,
 * which reduces in the fixed member order 0, 1, ..., n-1 (half and bfloat16 through float, rounded to nearest
 * even after each op) and sends the result back, so every member gets the same bits. Headers that disagree fail
 * that operation on every member (ncclInvalidUsage); a socket error or a member gone fails every pending and
 * later one (ncclSystemError). iallgather and ireducescatter (windows of the nranks x bytesPerRank buffer in SGE
 * lists, NCCL's contract: collnet_example_gather.h) go the same way: member 0 gathers the pieces, or reduces the
 * windows as iallreduce does, and sends each member its result.
 *
 * -DNCCL_EXAMPLE_COLLNET_VERSION=N: 11 (default) exports ncclCollNetPlugin_v11 and a v8 table (named
 * ExampleCollNetV8: a loader must take the newest); 8, 9, 10 export ncclCollNetPlugin_vN.
 * Environment: NCCL_EXAMPLE_COLLNET_MAX_BYTES (v9+ maxCollBytes, default 4 MiB; larger operations are refused),
 * NCCL_EXAMPLE_COLLNET_TIMEOUT_MS, NCCL_EXAMPLE_COLLNET_FAIL_CONNECT_RANK=r (member r's connect fails with
 * ncclInvalidUsage, for tests), NCCL_EXAMPLE_COLLNET_NO_GATHER=1 (read when the library is loaded: every table's
 * iallgather and ireducescatter are NULL), NCCL_EXAMPLE_NET_ADDR. SPDX-License-Identifier: Apache-2.0 */
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
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NET_NCCL_ABI_ONLY
#include "collnet_nccl.h"

#ifndef NCCL_EXAMPLE_COLLNET_VERSION
#define NCCL_EXAMPLE_COLLNET_VERSION 11
#endif
#if NCCL_EXAMPLE_COLLNET_VERSION < 8 || NCCL_EXAMPLE_COLLNET_VERSION > 11
#error "NCCL_EXAMPLE_COLLNET_VERSION must be 8, 9, 10 or 11"
#endif

#define CX_NAME "ExampleCollNet"
#define CX_EXPORT __attribute__((visibility("default")))
#define CX_MAGIC 0x58434c4eU /* "NLCX" */
#define CX_MAX_REQUESTS 64
#define CX_CHUNK ((size_t)256 << 10) /* member 0 receives and reduces in pieces of this size */
#define CX_DEFAULT_MAX_BYTES ((size_t)4 << 20)
#define CX_V8_MAX_BYTES ((size_t)512 << 20) /* what NCCL core assumes for a v8 CollNet */
#define CX_LIMIT_MAX_BYTES ((size_t)1 << 40)
#define CX_DEFAULT_TIMEOUT_MS 30000

static ncclDebugLogger_t cxLogger; /* read and written atomically: init may run while workers log */

#define CX_LOG(level, flags, ...)                                                       \
  do {                                                                                  \
    ncclDebugLogger_t l_ = __atomic_load_n(&cxLogger, __ATOMIC_ACQUIRE);                \
    if (l_) l_(level, flags, __FILE__, __LINE__, "COLLNET/" CX_NAME " : " __VA_ARGS__); \
  } while (0)
#define CX_WARN(...) CX_LOG(NCCL_LOG_WARN, NCCL_NET, __VA_ARGS__)
#define CX_INFO(...) CX_LOG(NCCL_LOG_INFO, NCCL_NET | NCCL_INIT, __VA_ARGS__)
/* WARN and return res. */
#define CX_FAIL(res, ...) \
  do {                    \
    CX_WARN(__VA_ARGS__); \
    return res;           \
  } while (0)

/* The handle listen() writes (24 of NCCL's 128 bytes). */
typedef struct {
  uint32_t magic;
  uint32_t addr;    /* IPv4, network byte order */
  uint16_t port;    /* network byte order */
  uint16_t version; /* NCCL_EXAMPLE_COLLNET_VERSION (informative) */
  uint32_t reserved;
  uint64_t nonce; /* random; handles[0]'s names the group */
} cxHandle;
_Static_assert(sizeof(cxHandle) <= NCCL_NET_HANDLE_MAXSIZE, "the handle must fit in NCCL's");

/* Connection setup: a member's hello to member 0 (kind 0) and member 0's answer (kind 1). */
typedef struct {
  uint32_t magic, kind, rank, nranks;
  uint64_t nonce;
} cxHello;

/* Every operation: a member's header to member 0, and member 0's answer (status != 0: failed, no data); data
 * bytes follow it. bytes: allreduce: count x size, allgather and reducescatter: the window's. */
typedef struct {
  uint32_t magic;
  int32_t status;
  uint64_t seq, bytes;
  int32_t type, op, kind, reserved;
  uint64_t bytesPerRank, windowOffset, data;
} cxWire;

typedef struct {
  uint32_t magic;
  uint64_t commId;
} cxCtx;

typedef struct {
  uint32_t magic;
  int fd;
  cxCtx* ctx; /* v11; NULL through the older tables */
  cxHandle handle;
} cxListen;

enum { CX_FREE = 0, CX_POSTED, CX_DONE, CX_FAILED };
enum { CX_ALLREDUCE = 0, CX_ALLGATHER, CX_REDUCESCATTER };

/* One element of a scatter-gather list (a window's piece, in order). */
typedef struct {
  char* p;
  size_t size;
} cxPart;

struct cxColl;
typedef struct {
  struct cxColl* coll;
  int state; /* CX_*, under coll->mu */
  ncclResult_t result;
  uint64_t seq;
  char *send, *recv; /* allgather: send; reducescatter: recv (this member's piece of the window) */
  size_t bytes;      /* allreduce: count x size; allgather, reducescatter: the window's */
  int type, op, kind;
  size_t bytesPerRank, windowOffset, report; /* report: the size test() gives */
  int nParts;                                /* allgather: recv; reducescatter: send */
  cxPart* parts;                             /* &part0, or allocated; until the operation ran */
  cxPart part0;
} cxReq;

typedef struct cxColl {
  uint32_t magic;
  int rank, nranks;
  int* fds; /* member 0: fds[m] = member m (m >= 1); others: fds[0] = member 0 */
  int timeoutMs, hasWorker;
  size_t maxBytes;
  uint64_t nonce;
  char* scratch; /* member 0 */
  char* acc;     /* member 0's reduce-scatter window (its worker's) */
  size_t accSize;
  pthread_t worker;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;                   /* atomic: closeColl tells the worker (and its I/O) to leave */
  ncclResult_t broken;        /* under mu: a transport failure; every later operation fails with it */
  uint64_t posted, processed; /* under mu */
  cxReq reqs[CX_MAX_REQUESTS];
} cxColl;

typedef struct {
  uint32_t magic;
  char* data;
  size_t size;
  cxColl* coll;
} cxMr;

static pthread_mutex_t cxLock = PTHREAD_MUTEX_INITIALIZER;
static struct in_addr cxAddr; /* under cxLock */

/* ---------------------------------------------------------------- helpers */

static int64_t cxNowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* An integer from the environment, or dflt when unset or not in [lo, hi]. */
/* Milliseconds to the deadline (at least 1). */
static int cxLeftMs(int64_t deadline) {
  int64_t left = deadline - cxNowMs();
  return left > 1 ? (int)left : 1;
}

static long long cxEnv(const char* name, long long dflt, long long lo, long long hi) {
  const char* s = getenv(name);
  char* end = NULL;
  long long v = s && *s ? strtoll(s, &end, 10) : dflt;
  return (end && *end) || v < lo || v > hi ? dflt : v;
}
#define cxTimeoutMs() ((int)cxEnv("NCCL_EXAMPLE_COLLNET_TIMEOUT_MS", CX_DEFAULT_TIMEOUT_MS, 1, 86400000))
#define cxMaxBytes() \
  ((size_t)cxEnv("NCCL_EXAMPLE_COLLNET_MAX_BYTES", (long long)CX_DEFAULT_MAX_BYTES, 1, (long long)CX_LIMIT_MAX_BYTES))

static uint64_t cxRandom64(void) {
  uint64_t v = 0;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
    v = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
  return v;
}

/* The address aggd_net.c picks: NCCL_EXAMPLE_NET_ADDR, else the first IPv4 interface up and not
 * loopback, else loopback; picked again when asked (init), else once. */
static struct in_addr cxGetAddress(int again) {
  pthread_mutex_lock(&cxLock);
  const char* env = getenv("NCCL_EXAMPLE_NET_ADDR");
  if (again || cxAddr.s_addr == 0) {
    memset(&cxAddr, 0, sizeof(cxAddr));
    struct ifaddrs* ifs = NULL;
    if ((!env || inet_pton(AF_INET, env, &cxAddr) != 1) && getifaddrs(&ifs) == 0) {
      for (struct ifaddrs* i = ifs; i && cxAddr.s_addr == 0; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK))
          cxAddr = ((struct sockaddr_in*)i->ifa_addr)->sin_addr;
      freeifaddrs(ifs);
    }
    if (cxAddr.s_addr == 0) cxAddr.s_addr = htonl(INADDR_LOOPBACK);
  }
  struct in_addr a = cxAddr;
  pthread_mutex_unlock(&cxLock);
  return a;
}

enum { CX_IO_OK = 0, CX_IO_EOF = -1, CX_IO_TIMEOUT = -2, CX_IO_STOPPED = -3 };

static const char* cxIoWhy(int rc) {
  return rc == CX_IO_EOF ? "the peer closed the connection" : rc == CX_IO_TIMEOUT ? "timed out" : strerror(rc);
}

/* Move len bytes over the non-blocking socket fd, waiting in poll() for at most timeoutMs without progress
 * (from the start only, unless resetOnProgress), and leaving early once *stop is set. CX_IO_*, or an errno. */
static int cxXfer(int fd, void* buf, size_t len, int isSend, int timeoutMs, int resetOnProgress, int* stop) {
  char* p = (char*)buf;
  size_t done = 0;
  int64_t deadline = cxNowMs() + timeoutMs;
  while (done < len) {
    if (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE)) return CX_IO_STOPPED;
    ssize_t n = isSend ? send(fd, p + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                       : recv(fd, p + done, len - done, MSG_DONTWAIT);
    if (n > 0) {
      done += (size_t)n;
      if (resetOnProgress) deadline = cxNowMs() + timeoutMs;
      continue;
    }
    if (n == 0 && !isSend) return CX_IO_EOF;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno ? errno : EIO;
    int64_t left = deadline - cxNowMs();
    if (left <= 0) return CX_IO_TIMEOUT;
    struct pollfd pfd = {fd, (short)(isSend ? POLLOUT : POLLIN), 0};
    if (poll(&pfd, 1, left > 100 ? 100 : (int)left) < 0 && errno != EINTR) return errno;
  }
  return CX_IO_OK;
}

#include "collnet_example_reduce.h"

/* ---------------------------------------------------------------- init, properties, listen */

static ncclResult_t cxInitCommon(ncclDebugLogger_t logFunction) {
  __atomic_store_n(&cxLogger, logFunction, __ATOMIC_RELEASE);
  struct in_addr a = cxGetAddress(1);
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a, ip, sizeof(ip));
  CX_INFO("example NCCL v%d CollNet plugin on %s", NCCL_EXAMPLE_COLLNET_VERSION, ip);
  return ncclSuccess;
}

static ncclResult_t cxDevices(int* ndev) {
  *ndev = 1;
  return ncclSuccess;
}

/* Designated initializers of the properties (every version; v9 and later). */
#define CX_PROPS                                                                                               \
  .name = (char*)CX_NAME, .pciPath = NULL, .guid = ntohl(cxGetAddress(0).s_addr), .ptrSupport = NCCL_PTR_HOST, \
  .speed = 10000, .maxComms = 64, .maxRecvs = 1, .netDeviceType = NCCL_NET_DEVICE_HOST,                        \
  .netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION
#define CX_PROPS_V9 \
  CX_PROPS, .forceFlush = 0, .vProps = {1, {0}}, .maxP2pBytes = (size_t)1 << 30, .maxCollBytes = cxMaxBytes()

static ncclResult_t cxCheckDev(int dev, const char* what) {
  if (dev == 0) return ncclSuccess;
  CX_WARN("%s: invalid device %d (there is one)", what, dev);
  return ncclInvalidArgument;
}

static ncclResult_t cxListenCommon(cxCtx* ctx, int dev, void* handle, void** listenComm) {
  *listenComm = NULL;
  if (cxCheckDev(dev, "listen") != ncclSuccess || !handle) return ncclInvalidArgument;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) CX_FAIL(ncclSystemError, "listen: socket: %s", strerror(errno));
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr = cxGetAddress(0)};
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
  socklen_t len = sizeof(a);
  cxListen* l = NULL;
  if (bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(fd, SOMAXCONN) != 0 ||
      getsockname(fd, (struct sockaddr*)&a, &len) != 0 || !(l = calloc(1, sizeof(*l)))) {
    CX_WARN("listen: cannot listen on %s: %s", ip, strerror(errno));
    close(fd);
    return ncclSystemError;
  }
  *l = (cxListen){CX_MAGIC, fd, ctx, {CX_MAGIC, a.sin_addr.s_addr, a.sin_port, NCCL_EXAMPLE_COLLNET_VERSION, 0, 0}};
  l->handle.nonce = cxRandom64();
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &l->handle, sizeof(l->handle));
  *listenComm = l;
  return ncclSuccess;
}

static ncclResult_t cxCloseListen(void* listenComm) {
  cxListen* l = (cxListen*)listenComm;
  if (!l) return ncclSuccess;
  if (l->magic != CX_MAGIC) CX_FAIL(ncclInvalidArgument, "closeListen: not a listener of this plugin");
  close(l->fd);
  l->magic = 0;
  free(l);
  return ncclSuccess;
}

static ncclResult_t cxReduceSupport(ncclDataType_t dataType, ncclRedOp_t redOp, int* supported) {
  if (!supported) return ncclInvalidArgument;
  *supported = cxSupported((int)dataType, (int)redOp);
  return ncclSuccess;
}

/* ---------------------------------------------------------------- connect */

static void cxFreeColl(cxColl* c) {
  for (int i = 0; i < c->nranks; i++)
    if (c->fds && c->fds[i] >= 0) close(c->fds[i]);
  for (int i = 0; i < CX_MAX_REQUESTS; i++)
    if (c->reqs[i].parts != &c->reqs[i].part0) free(c->reqs[i].parts);
  free(c->fds);
  free(c->scratch);
  free(c->acc);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  c->magic = 0;
  free(c);
}

/* Member 0: accept the nranks-1 others on the listener, then answer each. */
static ncclResult_t cxAcceptAll(cxColl* c, cxListen* l, int64_t deadline) {
  int joined = 0;
  while (joined < c->nranks - 1) {
    int64_t left = deadline - cxNowMs();
    if (left <= 0)
      CX_FAIL(ncclSystemError, "connect: member 0: only %d of the %d other members joined within %d ms", joined,
              c->nranks - 1, c->timeoutMs);
    struct pollfd pfd = {l->fd, POLLIN, 0};
    if (poll(&pfd, 1, left > 100 ? 100 : (int)left) <= 0) continue;
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) continue;
      CX_WARN("connect: member 0: accept: %s", strerror(errno));
      return ncclSystemError;
    }
    cxHello h;
    int rc = cxXfer(fd, &h, sizeof(h), 0, (int)left, 0, NULL);
    if (rc != CX_IO_OK || h.magic != CX_MAGIC || h.kind != 0 || h.nonce != c->nonce ||
        h.nranks != (uint32_t)c->nranks || h.rank < 1 || h.rank >= (uint32_t)c->nranks || c->fds[h.rank] >= 0) {
      CX_WARN("connect: member 0: refused a connection (%s)",
              rc != CX_IO_OK ? cxIoWhy(rc) : "not a hello of this group, or a member twice");
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->fds[h.rank] = fd;
    joined++;
  }
  cxHello ack = {CX_MAGIC, 1, 0, (uint32_t)c->nranks, c->nonce};
  for (int m = 1; m < c->nranks; m++) {
    int rc = cxXfer(c->fds[m], &ack, sizeof(ack), 1, cxLeftMs(deadline), 0, NULL);
    if (rc != CX_IO_OK) CX_FAIL(ncclSystemError, "connect: member 0: answering member %d: %s", m, cxIoWhy(rc));
  }
  return ncclSuccess;
}

/* Any other member: connect to member 0 (again after a refusal), say hello, wait for its answer. */
static ncclResult_t cxJoin(cxColl* c, const cxHandle* root, int64_t deadline) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = root->port, .sin_addr = {root->addr}};
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
  int fd, err;
  while ((fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) >= 0) {
    err = connect(fd, (struct sockaddr*)&a, sizeof(a)) == 0 ? 0 : errno;
    for (int64_t left; (err == EINPROGRESS || err == EINTR) && (left = deadline - cxNowMs()) > 0;) {
      struct pollfd pfd = {fd, POLLOUT, 0};
      socklen_t len = sizeof(err);
      if (poll(&pfd, 1, left > 100 ? 100 : (int)left) > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    }
    if (err == 0) break;
    close(fd);
    if (err == EINPROGRESS || err == EINTR) err = ETIMEDOUT;
    if (err != ECONNREFUSED || cxNowMs() + 50 >= deadline)
      CX_FAIL(ncclSystemError, "connect: member %d: cannot reach member 0 at %s:%d within %d ms: %s", c->rank, ip,
              ntohs(a.sin_port), c->timeoutMs, strerror(err));
    usleep(50 * 1000);
  }
  if (fd < 0) CX_FAIL(ncclSystemError, "connect: socket: %s", strerror(errno));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  c->fds[0] = fd;
  cxHello h = {CX_MAGIC, 0, (uint32_t)c->rank, (uint32_t)c->nranks, c->nonce};
  int rc = cxXfer(fd, &h, sizeof(h), 1, cxLeftMs(deadline), 0, NULL);
  if (rc == CX_IO_OK) rc = cxXfer(fd, &h, sizeof(h), 0, cxLeftMs(deadline), 0, NULL);
  if (rc != CX_IO_OK)
    CX_FAIL(ncclSystemError, "connect: member %d: no answer from member 0 at %s:%d: %s", c->rank, ip, ntohs(a.sin_port),
            cxIoWhy(rc));
  if (h.magic != CX_MAGIC || h.kind != 1 || h.nonce != c->nonce || h.nranks != (uint32_t)c->nranks)
    CX_FAIL(ncclSystemError, "connect: member %d: a bad answer from member 0 at %s", c->rank, ip);
  return ncclSuccess;
}

static void* cxWorker(void* arg);

static ncclResult_t cxConnect(void* handles[], int nranks, int rank, void* listenComm, void** collComm) {
  *collComm = NULL;
  cxListen* l = (cxListen*)listenComm;
  if (!l || l->magic != CX_MAGIC || !handles || nranks < 1 || rank < 0 || rank >= nranks)
    CX_FAIL(ncclInvalidArgument, "connect: bad arguments (rank %d of %d, listenComm %p)", rank, nranks, listenComm);
  for (int i = 0; i < nranks; i++) {
    const cxHandle* h = (const cxHandle*)handles[i];
    if (!h || h->magic != CX_MAGIC)
      CX_FAIL(ncclInvalidArgument, "connect: handles[%d] is not a handle of this plugin", i);
  }
  const cxHandle* mine = (const cxHandle*)handles[rank];
  if (mine->nonce != l->handle.nonce || mine->port != l->handle.port || mine->addr != l->handle.addr)
    CX_FAIL(ncclInvalidArgument, "connect: handles[%d] is not the handle of this member's listener", rank);
  if (cxEnv("NCCL_EXAMPLE_COLLNET_FAIL_CONNECT_RANK", -1, 0, INT32_MAX) == rank)
    CX_FAIL(ncclInvalidUsage, "connect: member %d of %d fails, as NCCL_EXAMPLE_COLLNET_FAIL_CONNECT_RANK asks", rank,
            nranks);
  cxColl* c = calloc(1, sizeof(*c));
  if (!c) return ncclSystemError;
  *c = (cxColl){
      .magic = CX_MAGIC, .rank = rank, .nranks = nranks, .timeoutMs = cxTimeoutMs(), .maxBytes = cxMaxBytes()};
  c->nonce = ((const cxHandle*)handles[0])->nonce;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  for (int i = 0; i < CX_MAX_REQUESTS; i++) c->reqs[i].coll = c;
  c->fds = malloc(sizeof(int) * (size_t)nranks);
  if (!c->fds || (rank == 0 && nranks > 1 && !(c->scratch = malloc(CX_CHUNK)))) {
    cxFreeColl(c);
    return ncclSystemError;
  }
  for (int i = 0; i < nranks; i++) c->fds[i] = -1;
  int64_t deadline = cxNowMs() + c->timeoutMs;
  ncclResult_t res = ncclSuccess;
  if (nranks > 1) res = rank == 0 ? cxAcceptAll(c, l, deadline) : cxJoin(c, (const cxHandle*)handles[0], deadline);
  if (res == ncclSuccess && nranks > 1 && !(c->hasWorker = pthread_create(&c->worker, NULL, cxWorker, c) == 0)) {
    CX_WARN("connect: cannot start the worker thread");
    res = ncclSystemError;
  }
  if (res != ncclSuccess) {
    cxFreeColl(c);
    return res;
  }
  CX_INFO("member %d of %d connected (group %016llx)", rank, nranks, (unsigned long long)c->nonce);
  *collComm = c;
  return ncclSuccess;
}

/* ---------------------------------------------------------------- the worker */

static int cxIo(cxColl* c, int peer, void* buf, size_t len, int isSend, uint64_t seq, const char* what) {
  int rc = cxXfer(c->fds[peer], buf, len, isSend, c->timeoutMs, 1, &c->stop);
  if (rc != CX_IO_OK && rc != CX_IO_STOPPED)
    CX_WARN("member %d, operation %llu: %s %s member %d: %s", c->rank, (unsigned long long)seq,
            isSend ? "sending" : "receiving", what, peer, cxIoWhy(rc));
  return rc;
}

#include "collnet_example_gather.h"

/* Member 0 of an allreduce: gather everyone's data in member order, reduce, send the result back. */
static ncclResult_t cxRunRoot(cxColl* c, const cxReq* r) {
  if (r->recv != r->send && r->bytes) memmove(r->recv, r->send, r->bytes);
  size_t esz = (size_t)cxTypeSize(r->type);
  int bad = 0;
  for (int m = 1; m < c->nranks; m++) {
    cxWire h;
    if (cxRootHeader(c, r, m, &h, &bad) != ncclSuccess) return ncclSystemError;
    for (uint64_t off = 0; off < h.data;) { /* (after a mismatch, the data is only drained) */
      size_t len = h.data - off < CX_CHUNK ? (size_t)(h.data - off) : CX_CHUNK;
      if (cxIo(c, m, c->scratch, len, 0, r->seq, "data from")) return ncclSystemError;
      if (!bad) cxReduce(r->recv + off, c->scratch, len / esz, r->type, r->op);
      off += len;
    }
  }
  return cxRootAnswer(c, r, bad);
}

static void cxShutdownAll(cxColl* c) {
  for (int i = 0; i < c->nranks; i++)
    if (c->fds[i] >= 0) shutdown(c->fds[i], SHUT_RDWR);
}

static void* cxWorker(void* arg) {
  cxColl* c = (cxColl*)arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE) && c->processed == c->posted) pthread_cond_wait(&c->cv, &c->mu);
    if (__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) break;
    cxReq* r = &c->reqs[c->processed % CX_MAX_REQUESTS];
    cxReq job = *r;
    ncclResult_t res = c->broken;
    pthread_mutex_unlock(&c->mu);
    if (res == ncclSuccess)
      res = c->rank != 0               ? cxRunMember(c, &job)
            : job.kind == CX_ALLREDUCE ? cxRunRoot(c, &job)
            : job.kind == CX_ALLGATHER ? cxRunGatherRoot(c, &job)
                                       : cxRunScatterRoot(c, &job);
    pthread_mutex_lock(&c->mu);
    cxDropParts(r);
    if (res == ncclSystemError && c->broken == ncclSuccess) {
      /* The group is gone: fail this and every later operation, and tell the others at once. */
      c->broken = ncclSystemError;
      cxShutdownAll(c);
    }
    r->result = res;
    r->state = res == ncclSuccess ? CX_DONE : CX_FAILED;
    c->processed++;
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* ---------------------------------------------------------------- memory, operations, test, close */

static ncclResult_t cxRegMr(void* collComm, void* data, size_t size, int type, void** mhandle) {
  *mhandle = NULL;
  if (!cxIsColl((cxColl*)collComm)) CX_FAIL(ncclInvalidArgument, "regMr: not a collComm of this plugin");
  if (type != NCCL_PTR_HOST) CX_FAIL(ncclInvalidArgument, "regMr: only host memory (type %d)", type);
  cxMr* mr = calloc(1, sizeof(*mr));
  if (!mr) return ncclSystemError;
  *mr = (cxMr){CX_MAGIC, (char*)data, size, (cxColl*)collComm};
  *mhandle = mr;
  return ncclSuccess;
}

static ncclResult_t cxRegMrDmaBuf(void* collComm, void* data, size_t size, int type, uint64_t offset, int fd,
                                  void** mhandle) {
  (void)collComm, (void)data, (void)size, (void)type, (void)offset, (void)fd;
  *mhandle = NULL;
  CX_WARN("regMrDmaBuf: not supported (ptrSupport is NCCL_PTR_HOST)");
  return ncclInvalidUsage;
}

static ncclResult_t cxDeregMr(void* collComm, void* mhandle) {
  (void)collComm;
  cxMr* mr = (cxMr*)mhandle;
  if (!mr || mr->magic != CX_MAGIC) CX_FAIL(ncclInvalidArgument, "deregMr: not a registration of this plugin");
  mr->magic = 0;
  free(mr);
  return ncclSuccess;
}

static ncclResult_t cxPost(void* collComm, void* sendData, void* recvData, size_t count, int type, int op,
                           void* sendMhandle, void* recvMhandle, void** request, size_t limit) {
  *request = NULL;
  cxColl* c = (cxColl*)collComm;
  if (!cxIsColl(c)) CX_FAIL(ncclInvalidArgument, "iallreduce: not a collComm of this plugin");
  if (!cxSupported(type, op))
    CX_FAIL(ncclInvalidArgument, "iallreduce: type %d, op %d not supported (reduceSupport says 0)", type, op);
  size_t esz = (size_t)cxTypeSize(type);
  if (count > limit / esz)
    CX_FAIL(ncclInvalidArgument, "iallreduce: %zu elements of %zu bytes exceed maxCollBytes %zu", count, esz, limit);
  size_t bytes = count * esz;
  if (!cxCovers(c, sendMhandle, sendData, bytes) || !cxCovers(c, recvMhandle, recvData, bytes))
    CX_FAIL(ncclInvalidArgument, "iallreduce: the buffers are not inside their registrations of this collComm");
  /* (64 in flight: *request stays NULL, call again later) */
  cxReq t = {.send = (char*)sendData, .recv = (char*)recvData, .bytes = bytes, .type = type, .op = op, .report = bytes};
  return cxQueue(c, &t, request);
}

static ncclResult_t cxIflush(void* collComm, void* data, int size, void* mhandle, void** request) {
  (void)collComm, (void)data, (void)size, (void)mhandle;
  *request = NULL; /* host memory: nothing to flush */
  return ncclSuccess;
}

static ncclResult_t cxTest(void* request, int* done, int* size) {
  cxReq* r = (cxReq*)request;
  *done = 0;
  if (!r || !cxIsColl(r->coll)) CX_FAIL(ncclInvalidArgument, "test: not a request of this plugin");
  cxColl* c = r->coll;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&c->mu);
  switch (r->state) {
    case CX_POSTED: break;
    case CX_DONE:
      *done = 1;
      if (size) *size = r->report > (size_t)INT32_MAX ? INT32_MAX : (int)r->report;
      r->state = CX_FREE;
      break;
    case CX_FAILED:
      res = r->result;
      r->state = CX_FREE;
      break;
    default: CX_WARN("test: a request that is not in flight"); res = ncclInvalidArgument;
  }
  pthread_mutex_unlock(&c->mu);
  return res;
}

static ncclResult_t cxCloseColl(void* collComm) {
  cxColl* c = (cxColl*)collComm;
  if (!c) return ncclSuccess;
  if (!cxIsColl(c)) CX_FAIL(ncclInvalidArgument, "closeColl: not a collComm of this plugin");
  pthread_mutex_lock(&c->mu);
  __atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (c->hasWorker) {
    cxShutdownAll(c); /* wakes the worker out of any wait */
    pthread_join(c->worker, NULL);
  }
  cxFreeColl(c);
  return ncclSuccess;
}

/* ---------------------------------------------------------------- the tables */

/* Members of the same type in every version. */
#define CX_MEMBERS                                                                                                  \
  .devices = cxDevices, .connect = cxConnect, .reduceSupport = cxReduceSupport, .regMr = cxRegMr,                   \
  .regMrDmaBuf = cxRegMrDmaBuf, .deregMr = cxDeregMr, .iflush = cxIflush, .test = cxTest, .closeColl = cxCloseColl, \
  .closeListen = cxCloseListen

/* init and listen of versions 8, 9 and 10 (no context). */
static ncclResult_t cxInitV8(ncclDebugLogger_t logFunction) { return cxInitCommon(logFunction); }
static ncclResult_t cxListenV8(int dev, void* handle, void** listenComm) {
  return cxListenCommon(NULL, dev, handle, listenComm);
}

#if NCCL_EXAMPLE_COLLNET_VERSION == 8 || NCCL_EXAMPLE_COLLNET_VERSION == 11
static ncclResult_t cxGetPropertiesV8(int dev, ncclNetProperties_v8_t* props) {
  if (cxCheckDev(dev, "getProperties") != ncclSuccess) return ncclInvalidArgument;
  *props = (ncclNetProperties_v8_t){CX_PROPS};
  return ncclSuccess;
}

static ncclResult_t cxIallreduceV8(void* collComm, void* sendData, void* recvData, int count, ncclDataType_t dataType,
                                   ncclRedOp_t redOp, void* sendMhandle, void* recvMhandle, void** request) {
  *request = NULL;
  if (count < 0) CX_FAIL(ncclInvalidArgument, "iallreduce: count %d", count);
  return cxPost(collComm, sendData, recvData, (size_t)count, (int)dataType, (int)redOp, sendMhandle, recvMhandle,
                request, CX_V8_MAX_BYTES);
}

CX_EXPORT ncclCollNet_v8_t ncclCollNetPlugin_v8 = {
    /* (in the v11 build, named apart: the newest table is the one to use) */
    .name = NCCL_EXAMPLE_COLLNET_VERSION == 8 ? CX_NAME : CX_NAME "V8",
    .init = cxInitV8,
    .getProperties = cxGetPropertiesV8,
    .listen = cxListenV8,
    .iallreduce = cxIallreduceV8,
    .iallgather = cxIallgatherV8,
    .ireducescatter = cxIreducescatterV8,
    CX_MEMBERS,
};
#endif

#if NCCL_EXAMPLE_COLLNET_VERSION >= 9
static ncclResult_t cxIallreduce(void* collComm, void* sendData, void* recvData, size_t count, ncclDataType_t dataType,
                                 ncclRedOp_t redOp, void* sendMhandle, void* recvMhandle, void** request) {
  cxColl* c = (cxColl*)collComm;
  return cxPost(collComm, sendData, recvData, count, (int)dataType, (int)redOp, sendMhandle, recvMhandle, request,
                cxIsColl(c) ? c->maxBytes : 0);
}
#endif

#if NCCL_EXAMPLE_COLLNET_VERSION == 9 || NCCL_EXAMPLE_COLLNET_VERSION == 10
#if NCCL_EXAMPLE_COLLNET_VERSION == 9 /* (v9 and v10 have the same members and the same property layout) */
typedef ncclNetProperties_v9_t cxPropsV9;
typedef ncclCollNet_v9_t cxTableV9;
#define CX_SYMBOL ncclCollNetPlugin_v9
#else
typedef ncclNetProperties_v10_t cxPropsV9;
typedef ncclCollNet_v10_t cxTableV9;
#define CX_SYMBOL ncclCollNetPlugin_v10
#endif
static ncclResult_t cxGetPropertiesV9(int dev, cxPropsV9* props) {
  if (cxCheckDev(dev, "getProperties") != ncclSuccess) return ncclInvalidArgument;
  *props = (cxPropsV9){CX_PROPS_V9};
  return ncclSuccess;
}

CX_EXPORT cxTableV9 CX_SYMBOL = {
    .name = CX_NAME,
    .init = cxInitV8,
    .getProperties = cxGetPropertiesV9,
    .listen = cxListenV8,
    .iallreduce = cxIallreduce,
    .iallgather = cxIallgather,
    .ireducescatter = cxIreducescatter,
    CX_MEMBERS,
    .makeVDevice = NULL,
};
#endif

#if NCCL_EXAMPLE_COLLNET_VERSION == 11
static int cxLiveContexts; /* atomic: v11 contexts not finalized yet */

static ncclResult_t cxInitV11(void** ctx, uint64_t commId, ncclDebugLogger_t logFunction) {
  *ctx = NULL;
  cxInitCommon(logFunction);
  cxCtx* x = calloc(1, sizeof(*x));
  if (!x) return ncclSystemError;
  x->magic = CX_MAGIC;
  x->commId = commId;
  int live = __atomic_add_fetch(&cxLiveContexts, 1, __ATOMIC_ACQ_REL);
  CX_INFO("context for communicator %016llx (%d live)", (unsigned long long)commId, live);
  *ctx = x;
  return ncclSuccess;
}

static ncclResult_t cxFinalize(void* ctx) {
  cxCtx* x = (cxCtx*)ctx;
  if (!x || x->magic != CX_MAGIC) CX_FAIL(ncclInvalidArgument, "finalize: not a context of this plugin");
  int live = __atomic_sub_fetch(&cxLiveContexts, 1, __ATOMIC_ACQ_REL);
  CX_INFO("context for communicator %016llx finalized (%d live)", (unsigned long long)x->commId, live);
  x->magic = 0;
  free(x);
  return ncclSuccess;
}

static ncclResult_t cxGetPropertiesV11(int dev, ncclNetProperties_v11_t* props) {
  if (cxCheckDev(dev, "getProperties") != ncclSuccess) return ncclInvalidArgument;
  *props = (ncclNetProperties_v11_t){CX_PROPS_V9, .maxMultiRequestSize = 1};
  return ncclSuccess;
}

static ncclResult_t cxListenV11(void* ctx, int dev, void* handle, void** listenComm) {
  cxCtx* x = (cxCtx*)ctx;
  *listenComm = NULL;
  if (!x || x->magic != CX_MAGIC) CX_FAIL(ncclInvalidArgument, "listen: not a context of this plugin's init");
  return cxListenCommon(x, dev, handle, listenComm);
}

#define CX_SYMBOL ncclCollNetPlugin_v11
CX_EXPORT ncclCollNet_v11_t CX_SYMBOL = {
    .name = CX_NAME,
    .init = cxInitV11,
    .getProperties = cxGetPropertiesV11,
    .listen = cxListenV11,
    .iallreduce = cxIallreduce,
    .iallgather = cxIallgather,
    .ireducescatter = cxIreducescatter,
    CX_MEMBERS,
    .makeVDevice = NULL,
    .finalize = cxFinalize,
};
#endif

/* NCCL_EXAMPLE_COLLNET_NO_GATHER=1: the tables offer neither iallgather nor ireducescatter (NULL). Loaders read
 * the members as soon as they find the table (libcomm's collnet_nccl.c right after dlsym, before init), so they
 * are cleared when the library is loaded, and stay so. */
__attribute__((constructor)) static void cxNoGather(void) {
  if (cxEnv("NCCL_EXAMPLE_COLLNET_NO_GATHER", 0, 0, 1) != 1) return;
#if NCCL_EXAMPLE_COLLNET_VERSION == 8 || NCCL_EXAMPLE_COLLNET_VERSION == 11
  ncclCollNetPlugin_v8.iallgather = NULL;
  ncclCollNetPlugin_v8.ireducescatter = NULL;
#endif
#if NCCL_EXAMPLE_COLLNET_VERSION >= 9
  CX_SYMBOL.iallgather = NULL;
  CX_SYMBOL.ireducescatter = NULL;
#endif
}
