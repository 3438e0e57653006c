/* Placement over the topology: which NIC each rank uses, the order of ranks in rings, the transport between
 * two ranks, and binding helper threads near their device (see src/topo/topo.h). */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "debug.h"
#include "param.h"
#include "topo.h"
#include "utils.h"

#define MAX_NODE_NICS 64
/* DFS budget of the intra-node ring search (node expansions per start device); the first leaves found
 * follow the best edges greedily, so a cut search is still a good ring. */
#define ORDER_SEARCH_BUDGET 20000

/* ---- NIC choice ---- */

/* Ranks of one node: the context every placement decision is made in. */
typedef struct {
  const commTopo* topo;
  const commTopoRank* ranks;
  const int* list; /* the node's ranks, increasing */
  int m;
} nodeCtx;

/* Index of rank list[i] among the node's ranks on the same device, and how many share it. */
static void shareIndex(const nodeCtx* nc, int i, int* li, int* nShare) {
  int dev = nc->ranks[nc->list[i]].dev;
  *li = 0;
  *nShare = 0;
  for (int j = 0; j < nc->m; j++) {
    if (nc->ranks[nc->list[j]].dev != dev) continue;
    if (j < i) (*li)++;
    (*nShare)++;
  }
}

/* The equally nearest NICs of a device: the prefix of commTopoNicsByDistance(.., MAX_NODE_NICS) with the
 * best class and bandwidth, found in one pass over the host's NICs (that call keeps the best 64 of all of
 * them by insertion: a host of 255 NICs and 510 GPUs spent most of its ring time there). Equal NICs are
 * in the same order: faster first, then by index. */
static int nearestNics(const commTopo* topo, int dev, int* nics) {
  if (dev < 0 || dev >= topo->nNodes) return 0;
  const commTopoHost* h = &topo->hosts[topo->nodes[dev].host];
  commTopoPath best = {COMM_PATH_DIS, 0, 0, 0};
  int k = 0;
  for (int t = h->typeFirst[COMM_TOPO_NIC]; t < h->typeFirst[COMM_TOPO_NIC + 1]; t++) {
    int nic = topo->typeNodes[t];
    commTopoPath p = commTopoPathOf(topo, dev, nic);
    if (k > 0 && (p.type > best.type || (p.type == best.type && p.bw < best.bw))) continue;
    if (k == 0 || p.type != best.type || p.bw != best.bw) { /* a better class or bandwidth: start again */
      best = p;
      k = 0;
    }
    int speed = topo->nodes[nic].u.nic.speedMbps, j = k < MAX_NODE_NICS ? k++ : MAX_NODE_NICS;
    while (j > 0 && speed > topo->nodes[nics[j - 1]].u.nic.speedMbps) {
      if (j < MAX_NODE_NICS) nics[j] = nics[j - 1];
      j--;
    }
    if (j < MAX_NODE_NICS) nics[j] = nic;
  }
  return k;
}

/* Ranks sharing a device are spread over its equally nearest NICs by their index on the device; a rank
 * alone on its device turns through them channel by channel. */
static int nodeRankNic(const nodeCtx* nc, int i, int channel) {
  int dev = nc->ranks[nc->list[i]].dev;
  if (dev < 0) return -1;
  int nics[MAX_NODE_NICS];
  int k = nearestNics(nc->topo, dev, nics);
  if (k == 0) return -1;
  int li, nShare;
  shareIndex(nc, i, &li, &nShare);
  return nics[(li + (nShare == 1 ? channel : 0)) % k];
}

/* The node's ranks (increasing) into list; returns m. */
static int nodeRanks(const commTopoRank* ranks, int nRanks, int node, int* list) {
  int m = 0;
  for (int r = 0; r < nRanks; r++)
    if (ranks[r].node == node) list[m++] = r;
  return m;
}

