/* The IB network plugin's private parts, shared by net_ib.c (devices, registration, data path, the plugin
 * table) and net_ib_conn.c (verbs resources, listen / connect / accept): limits, wire formats, the comm
 * structures and the process-wide state. Not installed; net_ib.h has the design.
 * SPDX-License-Identifier: Apache-2.0 */
#ifndef COMM_NET_IB_INT_H_
#define COMM_NET_IB_INT_H_

#include "net_ib.h"

#ifdef COMM_HAVE_IBVERBS
#include <stdint.h>

#include "ib_topo.h"
#include "socket.h"

#define IB_MAX_DEVS 16
#define IB_NREQ COMM_NET_IB_FIFO_DEPTH
#define IB_MAX_QPS COMM_NET_IB_MAX_QPS
#define IB_MAGIC 0x434f4d4d49424e31ull /* "COMMIBN1" */
#define IB_MAX_MESSAGE 0x7fffffffu
#define IB_POLL_BATCH 16

/* ---------------------------------------------------------------- process-wide state (net_ib.c) */

extern const commIbVerbs* commNetIbTable; /* the verbs table in use (commNetIbPlugin) */
extern int commNetIbNDevs;                /* ports found by init */
extern commIbPort commNetIbPorts[IB_MAX_DEVS];
extern int commNetIbHaveIf; /* the setup sockets' interface was found */
extern commSockAddr commNetIbIfAddr;

/* ---------------------------------------------------------------- wire formats */

/* A "clear to send" entry: written by the receiver into the sender's FIFO slot seq % IB_NREQ. `seq`
 * (request number + 1) comes last and is what the sender waits for. */
typedef struct {
  uint64_t addr;
  uint64_t size;
  uint32_t rkey;
  int32_t tag;
  uint64_t seq;
} ibCts;

/* Connection information, exchanged over the TCP socket (sender first, receiver answers). */
typedef struct {
  uint64_t magic;
  uint64_t listenMagic; /* sender: the handle's, so a listener takes only connections meant for it */
  uint32_t nQps;
  uint32_t qpn[IB_MAX_QPS];
  uint32_t psn;
  uint32_t mtu;
  uint32_t linkLayer;
  uint32_t lid;
  uint8_t gid[16];
  uint64_t fifoAddr; /* sender only: its credit FIFO */
  uint32_t fifoRkey;
  uint32_t pad;
} ibInfo;
_Static_assert(sizeof(ibInfo) % 8 == 0, "ibInfo has no tail padding");

typedef struct {
  commSockAddr addr;
  uint64_t magic;
  /* Connect's progress, kept in the caller's handle between calls (the caller passes the same handle). */
  void* stageComm;
} ibHandle;
_Static_assert(sizeof(ibHandle) <= COMM_NET_HANDLE_MAXSIZE, "IB handle too large");

/* ---------------------------------------------------------------- comms */

typedef struct ibComm ibComm;

/* A registration (the mhandle): page-aligned ranges of one comm's PD, shared by the registrations they
 * contain, released with the last. */
typedef struct ibMr {
  struct ibMr* next;
  uintptr_t start, end;
  struct ibv_mr* mr;
  int refs;
  int gpu; /* device memory: its CUDA ordinal (registered through GPUDirect RDMA, ib_gdr.c); host: -1 */
} ibMr;
typedef struct {
  ibComm* comm;
  int used;
  uint64_t seq;
  /* send */
  char* data;
  size_t size;
  int tag;
  uint32_t lkey;
  int posted; /* data WRs posted */
  /* receive */
  size_t cap;
  size_t got;  /* bytes received so far (sum of the pieces' immediates) */
  int pending; /* completions still expected (pieces: send or receive) */
} ibReq;

struct ibComm {
  int isSend;
  int dev;
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  int nQps;
  struct ibv_qp* qps[IB_MAX_QPS];
  int gidIndex;
  union ibv_gid gid;
  uint32_t psn;
  /* The sender's credit FIFO (remotely written), or the receiver's staging of the entries it writes. */
  ibCts* fifo;
  struct ibv_mr* fifoMr;
  uint64_t remFifoAddr;
  uint32_t remFifoRkey;
  ibReq reqs[IB_NREQ];
  uint64_t posted;  /* requests posted */
  uint64_t started; /* sender: requests whose data WRs are posted; receiver: whose credit is posted */
  int err;          /* sticky: a completion failed */
  int up;           /* QPs connected on both sides (the setup socket is closed) */
  ibMr* mrs;        /* the registration cache */
  char peerStr[96];
  /* connection setup */
  int fd;
  int stage;
  int64_t deadline, timeoutMs;
  ibInfo local, remote;
  size_t off;
  uint8_t ready;
};

typedef struct {
  int dev;
  int fd;
  uint64_t magic;
  ibComm* pending; /* the connection being accepted */
  commSockAddr pendingAddr;
} ibListen;

static inline const char* ibDevName(const ibComm* c) { return commNetIbPorts[c->dev].devName; }

/* ---------------------------------------------------------------- net_ib_conn.c */

/* Frees a comm and every verbs resource it holds (NULL: nothing). */
void commNetIbFreeComm(ibComm* c);
/* The plugin's listen, connect and accept. */
commResult_t commNetIbListen(int dev, void* handle, void** listenComm);
commResult_t commNetIbConnect(int dev, void* handle, void** sendComm);
commResult_t commNetIbAccept(void* listenComm, void** recvComm);
/* The bring-up that continues after connect()/accept() returned a comm (h / l NULL then): the QPs to
 * ready-to-send once both sides' information is exchanged (c->up). */
commResult_t commNetIbConnectStep(ibComm* c, const ibHandle* h);
commResult_t commNetIbAcceptStep(ibListen* l, ibComm* c);

#endif /* COMM_HAVE_IBVERBS */
#endif /* COMM_NET_IB_INT_H_ */
