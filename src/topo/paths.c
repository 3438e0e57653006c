/* Best paths between the nodes of each host (see src/topo/topo.h, "Paths"), computed by commTopoFinish.
 *
 * One label-setting search per source node (Dijkstra over lexicographic labels): every extension makes a
 * label worse in the order class, PCI switches passed, bottleneck bandwidth, hops, so the first label
 * fixed at a node is its best. The next node to fix is the best label, the lowest index among equal ones
 * (what a scan in index order picks); it comes from a binary heap of integer keys that encode exactly that
 * order, so a host of n nodes and m links costs O(n (n + m) log n). Scanning every node for the minimum,
 * as this did first, is O(n^3): 1.5 s for one host of 1,022 nodes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "graph_internal.h"
#include "utils.h"

/* A path label during the search: class, PCI switches passed, bottleneck, hops, latency; bwRank is the
 * bottleneck's rank among the host's link bandwidths (0: none yet, then from the highest), so that `key`
 * orders labels (and then nodes) as labelBetter does with one integer compare. */
typedef struct {
  int cls, nSwitch, hops, bwRank;
  double bw, lat;
} pathLabel;

/* Field widths of the key: class 3 bits, switches 12, bandwidth rank 17, hops 12, node 20. Hosts beyond
 * them (never from a file: at most 1,024 nodes) compare labels field by field. */
#define KEY_MAX_NODES 4096
#define KEY_MAX_BWS ((1 << 17) - 1)
static uint64_t labelKey(const pathLabel* l, int node) {
  return (uint64_t)l->cls << 61 | (uint64_t)l->nSwitch << 49 | (uint64_t)l->bwRank << 32 | (uint64_t)l->hops << 20 |
         (uint64_t)node;
}

static int labelBetter(const pathLabel* x, const pathLabel* y) {
  if (x->cls != y->cls) return x->cls < y->cls;
  if (x->nSwitch != y->nSwitch) return x->nSwitch < y->nSwitch;
  if (x->bw != y->bw) return x->bw > y->bw;
  return x->hops < y->hops;
}

static int isEndpointOnly(int type) { return type == COMM_TOPO_GPU || type == COMM_TOPO_NIC; }

/* One link end as the search reads it: far node (local index), class it gives a path, bandwidth (and its
 * rank), latency. */
typedef struct {
  int v, cls, bwRank;
  double bw, lat;
} pathEdge;

/* The search's scratch, sized for the largest host. */
typedef struct {
  pathLabel* lab;
  char* done;
  uint64_t* key;  /* each node's current key */
  uint64_t* heap; /* min-heap of keys; a key no longer its node's current one is skipped when it comes out */
  int nHeap;
  int* first; /* host-local adjacency: edges[first[u] .. first[u + 1]) */
  pathEdge* edges;
  double* bws; /* scratch: the host's distinct link bandwidths */
  /* The previous host's edge lists, to see that host h is the same as h - 1 */
  int* prevFirst;
  pathEdge* prevEdges;
  int useKey; /* the host fits the key's fields; else the node is found by a scan (slow, but exact) */
} pathSearch;

static void heapPush(pathSearch* S, uint64_t k) {
  int i = S->nHeap++;
  while (i > 0 && k < S->heap[(i - 1) / 2]) {
    S->heap[i] = S->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  S->heap[i] = k;
}

static uint64_t heapPop(pathSearch* S) {
  uint64_t top = S->heap[0], last = S->heap[--S->nHeap];
  int i = 0, n = S->nHeap;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && S->heap[c + 1] < S->heap[c]) c++;
    if (S->heap[c] >= last) break;
    S->heap[i] = S->heap[c];
    i = c;
  }
  if (n > 0) S->heap[i] = last;
  return top;
}

/* The next node to fix: the best label, then the lowest index; -1 when none is left. */
static int nextNode(pathSearch* S, int n) {
  if (S->useKey) {
    while (S->nHeap > 0) {
      uint64_t k = heapPop(S);
      int u = (int)(k & 0xfffff);
      if (!S->done[u] && S->key[u] == k) return u;
    }
    return -1;
  }
  int u = -1;
  for (int i = 0; i < n; i++)
    if (!S->done[i] && S->lab[i].cls != COMM_PATH_DIS && (u < 0 || labelBetter(&S->lab[i], &S->lab[u]))) u = i;
  return u;
}

