/* Out-of-band communication between the ranks of a communicator: rendezvous, allgather, barrier and
 * tagged send/recv, failure notices and probes over TCP. Every listener (the root's and each rank's)
 * authenticates a connection with a challenge-response over the unique id's 128-bit key before it takes any
 * state; the key never crosses the wire. */
#ifndef COMM_BOOTSTRAP_H_
#define COMM_BOOTSTRAP_H_

#include <stddef.h>
#include <stdint.h>
#include "comm.h"
#include "socket.h"

/* The layout inside commUniqueId (128 bytes). */
typedef struct {
  uint64_t magic;     /* COMM_BOOTSTRAP_MAGIC */
  uint64_t secret[2]; /* the job's 128-bit key (SipHash-2-4 halves k0, k1); proven, never sent */
  commSockAddr root;
} commBootstrapId;
#define COMM_BOOTSTRAP_MAGIC 0x636f6d6d69643032ull /* "commid02" */

typedef struct commBootstrap commBootstrap;

/* Create an id and start the root (a thread serving one rendezvous) on this process. */
commResult_t bootstrapGetUniqueId(commUniqueId* id);
/* COMM_ROOT="host:port": the id every rank derives from it. The key is a keyed hash of COMM_ROOT_SECRET; without
 * it, a fixed public key and one WARN that the job is unauthenticated (anyone who can reach the port can join or
 * disrupt it). isRoot: this process must host the root (rank 0 does). */
commResult_t bootstrapIdFromRootAddr(const char* hostport, commUniqueId* id, int isRoot);

/* A failure one rank tells every other rank of (bootstrapReportFailure). */
typedef struct {
  int culprit;  /* the rank that failed or died; -1 when not known */
  int reporter; /* the rank that found it */
  int result;   /* commResult_t of the failed operation */
  uint32_t pad;
  uint64_t opSeq; /* the collective sequence number of the operation that failed: the reporter was past every
                   * earlier one, so a rank still in one may finish it; 0: everything stops */
  char reason[192];
} commBootstrapFailure;

typedef struct {
  int64_t timeoutMs; /* rendezvous and every later call; <0: none */
  const int* abortFlag;
  /* Called at most once, from the bootstrap's own thread, when another rank reports a failure; a bootstrap
   * wait in progress then ends with commRemoteError. NULL: not told. */
  void (*onFailure)(void* arg, const commBootstrapFailure* failure);
  void* failureArg;
  /* The owner's count of collective calls, read (atomically) by the listener thread to answer probes, so that
   * a rank that timed out can tell a peer that never made the call; NULL: probes are answered with 0. */
  const uint64_t* progress;
} commBootstrapOpts;

commResult_t bootstrapInit(const commUniqueId* id, int rank, int nranks, const commBootstrapOpts* opts,
                           commBootstrap** out);
/* data holds nranks slots of `bytes`; slot `rank` is ours on entry, all are filled on return. */
commResult_t bootstrapAllGather(commBootstrap* b, void* data, size_t bytes);
commResult_t bootstrapBarrier(commBootstrap* b);
/* Tagged messages; a recv matches (peer, tag) and keeps other arrivals for later. Sizes must match. */
commResult_t bootstrapSend(commBootstrap* b, int peer, int tag, const void* data, size_t size);
commResult_t bootstrapRecv(commBootstrap* b, int peer, int tag, void* data, size_t size);
/* Tell every other rank of a failure (the culprit too: it may be alive, e.g. mismatched calls). Best effort and bounded: returns within
 * about a second whatever the peers do (a peer that is gone is skipped). */
commResult_t bootstrapReportFailure(commBootstrap* b, const commBootstrapFailure* failure);
/* Does rank's bootstrap still answer? commSuccess: it answered within timeoutMs (*progress, when not NULL: the
 * low 32 bits of its collective calls so far, commBootstrapOpts.progress); commRemoteError: it is gone
 * (connection refused) or did not answer in time (stopped, hung). */
commResult_t bootstrapProbe(commBootstrap* b, int rank, int64_t timeoutMs, uint32_t* progress);
/* Later waits no longer end because of the failure notice taken so far (e.g. commShrink's survivors still talk
 * over the parent's bootstrap); onFailure is not called again, later notices are ignored. */
void bootstrapClearFailure(commBootstrap* b);
/* The first rank this bootstrap found gone (connection refused) or silent (no answer in time), -1 if none:
 * the culprit of a failed init or finalize. */
int bootstrapGonePeer(commBootstrap* b);
/* Change the deadline used by later calls (e.g. the communicator's timeout after init). */
void bootstrapSetTimeout(commBootstrap* b, int64_t timeoutMs);
commResult_t bootstrapClose(commBootstrap* b);

#endif
