/* Out-of-band bootstrap, the ranks' side: the rendezvous with the root, and tagged send/recv, allgather,
 * barrier, failure notices and probes between ranks over TCP. The root itself (and the unique ids that start
 * it) is in root.c, each rank's listener thread in listener.c, the handshake in auth.c.
 *
 * Every connection starts with the handshake of bootstrap_auth.h: the listener's nonce, the client's claim
 * with its MAC, the listener's proof; the key (128 bits, in the unique id) never crosses the wire.
 *
 * Rendezvous: every rank listens on its own socket, connects to the root (retrying while it refuses: the
 * root may start later) and claims {rank, nranks, time left, listen address} in the handshake; the root
 * answers with the table of listen addresses, or with the list of ranks that did not arrive in time, and a
 * MAC over its answer.
 *
 * Messages: one TCP connection per message to the peer's listener; the claim carries {src, tag, size, seq},
 * the payload follows the listener's proof with a MAC of its own. The listener thread queues what arrives.
 * `seq` counts messages per (src, dst) so that messages with one tag are delivered in the order they were
 * sent even if connections are served out of order. A peer whose listener refuses the connection after the
 * rendezvous is gone: that is an error at once, not a retry until the deadline. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bootstrap_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "socket.h"
#include "utils.h"

static_assert(sizeof(commBootstrapId) <= COMM_UNIQUE_ID_BYTES, "commBootstrapId must fit in commUniqueId");

/* bootstrapReportFailure gives up on the peers that did not take the notice by then. */
#define BOOT_REPORT_TIMEOUT_MS 1000
/* Longest single wait of bootstrapRecv, so that the abort flag is looked at often. */
#define BOOT_WAIT_SLICE_MS 20

static int isAborted(const commBootstrap* b) {
  return b->abortFlag != NULL && __atomic_load_n(b->abortFlag, __ATOMIC_ACQUIRE) != 0;
}

