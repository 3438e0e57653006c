/*
 * libcomm public API (C99). Compiles without any CUDA header.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_H_
#define COMM_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COMM_MAJOR 0
#define COMM_MINOR 1
#define COMM_PATCH 0
/* commGetVersion() returns COMM_VERSION_CODE. */
#define COMM_VERSION(X, Y, Z) ((X)*10000 + (Y)*100 + (Z))
#define COMM_VERSION_CODE COMM_VERSION(COMM_MAJOR, COMM_MINOR, COMM_PATCH)

/* Same type as cudaStream_t, without including CUDA. NULL is the default stream. */
typedef struct CUstream_st* commStream_t;

typedef struct commComm* comm_t;
#define COMM_COMM_NULL ((comm_t)NULL)

typedef enum {
  commSuccess = 0,
  commUnhandledCudaError = 1,
  commSystemError = 2,
  commInternalError = 3,
  commInvalidArgument = 4,
  commInvalidUsage = 5,
  commRemoteError = 6,
  commInProgress = 7,
  commTimeout = 8,
  commNumResults = 9
} commResult_t;

typedef enum {
  commInt8 = 0,
  commChar = 0,
  commUint8 = 1,
  commInt32 = 2,
  commInt = 2,
  commUint32 = 3,
  commInt64 = 4,
  commUint64 = 5,
  commFloat16 = 6,
  commHalf = 6,
  commFloat32 = 7,
  commFloat = 7,
  commFloat64 = 8,
  commDouble = 8,
  commBfloat16 = 9,
  commFloat8e4m3 = 10,
  commFloat8e5m2 = 11,
  commNumTypes = 12
} commDataType_t;

/* Built-in ops; values >= commNumOps are pre-multiplied sums made by commRedOpCreatePreMulSum. */
typedef enum {
  commSum = 0,
  commProd = 1,
  commMax = 2,
  commMin = 3,
  commAvg = 4,
  commNumOps = 5,
  commMaxRedOp = 0x7fffffff
} commRedOp_t;

/* Where the scalar of a pre-multiplied sum lives. */
typedef enum {
  commScalarDevice = 0,       /* pointer to device memory, read when the collective runs */
  commScalarHostImmediate = 1 /* pointer to host memory, read at creation */
} commScalarResidence_t;

#define COMM_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[COMM_UNIQUE_ID_BYTES];
} commUniqueId;

/* Configuration. Always initialise with COMM_CONFIG_INITIALIZER so that size/magic/version are set:
 * fields added by later versions keep the ABI (a library reads only the first `size` bytes). */
#define COMM_CONFIG_UNDEF_INT INT32_MIN
#define COMM_CONFIG_UNDEF_PTR NULL
#define COMM_CONFIG_MAGIC 0xc0ffee01u
typedef struct {
  size_t size;          /* sizeof(commConfig_t) of the caller */
  unsigned int magic;   /* COMM_CONFIG_MAGIC */
  unsigned int version; /* COMM_VERSION_CODE of the caller's header */
  int blocking;         /* 1 (default): calls block; 0: init returns commInProgress, poll commGetAsyncError */
  int cgaClusterSize;   /* CUDA executor hint; ignored on host */
  int minCTAs;          /* CUDA executor hint; ignored on host */
  int maxCTAs;          /* CUDA executor hint; ignored on host */
  const char* netName;  /* network plugin to use ("Socket", "IB", ...); NULL: automatic */
  int splitShare;       /* commSplit children share resources with the parent (1) or not (0) */
  int timeoutMs;        /* overrides COMM_TIMEOUT_MS for this communicator; UNDEF: use env/default */
  const char* commName; /* name used in log lines; NULL: none */
} commConfig_t;

#define COMM_CONFIG_INITIALIZER                                                                               \
  {                                                                                                           \
    sizeof(commConfig_t), COMM_CONFIG_MAGIC, COMM_VERSION_CODE, COMM_CONFIG_UNDEF_INT, COMM_CONFIG_UNDEF_INT, \
        COMM_CONFIG_UNDEF_INT, COMM_CONFIG_UNDEF_INT, COMM_CONFIG_UNDEF_PTR, COMM_CONFIG_UNDEF_INT,           \
        COMM_CONFIG_UNDEF_INT, COMM_CONFIG_UNDEF_PTR                                                          \
  }

/* commSplit: ranks passing this color get no communicator (*newcomm = NULL). */
#define COMM_SPLIT_NOCOLOR (-1)

/* Version and errors */
commResult_t commGetVersion(int* version);
const char* commGetErrorString(commResult_t result);
/* The last WARN-level message this thread produced for comm (or for any comm when comm is NULL). */
const char* commGetLastError(comm_t comm);

/* Communicator lifecycle */
commResult_t commGetUniqueId(commUniqueId* uniqueId);
commResult_t commInitRank(comm_t* comm, int nranks, commUniqueId commId, int rank);
commResult_t commInitRankConfig(comm_t* comm, int nranks, commUniqueId commId, int rank, commConfig_t* config);
/* ndev ranks in this process; devlist may be NULL (devices 0..ndev-1, or host-only ranks). */
commResult_t commInitAll(comm_t* comms, int ndev, const int* devlist);
commResult_t commSplit(comm_t comm, int color, int key, comm_t* newcomm, commConfig_t* config);
/* A new communicator of every rank of comm but the nExclude listed (e.g. failed ones), in their order; only
 * the survivors call it (the excluded ranks take no part, and may be gone). flags: COMM_SHRINK_DEFAULT
 * or COMM_SHRINK_ABORT, which first ends the parent's operations on device buffers (its kernels stop; the
 * parent then reports commRemoteError and is only good for commAbort/commDestroy).
 * config NULL: the parent's blocking mode and timeout. */
