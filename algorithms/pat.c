/* PAT ("parallel aggregated trees"): Bruck-style allgather and reducescatter in ceil(log2 n) rounds at any
 * rank count n, for latency-bound sizes at large n where the ring's n-1 dependent steps hurt.
 *
 * Rounds. K = ceil(log2 n); round k pairs ranks at distance d = 2^k and moves m = min(2^k, n - 2^k) blocks
 * (so d + m = min(2^(k+1), n)). Blocks are named relative to the rank that handles them: "block t of rank r"
 * is the absolute block (r + t) mod n, elements [((r + t) mod n) * count, +count) of the n-block buffer.
 *
 * Allgather, rounds k = 0 .. K-1. Rank r first copies its input to its place in the output, then, before
 * round k, holds its blocks [0, d). In round k it sends its blocks [0, m) to rank r - d and receives from
 * rank r + d that rank's blocks [0, m), which are its own blocks [d, d + m): afterwards it holds
 * [0, min(2d, n)). Blocks stay at their natural place in the output, so a run of blocks is one contiguous
 * range, or two where it wraps past block n-1.
 *
 * Reducescatter is that allgather run backwards: rounds k = K-1 .. 0, data flowing the other way. Before
 * round k rank r owns partial sums of its blocks [0, d + m); in round k it sends the partials of its blocks
 * [d, d + m) to rank r + d (for which they are blocks [0, m)) and reduces the partials of its blocks [0, m)
 * received from rank r - d into its own. After round 0 it owns its block 0 -- block r -- reduced over all
 * ranks: the allgather delivers block j to every rank along a spanning tree rooted at j, each rank once, so
 * the reversed tree brings each rank's contribution of block j to rank j exactly once. A partial that nothing
 * has been reduced into yet is the rank's own input (PRE is applied where it is sent or first reduced); block
 * t has been reduced into before round k iff t < P_k = max over k' > k of m_k'. Round 0 (block 0 only) writes
 * the output and applies POST. Partials live in scratch; they are needed for blocks t < S = max over k >= 1
 * of m_k (S <= n/2; S = 0 for n <= 2).
 *
 * Scratch bound (reducescatter; the allgather needs none). Budget B = min(4 * chunkElems, 4 MiB / eltSize)
 * elements; scratchElems <= B always, so it never grows with count (4 MiB at most, at n = 1024 as anywhere).
 *  - S * count <= B (every latency-bound size): one phase, the algorithm above as is; scratch slot t holds
 *    block t's partial at t * count, S * count elements.
 *  - otherwise the n * count elements of the (absolute) block space are cut into ceil(n * count / B) balanced
 *    windows [x0, x1), the same on every rank, and the K rounds run once per window, each transfer keeping
 *    only its elements inside the window; a partial of element x lives at scratch x - x0. A window is a run
 *    of whole blocks and parts of blocks (parts of a single block once count > B: pieces shrink as n * count
 *    grows), so every transfer stays one or two contiguous ranges and a phase costs O(log n) steps.
 * Windows run one after the other: round k of window w+1 starts on a rank after its round 0 of window w.
 *
 * Transfers. The elements one rank sends to another in a round form one transfer. It is cut wherever either
 * end's memory stops being contiguous or its flags change (the wrap past block n-1, window edges, the P_k
 * boundary at either end: input with PRE vs scratch), and each run into balanced parts of at most chunkElems.
 * Each end computes both ends' layouts, so they cut identically. Within a round a rank takes its outgoing and
 * incoming parts in order, pairwise: allgather as SEND_RECV(out i, in i); reducescatter as SEND(out i), then
 * RECV_REDUCE_COPY(in i) straight into the partial (no staging). No deadlock: a part fits in the FIFO (it
 * carries at most chunkElems, half of it), so a rank blocked on a send at index i waits for a receiver at a
 * smaller index, and one blocked on a receive at index i waits for a sender at a smaller index or for one at
 * index i blocked on a send; so the stuck rank at the least index of the earliest unfinished phase (round of
 * a window) could always move on. Ranks past a phase have pushed all its data, and each connection carries
 * one round's distance only, in the same order at both ends.
 *
 * In place works (allgather input = output block r; reducescatter output = input block r): the allgather reads
 * its input only in its first copy, and the reducescatter reads each element of its own input block once, in
 * the reduction that precedes (n = 2: is) round 0's write of that element, and never sends it.
 *
 * One channel: a per-channel split of each block would cut the block runs that keep transfers contiguous,
 * multiplying the steps of this latency algorithm. count 0: no steps; n = 1: a local copy (PRE and POST for
 * reducescatter). */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "debug.h"
