/* A finished topology in NCCL's topology format (NCCL_TOPO_FILE for NCCL, or COMM_TOPO_FILE back), the
 * inverse of nccl_xml_map.c for what NCCL's format can say; nccl_xml.h has the overview. What it cannot say
 * is left out: host names (several hosts are told apart by host_hash, 0x1, 0x2, ...), model names, memory,
 * core counts, netdevs, the CPU link bandwidth, NVLink and PCI bandwidths other than the ones NCCL derives
 * (a link is written as the PCIe generation and width that give its bandwidth, or as NCCL's "" when not
 * known). Its output is canonical: written, read and written again, it is the same text. So that NCCL can
 * read it, every <pci> has a busid (a PCI node or GPU without one gets an unused ffff:ff:dd.f), a <gpu> has dev, sm,
 * rank and gdr, NVLinks to the NVSwitch are one <nvlink target="fffffff:ff:ff.0"> (NCCL's name for NVSwitches
 * a VM does not show), and a GPU pair's NVLinks are written from both GPUs, as NCCL does. A NIC without PCI
 * function is written in a <nic> of its CPU; NICs that share a PCI function are the <net>s of one <nic>. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "debug.h"
#include "graph_internal.h"
#include "nccl_xml.h"
#include "topo.h"
#include "utils.h"
#include "xml_internal.h"

typedef struct {
  const commTopo* topo;
  FILE* f;
  int* firstChild;
  int* nextSibling;
  char (*busId)[COMM_TOPO_BUSID_MAX]; /* per node: its bus id, or the one made up for a PCI node */
  char* done;                         /* per node: NIC already written */
  int netDev, gdr;                    /* the host's next <net dev>, whether any of its NICs does GPUDirect */
} nxWriter;

static void indent(FILE* f, int level) { fprintf(f, "%*s", 2 * (level - 1), ""); }

static void putStr(FILE* f, const char* name, const char* v) {
  fprintf(f, " %s=\"", name);
  commXmlPutEscaped(f, v);
  fputc('"', f);
}

/* link_speed / link_width for a link of `bw` GB/s: generation and width when known (gen 1-6), else the
 * PCIe generation and width whose bandwidth is within 2% of bw (widths x16 first; ties keep the first), else
 * NCCL's "" for unknown (which NCCL and the reader take as their defaults: libcomm's 12.0 GB/s is no PCIe
 * link's). */
static void putLink(FILE* f, double bw, int gen, int width) {
  static const int widths[] = {16, 8, 4, 2, 1, 32};
  if (!(gen >= 1 && gen <= 6 && width >= 1 && width <= 32)) {
    gen = width = 0;
    double best = 0;
    for (int w = 0; bw > 0 && w < 6; w++)
      for (int g = 1; g <= 6; g++) {
        double diff = commTopoPciBw(commTopoPciGts(g), widths[w]) - bw;
        diff = diff < 0 ? -diff : diff;
        if (diff <= 0.02 * bw && (gen == 0 || diff < best - 1e-6)) {
          best = diff;
          gen = g;
          width = widths[w];
        }
      }
  }
  if (gen == 0) fprintf(f, " link_speed=\"\" link_width=\"\"");
  else fprintf(f, " link_speed=\"%.1f GT/s PCIe\" link_width=\"%d\"", commTopoPciGts(gen), width);
}

/* "0-3,8" as NCCL's mask "00000000,0000010f"; 0 when the list is empty, malformed, or too wide for a value. */
static int putAffinity(FILE* f, const char* cpus) {
  enum { MAX_GROUPS = XML_MAX_VALUE / 9 };
  uint32_t mask[MAX_GROUPS];
  int groups = 0;
  memset(mask, 0, sizeof(mask));
  for (const char* s = cpus; *s;) {
    char* e;
    long a = strtol(s, &e, 10), b = a;
    if (e == s || a < 0) return 0;
    if (*e == '-') b = strtol(e + 1, &e, 10);
    if (b < a || b >= MAX_GROUPS * 32L) return 0;
    for (long c = a; c <= b; c++) mask[c / 32] |= 1u << (c % 32);
    if ((int)(b / 32) + 1 > groups) groups = (int)(b / 32) + 1;
    s = *e == ',' ? e + 1 : e;
    if (*e != ',' && *e != '\0') return 0;
  }
  if (groups == 0) return 0;
  fprintf(f, " affinity=\"");
  for (int g = groups - 1; g >= 0; g--) fprintf(f, "%08x%s", mask[g], g ? "," : "");
  fputc('"', f);
  return 1;
}

