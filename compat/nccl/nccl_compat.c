/* libnccl.so.2 on libcomm: NCCL 2.28's C API (compat/nccl/nccl.h) mapped onto libcomm's (include/comm.h).
 * Handles, enum values and the unique id are the same bits on both sides, so most calls pass straight
 * through; what differs is translated here: the config struct (read only up to the caller's `size`),
 * libcomm's timeout result (NCCL has none: a peer that stopped answering is ncclRemoteError), the in-place
 * ncclBcast, windows (registrations whose flags are checked here), ncclMemAlloc (CUDA driver memory). What
 * libcomm does not provide returns ncclInvalidUsage with a WARN saying so (the device API,
 * nccl_device_api.c). Every function is defined as pncclX, with ncclX a weak alias, as NCCL's profiling
 * interface expects. Only nccl* and pnccl* symbols leave the library (libnccl.map).
 * SPDX-License-Identifier: Apache-2.0 */
#include "nccl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "debug.h"

#define EXPORT __attribute__((visibility("default")))
#define NCCL_CONFIG_MAGIC 0xcafebeefu

/* The bits of handles, ids and enums are libcomm's: checked at compile time. */
_Static_assert(sizeof(ncclUniqueId) == sizeof(commUniqueId), "unique id size");
_Static_assert((int)ncclFloat8e5m2 == (int)commFloat8e5m2 && (int)ncclNumTypes == (int)commNumTypes, "data types");
_Static_assert((int)ncclAvg == (int)commAvg && (int)ncclNumOps == (int)commNumOps, "reduction ops");
_Static_assert((int)ncclInProgress == (int)commInProgress && (int)ncclRemoteError == (int)commRemoteError, "results");
_Static_assert((int)ncclScalarHostImmediate == (int)commScalarHostImmediate, "scalar residence");

#define C(comm) ((comm_t)(comm))
#define T(type) ((commDataType_t)(type))
#define O(op) ((commRedOp_t)(op))
#define S(stream) ((commStream_t)(stream))

static ncclResult_t R(commResult_t r) {
  if (r == commTimeout) return ncclRemoteError; /* NCCL has no timeout result: the peer did not answer */
  return r >= commSuccess && r < commNumResults ? (ncclResult_t)r : ncclInternalError;
}

static pthread_once_t bannerOnce = PTHREAD_ONCE_INIT;
static void banner(void) {
  int v = 0;
  commGetVersion(&v);
  INFO(COMM_INIT, "NCCL drop-in: libcomm %d.%d.%d implementing the NCCL %d.%d.%d API and ABI", v / 10000, v / 100 % 100,
       v % 100, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
}

/* libcomm's config from NCCL's, reading only the first `size` bytes the caller declares. */
static ncclResult_t toCommConfig(const ncclConfig_t* in, commConfig_t* out, const char* fn) {
  commConfig_t def = COMM_CONFIG_INITIALIZER;
  *out = def;
  if (in == NULL) return ncclSuccess;
  if (in->magic != NCCL_CONFIG_MAGIC || in->size < offsetof(ncclConfig_t, blocking)) {
    WARN("%s: the config is not initialised with NCCL_CONFIG_INITIALIZER (magic 0x%x, size %zu)", fn, in->magic,
         in->size);
    return ncclInvalidArgument;
  }
#define HAS(field) (in->size >= offsetof(ncclConfig_t, field) + sizeof(in->field))
  if (HAS(blocking)) out->blocking = in->blocking;
  if (HAS(cgaClusterSize)) out->cgaClusterSize = in->cgaClusterSize;
  if (HAS(minCTAs)) out->minCTAs = in->minCTAs;
  if (HAS(maxCTAs)) out->maxCTAs = in->maxCTAs;
  if (HAS(netName)) out->netName = in->netName;
  if (HAS(splitShare)) out->splitShare = in->splitShare;
  if (HAS(commName)) out->commName = in->commName;
#undef HAS
  return ncclSuccess;
}

/* ---------------------------------------------------------------- version, ids, errors */

EXPORT ncclResult_t pncclGetVersion(int* version) {
  if (version == NULL) {
    WARN("ncclGetVersion: version is NULL");
    return ncclInvalidArgument;
  }
  *version = NCCL_VERSION_CODE; /* the ABI this library implements: clients enable features by it */
  return ncclSuccess;
}
EXPORT ncclResult_t pncclGetUniqueId(ncclUniqueId* id) {
  pthread_once(&bannerOnce, banner);
  return R(commGetUniqueId((commUniqueId*)id));
}
EXPORT const char* pncclGetErrorString(ncclResult_t result) { return commGetErrorString((commResult_t)result); }
EXPORT const char* pncclGetLastError(ncclComm_t comm) { return commGetLastError(C(comm)); }
EXPORT ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (asyncError == NULL) {
    WARN("ncclCommGetAsyncError: asyncError is NULL");
    return ncclInvalidArgument;
  }
  commResult_t e = commSuccess;
  commResult_t r = commGetAsyncError(C(comm), &e);
  *asyncError = R(e);
  return R(r);
}

