/* commAlgoCollNet's schedules: collectives whose inter-node part the network does (the schedule peer
 * COMM_PEER_COLLNET, one group member per node and channel: commCollNetMembers).
 *
 * Allreduce is CollTree with the collnet inter-node stage (colltree.c). Allgather and reducescatter use the
 * network's gather and scatter (the plugin's iallgather / ireducescatter, where every member's plugin offers
 * them) and need nodes of one size m, so that position p of every node pairs with position p of the others:
 *
 * Positions. On channel c, node w's ranks in the order of ring c (args->ringRanks[c]; rank order without one),
 * rotated so that node w's member of the channel's group (its leader) is position 0. rankAt(w, p) is the rank
 * at position p of node w. The channel handles part c of every rank's block (count/nChannels elements, cut as
 * ring.c cuts, 16-byte aligned), and cuts it into T chunks of at most `piece` elements: piece =
 * min(chunkElems, pieceElems / nNodes), so that the nNodes pieces of one network operation fit one FIFO slot
 * (pieceElems, which plan.c also bounds by the plugin's maxCollBytes). Chunk k = (p, t), k = p T + t: chunk t
 * of the blocks of the ranks at position p, one network operation per chunk.
 *
 * Allgather (out[r S + x] = in_r[x]), chunk (p, t) at offset o, length l:
 *   up:   the rank at position p sends in[o] to its leader (SEND; the leader itself COPY_SENDs it to out at its
 *         own block); the leader puts it in out[rankAt(v, p) S + o] and contributes it to the network
 *         (RECV_COPY_SEND / COPY_SEND -> COMM_PEER_COLLNET): one slot of l elements;
 *   down: the leader receives the gathered slot of nNodes x l elements (member w's piece at w l) into scratch,
 *         every node's ranks pass it down the chain of positions 0 -> 1 -> ... -> m-1 (RECV_COPY_SEND, RECV at
 *         the end), and each rank copies piece w to out[rankAt(w, p) S + o] (COPY).
 * Reducescatter (out_r[x] = op over ranks of in[r R + x]), chunk (p, t):
 *   up:   for each node w in order: the chain m-1 -> ... -> 0 reduces in[rankAt(w, p) R + o] (PRE where a rank
 *         reads its input), the leader into scratch[w l]; then the leader sends the nNodes x l slot to the
 *         network (SEND -> COMM_PEER_COLLNET);
 *   down: the leader receives its node's reduced piece, which is final (POST there): at p = 0 into out[o],
 *         else into scratch and on to rankAt(v, p) (RECV_COPY_SEND), which RECVs it into out[o].
 * Every rank runs up(k) and then down(k - L) for k = 0, 1, ..., K - 1 + L (K = m T chunks, L = 2): the
 * leader keeps up to L + 1 network operations in flight. Why it cannot deadlock: give up(k) and down(k - L)
 * the time k. A step at time k waits only for steps at times <= k: chain neighbours' up(k) (each
 * connection carries one direction, in the order both ends run it), the network's chunk k - L (every leader
 * posted it at time k - L), the leader's down(k - L) (at time k, after its up(k)). Scratch: per channel
 * (nNodes + 1) x piece elements, reused step after step (a step is done with it before the next begins). */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "debug.h"
#include "algorithms.h"
#include "utils.h"

#define CN_LOOKAHEAD 2

typedef struct {
  const commCollArgs* a;
  commSchedule* s;
  int ch;
  int V, m;      /* nodes, ranks per node */
  int* rankAt;   /* [V * m]: rankAt[w * m + p] */
  int* row;      /* [m]: scratch for rotating a node's row */
  int node, pos; /* this rank's */
  size_t block;  /* elements of one rank's block (args->count) */
  size_t base;   /* this channel's part of a block: [base, base + len) */
  size_t len, unit, piece, T;
  size_t scratch; /* this channel's scratch region */
  uint8_t pre, post;
} cnCtx;

static int cnRank(const cnCtx* c, int w, int p) { return c->rankAt[(size_t)w * (size_t)c->m + (size_t)p]; }

