/* comm_topo: what the library sees of a machine (or of a topology file of many machines) and what it would
 * make of it: the topology tree of every host, the best path between its devices, which NIC every rank uses,
 * the rings and trees of a communicator, and the transport between ranks.
 *
 *   comm_topo [-f topo.xml] [-n nranks] [-R ranks-per-host] [-c channels] [-d out.dot] [-p out.png]
 *             [-x out.xml] [-X nccl.xml] [-q] [-a] [-i]               (see usage() or -h)
 *
 * The topology comes from -f (commTopoLoadXml: libcomm's format or NCCL's), else commTopoGet (COMM_TOPO_FILE,
 * else discovery of this machine). Ranks are placed as a launcher would: rank r on host r / R, on GPU (r % R) % nGpus of that host
 * (its CPU (r % R) % nCpus when the host has no GPU); the communicator node of a rank is its host.
 *
 * Output, in order: the hosts (host 0 in full: the tree below each CPU with the bandwidth of every node's
 * upstream link, the NVLinks, the inter-CPU links and the path matrix between its GPUs and NICs; the other
 * hosts one line each, runs of identical hosts as one line beyond 16 hosts; -a prints every host in full),
 * the ranks with their device and NIC on channel 0, the rings of every channel (with the worst path inside
 * a node and between nodes, and the NIC each ring enters and leaves the first nodes through), the double
 * binary trees over the nodes with each channel's intra-node chains, the transport between representative
 * pairs of ranks, and the time the library took. -q prints the hosts' summary lines and the rings only.
 *
 * Exit status: 0; 1 when the topology cannot be loaded or a file cannot be written; 2 on bad arguments;
 * 3 when -p was asked for but Graphviz's dot is not installed (everything else is done). */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "debug.h"
#include "param.h"
#include "algorithms.h"
#include "topo.h"
#include "utils.h"
#include "comm_topo.h"

#define TOPO_MAX_LIST 64  /* ranks printed per ring before "..." */
#define TOPO_LIST_TAIL 8  /* of which the last ones of the ring */
#define TOPO_NIC_NODES 4  /* nodes whose ring entry/exit NICs are printed */
#define TOPO_CHAIN_MAX 16 /* ranks printed per intra-node chain */
#define TOPO_RANK_ROWS 64 /* rank table rows printed in full; beyond, the first TOPO_RANK_HEAD */
#define TOPO_RANK_HEAD 16
#define TOPO_HOST_LINES 16 /* other hosts printed one line each up to this many; beyond, runs collapse */
#define TOPO_TREE_ITEMS 16 /* interior tree nodes printed per tree */
#define TOPO_MATRIX_MAX 64 /* devices of the path matrix printed without -a */

typedef struct {
  const char* file;
  int nRanks, perHost, channels;
  const char* dotPath;
  const char* pngPath;
  const char* xmlPath;
  const char* ncclPath;
  int quiet, all, rdma, collnet;
} topoOpts;

static void usage(FILE* f, const char* prog) {
  fprintf(f,
          "usage: %s [-f topo.xml] [-n nranks] [-R ranks-per-host] [-c channels] [-d out.dot] [-p out.png]\n"
          "          [-x out.xml] [-X nccl.xml] [-q] [-a] [-i] [-C]\n"
          "  -f FILE   load the topology from FILE, in libcomm's format or NCCL's (default: COMM_TOPO_FILE,\n"
          "            else discover this machine)\n"
          "  -n N      ranks (default: ranks per host x hosts)\n"
          "  -R L      ranks per host (default: the most GPUs of any host, or 1 without GPUs; when only -n is\n"
          "            given and it needs more, n / hosts rounded up). Rank r runs on host r / L, on GPU\n"
          "            (r %% L) %% nGpus of that host, or its CPU (r %% L) %% nCpus when it has no GPU\n"
          "  -c CH     channels (rings) 1-%d (default: max(2, NICs per host))\n"
          "  -d FILE   write the topology as Graphviz DOT (host 0 only for several hosts, unless -a)\n"
          "  -p FILE   render it as PNG with Graphviz's dot (exit status 3 when dot is not installed)\n"
          "  -x FILE   write the topology as XML in libcomm's format (-f reads it back)\n"
          "  -X FILE   write it in NCCL's format (NCCL_TOPO_FILE for NCCL; -f reads it back)\n"
          "  -q        print only the hosts' summary lines, the rings and the timing\n"
          "  -a        print everything: every host in full, whole rings, every rank\n"
          "  -i        list the RDMA devices the IB transport sees (libibverbs; COMM_IB_FAKE: the fake), their\n"
          "            ports, GIDs, the GPU each serves and whether GPUDirect RDMA would be used\n"
          "  -C        collnet: whether it would be on (COMM_COLLNET_ENABLE), the plugin (COMM_AGGD,\n"
          "            COMM_COLLNET_PLUGIN, COMM_NET_PLUGIN), what it reduces, each channel's group members\n"
          "Exit status: 0; 1 load or write error; 2 bad arguments; 3 no dot for -p.\n",
          prog, COMM_MAX_CHANNELS);
}

