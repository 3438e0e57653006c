/* sim_trace: discrete-event timing simulation of a collective's schedules on all ranks, and its Chrome trace.
 *
 * What is modelled (times in microseconds, constants from the tuner's cost model, src/tune/model.c):
 *  - Executors. Every (rank, channel) runs its steps in order, one action at a time, with a clock of its
 *    own (the time it is free). Channels of one rank run concurrently (the host executor interleaves them;
 *    here they never compete for the CPU).
 *  - Pieces. A step moves its data in pieces of at most pieceBytes (a FIFO slot), as the executor does; a
 *    step that receives and sends (recvReduceSend, recvCopySend, ...) forwards piece i as soon as piece i
 *    has arrived, so chains and rings pipeline at slot granularity. The two halves of SEND_RECV progress
 *    independently (the earlier ready piece goes first). Local steps (copy, reduce) are one action.
 *  - Costs on the executor: stepUs once per step (at its first action); bytes / reduceGBs for every piece
 *    a step reduces (recvReduce*) and for local COPY and REDUCE steps. Copies that come with a receive or a
 *    send (recv into the output, copySend) cost nothing beyond the link.
 *  - Links. A piece handed over at time t leaves when the sender's link is free, occupies it for
 *    bytes / bw, and arrives lat later. Within a node (intra link class) every rank has a link of its own;
 *    across nodes (inter) a node has one link (NIC) shared by all its ranks and channels: this is where
 *    the bytes a node puts on the network become time. Link class by nodeOf of the two ends.
 *  - FIFO capacity. A connection (channel, sender, receiver) holds nSlots pieces: the sender may hand
 *    over piece k only when the receiver has consumed piece k - nSlots, and learns it lat later (the
 *    credit travels back over the same link class).
 *  - CollNet (steps whose peer is COMM_PEER_COLLNET): per channel, the group of the (rank, channel)s that
 *    name it. A member's pieces go into a local queue of nSlots; the queue's head is posted while the member
 *    has fewer than nSlots pieces posted and not yet received (its receive FIFO), as the verifier runs it
 *    (src/sched/verify_collnet.c): a member is at most 2 nSlots pieces ahead of its receives, and the
 *    queue and credits are local (no latency). A posted piece crosses the node's uplink (the inter link: the
 *    NIC the node's other network sends use) and reaches the switch lat later; once every member's k-th
 *    piece is there the result leaves aggUs later over each member's downlink (a second resource per node,
 *    the NIC's receive direction: full duplex) and arrives lat after it has crossed it.
 *  - The total is callUs plus the time the last (rank, channel) finishes.
 * What is not modelled: receive-side contention (incast on a NIC or a rank; collnet's downlink aside),
 * memory bandwidth shared by the ranks of a node, CPU cores shared by executors and channels, network
 * topology beyond one NIC per node (no switches but collnet's, no congestion; the aggregation has no
 * bandwidth limit of its own), protocol details beyond the model's factors (LL runs as Simple with smaller
 * steps, as on the host executor), jitter. Link reservations are made in the order actions are simulated
 * (by their start time), which may differ slightly from the order of their hand-over times (a collnet
 * result's downlinks are reserved when its last piece is posted).
 *
 * Algorithm. Actions are taken from a heap ordered by the time they become possible. A (rank, channel)
 * whose next piece waits for data that is not sent yet, or for a credit not returned yet, is not in the
 * heap: the peer that sends that piece or consumes that slot puts it back. An empty heap with unfinished
 * steps is a stall (send/recv mismatch or deadlock; the verifier says which). Cost: O(actions x log
 * (ranks x channels)) time, O(steps + connections x nSlots) memory. */
#include "sim_trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------------- */
/* Compact schedules */

int simSetInit(simSet* s, int nRanks) {
  memset(s, 0, sizeof(*s));
  if (nRanks < 1) return -1;
  s->nRanks = nRanks;
  s->maxCh = COMM_MAX_CHANNELS;
  s->off = calloc((size_t)nRanks * (size_t)s->maxCh + 1, sizeof(size_t));
  return s->off ? 0 : -1;
}

int simPrimSends(int p) {
  return p == COMM_PRIM_SEND || p == COMM_PRIM_RECV_REDUCE_SEND || p == COMM_PRIM_RECV_COPY_SEND ||
         p == COMM_PRIM_RECV_REDUCE_COPY_SEND || p == COMM_PRIM_COPY_SEND || p == COMM_PRIM_SEND_RECV;
}
int simPrimRecvs(int p) {
  return p == COMM_PRIM_RECV || p == COMM_PRIM_RECV_REDUCE_SEND || p == COMM_PRIM_RECV_COPY_SEND ||
         p == COMM_PRIM_RECV_REDUCE_COPY || p == COMM_PRIM_RECV_REDUCE_COPY_SEND || p == COMM_PRIM_SEND_RECV;
}
static int primReduces(int p) {
  return p == COMM_PRIM_RECV_REDUCE_SEND || p == COMM_PRIM_RECV_REDUCE_COPY || p == COMM_PRIM_RECV_REDUCE_COPY_SEND;
}

