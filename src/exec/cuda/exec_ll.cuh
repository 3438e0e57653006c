/* The LL protocol of the executor's kernel (exec_kernel.cu includes this inside its namespace, after the
 * Simple protocol's waits and chooseSendRecv): 16-byte lines {4 data bytes, flag, 4 data bytes, flag}
 * written with one store each (exec_dev.h), polled by the receiving threads; a step's pieces go through
 * per-channel staging so move() stays the one data path; LL batches run consecutive one-piece sends (or
 * receives) to distinct peers a warp each. SPDX-License-Identifier: Apache-2.0 */

__shared__ int sLLErr; /* a failure one thread's line poll saw (0: none); every thread stops polling on it */
__shared__ int sLLErrPeer, sLLErrSend;
__shared__ uint64_t sLLGotSig[COMM_DEV_SIG_WORDS]; /* with sLLErr COMM_DEV_SIG_MISMATCH: what came */

/* A failure one thread saw: the first one is kept, with its peer (and, for a signature mismatch, what came),
 * for the block to report. */
__device__ void llBatchFail(int code, int peer, int isSend, const uint64_t* gotSig) {
  if (atomicCAS(&sLLErr, 0, code) == 0) {
    sLLErrPeer = peer;
    sLLErrSend = isSend;
    if (gotSig && code == COMM_DEV_SIG_MISMATCH)
      for (int i = 0; i < COMM_DEV_SIG_WORDS; i++) sLLGotSig[i] = gotSig[i];
  }
}
/* The block's report of the failure in sLLErr (read after a barrier). */
__device__ void llReport(const commDevPlanHdr* h, int code, int ch) {
  if (code == COMM_DEV_SIG_MISMATCH) reportSigMismatch(h, ch, sLLErrPeer, sLLGotSig);
  else reportError(h, code, ch, sLLErrPeer, sLLErrSend, 0, 0);
}

/* Line l of a message of `bytes` bytes: its (up to) eight data bytes from src through L2 (the rest zero), or
 * into dst; 8-byte accesses where aligned, bytes otherwise. */
__device__ __forceinline__ uint2 llSourceLine(const char* src, size_t bytes, size_t l) {
  const char* at = src + l * 8;
  if (bytes - l * 8 >= 8 && ((uintptr_t)at & 7) == 0) return __ldcg((const uint2*)at);
  uint32_t d[2] = {0, 0};
  size_t n = bytes - l * 8 < 8 ? bytes - l * 8 : 8;
  for (size_t b = 0; b < n; b++) ((uint8_t*)d)[b] = __ldcg((const uint8_t*)at + b);
  return make_uint2(d[0], d[1]);
}
__device__ __forceinline__ void llWriteLine(char* dst, size_t bytes, size_t l, uint32_t d0, uint32_t d1) {
  char* at = dst + l * 8;
  if (bytes - l * 8 >= 8 && ((uintptr_t)at & 7) == 0) {
    *(uint2*)at = make_uint2(d0, d1);
    return;
  }
  uint32_t d[2] = {d0, d1};
  size_t n = bytes - l * 8 < 8 ? bytes - l * 8 : 8;
  for (size_t b = 0; b < n; b++) at[b] = (char)((const uint8_t*)d)[b];
}

/* Line l of slot: its data with flag0 in the first half and flag1 in the second, one 16-byte store. */
__device__ __forceinline__ void llPutLine(char* slot, size_t l, uint2 v, uint32_t flag0, uint32_t flag1) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(slot + l * 16), "r"(v.x), "r"(flag0), "r"(v.y),
               "r"(flag1)
               : "memory");
}

/* A data line's second flag: the first (the slot's position + 1) mixed with the low half of the plan's
 * signature digest. A receiver takes only lines whose both flags are its own, so a message of another
 * operation is never taken (but for one chance in 2^32), at no cost: no load and no store more. */
__device__ __forceinline__ uint32_t llFlag1(const commDevPlanHdr* h, uint32_t flag) {
  return flag ^ (uint32_t)h->sigDigest;
}

/* A waiting thread's periodic check (every SPINS_BEFORE_CHECK polls): another thread gave up (-1), the
 * communicator was aborted or a block failed, c's network proxy reported a failure (c may be NULL), or the
 * timeout passed (counted from *start, set at the first check); else it naps and returns COMM_DEV_OK. */
