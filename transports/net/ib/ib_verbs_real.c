/* The commIbVerbs table over the real libibverbs, loaded with dlopen at run time (libcomm has no link-time
 * dependency on it). ibv_post_send, ibv_post_recv, ibv_poll_cq and ibv_query_port are static inline in
 * <infiniband/verbs.h> (they go through the context's ops); they are wrapped here. Everything else is the
 * library's exported function, looked up by name. The library stays loaded for the life of the process
 * (providers it loaded cannot be unloaded safely). */
#include "ib_verbs.h"

#ifdef COMM_HAVE_IBVERBS
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define IBV_LIB_NAME "libibverbs.so.1"

typedef struct ibv_device** (*getDeviceList_t)(int*);
typedef void (*freeDeviceList_t)(struct ibv_device**);
typedef const char* (*getDeviceName_t)(struct ibv_device*);
typedef struct ibv_context* (*openDevice_t)(struct ibv_device*);
typedef int (*closeDevice_t)(struct ibv_context*);
typedef int (*queryDevice_t)(struct ibv_context*, struct ibv_device_attr*);
/* The exported ibv_query_port takes the old, shorter port attribute struct (a prefix of today's). */
typedef int (*queryPortCompat_t)(struct ibv_context*, uint8_t, struct _compat_ibv_port_attr*);
typedef int (*queryGid_t)(struct ibv_context*, uint8_t, int, union ibv_gid*);
typedef struct ibv_pd* (*allocPd_t)(struct ibv_context*);
typedef int (*deallocPd_t)(struct ibv_pd*);
typedef struct ibv_mr* (*regMr_t)(struct ibv_pd*, void*, size_t, int);
typedef struct ibv_mr* (*regMrIova2_t)(struct ibv_pd*, void*, size_t, uint64_t, unsigned int);
typedef struct ibv_mr* (*regDmabufMr_t)(struct ibv_pd*, uint64_t, size_t, uint64_t, int, int);
typedef int (*deregMr_t)(struct ibv_mr*);
typedef struct ibv_cq* (*createCq_t)(struct ibv_context*, int, void*, struct ibv_comp_channel*, int);
typedef int (*destroyCq_t)(struct ibv_cq*);
typedef struct ibv_qp* (*createQp_t)(struct ibv_pd*, struct ibv_qp_init_attr*);
typedef int (*modifyQp_t)(struct ibv_qp*, struct ibv_qp_attr*, int);
typedef int (*queryQp_t)(struct ibv_qp*, struct ibv_qp_attr*, int, struct ibv_qp_init_attr*);
typedef int (*destroyQp_t)(struct ibv_qp*);
typedef const char* (*wcStatusStr_t)(enum ibv_wc_status);
typedef int (*forkInit_t)(void);

/* The library functions the wrappers below need (those of the first library that loaded). */
static struct {
  int set;
  queryPortCompat_t queryPort;
  regMr_t regMr;
  regMrIova2_t regMrIova2;   /* optional (rdma-core >= 24): registration with optional access flags */
  regDmabufMr_t regDmabufMr; /* optional (rdma-core >= 34) */
  forkInit_t forkInit;       /* optional */
} gSyms;
static pthread_mutex_t gSymsLock = PTHREAD_MUTEX_INITIALIZER;

static int realQueryPort(struct ibv_context* ctx, uint8_t port, struct ibv_port_attr* attr) {
  /* What the header's inline ibv_query_port does: the extended op when the provider has one. */
  struct verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx) return vctx->query_port(ctx, port, attr, sizeof(*attr));
  memset(attr, 0, sizeof(*attr));
  return gSyms.queryPort(ctx, port, (struct _compat_ibv_port_attr*)attr);
}

static struct ibv_mr* realRegMr(struct ibv_pd* pd, void* addr, size_t length, int access) {
  unsigned int optional = (unsigned int)access & (unsigned int)IBV_ACCESS_OPTIONAL_RANGE;
  if (optional && gSyms.regMrIova2)
    return gSyms.regMrIova2(pd, addr, length, (uint64_t)(uintptr_t)addr, (unsigned int)access);
  return gSyms.regMr(pd, addr, length, (int)((unsigned int)access & ~optional));
}

