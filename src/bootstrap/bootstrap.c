/* Out-of-band bootstrap: the unique id, the root's rendezvous, and tagged send/recv, allgather and barrier
 * between ranks over TCP.
 *
 * Rendezvous: every rank listens on its own socket, connects to the root and sends a hello {magic, secret,
 * rank, nranks, time left, listen address}. The root (a thread of the process that made the id) reads
 * hellos with an event loop, each connection with its own short deadline, so that strangers, garbage and
 * silent connections are dropped without delaying anyone. When all ranks have arrived it sends everyone the
 * table of listen addresses; when the earliest rank deadline is about to pass it sends everyone the list of
 * ranks that did not arrive instead.
 *
 * Messages: one TCP connection per message to the peer's listener, carrying {magic, secret, src, tag, size,
 * seq} and the payload. The receiver queues what it did not ask for. `seq` counts messages per (src, dst)
 * so that messages with one tag are delivered in the order they were sent even if connections are
 * accepted out of order. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bootstrap.h"

#include <assert.h>
#include <errno.h>
#include <ifaddrs.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "param.h"
#include "socket.h"
#include "utils.h"

static_assert(sizeof(commBootstrapId) <= COMM_UNIQUE_ID_BYTES, "commBootstrapId must fit in commUniqueId");

#define BOOT_HELLO_MAGIC 0x636f6d6d68656c31ull /* "commhel1" */
#define BOOT_REPLY_MAGIC 0x636f6d6d72706c31ull /* "commrpl1" */
#define BOOT_MSG_MAGIC 0x636f6d6d6d736731ull   /* "commmsg1" */
/* How long one connection may take to deliver its header (hello or message header). */
#define BOOT_HEADER_TIMEOUT_MS 2000
/* Connections the root reads hellos from at once; beyond that the oldest is dropped. */
#define BOOT_ROOT_MAX_PENDING 1024
/* How long the root tries to hand its answer to one rank. */
#define BOOT_ROOT_REPLY_TIMEOUT_MS 10000
/* The bootstrap carries metadata, not bulk data. */
#define BOOT_MAX_MSG_BYTES (1ull << 30)
/* Up to this size a send completes into the kernel's socket buffers, whoever receives. */
#define BOOT_EAGER_BYTES 16384
#define BOOT_ADDR_STR 96

enum { BOOT_REPLY_OK = 0, BOOT_REPLY_TIMEOUT = 1, BOOT_REPLY_REJECTED = 2 };

typedef struct {
  uint64_t magic;
  uint64_t secret;
  int32_t rank;
  int32_t nranks;
  int64_t remainingMs; /* time left before this rank gives up; <0: it never does */
  commSockAddr addr;   /* the rank's listener */
  uint32_t pad;
} bootHello;

typedef struct {
  uint64_t magic;
  uint64_t secret;
  int32_t status;
  int32_t nranks;
  int32_t arrived;
  int32_t pad;
  char reason[128];
  /* OK: nranks x commSockAddr follow. TIMEOUT: nranks bytes, 1 for each rank that arrived. */
} bootReply;

typedef struct {
  uint64_t magic;
  uint64_t secret;
  int32_t src;
  int32_t tag;
  uint64_t size;
  uint64_t seq;
} bootMsgHdr;

typedef struct bootMsg {
  struct bootMsg* next;
  int src;
  int tag;
  uint64_t seq;
  size_t size;
  void* data;
} bootMsg;

struct commBootstrap {
  int rank;
  int nranks;
  uint64_t secret;
  int64_t timeoutMs;
  const int* abortFlag;
  int listenFd;
  commSockAddr listenAddr;
  char ifName[COMM_IFNAME_MAX];
  commSockAddr* peers;  /* listen address of every rank */
  uint64_t* sendSeq;    /* messages sent to each peer */
  uint64_t* recvContig; /* from each peer, every message with seq < recvContig has arrived */
  bootMsg* queueHead;   /* arrived, not yet received, in arrival order */
  bootMsg* queueTail;
  uint32_t collSeq; /* collectives (allgather/barrier rounds) so far; the same on every rank */
};

static int isAborted(const commBootstrap* b) {
  return b->abortFlag != NULL && __atomic_load_n(b->abortFlag, __ATOMIC_ACQUIRE) != 0;
}

static int64_t elapsedMs(int64_t startNs) { return (commTimeNs() - startNs) / 1000000; }

static int64_t minDeadline(int64_t a, int64_t b) { return a < b ? a : b; }

static int deadlinePassed(int64_t deadlineNs) {
  return deadlineNs != COMM_NO_DEADLINE && commTimeNs() >= deadlineNs;
}

static const char* fdPeerStr(int fd, char* buf, size_t n) {
  commSockAddr a;
  socklen_t len = sizeof(a);
  memset(&a, 0, sizeof(a));
  if (getpeername(fd, &a.sa, &len) != 0) {
    snprintf(buf, n, "<unknown>");
    return buf;
  }
  return commSocketAddrStr(&a, buf, n);
}

