/* NCCL's topology format, step two: the elements of nccl_xml.c onto the graph's builder (docs/ARCHITECTURE.md,
 * "NCCL's topology files", has the table).
 *  - <cpu>: a CPU (numaid, affinity as a cpu list, arch with NCCL's arm64/ppc64 as aarch64/ppc64le, vendor,
 *    familyid, modelid); CPUs with the same host_hash (none: 0) are one host, hosts in order of appearance.
 *  - <pci>: by what it holds, as NCCL reads it: with a <gpu>, that GPU's PCI function (the GPU's bus id and
 *    upstream link); with a <nic>, the NIC's (one libcomm NIC per <net>, sharing the bus id); otherwise a PCI
 *    switch (class 0x0600xx: host bridge), unless its class is a GPU's, an NVSwitch's or a CPU's (skipped, as
 *    NCCL does). Link bandwidth: link_speed x link_width in libcomm's unit (after line encoding: gen5 x16 =
 *    63.0 GB/s); width 0 is taken as 16 (NCCL); an unknown or empty speed leaves the default.
 *  - <nvlink>: tclass 0x03xxxx is a GPU (target: its bus id in this host), 0x068001 a CPU (skipped), anything
 *    else the host's NVSwitch (as NCCL: its bus id is not looked up, a VM shows fffffff:ff:ff.0). Without
 *    tclass: a GPU when the target is one's bus id, else the NVSwitch. Counts to the NVSwitch add up; a GPU
 *    pair is one bundle of the smaller count its two GPUs declare (NCCL lists each pair from both ends).
 *    Bandwidth: count x libcomm's per-link NVLink bandwidth for the GPU's sm (discover.c).
 *  - <net>: a NIC (name, speed in Mb/s with NCCL's 10000 for a speed <= 0, port, guid, gdr); link layer
 *    InfiniBand for class 0x0207xx, else RoCE for an RDMA port (port > 0), else Ethernet; without a class
 *    (a <nic> under a <cpu>), port > 0 is InfiniBand. A <net> under a <cpu> with the name and port of one
 *    already under a CPU of the host is that NIC again (NCCL lists a VM's socket NIC under every CPU). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "debug.h"
#include "graph_internal.h"
#include "nccl_xml.h"
#include "utils.h"
#include "xml_read.h"

#define ERR(d, line, ...) commXmlLexErr(&(d)->lx, line, __VA_ARGS__)

typedef struct {
  const char* busId;
  int host, node, line, type; /* type: COMM_TOPO_GPU, COMM_TOPO_NIC, or -1 (anything else) */
} nxBus;

typedef struct {
  int host, gpu, line;
  const char* target;
  int kind; /* COMM_TOPO_GPU, COMM_TOPO_NVS, COMM_TOPO_CPU (skipped); -1: by the target */
  int count;
  int peer; /* GPU node once resolved */
} nxNvl;

typedef struct {
  uint64_t hash;
  int host;
} nxHost;

typedef struct {
  nxDoc* d;
  commTopo* topo;
  nxHost* hosts;
  int nHosts;
  int* hostNodes; /* nodes per host */
  char (*busIds)[COMM_TOPO_BUSID_MAX];
  nxBus* bus;
  int nBus, busCap;
  nxNvl* nvl;
  int nNvl, nvlCap;
  int gpus;
} nxMap;

static commResult_t growArr(void* arr, int n, int* cap, size_t elem) {
  if (n < *cap) return commSuccess;
  int newCap = *cap ? *cap * 2 : 32;
  COMMCHECK(commRealloc((void**)arr, (size_t)*cap, (size_t)newCap, elem));
  *cap = newCap;
  return commSuccess;
}

/* ---- Attribute values ---- */

static commResult_t attrInt(nxDoc* d, const nxElem* e, const char* name, long lo, long hi, int base, int* out) {
  int line;
  const char* s = commNxVal(d, e, name, &line);
  if (s == NULL) return commSuccess;
  char* end = NULL;
  errno = 0;
  long v = strtol(s, &end, base);
  if (s[0] == '\0' || isWs(s[0]) || *end != '\0' || errno == ERANGE)
    return ERR(d, line, "%s=\"%.*s\" on <%s> is not an integer", name, NAME_SHOWN, s, commNxSpecs[e->el].name);
  if (v < lo || v > hi)
    return ERR(d, line, "%s=%ld on <%s> is outside [%ld, %ld]", name, v, commNxSpecs[e->el].name, lo, hi);
  *out = (int)v;
  return commSuccess;
}