#include "algorithms.h"
#include "utils.h"

#define PAT_SCRATCH_CHUNKS 4                    /* scratch budget, in chunks ... */
#define PAT_SCRATCH_MAX_BYTES ((size_t)4 << 20) /* ... and at most this many bytes */
#define PAT_NOBUF UINT32_MAX
#define PAT_MAX_CUTS 8

/* What one end of a transfer does at the first element of a run: where it reads and writes, its flags. */
typedef struct {
  commBufRef src, dst; /* buf PAT_NOBUF: not used */
  uint8_t flags;
} patEnd;

/* One part of a transfer: both ends' layouts at the start of its run, plus the element offset from there. */
typedef struct {
  patEnd snd, rcv;
  size_t eOff, count;
} patPart;

typedef struct {
  patPart* p;
  int n, cap;
} patList;

typedef struct {
  const commCollArgs* a;
  commSchedule* s;
  int n;
  size_t cnt, total; /* block size, n * cnt */
  int isAg;          /* allgather (else reducescatter) */
  uint8_t pre, post; /* flags the op needs (0 when it needs none) */
  int windowed;      /* scratch of a partial at x - x0 (windowed) or at t * cnt + e (one phase) */
  size_t x0, x1;     /* the current window of absolute elements */
  int k;             /* current round */
  size_t d, m;       /* its distance and block count */
  size_t prior;      /* reducescatter: blocks t < prior were reduced into before round k */
  patList out, in;
} patCtx;

static size_t roundBlocks(int n, int k) {
  size_t d = (size_t)1 << k;
  return d < (size_t)n - d ? d : (size_t)n - d;
}

static int numRounds(int n) {
  int k = 0;
  while (((size_t)1 << k) < (size_t)n) k++;
  return k;
}

static commBufRef plus(commBufRef r, size_t off) { return commBufAt(r.buf, r.offset + off); }

/* Element u of rank `rank`'s relative block space (block t = u / cnt) in the absolute block space. */
static size_t absElem(const patCtx* c, int rank, size_t u) { return ((size_t)rank * c->cnt + u) % c->total; }

/* Where a partial lives: u in the owner's relative block space, x the same element in the absolute one. */
static commBufRef scratchAt(const patCtx* c, size_t u, size_t x) {
  return commBufAt(COMM_BUF_SCRATCH, c->windowed ? x - c->x0 : u);
}

/* The sender's side at its element u. */
static patEnd sendEnd(const patCtx* c, int rank, size_t u) {
  patEnd e;
  size_t x = absElem(c, rank, u);
  e.dst = commBufAt(PAT_NOBUF, 0);
  e.flags = 0;
  if (c->isAg) {
    e.src = commBufAt(COMM_BUF_OUTPUT, x);
  } else if (u / c->cnt < c->prior) {
    e.src = scratchAt(c, u, x);
  } else {
    e.src = commBufAt(COMM_BUF_INPUT, x);
    e.flags = c->pre;
  }
  return e;
}

