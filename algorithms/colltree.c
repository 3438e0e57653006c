/* CollTree: hierarchical (two-level) allreduce, reduce and broadcast over the nodes of args->nodeOf.
 *
 * The data travels one tree per channel that has two levels: inside each node the local ranks form a chain
 * or a bit tree hanging below the node's leader, and the leaders of the nodes form an inter-node tree. The
 * inter-node level is a replaceable stage (see "The inter-node stage" below), so that an in-network
 * reduction (collnet/SHARP) can take the place of the tree without touching the intra-node code.
 *
 * Data split (identical on every rank, derived only from shared arguments):
 *  - the buffer is cut into nChannels balanced contiguous parts (part c has count/nChannels elements, plus
 *    one for the first count%nChannels parts), as in ring.c;
 *  - part c is cut into P = ceil(len / chunkElems) balanced chunks, so no step carries more than chunkElems;
 *  - a step whose count is 0 is not emitted: it is 0 on both ends of the transfer, so both skip it.
 *
 * Nodes and leaders. On channel c, with slot j = c (allreduce across nodes: j = c/2, so each leader runs
 * both trees of the double binary tree, on channels 2j and 2j+1), the local ranks of node v are its ranks in
 * the order of ring j (args->ringRanks[j]) and the leader is the first of them: the rank where ring j enters
 * the node, which the topology layer picks nearest the NIC of that ring, so channels put their inter-node
 * traffic on different ranks and NICs. Without a ring the local ranks are in increasing rank order and the
 * leader is the (j mod size(v))-th. Nodes need not be contiguous and may differ in size. For reduce and
 * broadcast, the root is the leader of its node on every channel: the result starts or ends there without
 * an extra local hop. Local position p of a rank is its local index minus the leader's, modulo the size.
 *
 * Intra-node shape (per node and channel, the same answer on every rank: it depends on the node size m and
 * the channel's chunk count P only). Counting one time unit per chunk and hop, a chain over the positions
 * (p's parent p-1) costs P + (m-1): the pipeline fills in m-1 hops, then one chunk per unit. The bit tree
 * over the positions (commBitTree, root 0) fills in d = commBitTreeDepth(m) hops, but an interior rank
 * receives (reduce) or sends (broadcast) two chunks per chunk, so it costs 2P + d. Rule: the chain when
 * m - 1 <= P + d, else the bit tree. Hence nodes of up to 5 ranks always use the chain; 8 ranks use the tree
 * for parts of at most 3 chunks (latency bound), the chain above (bandwidth bound). The leader (position 0)
 * has one local child in both shapes.
 *
 * Inter-node stage, built in: a tree over the nodes, each node represented by its leader on the channel.
 *  - allreduce: the double binary tree over node indices (commDoubleTree(nNodes, c % 2, ...)): tree 0 on even
 *    channels, tree 1 on odd ones, so with two or more channels every node is interior in at most one tree
 *    and the two roots differ;
 *  - reduce and broadcast: the bit tree over positions (node - rootNode) mod nNodes, rooted at the root's
 *    node.
 * One node: the stage has no peers, the leader is the root of the whole tree. Every rank its own node
 * (nodeOf NULL): the intra-node stage has no peers, the schedule is the inter-node tree alone.
 *
 * Steps of one chunk (offset o). Write up(k) for a rank's reduce-up of chunk k and down(k) for its
 * broadcast-down. A rank reduces its own input with the partials of its children (first its local
 * children, then its inter-node children, each in turn), PRE on the step that reads its input:
 *   up(k)   no child:  SEND in[o] -> parent                                        PRE
 *           children:  RECV_REDUCE_COPY <- child i, acc = recv + (i == 0 ? in[o] : acc)   (PRE when i == 0)
 *                      ... the last child: RECV_REDUCE_SEND -> parent instead of the copy to acc;
 *                      at the root of the whole tree: RECV_REDUCE_COPY into out[o] with POST (allreduce: a
 *                      RECV_REDUCE_COPY_SEND that also sends the result to the first down destination).
 *   down(k) RECV_COPY_SEND <- parent -> first destination, out[o] = recv; SEND out[o] -> the others; a rank
 *           without destinations only RECVs. Destinations: inter-node children first (longer path onwards),
 *           then the local child. The broadcast root starts with COPY_SEND in[o] -> out[o] (the executor
 *           skips the copy when in == out), the allreduce root sends from out[o].
 * acc is out[o] except for reduce on a non-root rank, which has no output: scratch[c * chunkElems], one
 * chunk per channel, reused because up(k) is done with it before up(k+1) starts. The input element is read
 * once, in up(k), before out[o] is written (element-wise in the same step), so in-place (in == out) is
 * safe. The final value is computed once, at the root, and copied down: every rank holds the bit-identical
 * result, and POST is applied exactly once.
 *
 * Pipelining and lookahead (allreduce). A rank at level h (hops from the root of the whole two-level tree:
 * its depth in the local shape plus its node's level in the inter-node stage) runs
 *   up(0) .. up(L-1), then up(k + L), down(k) for k = 0, 1, ...   with L = 2h,
 * i.e. up(t) and down(t - 2h) at "time" t - h. So the local stage of a node works on later chunks while its
 * leader exchanges earlier ones with other nodes, and the broadcast of chunk k overlaps the reduce of chunk
 * k + 2h: a chunk needs 2h hops to climb from level h to the root and back, exactly the lookahead, so in a
 * steady pipeline no rank waits for a down chunk. Reduce runs up(k) in order, broadcast down(k) in order.
 * Why it cannot deadlock with bounded FIFOs of two chunks (chunkElems is at most half a FIFO): give up(k) at
 * level h the time k - h and down(k) the time k + h. Every rank runs its steps in non-decreasing time. Each
 * connection carries one chunk per time unit, one direction only (up: child to parent, down: parent to
 * child), and a chunk sent at time s is received at time s + 1 (the receiver is one level up or down). A step
 * at time s waits for data sent at s - 1, or for FIFO space: pushing chunk j needs chunk j - 2 of that
 * connection drained, which happened at time s - 1. Every wait points strictly back in time, so by
 * induction on time every step completes. (The verifier proves it for every configuration the tests run.)
 * A FIFO of a single chunk is not enough (two ranks: the child's third up chunk and the root's second down
 * chunk wait on each other): the same contract as the ring's, which plan.c guarantees.
 *
 * The inter-node stage (ctInterStage) has a narrow interface:
 *   init(c, &level): called on every rank of node c->node for channel c->ch (leaders and others, since the
 *                    lookahead needs the level): set up the node's role and report its level, the number of
 *                    hops between the node's leader and the point where the stage turns the data around
 *                    (0 where the leader itself ends up with the final value);
 *   up(c, k):        at the leader, chunk k: reduce the leader's own input (PRE once) with the partials that
 *                    arrive from the local ranks c->localChild[0 .. c->nLocalChild) and with the other nodes'
 *                    contributions; where the final value lands at this leader (allreduce, or reduce at
 *                    the root's node) write it to out[o] with POST;
 *   down(c, k):      at the leader, chunk k: bring the final value into out[o] (broadcast: the root reads
 *                    its input) and send it to c->localChild[...] as well as to other nodes.
 * The helpers emitReduce and emitFanout build these steps from a list of peers; ctLeader names another
 * node's leader on the channel. To plug in an in-network reduction: write init/up/down for it (up: e.g.
 * emitReduce over the local children whose result goes to the collnet connection instead of a tree parent;
 * down: emitFanout from the collnet connection to the local children; level: its own latency in hops, for
 * the lookahead), keep its per-channel state in ctChan's `inter` union, and return it from interStageFor()
 * when the communicator offers collnet. The intra-node stage, the leaders and the chunking stay as they are.
 *
 * Special cases: one rank: a COPY in -> out per channel part (PRE|POST for reductions); count 0: channels
 * without steps. Other collectives (allgather, ...) are refused with commInvalidArgument. commAlgoCollNet's
 * allreduce is this builder with args->interCollNet (algorithms/collnet.c). */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "debug.h"