/* Hexadecimal, "0x" optional (NCCL reads these with strtoull(.., 16)), at most `digits` digits. */
static int parseHex(const char* s, int digits, uint64_t* out) {
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s += 2;
  int n = 0;
  uint64_t v = 0;
  for (; s[n]; n++) {
    if (!isHex(s[n])) return -1;
    v = v << 4 | (uint64_t)hexVal(s[n]);
  }
  if (n == 0 || n > digits) return -1;
  *out = v;
  return 0;
}

static commResult_t attrHex(nxDoc* d, const nxElem* e, const char* name, int digits, int64_t* out) {
  int line;
  const char* s = commNxVal(d, e, name, &line);
  uint64_t v;
  if (s == NULL) return commSuccess;
  if (parseHex(s, digits, &v) != 0)
    return ERR(d, line, "%s=\"%.*s\" on <%s> is not a hexadecimal number of at most %d digits", name, NAME_SHOWN, s,
               commNxSpecs[e->el].name, digits);
  *out = (int64_t)v;
  return commSuccess;
}

static commResult_t attrStr(nxDoc* d, const nxElem* e, const char* name, char* dst, size_t cap) {
  int line;
  const char* s = commNxVal(d, e, name, &line);
  if (s == NULL) return commSuccess;
  if (strlen(s) >= cap)
    return ERR(d, line, "%s on <%s> is longer than %zu characters", name, commNxSpecs[e->el].name, cap - 1);
  memcpy(dst, s, strlen(s) + 1);
  return commSuccess;
}

/* NCCL's cpu mask "ffffffff,00000000,..." (32-bit groups, the most significant first) as a cpu list. A list
 * longer than the model holds keeps its first complete entries (as discovery does). Returns -1 if malformed. */
static int maskToList(const char* s, char* out, size_t cap, int* cut) {
  int nGroups = 1;
  for (const char* c = s; *c; c++) nGroups += *c == ',';
  size_t pos = 0;
  int start = -1, bit = 0;
  *cut = 0;
  out[0] = '\0';
  for (int j = 0; j <= nGroups; j++) { /* j: the group of cpus 32j..32j+31, the (nGroups-1-j)-th written */
    uint64_t v = 0;
    if (j < nGroups) {
      const char* p = s;
      for (int k = 0; k < nGroups - 1 - j; k++) p = strchr(p, ',') + 1;
      char grp[16];
      size_t n = strcspn(p, ",");
      if (n == 0 || n >= sizeof(grp)) return -1;
      memcpy(grp, p, n);
      grp[n] = '\0';
      if (parseHex(grp, 8, &v) != 0) return -1;
    }
    for (int i = 0; i < 32 && (j < nGroups || i == 0); i++, bit++) {
      int set = j < nGroups && ((v >> i) & 1);
      if (set && start < 0) start = bit;
      if (!set && start >= 0) {
        char item[32];
        int end = bit - 1;
        int n = start == end ? snprintf(item, sizeof(item), "%s%d", pos ? "," : "", start)
                             : snprintf(item, sizeof(item), "%s%d-%d", pos ? "," : "", start, end);
        if (!*cut && pos + (size_t)n < cap) {
          memcpy(out + pos, item, (size_t)n + 1);
          pos += (size_t)n;
        } else {
          *cut = 1;
        }
        start = -1;
      }
    }
  }
  return 0;
}

/* "32.0 GT/s PCIe", "16 GT/s", "2.5 GT/s PCIe": GT/s, 0 when not one of PCIe's rates. */
static double parseGts(const char* s) {
  static const double rates[] = {2.5, 5.0, 8.0, 16.0, 32.0, 64.0};
  char* end = NULL;
  double v = strtod(s, &end);
  if (end == s || !(v > 0)) return 0;
  while (*end == ' ') end++;
  if (strncmp(end, "GT/s", 4) != 0) return 0;
  for (int g = 0; g < 6; g++)
    if (v > rates[g] * 0.99 && v < rates[g] * 1.01) return rates[g];
  return 0;
}

