/* The in-process software RDMA device: configuration, objects (devices, contexts, PDs, MRs, CQs, QPs and
 * the QP state machine), the verbs entry points of commIbFakeVerbs() and the control API of
 * ib_verbs_fake.h. Execution of work requests is in ib_verbs_fake_wire.c. One process-wide lock. */
#include "ib_verbs_fake_int.h"

#ifdef COMM_HAVE_IBVERBS
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

fakeFabric gFake = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const commIbFakeOptions defaultOptions = {
    .wireThread = 0, .wireThreadUs = 10, .reorder = 0, .seed = 1, .delaySteps = 1, .maxPerStep = 0};

#define LOCK() pthread_mutex_lock(&gFake.lock)
#define UNLOCK() pthread_mutex_unlock(&gFake.lock)
#define CONTAINER(ptr, type) ((type*)(void*)(ptr)) /* every fake object starts with its verbs struct */

/* ---------------------------------------------------------------- configuration */

void commIbFakeGidIpv4(commIbFakeGid* gid, uint32_t ipv4, commIbGidType_t type) {
  memset(gid, 0, sizeof(*gid));
  gid->raw[10] = 0xff;
  gid->raw[11] = 0xff;
  gid->raw[12] = (uint8_t)(ipv4 >> 24);
  gid->raw[13] = (uint8_t)(ipv4 >> 16);
  gid->raw[14] = (uint8_t)(ipv4 >> 8);
  gid->raw[15] = (uint8_t)ipv4;
  gid->type = type;
}

void commIbFakeGidLinkLocal(commIbFakeGid* gid, uint64_t guid, commIbGidType_t type) {
  memset(gid, 0, sizeof(*gid));
  gid->raw[0] = 0xfe;
  gid->raw[1] = 0x80;
  for (int i = 0; i < 8; i++) gid->raw[8 + i] = (uint8_t)(guid >> (56 - 8 * i));
  gid->type = type;
}

void commIbFakeDeviceInit(commIbFakeDevice* dev, const char* name, uint8_t linkLayer, int index) {
  memset(dev, 0, sizeof(*dev));
  snprintf(dev->name, sizeof(dev->name), "%s", name);
  dev->guid = 0x0002c90300fa0000ull + (uint64_t)index * 0x10;
  dev->vendorPartId = 4129;
  dev->nPorts = 1;
  commIbFakePort* p = &dev->ports[0];
  p->state = IBV_PORT_ACTIVE;
  p->linkLayer = linkLayer;
  p->activeWidth = 2; /* 4x */
  if (linkLayer == IBV_LINK_LAYER_ETHERNET) {
    p->activeSpeed = 32; /* 25 Gb/s per lane: 100 Gb/s */
    p->activeMtu = IBV_MTU_1024;
    p->lid = 0;
    p->nGids = 4;
    commIbFakeGidLinkLocal(&p->gids[0], dev->guid + 1, COMM_IB_GID_TYPE_ROCE_V1);
    commIbFakeGidLinkLocal(&p->gids[1], dev->guid + 1, COMM_IB_GID_TYPE_ROCE_V2);
    uint32_t ip = (10u << 24) | ((uint32_t)(index & 0xff) << 8) | 1u;
    commIbFakeGidIpv4(&p->gids[2], ip, COMM_IB_GID_TYPE_ROCE_V1);
    commIbFakeGidIpv4(&p->gids[3], ip, COMM_IB_GID_TYPE_ROCE_V2);
  } else {
    p->activeSpeed = 64; /* HDR, 50 Gb/s per lane: 200 Gb/s */
    p->activeMtu = IBV_MTU_4096;
    p->lid = (uint16_t)(index + 1);
    p->nGids = 1;
    commIbFakeGidLinkLocal(&p->gids[0], dev->guid + 1, COMM_IB_GID_TYPE_IB);
  }
}

