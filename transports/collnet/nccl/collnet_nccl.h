/* NCCL's CollNet plugin ABI (versions 8, 9, 10 and 11), declared for libcomm's adapter
 * (transports/collnet/nccl/collnet_nccl.c) and for NCCL-shaped CollNet plugins (tests/plugins/, comm_aggd's).
 *
 * Our own declarations of the binary interface a library exporting ncclCollNetPlugin_v8 .. _v11 implements,
 * written from the facts gathered in docs/COLLNET_ABI.md (field order, types, sizes: v8 136 bytes, v9 and v10
 * 144, v11 152; properties v8 64, v9/v10 104, v11 112). The common types (ncclResult_t, the logger, the
 * network properties v8..v10) come from transports/net/nccl/net_nccl.h. Only the ABI matters: the struct tags
 * are ours. SPDX-License-Identifier: Apache-2.0 */
#ifndef COMM_COLLNET_NCCL_H_
#define COMM_COLLNET_NCCL_H_

#include <stddef.h>
#include <stdint.h>

#include "../../net/nccl/net_nccl.h" /* NET_NCCL_ABI_ONLY, when defined, keeps out libcomm's declarations */

#ifdef __cplusplus
extern "C" {
#endif

/* nccl.h: datatypes and reduction ops (int-sized enums; the same values as libcomm's). */
typedef enum {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5 } ncclRedOp_t;

/* Scatter-gather elements of iallgather / ireducescatter. */
typedef struct {
  void* mhandle;
  void* address;
  uint32_t size;
} ncclNetSGE_v8_t;
typedef struct {
  void* mhandle;
  void* address;
  size_t size;
} ncclNetSGE_v9_t;
typedef ncclNetSGE_v9_t ncclNetSGE_v10_t;
typedef ncclNetSGE_v9_t ncclNetSGE_v11_t;

/* v11 properties (the v10 layout plus maxMultiRequestSize): ncclNetProperties_v11_t, declared with the net
 * plugin's ABI in net_nccl.h. */

/* ---------------------------------------------------------------- version 8 */
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* handles[], int nranks, int rank, void* listenComm, void** collComm);
  ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int* supported);
  ncclResult_t (*regMr)(void* collComm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* collComm, void* data, size_t size, int type, uint64_t offset, int fd,
                              void** mhandle);
  ncclResult_t (*deregMr)(void* collComm, void* mhandle);
  ncclResult_t (*iallreduce)(void* collComm, void* sendData, void* recvData, int count, ncclDataType_t dataType,
                             ncclRedOp_t redOp, void* sendMhandle, void* recvMhandle, void** request);
  ncclResult_t (*iallgather)(void* collComm, void* sendData, int nRecvParts, ncclNetSGE_v8_t* recvParts,
                             size_t bytesPerRank, size_t windowOffset, size_t windowBytes, void* sendMhandle,
                             void** request);
  ncclResult_t (*ireducescatter)(void* collComm, int nSendParts, ncclNetSGE_v8_t* sendParts, void* recvData,
                                 size_t bytesPerRank, size_t windowOffset, size_t windowBytes, ncclDataType_t dataType,
                                 ncclRedOp_t redOp, void* recvMhandle, void** request);
  ncclResult_t (*iflush)(void* collComm, void* data, int size, void* mhandle, void** request);
  ncclResult_t (*test)(void* request, int* done, int* size);
  ncclResult_t (*closeColl)(void* collComm);
  ncclResult_t (*closeListen)(void* listenComm);
} ncclCollNet_v8_t;