/* Upstream link of a <pci>: GB/s (0: unknown, the builder's default), PCIe generation and width. */
static commResult_t pciLink(nxDoc* d, const nxElem* e, double* bw, int* gen, int* width) {
  int line;
  const char* speed = commNxVal(d, e, "link_speed", &line);
  *bw = 0;
  *gen = *width = 0;
  const char* w = commNxVal(d, e, "link_width", NULL);
  if (w && w[0]) COMMCHECK(attrInt(d, e, "link_width", 0, 32, 10, width)); /* NCCL writes "" when unknown */
  double gts = speed ? parseGts(speed) : 0;
  if (speed && speed[0] && gts == 0) commNxNote(d, "pci.link_speed not a PCIe rate");
  if (gts > 0) {
    *gen = commTopoPciGen(gts);
    *bw = commTopoPciBw(gts, *width > 0 ? *width : 16);
  }
  return commSuccess;
}

/* ---- Elements ---- */

static commResult_t addNode(nxMap* m, int host, int type, int parent, int line, int* node) {
  if (m->hostNodes[host] >= XML_MAX_HOST_NODES)
    return ERR(m->d, line, "host has more than %d nodes", XML_MAX_HOST_NODES);
  m->hostNodes[host]++;
  return commTopoAddNode(m->topo, host, type, parent, node);
}

static commResult_t addBus(nxMap* m, const char* busId, int host, int node, int line, int type) {
  COMMCHECK(growArr(&m->bus, m->nBus, &m->busCap, sizeof(*m->bus)));
  m->bus[m->nBus++] = (nxBus){busId, host, node, line, type};
  return commSuccess;
}

static commResult_t mapNets(nxMap* m, const nxElem* nic, int host, int parent, const char* busId, double bw, int cls) {
  nxDoc* d = m->d;
  int nets = 0;
  for (int c = nic->firstChild; c >= 0; c = d->el[c].next) {
    const nxElem* e = &d->el[c];
    commTopoNode tmp;
    memset(&tmp, 0, sizeof(tmp));
    int64_t guid = 0;
    if (commNxVal(d, e, "name", NULL) == NULL) return ERR(d, e->line, "<net> lacks the required attribute name");
    COMMCHECK(attrStr(d, e, "name", tmp.name, sizeof(tmp.name)));
    if (tmp.name[0] == '\0') return ERR(d, e->line, "name on <net> is empty");
    int speed = 0;
    COMMCHECK(attrInt(d, e, "speed", -0x7fffffffL, 0x7fffffffL, 10, &speed));
    tmp.u.nic.speedMbps = commNxVal(d, e, "speed", NULL) && speed <= 0 ? 10000 : speed;
    COMMCHECK(attrInt(d, e, "port", 0, 255, 10, &tmp.u.nic.port));
    COMMCHECK(attrHex(d, e, "guid", 16, &guid));
    COMMCHECK(attrInt(d, e, "gdr", 0, 1, 10, &tmp.u.nic.gdr));
    nets++;
    if (busId[0] == '\0') { /* a NIC without PCI function: listed once per CPU by NCCL */
      int dup = 0;
      for (int i = 0; i < m->topo->nNodes && !dup; i++) {
        const commTopoNode* o = &m->topo->nodes[i];
        dup = o->type == COMM_TOPO_NIC && o->host == host && o->busId[0] == '\0' && o->u.nic.port == tmp.u.nic.port &&
              strcmp(o->name, tmp.name) == 0;
      }
      if (dup) {
        commNxNote(d, "<net> listed again under another <cpu>");
        continue;
      }
    }
    int node;
    COMMCHECK(addNode(m, host, COMM_TOPO_NIC, parent, e->line, &node));
    commTopoNode* n = commTopoNodeAt(m->topo, node);
    snprintf(n->busId, sizeof(n->busId), "%s", busId);
    memcpy(n->name, tmp.name, sizeof(n->name));
    memcpy(n->u.nic.netdev, tmp.name, sizeof(n->u.nic.netdev));
    n->bw = bw;
    n->u.nic.speedMbps = tmp.u.nic.speedMbps;
    n->u.nic.port = tmp.u.nic.port;
    n->u.nic.guid = (uint64_t)guid;
    n->u.nic.gdr = tmp.u.nic.gdr;
    n->u.nic.link = (cls >> 8) == (NX_IB_CLASS >> 8) ? COMM_NIC_IB
                    : tmp.u.nic.port > 0             ? (cls >= 0 ? COMM_NIC_ROCE : COMM_NIC_IB)
                                                     : COMM_NIC_ETH;
  }
  if (nets == 0) commNxNote(d, "<nic> without <net>");
  return commSuccess;
}