__device__ int llCheckWait(const commDevPlanHdr* h, const commDevConn* c, uint64_t* start) {
  if (*(volatile int*)&sLLErr) return -1;
  if (*h->abortFlag || *(volatile int32_t*)&h->error->code != COMM_DEV_OK) return COMM_DEV_ABORTED;
  if (c && c->failed && *(volatile uint32_t*)c->failed) return COMM_DEV_NET_FAILED;
  uint64_t now = globalTimer();
  if (*start == 0) *start = now;
  if (h->timeoutNs && now - *start > h->timeoutNs) return COMM_DEV_TIMEOUT;
  __nanosleep(100);
  return COMM_DEV_OK;
}

/* In a wait's periodic check: has the message at slot (flag: its position + 1) come from another operation?
 * Its signature lines (plain flags, written with the data) say: COMM_DEV_SIG_MISMATCH with the sender's
 * signature in got; COMM_DEV_OK when they have not come yet or are the plan's own (the data is on its
 * way); a failure code when the rest of them never comes. */
__device__ int llProbeSig(const commDevPlanHdr* h, const char* slot, uint32_t flag, uint64_t* got, uint64_t* start) {
  const char* sig = slot + COMM_DEV_LL_SIG_OFF;
  uint32_t w[2];
  if (!llLine(sig, flag, flag, w)) return COMM_DEV_OK;
  got[0] = (uint64_t)w[0] | (uint64_t)w[1] << 32;
  for (int i = 1; i < COMM_DEV_LL_SIG_LINES; i++) {
    for (int spins = 0; !llLine(sig + i * 16, flag, flag, w);) {
      if (++spins < SPINS_BEFORE_CHECK) continue;
      spins = 0;
      int r = llCheckWait(h, NULL, start);
      if (r != COMM_DEV_OK) return r;
    }
    got[i] = (uint64_t)w[0] | (uint64_t)w[1] << 32;
  }
  return sigDiffers(h, got) ? COMM_DEV_SIG_MISMATCH : COMM_DEV_OK;
}

/* This thread waits for line l of the message at slot (flag: its position + 1) to carry its flags (its
 * data in d), with llCheckWait's checks and, in the same periodic check, llProbeSig's. COMM_DEV_OK; a
 * failure code (COMM_DEV_SIG_MISMATCH: the sender's signature in got); -1 when another thread gave up
 * first. */
__device__ int llWaitLine(const commDevPlanHdr* h, const char* slot, size_t l, uint32_t flag, uint32_t* d,
                          uint64_t* start, uint64_t* got) {
  const uint32_t flag1 = llFlag1(h, flag);
  for (int spins = 0; !llLine(slot + l * 16, flag, flag1, d);) {
    if (++spins < SPINS_BEFORE_CHECK) continue;
    spins = 0;
    int r = llCheckWait(h, NULL, start);
    if (r == COMM_DEV_OK) r = llProbeSig(h, slot, flag, got, start);
    if (r != COMM_DEV_OK) return r;
  }
  return COMM_DEV_OK;
}

/* Data line l of a message at slot, flagged for position + 1 = flag. */
__device__ __forceinline__ void llPutData(const commDevPlanHdr* h, char* slot, size_t l, uint2 v, uint32_t flag) {
  llPutLine(slot, l, v, flag, llFlag1(h, flag));
}
/* Signature line i (< COMM_DEV_LL_SIG_LINES) of the message at slot: word i at COMM_DEV_LL_SIG_OFF. */
__device__ __forceinline__ void llPutSig(const commDevPlanHdr* h, char* slot, int i, uint32_t flag) {
  const uint64_t w = h->sig[i];
  llPutLine(slot + COMM_DEV_LL_SIG_OFF, i, make_uint2((uint32_t)w, (uint32_t)(w >> 32)), flag, flag);
}

/* The block writes `bytes` of stage as LL lines at slot, and the plan's signature, flagged `flag`. */
__device__ void llPack(const commDevPlanHdr* h, char* slot, const char* stage, size_t bytes, uint32_t flag) {
  size_t nLines = (bytes + 7) / 8;
  for (size_t l = threadIdx.x; l < nLines; l += blockDim.x) llPutData(h, slot, l, llSourceLine(stage, bytes, l), flag);
  if (threadIdx.x < COMM_DEV_LL_SIG_LINES) llPutSig(h, slot, threadIdx.x, flag);
}


/* The block waits for and reads `bytes` of LL lines flagged `flag` at slot (from peer) into stage. Each
 * thread polls its own lines, watching the abort flag, the timeout and the other threads (sLLErr). */