/* The receiver's side at its element u. */
static patEnd recvEnd(const patCtx* c, int rank, size_t u) {
  patEnd e;
  size_t x = absElem(c, rank, u);
  e.flags = 0;
  if (c->isAg) {
    e.src = commBufAt(PAT_NOBUF, 0);
    e.dst = commBufAt(COMM_BUF_OUTPUT, x);
    return e;
  }
  /* Round 0 finishes block 0 (u < cnt) into the output; earlier rounds reduce into scratch. */
  if (c->k == 0) {
    e.dst = commBufAt(COMM_BUF_OUTPUT, u);
    e.flags |= c->post;
  } else {
    e.dst = scratchAt(c, u, x);
  }
  if (u / c->cnt < c->prior) {
    e.src = scratchAt(c, u, x);
  } else {
    e.src = commBufAt(COMM_BUF_INPUT, x);
    e.flags |= c->pre;
  }
  return e;
}

static commResult_t listAdd(patList* l, const patEnd* snd, const patEnd* rcv, size_t eOff, size_t count) {
  if (l->n == l->cap) {
    int nc = l->cap ? 2 * l->cap : 16;
    COMMCHECK(commRealloc(&l->p, (size_t)l->cap, (size_t)nc, sizeof(patPart)));
    l->cap = nc;
  }
  patPart* p = &l->p[l->n++];
  p->snd = *snd;
  p->rcv = *rcv;
  p->eOff = eOff;
  p->count = count;
  return commSuccess;
}

static void addCut(size_t* cuts, int* nCuts, size_t u, size_t lo, size_t hi) {
  if (u > lo && u < hi) cuts[(*nCuts)++] = u;
}

static int cmpSize(const void* a, const void* b) {
  size_t x = *(const size_t*)a, y = *(const size_t*)b;
  return x < y ? -1 : x > y;
}

/* The parts of round k's transfer from `sender` to `receiver`: the sender's blocks [first, first + m) are the
 * receiver's blocks [rfirst, rfirst + m), less the elements outside the window. */
static commResult_t transfer(const patCtx* c, int sender, int receiver, size_t first, size_t rfirst, patList* l) {
  l->n = 0;
  size_t lo = first * c->cnt, hi = (first + c->m) * c->cnt; /* in the sender's relative element space */
  size_t base = (size_t)sender * c->cnt;
  size_t cuts[PAT_MAX_CUTS];
  int nCuts = 0;
  cuts[nCuts++] = lo;
  cuts[nCuts++] = hi;
  addCut(cuts, &nCuts, c->total - base, lo, hi); /* the wrap past block n-1 */
  addCut(cuts, &nCuts, (c->x0 + c->total - base) % c->total, lo, hi);
  addCut(cuts, &nCuts, (c->x1 + c->total - base) % c->total, lo, hi);
  if (!c->isAg) {
    addCut(cuts, &nCuts, c->prior * c->cnt, lo, hi);                    /* the sender's P_k */
    addCut(cuts, &nCuts, (c->prior + first - rfirst) * c->cnt, lo, hi); /* the receiver's */
  }
  qsort(cuts, (size_t)nCuts, sizeof(size_t), cmpSize);
  size_t chunk = c->a->chunkElems;
  for (int i = 0; i + 1 < nCuts; i++) {
    size_t u0 = cuts[i], u1 = cuts[i + 1];
    if (u1 == u0) continue;
    size_t x = (base + u0) % c->total;
    if (x < c->x0 || x >= c->x1) continue; /* the cuts include the window edges: the whole run is outside */
    patEnd es = sendEnd(c, sender, u0), er = recvEnd(c, receiver, u0 - lo + rfirst * c->cnt);
    size_t elems = u1 - u0, nParts = elems / chunk + (elems % chunk ? 1 : 0);
    for (size_t p = 0; p < nParts; p++) {
      size_t off, len;
      commSplitPart(elems, nParts, p, 1, &off, &len);
      COMMCHECK(listAdd(l, &es, &er, off, len));
    }
  }
  return commSuccess;
}

static commResult_t addStep(patCtx* c, commPrim_t prim, uint8_t flags, int sendPeer, int recvPeer, commBufRef src,
                            commBufRef dst, size_t count, size_t recvCount) {
  commStep st = commStepMake(prim, flags, sendPeer, recvPeer, src.buf == PAT_NOBUF ? commBufAt(COMM_BUF_INPUT, 0) : src,
                             dst.buf == PAT_NOBUF ? commBufAt(COMM_BUF_OUTPUT, 0) : dst, count, recvCount);
  return commSchedAdd(c->s, 0, &st);
}

