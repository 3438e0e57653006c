/* The root of the bootstrap rendezvous: a thread, started where the unique id is made, that serves one
 * rendezvous and exits.
 *
 * Every rank connects to the root and runs the handshake of bootstrap_auth.h, its claim being the hello
 * {rank, nranks, time left, listen address}. The root runs every handshake from one event loop, each
 * connection with its own short deadline (BOOT_AUTH_TIMEOUT_MS) and at most BOOT_ROOT_MAX_PENDING at once,
 * so that strangers, garbage and silent connections are dropped without delaying anyone; a rank whose
 * connection was given up before it authenticated connects again. When all ranks have arrived it sends
 * everyone the table of listen addresses; when the earliest rank deadline is about to pass it sends everyone
 * the list of ranks that did not arrive instead. Each answer carries a MAC over both nonces of that rank's
 * handshake. Strangers are reported in one summary WARN per few seconds, never one per connection. */
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

/* Unauthenticated connections the root serves at once; beyond that one is given up (bootSrvVictim). */
#define BOOT_ROOT_MAX_PENDING 256
/* How long the root tries to hand its answer to one rank. */
#define BOOT_ROOT_REPLY_TIMEOUT_MS 10000
/* Out of file descriptors: stop accepting for this long. */
#define BOOT_ROOT_ACCEPT_PAUSE_MS 50

static int64_t elapsedMs(int64_t startNs) { return (commTimeNs() - startNs) / 1000000; }

typedef struct {
  uint8_t nonceL[BOOT_NONCE_BYTES];
  uint8_t nonceC[BOOT_NONCE_BYTES];
} rootNonces;

typedef struct {
  int listenFd;
  uint64_t key[2];
  commSockAddr addr;
  char addrStr[BOOT_ADDR_STR];
  char name[32 + BOOT_ADDR_STR];
  int nranks; /* 0 until the first valid hello */
  int arrived;
  int* rankFd;
  rootNonces* rankNonces; /* of each rank's handshake, for the MAC of its answer */
  commSockAddr* table;
  bootSrvConn* pending[BOOT_ROOT_MAX_PENDING]; /* in arrival order */
  int npending;
  bootDropStats stats;
  int64_t acceptPauseNs;
  int64_t firstHelloNs;
  int64_t deadlineNs;
} rootState;

static void rootFree(rootState* st) {
  if (st->listenFd >= 0) close(st->listenFd);
  for (int i = 0; i < st->npending; i++) {
    if (st->pending[i]->fd >= 0) close(st->pending[i]->fd);
    free(st->pending[i]);
  }
  if (st->rankFd != NULL) {
    for (int r = 0; r < st->nranks; r++) {
      if (st->rankFd[r] >= 0) close(st->rankFd[r]);
    }
  }
  free(st->rankFd);
  free(st->rankNonces);
  free(st->table);
  memset(st->key, 0, sizeof(st->key));
  free(st);
}

static void rootSendReply(rootState* st, int fd, const rootNonces* n, int status, const char* reason,
                          const void* payload, size_t payloadBytes, int64_t deadlineNs) {
  bootReply rep;
  memset(&rep, 0, sizeof(rep));
  rep.magic = BOOT_REPLY_MAGIC;
  rep.status = status;
  rep.nranks = st->nranks;
  rep.arrived = st->arrived;
  if (reason != NULL) snprintf(rep.reason, sizeof(rep.reason), "%s", reason);
  uint64_t mac = bootMacData(st->key, BOOT_LABEL_REPLY, n->nonceL, n->nonceC, &rep, sizeof(rep), payload, payloadBytes);
  char peer[BOOT_ADDR_STR];
  if (commSocketSendAll(fd, &rep, sizeof(rep), deadlineNs, NULL) != commSuccess ||
      (payloadBytes > 0 && commSocketSendAll(fd, payload, payloadBytes, deadlineNs, NULL) != commSuccess) ||
      commSocketSendAll(fd, &mac, sizeof(mac), deadlineNs, NULL) != commSuccess) {
    WARN("bootstrap root at %s: could not send the answer to %s", st->addrStr, bootFdPeerStr(fd, peer, sizeof(peer)));
  }
}

/* Close pending connection i (fd = -1, compacted later); why >= 0: a stranger, counted for the summary. */
static void rootClosePending(rootState* st, int i, int why) {
  bootSrvConn* p = st->pending[i];
  if (p->fd < 0) return;
  if (why >= 0) bootDropNote(&st->stats, why, p->from);
  close(p->fd);
  p->fd = -1;
}