__device__ void llUnpack(const commDevPlanHdr* h, const char* slot, char* stage, size_t bytes, uint32_t flag,
                         int peer) {
  size_t nLines = (bytes + 7) / 8;
  uint64_t start = 0, got[COMM_DEV_SIG_WORDS];
  for (size_t l = threadIdx.x; l < nLines; l += blockDim.x) {
    uint32_t d[2];
    int r = llWaitLine(h, slot, l, flag, d, &start, got);
    if (r > 0) llBatchFail(r, peer, 0, got);
    if (r != COMM_DEV_OK) return;
    llWriteLine(stage, bytes, l, d[0], d[1]);
  }
}

/* After llUnpack: the block agrees; false (and the failure recorded) when a poll gave up. */
__device__ bool llSyncOk(const Plan& p, int ch) {
  __syncthreads();
  int r = *(volatile int*)&sLLErr;
  if (r != COMM_DEV_OK) {
    if (threadIdx.x == 0) llReport(p.h, r, ch);
    return false;
  }
  return true;
}

/* One step of channel ch with the LL protocol: every piece goes through this channel's staging (stageIn:
 * what arrived, stageOut: what leaves), so that move() stays the one data path. */
__device__ bool runStepLL(const Plan& p, Waiter& w, int ch, const commDevStep* st) {
  const commDevPlanHdr* h = p.h;
  const size_t elt = h->eltSize, piece = COMM_DEV_LL_PIECE / elt;
  const uint32_t nSlots = h->nSlots;
  const commDevConn* sc = st->sendConn >= 0 ? &p.conns[st->sendConn] : NULL;
  const commDevConn* rc = st->recvConn >= 0 ? &p.conns[st->recvConn] : NULL;
  const int pre = st->flags & COMM_STEP_PRE, post = st->flags & COMM_STEP_POST;
  char* src = (char*)st->src;
  char* dst = (char*)st->dst;
  char* stageIn = h->llStaging + (size_t)ch * 2 * COMM_DEV_LL_PIECE;
  char* stageOut = stageIn + COMM_DEV_LL_PIECE;
  const bool tid0 = threadIdx.x == 0;
  const int prim = st->prim;
  const bool sends = prim == COMM_PRIM_SEND || prim == COMM_PRIM_COPY_SEND || prim == COMM_PRIM_RECV_REDUCE_SEND ||
                     prim == COMM_PRIM_RECV_COPY_SEND || prim == COMM_PRIM_RECV_REDUCE_COPY_SEND;
  const bool recvs = prim == COMM_PRIM_RECV || prim == COMM_PRIM_RECV_REDUCE_COPY ||
                     prim == COMM_PRIM_RECV_REDUCE_SEND || prim == COMM_PRIM_RECV_COPY_SEND ||
                     prim == COMM_PRIM_RECV_REDUCE_COPY_SEND;

  if (prim == COMM_PRIM_SEND_RECV) {
    size_t sendCount = sc ? st->count : 0, recvCount = rc ? st->recvCount : 0;
    size_t sendDone = 0, recvDone = 0;
    while (sendDone < sendCount || recvDone < recvCount) {
      /* Whichever side is ready: FIFO space, or the first line of the next message. */
      if (!chooseSendRecv(p, w, ch, st, sc, rc, sendDone < sendCount, recvDone < recvCount, true)) return false;
      if (sAction == 1) {
        size_t n = min(piece, sendCount - sendDone);
        uint64_t pos = sSendPos;
        move(p, stageOut, NULL, src + sendDone * elt, NULL, n, pre, 0);
        __syncthreads();
        llPack(h, sc->llSlots + (pos % nSlots) * COMM_DEV_LL_SLOT_BYTES, stageOut, n * elt, (uint32_t)(pos + 1));
        __syncthreads();
        if (tid0) storeVolatile(sc->pos, pos + 1);
        sendDone += n;
      } else {
        size_t n = min(piece, recvCount - recvDone);
        uint64_t pos = sRecvPos;
        llUnpack(h, rc->llSlots + (pos % nSlots) * COMM_DEV_LL_SLOT_BYTES, stageIn, n * elt, (uint32_t)(pos + 1),
                 st->recvPeer);
        if (!llSyncOk(p, ch)) return false;
        move(p, dst + recvDone * elt, NULL, stageIn, NULL, n, 0, 0);
        __syncthreads();
        if (tid0) releaseRecv(rc, pos);
        recvDone += n;
      }
    }
    return true;
  }

  for (size_t done = 0; done < st->count;) {
    size_t n = min(piece, (size_t)st->count - done), off = done * elt;
    /* Positions (and, to send, a free slot) */
    int r = COMM_DEV_OK;
    if (tid0) {
      if (recvs) sRecvPos = loadVolatile(rc->pos);
      if (sends) r = waitSend(w, sc, nSlots);
    }
    if (!syncOk(r)) {
      fail(p, sErr, ch, st->sendPeer, 1, 0, 0);
      return false;
    }
    uint64_t rpos = sRecvPos, spos = sSendPos;
    if (recvs) {
      llUnpack(h, rc->llSlots + (rpos % nSlots) * COMM_DEV_LL_SLOT_BYTES, stageIn, n * elt, (uint32_t)(rpos + 1),
               st->recvPeer);
      if (!llSyncOk(p, ch)) return false;
      if (tid0) w.lastProgress = globalTimer();
    }
    switch (prim) {
      case COMM_PRIM_SEND: move(p, stageOut, NULL, src + off, NULL, n, pre, post); break;
      case COMM_PRIM_COPY_SEND:
        move(p, stageOut, dst != src || pre || post ? dst + off : NULL, src + off, NULL, n, pre, post);
        break;
      case COMM_PRIM_RECV: move(p, dst + off, NULL, stageIn, NULL, n, 0, post); break;
      case COMM_PRIM_RECV_REDUCE_COPY: move(p, dst + off, NULL, stageIn, src + off, n, pre, post); break;
      case COMM_PRIM_RECV_REDUCE_SEND: move(p, stageOut, NULL, stageIn, src + off, n, pre, post); break;
      case COMM_PRIM_RECV_COPY_SEND: move(p, dst + off, stageOut, stageIn, NULL, n, 0, post); break;
      default: move(p, dst + off, stageOut, stageIn, src + off, n, pre, post); break; /* RECV_REDUCE_COPY_SEND */
    }
    __syncthreads();
    if (sends) {
      llPack(h, sc->llSlots + (spos % nSlots) * COMM_DEV_LL_SLOT_BYTES, stageOut, n * elt, (uint32_t)(spos + 1));
      __syncthreads();
    }
    if (tid0) {
      if (sends) storeVolatile(sc->pos, spos + 1);
      if (recvs) releaseRecv(rc, rpos);
    }
    done += n;
  }
  return true;
}

