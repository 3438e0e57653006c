/* NCCL's network plugin tables, v6 to v11, seen through one shape (netNcclOps, net_nccl.h) that the adapter
 * (net_nccl.c) drives. Per version, what differs from the newest shape is converted here:
 *  - v6: no device handle in connect/accept; regMr, isend, irecv sizes are int; properties without
 *    netDeviceType (a host network) and without message limits;
 *  - v7: connect/accept take a device handle (libcomm passes one pointing to NULL: no offload); sizes int;
 *  - v8: regMr takes size_t; isend/irecv sizes still int;
 *  - v9: isend/irecv sizes size_t; properties give maxP2pBytes, maxCollBytes;
 *  - v10: init takes a profiler callback, connect a per-connection config (the default traffic class),
 *    isend/irecv profiler handles (NULL);
 *  - v11: init makes a per-communicator context (and takes the config), listen and connect take it, finalize
 *    ends it.
 * One library is wrapped per process (net_plugin.c), so the table of each version is a static pointer.
 * SPDX-License-Identifier: Apache-2.0 */
#include <dlfcn.h>
#include <limits.h>
#include <string.h>

#include "comm_net.h"
#include "debug.h"
#include "net_nccl.h"

static const ncclNet_v6_t* t6;
static const ncclNet_v7_t* t7;
static const ncclNet_v8_t* t8;
static const ncclNet_v9_t* t9;
static const ncclNet_v10_t* t10;
static const ncclNet_v11_t* t11;

/* No device offload is requested: the handle pointer the plugin gets points to NULL (v7 - v11 share the type). */
#define NN_NO_DEVCOMM ((ncclNetDeviceHandle_v8_t* [1]){NULL})

/* ---------------------------------------------------------------- int sizes (v6 - v8) */

static ncclResult_t nnIntSize(size_t size, const char* what, int version, int* out) {
  if (size > (size_t)INT_MAX) {
    WARN("NET : %s of %zu bytes is too large for an NCCL v%d network plugin (int sizes)", what, size, version);
    return ncclInvalidArgument;
  }
  *out = (int)size;
  return ncclSuccess;
}

/* A receive capacity beyond INT_MAX cannot be said in int: offer INT_MAX (no message of libcomm is larger). */
static int nnIntCapacity(size_t capacity) { return capacity > (size_t)INT_MAX ? INT_MAX : (int)capacity; }

/* The fields every version has. */
#define NN_PROPS(out, p)                \
  do {                                  \
    memset((out), 0, sizeof(*(out)));   \
    (out)->name = (p).name;             \
    (out)->pciPath = (p).pciPath;       \
    (out)->guid = (p).guid;             \
    (out)->ptrSupport = (p).ptrSupport; \
    (out)->speed = (p).speed;           \
    (out)->port = (p).port;             \
    (out)->latency = (p).latency;       \
    (out)->maxComms = (p).maxComms;     \
  } while (0)

/* The smaller of the two limits (0: not given). */
static size_t nnMaxBytes(size_t p2p, size_t coll) { return coll && (!p2p || coll < p2p) ? coll : p2p; }

/* getProperties of version v into the common shape; X adds what the version has beyond v6's fields. */
#define NN_GET_PROPS(v, ptype, X)                              \
  static ncclResult_t nnProps##v(int dev, netNcclProps* out) { \
    ptype p;                                                   \
    memset(&p, 0, sizeof(p));                                  \
    ncclResult_t r = t##v->getProperties(dev, &p);             \
    if (r != ncclSuccess) return r;                            \
    NN_PROPS(out, p);                                          \
    X;                                                         \
    return ncclSuccess;                                        \
  }
#define NN_OFFLOAD out->netDeviceType = (int)p.netDeviceType
#define NN_LIMITS \
  NN_OFFLOAD;     \
  out->maxBytes = nnMaxBytes(p.maxP2pBytes, p.maxCollBytes)
NN_GET_PROPS(6, ncclNetProperties_v6_t, out->netDeviceType = NCCL_NET_DEVICE_HOST)
NN_GET_PROPS(7, ncclNetProperties_v7_t, NN_OFFLOAD)
NN_GET_PROPS(8, ncclNetProperties_v8_t, NN_OFFLOAD)
NN_GET_PROPS(9, ncclNetProperties_v9_t, NN_LIMITS)
NN_GET_PROPS(10, ncclNetProperties_v10_t, NN_LIMITS)
NN_GET_PROPS(11, struct ncclNetPropertiesV11, NN_LIMITS)

/* init, listen and connect of the versions before v11: no context. */
#define NN_INIT_OLD(v)                                                                                          \
  static ncclResult_t nnInit##v(void** ctx, uint64_t commId, ncclDebugLogger_t lg, ncclProfilerCallback_t pf) { \
    (void)commId;                                                                                               \
    (void)pf;                                                                                                   \
    if (ctx) *ctx = NULL;                                                                                       \
    return t##v->init(lg);                                                                                      \
  }
