/* Control API of the in-process software RDMA device behind commIbFakeVerbs() (ib_verbs_fake.c), a fake
 * built for the tests only (tests/fakes/ib_verbs/): linked into the unit tests that drive it directly, and
 * as the module libcomm-verbs-fake.so that libcomm loads with COMM_IB_FAKE set (its entry point,
 * commIbFakeOpen, is declared in transports/net/ib/ib_verbs_fake_abi.h).
 *
 * What it is: N configurable devices (name, ports, link layer InfiniBand or Ethernet/RoCE, speed and width,
 * LIDs, GID tables with RoCE v1/v2 entries), protection domains, memory regions with lkey/rkey and access
 * checks, completion queues and reliable-connected QPs, all in this process. A QP connects (INIT->RTR) to
 * another fake QP of this process by LID (InfiniBand) or GID (RoCE, or InfiniBand with a GRH) and QPN.
 *
 * The wire: posting a work request only queues it; it is executed (data moved, receive consumed,
 * completions made) by a "wire step", never by the post itself. By default each pollCq call (on any CQ)
 * and each commIbFakeProgress call runs one wire step for every QP of the process, so a receiver that
 * polls also moves its sender's data, as a NIC would without the sender's CPU. With options.wireThread a
 * background thread runs the steps instead and pollCq only reads. Everything is under one process-wide
 * lock: any call (verbs or control API) may come from any thread.
 *
 * Work requests: RDMA_WRITE, RDMA_WRITE_WITH_IMM, SEND, SEND_WITH_IMM, RDMA_READ; signaled or not (or
 * sq_sig_all); inline (the data is copied at post) or from registered memory (read at execution, as a NIC
 * does DMA). A write with immediate consumes the target's oldest receive and completes it with
 * IBV_WC_RECV_RDMA_WITH_IMM, imm_data (as posted, network order), byte_len, src_qp and slid.
 *
 * Reliable-connected semantics kept: each QP's work requests execute and complete in posting order; a
 * send-side error completes that WR with the error and moves the QP to the error state, after which every
 * queued or newly posted WR (send and receive) completes with IBV_WC_WR_FLUSH_ERR (even unsignaled ones);
 * receives are consumed in posting order; a target QP accepts only its connected peer (LID/GID, QPN and
 * start PSN must match, RoCE GID types must match), otherwise the sender retries retry_cnt times (one try
 * per wire step) and fails with IBV_WC_RETRY_EXC_ERR.
 *
 * Receiver not ready (RNR): a SEND or RDMA_WRITE_WITH_IMM reaching a QP with no posted receive is retried
 * once per wire step, blocking that QP's later WRs (RC order); after rnr_retry retries (7: forever) it
 * completes with IBV_WC_RNR_RETRY_EXC_ERR and the sender QP goes to error (the receiver is unaffected).
 *
 * Remote errors: a bad rkey, a range outside the MR, an MR of another PD, or an MR or QP without the remote
 * access right gives the sender IBV_WC_REM_ACCESS_ERR and moves both QPs to error (the responder's posted
 * receives flush). A SEND larger than the receive's buffers: receiver IBV_WC_LOC_LEN_ERR, sender
 * IBV_WC_REM_INV_REQ_ERR, both QPs to error; receive buffers outside the responder's MRs: receiver
 * IBV_WC_LOC_PROT_ERR, sender IBV_WC_REM_OP_ERR. A bad lkey / local range: IBV_WC_LOC_PROT_ERR (sender).
 * A zero-length RDMA write or read checks no key (as hardware).
 *
 * Send queue accounting as on hardware: a WR holds its send-queue slot until a completion of it or of a
 * later WR of the same QP is polled, so a QP that never posts a signaled WR fills up (post gives ENOMEM).
 * A CQ that would overflow is a fatal CQ error: its pollCq returns -1 (errno EOVERFLOW) from then on.
 *
 * Limits: RC QPs only (no UD, SRQ, atomics, memory windows, completion channels or async events); timeout,
 * SL, traffic class and MTU segmentation have no effect (packets cannot be lost except as described); at
 * most COMM_IB_FAKE_MAX_SGE scatter/gather entries per WR and COMM_IB_FAKE_MAX_INLINE inline bytes;
 * error completions carry an opcode (hardware leaves it undefined; use wr_id) and byte_len 0; as with
 * libibverbs, struct ibv_qp's `state` field changes only in modifyQp (an error on the wire shows in the
 * completions and in queryQp); the verbs structs' inline ops are not filled (calling ibv_post_send or
 * ibv_poll_cq directly on a fake object crashes: everything must go through the table); closeDevice,
 * deallocPd and destroyCq refuse (EBUSY) while objects made from them are alive, so tests catch leaks.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_IB_VERBS_FAKE_H_
#define COMM_IB_VERBS_FAKE_H_

#include "ib_verbs.h"
#include "ib_verbs_fake_abi.h"

#ifdef COMM_HAVE_IBVERBS
#ifdef __cplusplus
extern "C" {
#endif

#define COMM_IB_FAKE_MAX_DEVS 8
#define COMM_IB_FAKE_MAX_PORTS 2
#define COMM_IB_FAKE_MAX_GIDS 8
#define COMM_IB_FAKE_MAX_SGE 8
#define COMM_IB_FAKE_MAX_INLINE 256
#define COMM_IB_FAKE_MAX_QP_WR 4096
#define COMM_IB_FAKE_MAX_CQE 65536

/* The fake's verbs table. Always available. */
const commIbVerbs* commIbFakeVerbs(void);

