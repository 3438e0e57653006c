/* Ring algorithms: allreduce, broadcast, reduce, allgather and reducescatter as schedules.
 *
 * Chunking rule (identical on every rank, derived only from shared arguments):
 *  - the per-rank buffer (count, or the per-rank block for allgather/reducescatter) is split into
 *    nChannels contiguous balanced parts, each part into slices and, for allreduce, each slice into nRanks
 *    chunks, every cut on a multiple of the split unit (16 bytes of elements: commSplitPart) so that the
 *    pieces of an aligned buffer stay 16-byte aligned;
 *  - the slices are as few as keep every step within chunkElems: at most chunkElems for allgather,
 *    reducescatter, broadcast and reduce, at most nRanks chunks of at most chunkElems for allreduce;
 *  - channel c uses ringRanks[c] (NULL: the identity order 0..n-1);
 *  - a step whose element count is 0 is not emitted: its count is 0 on every rank that would take part
 *    in the transfer, so both ends skip it. */
#include <string.h>
#include "check.h"
#include "debug.h"
#include "algorithms.h"

typedef struct {
  const commCollArgs* a;
  commSchedule* s;
  int ch;
  int n;   /* ranks */
  int pos; /* position of this rank in the channel's ring */
  int prev, next;
  const int* ring;
  uint8_t pre, post; /* flags to use (0 when the op needs none) */
  size_t unit;       /* parts, slices and chunks are cut on multiples of this many elements */
  size_t chunkUnits; /* units in a chunk of at most chunkElems */
} ringCtx;

/* Slices of a part of len elements: each at most `chunks` chunks of at most chunkElems. */
static size_t nSlicesFor(const ringCtx* c, size_t len, size_t chunks) {
  size_t most = c->chunkUnits > SIZE_MAX / chunks ? SIZE_MAX : c->chunkUnits * chunks;
  return commSplitParts(len, c->unit, most);
}

static int ringRank(const ringCtx* c, int pos) {
  int p = ((pos % c->n) + c->n) % c->n;
  return c->ring ? c->ring[p] : p;
}

static commResult_t emit(ringCtx* c, commPrim_t prim, uint8_t flags, uint32_t srcBuf, size_t srcOff, uint32_t dstBuf,
                         size_t dstOff, size_t count) {
  if (count == 0) return commSuccess;
  int sendPeer = -1, recvPeer = -1;
  switch (prim) {
    case COMM_PRIM_SEND:
    case COMM_PRIM_COPY_SEND: sendPeer = c->next; break;
    case COMM_PRIM_RECV:
    case COMM_PRIM_RECV_REDUCE_COPY: recvPeer = c->prev; break;
    case COMM_PRIM_RECV_REDUCE_SEND:
    case COMM_PRIM_RECV_COPY_SEND:
    case COMM_PRIM_RECV_REDUCE_COPY_SEND:
      sendPeer = c->next;
      recvPeer = c->prev;
      break;
    default: break;
  }
  commStep st = commStepMake(prim, flags, sendPeer, recvPeer, commBufAt(srcBuf, srcOff), commBufAt(dstBuf, dstOff),
                             count, count);
  return commSchedAdd(c->s, c->ch, &st);
}

/* Ring allreduce on [base, base+len) of one channel. */
static commResult_t allReduce(ringCtx* c, size_t base, size_t len) {
  int n = c->n;
  size_t nSlices = nSlicesFor(c, len, (size_t)n);
  for (size_t sl = 0; sl < nSlices; sl++) {
    size_t sOff, sLen;
    commSplitPart(len, nSlices, sl, c->unit, &sOff, &sLen);
    for (int k = 0; k <= 2 * n - 2; k++) {
      int j = (((c->pos - k - 1) % n) + n) % n; /* chunk handled at step k */
      size_t cOff, cLen;
      commSplitPart(sLen, (size_t)n, (size_t)j, c->unit, &cOff, &cLen);
      size_t off = base + sOff + cOff;
      commPrim_t prim;
      uint8_t fl;
      if (k == 0) {
        prim = COMM_PRIM_SEND;
        fl = c->pre;
      } else if (k < n - 1) {
        prim = COMM_PRIM_RECV_REDUCE_SEND;
        fl = c->pre;
      } else if (k == n - 1) {
        prim = COMM_PRIM_RECV_REDUCE_COPY_SEND;
        fl = c->pre | c->post;
      } else if (k < 2 * n - 2) {
        prim = COMM_PRIM_RECV_COPY_SEND;
        fl = 0;
      } else {
        prim = COMM_PRIM_RECV;
        fl = 0;
      }
      COMMCHECK(emit(c, prim, fl, COMM_BUF_INPUT, off, COMM_BUF_OUTPUT, off, cLen));
    }
  }
  return commSuccess;
}

