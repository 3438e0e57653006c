/* NCCL's network plugin ABI (versions 6 to 11), declared for libcomm's adapter (transports/net/nccl/net_nccl.c,
 * net_nccl_versions.c) and for the NCCL-shaped networks of transports/collnet/aggd/aggd_net.c.
 *
 * These are our own declarations of the binary interface a library exporting ncclNetPlugin_v6 .. _v11
 * implements: the field order and the types follow NCCL's public plugin headers (read, not copied):
 *   NVIDIA/nccl ext-net/example/nccl/net.h        (NCCL_NET_HANDLE_MAXSIZE, NCCL_PTR_*, NCCL_NET_MAX_REQUESTS)
 *   NVIDIA/nccl ext-net/example/nccl/err.h        (ncclResult_t values)
 *   NVIDIA/nccl ext-net/example/nccl/common.h     (the logger, log levels and subsystems, profiler callback)
 *   NVIDIA/nccl ext-net/example/nccl/net_device.h (ncclNetDeviceType; device handles, used here as opaque)
 *   NVIDIA/nccl ext-net/example/nccl/net_v8.h, net_v9.h, net_v10.h and the same tables in
 *   NVIDIA/nccl src/include/plugin/net/net_v6.h .. net_v11.h (identical layouts; NCCL_NET_MAX_DEVS_PER_NIC 4
 *   in every version, src/include/plugin/nccl_net.h; v11 as in NCCL 2.28 - 2.30).
 * Only the ABI matters: the names of the struct tags here are ours (NCCL's structs are anonymous).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_NET_NCCL_H_
#define COMM_NET_NCCL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- common types (all versions) */

/* The result codes and the logger are also declared by src/tune/tuner_nccl.h (NCCL's tuner ABI); whichever
 * header comes first declares them. */
#ifndef COMM_NCCL_COMMON_TYPES_
#define COMM_NCCL_COMMON_TYPES_

/* NCCL's result codes. 0..7 are in every NCCL release; 8 (ncclTimeout) in recent ones. They have the same
 * values as commResult_t 0..8. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclTimeout = 8
} ncclResult_t;

/* common.h: log levels and subsystem flags handed to the plugin's logger. */
typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

typedef enum {
  NCCL_INIT = 1,
  NCCL_COLL = 2,
  NCCL_P2P = 4,
  NCCL_SHM = 8,
  NCCL_NET = 16,
  NCCL_GRAPH = 32,
  NCCL_TUNING = 64,
  NCCL_ENV = 128,
  NCCL_ALLOC = 256,
  NCCL_CALL = 512,
  NCCL_PROXY = 1024,
  NCCL_NVLS = 2048,
  NCCL_BOOTSTRAP = 4096,
  NCCL_REG = 8192,
  NCCL_ALL = ~0
} ncclDebugLogSubSys;

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);
#endif /* COMM_NCCL_COMMON_TYPES_ */

/* common.h (v10 and later): the network profiler callback given to init, and its event types. */
enum {
  ncclProfilerNetEventStart = 0,
  ncclProfilerNetEventStop = 1,
  ncclProfilerNetEventUpdate = 2,
  ncclProfilerNetEventUpdateAndStop = 3
};
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle, int64_t pluginId,
                                               void* extData);

/* net.h */
#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_NET_MAX_REQUESTS 32
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4

/* net_device.h: the network offload type (an int-sized enum in the properties) and the device handles. The
 * handles are only ever passed by pointer; libcomm requests no offload, so they stay opaque here. */
typedef enum { NCCL_NET_DEVICE_HOST = 0, NCCL_NET_DEVICE_UNPACK = 1 } ncclNetDeviceType;
#define NCCL_NET_DEVICE_INVALID_VERSION 0x0
typedef struct ncclNetDeviceHandle ncclNetDeviceHandle_v7_t;
typedef struct ncclNetDeviceHandle ncclNetDeviceHandle_v8_t;
typedef struct ncclNetDeviceHandle ncclNetDeviceHandle_v9_t;
typedef struct ncclNetDeviceHandle ncclNetDeviceHandle_v10_t;
typedef struct ncclNetDeviceHandle ncclNetDeviceHandle_v11_t;

