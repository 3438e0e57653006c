/* An adapter that lets libcomm use a network plugin written for NCCL (ncclNetPlugin_v11 .. _v6, declared in
 * transports/net/nccl/net_nccl.h) as a libcomm network (include/comm_net.h, commNet_t).
 *
 * transports/net/net_plugin.c calls commNetNcclWrap() on a library that exports none of libcomm's own plugin
 * symbols. net_nccl_versions.c presents the version the library exports in one shape (netNcclOps); this file
 * presents that as a commNet_t:
 *  - init: libcomm's logger is kept and the plugin gets an NCCL-shaped logger that formats the message and
 *    hands it on (NCCL WARN/ABORT -> WARN, INFO/VERSION -> INFO, TRACE -> TRACE); v10 and v11 also get a
 *    profiler callback that records nothing. For v11 this first init makes the process's context, used to
 *    check the plugin (devices) and by communicators when no per-communicator table is free (below).
 *  - getProperties: the common fields are copied; grouped receives are not used (maxRecvs 1: see adTest);
 *    the largest message is maxP2pBytes/maxCollBytes (v9 and later), else 1 GiB (NCCL's own default).
 *  - connect/accept: NCCL's "returns success with a NULL comm, call again" is libcomm's contract too, so
 *    they forward as they are (net.c polls them until the deadline). No device offload is requested.
 *  - isend/irecv/test: sizes converted (net_nccl_versions.c); profiler handles (v10, v11) are NULL.
 *  - regMr/deregMr/iflush/close*: forwarded. regMrDmaBuf, getDeviceMr, irecvConsumed, makeVDevice and
 *    setNetAttr are not used (libcomm registers host memory only and requests no offload).
 *  - v11's context per communicator: commNetNcclCommInit calls init for the communicator (commId: its hash)
 *    and gives it a table of its own, whose listen and connect pass that context (AD_SLOTS tables, each with
 *    its own two functions, since a commNet_t's functions take no context); commNetNcclCommFinalize calls
 *    finalize. A communicator that finds every table in use shares the process's context (an INFO says so).
 * The connect handle is NCCL_NET_HANDLE_MAXSIZE (128) bytes, within libcomm's COMM_NET_HANDLE_MAXSIZE.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "comm_net.h"
#include "debug.h"
#include "net_nccl.h"

_Static_assert(NCCL_NET_HANDLE_MAXSIZE <= COMM_NET_HANDLE_MAXSIZE,
               "an NCCL plugin's connect handle must fit in libcomm's");
_Static_assert(NCCL_PTR_HOST == COMM_PTR_HOST && NCCL_PTR_CUDA == COMM_PTR_CUDA, "pointer types differ");
_Static_assert((int)ncclSuccess == (int)commSuccess && (int)ncclSystemError == (int)commSystemError &&
                   (int)ncclInternalError == (int)commInternalError &&
                   (int)ncclInvalidArgument == (int)commInvalidArgument &&
                   (int)ncclInvalidUsage == (int)commInvalidUsage && (int)ncclRemoteError == (int)commRemoteError &&
                   (int)ncclInProgress == (int)commInProgress && (int)ncclTimeout == (int)commTimeout,
               "NCCL's result codes are libcomm's 0..8");

/* NCCL's own cap for plugins that do not say (MAX_NET_SIZE). */
#define AD_DEFAULT_MAX_BYTES ((size_t)1 << 30)

static struct {
  netNcclOps ops;         /* version 0: nothing wrapped */
  commNetLogger_t logger; /* libcomm's, from init */
  int offloadNoted;       /* the "device offload is not used" INFO was given */
  void* processCtx;       /* v11: the context of the first init */
  int processInit;        /* that init succeeded (finalize it at unwrap) */
  int sharedNoted;        /* the "every per-communicator table is in use" INFO was given */
} ad;

static commNet_t adTable;

/* NCCL's result codes 0..8 are libcomm's; anything else is an internal error. */
static commResult_t adRes(ncclResult_t r) {
  unsigned v = (unsigned)r;
  return v <= (unsigned)ncclTimeout ? (commResult_t)v : commInternalError;
}

