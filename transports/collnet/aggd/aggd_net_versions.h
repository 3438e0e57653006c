/* The version glue of aggd_net.c (included at its end): its TCP network as NCCL's ncclNetPlugin_v6 .. _v11
 * tables, each exported where TNET_V6 .. TNET_V11 (aggd_net.c) say, and the dummy of an unsupported version
 * for the refusal test (NCCL_EXAMPLE_NET_VERSION=5). Every table shares aggd_net.c's functions; what a version
 * changes (int sizes, device handles, the v10 config and profiler arguments, v11's context per communicator)
 * is adapted here. SPDX-License-Identifier: Apache-2.0 */
#ifndef COMM_AGGD_NET_VERSIONS_H_
#define COMM_AGGD_NET_VERSIONS_H_

#if TNET_ANY

/* The fields every version has (v6's). */
#define TNET_FILL_PROPS_V6(p, dev)                       \
  do {                                                   \
    memset(&(p), 0, sizeof(p));                          \
    (p).name = tcpDevs[dev].name;                        \
    (p).pciPath = tcpDevs[dev].pciPath;                  \
    (p).guid = ntohl(tcpDevs[dev].addr.sin_addr.s_addr); \
    (p).ptrSupport = NCCL_PTR_HOST;                      \
    (p).speed = tcpDevs[dev].speed;                      \
    (p).maxComms = 65536;                                \
    (p).maxRecvs = 1;                                    \
  } while (0)
/* v7 and later: no device offload. */
#define TNET_FILL_PROPS(p, dev)                             \
  do {                                                      \
    TNET_FILL_PROPS_V6(p, dev);                             \
    (p).netDeviceType = NCCL_NET_DEVICE_HOST;               \
    (p).netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION; \
  } while (0)
/* The fields v9 and later add (forceFlush 0). */
#define TNET_FILL_PROPS_V9(p, dev)      \
  do {                                  \
    TNET_FILL_PROPS(p, dev);            \
    (p).vProps.ndevs = 1;               \
    (p).vProps.devs[0] = dev;           \
    (p).maxP2pBytes = (size_t)1 << 30;  \
    (p).maxCollBytes = (size_t)1 << 30; \
  } while (0)


/* ---------------------------------------------------------------- int sizes (v6 - v8) */

#if TNET_V6 || TNET_V7 || TNET_V8
static ncclResult_t tcpIsendInt(void* sendComm, void* data, int size, int tag, void* mhandle TNET_UNUSED,
                                void** request) {
  if (size < 0) {
    TNET_WARN("isend: size %d", size);
    return ncclInvalidArgument;
  }
  return tcpIsendCommon(sendComm, data, (size_t)size, tag, request);
}

static ncclResult_t tcpIrecvInt(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles TNET_UNUSED,
                                void** request) {
  if (n == 1 && sizes[0] < 0) {
    TNET_WARN("irecv: size %d", sizes[0]);
    return ncclInvalidArgument;
  }
  return tcpIrecvCommon(recvComm, n, data, n == 1 ? (size_t)sizes[0] : 0, tags, request);
}
#endif

#if TNET_V6 || TNET_V7
static ncclResult_t tcpRegMrInt(void* comm, void* data, int size, int type, void** mhandle) {
  if (size < 0) {
    TNET_WARN("regMr: size %d", size);
    return ncclInvalidArgument;
  }
  return tcpRegMr(comm, data, (size_t)size, type, mhandle);
}
#endif

/* ---------------------------------------------------------------- version 6: no device handles */

#if TNET_V6
static ncclResult_t tcpInitV6(ncclDebugLogger_t logFunction) { return tcpInitCommon(logFunction, 6); }

static ncclResult_t tcpGetPropertiesV6(int dev, ncclNetProperties_v6_t* props) {
  if (tcpCheckDev(dev) != ncclSuccess) return ncclInvalidArgument;
  TNET_FILL_PROPS_V6(*props, dev);
  return ncclSuccess;
}

static ncclResult_t tcpConnectV6(int dev, void* handle, void** sendComm) {
  return tcpConnect(dev, handle, sendComm, NULL);
}
static ncclResult_t tcpAcceptV6(void* listenComm, void** recvComm) { return tcpAccept(listenComm, recvComm, NULL); }