const char* bootFdPeerStr(int fd, char* buf, size_t n) {
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
void bootFormatMissing(const unsigned char* arrived, int nranks, char* buf, size_t n) {
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
/* Rank side: rendezvous */

/* ---------------------------------------------------------------------------------------------------- */
/* Rank side: rendezvous */

static void freeBootstrap(commBootstrap* b) {
  if (b == NULL) return;
  bootListenerStop(b);
  if (b->listenFd >= 0) close(b->listenFd);
  bootMsg* m = b->queueHead;
  while (m != NULL) {
    bootMsg* next = m->next;
    free(m->data);
    free(m);
    m = next;
  }
  if (b->syncInit) {
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
  }
  free(b->peers);
  free(b->sendSeq);
  free(b->recvContig);
  memset(b->key, 0, sizeof(b->key));
  free(b);
}

/* A client connection of this rank to peer's listener, asking for `type`. */
static void cliConnTo(const commBootstrap* b, int peer, uint32_t type, bootCliConn* c) {
  memset(c, 0, sizeof(*c));
  c->addr = b->peers[peer];
  c->auth.type = type;
  c->auth.rank = b->rank;
  c->auth.nranks = b->nranks;
}

/* What a handshake that did not complete means, as a WARN and a result. `what` names the operation. */
static commResult_t cliFailure(commBootstrap* b, const bootCliConn* c, int peer, const char* what) {
  char a[BOOT_ADDR_STR];
  commSocketAddrStr(&c->addr, a, sizeof(a));
  if (c->fail == BOOT_FAIL_REFUSED || c->fail == BOOT_FAIL_TIMEOUT || c->fail == BOOT_FAIL_BROKEN ||
      c->fail == BOOT_FAIL_DROPPED) {
    int none = -1; /* the first rank found gone or silent, for the communicator's failure report */
    __atomic_compare_exchange_n(&b->gonePeer, &none, peer, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
  switch (c->fail) {
    case BOOT_FAIL_REFUSED:
      WARN("rank %d: rank %d (%s) is gone: connection refused (%s)", b->rank, peer, a, what);
      return commRemoteError;
    case BOOT_FAIL_TIMEOUT:
      WARN("rank %d: %s: rank %d (%s) did not answer within %lld ms", b->rank, what, peer, a, (long long)b->timeoutMs);
      return commTimeout;
    case BOOT_FAIL_KEY:
      WARN("rank %d: %s: the listener of rank %d (%s) refused this rank's key (not the same job?)", b->rank, what, peer,
           a);
      return commRemoteError;
    case BOOT_FAIL_FAKE:
      WARN("rank %d: %s: the listener at %s could not prove it holds the job's key: it is not rank %d of this job",
           b->rank, what, a, peer);
      return commRemoteError;
    case BOOT_FAIL_SYSTEM:
      WARN("rank %d: %s to rank %d (%s) failed here", b->rank, what, peer, a);
      return commSystemError;
    default:
      WARN("rank %d: %s: the connection to rank %d (%s) failed%s%s: the rank is gone?", b->rank, what, peer, a,
           c->err ? ": " : "", c->err ? strerror(c->err) : "");
      return commRemoteError;
  }
}

/* The root's answer after the handshake: header, what follows it, and the MAC over both. */
static commResult_t readReply(commBootstrap* b, const bootCliConn* c, const char* rootStr, int64_t deadlineNs) {
  bootReply rep;
  unsigned char* extra = NULL;
  size_t extraBytes = 0;
  uint64_t mac = 0;
  commResult_t res = commSocketRecvAll(c->fd, &rep, sizeof(rep), deadlineNs, b->abortFlag);
  if (res == commTimeout) {
    WARN("rank %d: root did not complete the rendezvous of %d ranks within %lld ms", b->rank, b->nranks,
         (long long)b->timeoutMs);
    return res;
  }
  if (res == commRemoteError) {
    WARN("rank %d: the bootstrap root at %s closed the connection before the rendezvous of %d ranks completed", b->rank,
         rootStr, b->nranks);
    return res;
  }
  if (res != commSuccess) return res;
  if (rep.magic != BOOT_REPLY_MAGIC || rep.nranks < 0 || rep.nranks > (1 << 24)) {
    WARN("rank %d: invalid answer from the bootstrap root at %s", b->rank, rootStr);
    return commRemoteError;
  }
  if (rep.status == BOOT_REPLY_OK) extraBytes = sizeof(commSockAddr) * (size_t)rep.nranks;
  if (rep.status == BOOT_REPLY_TIMEOUT) extraBytes = (size_t)rep.nranks;
  /* The answer has begun: give its rest a second even if this rank's deadline is closer. */
  int64_t restNs = COMM_MAX(deadlineNs, commDeadlineNs(1000));
  if (extraBytes > 0) COMMCHECK(commCalloc(&extra, extraBytes, 1));
  res = commSocketRecvAll(c->fd, extra, extraBytes, restNs, b->abortFlag);
  if (res == commSuccess) res = commSocketRecvAll(c->fd, &mac, sizeof(mac), restNs, b->abortFlag);
  if (res != commSuccess) {
    WARN("rank %d: the answer of the bootstrap root at %s was cut short", b->rank, rootStr);
    goto out;
  }
  if (mac !=
      bootMacData(b->key, BOOT_LABEL_REPLY, c->chal.nonce, c->auth.nonce, &rep, sizeof(rep), extra, extraBytes)) {
    WARN("rank %d: the answer of the bootstrap root at %s fails authentication", b->rank, rootStr);
    res = commRemoteError;
    goto out;
  }
  rep.reason[sizeof(rep.reason) - 1] = '\0';
  if (rep.status == BOOT_REPLY_REJECTED) {
    WARN("rank %d: the bootstrap root at %s rejected this rank: %s", b->rank, rootStr, rep.reason);
    res = commInvalidUsage;
  } else if (rep.nranks != b->nranks) {
    WARN("rank %d: the bootstrap root at %s answered for %d ranks, this rank expects %d", b->rank, rootStr, rep.nranks,
         b->nranks);
    res = commRemoteError;
  } else if (rep.status == BOOT_REPLY_TIMEOUT) {
    char missing[256];
    bootFormatMissing(extra, b->nranks, missing, sizeof(missing));
    WARN("rank %d: root did not complete the rendezvous of %d ranks within %lld ms: %d arrived, missing ranks: %s",
         b->rank, b->nranks, (long long)b->timeoutMs, rep.arrived, missing);
    res = commTimeout;
  } else if (rep.status != BOOT_REPLY_OK) {
    WARN("rank %d: unknown answer %d from the bootstrap root at %s", b->rank, rep.status, rootStr);
    res = commRemoteError;
  } else {
    memcpy(b->peers, extra, extraBytes);
  }
out:
  free(extra);
  return res;
}

/* Talks to the root: the hello is the claim of the handshake; the table (or the reason there is none) back. */
static commResult_t rendezvous(commBootstrap* b, const commSockAddr* rootAddr, int64_t deadlineNs) {
  char rootStr[BOOT_ADDR_STR];
  commSocketAddrStr(rootAddr, rootStr, sizeof(rootStr));
  bootCliConn c;
  memset(&c, 0, sizeof(c));
  c.addr = *rootAddr;
  c.keepOpen = 1;
  c.auth.type = BOOT_TYPE_HELLO;
  c.auth.rank = b->rank;
  c.auth.nranks = b->nranks;
  c.auth.remainingMs = deadlineNs == COMM_NO_DEADLINE ? -1 : COMM_MAX((deadlineNs - commTimeNs()) / 1000000, 0);
  c.auth.addr = b->listenAddr;
  /* The root may start after this rank: a refused connection is retried until the deadline. */
  commResult_t res = bootCliRun(&c, 1, b->key, deadlineNs, b->abortFlag, NULL, 1);
  if (res == commInternalError && isAborted(b)) {
    WARN("rank %d: bootstrap rendezvous of %d ranks aborted", b->rank, b->nranks);
    return res;
  }
  if (res != commSuccess) return res;
  if (c.phase != BOOT_CLI_DONE) {
    switch (c.fail) {
      case BOOT_FAIL_TIMEOUT:
        WARN("rank %d: could not connect to the bootstrap root at %s within %lld ms", b->rank, rootStr,
             (long long)b->timeoutMs);
        return commTimeout;
      case BOOT_FAIL_KEY:
        WARN("rank %d: the bootstrap root at %s refused this rank's key: its unique id (or COMM_ROOT_SECRET) is not "
             "this job's",
             b->rank, rootStr);
        return commInvalidUsage;
      case BOOT_FAIL_FAKE:
        WARN("rank %d: the listener at %s is not this job's bootstrap root: it could not prove it holds the job's key",
             b->rank, rootStr);
        return commRemoteError;
      default: return cliFailure(b, &c, -1, "bootstrap rendezvous with the root");
    }
  }
  res = readReply(b, &c, rootStr, deadlineNs);
  if (res == commInternalError && isAborted(b)) {
    WARN("rank %d: bootstrap rendezvous of %d ranks aborted", b->rank, b->nranks);
  }
  close(c.fd);
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
  b->gonePeer = -1;
  b->wakeFd[0] = b->wakeFd[1] = -1;
  b->rank = rank;
  b->nranks = nranks;
  memcpy(b->key, bid.secret, sizeof(b->key));
  b->timeoutMs = timeoutMs;
  b->abortFlag = opts != NULL ? opts->abortFlag : NULL;
  b->onFailure = opts != NULL ? opts->onFailure : NULL;
  b->failureArg = opts != NULL ? opts->failureArg : NULL;
  b->progress = opts != NULL ? opts->progress : NULL;
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
  COMMCHECKGOTO(bootListenerStart(b), res, fail);
  COMMCHECKGOTO(rendezvous(b, &bid.root, deadlineNs), res, fail);
  {
    char lbuf[BOOT_ADDR_STR], rbuf[BOOT_ADDR_STR];
    INFO(COMM_BOOTSTRAP, "rank %d/%d: bootstrap on interface %s, listening at %s, root %s", rank, nranks, b->ifName,
         commSocketAddrStr(&b->listenAddr, lbuf, sizeof(lbuf)), commSocketAddrStr(&bid.root, rbuf, sizeof(rbuf)));
  }
  *out = b;
  return commSuccess;
fail:
  freeBootstrap(b);
  return res;
}

int bootstrapGonePeer(commBootstrap* b) { return b != NULL ? __atomic_load_n(&b->gonePeer, __ATOMIC_ACQUIRE) : -1; }

void bootstrapSetTimeout(commBootstrap* b, int64_t timeoutMs) {
  if (b != NULL) b->timeoutMs = timeoutMs;
}

commResult_t bootstrapClose(commBootstrap* b) {
  freeBootstrap(b);
  return commSuccess;
}

void bootTestSetPeerAddr(commBootstrap* b, int rank, const commSockAddr* addr) { b->peers[rank] = *addr; }
void bootTestListenAddr(const commBootstrap* b, commSockAddr* addr) { *addr = b->listenAddr; }

/* ---------------------------------------------------------------------------------------------------- */
/* Failure notices */

/* commRemoteError with a WARN when a failure notice ended this wait; commSuccess when there is none. */
static commResult_t checkFailed(commBootstrap* b, const char* what) {
  if (COMM_LOAD_ACQ(&b->failed) == 0) return commSuccess;
  pthread_mutex_lock(&b->mu);
  commBootstrapFailure f = b->failure;
  pthread_mutex_unlock(&b->mu);
  WARN("rank %d: %s ended: rank %d reported that rank %d failed: %s (error %d)", b->rank, what, f.reporter, f.culprit,
       f.reason, f.result);
  return commRemoteError;
}

void bootstrapClearFailure(commBootstrap* b) {
  if (b == NULL) return;
  pthread_mutex_lock(&b->mu);
  COMM_STORE_REL(&b->failed, 0);
  /* Notices still on their way (every survivor reports the same failure) are ignored too, not taken as a
   * first one: commShrink's survivors talk over this bootstrap from now on. */
  if (b->failureNotices == 0) b->failureNotices = 1;
  pthread_mutex_unlock(&b->mu);
}

commResult_t bootstrapReportFailure(commBootstrap* b, const commBootstrapFailure* failure) {
  if (b == NULL || failure == NULL) {
    WARN("bootstrapReportFailure: NULL argument");
    return commInvalidArgument;
  }
  commBootstrapFailure f = *failure;
  f.reporter = b->rank;
  f.reason[sizeof(f.reason) - 1] = '\0';
  bootCliConn* cs = NULL;
  int* peerOf = NULL;
  int n = 0;
  commResult_t res = commSuccess;
  COMMCHECKGOTO(commCalloc(&cs, (size_t)b->nranks, sizeof(bootCliConn)), res, out);
  COMMCHECKGOTO(commCalloc(&peerOf, (size_t)b->nranks, sizeof(int)), res, out);
  for (int r = 0; r < b->nranks; r++) {
    if (r == b->rank) continue; /* the culprit too: it may be alive (mismatched calls, a skipped call) */
    bootCliConn* c = &cs[n];
    cliConnTo(b, r, BOOT_TYPE_FAILURE, c);
    c->auth.size = sizeof(f);
    c->payload = &f;
    peerOf[n++] = r;
  }
  int64_t limitMs = b->timeoutMs >= 0 ? COMM_MIN(b->timeoutMs, BOOT_REPORT_TIMEOUT_MS) : BOOT_REPORT_TIMEOUT_MS;
  res = bootCliRun(cs, n, b->key, commDeadlineNs(limitMs), b->abortFlag, NULL, 0);
  if (res == commInternalError && isAborted(b)) WARN("rank %d: bootstrap failure notice aborted", b->rank);
  if (res != commSuccess) goto out;
  {
    int told = 0;
    char missed[256] = "";
    size_t o = 0;
    for (int i = 0; i < n; i++) {
      if (cs[i].phase == BOOT_CLI_DONE) {
        told++;
      } else if (o < sizeof(missed)) {
        o += (size_t)snprintf(missed + o, sizeof(missed) - o, "%s%d (%s)", o ? ", " : "", peerOf[i],
                              cs[i].fail == BOOT_FAIL_REFUSED   ? "gone"
                              : cs[i].fail == BOOT_FAIL_TIMEOUT ? "no answer"
                                                                : "failed");
      }
    }
    INFO(COMM_BOOTSTRAP, "rank %d: told %d of %d ranks that rank %d failed (%s)%s%s", b->rank, told, n, f.culprit,
         f.reason, told < n ? "; not told: " : "", missed);
  }
out:
  free(cs);
  free(peerOf);
  return res;
}

commResult_t bootstrapProbe(commBootstrap* b, int rank, int64_t timeoutMs, uint32_t* progress) {
  if (b == NULL || rank < 0 || rank >= b->nranks) {
    WARN("bootstrapProbe: invalid rank %d (or NULL bootstrap)", rank);
    return commInvalidArgument;
  }
  bootCliConn c;
  cliConnTo(b, rank, BOOT_TYPE_PING, &c);
  commResult_t res = bootCliRun(&c, 1, b->key, commDeadlineNs(timeoutMs), b->abortFlag, NULL, 0);
  if (res == commInternalError && isAborted(b)) WARN("rank %d: bootstrap probe of rank %d aborted", b->rank, rank);
  if (res != commSuccess) return res;
  if (c.phase == BOOT_CLI_DONE) {
    if (progress) *progress = c.proof.progress;
    return commSuccess;
  }
  if (c.fail == BOOT_FAIL_TIMEOUT) {
    char a[BOOT_ADDR_STR];
    WARN("rank %d: rank %d (%s) did not answer a probe within %lld ms (stopped or hung?)", b->rank, rank,
         commSocketAddrStr(&c.addr, a, sizeof(a)), (long long)timeoutMs);
    return commRemoteError;
  }
  res = cliFailure(b, &c, rank, "bootstrap probe");
  return res == commSystemError ? res : commRemoteError;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Messages */

/* failFlag: end at once when a failure notice arrives (collectives), NULL: plain sends go on. */
static commResult_t sendMsg(commBootstrap* b, int peer, int tag, const void* data, size_t size, int64_t deadlineNs,
                            const int* failFlag) {
  bootCliConn c;
  cliConnTo(b, peer, BOOT_TYPE_MSG, &c);
  c.auth.tag = tag;
  c.auth.size = size;
  c.auth.seq = b->sendSeq[peer];
  c.payload = data;
  commResult_t res = bootCliRun(&c, 1, b->key, deadlineNs, b->abortFlag, failFlag, 0);
  char what[64];
  snprintf(what, sizeof(what), "bootstrap send of %zu bytes tag %d", size, tag);
  if (res == commInternalError && isAborted(b)) {
    WARN("rank %d: bootstrap send to rank %d tag %d aborted", b->rank, peer, tag);
    return res;
  }
  if (res == commRemoteError) return checkFailed(b, what);
  if (res != commSuccess) return res;
  if (c.phase != BOOT_CLI_DONE) return cliFailure(b, &c, peer, what);
  b->sendSeq[peer]++;
  return commSuccess;
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

static void waitSlice(commBootstrap* b, int64_t deadlineNs) {
  int64_t ns = BOOT_WAIT_SLICE_MS * 1000000LL;
  if (deadlineNs != COMM_NO_DEADLINE) ns = COMM_MAX(COMM_MIN(ns, deadlineNs - commTimeNs()), 0);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += (time_t)(ns / 1000000000LL);
  ts.tv_nsec += (long)(ns % 1000000000LL);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(&b->cv, &b->mu, &ts);
}

/* Is peer's process gone? Only a refused connection says so for sure (a slow or stopped one may still come). */
static int peerRefuses(commBootstrap* b, int peer) {
  bootCliConn c;
  cliConnTo(b, peer, BOOT_TYPE_PING, &c);
  if (bootCliRun(&c, 1, b->key, commDeadlineNs(BOOT_LIVENESS_PROBE_MS), b->abortFlag, NULL, 0) != commSuccess) return 0;
  return c.phase != BOOT_CLI_DONE && c.fail == BOOT_FAIL_REFUSED;
}

static commResult_t recvMsg(commBootstrap* b, int peer, int tag, void* data, size_t size, int64_t deadlineNs) {
  char what[64];
  int64_t nextLivenessNs = commTimeNs() + BOOT_LIVENESS_MS * 1000000LL;
  pthread_mutex_lock(&b->mu);
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
      pthread_mutex_unlock(&b->mu);
      commResult_t res = commSuccess;
      if (m->size != size) {
        WARN("rank %d: bootstrap recv from rank %d tag %d: expected %zu bytes, the message has %zu", b->rank, peer, tag,
             size, m->size);
        res = commInternalError;
      } else if (size > 0) {
        memcpy(data, m->data, size);
      }
      free(m->data);
      free(m);
      return res;
    }
    if (b->failed) {
      pthread_mutex_unlock(&b->mu);
      snprintf(what, sizeof(what), "bootstrap recv from rank %d tag %d", peer, tag);
      return checkFailed(b, what);
    }
    if (isAborted(b)) {
      pthread_mutex_unlock(&b->mu);
      WARN("rank %d: bootstrap recv from rank %d tag %d aborted", b->rank, peer, tag);
      return commInternalError;
    }
    if (deadlineNs != COMM_NO_DEADLINE && commTimeNs() >= deadlineNs) {
      pthread_mutex_unlock(&b->mu);
      WARN("rank %d: bootstrap recv from rank %d tag %d timed out after %lld ms", b->rank, peer, tag,
           (long long)b->timeoutMs);
      return commTimeout;
    }
    if (peer != b->rank && commTimeNs() >= nextLivenessNs) {
      /* Waiting long for a peer: is its process still there? (A dead rank's message never comes.) */
      pthread_mutex_unlock(&b->mu);
      if (peerRefuses(b, peer)) {
        int none = -1;
        __atomic_compare_exchange_n(&b->gonePeer, &none, peer, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
        char a[BOOT_ADDR_STR];
        WARN("rank %d: bootstrap recv from rank %d tag %d: rank %d (%s) is gone: connection refused", b->rank, peer,
             tag, peer, commSocketAddrStr(&b->peers[peer], a, sizeof(a)));
        return commRemoteError;
      }
      nextLivenessNs = commTimeNs() + BOOT_LIVENESS_MS * 1000000LL;
      pthread_mutex_lock(&b->mu);
      continue; /* the message may have come meanwhile */
    }
    waitSlice(b, deadlineNs);
  }
}

static commResult_t checkPeer(commBootstrap* b, int peer, int tag, const void* data, size_t size, const char* what) {
  if (b == NULL) {
    WARN("%s: bootstrap is NULL", what);
    return commInvalidArgument;
  }
  if (peer < 0 || peer >= b->nranks) {
    WARN("%s: rank %d: invalid peer %d of %d ranks", what, b->rank, peer, b->nranks);
    return commInvalidArgument;
  }
  if (tag < 0) {
    WARN("%s: rank %d: tag %d is negative (negative tags are reserved for the bootstrap's collectives)", what, b->rank,
         tag);
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
  return sendMsg(b, peer, tag, data, size, commDeadlineNs(b->timeoutMs), NULL);
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
  COMMCHECK(checkFailed(b, "bootstrap allgather"));
  /* Every rank's listener thread takes what arrives, so every rank sends before it receives. */
  char* p = (char*)data;
  for (int step = 0; step < n - 1; step++) {
    int sendSlot = (rank - step + n) % n;
    int recvSlot = (rank - step - 1 + n) % n;
    COMMCHECK(sendMsg(b, next, tag, p + (size_t)sendSlot * bytes, bytes, deadlineNs, &b->failed));
    COMMCHECK(recvMsg(b, prev, tag, p + (size_t)recvSlot * bytes, bytes, deadlineNs));
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
  COMMCHECK(checkFailed(b, "bootstrap barrier"));
  for (int k = 1; k < n; k <<= 1) {
    int tag = nextCollTag(b);
    COMMCHECK(sendMsg(b, (rank + k) % n, tag, NULL, 0, deadlineNs, &b->failed));
    COMMCHECK(recvMsg(b, (rank - k % n + n) % n, tag, NULL, 0, deadlineNs));
  }
  return commSuccess;
}