/* ---- LL batches: several one-piece sends (or receives) to distinct peers at once ----
 * A one-shot allreduce sends its input to every peer, then receives from every peer: n-1 independent
 * transfers per direction. Run one after the other, each costs a block-wide round of waits and barriers;
 * here each warp takes some of them: its lane 0 waits for FIFO space, its lanes write (or poll and read) the
 * lines straight from the source (into the destination), and the block meets once at the end. */

/* Steps [s, s + m) of the channel that can run as one batch (0: step s cannot): the same primitive, SEND or
 * RECV, no pre/post operation, one LL piece each, every step on a connection of its own (connection
 * indices strictly increasing: one read per step, and what a one-shot's steps give, as each step's peer is
 * a connection the plan has not used before). A batch of one is worth it too: its lines go straight from
 * the source (into the destination), without the staging copy and the barriers around it. */
__device__ int llBatchLength(const Plan& p, const commDevStep* steps, int s, int end) {
  const commDevPlanHdr* h = p.h;
  if (!h->llBatch || h->proto != commProtoLL) return 0;
  const commDevStep& a = steps[s];
  if ((a.prim != COMM_PRIM_SEND && a.prim != COMM_PRIM_RECV) || a.flags != 0) return 0;
  const bool send = a.prim == COMM_PRIM_SEND;
  int m = 0, lastConn = -1;
  for (int k = s; k < end; k++) {
    const commDevStep& b = steps[k];
    if (b.prim != a.prim || b.flags != 0 || b.count == 0 || b.count * h->eltSize > COMM_DEV_LL_PIECE) break;
    const int conn = send ? b.sendConn : b.recvConn;
    if (conn <= lastConn) break;
    lastConn = conn;
    m++;
  }
  return m;
}

/* Warps `part` of `parts` of the block's share of one step: each warp takes lines part*32 + lane, stride
 * parts*32 (a step with few peers gets several warps, so a piece of 4 KiB is not 16 dependent round trips
 * of one warp). Positions are read here and advanced by runBatchLL after the block's barrier, once every
 * warp of the step has read them. */

