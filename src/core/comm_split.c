/* Communicators made from a communicator: commSplit (every rank takes part: (color, key) allgathered over
 * the parent's bootstrap) and commShrink (only the survivors of a failure take part). Both take a revoked
 * parent (commRevoke, comm_error.c): its bootstrap still serves, and its connections are not shared. */
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "core.h"
#include "enqueue.h"
#include "exec_dev.h"
#include "utils.h"

#define COMM_TAG_SPLIT 0x20000000         /* transports use 0x40000000 and up */
#define COMM_TAG_SHRINK 0x30000000        /* one tag: survivors' op counters may differ after a failure */
#define COMM_TAG_SPLIT_REVOKED 0x30000001 /* split of a revoked parent: its ranks' op counters may differ too */

/* ---- Split ---- */
typedef struct {
  int color, key, rank;
} splitInfo;

static int splitCompare(const void* a, const void* b) {
  const splitInfo* x = (const splitInfo*)a;
  const splitInfo* y = (const splitInfo*)b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* The child communicator of ranks[0..n) of comm (parent ranks, in the child's order; this rank is
 * ranks[newRank]): ranks[0] makes the id and sends it to the others over the parent's bootstrap with tag,
 * point to point, so ranks outside take no part. Without a config the child keeps the parent's blocking
 * mode and timeout. */
static commResult_t childInit(comm_t comm, const int* ranks, int n, int newRank, int tag, commConfig_t* config,
                              comm_t* newcomm) {
  commUniqueId id;
  if (newRank == 0) {
    COMMCHECK(bootstrapGetUniqueId(&id));
    for (int i = 1; i < n; i++) COMMCHECK(bootstrapSend(comm->bootstrap, ranks[i], tag, &id, sizeof(id)));
  } else {
    COMMCHECK(bootstrapRecv(comm->bootstrap, ranks[0], tag, &id, sizeof(id)));
  }
  commConfig_t childConfig = COMM_CONFIG_INITIALIZER;
  if (config == NULL) {
    childConfig.blocking = comm->blocking;
    childConfig.timeoutMs = (int)COMM_MIN(comm->timeoutMs, INT32_MAX);
    config = &childConfig;
  }
  return commInitRankOnDevice(newcomm, n, id, newRank, config, comm->cudaDev); /* the parent's device, as NCCL */
}

static commResult_t deferredSplit(void* p) {
  commDeferredCall* a = (commDeferredCall*)p;
  commResult_t res = commSplit(a->parent, a->color, a->key, a->newcomm, a->hasConfig ? &a->config : NULL);
  free(a);
  return res;
}

COMM_API commResult_t commSplit(comm_t comm, int color, int key, comm_t* newcomm, commConfig_t* config) {
  if (commGroupDepth() > 0 && newcomm != NULL) {
    /* All splits of this thread's group run together at commGroupEnd (*newcomm is set then). */
    COMMCHECK(commApiEnterRevoked(comm, "commSplit"));
    commResult_t res = commCheckConfig(config);
    *newcomm = NULL;
    if (res == commSuccess) {
      commDeferredCall call = {newcomm, 0, 0, {{0}}, comm, color, key, 0, COMM_CONFIG_INITIALIZER, -1};
      commDeferCopyConfig(&call, config);
      res = commDeferCall(&call, deferredSplit, 0);
    }
    commApiLeave(comm);
    return res;
  }
  COMMCHECK(commApiEnterRevoked(comm, "commSplit")); /* a revoked parent too: recovery */
  commResult_t res = commSuccess;
  splitInfo* all = NULL;
  splitInfo* members = NULL;
  int* ranks = NULL;
  if (newcomm == NULL) {
    WARN("commSplit: newcomm is NULL");
    res = commInvalidArgument;
    goto out;
  }
  *newcomm = NULL;
  if (color < 0 && color != COMM_SPLIT_NOCOLOR) {
    WARN("commSplit: color %d must be non-negative or COMM_SPLIT_NOCOLOR", color);
    res = commInvalidArgument;
    goto out;
  }
  COMMCHECKGOTO(commCheckConfig(config), res, out);
  COMMCHECKGOTO(commCalloc(&all, (size_t)comm->nRanks, sizeof(splitInfo)), res, out);
  all[comm->rank] = (splitInfo){color, key, comm->rank};
  COMMCHECKGOTO(bootstrapAllGather(comm->bootstrap, all, sizeof(splitInfo)), res, out);
  if (color == COMM_SPLIT_NOCOLOR) goto out;
  COMMCHECKGOTO(commCalloc(&members, (size_t)comm->nRanks, sizeof(splitInfo)), res, out);
  int n = 0;
  for (int r = 0; r < comm->nRanks; r++)
    if (all[r].color == color) members[n++] = all[r];
  qsort(members, (size_t)n, sizeof(splitInfo), splitCompare);
  int newRank = 0;
  COMMCHECKGOTO(commCalloc(&ranks, (size_t)n, sizeof(int)), res, out);
  for (int i = 0; i < n; i++) {
    ranks[i] = members[i].rank;
    if (members[i].rank == comm->rank) newRank = i;
  }
  /* A revoke may have ended an operation some ranks had counted and others had not. */
  int tag = __atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE) ? COMM_TAG_SPLIT_REVOKED
                                                              : COMM_TAG_SPLIT + (int)(comm->opCount++ & 0xfffff);
  res = childInit(comm, ranks, n, newRank, tag, config, newcomm);
  if (res == commSuccess || res == commInProgress) {
    (*newcomm)->parent = comm;
    INFO(COMM_INIT, "commSplit: rank %d color %d key %d -> rank %d of %d", comm->rank, color, key, newRank, n);
  }
out:
  /* Split advanced the parent's op counter on every rank alike; keep it in step on ranks without a color. */
  if (color == COMM_SPLIT_NOCOLOR && res == commSuccess) comm->opCount++;
  free(all);
  free(members);
  free(ranks);
  commApiLeave(comm);
  return res;
}