/* ---------------------------------------------------------------- versions 9 and 10 (the same members) */
/* Differences from v8: v9 properties, a size_t count, size_t SGE sizes, makeVDevice appended (may be NULL). */
#define NCCL_COLLNET_V9_MEMBERS(PROPS, SGE, VPROPS)                                                                   \
  const char* name;                                                                                                   \
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);                                                                \
  ncclResult_t (*devices)(int* ndev);                                                                                 \
  ncclResult_t (*getProperties)(int dev, PROPS* props);                                                               \
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);                                                   \
  ncclResult_t (*connect)(void* handles[], int nranks, int rank, void* listenComm, void** collComm);                  \
  ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int* supported);                          \
  ncclResult_t (*regMr)(void* collComm, void* data, size_t size, int type, void** mhandle);                           \
  ncclResult_t (*regMrDmaBuf)(void* collComm, void* data, size_t size, int type, uint64_t offset, int fd,             \
                              void** mhandle);                                                                        \
  ncclResult_t (*deregMr)(void* collComm, void* mhandle);                                                             \
  ncclResult_t (*iallreduce)(void* collComm, void* sendData, void* recvData, size_t count, ncclDataType_t dataType,   \
                             ncclRedOp_t redOp, void* sendMhandle, void* recvMhandle, void** request);                \
  ncclResult_t (*iallgather)(void* collComm, void* sendData, int nRecvParts, SGE* recvParts, size_t bytesPerRank,     \
                             size_t windowOffset, size_t windowBytes, void* sendMhandle, void** request);             \
  ncclResult_t (*ireducescatter)(void* collComm, int nSendParts, SGE* sendParts, void* recvData, size_t bytesPerRank, \
                                 size_t windowOffset, size_t windowBytes, ncclDataType_t dataType, ncclRedOp_t redOp, \
                                 void* recvMhandle, void** request);                                                  \
  ncclResult_t (*iflush)(void* collComm, void* data, int size, void* mhandle, void** request);                        \
  ncclResult_t (*test)(void* request, int* done, int* size);                                                          \
  ncclResult_t (*closeColl)(void* collComm);                                                                          \
  ncclResult_t (*closeListen)(void* listenComm);                                                                      \
  ncclResult_t (*makeVDevice)(int* d, VPROPS* props);

typedef struct {
  NCCL_COLLNET_V9_MEMBERS(ncclNetProperties_v9_t, ncclNetSGE_v9_t, ncclNetVDeviceProps_v9_t)
} ncclCollNet_v9_t;
typedef struct {
  NCCL_COLLNET_V9_MEMBERS(ncclNetProperties_v10_t, ncclNetSGE_v10_t, ncclNetVDeviceProps_v10_t)
} ncclCollNet_v10_t;

/* ---------------------------------------------------------------- version 11 */
/* Differences from v10: init takes a per-communicator context and the communicator's id, listen the context;
 * v11 properties; finalize(ctx) appended (never NULL). */
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* handles[], int nranks, int rank, void* listenComm, void** collComm);
  ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int* supported);
  ncclResult_t (*regMr)(void* collComm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* collComm, void* data, size_t size, int type, uint64_t offset, int fd,
                              void** mhandle);
  ncclResult_t (*deregMr)(void* collComm, void* mhandle);
  ncclResult_t (*iallreduce)(void* collComm, void* sendData, void* recvData, size_t count, ncclDataType_t dataType,
                             ncclRedOp_t redOp, void* sendMhandle, void* recvMhandle, void** request);
  ncclResult_t (*iallgather)(void* collComm, void* sendData, int nRecvParts, ncclNetSGE_v11_t* recvParts,
                             size_t bytesPerRank, size_t windowOffset, size_t windowBytes, void* sendMhandle,
                             void** request);
  ncclResult_t (*ireducescatter)(void* collComm, int nSendParts, ncclNetSGE_v11_t* sendParts, void* recvData,
                                 size_t bytesPerRank, size_t windowOffset, size_t windowBytes, ncclDataType_t dataType,
                                 ncclRedOp_t redOp, void* recvMhandle, void** request);
  ncclResult_t (*iflush)(void* collComm, void* data, int size, void* mhandle, void** request);
  ncclResult_t (*test)(void* request, int* done, int* size);
  ncclResult_t (*closeColl)(void* collComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v11_t* props);
  ncclResult_t (*finalize)(void* ctx);
} ncclCollNet_v11_t;

#define COLLNET_NCCL_SYMBOL_V11 "ncclCollNetPlugin_v11"
#define COLLNET_NCCL_SYMBOL_V10 "ncclCollNetPlugin_v10"
#define COLLNET_NCCL_SYMBOL_V9 "ncclCollNetPlugin_v9"
#define COLLNET_NCCL_SYMBOL_V8 "ncclCollNetPlugin_v8"

#ifndef NET_NCCL_ABI_ONLY
#include "comm_collnet.h"
/* transports/collnet/nccl/collnet_nccl.c: wrap the NCCL CollNet plugin the dlopen()ed library `lib` exports
 * (ncclCollNetPlugin_v11, else _v10, _v9, _v8) in a libcomm CollNet table; NULL when it exports none (INFO;
 * a WARN when it exports only an older one). One adapter per process. */
const commCollNet_t* commCollNetNcclWrap(void* lib, const char* what);
#endif

#ifdef __cplusplus
}
#endif
#endif /* COMM_COLLNET_NCCL_H_ */
