/* The "IB" network plugin over a commIbVerbs table (net_ib.h has the design): devices, memory registration,
 * the data path and the plugin table; its connections are in net_ib_conn.c. */
#include "net_ib_int.h"

#ifdef COMM_HAVE_IBVERBS
#include <arpa/inet.h> /* htonl, ntohl: the immediates */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "ib_gdr.h"
#include "ib_topo.h"
#include "param.h"
#include "socket.h"
#include "utils.h"

/* ---------------------------------------------------------------- process-wide state */

static pthread_mutex_t ibLock = PTHREAD_MUTEX_INITIALIZER;
const commIbVerbs* commNetIbTable;
int commNetIbNDevs;
commIbPort commNetIbPorts[IB_MAX_DEVS];
int commNetIbHaveIf;
commSockAddr commNetIbIfAddr;

/* ---------------------------------------------------------------- init / devices */

static commResult_t ibInit(commNetLogger_t logger) {
  (void)logger; /* built in: logs through debug.h */
  if (!commNetIbTable) {
    WARN("NET/IB : no verbs table");
    return commInternalError;
  }
  commIbHcaFilter filter;
  COMMCHECK(commIbHcaParse(commParamStr("COMM_IB_HCA", NULL), &filter));
  pthread_mutex_lock(&ibLock);
  commResult_t res = commIbDiscover(commNetIbTable, &filter, commNetIbPorts, IB_MAX_DEVS, &commNetIbNDevs);
  if (res == commSuccess && !commNetIbHaveIf) {
    char ifName[COMM_IFNAME_MAX];
    res = commSocketFindInterface(ifName, &commNetIbIfAddr);
    if (res == commSuccess) commNetIbHaveIf = 1;
    else WARN("NET/IB : no interface for the connection setup (COMM_SOCKET_IFNAME)");
  }
  pthread_mutex_unlock(&ibLock);
  if (res == commSuccess)
    INFO(COMM_NET | COMM_IB, "NET/IB : %d device(s) over %s", commNetIbNDevs, commNetIbTable->name);
  return res;
}

static commResult_t ibDevices(int* ndev) {
  *ndev = commNetIbNDevs;
  return commSuccess;
}

static commResult_t ibGetProperties(int dev, commNetProperties_t* props) {
  if (dev < 0 || dev >= commNetIbNDevs) {
    WARN("NET/IB : invalid device %d", dev);
    return commInvalidArgument;
  }
  memset(props, 0, sizeof(*props));
  props->name = commNetIbPorts[dev].devName;
  props->pciPath = NULL;
  props->guid = commNetIbPorts[dev].guid;
  props->ptrSupport = COMM_PTR_HOST | (ibGdrPathFor(0, NULL, 0) != IB_GDR_NONE ? COMM_PTR_CUDA : 0);
  props->speedMbps = commNetIbPorts[dev].speedMbps;
  props->port = commNetIbPorts[dev].port;
  props->latencyUs = 0;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->maxMessageBytes = IB_MAX_MESSAGE;
  return commSuccess;
}

/* ---------------------------------------------------------------- memory */

