/* A communicator's errors: what commGetLastError and commGetAsyncError report, and failures that travel.
 *
 * Last error: the root cause, once. A call's first WARN is its cause (the ones after it wrap it: "init
 * failed", "operation failed"), so the record keeps the first WARN of the call that failed, and a call
 * refused because of an earlier error does not replace it.
 *
 * Failures travel: when an operation fails on this rank (a peer died, a timeout, mismatched calls), the rank
 * tells every other rank through the bootstrap (bootstrapReportFailure), naming the rank that failed: the
 * peer a layer found dead (comm->failedPeer), or, after a timeout, the rank that no longer answers a probe.
 * A rank told so (onPeerFailure, on the bootstrap's thread) records it, sets the abort flag to
 * COMM_ABORT_PEER_FAILED so that every wait of every layer ends, and every later error message of the
 * communicator names that rank. A failure a rank was told of is not reported again.
 *
 * Revoke (commRevoke, NCCL's ncclCommRevoke): this rank stops the communicator's work itself. The abort flag
 * ends its operations in progress (they fail; their errors are not recorded), the other ranks get a notice
 * naming this rank (their operations end with commRemoteError), and once every call inside the communicator
 * has left, the error word is commSuccess again and the bootstrap takes no more notices: the communicator is
 * quiescent, refuses operations (commApiEnter), and serves commShrink and commSplit over its bootstrap. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "bootstrap.h"
#include "core.h"
#include "debug.h"
#include "enqueue.h"
#include "exec_dev.h"
#include "utils.h"

/* How long a probe waits for a rank's bootstrap to answer (a timeout's culprit search). */
#define COMM_PROBE_TIMEOUT_MS 300
/* How long a rank that found a failure waits for another rank's notice of it before it reports its own (the
 * fault campaign: 100 ms missed notices that a loaded 2-core machine delivered later; 500 ms fewer). */
#define COMM_NOTICE_GRACE_MS 500

/* text into dst[n], cut short if it must be. */
static void copyText(char* dst, size_t n, const char* text) {
  size_t len = 0;
  while (len + 1 < n && text[len] != '\0') len++;
  memcpy(dst, text, len);
  dst[len] = '\0';
}

/* The record commGetLastError returns; caller holds errorLock. */
static void recordLocked(struct commComm* comm, const char* text) {
  if (comm->peerFailureKnown) return; /* a peer's failure is the cause of everything after it */
  copyText(comm->lastError, sizeof(comm->lastError), text);
}

void commRecordError(comm_t comm, const char* text) {
  if (text == NULL || text[0] == '\0') return;
  pthread_mutex_lock(&comm->errorLock);
  recordLocked(comm, text);
  pthread_mutex_unlock(&comm->errorLock);
}

/* Record a failure of rank `culprit` found by `reporter`; 1 if it is the first this communicator knows of. */
static int notePeerFailure(struct commComm* comm, int culprit, int reporter, int result, uint64_t seq,
                           const char* reason) {
  pthread_mutex_lock(&comm->errorLock);
  int first = !comm->peerFailureKnown;
  if (first) {
    comm->peerFailureRank = culprit;
    comm->peerFailureReporter = reporter;
    comm->peerFailureResult = result;
    comm->peerFailureSeq = seq;
    copyText(comm->peerFailureReason, sizeof(comm->peerFailureReason), reason);
    if (reporter == comm->rank && culprit >= 0 && culprit != comm->rank) {
      snprintf(comm->lastError, sizeof(comm->lastError), "rank %d failed (found by this rank): %.200s", culprit,
               reason);
    } else if (reporter == comm->rank) {
      copyText(comm->lastError, sizeof(comm->lastError), reason);
    } else if (culprit >= 0) {
      snprintf(comm->lastError, sizeof(comm->lastError), "rank %d failed (reported by rank %d): %.200s", culprit,
               reporter, reason);
    } else {
      snprintf(comm->lastError, sizeof(comm->lastError), "rank %d reported a failure: %.200s", reporter, reason);
    }
    comm->peerFailureKnown = 1;
  }
  pthread_mutex_unlock(&comm->errorLock);
  return first;
}