/* ---------------------------------------------------------------- version 6 (net_v6.h) */
/* The oldest NCCL 2.26 - 2.30 still load. No device offload: connect and accept have no device handle, the
 * properties no offload type nor regIsGlobal; regMr, isend and irecv sizes are int; a comm has at most
 * NCCL_NET_MAX_REQUESTS_V6 requests in flight; no getDeviceMr, irecvConsumed. */

#define NCCL_NET_MAX_REQUESTS_V6 8
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
} ncclNetProperties_v6_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v6_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm);
  ncclResult_t (*regMr)(void* comm, void* data, int size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
} ncclNet_v6_t;

/* ---------------------------------------------------------------- version 7 (net_v7.h) */
/* Differences from v6: the properties gain netDeviceType and netDeviceVersion (after maxRecvs); connect and
 * accept take a device handle; getDeviceMr and irecvConsumed are appended. Sizes stay int (regMr too). */

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v7_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v7_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v7_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v7_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, int size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
} ncclNet_v7_t;

/* ---------------------------------------------------------------- version 8 (net_v8.h) */
/* Differences from v7: the properties gain regIsGlobal (after ptrSupport); regMr takes a size_t size. */

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport; /* NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF */
  int regIsGlobal;
  int speed; /* Mbps */
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  /* Must not block: returns ncclSuccess with *sendComm NULL until connected, and is called again. */
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t** sendDevComm);
  /* Likewise: *recvComm stays NULL until a connection arrived. */
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
} ncclNet_v8_t;

/* ---------------------------------------------------------------- version 9 (net_v9.h) */
/* Differences from v8: the properties gain forceFlush (after regIsGlobal), vProps, maxP2pBytes and
 * maxCollBytes; isend takes a size_t size and irecv size_t sizes (iflush and test keep int); makeVDevice is
 * appended. */

#define NCCL_NET_MAX_DEVS_PER_NIC_V9 4
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V9];
} ncclNetVDeviceProps_v9_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v9_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v9_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v9_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
} ncclNet_v9_t;

/* ---------------------------------------------------------------- version 10 (net_v10.h) */
/* Differences from v9: init also takes the profiler callback; connect takes a per-connection config
 * (traffic class) after dev; isend takes a profiler handle (phandle) and irecv an array of them (phandles),
 * both before request. The properties have the v9 layout. */

#define NCCL_NET_MAX_DEVS_PER_NIC_V10 4
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V10];
} ncclNetVDeviceProps_v10_t;

#define NCCL_NET_TRAFFIC_CLASS_UNDEF -1
typedef struct {
  int trafficClass; /* plugin specific; NCCL_NET_TRAFFIC_CLASS_UNDEF: the plugin's default */
} ncclNetCommConfig_v10_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v10_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v10_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v10_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v10_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v10_t* props);
} ncclNet_v10_t;

/* ---------------------------------------------------------------- version 11 (net_v11.h) */
/* Differences from v10: a context per communicator. init(&ctx, commId, config, logger, profiler) is called for
 * every communicator (the plugin is set up on the first call; devices is asked once), listen and connect take
 * that ctx first, finalize(ctx) is appended (after makeVDevice) and ends it when the communicator goes; the
 * per-communicator config (traffic class) moved from connect to init. The properties gain maxMultiRequestSize
 * (the most requests of one multi-request). setNetAttr(ctx, attr), appended last, may be NULL: hints about the
 * traffic to come (peers and flows per operation). */

/* transports/collnet/nccl/collnet_nccl.h, which includes this header, declares the two v11 property typedefs
 * itself (the same layout): the struct tags below are what the v11 table refers to, in either case. */
#define NCCL_NET_MAX_DEVS_PER_NIC_V11 4
struct ncclNetVDevicePropsV11 {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V11];
};
struct ncclNetPropertiesV11 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  struct ncclNetVDevicePropsV11 vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
};
typedef struct ncclNetVDevicePropsV11 ncclNetVDeviceProps_v11_t;
typedef struct ncclNetPropertiesV11 ncclNetProperties_v11_t;

typedef struct {
  int trafficClass; /* NCCL_NET_TRAFFIC_CLASS_UNDEF: the plugin's default */
} ncclNetCommConfig_v11_t;