int simSetAddRank(simSet* s, int rank, const commSchedule* sched, size_t eltSize) {
  if (rank != s->nAdded || rank >= s->nRanks || sched->nChannels > s->maxCh) return -1;
  size_t need = s->nSteps;
  for (int c = 0; c < sched->nChannels; c++) need += (size_t)sched->channels[c].nSteps;
  if (need > s->capSteps) {
    size_t cap = s->capSteps ? s->capSteps : 1024;
    while (cap < need) cap *= 2;
    simStep* ns = realloc(s->steps, cap * sizeof(simStep));
    if (ns == NULL) return -1;
    s->steps = ns;
    s->capSteps = cap;
  }
  size_t* off = &s->off[(size_t)rank * s->maxCh];
  for (int c = 0; c < s->maxCh; c++) {
    off[c] = s->nSteps;
    if (c >= sched->nChannels) continue;
    const commChannelSched* cs = &sched->channels[c];
    for (int i = 0; i < cs->nSteps; i++) {
      const commStep* st = &cs->steps[i];
      simStep* o = &s->steps[s->nSteps++];
      int p = st->prim;
      o->prim = (uint8_t)p;
      o->sendPeer = simPrimSends(p) && simHasPeer(st->sendPeer) ? st->sendPeer : -1;
      o->recvPeer = simPrimRecvs(p) && simHasPeer(st->recvPeer) ? st->recvPeer : -1;
      o->bytes = (uint64_t)st->count * eltSize;
      o->recvBytes = (uint64_t)(p == COMM_PRIM_SEND_RECV ? st->recvCount : st->count) * eltSize;
      if (o->sendPeer == -1 && p == COMM_PRIM_SEND_RECV) o->bytes = 0;
      if (o->recvPeer == -1) o->recvBytes = 0;
    }
  }
  off[s->maxCh] = s->nSteps; /* the next rank's channel 0 starts here (rewritten when it is added) */
  s->nAdded++;
  return 0;
}

void simSetFree(simSet* s) {
  free(s->off);
  free(s->steps);
  memset(s, 0, sizeof(*s));
}

/* ---------------------------------------------------------------------------------------------------- */
/* Simulator state */

/* A member of a channel's collnet group: rings of nSlots per piece, CN_* (pieces handed over by the
 * executor, their sizes, when they were posted, when results arrive, when results were consumed). */
enum { CN_HAND = 0, CN_SIZE, CN_POST, CN_ARRIVE, CN_FREE, CN_RINGS };
typedef struct {
  uint32_t pushed, posted, popped, ready; /* pieces handed over, posted, results consumed, results known */
  int proc, node, ch;
} smember;

typedef struct {
  uint32_t k;   /* the piece this window slot collects */
  int n;        /* members whose piece k is posted; 0: slot free */
  double tmax;  /* when the last of them reaches the switch */
  double bytes; /* the piece's size (the members' largest) */
} spiece;

typedef struct {
  int first, n;  /* members mem[first .. first + n) */
  uint32_t done; /* pieces whose result went out */
  spiece* win;   /* nSlots + 1 slots: pieces posted by some members but not all */
} sgroup;

typedef struct {
  uint32_t pushed, popped; /* pieces handed over by the sender, consumed by the receiver */
  int res;                 /* the sender's link: a rank's intra link, or nRanks + node for a NIC */
  int inter;               /* link class: 1 across nodes */
  int sendProc, recvProc;  /* (rank, channel) of the two ends */
} sconn;

typedef struct {
  size_t step, end;          /* current and end step index (into simSet.steps) */
  double t;                  /* the executor is free from here */
  uint32_t sDone, rDone;     /* pieces of the current step sent, received */
  uint32_t sPieces, rPieces; /* pieces of the current step */
  int sc, rc;                /* connections of the current step, or -1 */
  uint8_t entered, started, queued;
  uint8_t snet, rnet; /* the current step sends to / receives from the collnet group (sc / rc: member) */
} sproc;

typedef struct {
  double t;
  uint64_t seq; /* ties: first come, first served (deterministic) */
  int proc;
} hentry;

