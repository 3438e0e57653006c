/* The topology graph: builder, links, best paths and queries (see src/topo/topo.h). */
#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "debug.h"
#include "graph_internal.h"
#include "param.h"
#include "topo.h"
#include "utils.h"

/* Nominal link latencies (µs per hop); they order paths of equal class and bandwidth by length. */
#define LAT_NVL 0.6
#define LAT_PCI 1.0
#define LAT_SYS 1.5
/* Bandwidths used where the topology does not say (GB/s per direction). */
#define DEFAULT_PCI_BW 12.0 /* PCIe gen3 x16 */

static double defaultCpuLinkBw(const commTopo* topo, int host) {
  const commTopoHost* h = &topo->hosts[host];
  if (h->cpuLinkBw > 0) return h->cpuLinkBw;
  /* The arch of the host's first CPU: inter-socket links of current parts (UPI / Infinity Fabric / X-Bus
   * / CCIX) are 20-60 GB/s per direction; aarch64 and POWER parts are near the bottom of that range. */
  for (int n = h->firstNode; n < h->firstNode + h->nNodes; n++) {
    if (topo->nodes[n].type != COMM_TOPO_CPU) continue;
    if (strcmp(topo->nodes[n].u.cpu.arch, "x86_64") == 0) return 40.0;
    return 32.0;
  }
  return 40.0;
}

double commTopoPciBw(double gts, int width) {
  double enc = gts <= 5.0 ? 0.8 : gts <= 32.0 ? 128.0 / 130.0 : 242.0 / 256.0;
  return gts * enc * width / 8.0;
}

static const double pciRates[6] = {2.5, 5.0, 8.0, 16.0, 32.0, 64.0};

int commTopoPciGen(double gts) {
  for (int g = 0; g < 6; g++)
    if (gts > pciRates[g] * 0.9 && gts < pciRates[g] * 1.1) return g + 1;
  return 0;
}

double commTopoPciGts(int gen) { return gen >= 1 && gen <= 6 ? pciRates[gen - 1] : 0; }

double commTopoNvlinkBw(int sm) {
  if (sm <= 0) return 20.0;
  if (sm < 70) return 20.0;
  if (sm < 80) return 25.0;
  if (sm == 86) return 14.0;
  if (sm < 100) return 25.0;
  if (sm < 110) return 50.0;
  return 20.0;
}

commResult_t commTopoCreate(commTopo** out) {
  *out = NULL;
  COMMCHECK(commCalloc(out, 1, sizeof(commTopo)));
  return commSuccess;
}

void commTopoFree(commTopo* topo) {
  if (topo == NULL) return;
  if (topo->paths) {
    for (int h = 0; h < topo->nHosts; h++) /* identical consecutive hosts share a table (paths.c) */
      if (h == 0 || topo->paths[h] != topo->paths[h - 1]) free(topo->paths[h]);
    free(topo->paths);
  }
  free(topo->hosts);
  free(topo->nodes);
  free(topo->links);
  free(topo->adj);
  free(topo->nvreq);
  free(topo->typeNodes);
  free(topo);
}

/* Grows an array of `elem`-byte entries to hold at least n + 1. */
static commResult_t grow(void* arrPtr, int n, int* cap, size_t elem) {
  if (n < *cap) return commSuccess;
  int newCap = *cap ? *cap * 2 : 16;
  COMMCHECK(commRealloc(arrPtr, (size_t)*cap, (size_t)newCap, elem));
  *cap = newCap;
  return commSuccess;
}

commResult_t commTopoAddHost(commTopo* topo, const char* name, int* host) {
  if (topo->finished) {
    WARN("topology: cannot add a host to a finished topology");
    return commInternalError;
  }
  COMMCHECK(grow(&topo->hosts, topo->nHosts, &topo->hostsCap, sizeof(commTopoHost)));
  commTopoHost* h = &topo->hosts[topo->nHosts];
  memset(h, 0, sizeof(*h));
  snprintf(h->name, sizeof(h->name), "%s", name ? name : "");
  *host = topo->nHosts++;
  return commSuccess;
}