static commResult_t mapGpu(nxMap* m, const nxElem* e, int host, int parent, const char* busId, double bw, int line) {
  nxDoc* d = m->d;
  int node;
  commTopoNode tmp;
  memset(&tmp, 0, sizeof(tmp));
  tmp.u.gpu.dev = -1;
  COMMCHECK(attrInt(d, e, "dev", -1, 65535, 10, &tmp.u.gpu.dev));
  COMMCHECK(attrInt(d, e, "sm", 0, 10000, 10, &tmp.u.gpu.sm));
  COMMCHECK(addNode(m, host, COMM_TOPO_GPU, parent, e->line, &node));
  commTopoNode* n = commTopoNodeAt(m->topo, node);
  snprintf(n->busId, sizeof(n->busId), "%s", busId);
  n->bw = bw;
  n->u.gpu = tmp.u.gpu;
  COMMCHECK(addBus(m, busId, host, node, line, COMM_TOPO_GPU));
  m->gpus++;
  for (int c = e->firstChild; c >= 0; c = d->el[c].next) {
    const nxElem* l = &d->el[c];
    nxNvl v = {host, node, l->line, NULL, -1, 0, -1};
    int64_t cls = -1;
    v.target = commNxVal(d, l, "target", NULL);
    if (v.target == NULL) return ERR(d, l->line, "<nvlink> lacks the required attribute target");
    if (commNxVal(d, l, "count", NULL) == NULL) return ERR(d, l->line, "<nvlink> lacks the required attribute count");
    COMMCHECK(attrInt(d, l, "count", 0, COMM_TOPO_MAX_NVLINKS, 10, &v.count));
    COMMCHECK(attrHex(d, l, "tclass", 8, &cls));
    if (cls >= 0)
      v.kind = (cls >> 16) == (NX_GPU_CLASS >> 16) ? COMM_TOPO_GPU
               : cls == NX_CPU_CLASS               ? COMM_TOPO_CPU
                                                   : COMM_TOPO_NVS;
    if (v.kind == COMM_TOPO_CPU) commNxNote(d, "<nvlink> to a CPU");
    if (v.count == 0 || v.kind == COMM_TOPO_CPU) continue;
    COMMCHECK(growArr(&m->nvl, m->nNvl, &m->nvlCap, sizeof(*m->nvl)));
    m->nvl[m->nNvl++] = v;
  }
  return commSuccess;
}

static int childCount(const nxDoc* d, const nxElem* e, int el, int* first) {
  int n = 0;
  *first = -1;
  for (int c = e->firstChild; c >= 0; c = d->el[c].next)
    if (d->el[c].el == el && n++ == 0) *first = c;
  return n;
}

