/* An adapter that lets libcomm use a network plugin written for NCCL (ncclNetPlugin_v10, _v9 or _v8,
 * declared in transports/net/nccl/net_nccl.h) as a libcomm network (include/comm_net.h, commNet_t).
 *
 * transports/net/net.c calls commNetNcclWrap() on a COMM_NET_PLUGIN library that exports none of libcomm's own
 * plugin symbols. The adapter keeps a pointer to the NCCL table and presents a commNet_t whose functions
 * forward to it:
 *  - init: libcomm's logger is kept and the plugin gets an NCCL-shaped logger that formats the message and
 *    hands it on (NCCL WARN/ABORT -> WARN, INFO/VERSION -> INFO, TRACE -> TRACE); v10 also gets a profiler
 *    callback that records nothing.
 *  - getProperties: the common fields are copied; grouped receives are not used (maxRecvs 1: see adTest);
 *    the largest message is maxP2pBytes/maxCollBytes (v9, v10), 1 GiB for v8 (its sizes are int).
 *  - connect/accept: NCCL's "returns success with a NULL comm, call again" is libcomm's contract too, so
 *    they forward as they are (net.c polls them until the deadline). No device offload is requested: the
 *    device handle pointer handed to the plugin points to NULL, as NCCL does for host-side networking.
 *    v10's per-connection config asks for the default traffic class.
 *  - isend/irecv/test: v8's int sizes are checked and converted; irecv profiler handles (v10) are NULL.
 *  - regMr/deregMr/iflush/close*: forwarded. regMrDmaBuf, getDeviceMr, irecvConsumed and makeVDevice are
 *    not used (libcomm registers host memory only and requests no offload).
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

/* NCCL's own cap for plugins that do not say (MAX_NET_SIZE): v8 sizes are int. */
#define AD_DEFAULT_MAX_BYTES ((size_t)1 << 30)

static struct {
  int version; /* 8, 9 or 10; 0: nothing wrapped */
  const ncclNet_v8_t* v8;
  const ncclNet_v9_t* v9;
  const ncclNet_v10_t* v10;
  commNetLogger_t logger; /* libcomm's, from init */
  int offloadNoted;       /* the "device offload is not used" INFO was given */
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

/* v10's network profiler callback: libcomm has no network profiler; a started event gets no handle. */
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
  switch (ad.version) {
    case 10: return adRes(ad.v10->init(adLogger, adProfiler));
    case 9: return adRes(ad.v9->init(adLogger));
    case 8: return adRes(ad.v8->init(adLogger));
    default: return commInternalError;
  }
}

static commResult_t adDevices(int* ndev) {
  *ndev = 0;
  switch (ad.version) {
    case 10: return adRes(ad.v10->devices(ndev));
    case 9: return adRes(ad.v9->devices(ndev));
    case 8: return adRes(ad.v8->devices(ndev));
    default: return commInternalError;
  }
}

/* The fields every version has, from NCCL's properties `p` to ours. */
#define AD_COPY_PROPS(out, p)                                                                                       \
  do {                                                                                                              \
    (out)->name = (p).name;                                                                                         \
    (out)->pciPath = (p).pciPath;                                                                                   \
    (out)->guid = (p).guid;                                                                                         \
    (out)->ptrSupport = (p).ptrSupport & (NCCL_PTR_HOST | NCCL_PTR_CUDA);                                           \
    (out)->speedMbps = (p).speed;                                                                                   \
    (out)->port = (p).port;                                                                                         \
    (out)->latencyUs = (p).latency;                                                                                 \
    (out)->maxComms = (p).maxComms > 0 ? (p).maxComms : 65536;                                                      \
    (out)->maxRecvs = 1;                                                                                            \
    if ((p).netDeviceType != NCCL_NET_DEVICE_HOST && !__atomic_exchange_n(&ad.offloadNoted, 1, __ATOMIC_RELAXED)) { \
      INFO(COMM_NET | COMM_INIT,                                                                                    \
           "NET : NCCL plugin device %d offers device offload type %d: not used "                                   \
           "(libcomm drives it as a host network)",                                                                 \
           dev, (int)(p).netDeviceType);                                                                            \
    }                                                                                                               \
  } while (0)

/* v9/v10: the smaller of the two limits the plugin gives (0: not given). */
static size_t adMaxBytes(size_t p2p, size_t coll) {
  size_t m = p2p;
  if (coll && (!m || coll < m)) m = coll;
  return m ? m : AD_DEFAULT_MAX_BYTES;
}