static commResult_t ibRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  *mhandle = NULL;
  ibComm* c = (ibComm*)comm;
  if (!c || (type != COMM_PTR_HOST && type != COMM_PTR_CUDA)) {
    WARN("NET/IB : cannot register memory of type %d (host %d or CUDA %d)", type, COMM_PTR_HOST, COMM_PTR_CUDA);
    return commInvalidArgument;
  }
  int gpu = -1;
  if (type == COMM_PTR_CUDA && (gpu = ibGdrDeviceOf(data)) < 0) {
    WARN("NET/IB : %s: %p was registered as CUDA memory but is not device memory", ibDevName(c), data);
    return commInvalidArgument;
  }
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t pg = page > 0 ? (uintptr_t)page : 4096;
  uintptr_t start = (uintptr_t)data & ~(pg - 1);
  uintptr_t end = ((uintptr_t)data + (size ? size : 1) + pg - 1) & ~(pg - 1);
  for (ibMr* m = c->mrs; m; m = m->next) { /* the registration cache: each range once */
    if (m->gpu == gpu && m->start <= start && end <= m->end) {
      m->refs++;
      *mhandle = m;
      return commSuccess;
    }
  }
  ibMr* m;
  COMMCHECK(commCalloc(&m, 1, sizeof(*m)));
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  m->gpu = gpu;
  if (gpu >= 0) {
    ibGdrReg reg;
    commResult_t res = ibGdrRegister(commNetIbTable, c->pd, ibDevName(c), gpu, data, size, access, &reg);
    if (res != commSuccess) {
      free(m);
      return res;
    }
    m->mr = reg.mr;
    INFO(COMM_NET | COMM_IB, "NET/IB : %s: registered %zu bytes of GPU %d memory through %s", ibDevName(c),
         (size_t)(reg.end - reg.start), gpu, ibGdrPathName(reg.path));
  } else if (!(m->mr = commNetIbTable->regMr(c->pd, (void*)start, end - start, access))) {
    WARN("NET/IB : %s: cannot register %zu bytes at %p: %s", ibDevName(c), size, data, strerror(errno));
    free(m);
    return commSystemError;
  }
  m->start = start;
  m->end = end;
  m->refs = 1;
  m->next = c->mrs;
  c->mrs = m;
  *mhandle = m;
  return commSuccess;
}

static commResult_t ibDeregMr(void* comm, void* mhandle) {
  ibComm* c = (ibComm*)comm;
  if (!mhandle) return commSuccess;
  if (!c) return commInvalidArgument;
  ibMr* m = (ibMr*)mhandle;
  ibMr** pp = &c->mrs;
  while (*pp && *pp != m) pp = &(*pp)->next;
  if (!*pp) {
    WARN("NET/IB : %s: deregistration of a handle this comm did not register", ibDevName(c));
    return commInvalidArgument;
  }
  if (--m->refs > 0) return commSuccess;
  *pp = m->next;
  int err = commNetIbTable->deregMr(m->mr);
  free(m);
  if (err) {
    WARN("NET/IB : %s: deregistration failed: %s", ibDevName(c), strerror(err));
    return commSystemError;
  }
  return commSuccess;
}

/* ---------------------------------------------------------------- data path */

/* Receiver wr_ids: the request slot, | this bit for the credit (CTS) write. */
#define IB_WRID_CTS 0x100u

/* A receiver's credit write that no QP answers (retries exceeded) means the sender's QP is gone (it closed:
 * commDestroy, or its process ended) or unreachable; receives were posted ahead of need, so that is an error only if data is still expected,
 * which the net transport's check reports. A failed data transfer is a WARN here. */
static commResult_t ibCompletionError(ibComm* c, const struct ibv_wc* wc) {
  c->err = 1;
  if (!c->isSend && (wc->wr_id & IB_WRID_CTS) && wc->status == IBV_WC_RETRY_EXC_ERR) {
    INFO(COMM_NET | COMM_IB,
         "NET/IB : %s: credit write on QP %u to %s failed: %s (status %d): the sender closed or is gone", ibDevName(c),
         wc->qp_num, c->peerStr, commNetIbTable->wcStatusStr(wc->status), (int)wc->status);
    return commRemoteError;
  }
  WARN("NET/IB : %s: %s completion error on QP %u (peer %s): %s (status %d, vendor error %u)", ibDevName(c),
       c->isSend ? "send" : "receive", wc->qp_num, c->peerStr, commNetIbTable->wcStatusStr(wc->status), (int)wc->status,
       wc->vendor_err);
  return commRemoteError;
}

static commResult_t ibUpProgress(ibComm* c);

/* Every completion of a batch counts, also after an error in it: with several QPs, or a failed credit write
 * beside arriving data, a good completion after the bad one is data that did arrive. */