#include "algorithms.h"
#include "utils.h"

/* ---------------------------------------------------------------------------------------------------- */
/* Nodes */

typedef struct {
  int nNodes;
  int* start; /* [nNodes + 1]: node v's ranks are ranks[start[v] .. start[v+1]) */
  int* ranks; /* [nRanks], grouped by node; within a node in ring order (ring given) or rank order */
  int* local; /* [nRanks]: index of each rank within its node's part of ranks[] */
  int byRing; /* ranks[] follows a ring: each node's first rank is its leader */
} ctNodes;

static int nodeOfRank(const commCollArgs* a, int r) { return a->nodeOf ? a->nodeOf[r] : r; }

static void nodesFree(ctNodes* t) {
  free(t->start);
  free(t->ranks);
  free(t->local);
  memset(t, 0, sizeof(*t));
}

/* Groups the ranks by node (counting sort, stable): each node's ranks come out in the order of `ring` (the
 * ring of the channel's slot, which enters each node at the rank nearest the channel's NIC), or in rank
 * order without one. */
static commResult_t nodesBuild(const commCollArgs* a, const int* ring, ctNodes* t) {
  int n = a->nRanks;
  memset(t, 0, sizeof(*t));
  t->nNodes = a->nodeOf ? a->nNodes : n;
  if (t->nNodes < 1 || t->nNodes > n) {
    WARN("commCollTreeBuild: nNodes %d with %d ranks", t->nNodes, n);
    return commInvalidArgument;
  }
  COMMCHECK(commCalloc(&t->start, (size_t)t->nNodes + 1, sizeof(int)));
  commResult_t res = commCalloc(&t->ranks, (size_t)n, sizeof(int));
  if (res != commSuccess) goto fail;
  res = commCalloc(&t->local, (size_t)n, sizeof(int));
  if (res != commSuccess) goto fail;
  t->byRing = ring != NULL;
  for (int r = 0; r < n; r++) {
    int v = nodeOfRank(a, r);
    if (v < 0 || v >= t->nNodes) {
      WARN("commCollTreeBuild: rank %d is on node %d (nNodes %d)", r, v, t->nNodes);
      res = commInvalidArgument;
      goto fail;
    }
    t->start[v + 1]++;
  }
  for (int v = 0; v < t->nNodes; v++) {
    if (t->start[v + 1] == 0) {
      WARN("commCollTreeBuild: node %d of %d has no rank", v, t->nNodes);
      res = commInvalidArgument;
      goto fail;
    }
    t->start[v + 1] += t->start[v];
  }
  /* Place the ranks in order, advancing start[v] as node v's cursor; afterwards start[v] is node v's end,
   * which is node v+1's start: shift back by one. */
  for (int i = 0; i < n; i++) {
    int r = ring ? ring[i] : i;
    t->ranks[t->start[nodeOfRank(a, r)]++] = r;
  }
  for (int v = t->nNodes; v > 0; v--) t->start[v] = t->start[v - 1];
  t->start[0] = 0;
  for (int v = 0; v < t->nNodes; v++)
    for (int i = t->start[v]; i < t->start[v + 1]; i++) t->local[t->ranks[i]] = i - t->start[v];
  return commSuccess;
fail:
  nodesFree(t);
  return res;
}