/* Deprecated in NCCL 2.28, still declared: reread the logging variables (COMM_DEBUG and friends). */
EXPORT void pncclResetDebugInit(void) { commLogReset(); }

/* ---------------------------------------------------------------- communicators */

EXPORT ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                            ncclConfig_t* config) {
  pthread_once(&bannerOnce, banner);
  commConfig_t c;
  ncclResult_t r = toCommConfig(config, &c, "ncclCommInitRankConfig");
  if (r != ncclSuccess) return r;
  commUniqueId id;
  memcpy(&id, &commId, sizeof(id));
  return R(commInitRankConfig((comm_t*)comm, nranks, id, rank, &c));
}
EXPORT ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return pncclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}
EXPORT ncclResult_t pncclCommInitRankScalable(ncclComm_t* comm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                              ncclConfig_t* config) {
  if (nId < 1 || commIds == NULL) {
    WARN("ncclCommInitRankScalable: %d unique ids at %p (at least one is needed)", nId, (void*)commIds);
    return ncclInvalidArgument;
  }
  /* libcomm's bootstrap scales with one root: the first id serves every rank (all ranks pass the same ids). */
  return pncclCommInitRankConfig(comm, nranks, commIds[0], myrank, config);
}
EXPORT ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  pthread_once(&bannerOnce, banner);
  return R(commInitAll((comm_t*)comm, ndev, devlist));
}
EXPORT ncclResult_t pncclCommFinalize(ncclComm_t comm) { return R(commFinalize(C(comm))); }
EXPORT ncclResult_t pncclCommDestroy(ncclComm_t comm) { return R(commDestroy(C(comm))); }
EXPORT ncclResult_t pncclCommAbort(ncclComm_t comm) { return R(commAbort(C(comm))); }
EXPORT ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  commConfig_t c;
  ncclResult_t r = toCommConfig(config, &c, "ncclCommSplit");
  if (r != ncclSuccess) return r;
  return R(commSplit(C(comm), color == NCCL_SPLIT_NOCOLOR ? COMM_SPLIT_NOCOLOR : color, key, (comm_t*)newcomm,
                     config ? &c : NULL));
}
EXPORT ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                                    ncclConfig_t* config, int shrinkFlags) {
  commConfig_t c;
  ncclResult_t r = toCommConfig(config, &c, "ncclCommShrink");
  if (r != ncclSuccess) return r;
  /* Unknown NCCL flags become an unknown libcomm flag, which commShrink refuses with its WARN. */
  int flags = (shrinkFlags & NCCL_SHRINK_ABORT ? COMM_SHRINK_ABORT : 0) |
              (shrinkFlags & ~NCCL_SHRINK_ABORT ? 0x100 : 0);
  return R(commShrink(C(comm), excludeRanksList, excludeRanksCount, (comm_t*)newcomm, config ? &c : NULL, flags));
}
/* libcomm's commRevoke, NCCL's semantics: flags other than NCCL_REVOKE_DEFAULT, a second revoke or a finalized
 * communicator are ncclInvalidArgument, NULL is ncclSuccess; it returns once quiescent (never ncclInProgress),
 * then collectives are ncclInvalidUsage and ncclCommShrink, ncclCommSplit and ncclCommDestroy work. */