/* Send step st's lines: lane 0 of each warp waits for the slot to be free, the lanes write the lines. */
__device__ void llWarpSend(const Plan& p, Waiter& w, const commDevStep* st, int lane, int part, int parts) {
  const commDevConn* c = &p.conns[st->sendConn];
  const uint32_t nSlots = p.h->nSlots;
  const size_t bytes = st->count * p.h->eltSize, nLines = (bytes + 7) / 8;
  const uint64_t pos = loadVolatile(c->pos);
  int r = COMM_DEV_OK;
  if (lane == 0) { /* (this lane's own clock for the timeout: the wait starts now) */
    w.lastProgress = globalTimer();
    w.waitConn[0] = c, w.waitConn[1] = NULL;
    r = waitAtLeast(w, c->tail, pos + 1 > nSlots ? pos + 1 - nSlots : 0);
  }
  r = __shfl_sync(0xffffffffu, r, 0);
  if (r != COMM_DEV_OK) {
    if (lane == 0) llBatchFail(r, st->sendPeer, 1, NULL);
    return;
  }
  char* slot = c->llSlots + (pos % nSlots) * COMM_DEV_LL_SLOT_BYTES;
  const uint32_t flag = (uint32_t)(pos + 1);
  for (size_t l = (size_t)part * 32 + lane; l < nLines; l += (size_t)parts * 32)
    llPutData(p.h, slot, l, llSourceLine((const char*)st->src, bytes, l), flag);
  if (part == 0 && lane < COMM_DEV_LL_SIG_LINES) llPutSig(p.h, slot, lane, flag);
}

/* Receive step st's lines: the lanes poll theirs and write the data to the destination. */
__device__ void llWarpRecv(const Plan& p, const commDevStep* st, int lane, int part, int parts) {
  const commDevPlanHdr* h = p.h;
  const commDevConn* c = &p.conns[st->recvConn];
  const size_t bytes = st->count * h->eltSize, nLines = (bytes + 7) / 8;
  const uint64_t pos = loadVolatile(c->pos);
  const char* slot = c->llSlots + (pos % h->nSlots) * COMM_DEV_LL_SLOT_BYTES;
  const uint32_t flag = (uint32_t)(pos + 1);
  uint64_t start = 0, got[COMM_DEV_SIG_WORDS];
  for (size_t l = (size_t)part * 32 + lane; l < nLines; l += (size_t)parts * 32) {
    uint32_t d[2];
    int r = llWaitLine(h, slot, l, flag, d, &start, got);
    if (r > 0) llBatchFail(r, st->recvPeer, 0, got);
    if (r != COMM_DEV_OK) return;
    llWriteLine((char*)st->dst, bytes, l, d[0], d[1]);
  }
}

/* Steps sts[0..m) as one batch (llBatchLength). With fewer steps than warps, each step gets nWarps / m
 * warps; otherwise each warp takes steps k, k + nWarps, ... Every position moves after the block's barrier.
 * false: the block stops (failure recorded). */
__device__ bool runBatchLL(const Plan& p, Waiter& w, int ch, const commDevStep* sts, int m) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nWarps = blockDim.x / 32;
  const bool send = sts[0].prim == COMM_PRIM_SEND;
  const int parts = m >= nWarps ? 1 : nWarps / m;
  for (int k = warp / parts; k < m && warp < parts * (m < nWarps ? m : nWarps); k += nWarps / parts) {
    if (*(volatile int*)&sLLErr) break;
    commDevStep st = sts[k];
    if (send) llWarpSend(p, w, &st, lane, warp % parts, parts);
    else llWarpRecv(p, &st, lane, warp % parts, parts);
  }
  __syncthreads();
  int r = *(volatile int*)&sLLErr;
  if (r != COMM_DEV_OK) {
    if (threadIdx.x == 0) llReport(p.h, r, ch);
    return false;
  }
  for (int k = threadIdx.x; k < m; k += blockDim.x) { /* every line of step k is written (read) */
    const commDevConn* c = &p.conns[send ? sts[k].sendConn : sts[k].recvConn];
    const uint64_t pos = loadVolatile(c->pos);
    if (send) storeVolatile(c->pos, pos + 1);
    else releaseRecv(c, pos);
  }
  if (threadIdx.x == 0) w.lastProgress = globalTimer();
  return true;
}

