/* Internals shared by the fake RDMA device's object layer (ib_verbs_fake.c), its QPs (ib_verbs_fake_qp.c)
 * and its wire (ib_verbs_fake_wire.c). Not for the transport or the tests: they use ib_verbs_fake.h. Every field is
 * protected by gFake.lock. */
#ifndef COMM_IB_VERBS_FAKE_INT_H_
#define COMM_IB_VERBS_FAKE_INT_H_

#include "ib_verbs_fake.h"

#ifdef COMM_HAVE_IBVERBS
#include <pthread.h>

typedef struct {
  struct ibv_device ibdev; /* first: the pointer handed out is this */
  commIbFakeDevice cfg;
  int index;
} fakeDev;

typedef struct {
  struct ibv_context ctx;
  fakeDev* dev;
  int pds, cqs;
} fakeCtx;

typedef struct {
  struct ibv_pd pd;
  int mrs, qps;
} fakePd;

typedef struct fakeMr {
  struct ibv_mr mr;
  int access;
  struct fakeMr* next;
} fakeMr;

struct fakeQp;
typedef struct {
  struct ibv_wc wc;
  struct fakeQp* qp; /* the QP it belongs to (its CQEs are purged when it is reset or destroyed) */
  uint64_t qseq;     /* send completions: the WR's per-QP sequence number, for send-queue accounting */
  int isSend;
} fakeCqe;

typedef struct {
  struct ibv_cq cq;
  fakeCqe* ring;
  int cap, head, count;
  int overrun;
  int qps; /* QPs using it */
} fakeCq;

typedef struct {
  uint64_t wrId;
  enum ibv_wr_opcode opcode;
  unsigned int flags;
  uint32_t imm; /* network order, as posted */
  uint64_t raddr;
  uint32_t rkey;
  int nSge;
  struct ibv_sge sge[COMM_IB_FAKE_MAX_SGE];
  size_t len;
  int isInline;
  uint8_t inl[COMM_IB_FAKE_MAX_INLINE];
  uint64_t gseq;     /* process-wide posting order */
  uint64_t qseq;     /* this QP's posting order */
  uint64_t eligible; /* first wire step that may execute it */
} fakeSwr;

typedef struct {
  uint64_t wrId;
  int nSge;
  struct ibv_sge sge[COMM_IB_FAKE_MAX_SGE];
} fakeRwr;

typedef struct fakeQp {
  struct ibv_qp qp;
  struct fakeQp* next;
  fakeCtx* ctx;
  fakePd* pd;
  fakeCq* scq;
  fakeCq* rcq;
  struct ibv_qp_cap cap;
  int sqSigAll;
  fakeSwr* sq; /* ring of cap.max_send_wr: posted, not yet executed */
  int sqHead, sqCount;
  uint64_t sqPosted, sqRetired; /* slots in use: sqPosted - sqRetired */
  fakeRwr* rq;                  /* ring of rqCap: posted, not yet consumed */
  int rqCap, rqHead, rqCount;
  enum ibv_qp_state state;
  /* attributes */
  uint8_t port;
  uint16_t pkeyIndex;
  int access;
  enum ibv_mtu mtu;
  uint32_t destQpn, rqPsn, sqPsn;
  struct ibv_ah_attr ah;
  uint8_t timeout, retryCnt, rnrRetry, minRnrTimer, maxRdAtomic, maxDestRdAtomic;
  /* wire state */
  int retryTries, rnrTries;
  uint64_t blockedStep; /* the wire step in which its head WR could not proceed */
  int injectCount;
  enum ibv_wc_status injectStatus;
} fakeQp;

typedef struct {
  pthread_mutex_t lock;
  int configured;
  int nDevs;
  fakeDev devs[COMM_IB_FAKE_MAX_DEVS];
  commIbFakeOptions opt;
  uint64_t step, gseq, rng;
  fakeQp* qps;
  fakeMr* mrs;
  uint32_t nextQpn, nextKey, nextHandle;
  struct {
    int armed, after, err;
  } fail[COMM_IB_FAKE_CALL_COUNT];
  commIbFakeStats stats;
  pthread_t thread;
  int threadRunning, threadStop;
  commIbFakeHost host; /* device memory callbacks (commIbFakeSetHost) */
} fakeFabric;

extern fakeFabric gFake;

/* One wire step (gFake.lock held): flush QPs in error, then execute eligible WRs. Returns completions. */
int fakeWireStepLocked(void);
uint64_t fakeRandLocked(void);
/* Move a QP to the error state (its queued WRs flush at the next wire step). */
void fakeQpSetError(fakeQp* qp);
/* Drop a QP's completions from its CQs (reset, destroy: as providers do). */
void fakeQpPurgeCqes(fakeQp* qp);
fakeQp* fakeFindQp(uint32_t qpn);
/* 0, or the errno value an armed commIbFakeFailCall asks this call to fail with (lock held). */
int fakeFailNowLocked(commIbFakeCall_t call);

/* QPs, their state machine and posting (ib_verbs_fake_qp.c). */
struct ibv_qp* fakeCreateQp(struct ibv_pd* pd, struct ibv_qp_init_attr* init);
int fakeModifyQp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask);
int fakeQueryQp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask, struct ibv_qp_init_attr* init);
int fakeDestroyQp(struct ibv_qp* qp);
int fakePostSend(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad);
int fakePostRecv(struct ibv_qp* qp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad);

#endif /* COMM_HAVE_IBVERBS */
#endif /* COMM_IB_VERBS_FAKE_INT_H_ */
