/* Out-of-band bootstrap, the ranks' side: the rendezvous with the root, and tagged send/recv, allgather and
 * barrier between ranks over TCP. The root itself (and the unique ids that start it) is in root.c.
 *
 * Rendezvous: every rank listens on its own socket, connects to the root and sends a hello {magic, secret,
 * rank, nranks, time left, listen address}; the root answers with the table of listen addresses, or with
 * the list of ranks that did not arrive in time.
 *
 * Messages: one TCP connection per message to the peer's listener, carrying {magic, secret, src, tag, size,
 * seq} and the payload. The receiver queues what it did not ask for. `seq` counts messages per (src, dst)
 * so that messages with one tag are delivered in the order they were sent even if connections are
 * accepted out of order. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bootstrap_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "socket.h"
#include "utils.h"

static_assert(sizeof(commBootstrapId) <= COMM_UNIQUE_ID_BYTES, "commBootstrapId must fit in commUniqueId");

#define BOOT_MSG_MAGIC 0x636f6d6d6d736731ull /* "commmsg1" */
/* The bootstrap carries metadata, not bulk data. */
#define BOOT_MAX_MSG_BYTES (1ull << 30)
/* Up to this size a send completes into the kernel's socket buffers, whoever receives. */
#define BOOT_EAGER_BYTES 16384

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

static int deadlinePassed(int64_t deadlineNs) { return deadlineNs != COMM_NO_DEADLINE && commTimeNs() >= deadlineNs; }

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
    WARN("rank %d: the bootstrap root at %s closed the connection before the rendezvous of %d ranks completed", b->rank,
         rootStr, b->nranks);
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
    WARN("rank %d: the bootstrap root at %s answered for %d ranks, this rank expects %d", b->rank, rootStr, rep.nranks,
         b->nranks);
    res = commRemoteError;
    goto fail;
  }
  if (rep.status == BOOT_REPLY_TIMEOUT) {
    char missing[256] = "unknown";
    COMMCHECKGOTO(commCalloc(&flags, (size_t)b->nranks, 1), res, fail);
    if (commSocketRecvAll(fd, flags, (size_t)b->nranks, commDeadlineNs(1000), b->abortFlag) == commSuccess) {
      bootFormatMissing(flags, b->nranks, missing, sizeof(missing));
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
    WARN("rank %d: root did not complete the rendezvous of %d ranks within %lld ms (the table was cut short)", b->rank,
         b->nranks, (long long)b->timeoutMs);
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
    INFO(COMM_BOOTSTRAP, "rank %d/%d: bootstrap on interface %s, listening at %s, root %s", rank, nranks, b->ifName,
         commSocketAddrStr(&b->listenAddr, lbuf, sizeof(lbuf)), commSocketAddrStr(&bid.root, rbuf, sizeof(rbuf)));
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

static commResult_t sendMsg(commBootstrap* b, int peer, int tag, const void* data, size_t size, int64_t deadlineNs) {
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
    WARN("rank %d: bootstrap send of %zu bytes to rank %d tag %d did not complete within %lld ms", b->rank, size, peer,
         tag, (long long)b->timeoutMs);
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
  bootFdPeerStr(fd, from, sizeof(from));
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
    WARN("rank %d: dropped bootstrap connection from %s: it closed or failed before sending a header", b->rank, from);
    return commSuccess;
  }
  if (hdr.magic != BOOT_MSG_MAGIC) {
    WARN("rank %d: dropped bootstrap connection from %s: bad magic (not a libcomm bootstrap message)", b->rank, from);
    return commSuccess;
  }
  if (hdr.secret != b->secret) {
    WARN("rank %d: dropped bootstrap connection from %s: wrong secret (a different unique id?)", b->rank, from);
    return commSuccess;
  }
  if (hdr.src < 0 || hdr.src >= b->nranks || hdr.size > BOOT_MAX_MSG_BYTES) {
    WARN("rank %d: dropped bootstrap connection from %s: invalid header (source rank %d of %d, %llu bytes)", b->rank,
         from, hdr.src, b->nranks, (unsigned long long)hdr.size);
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