/* ---- The LL one-shot fold: a one-shot allreduce's steps as one pass per line ----
 * The one-shot schedule (algorithms/oneshot.c) is COPY X = pre(I); SEND X to each peer; RECV Y_j from each
 * peer; COPY O = Z_0, REDUCE O op= Z_1 .. Z_(m-1) over the sources Z = {X, Y_j}. Run as a batch and a chain,
 * that is four rounds of memory latency with a barrier after each. Here each thread takes its lines
 * through all of it: it reads its line of I, sends it to every peer, polls every peer's line and folds the
 * values in the chain's order (the same operations in the same order: the same bits), and writes its line
 * of O; the block meets once at the end to move the positions. X and the Y_j are still written, so memory
 * ends as the steps leave it. COMM_DEV_LL_BATCH=1 (or 0) runs the steps as batches (or one by one). */

#define LL_FOLD_MAX_SOURCES (COMM_ONESHOT_MAX_RANKS)

__device__ __forceinline__ bool llDisjoint(uint64_t a, uint64_t b, size_t bytes) {
  return a + bytes <= b || b + bytes <= a;
}

/* Steps [s, s + result) that form a one-shot fold (0: they do not); *nPeers: the sends (= the receives). */
__device__ int llFoldLength(const Plan& p, const commDevStep* steps, int s, int end, int* nPeers) {
  const commDevPlanHdr* h = p.h;
  if (h->llBatch < 2 || h->proto != commProtoLL) return 0;
  const commDevStep& a = steps[s];
  const size_t bytes = a.count * h->eltSize;
  if (a.prim != COMM_PRIM_COPY || (a.flags & ~COMM_STEP_PRE) || a.count == 0 || bytes > COMM_DEV_LL_PIECE ||
      !llDisjoint(a.src, a.dst, bytes))
    return 0;
  int k = 0;
  while (s + 1 + k < end && steps[s + 1 + k].prim == COMM_PRIM_SEND) k++;
  if (k < 1 || k >= LL_FOLD_MAX_SOURCES || s + 1 + 2 * k >= end) return 0;
  for (int j = 0; j < k; j++) {
    const commDevStep& snd = steps[s + 1 + j];
    const commDevStep& rcv = steps[s + 1 + k + j];
    if (snd.flags || snd.count != a.count || snd.src != a.dst || snd.sendConn < 0 || rcv.prim != COMM_PRIM_RECV ||
        rcv.flags || rcv.recvConn < 0 || rcv.count != a.count ||
        (j > 0 && (snd.sendConn <= steps[s + j].sendConn || rcv.recvConn <= steps[s + k + j].recvConn)) ||
        !llDisjoint(rcv.dst, a.src, bytes) || !llDisjoint(rcv.dst, a.dst, bytes))
      return 0;
    for (int i = 0; i < j; i++)
      if (!llDisjoint(rcv.dst, steps[s + 1 + k + i].dst, bytes)) return 0;
  }
  const int c = s + 1 + 2 * k; /* the chain: every source exactly once, into an output clear of them */
  if (reduceChainLength(p, steps, c, end) != k + 1) return 0;
  const uint64_t out = steps[c].dst;
  if (out != a.src && !llDisjoint(out, a.src, bytes)) return 0;
  uint32_t seen = 0;
  for (int i = 0; i <= k; i++) {
    const uint64_t z = steps[c + i].src;
    int src = z == a.dst ? 0 : -1;
    for (int j = 0; j < k && src < 0; j++)
      if (z == steps[s + 1 + k + j].dst) src = j + 1;
    if (src < 0 || (seen & (1u << src)) || !llDisjoint(out, z, bytes)) return 0;
    seen |= 1u << src;
  }
  *nPeers = k;
  return 1 + 2 * k + k + 1;
}

template <class F, int KIND>
__device__ uint2 lineOpT(const uint2* v, int m, DevArgs args, int postLast) {
  typedef typename F::S S;
  const int per = 8 / sizeof(S);
  uint2 x = v[0];
  S* ex = (S*)&x;
  if (m == 1) { /* a copy: pre (args.pre) */
#pragma unroll
    for (int e = 0; e < per; e++) ex[e] = Elem<F>::cpy(KIND, ex[e], args);
    return x;
  }
  for (int j = 1; j < m; j++) {
    args.post = j == m - 1 ? postLast : 0;
    const S* ey = (const S*)&v[j];
#pragma unroll
    for (int e = 0; e < per; e++) ex[e] = Elem<F>::red(KIND, ex[e], ey[e], args);
  }
  return x;
}