static void setDevLocked(int i, const commIbFakeDevice* cfg) {
  fakeDev* d = &gFake.devs[i];
  memset(d, 0, sizeof(*d));
  d->cfg = *cfg;
  d->index = i;
  d->ibdev.node_type = IBV_NODE_CA;
  d->ibdev.transport_type = IBV_TRANSPORT_IB;
  snprintf(d->ibdev.name, sizeof(d->ibdev.name), "%s", cfg->name);
  snprintf(d->ibdev.dev_name, sizeof(d->ibdev.dev_name), "uverbs%d", i);
  snprintf(d->ibdev.dev_path, sizeof(d->ibdev.dev_path), "/nonexistent/fake/uverbs%d", i);
  snprintf(d->ibdev.ibdev_path, sizeof(d->ibdev.ibdev_path), "/nonexistent/fake/%s", cfg->name);
}

static void ensureConfiguredLocked(void) {
  if (gFake.configured) return;
  commIbFakeDevice d;
  commIbFakeDeviceInit(&d, "fakeib0", IBV_LINK_LAYER_INFINIBAND, 0);
  setDevLocked(0, &d);
  commIbFakeDeviceInit(&d, "fakeroce0", IBV_LINK_LAYER_ETHERNET, 1);
  setDevLocked(1, &d);
  gFake.nDevs = 2;
  gFake.opt = defaultOptions;
  gFake.rng = defaultOptions.seed;
  gFake.nextQpn = 0x100;
  gFake.nextKey = 0x1000;
  gFake.configured = 1;
}

int commIbFakeConfigure(int nDevs, const commIbFakeDevice* devs) {
  if (nDevs < 0 || nDevs > COMM_IB_FAKE_MAX_DEVS || (nDevs > 0 && !devs)) return EINVAL;
  for (int i = 0; i < nDevs; i++) {
    if (devs[i].nPorts < 1 || devs[i].nPorts > COMM_IB_FAKE_MAX_PORTS || devs[i].name[0] == '\0') return EINVAL;
    for (int p = 0; p < devs[i].nPorts; p++) {
      const commIbFakePort* port = &devs[i].ports[p];
      if (port->nGids < 0 || port->nGids > COMM_IB_FAKE_MAX_GIDS) return EINVAL;
      if (port->linkLayer != IBV_LINK_LAYER_INFINIBAND && port->linkLayer != IBV_LINK_LAYER_ETHERNET) return EINVAL;
    }
  }
  LOCK();
  ensureConfiguredLocked();
  if (gFake.stats.contexts > 0) {
    UNLOCK();
    return EBUSY;
  }
  for (int i = 0; i < nDevs; i++) setDevLocked(i, &devs[i]);
  gFake.nDevs = nDevs;
  UNLOCK();
  return 0;
}

/* ---------------------------------------------------------------- options, faults, statistics */

static void* wireThreadMain(void* arg) {
  (void)arg;
  LOCK();
  while (!gFake.threadStop) {
    fakeWireStepLocked();
    struct timespec ts = {0, (long)gFake.opt.wireThreadUs * 1000};
    UNLOCK();
    nanosleep(&ts, NULL);
    LOCK();
  }
  UNLOCK();
  return NULL;
}

static void stopThread(void) { /* lock not held */
  LOCK();
  int running = gFake.threadRunning;
  gFake.threadStop = 1;
  UNLOCK();
  if (running) pthread_join(gFake.thread, NULL);
  LOCK();
  gFake.threadRunning = 0;
  gFake.threadStop = 0;
  UNLOCK();
}

void commIbFakeGetOptions(commIbFakeOptions* opt) {
  LOCK();
  ensureConfiguredLocked();
  *opt = gFake.opt;
  UNLOCK();
}

static pthread_mutex_t gOptionsLock = PTHREAD_MUTEX_INITIALIZER; /* one SetOptions at a time */

int commIbFakeSetOptions(const commIbFakeOptions* opt) {
  if (!opt || opt->delaySteps < 1 || opt->maxPerStep < 0 || opt->wireThreadUs < 0 || opt->wireThreadUs > 1000000)
    return EINVAL;
  pthread_mutex_lock(&gOptionsLock);
  stopThread();
  LOCK();
  ensureConfiguredLocked();
  gFake.opt = *opt;
  gFake.rng = opt->seed;
  int err = 0;
  if (opt->wireThread) {
    err = pthread_create(&gFake.thread, NULL, wireThreadMain, NULL);
    gFake.threadRunning = err == 0;
  }
  UNLOCK();
  pthread_mutex_unlock(&gOptionsLock);
  return err;
}

