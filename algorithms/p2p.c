/* Pairwise exchange schedules: alltoall and grouped send/recv.
 *
 * At exchange step k (1..n-1) rank r sends to r+k and receives from r-k (mod n), so every transfer is
 * posted by both ends at the same step and the two sides of a SEND_RECV progress independently. */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "debug.h"
#include "algorithms.h"
#include "utils.h"

static void initStep(commStep* st, commPrim_t prim) {
  memset(st, 0, sizeof(*st));
  st->prim = (uint8_t)prim;
  st->sendPeer = -1;
  st->recvPeer = -1;
}

/* Alltoall: channel c handles the same balanced part [lo, lo+len) of every block; within it each exchange
 * step is cut into slices of at most chunkElems (same slices on both ends). Parts and slices are cut on
 * the split unit (commSplitPart), so they keep a block's 16-byte alignment. */
commResult_t commAllToAllBuild(const commCollArgs* a, commSchedule* out) {
  if (a == NULL || out == NULL) {
    WARN("commAllToAllBuild: NULL argument");
    return commInvalidArgument;
  }
  if (a->nRanks < 1 || a->rank < 0 || a->rank >= a->nRanks || a->nChannels < 1 || a->nChannels > COMM_MAX_CHANNELS) {
    WARN("commAllToAllBuild: bad arguments rank %d nRanks %d nChannels %d", a->rank, a->nRanks, a->nChannels);
    return commInvalidArgument;
  }
  if (a->count > 0 && a->chunkElems == 0) {
    WARN("commAllToAllBuild: chunkElems is 0");
    return commInvalidArgument;
  }
  COMMCHECK(commSchedInit(out, a->nChannels));
  commResult_t res = commSuccess;
  size_t n = (size_t)a->nRanks, r = (size_t)a->rank, c = a->count;
  const size_t unit = commSplitUnit(a->eltSize, a->chunkElems);
  const size_t chunkUnits = a->chunkElems / unit;
  for (int ch = 0; ch < a->nChannels; ch++) {
    size_t lo, len;
    commSplitPart(c, (size_t)a->nChannels, (size_t)ch, unit, &lo, &len);
    if (len == 0) continue;
    commStep st;
    initStep(&st, COMM_PRIM_COPY);
    st.src.buf = COMM_BUF_INPUT;
    st.src.offset = r * c + lo;
    st.dst.buf = COMM_BUF_OUTPUT;
    st.dst.offset = r * c + lo;
    st.count = st.recvCount = len;
    COMMCHECKGOTO(commSchedAdd(out, ch, &st), res, fail);
    size_t nSlices = commSplitParts(len, unit, chunkUnits);
    for (size_t k = 1; k < n; k++) {
      size_t to = (r + k) % n, from = (r + n - k) % n;
      for (size_t sl = 0; sl < nSlices; sl++) {
        size_t sOff, sLen;
        commSplitPart(len, nSlices, sl, unit, &sOff, &sLen);
        initStep(&st, COMM_PRIM_SEND_RECV);
        st.sendPeer = (int32_t)to;
        st.recvPeer = (int32_t)from;
        st.src.buf = COMM_BUF_INPUT;
        st.src.offset = to * c + lo + sOff;
        st.dst.buf = COMM_BUF_OUTPUT;
        st.dst.offset = from * c + lo + sOff;
        st.count = st.recvCount = sLen;
        COMMCHECKGOTO(commSchedAdd(out, ch, &st), res, fail);
      }
    }
  }
  return commSuccess;
fail:
  commSchedFree(out);
  return res;
}

/* Peers and buffers in range; *maxBuf gets the highest buffer index used (at least 1). */
static commResult_t p2pCheckOps(int rank, int nRanks, const commP2pOp* ops, int nOps, uint32_t* maxBuf) {
  *maxBuf = 1;
  for (int i = 0; i < nOps; i++) {
    if (ops[i].peer < 0 || ops[i].peer >= nRanks) {
      WARN("commP2pBuild: rank %d op %d has peer %d out of range (nRanks %d)", rank, i, ops[i].peer, nRanks);
      return commInvalidArgument;
    }
    if (ops[i].buf >= COMM_MAX_SCHED_BUFS) {
      WARN("commP2pBuild: rank %d op %d uses buffer %u (max %d)", rank, i, (unsigned)ops[i].buf,
           COMM_MAX_SCHED_BUFS - 1);
      return commInvalidArgument;
    }
    if (ops[i].buf > *maxBuf) *maxBuf = ops[i].buf;
  }
  return commSuccess;
}

/* Bucket of an op: 2*k + (isSend ? 0 : 1), k = the distance to its peer in the op's direction. */
static int p2pBucket(int rank, int nRanks, const commP2pOp* op) {
  int k = op->isSend ? (op->peer - rank + nRanks) % nRanks : (rank - op->peer + nRanks) % nRanks;
  return 2 * k + (op->isSend ? 0 : 1);
}

/* order[start[b] ..] gets the indices of bucket b's ops in their order (a stable counting sort); start has
 * 2*nRanks+1 entries, fill 2*nRanks (zeroed). */
