/* The executor's kernel: one thread block per channel runs that channel's schedule steps in order, with
 * the Simple protocol over device FIFOs (src/exec/exec_dev.h).
 *
 * Per slot, the sender: thread 0 waits until the slot is free (tail), the block fills the slot's payload
 * with 16-byte vector stores (applying the op where the step says) while thread 0 stores the operation's
 * signature at the slot's start (exec_dev.h), the block syncs, and thread 0 stores the slot's size, fences (acquire-release;
 * GPU scope, or system scope towards another GPU: cumulative, so it orders the block's data stores it saw
 * through the barrier too) and stores head. The receiver: thread 0 waits for head, fences (acquire), reads
 * size and signature, the block syncs and checks them, the block reads the payload through L2
 * (ld.global.cg: the slot was written by another SM, or another GPU, and L1 is not coherent), syncs, and
 * thread 0 stores tail. Every wait watches the communicator's abort flag (mapped host memory) and its timeout
 * (globaltimer); on either, or on a slot of another operation or size than the step expects, the block
 * records the failure in mapped host memory and all its threads return. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "elem_ops.cuh"
#include "exec_dev.h"

namespace {
using namespace commdev;

#define SPINS_BEFORE_CHECK 256

__device__ __forceinline__ uint64_t globalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint64_t loadVolatile(const uint64_t* p) { return *(const volatile uint64_t*)p; }
__device__ __forceinline__ void storeVolatile(uint64_t* p, uint64_t v) { *(volatile uint64_t*)p = v; }
/* Acquire-release fence at system scope (a peer on another GPU, or the host) or GPU scope: lighter than
 * __threadfence / __threadfence_system (sequentially consistent fences), and all a FIFO's flags need. */
__device__ __forceinline__ void fenceAcqRel(bool sys) {
  if (sys) asm volatile("fence.acq_rel.sys;" ::: "memory");
  else asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

/* Loads through L2 for every width. */
template <typename T>
__device__ __forceinline__ T ldcg(const T* p);
template <>
__device__ __forceinline__ uint8_t ldcg(const uint8_t* p) {
  return __ldcg(p);
}
template <>
__device__ __forceinline__ int8_t ldcg(const int8_t* p) {
  return (int8_t)__ldcg((const signed char*)p);
}
template <>
__device__ __forceinline__ uint16_t ldcg(const uint16_t* p) {
  return __ldcg(p);
}
template <>
__device__ __forceinline__ uint32_t ldcg(const uint32_t* p) {
  return __ldcg(p);
}
template <>
__device__ __forceinline__ int32_t ldcg(const int32_t* p) {
  return __ldcg(p);
}
template <>
__device__ __forceinline__ uint64_t ldcg(const uint64_t* p) {
  return __ldcg((const unsigned long long*)p);
}
template <>
__device__ __forceinline__ int64_t ldcg(const int64_t* p) {
  return __ldcg((const long long*)p);
}
template <>
__device__ __forceinline__ float ldcg(const float* p) {
  return __ldcg(p);
}
template <>
__device__ __forceinline__ double ldcg(const double* p) {
  return __ldcg(p);
}

/* ---- Data movement: the block moves n elements ---- */

/* Vectors in flight per thread: loads are issued together before their stores, so one thread keeps
 * several 16-byte requests outstanding (one block per channel must saturate its share of memory). 8 against
 * 4 on 2 H200s: reducescatter at 1 GiB +11% busbw, alltoall +5%, allreduce and local reductions the same
 * (docs/PERF.md entry 14). */
#define UNROLL 8

/* d0 (and d1 when not NULL) = a, raw bytes. */
__device__ __noinline__ void copyBytes(char* d0, char* d1, const char* a, size_t bytes) {
  const int tid = threadIdx.x, nt = blockDim.x;
  uintptr_t mis = ((uintptr_t)d0 | (uintptr_t)a | (uintptr_t)(d1 ? d1 : d0)) & 15;
  size_t nVec = mis ? 0 : bytes / 16;
  const uint4* av = (const uint4*)a;
  uint4* dv0 = (uint4*)d0;
  uint4* dv1 = (uint4*)d1;
  size_t v = tid;
  for (; v + (UNROLL - 1) * nt < nVec; v += UNROLL * nt) {
    uint4 x[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) x[u] = __ldcg(av + v + u * nt);
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      dv0[v + u * nt] = x[u];
      if (d1) dv1[v + u * nt] = x[u];
    }
  }
  for (; v < nVec; v += nt) {
    uint4 x = __ldcg(av + v);
    dv0[v] = x;
    if (d1) dv1[v] = x;
  }
  for (size_t i = nVec * 16 + tid; i < bytes; i += nt) {
    uint8_t x = __ldcg((const uint8_t*)a + i);
    d0[i] = (char)x;
    if (d1) d1[i] = (char)x;
  }
}