void commIbFakeResetOptions(void) {
  commIbFakeSetOptions(&defaultOptions);
  LOCK();
  memset(gFake.fail, 0, sizeof(gFake.fail));
  UNLOCK();
}

int commIbFakeProgress(void) {
  LOCK();
  ensureConfiguredLocked();
  int n = fakeWireStepLocked();
  UNLOCK();
  return n;
}

int commIbFakeInjectError(struct ibv_qp* qp, int count, enum ibv_wc_status status) {
  if (!qp || count < 0) return EINVAL;
  LOCK();
  fakeQp* q = fakeFindQp(qp->qp_num);
  int ok = q && &q->qp == qp;
  if (ok) {
    q->injectCount = count;
    q->injectStatus = status;
  }
  UNLOCK();
  return ok ? 0 : EINVAL;
}

int commIbFakeFailCall(commIbFakeCall_t call, int after, int err) {
  if ((int)call < 0 || call >= COMM_IB_FAKE_CALL_COUNT || after < 0 || err <= 0) return EINVAL;
  LOCK();
  gFake.fail[call].armed = 1;
  gFake.fail[call].after = after;
  gFake.fail[call].err = err;
  UNLOCK();
  return 0;
}

/* Lock held. 0, or the errno value an armed failure asks this call to fail with. */
int fakeFailNowLocked(commIbFakeCall_t call) {
  if (!gFake.fail[call].armed) return 0;
  if (gFake.fail[call].after-- > 0) return 0;
  gFake.fail[call].armed = 0;
  return gFake.fail[call].err;
}

void commIbFakeGetStats(commIbFakeStats* stats) {
  LOCK();
  *stats = gFake.stats;
  UNLOCK();
}

void commIbFakeSetHost(const commIbFakeHost* host) {
  LOCK();
  if (host) gFake.host = *host;
  else memset(&gFake.host, 0, sizeof(gFake.host));
  UNLOCK();
}

/* ---------------------------------------------------------------- devices */

static struct ibv_device** fakeGetDeviceList(int* num) {
  LOCK();
  ensureConfiguredLocked();
  int err = fakeFailNowLocked(COMM_IB_FAKE_CALL_GET_DEVICE_LIST);
  int n = gFake.nDevs;
  struct ibv_device** list = err ? NULL : calloc((size_t)n + 1, sizeof(*list));
  for (int i = 0; list && i < n; i++) list[i] = &gFake.devs[i].ibdev;
  UNLOCK();
  if (!list) {
    errno = err ? err : ENOMEM;
    if (num) *num = 0;
    return NULL;
  }
  if (num) *num = n;
  return list;
}

static void fakeFreeDeviceList(struct ibv_device** list) { free(list); }

static const char* fakeGetDeviceName(struct ibv_device* dev) { return dev ? dev->name : NULL; }

static struct ibv_context* fakeOpenDevice(struct ibv_device* device) {
  LOCK();
  ensureConfiguredLocked();
  int err = fakeFailNowLocked(COMM_IB_FAKE_CALL_OPEN_DEVICE);
  fakeDev* d = CONTAINER(device, fakeDev);
  if (!err && (d < gFake.devs || d >= gFake.devs + gFake.nDevs)) err = ENODEV;
  fakeCtx* c = err ? NULL : calloc(1, sizeof(*c));
  if (c) {
    c->ctx.device = device;
    c->ctx.cmd_fd = -1;
    c->ctx.async_fd = -1;
    c->ctx.num_comp_vectors = 1;
    c->dev = d;
    gFake.stats.contexts++;
  }
  UNLOCK();
  if (!c) errno = err ? err : ENOMEM;
  return c ? &c->ctx : NULL;
}

static int fakeCloseDevice(struct ibv_context* context) {
  fakeCtx* c = CONTAINER(context, fakeCtx);
  LOCK();
  int busy = c->pds > 0 || c->cqs > 0;
  if (!busy) gFake.stats.contexts--;
  UNLOCK();
  if (busy) return EBUSY; /* libibverbs would leak them: the fake says so */
  free(c);
  return 0;
}