commResult_t commTopoAddNode(commTopo* topo, int host, int type, int parent, int* node) {
  if (topo->finished) {
    WARN("topology: cannot add a node to a finished topology");
    return commInternalError;
  }
  if (host < 0 || host >= topo->nHosts || type < 0 || type >= COMM_TOPO_NODE_TYPES || parent < -1 ||
      parent >= topo->nNodes) {
    WARN("topology: bad node (host %d of %d, type %d, parent %d of %d)", host, topo->nHosts, type, parent,
         topo->nNodes);
    return commInvalidArgument;
  }
  COMMCHECK(grow(&topo->nodes, topo->nNodes, &topo->nodesCap, sizeof(commTopoNode)));
  commTopoNode* n = &topo->nodes[topo->nNodes];
  memset(n, 0, sizeof(*n));
  n->type = type;
  n->host = host;
  n->parent = parent;
  if (type == COMM_TOPO_CPU) n->u.cpu.numa = -1;
  if (type == COMM_TOPO_GPU) n->u.gpu.dev = -1;
  *node = topo->nNodes++;
  return commSuccess;
}

commResult_t commTopoAddNvlink(commTopo* topo, int gpu, int peer, int count, double bw) {
  if (topo->finished) {
    WARN("topology: cannot add an NVLink to a finished topology");
    return commInternalError;
  }
  if (gpu < 0 || gpu >= topo->nNodes || peer < 0 || peer >= topo->nNodes || count < 1 || !(bw >= 0)) {
    WARN("topology: bad NVLink (%d -> %d, count %d, bw %.1f)", gpu, peer, count, bw);
    return commInvalidArgument;
  }
  COMMCHECK(grow(&topo->nvreq, topo->nNvreq, &topo->nvreqCap, sizeof(*topo->nvreq)));
  topo->nvreq[topo->nNvreq++] = (struct commTopoNvlinkReq){gpu, peer, count, bw};
  return commSuccess;
}

/* ---- Finish: renumber, validate, link, paths ---- */

static commResult_t renumberByHost(commTopo* topo) {
  int n = topo->nNodes;
  int* newIdx = NULL;
  commTopoNode* sorted = NULL;
  commResult_t res = commSuccess;
  COMMCHECKGOTO(commCalloc(&newIdx, (size_t)n + 1, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&sorted, (size_t)n + 1, sizeof(commTopoNode)), res, exit);
  /* Counting sort by host, stable. */
  for (int h = 0; h < topo->nHosts; h++) topo->hosts[h].nNodes = 0;
  for (int i = 0; i < n; i++) topo->hosts[topo->nodes[i].host].nNodes++;
  int pos = 0;
  for (int h = 0; h < topo->nHosts; h++) {
    topo->hosts[h].firstNode = pos;
    pos += topo->hosts[h].nNodes;
  }
  for (int h = 0; h < topo->nHosts; h++) topo->hosts[h].nNodes = 0;
  for (int i = 0; i < n; i++) {
    commTopoHost* h = &topo->hosts[topo->nodes[i].host];
    newIdx[i] = h->firstNode + h->nNodes++;
  }
  for (int i = 0; i < n; i++) {
    sorted[newIdx[i]] = topo->nodes[i];
    if (sorted[newIdx[i]].parent >= 0) sorted[newIdx[i]].parent = newIdx[topo->nodes[i].parent];
  }
  memcpy(topo->nodes, sorted, (size_t)n * sizeof(commTopoNode));
  for (int i = 0; i < topo->nNvreq; i++) {
    topo->nvreq[i].gpu = newIdx[topo->nvreq[i].gpu];
    topo->nvreq[i].peer = newIdx[topo->nvreq[i].peer];
  }
exit:
  free(newIdx);
  free(sorted);
  return res;
}

