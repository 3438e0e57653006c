/*
 * libcomm CollNet plugin ABI, version 1: collectives done by the network (a SHARP switch, aggregation
 * servers). A group has one member per node (the node's leader on a channel); the network reduces the
 * members' buffers and returns the result to every member, identical on each. libcomm's CollTree runs its
 * inter-node stage over it. A plugin library exports COMM_COLLNET_PLUGIN_SYMBOL (a commCollNet_v1_t); a library
 * exporting NCCL's ncclCollNetPlugin_v8 .. _v11 instead is used through libcomm's adapter.
 *
 * The semantics follow NCCL's CollNet interface; the types are libcomm's (commDataType_t and commRedOp_t have
 * NCCL's values). Every call returns commSuccess or an error (commSystemError: the network or a system call
 * failed; commInvalidUsage: a configuration the plugin refuses; commInternalError: misuse by the caller).
 * C99; needs no other header than comm.h and comm_net.h. SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_COLLNET_H_
#define COMM_COLLNET_H_

#include <stddef.h>
#include <stdint.h>
#include "comm.h"
#include "comm_net.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COMM_COLLNET_PLUGIN_VERSION 1
#define COMM_COLLNET_PLUGIN_SYMBOL "commCollNetPlugin_v1"

typedef struct {
  char* name;          /* device name, for logs */
  char* pciPath;       /* sysfs PCI path of the NIC, or NULL */
  uint64_t guid;       /* same guid: same physical port */
  int ptrSupport;      /* COMM_PTR_HOST | COMM_PTR_CUDA: memory regMr takes */
  int speedMbps;       /* link speed */
  float latencyUs;     /* one reduction's latency beyond the wire (0: unknown) */
  int maxComms;        /* groups a process may hold at once */
  size_t maxCollBytes; /* the largest operation (bytes of one member's buffer) one call takes: > 0 */
  int maxInflight;     /* operations one group may have posted and not yet completed (>= 1) */
} commCollNetProperties_t;

typedef struct {
  const char* name;
  int version; /* COMM_COLLNET_PLUGIN_VERSION */
  /* Once per communicator that uses collnet; *ctx is handed to listen and finalize. commId is the same on
   * every rank of the communicator (its hash). */
  commResult_t (*init)(void** ctx, uint64_t commId, commNetLogger_t logger);
  commResult_t (*devices)(int* ndev);
  commResult_t (*getProperties)(int dev, commCollNetProperties_t* props);
  /* Make this member's endpoint: fill `handle` (<= COMM_NET_HANDLE_MAXSIZE bytes), which every member of the
   * group is given. Must not block. */
  commResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  /* Form the group of nranks members; handles[i] is member i's handle, rank this member's index. May block
   * until every member connected (or fail, returning an error: libcomm then runs without collnet). */
  commResult_t (*connect)(void* handles[], int nranks, int rank, void* listenComm, void** collComm);
  /* *supported = 1 when the network reduces this type with this op (sum, prod, max, min), else 0. */
  commResult_t (*reduceSupport)(commDataType_t type, commRedOp_t op, int* supported);
  /* Register memory (type COMM_PTR_HOST or COMM_PTR_CUDA) for the operations below. */
  commResult_t (*regMr)(void* collComm, void* data, size_t size, int type, void** mhandle);
  commResult_t (*deregMr)(void* collComm, void* mhandle);
  /* Post an allreduce of count elements: recvData of every member receives op over the members' sendData
   * (in place allowed). *request NULL with commSuccess: cannot post now, call again. */
  commResult_t (*iallreduce)(void* collComm, void* sendData, void* recvData, size_t count, commDataType_t type,
                             commRedOp_t op, void* sendMhandle, void* recvMhandle, void** request);
  /* Optional (NULL: not offered). Allgather: recvData (nranks x bytesPerRank) receives every member's
   * bytesPerRank bytes of sendData at offset rank x bytesPerRank. */
  commResult_t (*iallgather)(void* collComm, void* sendData, void* recvData, size_t bytesPerRank, void* sendMhandle,
                             void* recvMhandle, void** request);
  /* Optional. Reduce-scatter: sendData holds nranks x countPerRank elements; member r's recvData receives
   * the reduction of every member's part r. */
  commResult_t (*ireducescatter)(void* collComm, void* sendData, void* recvData, size_t countPerRank,
                                 commDataType_t type, commRedOp_t op, void* sendMhandle, void* recvMhandle,
                                 void** request);
  /* Make data the network wrote to CUDA memory visible to the GPU; *request NULL: nothing to wait for. */
  commResult_t (*iflush)(void* collComm, void* data, size_t size, void* mhandle, void** request);
  /* *done = 1 when the request completed (size, if not NULL, then holds the bytes it handled); a completed
   * request is freed by the plugin. An error return fails the operation. */
  commResult_t (*test)(void* request, int* done, size_t* size);
  commResult_t (*closeColl)(void* collComm);
  commResult_t (*closeListen)(void* listenComm);
  /* When the communicator is destroyed (after every closeColl). */
  commResult_t (*finalize)(void* ctx);
} commCollNet_v1_t;

typedef commCollNet_v1_t commCollNet_t;

#ifdef __cplusplus
}
#endif
#endif /* COMM_COLLNET_H_ */