static void p2pSortOps(int rank, int nRanks, const commP2pOp* ops, int nOps, int* order, int* start, int* fill) {
  size_t nb = 2 * (size_t)nRanks;
  for (int i = 0; i < nOps; i++) start[p2pBucket(rank, nRanks, &ops[i]) + 1]++;
  for (size_t b = 0; b < nb; b++) start[b + 1] += start[b];
  for (int i = 0; i < nOps; i++) {
    int b = p2pBucket(rank, nRanks, &ops[i]);
    order[start[b] + fill[b]++] = i;
  }
}

/* Self: the j-th send to self is copied into the j-th recv from self. */
static commResult_t p2pSelfCopies(int rank, const commP2pOp* ops, const int* order, const int* start,
                                  commSchedule* out) {
  int nS = start[1] - start[0], nR = start[2] - start[1];
  if (nS != nR) {
    WARN("commP2pBuild: rank %d has %d send(s) to itself but %d recv(s) from itself", rank, nS, nR);
    return commInvalidArgument;
  }
  for (int j = 0; j < nS; j++) {
    const commP2pOp* s = &ops[order[start[0] + j]];
    const commP2pOp* rv = &ops[order[start[1] + j]];
    if (s->count != rv->count) {
      WARN("commP2pBuild: rank %d self send %d has %zu elements, matching recv %zu", rank, j, s->count, rv->count);
      return commInvalidArgument;
    }
    commStep st;
    initStep(&st, COMM_PRIM_COPY);
    st.src.buf = s->buf;
    st.dst.buf = rv->buf;
    st.count = st.recvCount = s->count;
    COMMCHECK(commSchedAdd(out, 0, &st));
  }
  return commSuccess;
}

/* For k = 1..n-1: SEND_RECV steps pairing the j-th send to r+k with the j-th recv from r-k. */
static commResult_t p2pExchanges(int nRanks, const commP2pOp* ops, const int* order, const int* start,
                                 commSchedule* out) {
  for (int k = 1; k < nRanks; k++) {
    int s0 = start[2 * k], nS = start[2 * k + 1] - s0;
    int r0 = start[2 * k + 1], nR = start[2 * k + 2] - r0;
    int m = nS > nR ? nS : nR;
    for (int j = 0; j < m; j++) {
      commStep st;
      initStep(&st, COMM_PRIM_SEND_RECV);
      if (j < nS) {
        const commP2pOp* s = &ops[order[s0 + j]];
        st.sendPeer = s->peer;
        st.src.buf = s->buf;
        st.count = s->count;
      }
      if (j < nR) {
        const commP2pOp* rv = &ops[order[r0 + j]];
        st.recvPeer = rv->peer;
        st.dst.buf = rv->buf;
        st.recvCount = rv->count;
      }
      COMMCHECK(commSchedAdd(out, 0, &st));
    }
  }
  return commSuccess;
}

/* Grouped send/recv of one rank, channel 0 only:
 *  - self operations first: the i-th send to self is copied into the i-th recv from self (counts must match);
 *  - then for k = 1..n-1, max(#sends to r+k, #recvs from r-k) SEND_RECV steps, the j-th pairing the j-th
 *    send to r+k with the j-th recv from r-k (a missing side has peer -1 and count 0).
 * Buffers are the operations' buffer indices at offset 0. */
commResult_t commP2pBuild(int rank, int nRanks, const commP2pOp* ops, int nOps, commSchedule* out) {
  if (out == NULL || nRanks < 1 || rank < 0 || rank >= nRanks || nOps < 0 || (nOps > 0 && ops == NULL)) {
    WARN("commP2pBuild: bad arguments rank %d nRanks %d nOps %d", rank, nRanks, nOps);
    return commInvalidArgument;
  }
  commResult_t res = commSuccess;
  int* order = NULL; /* op indices sorted by (k, kind), stable */
  int* start = NULL; /* bucket starts, 2*nRanks+1 */
  int* fill = NULL;
  uint32_t maxBuf;
  COMMCHECK(p2pCheckOps(rank, nRanks, ops, nOps, &maxBuf));
  COMMCHECK(commSchedInit(out, 1));
  out->nBufs = (int)maxBuf + 1;
  if (nOps == 0) return commSuccess;
  size_t nb = 2 * (size_t)nRanks;
  COMMCHECKGOTO(commCalloc(&order, (size_t)nOps, sizeof(int)), res, fail);
  COMMCHECKGOTO(commCalloc(&start, nb + 1, sizeof(int)), res, fail);
  COMMCHECKGOTO(commCalloc(&fill, nb, sizeof(int)), res, fail);
  p2pSortOps(rank, nRanks, ops, nOps, order, start, fill);
  COMMCHECKGOTO(p2pSelfCopies(rank, ops, order, start, out), res, fail);
  COMMCHECKGOTO(p2pExchanges(nRanks, ops, order, start, out), res, fail);
  free(order);
  free(start);
  free(fill);
  return commSuccess;
fail:
  free(order);
  free(start);
  free(fill);
  commSchedFree(out);
  return res;
}