TNET_EXPORT ncclNet_v6_t ncclNetPlugin_v6 = {.name = TNET_NAME,
                                             .init = tcpInitV6,
                                             .devices = tcpDevices,
                                             .getProperties = tcpGetPropertiesV6,
                                             .listen = tcpListen,
                                             .connect = tcpConnectV6,
                                             .accept = tcpAcceptV6,
                                             .regMr = tcpRegMrInt,
                                             .regMrDmaBuf = tcpRegMrDmaBuf,
                                             .deregMr = tcpDeregMr,
                                             .isend = tcpIsendInt,
                                             .irecv = tcpIrecvInt,
                                             .iflush = tcpIflush,
                                             .test = tcpTest,
                                             .closeSend = tcpCloseComm,
                                             .closeRecv = tcpCloseComm,
                                             .closeListen = tcpCloseListen};
#endif

/* ---------------------------------------------------------------- version 7: int sizes, device handles */

#if TNET_V7
static ncclResult_t tcpInitV7(ncclDebugLogger_t logFunction) { return tcpInitCommon(logFunction, 7); }

static ncclResult_t tcpGetPropertiesV7(int dev, ncclNetProperties_v7_t* props) {
  if (tcpCheckDev(dev) != ncclSuccess) return ncclInvalidArgument;
  TNET_FILL_PROPS(*props, dev);
  return ncclSuccess;
}

TNET_EXPORT ncclNet_v7_t ncclNetPlugin_v7 = {.name = TNET_NAME,
                                             .init = tcpInitV7,
                                             .devices = tcpDevices,
                                             .getProperties = tcpGetPropertiesV7,
                                             .listen = tcpListen,
                                             .connect = tcpConnect,
                                             .accept = tcpAccept,
                                             .regMr = tcpRegMrInt,
                                             .regMrDmaBuf = tcpRegMrDmaBuf,
                                             .deregMr = tcpDeregMr,
                                             .isend = tcpIsendInt,
                                             .irecv = tcpIrecvInt,
                                             .iflush = tcpIflush,
                                             .test = tcpTest,
                                             .closeSend = tcpCloseComm,
                                             .closeRecv = tcpCloseComm,
                                             .closeListen = tcpCloseListen,
                                             .getDeviceMr = NULL,
                                             .irecvConsumed = NULL};
#endif

/* ---------------------------------------------------------------- versions 8, 9, 10 */

/* The members of every version's table that take the same function. */
#define TNET_TABLE_COMMON                                                                                            \
  .devices = tcpDevices, .listen = tcpListen, .accept = tcpAccept, .regMr = tcpRegMr, .regMrDmaBuf = tcpRegMrDmaBuf, \
  .deregMr = tcpDeregMr, .iflush = tcpIflush, .test = tcpTest, .closeSend = tcpCloseComm, .closeRecv = tcpCloseComm, \
  .closeListen = tcpCloseListen, .getDeviceMr = NULL, .irecvConsumed = NULL

#if TNET_V8
static ncclResult_t tcpInitV8(ncclDebugLogger_t logFunction) { return tcpInitCommon(logFunction, 8); }

static ncclResult_t tcpGetPropertiesV8(int dev, ncclNetProperties_v8_t* props) {
  if (tcpCheckDev(dev) != ncclSuccess) return ncclInvalidArgument;
  TNET_FILL_PROPS(*props, dev);
  return ncclSuccess;
}

#if TNET_EXAMPLE && NCCL_EXAMPLE_NET_VERSION == 10
#define TNET_NAME_V8 TNET_NAME "V8" /* beside v10, which is the one to use */
#else
#define TNET_NAME_V8 TNET_NAME
#endif
TNET_EXPORT ncclNet_v8_t ncclNetPlugin_v8 = {.name = TNET_NAME_V8,
                                             .init = tcpInitV8,
                                             .getProperties = tcpGetPropertiesV8,
                                             .connect = tcpConnect,
                                             .isend = tcpIsendInt,
                                             .irecv = tcpIrecvInt,
                                             TNET_TABLE_COMMON};
#endif

#if TNET_V9
static ncclResult_t tcpInitV9(ncclDebugLogger_t logFunction) { return tcpInitCommon(logFunction, 9); }