static int nvlPeer(const commTopo* topo, int gpu, int l) {
  const commTopoLink* lk = &topo->links[l];
  return lk->a == gpu ? lk->b : lk->a;
}

static void writeNvlinks(nxWriter* w, int gpu, int level) {
  const commTopo* topo = w->topo;
  const commTopoNode* g = &topo->nodes[gpu];
  /* The NVSwitch first, then the GPUs by bus id. */
  for (int pass = 0; pass < 2; pass++) {
    const char* last = "";
    for (;;) {
      int best = -1, bestCount = 0;
      for (int k = 0; k < g->nLinks; k++) {
        int l = topo->adj[g->firstLink + k], p = nvlPeer(topo, gpu, l);
        if (topo->links[l].type != COMM_LINK_NVL) continue;
        if (pass == 0 && topo->nodes[p].type == COMM_TOPO_NVS && best < 0 && last[0] == '\0') {
          best = p;
          bestCount = topo->links[l].count;
        }
        if (pass == 1 && topo->nodes[p].type == COMM_TOPO_GPU && strcmp(w->busId[p], last) > 0 &&
            (best < 0 || strcmp(w->busId[p], w->busId[best]) < 0)) {
          best = p;
          bestCount = topo->links[l].count;
        }
      }
      if (best < 0) break;
      indent(w->f, level);
      fprintf(w->f, "<nvlink target=\"%s\" count=\"%d\" tclass=\"0x%06x\"/>\n",
              pass == 0 ? NX_HIDDEN_NVSWITCH : w->busId[best], bestCount, pass == 0 ? NX_NVSWITCH_CLASS : NX_GPU_CLASS);
      if (pass == 0) break;
      last = w->busId[best];
    }
  }
}

static void writeNet(nxWriter* w, int n, int level) {
  const commTopoNode* nd = &w->topo->nodes[n];
  indent(w->f, level);
  fprintf(w->f, "<net");
  putStr(w->f, "name", nd->name);
  fprintf(w->f, " dev=\"%d\"", w->netDev++);
  if (nd->u.nic.speedMbps > 0) fprintf(w->f, " speed=\"%d\"", nd->u.nic.speedMbps);
  fprintf(w->f, " port=\"%d\"", nd->u.nic.port);
  if (nd->u.nic.guid) fprintf(w->f, " guid=\"0x%" PRIx64 "\"", nd->u.nic.guid);
  fprintf(w->f, " gdr=\"%d\"/>\n", nd->u.nic.gdr ? 1 : 0);
  w->done[n] = 1;
}