static commResult_t mapPci(nxMap* m, int ei, int host, int parent) {
  nxDoc* d = m->d;
  const nxElem* e = &d->el[ei];
  int line, gen, width, gpu, nic, sub;
  const char* raw = commNxVal(d, e, "busid", &line);
  if (raw == NULL) return ERR(d, e->line, "<pci> lacks the required attribute busid");
  char* busId = m->busIds[ei];
  if (commXmlNormBusId(raw, busId) != 0)
    return ERR(d, line, "busid=\"%.*s\" on <pci> is not a PCI address dddd:bb:dd.f", NAME_SHOWN, raw);
  int64_t cls = -1;
  double bw;
  COMMCHECK(attrHex(d, e, "class", 8, &cls));
  COMMCHECK(pciLink(d, e, &bw, &gen, &width));
  int nGpu = childCount(d, e, NX_GPU, &gpu), nNic = childCount(d, e, NX_NIC, &nic);
  int nPci = childCount(d, e, NX_PCI, &sub);
  if (nGpu > 0) {
    if (nNic > 0 || nPci > 0)
      return ERR(d, e->line, "<pci busid=\"%s\"> holds a <gpu> and a <%s>: one PCI function is one device", busId,
                 nNic > 0 ? "nic" : "pci");
    if (nGpu > 1) commNxNote(d, "<gpu> after the first of a <pci> (ranks sharing a GPU)");
    return mapGpu(m, &d->el[gpu], host, parent, busId, bw, line);
  }
  if (nNic > 0) {
    if (nNic > 1) commNxNote(d, "<nic> after the first of a <pci>");
    if (nPci > 0) commNxNote(d, "<pci> inside a NIC's <pci>");
    COMMCHECK(addBus(m, busId, host, -1, line, COMM_TOPO_NIC));
    return mapNets(m, &d->el[nic], host, parent, busId, bw, (int)cls);
  }
  COMMCHECK(addBus(m, busId, host, -1, line, -1));
  if (cls >= 0 && ((cls >> 16) == (NX_GPU_CLASS >> 16) || cls == NX_NVSWITCH_CLASS || cls == NX_CPU_CLASS)) {
    commNxNote(d, (cls >> 16) == 3 ? "<pci> of a GPU without <gpu>" : "<pci> of an NVSwitch or CPU");
    return commSuccess;
  }
  int node;
  COMMCHECK(addNode(m, host, COMM_TOPO_PCI, parent, e->line, &node));
  commTopoNode* n = commTopoNodeAt(m->topo, node);
  memcpy(n->busId, busId, sizeof(n->busId));
  n->bw = bw;
  n->u.pci.kind = (cls >> 8) == (NX_HOSTBRIDGE_CLASS >> 8) ? COMM_PCI_HOSTBRIDGE : COMM_PCI_SWITCH;
  n->u.pci.gen = gen;
  n->u.pci.width = width;
  for (int c = e->firstChild; c >= 0; c = d->el[c].next)
    if (d->el[c].el == NX_PCI) COMMCHECK(mapPci(m, c, host, node));
  return commSuccess;
}

static commResult_t mapCpu(nxMap* m, int ei) {
  nxDoc* d = m->d;
  const nxElem* e = &d->el[ei];
  int64_t hash = 0;
  COMMCHECK(attrHex(d, e, "host_hash", 16, &hash));
  int host = -1;
  for (int i = 0; i < m->nHosts; i++)
    if (m->hosts[i].hash == (uint64_t)hash) host = m->hosts[i].host;
  if (host < 0) {
    COMMCHECK(commTopoAddHost(m->topo, "", &host));
    m->hosts[m->nHosts++] = (nxHost){(uint64_t)hash, host};
  }
  commTopoNode tmp;
  memset(&tmp, 0, sizeof(tmp));
  tmp.u.cpu.numa = -1;
  COMMCHECK(attrInt(d, e, "numaid", -1, 65535, 10, &tmp.u.cpu.numa));
  int line;
  const char* mask = commNxVal(d, e, "affinity", &line);
  int cut = 0;
  if (mask && maskToList(mask, tmp.u.cpu.cpus, sizeof(tmp.u.cpu.cpus), &cut) != 0)
    return ERR(d, line, "affinity=\"%.*s\" on <cpu> is not a cpu mask like ffffffff,00000000", NAME_SHOWN, mask);
  if (cut) commNxNote(d, "cpu.affinity cut to the first cpus that fit");
  COMMCHECK(attrStr(d, e, "arch", tmp.u.cpu.arch, sizeof(tmp.u.cpu.arch)));
  if (strcmp(tmp.u.cpu.arch, "arm64") == 0) snprintf(tmp.u.cpu.arch, sizeof(tmp.u.cpu.arch), "aarch64");
  if (strcmp(tmp.u.cpu.arch, "ppc64") == 0) snprintf(tmp.u.cpu.arch, sizeof(tmp.u.cpu.arch), "ppc64le");
  COMMCHECK(attrStr(d, e, "vendor", tmp.u.cpu.vendor, sizeof(tmp.u.cpu.vendor)));
  COMMCHECK(attrInt(d, e, "familyid", 0, 65535, 0, &tmp.u.cpu.family));
  COMMCHECK(attrInt(d, e, "modelid", 0, 65535, 0, &tmp.u.cpu.model));
  int node;
  COMMCHECK(addNode(m, host, COMM_TOPO_CPU, -1, e->line, &node));
  commTopoNodeAt(m->topo, node)->u.cpu = tmp.u.cpu;
  for (int c = e->firstChild; c >= 0; c = d->el[c].next) {
    if (d->el[c].el == NX_PCI) COMMCHECK(mapPci(m, c, host, node));
    if (d->el[c].el == NX_NIC) COMMCHECK(mapNets(m, &d->el[c], host, node, "", 0, -1));
  }
  return commSuccess;
}