/* "3, 5, 9" for the ranks whose flag is 0; at most 16 listed. */
static void formatMissing(const unsigned char* arrived, int nranks, char* buf, size_t n) {
  size_t o = 0;
  int listed = 0, missing = 0;
  buf[0] = '\0';
  for (int r = 0; r < nranks; r++) {
    if (arrived[r]) continue;
    missing++;
    if (listed < 16 && o < n) {
      o += (size_t)snprintf(buf + o, n - o, "%s%d", listed ? ", " : "", r);
      listed++;
    }
  }
  if (missing > listed && o < n) snprintf(buf + o, n - o, ", ... (%d in all)", missing);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Root */

typedef struct {
  int fd;
  size_t off;
  int64_t deadlineNs;
  bootHello hello;
  char from[BOOT_ADDR_STR];
} rootPending;

typedef struct {
  int listenFd;
  uint64_t secret;
  commSockAddr addr;
  char addrStr[BOOT_ADDR_STR];
  int nranks; /* 0 until the first valid hello */
  int arrived;
  int* rankFd;
  commSockAddr* table;
  rootPending pending[BOOT_ROOT_MAX_PENDING];
  int npending;
  int64_t firstHelloNs;
  int64_t deadlineNs;
} rootState;

static void rootFree(rootState* st) {
  if (st->listenFd >= 0) close(st->listenFd);
  for (int i = 0; i < st->npending; i++) close(st->pending[i].fd);
  if (st->rankFd != NULL) {
    for (int r = 0; r < st->nranks; r++) {
      if (st->rankFd[r] >= 0) close(st->rankFd[r]);
    }
  }
  free(st->rankFd);
  free(st->table);
  free(st);
}

static void rootSendReply(rootState* st, int fd, int status, const char* reason, const void* payload,
                          size_t payloadBytes, int64_t deadlineNs) {
  bootReply rep;
  memset(&rep, 0, sizeof(rep));
  rep.magic = BOOT_REPLY_MAGIC;
  rep.secret = st->secret;
  rep.status = status;
  rep.nranks = st->nranks;
  rep.arrived = st->arrived;
  if (reason != NULL) snprintf(rep.reason, sizeof(rep.reason), "%s", reason);
  char peer[BOOT_ADDR_STR];
  if (commSocketSendAll(fd, &rep, sizeof(rep), deadlineNs, NULL) != commSuccess ||
      (payloadBytes > 0 && commSocketSendAll(fd, payload, payloadBytes, deadlineNs, NULL) != commSuccess)) {
    WARN("bootstrap root at %s: could not send the answer to %s", st->addrStr, fdPeerStr(fd, peer, sizeof(peer)));
  }
}

/* Drop pending connection i (marked by fd = -1, compacted later). */
static void rootDrop(rootState* st, int i, const char* why) {
  rootPending* p = &st->pending[i];
  WARN("bootstrap root at %s: dropped connection from %s: %s", st->addrStr, p->from, why);
  close(p->fd);
  p->fd = -1;
}

static void rootReject(rootState* st, int i, const char* why) {
  rootPending* p = &st->pending[i];
  rootSendReply(st, p->fd, BOOT_REPLY_REJECTED, why, NULL, 0, commDeadlineNs(100));
  rootDrop(st, i, why);
}

static commResult_t rootRegister(rootState* st, int i) {
  rootPending* p = &st->pending[i];
  const bootHello* h = &p->hello;
  char why[160];
  if (h->nranks <= 0 || h->rank < 0 || h->rank >= h->nranks) {
    snprintf(why, sizeof(why), "invalid rank %d of %d ranks", h->rank, h->nranks);
    rootReject(st, i, why);
    return commSuccess;
  }
  if (st->nranks != 0 && h->nranks != st->nranks) {
    snprintf(why, sizeof(why), "rank %d says there are %d ranks, earlier ranks said %d", h->rank, h->nranks,
             st->nranks);
    rootReject(st, i, why);
    return commSuccess;
  }
  if (h->addr.sa.sa_family != AF_INET && h->addr.sa.sa_family != AF_INET6) {
    snprintf(why, sizeof(why), "rank %d sent a listen address of unknown family %d", h->rank,
             (int)h->addr.sa.sa_family);
    rootReject(st, i, why);
    return commSuccess;
  }
  if (st->nranks == 0) {
    COMMCHECK(commCalloc(&st->rankFd, (size_t)h->nranks, sizeof(int)));
    COMMCHECK(commCalloc(&st->table, (size_t)h->nranks, sizeof(commSockAddr)));
    for (int r = 0; r < h->nranks; r++) st->rankFd[r] = -1;
    st->nranks = h->nranks;
    st->firstHelloNs = commTimeNs();
  }
  if (st->rankFd[h->rank] >= 0) {
    char prev[BOOT_ADDR_STR];
    snprintf(why, sizeof(why), "rank %d already arrived (from %s)", h->rank,
             fdPeerStr(st->rankFd[h->rank], prev, sizeof(prev)));
    rootReject(st, i, why);
    return commSuccess;
  }
  /* Give up a little before the first rank would, so that everyone still hears who is missing. */
  if (h->remainingMs >= 0) {
    int64_t margin = COMM_MIN(h->remainingMs / 5, 1000);
    int64_t d = commTimeNs() + (h->remainingMs - margin) * 1000000LL;
    st->deadlineNs = minDeadline(st->deadlineNs, d);
  }
  st->rankFd[h->rank] = p->fd;
  st->table[h->rank] = h->addr;
  st->arrived++;
  TRACE(COMM_BOOTSTRAP, "bootstrap root: rank %d/%d arrived from %s (%d of %d)", h->rank, h->nranks, p->from,
        st->arrived, st->nranks);
  p->fd = -1; /* now owned by rankFd */
  return commSuccess;
}

/* Read what pending connection i has sent; validate as soon as the fields are there. */
static commResult_t rootReadPending(rootState* st, int i) {
  rootPending* p = &st->pending[i];
  size_t before = p->off;
  commResult_t r = commSocketProgress(p->fd, 0, &p->hello, sizeof(p->hello), &p->off);
  if (r != commSuccess) {
    char why[96];
    snprintf(why, sizeof(why), "connection closed or failed after %zu of %zu bytes of a hello", p->off,
             sizeof(p->hello));
    rootDrop(st, i, why);
    return commSuccess;
  }
  if (p->off >= sizeof(uint64_t) && before < sizeof(uint64_t) && p->hello.magic != BOOT_HELLO_MAGIC) {
    rootDrop(st, i, "bad magic (not a libcomm bootstrap hello)");
    return commSuccess;
  }
  if (p->off >= 2 * sizeof(uint64_t) && before < 2 * sizeof(uint64_t) && p->hello.secret != st->secret) {
    rootDrop(st, i, "wrong secret (a different unique id?)");
    return commSuccess;
  }
  if (p->off == sizeof(p->hello)) COMMCHECK(rootRegister(st, i));
  return commSuccess;
}

static void rootAcceptAll(rootState* st) {
  for (;;) {
    commSockAddr from;
    socklen_t len = sizeof(from);
    memset(&from, 0, sizeof(from));
    int fd = accept4(st->listenFd, &from.sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        WARN("bootstrap root at %s: accept failed: %s", st->addrStr, strerror(errno));
      }
      return;
    }
    if (st->npending == BOOT_ROOT_MAX_PENDING) {
      rootDrop(st, 0, "too many connections waiting to send a hello");
      memmove(&st->pending[0], &st->pending[1], sizeof(rootPending) * (BOOT_ROOT_MAX_PENDING - 1));
      st->npending--;
    }
    rootPending* p = &st->pending[st->npending++];
    memset(p, 0, sizeof(*p));
    p->fd = fd;
    p->deadlineNs = commDeadlineNs(BOOT_HEADER_TIMEOUT_MS);
    commSocketAddrStr(&from, p->from, sizeof(p->from));
  }
}