static commResult_t cnEmit(cnCtx* c, commPrim_t prim, uint8_t flags, int recvPeer, int sendPeer, commBufRef src,
                           commBufRef dst, size_t count) {
  return commSchedEmit(c->s, c->ch, prim, flags, recvPeer, sendPeer, src, dst, count);
}

static commBufRef scr(const cnCtx* c, size_t off) { return commBufAt(COMM_BUF_SCRATCH, c->scratch + off); }

/* Chunk k: the position it serves and its offset and length within a block. */
static int chunkOf(const cnCtx* c, size_t k, size_t* off, size_t* len) {
  size_t t = k % c->T;
  commSplitPart(c->len, c->T, t, c->unit, off, len);
  *off += c->base;
  return (int)(k / c->T);
}

static int leader(const cnCtx* c) { return cnRank(c, c->node, 0); }
static int chainPrev(const cnCtx* c) { return c->pos > 0 ? cnRank(c, c->node, c->pos - 1) : -1; }
static int chainNext(const cnCtx* c) { return c->pos + 1 < c->m ? cnRank(c, c->node, c->pos + 1) : -1; }

static commResult_t gatherUp(cnCtx* c, size_t k) {
  size_t o, l;
  int p = chunkOf(c, k, &o, &l);
  size_t S = c->block;
  commBufRef in = commBufAt(COMM_BUF_INPUT, o);
  if (c->pos == 0) {
    int r = cnRank(c, c->node, p);
    commBufRef dst = commBufAt(COMM_BUF_OUTPUT, (size_t)r * S + o);
    if (p == 0) return cnEmit(c, COMM_PRIM_COPY_SEND, 0, -1, COMM_PEER_COLLNET, in, dst, l);
    return cnEmit(c, COMM_PRIM_RECV_COPY_SEND, 0, r, COMM_PEER_COLLNET, dst, dst, l);
  }
  if (p != c->pos) return commSuccess;
  return cnEmit(c, COMM_PRIM_SEND, 0, -1, leader(c), in, in, l);
}

static commResult_t gatherDown(cnCtx* c, size_t k) {
  size_t o, l;
  int p = chunkOf(c, k, &o, &l);
  size_t all = (size_t)c->V * l;
  int from = c->pos == 0 ? COMM_PEER_COLLNET : chainPrev(c), to = chainNext(c);
  if (to >= 0) COMMCHECK(cnEmit(c, COMM_PRIM_RECV_COPY_SEND, 0, from, to, scr(c, 0), scr(c, 0), all));
  else COMMCHECK(cnEmit(c, COMM_PRIM_RECV, 0, from, -1, scr(c, 0), scr(c, 0), all));
  for (int w = 0; w < c->V; w++) {
    commBufRef dst = commBufAt(COMM_BUF_OUTPUT, (size_t)cnRank(c, w, p) * c->block + o);
    COMMCHECK(cnEmit(c, COMM_PRIM_COPY, 0, -1, -1, scr(c, (size_t)w * l), dst, l));
  }
  return commSuccess;
}

static commResult_t scatterUp(cnCtx* c, size_t k) {
  size_t o, l;
  int p = chunkOf(c, k, &o, &l);
  int child = chainNext(c), parent = chainPrev(c);
  for (int w = 0; w < c->V; w++) {
    commBufRef in = commBufAt(COMM_BUF_INPUT, (size_t)cnRank(c, w, p) * c->block + o);
    if (c->pos > 0) {
      if (child < 0) COMMCHECK(cnEmit(c, COMM_PRIM_SEND, c->pre, -1, parent, in, in, l));
      else COMMCHECK(cnEmit(c, COMM_PRIM_RECV_REDUCE_SEND, c->pre, child, parent, in, in, l));
      continue;
    }
    commBufRef acc = scr(c, (size_t)w * l);
    if (child < 0) COMMCHECK(cnEmit(c, COMM_PRIM_COPY, c->pre, -1, -1, in, acc, l));
    else COMMCHECK(cnEmit(c, COMM_PRIM_RECV_REDUCE_COPY, c->pre, child, -1, in, acc, l));
  }
  if (c->pos > 0) return commSuccess;
  return cnEmit(c, COMM_PRIM_SEND, 0, -1, COMM_PEER_COLLNET, scr(c, 0), scr(c, 0), (size_t)c->V * l);
}