/* The bootstrap's thread: another rank reports a failure. */
static void onPeerFailure(void* arg, const commBootstrapFailure* f) {
  struct commComm* comm = (struct commComm*)arg;
  char reason[sizeof(f->reason) + 1];
  snprintf(reason, sizeof(reason), "%.*s", (int)sizeof(f->reason), f->reason);
  if (!notePeerFailure(comm, f->culprit, f->reporter, f->result, f->opSeq, reason)) return;
  int expected = commSuccess;
  __atomic_compare_exchange_n(&comm->asyncError, &expected, (int)commRemoteError, 0, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
  expected = COMM_ABORT_NONE;
  __atomic_compare_exchange_n(&comm->abortFlag, &expected, COMM_ABORT_PEER_FAILED, 0, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
  pthread_mutex_lock(&comm->errorLock);
  if (!comm->closing) commDevAbort(comm); /* kernels waiting on the failed rank end too */
  pthread_mutex_unlock(&comm->errorLock);
  commLogSetRank(comm->rank);
  if (f->culprit >= 0) {
    WARN("rank %d: rank %d failed (reported by rank %d): %s; this communicator's operations end with "
         "commRemoteError",
         comm->rank, f->culprit, f->reporter, reason);
  } else {
    WARN("rank %d: rank %d reported a failure: %s; this communicator's operations end with commRemoteError", comm->rank,
         f->reporter, reason);
  }
}

void commErrorBootstrapOpts(struct commComm* comm, commBootstrapOpts* opts) {
  opts->onFailure = onPeerFailure;
  opts->failureArg = comm;
  opts->progress = &comm->collCount;
}

void commErrorForward(struct commComm* comm) {
  if (comm->bootstrap == NULL || comm->nRanks < 2 || commAborted(comm) == COMM_ABORT_USER) return;
  commBootstrapFailure f;
  memset(&f, 0, sizeof(f));
  pthread_mutex_lock(&comm->errorLock);
  /* Not when this rank reported it (everyone was told) or is the culprit. */
  int forward = comm->peerFailureKnown && !comm->peerFailureForwarded && comm->peerFailureRank != comm->rank &&
                comm->peerFailureReporter != comm->rank;
  if (forward) {
    comm->peerFailureForwarded = 1;
    f.culprit = comm->peerFailureRank;
    f.reporter = comm->rank;
    f.result = comm->peerFailureResult;
    f.opSeq = comm->peerFailureSeq;
    copyText(f.reason, sizeof(f.reason), comm->peerFailureReason);
  }
  pthread_mutex_unlock(&comm->errorLock);
  /* Before this rank's connections close: a peer that sees them close has heard who failed first. */
  if (forward && bootstrapReportFailure(comm->bootstrap, &f) != commSuccess)
    WARN_NOTICE("rank %d: could not pass the failure of rank %d on to every rank", comm->rank, f.culprit);
}

void commErrorClosing(struct commComm* comm) {
  pthread_mutex_lock(&comm->errorLock);
  comm->closing = 1;
  pthread_mutex_unlock(&comm->errorLock);
}

/* After a timeout: the first rank whose bootstrap no longer answers (stopped, hung, gone), -1 if all do.
 * coll (1 + the sequence number of the collective this rank timed out in; 0: none) also asks each rank that
 * answers how many collectives it has called: *skipper is the one furthest behind among those that have not
 * called that one (-1: none), *skipperCalls its count (the low 32 bits, as the probe carries them). Furthest
 * behind: a rank stuck in an earlier collective because of the skipper has called that one, the skipper
 * has not. */
static int findUnresponsive(struct commComm* comm, uint64_t coll, int* skipper, uint32_t* skipperCalls) {
  *skipper = -1;
  int32_t mostBehind = -1;
  for (int i = 1; i < comm->nRanks; i++) {
    int r = (comm->rank + i) % comm->nRanks;
    uint32_t calls = 0;
    if (bootstrapProbe(comm->bootstrap, r, COMM_PROBE_TIMEOUT_MS, &calls) != commSuccess) return r;
    /* It made calls #0 .. #calls-1: not #(coll-1) when calls <= coll-1 (modulo 2^32). */
    int32_t behind = (int32_t)((uint32_t)(coll - 1) - calls);
    if (coll && behind > mostBehind) {
      mostBehind = behind;
      *skipper = r;
      *skipperCalls = calls;
    }
  }
  return -1;
}

/* An operation (or init after the rendezvous, or finalize) failed on this rank: tell every other rank, once,
 * unless the failure came from one of them. */
static void reportFailure(struct commComm* comm, commResult_t res, const char* cause) {
  int abortState = commAborted(comm);
  /* No bootstrap yet (the rendezvous failed): the root told every rank already. */
  if (abortState == COMM_ABORT_PEER_FAILED || comm->bootstrap == NULL || comm->nRanks < 2) return;
  /* A rank that found a failure reports it before it leaves, so this rank may have seen it leave (a closed
   * connection, a FIFO gone: what a transport notes as failedPeer) a moment before its notice is taken: give
   * the notice that moment, so that every rank names the rank that failed first, not the neighbour that left
   * after it. What the bootstrap found (a refused listener, a probe) is reported at once. */
  if (abortState != COMM_ABORT_USER && __atomic_load_n(&comm->failedPeer, __ATOMIC_ACQUIRE) >= 0) {
    int64_t until = commTimeNs() + COMM_NOTICE_GRACE_MS * 1000000LL;
    while (commTimeNs() < until && commAborted(comm) != COMM_ABORT_PEER_FAILED) sched_yield();
    if (commAborted(comm) == COMM_ABORT_PEER_FAILED) return;
  }
  int culprit = __atomic_load_n(&comm->failedPeer, __ATOMIC_ACQUIRE);
  if (culprit < 0) culprit = bootstrapGonePeer(comm->bootstrap); /* init or finalize: a rank that is gone */
  char reason[192];
  if (abortState == COMM_ABORT_USER) {
    culprit = comm->rank;
    snprintf(reason, sizeof(reason), "rank %d aborted its communicator during an operation", comm->rank);
  } else {
    int skipper = -1;
    uint32_t skipperCalls = 0;
    uint64_t coll = __atomic_load_n(&comm->failingColl, __ATOMIC_ACQUIRE);
    /* Not in a collective (finalize's barrier, a connection exchange): a rank behind this one's calls is the
     * one to name, if any. */
    const int inColl = coll != 0;
    if (!inColl) coll = __atomic_load_n(&comm->collCount, __ATOMIC_RELAXED);
    if (culprit < 0 && res == commTimeout) {
      culprit = findUnresponsive(comm, coll, &skipper, &skipperCalls);
      if (culprit >= 0) skipper = -1; /* a rank that does not answer comes first */
    }
    if (skipper >= 0) {
      culprit = skipper;
      char text[320]; /* then cut to the notice's size */
      snprintf(text, sizeof(text),
               "rank %d did not make the call: it answers, but has called %u collectives, not #%u (this rank %s "
               "#%llu): %.80s",
               skipper, skipperCalls, skipperCalls, inColl ? "waits in" : "has called up to",
               (unsigned long long)(coll - 1), cause);
      copyText(reason, sizeof(reason), text);
    } else if (res == commTimeout && culprit >= 0) {
      snprintf(reason, sizeof(reason), "rank %d does not answer (stopped or hung): %.130s", culprit, cause);
    } else if (res == commTimeout) {
      snprintf(reason, sizeof(reason), "every rank still answers, so a rank did not make the call: %.120s", cause);
    } else {
      copyText(reason, sizeof(reason), cause);
    }
  }
  uint64_t seq = __atomic_load_n(&comm->failingSeq, __ATOMIC_ACQUIRE);
  if (!notePeerFailure(comm, culprit, comm->rank, res, seq, reason)) return;
  commBootstrapFailure f;
  memset(&f, 0, sizeof(f));
  f.culprit = culprit;
  f.reporter = comm->rank;
  f.result = res;
  f.opSeq = seq;
  copyText(f.reason, sizeof(f.reason), reason);
  if (bootstrapReportFailure(comm->bootstrap, &f) != commSuccess) {
    WARN_NOTICE("rank %d: could not tell every rank of the failure (see above)", comm->rank);
  }
}

void commSetAsyncError(comm_t comm, commResult_t res) {
  /* Operations a revoke ended fail as it meant them to: its notice went out, and the state stays quiesced. */
  if (__atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE)) return;
  int expected = commSuccess;
  if (!__atomic_compare_exchange_n(&comm->asyncError, &expected, (int)res, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return; /* the first error is the cause */
  char cause[512];
  copyText(cause, sizeof(cause), commLogFirstWarn());
  commRecordError(comm, cause);
  if (res != commSuccess && res != commInProgress) reportFailure(comm, res, cause);
}

/* For calls that do not go through commApiEnter: keep the WARN just issued for commGetLastError(comm). */
commResult_t commNoteCallError(comm_t comm, commResult_t res) {
  if (res != commSuccess) commRecordError(comm, commLogFirstWarn());
  return res;
}

COMM_API const char* commGetLastError(comm_t comm) {
  /* A copy per thread: the record may change (another thread's failure) while the caller reads it. */
  static __thread char copy[sizeof(((struct commComm*)0)->lastError)];
  /* No communicator (a failed init): this thread's cause, the first WARN of its last call. */
  if (comm == NULL) return commLogFirstWarn()[0] != '\0' ? commLogFirstWarn() : commLogLastWarn();
  if (commRetain(comm, "commGetLastError") != commSuccess) return commLogLastWarn();
  pthread_mutex_lock(&comm->errorLock);
  copyText(copy, sizeof(copy), comm->lastError);
  pthread_mutex_unlock(&comm->errorLock);
  commRelease(comm);
  return copy[0] != '\0' ? copy : commLogLastWarn();
}

COMM_API commResult_t commGetAsyncError(comm_t comm, commResult_t* asyncError) {
  commLogClearLastWarn();
  COMMCHECK(commRetain(comm, "commGetAsyncError"));
  commResult_t res = commSuccess;
  if (asyncError == NULL) {
    WARN("commGetAsyncError: asyncError is NULL");
    res = commNoteCallError(comm, commInvalidArgument);
  } else {
    int state = __atomic_load_n(&comm->initState, __ATOMIC_ACQUIRE);
    if (state == COMM_INIT_DONE) { /* failures kernels reported */
      commResult_t devError = commDevPollError(comm);
      if (devError != commSuccess) commSetAsyncError(comm, devError);
    }
    if (state == COMM_INIT_RUNNING) *asyncError = commInProgress;
    else *asyncError = (commResult_t)__atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE);
  }
  commRelease(comm);
  return res;
}

/* The notice of this rank's revoke, unless the others know of a failure already (they stop as it is). */
static void revokeNotice(struct commComm* comm) {
  char reason[96];
  snprintf(reason, sizeof(reason), "rank %d revoked the communicator (commRevoke)", comm->rank);
  if (!notePeerFailure(comm, comm->rank, comm->rank, commInvalidUsage, 0, reason)) return;
  if (comm->bootstrap == NULL || comm->nRanks < 2) return;
  commBootstrapFailure f;
  memset(&f, 0, sizeof(f));
  f.culprit = comm->rank;
  f.reporter = comm->rank;
  f.result = commInvalidUsage;
  f.opSeq = 0; /* every operation stops */
  copyText(f.reason, sizeof(f.reason), reason);
  if (bootstrapReportFailure(comm->bootstrap, &f) != commSuccess)
    WARN_NOTICE("rank %d: could not tell every rank of the revoke (see above); they stop at their timeout", comm->rank);
}

COMM_API commResult_t commRevoke(comm_t comm, int flags) {
  commLogClearLastWarn();
  if (comm == NULL) return commSuccess; /* as ncclCommRevoke */
  COMMCHECK(commRetain(comm, "commRevoke"));
  commLogSetRank(comm->rank);
  commResult_t res = commSuccess;
  int state = __atomic_load_n(&comm->initState, __ATOMIC_ACQUIRE);
  if (flags != COMM_REVOKE_DEFAULT) {
    WARN("commRevoke: flags 0x%x: only COMM_REVOKE_DEFAULT (0) is defined", (unsigned)flags);
    res = commInvalidArgument;
  } else if (state != COMM_INIT_DONE) {
    WARN("commRevoke: communicator initialisation %s", state == COMM_INIT_RUNNING ? "is still in progress" : "failed");
    res = commInvalidUsage;
  } else if (comm->finalized) {
    WARN("commRevoke: communicator was finalized");
    res = commInvalidArgument;
  } else if (__atomic_exchange_n(&comm->revoked, 1, __ATOMIC_ACQ_REL)) {
    WARN("commRevoke: communicator was revoked already");
    res = commInvalidArgument;
  }
  if (res != commSuccess) {
    commNoteCallError(comm, res);
    commRelease(comm);
    commLogSetRank(-1);
    return res;
  }
  INFO(COMM_INIT, "comm %p rank %d nRanks %d - Revoke START", (void*)comm, comm->rank, comm->nRanks);
  /* Every wait of every layer ends (the bootstrap's do not: shrink and split use it). */
  __atomic_store_n(&comm->abortFlag, COMM_ABORT_USER, __ATOMIC_RELEASE);
  commDevAbort(comm);
  revokeNotice(comm);
  /* Quiescent: the calls inside the communicator (other threads' operations) have left, kernels have ended.
   * Meanwhile the bootstrap's waits end too (an operation's connection setup exchanges over it); it serves
   * again after (each of its messages is a connection of its own: an ended wait leaves nothing half done). */
  __atomic_store_n(&comm->bootstrapAbort, 1, __ATOMIC_RELEASE);
  int64_t deadline = commDeadlineNs(comm->timeoutMs);
  commBackoff b = {0};
  while (__atomic_load_n(&comm->inFlight, __ATOMIC_ACQUIRE) > 1 && commTimeNs() < deadline) commBackoffWait(&b);
  if (__atomic_load_n(&comm->inFlight, __ATOMIC_ACQUIRE) > 1)
    WARN_NOTICE("commRevoke: rank %d: calls still inside the communicator after %lld ms; going on", comm->rank,
                (long long)comm->timeoutMs);
  __atomic_store_n(&comm->bootstrapAbort, 0, __ATOMIC_RELEASE);
  (void)commDevSync(comm); /* the aborted kernels' error is the revoke's */
  if (comm->bootstrap != NULL) bootstrapClearFailure(comm->bootstrap);
  __atomic_store_n(&comm->asyncError, commSuccess, __ATOMIC_RELEASE);
  INFO(COMM_INIT, "comm %p rank %d nRanks %d - Revoke COMPLETE", (void*)comm, comm->rank, comm->nRanks);
  commRelease(comm);
  commLogSetRank(-1);
  return commSuccess;
}