#define COMM_SHRINK_DEFAULT 0x00
#define COMM_SHRINK_ABORT 0x01
commResult_t commShrink(comm_t comm, const int* excludeRanks, int nExclude, comm_t* newcomm, commConfig_t* config,
                        int flags);
/* Stop the communicator's work without freeing it, so that the survivors of a failure can go on (NCCL's
 * ncclCommRevoke). Local, not collective: this rank's operations in progress (other threads') end with
 * commInvalidUsage, the other ranks are told (their operations end with commRemoteError, as after a failure),
 * and from then on every collective, point-to-point call or commFinalize on it is commInvalidUsage with a
 * WARN (a group holding calls on it fails at commGroupEnd without running). What it still takes:
 * commShrink and commSplit (a new communicator, sharing nothing with it; split needs every rank to have
 * revoked it, shrink also takes a rank that was only told), commDeregister, commRedOpDestroy,
 * commGetAsyncError (commSuccess once revoked), commDestroy, commAbort. Returns when this rank's operations
 * have ended. flags: COMM_REVOKE_DEFAULT (others are commInvalidArgument, as is a second revoke or a
 * finalized communicator); comm NULL: commSuccess. */
#define COMM_REVOKE_DEFAULT 0x00
commResult_t commRevoke(comm_t comm, int flags);
commResult_t commFinalize(comm_t comm);
commResult_t commDestroy(comm_t comm);
commResult_t commAbort(comm_t comm);
commResult_t commGetAsyncError(comm_t comm, commResult_t* asyncError);

/* Queries */
commResult_t commCount(const comm_t comm, int* count);
commResult_t commUserRank(const comm_t comm, int* rank);
/* CUDA device of the communicator, or -1 for a host-only communicator. */
commResult_t commCuDevice(const comm_t comm, int* device);
/* Buffer registration, as NCCL's: libcomm registers buffers with its transports on first use and caches
 * that, so these only hand out a handle; commDeregister refuses a handle this communicator did not give. */
commResult_t commRegister(const comm_t comm, void* buff, size_t size, void** handle);
commResult_t commDeregister(const comm_t comm, void* handle);

/* Reduction operators */
commResult_t commRedOpCreatePreMulSum(commRedOp_t* op, void* scalar, commDataType_t datatype,
                                      commScalarResidence_t residence, comm_t comm);
commResult_t commRedOpDestroy(commRedOp_t op, comm_t comm);

/* Collectives. Host buffers: the call returns when the operation is complete (inside a group, at
 * commGroupEnd). Counts are in elements of datatype. */
commResult_t commAllReduce(const void* sendbuff, void* recvbuff, size_t count, commDataType_t datatype, commRedOp_t op,
                           comm_t comm, commStream_t stream);
commResult_t commBroadcast(const void* sendbuff, void* recvbuff, size_t count, commDataType_t datatype, int root,
                           comm_t comm, commStream_t stream);
commResult_t commReduce(const void* sendbuff, void* recvbuff, size_t count, commDataType_t datatype, commRedOp_t op,
                        int root, comm_t comm, commStream_t stream);
/* sendcount elements from each rank; recvbuff holds nranks * sendcount. */
commResult_t commAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, commDataType_t datatype, comm_t comm,
                           commStream_t stream);
/* sendbuff holds nranks * recvcount; each rank receives recvcount reduced elements. */
commResult_t commReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, commDataType_t datatype,
                               commRedOp_t op, comm_t comm, commStream_t stream);
/* count elements to and from each peer; buffers hold nranks * count. */
commResult_t commAllToAll(const void* sendbuff, void* recvbuff, size_t count, commDataType_t datatype, comm_t comm,
                          commStream_t stream);
/* Every rank's count elements into the root's recvbuff (nranks * count, in rank order); the reverse for
 * scatter (the root's sendbuff holds nranks * count). Grouped sends and receives through the root. */
commResult_t commGather(const void* sendbuff, void* recvbuff, size_t count, commDataType_t datatype, int root,
                        comm_t comm, commStream_t stream);
commResult_t commScatter(const void* sendbuff, void* recvbuff, size_t count, commDataType_t datatype, int root,
                         comm_t comm, commStream_t stream);
commResult_t commSend(const void* sendbuff, size_t count, commDataType_t datatype, int peer, comm_t comm,
                      commStream_t stream);
commResult_t commRecv(void* recvbuff, size_t count, commDataType_t datatype, int peer, comm_t comm,
                      commStream_t stream);

/* Groups: calls between Start and End are collected and run together at the outermost End. Inside a group,
 * commInitRank(Config), commSplit and commFinalize are deferred too: at the outermost commGroupEnd they run
 * together (init and split before the group's collectives, finalize after), so one thread can set up
 * several communicators whose ranks wait on each other; *newcomm is written at commGroupEnd. */
commResult_t commGroupStart(void);
commResult_t commGroupEnd(void);
/* Ends the outermost group without running it: *estimatedUs gets the tuner's predicted time of its
 * collectives (send/recv count as 0), and the calls are dropped. commInvalidUsage (the group stays open) when
 * it is not the outermost one or it creates, splits or finalizes communicators. */
commResult_t commGroupSimulateEnd(float* estimatedUs);

#ifdef __cplusplus
}
#endif
#endif /* COMM_H_ */