template <class F, int KIND>
__device__ __forceinline__ uint4 opVec(uint4 va, const uint4* vb, const DevArgs& args) {
  typedef typename F::S S;
  const int per = sizeof(uint4) / sizeof(S);
  uint4 vd;
  const S* ea = (const S*)&va;
  S* ed = (S*)&vd;
  if (vb) {
    const S* eb = (const S*)vb;
#pragma unroll
    for (int k = 0; k < per; k++) ed[k] = Elem<F>::red(KIND, ea[k], eb[k], args);
  } else {
#pragma unroll
    for (int k = 0; k < per; k++) ed[k] = Elem<F>::cpy(KIND, ea[k], args);
  }
  return vd;
}

/* d0 (and d1) = b ? red(a, b) : cpy(a), for family F and op KIND. */
template <class F, int KIND>
__device__ void moveT(void* d0v, void* d1v, const void* av, const void* bv, size_t n, const DevArgs& args) {
  typedef typename F::S S;
  const int per = sizeof(uint4) / sizeof(S);
  const int tid = threadIdx.x, nt = blockDim.x;
  S* d0 = (S*)d0v;
  S* d1 = (S*)d1v;
  const S* a = (const S*)av;
  const S* b = (const S*)bv;
  uintptr_t mis = ((uintptr_t)d0 | (uintptr_t)a | (uintptr_t)(b ? b : a) | (uintptr_t)(d1 ? d1 : d0)) & 15;
  size_t nVec = mis ? 0 : n / per;
  const uint4* va = (const uint4*)a;
  const uint4* vb = (const uint4*)b;
  size_t v = tid;
  for (; v + (UNROLL - 1) * nt < nVec; v += UNROLL * nt) {
    uint4 x[UNROLL], y[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      x[u] = __ldcg(va + v + u * nt);
      if (b) y[u] = __ldcg(vb + v + u * nt);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      uint4 r = opVec<F, KIND>(x[u], b ? &y[u] : NULL, args);
      ((uint4*)d0)[v + u * nt] = r;
      if (d1) ((uint4*)d1)[v + u * nt] = r;
    }
  }
  for (; v < nVec; v += nt) {
    uint4 y;
    if (b) y = __ldcg(vb + v);
    uint4 r = opVec<F, KIND>(__ldcg(va + v), b ? &y : NULL, args);
    ((uint4*)d0)[v] = r;
    if (d1) ((uint4*)d1)[v] = r;
  }
  for (size_t i = nVec * per + tid; i < n; i += nt) {
    S x = ldcg(a + i);
    S r = b ? Elem<F>::red(KIND, x, ldcg(b + i), args) : Elem<F>::cpy(KIND, x, args);
    d0[i] = r;
    if (d1) d1[i] = r;
  }
}

template <class F>
__device__ void moveKind(int kind, void* d0, void* d1, const void* a, const void* b, size_t n, const DevArgs& args) {
  switch (kind) {
    case COMM_REDOP_SUM: moveT<F, COMM_REDOP_SUM>(d0, d1, a, b, n, args); break;
    case COMM_REDOP_PROD: moveT<F, COMM_REDOP_PROD>(d0, d1, a, b, n, args); break;
    case COMM_REDOP_MAX: moveT<F, COMM_REDOP_MAX>(d0, d1, a, b, n, args); break;
    case COMM_REDOP_MIN: moveT<F, COMM_REDOP_MIN>(d0, d1, a, b, n, args); break;
    case COMM_REDOP_PREMULSUM: moveT<F, COMM_REDOP_PREMULSUM>(d0, d1, a, b, n, args); break;
    default: moveT<F, COMM_REDOP_SUMPOSTDIV>(d0, d1, a, b, n, args); break;
  }
}

struct Plan {
  const commDevPlanHdr* h;
  const commDevConn* conns;
  uint64_t scalarBits;
};

/* An op on the data: every datatype x op kind (a large switch over template instances, kept out of line so
 * that plain copies do not pay for its registers). */
__device__ __noinline__ void moveOp(const Plan& p, void* d0, void* d1, const void* a, const void* b, size_t n, int pre,
                                    int post) {
  const commDevPlanHdr* h = p.h;
  int kind = h->redopKind;
  DevArgs args = {p.scalarBits, h->divisor, pre, post};
#define MOVE_CALL(F) moveKind<F>(kind, d0, d1, a, b, n, args)
  switch (h->dtype) {
    case commInt8: MOVE_CALL(I8Fam); break;
    case commUint8: MOVE_CALL(U8Fam); break;
    case commInt32: MOVE_CALL(I32Fam); break;
    case commUint32: MOVE_CALL(U32Fam); break;
    case commInt64: MOVE_CALL(I64Fam); break;
    case commUint64: MOVE_CALL(U64Fam); break;
    case commFloat16: MOVE_CALL(HalfFam); break;
    case commFloat32: MOVE_CALL(F32Fam); break;
    case commFloat64: MOVE_CALL(F64Fam); break;
    case commBfloat16: MOVE_CALL(Bf16Fam); break;
    case commFloat8e4m3: MOVE_CALL(E4m3Fam); break;
    default: MOVE_CALL(E5m2Fam); break;
  }
#undef MOVE_CALL
}

/* The block moves n elements: d0 (and d1) = b ? a op pre(b) : pre/post(a). A plain copy when the op
 * does nothing for these flags. */