#define NN_LISTEN_OLD(v)                                                                 \
  static ncclResult_t nnListen##v(void* ctx, int dev, void* handle, void** listenComm) { \
    (void)ctx;                                                                           \
    return t##v->listen(dev, handle, listenComm);                                        \
  }
NN_INIT_OLD(6)
NN_INIT_OLD(7)
NN_INIT_OLD(8)
NN_INIT_OLD(9)
NN_LISTEN_OLD(6)
NN_LISTEN_OLD(7)
NN_LISTEN_OLD(8)
NN_LISTEN_OLD(9)
NN_LISTEN_OLD(10)

/* connect and accept with a device handle that points to NULL (v7 - v9). */
#define NN_CONNECT_DEV(v)                                                               \
  static ncclResult_t nnConnect##v(void* ctx, int dev, void* handle, void** sendComm) { \
    (void)ctx;                                                                          \
    return t##v->connect(dev, handle, sendComm, NN_NO_DEVCOMM);                         \
  }
#define NN_ACCEPT_DEV(v) \
  static ncclResult_t nnAccept##v(void* l, void** recvComm) { return t##v->accept(l, recvComm, NN_NO_DEVCOMM); }
NN_CONNECT_DEV(7)
NN_CONNECT_DEV(8)
NN_CONNECT_DEV(9)
NN_ACCEPT_DEV(7)
NN_ACCEPT_DEV(8)
NN_ACCEPT_DEV(9)
NN_ACCEPT_DEV(10)
NN_ACCEPT_DEV(11)

/* regMr with an int size (v6, v7). */
#define NN_REGMR_INT(v)                                                                           \
  static ncclResult_t nnRegMr##v(void* comm, void* data, size_t size, int type, void** mhandle) { \
    int isize;                                                                                    \
    ncclResult_t r = nnIntSize(size, "a registration", v, &isize);                                \
    return r != ncclSuccess ? r : t##v->regMr(comm, data, isize, type, mhandle);                  \
  }
NN_REGMR_INT(6)
NN_REGMR_INT(7)

/* isend and irecv with int sizes (v6 - v8). */
#define NN_DATA_INT(v)                                                                                            \
  static ncclResult_t nnIsend##v(void* s, void* data, size_t size, int tag, void* mhandle, void** request) {      \
    int isize;                                                                                                    \
    ncclResult_t r = nnIntSize(size, "a send", v, &isize);                                                        \
    return r != ncclSuccess ? r : t##v->isend(s, data, isize, tag, mhandle, request);                             \
  }                                                                                                               \
  static ncclResult_t nnIrecv##v(void* rc, void* data, size_t capacity, int tag, void* mhandle, void** request) { \
    int isize = nnIntCapacity(capacity);                                                                          \
    return t##v->irecv(rc, 1, &data, &isize, &tag, &mhandle, request);                                            \
  }
NN_DATA_INT(6)
NN_DATA_INT(7)
NN_DATA_INT(8)

/* ---------------------------------------------------------------- what differs in each newer version */

static ncclResult_t nnConnect6(void* ctx, int dev, void* handle, void** sendComm) {
  (void)ctx;
  return t6->connect(dev, handle, sendComm);
}

static ncclResult_t nnIrecv9(void* rc, void* data, size_t capacity, int tag, void* mhandle, void** request) {
  return t9->irecv(rc, 1, &data, &capacity, &tag, &mhandle, request);
}

/* v10: the network profiler gets a callback that records nothing (net_nccl.c); every connection asks for the
 * plugin's default traffic class; isend/irecv get NULL profiler handles. */
static ncclNetCommConfig_v10_t nnConfig10 = {NCCL_NET_TRAFFIC_CLASS_UNDEF};

static ncclResult_t nnInit10(void** ctx, uint64_t commId, ncclDebugLogger_t lg, ncclProfilerCallback_t pf) {
  (void)commId;
  if (ctx) *ctx = NULL;
  return t10->init(lg, pf);
}

static ncclResult_t nnConnect10(void* ctx, int dev, void* handle, void** sendComm) {
  (void)ctx;
  return t10->connect(dev, &nnConfig10, handle, sendComm, NN_NO_DEVCOMM);
}

static ncclResult_t nnIsend10(void* s, void* data, size_t size, int tag, void* mhandle, void** request) {
  return t10->isend(s, data, size, tag, mhandle, NULL, request);
}

static ncclResult_t nnIrecv10(void* rc, void* data, size_t capacity, int tag, void* mhandle, void** request) {
  void* phandles[1] = {NULL};
  return t10->irecv(rc, 1, &data, &capacity, &tag, &mhandle, phandles, request);
}