int commTopoRankNic(const commTopo* topo, const commTopoRank* ranks, int nRanks, int r, int channel) {
  if (topo == NULL || r < 0 || r >= nRanks || ranks[r].dev < 0) return -1;
  int* list = malloc(sizeof(int) * (size_t)nRanks);
  if (list == NULL) return -1;
  nodeCtx nc = {topo, ranks, list, nodeRanks(ranks, nRanks, ranks[r].node, list)};
  int i = 0;
  while (list[i] != r) i++;
  int nic = nodeRankNic(&nc, i, channel);
  free(list);
  return nic;
}

/* ---- Intra-node order ---- */

typedef struct {
  int maxCls, sumCls;
  double minBw, sumBw;
  int endMiss; /* 1 when the order does not end at the preferred device */
} orderScore;

static int scoreBetter(const orderScore* x, const orderScore* y) {
  if (x->maxCls != y->maxCls) return x->maxCls < y->maxCls;
  if (x->minBw != y->minBw) return x->minBw > y->minBw;
  if (x->sumCls != y->sumCls) return x->sumCls < y->sumCls;
  if (x->endMiss != y->endMiss) return x->endMiss < y->endMiss;
  return x->sumBw > y->sumBw;
}

typedef struct {
  int nd;          /* devices */
  const int* devs; /* their nodes */
  commTopoPath* p; /* nd x nd paths */
  int* nbr;        /* nd x (nd-1): neighbours of each device, best edge first */
  int cycle;       /* score the closing edge too (one-node rings) */
  int end;         /* preferred last device (-1: none) */
  int cur[64], best[64];
  int used[64];
  orderScore bestScore;
  int haveBest, done;
  long budget;
  orderScore bound; /* the best score any order could have: stop when reached */
} orderSearch;

static void edgeAdd(orderScore* s, const commTopoPath* p) {
  if (p->type > s->maxCls) s->maxCls = p->type;
  if (p->bw < s->minBw) s->minBw = p->bw;
  s->sumCls += p->type;
  s->sumBw += p->bw;
}

static void dfs(orderSearch* S, int depth, orderScore sc) {
  if (S->done) return;
  if (S->budget-- <= 0 && S->haveBest) {
    S->done = 1;
    return;
  }
  if (S->haveBest) {
    /* Bounds: the worst hop only gets worse, and every remaining hop costs at least the best class. */
    if (sc.maxCls > S->bestScore.maxCls || (sc.maxCls == S->bestScore.maxCls && sc.minBw < S->bestScore.minBw)) return;
    int left = S->nd - depth + (S->cycle && S->nd > 1 ? 1 : 0);
    if (sc.maxCls == S->bestScore.maxCls && sc.minBw == S->bestScore.minBw &&
        sc.sumCls + left * S->bound.maxCls > S->bestScore.sumCls)
      return;
  }
  if (depth == S->nd) {
    orderScore fin = sc;
    if (S->cycle && S->nd > 1) edgeAdd(&fin, &S->p[S->cur[S->nd - 1] * S->nd + S->cur[0]]);
    fin.endMiss = S->end >= 0 && S->cur[S->nd - 1] != S->end;
    if (!S->haveBest || scoreBetter(&fin, &S->bestScore)) {
      S->bestScore = fin;
      memcpy(S->best, S->cur, sizeof(int) * (size_t)S->nd);
      S->haveBest = 1;
      if (!scoreBetter(&S->bound, &fin)) S->done = 1; /* nothing can beat it */
    }
    return;
  }
  int last = S->cur[depth - 1];
  for (int k = 0; k < S->nd - 1; k++) {
    int v = S->nbr[last * (S->nd - 1) + k];
    if (S->used[v]) continue;
    orderScore ns = sc;
    edgeAdd(&ns, &S->p[last * S->nd + v]);
    S->used[v] = 1;
    S->cur[depth] = v;
    dfs(S, depth + 1, ns);
    S->used[v] = 0;
    if (S->done) return;
  }
}

static int edgeBetter(const commTopoPath* x, const commTopoPath* y) {
  if (x->type != y->type) return x->type < y->type;
  return x->bw > y->bw;
}

/* Best Hamiltonian path (or cycle) over devices[0..nd) starting at device `start` and, other things equal,
 * ending at device `end` (-1: anywhere): order[] gets device positions. Among equal edges the search tries
 * devices in turn from the start (start+1, start+2, ...), so equal machines give rotations of one order. */