static commResult_t validate(commTopo* topo) {
  char lab[96];
  for (int h = 0; h < topo->nHosts; h++) {
    commTopoHost* host = &topo->hosts[h];
    host->nCpus = host->nGpus = host->nNics = 0;
    int counts[COMM_TOPO_NODE_TYPES] = {0};
    for (int i = host->firstNode; i < host->firstNode + host->nNodes; i++) {
      commTopoNode* nd = &topo->nodes[i];
      nd->index = counts[nd->type]++;
    }
    host->nCpus = counts[COMM_TOPO_CPU];
    host->nGpus = counts[COMM_TOPO_GPU];
    host->nNics = counts[COMM_TOPO_NIC];
    if (host->nCpus == 0) {
      WARN("topology: host %d (%s) has no CPU", h, host->name[0] ? host->name : "unnamed");
      return commInvalidArgument;
    }
    if (counts[COMM_TOPO_NVS] > 1) {
      WARN("topology: host %d (%s) has %d NVSwitch nodes; one stands for all of a host's NVSwitches", h, host->name,
           counts[COMM_TOPO_NVS]);
      return commInvalidArgument;
    }
  }
  for (int i = 0; i < topo->nNodes; i++) {
    commTopoNode* nd = &topo->nodes[i];
    int rootless = nd->type == COMM_TOPO_CPU || nd->type == COMM_TOPO_NVS;
    if (rootless && nd->parent != -1) {
      WARN("topology: %s cannot have a parent", commTopoNodeLabel(topo, i, lab, sizeof(lab)));
      return commInvalidArgument;
    }
    if (rootless) continue;
    /* Walk up: PCI nodes only, then a CPU of the same host, within nNodes steps (no cycles). */
    int p = nd->parent, steps = 0;
    while (p >= 0 && topo->nodes[p].type == COMM_TOPO_PCI && topo->nodes[p].host == nd->host && steps <= topo->nNodes) {
      p = topo->nodes[p].parent;
      steps++;
    }
    if (p < 0 || topo->nodes[p].type != COMM_TOPO_CPU || topo->nodes[p].host != nd->host) {
      WARN("topology: %s does not hang below a CPU of its host through PCI nodes",
           commTopoNodeLabel(topo, i, lab, sizeof(lab)));
      return commInvalidArgument;
    }
    if (!(nd->bw >= 0) || nd->bw > 1e6) {
      WARN("topology: %s has a bad bandwidth %g", commTopoNodeLabel(topo, i, lab, sizeof(lab)), nd->bw);
      return commInvalidArgument;
    }
  }
  for (int i = 0; i < topo->nNvreq; i++) {
    struct commTopoNvlinkReq* r = &topo->nvreq[i];
    const commTopoNode* g = &topo->nodes[r->gpu];
    const commTopoNode* q = &topo->nodes[r->peer];
    if (g->type != COMM_TOPO_GPU || (q->type != COMM_TOPO_GPU && q->type != COMM_TOPO_NVS) || r->gpu == r->peer ||
        g->host != q->host) {
      WARN("topology: an NVLink must join a GPU to another GPU or the NVSwitch of its host (%s -> %s)",
           commTopoNodeLabel(topo, r->gpu, lab, sizeof(lab)), commTopoNodeTypeName(q->type));
      return commInvalidArgument;
    }
  }
  return commSuccess;
}

/* topo->typeNodes: the nodes of every host grouped by type, each group in index order (nodes of a host are
 * numbered in node order within their type, so the index-th entry of a group is the node of that index). */
static commResult_t indexByType(commTopo* topo) {
  COMMCHECK(commCalloc(&topo->typeNodes, (size_t)topo->nNodes + 1, sizeof(int)));
  int pos = 0;
  for (int h = 0; h < topo->nHosts; h++) {
    commTopoHost* host = &topo->hosts[h];
    int end = host->firstNode + host->nNodes;
    for (int t = 0; t < COMM_TOPO_NODE_TYPES; t++) {
      host->typeFirst[t] = pos;
      for (int i = host->firstNode; i < end; i++)
        if (topo->nodes[i].type == t) topo->typeNodes[pos++] = i;
    }
    host->typeFirst[COMM_TOPO_NODE_TYPES] = pos;
  }
  return commSuccess;
}