/* An authenticated rank the root turns away: it hears why (authenticated), the root WARNs. */
static void rootReject(rootState* st, int i, const char* why) {
  bootSrvConn* p = st->pending[i];
  rootNonces n;
  memcpy(n.nonceL, p->nonce, sizeof(n.nonceL));
  memcpy(n.nonceC, p->auth.nonce, sizeof(n.nonceC));
  rootSendReply(st, p->fd, &n, BOOT_REPLY_REJECTED, why, NULL, 0, commDeadlineNs(100));
  WARN("bootstrap root at %s: turned away %s: %s", st->addrStr, p->from, why);
  rootClosePending(st, i, -1);
}

static commResult_t rootRegister(rootState* st, int i) {
  bootSrvConn* p = st->pending[i];
  const bootAuthMsg* h = &p->auth;
  char why[160];
  if (h->type != BOOT_TYPE_HELLO) {
    snprintf(why, sizeof(why), "connection of type %u is not a hello", h->type);
    rootReject(st, i, why);
    return commSuccess;
  }
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
    COMMCHECK(commCalloc(&st->rankNonces, (size_t)h->nranks, sizeof(rootNonces)));
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
  memcpy(st->rankNonces[h->rank].nonceL, p->nonce, BOOT_NONCE_BYTES);
  memcpy(st->rankNonces[h->rank].nonceC, h->nonce, BOOT_NONCE_BYTES);
  st->table[h->rank] = h->addr;
  st->arrived++;
  TRACE(COMM_BOOTSTRAP, "bootstrap root: rank %d/%d arrived from %s (%d of %d)", h->rank, h->nranks, p->from,
        st->arrived, st->nranks);
  p->fd = -1; /* now owned by rankFd */
  return commSuccess;
}

/* Progress the handshake of pending connection i. */
static commResult_t rootReadPending(rootState* st, int i) {
  int why = BOOT_DROP_GARBAGE;
  int r = bootSrvProgress(st->pending[i], st->key, 0, &why);
  if (r == BOOT_SRV_DROP) rootClosePending(st, i, why);
  if (r == BOOT_SRV_DONE) COMMCHECK(rootRegister(st, i));
  return commSuccess;
}

static void rootCompact(rootState* st) {
  int k = 0;
  for (int i = 0; i < st->npending; i++) {
    if (st->pending[i]->fd >= 0) {
      st->pending[k++] = st->pending[i];
    } else {
      free(st->pending[i]);
    }
  }
  st->npending = k;
}

static commResult_t rootAcceptAll(rootState* st) {
  /* A bounded batch per pass: what the accepted ones sent is read before more arrive. */
  for (int batch = 0; batch < BOOT_ACCEPT_BATCH; batch++) {
    commSockAddr from;
    socklen_t len = sizeof(from);
    memset(&from, 0, sizeof(from));
    int fd = accept4(st->listenFd, &from.sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return commSuccess;
      if (errno != EMFILE && errno != ENFILE)
        WARN("bootstrap root at %s: accept failed: %s", st->addrStr, strerror(errno));
      st->acceptPauseNs = commDeadlineNs(BOOT_ROOT_ACCEPT_PAUSE_MS);
      return commSuccess;
    }
    commSocketSetNoDelay(fd);
    if (st->npending == BOOT_ROOT_MAX_PENDING) {
      rootCompact(st);
      if (st->npending == BOOT_ROOT_MAX_PENDING) {
        int v = bootSrvVictim(st->pending, st->npending);
        rootClosePending(st, v, BOOT_DROP_SILENT);
        rootCompact(st);
      }
    }
    bootSrvConn* p = NULL;
    commResult_t res = commCalloc(&p, 1, sizeof(bootSrvConn));
    if (res != commSuccess) {
      close(fd);
      return res;
    }
    st->pending[st->npending++] = p;
    if (bootSrvStart(p, fd, &from) == BOOT_SRV_DROP) rootClosePending(st, st->npending - 1, BOOT_DROP_CLOSED);
  }
  return commSuccess;
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
    rootSendReply(st, st->rankFd[r], &st->rankNonces[r], BOOT_REPLY_TIMEOUT, "rendezvous timed out", flags,
                  flags ? (size_t)st->nranks : 0, d);
  }
  free(flags);
}

/* The strangers still connected at the end count too; the last summary goes out before the answers. */
static void rootEndStrangers(rootState* st) {
  for (int i = 0; i < st->npending; i++) rootClosePending(st, i, BOOT_DROP_SILENT);
  rootCompact(st);
  bootDropFlush(&st->stats, st->name, 1);
}