static void rootCompact(rootState* st) {
  int k = 0;
  for (int i = 0; i < st->npending; i++) {
    if (st->pending[i].fd >= 0) st->pending[k++] = st->pending[i];
  }
  st->npending = k;
}

static void rootTimeout(rootState* st) {
  unsigned char* flags = calloc((size_t)st->nranks, 1);
  char missing[256] = "unknown";
  if (flags != NULL) {
    for (int r = 0; r < st->nranks; r++) flags[r] = st->rankFd[r] >= 0;
    formatMissing(flags, st->nranks, missing, sizeof(missing));
  }
  WARN("bootstrap root at %s: the rendezvous of %d ranks timed out after %lld ms: %d arrived, missing ranks: %s",
       st->addrStr, st->nranks, (long long)elapsedMs(st->firstHelloNs), st->arrived, missing);
  int64_t d = commDeadlineNs(1000);
  for (int r = 0; r < st->nranks; r++) {
    if (st->rankFd[r] < 0) continue;
    rootSendReply(st, st->rankFd[r], BOOT_REPLY_TIMEOUT, "rendezvous timed out", flags,
                  flags ? (size_t)st->nranks : 0, d);
  }
  free(flags);
}

static commResult_t rootRun(rootState* st) {
  struct pollfd* pfds = NULL;
  int pfdCap = 0;
  commResult_t res = commSuccess;
  while (st->nranks == 0 || st->arrived < st->nranks) {
    int64_t now = commTimeNs();
    if (st->deadlineNs != COMM_NO_DEADLINE && now >= st->deadlineNs) {
      rootTimeout(st);
      res = commTimeout;
      goto exit;
    }
    int64_t wake = st->deadlineNs;
    for (int i = 0; i < st->npending; i++) {
      if (now >= st->pending[i].deadlineNs) {
        char why[96];
        snprintf(why, sizeof(why), "no complete hello within %d ms", BOOT_HEADER_TIMEOUT_MS);
        rootDrop(st, i, why);
      } else {
        wake = minDeadline(wake, st->pending[i].deadlineNs);
      }
    }
    rootCompact(st);

    int need = 1 + st->npending + st->nranks;
    if (need > pfdCap) {
      COMMCHECKGOTO(commRealloc(&pfds, (size_t)pfdCap, (size_t)need, sizeof(struct pollfd)), res, exit);
      pfdCap = need;
    }
    int n = 0;
    pfds[n++] = (struct pollfd){.fd = st->listenFd, .events = POLLIN, .revents = 0};
    for (int i = 0; i < st->npending; i++) pfds[n++] = (struct pollfd){.fd = st->pending[i].fd, .events = POLLIN};
    for (int r = 0; r < st->nranks; r++) pfds[n++] = (struct pollfd){.fd = st->rankFd[r], .events = POLLIN};
    int ms = 100;
    if (wake != COMM_NO_DEADLINE) {
      int64_t left = (wake - now + 999999) / 1000000;
      if (left < ms) ms = left < 0 ? 0 : (int)left;
    }
    int pr = poll(pfds, (nfds_t)n, ms);
    if (pr < 0) {
      if (errno == EINTR) continue;
      WARN("bootstrap root at %s: poll failed: %s", st->addrStr, strerror(errno));
      res = commSystemError;
      goto exit;
    }
    if (pr == 0) continue;
    /* Ranks that arrived must stay silent until the answer; anything else means they left. */
    int nranksBefore = st->nranks;
    for (int r = 0; r < nranksBefore; r++) {
      struct pollfd* q = &pfds[1 + st->npending + r];
      if (q->fd < 0 || q->revents == 0) continue;
      char peer[BOOT_ADDR_STR];
      WARN("bootstrap root at %s: rank %d (%s) disconnected before the rendezvous completed", st->addrStr, r,
           fdPeerStr(q->fd, peer, sizeof(peer)));
      close(st->rankFd[r]);
      st->rankFd[r] = -1;
      st->arrived--;
    }
    int np = st->npending;
    for (int i = 0; i < np; i++) {
      if (pfds[1 + i].revents != 0) COMMCHECKGOTO(rootReadPending(st, i), res, exit);
    }
    rootCompact(st);
    if (pfds[0].revents != 0) rootAcceptAll(st);
  }
  /* Everyone is here: hand out the table. */
  {
    int64_t d = commDeadlineNs(BOOT_ROOT_REPLY_TIMEOUT_MS);
    for (int r = 0; r < st->nranks; r++) {
      rootSendReply(st, st->rankFd[r], BOOT_REPLY_OK, NULL, st->table, sizeof(commSockAddr) * (size_t)st->nranks, d);
    }
    INFO(COMM_BOOTSTRAP, "bootstrap root at %s: rendezvous of %d ranks complete in %lld ms", st->addrStr,
         st->nranks, (long long)elapsedMs(st->firstHelloNs));
  }
exit:
  free(pfds);
  return res;
}