typedef struct {
  const simSet* s;
  const simParams* p;
  int nSlots;
  double bw[2], lat[2]; /* bytes per us and latency, per link class (0 intra, 1 inter) */
  double reduceBpus;
  sproc* procs;
  int nProcs;
  sconn* conns;
  double* times; /* per connection: nSlots arrival times, then nSlots slot-free times */
  int nConns, capConns;
  uint64_t* hkeys;
  int* hvals;
  size_t hcap;
  double* resFree; /* nRanks + nNodes links: free from this time */
  hentry* heap;
  int heapLen;
  uint64_t seq;
  double* stepStart;
  double* stepEnd;
  size_t actions;
  int oom;
  /* CollNet (NULL / 0 when no step names COMM_PEER_COLLNET) */
  int* memberOf; /* per proc: its index in mem, or -1 */
  smember* mem;
  double* memTimes; /* per member: CN_RINGS rings of nSlots */
  int nMem;
  sgroup groups[COMM_MAX_CHANNELS];
  double* downFree; /* per node: its downlink (the NIC's receive side) is free from this time */
  int acting;       /* the proc whose action runs (woken by the main loop afterwards), or -1 */
  const char* err;  /* why the simulation gave up, when not out of memory */
} simCtx;

static size_t hashKey(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return (size_t)k;
}

static int hashGrow(simCtx* S) {
  size_t nc = S->hcap ? S->hcap * 2 : 4096;
  uint64_t* nk = malloc(nc * sizeof(uint64_t));
  int* nv = malloc(nc * sizeof(int));
  if (nk == NULL || nv == NULL) {
    free(nk);
    free(nv);
    return -1;
  }
  for (size_t i = 0; i < nc; i++) nv[i] = -1;
  for (size_t i = 0; i < S->hcap; i++) {
    if (S->hvals[i] < 0) continue;
    size_t h = hashKey(S->hkeys[i]) & (nc - 1);
    while (nv[h] >= 0) h = (h + 1) & (nc - 1);
    nk[h] = S->hkeys[i];
    nv[h] = S->hvals[i];
  }
  free(S->hkeys);
  free(S->hvals);
  S->hkeys = nk;
  S->hvals = nv;
  S->hcap = nc;
  return 0;
}

/* The connection (ch, from -> to), made on first use; -1 when out of memory. */
static int getConn(simCtx* S, int ch, int from, int to) {
  const uint64_t n = (uint64_t)S->p->nRanks;
  uint64_t key = ((uint64_t)ch * n + (uint64_t)from) * n + (uint64_t)to;
  if ((size_t)(S->nConns + 1) * 2 > S->hcap && hashGrow(S) != 0) return -1;
  size_t h = hashKey(key) & (S->hcap - 1);
  while (S->hvals[h] >= 0) {
    if (S->hkeys[h] == key) return S->hvals[h];
    h = (h + 1) & (S->hcap - 1);
  }
  if (S->nConns == S->capConns) {
    int nc = S->capConns ? S->capConns * 2 : 1024;
    sconn* c = realloc(S->conns, (size_t)nc * sizeof(sconn));
    if (c == NULL) return -1;
    S->conns = c;
    double* t = realloc(S->times, (size_t)nc * 2 * (size_t)S->nSlots * sizeof(double));
    if (t == NULL) return -1;
    S->times = t;
    S->capConns = nc;
  }
  sconn* c = &S->conns[S->nConns];
  const int* nodeOf = S->p->nodeOf;
  c->pushed = c->popped = 0;
  c->inter = nodeOf[from] != nodeOf[to];
  c->res = c->inter ? S->p->nRanks + nodeOf[from] : from;
  c->sendProc = from * S->s->maxCh + ch;
  c->recvProc = to * S->s->maxCh + ch;
  S->hkeys[h] = key;
  S->hvals[h] = S->nConns;
  return S->nConns++;
}

static double* arriveAt(simCtx* S, int c) { return &S->times[(size_t)c * 2 * (size_t)S->nSlots]; }
static double* freeAt(simCtx* S, int c) { return &S->times[((size_t)c * 2 + 1) * (size_t)S->nSlots]; }

/* ---------------------------------------------------------------------------------------------------- */
/* Heap of runnable (rank, channel)s by the time their next action can start */

static int heapLess(const hentry* a, const hentry* b) { return a->t < b->t || (a->t == b->t && a->seq < b->seq); }

static void heapPush(simCtx* S, double t, int proc) {
  int i = S->heapLen++;
  hentry e = {t, S->seq++, proc};
  while (i > 0) {
    int parent = (i - 1) / 2;
    if (!heapLess(&e, &S->heap[parent])) break;
    S->heap[i] = S->heap[parent];
    i = parent;
  }
  S->heap[i] = e;
}

static hentry heapPop(simCtx* S) {
  hentry top = S->heap[0];
  hentry last = S->heap[--S->heapLen];
  int i = 0;
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    const hentry* best = &last;
    if (l < S->heapLen && heapLess(&S->heap[l], best)) {
      m = l;
      best = &S->heap[l];
    }
    if (r < S->heapLen && heapLess(&S->heap[r], best)) m = r;
    if (m == i) break;
    S->heap[i] = S->heap[m];
    i = m;
  }
  if (S->heapLen > 0) S->heap[i] = last;
  return top;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Actions */

