/* The root of the bootstrap rendezvous: a thread, started where the unique id is made, that serves one
 * rendezvous and exits.
 *
 * Every rank connects to the root and sends a hello {magic, secret, rank, nranks, time left, listen
 * address}. The root reads hellos with an event loop, each connection with its own short deadline, so that
 * strangers, garbage and silent connections are dropped without delaying anyone. When all ranks have
 * arrived it sends everyone the table of listen addresses; when the earliest rank deadline is about to pass
 * it sends everyone the list of ranks that did not arrive instead. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bootstrap_internal.h"

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
#include "utils.h"

/* Connections the root reads hellos from at once; beyond that the oldest is dropped. */
#define BOOT_ROOT_MAX_PENDING 1024
/* How long the root tries to hand its answer to one rank. */
#define BOOT_ROOT_REPLY_TIMEOUT_MS 10000

static int64_t elapsedMs(int64_t startNs) { return (commTimeNs() - startNs) / 1000000; }

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
    WARN("bootstrap root at %s: could not send the answer to %s", st->addrStr, bootFdPeerStr(fd, peer, sizeof(peer)));
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
             bootFdPeerStr(st->rankFd[h->rank], prev, sizeof(prev)));
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
    bootFormatMissing(flags, st->nranks, missing, sizeof(missing));
  }
  WARN("bootstrap root at %s: the rendezvous of %d ranks timed out after %lld ms: %d arrived, missing ranks: %s",
       st->addrStr, st->nranks, (long long)elapsedMs(st->firstHelloNs), st->arrived, missing);
  int64_t d = commDeadlineNs(1000);
  for (int r = 0; r < st->nranks; r++) {
    if (st->rankFd[r] < 0) continue;
    rootSendReply(st, st->rankFd[r], BOOT_REPLY_TIMEOUT, "rendezvous timed out", flags, flags ? (size_t)st->nranks : 0,
                  d);
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
           bootFdPeerStr(q->fd, peer, sizeof(peer)));
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
    INFO(COMM_BOOTSTRAP, "bootstrap root at %s: rendezvous of %d ranks complete in %lld ms", st->addrStr, st->nranks,
         (long long)elapsedMs(st->firstHelloNs));
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