static commResult_t addLink(commTopo* topo, int a, int b, int type, int count, double bw, double lat) {
  COMMCHECK(grow(&topo->links, topo->nLinks, &topo->linksCap, sizeof(commTopoLink)));
  topo->links[topo->nLinks++] = (commTopoLink){a, b, type, count, bw, lat};
  return commSuccess;
}

/* NVLink requests ordered by their pair of ends (lower node first), then by first end. */
static int nvreqCompare(const void* x, const void* y) {
  const struct commTopoNvlinkReq *a = x, *b = y;
  int alo = a->gpu < a->peer ? a->gpu : a->peer, ahi = a->gpu < a->peer ? a->peer : a->gpu;
  int blo = b->gpu < b->peer ? b->gpu : b->peer, bhi = b->gpu < b->peer ? b->peer : b->gpu;
  if (alo != blo) return alo < blo ? -1 : 1;
  if (ahi != bhi) return ahi < bhi ? -1 : 1;
  return 0;
}

static commResult_t makeLinks(commTopo* topo) {
  for (int i = 0; i < topo->nNodes; i++) {
    const commTopoNode* nd = &topo->nodes[i];
    if (nd->parent < 0) continue;
    double bw = nd->bw;
    if (bw <= 0)
      bw = (nd->type == COMM_TOPO_NIC && nd->u.nic.speedMbps > 0 && nd->busId[0] == '\0') ? nd->u.nic.speedMbps / 8000.0
                                                                                          : DEFAULT_PCI_BW;
    COMMCHECK(addLink(topo, nd->parent, i, COMM_LINK_PCI, 1, bw, LAT_PCI));
  }
  for (int h = 0; h < topo->nHosts; h++) { /* every pair of the host's CPUs, in node order */
    const commTopoHost* host = &topo->hosts[h];
    const int* cpus = topo->typeNodes + host->typeFirst[COMM_TOPO_CPU];
    double bw = defaultCpuLinkBw(topo, h);
    for (int i = 0; i < host->nCpus; i++)
      for (int j = i + 1; j < host->nCpus; j++)
        COMMCHECK(addLink(topo, cpus[i], cpus[j], COMM_LINK_SYS, 1, bw, LAT_SYS));
  }
  /* NVLinks: one bundle per pair of ends, whichever end declared them and however many times. */
  if (topo->nNvreq > 1) qsort(topo->nvreq, (size_t)topo->nNvreq, sizeof(*topo->nvreq), nvreqCompare);
  for (int i = 0; i < topo->nNvreq;) {
    const struct commTopoNvlinkReq* r = &topo->nvreq[i];
    int count = 0, j = i;
    double bw = 0;
    for (; j < topo->nNvreq && nvreqCompare(r, &topo->nvreq[j]) == 0; j++) {
      count += topo->nvreq[j].count;
      bw += topo->nvreq[j].bw;
      if (count > COMM_TOPO_MAX_NVLINKS || bw > 1e6) {
        char lab[96];
        WARN("topology: more than %d NVLinks or 1e6 GB/s between %s and node %d", COMM_TOPO_MAX_NVLINKS,
             commTopoNodeLabel(topo, r->gpu, lab, sizeof(lab)), r->peer);
        return commInvalidArgument;
      }
    }
    COMMCHECK(addLink(topo, r->gpu, r->peer, COMM_LINK_NVL, count, bw, LAT_NVL));
    i = j;
  }
  /* Adjacency: counting sort of link ends by node. */
  COMMCHECK(commCalloc(&topo->adj, (size_t)topo->nLinks * 2 + 1, sizeof(int)));
  for (int i = 0; i < topo->nNodes; i++) topo->nodes[i].nLinks = 0;
  for (int l = 0; l < topo->nLinks; l++) {
    topo->nodes[topo->links[l].a].nLinks++;
    topo->nodes[topo->links[l].b].nLinks++;
  }
  int pos = 0;
  for (int i = 0; i < topo->nNodes; i++) {
    topo->nodes[i].firstLink = pos;
    pos += topo->nodes[i].nLinks;
    topo->nodes[i].nLinks = 0;
  }
  for (int l = 0; l < topo->nLinks; l++) {
    commTopoNode* a = &topo->nodes[topo->links[l].a];
    commTopoNode* b = &topo->nodes[topo->links[l].b];
    topo->adj[a->firstLink + a->nLinks++] = l;
    topo->adj[b->firstLink + b->nLinks++] = l;
  }
  return commSuccess;
}