static commResult_t adGetProperties(int dev, commNetProperties_t* props) {
  memset(props, 0, sizeof(*props));
  ncclResult_t r;
  if (ad.version == 8) {
    ncclNetProperties_v8_t p;
    memset(&p, 0, sizeof(p));
    r = ad.v8->getProperties(dev, &p);
    if (r != ncclSuccess) return adRes(r);
    AD_COPY_PROPS(props, p);
    props->maxMessageBytes = AD_DEFAULT_MAX_BYTES;
  } else if (ad.version == 9) {
    ncclNetProperties_v9_t p;
    memset(&p, 0, sizeof(p));
    r = ad.v9->getProperties(dev, &p);
    if (r != ncclSuccess) return adRes(r);
    AD_COPY_PROPS(props, p);
    props->maxMessageBytes = adMaxBytes(p.maxP2pBytes, p.maxCollBytes);
  } else if (ad.version == 10) {
    ncclNetProperties_v10_t p;
    memset(&p, 0, sizeof(p));
    r = ad.v10->getProperties(dev, &p);
    if (r != ncclSuccess) return adRes(r);
    AD_COPY_PROPS(props, p);
    props->maxMessageBytes = adMaxBytes(p.maxP2pBytes, p.maxCollBytes);
  } else {
    return commInternalError;
  }
  return commSuccess;
}

static commResult_t adListen(int dev, void* handle, void** listenComm) {
  *listenComm = NULL;
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  switch (ad.version) {
    case 10: return adRes(ad.v10->listen(dev, handle, listenComm));
    case 9: return adRes(ad.v9->listen(dev, handle, listenComm));
    case 8: return adRes(ad.v8->listen(dev, handle, listenComm));
    default: return commInternalError;
  }
}

/* NCCL's connect must not block: it returns success with *sendComm NULL until connected and keeps its
 * progress in the handle, which net.c hands back unchanged on every call. That is libcomm's contract. */
static ncclNetCommConfig_v10_t adConfig = {NCCL_NET_TRAFFIC_CLASS_UNDEF};

static commResult_t adConnect(int dev, void* handle, void** sendComm) {
  *sendComm = NULL;
  ncclResult_t r;
  switch (ad.version) {
    case 10: {
      ncclNetDeviceHandle_v10_t* devHandle = NULL;
      r = ad.v10->connect(dev, &adConfig, handle, sendComm, &devHandle);
      break;
    }
    case 9: {
      ncclNetDeviceHandle_v9_t* devHandle = NULL;
      r = ad.v9->connect(dev, handle, sendComm, &devHandle);
      break;
    }
    case 8: {
      ncclNetDeviceHandle_v8_t* devHandle = NULL;
      r = ad.v8->connect(dev, handle, sendComm, &devHandle);
      break;
    }
    default: return commInternalError;
  }
  return adRes(r);
}

static commResult_t adAccept(void* listenComm, void** recvComm) {
  *recvComm = NULL;
  ncclResult_t r;
  switch (ad.version) {
    case 10: {
      ncclNetDeviceHandle_v10_t* devHandle = NULL;
      r = ad.v10->accept(listenComm, recvComm, &devHandle);
      break;
    }
    case 9: {
      ncclNetDeviceHandle_v9_t* devHandle = NULL;
      r = ad.v9->accept(listenComm, recvComm, &devHandle);
      break;
    }
    case 8: {
      ncclNetDeviceHandle_v8_t* devHandle = NULL;
      r = ad.v8->accept(listenComm, recvComm, &devHandle);
      break;
    }
    default: return commInternalError;
  }
  return adRes(r);
}

static commResult_t adRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  *mhandle = NULL;
  switch (ad.version) {
    case 10: return adRes(ad.v10->regMr(comm, data, size, type, mhandle));
    case 9: return adRes(ad.v9->regMr(comm, data, size, type, mhandle));
    case 8: return adRes(ad.v8->regMr(comm, data, size, type, mhandle));
    default: return commInternalError;
  }
}

static commResult_t adDeregMr(void* comm, void* mhandle) {
  switch (ad.version) {
    case 10: return adRes(ad.v10->deregMr(comm, mhandle));
    case 9: return adRes(ad.v9->deregMr(comm, mhandle));
    case 8: return adRes(ad.v8->deregMr(comm, mhandle));
    default: return commInternalError;
  }
}

static commResult_t adIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  *request = NULL;
  switch (ad.version) {
    case 10: return adRes(ad.v10->isend(sendComm, data, size, tag, mhandle, NULL, request));
    case 9: return adRes(ad.v9->isend(sendComm, data, size, tag, mhandle, request));
    case 8:
      if (size > (size_t)INT_MAX) {
        WARN("NET : a send of %zu bytes is too large for an NCCL v8 network plugin (int sizes)", size);
        return commInvalidArgument;
      }
      return adRes(ad.v8->isend(sendComm, data, (int)size, tag, mhandle, request));
    default: return commInternalError;
  }
}

static commResult_t adIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                            void** request) {
  *request = NULL;
  if (n != 1) { /* getProperties says maxRecvs 1 */
    WARN("NET : irecv of %d buffers through the NCCL plugin adapter (1 supported)", n);
    return commInvalidArgument;
  }
  switch (ad.version) {
    case 10: {
      void* phandles[1] = {NULL};
      return adRes(ad.v10->irecv(recvComm, n, data, sizes, tags, mhandles, phandles, request));
    }
    case 9: return adRes(ad.v9->irecv(recvComm, n, data, sizes, tags, mhandles, request));
    case 8: {
      /* A capacity beyond INT_MAX cannot be said in v8: offer INT_MAX (no message is larger). */
      int isize = sizes[0] > (size_t)INT_MAX ? INT_MAX : (int)sizes[0];
      return adRes(ad.v8->irecv(recvComm, n, data, &isize, tags, mhandles, request));
    }
    default: return commInternalError;
  }
}