static int nodeSize(const ctNodes* t, int v) { return t->start[v + 1] - t->start[v]; }

/* Local index of `rank` in its node v. */
static int localIndex(const ctNodes* t, int v, int rank) {
  (void)v;
  return t->local[rank];
}

/* ---------------------------------------------------------------------------------------------------- */
/* Per-channel context */

typedef struct {
  size_t off, len; /* element range in the user buffers */
} ctChunk;

typedef struct ctChan {
  const commCollArgs* a;
  commSchedule* s;
  const ctNodes* nodes;
  int ch;
  int node;     /* this rank's node */
  int rootNode; /* node of args->root for reduce and broadcast; -1 for allreduce */
  uint8_t pre, post;
  /* Intra-node links of this rank on this channel (ranks, -1 when absent). At the leader, localChild are the
   * local ranks whose partial arrives in up() and that down() has to serve. */
  int isLeader;
  int localParent;
  int localChild[2], nLocalChild;
  int localDepth; /* hops from this rank to its leader */
  /* State of the inter-node stage: one member per stage implementation. */
  union {
    struct {
      int parent;   /* leader of the parent node, -1 at the root node */
      int child[2]; /* leaders of the child nodes */
      int nChild;
    } tree;
  } inter;
} ctChan;

typedef struct {
  const char* name;
  commResult_t (*init)(ctChan* c, int* level);
  commResult_t (*up)(ctChan* c, const ctChunk* k);
  commResult_t (*down)(ctChan* c, const ctChunk* k);
} ctInterStage;

/* Local index of node v's leader on this channel. Allreduce: channels 2j and 2j+1 (trees 0 and 1 of the
 * double binary tree) share leader j, so every leader, and its NIC, carries both trees: a node interior in
 * one tree is a leaf in the other, and its NIC sends 1.5x + 1x a quarter of the data instead of 1.5x half
 * of it (4 hosts x 2 ranks, 2 NICs each: 25 -> 13 MB on the busiest NIC for 16 MiB). */