static void* rootThread(void* arg) {
  rootState* st = (rootState*)arg;
  commLogSetRank(-1);
  (void)rootRun(st);
  rootFree(st);
  return NULL;
}

/* Starts the root thread on a listening socket; owns listenFd from here on, even on failure. */
static commResult_t rootStart(int listenFd, const commSockAddr* addr, uint64_t secret) {
  rootState* st = NULL;
  commResult_t res = commCalloc(&st, 1, sizeof(rootState));
  if (res != commSuccess) {
    close(listenFd);
    return res;
  }
  st->listenFd = listenFd;
  st->secret = secret;
  st->addr = *addr;
  st->deadlineNs = COMM_NO_DEADLINE;
  commSocketAddrStr(addr, st->addrStr, sizeof(st->addrStr));
  pthread_attr_t attr;
  pthread_t thread;
  int err = pthread_attr_init(&attr);
  if (err == 0) {
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    err = pthread_create(&thread, &attr, rootThread, st);
    pthread_attr_destroy(&attr);
  }
  if (err != 0) {
    WARN("bootstrap: could not start the root thread: %s", strerror(err));
    rootFree(st);
    return commSystemError;
  }
  INFO(COMM_BOOTSTRAP, "bootstrap root listening at %s", st->addrStr);
  return commSuccess;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Unique ids */

static void writeId(commUniqueId* id, uint64_t secret, const commSockAddr* root) {
  commBootstrapId bid;
  memset(&bid, 0, sizeof(bid));
  bid.magic = COMM_BOOTSTRAP_MAGIC;
  bid.secret = secret;
  bid.root = *root;
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, &bid, sizeof(bid));
}

commResult_t bootstrapGetUniqueId(commUniqueId* id) {
  if (id == NULL) {
    WARN("bootstrapGetUniqueId: id is NULL");
    return commInvalidArgument;
  }
  char ifName[COMM_IFNAME_MAX];
  commSockAddr addr;
  uint64_t secret;
  int fd = -1;
  COMMCHECK(commRandom64(&secret));
  COMMCHECK(commSocketFindInterface(ifName, &addr));
  if (addr.sa.sa_family == AF_INET) {
    addr.sin.sin_port = 0;
  } else {
    addr.sin6.sin6_port = 0;
  }
  COMMCHECK(commSocketListen(&addr, &fd));
  COMMCHECK(rootStart(fd, &addr, secret));
  writeId(id, secret, &addr);
  return commSuccess;
}

static int isLocalAddr(const commSockAddr* a) {
  if (a->sa.sa_family == AF_INET && (ntohl(a->sin.sin_addr.s_addr) >> 24) == 127) return 1;
  if (a->sa.sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&a->sin6.sin6_addr)) return 1;
  struct ifaddrs* list = NULL;
  if (getifaddrs(&list) != 0) return 0;
  int found = 0;
  for (const struct ifaddrs* ifa = list; ifa != NULL && !found; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != a->sa.sa_family) continue;
    if (a->sa.sa_family == AF_INET) {
      found = ((const struct sockaddr_in*)ifa->ifa_addr)->sin_addr.s_addr == a->sin.sin_addr.s_addr;
    } else {
      found = memcmp(&((const struct sockaddr_in6*)ifa->ifa_addr)->sin6_addr, &a->sin6.sin6_addr,
                     sizeof(struct in6_addr)) == 0;
    }
  }
  freeifaddrs(list);
  return found;
}