commResult_t commTopoFinish(commTopo* topo) {
  if (topo->finished) return commSuccess;
  if (topo->nHosts < 1) {
    WARN("topology: no host");
    return commInvalidArgument;
  }
  COMMCHECK(renumberByHost(topo));
  COMMCHECK(validate(topo));
  COMMCHECK(indexByType(topo));
  COMMCHECK(makeLinks(topo));
  COMMCHECK(commTopoComputePaths(topo));
  topo->finished = 1;
  return commSuccess;
}

/* ---- Queries ---- */

int commTopoFind(const commTopo* topo, int host, int type, int index) {
  if (host < 0 || host >= topo->nHosts || type < 0 || type >= COMM_TOPO_NODE_TYPES || index < 0) return -1;
  const commTopoHost* h = &topo->hosts[host];
  if (!topo->finished) { /* no index yet */
    for (int i = h->firstNode; i < h->firstNode + h->nNodes; i++)
      if (topo->nodes[i].type == type && topo->nodes[i].index == index) return i;
    return -1;
  }
  return index < h->typeFirst[type + 1] - h->typeFirst[type] ? topo->typeNodes[h->typeFirst[type] + index] : -1;
}

/* "0000:17:00.0" from "17:00.0" or "0000:17:00.0", lower case; "" when malformed. */
static void normBusId(const char* in, char out[COMM_TOPO_BUSID_MAX]) {
  char tmp[COMM_TOPO_BUSID_MAX + 8];
  size_t len = strlen(in);
  if (len == 7) snprintf(tmp, sizeof(tmp), "0000:%s", in);
  else snprintf(tmp, sizeof(tmp), "%s", in);
  if (strlen(tmp) != 12) {
    out[0] = '\0';
    return;
  }
  for (int i = 0; i < 12; i++) out[i] = (char)tolower((unsigned char)tmp[i]);
  out[12] = '\0';
}

int commTopoFindBusId(const commTopo* topo, int host, const char* busId) {
  if (host < 0 || host >= topo->nHosts || busId == NULL) return -1;
  char want[COMM_TOPO_BUSID_MAX];
  normBusId(busId, want);
  if (want[0] == '\0') return -1;
  const commTopoHost* h = &topo->hosts[host];
  for (int i = h->firstNode; i < h->firstNode + h->nNodes; i++)
    if (strcmp(topo->nodes[i].busId, want) == 0) return i;
  return -1;
}

int commTopoCpuOf(const commTopo* topo, int n) {
  int steps = 0;
  while (n >= 0 && topo->nodes[n].type != COMM_TOPO_CPU && steps++ <= topo->nNodes) n = topo->nodes[n].parent;
  return n >= 0 && topo->nodes[n].type == COMM_TOPO_CPU ? n : -1;
}

static commTopoPath localPath(const commTopo* topo, int a, int b) {
  const commTopoHost* h = &topo->hosts[topo->nodes[a].host];
  int n = h->nNodes;
  return topo->paths[topo->nodes[a].host][(size_t)(a - h->firstNode) * n + (b - h->firstNode)];
}

static double nicSpeedGBs(const commTopoNode* nic) {
  return nic->u.nic.speedMbps > 0 ? nic->u.nic.speedMbps / 8000.0 : 1.25;
}