EXPORT ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  _Static_assert(NCCL_REVOKE_DEFAULT == COMM_REVOKE_DEFAULT, "revoke flags");
  return R(commRevoke(C(comm), revokeFlags));
}
EXPORT ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) { return R(commCount(C(comm), count)); }
EXPORT ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) { return R(commCuDevice(C(comm), device)); }
EXPORT ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) { return R(commUserRank(C(comm), rank)); }

/* ---------------------------------------------------------------- registration */

/* Registration and windows: libcomm's handles (windows are registrations with flags checked here). */
EXPORT ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return R(commRegister(C(comm), buff, size, handle));
}
EXPORT ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  return R(commDeregister(C(comm), handle));
}
EXPORT ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  if (win == NULL || (winFlags & ~NCCL_WIN_COLL_SYMMETRIC)) {
    WARN("ncclCommWindowRegister: %s", win == NULL ? "win is NULL" : "unknown window flags");
    return ncclInvalidArgument;
  }
  return R(commRegister(C(comm), buff, size, (void**)win));
}
EXPORT ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return R(commDeregister(C(comm), (void*)win));
}

/* ncclMemAlloc/Free: device memory of the current CUDA context, from the driver (loaded at run time). */
static struct {
  int (*alloc)(unsigned long long* dptr, size_t bytes);
  int (*freeMem)(unsigned long long dptr);
} cuMem;
static pthread_once_t cuMemOnce = PTHREAD_ONCE_INIT;
static void cuMemLoad(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return;
  *(void**)&cuMem.alloc = dlsym(lib, "cuMemAlloc_v2");
  *(void**)&cuMem.freeMem = dlsym(lib, "cuMemFree_v2");
}
EXPORT ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  if (ptr == NULL) {
    WARN("ncclMemAlloc: ptr is NULL");
    return ncclInvalidArgument;
  }
  *ptr = NULL;
  pthread_once(&cuMemOnce, cuMemLoad);
  unsigned long long d = 0;
  int e = cuMem.alloc ? cuMem.alloc(&d, size ? size : 1) : -1;
  if (e != 0) {
    WARN("ncclMemAlloc: cannot allocate %zu bytes of device memory (%s)", size,
         cuMem.alloc ? "CUDA driver error, or no current context" : "no CUDA driver");
    return cuMem.alloc ? ncclUnhandledCudaError : ncclSystemError;
  }
  *ptr = (void*)(uintptr_t)d;
  return ncclSuccess;
}
EXPORT ncclResult_t pncclMemFree(void* ptr) {
  if (ptr == NULL) return ncclSuccess;
  pthread_once(&cuMemOnce, cuMemLoad);
  if (!cuMem.freeMem || cuMem.freeMem((unsigned long long)(uintptr_t)ptr) != 0) {
    WARN("ncclMemFree: cannot free %p", ptr);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

/* ---------------------------------------------------------------- reduction ops */

EXPORT ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                              ncclScalarResidence_t residence, ncclComm_t comm) {
  return R(commRedOpCreatePreMulSum((commRedOp_t*)op, scalar, T(datatype), (commScalarResidence_t)residence, C(comm)));
}
EXPORT ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) { return R(commRedOpDestroy(O(op), C(comm))); }

/* ---------------------------------------------------------------- collectives and point-to-point */