static commResult_t scatterDown(cnCtx* c, size_t k) {
  size_t o, l;
  int p = chunkOf(c, k, &o, &l);
  commBufRef out = commBufAt(COMM_BUF_OUTPUT, o);
  if (c->pos == 0) {
    if (p == 0) return cnEmit(c, COMM_PRIM_RECV, c->post, COMM_PEER_COLLNET, -1, out, out, l);
    commBufRef fwd = scr(c, (size_t)c->V * c->piece);
    return cnEmit(c, COMM_PRIM_RECV_COPY_SEND, c->post, COMM_PEER_COLLNET, cnRank(c, c->node, p), fwd, fwd, l);
  }
  if (p != c->pos) return commSuccess;
  return cnEmit(c, COMM_PRIM_RECV, 0, leader(c), -1, out, out, l);
}

/* Positions of every node on channel c->ch (the header's rule); fails when nodes differ in size. */
static commResult_t positions(cnCtx* c, int* members) {
  const commCollArgs* a = c->a;
  int* fill = NULL;
  COMMCHECK(commCalloc(&fill, (size_t)c->V, sizeof(int)));
  const int* ring = a->ringRanks[c->ch];
  for (int i = 0; i < a->nRanks; i++) {
    int r = ring ? ring[i] : i;
    int w = a->nodeOf ? a->nodeOf[r] : r;
    c->rankAt[(size_t)w * (size_t)c->m + (size_t)fill[w]++] = r;
  }
  free(fill);
  for (int w = 0; w < c->V; w++) {
    int* row = c->rankAt + (size_t)w * (size_t)c->m;
    int at = -1;
    for (int p = 0; p < c->m; p++)
      if (row[p] == members[w]) at = p;
    if (at < 0) {
      WARN("commCollNetBuild: channel %d: node %d's collnet member %d is not on it", c->ch, w, members[w]);
      return commInternalError;
    }
    for (int p = 0; p < c->m; p++) c->row[p] = row[(at + p) % c->m];
    memcpy(row, c->row, (size_t)c->m * sizeof(int));
  }
  for (int w = 0; w < c->V; w++)
    for (int p = 0; p < c->m; p++)
      if (cnRank(c, w, p) == a->rank) {
        c->node = w;
        c->pos = p;
      }
  return commSuccess;
}

static commResult_t gatherChannel(cnCtx* c, int* members) {
  const commCollArgs* a = c->a;
  COMMCHECK(commCollNetMembers(a, c->ch, members));
  COMMCHECK(positions(c, members));
  commSplitPart(a->count, (size_t)a->nChannels, (size_t)c->ch, commSplitUnit(a->eltSize, SIZE_MAX), &c->base, &c->len);
  if (c->len == 0) return commSuccess;
  c->T = commSplitParts(c->len, c->unit, c->piece / c->unit);
  c->scratch = (size_t)c->ch * ((size_t)c->V + 1) * c->piece;
  size_t K = (size_t)c->m * c->T;
  int gather = a->func == commFuncAllGather;
  for (size_t k = 0; k < K + CN_LOOKAHEAD; k++) {
    if (k < K) COMMCHECK(gather ? gatherUp(c, k) : scatterUp(c, k));
    if (k >= CN_LOOKAHEAD) COMMCHECK(gather ? gatherDown(c, k - CN_LOOKAHEAD) : scatterDown(c, k - CN_LOOKAHEAD));
  }
  return commSuccess;
}

