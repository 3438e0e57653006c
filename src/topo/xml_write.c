/* The canonical topology file writer: dump -> load -> dump is byte-identical (the reader is
 * src/topo/xml.c; format in src/topo/topo.h); and the files a user names, in libcomm's format or in NCCL's
 * (nccl_xml_write.c), COMM_TOPO_DUMP_FILE's among them. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "debug.h"
#include "param.h"
#include "topo.h"
#include "utils.h"
#include "xml_internal.h"

/* ---- Writer ---- */

void commXmlPutEscaped(FILE* f, const char* s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    switch (c) {
      case '&': fputs("&amp;", f); break;
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '"': fputs("&quot;", f); break;
      case '\'': fputs("&apos;", f); break;
      default:
        if (c < 0x20 || c == 0x7f) fprintf(f, "&#%d;", c);
        else fputc(c, f);
    }
  }
}
static void putStr(FILE* f, const char* name, const char* v) {
  fprintf(f, " %s=\"", name);
  commXmlPutEscaped(f, v);
  fputc('"', f);
}
static void putStrIf(FILE* f, const char* name, const char* v) {
  if (v[0]) putStr(f, name, v);
}
static void putIntIf(FILE* f, const char* name, int v, int dflt) {
  if (v != dflt) fprintf(f, " %s=\"%d\"", name, v);
}
/* Bandwidths with one decimal; omitted when they print as zero, so that a re-read writes the same. */
static void putBw(FILE* f, const char* name, double v) {
  char buf[64];
  snprintf(buf, sizeof(buf), "%.1f", v);
  if (strcmp(buf, "0.0") != 0 && strcmp(buf, "-0.0") != 0) fprintf(f, " %s=\"%s\"", name, buf);
}
static void indent(FILE* f, int depth) { fprintf(f, "%*s", 2 * depth, ""); }

typedef struct {
  const commTopo* topo;
  FILE* f;
  int* firstChild;
  int* nextSibling;
  int* firstNvl; /* per node: its first NVLink written below it (link index) */
  int* nextNvl;  /* per link */
} xmlWriter;

static int nvlOwner(const commTopo* topo, const commTopoLink* l) {
  if (topo->nodes[l->a].type == COMM_TOPO_GPU) return l->a;
  if (topo->nodes[l->b].type == COMM_TOPO_GPU) return l->b;
  return -1;
}