static int fakeQueryDevice(struct ibv_context* context, struct ibv_device_attr* attr) {
  fakeCtx* c = CONTAINER(context, fakeCtx);
  memset(attr, 0, sizeof(*attr));
  snprintf(attr->fw_ver, sizeof(attr->fw_ver), "fake-1.0");
  attr->node_guid = htobe64(c->dev->cfg.guid);
  attr->sys_image_guid = htobe64(c->dev->cfg.guid);
  attr->max_mr_size = UINT64_MAX;
  attr->page_size_cap = 4096;
  attr->vendor_part_id = c->dev->cfg.vendorPartId;
  attr->max_qp = 1 << 16;
  attr->max_qp_wr = COMM_IB_FAKE_MAX_QP_WR;
  attr->max_sge = COMM_IB_FAKE_MAX_SGE;
  attr->max_cq = 1 << 16;
  attr->max_cqe = COMM_IB_FAKE_MAX_CQE;
  attr->max_mr = 1 << 20;
  attr->max_pd = 1 << 16;
  attr->max_qp_rd_atom = 16;
  attr->max_qp_init_rd_atom = 16;
  attr->max_pkeys = 1;
  attr->phys_port_cnt = (uint8_t)c->dev->cfg.nPorts;
  return 0;
}

static int fakeQueryPort(struct ibv_context* context, uint8_t port, struct ibv_port_attr* attr) {
  fakeCtx* c = CONTAINER(context, fakeCtx);
  LOCK();
  int err = fakeFailNowLocked(COMM_IB_FAKE_CALL_QUERY_PORT);
  UNLOCK();
  if (err) return err;
  if (port < 1 || port > c->dev->cfg.nPorts) return EINVAL;
  const commIbFakePort* p = &c->dev->cfg.ports[port - 1];
  memset(attr, 0, sizeof(*attr));
  attr->state = p->state;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = p->activeMtu;
  attr->gid_tbl_len = COMM_IB_FAKE_MAX_GIDS;
  attr->max_msg_sz = 1u << 31;
  attr->pkey_tbl_len = 1;
  attr->lid = p->lid;
  attr->sm_lid = p->linkLayer == IBV_LINK_LAYER_INFINIBAND ? 1 : 0;
  attr->active_width = p->activeWidth;
  attr->active_speed = p->activeSpeed;
  attr->phys_state = p->state == IBV_PORT_ACTIVE ? 5 /* LinkUp */ : 3 /* Disabled */;
  attr->link_layer = p->linkLayer;
  return 0;
}

static int fakeQueryGid(struct ibv_context* context, uint8_t port, int index, union ibv_gid* gid) {
  fakeCtx* c = CONTAINER(context, fakeCtx);
  if (port < 1 || port > c->dev->cfg.nPorts || index < 0 || index >= COMM_IB_FAKE_MAX_GIDS) return EINVAL;
  const commIbFakePort* p = &c->dev->cfg.ports[port - 1];
  memset(gid, 0, sizeof(*gid));
  if (index < p->nGids) memcpy(gid->raw, p->gids[index].raw, 16);
  return 0;
}

static int fakeQueryGidType(struct ibv_context* context, uint8_t port, int index, commIbGidType_t* type) {
  fakeCtx* c = CONTAINER(context, fakeCtx);
  if (port < 1 || port > c->dev->cfg.nPorts || index < 0 || index >= COMM_IB_FAKE_MAX_GIDS) return EINVAL;
  const commIbFakePort* p = &c->dev->cfg.ports[port - 1];
  if (index >= p->nGids) return ENODATA;
  *type = p->gids[index].type;
  return 0;
}

/* ---------------------------------------------------------------- PDs and MRs */

static struct ibv_pd* fakeAllocPd(struct ibv_context* context) {
  fakeCtx* c = CONTAINER(context, fakeCtx);
  LOCK();
  int err = fakeFailNowLocked(COMM_IB_FAKE_CALL_ALLOC_PD);
  fakePd* pd = err ? NULL : calloc(1, sizeof(*pd));
  if (pd) {
    pd->pd.context = context;
    pd->pd.handle = ++gFake.nextHandle;
    c->pds++;
    gFake.stats.pds++;
  }
  UNLOCK();
  if (!pd) errno = err ? err : ENOMEM;
  return pd ? &pd->pd : NULL;
}