commTopoPath commTopoPathOf(const commTopo* topo, int a, int b) {
  commTopoPath p = {COMM_PATH_DIS, 0, 0, 0};
  if (topo == NULL || !topo->finished || a < 0 || b < 0 || a >= topo->nNodes || b >= topo->nNodes) return p;
  if (topo->nodes[a].host == topo->nodes[b].host) return localPath(topo, a, b);
  /* Across hosts: out through a's nearest NIC, in through b's nearest NIC; no NIC on either side: no
   * path. */
  int na = -1, nb = -1;
  commTopoNicsByDistance(topo, a, &na, 1);
  commTopoNicsByDistance(topo, b, &nb, 1);
  if (na < 0 || nb < 0) return p;
  p.type = COMM_PATH_NET;
  double bw = 1e300, lat = 0;
  int hops = 1;
  if (na >= 0) {
    commTopoPath x = a == na ? (commTopoPath){COMM_PATH_LOC, 0, 0, 0} : localPath(topo, a, na);
    if (a != na && x.bw < bw) bw = x.bw;
    if (nicSpeedGBs(&topo->nodes[na]) < bw) bw = nicSpeedGBs(&topo->nodes[na]);
    hops += x.hops;
    lat += x.latUs;
  }
  if (nb >= 0) {
    commTopoPath y = b == nb ? (commTopoPath){COMM_PATH_LOC, 0, 0, 0} : localPath(topo, nb, b);
    if (b != nb && y.bw < bw) bw = y.bw;
    if (nicSpeedGBs(&topo->nodes[nb]) < bw) bw = nicSpeedGBs(&topo->nodes[nb]);
    hops += y.hops;
    lat += y.latUs;
  }
  p.bw = bw >= 1e300 ? 0 : (float)bw;
  p.hops = (uint8_t)(hops > 255 ? 255 : hops);
  p.latUs = (float)lat;
  return p;
}

static const char* const pathNames[COMM_PATH_TYPES] = {"LOC", "NVL", "PIX", "PXB", "PHB", "SYS", "NET", "DIS"};

const char* commTopoPathName(int type) { return type >= 0 && type < COMM_PATH_TYPES ? pathNames[type] : "?"; }

int commTopoPathFromName(const char* name) {
  if (name == NULL) return -1;
  for (int i = 0; i < COMM_PATH_TYPES; i++)
    if (strcasecmp(name, pathNames[i]) == 0) return i;
  if (strcasecmp(name, "NVB") == 0) return COMM_PATH_NVL;
  if (strcasecmp(name, "P2C") == 0 || strcasecmp(name, "PXN") == 0) return COMM_PATH_PXB;
  return -1;
}

const char* commTopoNodeTypeName(int type) {
  static const char* const names[COMM_TOPO_NODE_TYPES] = {"CPU", "PCI", "GPU", "NIC", "NVS"};
  return type >= 0 && type < COMM_TOPO_NODE_TYPES ? names[type] : "?";
}

const char* commTopoNodeLabel(const commTopo* topo, int n, char* buf, size_t len) {
  if (n < 0 || n >= topo->nNodes) {
    snprintf(buf, len, "node %d", n);
    return buf;
  }
  const commTopoNode* nd = &topo->nodes[n];
  switch (nd->type) {
    case COMM_TOPO_NIC: snprintf(buf, len, "NIC%d %s", nd->index, nd->name); break;
    case COMM_TOPO_PCI: snprintf(buf, len, "PCI %s", nd->busId[0] ? nd->busId : "?"); break;
    case COMM_TOPO_NVS: snprintf(buf, len, "NVS"); break;
    default: snprintf(buf, len, "%s%d", commTopoNodeTypeName(nd->type), nd->index); break;
  }
  return buf;
}

/* NIC i is nearer to `from` than NIC o: class, then bottleneck bandwidth, then NIC speed, then index. */
static int nicNearer(const commTopo* topo, int from, int i, int o) {
  commTopoPath pi = localPath(topo, from, i), po = localPath(topo, from, o);
  if (pi.type != po.type) return pi.type < po.type;
  if (pi.bw != po.bw) return pi.bw > po.bw;
  if (topo->nodes[i].u.nic.speedMbps != topo->nodes[o].u.nic.speedMbps)
    return topo->nodes[i].u.nic.speedMbps > topo->nodes[o].u.nic.speedMbps;
  return i < o;
}