static commResult_t searchOrder(const commTopo* topo, const int* devs, int nd, int start, int end, int cycle,
                                int* order) {
  if (nd > 64) { /* beyond the search: follow the given order from start */
    for (int i = 0; i < nd; i++) order[i] = (start + i) % nd;
    return commSuccess;
  }
  commResult_t res = commSuccess;
  orderSearch* S = NULL;
  COMMCHECK(commCalloc(&S, 1, sizeof(*S)));
  S->nd = nd;
  S->devs = devs;
  S->cycle = cycle;
  S->end = end == start ? -1 : end;
  S->budget = ORDER_SEARCH_BUDGET;
  COMMCHECKGOTO(commCalloc(&S->p, (size_t)nd * nd, sizeof(commTopoPath)), res, exit);
  COMMCHECKGOTO(commCalloc(&S->nbr, (size_t)nd * (nd > 1 ? nd - 1 : 1), sizeof(int)), res, exit);
  commTopoPath bestEdge = {COMM_PATH_DIS, 0, 0, 0};
  for (int i = 0; i < nd; i++) {
    int cnt = 0;
    for (int j = 0; j < nd; j++) {
      if (i == j) continue;
      S->p[i * nd + j] = commTopoPathOf(topo, devs[i], devs[j]);
      if (edgeBetter(&S->p[i * nd + j], &bestEdge)) bestEdge = S->p[i * nd + j];
      /* insertion by edge quality, then device position */
      int k = cnt++;
      while (k > 0 && (edgeBetter(&S->p[i * nd + j], &S->p[i * nd + S->nbr[i * (nd - 1) + k - 1]]) ||
                       (!edgeBetter(&S->p[i * nd + S->nbr[i * (nd - 1) + k - 1]], &S->p[i * nd + j]) &&
                        (j - start + nd) % nd < (S->nbr[i * (nd - 1) + k - 1] - start + nd) % nd))) {
        S->nbr[i * (nd - 1) + k] = S->nbr[i * (nd - 1) + k - 1];
        k--;
      }
      S->nbr[i * (nd - 1) + k] = j;
    }
  }
  int edges = cycle && nd > 1 ? nd : nd - 1;
  S->bound = (orderScore){bestEdge.type, edges * bestEdge.type, bestEdge.bw, edges * (double)bestEdge.bw, 0};
  S->cur[0] = start;
  S->used[start] = 1;
  dfs(S, 1, (orderScore){COMM_PATH_LOC, 0, 1e300, 0, 0});
  memcpy(order, S->best, sizeof(int) * (size_t)nd);
exit:
  if (S) {
    free(S->p);
    free(S->nbr);
  }
  free(S);
  return res;
}

/* The turn-th (mod count) of the node's ranks that use NIC e and are nearest to it (index in nc->list). */
static int nicUser(const nodeCtx* nc, const int* nicOf, int e, int turn) {
  int cands[1024], nCand = 0;
  commTopoPath best = {COMM_PATH_DIS, 0, 0, 0};
  for (int i = 0; i < nc->m; i++) {
    if (nicOf[i] != e) continue;
    commTopoPath p = commTopoPathOf(nc->topo, nc->ranks[nc->list[i]].dev, e);
    if (nCand == 0 || edgeBetter(&p, &best)) {
      best = p;
      nCand = 0;
    } else if (p.type != best.type || p.bw != best.bw) {
      continue;
    }
    if (nCand < 1024) cands[nCand++] = i;
  }
  return cands[turn % nCand];
}

/* Node orders on channels c0 .. c0 + nCh - 1 (see commTopoNodeOrder), for the node's ranks nc->list: channel
 * c0 + k's order into orders + k * stride. What does not depend on the channel (the node's distinct devices,
 * their nearest NICs, their ranks) is made once. */