static uint32_t piecesOf(uint64_t bytes, size_t piece) { return (uint32_t)((bytes + piece - 1) / piece); }
static double pieceBytes(uint64_t bytes, uint32_t k, size_t piece) {
  uint64_t lo = (uint64_t)k * piece;
  uint64_t n = bytes - lo;
  return (double)(n < piece ? n : piece);
}

/* Sets up the current step of proc pi (its pieces and connections). 0, or -1 when out of memory. */
static int enterStep(simCtx* S, int pi) {
  sproc* P = &S->procs[pi];
  const simStep* st = &S->s->steps[P->step];
  int rank = pi / S->s->maxCh, ch = pi % S->s->maxCh;
  P->entered = 1;
  P->started = 0;
  P->sDone = P->rDone = 0;
  P->sc = P->rc = -1;
  P->snet = st->sendPeer == COMM_PEER_COLLNET;
  P->rnet = st->recvPeer == COMM_PEER_COLLNET;
  P->sPieces = simHasPeer(st->sendPeer) ? piecesOf(st->bytes, S->p->pieceBytes) : 0;
  P->rPieces = simHasPeer(st->recvPeer) ? piecesOf(st->recvBytes, S->p->pieceBytes) : 0;
  if (P->sPieces && P->snet) P->sc = S->memberOf[pi];
  else if (P->sPieces && (P->sc = getConn(S, ch, rank, st->sendPeer)) < 0) return -1;
  if (P->rPieces && P->rnet) P->rc = S->memberOf[pi];
  else if (P->rPieces && (P->rc = getConn(S, ch, st->recvPeer, rank)) < 0) return -1;
  return 0;
}

/* When may the sender hand over the next piece of connection c? 0: not known yet (slot not consumed). */
static int creditTime(simCtx* S, int c, double* t) {
  const sconn* C = &S->conns[c];
  uint32_t k = C->pushed;
  if (k < (uint32_t)S->nSlots) {
    *t = 0;
    return 1;
  }
  if (C->popped <= k - (uint32_t)S->nSlots) return 0;
  *t = freeAt(S, c)[(k - (uint32_t)S->nSlots) % (uint32_t)S->nSlots];
  return 1;
}

/* When does the next piece the receiver of c waits for arrive? 0: not sent yet. */
static int arrivalTime(simCtx* S, int c, double* t) {
  const sconn* C = &S->conns[c];
  if (C->popped >= C->pushed) return 0;
  *t = arriveAt(S, c)[C->popped % (uint32_t)S->nSlots];
  return 1;
}

enum { ACT_LOCAL = 0, ACT_SEND, ACT_RECV };

static double maxD(double a, double b) { return a > b ? a : b; }

/* ---------------------------------------------------------------------------------------------------- */
/* CollNet groups */

static int wake(simCtx* S, int pi);

static double* cnRing(simCtx* S, int mi, int which) {
  return &S->memTimes[((size_t)mi * CN_RINGS + (size_t)which) * (size_t)S->nSlots];
}

/* Finds the groups: on each channel, the procs with a step that names COMM_PEER_COLLNET. 0, or -1 when
 * out of memory. Nothing is allocated when there are none. */
static int collnetSetup(simCtx* S) {
  const simSet* s = S->s;
  int count[COMM_MAX_CHANNELS] = {0};
  int* mark = NULL;
  for (int pi = 0; pi < S->nProcs; pi++) {
    for (size_t i = s->off[pi]; i < s->off[pi + 1]; i++) {
      if (s->steps[i].sendPeer != COMM_PEER_COLLNET && s->steps[i].recvPeer != COMM_PEER_COLLNET) continue;
      if (mark == NULL && (mark = calloc((size_t)S->nProcs, sizeof(int))) == NULL) return -1;
      mark[pi] = 1;
      count[pi % s->maxCh]++;
      S->nMem++;
      break;
    }
  }
  if (S->nMem == 0) return 0;
  S->memberOf = mark;
  S->mem = calloc((size_t)S->nMem, sizeof(smember));
  S->memTimes = calloc((size_t)S->nMem * CN_RINGS * (size_t)S->nSlots, sizeof(double));
  S->downFree = calloc((size_t)S->p->nNodes, sizeof(double));
  if (S->mem == NULL || S->memTimes == NULL || S->downFree == NULL) return -1;
  int first = 0;
  for (int ch = 0; ch < s->maxCh; ch++) {
    sgroup* G = &S->groups[ch];
    G->first = first;
    first += count[ch];
    if (count[ch] > 0 && (G->win = calloc((size_t)S->nSlots + 1, sizeof(spiece))) == NULL) return -1;
  }
  for (int pi = 0; pi < S->nProcs; pi++) { /* members in rank order within each channel */
    if (!mark[pi]) {
      mark[pi] = -1;
      continue;
    }
    sgroup* G = &S->groups[pi % s->maxCh];
    int mi = G->first + G->n++;
    mark[pi] = mi;
    S->mem[mi].proc = pi;
    S->mem[mi].ch = pi % s->maxCh;
    S->mem[mi].node = S->p->nodeOf[pi / s->maxCh];
  }
  return 0;
}