static ncclResult_t tcpGetPropertiesV9(int dev, ncclNetProperties_v9_t* props) {
  if (tcpCheckDev(dev) != ncclSuccess) return ncclInvalidArgument;
  TNET_FILL_PROPS_V9(*props, dev);
  return ncclSuccess;
}

static ncclResult_t tcpIsendV9(void* sendComm, void* data, size_t size, int tag, void* mhandle TNET_UNUSED,
                               void** request) {
  return tcpIsendCommon(sendComm, data, size, tag, request);
}

static ncclResult_t tcpIrecvV9(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                               void** mhandles TNET_UNUSED, void** request) {
  return tcpIrecvCommon(recvComm, n, data, n == 1 ? sizes[0] : 0, tags, request);
}

TNET_EXPORT ncclNet_v9_t ncclNetPlugin_v9 = {.name = TNET_NAME,
                                             .init = tcpInitV9,
                                             .getProperties = tcpGetPropertiesV9,
                                             .connect = tcpConnect,
                                             .isend = tcpIsendV9,
                                             .irecv = tcpIrecvV9,
                                             .makeVDevice = NULL,
                                             TNET_TABLE_COMMON};
#endif

#if TNET_V10
/* No network events for the profiler. */
static ncclResult_t tcpInitV10(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction TNET_UNUSED) {
  return tcpInitCommon(logFunction, 10);
}

static ncclResult_t tcpGetPropertiesV10(int dev, ncclNetProperties_v10_t* props) {
  if (tcpCheckDev(dev) != ncclSuccess) return ncclInvalidArgument;
  TNET_FILL_PROPS_V9(*props, dev);
  return ncclSuccess;
}

static ncclResult_t tcpConnectV10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                                  ncclNetDeviceHandle_v10_t** sendDevComm) {
  if (config && config->trafficClass != NCCL_NET_TRAFFIC_CLASS_UNDEF)
    TNET_INFO("traffic class %d requested (ignored)", config->trafficClass);
  return tcpConnect(dev, handle, sendComm, sendDevComm);
}

static ncclResult_t tcpIsendV10(void* sendComm, void* data, size_t size, int tag, void* mhandle TNET_UNUSED,
                                void* phandle TNET_UNUSED, void** request) {
  return tcpIsendCommon(sendComm, data, size, tag, request);
}

static ncclResult_t tcpIrecvV10(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                                void** mhandles TNET_UNUSED, void** phandles TNET_UNUSED, void** request) {
  return tcpIrecvCommon(recvComm, n, data, n == 1 ? sizes[0] : 0, tags, request);
}

#if TNET_EXAMPLE && NCCL_EXAMPLE_NET_VERSION == 11
#define TNET_NAME_V10 TNET_NAME "V10" /* beside v11, which is the one to use */
#else
#define TNET_NAME_V10 TNET_NAME
#endif
TNET_EXPORT ncclNet_v10_t ncclNetPlugin_v10 = {.name = TNET_NAME_V10,
                                               .init = tcpInitV10,
                                               .getProperties = tcpGetPropertiesV10,
                                               .connect = tcpConnectV10,
                                               .isend = tcpIsendV10,
                                               .irecv = tcpIrecvV10,
                                               .makeVDevice = NULL,
                                               TNET_TABLE_COMMON};
#endif

/* ---------------------------------------------------------------- version 11: a context per communicator */

#if TNET_V11
/* What init gives each communicator: listen and connect check that they get it back. */
#define TNET_CTX_MAGIC 0x43545831U /* "CTX1" */
typedef struct {
  uint32_t magic;
  uint64_t commId;
  int trafficClass;
  int listens, connects; /* calls made in this context (atomic) */
} tcpCtx;
static int tcpCtxOpen; /* contexts not finalized yet (atomic) */

static ncclResult_t tcpInitV11(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                               ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction TNET_UNUSED) {
  *ctx = NULL;
  ncclResult_t res = tcpInitCommon(logFunction, 11);
  if (res != ncclSuccess) return res;
  tcpCtx* c = calloc(1, sizeof(*c));
  if (!c) return ncclSystemError;
  *c = (tcpCtx){TNET_CTX_MAGIC, commId, config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF, 0, 0};
  *ctx = c;
  int open = __atomic_add_fetch(&tcpCtxOpen, 1, __ATOMIC_RELAXED);
  TNET_INFO("v11 context for comm 0x%llx (%d open)", (unsigned long long)commId, open);
  return ncclSuccess;
}