static int leaderSlot(const commCollArgs* a, int nNodes, int ch) {
  return a->func == commFuncAllReduce && nNodes > 1 && !a->interCollNet ? ch / 2 : ch;
}

/* With a ring the leader is where the slot's ring enters the node (the topology puts the rank nearest
 * the channel's NIC there); without one, the slot-th local rank. */
static int leaderIndex(const ctChan* c, int v) {
  if (v == c->rootNode) return localIndex(c->nodes, v, c->a->root);
  if (c->nodes->byRing) return 0;
  return leaderSlot(c->a, c->nodes->nNodes, c->ch) % nodeSize(c->nodes, v);
}

/* Rank of node v's leader on this channel. */
static int ctLeader(const ctChan* c, int v) { return c->nodes->ranks[c->nodes->start[v] + leaderIndex(c, v)]; }

/* ---------------------------------------------------------------------------------------------------- */
/* Step emission */

static commResult_t emit(ctChan* c, commPrim_t prim, uint8_t flags, int recvPeer, int sendPeer, commBufRef src,
                         commBufRef dst, size_t count) {
  return commSchedEmit(c->s, c->ch, prim, flags, recvPeer, sendPeer, src, dst, count);
}

/* Where this rank keeps the partial of chunk k between two receives: its output, except for reduce on a
 * rank other than the root (no output there): one chunk of scratch per channel. */
static commBufRef accRef(const ctChan* c, const ctChunk* k) {
  if (c->a->func == commFuncReduce && c->a->rank != c->a->root)
    return commBufAt(COMM_BUF_SCRATCH, (size_t)c->ch * c->a->chunkElems);
  return commBufAt(COMM_BUF_OUTPUT, k->off);
}

/* Reduce this rank's input (PRE) with the partials arriving from peers[0 .. nPeers), in that order. With
 * to >= 0 the result goes to `to`; otherwise it is final: written to out[o] with POST, and also sent to
 * fusedTo when that is >= 0. */
static commResult_t emitReduce(ctChan* c, const ctChunk* k, const int* peers, int nPeers, int to, int fusedTo) {
  commBufRef in = commBufAt(COMM_BUF_INPUT, k->off), out = commBufAt(COMM_BUF_OUTPUT, k->off), acc = accRef(c, k);
  if (nPeers == 0) {
    if (to != -1) return emit(c, COMM_PRIM_SEND, c->pre, -1, to, in, in, k->len);
    if (fusedTo >= 0) return emit(c, COMM_PRIM_COPY_SEND, c->pre | c->post, -1, fusedTo, in, out, k->len);
    return emit(c, COMM_PRIM_COPY, c->pre | c->post, -1, -1, in, out, k->len);
  }
  for (int i = 0; i < nPeers; i++) {
    commBufRef src = i == 0 ? in : acc;
    uint8_t fl = i == 0 ? c->pre : 0;
    if (i < nPeers - 1) {
      COMMCHECK(emit(c, COMM_PRIM_RECV_REDUCE_COPY, fl, peers[i], -1, src, acc, k->len));
    } else if (to != -1) {
      COMMCHECK(emit(c, COMM_PRIM_RECV_REDUCE_SEND, fl, peers[i], to, src, acc, k->len));
    } else if (fusedTo >= 0) {
      COMMCHECK(emit(c, COMM_PRIM_RECV_REDUCE_COPY_SEND, fl | c->post, peers[i], fusedTo, src, out, k->len));
    } else {
      COMMCHECK(emit(c, COMM_PRIM_RECV_REDUCE_COPY, fl | c->post, peers[i], -1, src, out, k->len));
    }
  }
  return commSuccess;
}

/* Bring the final value of chunk k into out[o] and send it to to[0 .. nTo). It arrives from `from` when
 * from != -1 (a rank, or the collnet group, whose result still needs POST: recvFlags); otherwise it is this
 * rank's input (fromInput: the broadcast root) or already in out[o]. */
