/* The communicator. Internal: never exposed through include/. */
#ifndef COMM_CORE_H_
#define COMM_CORE_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "communicator.h"
#include "reduce.h"
#include "schedule.h"
#include "transport.h"

#define COMM_MAGIC_ALIVE 0x636f6d6d616c6976ull /* "commaliv" */
#define COMM_MAGIC_DEAD 0xdeadbeefdeadbeefull

/* src/core/comm.c */
/* Validate a communicator handle at API entry: NULL, destroyed or not yet initialised -> error + WARN. */
commResult_t commCheckComm(comm_t comm, const char* api);
/* The same check, and the communicator held for the duration of a call (commRelease when done): destroy and
 * abort from another thread wait for it. */
commResult_t commRetain(comm_t comm, const char* api);
void commRelease(comm_t comm);

/* src/core/comm_error.c: the communicator's error record and failures that travel between ranks. */
/* An operation failed: the first error is kept (commGetAsyncError) with its cause (the thread's first WARN
 * since the call began), and every other rank is told (unless the failure came from one of them). */
void commSetAsyncError(comm_t comm, commResult_t res);
/* Keep text as the cause commGetLastError(comm) reports (unless a peer's failure is known: that stays). */
void commRecordError(comm_t comm, const char* text);
/* For calls outside commApiEnter/Leave: record the call's cause when res is an error; returns res. */
commResult_t commNoteCallError(comm_t comm, commResult_t res);
/* Init: the bootstrap tells this communicator of other ranks' failures. */
void commErrorBootstrapOpts(struct commComm* comm, commBootstrapOpts* opts);
/* Leaving (finalize, destroy) after another rank's failure: pass the notice on before the connections close,
 * so that no peer takes this rank's orderly departure for the failure. */
void commErrorForward(struct commComm* comm);
/* Destroy: from here on a failure report no longer touches the executors. */
void commErrorClosing(struct commComm* comm);

/* Allocate channel c's tables (and ring order) if it has none yet. */
commResult_t commChannelEnsure(struct commComm* comm, int c);

/* src/core/placement.c: where the ranks sit in the topology, and the rings that follow from it. */
/* Fills info's topology device (topoDevType, topoDevIndex) for the calling rank, before the exchange. */
void commPlacementDescribeSelf(struct commComm* comm, commPeerInfo* info);
/* After the exchange: every rank's host and device, this node's ring positions on every channel, shared in
 * one allgather (comm->topoRanks, comm->ringPos; the NIC identities go into peers[].netIfHash). */
commResult_t commPlacementSetup(struct commComm* comm);
/* COMM_TOPO_DUMP_FILE, by rank COMM_TOPO_DUMP_FILE_RANK. */
commResult_t commPlacementDump(struct commComm* comm);
/* Channel c's ring into ringRanks[nRanks]: nodes in order, within a node the topology's order for c (or rank
 * order turned by c without one). */
commResult_t commPlacementRing(struct commComm* comm, int c, int* ringRanks);
/* The collnet groups (when COMM_COLLNET_ENABLE asks for them): each node's member on every collnet channel,
 * as commAlgoCollNet's schedule names them, handed to the collnet transport to form the groups. */
commResult_t commPlacementCollNet(struct commComm* comm);

/* src/core/redop.c: the reduction arguments for op on this comm (built-in or user-made). A scalar in device
 * memory is not read here: *devScalar gets its address (NULL otherwise), and only device buffers may use
 * it (onDevice). */
commResult_t commRedOpResolve(comm_t comm, commRedOp_t op, commDataType_t type, int onDevice, commRedOpArgs* args,
                              const void** devScalar);

#endif