commResult_t bootstrapIdFromRootAddr(const char* hostport, commUniqueId* id, int isRoot) {
  if (hostport == NULL || id == NULL) {
    WARN("bootstrapIdFromRootAddr: NULL argument");
    return commInvalidArgument;
  }
  commSockAddr addr;
  COMMCHECK(commSocketParseAddr(hostport, &addr));
  const char* secretStr = commParamStr("COMM_ROOT_SECRET", NULL);
  uint64_t secret = commHashString(secretStr != NULL ? secretStr : hostport, 0x636f6d6d726f6f74ull);
  if (isRoot) {
    commSockAddr bindAddr = addr;
    char buf[BOOT_ADDR_STR];
    if (!isLocalAddr(&addr)) {
      if (addr.sa.sa_family == AF_INET) {
        bindAddr.sin.sin_addr.s_addr = htonl(INADDR_ANY);
      } else {
        bindAddr.sin6.sin6_addr = in6addr_any;
        bindAddr.sin6.sin6_scope_id = 0;
      }
      WARN("COMM_ROOT %s is not an address of this host: the root listens on %s instead", hostport,
           commSocketAddrStr(&bindAddr, buf, sizeof(buf)));
    }
    int fd = -1;
    COMMCHECK(commSocketListen(&bindAddr, &fd));
    COMMCHECK(rootStart(fd, &bindAddr, secret));
  }
  writeId(id, secret, &addr);
  return commSuccess;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Rank side: rendezvous */

static void freeBootstrap(commBootstrap* b) {
  if (b == NULL) return;
  if (b->listenFd >= 0) close(b->listenFd);
  bootMsg* m = b->queueHead;
  while (m != NULL) {
    bootMsg* next = m->next;
    free(m->data);
    free(m);
    m = next;
  }
  free(b->peers);
  free(b->sendSeq);
  free(b->recvContig);
  free(b);
}

/* Talks to the root: hello out, table (or the reason there is none) back. */
static commResult_t rendezvous(commBootstrap* b, const commSockAddr* rootAddr, int64_t deadlineNs) {
  char rootStr[BOOT_ADDR_STR];
  commSocketAddrStr(rootAddr, rootStr, sizeof(rootStr));
  int fd = -1;
  commResult_t res = commSocketConnect(rootAddr, &fd, deadlineNs, b->abortFlag);
  if (res == commTimeout) {
    WARN("rank %d: could not connect to the bootstrap root at %s within %lld ms", b->rank, rootStr,
         (long long)b->timeoutMs);
  } else if (res == commInternalError && isAborted(b)) {
    WARN("rank %d: bootstrap rendezvous of %d ranks aborted", b->rank, b->nranks);
  }
  if (res != commSuccess) return res;

  bootHello hello;
  memset(&hello, 0, sizeof(hello));
  hello.magic = BOOT_HELLO_MAGIC;
  hello.secret = b->secret;
  hello.rank = b->rank;
  hello.nranks = b->nranks;
  hello.remainingMs = deadlineNs == COMM_NO_DEADLINE ? -1 : COMM_MAX((deadlineNs - commTimeNs()) / 1000000, 0);
  hello.addr = b->listenAddr;
  bootReply rep;
  unsigned char* flags = NULL;
  COMMCHECKGOTO(commSocketSendAll(fd, &hello, sizeof(hello), deadlineNs, b->abortFlag), res, fail);
  res = commSocketRecvAll(fd, &rep, sizeof(rep), deadlineNs, b->abortFlag);
  if (res == commTimeout) {
    WARN("rank %d: root did not complete the rendezvous of %d ranks within %lld ms", b->rank, b->nranks,
         (long long)b->timeoutMs);
    goto fail;
  }
  if (res == commRemoteError) {
    WARN("rank %d: the bootstrap root at %s closed the connection before the rendezvous of %d ranks completed",
         b->rank, rootStr, b->nranks);
    goto fail;
  }
  if (res != commSuccess) goto fail;
  if (rep.magic != BOOT_REPLY_MAGIC || rep.secret != b->secret) {
    WARN("rank %d: invalid answer from the bootstrap root at %s", b->rank, rootStr);
    res = commRemoteError;
    goto fail;
  }
  rep.reason[sizeof(rep.reason) - 1] = '\0';
  if (rep.status == BOOT_REPLY_REJECTED) {
    WARN("rank %d: the bootstrap root at %s rejected this rank: %s", b->rank, rootStr, rep.reason);
    res = commInvalidUsage;
    goto fail;
  }
  if (rep.nranks != b->nranks) {
    WARN("rank %d: the bootstrap root at %s answered for %d ranks, this rank expects %d", b->rank, rootStr,
         rep.nranks, b->nranks);
    res = commRemoteError;
    goto fail;
  }
  if (rep.status == BOOT_REPLY_TIMEOUT) {
    char missing[256] = "unknown";
    COMMCHECKGOTO(commCalloc(&flags, (size_t)b->nranks, 1), res, fail);
    if (commSocketRecvAll(fd, flags, (size_t)b->nranks, commDeadlineNs(1000), b->abortFlag) == commSuccess) {
      formatMissing(flags, b->nranks, missing, sizeof(missing));
    }
    WARN("rank %d: root did not complete the rendezvous of %d ranks within %lld ms: %d arrived, missing ranks: %s",
         b->rank, b->nranks, (long long)b->timeoutMs, rep.arrived, missing);
    res = commTimeout;
    goto fail;
  }
  if (rep.status != BOOT_REPLY_OK) {
    WARN("rank %d: unknown answer %d from the bootstrap root at %s", b->rank, rep.status, rootStr);
    res = commRemoteError;
    goto fail;
  }
  res = commSocketRecvAll(fd, b->peers, sizeof(commSockAddr) * (size_t)b->nranks, deadlineNs, b->abortFlag);
  if (res == commTimeout) {
    WARN("rank %d: root did not complete the rendezvous of %d ranks within %lld ms (the table was cut short)",
         b->rank, b->nranks, (long long)b->timeoutMs);
  }
fail:
  if (res == commInternalError && isAborted(b)) {
    WARN("rank %d: bootstrap rendezvous of %d ranks aborted", b->rank, b->nranks);
  }
  free(flags);
  close(fd);
  return res;
}

commResult_t bootstrapInit(const commUniqueId* id, int rank, int nranks, const commBootstrapOpts* opts,
                           commBootstrap** out) {
  if (id == NULL || out == NULL) {
    WARN("bootstrapInit: NULL argument");
    return commInvalidArgument;
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    WARN("bootstrapInit: invalid rank %d of %d ranks", rank, nranks);
    return commInvalidArgument;
  }
  commBootstrapId bid;
  memcpy(&bid, id->internal, sizeof(bid));
  if (bid.magic != COMM_BOOTSTRAP_MAGIC) {
    WARN("bootstrapInit: rank %d: invalid unique id (bad magic 0x%llx)", rank, (unsigned long long)bid.magic);
    return commInvalidArgument;
  }
  int64_t timeoutMs = opts != NULL ? opts->timeoutMs : -1;
  int64_t deadlineNs = commDeadlineNs(timeoutMs);
  commBootstrap* b = NULL;
  commResult_t res;
  COMMCHECK(commCalloc(&b, 1, sizeof(commBootstrap)));
  b->listenFd = -1;
  b->rank = rank;
  b->nranks = nranks;
  b->secret = bid.secret;
  b->timeoutMs = timeoutMs;
  b->abortFlag = opts != NULL ? opts->abortFlag : NULL;
  COMMCHECKGOTO(commCalloc(&b->peers, (size_t)nranks, sizeof(commSockAddr)), res, fail);
  COMMCHECKGOTO(commCalloc(&b->sendSeq, (size_t)nranks, sizeof(uint64_t)), res, fail);
  COMMCHECKGOTO(commCalloc(&b->recvContig, (size_t)nranks, sizeof(uint64_t)), res, fail);
  COMMCHECKGOTO(commSocketFindInterface(b->ifName, &b->listenAddr), res, fail);
  if (b->listenAddr.sa.sa_family == AF_INET) {
    b->listenAddr.sin.sin_port = 0;
  } else {
    b->listenAddr.sin6.sin6_port = 0;
  }
  COMMCHECKGOTO(commSocketListen(&b->listenAddr, &b->listenFd), res, fail);
  COMMCHECKGOTO(rendezvous(b, &bid.root, deadlineNs), res, fail);
  {
    char lbuf[BOOT_ADDR_STR], rbuf[BOOT_ADDR_STR];
    INFO(COMM_BOOTSTRAP, "rank %d/%d: bootstrap on interface %s, listening at %s, root %s", rank, nranks,
         b->ifName, commSocketAddrStr(&b->listenAddr, lbuf, sizeof(lbuf)),
         commSocketAddrStr(&bid.root, rbuf, sizeof(rbuf)));
  }
  *out = b;
  return commSuccess;
fail:
  freeBootstrap(b);
  return res;
}

void bootstrapSetTimeout(commBootstrap* b, int64_t timeoutMs) {
  if (b != NULL) b->timeoutMs = timeoutMs;
}

commResult_t bootstrapClose(commBootstrap* b) {
  freeBootstrap(b);
  return commSuccess;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Messages */

static commResult_t sendMsg(commBootstrap* b, int peer, int tag, const void* data, size_t size,
                            int64_t deadlineNs) {
  char pstr[BOOT_ADDR_STR];
  int fd = -1;
  commResult_t res = commSocketConnect(&b->peers[peer], &fd, deadlineNs, b->abortFlag);
  if (res == commTimeout) {
    WARN("rank %d: bootstrap send to rank %d (%s) tag %d: could not connect within %lld ms", b->rank, peer,
         commSocketAddrStr(&b->peers[peer], pstr, sizeof(pstr)), tag, (long long)b->timeoutMs);
  } else if (res == commInternalError && isAborted(b)) {
    WARN("rank %d: bootstrap send to rank %d tag %d aborted", b->rank, peer, tag);
  }
  if (res != commSuccess) return res;
  bootMsgHdr hdr;
  memset(&hdr, 0, sizeof(hdr));
  hdr.magic = BOOT_MSG_MAGIC;
  hdr.secret = b->secret;
  hdr.src = b->rank;
  hdr.tag = tag;
  hdr.size = size;
  hdr.seq = b->sendSeq[peer];
  res = commSocketSendAll(fd, &hdr, sizeof(hdr), deadlineNs, b->abortFlag);
  if (res == commSuccess && size > 0) res = commSocketSendAll(fd, data, size, deadlineNs, b->abortFlag);
  close(fd);
  if (res == commTimeout) {
    WARN("rank %d: bootstrap send of %zu bytes to rank %d tag %d did not complete within %lld ms", b->rank, size,
         peer, tag, (long long)b->timeoutMs);
  }
  if (res == commInternalError && isAborted(b)) {
    WARN("rank %d: bootstrap send to rank %d tag %d aborted", b->rank, peer, tag);
  }
  if (res != commSuccess) return res;
  b->sendSeq[peer]++;
  return commSuccess;
}

static bootMsg* findQueued(commBootstrap* b, int src, uint64_t seq) {
  for (bootMsg* m = b->queueHead; m != NULL; m = m->next) {
    if (m->src == src && m->seq == seq) return m;
  }
  return NULL;
}

/* The earliest-sent queued message from peer with tag, if every message peer sent before it has arrived. */
static bootMsg* findMatch(commBootstrap* b, int peer, int tag, bootMsg** prevOut) {
  bootMsg *best = NULL, *bestPrev = NULL, *prev = NULL;
  for (bootMsg* m = b->queueHead; m != NULL; prev = m, m = m->next) {
    if (m->src != peer || m->tag != tag || m->seq >= b->recvContig[peer]) continue;
    if (best == NULL || m->seq < best->seq) {
      best = m;
      bestPrev = prev;
    }
  }
  *prevOut = bestPrev;
  return best;
}

/* Reads one message from an accepted connection and queues it. *dropped is set when the connection was
 * not a valid message (and was reported); errors returned are those that end the caller's wait. */
static commResult_t readIncoming(commBootstrap* b, int fd, int64_t deadlineNs, int* dropped) {
  char from[BOOT_ADDR_STR];
  bootMsgHdr hdr;
  bootMsg* m = NULL;
  *dropped = 1;
  fdPeerStr(fd, from, sizeof(from));
  int64_t hdrDeadline = minDeadline(commDeadlineNs(BOOT_HEADER_TIMEOUT_MS), deadlineNs);
  commResult_t res = commSocketRecvAll(fd, &hdr, sizeof(hdr), hdrDeadline, b->abortFlag);
  if (res == commTimeout && deadlinePassed(deadlineNs)) return commTimeout;
  if (res == commInternalError) return res; /* aborted */
  if (res == commTimeout) {
    WARN("rank %d: dropped bootstrap connection from %s: no complete header within %d ms", b->rank, from,
         BOOT_HEADER_TIMEOUT_MS);
    return commSuccess;
  }
  if (res != commSuccess) {
    WARN("rank %d: dropped bootstrap connection from %s: it closed or failed before sending a header", b->rank,
         from);
    return commSuccess;
  }
  if (hdr.magic != BOOT_MSG_MAGIC) {
    WARN("rank %d: dropped bootstrap connection from %s: bad magic (not a libcomm bootstrap message)", b->rank,
         from);
    return commSuccess;
  }
  if (hdr.secret != b->secret) {
    WARN("rank %d: dropped bootstrap connection from %s: wrong secret (a different unique id?)", b->rank, from);
    return commSuccess;
  }
  if (hdr.src < 0 || hdr.src >= b->nranks || hdr.size > BOOT_MAX_MSG_BYTES) {
    WARN("rank %d: dropped bootstrap connection from %s: invalid header (source rank %d of %d, %llu bytes)",
         b->rank, from, hdr.src, b->nranks, (unsigned long long)hdr.size);
    return commSuccess;
  }
  if (hdr.seq < b->recvContig[hdr.src] || findQueued(b, hdr.src, hdr.seq) != NULL) {
    WARN("rank %d: dropped bootstrap connection from %s: message %llu of rank %d arrived twice", b->rank, from,
         (unsigned long long)hdr.seq, hdr.src);
    return commSuccess;
  }
  COMMCHECK(commCalloc(&m, 1, sizeof(bootMsg)));
  m->src = hdr.src;
  m->tag = hdr.tag;
  m->seq = hdr.seq;
  m->size = (size_t)hdr.size;
  if (m->size > 0) {
    COMMCHECKGOTO(commCalloc(&m->data, m->size, 1), res, fail);
    res = commSocketRecvAll(fd, m->data, m->size, deadlineNs, b->abortFlag);
    if (res == commTimeout || res == commInternalError) goto fail;
    if (res != commSuccess) {
      WARN("rank %d: dropped bootstrap message from rank %d (%s) tag %d: payload of %zu bytes cut short", b->rank,
           m->src, from, m->tag, m->size);
      res = commSuccess;
      goto fail;
    }
  }
  if (b->queueTail != NULL) {
    b->queueTail->next = m;
  } else {
    b->queueHead = m;
  }
  b->queueTail = m;
  if (m->seq == b->recvContig[m->src]) {
    do {
      b->recvContig[m->src]++;
    } while (findQueued(b, m->src, b->recvContig[m->src]) != NULL);
  }
  *dropped = 0;
  return commSuccess;
fail:
  if (m != NULL) free(m->data);
  free(m);
  return res;
}

static commResult_t recvMsg(commBootstrap* b, int peer, int tag, void* data, size_t size, int64_t deadlineNs) {
  for (;;) {
    bootMsg* prev = NULL;
    bootMsg* m = findMatch(b, peer, tag, &prev);
    if (m != NULL) {
      if (prev != NULL) {
        prev->next = m->next;
      } else {
        b->queueHead = m->next;
      }
      if (b->queueTail == m) b->queueTail = prev;
      commResult_t res = commSuccess;
      if (m->size != size) {
        WARN("rank %d: bootstrap recv from rank %d tag %d: expected %zu bytes, the message has %zu", b->rank, peer,
             tag, size, m->size);
        res = commInternalError;
      } else if (size > 0) {
        memcpy(data, m->data, size);
      }
      free(m->data);
      free(m);
      return res;
    }
    int fd = -1;
    commResult_t res = commSocketAccept(b->listenFd, &fd, deadlineNs, b->abortFlag);
    if (res == commSuccess) {
      int dropped = 0;
      res = readIncoming(b, fd, deadlineNs, &dropped);
      close(fd);
    }
    if (res == commTimeout) {
      WARN("rank %d: bootstrap recv from rank %d tag %d timed out after %lld ms", b->rank, peer, tag,
           (long long)b->timeoutMs);
    } else if (res == commInternalError && isAborted(b)) {
      WARN("rank %d: bootstrap recv from rank %d tag %d aborted", b->rank, peer, tag);
    }
    if (res != commSuccess) return res;
  }
}

static commResult_t checkPeer(commBootstrap* b, int peer, int tag, const void* data, size_t size,
                              const char* what) {
  if (b == NULL) {
    WARN("%s: bootstrap is NULL", what);
    return commInvalidArgument;
  }
  if (peer < 0 || peer >= b->nranks) {
    WARN("%s: rank %d: invalid peer %d of %d ranks", what, b->rank, peer, b->nranks);
    return commInvalidArgument;
  }
  if (tag < 0) {
    WARN("%s: rank %d: tag %d is negative (negative tags are reserved for the bootstrap's collectives)", what,
         b->rank, tag);
    return commInvalidArgument;
  }
  if (data == NULL && size > 0) {
    WARN("%s: rank %d: NULL buffer of %zu bytes", what, b->rank, size);
    return commInvalidArgument;
  }
  if (size > BOOT_MAX_MSG_BYTES) {
    WARN("%s: rank %d: %zu bytes is more than the bootstrap carries (%llu)", what, b->rank, size,
         (unsigned long long)BOOT_MAX_MSG_BYTES);
    return commInvalidArgument;
  }
  return commSuccess;
}

commResult_t bootstrapSend(commBootstrap* b, int peer, int tag, const void* data, size_t size) {
  COMMCHECK(checkPeer(b, peer, tag, data, size, "bootstrapSend"));
  return sendMsg(b, peer, tag, data, size, commDeadlineNs(b->timeoutMs));
}

commResult_t bootstrapRecv(commBootstrap* b, int peer, int tag, void* data, size_t size) {
  COMMCHECK(checkPeer(b, peer, tag, data, size, "bootstrapRecv"));
  return recvMsg(b, peer, tag, data, size, commDeadlineNs(b->timeoutMs));
}

/* ---------------------------------------------------------------------------------------------------- */
/* Collectives */

/* A tag no user message carries (users' tags are >= 0), new for every collective round. */
static int nextCollTag(commBootstrap* b) {
  int tag = INT32_MIN + (int)(b->collSeq & 0x7fffffffu);
  b->collSeq++;
  return tag;
}

commResult_t bootstrapAllGather(commBootstrap* b, void* data, size_t bytes) {
  if (b == NULL || (data == NULL && bytes > 0)) {
    WARN("bootstrapAllGather: NULL argument");
    return commInvalidArgument;
  }
  int n = b->nranks, rank = b->rank;
  if (n == 1) return commSuccess;
  if (bytes > BOOT_MAX_MSG_BYTES) {
    WARN("bootstrapAllGather: rank %d: %zu bytes per rank is more than the bootstrap carries", rank, bytes);
    return commInvalidArgument;
  }
  int64_t deadlineNs = commDeadlineNs(b->timeoutMs);
  int tag = nextCollTag(b);
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  /* Large slots block in send until the next rank reads them; odd ranks receive first so that the ring
   * of sends never closes into a cycle of waits. */
  int sendFirst = bytes <= BOOT_EAGER_BYTES || rank % 2 == 0;
  char* p = (char*)data;
  for (int step = 0; step < n - 1; step++) {
    int sendSlot = (rank - step + n) % n;
    int recvSlot = (rank - step - 1 + n) % n;
    if (sendFirst) COMMCHECK(sendMsg(b, next, tag, p + (size_t)sendSlot * bytes, bytes, deadlineNs));
    COMMCHECK(recvMsg(b, prev, tag, p + (size_t)recvSlot * bytes, bytes, deadlineNs));
    if (!sendFirst) COMMCHECK(sendMsg(b, next, tag, p + (size_t)sendSlot * bytes, bytes, deadlineNs));
  }
  return commSuccess;
}

/* Dissemination barrier: ceil(log2 n) rounds, in round k send to rank + 2^k and hear from rank - 2^k. */
commResult_t bootstrapBarrier(commBootstrap* b) {
  if (b == NULL) {
    WARN("bootstrapBarrier: bootstrap is NULL");
    return commInvalidArgument;
  }
  int n = b->nranks, rank = b->rank;
  int64_t deadlineNs = commDeadlineNs(b->timeoutMs);
  for (int k = 1; k < n; k <<= 1) {
    int tag = nextCollTag(b);
    COMMCHECK(sendMsg(b, (rank + k) % n, tag, NULL, 0, deadlineNs));
    COMMCHECK(recvMsg(b, (rank - k % n + n) % n, tag, NULL, 0, deadlineNs));
  }
  return commSuccess;
}
