/* comm_aggd's CollNet plugin, in NCCL's ABI: libcomm-collnet-aggd.so exports ncclCollNetPlugin_v11 (and the
 * same functions as _v10, _v9 and _v8). The control part: init, properties, listen (the handle: a random
 * nonce), connect (derive the group key and id, connect to every daemon of COMM_AGGD and register, with a
 * timeout), regMr, close. The data path is aggd_client.c; the protocol aggd_proto.h.
 *
 * Collectives: iallreduce, iallgather and ireducescatter, host memory, every type 0..11 with sum, prod, max,
 * min; maxCollBytes (64 MiB) bounds an allreduce's bytes and an allgather's / reducescatter's window bytes.
 * Windows (NCCL's contract, docs/COLLNET_ABI.md): the logical buffer is nranks x bytesPerRank, member r's
 * slice at r * bytesPerRank; a call covers [windowOffset, +windowBytes), whose bytes are the parts' bytes in
 * order (any number of parts, sizes summing to windowBytes).
 *  - iallgather: parts receive the window of the concatenated slices. sendData points at this member's first
 *    byte inside the window: slice byte max(windowOffset, r * bytesPerRank) - r * bytesPerRank (what NCCL
 *    passes: its sendbuff advanced by windowOffset % bytesPerRank when the window starts in its own slice, else
 *    the slice's start). Only the member's in-window bytes are read; it copies them into parts itself (nothing
 *    when sendData already is their place in parts, in place). test's size: windowBytes.
 *  - ireducescatter: parts hold the window of the member's nranks x bytesPerRank input; recvData receives the
 *    reduction of its own slice's in-window bytes, recvData[0] being slice byte max(windowOffset, r *
 *    bytesPerRank) - r * bytesPerRank (NCCL's recvbuff rule, the mirror of the above). bytesPerRank,
 *    windowOffset and windowBytes must be whole elements. test's size: the bytes received.
 *  libcomm (collnet_nccl.c) passes one part, windowOffset 0, windowBytes nranks x bytesPerRank.
 *
 * Environment: COMM_AGGD (or NCCL_AGGD) = host:port,host:port,... the daemons, daemon i serving shard i, read
 * at init (and at connect if init did not see it); COMM_AGGD_TIMEOUT_MS (default 30000): connect's deadline,
 * and how long test() waits without any progress before failing; COMM_AGGD_NO_GATHER=1 (any value but empty
 * or 0): iallgather and ireducescatter are NULL in every table (for testing the caller's fallback). It is read
 * when the library is loaded (before a caller reads the tables: libcomm's adapter reads them right after
 * dlopen) and again at init (NCCL reads them after init); once off they stay off in the process.
 *
 * Not part of libcomm: its own library, built by tools/aggd/CMakeLists.txt (the top CMakeLists.txt keeps this
 * folder out of libcomm's sources; should it ever be compiled there, COMM_BUILDING_LIBRARY empties the file).
 * SPDX-License-Identifier: Apache-2.0 */
#ifndef COMM_BUILDING_LIBRARY
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "aggd_plugin.h"

#define AGGD_EXPORT __attribute__((visibility("default")))

static ncclDebugLogger_t plugLogger;
static pthread_mutex_t envLock = PTHREAD_MUTEX_INITIALIZER;
static char daemons[AGGD_MAX_SHARDS][160];
static int ndaemons = -1; /* -1: the environment not read yet */

void aggdPlugLog(ncclDebugLogLevel level, int line, const char* fmt, ...) {
  char msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  ncclDebugLogger_t lg = __atomic_load_n(&plugLogger, __ATOMIC_ACQUIRE);
  if (lg) {
    lg(level, NCCL_NET | NCCL_COLL, __FILE__, line, "%s", msg);
  } else if (level == NCCL_LOG_WARN) {
    fprintf(stderr, "aggd plugin: %s\n", msg);
  }
}

int64_t aggdPlugNowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* COMM_AGGD / NCCL_AGGD into the daemon list (under envLock). */
static void readEnv(void) {
  const char* v = getenv("COMM_AGGD");
  if (!v || !*v) v = getenv("NCCL_AGGD");
  ndaemons = 0;
  if (!v) return;
  const char* p = v;
  while (*p) {
    const char* e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    while (n > 0 && (*p == ' ' || *p == '\t')) p++, n--;
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    if (n > 0) {
      if (ndaemons == AGGD_MAX_SHARDS || n >= sizeof(daemons[0])) {
        AGGD_WARN("COMM_AGGD: more than %d daemons, or an entry too long: %s", AGGD_MAX_SHARDS, v);
        ndaemons = 0;
        return;
      }
      memcpy(daemons[ndaemons], p, n);
      daemons[ndaemons++][n] = '\0';
    }
    if (!e) break;
    p = e + 1;
  }
}