static void setRound(patCtx* c, int k) {
  int K = numRounds(c->n);
  c->k = k;
  c->d = (size_t)1 << k;
  c->m = roundBlocks(c->n, k);
  c->prior = 0;
  for (int j = k + 1; j < K; j++)
    if (roundBlocks(c->n, j) > c->prior) c->prior = roundBlocks(c->n, j);
}

/* Allgather round k of rank r: its blocks [0, m) to r - d, from r + d its blocks [d, d + m). */
static commResult_t agRound(patCtx* c, int k) {
  int n = c->n, r = c->a->rank;
  setRound(c, k);
  int to = (int)(((size_t)r + (size_t)n - c->d) % (size_t)n), from = (int)(((size_t)r + c->d) % (size_t)n);
  COMMCHECK(transfer(c, r, to, 0, c->d, &c->out));
  COMMCHECK(transfer(c, from, r, 0, c->d, &c->in));
  int steps = c->out.n > c->in.n ? c->out.n : c->in.n;
  for (int i = 0; i < steps; i++) {
    const patPart* o = i < c->out.n ? &c->out.p[i] : NULL;
    const patPart* in = i < c->in.n ? &c->in.p[i] : NULL;
    if (o && in) {
      COMMCHECK(addStep(c, COMM_PRIM_SEND_RECV, 0, to, from, plus(o->snd.src, o->eOff), plus(in->rcv.dst, in->eOff),
                        o->count, in->count));
    } else if (o) {
      COMMCHECK(addStep(c, COMM_PRIM_SEND, 0, to, -1, plus(o->snd.src, o->eOff), commBufAt(PAT_NOBUF, 0), o->count,
                        o->count));
    } else {
      COMMCHECK(addStep(c, COMM_PRIM_RECV, 0, -1, from, commBufAt(PAT_NOBUF, 0), plus(in->rcv.dst, in->eOff), in->count,
                        in->count));
    }
  }
  return commSuccess;
}

/* Reducescatter round k of rank r (one window): partials of its blocks [d, d + m) to r + d, those of its
 * blocks [0, m) from r - d, reduced into its own. */
static commResult_t rsRound(patCtx* c, int k) {
  int n = c->n, r = c->a->rank;
  setRound(c, k);
  int to = (int)(((size_t)r + c->d) % (size_t)n), from = (int)(((size_t)r + (size_t)n - c->d) % (size_t)n);
  COMMCHECK(transfer(c, r, to, c->d, 0, &c->out));
  COMMCHECK(transfer(c, from, r, c->d, 0, &c->in));
  int steps = c->out.n > c->in.n ? c->out.n : c->in.n;
  for (int i = 0; i < steps; i++) {
    if (i < c->out.n) {
      const patPart* o = &c->out.p[i];
      COMMCHECK(addStep(c, COMM_PRIM_SEND, o->snd.flags, to, -1, plus(o->snd.src, o->eOff), commBufAt(PAT_NOBUF, 0),
                        o->count, o->count));
    }
    if (i < c->in.n) {
      const patPart* in = &c->in.p[i];
      COMMCHECK(addStep(c, COMM_PRIM_RECV_REDUCE_COPY, in->rcv.flags, -1, from, plus(in->rcv.src, in->eOff),
                        plus(in->rcv.dst, in->eOff), in->count, in->count));
    }
  }
  return commSuccess;
}

/* Blocks whose partials need scratch: S = max over rounds k >= 1 of m_k (round 0 writes the output). */
static size_t rsSlots(int n) {
  size_t slots = 0;
  for (int k = 1; k < numRounds(n); k++)
    if (roundBlocks(n, k) > slots) slots = roundBlocks(n, k);
  return slots;
}