static commResult_t writeNode(xmlWriter* w, int n, int depth) {
  const commTopo* topo = w->topo;
  const commTopoNode* nd = &topo->nodes[n];
  FILE* f = w->f;
  const char* el;
  if (depth + (w->firstNvl[n] >= 0) >= XML_MAX_DEPTH) { /* as the reader counts: <nvlink> is one deeper */
    WARN("commTopoWriteXml: node %d is nested deeper than the file format allows (%d)", n, XML_MAX_DEPTH);
    return commInvalidArgument;
  }
  indent(f, depth);
  switch (nd->type) {
    case COMM_TOPO_CPU:
      el = "cpu";
      fprintf(f, "<cpu");
      putIntIf(f, "numa", nd->u.cpu.numa, -1);
      putStrIf(f, "arch", nd->u.cpu.arch);
      putStrIf(f, "vendor", nd->u.cpu.vendor);
      putStrIf(f, "cpus", nd->u.cpu.cpus);
      putIntIf(f, "cores", nd->u.cpu.nCores, 0);
      putStrIf(f, "name", nd->name);
      if (nd->u.cpu.family > 0) fprintf(f, " family=\"%d\" model=\"%d\"", nd->u.cpu.family, nd->u.cpu.model);
      break;
    case COMM_TOPO_PCI:
      el = "pci";
      if (nd->u.pci.kind < 0 || nd->u.pci.kind > 2) {
        WARN("commTopoWriteXml: PCI node %d has an unknown kind %d", n, nd->u.pci.kind);
        return commInvalidArgument;
      }
      fprintf(f, "<pci");
      putStrIf(f, "busid", nd->busId);
      putStr(f, "kind", commTopoPciKindNames[nd->u.pci.kind]);
      putIntIf(f, "gen", nd->u.pci.gen, 0);
      putIntIf(f, "width", nd->u.pci.width, 0);
      putBw(f, "bw", nd->bw);
      break;
    case COMM_TOPO_GPU:
      el = "gpu";
      fprintf(f, "<gpu");
      putStr(f, "busid", nd->busId);
      putIntIf(f, "dev", nd->u.gpu.dev, -1);
      putIntIf(f, "sm", nd->u.gpu.sm, 0);
      putIntIf(f, "mem", nd->u.gpu.memMB, 0);
      putStrIf(f, "name", nd->name);
      putBw(f, "bw", nd->bw);
      break;
    case COMM_TOPO_NIC:
      el = "nic";
      if (nd->u.nic.link < 0 || nd->u.nic.link > 2) {
        WARN("commTopoWriteXml: NIC %s has an unknown link layer %d", nd->name, nd->u.nic.link);
        return commInvalidArgument;
      }
      fprintf(f, "<nic");
      putStrIf(f, "busid", nd->busId);
      putStr(f, "name", nd->name);
      putStr(f, "link", commTopoNicLinkNames[nd->u.nic.link]);
      putIntIf(f, "port", nd->u.nic.port, 0);
      putIntIf(f, "speed", nd->u.nic.speedMbps, 0);
      if (strcmp(nd->u.nic.netdev, nd->name) != 0) putStr(f, "netdev", nd->u.nic.netdev);
      if (nd->u.nic.guid) fprintf(f, " guid=\"0x%016" PRIx64 "\"", nd->u.nic.guid);
      putIntIf(f, "gdr", nd->u.nic.gdr, 0);
      putBw(f, "bw", nd->bw);
      break;
    default:
      WARN("commTopoWriteXml: node %d of type %d cannot be written below a CPU", n, nd->type);
      return commInvalidArgument;
  }
  int hasChildren = w->firstChild[n] >= 0 || w->firstNvl[n] >= 0;
  if (!hasChildren) {
    fprintf(f, "/>\n");
    return commSuccess;
  }
  fprintf(f, ">\n");
  for (int l = w->firstNvl[n]; l >= 0; l = w->nextNvl[l]) {
    const commTopoLink* lk = &topo->links[l];
    int peer = lk->a == n ? lk->b : lk->a;
    indent(f, depth + 1);
    fprintf(f, "<nvlink");
    putStr(f, "target", topo->nodes[peer].type == COMM_TOPO_NVS ? "nvswitch" : topo->nodes[peer].busId);
    fprintf(f, " count=\"%d\"", lk->count);
    putBw(f, "bw", lk->bw);
    fprintf(f, "/>\n");
  }
  for (int c = w->firstChild[n]; c >= 0; c = w->nextSibling[c]) COMMCHECK(writeNode(w, c, depth + 1));
  indent(f, depth);
  fprintf(f, "</%s>\n", el);
  return commSuccess;
}

static commResult_t writeAll(xmlWriter* w) {
  const commTopo* topo = w->topo;
  FILE* f = w->f;
  fprintf(f, "<?xml version=\"1.0\"?>\n<topology version=\"1\">\n");
  for (int h = 0; h < topo->nHosts; h++) {
    const commTopoHost* host = &topo->hosts[h];
    int any = 0;
    for (int i = host->firstNode; i < host->firstNode + host->nNodes; i++)
      if (topo->nodes[i].type == COMM_TOPO_CPU) any = 1;
    indent(f, 1);
    fprintf(f, "<host");
    putStrIf(f, "name", host->name);
    putBw(f, "cpulinkbw", host->cpuLinkBw);
    fprintf(f, any ? ">\n" : "/>\n");
    if (!any) continue;
    for (int i = host->firstNode; i < host->firstNode + host->nNodes; i++)
      if (topo->nodes[i].type == COMM_TOPO_CPU && topo->nodes[i].parent < 0) COMMCHECK(writeNode(w, i, 2));
    indent(f, 1);
    fprintf(f, "</host>\n");
  }
  fprintf(f, "</topology>\n");
  return commSuccess;
}