static void noGatherSwitch(void);

static void initCommon(ncclDebugLogger_t logger) {
  if (logger) __atomic_store_n(&plugLogger, logger, __ATOMIC_RELEASE);
  noGatherSwitch();
  pthread_mutex_lock(&envLock);
  readEnv();
  int n = ndaemons;
  pthread_mutex_unlock(&envLock);
  AGGD_INFO("aggd: CollNet over %d aggregation daemon(s) (COMM_AGGD)", n);
}

typedef struct {
  uint64_t commId;
} aggdCtx;
typedef struct {
  uint64_t commId;
  uint8_t handle[AGGD_HANDLE_BYTES];
} aggdListen;

static ncclResult_t initV11(void** ctx, uint64_t commId, ncclDebugLogger_t logger) {
  initCommon(logger);
  aggdCtx* c = calloc(1, sizeof(*c));
  if (!c) return ncclSystemError;
  c->commId = commId;
  *ctx = c;
  return ncclSuccess;
}
static ncclResult_t initV8(ncclDebugLogger_t logger) {
  initCommon(logger);
  return ncclSuccess;
}
static ncclResult_t finalizeV11(void* ctx) {
  free(ctx);
  return ncclSuccess;
}

static ncclResult_t devices(int* ndev) {
  *ndev = 1;
  return ncclSuccess;
}

static ncclResult_t getPropertiesV11(int dev, ncclNetProperties_v11_t* props) {
  if (dev != 0) return ncclInvalidArgument;
  memset(props, 0, sizeof(*props));
  props->name = (char*)"aggd";
  props->pciPath = NULL;
  props->guid = 0x6167676400000000ull; /* "aggd" */
  props->ptrSupport = NCCL_PTR_HOST;
  props->regIsGlobal = 0;
  props->forceFlush = 0;
  props->speed = 10000;
  props->port = 0;
  props->latency = 30.0f; /* us: two TCP hops and a reduction */
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = 0;
  props->maxP2pBytes = (size_t)1 << 30;
  props->maxCollBytes = AGGD_MAX_COLL_BYTES;
  props->maxMultiRequestSize = 1;
  return ncclSuccess;
}
static ncclResult_t getPropertiesV9(int dev, ncclNetProperties_v9_t* props) {
  ncclNetProperties_v11_t p;
  ncclResult_t rc = getPropertiesV11(dev, &p);
  if (rc != ncclSuccess) return rc;
  memcpy(props, &p, sizeof(*props)); /* v9 is the v11 layout without its last member */
  return ncclSuccess;
}
static ncclResult_t getPropertiesV10(int dev, ncclNetProperties_v10_t* props) {
  return getPropertiesV9(dev, (ncclNetProperties_v9_t*)props);
}
static ncclResult_t getPropertiesV8(int dev, ncclNetProperties_v8_t* props) {
  ncclNetProperties_v11_t p;
  ncclResult_t rc = getPropertiesV11(dev, &p);
  if (rc != ncclSuccess) return rc;
  memset(props, 0, sizeof(*props));
  props->name = p.name;
  props->pciPath = p.pciPath;
  props->guid = p.guid;
  props->ptrSupport = p.ptrSupport;
  props->regIsGlobal = p.regIsGlobal;
  props->speed = p.speed;
  props->port = p.port;
  props->latency = p.latency;
  props->maxComms = p.maxComms;
  props->maxRecvs = p.maxRecvs;
  props->netDeviceType = p.netDeviceType;
  props->netDeviceVersion = p.netDeviceVersion;
  return ncclSuccess;
}