/* ---------------------------------------------------------------- logging and profiling callbacks */

void commNetNcclLogV(commNetLogger_t lg, ncclDebugLogLevel level, const char* file, int line, const char* fmt,
                     va_list ap) {
  if (!lg || level == NCCL_LOG_NONE || !fmt) return;
  commNetLogLevel_t ours;
  commLogLevel_t lvl;
  if (level == NCCL_LOG_WARN || level == NCCL_LOG_ABORT) {
    ours = COMM_NET_LOG_WARN;
    lvl = COMM_LOG_WARN;
  } else if (level == NCCL_LOG_TRACE) {
    ours = COMM_NET_LOG_TRACE;
    lvl = COMM_LOG_TRACE;
  } else {
    ours = COMM_NET_LOG_INFO;
    lvl = COMM_LOG_INFO;
  }
  if (lvl != COMM_LOG_WARN && !COMM_LOG_ENABLED((int)lvl)) return; /* do not format what nobody reads */
  char buf[1024];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  lg(ours, file ? file : "?", line, "%s", buf);
}

static void adLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags;
  va_list ap;
  va_start(ap, fmt);
  commNetNcclLogV(ad.logger, level, file, line, fmt, ap);
  va_end(ap);
}

/* v10/v11's network profiler callback: libcomm has no network profiler; a started event gets no handle. */
static ncclResult_t adProfiler(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData) {
  (void)pHandle;
  (void)pluginId;
  (void)extData;
  if (type == ncclProfilerNetEventStart && eHandle) *eHandle = NULL;
  return ncclSuccess;
}

/* ---------------------------------------------------------------- the commNet_t functions */

static commResult_t adInit(commNetLogger_t logger) {
  ad.logger = logger;
  if (!ad.ops.version) return commInternalError;
  ad.processCtx = NULL;
  commResult_t res = adRes(ad.ops.init(&ad.processCtx, 0, adLogger, adProfiler));
  ad.processInit = res == commSuccess;
  return res;
}

static commResult_t adDevices(int* ndev) {
  *ndev = 0;
  return adRes(ad.ops.devices(ndev));
}

static commResult_t adGetProperties(int dev, commNetProperties_t* props) {
  memset(props, 0, sizeof(*props));
  netNcclProps p;
  ncclResult_t r = ad.ops.getProperties(dev, &p);
  if (r != ncclSuccess) return adRes(r);
  props->name = p.name;
  props->pciPath = p.pciPath;
  props->guid = p.guid;
  props->ptrSupport = p.ptrSupport & (NCCL_PTR_HOST | NCCL_PTR_CUDA);
  props->speedMbps = p.speed;
  props->port = p.port;
  props->latencyUs = p.latency;
  props->maxComms = p.maxComms > 0 ? p.maxComms : 65536;
  props->maxRecvs = 1;
  props->maxMessageBytes = p.maxBytes ? p.maxBytes : AD_DEFAULT_MAX_BYTES;
  if (p.netDeviceType != NCCL_NET_DEVICE_HOST && !__atomic_exchange_n(&ad.offloadNoted, 1, __ATOMIC_RELAXED))
    INFO(COMM_NET | COMM_INIT,
         "NET : NCCL plugin device %d offers device offload type %d: not used (libcomm drives it as a host network)",
         dev, p.netDeviceType);
  return commSuccess;
}

/* listen and connect in a context (v11; ignored by older versions). NCCL's connect must not block: it returns
 * success with *sendComm NULL until connected and keeps its progress in the handle, which net.c hands back
 * unchanged on every call. That is libcomm's contract. */
static commResult_t adListenIn(void* ctx, int dev, void* handle, void** listenComm) {
  *listenComm = NULL;
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  return adRes(ad.ops.listen(ctx, dev, handle, listenComm));
}

static commResult_t adConnectIn(void* ctx, int dev, void* handle, void** sendComm) {
  *sendComm = NULL;
  return adRes(ad.ops.connect(ctx, dev, handle, sendComm));
}

static commResult_t adListen(int dev, void* handle, void** listenComm) {
  return adListenIn(ad.processCtx, dev, handle, listenComm);
}

