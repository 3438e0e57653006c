/* The verifier: runs the schedules of all ranks symbolically, piece by piece, over bounded FIFOs.
 *
 * Values are symbolic. A buffer (or a piece in flight) is a sorted list of segments; a segment is a range
 * of elements whose value is "the reduction over the ranks in a bitset of the source element at offset
 * srcOff + i", plus whether the pre-operation and post-operation were applied. Ranges that are never
 * written are undefined. A segment splits only where the data really differs, so counts of millions stay
 * a handful of segments.
 *
 * Execution model (the executor's): each rank runs each channel's steps in order; a connection is a FIFO
 * per (channel, sender, receiver) of fifoElems/pieceElems slots holding one piece each; a step moves its
 * count in pieces of at most pieceElems; a step with a recv and a send takes piece i from its input FIFO
 * only when it can put piece i into its output FIFO; the two sides of SEND_RECV progress independently.
 * The simulation visits every (rank, channel) round-robin, advancing each as far as it can; a full round
 * without progress before the end is a deadlock. A step whose peer is COMM_PEER_COLLNET talks to its
 * channel's collnet group instead of a connection (verify_collnet.c: the network's flow control and the
 * reduction of the members' k-th pieces). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "debug.h"
#include "schedule.h"
#include "utils.h"
#include "verify_internal.h"

/* ---------------------------------------------------------------------------------------------------- */
/* Connections */

static uint64_t connKey(const vctx* v, int ch, int from, int to) {
  return ((uint64_t)ch * (uint64_t)v->nRanks + (uint64_t)from) * (uint64_t)v->nRanks + (uint64_t)to;
}

static size_t hashKey(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return (size_t)k;
}

static commResult_t htabGrow(vctx* v) {
  size_t nc = v->hcap ? v->hcap * 2 : 1024;
  int* nt = NULL;
  uint64_t* nk = NULL;
  COMMCHECK(commCalloc(&nt, nc, sizeof(int)));
  commResult_t res = commCalloc(&nk, nc, sizeof(uint64_t));
  if (res != commSuccess) {
    free(nt);
    return res;
  }
  for (size_t i = 0; i < nc; i++) nt[i] = -1;
  for (size_t i = 0; i < v->hcap; i++) {
    if (v->htab[i] < 0) continue;
    size_t h = hashKey(v->hkeys[i]) & (nc - 1);
    while (nt[h] >= 0) h = (h + 1) & (nc - 1);
    nt[h] = v->htab[i];
    nk[h] = v->hkeys[i];
  }
  free(v->htab);
  free(v->hkeys);
  v->htab = nt;
  v->hkeys = nk;
  v->hcap = nc;
  return commSuccess;
}