static commResult_t ibPollCq(ibComm* c) {
  struct ibv_wc wc[IB_POLL_BATCH];
  commResult_t res = commSuccess;
  for (;;) {
    int n = commNetIbTable->pollCq(c->cq, IB_POLL_BATCH, wc);
    if (n < 0) {
      c->err = 1;
      WARN("NET/IB : %s: polling the CQ failed (peer %s)", ibDevName(c), c->peerStr);
      return commSystemError;
    }
    for (int i = 0; i < n; i++) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        if (res == commSuccess) res = ibCompletionError(c, &wc[i]); /* the first says why; flushes follow */
        continue;
      }
      if (wc[i].wr_id & IB_WRID_CTS) continue;
      ibReq* r = &c->reqs[wc[i].wr_id % IB_NREQ];
      if (!c->isSend) r->got += ntohl(wc[i].imm_data);
      r->pending--;
    }
    if (n < IB_POLL_BATCH) return res;
  }
}

/* Sender: post the data of the requests whose credit arrived, in order. */
static commResult_t ibSendProgress(ibComm* c) {
  COMMCHECK(ibUpProgress(c));
  if (!c->up) return commSuccess;
  while (c->started < c->posted) {
    ibReq* r = &c->reqs[c->started % IB_NREQ];
    volatile ibCts* slot = &c->fifo[c->started % IB_NREQ];
    if (__atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE) != c->started + 1) return commSuccess;
    ibCts cts;
    cts.addr = slot->addr;
    cts.size = slot->size;
    cts.rkey = slot->rkey;
    cts.tag = slot->tag;
    if (cts.tag != r->tag) {
      WARN("NET/IB : %s: message %llu to %s: tag %d but the receiver posted tag %d", ibDevName(c),
           (unsigned long long)r->seq, c->peerStr, r->tag, cts.tag);
      c->err = 1;
      return commInternalError;
    }
    if (r->size > cts.size) {
      WARN("NET/IB : %s: message %llu of %zu bytes to %s is larger than the posted receive (%llu bytes)", ibDevName(c),
           (unsigned long long)r->seq, r->size, c->peerStr, (unsigned long long)cts.size);
      c->err = 1;
      return commInternalError;
    }
    /* One write per QP (possibly empty), so the receiver expects exactly nQps pieces. */
    size_t chunk = (r->size + (size_t)c->nQps - 1) / (size_t)c->nQps;
    chunk = (chunk + 127) & ~(size_t)127;
    for (int q = 0; q < c->nQps; q++) {
      size_t off = (size_t)q * chunk;
      size_t len = off < r->size ? (r->size - off < chunk ? r->size - off : chunk) : 0;
      struct ibv_sge sge;
      struct ibv_send_wr wr, *bad = NULL;
      memset(&wr, 0, sizeof(wr));
      sge.addr = (uint64_t)(uintptr_t)(r->data + (len ? off : 0));
      sge.length = (uint32_t)len;
      sge.lkey = r->lkey;
      wr.wr_id = r->seq % IB_NREQ;
      wr.sg_list = len ? &sge : NULL;
      wr.num_sge = len ? 1 : 0;
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.imm_data = htonl((uint32_t)len);
      wr.wr.rdma.remote_addr = cts.addr + (len ? off : 0);
      wr.wr.rdma.rkey = cts.rkey;
      int err = commNetIbTable->postSend(c->qps[q], &wr, &bad);
      if (err) {
        WARN("NET/IB : %s: post of %zu bytes on QP %u (peer %s) failed: %s", ibDevName(c), len, c->qps[q]->qp_num,
             c->peerStr, strerror(err));
        c->err = 1;
        return commSystemError;
      }
    }
    r->posted = 1;
    c->started++;
  }
  return commSuccess;
}

