/* NCCL's CollNet plugins (ncclCollNetPlugin_v11, _v10, _v9, _v8, declared in collnet_nccl.h) as a libcomm
 * CollNet table (include/comm_collnet.h, commCollNet_t).
 *
 * What the adapter does beyond passing calls through:
 *  - init: v11 takes a context per communicator; v8..v10 are initialised once per process (a count of the
 *    communicators using them), as NCCL does.
 *  - connect returns a wrapper of NCCL's collComm that remembers the group's size, which the windowed
 *    allgather and reduce-scatter of NCCL's ABI need (one window covering the whole buffer).
 *  - properties: v8 has no maxCollBytes (NCCL assumes 512 MiB); a v9+ value outside (0, 1 TiB] is refused, as
 *    NCCL refuses it. v8's counts and sizes are int: an operation above INT_MAX is refused.
 *  - test passes an int size and widens it; flushes may be tested with size NULL.
 * One adapter per process (one collnet library is loaded at a time). SPDX-License-Identifier: Apache-2.0 */
#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "collnet_nccl.h"
#include "datatype.h"
#include "debug.h"
#include "transport.h"

#define AD_V8_MAX_COLL_BYTES ((size_t)512 << 20) /* what NCCL assumes for v8 */
#define AD_MAX_COLL_BYTES ((size_t)1 << 40)      /* NCCL's upper bound on maxCollBytes */
#define AD_INFLIGHT 32                           /* NCCL keeps at least 8 per channel on one collComm */

static struct {
  int version; /* 8..11; 0: nothing wrapped */
  const ncclCollNet_v8_t* v8;
  const ncclCollNet_v9_t* v9; /* v9 and v10 have the same members */
  const ncclCollNet_v11_t* v11;
  int initRefs; /* v8..v10: communicators using the process-wide init */
  commNetLogger_t logger;
} ad;

static commCollNet_t adTable;

typedef struct {
  void* coll; /* NCCL's collComm */
  int nranks, rank;
} adColl;

typedef struct {
  void* nctx; /* v11's context */
} adCtx;

static commResult_t adRes(ncclResult_t r) {
  unsigned v = (unsigned)r;
  return v <= (unsigned)ncclTimeout ? (commResult_t)v : commInternalError;
}

static void adLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags;
  va_list ap;
  va_start(ap, fmt);
  commNetNcclLogV(ad.logger, level, file, line, fmt, ap);
  va_end(ap);
}

static commResult_t adInit(void** ctx, uint64_t commId, commNetLogger_t logger) {
  ad.logger = logger;
  adCtx* c = calloc(1, sizeof(*c));
  if (!c) return commSystemError;
  commResult_t res = commSuccess;
  if (ad.version == 11) {
    res = adRes(ad.v11->init(&c->nctx, commId, adLogger));
  } else if (__atomic_fetch_add(&ad.initRefs, 1, __ATOMIC_ACQ_REL) == 0) {
    res = adRes(ad.version == 8 ? ad.v8->init(adLogger) : ad.v9->init(adLogger));
    if (res != commSuccess) __atomic_fetch_sub(&ad.initRefs, 1, __ATOMIC_ACQ_REL);
  }
  if (res != commSuccess) {
    free(c);
    return res;
  }
  *ctx = c;
  return commSuccess;
}

static commResult_t adFinalize(void* ctx) {
  adCtx* c = ctx;
  commResult_t res = commSuccess;
  if (ad.version == 11) res = adRes(ad.v11->finalize(c ? c->nctx : NULL));
  else __atomic_fetch_sub(&ad.initRefs, 1, __ATOMIC_ACQ_REL);
  free(c);
  return res;
}

static commResult_t adDevices(int* ndev) {
  *ndev = 0;
  if (ad.version == 11) return adRes(ad.v11->devices(ndev));
  return adRes(ad.version == 8 ? ad.v8->devices(ndev) : ad.v9->devices(ndev));
}

#define AD_COPY_PROPS(out, p)                                             \
  do {                                                                    \
    (out)->name = (p).name;                                               \
    (out)->pciPath = (p).pciPath;                                         \
    (out)->guid = (p).guid;                                               \
    (out)->ptrSupport = (p).ptrSupport & (NCCL_PTR_HOST | NCCL_PTR_CUDA); \
    (out)->speedMbps = (p).speed;                                         \
    (out)->latencyUs = (p).latency;                                       \
    (out)->maxComms = (p).maxComms > 0 ? (p).maxComms : 65536;            \
    (out)->maxInflight = AD_INFLIGHT;                                     \
  } while (0)