/* ---- Shrink ---- */
static int intCompare(const void* a, const void* b) {
  int x = *(const int*)a, y = *(const int*)b;
  return (x > y) - (x < y);
}

COMM_API commResult_t commShrink(comm_t comm, const int* excludeRanks, int nExclude, comm_t* newcomm,
                                 commConfig_t* config, int flags) {
  COMMCHECK(commApiEnterAfterError(comm, "commShrink")); /* going on after a failure is its purpose */
  commResult_t res = commSuccess;
  int* excl = NULL;
  int* survivors = NULL;
  if (newcomm == NULL || (nExclude > 0 && excludeRanks == NULL) || nExclude < 0 || nExclude >= comm->nRanks ||
      (flags & ~COMM_SHRINK_ABORT)) {
    WARN("commShrink: newcomm %p, %d excluded ranks at %p of %d, flags 0x%x", (void*)newcomm, nExclude,
         (const void*)excludeRanks, comm->nRanks, (unsigned)flags);
    res = commInvalidArgument;
    goto out;
  }
  *newcomm = NULL;
  COMMCHECKGOTO(commCheckConfig(config), res, out);
  if (flags & COMM_SHRINK_ABORT) {
    /* End the parent's operations first: its kernels stop (waits for the excluded ranks, perhaps dead, would
     * otherwise last until the timeout) and the parent keeps commRemoteError. Its bootstrap stays usable. */
    commDevAbort(comm);
    commResult_t stopped = commDevSync(comm);
    if (stopped != commSuccess) commSetAsyncError(comm, stopped);
    INFO(COMM_INIT, "commShrink: rank %d stopped the parent's device operations (%s)", comm->rank,
         commGetErrorString(stopped));
  }
  /* A failure notice (the reason to shrink) no longer ends the parent bootstrap's waits: the survivors talk. */
  if (comm->bootstrap != NULL) bootstrapClearFailure(comm->bootstrap);
  COMMCHECKGOTO(commCalloc(&excl, (size_t)(nExclude > 0 ? nExclude : 1), sizeof(int)), res, out);
  if (nExclude > 0) memcpy(excl, excludeRanks, (size_t)nExclude * sizeof(int));
  qsort(excl, (size_t)nExclude, sizeof(int), intCompare);
  for (int i = 0; i < nExclude; i++) {
    if (excl[i] < 0 || excl[i] >= comm->nRanks || (i > 0 && excl[i] == excl[i - 1]) || excl[i] == comm->rank) {
      WARN("commShrink: excluded rank %d is %s", excl[i],
           excl[i] == comm->rank                    ? "this rank (excluded ranks do not call commShrink)"
           : excl[i] < 0 || excl[i] >= comm->nRanks ? "out of range"
                                                    : "listed twice");
      res = commInvalidArgument;
      goto out;
    }
  }
  /* Survivors keep their order; the first one makes the new id and sends it to the others over the
   * parent's bootstrap, point to point: the excluded ranks (perhaps dead) take no part. */
  int n = 0, newRank = -1;
  COMMCHECKGOTO(commCalloc(&survivors, (size_t)comm->nRanks, sizeof(int)), res, out);
  for (int r = 0, e = 0; r < comm->nRanks; r++) {
    if (e < nExclude && excl[e] == r) {
      e++;
      continue;
    }
    if (r == comm->rank) newRank = n;
    survivors[n++] = r;
  }
  res = childInit(comm, survivors, n, newRank, COMM_TAG_SHRINK, config, newcomm);
  if (res == commSuccess || res == commInProgress)
    INFO(COMM_INIT, "commShrink: rank %d -> rank %d of %d (%d excluded)", comm->rank, newRank, n, nExclude);
out:
  free(excl);
  free(survivors);
  commApiLeave(comm);
  return res;
}