/* v11: the config (the default traffic class) is given once per communicator, with its context. */
static ncclResult_t nnInit11(void** ctx, uint64_t commId, ncclDebugLogger_t lg, ncclProfilerCallback_t pf) {
  ncclNetCommConfig_v11_t config = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
  return t11->init(ctx, commId, &config, lg, pf);
}

static ncclResult_t nnListen11(void* ctx, int dev, void* handle, void** listenComm) {
  return t11->listen(ctx, dev, handle, listenComm);
}

static ncclResult_t nnConnect11(void* ctx, int dev, void* handle, void** sendComm) {
  return t11->connect(ctx, dev, handle, sendComm, NN_NO_DEVCOMM);
}

static ncclResult_t nnIsend11(void* s, void* data, size_t size, int tag, void* mhandle, void** request) {
  return t11->isend(s, data, size, tag, mhandle, NULL, request);
}

static ncclResult_t nnIrecv11(void* rc, void* data, size_t capacity, int tag, void* mhandle, void** request) {
  void* phandles[1] = {NULL};
  return t11->irecv(rc, 1, &data, &capacity, &tag, &mhandle, phandles, request);
}

/* ---------------------------------------------------------------- resolving a library */

/* The functions the adapter calls. */
#define NN_REQUIRED(t)                                                                                            \
  ((t)->init && (t)->devices && (t)->getProperties && (t)->listen && (t)->connect && (t)->accept && (t)->regMr && \
   (t)->deregMr && (t)->isend && (t)->irecv && (t)->iflush && (t)->test && (t)->closeSend && (t)->closeRecv &&    \
   (t)->closeListen)

/* The members that keep their type in every version. */
#define NN_SAME(ops, t)                    \
  do {                                     \
    (ops)->name = (t)->name;               \
    (ops)->devices = (t)->devices;         \
    (ops)->deregMr = (t)->deregMr;         \
    (ops)->iflush = (t)->iflush;           \
    (ops)->test = (t)->test;               \
    (ops)->closeSend = (t)->closeSend;     \
    (ops)->closeRecv = (t)->closeRecv;     \
    (ops)->closeListen = (t)->closeListen; \
    *complete = NN_REQUIRED(t);            \
  } while (0)

/* The versions' shims, by the version's number. */
#define NN_OPS(ops, v, initFn, listenFn, connectFn, acceptFn, regMrFn, isendFn, irecvFn) \
  do {                                                                                   \
    (ops)->version = v;                                                                  \
    (ops)->init = initFn;                                                                \
    (ops)->getProperties = nnProps##v;                                                   \
    (ops)->listen = listenFn;                                                            \
    (ops)->connect = connectFn;                                                          \
    (ops)->accept = acceptFn;                                                            \
    (ops)->regMr = regMrFn;                                                              \
    (ops)->isend = isendFn;                                                              \
    (ops)->irecv = irecvFn;                                                              \
    NN_SAME(ops, t##v);                                                                  \
  } while (0)

int netNcclResolve(void* lib, netNcclOps* ops, int* complete) {
  memset(ops, 0, sizeof(*ops));
  *complete = 0;
  t6 = NULL, t7 = NULL, t8 = NULL, t9 = NULL, t10 = NULL, t11 = NULL;
  if ((t11 = (const ncclNet_v11_t*)dlsym(lib, NET_NCCL_SYMBOL_V11))) {
    NN_OPS(ops, 11, nnInit11, nnListen11, nnConnect11, nnAccept11, t11->regMr, nnIsend11, nnIrecv11);
    ops->finalize = t11->finalize;
  } else if ((t10 = (const ncclNet_v10_t*)dlsym(lib, NET_NCCL_SYMBOL_V10))) {
    NN_OPS(ops, 10, nnInit10, nnListen10, nnConnect10, nnAccept10, t10->regMr, nnIsend10, nnIrecv10);
  } else if ((t9 = (const ncclNet_v9_t*)dlsym(lib, NET_NCCL_SYMBOL_V9))) {
    NN_OPS(ops, 9, nnInit9, nnListen9, nnConnect9, nnAccept9, t9->regMr, t9->isend, nnIrecv9);
  } else if ((t8 = (const ncclNet_v8_t*)dlsym(lib, NET_NCCL_SYMBOL_V8))) {
    NN_OPS(ops, 8, nnInit8, nnListen8, nnConnect8, nnAccept8, t8->regMr, nnIsend8, nnIrecv8);
  } else if ((t7 = (const ncclNet_v7_t*)dlsym(lib, NET_NCCL_SYMBOL_V7))) {
    NN_OPS(ops, 7, nnInit7, nnListen7, nnConnect7, nnAccept7, nnRegMr7, nnIsend7, nnIrecv7);
  } else if ((t6 = (const ncclNet_v6_t*)dlsym(lib, NET_NCCL_SYMBOL_V6))) {
    NN_OPS(ops, 6, nnInit6, nnListen6, nnConnect6, t6->accept, nnRegMr6, nnIsend6, nnIrecv6);
  }
  return ops->version;
}