static ncclResult_t tcpCheckCtx(void* ctx, const char* what) {
  const tcpCtx* c = (const tcpCtx*)ctx;
  if (c && c->magic == TNET_CTX_MAGIC) return ncclSuccess;
  TNET_WARN("%s: not a context from this plugin's init", what);
  return ncclInvalidArgument;
}

static ncclResult_t tcpFinalizeV11(void* ctx) {
  if (tcpCheckCtx(ctx, "finalize") != ncclSuccess) return ncclInvalidArgument;
  tcpCtx* c = (tcpCtx*)ctx;
  int open = __atomic_sub_fetch(&tcpCtxOpen, 1, __ATOMIC_RELAXED);
  TNET_INFO("v11 context for comm 0x%llx finalized (%d open): %d listen, %d connect calls in it",
            (unsigned long long)c->commId, open, c->listens, c->connects);
  c->magic = 0;
  free(c);
  return ncclSuccess;
}

static ncclResult_t tcpGetPropertiesV11(int dev, ncclNetProperties_v11_t* props) {
  if (tcpCheckDev(dev) != ncclSuccess) return ncclInvalidArgument;
  TNET_FILL_PROPS_V9(*props, dev);
  props->maxMultiRequestSize = 1;
  return ncclSuccess;
}

static ncclResult_t tcpListenV11(void* ctx, int dev, void* handle, void** listenComm) {
  *listenComm = NULL;
  if (tcpCheckCtx(ctx, "listen") != ncclSuccess) return ncclInvalidArgument;
  __atomic_add_fetch(&((tcpCtx*)ctx)->listens, 1, __ATOMIC_RELAXED);
  return tcpListen(dev, handle, listenComm);
}

static ncclResult_t tcpConnectV11(void* ctx, int dev, void* handle, void** sendComm,
                                  ncclNetDeviceHandle_v11_t** sendDevComm) {
  *sendComm = NULL;
  if (tcpCheckCtx(ctx, "connect") != ncclSuccess) return ncclInvalidArgument;
  tcpCtx* c = (tcpCtx*)ctx;
  if (!((tcpHandle*)handle)->pending) __atomic_add_fetch(&c->connects, 1, __ATOMIC_RELAXED); /* a first call */
  return tcpConnect(dev, handle, sendComm, sendDevComm);
}

TNET_EXPORT ncclNet_v11_t ncclNetPlugin_v11 = {.name = TNET_NAME,
                                               .init = tcpInitV11,
                                               .getProperties = tcpGetPropertiesV11,
                                               .listen = tcpListenV11,
                                               .connect = tcpConnectV11,
                                               .isend = tcpIsendV10,
                                               .irecv = tcpIrecvV10,
                                               .makeVDevice = NULL,
                                               .finalize = tcpFinalizeV11,
                                               .setNetAttr = NULL,
                                               .devices = tcpDevices,
                                               .accept = tcpAccept,
                                               .regMr = tcpRegMr,
                                               .regMrDmaBuf = tcpRegMrDmaBuf,
                                               .deregMr = tcpDeregMr,
                                               .iflush = tcpIflush,
                                               .test = tcpTest,
                                               .closeSend = tcpCloseComm,
                                               .closeRecv = tcpCloseComm,
                                               .closeListen = tcpCloseListen,
                                               .getDeviceMr = NULL,
                                               .irecvConsumed = NULL};
#endif

#endif /* TNET_ANY */

/* ---------------------------------------------------------------- an unsupported version */

#if TNET_EXAMPLE && NCCL_EXAMPLE_NET_VERSION == 5
/* Only the symbol of an older NCCL plugin ABI (no NCCL since 2.26 loads it): a loader that takes v6 and later
 * must refuse the library (and never call into this table, which is not a real v5 table). */
TNET_EXPORT struct { const char* name; } ncclNetPlugin_v5 = {TNET_NAME "V5"};
#endif

#endif /* COMM_AGGD_NET_VERSIONS_H_ */