int commTopoNicsByDistance(const commTopo* topo, int from, int* nics, int max) {
  if (topo == NULL || !topo->finished || from < 0 || from >= topo->nNodes || max <= 0) return 0;
  const commTopoHost* h = &topo->hosts[topo->nodes[from].host];
  /* Insertion into the best `max` so far: a NIC not better than the last kept one is dropped. */
  int cnt = 0;
  for (int k = h->typeFirst[COMM_TOPO_NIC]; k < h->typeFirst[COMM_TOPO_NIC + 1]; k++) {
    int i = topo->typeNodes[k];
    if (cnt == max && !nicNearer(topo, from, i, nics[max - 1])) continue;
    int j = cnt < max ? cnt++ : max - 1;
    while (j > 0 && nicNearer(topo, from, i, nics[j - 1])) {
      nics[j] = nics[j - 1];
      j--;
    }
    nics[j] = i;
  }
  return cnt;
}

/* ---- COMM_TOPO_FILE / COMM_TOPO_DUMP_FILE ---- */

/* Topologies shared by the communicators of a process: discovery costs tens of milliseconds (hwloc
 * walks sysfs), and a machine does not change while a program runs. One entry per source (discovery, or
 * a COMM_TOPO_FILE path); an entry stays cached when its last communicator goes away. */
#define TOPO_CACHE_ENTRIES 4
static struct {
  char key[1024]; /* "(discovered...)" for discovery, else the file path */
  commTopo* topo;
  int refs;
} topoCache[TOPO_CACHE_ENTRIES];
static pthread_mutex_t topoCacheLock = PTHREAD_MUTEX_INITIALIZER;

commResult_t commTopoGet(commTopo** out) {
  *out = NULL;
  const char* file = commParamStr("COMM_TOPO_FILE", NULL);
  /* Discovery matches GPUs to CUDA devices only once the process has loaded the CUDA driver: a topology
   * discovered before that is not reused after. */
  void* cuda = file ? NULL : dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (cuda) dlclose(cuda); /* drops the reference RTLD_NOLOAD took */
  const char* key = file ? file : cuda ? "(discovered, CUDA loaded)" : "(discovered)";
  commResult_t res = commSuccess;
  pthread_mutex_lock(&topoCacheLock);
  int slot = -1, spare = -1;
  for (int i = 0; i < TOPO_CACHE_ENTRIES; i++) {
    if (topoCache[i].topo && strcmp(topoCache[i].key, key) == 0) slot = i;
    if (spare < 0 && (topoCache[i].topo == NULL || topoCache[i].refs == 0)) spare = i;
  }
  if (slot < 0) {
    commTopo* topo = NULL;
    if (file) {
      COMMCHECKGOTO(commTopoLoadXml(file, &topo), res, exit);
      const char* from = commParamSource("COMM_TOPO_FILE");
      INFO(COMM_TOPO | COMM_INIT, "topology loaded from %s (%s): %d host(s), %d node(s)", file,
           from ? from : "COMM_TOPO_FILE", topo->nHosts, topo->nNodes);
    } else {
      COMMCHECKGOTO(commTopoDiscover(&topo), res, exit);
    }
    if (spare < 0 || strlen(key) >= sizeof(topoCache[0].key)) {
      *out = topo; /* not cached: commTopoRelease frees it */
      goto exit;
    }
    commTopoFree(topoCache[spare].topo);
    snprintf(topoCache[spare].key, sizeof(topoCache[spare].key), "%s", key);
    topoCache[spare].topo = topo;
    topoCache[spare].refs = 0;
    slot = spare;
  }
  topoCache[slot].refs++;
  *out = topoCache[slot].topo;
exit:
  pthread_mutex_unlock(&topoCacheLock);
  return res;
}

void commTopoRelease(commTopo* topo) {
  if (topo == NULL) return;
  pthread_mutex_lock(&topoCacheLock);
  int cached = 0;
  for (int i = 0; i < TOPO_CACHE_ENTRIES; i++) {
    if (topoCache[i].topo == topo) {
      topoCache[i].refs--;
      cached = 1;
    }
  }
  pthread_mutex_unlock(&topoCacheLock);
  if (!cached) commTopoFree(topo);
}