/* How many ring hops this rank is after the root (0 at the root). */
static int distanceFromRoot(const ringCtx* c) {
  int rootPos = 0;
  for (int i = 0; i < c->n; i++)
    if (ringRank(c, i) == c->a->root) rootPos = i;
  return ((c->pos - rootPos) % c->n + c->n) % c->n;
}

/* Pipelined chain from the root along the ring. */
static commResult_t broadcast(ringCtx* c, size_t base, size_t len) {
  int n = c->n;
  int d = distanceFromRoot(c);
  size_t nSlices = nSlicesFor(c, len, 1);
  for (size_t sl = 0; sl < nSlices; sl++) {
    size_t sOff, sLen;
    commSplitPart(len, nSlices, sl, c->unit, &sOff, &sLen);
    size_t off = base + sOff;
    commPrim_t prim = d == 0 ? COMM_PRIM_COPY_SEND : d == n - 1 ? COMM_PRIM_RECV : COMM_PRIM_RECV_COPY_SEND;
    COMMCHECK(emit(c, prim, 0, COMM_BUF_INPUT, off, COMM_BUF_OUTPUT, off, sLen));
  }
  return commSuccess;
}

/* Chain along the ring ending at the root: root's next starts, root reduces last. */
static commResult_t reduce(ringCtx* c, size_t base, size_t len) {
  int d = distanceFromRoot(c);
  size_t nSlices = nSlicesFor(c, len, 1);
  for (size_t sl = 0; sl < nSlices; sl++) {
    size_t sOff, sLen;
    commSplitPart(len, nSlices, sl, c->unit, &sOff, &sLen);
    size_t off = base + sOff;
    commPrim_t prim;
    uint8_t fl = c->pre;
    if (d == 0) {
      prim = COMM_PRIM_RECV_REDUCE_COPY;
      fl |= c->post;
    } else if (d == 1) {
      prim = COMM_PRIM_SEND;
    } else {
      prim = COMM_PRIM_RECV_REDUCE_SEND;
    }
    COMMCHECK(emit(c, prim, fl, COMM_BUF_INPUT, off, COMM_BUF_OUTPUT, off, sLen));
  }
  return commSuccess;
}

/* Blocks travel around the ring; at step k position p forwards the block of ring rank p-k. */
static commResult_t allGather(ringCtx* c, size_t base, size_t len) {
  int n = c->n;
  size_t cnt = c->a->count;
  size_t nSlices = nSlicesFor(c, len, 1);
  for (size_t sl = 0; sl < nSlices; sl++) {
    size_t sOff, sLen;
    commSplitPart(len, nSlices, sl, c->unit, &sOff, &sLen);
    size_t off = base + sOff;
    for (int k = 0; k < n; k++) {
      size_t q = (size_t)ringRank(c, c->pos - k);
      commPrim_t prim = k == 0 ? COMM_PRIM_COPY_SEND : k == n - 1 ? COMM_PRIM_RECV : COMM_PRIM_RECV_COPY_SEND;
      COMMCHECK(emit(c, prim, 0, COMM_BUF_INPUT, off, COMM_BUF_OUTPUT, q * cnt + off, sLen));
    }
  }
  return commSuccess;
}

/* The block of ring rank q starts at position q+1 and ends reduced at q. */
static commResult_t reduceScatter(ringCtx* c, size_t base, size_t len) {
  int n = c->n;
  size_t cnt = c->a->count;
  size_t nSlices = nSlicesFor(c, len, 1);
  for (size_t sl = 0; sl < nSlices; sl++) {
    size_t sOff, sLen;
    commSplitPart(len, nSlices, sl, c->unit, &sOff, &sLen);
    size_t off = base + sOff;
    for (int k = 0; k < n; k++) {
      size_t q = (size_t)ringRank(c, c->pos - k - 1);
      commPrim_t prim;
      uint8_t fl = c->pre;
      if (k == 0) {
        prim = COMM_PRIM_SEND;
      } else if (k < n - 1) {
        prim = COMM_PRIM_RECV_REDUCE_SEND;
      } else {
        prim = COMM_PRIM_RECV_REDUCE_COPY;
        fl |= c->post;
      }
      COMMCHECK(emit(c, prim, fl, COMM_BUF_INPUT, q * cnt + off, COMM_BUF_OUTPUT, off, sLen));
    }
  }
  return commSuccess;
}