/* Every member's piece w->k is at the switch: the result leaves aggUs after the last and crosses each
 * member's downlink. */
static int cnComplete(simCtx* S, sgroup* G, spiece* w) {
  const uint32_t ns = (uint32_t)S->nSlots;
  double out = w->tmax + S->p->aggUs;
  for (int i = 0; i < G->n; i++) {
    smember* R = &S->mem[G->first + i];
    double start = maxD(out, S->downFree[R->node]);
    double end = start + w->bytes / S->bw[1];
    S->downFree[R->node] = end;
    cnRing(S, G->first + i, CN_ARRIVE)[R->ready % ns] = end + S->lat[1];
    R->ready++;
    if (R->proc != S->acting && wake(S, R->proc) != 0) return -1;
  }
  w->n = 0;
  G->done++;
  return 0;
}

/* Posts member mi's queued pieces while fewer than nSlots are posted and not yet received. */
static int cnPost(simCtx* S, int mi) {
  smember* M = &S->mem[mi];
  sgroup* G = &S->groups[M->ch];
  const uint32_t ns = (uint32_t)S->nSlots;
  while (M->posted < M->pushed && M->posted - M->popped < ns) {
    uint32_t j = M->posted;
    double t = cnRing(S, mi, CN_HAND)[j % ns], bytes = cnRing(S, mi, CN_SIZE)[j % ns];
    if (j >= ns) t = maxD(t, cnRing(S, mi, CN_FREE)[(j - ns) % ns]); /* its receive slot is free */
    int res = S->p->nRanks + M->node;                                /* the node's uplink */
    double start = maxD(t, S->resFree[res]);
    double end = start + bytes / S->bw[1];
    S->resFree[res] = end;
    cnRing(S, mi, CN_POST)[j % ns] = t;
    M->posted++;
    spiece* w = &G->win[j % (ns + 1)];
    if (w->n == 0) {
      w->k = j;
      w->tmax = 0;
      w->bytes = 0;
    } else if (w->k != j) {
      S->err = "simulation: collnet pieces further apart than the flow control allows (a bug)";
      return -1;
    }
    w->n++;
    w->tmax = maxD(w->tmax, end + S->lat[1]);
    w->bytes = maxD(w->bytes, bytes);
    if (w->n == G->n && cnComplete(S, G, w) != 0) return -1;
  }
  return 0;
}

/* The executor of member mi may hand over its next piece once the queue has room: when the piece nSlots
 * before it was posted. */
static int cnCredit(simCtx* S, int mi, double* t) {
  const smember* M = &S->mem[mi];
  const uint32_t ns = (uint32_t)S->nSlots;
  if (M->pushed - M->posted >= ns) return 0;
  *t = M->pushed >= ns ? cnRing(S, mi, CN_POST)[(M->pushed - ns) % ns] : 0;
  return 1;
}

static int cnArrival(simCtx* S, int mi, double* t) {
  const smember* M = &S->mem[mi];
  if (M->popped >= M->ready) return 0;
  *t = cnRing(S, mi, CN_ARRIVE)[M->popped % (uint32_t)S->nSlots];
  return 1;
}

static int cnHandOver(simCtx* S, int mi, double t, double bytes) {
  smember* M = &S->mem[mi];
  const uint32_t ns = (uint32_t)S->nSlots;
  cnRing(S, mi, CN_HAND)[M->pushed % ns] = t;
  cnRing(S, mi, CN_SIZE)[M->pushed % ns] = bytes;
  M->pushed++;
  return cnPost(S, mi);
}

static int cnConsume(simCtx* S, int mi, double t) {
  smember* M = &S->mem[mi];
  cnRing(S, mi, CN_FREE)[M->popped % (uint32_t)S->nSlots] = t;
  M->popped++;
  return cnPost(S, mi);
}

/* The current step's two sides of proc P: a connection, or the collnet group. */
static int sendCredit(simCtx* S, const sproc* P, double* t) {
  return P->snet ? cnCredit(S, P->sc, t) : creditTime(S, P->sc, t);
}
static int recvArrival(simCtx* S, const sproc* P, double* t) {
  return P->rnet ? cnArrival(S, P->rc, t) : arrivalTime(S, P->rc, t);
}