/* The module's entry point (ib_verbs_fake_open.c; see commIbFakeOpenFn in ib_verbs_fake_abi.h). */
const commIbVerbs* commIbFakeOpen(const char* spec, const commIbFakeHost* host, commIbFakeGdr* gdr, char* why,
                                  size_t whyLen);

/* How the wire moves data that may be in device memory (copied; NULL or NULL callbacks: all host memory,
 * the default). */
void commIbFakeSetHost(const commIbFakeHost* host);

typedef struct {
  uint8_t raw[16];
  commIbGidType_t type;
} commIbFakeGid;

typedef struct {
  enum ibv_port_state state;
  uint8_t linkLayer;   /* IBV_LINK_LAYER_INFINIBAND or IBV_LINK_LAYER_ETHERNET */
  uint8_t activeSpeed; /* ibv_port_attr encoding: 1 SDR, 2 DDR, 4 QDR, 8 FDR10, 16 FDR, 32 EDR, 64 HDR, 128 NDR */
  uint8_t activeWidth; /* 1: 1x, 2: 4x, 4: 8x, 8: 12x, 16: 2x */
  enum ibv_mtu activeMtu;
  uint16_t lid; /* InfiniBand: this port's LID (keep LIDs distinct in one configuration); Ethernet: 0 */
  int nGids;    /* entries [0, nGids) are in use; the table has COMM_IB_FAKE_MAX_GIDS entries */
  commIbFakeGid gids[COMM_IB_FAKE_MAX_GIDS];
} commIbFakePort;

typedef struct {
  char name[64];
  uint64_t guid;
  uint32_t vendorPartId;
  int nPorts; /* 1 .. COMM_IB_FAKE_MAX_PORTS; port numbers are 1 .. nPorts */
  commIbFakePort ports[COMM_IB_FAKE_MAX_PORTS];
} commIbFakeDevice;

/* Fill `dev` as a typical one-port device number `index` (which makes its GUID, LID and addresses unique):
 * InfiniBand: ACTIVE, HDR 4x (200 Gb/s), MTU 4096, LID index+1, GID 0 = fe80::<guid> (IB).
 * Ethernet: ACTIVE, EDR-speed 4x (100 Gb/s), MTU 1024, and the GID table a RoCE NIC with one IPv4 address
 * shows: 0 fe80::<guid> v1, 1 the same v2, 2 ::ffff:10.0.<index>.1 v1, 3 the same v2. */
void commIbFakeDeviceInit(commIbFakeDevice* dev, const char* name, uint8_t linkLayer, int index);
/* GID helpers: an IPv4-mapped address (a.b.c.d as host-order 0xaabbccdd), a link-local one from a GUID. */
void commIbFakeGidIpv4(commIbFakeGid* gid, uint32_t ipv4, commIbGidType_t type);
void commIbFakeGidLinkLocal(commIbFakeGid* gid, uint64_t guid, commIbGidType_t type);