static commResult_t rootRun(rootState* st) {
  struct pollfd* pfds = NULL;
  int pfdCap = 0;
  commResult_t res = commSuccess;
  while (st->nranks == 0 || st->arrived < st->nranks) {
    int64_t now = commTimeNs();
    if (st->deadlineNs != COMM_NO_DEADLINE && now >= st->deadlineNs) {
      rootEndStrangers(st);
      rootTimeout(st);
      res = commTimeout;
      goto exit;
    }
    int64_t wake = st->deadlineNs;
    for (int i = 0; i < st->npending; i++) {
      if (now >= st->pending[i]->deadlineNs) {
        rootClosePending(st, i, BOOT_DROP_SILENT);
      } else {
        wake = minDeadline(wake, st->pending[i]->deadlineNs);
      }
    }
    rootCompact(st);
    bootDropFlush(&st->stats, st->name, 0);
    wake = minDeadline(wake, bootDropNextNs(&st->stats));
    int paused = st->acceptPauseNs != 0 && now < st->acceptPauseNs;
    if (paused) wake = minDeadline(wake, st->acceptPauseNs);

    int need = 1 + st->npending + st->nranks;
    if (need > pfdCap) {
      COMMCHECKGOTO(commRealloc(&pfds, (size_t)pfdCap, (size_t)need, sizeof(struct pollfd)), res, exit);
      pfdCap = need;
    }
    int n = 0;
    pfds[n++] = (struct pollfd){.fd = paused ? -1 : st->listenFd, .events = POLLIN, .revents = 0};
    for (int i = 0; i < st->npending; i++) pfds[n++] = (struct pollfd){.fd = st->pending[i]->fd, .events = POLLIN};
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
      if (pfds[1 + i].revents != 0 && st->pending[i]->fd >= 0) COMMCHECKGOTO(rootReadPending(st, i), res, exit);
    }
    rootCompact(st);
    if (pfds[0].revents != 0) COMMCHECKGOTO(rootAcceptAll(st), res, exit);
  }
  /* Everyone is here: hand out the table. */
  {
    rootEndStrangers(st);
    int64_t d = commDeadlineNs(BOOT_ROOT_REPLY_TIMEOUT_MS);
    for (int r = 0; r < st->nranks; r++) {
      rootSendReply(st, st->rankFd[r], &st->rankNonces[r], BOOT_REPLY_OK, NULL, st->table,
                    sizeof(commSockAddr) * (size_t)st->nranks, d);
    }
    INFO(COMM_BOOTSTRAP, "bootstrap root at %s: rendezvous of %d ranks complete in %lld ms", st->addrStr, st->nranks,
         (long long)elapsedMs(st->firstHelloNs));
  }
exit:
  if (res != commSuccess && res != commTimeout) rootEndStrangers(st);
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
static commResult_t rootStart(int listenFd, const commSockAddr* addr, const uint64_t key[2]) {
  rootState* st = NULL;
  commResult_t res = commCalloc(&st, 1, sizeof(rootState));
  if (res != commSuccess) {
    close(listenFd);
    return res;
  }
  st->listenFd = listenFd;
  memcpy(st->key, key, sizeof(st->key));
  st->addr = *addr;
  st->deadlineNs = COMM_NO_DEADLINE;
  commSocketAddrStr(addr, st->addrStr, sizeof(st->addrStr));
  snprintf(st->name, sizeof(st->name), "bootstrap root at %s", st->addrStr);
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

static void writeId(commUniqueId* id, const uint64_t key[2], const commSockAddr* root) {
  commBootstrapId bid;
  memset(&bid, 0, sizeof(bid));
  bid.magic = COMM_BOOTSTRAP_MAGIC;
  memcpy(bid.secret, key, sizeof(bid.secret));
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
  uint64_t key[2];
  int fd = -1;
  COMMCHECK(bootRandomBytes(key, sizeof(key)));
  COMMCHECK(commSocketFindInterface(ifName, &addr));
  if (addr.sa.sa_family == AF_INET) {
    addr.sin.sin_port = 0;
  } else {
    addr.sin6.sin6_port = 0;
  }
  COMMCHECK(commSocketListen(&addr, &fd));
  COMMCHECK(rootStart(fd, &addr, key));
  writeId(id, key, &addr);
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
  uint64_t key[2];
  if (secretStr != NULL && secretStr[0] != '\0') {
    bootKeyFromString(secretStr, key);
  } else {
    static int warned = 0;
    bootPublicKey(key);
    if (__atomic_exchange_n(&warned, 1, __ATOMIC_ACQ_REL) == 0) {
      WARN_NOTICE(
          "COMM_ROOT=%s without COMM_ROOT_SECRET: this job's bootstrap is unauthenticated (anyone who can reach the "
          "port can join or disrupt it); set COMM_ROOT_SECRET to the same random string on every rank",
          hostport);
    }
  }
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
      WARN_NOTICE("COMM_ROOT %s is not an address of this host: the root listens on %s instead", hostport,
                  commSocketAddrStr(&bindAddr, buf, sizeof(buf)));
    }
    int fd = -1;
    COMMCHECK(commSocketListen(&bindAddr, &fd));
    COMMCHECK(rootStart(fd, &bindAddr, key));
  }
  writeId(id, key, &addr);
  return commSuccess;
}