commResult_t commTopoWriteXml(const commTopo* topo, FILE* f) {
  commResult_t res = commSuccess;
  if (topo == NULL || f == NULL) {
    WARN("commTopoWriteXml: NULL argument");
    return commInvalidArgument;
  }
  if (!topo->finished) {
    WARN("commTopoWriteXml: the topology is not finished (commTopoFinish)");
    return commInvalidArgument;
  }
  xmlWriter w = {topo, f, NULL, NULL, NULL, NULL};
  size_t nn = (size_t)topo->nNodes + 1, nl = (size_t)topo->nLinks + 1;
  COMMCHECKGOTO(commCalloc(&w.firstChild, nn, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&w.nextSibling, nn, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&w.firstNvl, nn, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&w.nextNvl, nl, sizeof(int)), res, exit);
  for (int i = 0; i < topo->nNodes; i++) w.firstChild[i] = w.firstNvl[i] = -1;
  /* Prepending in reverse index order leaves every list in index order. */
  for (int i = topo->nNodes - 1; i >= 0; i--) {
    int p = topo->nodes[i].parent;
    w.nextSibling[i] = -1;
    if (p >= 0 && p < topo->nNodes) {
      w.nextSibling[i] = w.firstChild[p];
      w.firstChild[p] = i;
    }
  }
  for (int l = topo->nLinks - 1; l >= 0; l--) {
    w.nextNvl[l] = -1;
    if (topo->links[l].type != COMM_LINK_NVL) continue;
    int g = nvlOwner(topo, &topo->links[l]);
    if (g < 0) {
      WARN("commTopoWriteXml: NVLink %d joins no GPU", l);
      res = commInvalidArgument;
      goto exit;
    }
    w.nextNvl[l] = w.firstNvl[g];
    w.firstNvl[g] = l;
  }
  COMMCHECKGOTO(writeAll(&w), res, exit);
  if (fflush(f) != 0 || ferror(f)) {
    WARN("commTopoWriteXml: write failed: %s", strerror(errno));
    res = commSystemError;
  }
exit:
  free(w.firstChild);
  free(w.nextSibling);
  free(w.firstNvl);
  free(w.nextNvl);
  return res;
}

int commTopoDumpFormat(void) {
  static int warned;
  const char* v = commParamStr("COMM_TOPO_DUMP_FORMAT", NULL);
  if (v != NULL) {
    if (strcasecmp(v, "nccl") == 0) return COMM_TOPO_FORMAT_NCCL;
    if (strcasecmp(v, "comm") == 0 || strcasecmp(v, "libcomm") == 0) return COMM_TOPO_FORMAT_COMM;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      WARN("COMM_TOPO_DUMP_FORMAT=%s is neither comm nor nccl: ignored", v);
  }
  return commParamFromNccl("COMM_TOPO_DUMP_FILE") ? COMM_TOPO_FORMAT_NCCL : COMM_TOPO_FORMAT_COMM;
}

commResult_t commTopoDumpFile(const commTopo* topo, const char* path, int format) {
  if (path == NULL) {
    WARN("commTopoDumpFile: NULL path");
    return commInvalidArgument;
  }
  if (format != COMM_TOPO_FORMAT_COMM && format != COMM_TOPO_FORMAT_NCCL) {
    WARN("commTopoDumpFile: unknown format %d", format);
    return commInvalidArgument;
  }
  FILE* f = NULL;
  COMMCHECK(commTopoCreateFile("topology file", path, &f));
  commResult_t res = format == COMM_TOPO_FORMAT_NCCL ? commTopoWriteNcclXml(topo, f) : commTopoWriteXml(topo, f);
  if (fclose(f) != 0 && res == commSuccess) {
    WARN("cannot write topology file %s: %s", path, strerror(errno));
    res = commSystemError;
  }
  return res;
}

commResult_t commTopoDumpXml(const commTopo* topo, const char* path) {
  int format = commTopoDumpFormat();
  if (format == COMM_TOPO_FORMAT_NCCL)
    INFO(COMM_TOPO | COMM_INIT, "topology dump %s in NCCL's format (%s)", path ? path : "(null)",
         commParamStr("COMM_TOPO_DUMP_FORMAT", NULL) ? "COMM_TOPO_DUMP_FORMAT" : "NCCL_TOPO_DUMP_FILE");
  return commTopoDumpFile(topo, path, format);
}