/* The scratch budget B of the reducescatter, in elements (>= 1). */
static size_t rsBudget(const commCollArgs* a) {
  size_t elt = a->eltSize ? a->eltSize : 1;
  size_t b = a->chunkElems > SIZE_MAX / PAT_SCRATCH_CHUNKS ? SIZE_MAX : a->chunkElems * PAT_SCRATCH_CHUNKS;
  if (b > PAT_SCRATCH_MAX_BYTES / elt) b = PAT_SCRATCH_MAX_BYTES / elt;
  return b > 0 ? b : 1;
}

static commResult_t buildSteps(patCtx* c) {
  const commCollArgs* a = c->a;
  int K = numRounds(c->n);
  c->x0 = 0;
  c->x1 = c->total;
  if (c->n == 1) {
    uint8_t fl = c->isAg ? 0 : (uint8_t)(c->pre | c->post);
    return addStep(c, COMM_PRIM_COPY, fl, -1, -1, commBufAt(COMM_BUF_INPUT, 0), commBufAt(COMM_BUF_OUTPUT, 0), c->cnt,
                   c->cnt);
  }
  if (c->isAg) {
    COMMCHECK(addStep(c, COMM_PRIM_COPY, 0, -1, -1, commBufAt(COMM_BUF_INPUT, 0),
                      commBufAt(COMM_BUF_OUTPUT, (size_t)a->rank * c->cnt), c->cnt, c->cnt));
    for (int k = 0; k < K; k++) COMMCHECK(agRound(c, k));
    return commSuccess;
  }
  size_t slots = rsSlots(c->n), budget = rsBudget(a);
  size_t nWindows = 1;
  if (slots > 0 && c->cnt > budget / slots) {
    c->windowed = 1;
    nWindows = c->total / budget + (c->total % budget ? 1 : 0);
    c->s->scratchElems = c->total / nWindows + (c->total % nWindows ? 1 : 0);
  } else {
    c->s->scratchElems = slots * c->cnt;
  }
  if (c->s->scratchElems > 0) c->s->nBufs = COMM_BUF_SCRATCH + 1;
  for (size_t w = 0; w < nWindows; w++) {
    if (c->windowed) {
      size_t len;
      commSplitPart(c->total, nWindows, w, 1, &c->x0, &len);
      c->x1 = c->x0 + len;
    }
    for (int k = K - 1; k >= 0; k--) COMMCHECK(rsRound(c, k));
  }
  return commSuccess;
}

commResult_t commPatBuild(const commCollArgs* args, commSchedule* out) {
  if (args == NULL || out == NULL) {
    WARN("commPatBuild: NULL argument");
    return commInvalidArgument;
  }
  if (args->func != commFuncAllGather && args->func != commFuncReduceScatter) {
    WARN("commPatBuild: %s has no PAT algorithm (allgather and reducescatter only)", commFuncName(args->func));
    return commInvalidArgument;
  }
  if (args->nRanks < 1 || args->rank < 0 || args->rank >= args->nRanks) {
    WARN("commPatBuild: bad arguments rank %d nRanks %d", args->rank, args->nRanks);
    return commInvalidArgument;
  }
  if (args->count > 0 && args->chunkElems == 0) {
    WARN("commPatBuild: chunkElems is 0");
    return commInvalidArgument;
  }
  if (args->count > SIZE_MAX / 2 / (size_t)args->nRanks) {
    WARN("commPatBuild: %d blocks of %zu elements overflow", args->nRanks, args->count);
    return commInvalidArgument;
  }
  COMMCHECK(commSchedInit(out, 1));
  if (args->count == 0) return commSuccess;
  patCtx c;
  memset(&c, 0, sizeof(c));
  c.a = args;
  c.s = out;
  c.n = args->nRanks;
  c.cnt = args->count;
  c.total = (size_t)args->nRanks * args->count;
  c.isAg = args->func == commFuncAllGather;
  c.pre = args->isReduction ? COMM_STEP_PRE : 0;
  c.post = args->isReduction ? COMM_STEP_POST : 0;
  commResult_t res = buildSteps(&c);
  free(c.out.p);
  free(c.in.p);
  if (res != commSuccess) commSchedFree(out);
  return res;
}