static int cmpBwDesc(const void* x, const void* y) {
  double a = *(const double*)x, b = *(const double*)y;
  return (a < b) - (a > b);
}

/* Host h's links as host-local edge lists, with the rank of each bandwidth (1 for the highest). */
static void hostEdges(const commTopo* topo, int h, pathSearch* S) {
  const commTopoHost* host = &topo->hosts[h];
  int n = host->nNodes, base = host->firstNode, e = 0;
  for (int u = 0; u < n; u++) {
    const commTopoNode* un = &topo->nodes[base + u];
    S->first[u] = e;
    for (int k = 0; k < un->nLinks; k++) {
      const commTopoLink* l = &topo->links[topo->adj[un->firstLink + k]];
      int cls = l->type == COMM_LINK_NVL ? COMM_PATH_NVL : l->type == COMM_LINK_PCI ? COMM_PATH_PIX : COMM_PATH_SYS;
      S->bws[e] = l->bw;
      S->edges[e++] = (pathEdge){(l->a == base + u ? l->b : l->a) - base, cls, 0, l->bw, l->latUs};
    }
  }
  S->first[n] = e;
  qsort(S->bws, (size_t)e, sizeof(double), cmpBwDesc);
  int nb = 0;
  for (int i = 0; i < e; i++)
    if (nb == 0 || S->bws[i] != S->bws[nb - 1]) S->bws[nb++] = S->bws[i];
  S->useKey = n <= KEY_MAX_NODES && nb < KEY_MAX_BWS;
  for (int i = 0; i < e && S->useKey; i++) { /* binary search of the edge's bandwidth among the distinct ones */
    int lo = 0, hi = nb - 1;
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      if (S->bws[mid] > S->edges[i].bw) lo = mid + 1;
      else hi = mid;
    }
    S->edges[i].bwRank = lo + 1;
  }
}

/* Best paths from local node s to every node of host h into out[0 .. n). */
static void pathsFrom(const commTopo* topo, int h, int s, pathSearch* S, commTopoPath* out) {
  const commTopoHost* host = &topo->hosts[h];
  int n = host->nNodes, base = host->firstNode;
  pathLabel* lab = S->lab;
  for (int i = 0; i < n; i++) {
    lab[i].cls = COMM_PATH_DIS;
    S->done[i] = 0;
  }
  lab[s] = (pathLabel){COMM_PATH_LOC, 0, 0, 0, 1e300, 0};
  S->nHeap = 0;
  if (S->useKey) heapPush(S, S->key[s] = labelKey(&lab[s], s));
  for (;;) {
    int u = nextNode(S, n);
    if (u < 0) break;
    S->done[u] = 1;
    const commTopoNode* un = &topo->nodes[base + u];
    if (u != s && isEndpointOnly(un->type)) continue; /* paths never pass through a GPU or a NIC */
    pathLabel via = lab[u];
    if (u != s) {
      if (un->type == COMM_TOPO_PCI && ++via.nSwitch >= 2 && via.cls < COMM_PATH_PXB) via.cls = COMM_PATH_PXB;
      if (un->type == COMM_TOPO_CPU && via.cls < COMM_PATH_PHB) via.cls = COMM_PATH_PHB;
    }
    for (int k = S->first[u]; k < S->first[u + 1]; k++) {
      const pathEdge* ed = &S->edges[k];
      int v = ed->v;
      if (S->done[v]) continue;
      pathLabel nl = via;
      if (nl.cls < ed->cls) nl.cls = ed->cls;
      if (ed->bw < nl.bw) {
        nl.bw = ed->bw;
        nl.bwRank = ed->bwRank;
      }
      nl.hops++;
      nl.lat += ed->lat;
      if (lab[v].cls != COMM_PATH_DIS && !labelBetter(&nl, &lab[v])) continue;
      lab[v] = nl;
      if (S->useKey) heapPush(S, S->key[v] = labelKey(&nl, v));
    }
  }
  for (int i = 0; i < n; i++) {
    commTopoPath p = {COMM_PATH_DIS, 0, 0, 0};
    if (lab[i].cls != COMM_PATH_DIS) {
      int cls = lab[i].cls;
      /* A path that starts or ends at a CPU is "same CPU" at best. */
      if (i != s && cls < COMM_PATH_PHB &&
          (topo->nodes[base + s].type == COMM_TOPO_CPU || topo->nodes[base + i].type == COMM_TOPO_CPU))
        cls = COMM_PATH_PHB;
      p.type = (uint8_t)cls;
      p.hops = (uint8_t)(lab[i].hops > 255 ? 255 : lab[i].hops);
      p.bw = i == s ? 0 : (float)lab[i].bw;
      p.latUs = (float)lab[i].lat;
    }
    out[i] = p;
  }
}