static commResult_t adIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  *request = NULL;
  switch (ad.version) {
    case 10: return adRes(ad.v10->iflush(recvComm, n, data, sizes, mhandles, request));
    case 9: return adRes(ad.v9->iflush(recvComm, n, data, sizes, mhandles, request));
    case 8: return adRes(ad.v8->iflush(recvComm, n, data, sizes, mhandles, request));
    default: return commInternalError;
  }
}

/* Every request has one buffer (irecv takes n == 1), so one size comes back; the array has room for
 * NCCL_NET_MAX_REQUESTS in case a plugin writes more than it was asked for. test's sizes are int in
 * every version. */
static commResult_t adTest(void* request, int* done, size_t* sizes) {
  int isizes[NCCL_NET_MAX_REQUESTS];
  isizes[0] = 0;
  *done = 0;
  ncclResult_t r;
  switch (ad.version) {
    case 10: r = ad.v10->test(request, done, isizes); break;
    case 9: r = ad.v9->test(request, done, isizes); break;
    case 8: r = ad.v8->test(request, done, isizes); break;
    default: return commInternalError;
  }
  if (r == ncclSuccess && *done && sizes) sizes[0] = isizes[0] > 0 ? (size_t)isizes[0] : 0;
  return adRes(r);
}

static commResult_t adCloseSend(void* sendComm) {
  switch (ad.version) {
    case 10: return adRes(ad.v10->closeSend(sendComm));
    case 9: return adRes(ad.v9->closeSend(sendComm));
    case 8: return adRes(ad.v8->closeSend(sendComm));
    default: return commInternalError;
  }
}

static commResult_t adCloseRecv(void* recvComm) {
  switch (ad.version) {
    case 10: return adRes(ad.v10->closeRecv(recvComm));
    case 9: return adRes(ad.v9->closeRecv(recvComm));
    case 8: return adRes(ad.v8->closeRecv(recvComm));
    default: return commInternalError;
  }
}

static commResult_t adCloseListen(void* listenComm) {
  switch (ad.version) {
    case 10: return adRes(ad.v10->closeListen(listenComm));
    case 9: return adRes(ad.v9->closeListen(listenComm));
    case 8: return adRes(ad.v8->closeListen(listenComm));
    default: return commInternalError;
  }
}

/* ---------------------------------------------------------------- loading */

/* The functions the adapter calls (NULL in a table it cannot use). */
#define AD_REQUIRED(t)                                                                                            \
  ((t)->init && (t)->devices && (t)->getProperties && (t)->listen && (t)->connect && (t)->accept && (t)->regMr && \
   (t)->deregMr && (t)->isend && (t)->irecv && (t)->iflush && (t)->test && (t)->closeSend && (t)->closeRecv &&    \
   (t)->closeListen)

const commNet_t* commNetNcclWrap(void* lib, const char* what) {
  const ncclNet_v10_t* v10 = (const ncclNet_v10_t*)dlsym(lib, NET_NCCL_SYMBOL_V10);
  const ncclNet_v9_t* v9 = v10 ? NULL : (const ncclNet_v9_t*)dlsym(lib, NET_NCCL_SYMBOL_V9);
  const ncclNet_v8_t* v8 = v10 || v9 ? NULL : (const ncclNet_v8_t*)dlsym(lib, NET_NCCL_SYMBOL_V8);
  int version = v10 ? 10 : v9 ? 9 : v8 ? 8 : 0;
  if (!version) {
    /* Say so when the library is an NCCL plugin of a version the adapter does not take. */
    static const char* const older[] = {"ncclNetPlugin_v7", "ncclNetPlugin_v6", "ncclNetPlugin_v5",
                                        "ncclNetPlugin_v4", "ncclNetPlugin_v3", "ncclNetPlugin_v2"};
    for (size_t i = 0; i < sizeof(older) / sizeof(older[0]); i++) {
      if (dlsym(lib, older[i])) {
        WARN("NET : %s is an NCCL network plugin of an unsupported version (it exports %s; libcomm takes "
             "ncclNetPlugin_v8, _v9 or _v10)",
             what, older[i]);
        break;
      }
    }
    return NULL;
  }
  const char* name = v10 ? v10->name : v9 ? v9->name : v8->name;
  int complete = v10 ? AD_REQUIRED(v10) : v9 ? AD_REQUIRED(v9) : AD_REQUIRED(v8);
  if (!complete) {
    WARN("NET : %s exports ncclNetPlugin_v%d (%s) with required functions missing", what, version,
         name ? name : "unnamed");
    return NULL;
  }
  memset(&ad, 0, sizeof(ad));
  ad.version = version;
  ad.v10 = v10;
  ad.v9 = v9;
  ad.v8 = v8;
  memset(&adTable, 0, sizeof(adTable));
  adTable.name = name && name[0] ? name : "NCCL-plugin";
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