static ncclResult_t listenV11(void* ctx, int dev, void* handle, void** listenComm) {
  if (dev != 0 || !handle || !listenComm) return ncclInternalError;
  aggdListen* l = calloc(1, sizeof(*l));
  if (!l) return ncclSystemError;
  aggdHandle h;
  h.magic = AGGD_HANDLE_MAGIC;
  h.version = AGGD_VERSION;
  h.commId = ctx ? ((aggdCtx*)ctx)->commId : 0;
  if (getrandom(h.nonce, sizeof(h.nonce), 0) != (ssize_t)sizeof(h.nonce)) {
    AGGD_WARN("aggd: getrandom failed: %s", strerror(errno));
    free(l);
    return ncclSystemError;
  }
  l->commId = h.commId;
  aggdHandlePack(l->handle, &h);
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, l->handle, AGGD_HANDLE_BYTES);
  *listenComm = l;
  return ncclSuccess;
}
static ncclResult_t listenV8(int dev, void* handle, void** listenComm) {
  return listenV11(NULL, dev, handle, listenComm);
}
static ncclResult_t closeListen(void* listenComm) {
  free(listenComm);
  return ncclSuccess;
}

/* ---------------------------------------------------------------- blocking-with-deadline socket helpers */
static int waitFd(int fd, short ev, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - aggdPlugNowMs();
    if (left <= 0) return -1;
    struct pollfd p = {fd, ev, 0};
    int rc = poll(&p, 1, (int)(left > 1000 ? 1000 : left));
    if (rc > 0) return 0;
    if (rc < 0 && errno != EINTR) return -1;
  }
}
/* 0 ok, -1 error (errno), -2 timeout, -3 closed. */
static int ioFull(int fd, void* buf, size_t n, int out, int64_t deadline) {
  uint8_t* p = buf;
  while (n > 0) {
    ssize_t r = out ? send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= (size_t)r;
    } else if (r == 0 && !out) {
      return -3;
    } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (waitFd(fd, out ? POLLOUT : POLLIN, deadline) != 0) return -2;
    } else {
      return -1;
    }
  }
  return 0;
}
static const char* ioWhy(int rc) {
  return rc == -2 ? "timed out" : rc == -3 ? "the daemon closed the connection" : strerror(errno);
}