__device__ __forceinline__ void move(const Plan& p, void* d0, void* d1, const void* a, const void* b, size_t n, int pre,
                                     int post) {
  const commDevPlanHdr* h = p.h;
  int kind = h->redopKind;
  if (b == NULL && !((pre && kind == COMM_REDOP_PREMULSUM) || (post && kind == COMM_REDOP_SUMPOSTDIV))) {
    if (d0 == a && d1 == NULL) return;
    copyBytes((char*)d0, (char*)d1, (const char*)a, n * h->eltSize);
    return;
  }
  moveOp(p, d0, d1, a, b, n, pre, post);
}

/* ---- Waiting (thread 0) ---- */

/* ---- Reduce chains: COPY d = s0, then REDUCE d = d op s1, ..., d op s(m-1) as one pass ----
 * The end of a one-shot allreduce (and any schedule that folds several buffers into one): each thread
 * loads its element of every source and folds them in order, rounding to the element type after each op
 * exactly as the separate steps would, and stores once: one barrier and one round of memory latency
 * instead of m. */
#define CHAIN_MAX_BYTES (64 << 10) /* small steps only: large folds keep the steps' unrolled copies */

template <class F, int KIND>
__device__ void chainT(void* dv, const commDevStep* sts, int m, size_t n, DevArgs args, int postLast, bool vec) {
  typedef typename F::S S;
  const int per = sizeof(uint4) / sizeof(S);
  const int tid = threadIdx.x, nt = blockDim.x;
  const size_t nVec = vec ? n / per : 0;
  for (size_t v = tid; v < nVec; v += nt) {
    uint4 x = __ldcg((const uint4*)sts[0].src + v);
    for (int k = 1; k < m; k++) {
      uint4 y = __ldcg((const uint4*)sts[k].src + v);
      args.post = k == m - 1 ? postLast : 0;
      x = opVec<F, KIND>(x, &y, args);
    }
    ((uint4*)dv)[v] = x;
  }
  for (size_t i = nVec * per + tid; i < n; i += nt) {
    S x = ldcg((const S*)sts[0].src + i);
    for (int k = 1; k < m; k++) {
      args.post = k == m - 1 ? postLast : 0;
      x = Elem<F>::red(KIND, x, ldcg((const S*)sts[k].src + i), args);
    }
    ((S*)dv)[i] = x;
  }
}

template <class F>
__device__ void chainKind(int kind, void* d, const commDevStep* sts, int m, size_t n, const DevArgs& args, int post,
                          bool vec) {
  switch (kind) {
    case COMM_REDOP_SUM: chainT<F, COMM_REDOP_SUM>(d, sts, m, n, args, post, vec); break;
    case COMM_REDOP_PROD: chainT<F, COMM_REDOP_PROD>(d, sts, m, n, args, post, vec); break;
    case COMM_REDOP_MAX: chainT<F, COMM_REDOP_MAX>(d, sts, m, n, args, post, vec); break;
    case COMM_REDOP_MIN: chainT<F, COMM_REDOP_MIN>(d, sts, m, n, args, post, vec); break;
    case COMM_REDOP_PREMULSUM: chainT<F, COMM_REDOP_PREMULSUM>(d, sts, m, n, args, post, vec); break;
    default: chainT<F, COMM_REDOP_SUMPOSTDIV>(d, sts, m, n, args, post, vec); break;
  }
}

/* Steps [s, s + m) that fold into one pass (0 or 1: none): a COPY without pre/post, then REDUCEs into the
 * same destination with the same count, none with pre, only the last with post, no source overlapping the
 * destination (unless it is the COPY's source and equal to it), all of at most CHAIN_MAX_BYTES. */
__device__ int reduceChainLength(const Plan& p, const commDevStep* steps, int s, int end) {
  const commDevStep& a = steps[s];
  const size_t bytes = a.count * p.h->eltSize;
  if (a.prim != COMM_PRIM_COPY || a.flags != 0 || a.count == 0 || bytes > CHAIN_MAX_BYTES) return 0;
  if (a.src != a.dst && a.src < a.dst + bytes && a.dst < a.src + bytes) return 0;
  int m = 1;
  for (int k = s + 1; k < end; k++) {
    const commDevStep& b = steps[k];
    if (b.prim != COMM_PRIM_REDUCE || b.dst != a.dst || b.count != a.count || (b.flags & COMM_STEP_PRE)) break;
    if (b.src < a.dst + bytes && a.dst < b.src + bytes) break;
    m++;
    if (b.flags & COMM_STEP_POST) break; /* post ends a fold */
  }
  return m;
}