static commResult_t ibIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  *request = NULL;
  ibComm* c = (ibComm*)sendComm;
  if (!c || !c->isSend) return commInvalidArgument;
  if (c->err) return commRemoteError;
  if (size > IB_MAX_MESSAGE || (size > 0 && !mhandle)) {
    WARN("NET/IB : isend of %zu bytes %s", size, mhandle ? "is too large" : "without a registration");
    return commInvalidArgument;
  }
  ibReq* r = &c->reqs[c->posted % IB_NREQ];
  if (r->used) return commSuccess; /* no credit slot free: the caller retries */
  memset(r, 0, sizeof(*r));
  r->comm = c;
  r->used = 1;
  r->seq = c->posted++;
  r->data = (char*)data;
  r->size = size;
  r->tag = tag;
  r->lkey = mhandle ? ((ibMr*)mhandle)->mr->lkey : 0;
  r->pending = c->nQps;
  *request = r;
  return ibSendProgress(c);
}

/* Connection bring-up after connect()/accept() returned (see commNetIbConnectStep): commTimeout past the
 * deadline. */
static commResult_t ibUpProgress(ibComm* c) {
  if (c->up) return commSuccess;
  commResult_t res = c->isSend ? commNetIbConnectStep(c, NULL) : commNetIbAcceptStep(NULL, c);
  if (res == commSuccess && !c->up && commTimeNs() > c->deadline) {
    WARN("NET/IB : %s: connection %s %s timed out (no answer, COMM_TIMEOUT_MS=%lld)", ibDevName(c),
         c->isSend ? "to" : "from", c->peerStr, (long long)c->timeoutMs);
    res = commTimeout;
  }
  if (res != commSuccess) c->err = 1;
  return res;
}

/* Receiver: post the credits of the posted receives, in order, once the QPs are up. */
static commResult_t ibRecvProgress(ibComm* c) {
  COMMCHECK(ibUpProgress(c));
  if (!c->up) return commSuccess;
  while (c->started < c->posted) {
    uint64_t seq = c->started;
    ibCts* cts = &c->fifo[seq % IB_NREQ];
    struct ibv_sge sge = {(uint64_t)(uintptr_t)cts, (uint32_t)sizeof(*cts), c->fifoMr->lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = IB_WRID_CTS | (seq % IB_NREQ);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = c->remFifoAddr + (seq % IB_NREQ) * sizeof(ibCts);
    wr.wr.rdma.rkey = c->remFifoRkey;
    int err = commNetIbTable->postSend(c->qps[0], &wr, &bad);
    if (err) {
      WARN("NET/IB : %s: posting the credit on QP %u (peer %s) failed: %s", ibDevName(c), c->qps[0]->qp_num, c->peerStr,
           strerror(err));
      c->err = 1;
      return commSystemError;
    }
    c->started++;
  }
  return commSuccess;
}

static commResult_t ibIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                            void** request) {
  *request = NULL;
  ibComm* c = (ibComm*)recvComm;
  if (!c || c->isSend || n != 1) {
    WARN("NET/IB : irecv supports exactly one buffer (n=%d)", n);
    return commInvalidArgument;
  }
  if (c->err) return commRemoteError;
  if (sizes[0] > 0 && (!mhandles || !mhandles[0])) {
    WARN("NET/IB : irecv of %zu bytes without a registration", sizes[0]);
    return commInvalidArgument;
  }
  uint64_t seq = c->posted;
  ibReq* r = &c->reqs[seq % IB_NREQ];
  if (r->used) return commSuccess;
  /* The receives first (one per QP: each piece consumes one), then the credit. */
  for (int q = 0; q < c->nQps; q++) {
    struct ibv_recv_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = seq % IB_NREQ;
    int err = commNetIbTable->postRecv(c->qps[q], &wr, &bad);
    if (err) {
      WARN("NET/IB : %s: posting a receive on QP %u (peer %s) failed: %s", ibDevName(c), c->qps[q]->qp_num, c->peerStr,
           strerror(err));
      c->err = 1;
      return commSystemError;
    }
  }
  memset(r, 0, sizeof(*r));
  r->comm = c;
  r->used = 1;
  r->seq = seq;
  r->cap = sizes[0];
  r->pending = c->nQps;
  c->posted++;
  ibCts* cts = &c->fifo[seq % IB_NREQ];
  cts->addr = (uint64_t)(uintptr_t)data[0];
  cts->size = sizes[0];
  cts->rkey = sizes[0] > 0 ? ((ibMr*)mhandles[0])->mr->rkey : 0;
  cts->tag = tags ? tags[0] : 0;
  cts->seq = seq + 1;
  *request = r;
  return ibRecvProgress(c);
}