static commResult_t getConn(vctx* v, int ch, int from, int to, int* idx) {
  if ((size_t)(v->nConns + 1) * 2 > v->hcap) COMMCHECK(htabGrow(v));
  uint64_t key = connKey(v, ch, from, to);
  size_t h = hashKey(key) & (v->hcap - 1);
  while (v->htab[h] >= 0) {
    if (v->hkeys[h] == key) {
      *idx = v->htab[h];
      return commSuccess;
    }
    h = (h + 1) & (v->hcap - 1);
  }
  if (v->nConns == v->capConns) {
    int nc = v->capConns ? v->capConns * 2 : 64;
    COMMCHECK(commRealloc(&v->conns, (size_t)v->capConns, (size_t)nc, sizeof(vconn)));
    v->capConns = nc;
  }
  vconn* c = &v->conns[v->nConns];
  memset(c, 0, sizeof(*c));
  c->ch = ch;
  c->from = from;
  c->to = to;
  COMMCHECK(commCalloc(&c->slots, (size_t)v->nSlots, sizeof(vlist)));
  COMMCHECK(commCalloc(&c->sizes, (size_t)v->nSlots, sizeof(size_t)));
  v->htab[h] = v->nConns;
  v->hkeys[h] = key;
  *idx = v->nConns++;
  return commSuccess;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Steps */

int primHasSend(int p) {
  return p == COMM_PRIM_SEND || p == COMM_PRIM_RECV_REDUCE_SEND || p == COMM_PRIM_RECV_COPY_SEND ||
         p == COMM_PRIM_RECV_REDUCE_COPY_SEND || p == COMM_PRIM_COPY_SEND || p == COMM_PRIM_SEND_RECV;
}
int primHasRecv(int p) {
  return p == COMM_PRIM_RECV || p == COMM_PRIM_RECV_REDUCE_SEND || p == COMM_PRIM_RECV_COPY_SEND ||
         p == COMM_PRIM_RECV_REDUCE_COPY || p == COMM_PRIM_RECV_REDUCE_COPY_SEND || p == COMM_PRIM_SEND_RECV;
}
static int primReadsSrc(int p) {
  return p == COMM_PRIM_REDUCE || p == COMM_PRIM_SEND || p == COMM_PRIM_RECV_REDUCE_SEND ||
         p == COMM_PRIM_RECV_REDUCE_COPY || p == COMM_PRIM_RECV_REDUCE_COPY_SEND || p == COMM_PRIM_COPY_SEND ||
         p == COMM_PRIM_COPY || p == COMM_PRIM_SEND_RECV;
}
static int primWritesDst(int p) {
  return p == COMM_PRIM_REDUCE || p == COMM_PRIM_RECV || p == COMM_PRIM_RECV_COPY_SEND ||
         p == COMM_PRIM_RECV_REDUCE_COPY || p == COMM_PRIM_RECV_REDUCE_COPY_SEND || p == COMM_PRIM_COPY_SEND ||
         p == COMM_PRIM_COPY || p == COMM_PRIM_SEND_RECV;
}
static int primReduces(int p) {
  return p == COMM_PRIM_RECV_REDUCE_SEND || p == COMM_PRIM_RECV_REDUCE_COPY || p == COMM_PRIM_RECV_REDUCE_COPY_SEND;
}

static commResult_t checkRef(vctx* v, int r, const commBufRef* ref, size_t count, int write, const char* what) {
  vrank* R = &v->ranks[r];
  if (count == 0) return commSuccess;
  if ((int64_t)ref->buf >= (int64_t)R->nBufs)
    return verr(v, "%s buffer %u does not exist (schedule has %d buffers)", what, (unsigned)ref->buf, R->nBufs);
  if (write && ref->buf == COMM_BUF_INPUT) return verr(v, "%s writes the input buffer", what);
  size_t size = R->size[ref->buf];
  if (size == SIZE_MAX) return commSuccess;
  if (ref->offset > size || count > size - ref->offset)
    return verr(v, "%s [%zu, %zu) of buffer %u is out of bounds (%zu elements)", what, ref->offset, ref->offset + count,
                (unsigned)ref->buf, size);
  return commSuccess;
}

static commResult_t enterStep(vctx* v, int r, int ch, vchan* c, const commStep* st) {
  int p = st->prim;
  c->sconn = c->rconn = -1;
  c->snet = c->rnet = 0;
  c->sendDone = c->recvDone = 0;
  if (p < 0 || p >= COMM_NUM_PRIMS) return verr(v, "unknown primitive %d", p);
  if (st->flags & ~(COMM_STEP_PRE | COMM_STEP_POST)) return verr(v, "unknown flags 0x%x", st->flags);
  if (st->flags && !v->isRed) return verr(v, "PRE/POST flags on a collective that needs none");
  if ((st->flags & COMM_STEP_POST) && p == COMM_PRIM_SEND_RECV) return verr(v, "POST flag on sendRecv");
  if ((st->flags & COMM_STEP_PRE) && !primReadsSrc(p)) return verr(v, "PRE on a step that reads no input");
  if (p == COMM_PRIM_NOP) return commSuccess;
  size_t sendCount = st->count;
  size_t recvCount = p == COMM_PRIM_SEND_RECV ? st->recvCount : st->count;
  int hasSend = primHasSend(p), hasRecv = primHasRecv(p);
  if (p == COMM_PRIM_SEND_RECV) {
    hasSend = st->sendPeer >= 0 || st->sendPeer == COMM_PEER_COLLNET;
    hasRecv = st->recvPeer >= 0 || st->recvPeer == COMM_PEER_COLLNET;
    if (!hasSend && sendCount > 0) return verr(v, "sends %zu elements to no peer", sendCount);
    if (!hasRecv && recvCount > 0) return verr(v, "receives %zu elements from no peer", recvCount);
  }
  c->snet = hasSend && st->sendPeer == COMM_PEER_COLLNET;
  c->rnet = hasRecv && st->recvPeer == COMM_PEER_COLLNET;
  if ((c->snet || c->rnet) && c->cnMember < 0) return verr(v, "collnet step of a rank outside the group");
  if (hasSend && !c->snet && (st->sendPeer < 0 || st->sendPeer >= v->nRanks))
    return verr(v, "send peer %d out of range", st->sendPeer);
  if (hasRecv && !c->rnet && (st->recvPeer < 0 || st->recvPeer >= v->nRanks))
    return verr(v, "recv peer %d out of range", st->recvPeer);
  if (primReadsSrc(p)) COMMCHECK(checkRef(v, r, &st->src, sendCount, 0, "src"));
  if (primWritesDst(p)) COMMCHECK(checkRef(v, r, &st->dst, recvCount, 1, "dst"));
  if (hasSend) {
    if (!c->snet) COMMCHECK(getConn(v, ch, r, st->sendPeer, &c->sconn));
    v->bytesSent[r] += sendCount * v->eltSize;
  }
  if (hasRecv && !c->rnet) COMMCHECK(getConn(v, ch, st->recvPeer, r, &c->rconn));
  return commSuccess;
}

static commResult_t pushPiece(vctx* v, vconn* c, const vlist* val, size_t size) {
  int slot = (c->head + c->len) % v->nSlots;
  COMMCHECK(vlCopy(v, &c->slots[slot], val));
  c->sizes[slot] = size;
  c->len++;
  return commSuccess;
}

static void popPiece(vctx* v, vconn* c) {
  c->head = (c->head + 1) % v->nSlots;
  c->len--;
}

static commResult_t checkHead(vctx* v, vconn* c, size_t expect) {
  size_t got = c->sizes[c->head];
  if (got != expect)
    return verr(v, "expects a piece of %zu elements from rank %d, rank %d sent %zu (send/recv mismatch)", expect,
                c->from, c->from, got);
  return commSuccess;
}

/* The current step's send and receive sides, in advance(): the connection (sc, rc), or when NULL the
 * channel's collnet group. (Macros: they run once per piece, and stay cheap in debug builds.) */
#define CAN_SEND() (sc ? sc->len < v->nSlots : vcnCanSend(v, ch, c))
#define CAN_RECV() (rc ? rc->len > 0 : vcnCanRecv(v, ch, c))
#define SEND_PIECE(val, n) (sc ? pushPiece(v, sc, val, n) : vcnPush(v, ch, c, val, n))
#define RECV_HEAD(n, val) (rc ? checkHead(v, rc, n) : vcnHead(v, ch, c, n, &(val)))
#define RECV_POP() (rc ? (popPiece(v, rc), commSuccess) : vcnPop(v, ch, c))

/* Advance one (rank, channel) as far as possible. */
static commResult_t advance(vctx* v, int r, int ch, int* progressed) {
  commChannelSched* cs = &v->sched[r].channels[ch];
  vchan* c = &v->chans[(size_t)r * COMM_MAX_CHANNELS + ch];
  v->curRank = r;
  v->curCh = ch;
  while (c->step < cs->nSteps) {
    const commStep* st = &cs->steps[c->step];
    v->curStep = c->step;
    if (!c->entered) {
      COMMCHECK(enterStep(v, r, ch, c, st));
      c->entered = 1;
    }
    vrank* R = &v->ranks[r];
    vconn* sc = c->sconn >= 0 ? &v->conns[c->sconn] : NULL;
    vconn* rc = c->rconn >= 0 ? &v->conns[c->rconn] : NULL;
    int p = st->prim;
    int pre = st->flags & COMM_STEP_PRE, post = st->flags & COMM_STEP_POST;
    int done = 0;
    switch (p) {
      case COMM_PRIM_NOP: done = 1; break;
      case COMM_PRIM_COPY: {
        if (st->count == 0) {
          done = 1;
          break;
        }
        COMMCHECK(vlRead(v, &R->bufs[st->src.buf], st->src.offset, st->src.offset + st->count, &v->tRead));
        if (pre) COMMCHECK(applyPre(v, &v->tRead, r));
        if (post) COMMCHECK(applyPost(v, &v->tRead));
        COMMCHECK(vlWrite(v, &R->bufs[st->dst.buf], st->dst.offset, st->count, &v->tRead));
        done = 1;
        break;
      }
      case COMM_PRIM_REDUCE: {
        if (st->count == 0) {
          done = 1;
          break;
        }
        COMMCHECK(vlRead(v, &R->bufs[st->dst.buf], st->dst.offset, st->dst.offset + st->count, &v->tDst));
        COMMCHECK(vlRead(v, &R->bufs[st->src.buf], st->src.offset, st->src.offset + st->count, &v->tRead));
        if (pre) COMMCHECK(applyPre(v, &v->tRead, r));
        COMMCHECK(vlReduce(v, &v->tDst, &v->tRead, &v->tRed));
        if (post) COMMCHECK(applyPost(v, &v->tRed));
        COMMCHECK(vlWrite(v, &R->bufs[st->dst.buf], st->dst.offset, st->count, &v->tRed));
        done = 1;
        break;
      }
      case COMM_PRIM_SEND:
      case COMM_PRIM_COPY_SEND: {
        while (c->sendDone < st->count && CAN_SEND()) {
          size_t n = st->count - c->sendDone;
          if (n > v->piece) n = v->piece;
          size_t o = st->src.offset + c->sendDone;
          COMMCHECK(vlRead(v, &R->bufs[st->src.buf], o, o + n, &v->tRead));
          if (pre) COMMCHECK(applyPre(v, &v->tRead, r));
          if (post) COMMCHECK(applyPost(v, &v->tRead));
          if (p == COMM_PRIM_COPY_SEND)
            COMMCHECK(vlWrite(v, &R->bufs[st->dst.buf], st->dst.offset + c->sendDone, n, &v->tRead));
          COMMCHECK(SEND_PIECE(&v->tRead, n));
          c->sendDone += n;
          *progressed = 1;
        }
        done = c->sendDone == st->count;
        break;
      }
      case COMM_PRIM_RECV:
      case COMM_PRIM_RECV_REDUCE_SEND:
      case COMM_PRIM_RECV_COPY_SEND:
      case COMM_PRIM_RECV_REDUCE_COPY:
      case COMM_PRIM_RECV_REDUCE_COPY_SEND: {
        int sends = primHasSend(p);
        while (c->recvDone < st->count && CAN_RECV() && (!sends || CAN_SEND())) {
          size_t n = st->count - c->recvDone;
          if (n > v->piece) n = v->piece;
          const vlist* val = rc ? &rc->slots[rc->head] : NULL;
          COMMCHECK(RECV_HEAD(n, val));
          if (primReduces(p)) {
            size_t o = st->src.offset + c->recvDone;
            COMMCHECK(vlRead(v, &R->bufs[st->src.buf], o, o + n, &v->tRead));
            if (pre) COMMCHECK(applyPre(v, &v->tRead, r));
            COMMCHECK(vlReduce(v, val, &v->tRead, &v->tRed));
          } else {
            COMMCHECK(vlCopy(v, &v->tRed, val));
          }
          if (post) COMMCHECK(applyPost(v, &v->tRed));
          if (primWritesDst(p)) COMMCHECK(vlWrite(v, &R->bufs[st->dst.buf], st->dst.offset + c->recvDone, n, &v->tRed));
          if (sends) COMMCHECK(SEND_PIECE(&v->tRed, n));
          COMMCHECK(RECV_POP());
          c->recvDone += n;
          *progressed = 1;
        }
        done = c->recvDone == st->count;
        break;
      }
      case COMM_PRIM_SEND_RECV: {
        while ((sc || c->snet) && c->sendDone < st->count && CAN_SEND()) {
          size_t n = st->count - c->sendDone;
          if (n > v->piece) n = v->piece;
          size_t o = st->src.offset + c->sendDone;
          COMMCHECK(vlRead(v, &R->bufs[st->src.buf], o, o + n, &v->tRead));
          if (pre) COMMCHECK(applyPre(v, &v->tRead, r));
          COMMCHECK(SEND_PIECE(&v->tRead, n));
          c->sendDone += n;
          *progressed = 1;
        }
        while ((rc || c->rnet) && c->recvDone < st->recvCount && CAN_RECV()) {
          size_t n = st->recvCount - c->recvDone;
          if (n > v->piece) n = v->piece;
          const vlist* val = rc ? &rc->slots[rc->head] : NULL;
          COMMCHECK(RECV_HEAD(n, val));
          COMMCHECK(vlWrite(v, &R->bufs[st->dst.buf], st->dst.offset + c->recvDone, n, val));
          COMMCHECK(RECV_POP());
          c->recvDone += n;
          *progressed = 1;
        }
        done = (!(sc || c->snet) || c->sendDone == st->count) && (!(rc || c->rnet) || c->recvDone == st->recvCount);
        break;
      }
      default: return verr(v, "unknown primitive %d", p);
    }
    if (!done) break;
    c->step++;
    c->entered = 0;
    *progressed = 1;
  }
  v->curStep = -1;
  v->curRank = -1;
  return commSuccess;
}
#undef CAN_SEND
#undef CAN_RECV
#undef SEND_PIECE
#undef RECV_HEAD
#undef RECV_POP

static commResult_t reportDeadlock(vctx* v) {
  char msg[1024];
  size_t used = 0;
  int blocked = 0;
  msg[0] = '\0';
  for (int r = 0; r < v->nRanks; r++) {
    for (int ch = 0; ch < v->sched[r].nChannels; ch++) {
      const commChannelSched* cs = &v->sched[r].channels[ch];
      const vchan* c = &v->chans[(size_t)r * COMM_MAX_CHANNELS + ch];
      if (c->step >= cs->nSteps) continue;
      blocked++;
      if (blocked > 8 || used >= sizeof(msg) - 1) continue;
      const commStep* st = &cs->steps[c->step];
      used += (size_t)snprintf(msg + used, sizeof(msg) - used, "%s rank %d ch %d step %d/%d %s", blocked > 1 ? ";" : "",
                               r, ch, c->step, cs->nSteps, commPrimName((commPrim_t)st->prim));
      if (used >= sizeof(msg)) break;
      if (c->sconn >= 0 && v->conns[c->sconn].len == v->nSlots)
        used += (size_t)snprintf(msg + used, sizeof(msg) - used, " (fifo to %d full)", st->sendPeer);
      if (used >= sizeof(msg)) break;
      if (c->rconn >= 0 && v->conns[c->rconn].len == 0)
        used += (size_t)snprintf(msg + used, sizeof(msg) - used, " (waits for %d)", st->recvPeer);
      if (used >= sizeof(msg)) break;
      if (c->snet || c->rnet) used = vcnDescribe(v, ch, c, msg, used, sizeof(msg));
      if (used >= sizeof(msg)) break;
    }
  }
  v->curRank = -1;
  v->curStep = -1;
  return verr(v, "deadlock: %d (rank, channel) pairs blocked:%s%s", blocked, msg, blocked > 8 ? "; ..." : "");
}

static commResult_t simRun(vctx* v) {
  COMMCHECK(vcnSetup(v));
  for (;;) {
    int progressed = 0, allDone = 1;
    for (int r = 0; r < v->nRanks; r++) {
      for (int ch = 0; ch < v->sched[r].nChannels; ch++) {
        COMMCHECK(advance(v, r, ch, &progressed));
        const vchan* c = &v->chans[(size_t)r * COMM_MAX_CHANNELS + ch];
        if (c->step < v->sched[r].channels[ch].nSteps) allDone = 0;
      }
    }
    if (allDone) break;
    if (!progressed) return reportDeadlock(v);
  }
  for (int i = 0; i < v->nConns; i++) {
    if (v->conns[i].len > 0) {
      v->curRank = -1;
      return verr(v, "%d piece(s) sent by rank %d to rank %d on channel %d were never received", v->conns[i].len,
                  v->conns[i].from, v->conns[i].to, v->conns[i].ch);
    }
  }
  return vcnFinish(v);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Setup, teardown */

static commResult_t simInit(vctx* v, int nRanks, int isRed, size_t fifoElems, size_t pieceElems, size_t eltSize) {
  memset(v, 0, sizeof(*v));
  v->curRank = v->curStep = -1;
  if (nRanks < 1) return verr(v, "nRanks %d", nRanks);
  if (pieceElems == 0 || fifoElems < pieceElems)
    return verr(v, "bad FIFO geometry: %zu elements in pieces of %zu", fifoElems, pieceElems);
  v->nRanks = nRanks;
  v->nw = (nRanks + 63) / 64;
  v->isRed = isRed;
  v->piece = pieceElems;
  v->eltSize = eltSize ? eltSize : 1;
  size_t slots = fifoElems / pieceElems;
  v->nSlots = slots > (1 << 20) ? (1 << 20) : (int)slots;
  COMMCHECK(commCalloc(&v->sched, (size_t)nRanks, sizeof(commSchedule)));
  COMMCHECK(commCalloc(&v->ranks, (size_t)nRanks, sizeof(vrank)));
  COMMCHECK(commCalloc(&v->chans, (size_t)nRanks * COMM_MAX_CHANNELS, sizeof(vchan)));
  COMMCHECK(commCalloc(&v->bytesSent, (size_t)nRanks, sizeof(size_t)));
  COMMCHECK(commCalloc(&v->tmpBits, (size_t)v->nw, sizeof(uint64_t)));
  COMMCHECK(commCalloc(&v->expBits, (size_t)v->nw, sizeof(uint64_t)));
  COMMCHECK(htabGrow(v));
  return commSuccess;
}

/* Buffers of rank r after its schedule is built; sizes of input/output given, scratch from the schedule,
 * user buffers unbounded. */
static commResult_t simRankBufs(vctx* v, int r, size_t inSize, size_t outSize) {
  vrank* R = &v->ranks[r];
  const commSchedule* s = &v->sched[r];
  v->curRank = r;
  if (s->nChannels < 0 || s->nChannels > COMM_MAX_CHANNELS) return verr(v, "%d channels", s->nChannels);
  if (s->nBufs < 2 || s->nBufs > COMM_MAX_SCHED_BUFS) return verr(v, "schedule declares %d buffers", s->nBufs);
  R->nBufs = s->nBufs < COMM_BUF_USER0 ? COMM_BUF_USER0 : s->nBufs;
  COMMCHECK(commCalloc(&R->bufs, (size_t)R->nBufs, sizeof(vlist)));
  COMMCHECK(commCalloc(&R->size, (size_t)R->nBufs, sizeof(size_t)));
  R->size[COMM_BUF_INPUT] = inSize;
  R->size[COMM_BUF_OUTPUT] = outSize;
  R->size[COMM_BUF_SCRATCH] = s->scratchElems;
  for (int b = COMM_BUF_USER0; b < R->nBufs; b++) R->size[b] = SIZE_MAX;
  v->curRank = -1;
  return commSuccess;
}

/* buf[lo, hi) := {rank}, source offsets srcBase + i. */
static commResult_t simFill(vctx* v, int r, uint32_t buf, size_t lo, size_t hi, size_t srcBase) {
  if (hi <= lo) return commSuccess;
  memset(v->tmpBits, 0, (size_t)v->nw * sizeof(uint64_t));
  v->tmpBits[r / 64] |= (uint64_t)1 << (r % 64);
  v->tCheck.n = 0;
  COMMCHECK(vlAppend(v, &v->tCheck, 0, hi - lo, srcBase, V_DEF, v->tmpBits));
  return vlWrite(v, &v->ranks[r].bufs[buf], lo, hi - lo, &v->tCheck);
}

/* Checks buf[lo, hi) of rank r holds ranks `all` ? every rank : {single}, source offsets srcBase + i, with
 * PRE and POST applied when `reduced` and the op needs them. */
static commResult_t simExpect(vctx* v, int r, uint32_t buf, size_t lo, size_t hi, int all, int single, size_t srcBase,
                              int reduced, const char* what) {
  if (hi <= lo) return commSuccess;
  memset(v->expBits, 0, (size_t)v->nw * sizeof(uint64_t));
  if (all) {
    for (int q = 0; q < v->nRanks; q++) v->expBits[q / 64] |= (uint64_t)1 << (q % 64);
  } else {
    v->expBits[single / 64] |= (uint64_t)1 << (single % 64);
  }
  uint8_t expFlags = (uint8_t)(V_DEF | (reduced && v->isRed ? V_PRE | V_POST : 0));
  v->curRank = r;
  v->curStep = -1;
  COMMCHECK(vlRead(v, &v->ranks[r].bufs[buf], lo, hi, &v->tCheck));
  for (int i = 0; i < v->tCheck.n; i++) {
    const vseg* s = &v->tCheck.s[i];
    size_t at = lo + s->lo;
    if (!(s->flags & V_DEF)) return verr(v, "%s[%zu, %zu) was never written", what, at, lo + s->hi);
    if (s->srcOff != srcBase + s->lo)
      return verr(v, "%s[%zu] holds source element %zu, expected %zu", what, at, s->srcOff, srcBase + s->lo);
    const uint64_t* b = segBits(v, &v->tCheck, i);
    if (!bitsEqual(v, b, v->expBits)) {
      char got[128], exp[128];
      describeSet(v, b, got, sizeof(got));
      describeSet(v, v->expBits, exp, sizeof(exp));
      return verr(v, "%s[%zu] holds the contributions of ranks %s, expected %s", what, at, got, exp);
    }
    if (s->flags != expFlags)
      return verr(v, "%s[%zu]: PRE %s, POST %s (expected %s)", what, at, (s->flags & V_PRE) ? "applied" : "missing",
                  (s->flags & V_POST) ? "applied" : "missing", (expFlags & V_PRE) ? "both applied" : "neither");
  }
  v->curRank = -1;
  return commSuccess;
}

static void simStats(vctx* v, commVerifyStats* stats) {
  if (stats == NULL) return;
  memset(stats, 0, sizeof(*stats));
  for (int r = 0; r < v->nRanks; r++) {
    for (int ch = 0; ch < v->sched[r].nChannels; ch++) {
      size_t n = (size_t)v->sched[r].channels[ch].nSteps;
      if (n > stats->maxStepsPerChannel) stats->maxStepsPerChannel = n;
    }
    if (v->bytesSent[r] > stats->maxBytesSent) stats->maxBytesSent = v->bytesSent[r];
    stats->totalBytesSent += v->bytesSent[r];
  }
}

static void simFree(vctx* v) {
  for (int r = 0; r < v->nBuilt; r++) commSchedFree(&v->sched[r]);
  if (v->ranks) {
    for (int r = 0; r < v->nRanks; r++) {
      vrank* R = &v->ranks[r];
      for (int b = 0; R->bufs && b < R->nBufs; b++) vlFree(&R->bufs[b]);
      free(R->bufs);
      free(R->size);
    }
  }
  for (int i = 0; i < v->nConns; i++) {
    for (int s = 0; s < v->nSlots; s++) vlFree(&v->conns[i].slots[s]);
    free(v->conns[i].slots);
    free(v->conns[i].sizes);
  }
  free(v->conns);
  vcnFree(v);
  vlFree(&v->tNet);
  vlFree(&v->tSlice);
  free(v->htab);
  free(v->hkeys);
  vlFree(&v->tRead);
  vlFree(&v->tRed);
  vlFree(&v->tDst);
  vlFree(&v->tWrite);
  vlFree(&v->tCheck);
  free(v->tmpBits);
  free(v->expBits);
  free(v->bytesSent);
  free(v->chans);
  free(v->ranks);
  free(v->sched);
  memset(v, 0, sizeof(*v));
}

/* ---------------------------------------------------------------------------------------------------- */
/* Collectives */

static commResult_t collSizes(const commCollArgs* a, int r, size_t* in, size_t* out) {
  size_t c = a->count, n = (size_t)a->nRanks;
  if (c != 0 && n > SIZE_MAX / c) return commInvalidArgument;
  switch (a->func) {
    case commFuncAllReduce:
      *in = c;
      *out = c;
      break;
    case commFuncBroadcast:
      *in = r == a->root ? c : 0;
      *out = c;
      break;
    case commFuncReduce:
      *in = c;
      *out = r == a->root ? c : 0;
      break;
    case commFuncAllGather:
      *in = c;
      *out = n * c;
      break;
    case commFuncReduceScatter:
      *in = n * c;
      *out = c;
      break;
    case commFuncAllToAll:
      *in = n * c;
      *out = n * c;
      break;
    default: return commInvalidArgument;
  }
  return commSuccess;
}

static commResult_t collCheck(vctx* v, const commCollArgs* a) {
  size_t c = a->count;
  int n = a->nRanks;
  for (int r = 0; r < n; r++) {
    switch (a->func) {
      case commFuncAllReduce: COMMCHECK(simExpect(v, r, COMM_BUF_OUTPUT, 0, c, 1, 0, 0, 1, "output")); break;
      case commFuncBroadcast: COMMCHECK(simExpect(v, r, COMM_BUF_OUTPUT, 0, c, 0, a->root, 0, 0, "output")); break;
      case commFuncReduce:
        if (r == a->root) COMMCHECK(simExpect(v, r, COMM_BUF_OUTPUT, 0, c, 1, 0, 0, 1, "output"));
        break;
      case commFuncAllGather:
        for (int p = 0; p < n; p++)
          COMMCHECK(simExpect(v, r, COMM_BUF_OUTPUT, (size_t)p * c, (size_t)(p + 1) * c, 0, p, 0, 0, "output"));
        break;
      case commFuncReduceScatter:
        COMMCHECK(simExpect(v, r, COMM_BUF_OUTPUT, 0, c, 1, 0, (size_t)r * c, 1, "output"));
        break;
      case commFuncAllToAll:
        for (int p = 0; p < n; p++)
          COMMCHECK(
              simExpect(v, r, COMM_BUF_OUTPUT, (size_t)p * c, (size_t)(p + 1) * c, 0, p, (size_t)r * c, 0, "output"));
        break;
      default: return verr(v, "no check for %s", commFuncName(a->func));
    }
  }
  return commSuccess;
}

commResult_t commVerifyColl(const commCollArgs* args, commSchedBuilder_t build, size_t fifoElems, size_t pieceElems,
                            commVerifyStats* stats) {
  if (args == NULL || build == NULL) {
    WARN("commVerifyColl: NULL argument");
    return commInvalidArgument;
  }
  int isReductionFunc = args->func == commFuncAllReduce || args->func == commFuncReduce ||
                        args->func == commFuncReduceScatter;
  vctx v;
  commResult_t res = simInit(&v, args->nRanks, isReductionFunc && args->isReduction, fifoElems, pieceElems,
                             args->eltSize);
  if (res != commSuccess) goto exit;
  v.cnFunc = args->func;
  v.nodeOf = args->nodeOf;
  for (int r = 0; r < args->nRanks; r++) {
    commCollArgs a = *args;
    a.rank = r;
    res = build(&a, &v.sched[r]);
    if (res != commSuccess) {
      WARN("schedule verification: building %s for rank %d of %d failed (%d)", commFuncName(args->func), r,
           args->nRanks, (int)res);
      goto exit;
    }
    v.nBuilt = r + 1;
    size_t in, out;
    if (collSizes(args, r, &in, &out) != commSuccess) {
      res = verr(&v, "cannot verify %s with count %zu on %d ranks", commFuncName(args->func), args->count,
                 args->nRanks);
      goto exit;
    }
    COMMCHECKGOTO(simRankBufs(&v, r, in, out), res, exit);
    COMMCHECKGOTO(simFill(&v, r, COMM_BUF_INPUT, 0, in, 0), res, exit);
  }
  COMMCHECKGOTO(simRun(&v), res, exit);
  COMMCHECKGOTO(collCheck(&v, args), res, exit);
  simStats(&v, stats);
  TRACE(COMM_COLL, "verified %s count %zu on %d ranks, %d channels", commFuncName(args->func), args->count,
        args->nRanks, args->nChannels);
exit:
  simFree(&v);
  return res;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Grouped point-to-point */

#define P2P_SRC_BASE(buf) ((size_t)(buf) << 40)

commResult_t commVerifyP2p(int nRanks, const commP2pOp* const* ops, const int* nOps, commP2pBuilder_t build,
                           size_t fifoElems, size_t pieceElems, commVerifyStats* stats) {
  if (ops == NULL || nOps == NULL || build == NULL) {
    WARN("commVerifyP2p: NULL argument");
    return commInvalidArgument;
  }
  vctx v;
  commResult_t res = simInit(&v, nRanks, 0, fifoElems, pieceElems, 1);
  if (res != commSuccess) goto exit;
  for (int r = 0; r < nRanks; r++) {
    res = build(r, nRanks, ops[r], nOps[r], &v.sched[r]);
    if (res != commSuccess) {
      WARN("schedule verification: building send/recv for rank %d failed (%d)", r, (int)res);
      goto exit;
    }
    v.nBuilt = r + 1;
    COMMCHECKGOTO(simRankBufs(&v, r, 0, 0), res, exit);
    for (int i = 0; i < nOps[r]; i++) {
      const commP2pOp* o = &ops[r][i];
      if (o->buf < COMM_BUF_USER0) {
        v.curRank = r;
        res = verr(&v, "op %d uses buffer %u, not a user buffer", i, (unsigned)o->buf);
        goto exit;
      }
      for (int j = 0; j < i; j++) {
        if (ops[r][j].buf == o->buf) {
          v.curRank = r;
          res = verr(&v, "ops %d and %d share buffer %u", j, i, (unsigned)o->buf);
          goto exit;
        }
      }
      if (o->isSend) COMMCHECKGOTO(simFill(&v, r, o->buf, 0, o->count, P2P_SRC_BASE(o->buf)), res, exit);
    }
  }
  COMMCHECKGOTO(simRun(&v), res, exit);
  /* The m-th recv of rank r from p holds the m-th send of p to r. */
  for (int r = 0; r < nRanks; r++) {
    for (int i = 0; i < nOps[r]; i++) {
      const commP2pOp* o = &ops[r][i];
      if (o->isSend) continue;
      int m = 0;
      for (int j = 0; j < i; j++)
        if (!ops[r][j].isSend && ops[r][j].peer == o->peer) m++;
      const commP2pOp* s = NULL;
      for (int j = 0; j < nOps[o->peer] && s == NULL; j++) {
        const commP2pOp* x = &ops[o->peer][j];
        if (x->isSend && x->peer == r && m-- == 0) s = x;
      }
      v.curRank = r;
      if (s == NULL) {
        res = verr(&v, "recv op %d from rank %d has no matching send", i, o->peer);
        goto exit;
      }
      if (s->count != o->count) {
        res = verr(&v, "recv op %d expects %zu elements, rank %d sends %zu", i, o->count, o->peer, s->count);
        goto exit;
      }
      char what[48];
      snprintf(what, sizeof(what), "recv op %d buffer", i);
      COMMCHECKGOTO(simExpect(&v, r, o->buf, 0, o->count, 0, o->peer, P2P_SRC_BASE(s->buf), 0, what), res, exit);
    }
  }
  simStats(&v, stats);
exit:
  simFree(&v);
  return res;
}