template <class F>
__device__ uint2 lineOpKind(int kind, const uint2* v, int m, const DevArgs& args, int postLast) {
  switch (kind) {
    case COMM_REDOP_SUM: return lineOpT<F, COMM_REDOP_SUM>(v, m, args, postLast);
    case COMM_REDOP_PROD: return lineOpT<F, COMM_REDOP_PROD>(v, m, args, postLast);
    case COMM_REDOP_MAX: return lineOpT<F, COMM_REDOP_MAX>(v, m, args, postLast);
    case COMM_REDOP_MIN: return lineOpT<F, COMM_REDOP_MIN>(v, m, args, postLast);
    case COMM_REDOP_PREMULSUM: return lineOpT<F, COMM_REDOP_PREMULSUM>(v, m, args, postLast);
    default: return lineOpT<F, COMM_REDOP_SUMPOSTDIV>(v, m, args, postLast);
  }
}

/* One 8-byte line's elements: m == 1: pre(v[0]) when pre; else v[0] op v[1] op ... op v[m-1], post on the
 * last op when postLast. */
__device__ __noinline__ uint2 lineOp(const Plan& p, const uint2* v, int m, int pre, int postLast) {
  const commDevPlanHdr* h = p.h;
  DevArgs args = {p.scalarBits, h->divisor, pre, 0};
#define LINE_CALL(F) return lineOpKind<F>(h->redopKind, v, m, args, postLast)
  switch (h->dtype) {
    case commInt8: LINE_CALL(I8Fam);
    case commUint8: LINE_CALL(U8Fam);
    case commInt32: LINE_CALL(I32Fam);
    case commUint32: LINE_CALL(U32Fam);
    case commInt64: LINE_CALL(I64Fam);
    case commUint64: LINE_CALL(U64Fam);
    case commFloat16: LINE_CALL(HalfFam);
    case commFloat32: LINE_CALL(F32Fam);
    case commFloat64: LINE_CALL(F64Fam);
    case commBfloat16: LINE_CALL(Bf16Fam);
    case commFloat8e4m3: LINE_CALL(E4m3Fam);
    default: LINE_CALL(E5m2Fam);
  }
#undef LINE_CALL
}

/* This thread waits until *p >= target, with llCheckWait's checks (c's proxy included). */
__device__ int llWaitAtLeast(const commDevPlanHdr* h, const commDevConn* c, const uint64_t* p, uint64_t target,
                             uint64_t* start) {
  for (int spins = 0; loadVolatile(p) < target;) {
    if (++spins < SPINS_BEFORE_CHECK) continue;
    spins = 0;
    int r = llCheckWait(h, c, start);
    if (r != COMM_DEV_OK) return r;
  }
  return COMM_DEV_OK;
}

__shared__ uint64_t sFoldPos[2 * LL_FOLD_MAX_SOURCES], sFoldTail[LL_FOLD_MAX_SOURCES];