/* Allgather and reducescatter over the network's gather and scatter (the header). */
static commResult_t gatherBuild(const commCollArgs* a, commSchedule* out) {
  cnCtx c;
  memset(&c, 0, sizeof(c));
  c.a = a;
  c.s = out;
  c.V = a->nodeOf ? a->nNodes : a->nRanks;
  if (c.V < 1 || a->nRanks % c.V != 0) {
    WARN("commCollNetBuild: %s over collnet needs nodes of one size (%d ranks on %d nodes)", commFuncName(a->func),
         a->nRanks, c.V);
    return commInvalidArgument;
  }
  c.m = a->nRanks / c.V;
  for (int w = 0; a->nodeOf && w < c.V; w++) {
    int k = 0;
    for (int r = 0; r < a->nRanks; r++) k += a->nodeOf[r] == w;
    if (k != c.m) {
      WARN("commCollNetBuild: %s over collnet needs nodes of one size (node %d has %d ranks, not %d)",
           commFuncName(a->func), w, k, c.m);
      return commInvalidArgument;
    }
  }
  c.block = a->count;
  int reduces = a->isReduction && a->func == commFuncReduceScatter;
  c.pre = reduces ? COMM_STEP_PRE : 0;
  c.post = reduces ? COMM_STEP_POST : 0;
  size_t most = a->pieceElems / (size_t)c.V;
  if (a->chunkElems < most) most = a->chunkElems;
  c.unit = commSplitUnit(a->eltSize, most);
  c.piece = most - most % c.unit;
  if (a->count > 0 && c.piece == 0) {
    WARN("commCollNetBuild: %s over collnet: %d nodes' pieces do not fit a slot of %zu elements", commFuncName(a->func),
         c.V, a->pieceElems);
    return commInvalidArgument;
  }
  COMMCHECK(commSchedInit(out, a->nChannels));
  if (a->count == 0) return commSuccess;
  int* members = NULL;
  commResult_t res = commCalloc(&c.rankAt, (size_t)a->nRanks, sizeof(int));
  if (res == commSuccess) res = commCalloc(&c.row, (size_t)c.m, sizeof(int));
  if (res == commSuccess) res = commCalloc(&members, (size_t)c.V, sizeof(int));
  for (int ch = 0; ch < a->nChannels && res == commSuccess; ch++) {
    c.ch = ch;
    res = gatherChannel(&c, members);
  }
  free(members);
  free(c.row);
  free(c.rankAt);
  if (res != commSuccess) commSchedFree(out);
  return res;
}

commResult_t commCollNetBuild(const commCollArgs* a, commSchedule* out) {
  if (a == NULL || out == NULL) {
    WARN("commCollNetBuild: NULL argument");
    return commInvalidArgument;
  }
  if (a->func == commFuncAllReduce) {
    commCollArgs b = *a;
    b.interCollNet = 1;
    return commCollTreeBuild(&b, out);
  }
  if (a->func != commFuncAllGather && a->func != commFuncReduceScatter) {
    WARN("commCollNetBuild: %s does not run over collnet", commFuncName(a->func));
    return commInvalidArgument;
  }
  if (a->nRanks < 1 || a->rank < 0 || a->rank >= a->nRanks || a->nChannels < 1 || a->nChannels > COMM_MAX_CHANNELS) {
    WARN("commCollNetBuild: bad arguments rank %d nRanks %d nChannels %d", a->rank, a->nRanks, a->nChannels);
    return commInvalidArgument;
  }
  if (a->count > 0 && (a->chunkElems == 0 || a->pieceElems == 0)) {
    WARN("commCollNetBuild: chunkElems %zu, pieceElems %zu", a->chunkElems, a->pieceElems);
    return commInvalidArgument;
  }
  if (a->nRanks == 1) {
    COMMCHECK(commSchedInit(out, a->nChannels));
    if (a->count == 0) return commSuccess;
    int reduces = a->isReduction && a->func == commFuncReduceScatter;
    commStep st = commStepMake(COMM_PRIM_COPY, reduces ? COMM_STEP_PRE | COMM_STEP_POST : 0, -1, -1,
                               commBufAt(COMM_BUF_INPUT, 0), commBufAt(COMM_BUF_OUTPUT, 0), a->count, a->count);
    commResult_t res = commSchedAdd(out, 0, &st);
    if (res != commSuccess) commSchedFree(out);
    return res;
  }
  return gatherBuild(a, out);
}