/* Device buffers the NIC wrote: flushed where the GPU needs it (ib_gdr.c), at once; host memory needs
 * nothing. No request is left to test. */
static commResult_t ibIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  (void)recvComm;
  (void)data;
  *request = NULL;
  for (int i = 0; i < n; i++) {
    const ibMr* m = mhandles ? (const ibMr*)mhandles[i] : NULL;
    if (m && m->gpu >= 0 && sizes[i] > 0) COMMCHECK(ibGdrFlush(m->gpu));
  }
  return commSuccess;
}

static commResult_t ibTest(void* request, int* done, size_t* sizes) {
  ibReq* r = (ibReq*)request;
  *done = 0;
  if (!r || !r->used) return commInvalidArgument;
  ibComm* c = r->comm;
  /* A request whose completions all came is done even when the connection failed after them (a peer that sent
   * its last message and closed): the caller retires it and learns of the failure from the next one. */
  commResult_t res = c->err ? commRemoteError : commSuccess;
  if (res == commSuccess) res = c->isSend ? ibSendProgress(c) : ibRecvProgress(c);
  if (res == commSuccess && c->up) res = ibPollCq(c);
  if (res == commSuccess && c->isSend) res = ibSendProgress(c);
  if (r->pending > 0 || (c->isSend && !r->posted)) return res;
  *done = 1;
  if (sizes) sizes[0] = c->isSend ? r->size : r->got;
  r->used = 0;
  return commSuccess;
}

static commResult_t ibCloseComm(void* comm) {
  commNetIbFreeComm((ibComm*)comm);
  return commSuccess;
}

static commResult_t ibCloseListen(void* listenComm) {
  ibListen* l = (ibListen*)listenComm;
  if (!l) return commSuccess;
  commNetIbFreeComm(l->pending);
  if (l->fd >= 0) close(l->fd);
  free(l);
  return commSuccess;
}

struct ibv_qp* commNetIbCommQp(void* comm, int i) {
  ibComm* c = (ibComm*)comm;
  return c && i >= 0 && i < c->nQps ? c->qps[i] : NULL;
}

int commNetIbCommNumQps(void* comm) { return comm ? ((ibComm*)comm)->nQps : 0; }

static const commNet_t ibNet = {
    .name = "IB",
    .version = COMM_NET_PLUGIN_VERSION,
    .init = ibInit,
    .devices = ibDevices,
    .getProperties = ibGetProperties,
    .listen = commNetIbListen,
    .connect = commNetIbConnect,
    .accept = commNetIbAccept,
    .regMr = ibRegMr,
    .deregMr = ibDeregMr,
    .isend = ibIsend,
    .irecv = ibIrecv,
    .iflush = ibIflush,
    .test = ibTest,
    .closeSend = ibCloseComm,
    .closeRecv = ibCloseComm,
    .closeListen = ibCloseListen,
    .connectPaired = NULL,
};

const commNet_t* commNetIbPlugin(const commIbVerbs* verbs) {
  pthread_mutex_lock(&ibLock);
  commNetIbTable = verbs;
  pthread_mutex_unlock(&ibLock);
  return &ibNet;
}

#else
typedef int commNetIbNoVerbs_t; /* without <infiniband/verbs.h>: nothing */
#endif /* COMM_HAVE_IBVERBS */