/* The block runs the chain sts[0..m) (reduceChainLength). */
__device__ __noinline__ void runReduceChain(const Plan& p, const commDevStep* sts, int m) {
  const commDevPlanHdr* h = p.h;
  const size_t n = sts[0].count;
  bool vec = (sts[0].dst & 15) == 0;
  for (int k = 0; k < m && vec; k++) vec = (sts[k].src & 15) == 0;
  const int post = (sts[m - 1].flags & COMM_STEP_POST) != 0;
  DevArgs args = {p.scalarBits, h->divisor, 0, 0};
  void* d = (void*)sts[0].dst;
  int kind = h->redopKind;
#define CHAIN_CALL(F) chainKind<F>(kind, d, sts, m, n, args, post, vec)
  switch (h->dtype) {
    case commInt8: CHAIN_CALL(I8Fam); break;
    case commUint8: CHAIN_CALL(U8Fam); break;
    case commInt32: CHAIN_CALL(I32Fam); break;
    case commUint32: CHAIN_CALL(U32Fam); break;
    case commInt64: CHAIN_CALL(I64Fam); break;
    case commUint64: CHAIN_CALL(U64Fam); break;
    case commFloat16: CHAIN_CALL(HalfFam); break;
    case commFloat32: CHAIN_CALL(F32Fam); break;
    case commFloat64: CHAIN_CALL(F64Fam); break;
    case commBfloat16: CHAIN_CALL(Bf16Fam); break;
    case commFloat8e4m3: CHAIN_CALL(E4m3Fam); break;
    default: CHAIN_CALL(E5m2Fam); break;
  }
#undef CHAIN_CALL
}

struct Waiter {
  const commDevPlanHdr* h;
  const commDevConn* waitConn[2]; /* the connections thread 0 waits on (their proxy may report a failure) */
  uint64_t lastProgress;
  uint64_t waitNs, firstWaitEnd; /* COMM_DEV_TRACE: time thread 0 spent waiting; when its first wait ended */
  uint32_t nWaits;
};

__device__ __forceinline__ void traceWait(Waiter& w, uint64_t t0) {
  if (!w.h->trace) return;
  uint64_t t1 = globalTimer();
  w.waitNs += t1 - t0;
  if (w.nWaits++ == 0) w.firstWaitEnd = t1;
}

__device__ void reportError(const commDevPlanHdr* h, int code, int channel, int peer, int isSend, uint64_t got,
                            uint64_t expected) {
  commDevError* e = h->error;
  /* The first failure wins (two blocks failing at once may mix their details; either is a true one). Plain
   * stores: atomics on host memory are not available on every platform. */
  if (*(volatile int32_t*)&e->code != COMM_DEV_OK) return;
  e->channel = channel;
  e->peer = peer;
  e->isSend = isSend;
  e->opCount = h->opCount;
  e->got = got;
  e->expected = expected;
  __threadfence_system();
  *(volatile int32_t*)&e->code = code;
  __threadfence_system();
}

/* Has the wait gone on too long, or been aborted? COMM_DEV_OK otherwise. */
__device__ int checkWait(Waiter& w) {
  if (*w.h->abortFlag) return COMM_DEV_ABORTED;
  for (int i = 0; i < 2; i++)
    if (w.waitConn[i] && w.waitConn[i]->failed && *(volatile uint32_t*)w.waitConn[i]->failed)
      return COMM_DEV_NET_FAILED;
  if (*(volatile int32_t*)&w.h->error->code != COMM_DEV_OK) return COMM_DEV_ABORTED; /* another block failed */
  if (w.h->timeoutNs && globalTimer() - w.lastProgress > w.h->timeoutNs) return COMM_DEV_TIMEOUT;
  __nanosleep(100); /* ranks of other processes may share this GPU */
  return COMM_DEV_OK;
}

/* Wait until *p >= target. */
__device__ int waitAtLeast(Waiter& w, const uint64_t* p, uint64_t target) {
  int spins = 0;
  uint64_t t0 = w.h->trace ? globalTimer() : 0;
  while (loadVolatile(p) < target) {
    if (++spins == SPINS_BEFORE_CHECK) {
      spins = 0;
      int r = checkWait(w);
      if (r != COMM_DEV_OK) return r;
    }
  }
  w.lastProgress = globalTimer();
  traceWait(w, t0);
  return COMM_DEV_OK;
}

__shared__ int sErr;
extern __shared__ uint2 sPlan[]; /* hdr->smemPlanBytes: the plan's connections, then this channel's steps */
__shared__ uint64_t sSendPos, sRecvPos, sRecvSize;
__shared__ uint64_t sRecvSig[COMM_DEV_SIG_WORDS]; /* the signature of the slot at sRecvPos */
__shared__ int sAction;

#include "exec_sig.cuh" /* the operation signatures of the Simple protocol's slots */