/* Host h has the same nodes (types, in order) and links as host h - 1, whose edges S->prev* hold: then its
 * paths are the same (pathsFrom reads nothing else). */
static int sameAsPrevious(const commTopo* topo, int h, const pathSearch* S) {
  const commTopoHost *a = &topo->hosts[h], *b = &topo->hosts[h - 1];
  int n = a->nNodes;
  if (n != b->nNodes || memcmp(S->first, S->prevFirst, sizeof(int) * ((size_t)n + 1)) != 0) return 0;
  for (int i = 0; i < n; i++)
    if (topo->nodes[a->firstNode + i].type != topo->nodes[b->firstNode + i].type) return 0;
  for (int e = 0; e < S->first[n]; e++) {
    const pathEdge *x = &S->edges[e], *y = &S->prevEdges[e];
    if (x->v != y->v || x->cls != y->cls || x->bwRank != y->bwRank || x->bw != y->bw || x->lat != y->lat) return 0;
  }
  return 1;
}

commResult_t commTopoComputePaths(commTopo* topo) {
  commResult_t res = commSuccess;
  pathSearch S = {0};
  int maxN = 1, maxE = 1;
  for (int h = 0; h < topo->nHosts; h++) {
    const commTopoHost* host = &topo->hosts[h];
    int e = 0;
    for (int i = host->firstNode; i < host->firstNode + host->nNodes; i++) e += topo->nodes[i].nLinks;
    if (host->nNodes > maxN) maxN = host->nNodes;
    if (e > maxE) maxE = e;
  }
  COMMCHECK(commCalloc(&topo->paths, (size_t)topo->nHosts, sizeof(commTopoPath*)));
  COMMCHECKGOTO(commCalloc(&S.lab, (size_t)maxN, sizeof(pathLabel)), res, exit);
  COMMCHECKGOTO(commCalloc(&S.done, (size_t)maxN, 1), res, exit);
  COMMCHECKGOTO(commCalloc(&S.heap, (size_t)maxE + 1, sizeof(uint64_t)), res, exit);
  COMMCHECKGOTO(commCalloc(&S.first, (size_t)maxN + 1, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&S.edges, (size_t)maxE, sizeof(pathEdge)), res, exit);
  COMMCHECKGOTO(commCalloc(&S.bws, (size_t)maxE, sizeof(double)), res, exit);
  COMMCHECKGOTO(commCalloc(&S.key, (size_t)maxN, sizeof(uint64_t)), res, exit);
  COMMCHECKGOTO(commCalloc(&S.prevFirst, (size_t)maxN + 1, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&S.prevEdges, (size_t)maxE, sizeof(pathEdge)), res, exit);
  for (int h = 0; h < topo->nHosts; h++) {
    int n = topo->hosts[h].nNodes;
    hostEdges(topo, h, &S);
    /* A cluster file repeats its machine: hosts like the one before share its table (commTopoFree frees a
     * run of shared tables once). */
    if (h > 0 && sameAsPrevious(topo, h, &S)) {
      topo->paths[h] = topo->paths[h - 1];
      continue;
    }
    COMMCHECKGOTO(commCalloc(&topo->paths[h], (size_t)n * n + 1, sizeof(commTopoPath)), res, exit);
    for (int s = 0; s < n; s++) pathsFrom(topo, h, s, &S, topo->paths[h] + (size_t)s * n);
    memcpy(S.prevFirst, S.first, sizeof(int) * ((size_t)n + 1));
    memcpy(S.prevEdges, S.edges, sizeof(pathEdge) * (size_t)S.first[n]);
  }
exit:
  free(S.lab);
  free(S.heap);
  free(S.done);
  free(S.first);
  free(S.edges);
  free(S.bws);
  free(S.prevFirst);
  free(S.prevEdges);
  free(S.key);
  return res;
}