static commResult_t writeNode(nxWriter* w, int n, int level) {
  const commTopo* topo = w->topo;
  const commTopoNode* nd = &topo->nodes[n];
  FILE* f = w->f;
  if (nd->type == COMM_TOPO_NIC && (nd->busId[0] == '\0' || w->done[n])) return commSuccess; /* see writeCpu */
  if (level + (nd->type == COMM_TOPO_PCI ? 0 : 2) > NX_MAX_DEPTH) {
    WARN("commTopoWriteNcclXml: node %d is nested deeper than the file format allows (%d)", n, NX_MAX_DEPTH);
    return commInvalidArgument;
  }
  indent(f, level);
  fprintf(f, "<pci busid=\"%s\"", w->busId[n]);
  if (nd->type == COMM_TOPO_PCI) {
    fprintf(f, " class=\"0x%06x\"", nd->u.pci.kind == COMM_PCI_HOSTBRIDGE ? NX_HOSTBRIDGE_CLASS : NX_BRIDGE_CLASS);
    putLink(f, nd->bw, nd->u.pci.gen, nd->u.pci.width);
    if (w->firstChild[n] < 0) {
      fprintf(f, "/>\n");
      return commSuccess;
    }
    fprintf(f, ">\n");
    for (int c = w->firstChild[n]; c >= 0; c = w->nextSibling[c]) COMMCHECK(writeNode(w, c, level + 1));
  } else if (nd->type == COMM_TOPO_GPU) {
    fprintf(f, " class=\"0x%06x\"", NX_GPU_CLASS);
    putLink(f, nd->bw, 0, 0);
    fprintf(f, ">\n");
    indent(f, level + 1);
    fprintf(f, "<gpu dev=\"%d\" sm=\"%d\" rank=\"%d\" gdr=\"%d\"", nd->u.gpu.dev, nd->u.gpu.sm, nd->index, w->gdr);
    int nvl = 0;
    for (int k = 0; k < nd->nLinks; k++) nvl += topo->links[topo->adj[nd->firstLink + k]].type == COMM_LINK_NVL;
    if (nvl) {
      fprintf(f, ">\n");
      writeNvlinks(w, n, level + 2);
      indent(f, level + 1);
      fprintf(f, "</gpu>\n");
    } else {
      fprintf(f, "/>\n");
    }
  } else if (nd->type == COMM_TOPO_NIC) { /* with the NICs of the host on the same PCI function */
    fprintf(f, " class=\"0x%06x\"", nd->u.nic.link == COMM_NIC_IB ? NX_IB_CLASS : NX_ETH_CLASS);
    putLink(f, nd->bw, 0, 0);
    fprintf(f, ">\n");
    indent(f, level + 1);
    fprintf(f, "<nic>\n");
    const commTopoHost* h = &topo->hosts[nd->host];
    for (int i = n; i < h->firstNode + h->nNodes; i++)
      if (topo->nodes[i].type == COMM_TOPO_NIC && !w->done[i] && strcmp(topo->nodes[i].busId, nd->busId) == 0)
        writeNet(w, i, level + 2);
    indent(f, level + 1);
    fprintf(f, "</nic>\n");
  } else {
    WARN("commTopoWriteNcclXml: node %d of type %d cannot be written below a CPU", n, nd->type);
    return commInvalidArgument;
  }
  indent(f, level);
  fprintf(f, "</pci>\n");
  return commSuccess;
}

/* A CPU with what hangs below it, then its NICs without PCI function (also those below its PCI nodes) in
 * one <nic>; a NIC of the same name and port as one written before in the host is not written again (the
 * reader takes it as the same NIC). */
static commResult_t writeCpu(nxWriter* w, int cpu) {
  const commTopo* topo = w->topo;
  const commTopoNode* nd = &topo->nodes[cpu];
  const commTopoHost* h = &topo->hosts[nd->host];
  FILE* f = w->f;
  indent(f, 2);
  fprintf(f, "<cpu");
  if (topo->nHosts > 1) fprintf(f, " host_hash=\"0x%x\"", nd->host + 1);
  fprintf(f, " numaid=\"%d\"", nd->u.cpu.numa);
  putAffinity(f, nd->u.cpu.cpus);
  const char* arch = nd->u.cpu.arch;
  if (strcmp(arch, "aarch64") == 0) arch = "arm64";
  if (strcmp(arch, "ppc64le") == 0) arch = "ppc64";
  if (arch[0]) putStr(f, "arch", arch);
  if (nd->u.cpu.vendor[0]) putStr(f, "vendor", nd->u.cpu.vendor);
  if (nd->u.cpu.family > 0) fprintf(f, " familyid=\"%d\" modelid=\"%d\"", nd->u.cpu.family, nd->u.cpu.model);
  int nics = 0;
  for (int i = h->firstNode; i < h->firstNode + h->nNodes; i++) {
    const commTopoNode* o = &topo->nodes[i];
    if (o->type != COMM_TOPO_NIC || o->busId[0] || commTopoCpuOf(topo, i) != cpu) continue;
    for (int j = h->firstNode; j < h->firstNode + h->nNodes && !w->done[i]; j++) {
      const commTopoNode* p = &topo->nodes[j];
      if ((w->done[j] == 2 || w->done[j] == 3) && p->u.nic.port == o->u.nic.port && strcmp(p->name, o->name) == 0)
        w->done[i] = 1;
    }
    if (!w->done[i]) {
      w->done[i] = 3; /* to write below */
      nics++;
    }
  }
  if (w->firstChild[cpu] < 0 && nics == 0) {
    fprintf(f, "/>\n");
    return commSuccess;
  }
  fprintf(f, ">\n");
  for (int c = w->firstChild[cpu]; c >= 0; c = w->nextSibling[c]) COMMCHECK(writeNode(w, c, 3));
  if (nics) {
    indent(f, 3);
    fprintf(f, "<nic>\n");
    for (int i = h->firstNode; i < h->firstNode + h->nNodes; i++)
      if (w->done[i] == 3) {
        writeNet(w, i, 4);
        w->done[i] = 2; /* a NIC without PCI function, written */
      }
    indent(f, 3);
    fprintf(f, "</nic>\n");
  }
  indent(f, 2);
  fprintf(f, "</cpu>\n");
  return commSuccess;
}