static commResult_t adConnect(int dev, void* handle, void** sendComm) {
  return adConnectIn(ad.processCtx, dev, handle, sendComm);
}

static commResult_t adAccept(void* listenComm, void** recvComm) {
  *recvComm = NULL;
  return adRes(ad.ops.accept(listenComm, recvComm));
}

static commResult_t adRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  *mhandle = NULL;
  return adRes(ad.ops.regMr(comm, data, size, type, mhandle));
}

static commResult_t adDeregMr(void* comm, void* mhandle) { return adRes(ad.ops.deregMr(comm, mhandle)); }

static commResult_t adIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  *request = NULL;
  return adRes(ad.ops.isend(sendComm, data, size, tag, mhandle, request));
}

static commResult_t adIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                            void** request) {
  *request = NULL;
  if (n != 1) { /* getProperties says maxRecvs 1 */
    WARN("NET : irecv of %d buffers through the NCCL plugin adapter (1 supported)", n);
    return commInvalidArgument;
  }
  return adRes(ad.ops.irecv(recvComm, data[0], sizes[0], tags ? tags[0] : 0, mhandles ? mhandles[0] : NULL, request));
}

static commResult_t adIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  *request = NULL;
  return adRes(ad.ops.iflush(recvComm, n, data, sizes, mhandles, request));
}

/* Every request has one buffer (irecv takes n == 1), so one size comes back; the array has room for
 * NCCL_NET_MAX_REQUESTS in case a plugin writes more than it was asked for. test's sizes are int in
 * every version. */
static commResult_t adTest(void* request, int* done, size_t* sizes) {
  int isizes[NCCL_NET_MAX_REQUESTS];
  isizes[0] = 0;
  *done = 0;
  ncclResult_t r = ad.ops.test(request, done, isizes);
  if (r == ncclSuccess && *done && sizes) sizes[0] = isizes[0] > 0 ? (size_t)isizes[0] : 0;
  return adRes(r);
}

static commResult_t adCloseSend(void* sendComm) { return adRes(ad.ops.closeSend(sendComm)); }
static commResult_t adCloseRecv(void* recvComm) { return adRes(ad.ops.closeRecv(recvComm)); }
static commResult_t adCloseListen(void* listenComm) { return adRes(ad.ops.closeListen(listenComm)); }

/* ---------------------------------------------------------------- v11: a context per communicator */

/* A communicator's table: adTable with listen and connect of its slot, which pass the slot's context. The
 * context is set before the table is handed out and stays until the communicator is done with it. */
#define AD_SLOTS 32
static struct {
  int used;
  void* ctx;
  commNet_t table;
} adSlot[AD_SLOTS];

#define AD_SLOT_FNS(k)                                                        \
  static commResult_t adListen##k(int dev, void* handle, void** listenComm) { \
    return adListenIn(adSlot[k].ctx, dev, handle, listenComm);                \
  }                                                                           \
  static commResult_t adConnect##k(int dev, void* handle, void** sendComm) {  \
    return adConnectIn(adSlot[k].ctx, dev, handle, sendComm);                 \
  }
#define AD_SLOT_ENTRY(k) {adListen##k, adConnect##k},
// clang-format off
#define AD_FOR_SLOTS(X) \
  X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) \
  X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23) X(24) X(25) X(26) X(27) X(28) X(29) X(30) X(31)
// clang-format on
AD_FOR_SLOTS(AD_SLOT_FNS)
static const struct {
  commResult_t (*listen)(int dev, void* handle, void** listenComm);
  commResult_t (*connect)(int dev, void* handle, void** sendComm);
} adSlotFns[AD_SLOTS] = {AD_FOR_SLOTS(AD_SLOT_ENTRY)};