/* The next action of proc pi and when it can start: 1 ready, 0 blocked, -1 finished, -2 out of memory. */
static int nextAction(simCtx* S, int pi, double* when, int* kind) {
  sproc* P = &S->procs[pi];
  if (P->step >= P->end) return -1;
  if (!P->entered && enterStep(S, pi) != 0) return -2;
  const simStep* st = &S->s->steps[P->step];
  if (P->sPieces == 0 && P->rPieces == 0) { /* local step, or a transfer of nothing */
    *kind = ACT_LOCAL;
    *when = P->t;
    return 1;
  }
  double ts = 0, tr = 0;
  if (st->prim == COMM_PRIM_SEND_RECV) {
    int s = P->sDone < P->sPieces && sendCredit(S, P, &ts);
    int r = P->rDone < P->rPieces && recvArrival(S, P, &tr);
    if (!s && !r) return 0;
    *kind = s && (!r || ts <= tr) ? ACT_SEND : ACT_RECV;
    *when = maxD(P->t, *kind == ACT_SEND ? ts : tr);
    return 1;
  }
  if (P->rPieces) { /* receive, maybe forward */
    if (!recvArrival(S, P, &tr)) return 0;
    if (P->sc >= 0 && !sendCredit(S, P, &ts)) return 0;
    *kind = ACT_RECV;
    *when = maxD(P->t, maxD(tr, ts));
    return 1;
  }
  if (!sendCredit(S, P, &ts)) return 0;
  *kind = ACT_SEND;
  *when = maxD(P->t, ts);
  return 1;
}

/* Queue proc pi if it can act and is not queued. 0, or -1 when out of memory. */
static int wake(simCtx* S, int pi) {
  sproc* P = &S->procs[pi];
  if (P->queued) return 0;
  double when;
  int kind;
  int r = nextAction(S, pi, &when, &kind);
  if (r == -2) return -1;
  if (r == 1) {
    P->queued = 1;
    heapPush(S, when, pi);
  }
  return 0;
}

/* The sender of connection c hands over a piece of `bytes` at time t. */
static int handOver(simCtx* S, int c, double t, double bytes) {
  sconn* C = &S->conns[c];
  double start = maxD(t, S->resFree[C->res]);
  double end = start + bytes / S->bw[C->inter];
  S->resFree[C->res] = end;
  arriveAt(S, c)[C->pushed % (uint32_t)S->nSlots] = end + S->lat[C->inter];
  C->pushed++;
  return wake(S, C->recvProc);
}

/* The receiver of connection c is done with its next piece at time t: the slot is free lat later. */
static int consume(simCtx* S, int c, double t) {
  sconn* C = &S->conns[c];
  freeAt(S, c)[C->popped % (uint32_t)S->nSlots] = t + S->lat[C->inter];
  C->popped++;
  return wake(S, C->sendProc);
}

static int sendPiece(simCtx* S, const sproc* P, double t, double bytes) {
  return P->snet ? cnHandOver(S, P->sc, t, bytes) : handOver(S, P->sc, t, bytes);
}
static int recvPiece(simCtx* S, const sproc* P, double t) {
  return P->rnet ? cnConsume(S, P->rc, t) : consume(S, P->rc, t);
}

/* Runs the next action of proc pi, which nextAction found ready at `when`. */
static int runAction(simCtx* S, int pi, double when, int kind) {
  sproc* P = &S->procs[pi];
  const simStep* st = &S->s->steps[P->step];
  const size_t piece = S->p->pieceBytes;
  double dur = P->started ? 0 : S->p->stepUs;
  if (!P->started && S->stepStart) S->stepStart[P->step] = when;
  P->started = 1;
  int stepDone = 0;
  double done;
  if (kind == ACT_LOCAL) {
    if (st->prim == COMM_PRIM_NOP) dur = 0;
    if (st->prim == COMM_PRIM_COPY || st->prim == COMM_PRIM_REDUCE) dur += (double)st->bytes / S->reduceBpus;
    done = when + dur;
    stepDone = 1;
  } else if (kind == ACT_SEND) {
    double b = pieceBytes(st->bytes, P->sDone, piece);
    done = when + dur;
    P->sDone++;
    if (sendPiece(S, P, done, b) != 0) return -1;
  } else {
    double b = pieceBytes(st->recvBytes, P->rDone, piece);
    if (primReduces(st->prim)) dur += b / S->reduceBpus;
    done = when + dur;
    P->rDone++;
    if (recvPiece(S, P, done) != 0) return -1;
    if (st->prim != COMM_PRIM_SEND_RECV && P->sc >= 0) {
      P->sDone++;
      if (sendPiece(S, P, done, b) != 0) return -1;
    }
  }
  P->t = done;
  S->actions++;
  if (stepDone || (P->sDone >= P->sPieces && P->rDone >= P->rPieces)) {
    if (S->stepEnd) S->stepEnd[P->step] = done;
    P->step++;
    P->entered = 0;
  }
  return 0;
}