/* Strict integer option value in [lo, hi]; 0 on success. */
static int parseInt(const char* s, int lo, int hi, int* out) {
  char* end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static double msSince(int64_t t0) { return (double)(commTimeNs() - t0) / 1e6; }

/* ---------------------------------------------------------------------------------------------------- */
/* Small formatting helpers */

/* A bandwidth in GB/s with at most two decimals and at least `minDec` of them: "450", "31.5", "1.25" (0) or
 * "450.0" (1). */
static const char* fmtGBs(double bw, int minDec, char* buf, size_t len) {
  snprintf(buf, len, "%.2f", bw);
  char* dot = strchr(buf, '.');
  if (dot == NULL) return buf;
  char* end = buf + strlen(buf);
  while (end > dot + 1 + minDec && end[-1] == '0') *--end = '\0';
  if (end == dot + 1) *dot = '\0';
  return buf;
}
const char* fmtBw(double bw, char* buf, size_t len) { return fmtGBs(bw, 0, buf, len); }

/* "NVL/450": class and bottleneck bandwidth of a path. */
static const char* fmtPath(commTopoPath p, char* buf, size_t len) {
  char b[32];
  if (p.type == COMM_PATH_LOC) snprintf(buf, len, "LOC");
  else if (p.type == COMM_PATH_DIS) snprintf(buf, len, "DIS");
  else snprintf(buf, len, "%s/%s", commTopoPathName(p.type), fmtBw(p.bw, b, sizeof(b)));
  return buf;
}

/* "400 Gb/s", "2.5 Gb/s", "speed ?" */
const char* fmtSpeed(int mbps, char* buf, size_t len) {
  if (mbps <= 0) snprintf(buf, len, "speed ?");
  else if (mbps % 1000 == 0) snprintf(buf, len, "%d Gb/s", mbps / 1000);
  else snprintf(buf, len, "%.1f Gb/s", mbps / 1000.0);
  return buf;
}

static const char* nicLinkName(int link) {
  return link == COMM_NIC_IB ? "ib" : link == COMM_NIC_ROCE ? "roce" : link == COMM_NIC_ETH ? "eth" : "?";
}

static const char* pciKindName(int kind) {
  return kind == COMM_PCI_SWITCH ? "switch" : kind == COMM_PCI_HOSTBRIDGE ? "hostbridge" : "bridge";
}

/* The link between node n and its parent (-1 if none). */
static int parentLink(const commTopo* topo, int n) {
  const commTopoNode* nd = &topo->nodes[n];
  if (nd->parent < 0) return -1;
  for (int k = 0; k < nd->nLinks; k++) {
    int l = topo->adj[nd->firstLink + k];
    const commTopoLink* lk = &topo->links[l];
    if (lk->type == COMM_LINK_PCI && (lk->a == nd->parent || lk->b == nd->parent)) return l;
  }
  return -1;
}

/* Details of a node (without its label), for the tree (one line: `multiline` 0) and the DOT labels (groups on
 * lines of their own). */
void nodeDetails(const commTopo* topo, int n, int multiline, char* buf, size_t len) {
  const commTopoNode* nd = &topo->nodes[n];
  const char* sep = multiline ? "\n" : " ";
  const char* csep = multiline ? "\n" : ", ";
  char sp[32];
  buf[0] = '\0';
  switch (nd->type) {
    case COMM_TOPO_CPU:
      snprintf(sp, sizeof(sp), nd->u.cpu.nCores > 0 ? "%d" : "?", nd->u.cpu.nCores);
      snprintf(buf, len, "numa %d%s%s cores%scpus %s%s%s %s%s%s%s%s", nd->u.cpu.numa, csep, sp, csep,
               nd->u.cpu.cpus[0] ? nd->u.cpu.cpus : "?", csep, nd->u.cpu.arch[0] ? nd->u.cpu.arch : "?",
               nd->u.cpu.vendor[0] ? nd->u.cpu.vendor : "?", nd->name[0] ? sep : "", nd->name[0] ? "\"" : "", nd->name,
               nd->name[0] ? "\"" : "");
      break;
    case COMM_TOPO_PCI: {
      int o = snprintf(buf, len, "%s", pciKindName(nd->u.pci.kind));
      if (nd->u.pci.gen > 0 && o < (int)len) o += snprintf(buf + o, len - (size_t)o, " gen%d", nd->u.pci.gen);
      if (nd->u.pci.width > 0 && o < (int)len) snprintf(buf + o, len - (size_t)o, " x%d", nd->u.pci.width);
      break;
    }
    case COMM_TOPO_GPU: {
      char dev[16], mem[32];
      if (nd->u.gpu.dev >= 0) snprintf(dev, sizeof(dev), "%d", nd->u.gpu.dev);
      else snprintf(dev, sizeof(dev), "-");
      if (nd->u.gpu.memMB > 0) snprintf(mem, sizeof(mem), " %d MB", nd->u.gpu.memMB);
      else mem[0] = '\0';
      snprintf(buf, len, "dev %s sm%d%s\"%s\"%s%s%s", dev, nd->u.gpu.sm, sep, nd->name[0] ? nd->name : "?", mem, sep,
               nd->busId[0] ? nd->busId : "(no bus id)");
      break;
    }
    case COMM_TOPO_NIC: {
      char port[24] = "", netdev[COMM_TOPO_NAME_MAX + 16] = "";
      if (nd->u.nic.port > 0) snprintf(port, sizeof(port), " port %d", nd->u.nic.port);
      if (nd->u.nic.netdev[0] && strcmp(nd->u.nic.netdev, nd->name) != 0)
        snprintf(netdev, sizeof(netdev), "%snetdev %s", sep, nd->u.nic.netdev);
      snprintf(buf, len, "%s%s %s%s%s%s%s", nicLinkName(nd->u.nic.link), port,
               fmtSpeed(nd->u.nic.speedMbps, sp, sizeof(sp)), netdev, nd->u.nic.gdr ? " gdr" : "",
               nd->busId[0] ? sep : "", nd->busId);
      break;
    }
    default: break;
  }
}

/* ---------------------------------------------------------------------------------------------------- */
/* Hosts */

typedef struct {
  int counts[COMM_TOPO_NODE_TYPES];
  int nLinks;
} hostShape;

static void shapeOf(const commTopo* topo, int h, hostShape* s) {
  memset(s, 0, sizeof(*s));
  const commTopoHost* host = &topo->hosts[h];
  for (int i = host->firstNode; i < host->firstNode + host->nNodes; i++) {
    s->counts[topo->nodes[i].type]++;
    s->nLinks += topo->nodes[i].nLinks;
  }
}

static void printHostLine(const commTopo* topo, int h) {
  hostShape s;
  shapeOf(topo, h, &s);
  const commTopoHost* host = &topo->hosts[h];
  printf("host %d \"%s\": %d CPU%s, %d GPU%s, %d NIC%s, %d PCI%s\n", h, host->name, host->nCpus,
         host->nCpus == 1 ? "" : "s", host->nGpus, host->nGpus == 1 ? "" : "s", host->nNics,
         host->nNics == 1 ? "" : "s", s.counts[COMM_TOPO_PCI], s.counts[COMM_TOPO_NVS] ? ", NVSwitch" : "");
}

/* Summary lines of hosts [from, nHosts): one each, or runs of identically shaped hosts as one line when
 * there are many. */
static void printHostLines(const commTopo* topo, int from, int collapse) {
  for (int h = from; h < topo->nHosts;) {
    int e = h + 1;
    if (collapse) {
      hostShape a, b;
      shapeOf(topo, h, &a);
      while (e < topo->nHosts) {
        shapeOf(topo, e, &b);
        if (memcmp(&a, &b, sizeof(a)) != 0) break;
        e++;
      }
    }
    if (e - h < 2) {
      printHostLine(topo, h);
    } else {
      const commTopoHost* host = &topo->hosts[h];
      hostShape s;
      shapeOf(topo, h, &s);
      printf("hosts %d-%d (\"%s\" .. \"%s\"): %d CPUs, %d GPUs, %d NICs, %d PCI%s each\n", h, e - 1, host->name,
             topo->hosts[e - 1].name, host->nCpus, host->nGpus, host->nNics, s.counts[COMM_TOPO_PCI],
             s.counts[COMM_TOPO_NVS] ? ", NVSwitch" : "");
    }
    h = e;
  }
}

static void printSubtree(const commTopo* topo, int n, int depth) {
  char lab[96], det[512], bw[32];
  const commTopoNode* nd = &topo->nodes[n];
  commTopoNodeLabel(topo, n, lab, sizeof(lab));
  nodeDetails(topo, n, 0, det, sizeof(det));
  printf("%*s%s %s", 2 * depth, "", lab, det);
  int l = parentLink(topo, n);
  if (l >= 0) printf(" \u2014 %s GB/s", fmtGBs(topo->links[l].bw, 1, bw, sizeof(bw)));
  printf("\n");
  if (nd->type == COMM_TOPO_GPU) {
    for (int k = 0; k < nd->nLinks; k++) {
      const commTopoLink* lk = &topo->links[topo->adj[nd->firstLink + k]];
      if (lk->type != COMM_LINK_NVL) continue;
      int peer = lk->a == n ? lk->b : lk->a;
      printf("%*sNVLink x%d -> %s %s GB/s\n", 2 * depth + 2, "", lk->count,
             commTopoNodeLabel(topo, peer, lab, sizeof(lab)), fmtGBs(lk->bw, 1, bw, sizeof(bw)));
    }
  }
  const commTopoHost* host = &topo->hosts[nd->host];
  for (int c = host->firstNode; c < host->firstNode + host->nNodes; c++)
    if (topo->nodes[c].parent == n) printSubtree(topo, c, depth + 1);
}

/* The devices of the path matrix: GPUs and NICs, or CPUs and NICs when the host has no GPU. */
static int matrixDevices(const commTopo* topo, int h, int* devs) {
  const commTopoHost* host = &topo->hosts[h];
  int first = host->nGpus > 0 ? COMM_TOPO_GPU : COMM_TOPO_CPU, m = 0;
  for (int t = 0; t < 2; t++) {
    int type = t == 0 ? first : COMM_TOPO_NIC;
    for (int i = host->firstNode; i < host->firstNode + host->nNodes; i++)
      if (topo->nodes[i].type == type) devs[m++] = i;
  }
  return m;
}

static void shortLabel(const commTopo* topo, int n, char* buf, size_t len) {
  snprintf(buf, len, "%s%d", commTopoNodeTypeName(topo->nodes[n].type), topo->nodes[n].index);
}

static int printMatrix(const commTopo* topo, int h, int all) {
  const commTopoHost* host = &topo->hosts[h];
  int* devs = malloc(sizeof(int) * (size_t)(host->nNodes + 1));
  if (devs == NULL) return -1;
  int m = matrixDevices(topo, h, devs), total = m;
  if (m == 0) {
    free(devs);
    return 0;
  }
  /* A host of hundreds of devices: a matrix of megabytes nobody reads (and most of the run's time). */
  if (!all && m > TOPO_MATRIX_MAX) {
    m = TOPO_MATRIX_MAX;
    printf("  paths between the first %d of %d devices (-a: all)\n", m, total);
  }
  char lab[96], cell[64];
  int w = 8;
  for (int i = 0; i < m; i++) {
    shortLabel(topo, devs[i], lab, sizeof(lab));
    if ((int)strlen(lab) + 2 > w) w = (int)strlen(lab) + 2;
    for (int j = 0; j < m; j++) {
      fmtPath(commTopoPathOf(topo, devs[i], devs[j]), cell, sizeof(cell));
      if ((int)strlen(cell) + 2 > w) w = (int)strlen(cell) + 2;
    }
  }
  printf("  paths (class/GB/s bottleneck):\n  %-*s", w, "");
  for (int j = 0; j < m; j++) {
    shortLabel(topo, devs[j], lab, sizeof(lab));
    printf("%-*s", w, lab);
  }
  printf("CPU\n");
  for (int i = 0; i < m; i++) {
    shortLabel(topo, devs[i], lab, sizeof(lab));
    printf("  %-*s", w, lab);
    for (int j = 0; j < m; j++) {
      if (i == j) snprintf(cell, sizeof(cell), "X");
      else fmtPath(commTopoPathOf(topo, devs[i], devs[j]), cell, sizeof(cell));
      printf("%-*s", w, cell);
    }
    int cpu = commTopoCpuOf(topo, devs[i]);
    if (cpu >= 0) printf("CPU%d (numa %d)\n", topo->nodes[cpu].index, topo->nodes[cpu].u.cpu.numa);
    else printf("-\n");
  }
  printf("  LOC same device, NVL NVLink, PIX one PCI switch, PXB several switches, PHB through a CPU, SYS across "
         "CPUs\n");
  free(devs);
  return 0;
}

static int printHost(const commTopo* topo, int h, int all) {
  const commTopoHost* host = &topo->hosts[h];
  char lab[96], lab2[96];
  printHostLine(topo, h);
  for (int i = host->firstNode; i < host->firstNode + host->nNodes; i++)
    if (topo->nodes[i].type == COMM_TOPO_CPU) printSubtree(topo, i, 1);
  for (int i = host->firstNode; i < host->firstNode + host->nNodes; i++) {
    const commTopoNode* nd = &topo->nodes[i];
    if (nd->type != COMM_TOPO_NVS) continue;
    int gpus = 0, links = 0;
    double bw = 0;
    for (int k = 0; k < nd->nLinks; k++) {
      const commTopoLink* lk = &topo->links[topo->adj[nd->firstLink + k]];
      if (lk->type != COMM_LINK_NVL) continue;
      gpus++;
      links += lk->count;
      bw += lk->bw;
    }
    printf("  NVS (the host's NVSwitches): %d GPU%s, %d NVLinks, %.1f GB/s in total\n", gpus, gpus == 1 ? "" : "s",
           links, bw);
  }
  for (int l = 0; l < topo->nLinks; l++) {
    const commTopoLink* lk = &topo->links[l];
    if (lk->type != COMM_LINK_SYS || topo->nodes[lk->a].host != h) continue;
    char bw[32];
    printf("  %s <-> %s SYS %s GB/s\n", commTopoNodeLabel(topo, lk->a, lab, sizeof(lab)),
           commTopoNodeLabel(topo, lk->b, lab2, sizeof(lab2)), fmtGBs(lk->bw, 1, bw, sizeof(bw)));
  }
  return printMatrix(topo, h, all);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Ranks, rings, trees, transports */


static void rankDevice(const commTopo* topo, const commTopoRank* rk, char* buf, size_t len) {
  const commTopoNode* nd = &topo->nodes[rk->dev];
  char lab[96];
  commTopoNodeLabel(topo, rk->dev, lab, sizeof(lab));
  if (nd->type == COMM_TOPO_GPU && nd->u.gpu.dev >= 0)
    snprintf(buf, len, "%s dev %d %s", lab, nd->u.gpu.dev, nd->busId);
  else if (nd->type == COMM_TOPO_GPU) snprintf(buf, len, "%s %s", lab, nd->busId);
  else snprintf(buf, len, "%s numa %d", lab, nd->u.cpu.numa);
}

static void printRank(const comm_layout* L, int r) {
  const commTopo* topo = L->topo;
  char dev[160], lab[96], p[48];
  rankDevice(topo, &L->ranks[r], dev, sizeof(dev));
  int nic = commTopoRankNic(topo, L->ranks, L->n, r, 0);
  if (nic >= 0)
    printf("  %-6d %-6d %-32s %-16s %s\n", r, L->ranks[r].node, dev, commTopoNodeLabel(topo, nic, lab, sizeof(lab)),
           fmtPath(commTopoPathOf(topo, L->ranks[r].dev, nic), p, sizeof(p)));
  else printf("  %-6d %-6d %-32s %-16s %s\n", r, L->ranks[r].node, dev, "-", "-");
}

static void printRanks(const comm_layout* L, int all) {
  printf("\nranks: %d on %d node%s (%d per host), device and NIC on channel 0\n", L->n, L->nNodes,
         L->nNodes == 1 ? "" : "s", L->perHost);
  printf("  %-6s %-6s %-32s %-16s %s\n", "rank", "node", "device", "NIC (ch 0)", "path");
  int shown = (all || L->n <= TOPO_RANK_ROWS) ? L->n : TOPO_RANK_HEAD;
  for (int r = 0; r < shown; r++) printRank(L, r);
  if (shown < L->n) {
    printf("  ... %d more ranks (-a prints all)\n", L->n - shown - 1);
    printRank(L, L->n - 1);
  }
}

/* Worst of two paths: higher class, then lower bandwidth. */
static int pathWorse(commTopoPath x, commTopoPath y) {
  if (x.type != y.type) return x.type > y.type;
  return x.bw < y.bw;
}

static void printRing(const comm_layout* L, int c, int all) {
  const commTopo* topo = L->topo;
  const int* ring = L->rings + (size_t)c * L->n;
  int n = L->n;
  printf("Ring %02d:", c);
  if (all || n <= TOPO_MAX_LIST) {
    for (int i = 0; i < n; i++) printf(" %d", ring[i]);
  } else {
    for (int i = 0; i < TOPO_MAX_LIST - TOPO_LIST_TAIL; i++) printf(" %d", ring[i]);
    printf(" ...");
    for (int i = n - TOPO_LIST_TAIL; i < n; i++) printf(" %d", ring[i]);
  }
  /* The worst hop inside a node and between nodes. */
  commTopoPath intra = {COMM_PATH_LOC, 0, 1e30f, 0}, inter = {COMM_PATH_LOC, 0, 1e30f, 0};
  int haveIntra = 0, haveInter = 0;
  for (int i = 0; i < n && n > 1; i++) {
    const commTopoRank* a = &L->ranks[ring[i]];
    const commTopoRank* b = &L->ranks[ring[(i + 1) % n]];
    commTopoPath p = commTopoPathOf(topo, a->dev, b->dev);
    if (a->node == b->node) {
      if (!haveIntra || pathWorse(p, intra)) intra = p;
      haveIntra = 1;
    } else {
      if (!haveInter || pathWorse(p, inter)) inter = p;
      haveInter = 1;
    }
  }
  char pb[48];
  if (!haveIntra && !haveInter) {
    printf("\n");
    return;
  }
  printf("  [");
  const char* sep = "";
  if (haveIntra) {
    printf("intra %s", fmtPath(intra, pb, sizeof(pb)));
    sep = ", ";
  }
  if (haveInter) {
    printf("%sinter %s", sep, fmtPath(inter, pb, sizeof(pb)));
    sep = ", ";
  }
  /* Entry and exit NICs of the first nodes (segments in ring order). */
  if (L->nNodes > 1) {
    int seg = 0;
    for (int i = 0; i < n && seg < TOPO_NIC_NODES; seg++) {
      int j = i;
      while (j + 1 < n && L->ranks[ring[j + 1]].node == L->ranks[ring[i]].node) j++;
      int in = commTopoRankNic(topo, L->ranks, n, ring[i], c);
      int out = commTopoRankNic(topo, L->ranks, n, ring[j], c);
      char a[48] = "-", b[48] = "-";
      if (in >= 0) snprintf(a, sizeof(a), "NIC%d", topo->nodes[in].index);
      if (out >= 0) snprintf(b, sizeof(b), "NIC%d", topo->nodes[out].index);
      printf("%snode%d in %s out %s", seg > 0 ? ", " : sep[0] ? "; " : "", L->ranks[ring[i]].node, a, b);
      i = j + 1;
    }
    if (L->nNodes > TOPO_NIC_NODES) printf(", ...");
  }
  printf("]\n");
}

static void printTrees(const comm_layout* L, int all) {
  const commTopo* topo = L->topo;
  printf("\ntrees: double binary tree over %d node%s (tree 0 on even channels, tree 1 on odd ones)\n", L->nNodes,
         L->nNodes == 1 ? "" : "s");
  for (int t = 0; t < 2; t++) {
    if (L->nNodes == 1) {
      printf("  tree %d: node 0 alone\n", t);
      continue;
    }
    int root = commDoubleTreeRoot(L->nNodes, t), depth = 0;
    for (int v = 0; v < L->nNodes; v++) { /* depth: walk up from every node (bounded by nNodes) */
      int d = 0;
      for (int u = v; L->parent[t][u] >= 0 && d <= L->nNodes; u = L->parent[t][u]) d++;
      if (d > depth) depth = d;
    }
    printf("  tree %d: root node %d, depth %d:", t, root, depth);
    int items = 0;
    for (int v = 0; v < L->nNodes; v++) {
      int c0 = L->child[t][2 * v], c1 = L->child[t][2 * v + 1];
      if (c0 < 0 && c1 < 0) continue;
      if (!all && items == TOPO_TREE_ITEMS) {
        printf(" ...");
        break;
      }
      printf(" %d->", v);
      if (c0 >= 0) printf("%d", c0);
      if (c1 >= 0) printf("%s%d", c0 >= 0 ? "," : "", c1);
      items++;
    }
    printf("\n");
  }
  /* Intra-node chains: each node's order in the channel's ring, its leader first. */
  int* order = malloc(sizeof(int) * (size_t)L->n);
  if (order == NULL) return;
  int nodesShown = all ? L->nNodes : (L->nNodes < TOPO_NIC_NODES ? L->nNodes : TOPO_NIC_NODES);
  printf("  intra-node chains (leader first)%s:\n", nodesShown < L->nNodes ? ", first nodes" : "");
  for (int c = 0; c < L->nChannels; c++) {
    const int* ring = L->rings + (size_t)c * L->n;
    printf("  ch %02d tree %d:", c, c % 2);
    int i = 0;
    for (int seg = 0; seg < nodesShown && i < L->n; seg++) {
      int j = i;
      while (j + 1 < L->n && L->ranks[ring[j + 1]].node == L->ranks[ring[i]].node) j++;
      int node = L->ranks[ring[i]].node, m = j - i + 1;
      printf(" node%d [", node);
      for (int k = 0; k < m; k++) {
        if (!all && k == TOPO_CHAIN_MAX - 2 && m > TOPO_CHAIN_MAX) {
          printf(" ... %d", ring[j]);
          break;
        }
        printf("%s%d", k ? " " : "", ring[i + k]);
      }
      printf("]");
      /* The library's own answer for the node must be the ring's segment. */
      int got = commTopoNodeOrder(topo, L->ranks, L->n, node, c, order);
      if (got != m || memcmp(order, ring + i, sizeof(int) * (size_t)m) != 0)
        printf(" (commTopoNodeOrder differs: %d ranks, first %d)", got, got > 0 ? order[0] : -1);
      i = j + 1;
    }
    if (nodesShown < L->nNodes) printf(" ...");
    printf("\n");
  }
  free(order);
}

static const char* transportName(int t) {
  return t == COMM_TOPO_USE_P2P ? "P2P" : t == COMM_TOPO_USE_SHM ? "SHM" : t == COMM_TOPO_USE_NET ? "NET" : "?";
}

static void printTransport(const comm_layout* L, int a, int b, const char* what) {
  commTopoTransportChoice ch;
  if (commTopoChooseTransport(L->topo, L->ranks, L->n, a, b, &ch) != commSuccess) {
    printf("  %d -> %d (%s): error\n", a, b, what);
    return;
  }
  printf("  %d -> %d (%s): %s%s%s, path %s: %s\n", a, b, what, transportName(ch.transport), ch.gdr ? " GDR" : "",
         ch.fallback ? " (fallback)" : "", commTopoPathName(ch.pathType), ch.why);
}

static void printTransports(const comm_layout* L) {
  const commTopo* topo = L->topo;
  if (L->n < 2) return;
  printf("\ntransports:\n");
  int pairs[8][2], np = 0;
  const char* whats[8];
  const int* ring = L->rings;
  int pos = 0;
  while (ring[pos] != 0) pos++;
  int next = ring[(pos + 1) % L->n], prev = ring[(pos + L->n - 1) % L->n];
  pairs[np][0] = 0, pairs[np][1] = next, whats[np++] = "ring 0 next";
  if (prev != next) pairs[np][0] = 0, pairs[np][1] = prev, whats[np++] = "ring 0 previous";
  for (int r = 1; r < L->n; r++) {
    if (L->ranks[r].node != L->ranks[0].node) {
      pairs[np][0] = 0, pairs[np][1] = r, whats[np++] = "another host";
      break;
    }
  }
  /* Two GPUs of one node below different CPUs. */
  int found = 0;
  for (int a = 0; a < L->n && !found && L->ranks[a].node == L->ranks[0].node; a++) {
    if (topo->nodes[L->ranks[a].dev].type != COMM_TOPO_GPU) continue;
    int ca = commTopoCpuOf(topo, L->ranks[a].dev);
    for (int b = a + 1; b < L->n && L->ranks[b].node == L->ranks[a].node; b++) {
      if (topo->nodes[L->ranks[b].dev].type != COMM_TOPO_GPU || commTopoCpuOf(topo, L->ranks[b].dev) == ca) continue;
      pairs[np][0] = a, pairs[np][1] = b, whats[np++] = "GPUs on different CPUs";
      found = 1;
      break;
    }
  }
  for (int i = 0; i < np; i++) printTransport(L, pairs[i][0], pairs[i][1], whats[i]);
}

/* Places the ranks, builds the rings and trees. 0 on success. */
static int buildLayout(const commTopo* topo, const topoOpts* o, comm_layout* L) {
  memset(L, 0, sizeof(*L));
  L->topo = topo;
  L->n = o->nRanks;
  L->perHost = o->perHost;
  L->nChannels = o->channels;
  L->nNodes = (L->n + L->perHost - 1) / L->perHost;
  L->ranks = calloc((size_t)L->n, sizeof(commTopoRank));
  L->rings = calloc((size_t)L->n * (size_t)L->nChannels, sizeof(int));
  for (int t = 0; t < 2; t++) {
    L->parent[t] = calloc((size_t)L->nNodes, sizeof(int));
    L->child[t] = calloc((size_t)L->nNodes * 2, sizeof(int));
  }
  if (!L->ranks || !L->rings || !L->parent[0] || !L->parent[1] || !L->child[0] || !L->child[1]) {
    fprintf(stderr, "comm_topo: out of memory for %d ranks\n", L->n);
    return -1;
  }
  for (int r = 0; r < L->n; r++) {
    int h = r / L->perHost, local = r % L->perHost;
    const commTopoHost* host = &topo->hosts[h];
    commTopoRank* rk = &L->ranks[r];
    rk->host = h;
    rk->node = h;
    rk->dev = host->nGpus > 0 ? commTopoFind(topo, h, COMM_TOPO_GPU, local % host->nGpus)
                              : commTopoFind(topo, h, COMM_TOPO_CPU, local % host->nCpus);
  }
  if (commTopoRings(topo, L->ranks, L->n, L->nNodes, L->nChannels, L->rings) != commSuccess) {
    fprintf(stderr, "comm_topo: commTopoRings failed\n");
    return -1;
  }
  for (int t = 0; t < 2; t++)
    for (int v = 0; v < L->nNodes; v++)
      commDoubleTree(L->nNodes, t, v, &L->parent[t][v], &L->child[t][2 * v], &L->child[t][2 * v + 1]);
  return 0;
}

static void freeLayout(comm_layout* L) {
  free(L->ranks);
  free(L->rings);
  for (int t = 0; t < 2; t++) {
    free(L->parent[t]);
    free(L->child[t]);
  }
}

/* ---------------------------------------------------------------------------------------------------- */

int main(int argc, char** argv) {
  setenv("COMM_DEBUG", "WARN", 0); /* load errors are the library's WARNs */
  topoOpts o;
  memset(&o, 0, sizeof(o));
  int opt;
  while ((opt = getopt(argc, argv, "f:n:R:c:d:p:x:X:qaiCh")) != -1) {
    int bad = 0;
    switch (opt) {
      case 'f': o.file = optarg; break;
      case 'n': bad = parseInt(optarg, 1, 1 << 24, &o.nRanks); break;
      case 'R': bad = parseInt(optarg, 1, 1 << 20, &o.perHost); break;
      case 'c': bad = parseInt(optarg, 1, COMM_MAX_CHANNELS, &o.channels); break;
      case 'd': o.dotPath = optarg; break;
      case 'p': o.pngPath = optarg; break;
      case 'x': o.xmlPath = optarg; break;
      case 'X': o.ncclPath = optarg; break;
      case 'q': o.quiet = 1; break;
      case 'a': o.all = 1; break;
      case 'i': o.rdma = 1; break;
      case 'C': o.collnet = 1; break;
      case 'h': usage(stdout, argv[0]); return 0;
      default: bad = 1;
    }
    if (bad) {
      if (opt != '?') fprintf(stderr, "comm_topo: bad value for -%c: %s\n", opt, optarg ? optarg : "");
      usage(stderr, argv[0]);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "comm_topo: unexpected argument %s\n", argv[optind]);
    usage(stderr, argv[0]);
    return 2;
  }

  commTopo* topo = NULL;
  /* Discovery matches GPUs to CUDA devices only in processes that have loaded the CUDA driver (as programs
   * using GPUs have); this tool is about the machine, so it loads the driver when there is one. */
  if (o.file == NULL) (void)dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  int64_t t0 = commTimeNs();
  commResult_t res = o.file ? commTopoLoadXml(o.file, &topo) : commTopoGet(&topo);
  double loadMs = msSince(t0);
  if (res != commSuccess || topo == NULL) {
    /* The WARN says why; repeat it when the log does not go to stderr. */
    const char* logFile = getenv("COMM_DEBUG_FILE");
    const char* why = commLogLastWarn();
    int shown = commLogLevel >= COMM_LOG_WARN && (logFile == NULL || logFile[0] == '\0');
    fprintf(stderr, "comm_topo: cannot load the topology%s%s%s%s\n", o.file ? " from " : "", o.file ? o.file : "",
            !shown && why[0] ? ": " : "", !shown ? why : "");
    return 1;
  }

  /* Ranks: the most GPUs of any host per host by default (1 without GPUs). */
  int maxGpus = 0, maxNics = 0;
  for (int h = 0; h < topo->nHosts; h++) {
    if (topo->hosts[h].nGpus > maxGpus) maxGpus = topo->hosts[h].nGpus;
    if (topo->hosts[h].nNics > maxNics) maxNics = topo->hosts[h].nNics;
  }
  int perHostGiven = o.perHost > 0;
  if (!perHostGiven) {
    o.perHost = maxGpus > 0 ? maxGpus : 1;
    if (o.nRanks > o.perHost * topo->nHosts) o.perHost = (o.nRanks + topo->nHosts - 1) / topo->nHosts;
  }
  if (o.nRanks == 0) o.nRanks = o.perHost * topo->nHosts;
  if ((long long)o.nRanks > (long long)o.perHost * topo->nHosts) {
    fprintf(stderr, "comm_topo: %d ranks at %d per host need %d hosts; the topology has %d\n", o.nRanks, o.perHost,
            (o.nRanks + o.perHost - 1) / o.perHost, topo->nHosts);
    usage(stderr, argv[0]);
    commTopoRelease(topo); /* frees a loaded file; a cached discovery stays cached */
    return 2;
  }
  if (o.channels == 0) o.channels = maxNics > 2 ? (maxNics < COMM_MAX_CHANNELS ? maxNics : COMM_MAX_CHANNELS) : 2;

  const char* envFile = getenv("COMM_TOPO_FILE");
  int nLinks = topo->nLinks;
  printf("topology: %s%s: %d host%s, %d nodes, %d link%s\n",
         o.file                  ? "file "
         : envFile && envFile[0] ? "COMM_TOPO_FILE="
                                 : "discovered on this machine",
         o.file                  ? o.file
         : envFile && envFile[0] ? envFile
                                 : "",
         topo->nHosts, topo->nHosts == 1 ? "" : "s", topo->nNodes, nLinks, nLinks == 1 ? "" : "s");
  int collapse = !o.all && topo->nHosts - 1 > TOPO_HOST_LINES;
  if (o.quiet) {
    printHostLines(topo, 0, collapse);
  } else {
    int full = o.all ? topo->nHosts : 1;
    for (int h = 0; h < full; h++) {
      if (printHost(topo, h, o.all) != 0) {
        fprintf(stderr, "comm_topo: out of memory\n");
        commTopoRelease(topo); /* frees a loaded file; a cached discovery stays cached */
        return 1;
      }
    }
    printHostLines(topo, full, collapse);
  }
  if (o.rdma && printRdma(o.file ? NULL : topo) != 0) {
    commTopoRelease(topo); /* frees a loaded file; a cached discovery stays cached */
    return 1;
  }

  comm_layout L;
  t0 = commTimeNs();
  int bad = buildLayout(topo, &o, &L);
  double layoutMs = msSince(t0);
  if (bad) {
    freeLayout(&L);
    commTopoRelease(topo); /* frees a loaded file; a cached discovery stays cached */
    return 1;
  }
  if (!o.quiet) printRanks(&L, o.all);
  printf("\nrings: %d channel%s over %d rank%s\n", L.nChannels, L.nChannels == 1 ? "" : "s", L.n, L.n == 1 ? "" : "s");
  for (int c = 0; c < L.nChannels; c++) printRing(&L, c, o.all);
  if (!o.quiet) {
    printTrees(&L, o.all);
    printTransports(&L);
  }
  if (o.collnet) printCollNet(&L);

  int status = 0;
  int nShown = o.all ? topo->nHosts : 1;
  if (o.dotPath) {
    if (writeDotFile(topo, o.dotPath, nShown) == 0) printf("\nDOT written to %s\n", o.dotPath);
    else status = 1;
  }
  for (int fmt = 0; fmt < 2; fmt++) {
    const char* path = fmt == COMM_TOPO_FORMAT_NCCL ? o.ncclPath : o.xmlPath;
    if (path == NULL) continue;
    if (commTopoDumpFile(topo, path, fmt) == commSuccess) {
      printf("XML%s written to %s\n", fmt == COMM_TOPO_FORMAT_NCCL ? " (NCCL's format)" : "", path);
    } else {
      fprintf(stderr, "comm_topo: cannot write %s\n", path);
      status = 1;
    }
  }
  if (o.pngPath && status == 0) {
    int r = renderPng(topo, o.dotPath, o.pngPath, nShown);
    if (r == 0) printf("PNG written to %s\n", o.pngPath);
    status = r;
  }
  printf("\ntopology loaded in %.3f ms, paths included; rings and trees for %d rank%s in %.3f ms\n", loadMs, L.n,
         L.n == 1 ? "" : "s", layoutMs);
  freeLayout(&L);
  commTopoRelease(topo); /* frees a loaded file; a cached discovery stays cached */
  return status;
}