commResult_t commNetNcclCommInit(const commNet_t* net, uint64_t commId, const commNet_t** out) {
  *out = net;
  if (net != &adTable || ad.ops.version != 11) return commSuccess;
  int k = 0;
  while (k < AD_SLOTS && adSlot[k].used) k++;
  if (k == AD_SLOTS) {
    if (!ad.sharedNoted++)
      INFO(COMM_NET | COMM_INIT,
           "NET : %d communicators use NCCL plugin %s at once: more share the context of its first init", AD_SLOTS,
           adTable.name);
    return commSuccess;
  }
  void* ctx = NULL;
  ncclResult_t r = ad.ops.init(&ctx, commId, adLogger, adProfiler);
  if (r != ncclSuccess) {
    WARN("NET : NCCL plugin %s (ncclNetPlugin_v11) failed to initialise a communicator's context (error %d)",
         adTable.name, (int)r);
    return adRes(r) == commSuccess ? commInternalError : adRes(r);
  }
  adSlot[k].used = 1;
  adSlot[k].ctx = ctx;
  adSlot[k].table = adTable;
  adSlot[k].table.listen = adSlotFns[k].listen;
  adSlot[k].table.connect = adSlotFns[k].connect;
  *out = &adSlot[k].table;
  INFO(COMM_NET | COMM_INIT, "NET : NCCL plugin %s: a context for communicator 0x%llx (ncclNetPlugin_v11 init)",
       adTable.name, (unsigned long long)commId);
  return commSuccess;
}

void commNetNcclCommFinalize(const commNet_t* net) {
  for (int k = 0; k < AD_SLOTS; k++) {
    if (!adSlot[k].used || net != &adSlot[k].table) continue;
    ncclResult_t r = ad.ops.finalize ? ad.ops.finalize(adSlot[k].ctx) : ncclSuccess;
    if (r != ncclSuccess) WARN("NET : NCCL plugin %s: finalize of a communicator's context failed (%d)", net->name, r);
    memset(&adSlot[k], 0, sizeof(adSlot[k]));
    return;
  }
}

/* ---------------------------------------------------------------- loading */

void commNetNcclUnwrap(void) {
  if (ad.ops.version == 11 && ad.processInit && ad.ops.finalize) ad.ops.finalize(ad.processCtx);
  memset(&ad, 0, sizeof(ad));
  memset(adSlot, 0, sizeof(adSlot));
}

const commNet_t* commNetNcclWrap(void* lib, const char* what) {
  netNcclOps ops;
  int complete = 0;
  int version = netNcclResolve(lib, &ops, &complete);
  if (!version) {
    /* Say so when the library is an NCCL plugin of a version the adapter does not take. */
    static const char* const older[] = {"ncclNetPlugin_v5", "ncclNetPlugin_v4", "ncclNetPlugin_v3", "ncclNetPlugin_v2",
                                        "ncclNetPlugin_v1"};
    for (size_t i = 0; i < sizeof(older) / sizeof(older[0]); i++) {
      if (dlsym(lib, older[i])) {
        WARN("NET : %s is an NCCL network plugin of an unsupported version (it exports %s; libcomm takes "
             "ncclNetPlugin_v6 to _v11)",
             what, older[i]);
        break;
      }
    }
    return NULL;
  }
  if (!complete) {
    WARN("NET : %s exports ncclNetPlugin_v%d (%s) with required functions missing", what, version,
         ops.name ? ops.name : "unnamed");
    return NULL;
  }
  memset(&ad, 0, sizeof(ad));
  memset(adSlot, 0, sizeof(adSlot));
  ad.ops = ops;
  memset(&adTable, 0, sizeof(adTable));
  adTable.name = ops.name && ops.name[0] ? ops.name : "NCCL-plugin";
  adTable.version = COMM_NET_PLUGIN_VERSION;
  adTable.init = adInit;
  adTable.devices = adDevices;
  adTable.getProperties = adGetProperties;
  adTable.listen = adListen;
  adTable.connect = adConnect;
  adTable.accept = adAccept;
  adTable.regMr = adRegMr;
  adTable.deregMr = adDeregMr;
  adTable.isend = adIsend;
  adTable.irecv = adIrecv;
  adTable.iflush = adIflush;
  adTable.test = adTest;
  adTable.closeSend = adCloseSend;
  adTable.closeRecv = adCloseRecv;
  adTable.closeListen = adCloseListen;
  adTable.connectPaired = NULL;
  INFO(COMM_NET | COMM_INIT, "NET : loaded NCCL net plugin %s (ncclNetPlugin_v%d) from %s through the adapter",
       adTable.name, version, what);
  return &adTable;
}