static commResult_t nodeOrders(const nodeCtx* nc, int c0, int nCh, int cycle, int* orders, size_t stride) {
  int m = nc->m;
  const commTopo* topo = nc->topo;
  commResult_t res = commSuccess;
  int *devs = NULL, *devOf = NULL, *devOrder = NULL, *nicOf = NULL, *devNics = NULL, *devCount = NULL;
  int *slot = NULL, *byDev = NULL;
  int host = nc->ranks[nc->list[0]].host;
  int known = topo != NULL && host >= 0 && host < topo->nHosts;
  for (int i = 0; known && i < m; i++) {
    const commTopoRank* rk = &nc->ranks[nc->list[i]];
    if (rk->host != host || rk->dev < 0 || rk->dev >= topo->nNodes || topo->nodes[rk->dev].host != host) known = 0;
  }
  if (!known) { /* no topology for this node: rank order, starting at the channel's rank */
    for (int k = 0; k < nCh; k++)
      for (int i = 0; i < m; i++) orders[k * stride + i] = nc->list[(i + c0 + k) % m];
    return commSuccess;
  }
  COMMCHECKGOTO(commCalloc(&devs, (size_t)m, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&devOf, (size_t)m, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&devOrder, (size_t)m, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&nicOf, (size_t)m, sizeof(int)), res, exit);
  /* Distinct devices, in order of their first rank (slot: a host node's position in devs, -1 none). */
  const commTopoHost* th = &topo->hosts[host];
  COMMCHECKGOTO(commCalloc(&slot, (size_t)th->nNodes, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&byDev, (size_t)m + 1, sizeof(int)), res, exit);
  for (int i = 0; i < th->nNodes; i++) slot[i] = -1;
  int nd = 0;
  for (int i = 0; i < m; i++) {
    int d = nc->ranks[nc->list[i]].dev - th->firstNode;
    if (slot[d] < 0) {
      slot[d] = nd;
      devs[nd++] = d + th->firstNode;
    }
    devOf[i] = slot[d];
  }
  /* Per device: its equally nearest NICs, its ranks' count, the start of its ranks in byDev (the ranks of
   * each device in rank order, a counting sort); devCount: nearest, ranks, starts (nd + 1), seen. */
  COMMCHECKGOTO(commCalloc(&devNics, (size_t)nd * MAX_NODE_NICS, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&devCount, (size_t)nd * 4 + 1, sizeof(int)), res, exit);
  int *nNear = devCount, *nRanksOf = devCount + nd, *devStart = devCount + 2 * nd, *seen = devCount + 3 * nd + 1;
  for (int k = 0; k < nd; k++) nNear[k] = nearestNics(topo, devs[k], devNics + (size_t)k * MAX_NODE_NICS);
  for (int i = 0; i < m; i++) nRanksOf[devOf[i]]++;
  for (int k = 0; k < nd; k++) devStart[k + 1] = devStart[k] + nRanksOf[k];
  for (int i = 0; i < m; i++) byDev[devStart[devOf[i]] + seen[devOf[i]]++] = i;
  for (int k = 0; k < nCh; k++) {
    int channel = c0 + k, *order = orders + k * stride;
    /* The entry NIC: the channel turns through the NICs the node's ranks use on it (by NIC index); the
     * start rank is one of its users nearest to it, turning through those as channels come back to it. */
    int used[MAX_NODE_NICS], nUsed = 0;
    memset(seen, 0, sizeof(int) * (size_t)nd);
    for (int i = 0; i < m; i++) {
      /* as nodeRankNic, with the per-device counts made once */
      int d = devOf[i], li = seen[d]++, nShare = nRanksOf[d];
      nicOf[i] = nNear[d] ? devNics[(size_t)d * MAX_NODE_NICS + (li + (nShare == 1 ? channel : 0)) % nNear[d]] : -1;
      if (nicOf[i] < 0) continue;
      int u;
      for (u = 0; u < nUsed; u++)
        if (used[u] == nicOf[i]) break;
      if (u == nUsed && nUsed < MAX_NODE_NICS) {
        int j = nUsed++;
        while (j > 0 && used[j - 1] > nicOf[i]) {
          used[j] = used[j - 1];
          j--;
        }
        used[j] = nicOf[i];
      }
    }
    int start = channel % m, end = -1; /* indices in list */
    if (nUsed > 0) {
      start = nicUser(nc, nicOf, used[channel % nUsed], channel / nUsed);
      /* Leave through the NIC the previous channel enters by, so that over nUsed channels every NIC carries
       * one ring into the node and one out of it. */
      if (nUsed > 1) end = nicUser(nc, nicOf, used[(channel + nUsed - 1) % nUsed], channel / nUsed);
    }
    COMMCHECKGOTO(searchOrder(topo, devs, nd, devOf[start], end >= 0 ? devOf[end] : -1, cycle, devOrder), res, exit);
    /* Expand devices into ranks: the start device's ranks from the start rank on (turning), the others in
     * rank order. */
    int pos = 0;
    for (int t = 0; t < nd; t++) {
      int d = devOrder[t], lo = devStart[d], hi = devStart[d + 1], first = lo;
      if (t == 0)
        while (first < hi && byDev[first] < start) first++;
      for (int q = 0; q < hi - lo; q++)
        order[pos++] = nc->list[byDev[first + q < hi ? first + q : first + q - (hi - lo)]];
    }
  }
exit:
  free(slot);
  free(byDev);
  free(devs);
  free(devOf);
  free(devOrder);
  free(nicOf);
  free(devNics);
  free(devCount);
  return res;
}

