/* libcomm's NCCL drop-in: the C API and ABI of NCCL 2.28, as libnccl.so.2 (compat/nccl/nccl_compat.c)
 * implements it on libcomm. Written for libcomm from NCCL's documented interface: the same type sizes, field
 * offsets, enum values and function signatures, so a program built against NVIDIA's nccl.h runs on this
 * library unchanged (tests/compat/test_nccl_abi.c checks both headers agree). docs/NCCL_COMPAT.md says what
 * is supported. SPDX-License-Identifier: Apache-2.0 */
#ifndef NCCL_H_
#define NCCL_H_

/* CUDA's headers where the compiler can find them (nvcc, or -I.../cuda/include), as NVIDIA's nccl.h includes
 * them: the runtime, half precision, bfloat16 from CUDA 11.0, and in C++ the float8 types from CUDA 11.8. So a
 * program that includes nccl.h and then calls cudaMalloc compiles as it does with NVIDIA's header. Where they
 * cannot be found (a host-only program) nccl.h stands alone; COMM_NCCL_NO_CUDA_HEADERS leaves them out. */
#if !defined(COMM_NCCL_NO_CUDA_HEADERS) && defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if defined(__cplusplus) && CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
#endif
#endif

#include <limits.h>
#include <stddef.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""
#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

/* cudaStream_t (CUDA's type: a pointer to an opaque struct) where CUDA's headers were not included. */
#if !defined(__CUDA_RUNTIME_H__) && !defined(CUDART_VERSION)
typedef struct CUstream_st* cudaStream_t;
#endif

typedef struct ncclComm* ncclComm_t;
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

#define NCCL_SHRINK_DEFAULT 0x00 /* shrink the parent */
#define NCCL_SHRINK_ABORT 0x01   /* abort the parent's operations first */
#define NCCL_REVOKE_DEFAULT 0x00

/* Communicator configuration (NCCL 2.28's layout). A library reads only the first `size` bytes, so older
 * callers with a smaller struct keep working; NCCL_CONFIG_UNDEF_* means "default". */
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                                \
  {                                                                                                            \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_CONFIG_UNDEF_INT, \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT                                                                                  \
  }

typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER \
  { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_UNDEF_FLOAT }

typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5, /* pre-multiplied sums made by ncclRedOpCreatePreMulSum come after */
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/* Every function also exists as pnccl<Name> (the profiling interface); nccl<Name> is a weak alias of it. */
#define NCCL_DECLARE(ret, name, args) \
  ret nccl##name args;                \
  ret pnccl##name args

NCCL_DECLARE(ncclResult_t, MemAlloc, (void** ptr, size_t size));
NCCL_DECLARE(ncclResult_t, MemFree, (void* ptr));
NCCL_DECLARE(ncclResult_t, GetVersion, (int* version));
NCCL_DECLARE(ncclResult_t, GetUniqueId, (ncclUniqueId * uniqueId));
NCCL_DECLARE(ncclResult_t, CommInitRankConfig,
             (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config));
NCCL_DECLARE(ncclResult_t, CommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank));
NCCL_DECLARE(ncclResult_t, CommInitAll, (ncclComm_t * comm, int ndev, const int* devlist));
NCCL_DECLARE(ncclResult_t, CommFinalize, (ncclComm_t comm));
NCCL_DECLARE(ncclResult_t, CommDestroy, (ncclComm_t comm));
NCCL_DECLARE(ncclResult_t, CommAbort, (ncclComm_t comm));
NCCL_DECLARE(ncclResult_t, CommRevoke, (ncclComm_t comm, int revokeFlags));
NCCL_DECLARE(ncclResult_t, CommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config));
NCCL_DECLARE(ncclResult_t, CommShrink,
             (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config,
              int shrinkFlags));
NCCL_DECLARE(ncclResult_t, CommInitRankScalable,
             (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config));
NCCL_DECLARE(const char*, GetErrorString, (ncclResult_t result));
NCCL_DECLARE(const char*, GetLastError, (ncclComm_t comm));
NCCL_DECLARE(ncclResult_t, CommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError));
NCCL_DECLARE(ncclResult_t, CommCount, (const ncclComm_t comm, int* count));
NCCL_DECLARE(ncclResult_t, CommCuDevice, (const ncclComm_t comm, int* device));
NCCL_DECLARE(ncclResult_t, CommUserRank, (const ncclComm_t comm, int* rank));
NCCL_DECLARE(ncclResult_t, CommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle));
NCCL_DECLARE(ncclResult_t, CommDeregister, (const ncclComm_t comm, void* handle));
NCCL_DECLARE(ncclResult_t, CommWindowRegister,
             (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags));
NCCL_DECLARE(ncclResult_t, CommWindowDeregister, (ncclComm_t comm, ncclWindow_t win));
NCCL_DECLARE(ncclResult_t, RedOpCreatePreMulSum,
             (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
              ncclComm_t comm));
NCCL_DECLARE(ncclResult_t, RedOpDestroy, (ncclRedOp_t op, ncclComm_t comm));
NCCL_DECLARE(ncclResult_t, Reduce,
             (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
              ncclComm_t comm, cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, Bcast,
             (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, Broadcast,
             (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
              cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, AllReduce,
             (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
              ncclComm_t comm, cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, ReduceScatter,
             (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
              ncclComm_t comm, cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, AllGather,
             (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
              cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, AlltoAll,
             (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
              cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, Gather,
             (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
              cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, Scatter,
             (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
              cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, Send,
             (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
              cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, Recv,
             (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, GroupStart, (void));
NCCL_DECLARE(ncclResult_t, GroupEnd, (void));
NCCL_DECLARE(ncclResult_t, GroupSimulateEnd, (ncclSimInfo_t * simInfo));
/* Deprecated by NCCL: reread the logging environment variables. */
NCCL_DECLARE(void, ResetDebugInit, (void));

#undef NCCL_DECLARE

#ifdef __cplusplus
}
#endif
#endif /* NCCL_H_ */