#define NCCL_NET_ATTR_UNDEF -1
typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;
typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} ncclNetAttr_v11_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t logFunction,
                       ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, struct ncclNetPropertiesV11* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v11_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, struct ncclNetVDevicePropsV11* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr);
} ncclNet_v11_t;

/* ---------------------------------------------------------------- libcomm's adapter (transports/net/nccl/net_nccl.c) */

#ifndef NET_NCCL_ABI_ONLY
#include "comm_net.h"

/* The plugin symbols the adapter looks for, newest first. */
#define NET_NCCL_SYMBOL_V11 "ncclNetPlugin_v11"
#define NET_NCCL_SYMBOL_V10 "ncclNetPlugin_v10"
#define NET_NCCL_SYMBOL_V9 "ncclNetPlugin_v9"
#define NET_NCCL_SYMBOL_V8 "ncclNetPlugin_v8"
#define NET_NCCL_SYMBOL_V7 "ncclNetPlugin_v7"
#define NET_NCCL_SYMBOL_V6 "ncclNetPlugin_v6"

/* Wrap the NCCL network plugin exported by the dlopen()ed library `lib` (`what` names it in log lines) in a
 * libcomm network table (commNet_t, connectPaired NULL). Tries ncclNetPlugin_v11 .. _v6 in that order.
 * Returns NULL when the library exports none of them; it then WARNs if the library exports an older NCCL
 * version (v5 or below), which is not supported. One adapter per process (net_plugin.c loads one network
 * library at a time): a later call replaces the wrapped table. All the adapter's calls below are made with
 * net_plugin.c's plugin lock held. */
const commNet_t* commNetNcclWrap(void* lib, const char* what);
/* The library is about to be closed: a v11 plugin's process context (the one init made for the first check)
 * is finalized. */
void commNetNcclUnwrap(void);
/* A communicator starts using `net` (the table commNetNcclWrap returned, or any other: then *out = net): for a
 * v11 plugin, its init makes the communicator's context (commId: the communicator's hash, the same on every
 * rank) and *out is a table whose listen and connect pass it; other versions share one table. A failed init is
 * a WARN and an error. */
commResult_t commNetNcclCommInit(const commNet_t* net, uint64_t commId, const commNet_t** out);
/* The communicator of table `net` (from commNetNcclCommInit) is done: a v11 context is finalized. */
void commNetNcclCommFinalize(const commNet_t* net);
/* The adapter's view of whichever version the library exports (net_nccl_versions.c fills it from the table;
 * net_nccl.c drives it): every version's calls in the newest shape, without the device offload, profiler and
 * virtual NIC arguments libcomm does not use. ctx is a v11 plugin's context (ignored by older versions);
 * irecv posts one buffer; int sizes of v6 - v8 are checked there (a size above INT_MAX is a WARN and
 * ncclInvalidArgument). */
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed; /* Mbps */
  int port;
  float latency;
  int maxComms;
  int netDeviceType; /* NCCL_NET_DEVICE_HOST before v7 */
  size_t maxBytes;   /* the smaller of maxP2pBytes and maxCollBytes (v9 and later; 0: not given) */
} netNcclProps;

typedef struct {
  int version; /* 6 .. 11 */
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclDebugLogger_t logFunction, ncclProfilerCallback_t prof);
  ncclResult_t (*finalize)(void* ctx); /* v11 (may be NULL); NULL before */
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, netNcclProps* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, void* data, size_t capacity, int tag, void* mhandle, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
} netNcclOps;

/* net_nccl_versions.c: *ops from the newest ncclNetPlugin_vN (N = 11 .. 6) that lib exports; returns N, or 0
 * when it exports none. *complete is 0 when the table lacks a function the adapter calls. */
int netNcclResolve(void* lib, netNcclOps* ops, int* complete);

/* An NCCL plugin's log line (level, printf format and arguments) to libcomm's logger lg. */
#include <stdarg.h>
void commNetNcclLogV(commNetLogger_t lg, ncclDebugLogLevel level, const char* file, int line, const char* fmt,
                     va_list ap);
#endif

#ifdef __cplusplus
}
#endif
#endif /* COMM_NET_NCCL_H_ */