EXPORT ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return R(commReduce(sendbuff, recvbuff, count, T(datatype), O(op), root, C(comm), S(stream)));
}
EXPORT ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  return R(commBroadcast(buff, buff, count, T(datatype), root, C(comm), S(stream)));
}
EXPORT ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                   int root, ncclComm_t comm, cudaStream_t stream) {
  return R(commBroadcast(sendbuff, recvbuff, count, T(datatype), root, C(comm), S(stream)));
}
EXPORT ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return R(commAllReduce(sendbuff, recvbuff, count, T(datatype), O(op), C(comm), S(stream)));
}
EXPORT ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                       ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return R(commReduceScatter(sendbuff, recvbuff, recvcount, T(datatype), O(op), C(comm), S(stream)));
}
EXPORT ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                   ncclComm_t comm, cudaStream_t stream) {
  return R(commAllGather(sendbuff, recvbuff, sendcount, T(datatype), C(comm), S(stream)));
}
EXPORT ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclComm_t comm, cudaStream_t stream) {
  return R(commAllToAll(sendbuff, recvbuff, count, T(datatype), C(comm), S(stream)));
}
EXPORT ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                              cudaStream_t stream) {
  return R(commSend(sendbuff, count, T(datatype), peer, C(comm), S(stream)));
}
EXPORT ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                              cudaStream_t stream) {
  return R(commRecv(recvbuff, count, T(datatype), peer, C(comm), S(stream)));
}
EXPORT ncclResult_t pncclGroupStart(void) { return R(commGroupStart()); }
EXPORT ncclResult_t pncclGroupEnd(void) { return R(commGroupEnd()); }
EXPORT ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  if (simInfo != NULL &&
      (simInfo->magic != 0x74685283u || simInfo->size < offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float))) {
    WARN("ncclGroupSimulateEnd: simInfo is not initialised with NCCL_SIM_INFO_INITIALIZER");
    return ncclInvalidArgument;
  }
  float us = 0;
  ncclResult_t r = R(commGroupSimulateEnd(&us));
  if (r == ncclSuccess && simInfo) simInfo->estimatedTime = us;
  return r;
}

EXPORT ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                ncclComm_t comm, cudaStream_t stream) {
  return R(commGather(sendbuff, recvbuff, count, T(datatype), root, C(comm), S(stream)));
}
EXPORT ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                 ncclComm_t comm, cudaStream_t stream) {
  return R(commScatter(sendbuff, recvbuff, count, T(datatype), root, C(comm), S(stream)));
}

/* ncclX: weak aliases of pncclX. */
#pragma weak ncclGetVersion = pncclGetVersion
#pragma weak ncclGetUniqueId = pncclGetUniqueId
#pragma weak ncclGetErrorString = pncclGetErrorString
#pragma weak ncclGetLastError = pncclGetLastError
#pragma weak ncclCommGetAsyncError = pncclCommGetAsyncError
#pragma weak ncclCommInitRankConfig = pncclCommInitRankConfig
#pragma weak ncclCommInitRank = pncclCommInitRank
#pragma weak ncclCommInitRankScalable = pncclCommInitRankScalable
#pragma weak ncclCommInitAll = pncclCommInitAll
#pragma weak ncclCommFinalize = pncclCommFinalize
#pragma weak ncclCommDestroy = pncclCommDestroy
#pragma weak ncclCommAbort = pncclCommAbort
#pragma weak ncclCommSplit = pncclCommSplit
#pragma weak ncclCommShrink = pncclCommShrink
#pragma weak ncclCommRevoke = pncclCommRevoke
#pragma weak ncclCommCount = pncclCommCount
#pragma weak ncclCommCuDevice = pncclCommCuDevice
#pragma weak ncclCommUserRank = pncclCommUserRank
#pragma weak ncclCommRegister = pncclCommRegister
#pragma weak ncclCommDeregister = pncclCommDeregister
#pragma weak ncclCommWindowRegister = pncclCommWindowRegister
#pragma weak ncclCommWindowDeregister = pncclCommWindowDeregister
#pragma weak ncclMemAlloc = pncclMemAlloc
#pragma weak ncclMemFree = pncclMemFree
#pragma weak ncclRedOpCreatePreMulSum = pncclRedOpCreatePreMulSum
#pragma weak ncclRedOpDestroy = pncclRedOpDestroy
#pragma weak ncclReduce = pncclReduce
#pragma weak ncclBcast = pncclBcast
#pragma weak ncclBroadcast = pncclBroadcast
#pragma weak ncclAllReduce = pncclAllReduce
#pragma weak ncclReduceScatter = pncclReduceScatter
#pragma weak ncclAllGather = pncclAllGather
#pragma weak ncclAlltoAll = pncclAlltoAll
#pragma weak ncclGather = pncclGather
#pragma weak ncclScatter = pncclScatter
#pragma weak ncclSend = pncclSend
#pragma weak ncclRecv = pncclRecv
#pragma weak ncclGroupStart = pncclGroupStart
#pragma weak ncclGroupEnd = pncclGroupEnd
#pragma weak ncclGroupSimulateEnd = pncclGroupSimulateEnd
#pragma weak ncclResetDebugInit = pncclResetDebugInit