/* Thread 0: a free slot on c (its position in sSendPos). */
__device__ int waitSend(Waiter& w, const commDevConn* c, uint32_t nSlots) {
  uint64_t pos = loadVolatile(c->pos);
  sSendPos = pos;
  w.waitConn[0] = c, w.waitConn[1] = NULL;
  /* No fence after: the receiver read the slot before it stored tail, and our stores into the slot depend on
   * the value of tail we read (stores are not speculated). */
  return waitAtLeast(w, c->tail, pos + 1 > nSlots ? pos + 1 - nSlots : 0);
}
/* Thread 0: a filled slot on c (position in sRecvPos, size in sRecvSize, signature in sRecvSig). */
__device__ int waitRecv(Waiter& w, const commDevConn* c, uint32_t nSlots) {
  uint64_t pos = loadVolatile(c->pos);
  sRecvPos = pos;
  w.waitConn[0] = c, w.waitConn[1] = NULL;
  int r = waitAtLeast(w, c->head, pos + 1);
  if (r == COMM_DEV_OK) {
    fenceAcqRel(c->sysScope); /* the header was stored before head */
    readSlotHeader(w.h, c, pos);
  }
  return r;
}
/* Thread 0, after the block's barrier: publish a filled slot (its header stored, bytes: the payload's).
 * One fence, cumulative: it orders the header and size stores and the block's data stores (ordered before
 * it by the barrier) before the head store, for observers on this GPU (gpu scope), or on another GPU or the
 * host (system scope, which costs more). */
__device__ void postSend(const commDevPlanHdr* h, const commDevConn* c, uint64_t pos, uint64_t bytes) {
  const uint32_t nSlots = h->nSlots;
  storeVolatile(&c->sizes[pos % nSlots], bytes + COMM_DEV_SIG_BYTES);
  fenceAcqRel(c->sysScope);
  storeVolatile(c->head, pos + 1);
  storeVolatile(c->pos, pos + 1);
}
__device__ void releaseRecv(const commDevConn* c, uint64_t pos) {
  storeVolatile(c->tail, pos + 1);
  storeVolatile(c->pos, pos + 1);
}

/* Block-wide: thread 0 ran a wait that returned r; everyone learns whether to go on. */
__device__ bool syncOk(int r) {
  if (threadIdx.x == 0) sErr = r; /* (the barrier orders shared memory; the waits fenced what they saw) */
  __syncthreads();
  return sErr == COMM_DEV_OK;
}

__device__ void fail(const Plan& p, int code, int channel, int peer, int isSend, uint64_t got, uint64_t expected) {
  if (threadIdx.x == 0) reportError(p.h, code, channel, peer, isSend, got, expected);
}

/* ---- LL lines and the send-and-receive choice (Simple and LL) ---- */

/* Is the line at p flagged flag0 in its first half and flag1 in its second? Its data in d. With firstOnly,
 * only the first half's flag is looked at (has a message begun to arrive?). */
__device__ __forceinline__ bool llLine(const char* p, uint32_t flag0, uint32_t flag1, uint32_t* d,
                                       bool firstOnly = false) {
  uint32_t d0, f0, d1, f1;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
               : "l"(p)
               : "memory");
  d[0] = d0, d[1] = d1;
  return f0 == flag0 && (firstOnly || f1 == flag1);
}

/* A send-and-receive step's choice, block-wide: thread 0 waits until the send side has a free slot or the
 * receive side a message (Simple: head moved, and its size is read; LL: the message's first line is there),
 * whichever comes first, and publishes it (sAction 1: send, 2: receive; positions in sSendPos / sRecvPos).
 * false (the failure recorded) when the wait gave up. */
__device__ bool chooseSendRecv(const Plan& p, Waiter& w, int ch, const commDevStep* st, const commDevConn* sc,
                               const commDevConn* rc, bool wantSend, bool wantRecv, bool ll) {
  const uint32_t nSlots = p.h->nSlots;
  if (threadIdx.x == 0) {
    int r = COMM_DEV_OK, action = 0, spins = 0;
    uint64_t spos = wantSend ? loadVolatile(sc->pos) : 0;
    uint64_t rpos = wantRecv ? loadVolatile(rc->pos) : 0;
    uint64_t t0 = w.h->trace ? globalTimer() : 0;
    uint32_t d[2];
    w.waitConn[0] = wantSend ? sc : NULL, w.waitConn[1] = wantRecv ? rc : NULL;
    for (;;) {
      if (wantSend && loadVolatile(sc->tail) + nSlots >= spos + 1) {
        action = 1;
        sSendPos = spos;
        break;
      }
      if (wantRecv &&
          (ll ? llLine(rc->llSlots + (rpos % nSlots) * COMM_DEV_LL_SLOT_BYTES, (uint32_t)(rpos + 1), 0, d, true)
              : loadVolatile(rc->head) >= rpos + 1)) {
        action = 2;
        sRecvPos = rpos;
        if (!ll) {
          fenceAcqRel(rc->sysScope); /* the header was stored before head */
          readSlotHeader(p.h, rc, rpos);
        }
        break;
      }
      if (++spins == SPINS_BEFORE_CHECK) {
        spins = 0;
        r = checkWait(w);
        if (r != COMM_DEV_OK) break;
      }
    }
    if (r == COMM_DEV_OK) {
      w.lastProgress = globalTimer();
      traceWait(w, t0);
    }
    sAction = action;
    sErr = r;
  }
  __syncthreads();
  if (sErr != COMM_DEV_OK) {
    fail(p, sErr, ch, wantSend ? st->sendPeer : st->recvPeer, wantSend, 0, 0);
    return false;
  }
  return true;
}

#include "exec_ll.cuh" /* the LL protocol */