/* Steps sts[0 .. 3k + 2) as one fold (llFoldLength). false: the block stops (failure recorded). */
__device__ bool runFoldLL(const Plan& p, Waiter& w, int ch, const commDevStep* sts, int k) {
  const commDevPlanHdr* h = p.h;
  const commDevStep& first = sts[0];
  const commDevStep* sends = sts + 1;
  const commDevStep* recvs = sts + 1 + k;
  const commDevStep* chain = sts + 1 + 2 * k;
  const size_t bytes = first.count * h->eltSize, nLines = (bytes + 7) / 8;
  const uint32_t nSlots = h->nSlots;
  const int pre = (first.flags & COMM_STEP_PRE) && h->redopKind == COMM_REDOP_PREMULSUM;
  const int postLast = (chain[k].flags & COMM_STEP_POST) != 0;
  int8_t srcOf[LL_FOLD_MAX_SOURCES]; /* chain source i: 0 = X, j = Y_j */
  for (int i = 0; i <= k; i++) {
    srcOf[i] = 0;
    for (int j = 0; j < k; j++)
      if (chain[i].src == recvs[j].dst) srcOf[i] = (int8_t)(j + 1);
  }
  /* One round of memory latency for what the sends need: threads j < 2k read connection j's position (a
   * send's also the receiver's tail) into shared memory while every thread reads its first input line. */
  const int t = threadIdx.x;
  uint2 x0 = make_uint2(0, 0);
  if ((size_t)t < nLines) x0 = llSourceLine((const char*)first.src, bytes, t);
  if (t < 2 * k) {
    const commDevConn* c = t < k ? &p.conns[sends[t].sendConn] : &p.conns[recvs[t - k].recvConn];
    sFoldPos[t] = loadVolatile(c->pos);
    if (t < k) sFoldTail[t] = loadVolatile(c->tail);
  }
  if (pre && (size_t)t < nLines) x0 = lineOp(p, &x0, 1, 1, 0);
  __syncthreads();
  uint64_t start = 0;
  if ((size_t)t < nLines || t < COMM_DEV_LL_SIG_LINES) {
    /* Sends: every line of this thread to every peer (threads t < COMM_DEV_LL_SIG_LINES: the signature's
     * line t too), once the peer's slot is free. */
    for (int j = 0; j < k && !*(volatile int*)&sLLErr; j++) {
      const commDevConn* c = &p.conns[sends[j].sendConn];
      const uint64_t pos = sFoldPos[j], free = pos + 1 > nSlots ? pos + 1 - nSlots : 0;
      int r = sFoldTail[j] >= free ? COMM_DEV_OK : llWaitAtLeast(h, c, c->tail, free, &start);
      if (r > 0) llBatchFail(r, sends[j].sendPeer, 1, NULL);
      if (r != COMM_DEV_OK) break;
      char* slot = c->llSlots + (pos % nSlots) * COMM_DEV_LL_SLOT_BYTES;
      for (size_t l = t; l < nLines; l += blockDim.x) {
        uint2 x = x0;
        if (l != (size_t)t) {
          x = llSourceLine((const char*)first.src, bytes, l);
          if (pre) x = lineOp(p, &x, 1, 1, 0);
        }
        if (j == 0) llWriteLine((char*)first.dst, bytes, l, x.x, x.y);
        llPutData(h, slot, l, x, (uint32_t)(pos + 1));
      }
      if (t < COMM_DEV_LL_SIG_LINES) llPutSig(h, slot, t, (uint32_t)(pos + 1));
    }
    if (h->trace && ch == 0 && t == 0) h->trace[6] = globalTimer(); /* thread 0's lines sent */
    /* Receives and the fold, line by line. */
    for (size_t l = t; l < nLines && !*(volatile int*)&sLLErr; l += blockDim.x) {
      uint2 v[LL_FOLD_MAX_SOURCES + 1], z[LL_FOLD_MAX_SOURCES];
      v[0] = x0;
      if (l != (size_t)t) { /* X again (in place, O's line l is still I's) */
        v[0] = llSourceLine((const char*)first.src, bytes, l);
        if (pre) v[0] = lineOp(p, v, 1, 1, 0);
      }
      int r = COMM_DEV_OK;
      for (int j = 0; j < k; j++) {
        const commDevConn* c = &p.conns[recvs[j].recvConn];
        const uint64_t pos = sFoldPos[k + j];
        uint32_t d[2];
        uint64_t got[COMM_DEV_SIG_WORDS];
        r = llWaitLine(h, c->llSlots + (pos % nSlots) * COMM_DEV_LL_SLOT_BYTES, l, (uint32_t)(pos + 1), d, &start, got);
        if (r > 0) llBatchFail(r, recvs[j].recvPeer, 0, got);
        if (r != COMM_DEV_OK) break;
        v[j + 1] = make_uint2(d[0], d[1]);
        llWriteLine((char*)recvs[j].dst, bytes, l, d[0], d[1]);
      }
      if (r != COMM_DEV_OK) break;
      for (int i = 0; i <= k; i++) z[i] = v[srcOf[i]];
      if (h->trace && ch == 0 && t == 0) h->trace[7] = globalTimer(); /* its first line received */
      uint2 o = lineOp(p, z, k + 1, 0, postLast);
      llWriteLine((char*)chain[0].dst, bytes, l, o.x, o.y);
    }
  }
  __syncthreads();
  int r = *(volatile int*)&sLLErr;
  if (r != COMM_DEV_OK) {
    if (t == 0) llReport(h, r, ch);
    return false;
  }
  if (t < 2 * k) { /* every line is written and read: the positions read above move on */
    const commDevConn* c = t < k ? &p.conns[sends[t].sendConn] : &p.conns[recvs[t - k].recvConn];
    if (t < k) storeVolatile(c->pos, sFoldPos[t] + 1);
    else releaseRecv(c, sFoldPos[t]);
  }
  if (threadIdx.x == 0) w.lastProgress = globalTimer();
  return true;
}