static commResult_t adCollBytes(int dev, size_t v, size_t* out) {
  if (v == 0 || v > AD_MAX_COLL_BYTES) {
    WARN("COLLNET : NCCL plugin device %d reports maxCollBytes %zu, outside (0, 1 TiB]", dev, v);
    return commInternalError;
  }
  *out = v;
  return commSuccess;
}

static commResult_t adGetProperties(int dev, commCollNetProperties_t* props) {
  memset(props, 0, sizeof(*props));
  if (ad.version == 8) {
    ncclNetProperties_v8_t p;
    memset(&p, 0, sizeof(p));
    commResult_t res = adRes(ad.v8->getProperties(dev, &p));
    if (res != commSuccess) return res;
    AD_COPY_PROPS(props, p);
    props->maxCollBytes = AD_V8_MAX_COLL_BYTES;
    return commSuccess;
  }
  if (ad.version == 11) {
    ncclNetProperties_v11_t p;
    memset(&p, 0, sizeof(p));
    commResult_t res = adRes(ad.v11->getProperties(dev, &p));
    if (res != commSuccess) return res;
    AD_COPY_PROPS(props, p);
    return adCollBytes(dev, p.maxCollBytes, &props->maxCollBytes);
  }
  ncclNetProperties_v9_t p; /* v10's layout is v9's */
  memset(&p, 0, sizeof(p));
  commResult_t res = adRes(ad.v9->getProperties(dev, &p));
  if (res != commSuccess) return res;
  AD_COPY_PROPS(props, p);
  return adCollBytes(dev, p.maxCollBytes, &props->maxCollBytes);
}

static commResult_t adListen(void* ctx, int dev, void* handle, void** listenComm) {
  *listenComm = NULL;
  if (ad.version == 11) return adRes(ad.v11->listen(ctx ? ((adCtx*)ctx)->nctx : NULL, dev, handle, listenComm));
  return adRes(ad.version == 8 ? ad.v8->listen(dev, handle, listenComm) : ad.v9->listen(dev, handle, listenComm));
}

static commResult_t adConnect(void* handles[], int nranks, int rank, void* listenComm, void** collComm) {
  *collComm = NULL;
  adColl* w = calloc(1, sizeof(*w));
  if (!w) return commSystemError;
  ncclResult_t r = ad.version == 11  ? ad.v11->connect(handles, nranks, rank, listenComm, &w->coll)
                   : ad.version == 8 ? ad.v8->connect(handles, nranks, rank, listenComm, &w->coll)
                                     : ad.v9->connect(handles, nranks, rank, listenComm, &w->coll);
  if (r != ncclSuccess || w->coll == NULL) {
    if (r == ncclSuccess) WARN("COLLNET : the NCCL plugin's connect succeeded without a group (collComm NULL)");
    free(w);
    return r == ncclSuccess ? commInternalError : adRes(r);
  }
  w->nranks = nranks;
  w->rank = rank;
  *collComm = w;
  return commSuccess;
}

static commResult_t adReduceSupport(commDataType_t type, commRedOp_t op, int* supported) {
  *supported = 0;
  ncclResult_t r = ad.version == 11  ? ad.v11->reduceSupport((ncclDataType_t)type, (ncclRedOp_t)op, supported)
                   : ad.version == 8 ? ad.v8->reduceSupport((ncclDataType_t)type, (ncclRedOp_t)op, supported)
                                     : ad.v9->reduceSupport((ncclDataType_t)type, (ncclRedOp_t)op, supported);
  *supported = *supported ? 1 : 0;
  return adRes(r);
}

static commResult_t adRegMr(void* collComm, void* data, size_t size, int type, void** mhandle) {
  void* c = ((adColl*)collComm)->coll;
  *mhandle = NULL;
  if (ad.version == 11) return adRes(ad.v11->regMr(c, data, size, type, mhandle));
  return adRes(ad.version == 8 ? ad.v8->regMr(c, data, size, type, mhandle)
                               : ad.v9->regMr(c, data, size, type, mhandle));
}

static commResult_t adDeregMr(void* collComm, void* mhandle) {
  void* c = ((adColl*)collComm)->coll;
  if (ad.version == 11) return adRes(ad.v11->deregMr(c, mhandle));
  return adRes(ad.version == 8 ? ad.v8->deregMr(c, mhandle) : ad.v9->deregMr(c, mhandle));
}