/* One step of channel ch. false: the block stops (failure recorded). */
__device__ bool runStep(const Plan& p, Waiter& w, int ch, const commDevStep* st) {
  const commDevPlanHdr* h = p.h;
  const size_t elt = h->eltSize, piece = (h->slotBytes - COMM_DEV_SIG_BYTES) / elt; /* a slot: signature, payload */
  const uint32_t nSlots = h->nSlots;
  const commDevConn* sc = st->sendConn >= 0 ? &p.conns[st->sendConn] : NULL;
  const commDevConn* rc = st->recvConn >= 0 ? &p.conns[st->recvConn] : NULL;
  const int pre = st->flags & COMM_STEP_PRE, post = st->flags & COMM_STEP_POST;
  char* src = (char*)st->src;
  char* dst = (char*)st->dst;
  const bool tid0 = threadIdx.x == 0;

  if (h->proto == commProtoLL && st->prim != COMM_PRIM_NOP && st->prim != COMM_PRIM_COPY &&
      st->prim != COMM_PRIM_REDUCE)
    return runStepLL(p, w, ch, st);
  switch (st->prim) {
    case COMM_PRIM_NOP: return true;
    case COMM_PRIM_COPY: move(p, dst, NULL, src, NULL, st->count, pre, post); return true;
    case COMM_PRIM_REDUCE: move(p, dst, NULL, dst, src, st->count, pre, post); return true;
    case COMM_PRIM_SEND:
    case COMM_PRIM_COPY_SEND:
      for (size_t done = 0; done < st->count;) {
        size_t n = min(piece, (size_t)st->count - done);
        if (!syncOk(tid0 ? waitSend(w, sc, nSlots) : 0)) {
          fail(p, sErr, ch, st->sendPeer, 1, 0, 0);
          return false;
        }
        uint64_t pos = sSendPos;
        if (tid0) putSlotHeader(h, sc, pos);
        char* slot = sc->slots + (pos % nSlots) * h->slotBytes + COMM_DEV_SIG_BYTES;
        char* s = src + done * elt;
        char* d = st->prim == COMM_PRIM_COPY_SEND && (dst != src || pre || post) ? dst + done * elt : NULL;
        move(p, slot, d, s, NULL, n, pre, post);
        __syncthreads();
        if (tid0) postSend(h, sc, pos, n * elt);
        done += n;
      }
      return true;
    case COMM_PRIM_RECV:
    case COMM_PRIM_RECV_REDUCE_COPY:
      for (size_t done = 0; done < st->count;) {
        size_t n = min(piece, (size_t)st->count - done);
        if (!syncOk(tid0 ? waitRecv(w, rc, nSlots) : 0)) {
          fail(p, sErr, ch, st->recvPeer, 0, 0, 0);
          return false;
        }
        uint64_t pos = sRecvPos;
        if (!slotMatches(h, ch, st->recvPeer, n * elt)) return false;
        const char* slot = rc->slots + (pos % nSlots) * h->slotBytes + COMM_DEV_SIG_BYTES;
        if (st->prim == COMM_PRIM_RECV) move(p, dst + done * elt, NULL, slot, NULL, n, 0, post);
        else move(p, dst + done * elt, NULL, slot, src + done * elt, n, pre, post);
        __syncthreads();
        if (tid0) releaseRecv(rc, pos);
        done += n;
      }
      return true;
    case COMM_PRIM_RECV_REDUCE_SEND:
    case COMM_PRIM_RECV_COPY_SEND:
    case COMM_PRIM_RECV_REDUCE_COPY_SEND:
      for (size_t done = 0; done < st->count;) {
        size_t n = min(piece, (size_t)st->count - done);
        /* Both waits in thread 0, one block-wide decision (a second sync would race with the first's
         * readers). */
        int r = COMM_DEV_OK, sendFailed = 0;
        if (tid0) {
          r = waitRecv(w, rc, nSlots);
          if (r == COMM_DEV_OK) sendFailed = (r = waitSend(w, sc, nSlots)) != COMM_DEV_OK;
        }
        if (!syncOk(r)) {
          if (sendFailed) fail(p, sErr, ch, st->sendPeer, 1, 0, 0);
          else fail(p, sErr, ch, st->recvPeer, 0, 0, 0);
          return false;
        }
        uint64_t rpos = sRecvPos, spos = sSendPos;
        if (!slotMatches(h, ch, st->recvPeer, n * elt)) return false;
        if (tid0) putSlotHeader(h, sc, spos);
        const char* in = rc->slots + (rpos % nSlots) * h->slotBytes + COMM_DEV_SIG_BYTES;
        char* out = sc->slots + (spos % nSlots) * h->slotBytes + COMM_DEV_SIG_BYTES;
        size_t off = done * elt;
        if (st->prim == COMM_PRIM_RECV_REDUCE_SEND) move(p, out, NULL, in, src + off, n, pre, post);
        else if (st->prim == COMM_PRIM_RECV_COPY_SEND) move(p, dst + off, out, in, NULL, n, 0, post);
        else move(p, dst + off, out, in, src + off, n, pre, post);
        __syncthreads();
        if (tid0) {
          postSend(h, sc, spos, n * elt);
          releaseRecv(rc, rpos);
        }
        done += n;
      }
      return true;
    case COMM_PRIM_SEND_RECV: {
      size_t sendCount = sc ? st->count : 0, recvCount = rc ? st->recvCount : 0;
      size_t sendDone = 0, recvDone = 0;
      /* Both directions at once: thread 0 picks whichever side is ready, so two ranks exchanging more than
       * a FIFO holds never wait on each other. */
      while (sendDone < sendCount || recvDone < recvCount) {
        if (!chooseSendRecv(p, w, ch, st, sc, rc, sendDone < sendCount, recvDone < recvCount, false)) return false;
        if (sAction == 1) {
          size_t n = min(piece, sendCount - sendDone);
          uint64_t pos = sSendPos;
          if (tid0) putSlotHeader(h, sc, pos);
          move(p, sc->slots + (pos % nSlots) * h->slotBytes + COMM_DEV_SIG_BYTES, NULL, src + sendDone * elt, NULL, n,
               pre, 0);
          __syncthreads();
          if (tid0) postSend(h, sc, pos, n * elt);
          sendDone += n;
        } else {
          size_t n = min(piece, recvCount - recvDone);
          uint64_t pos = sRecvPos;
          if (!slotMatches(h, ch, st->recvPeer, n * elt)) return false;
          move(p, dst + recvDone * elt, NULL, rc->slots + (pos % nSlots) * h->slotBytes + COMM_DEV_SIG_BYTES, NULL, n,
               0, 0);
          __syncthreads();
          if (tid0) releaseRecv(rc, pos);
          recvDone += n;
        }
      }
      return true;
    }
    default: return true; /* the host refuses unknown primitives before launch */
  }
}