static int fakeDeallocPd(struct ibv_pd* ibpd) {
  fakePd* pd = CONTAINER(ibpd, fakePd);
  LOCK();
  int busy = pd->mrs > 0 || pd->qps > 0;
  if (!busy) {
    CONTAINER(ibpd->context, fakeCtx)->pds--;
    gFake.stats.pds--;
  }
  UNLOCK();
  if (busy) return EBUSY;
  free(pd);
  return 0;
}

#define FAKE_ACCESS_KNOWN                                                                                 \
  (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | \
   (int)IBV_ACCESS_OPTIONAL_RANGE)

static struct ibv_mr* fakeRegMr(struct ibv_pd* ibpd, void* addr, size_t length, int access) {
  fakePd* pd = CONTAINER(ibpd, fakePd);
  int err = 0;
  /* Remote write or atomic access needs local write (as the verbs specification requires). */
  if (length == 0 || !addr || (access & ~FAKE_ACCESS_KNOWN) ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)))
    err = EINVAL;
  LOCK();
  if (!err) err = fakeFailNowLocked(COMM_IB_FAKE_CALL_REG_MR);
  fakeMr* m = err ? NULL : calloc(1, sizeof(*m));
  if (m) {
    m->mr.context = ibpd->context;
    m->mr.pd = ibpd;
    m->mr.addr = addr;
    m->mr.length = length;
    m->mr.handle = ++gFake.nextHandle;
    gFake.nextKey += 2;
    m->mr.lkey = gFake.nextKey;               /* even */
    m->mr.rkey = 0x80000001u ^ gFake.nextKey; /* odd, high bit: never an lkey */
    m->access = access;
    m->next = gFake.mrs;
    gFake.mrs = m;
    pd->mrs++;
    gFake.stats.mrs++;
  }
  UNLOCK();
  if (!m) errno = err ? err : ENOMEM;
  return m ? &m->mr : NULL;
}

static struct ibv_mr* fakeRegDmabufMr(struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                                      int access) {
  (void)offset;
  LOCK();
  int on = gFake.opt.dmabuf;
  UNLOCK();
  if (!on || fd < 0) {
    errno = !on ? EOPNOTSUPP : EBADF;
    return NULL;
  }
  return fakeRegMr(pd, (void*)(uintptr_t)iova, length, access);
}

static int fakeDeregMr(struct ibv_mr* mr) {
  fakeMr* m = CONTAINER(mr, fakeMr);
  LOCK();
  fakeMr** pp = &gFake.mrs;
  while (*pp && *pp != m) pp = &(*pp)->next;
  int found = *pp != NULL;
  if (found) {
    *pp = m->next;
    CONTAINER(mr->pd, fakePd)->mrs--;
    gFake.stats.mrs--;
  }
  UNLOCK();
  if (!found) return EINVAL;
  free(m);
  return 0;
}

/* ---------------------------------------------------------------- CQs */

static struct ibv_cq* fakeCreateCq(struct ibv_context* context, int cqe, void* cqContext,
                                   struct ibv_comp_channel* channel, int compVector) {
  fakeCtx* c = CONTAINER(context, fakeCtx);
  int err = 0;
  if (channel) err = EOPNOTSUPP;
  if (cqe < 1 || cqe > COMM_IB_FAKE_MAX_CQE || compVector < 0 || compVector >= context->num_comp_vectors) err = EINVAL;
  LOCK();
  if (!err) err = fakeFailNowLocked(COMM_IB_FAKE_CALL_CREATE_CQ);
  fakeCq* cq = err ? NULL : calloc(1, sizeof(*cq));
  if (cq && !(cq->ring = calloc((size_t)cqe, sizeof(*cq->ring)))) {
    free(cq);
    cq = NULL;
  }
  if (cq) {
    cq->cq.context = context;
    cq->cq.cq_context = cqContext;
    cq->cq.handle = ++gFake.nextHandle;
    cq->cq.cqe = cqe;
    cq->cap = cqe;
    c->cqs++;
    gFake.stats.cqs++;
  }
  UNLOCK();
  if (!cq) errno = err ? err : ENOMEM;
  return cq ? &cq->cq : NULL;
}