static struct ibv_mr* realRegDmabufMr(struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                                      int access) {
  if (!gSyms.regDmabufMr) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  return gSyms.regDmabufMr(pd, offset, length, iova, fd, access);
}

static int realPostSend(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** badWr) {
  return qp->context->ops.post_send(qp, wr, badWr);
}

static int realPostRecv(struct ibv_qp* qp, struct ibv_recv_wr* wr, struct ibv_recv_wr** badWr) {
  return qp->context->ops.post_recv(qp, wr, badWr);
}

static int realPollCq(struct ibv_cq* cq, int numEntries, struct ibv_wc* wc) {
  return cq->context->ops.poll_cq(cq, numEntries, wc);
}

static int realForkInit(void) { return gSyms.forkInit ? gSyms.forkInit() : ENOSYS; }

/* sysfs: <ibdev_path>/ports/<port>/gid_attrs/types/<index> reads "IB/RoCE v1" or "RoCE v2"; reading an
 * unused entry fails with EINVAL. The port's link layer tells IB from RoCE v1 (and covers kernels without
 * the file). */
static int realQueryGidType(struct ibv_context* ctx, uint8_t port, int index, commIbGidType_t* type) {
  char path[IBV_SYSFS_PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/ports/%u/gid_attrs/types/%d", ctx->device->ibdev_path, (unsigned)port, index);
  FILE* f = fopen(path, "r");
  int openErr = f ? 0 : (errno ? errno : ENOENT);
  char buf[64] = {0};
  int got = f && fgets(buf, sizeof(buf), f) != NULL;
  if (f) fclose(f);
  if (got && strstr(buf, "RoCE v2")) {
    *type = COMM_IB_GID_TYPE_ROCE_V2;
    return 0;
  }
  if (f && !got) return ENODATA; /* an unused entry */
  struct ibv_port_attr pattr;
  int err = realQueryPort(ctx, port, &pattr);
  if (err) return err;
  if (pattr.link_layer == IBV_LINK_LAYER_ETHERNET) {
    if (!got) return openErr;
    *type = COMM_IB_GID_TYPE_ROCE_V1;
  } else {
    *type = COMM_IB_GID_TYPE_IB; /* an InfiniBand port: every GID is of IB type */
  }
  return 0;
}

static void setWhy(char* why, size_t whyLen, const char* fmt, const char* a, const char* b) {
  if (why && whyLen) snprintf(why, whyLen, fmt, a, b);
}

commResult_t commIbVerbsLoadFrom(const char* libName, commIbVerbs* table, char* why, size_t whyLen) {
  if (!libName || !table) {
    setWhy(why, whyLen, "%s%s", "invalid argument", "");
    return commInvalidArgument;
  }
  memset(table, 0, sizeof(*table));
  dlerror();
  void* h = dlopen(libName, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    setWhy(why, whyLen, "%s%s", e ? e : libName, e ? "" : ": cannot be loaded");
    return commSystemError;
  }
  const char* missing = NULL;
#define IBV_SYM(var, type, sym)   \
  type var = (type)dlsym(h, sym); \
  if (!var && !missing) missing = sym;
  IBV_SYM(getDeviceList, getDeviceList_t, "ibv_get_device_list")
  IBV_SYM(freeDeviceList, freeDeviceList_t, "ibv_free_device_list")
  IBV_SYM(getDeviceName, getDeviceName_t, "ibv_get_device_name")
  IBV_SYM(openDevice, openDevice_t, "ibv_open_device")
  IBV_SYM(closeDevice, closeDevice_t, "ibv_close_device")
  IBV_SYM(queryDevice, queryDevice_t, "ibv_query_device")
  IBV_SYM(queryPort, queryPortCompat_t, "ibv_query_port")
  IBV_SYM(queryGid, queryGid_t, "ibv_query_gid")
  IBV_SYM(allocPd, allocPd_t, "ibv_alloc_pd")
  IBV_SYM(deallocPd, deallocPd_t, "ibv_dealloc_pd")
  IBV_SYM(regMr, regMr_t, "ibv_reg_mr")
  IBV_SYM(deregMr, deregMr_t, "ibv_dereg_mr")
  IBV_SYM(createCq, createCq_t, "ibv_create_cq")
  IBV_SYM(destroyCq, destroyCq_t, "ibv_destroy_cq")
  IBV_SYM(createQp, createQp_t, "ibv_create_qp")
  IBV_SYM(modifyQp, modifyQp_t, "ibv_modify_qp")
  IBV_SYM(queryQp, queryQp_t, "ibv_query_qp")
  IBV_SYM(destroyQp, destroyQp_t, "ibv_destroy_qp")
  IBV_SYM(wcStatusStr, wcStatusStr_t, "ibv_wc_status_str")
#undef IBV_SYM
  if (missing) {
    setWhy(why, whyLen, "%s lacks symbol %s", libName, missing);
    return commSystemError; /* the handle stays open: harmless, and this is the rare case */
  }

  pthread_mutex_lock(&gSymsLock);
  if (!gSyms.set) {
    gSyms.queryPort = queryPort;
    gSyms.regMr = regMr;
    gSyms.regMrIova2 = (regMrIova2_t)dlsym(h, "ibv_reg_mr_iova2");
    gSyms.regDmabufMr = (regDmabufMr_t)dlsym(h, "ibv_reg_dmabuf_mr");
    gSyms.forkInit = (forkInit_t)dlsym(h, "ibv_fork_init");
    gSyms.set = 1;
  }
  pthread_mutex_unlock(&gSymsLock);

  table->name = "libibverbs";
  table->getDeviceList = getDeviceList;
  table->freeDeviceList = freeDeviceList;
  table->getDeviceName = getDeviceName;
  table->openDevice = openDevice;
  table->closeDevice = closeDevice;
  table->queryDevice = queryDevice;
  table->queryPort = realQueryPort;
  table->queryGid = queryGid;
  table->queryGidType = realQueryGidType;
  table->allocPd = allocPd;
  table->deallocPd = deallocPd;
  table->regMr = realRegMr;
  table->regDmabufMr = realRegDmabufMr;
  table->deregMr = deregMr;
  table->createCq = createCq;
  table->destroyCq = destroyCq;
  table->createQp = createQp;
  table->modifyQp = modifyQp;
  table->queryQp = queryQp;
  table->destroyQp = destroyQp;
  table->postSend = realPostSend;
  table->postRecv = realPostRecv;
  table->pollCq = realPollCq;
  table->wcStatusStr = wcStatusStr;
  table->forkInit = realForkInit;
  if (why && whyLen) why[0] = '\0';
  return commSuccess;
}

static pthread_once_t gLoadOnce = PTHREAD_ONCE_INIT;
static commIbVerbs gReal;
static commResult_t gLoadRes = commSystemError;
static char gLoadWhy[256];

static void loadOnce(void) { gLoadRes = commIbVerbsLoadFrom(IBV_LIB_NAME, &gReal, gLoadWhy, sizeof(gLoadWhy)); }

commResult_t commIbVerbsLoad(const commIbVerbs** verbs, char* why, size_t whyLen) {
  pthread_once(&gLoadOnce, loadOnce);
  *verbs = gLoadRes == commSuccess ? &gReal : NULL;
  if (why && whyLen) snprintf(why, whyLen, "%s", gLoadWhy);
  return gLoadRes;
}

/* ---------------------------------------------------------------- names for log lines */

const char* commIbGidTypeStr(commIbGidType_t type) {
  switch (type) {
    case COMM_IB_GID_TYPE_IB: return "IB";
    case COMM_IB_GID_TYPE_ROCE_V1: return "RoCE v1";
    case COMM_IB_GID_TYPE_ROCE_V2: return "RoCE v2";
  }
  return "unknown";
}

const char* commIbPortStateStr(enum ibv_port_state state) {
  switch (state) {
    case IBV_PORT_NOP: return "NOP";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
  }
  return "unknown";
}

const char* commIbLinkLayerStr(uint8_t linkLayer) {
  switch (linkLayer) {
    case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET: return "Ethernet";
    case IBV_LINK_LAYER_UNSPECIFIED: return "InfiniBand (unspecified)";
  }
  return "unknown";
}

#else
typedef int commIbNoVerbs_t; /* without <infiniband/verbs.h>: nothing (ISO C wants a declaration) */
#endif /* COMM_HAVE_IBVERBS */