/* The kernel's parameters: the header and INL bytes of plan. */
template <int INL>
struct KernelArgs {
  commDevPlanHdr hdr;
  union {
    uint64_t align;
    char bytes[INL];
  } inl;
};

/* __grid_constant__: the plan is read in place from the parameter space (taking its address would otherwise
 * copy all of it into every thread's local memory first). */
template <int INL>
__global__ void __launch_bounds__(COMM_DEV_THREADS, 1) execKernel(const __grid_constant__ KernelArgs<INL> args) {
  const commDevPlanHdr* h = &args.hdr;
  const int ch = blockIdx.x;
  const char* base = h->planAddr ? (const char*)h->planAddr : args.inl.bytes;
  const size_t connBytes = (size_t)h->nConns * sizeof(commDevConn);
  const int nSteps = h->stepBegin[ch + 1] - h->stepBegin[ch];
  const char* stepSrc = base + connBytes + (size_t)h->stepBegin[ch] * sizeof(commDevStep);
  Plan p;
  p.h = h;
  p.conns = (const commDevConn*)base;
  const commDevStep* steps = (const commDevStep*)stepSrc; /* this channel's */
  if (h->smemPlanBytes) {
    /* The connections and this channel's steps into shared memory, all threads at once (one round of
     * latency): read in place, every access to the parameters (or, for large plans, to pinned host memory
     * over PCIe) would be a dependent miss of its own. 8-byte words: the inline area is 8-byte aligned. */
    const size_t cw = connBytes / 8, sw = (size_t)nSteps * sizeof(commDevStep) / 8;
    for (size_t i = threadIdx.x; i < cw; i += blockDim.x) sPlan[i] = ((const uint2*)base)[i];
    for (size_t i = threadIdx.x; i < sw; i += blockDim.x) sPlan[cw + i] = ((const uint2*)stepSrc)[i];
    p.conns = (const commDevConn*)sPlan;
    steps = (const commDevStep*)(sPlan + cw);
  }
  /* What the first steps are (a one-shot fold?) depends on the plan alone: found before the wait below, so
   * that a kernel launched early does it while the previous kernel still runs. */
  __syncthreads(); /* the plan's copy is complete */
  int foldPeers0 = 0;
  const int fold0 = nSteps > 0 ? llFoldLength(p, steps, 0, nSteps, &foldPeers0) : 0;
  if (h->earlyLaunch) {
    /* Launched early (programmatic dependent launch): wait here, before the first global memory access,
     * until the stream's previous kernel has completed and its memory is visible; a kernel launched
     * without the attribute passes at once. A one-block kernel then lets the next kernel of the stream
     * launch (its block waits here in turn): the launch's latency overlaps this kernel instead of
     * following it. Bigger kernels do not, so the blocks resident at once stay within the budget. */
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (gridDim.x == 1) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
  p.scalarBits = h->scalarBits;
  if (h->scalarAddr) { /* a device-resident PREMULSUM scalar, read now */
    const uint8_t* s = (const uint8_t*)h->scalarAddr;
    uint64_t bits = 0;
    for (uint32_t i = 0; i < h->eltSize; i++) bits |= (uint64_t)s[i] << (8 * i);
    p.scalarBits = bits;
  }
  if (threadIdx.x == 0) sLLErr = 0;
  __syncthreads(); /* every warp may read it first (an LL batch) */
  Waiter w = {h, {NULL, NULL}, globalTimer(), 0, 0, 0};
  const uint64_t start = w.lastProgress;
  if (h->proxyBusy && threadIdx.x == 0) { /* the proxy thread moves our net FIFOs while we run */
    *(volatile uint32_t*)&h->proxyBusy[ch] = 1;
    __threadfence_system();
  }
  int phase = 0;
  if (h->trace && ch == 0 && threadIdx.x == 0) h->trace[5] = globalTimer(); /* the prologue's end */
  for (int s = 0; s < nSteps; s++) {
    int foldPeers = foldPeers0;
    const int fold = s == 0 ? fold0 : llFoldLength(p, steps, s, nSteps, &foldPeers);
    const int m = fold ? 0 : llBatchLength(p, steps, s, nSteps);
    const int chain = fold || m ? 0 : reduceChainLength(p, steps, s, nSteps);
    if (fold > 0) {
      if (!runFoldLL(p, w, ch, steps + s, foldPeers)) goto done;
      s += fold - 1;
    } else if (m > 0) {
      if (!runBatchLL(p, w, ch, steps + s, m)) goto done;
      s += m - 1;
    } else if (chain > 1) {
      runReduceChain(p, steps + s, chain);
      s += chain - 1;
    } else {
      commDevStep st = steps[s];
      if (!runStep(p, w, ch, &st)) goto done;
    }
    __syncthreads();
    if (h->trace && ch == 0 && threadIdx.x == 0 && phase < COMM_DEV_TRACE_STEPS) h->trace[8 + phase] = globalTimer();
    phase++; /* a step, or steps run as one (batch, chain, fold) */
  }
  if (h->trace && ch == 0 && threadIdx.x == 0) { /* the latest kernel's timeline, read at the end */
    volatile uint64_t* t = h->trace;
    t[0] = start;
    t[1] = globalTimer();
    t[2] = w.waitNs;
    t[3] = w.nWaits;
    t[4] = w.firstWaitEnd;
  }
done:
  if (h->proxyBusy && threadIdx.x == 0) { /* thread 0 stored every head of this block before */
    __threadfence_system();
    *(volatile uint32_t*)&h->proxyBusy[ch] = 0;
  }
  if (h->doneBlocks) {
    /* This block's end, counted for the host's stream order (exec_dev.h). Every thread gets here (failures
     * stop the whole block); the barrier orders all of its stores before thread 0's release. */
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(h->doneBlocks) : "memory");
  }
}