static int countNodes(const commTopoRank* ranks, int nRanks) {
  int n = 0;
  for (int r = 0; r < nRanks; r++)
    if (ranks[r].node + 1 > n) n = ranks[r].node + 1;
  return n;
}

int commTopoNodeOrders(const commTopo* topo, const commTopoRank* ranks, int nRanks, int node, int channel,
                       int nChannels, int* orders) {
  int* list = malloc(sizeof(int) * (size_t)(nRanks > 0 ? nRanks : 1));
  if (list == NULL) return 0;
  nodeCtx nc = {topo, ranks, list, nodeRanks(ranks, nRanks, node, list)};
  int m = nc.m;
  if (m > 0 && nodeOrders(&nc, channel, nChannels, countNodes(ranks, nRanks) == 1, orders, (size_t)m) != commSuccess)
    m = 0;
  free(list);
  return m;
}

int commTopoNodeOrder(const commTopo* topo, const commTopoRank* ranks, int nRanks, int node, int channel, int* order) {
  return commTopoNodeOrders(topo, ranks, nRanks, node, channel, 1, order);
}

commResult_t commTopoRings(const commTopo* topo, const commTopoRank* ranks, int nRanks, int nNodes, int nChannels,
                           int* rings) {
  commResult_t res = commSuccess;
  int *start = NULL, *byNode = NULL;
  for (int r = 0; r < nRanks; r++) {
    if (ranks[r].node < 0 || ranks[r].node >= nNodes) {
      WARN("topology: rank %d is on node %d of %d", r, ranks[r].node, nNodes);
      return commInvalidArgument;
    }
  }
  /* Ranks grouped by node (counting sort, rank order within a node). */
  COMMCHECKGOTO(commCalloc(&start, (size_t)nNodes + 1, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&byNode, (size_t)nRanks + 1, sizeof(int)), res, exit);
  for (int r = 0; r < nRanks; r++) start[ranks[r].node + 1]++;
  for (int v = 0; v < nNodes; v++) start[v + 1] += start[v];
  for (int r = 0; r < nRanks; r++) byNode[start[ranks[r].node]++] = r;
  for (int v = nNodes; v > 0; v--) start[v] = start[v - 1];
  start[0] = 0;
  for (int v = 0; v < nNodes && nChannels > 0; v++) {
    nodeCtx nc = {topo, ranks, byNode + start[v], start[v + 1] - start[v]};
    if (nc.m == 0) continue;
    COMMCHECKGOTO(nodeOrders(&nc, 0, nChannels, nNodes == 1, rings + start[v], (size_t)nRanks), res, exit);
  }
exit:
  free(start);
  free(byNode);
  return res;
}

/* ---- Transport rules ---- */