static void describeStall(simCtx* S, simResult* res) {
  int blocked = 0;
  size_t used = 0;
  for (int pi = 0; pi < S->nProcs; pi++) {
    const sproc* P = &S->procs[pi];
    if (P->step >= P->end) continue;
    if (blocked++ > 0 || used >= sizeof(res->msg)) continue;
    const simStep* st = &S->s->steps[P->step];
    size_t first = S->s->off[(size_t)pi];
    used += (size_t)snprintf(res->msg, sizeof(res->msg), "rank %d channel %d stuck at step %zu/%zu (%s",
                             pi / S->s->maxCh, pi % S->s->maxCh, P->step - first, P->end - first,
                             commPrimName((commPrim_t)st->prim));
    if (used < sizeof(res->msg) && st->recvPeer >= 0)
      used += (size_t)snprintf(res->msg + used, sizeof(res->msg) - used, " <-%d", st->recvPeer);
    if (used < sizeof(res->msg) && st->recvPeer == COMM_PEER_COLLNET)
      used += (size_t)snprintf(res->msg + used, sizeof(res->msg) - used, " <-collnet");
    if (used < sizeof(res->msg) && st->sendPeer >= 0)
      used += (size_t)snprintf(res->msg + used, sizeof(res->msg) - used, " ->%d", st->sendPeer);
    if (used < sizeof(res->msg) && st->sendPeer == COMM_PEER_COLLNET)
      used += (size_t)snprintf(res->msg + used, sizeof(res->msg) - used, " ->collnet");
    if (used < sizeof(res->msg) && P->entered && (P->snet || P->rnet)) {
      const smember* M = &S->mem[S->memberOf[pi]];
      const sgroup* G = &S->groups[M->ch];
      used += (size_t)snprintf(res->msg + used, sizeof(res->msg) - used,
                               ", collnet: %u piece(s) sent, %u posted, %u received; group of %d has %u done",
                               M->pushed, M->posted, M->popped, G->n, G->done);
    }
    if (used < sizeof(res->msg)) used += (size_t)snprintf(res->msg + used, sizeof(res->msg) - used, ")");
  }
  if (used < sizeof(res->msg))
    snprintf(res->msg + used, sizeof(res->msg) - used, "; %d (rank, channel) pairs unfinished", blocked);
}