/* One rank alone: the collective is a local copy (in/out layouts coincide for n == 1). */
static commResult_t single(ringCtx* c, size_t base, size_t len) {
  uint8_t fl = (c->a->func == commFuncAllReduce || c->a->func == commFuncReduce || c->a->func == commFuncReduceScatter)
                   ? (uint8_t)(c->pre | c->post)
                   : 0;
  return emit(c, COMM_PRIM_COPY, fl, COMM_BUF_INPUT, base, COMM_BUF_OUTPUT, base, len);
}

commResult_t commRingBuild(const commCollArgs* a, commSchedule* out) {
  if (a == NULL || out == NULL) {
    WARN("commRingBuild: NULL argument");
    return commInvalidArgument;
  }
  if (a->nRanks < 1 || a->rank < 0 || a->rank >= a->nRanks || a->nChannels < 1 || a->nChannels > COMM_MAX_CHANNELS) {
    WARN("commRingBuild: bad arguments rank %d nRanks %d nChannels %d", a->rank, a->nRanks, a->nChannels);
    return commInvalidArgument;
  }
  if ((a->func == commFuncBroadcast || a->func == commFuncReduce) && (a->root < 0 || a->root >= a->nRanks)) {
    WARN("commRingBuild: root %d out of range (nRanks %d)", a->root, a->nRanks);
    return commInvalidArgument;
  }
  if (a->count > 0 && a->chunkElems == 0) {
    WARN("commRingBuild: chunkElems is 0");
    return commInvalidArgument;
  }
  commResult_t (*fn)(ringCtx*, size_t, size_t);
  switch (a->func) {
    case commFuncAllReduce: fn = allReduce; break;
    case commFuncBroadcast: fn = broadcast; break;
    case commFuncReduce: fn = reduce; break;
    case commFuncAllGather: fn = allGather; break;
    case commFuncReduceScatter: fn = reduceScatter; break;
    default: WARN("commRingBuild: %s has no ring algorithm", commFuncName(a->func)); return commInvalidArgument;
  }
  if (a->nRanks == 1) fn = single;
  for (int ch = 0; ch < a->nChannels && (a->func == commFuncBroadcast || a->func == commFuncReduce); ch++) {
    int found = 0;
    for (int i = 0; i < a->nRanks; i++)
      if ((a->ringRanks[ch] ? a->ringRanks[ch][i] : i) == a->root) found = 1;
    if (!found) {
      WARN("commRingBuild: root %d is not in the ring of channel %d", a->root, ch);
      return commInvalidArgument;
    }
  }
  COMMCHECK(commSchedInit(out, a->nChannels));
  commResult_t res = commSuccess;
  for (int ch = 0; ch < a->nChannels; ch++) {
    ringCtx c;
    memset(&c, 0, sizeof(c));
    c.a = a;
    c.s = out;
    c.ch = ch;
    c.n = a->nRanks;
    c.ring = a->ringRanks[ch];
    c.pos = -1;
    for (int i = 0; i < c.n; i++)
      if (ringRank(&c, i) == a->rank) c.pos = i;
    if (c.pos < 0) {
      WARN("commRingBuild: rank %d is not in the ring of channel %d", a->rank, ch);
      res = commInvalidArgument;
      goto fail;
    }
    c.prev = ringRank(&c, c.pos - 1);
    c.next = ringRank(&c, c.pos + 1);
    c.pre = a->isReduction ? COMM_STEP_PRE : 0;
    c.post = a->isReduction ? COMM_STEP_POST : 0;
    c.unit = commSplitUnit(a->eltSize, a->chunkElems);
    c.chunkUnits = a->chunkElems / c.unit;
    size_t off, len;
    commSplitPart(a->count, (size_t)a->nChannels, (size_t)ch, c.unit, &off, &len);
    COMMCHECKGOTO(fn(&c, off, len), res, fail);
  }
  return commSuccess;
fail:
  commSchedFree(out);
  return res;
}