static int levelParam(const char* name, int def) {
  const char* v = commParamStr(name, NULL);
  if (v == NULL) return def;
  char* end = NULL;
  long x = strtol(v, &end, 10);
  if (end != v && *end == '\0' && x >= 0 && x <= COMM_PATH_SYS) return (int)x;
  int t = commTopoPathFromName(v);
  if (t >= 0 && t <= COMM_PATH_SYS) return t;
  WARN("%s=%s is not a path class (LOC, NVL, PIX, PXB, PHB, SYS or 0-5); using %s", name, v, commTopoPathName(def));
  return def;
}

int commTopoP2pLevel(void) { return levelParam("COMM_P2P_LEVEL", COMM_PATH_PXB); }
int commTopoGdrLevel(void) { return levelParam("COMM_NET_GDR_LEVEL", COMM_PATH_PXB); }

static int isGpu(const commTopo* topo, int dev) {
  return topo && dev >= 0 && dev < topo->nNodes && topo->nodes[dev].type == COMM_TOPO_GPU;
}

/* GPUDirect RDMA for a GPU rank through its NIC on channel 0; why[] says which rule decided. */
static int gdrAllowed(const commTopo* topo, const commTopoRank* ranks, int nRanks, int r, char* why, size_t len) {
  int nic = commTopoRankNic(topo, ranks, nRanks, r, 0);
  char g[96], n[96];
  if (nic < 0) {
    snprintf(why, len, "rank %d has no NIC", r);
    return 0;
  }
  commTopoNodeLabel(topo, ranks[r].dev, g, sizeof(g));
  commTopoNodeLabel(topo, nic, n, sizeof(n));
  commTopoPath p = commTopoPathOf(topo, ranks[r].dev, nic);
  int level = commTopoGdrLevel();
  if (!topo->nodes[nic].u.nic.gdr) {
    snprintf(why, len, "%s cannot read GPU memory (no GPUDirect RDMA support)", n);
    return 0;
  }
  if (p.type > level) {
    snprintf(why, len, "%s-%s path %s is beyond COMM_NET_GDR_LEVEL %s", g, n, commTopoPathName(p.type),
             commTopoPathName(level));
    return 0;
  }
  snprintf(why, len, "%s-%s path %s within COMM_NET_GDR_LEVEL %s", g, n, commTopoPathName(p.type),
           commTopoPathName(level));
  return 1;
}

commResult_t commTopoChooseTransport(const commTopo* topo, const commTopoRank* ranks, int nRanks, int a, int b,
                                     commTopoTransportChoice* out) {
  memset(out, 0, sizeof(*out));
  if (a < 0 || b < 0 || a >= nRanks || b >= nRanks) {
    WARN("topology: transport between ranks %d and %d of %d", a, b, nRanks);
    return commInvalidArgument;
  }
  const commTopoRank *ra = &ranks[a], *rb = &ranks[b];
  int known = topo != NULL && ra->dev >= 0 && rb->dev >= 0 && ra->dev < topo->nNodes && rb->dev < topo->nNodes;
  out->pathType = known ? commTopoPathOf(topo, ra->dev, rb->dev).type
                        : (ra->node == rb->node ? COMM_PATH_SYS : COMM_PATH_NET);
  if (ra->node != rb->node) {
    out->transport = COMM_TOPO_USE_NET;
    if (known && isGpu(topo, ra->dev) && isGpu(topo, rb->dev)) {
      char wa[256], wb[256];
      int ga = gdrAllowed(topo, ranks, nRanks, a, wa, sizeof(wa));
      int gb = gdrAllowed(topo, ranks, nRanks, b, wb, sizeof(wb));
      out->gdr = ga && gb;
      out->fallback = !out->gdr;
      snprintf(out->why, sizeof(out->why), "different nodes; GDR %s: %s", out->gdr ? "on" : "off",
               !ga   ? wa
               : !gb ? wb
                     : wa);
    } else {
      snprintf(out->why, sizeof(out->why), "different nodes");
    }
    return commSuccess;
  }
  if (known && isGpu(topo, ra->dev) && isGpu(topo, rb->dev)) {
    int level = commTopoP2pLevel();
    if (out->pathType <= level) {
      out->transport = COMM_TOPO_USE_P2P;
      snprintf(out->why, sizeof(out->why), "GPU path %s within COMM_P2P_LEVEL %s", commTopoPathName(out->pathType),
               commTopoPathName(level));
    } else {
      out->transport = COMM_TOPO_USE_SHM;
      out->fallback = 1;
      snprintf(out->why, sizeof(out->why), "GPU path %s is beyond COMM_P2P_LEVEL %s: shared memory",
               commTopoPathName(out->pathType), commTopoPathName(level));
    }
    return commSuccess;
  }
  out->transport = COMM_TOPO_USE_SHM;
  snprintf(out->why, sizeof(out->why), "same node, host memory");
  return commSuccess;
}