int simRun(const simSet* s, const simParams* p, double* stepStart, double* stepEnd, simResult* res) {
  memset(res, 0, sizeof(*res));
  res->lastRank = -1;
  simCtx S;
  memset(&S, 0, sizeof(S));
  S.s = s;
  S.p = p;
  S.nSlots = p->nSlots < 1 ? 1 : p->nSlots;
  S.bw[0] = p->intra.bwGBs * 1e3;
  S.bw[1] = p->inter.bwGBs * 1e3;
  S.lat[0] = p->intra.latUs;
  S.lat[1] = p->inter.latUs;
  S.reduceBpus = p->reduceGBs * 1e3;
  S.stepStart = stepStart;
  S.stepEnd = stepEnd;
  S.nProcs = s->nRanks * s->maxCh;
  S.acting = -1;
  int rc = -1;
  S.procs = calloc((size_t)S.nProcs, sizeof(sproc));
  S.heap = malloc((size_t)S.nProcs * sizeof(hentry));
  S.resFree = calloc((size_t)p->nRanks + (size_t)p->nNodes, sizeof(double));
  if (S.procs == NULL || S.heap == NULL || S.resFree == NULL || hashGrow(&S) != 0 || s->nAdded != s->nRanks ||
      p->nRanks != s->nRanks || p->pieceBytes == 0 || collnetSetup(&S) != 0)
    goto exit;
  for (int pi = 0; pi < S.nProcs; pi++) {
    S.procs[pi].step = s->off[pi];
    S.procs[pi].end = s->off[pi + 1];
  }
  for (int pi = 0; pi < S.nProcs; pi++)
    if (wake(&S, pi) != 0) goto exit;
  while (S.heapLen > 0) {
    hentry e = heapPop(&S);
    S.procs[e.proc].queued = 0;
    double when;
    int kind;
    int r = nextAction(&S, e.proc, &when, &kind);
    if (r == -2) goto exit;
    S.acting = e.proc;
    if (r == 1 && runAction(&S, e.proc, when, kind) != 0) goto exit;
    S.acting = -1;
    if (wake(&S, e.proc) != 0) goto exit;
  }
  for (int pi = 0; pi < S.nProcs; pi++) {
    const sproc* P = &S.procs[pi];
    if (P->step < P->end) res->stalled = 1;
    if (s->off[pi + 1] > s->off[pi] && (res->lastRank < 0 || P->t > res->lastRankUs)) {
      res->lastRankUs = P->t;
      res->lastRank = pi / s->maxCh;
    }
  }
  if (res->stalled) describeStall(&S, res);
  res->totalUs = p->callUs + res->lastRankUs;
  res->actions = S.actions;
  res->conns = (size_t)S.nConns;
  res->collnetMembers = S.nMem;
  rc = 0;
exit:
  if (rc != 0) snprintf(res->msg, sizeof(res->msg), "%s", S.err ? S.err : "simulation: out of memory or bad arguments");
  free(S.procs);
  free(S.heap);
  free(S.resFree);
  free(S.conns);
  free(S.times);
  free(S.hkeys);
  free(S.hvals);
  free(S.memberOf);
  free(S.mem);
  free(S.memTimes);
  free(S.downFree);
  for (int ch = 0; ch < COMM_MAX_CHANNELS; ch++) free(S.groups[ch].win);
  return rc;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Chrome trace */

static void traceName(const simStep* st, char* buf, size_t len) {
  size_t n = (size_t)snprintf(buf, len, "%s", commPrimName((commPrim_t)st->prim));
  if (n < len && st->recvPeer >= 0) n += (size_t)snprintf(buf + n, len - n, " <-%d", st->recvPeer);
  if (n < len && st->recvPeer == COMM_PEER_COLLNET) n += (size_t)snprintf(buf + n, len - n, " <-collnet");
  if (n < len && st->sendPeer >= 0) n += (size_t)snprintf(buf + n, len - n, " ->%d", st->sendPeer);
  if (n < len && st->sendPeer == COMM_PEER_COLLNET) snprintf(buf + n, len - n, " ->collnet");
}

int simWriteTrace(const char* path, const simSet* s, const simParams* p, const double* stepStart, const double* stepEnd,
                  size_t maxEvents, const char* title, size_t* written, int* truncated) {
  *written = 0;
  *truncated = 0;
  FILE* f = fopen(path, "w");
  if (f == NULL) return -1;
  setvbuf(f, NULL, _IOFBF, 1 << 20);
  int ranksOut = 0;
  fprintf(f, "{\"traceEvents\":[\n");
  const char* sep = "";
  for (int r = 0; r < s->nRanks && !*truncated; r++) {
    size_t firstRow = 0;
    for (int c = 0; c < s->maxCh && firstRow == 0; c++) firstRow = simSetLen(s, r, c);
    if (firstRow == 0) continue;
    if (*written > 0 && *written + firstRow > maxEvents) { /* not even one row of this rank fits */
      *truncated = 1;
      break;
    }
    int node = p->nodeOf[r];
    fprintf(f, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d (node %d)\"}}", sep,
            r, r, node);
    sep = ",\n";
    fprintf(f, "%s{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", sep, r, r);
    ranksOut++;
    for (int c = 0; c < s->maxCh && !*truncated; c++) {
      size_t first = s->off[(size_t)r * s->maxCh + c], n = simSetLen(s, r, c);
      if (n == 0) continue;
      /* Whole rows only, unless nothing at all has been written yet. */
      if (*written + n > maxEvents) {
        *truncated = 1;
        if (*written > 0) break;
        n = maxEvents;
      }
      fprintf(f, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"channel %d\"}}",
              sep, r, c, c);
      for (size_t i = 0; i < n; i++) {
        const simStep* st = &s->steps[first + i];
        char name[96];
        traceName(st, name, sizeof(name));
        double t0 = stepStart[first + i], t1 = stepEnd[first + i];
        fprintf(f,
                "%s{\"name\":\"%s\",\"cat\":\"step\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                "\"args\":{\"step\":%zu,\"bytes\":%llu",
                sep, name, r, c, t0, t1 > t0 ? t1 - t0 : 0.0, i, (unsigned long long)st->bytes);
        if (simHasPeer(st->recvPeer) && st->recvBytes != st->bytes)
          fprintf(f, ",\"recvBytes\":%llu", (unsigned long long)st->recvBytes);
        if (simHasPeer(st->sendPeer)) fprintf(f, ",\"sendPeer\":%d", st->sendPeer); /* -2: collnet */
        if (simHasPeer(st->recvPeer)) fprintf(f, ",\"recvPeer\":%d", st->recvPeer);
        fprintf(f, "}}");
      }
      *written += n;
    }
  }
  fprintf(f, "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"title\":\"");
  for (const char* c = title ? title : ""; *c; c++) { /* JSON string: escape what needs it */
    if (*c == '"' || *c == '\\') fputc('\\', f);
    if ((unsigned char)*c >= 0x20) fputc(*c, f);
  }
  fprintf(f, "\",\"ranks\":%d,\"ranksWritten\":%d,\"stepEvents\":%zu,\"truncated\":%s}}\n", s->nRanks, ranksOut,
          *written, *truncated ? "true" : "false");
  int err = ferror(f);
  if (fclose(f) != 0 || err) return -1;
  return 0;
}