/* ---- Bus ids and NVLinks, once every element is read ---- */

static int cmpBus(const void* a, const void* b) {
  const nxBus *x = a, *y = b;
  if (x->host != y->host) return x->host - y->host;
  int c = strcmp(x->busId, y->busId);
  return c ? c : x->line - y->line;
}

static const nxBus* findBus(const nxMap* m, int host, const char* busId) {
  int lo = 0, hi = m->nBus;
  nxBus key = {busId, host, 0, -1, 0};
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (cmpBus(&m->bus[mid], &key) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo < m->nBus && m->bus[lo].host == host && strcmp(m->bus[lo].busId, busId) == 0 ? &m->bus[lo] : NULL;
}

static int cmpNvlPair(const void* a, const void* b) {
  const nxNvl *x = a, *y = b;
  int xl = COMM_MIN(x->gpu, x->peer), yl = COMM_MIN(y->gpu, y->peer);
  if (xl != yl) return xl - yl;
  int xh = COMM_MAX(x->gpu, x->peer), yh = COMM_MAX(y->gpu, y->peer);
  return xh != yh ? xh - yh : x->line - y->line;
}

static double nvlBw(const nxMap* m, int gpu, int count) {
  return count * commTopoNvlinkBw(m->topo->nodes[gpu].u.gpu.sm);
}

static commResult_t addNvlinks(nxMap* m) {
  nxDoc* d = m->d;
  int* nvsCount = NULL;
  int* nvsNode = NULL;
  int* nvsLine = NULL;
  commResult_t res = commSuccess;
  int nNodes = m->topo->nNodes;
  COMMCHECKGOTO(commCalloc(&nvsCount, (size_t)nNodes + 1, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&nvsNode, (size_t)m->topo->nHosts + 1, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&nvsLine, (size_t)m->topo->nHosts + 1, sizeof(int)), res, exit);
  for (int h = 0; h < m->topo->nHosts; h++) nvsNode[h] = -1;
  int nPairs = 0;
  for (int i = 0; i < m->nNvl; i++) {
    nxNvl* v = &m->nvl[i];
    char bus[COMM_TOPO_BUSID_MAX];
    const nxBus* b = commXmlNormBusId(v->target, bus) == 0 ? findBus(m, v->host, bus) : NULL;
    if (v->kind < 0) v->kind = b && b->type == COMM_TOPO_GPU ? COMM_TOPO_GPU : COMM_TOPO_NVS;
    if (v->kind == COMM_TOPO_NVS) {
      if (nvsCount[v->gpu] == 0 && nvsLine[v->host] == 0) nvsLine[v->host] = v->line;
      nvsCount[v->gpu] += v->count;
      if (nvsCount[v->gpu] > COMM_TOPO_MAX_NVLINKS) {
        res = ERR(d, v->line, "more than %d NVLinks from one GPU to the NVSwitches", COMM_TOPO_MAX_NVLINKS);
        goto exit;
      }
      continue;
    }
    if (b == NULL || b->type != COMM_TOPO_GPU) {
      res = ERR(d, v->line, "nvlink target=\"%.*s\" (a GPU by its tclass) is not the bus id of a <gpu> of this host",
                NAME_SHOWN, v->target);
      goto exit;
    }
    if (b->node == v->gpu) {
      res = ERR(d, v->line, "nvlink target %s is the GPU itself", bus);
      goto exit;
    }
    v->peer = b->node;
    m->nvl[nPairs++] = *v;
  }
  for (int g = 0; g < nNodes; g++) {
    if (nvsCount[g] == 0) continue;
    int h = m->topo->nodes[g].host;
    if (nvsNode[h] < 0) COMMCHECKGOTO(addNode(m, h, COMM_TOPO_NVS, -1, nvsLine[h], &nvsNode[h]), res, exit);
    COMMCHECKGOTO(commTopoAddNvlink(m->topo, g, nvsNode[h], nvsCount[g], nvlBw(m, g, nvsCount[g])), res, exit);
  }
  /* GPU pairs: the links each end declares, the smaller count when both do. */
  if (nPairs > 1) qsort(m->nvl, (size_t)nPairs, sizeof(*m->nvl), cmpNvlPair);
  for (int i = 0; i < nPairs;) {
    int lo = COMM_MIN(m->nvl[i].gpu, m->nvl[i].peer), hi = COMM_MAX(m->nvl[i].gpu, m->nvl[i].peer);
    int fromLo = 0, fromHi = 0, j = i;
    for (; j < nPairs && COMM_MIN(m->nvl[j].gpu, m->nvl[j].peer) == lo && COMM_MAX(m->nvl[j].gpu, m->nvl[j].peer) == hi;
         j++) {
      int* sum = m->nvl[j].gpu == lo ? &fromLo : &fromHi;
      *sum += m->nvl[j].count;
      if (*sum > COMM_TOPO_MAX_NVLINKS) {
        res = ERR(d, m->nvl[j].line, "more than %d NVLinks between two GPUs", COMM_TOPO_MAX_NVLINKS);
        goto exit;
      }
    }
    int count = fromLo && fromHi ? COMM_MIN(fromLo, fromHi) : COMM_MAX(fromLo, fromHi);
    COMMCHECKGOTO(commTopoAddNvlink(m->topo, lo, hi, count, nvlBw(m, lo, count)), res, exit);
    i = j;
  }
exit:
  free(nvsCount);
  free(nvsNode);
  free(nvsLine);
  return res;
}

commResult_t commNxMap(nxDoc* d, commTopo* topo) {
  nxMap m;
  commResult_t res = commSuccess;
  memset(&m, 0, sizeof(m));
  m.d = d;
  m.topo = topo;
  const nxElem* sys = &d->el[0];
  int version = 0, line;
  if (commNxVal(d, sys, "version", &line) == NULL)
    return ERR(d, sys->line, "<system> lacks the required attribute version");
  COMMCHECK(attrInt(d, sys, "version", 0, 0x7fffffffL, 10, &version));
  if (version != 1) return ERR(d, line, "version=\"%d\" on <system>: NCCL's topology files are version 1", version);
  int nCpus = 0;
  for (int c = sys->firstChild; c >= 0; c = d->el[c].next) nCpus++;
  if (nCpus == 0) return ERR(d, sys->line, "<system> has no <cpu>");
  COMMCHECKGOTO(commCalloc(&m.hosts, (size_t)nCpus, sizeof(*m.hosts)), res, exit);
  COMMCHECKGOTO(commCalloc(&m.hostNodes, (size_t)nCpus, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&m.busIds, (size_t)d->nEl, sizeof(*m.busIds)), res, exit);
  for (int c = sys->firstChild; c >= 0; c = d->el[c].next) COMMCHECKGOTO(mapCpu(&m, c), res, exit);
  if (m.nBus > 1) qsort(m.bus, (size_t)m.nBus, sizeof(*m.bus), cmpBus);
  for (int i = 1; i < m.nBus; i++)
    if (m.bus[i].host == m.bus[i - 1].host && strcmp(m.bus[i].busId, m.bus[i - 1].busId) == 0) {
      res = ERR(d, m.bus[i].line, "duplicate bus id %s (also on line %d)", m.bus[i].busId, m.bus[i - 1].line);
      goto exit;
    }
  COMMCHECKGOTO(addNvlinks(&m), res, exit);
exit:
  free(m.hosts);
  free(m.hostNodes);
  free(m.busIds);
  free(m.bus);
  free(m.nvl);
  return res;
}