/* ---- Thread binding ---- */

/* Linux cpu list ("0-3,8,10-11") into a cpu set; 0 if malformed or empty. */
static int parseCpuList(const char* s, cpu_set_t* set) {
  CPU_ZERO(set);
  int any = 0;
  while (*s) {
    char* end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s || a < 0) return 0;
    s = end;
    if (*s == '-') {
      b = strtol(s + 1, &end, 10);
      if (end == s + 1 || b < a) return 0;
      s = end;
    }
    for (long i = a; i <= b && i < CPU_SETSIZE; i++) {
      CPU_SET((int)i, set);
      any = 1;
    }
    if (*s == ',') s++;
    else if (*s) return 0;
  }
  return any;
}

int commBindThreadToCpuList(pthread_t thread, const char* cpus, const char* what, const char* near) {
  cpu_set_t want, allowed, both;
  if (cpus == NULL || !parseCpuList(cpus, &want) || sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    INFO(COMM_TOPO, "%s not bound: cpu list \"%s\" unusable", what, cpus ? cpus : "");
    return 0;
  }
  CPU_AND(&both, &want, &allowed);
  if (CPU_COUNT(&both) == 0) {
    INFO(COMM_TOPO, "%s not bound: the cores %s (near %s) are not among this thread's allowed cores", what, cpus, near);
    return 0;
  }
  int err = pthread_setaffinity_np(thread, sizeof(both), &both);
  if (err != 0) {
    INFO(COMM_TOPO, "%s not bound: pthread_setaffinity_np: %s", what, strerror(err));
    return 0;
  }
  INFO(COMM_TOPO, "%s bound to %d core(s) of %s, near %s", what, CPU_COUNT(&both), cpus, near);
  return 1;
}

commResult_t commTopoBindThread(const commTopo* topo, int node, const char* what) {
  if (topo == NULL || node < 0 || node >= topo->nNodes) return commSuccess;
  int cpu = commTopoCpuOf(topo, node);
  if (cpu < 0) return commSuccess;
  char lab[96], near[160];
  commTopoNodeLabel(topo, node, lab, sizeof(lab));
  snprintf(near, sizeof(near), "%s (CPU%d, NUMA %d)", lab, topo->nodes[cpu].index, topo->nodes[cpu].u.cpu.numa);
  commBindThreadToCpuList(pthread_self(), topo->nodes[cpu].u.cpu.cpus, what, near);
  return commSuccess;
}

int commTopoCallerCpu(const commTopo* topo, int host) {
  if (topo == NULL || host < 0 || host >= topo->nHosts) return -1;
  cpu_set_t allowed, cpus, both;
  int haveAllowed = sched_getaffinity(0, sizeof(allowed), &allowed) == 0;
  const commTopoHost* h = &topo->hosts[host];
  int best = -1, bestCount = -1;
  for (int n = h->firstNode; n < h->firstNode + h->nNodes; n++) {
    if (topo->nodes[n].type != COMM_TOPO_CPU) continue;
    int count = 0;
    if (haveAllowed && parseCpuList(topo->nodes[n].u.cpu.cpus, &cpus)) {
      CPU_AND(&both, &cpus, &allowed);
      count = CPU_COUNT(&both);
    }
    if (count > bestCount) {
      best = n;
      bestCount = count;
    }
  }
  return best;
}
