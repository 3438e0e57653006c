/* What the files of src/bootstrap/ share: the bootstrap record, the root's answer on the wire, the listener
 * thread's entry points, and a few helpers. Not part of the bootstrap's interface (see bootstrap.h); tests
 * include it for the hooks at the end. */
#ifndef COMM_BOOTSTRAP_INTERNAL_H_
#define COMM_BOOTSTRAP_INTERNAL_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "bootstrap.h"
#include "bootstrap_auth.h"
#include "socket.h"

#define BOOT_REPLY_MAGIC 0x636f6d6d72706c32ull /* "commrpl2" */
/* The bootstrap carries metadata, not bulk data. */
#define BOOT_MAX_MSG_BYTES (1ull << 30)
/* An authenticated connection that moves no byte for this long is given up. */
#define BOOT_IDLE_TIMEOUT_MS 10000

enum { BOOT_REPLY_OK = 0, BOOT_REPLY_TIMEOUT = 1, BOOT_REPLY_REJECTED = 2 };

/* The root's answer to a hello, after the handshake. Then: OK: nranks x commSockAddr; TIMEOUT: nranks bytes, 1
 * for each rank that arrived; REJECTED: nothing. Then a MAC (BOOT_LABEL_REPLY) of the answer and what follows. */
typedef struct {
  uint64_t magic;
  int32_t status;
  int32_t nranks;
  int32_t arrived;
  int32_t pad;
  char reason[128];
} bootReply;

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
  uint64_t key[2];
  int64_t timeoutMs;
  const int* abortFlag;
  const uint64_t* progress; /* the owner's collective calls so far, for probes' answers (NULL: none) */
  void (*onFailure)(void* arg, const commBootstrapFailure* failure);
  void* failureArg;
  int listenFd;
  commSockAddr listenAddr;
  char ifName[COMM_IFNAME_MAX];
  commSockAddr* peers; /* listen address of every rank */
  uint64_t* sendSeq;   /* messages sent to each peer */
  uint32_t collSeq;    /* collectives (allgather/barrier rounds) so far; the same on every rank */
  int gonePeer;        /* the first peer a connection found gone or silent; -1 none (atomic) */

  /* The listener thread (listener.c) and what it shares with the callers, under mu. */
  pthread_t thread;
  int threadStarted;
  int wakeFd[2]; /* a byte in wakeFd[1] tells the thread to end */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a message or a failure notice arrived */
  int syncInit;
  uint64_t* recvContig; /* from each peer, every message with seq < recvContig has arrived */
  bootMsg* queueHead;   /* arrived, not yet received, in arrival order */
  bootMsg* queueTail;
  int failed;         /* a failure notice arrived and was not cleared */
  int failureNotices; /* notices taken (only the first counts) */
  commBootstrapFailure failure;
};

/* A recv that waits this long for a peer checks that the peer's process is still there (a refused connection:
 * gone), giving up on that check after BOOT_LIVENESS_PROBE_MS. */
#define BOOT_LIVENESS_MS 300
#define BOOT_LIVENESS_PROBE_MS 200

static inline int64_t minDeadline(int64_t a, int64_t b) { return a < b ? a : b; }

/* The address of the peer of a connected socket, "<unknown>" if there is none. */
const char* bootFdPeerStr(int fd, char* buf, size_t n);
/* "3, 5, 9" for the ranks whose flag is 0; at most 16 listed. */
void bootFormatMissing(const unsigned char* arrived, int nranks, char* buf, size_t n);

/* The listener thread: accepts and authenticates connections, queues messages, takes failure notices. */
commResult_t bootListenerStart(commBootstrap* b);
void bootListenerStop(commBootstrap* b);

/* Test hooks: a peer's listen address (read, or replaced, e.g. by a fake listener); this rank's listener. */
void bootTestSetPeerAddr(commBootstrap* b, int rank, const commSockAddr* addr);
void bootTestListenAddr(const commBootstrap* b, commSockAddr* addr);

#endif