static int fakeDestroyCq(struct ibv_cq* ibcq) {
  fakeCq* cq = CONTAINER(ibcq, fakeCq);
  LOCK();
  int busy = cq->qps > 0;
  if (!busy) {
    CONTAINER(ibcq->context, fakeCtx)->cqs--;
    gFake.stats.cqs--;
  }
  UNLOCK();
  if (busy) return EBUSY;
  free(cq->ring);
  free(cq);
  return 0;
}

static int fakePollCq(struct ibv_cq* ibcq, int numEntries, struct ibv_wc* wc) {
  fakeCq* cq = CONTAINER(ibcq, fakeCq);
  if (numEntries < 0) return -1;
  LOCK();
  if (!gFake.opt.wireThread) fakeWireStepLocked();
  if (cq->overrun) {
    UNLOCK();
    errno = EOVERFLOW;
    return -1;
  }
  int n = 0;
  while (n < numEntries && cq->count > 0) {
    fakeCqe* e = &cq->ring[cq->head];
    wc[n++] = e->wc;
    /* Hardware frees a send-queue slot, and every earlier one of the QP, when its completion is read. */
    if (e->isSend && e->qp->sqRetired < e->qseq + 1) e->qp->sqRetired = e->qseq + 1;
    cq->head = (cq->head + 1) % cq->cap;
    cq->count--;
  }
  UNLOCK();
  return n;
}

/* ---------------------------------------------------------------- misc */

static const char* fakeWcStatusStr(enum ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_LEN_ERR: return "local length error";
    case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error";
    case IBV_WC_LOC_EEC_OP_ERR: return "local EE context operation error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "work request flushed error";
    case IBV_WC_MW_BIND_ERR: return "memory window bind error";
    case IBV_WC_BAD_RESP_ERR: return "bad response error";
    case IBV_WC_LOC_ACCESS_ERR: return "local access error";
    case IBV_WC_REM_INV_REQ_ERR: return "remote invalid request error";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_REM_OP_ERR: return "remote operation error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
    case IBV_WC_LOC_RDD_VIOL_ERR: return "local RDD violation error";
    case IBV_WC_REM_INV_RD_REQ_ERR: return "remote invalid RD request";
    case IBV_WC_REM_ABORT_ERR: return "aborted error";
    case IBV_WC_INV_EECN_ERR: return "invalid EE context number";
    case IBV_WC_INV_EEC_STATE_ERR: return "invalid EE context state";
    case IBV_WC_FATAL_ERR: return "fatal error";
    case IBV_WC_RESP_TIMEOUT_ERR: return "response timeout error";
    case IBV_WC_GENERAL_ERR: return "general error";
    default: return "unknown";
  }
}

static int fakeForkInit(void) { return 0; }

static const commIbVerbs fakeVerbs = {
    .name = "fake",
    .getDeviceList = fakeGetDeviceList,
    .freeDeviceList = fakeFreeDeviceList,
    .getDeviceName = fakeGetDeviceName,
    .openDevice = fakeOpenDevice,
    .closeDevice = fakeCloseDevice,
    .queryDevice = fakeQueryDevice,
    .queryPort = fakeQueryPort,
    .queryGid = fakeQueryGid,
    .queryGidType = fakeQueryGidType,
    .allocPd = fakeAllocPd,
    .deallocPd = fakeDeallocPd,
    .regMr = fakeRegMr,
    .regDmabufMr = fakeRegDmabufMr,
    .deregMr = fakeDeregMr,
    .createCq = fakeCreateCq,
    .destroyCq = fakeDestroyCq,
    .createQp = fakeCreateQp,
    .modifyQp = fakeModifyQp,
    .queryQp = fakeQueryQp,
    .destroyQp = fakeDestroyQp,
    .postSend = fakePostSend,
    .postRecv = fakePostRecv,
    .pollCq = fakePollCq,
    .wcStatusStr = fakeWcStatusStr,
    .forkInit = fakeForkInit,
};

const commIbVerbs* commIbFakeVerbs(void) { return &fakeVerbs; }

#else
typedef int commIbNoVerbs_t; /* without <infiniband/verbs.h>: nothing (ISO C wants a declaration) */
#endif /* COMM_HAVE_IBVERBS */