static commResult_t emitFanout(ctChan* c, const ctChunk* k, int from, uint8_t recvFlags, int fromInput, const int* to,
                               int nTo) {
  commBufRef in = commBufAt(COMM_BUF_INPUT, k->off), out = commBufAt(COMM_BUF_OUTPUT, k->off);
  int first = 0;
  if (from != -1) {
    if (nTo == 0) return emit(c, COMM_PRIM_RECV, recvFlags, from, -1, out, out, k->len);
    COMMCHECK(emit(c, COMM_PRIM_RECV_COPY_SEND, recvFlags, from, to[0], out, out, k->len));
    first = 1;
  } else if (fromInput) {
    if (nTo == 0) return emit(c, COMM_PRIM_COPY, 0, -1, -1, in, out, k->len);
    COMMCHECK(emit(c, COMM_PRIM_COPY_SEND, 0, -1, to[0], in, out, k->len));
    first = 1;
  }
  for (int i = first; i < nTo; i++) COMMCHECK(emit(c, COMM_PRIM_SEND, 0, -1, to[i], out, out, k->len));
  return commSuccess;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Intra-node stage (ranks other than the leader; the leader's local side is handed to the inter stage). */

/* Chain or bit tree over the local positions of this rank's node (the rule in the header). */
static void intraInit(ctChan* c, size_t nChunks) {
  const ctNodes* t = c->nodes;
  int v = c->node, m = nodeSize(t, v);
  int ldr = leaderIndex(c, v);
  int pos = (localIndex(t, v, c->a->rank) - ldr + m) % m;
#define RANK_AT(p) ((p) < 0 ? -1 : t->ranks[t->start[v] + (ldr + (p)) % m])
  int d = commBitTreeDepth(m);
  int chain = (size_t)(m - 1) <= nChunks + (size_t)d;
  c->isLeader = pos == 0;
  c->nLocalChild = 0;
  if (chain) {
    c->localParent = RANK_AT(pos - 1);
    if (pos + 1 < m) c->localChild[c->nLocalChild++] = RANK_AT(pos + 1);
    c->localDepth = pos;
    return;
  }
  int par, c0, c1;
  commBitTree(m, pos, &par, &c0, &c1);
  c->localParent = RANK_AT(par);
  if (c0 >= 0) c->localChild[c->nLocalChild++] = RANK_AT(c0);
  if (c1 >= 0) c->localChild[c->nLocalChild++] = RANK_AT(c1);
  c->localDepth = 0;
  for (int q = pos; q > 0; c->localDepth++) commBitTree(m, q, &q, &c0, &c1);
#undef RANK_AT
}

static commResult_t intraUp(ctChan* c, const ctChunk* k) {
  return emitReduce(c, k, c->localChild, c->nLocalChild, c->localParent, -1);
}

static commResult_t intraDown(ctChan* c, const ctChunk* k) {
  return emitFanout(c, k, c->localParent, 0, 0, c->localChild, c->nLocalChild);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Inter-node stage: a tree over the nodes (the double binary tree for allreduce, a bit tree rooted at the
 * root's node for reduce and broadcast), each node represented by its leader. */

/* Neighbours of node v as nodes (-1: none). */
static void treeNodeLinks(const ctChan* c, int v, int* parent, int* c0, int* c1) {
  int nn = c->nodes->nNodes;
  if (c->rootNode < 0) {
    commDoubleTree(nn, c->ch % 2, v, parent, c0, c1);
    return;
  }
  commBitTree(nn, (v - c->rootNode + nn) % nn, parent, c0, c1);
  if (*parent >= 0) *parent = (*parent + c->rootNode) % nn;
  if (*c0 >= 0) *c0 = (*c0 + c->rootNode) % nn;
  if (*c1 >= 0) *c1 = (*c1 + c->rootNode) % nn;
}

static commResult_t treeInit(ctChan* c, int* level) {
  int p, c0, c1;
  treeNodeLinks(c, c->node, &p, &c0, &c1);
  c->inter.tree.parent = p >= 0 ? ctLeader(c, p) : -1;
  c->inter.tree.nChild = 0;
  if (c0 >= 0) c->inter.tree.child[c->inter.tree.nChild++] = ctLeader(c, c0);
  if (c1 >= 0) c->inter.tree.child[c->inter.tree.nChild++] = ctLeader(c, c1);
  *level = 0;
  for (int v = p; v >= 0; (*level)++) {
    if (*level > c->nodes->nNodes) {
      WARN("commCollTreeBuild: the tree over %d nodes has a cycle above node %d", c->nodes->nNodes, c->node);
      return commInternalError;
    }
    treeNodeLinks(c, v, &v, &c0, &c1);
  }
  return commSuccess;
}

/* Destinations of the leader's down(k): child nodes first (their path onwards is longer), then local. */
static int treeDownList(const ctChan* c, int* to) {
  int n = 0;
  for (int i = 0; i < c->inter.tree.nChild; i++) to[n++] = c->inter.tree.child[i];
  for (int i = 0; i < c->nLocalChild; i++) to[n++] = c->localChild[i];
  return n;
}

/* At the allreduce root the final reduce also sends the result to the first down destination. */
static int treeFusesRoot(const ctChan* c) {
  return c->a->func == commFuncAllReduce && c->inter.tree.parent < 0 && c->inter.tree.nChild + c->nLocalChild > 0;
}

static commResult_t treeUp(ctChan* c, const ctChunk* k) {
  int from[4], n = 0;
  for (int i = 0; i < c->nLocalChild; i++) from[n++] = c->localChild[i];
  for (int i = 0; i < c->inter.tree.nChild; i++) from[n++] = c->inter.tree.child[i];
  int fused = -1;
  if (treeFusesRoot(c)) {
    int to[4];
    treeDownList(c, to);
    fused = to[0];
  }
  return emitReduce(c, k, from, n, c->inter.tree.parent, fused);
}

static commResult_t treeDown(ctChan* c, const ctChunk* k) {
  int to[4];
  int n = treeDownList(c, to);
  int skip = treeFusesRoot(c) ? 1 : 0;
  int fromInput = c->a->func == commFuncBroadcast && c->inter.tree.parent < 0;
  return emitFanout(c, k, c->inter.tree.parent, 0, fromInput, to + skip, n - skip);
}

static const ctInterStage treeStage = {"tree", treeInit, treeUp, treeDown};

/* ---------------------------------------------------------------------------------------------------- */
/* Inter-node stage: the network's reduction (commAlgoCollNet, allreduce). Each node's leader is the node's
 * member of the channel's collnet group: up(k) reduces the local partials with its input and sends the node's
 * partial to the group (COMM_PEER_COLLNET); down(k) receives the group's result, which is final (POST here,
 * at every leader: the same operation on the same bits, so every rank holds the same result), and fans it out
 * to the local children. Level 1: one hop to the network and back, so the lookahead keeps 2 (depth + 1)
 * chunks of a leader in flight. */

static commResult_t collnetInit(ctChan* c, int* level) {
  (void)c;
  *level = 1;
  return commSuccess;
}

static commResult_t collnetUp(ctChan* c, const ctChunk* k) {
  return emitReduce(c, k, c->localChild, c->nLocalChild, COMM_PEER_COLLNET, -1);
}

static commResult_t collnetDown(ctChan* c, const ctChunk* k) {
  return emitFanout(c, k, COMM_PEER_COLLNET, c->post, 0, c->localChild, c->nLocalChild);
}

static const ctInterStage collnetStage = {"collnet", collnetInit, collnetUp, collnetDown};

/* The inter-node stage to use: the network's reduction when the communicator runs collnet across nodes. */
static const ctInterStage* interStageFor(const commCollArgs* a) {
  int nNodes = a->nodeOf ? a->nNodes : a->nRanks;
  return a->interCollNet && nNodes > 1 ? &collnetStage : &treeStage;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Driver */

static commResult_t chanSteps(ctChan* c, const ctInterStage* stage, size_t base, size_t len) {
  const size_t unit = commSplitUnit(c->a->eltSize, c->a->chunkElems);
  size_t P = commSplitParts(len, unit, c->a->chunkElems / unit);
  intraInit(c, P);
  int interLevel = 0;
  COMMCHECK(stage->init(c, &interLevel));
  commResult_t (*up)(ctChan*, const ctChunk*) = c->isLeader ? stage->up : intraUp;
  commResult_t (*down)(ctChan*, const ctChunk*) = c->isLeader ? stage->down : intraDown;
  size_t L = c->a->func == commFuncAllReduce ? 2 * (size_t)(c->localDepth + interLevel) : 0;
  for (size_t t = 0; t < P + L; t++) {
    ctChunk k;
    if (t < P && c->a->func != commFuncBroadcast) {
      commSplitPart(len, P, t, unit, &k.off, &k.len);
      k.off += base;
      COMMCHECK(up(c, &k));
    }
    if (t >= L && c->a->func != commFuncReduce) {
      commSplitPart(len, P, t - L, unit, &k.off, &k.len);
      k.off += base;
      COMMCHECK(down(c, &k));
    }
  }
  return commSuccess;
}

commResult_t commCollNetMembers(const commCollArgs* a, int ch, int* members) {
  commCollArgs b = *a;
  b.func = commFuncAllReduce;
  b.interCollNet = 1;
  ctNodes nodes;
  int nNodes = b.nodeOf ? b.nNodes : b.nRanks;
  COMMCHECK(nodesBuild(&b, b.ringRanks[leaderSlot(&b, nNodes, ch)], &nodes));
  ctChan c;
  memset(&c, 0, sizeof(c));
  c.a = &b;
  c.nodes = &nodes;
  c.ch = ch;
  c.rootNode = -1;
  for (int v = 0; v < nodes.nNodes; v++) members[v] = ctLeader(&c, v);
  nodesFree(&nodes);
  return commSuccess;
}

commResult_t commCollTreeBuild(const commCollArgs* a, commSchedule* out) {
  if (a == NULL || out == NULL) {
    WARN("commCollTreeBuild: NULL argument");
    return commInvalidArgument;
  }
  if (a->func != commFuncAllReduce && a->func != commFuncReduce && a->func != commFuncBroadcast) {
    WARN("commCollTreeBuild: %s has no hierarchical tree algorithm", commFuncName(a->func));
    return commInvalidArgument;
  }
  if (a->nRanks < 1 || a->rank < 0 || a->rank >= a->nRanks || a->nChannels < 1 || a->nChannels > COMM_MAX_CHANNELS) {
    WARN("commCollTreeBuild: bad arguments rank %d nRanks %d nChannels %d", a->rank, a->nRanks, a->nChannels);
    return commInvalidArgument;
  }
  int rooted = a->func != commFuncAllReduce;
  if (rooted && (a->root < 0 || a->root >= a->nRanks)) {
    WARN("commCollTreeBuild: root %d out of range (nRanks %d)", a->root, a->nRanks);
    return commInvalidArgument;
  }
  if (a->count > 0 && a->chunkElems == 0) {
    WARN("commCollTreeBuild: chunkElems is 0");
    return commInvalidArgument;
  }
  if (a->count > 0 && a->chunkElems > SIZE_MAX / (size_t)a->nChannels) {
    WARN("commCollTreeBuild: chunkElems %zu overflows the scratch layout", a->chunkElems);
    return commInvalidArgument;
  }
  ctNodes nodes;
  memset(&nodes, 0, sizeof(nodes));
  commResult_t res = commSchedInit(out, a->nChannels);
  if (res != commSuccess) return res;
  const ctInterStage* stage = interStageFor(a);
  for (int ch = 0; ch < a->nChannels && a->count > 0; ch++) {
    ctChan c;
    memset(&c, 0, sizeof(c));
    c.a = a;
    c.s = out;
    nodesFree(&nodes);
    int nNodes = a->nodeOf ? a->nNodes : a->nRanks;
    COMMCHECKGOTO(nodesBuild(a, a->ringRanks[leaderSlot(a, nNodes, ch)], &nodes), res, fail);
    c.nodes = &nodes;
    c.ch = ch;
    c.node = nodeOfRank(a, a->rank);
    c.rootNode = rooted ? nodeOfRank(a, a->root) : -1;
    c.pre = a->isReduction ? COMM_STEP_PRE : 0;
    c.post = a->isReduction ? COMM_STEP_POST : 0;
    size_t off, len;
    commSplitPart(a->count, (size_t)a->nChannels, (size_t)ch, commSplitUnit(a->eltSize, SIZE_MAX), &off,
                  &len); /* channel parts start 16-byte aligned */
    if (len == 0) continue;
    if (a->nRanks == 1) {
      uint8_t fl = a->func == commFuncBroadcast ? 0 : (uint8_t)(c.pre | c.post);
      COMMCHECKGOTO(emit(&c, COMM_PRIM_COPY, fl, -1, -1, commBufAt(COMM_BUF_INPUT, off),
                         commBufAt(COMM_BUF_OUTPUT, off), len),
                    res, fail);
      continue;
    }
    COMMCHECKGOTO(chanSteps(&c, stage, off, len), res, fail);
  }
  nodesFree(&nodes);
  return commSuccess;
fail:
  nodesFree(&nodes);
  commSchedFree(out);
  return res;
}