template <int INL>
cudaError_t launchWith(const commDevArgs* a, size_t inlineBytes, int threads, cudaStream_t stream) {
  KernelArgs<INL> k;
  k.hdr = a->hdr;
  memcpy(k.inl.bytes, a->inl.bytes, inlineBytes);
  /* One launch path (cudaLaunchKernelEx: no dearer than <<<>>>, PERF.md entry 16). With early launch, a
   * one-channel kernel may launch while the stream's previous kernel still runs (it waits in its prologue,
   * griddepcontrol.wait); captured in a graph, this is a programmatic edge. */
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)a->hdr.nChannels);
  cfg.blockDim = dim3((unsigned)threads);
  cfg.dynamicSmemBytes = a->hdr.smemPlanBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = a->hdr.earlyLaunch && a->hdr.nChannels == 1 ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, execKernel<INL>, k);
}

}  // namespace

/* Load both kernel variants now: with CUDA's lazy loading (the default), a kernel's first launch loads it, and
 * a load while a peer's kernel spins waiting for this rank can wait for that kernel: a deadlock. */
extern "C" int commDevLoadKernels(commDevKernelInfo* info) {
  cudaFuncAttributes a;
  cudaError_t e = cudaFuncGetAttributes(&a, execKernel<COMM_DEV_INLINE_SMALL>);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, execKernel<COMM_DEV_INLINE_BYTES>);
  if (e != cudaSuccess) return (int)e;
  /* What bounds the blocks resident at once (every block of every rank on the GPU must be). */
  int dev = 0, perSmFull = 0, perSmSmall = 0;
  e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&info->smCount, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSmFull, execKernel<COMM_DEV_INLINE_BYTES>, COMM_DEV_THREADS,
                                                      0);
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSmSmall, execKernel<COMM_DEV_INLINE_BYTES>,
                                                      COMM_DEV_THREADS_SMALL, 0);
  info->numRegs = a.numRegs;
  info->localBytes = (int)a.localSizeBytes;
  info->blocksPerSm = perSmFull;
  info->blocksPerSmSmall = perSmSmall;
  return (int)e;
}

extern "C" int commDevLaunch(const commDevArgs* args, size_t inlineBytes, int threads, void* stream) {
  if (inlineBytes <= COMM_DEV_INLINE_SMALL)
    return (int)launchWith<COMM_DEV_INLINE_SMALL>(args, inlineBytes, threads, (cudaStream_t)stream);
  return (int)launchWith<COMM_DEV_INLINE_BYTES>(args, inlineBytes, threads, (cudaStream_t)stream);
}