static commResult_t adIallreduce(void* collComm, void* sendData, void* recvData, size_t count, commDataType_t type,
                                 commRedOp_t op, void* sendMh, void* recvMh, void** request) {
  void* c = ((adColl*)collComm)->coll;
  *request = NULL;
  ncclDataType_t t = (ncclDataType_t)type;
  ncclRedOp_t o = (ncclRedOp_t)op;
  if (ad.version == 11) return adRes(ad.v11->iallreduce(c, sendData, recvData, count, t, o, sendMh, recvMh, request));
  if (ad.version != 8) return adRes(ad.v9->iallreduce(c, sendData, recvData, count, t, o, sendMh, recvMh, request));
  if (count > (size_t)INT_MAX) {
    WARN("COLLNET : an allreduce of %zu elements is too big for an NCCL v8 CollNet plugin (int counts)", count);
    return commInternalError;
  }
  return adRes(ad.v8->iallreduce(c, sendData, recvData, (int)count, t, o, sendMh, recvMh, request));
}

/* One window over the whole nranks x bytesPerRank buffer, in one part. */
static commResult_t adIallgather(void* collComm, void* sendData, void* recvData, size_t bytesPerRank, void* sendMh,
                                 void* recvMh, void** request) {
  adColl* w = collComm;
  size_t total = bytesPerRank * (size_t)w->nranks;
  *request = NULL;
  if (ad.version == 8) {
    if (total > (size_t)UINT32_MAX) return commInternalError;
    ncclNetSGE_v8_t part = {recvMh, recvData, (uint32_t)total};
    return adRes(ad.v8->iallgather(w->coll, sendData, 1, &part, bytesPerRank, 0, total, sendMh, request));
  }
  ncclNetSGE_v9_t part = {recvMh, recvData, total}; /* v10's and v11's SGE are v9's */
  if (ad.version == 11)
    return adRes(ad.v11->iallgather(w->coll, sendData, 1, &part, bytesPerRank, 0, total, sendMh, request));
  return adRes(ad.v9->iallgather(w->coll, sendData, 1, &part, bytesPerRank, 0, total, sendMh, request));
}

static commResult_t adIreducescatter(void* collComm, void* sendData, void* recvData, size_t countPerRank,
                                     commDataType_t type, commRedOp_t op, void* sendMh, void* recvMh, void** request) {
  adColl* w = collComm;
  size_t bytesPerRank = countPerRank * commTypeSize(type), total = bytesPerRank * (size_t)w->nranks;
  ncclDataType_t t = (ncclDataType_t)type;
  ncclRedOp_t o = (ncclRedOp_t)op;
  *request = NULL;
  if (ad.version == 8) {
    if (total > (size_t)UINT32_MAX) return commInternalError;
    ncclNetSGE_v8_t part = {sendMh, sendData, (uint32_t)total};
    return adRes(ad.v8->ireducescatter(w->coll, 1, &part, recvData, bytesPerRank, 0, total, t, o, recvMh, request));
  }
  ncclNetSGE_v9_t part = {sendMh, sendData, total};
  if (ad.version == 11)
    return adRes(ad.v11->ireducescatter(w->coll, 1, &part, recvData, bytesPerRank, 0, total, t, o, recvMh, request));
  return adRes(ad.v9->ireducescatter(w->coll, 1, &part, recvData, bytesPerRank, 0, total, t, o, recvMh, request));
}

static commResult_t adIflush(void* collComm, void* data, size_t size, void* mhandle, void** request) {
  void* c = ((adColl*)collComm)->coll;
  *request = NULL;
  if (size > (size_t)INT_MAX) return commInternalError;
  if (ad.version == 11) return adRes(ad.v11->iflush(c, data, (int)size, mhandle, request));
  return adRes(ad.version == 8 ? ad.v8->iflush(c, data, (int)size, mhandle, request)
                               : ad.v9->iflush(c, data, (int)size, mhandle, request));
}

static commResult_t adTest(void* request, int* done, size_t* size) {
  int n = 0;
  *done = 0;
  ncclResult_t r = ad.version == 11  ? ad.v11->test(request, done, size ? &n : NULL)
                   : ad.version == 8 ? ad.v8->test(request, done, size ? &n : NULL)
                                     : ad.v9->test(request, done, size ? &n : NULL);
  if (size && *done) *size = n > 0 ? (size_t)n : 0;
  return adRes(r);
}