/* Bus ids of a host's nodes, and made-up ones for its PCI nodes and GPUs without (ffff:ff:00.0, ffff:ff:00.1,
 * ..., skipping those in use). */
static void hostBusIds(nxWriter* w, const commTopoHost* h) {
  const commTopo* topo = w->topo;
  int end = h->firstNode + h->nNodes, k = 0;
  for (int i = h->firstNode; i < end; i++) memcpy(w->busId[i], topo->nodes[i].busId, COMM_TOPO_BUSID_MAX);
  for (int i = h->firstNode; i < end; i++) {
    if ((topo->nodes[i].type != COMM_TOPO_PCI && topo->nodes[i].type != COMM_TOPO_GPU) || w->busId[i][0]) continue;
    for (int used = 1; used; k++) {
      snprintf(w->busId[i], COMM_TOPO_BUSID_MAX, "ffff:%02x:%02x.%x", 0xff - (k >> 8) % 256, (k >> 3) % 32, k % 8);
      used = 0;
      for (int j = h->firstNode; j < end && !used; j++) used = j != i && strcmp(w->busId[j], w->busId[i]) == 0;
    }
  }
}

commResult_t commTopoWriteNcclXml(const commTopo* topo, FILE* f) {
  commResult_t res = commSuccess;
  if (topo == NULL || f == NULL) {
    WARN("commTopoWriteNcclXml: NULL argument");
    return commInvalidArgument;
  }
  if (!topo->finished) {
    WARN("commTopoWriteNcclXml: the topology is not finished (commTopoFinish)");
    return commInvalidArgument;
  }
  nxWriter w = {topo, f, NULL, NULL, NULL, NULL, 0, 0};
  size_t nn = (size_t)topo->nNodes + 1;
  COMMCHECKGOTO(commCalloc(&w.firstChild, nn, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&w.nextSibling, nn, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&w.busId, nn, sizeof(*w.busId)), res, exit);
  COMMCHECKGOTO(commCalloc(&w.done, nn, 1), res, exit);
  for (int i = 0; i < topo->nNodes; i++) w.firstChild[i] = -1;
  for (int i = topo->nNodes - 1; i >= 0; i--) { /* prepending in reverse leaves the lists in index order */
    int p = topo->nodes[i].parent;
    w.nextSibling[i] = -1;
    if (p >= 0 && p < topo->nNodes) {
      w.nextSibling[i] = w.firstChild[p];
      w.firstChild[p] = i;
    }
  }
  fprintf(f, "<system version=\"1\">\n");
  for (int hi = 0; hi < topo->nHosts; hi++) {
    const commTopoHost* h = &topo->hosts[hi];
    hostBusIds(&w, h);
    w.netDev = w.gdr = 0;
    for (int i = h->firstNode; i < h->firstNode + h->nNodes; i++)
      if (topo->nodes[i].type == COMM_TOPO_NIC && topo->nodes[i].u.nic.gdr) w.gdr = 1;
    for (int i = h->firstNode; i < h->firstNode + h->nNodes; i++)
      if (topo->nodes[i].type == COMM_TOPO_CPU) COMMCHECKGOTO(writeCpu(&w, i), res, exit);
  }
  fprintf(f, "</system>\n");
  if (fflush(f) != 0 || ferror(f)) {
    WARN("commTopoWriteNcclXml: write failed: %s", strerror(errno));
    res = commSystemError;
  }
exit:
  free(w.firstChild);
  free(w.nextSibling);
  free(w.busId);
  free(w.done);
  return res;
}