/* Replace the set of devices (0 .. COMM_IB_FAKE_MAX_DEVS). EBUSY while any device is open; EINVAL for a
 * bad configuration. Before the first call there are two devices: "fakeib0" (InfiniBand) and "fakeroce0"
 * (Ethernet), as commIbFakeDeviceInit makes them with indexes 0 and 1. */
int commIbFakeConfigure(int nDevs, const commIbFakeDevice* devs);

typedef struct {
  int wireThread;   /* 0 (default): pollCq / commIbFakeProgress run the wire steps; 1: a background thread
                     * runs one every wireThreadUs microseconds and pollCq only reads completions */
  int wireThreadUs; /* default 10 */
  int reorder;      /* 0 (default): WRs of all QPs execute in posting order; 1: each step takes QPs in a
                     * random order (from `seed`) and adds 0-3 steps of random delay per WR, so completions
                     * of different QPs (on one CQ or on several) come out of order; each QP keeps its own */
  uint64_t seed;
  int delaySteps; /* a WR executes no earlier than this many wire steps after its post (default 1, >= 1) */
  int maxPerStep; /* WRs executed per wire step, all QPs together (0, default: every eligible one) */
  int dmabuf;     /* 0 (default): regDmabufMr gives EOPNOTSUPP, as a library or NIC without dma-buf; 1: it
                     * registers [iova, iova + length) as regMr would (the fake has no GPU: a test's stand-in
                     * for device memory is host memory at iova), after checking fd >= 0 (else EBADF) */
} commIbFakeOptions;
void commIbFakeGetOptions(commIbFakeOptions* opt);
/* Starts or stops the wire thread as asked. EINVAL for out-of-range values. */
int commIbFakeSetOptions(const commIbFakeOptions* opt);
/* Back to the defaults above (stops the wire thread) and clears every pending commIbFakeFailCall. */
void commIbFakeResetOptions(void);

/* Run one wire step now (whatever the options); returns the number of WRs (send or receive) it completed
 * or flushed. */
int commIbFakeProgress(void);

/* The next `count` send-queue completions of `qp` (WRs it executes from now on, signaled or not) fail with
 * `status` instead of executing; the first moves the QP to the error state, and once the count is used up
 * the rest flush (IBV_WC_WR_FLUSH_ERR). 0, or EINVAL for a QP that is not a fake one. */
int commIbFakeInjectError(struct ibv_qp* qp, int count, enum ibv_wc_status status);

/* Make a verbs call fail: after `after` more successful calls of that kind, the next one fails with errno
 * value `err` (int calls return it, pointer calls return NULL with errno set); once. */
typedef enum {
  COMM_IB_FAKE_CALL_GET_DEVICE_LIST,
  COMM_IB_FAKE_CALL_OPEN_DEVICE,
  COMM_IB_FAKE_CALL_QUERY_PORT,
  COMM_IB_FAKE_CALL_ALLOC_PD,
  COMM_IB_FAKE_CALL_REG_MR,
  COMM_IB_FAKE_CALL_CREATE_CQ,
  COMM_IB_FAKE_CALL_CREATE_QP,
  COMM_IB_FAKE_CALL_MODIFY_QP,
  COMM_IB_FAKE_CALL_POST_SEND,
  COMM_IB_FAKE_CALL_POST_RECV,
  COMM_IB_FAKE_CALL_COUNT
} commIbFakeCall_t;
int commIbFakeFailCall(commIbFakeCall_t call, int after, int err);

typedef struct {
  int contexts, pds, mrs, cqs, qps; /* alive now */
  uint64_t wrsExecuted;             /* send WRs executed successfully */
  uint64_t bytes;                   /* bytes moved by them */
  uint64_t rnrRetries;              /* receiver-not-ready retries */
  uint64_t retries;                 /* transport retries (unreachable or mismatched peer) */
  uint64_t steps;                   /* wire steps run */
  uint64_t cqOverruns;
} commIbFakeStats;
void commIbFakeGetStats(commIbFakeStats* stats);

#ifdef __cplusplus
}
#endif
#endif /* COMM_HAVE_IBVERBS */
#endif /* COMM_IB_VERBS_FAKE_H_ */