static commResult_t adCloseColl(void* collComm) {
  adColl* w = collComm;
  if (!w) return commSuccess;
  ncclResult_t r = ad.version == 11  ? ad.v11->closeColl(w->coll)
                   : ad.version == 8 ? ad.v8->closeColl(w->coll)
                                     : ad.v9->closeColl(w->coll);
  free(w);
  return adRes(r);
}

static commResult_t adCloseListen(void* listenComm) {
  if (ad.version == 11) return adRes(ad.v11->closeListen(listenComm));
  return adRes(ad.version == 8 ? ad.v8->closeListen(listenComm) : ad.v9->closeListen(listenComm));
}

const commCollNet_t* commCollNetNcclWrap(void* lib, const char* what) {
  ad.v8 = NULL;
  ad.v9 = NULL;
  ad.v11 = NULL;
  ad.version = 0;
  const char* name = NULL;
  int hasCollective = 0, hasGather = 0, hasScatter = 0;
  if ((ad.v11 = dlsym(lib, COLLNET_NCCL_SYMBOL_V11)) != NULL) {
    ad.version = 11;
    name = ad.v11->name;
    hasCollective = ad.v11->iallreduce != NULL && ad.v11->finalize != NULL;
    hasGather = ad.v11->iallgather != NULL;
    hasScatter = ad.v11->ireducescatter != NULL;
  } else if ((ad.v9 = dlsym(lib, COLLNET_NCCL_SYMBOL_V10)) != NULL ||
             (ad.v9 = dlsym(lib, COLLNET_NCCL_SYMBOL_V9)) != NULL) {
    ad.version = dlsym(lib, COLLNET_NCCL_SYMBOL_V10) ? 10 : 9;
    name = ad.v9->name;
    hasCollective = ad.v9->iallreduce != NULL;
    hasGather = ad.v9->iallgather != NULL;
    hasScatter = ad.v9->ireducescatter != NULL;
  } else if ((ad.v8 = dlsym(lib, COLLNET_NCCL_SYMBOL_V8)) != NULL) {
    ad.version = 8;
    name = ad.v8->name;
    hasCollective = ad.v8->iallreduce != NULL;
    hasGather = ad.v8->iallgather != NULL;
    hasScatter = ad.v8->ireducescatter != NULL;
  } else {
    if (dlsym(lib, "ncclCollNetPlugin_v7") || dlsym(lib, "ncclCollNetPlugin_v6") || dlsym(lib, "ncclCollNetPlugin_v5"))
      WARN("COLLNET : %s exports only an NCCL CollNet plugin older than v8 (v5..v7), which libcomm does not load",
           what);
    else INFO(COMM_COLLNET | COMM_INIT, "COLLNET : %s exports no CollNet plugin (ncclCollNetPlugin_v8..v11)", what);
    return NULL;
  }
  if (!hasCollective) {
    WARN("COLLNET : %s's ncclCollNetPlugin_v%d has no iallreduce%s: not used", what, ad.version,
         ad.version == 11 ? " or finalize" : "");
    ad.version = 0;
    return NULL;
  }
  memset(&adTable, 0, sizeof(adTable));
  adTable.name = name ? name : "NCCL CollNet";
  adTable.version = COMM_COLLNET_PLUGIN_VERSION;
  adTable.init = adInit;
  adTable.devices = adDevices;
  adTable.getProperties = adGetProperties;
  adTable.listen = adListen;
  adTable.connect = adConnect;
  adTable.reduceSupport = adReduceSupport;
  adTable.regMr = adRegMr;
  adTable.deregMr = adDeregMr;
  adTable.iallreduce = adIallreduce;
  adTable.iallgather = hasGather ? adIallgather : NULL;
  adTable.ireducescatter = hasScatter ? adIreducescatter : NULL;
  adTable.iflush = adIflush;
  adTable.test = adTest;
  adTable.closeColl = adCloseColl;
  adTable.closeListen = adCloseListen;
  adTable.finalize = adFinalize;
  INFO(COMM_COLLNET | COMM_INIT, "COLLNET : using %s's NCCL CollNet plugin %s (ncclCollNetPlugin_v%d)", what,
       adTable.name, ad.version);
  return &adTable;
}