static int dial(const char* spec, int64_t deadline, char* why, size_t whyLen) {
  struct addrinfo* res = NULL;
  int rc = aggdResolve(spec, 0, &res);
  if (rc != 0) {
    snprintf(why, whyLen, "%s", rc == EAI_NONAME && !strrchr(spec, ':') ? "not host:port" : gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  snprintf(why, whyLen, "no address");
  for (struct addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int err = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        socklen_t el = sizeof(err);
        if (waitFd(fd, POLLOUT, deadline) != 0) err = ETIMEDOUT;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) err = errno;
      }
    }
    if (err) {
      snprintf(why, whyLen, "%s", strerror(err));
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

/* Connect to daemon `shard` and register; fills d. 0 or -1 (logged). */
static int registerWith(aggdDaemon* d, int shard, int nshards, const uint8_t k[16], const uint8_t g[16], int rank,
                        int nranks, uint64_t commId, int64_t deadline) {
  char why[256];
  d->fd = dial(d->name, deadline, why, sizeof(why));
  if (d->fd < 0) {
    AGGD_WARN("aggd: daemon %s (shard %d of %d) unreachable: %s", d->name, shard, nshards, why);
    return -1;
  }
  uint8_t hb[AGGD_HDR_BYTES], body[AGGD_MAX_CTRL + 1];
  aggdHdr h;
  int rc = ioFull(d->fd, hb, AGGD_HDR_BYTES, 0, deadline);
  if (rc == 0) {
    aggdHdrUnpack(hb, &h);
    if (h.magic != AGGD_MAGIC || h.type != AGGD_HELLO || h.len != 20) {
      AGGD_WARN("aggd: %s is not a comm_aggd daemon (or a different protocol)", d->name);
      return -1;
    }
    rc = ioFull(d->fd, body, 20, 0, deadline);
  }
  if (rc == 0 && aggdGet32(body) != AGGD_VERSION) {
    AGGD_WARN("aggd: daemon %s speaks protocol version %u, this plugin %u", d->name, aggdGet32(body), AGGD_VERSION);
    return -1;
  }
  if (rc != 0) {
    AGGD_WARN("aggd: daemon %s: no greeting: %s", d->name, ioWhy(rc));
    return -1;
  }
  aggdRegister r;
  memset(&r, 0, sizeof(r)); /* the MAC packs the record before its mac is set */
  memcpy(r.g, g, 16);
  r.rank = (uint32_t)rank;
  r.nranks = (uint32_t)nranks;
  r.shard = (uint32_t)shard;
  r.nshards = (uint32_t)nshards;
  r.commId = commId;
  aggdRegisterMac(k, body + 4, &r, r.mac);
  uint8_t msg[AGGD_HDR_BYTES + AGGD_REGISTER_BYTES];
  aggdHdrPack(msg, AGGD_REGISTER, AGGD_REGISTER_BYTES, 0, 0);
  aggdRegisterPack(msg + AGGD_HDR_BYTES, &r);
  rc = ioFull(d->fd, msg, sizeof(msg), 1, deadline);
  for (int round = 0; rc == 0; round++) {
    rc = ioFull(d->fd, hb, AGGD_HDR_BYTES, 0, deadline);
    if (rc != 0) break;
    aggdHdrUnpack(hb, &h);
    if (h.magic != AGGD_MAGIC || h.len > AGGD_MAX_CTRL) break;
    rc = ioFull(d->fd, body, h.len, 0, deadline);
    if (rc != 0) break;
    if (h.type == AGGD_NEED_KEY && round == 0) { /* the first member here: send K */
      aggdHdrPack(msg, AGGD_KEY, 16, 0, 0);
      memcpy(msg + AGGD_HDR_BYTES, k, 16);
      rc = ioFull(d->fd, msg, AGGD_HDR_BYTES + 16, 1, deadline);
      continue;
    }
    if (h.type == AGGD_ACCEPT && h.len == 8) {
      d->window = aggdGet32(body);
      d->chunk = aggdGet32(body + 4);
      if (d->window < 1 || d->chunk < 8 || d->chunk % 8 != 0 || d->chunk > AGGD_MAX_CHUNK) break;
      return 0;
    }
    if (h.type == AGGD_REFUSE) {
      body[h.len] = '\0';
      AGGD_WARN("aggd: daemon %s refused rank %d of %d (shard %d): %s", d->name, rank, nranks, shard, (char*)body);
      return -1;
    }
    break;
  }
  if (rc != 0) AGGD_WARN("aggd: registering with daemon %s failed: %s", d->name, ioWhy(rc));
  else AGGD_WARN("aggd: daemon %s sent an unexpected answer to the registration", d->name);
  return -1;
}

static void freeColl(aggdColl* cc) {
  for (int i = 0; i < cc->nd; i++)
    if (cc->d[i].fd >= 0) close(cc->d[i].fd);
  pthread_mutex_destroy(&cc->mu);
  free(cc->d);
  free(cc);
}

static ncclResult_t connectColl(void* handles[], int nranks, int rank, void* listenComm, void** collComm) {
  *collComm = NULL;
  if (nranks < 1 || nranks > AGGD_MAX_NRANKS || rank < 0 || rank >= nranks || !handles || !listenComm)
    return ncclInternalError;
  const aggdListen* l = listenComm;
  pthread_mutex_lock(&envLock);
  if (ndaemons <= 0) readEnv();
  int nd = ndaemons;
  aggdColl* cc = calloc(1, sizeof(*cc));
  aggdDaemon* d = calloc(nd > 0 ? (size_t)nd : 1, sizeof(aggdDaemon));
  for (int i = 0; d && i < nd; i++) {
    memcpy(d[i].name, daemons[i], sizeof(d[i].name));
    d[i].fd = -1;
  }
  pthread_mutex_unlock(&envLock);
  if (!cc || !d) {
    free(cc);
    free(d);
    return ncclSystemError;
  }
  pthread_mutex_init(&cc->mu, NULL);
  cc->d = d;
  cc->nd = nd;
  if (nd <= 0) {
    AGGD_WARN("aggd: COMM_AGGD (or NCCL_AGGD) is not set or empty: no aggregation daemons to connect to");
    freeColl(cc);
    return ncclInvalidUsage;
  }
  const uint8_t** hs = calloc((size_t)nranks, sizeof(*hs));
  if (!hs) {
    freeColl(cc);
    return ncclSystemError;
  }
  for (int r = 0; r < nranks; r++) {
    aggdHandle h;
    hs[r] = handles[r];
    if (hs[r]) aggdHandleUnpack(hs[r], &h);
    if (!hs[r] || h.magic != AGGD_HANDLE_MAGIC || h.version != AGGD_VERSION) {
      AGGD_WARN("aggd: the handle of rank %d is not an aggd handle (version %u expected)", r, AGGD_VERSION);
      free(hs);
      freeColl(cc);
      return ncclInternalError;
    }
  }
  uint8_t k[16], g[16];
  aggdDeriveGroup(hs, nranks, k, g);
  free(hs);
  const char* tv = getenv("COMM_AGGD_TIMEOUT_MS");
  long long tmo = tv && *tv ? atoll(tv) : 30000;
  cc->timeoutMs = tmo > 0 ? tmo : 30000;
  cc->rank = rank;
  cc->nranks = nranks;
  cc->commId = l->commId;
  int64_t deadline = aggdPlugNowMs() + cc->timeoutMs;
  for (int i = 0; i < nd; i++) {
    if (registerWith(&d[i], i, nd, k, g, rank, nranks, l->commId, deadline) != 0) {
      freeColl(cc); /* closing the registered connections frees the group on those daemons */
      return ncclSystemError;
    }
  }
  memset(k, 0, sizeof(k));
  for (int i = 0; i < AGGD_MAX_REQS; i++) cc->reqs[i].cc = cc;
  AGGD_INFO("aggd: rank %d of %d registered with %d daemon(s), group %016llx", rank, nranks, nd,
            (unsigned long long)aggdGet64(g));
  *collComm = cc;
  return ncclSuccess;
}

static ncclResult_t closeColl(void* collComm) {
  aggdColl* cc = collComm;
  if (!cc) return ncclSuccess;
  pthread_mutex_lock(&cc->mu);
  aggdSayBye(cc);
  aggdFreeReqs(cc);
  pthread_mutex_unlock(&cc->mu);
  freeColl(cc);
  return ncclSuccess;
}

static ncclResult_t reduceSupport(ncclDataType_t dataType, ncclRedOp_t redOp, int* supported) {
  *supported = (int)dataType >= 0 && (int)dataType < 12 && (int)redOp >= 0 && (int)redOp < 4;
  return ncclSuccess;
}

static ncclResult_t regMr(void* collComm, void* data, size_t size, int type, void** mhandle) {
  if (type != NCCL_PTR_HOST) {
    AGGD_WARN("aggd: only host memory can be registered (type %d asked)", type);
    return ncclInternalError;
  }
  void* h = malloc(1);
  if (!h) return ncclSystemError;
  *mhandle = h;
  return ncclSuccess;
}
static ncclResult_t regMrDmaBuf(void* collComm, void* data, size_t size, int type, uint64_t offset, int fd,
                                void** mhandle) {
  AGGD_WARN("aggd: DMA-BUF registration is not supported (host memory only)");
  return ncclInternalError;
}
static ncclResult_t deregMr(void* collComm, void* mhandle) {
  free(mhandle);
  return ncclSuccess;
}
static ncclResult_t iflush(void* collComm, void* data, int size, void* mhandle, void** request) {
  *request = NULL;
  return ncclSuccess;
}
static ncclResult_t iallreduceV8(void* collComm, void* sendData, void* recvData, int count, ncclDataType_t dataType,
                                 ncclRedOp_t redOp, void* sendMhandle, void* recvMhandle, void** request) {
  if (count < 0) return ncclInvalidArgument;
  return aggdIallreduce(collComm, sendData, recvData, (size_t)count, dataType, redOp, sendMhandle, recvMhandle,
                        request);
}
/* v9, v10 and v11 share the SGE (size_t sizes); v8's has uint32_t sizes. */
static ncclResult_t iallgatherV9(void* collComm, void* sendData, int nRecvParts, ncclNetSGE_v9_t* recvParts,
                                 size_t bytesPerRank, size_t windowOffset, size_t windowBytes, void* sendMhandle,
                                 void** request) {
  return aggdPostWindow(collComm, AGGD_K_ALLGATHER, sendData, nRecvParts, recvParts, 0, bytesPerRank, windowOffset,
                        windowBytes, ncclInt8, ncclSum, request);
}
static ncclResult_t iallgatherV8(void* collComm, void* sendData, int nRecvParts, ncclNetSGE_v8_t* recvParts,
                                 size_t bytesPerRank, size_t windowOffset, size_t windowBytes, void* sendMhandle,
                                 void** request) {
  return aggdPostWindow(collComm, AGGD_K_ALLGATHER, sendData, nRecvParts, recvParts, 1, bytesPerRank, windowOffset,
                        windowBytes, ncclInt8, ncclSum, request);
}
static ncclResult_t ireducescatterV9(void* collComm, int nSendParts, ncclNetSGE_v9_t* sendParts, void* recvData,
                                     size_t bytesPerRank, size_t windowOffset, size_t windowBytes,
                                     ncclDataType_t dataType, ncclRedOp_t redOp, void* recvMhandle, void** request) {
  return aggdPostWindow(collComm, AGGD_K_REDUCESCATTER, recvData, nSendParts, sendParts, 0, bytesPerRank, windowOffset,
                        windowBytes, dataType, redOp, request);
}
static ncclResult_t ireducescatterV8(void* collComm, int nSendParts, ncclNetSGE_v8_t* sendParts, void* recvData,
                                     size_t bytesPerRank, size_t windowOffset, size_t windowBytes,
                                     ncclDataType_t dataType, ncclRedOp_t redOp, void* recvMhandle, void** request) {
  return aggdPostWindow(collComm, AGGD_K_REDUCESCATTER, recvData, nSendParts, sendParts, 1, bytesPerRank, windowOffset,
                        windowBytes, dataType, redOp, request);
}

/* The same functions in each version's table: v8-v10 init(logger) and listen without ctx, v8 an int count. */
#define AGGD_COMMON_MEMBERS                                                                                   \
  .name = "aggd", .devices = devices, .connect = connectColl, .reduceSupport = reduceSupport, .regMr = regMr, \
  .regMrDmaBuf = regMrDmaBuf, .deregMr = deregMr, .iflush = iflush, .test = aggdTest, .closeColl = closeColl, \
  .closeListen = closeListen
AGGD_EXPORT ncclCollNet_v11_t ncclCollNetPlugin_v11 = {AGGD_COMMON_MEMBERS,
                                                       .init = initV11,
                                                       .getProperties = getPropertiesV11,
                                                       .listen = listenV11,
                                                       .iallreduce = aggdIallreduce,
                                                       .iallgather = iallgatherV9,
                                                       .ireducescatter = ireducescatterV9,
                                                       .makeVDevice = NULL,
                                                       .finalize = finalizeV11};
AGGD_EXPORT ncclCollNet_v10_t ncclCollNetPlugin_v10 = {AGGD_COMMON_MEMBERS,
                                                       .init = initV8,
                                                       .getProperties = getPropertiesV10,
                                                       .listen = listenV8,
                                                       .iallreduce = aggdIallreduce,
                                                       .iallgather = iallgatherV9,
                                                       .ireducescatter = ireducescatterV9,
                                                       .makeVDevice = NULL};
AGGD_EXPORT ncclCollNet_v9_t ncclCollNetPlugin_v9 = {AGGD_COMMON_MEMBERS,
                                                     .init = initV8,
                                                     .getProperties = getPropertiesV9,
                                                     .listen = listenV8,
                                                     .iallreduce = aggdIallreduce,
                                                     .iallgather = iallgatherV9,
                                                     .ireducescatter = ireducescatterV9,
                                                     .makeVDevice = NULL};
AGGD_EXPORT ncclCollNet_v8_t ncclCollNetPlugin_v8 = {AGGD_COMMON_MEMBERS,
                                                     .init = initV8,
                                                     .getProperties = getPropertiesV8,
                                                     .listen = listenV8,
                                                     .iallreduce = iallreduceV8,
                                                     .iallgather = iallgatherV8,
                                                     .ireducescatter = ireducescatterV8};

/* COMM_AGGD_NO_GATHER: iallgather and ireducescatter NULL in every table (never back on in this process). */
static void noGatherSwitch(void) {
  const char* v = getenv("COMM_AGGD_NO_GATHER");
  if (!v || !*v || !strcmp(v, "0")) return;
  if (__atomic_load_n(&ncclCollNetPlugin_v11.iallgather, __ATOMIC_ACQUIRE) != NULL)
    AGGD_INFO("aggd: COMM_AGGD_NO_GATHER=%s: iallgather and ireducescatter not offered", v);
  __atomic_store_n(&ncclCollNetPlugin_v11.iallgather, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&ncclCollNetPlugin_v11.ireducescatter, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&ncclCollNetPlugin_v10.iallgather, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&ncclCollNetPlugin_v10.ireducescatter, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&ncclCollNetPlugin_v9.iallgather, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&ncclCollNetPlugin_v9.ireducescatter, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&ncclCollNetPlugin_v8.iallgather, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&ncclCollNetPlugin_v8.ireducescatter, NULL, __ATOMIC_RELEASE);
}
/* At load (dlopen), before anyone reads the tables. */
__attribute__((constructor)) static void aggdPluginLoaded(void) { noGatherSwitch(); }

#else
typedef int commAggdPluginNotInLibcomm; /* built only as its own library (tools/aggd/CMakeLists.txt) */
#endif /* COMM_BUILDING_LIBRARY */
