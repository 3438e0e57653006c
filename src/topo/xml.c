/* Topology files: a small XML reader that fills the graph through the builder (attribute values in
 * xml_attr.c, what both share in xml_read.h, the lexing in xml_lex.c; the canonical writer is
 * src/topo/xml_write.c; format in src/topo/topo.h). A file whose root element is NCCL's <system> goes to
 * NCCL's format's reader (nccl_xml.c). The reader knows only what the format needs: elements, attributes
 * quoted with " or ', the five predefined entities and ASCII character references, comments and the
 * <?xml ...?> prolog. DTDs, CDATA, processing instructions and text content are errors. Every error is
 * one WARN "<source>:<line>: <what is wrong>" and commInvalidArgument; nothing is returned. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "debug.h"
#include "topo.h"
#include "utils.h"
#include "nccl_xml.h"
#include "xml_internal.h"
#include "xml_read.h"

/* ---- Schema ---- */

#define IN(el) (1u << (el))
/* The attribute order here is the order the writer uses. */
const xmlElemSpec commXmlSpecs[EL_COUNT] = {
    {"topology", 0, {"version"}},
    {"host", IN(EL_TOPOLOGY), {"name", "cpulinkbw"}},
    {"cpu", IN(EL_HOST), {"numa", "arch", "vendor", "cpus", "cores", "name", "family", "model"}},
    {"pci", IN(EL_CPU) | IN(EL_PCI), {"busid", "kind", "gen", "width", "bw"}},
    {"gpu", IN(EL_CPU) | IN(EL_PCI), {"busid", "dev", "sm", "mem", "name", "bw"}},
    {"nic", IN(EL_CPU) | IN(EL_PCI), {"busid", "name", "link", "port", "speed", "netdev", "guid", "gdr", "bw"}},
    {"nvlink", IN(EL_GPU), {"target", "count", "bw"}},
};

const char* const commTopoPciKindNames[3] = {"bridge", "switch", "hostbridge"};
const char* const commTopoNicLinkNames[3] = {"eth", "ib", "roce"};

commResult_t commXmlErr(xmlParser* x, int line, const char* fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return commXmlLexErr(&x->lx, line, "%s", msg);
}

static commResult_t growInts(int** arr, int* cap, int need) {
  if (need <= *cap) return commSuccess;
  int newCap = *cap ? *cap : 64;
  while (newCap < need) newCap *= 2;
  COMMCHECK(commRealloc(arr, (size_t)*cap, (size_t)newCap, sizeof(int)));
  *cap = newCap;
  return commSuccess;
}

/* ---- Lexing (xml_lex.c) ---- */

static int atEnd(const xmlParser* x) { return xmlAtEnd(&x->lx); }
static int startsWith(const xmlParser* x, const char* s) { return commXmlStartsWith(&x->lx, s); }
static void step(xmlParser* x) { commXmlStep(&x->lx); }
static int skipWs(xmlParser* x) { return commXmlSkipWs(&x->lx); }
static const char* readName(xmlParser* x, int* len) { return commXmlReadName(&x->lx, len); }
static commResult_t readValue(xmlParser* x, const char* attr, char* out) { return commXmlReadValue(&x->lx, attr, out); }
static commResult_t skipUntil(xmlParser* x, const char* open, const char* close, const char* what) {
  return commXmlSkipUntil(&x->lx, open, close, what);
}

static int findElem(const char* s, int len) {
  for (int e = 0; e < EL_COUNT; e++)
    if ((int)strlen(commXmlSpecs[e].name) == len && memcmp(commXmlSpecs[e].name, s, (size_t)len) == 0) return e;
  return -1;
}
static int findAttr(int el, const char* s, int len) {
  for (int a = 0; commXmlSpecs[el].attrs[a]; a++)
    if ((int)strlen(commXmlSpecs[el].attrs[a]) == len && memcmp(commXmlSpecs[el].attrs[a], s, (size_t)len) == 0)
      return a;
  return -1;
}
int commXmlAttrIndex(int el, const char* name) { return findAttr(el, name, (int)strlen(name)); }

/* ---- Elements ---- */

static commResult_t addNode(xmlParser* x, int type, int parent, int line, int* node) {
  if (x->topo->nNodes - x->hostFirstNode >= XML_MAX_HOST_NODES)
    return commXmlErr(x, line, "host has more than %d nodes", XML_MAX_HOST_NODES);
  COMMCHECK(commTopoAddNode(x->topo, x->host, type, parent, node));
  COMMCHECK(growInts(&x->nodeLines, &x->nodeLinesCap, *node + 1));
  x->nodeLines[*node] = line;
  return commSuccess;
}

static commResult_t openElement(xmlParser* x, int el, int line, int* node) {
  commTopo* topo = x->topo;
  int parent = x->depth > 0 ? x->stack[x->depth - 1].node : -1;
  *node = -1;
  switch (el) {
    case EL_TOPOLOGY: {
      int version = 1;
      COMMCHECK(commXmlAttrInt(x, el, "version", 1, 1, &version));
      break;
    }
    case EL_HOST: {
      char name[COMM_TOPO_NAME_MAX] = "";
      double bw = 0;
      COMMCHECK(commXmlAttrStr(x, el, "name", name, sizeof(name)));
      COMMCHECK(commXmlAttrBw(x, el, "cpulinkbw", &bw));
      COMMCHECK(commTopoAddHost(topo, name, &x->host));
      topo->hosts[x->host].cpuLinkBw = bw;
      COMMCHECK(growInts(&x->hostLines, &x->hostLinesCap, x->host + 1));
      x->hostLines[x->host] = line;
      x->hostLine = line;
      x->hostFirstNode = topo->nNodes;
      x->nNv = 0;
      break;
    }
    case EL_CPU: {
      commTopoNode tmp;
      memset(&tmp, 0, sizeof(tmp));
      tmp.u.cpu.numa = -1;
      COMMCHECK(commXmlAttrInt(x, el, "numa", -1, 65535, &tmp.u.cpu.numa));
      COMMCHECK(commXmlAttrStr(x, el, "arch", tmp.u.cpu.arch, sizeof(tmp.u.cpu.arch)));
      COMMCHECK(commXmlAttrStr(x, el, "vendor", tmp.u.cpu.vendor, sizeof(tmp.u.cpu.vendor)));
      COMMCHECK(commXmlAttrStr(x, el, "cpus", tmp.u.cpu.cpus, sizeof(tmp.u.cpu.cpus)));
      if (!commXmlValidCpuList(tmp.u.cpu.cpus))
        return commXmlErr(x, x->attrLine[commXmlAttrIndex(el, "cpus")],
                          "cpus=\"%.*s\" on <cpu> is not a cpu list like 0-7,16-23", NAME_SHOWN, tmp.u.cpu.cpus);
      COMMCHECK(commXmlAttrInt(x, el, "cores", 0, 1 << 24, &tmp.u.cpu.nCores));
      COMMCHECK(commXmlAttrStr(x, el, "name", tmp.name, sizeof(tmp.name)));
      COMMCHECK(commXmlAttrInt(x, el, "family", 0, 65535, &tmp.u.cpu.family));
      COMMCHECK(commXmlAttrInt(x, el, "model", 0, 65535, &tmp.u.cpu.model));
      COMMCHECK(addNode(x, COMM_TOPO_CPU, -1, line, node));
      commTopoNode* n = commTopoNodeAt(topo, *node);
      memcpy(n->name, tmp.name, sizeof(n->name));
      n->u.cpu = tmp.u.cpu;
      break;
    }
    case EL_PCI: {
      commTopoNode tmp;
      memset(&tmp, 0, sizeof(tmp));
      COMMCHECK(commXmlAttrBusId(x, el, tmp.busId));
      COMMCHECK(commXmlAttrEnum(x, el, "kind", commTopoPciKindNames, 3, &tmp.u.pci.kind));
      COMMCHECK(commXmlAttrInt(x, el, "gen", 0, 16, &tmp.u.pci.gen));
      COMMCHECK(commXmlAttrInt(x, el, "width", 0, 32, &tmp.u.pci.width));
      COMMCHECK(commXmlAttrBw(x, el, "bw", &tmp.bw));
      COMMCHECK(addNode(x, COMM_TOPO_PCI, parent, line, node));
      commTopoNode* n = commTopoNodeAt(topo, *node);
      memcpy(n->busId, tmp.busId, sizeof(n->busId));
      n->bw = tmp.bw;
      n->u.pci = tmp.u.pci;
      break;
    }
    case EL_GPU: {
      commTopoNode tmp;
      memset(&tmp, 0, sizeof(tmp));
      tmp.u.gpu.dev = -1;
      COMMCHECK(commXmlRequireAttr(x, el, "busid", line));
      COMMCHECK(commXmlAttrBusId(x, el, tmp.busId));
      COMMCHECK(commXmlAttrInt(x, el, "dev", -1, 65535, &tmp.u.gpu.dev));
      COMMCHECK(commXmlAttrInt(x, el, "sm", 0, 10000, &tmp.u.gpu.sm));
      COMMCHECK(commXmlAttrInt(x, el, "mem", 0, 0x7fffffff, &tmp.u.gpu.memMB));
      COMMCHECK(commXmlAttrStr(x, el, "name", tmp.name, sizeof(tmp.name)));
      COMMCHECK(commXmlAttrBw(x, el, "bw", &tmp.bw));
      COMMCHECK(addNode(x, COMM_TOPO_GPU, parent, line, node));
      commTopoNode* n = commTopoNodeAt(topo, *node);
      memcpy(n->busId, tmp.busId, sizeof(n->busId));
      memcpy(n->name, tmp.name, sizeof(n->name));
      n->bw = tmp.bw;
      n->u.gpu = tmp.u.gpu;
      break;
    }
    case EL_NIC: {
      commTopoNode tmp;
      memset(&tmp, 0, sizeof(tmp));
      COMMCHECK(commXmlRequireAttr(x, el, "name", line));
      COMMCHECK(commXmlAttrBusId(x, el, tmp.busId));
      COMMCHECK(commXmlAttrStr(x, el, "name", tmp.name, sizeof(tmp.name)));
      if (tmp.name[0] == '\0')
        return commXmlErr(x, x->attrLine[commXmlAttrIndex(el, "name")], "name on <nic> is empty");
      COMMCHECK(commXmlAttrEnum(x, el, "link", commTopoNicLinkNames, 3, &tmp.u.nic.link));
      COMMCHECK(commXmlAttrInt(x, el, "port", 0, 255, &tmp.u.nic.port));
      COMMCHECK(commXmlAttrInt(x, el, "speed", 0, 0x7fffffff, &tmp.u.nic.speedMbps));
      memcpy(tmp.u.nic.netdev, tmp.name, sizeof(tmp.name)); /* a netdev's own name unless told */
      COMMCHECK(commXmlAttrStr(x, el, "netdev", tmp.u.nic.netdev, sizeof(tmp.u.nic.netdev)));
      COMMCHECK(commXmlAttrGuid(x, el, "guid", &tmp.u.nic.guid));
      COMMCHECK(commXmlAttrInt(x, el, "gdr", 0, 1, &tmp.u.nic.gdr));
      COMMCHECK(commXmlAttrBw(x, el, "bw", &tmp.bw));
      COMMCHECK(addNode(x, COMM_TOPO_NIC, parent, line, node));
      commTopoNode* n = commTopoNodeAt(topo, *node);
      memcpy(n->busId, tmp.busId, sizeof(n->busId));
      memcpy(n->name, tmp.name, sizeof(n->name));
      n->bw = tmp.bw;
      n->u.nic = tmp.u.nic;
      break;
    }
    case EL_NVLINK: {
      xmlNvPending nv;
      memset(&nv, 0, sizeof(nv));
      nv.gpu = parent;
      nv.line = line;
      nv.count = 1;
      COMMCHECK(commXmlRequireAttr(x, el, "target", line));
      int a = commXmlAttrIndex(el, "target");
      if (strcmp(x->val[a], "nvswitch") != 0) {
        if (commXmlNormBusId(x->val[a], nv.target) != 0)
          return commXmlErr(x, x->attrLine[a], "nvlink target=\"%.*s\" is neither nvswitch nor a GPU bus id",
                            NAME_SHOWN, x->val[a]);
        if (strcmp(nv.target, topo->nodes[parent].busId) == 0)
          return commXmlErr(x, x->attrLine[a], "nvlink target %s is the GPU itself", nv.target);
      }
      COMMCHECK(commXmlAttrInt(x, el, "count", 1, 1024, &nv.count));
      COMMCHECK(commXmlAttrBw(x, el, "bw", &nv.bw));
      if (x->nNv == x->nvCap) {
        int cap = x->nvCap ? x->nvCap * 2 : 16;
        COMMCHECK(commRealloc(&x->nv, (size_t)x->nvCap, (size_t)cap, sizeof(*x->nv)));
        x->nvCap = cap;
      }
      x->nv[x->nNv++] = nv;
      break;
    }
  }
  return commSuccess;
}

static int cmpBus(const void* a, const void* b) {
  const xmlBusEntry* x = a;
  const xmlBusEntry* y = b;
  int c = strcmp(x->busId, y->busId);
  return c ? c : x->line - y->line;
}

/* End of a host: bus ids are unique, NVLink targets resolve to GPUs of the host. */
static commResult_t closeHost(xmlParser* x) {
  commTopo* topo = x->topo;
  int first = x->hostFirstNode, n = topo->nNodes - first, nCpus = 0, nBus = 0;
  commResult_t res = commSuccess;
  xmlBusEntry* bus = NULL;
  for (int i = first; i < topo->nNodes; i++) nCpus += topo->nodes[i].type == COMM_TOPO_CPU;
  if (nCpus == 0) return commXmlErr(x, x->hostLine, "<host> has no <cpu>");
  COMMCHECK(commCalloc(&bus, (size_t)n + 1, sizeof(*bus)));
  for (int i = first; i < topo->nNodes; i++)
    if (topo->nodes[i].busId[0]) bus[nBus++] = (xmlBusEntry){topo->nodes[i].busId, i, x->nodeLines[i]};
  qsort(bus, (size_t)nBus, sizeof(*bus), cmpBus);
  /* Ports of one NIC may share a PCI function (mlx4: one function, two ports); nothing else may. */
  int dup = -1;
  for (int i = 1; i < nBus; i++) {
    int nics = topo->nodes[bus[i].node].type == COMM_TOPO_NIC && topo->nodes[bus[i - 1].node].type == COMM_TOPO_NIC;
    if (strcmp(bus[i].busId, bus[i - 1].busId) == 0 && !nics && (dup < 0 || bus[i].line < bus[dup].line)) dup = i;
  }
  if (dup >= 0) {
    res = commXmlErr(x, bus[dup].line, "duplicate bus id %s (also on line %d)", bus[dup].busId, bus[dup - 1].line);
    goto exit;
  }
  int nvs = -1;
  for (int i = 0; i < x->nNv; i++) {
    const xmlNvPending* nv = &x->nv[i];
    int peer;
    if (nv->target[0] == '\0') {
      if (nvs < 0) COMMCHECKGOTO(addNode(x, COMM_TOPO_NVS, -1, nv->line, &nvs), res, exit);
      peer = nvs;
    } else {
      xmlBusEntry key = {nv->target, 0, 0};
      int lo = 0, hi = nBus; /* first entry >= key */
      while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (strcmp(bus[mid].busId, key.busId) < 0) lo = mid + 1;
        else hi = mid;
      }
      if (lo == nBus || strcmp(bus[lo].busId, nv->target) != 0) {
        res = commXmlErr(x, nv->line, "nvlink target %s not found in this host", nv->target);
        goto exit;
      }
      peer = bus[lo].node;
      if (topo->nodes[peer].type != COMM_TOPO_GPU) {
        res = commXmlErr(x, nv->line, "nvlink target %s (line %d) is not a <gpu>", nv->target, bus[lo].line);
        goto exit;
      }
    }
    COMMCHECKGOTO(commTopoAddNvlink(topo, nv->gpu, peer, nv->count, nv->bw), res, exit);
  }
exit:
  free(bus);
  return res;
}

static int cmpHost(const void* a, const void* b) {
  const xmlHostEntry* x = a;
  const xmlHostEntry* y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : x->line - y->line;
}

static commResult_t checkHostNames(xmlParser* x) {
  commTopo* topo = x->topo;
  xmlHostEntry* e = NULL;
  commResult_t res = commSuccess;
  COMMCHECK(commCalloc(&e, (size_t)topo->nHosts + 1, sizeof(*e)));
  int n = 0;
  for (int h = 0; h < topo->nHosts; h++)
    if (topo->hosts[h].name[0]) e[n++] = (xmlHostEntry){topo->hosts[h].name, x->hostLines[h]};
  qsort(e, (size_t)n, sizeof(*e), cmpHost);
  int dup = -1;
  for (int i = 1; i < n; i++)
    if (strcmp(e[i].name, e[i - 1].name) == 0 && (dup < 0 || e[i].line < e[dup].line)) dup = i;
  if (dup >= 0)
    res = commXmlErr(x, e[dup].line, "duplicate host name %s (also on line %d)", e[dup].name, e[dup - 1].line);
  free(e);
  return res;
}

static commResult_t closeElement(xmlParser* x, int el, int line) {
  if (el == EL_HOST) COMMCHECK(closeHost(x));
  if (el == EL_TOPOLOGY) {
    if (x->topo->nHosts == 0) return commXmlErr(x, line, "<topology> has no <host>");
    COMMCHECK(checkHostNames(x));
    x->rootDone = 1;
  }
  return commSuccess;
}

/* ---- Tags ---- */

static commResult_t readOpenTag(xmlParser* x) {
  int line = x->lx.line, len;
  x->lx.p++; /* '<' */
  const char* name = readName(x, &len);
  if (len == 0) {
    if (atEnd(x)) return commXmlErr(x, line, "unterminated tag");
    return commXmlErr(x, line, "expected an element name after '<'");
  }
  int el = findElem(name, len);
  if (el < 0) return commXmlErr(x, line, "unknown element <%.*s>", COMM_MIN(len, NAME_SHOWN), name);
  if (x->depth == 0) {
    if (x->rootSeen) return commXmlErr(x, line, "<%s> after the end of <topology>", commXmlSpecs[el].name);
    if (el != EL_TOPOLOGY)
      return commXmlErr(x, line, "the root element is <%s>, expected <topology>", commXmlSpecs[el].name);
  } else {
    int parentEl = x->stack[x->depth - 1].el;
    if (!(commXmlSpecs[el].parents & IN(parentEl)))
      return commXmlErr(x, line, "<%s> is not allowed inside <%s>", commXmlSpecs[el].name, commXmlSpecs[parentEl].name);
    if (x->depth >= XML_MAX_DEPTH) return commXmlErr(x, line, "elements nested deeper than %d", XML_MAX_DEPTH);
  }
  memset(x->have, 0, sizeof(x->have));
  int selfClose = 0;
  for (;;) {
    int ws = skipWs(x);
    if (atEnd(x)) return commXmlErr(x, line, "unterminated tag <%s>", commXmlSpecs[el].name);
    if (*x->lx.p == '>') {
      x->lx.p++;
      break;
    }
    if (*x->lx.p == '/') {
      x->lx.p++;
      if (atEnd(x)) return commXmlErr(x, line, "unterminated tag <%s>", commXmlSpecs[el].name);
      if (*x->lx.p != '>') return commXmlErr(x, x->lx.line, "expected '>' after '/' in <%s>", commXmlSpecs[el].name);
      x->lx.p++;
      selfClose = 1;
      break;
    }
    int aline = x->lx.line, alen;
    const char* aname = readName(x, &alen);
    if (alen == 0) {
      char c = *x->lx.p;
      if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
        return commXmlErr(x, aline, "unexpected character 0x%02x in <%s>", (unsigned char)c, commXmlSpecs[el].name);
      return commXmlErr(x, aline, "unexpected character '%c' in <%s>", c, commXmlSpecs[el].name);
    }
    if (!ws) return commXmlErr(x, aline, "missing whitespace before attribute %.*s", COMM_MIN(alen, NAME_SHOWN), aname);
    int a = findAttr(el, aname, alen);
    if (a < 0)
      return commXmlErr(x, aline, "unknown attribute %.*s on <%s>", COMM_MIN(alen, NAME_SHOWN), aname,
                        commXmlSpecs[el].name);
    const char* an = commXmlSpecs[el].attrs[a];
    if (x->have[a]) return commXmlErr(x, aline, "duplicate attribute %s on <%s>", an, commXmlSpecs[el].name);
    skipWs(x);
    if (atEnd(x)) return commXmlErr(x, line, "unterminated tag <%s>", commXmlSpecs[el].name);
    if (*x->lx.p != '=') return commXmlErr(x, x->lx.line, "expected '=' after attribute %s", an);
    x->lx.p++;
    skipWs(x);
    if (atEnd(x)) return commXmlErr(x, line, "unterminated tag <%s>", commXmlSpecs[el].name);
    if (*x->lx.p != '"' && *x->lx.p != '\'')
      return commXmlErr(x, x->lx.line, "expected a quoted value for attribute %s", an);
    COMMCHECK(readValue(x, an, x->val[a]));
    x->have[a] = 1;
    x->attrLine[a] = aline;
  }
  int node;
  COMMCHECK(openElement(x, el, line, &node));
  if (el == EL_TOPOLOGY) x->rootSeen = 1;
  if (selfClose) return closeElement(x, el, line);
  x->stack[x->depth].el = el;
  x->stack[x->depth].node = node;
  x->stack[x->depth].line = line;
  x->depth++;
  return commSuccess;
}

static commResult_t readCloseTag(xmlParser* x) {
  int line = x->lx.line, len;
  x->lx.p += 2; /* "</" */
  const char* name = readName(x, &len);
  skipWs(x);
  if (atEnd(x)) return commXmlErr(x, line, "unterminated tag </%.*s", COMM_MIN(len, NAME_SHOWN), name);
  if (*x->lx.p != '>') return commXmlErr(x, x->lx.line, "expected '>' to end </%.*s>", COMM_MIN(len, NAME_SHOWN), name);
  x->lx.p++;
  if (x->depth == 0) return commXmlErr(x, line, "</%.*s> without an open element", COMM_MIN(len, NAME_SHOWN), name);
  int el = x->stack[x->depth - 1].el;
  if ((int)strlen(commXmlSpecs[el].name) != len || memcmp(commXmlSpecs[el].name, name, (size_t)len) != 0)
    return commXmlErr(x, line, "</%.*s> does not match <%s> opened on line %d", COMM_MIN(len, NAME_SHOWN), name,
                      commXmlSpecs[el].name, x->stack[x->depth - 1].line);
  x->depth--;
  return closeElement(x, el, x->stack[x->depth].line);
}

static commResult_t parseDocument(xmlParser* x) {
  if (startsWith(x, "\xef\xbb\xbf")) x->lx.p += 3; /* UTF-8 byte order mark */
  while (!atEnd(x)) {
    char c = *x->lx.p;
    if (isWs(c)) {
      step(x);
    } else if (c != '<') {
      if ((unsigned char)c < 0x20 || (unsigned char)c == 0x7f)
        return commXmlErr(x, x->lx.line, "invalid character 0x%02x", (unsigned char)c);
      int n = 0;
      while (x->lx.p + n < x->lx.end && n < 24 && (unsigned char)x->lx.p[n] >= 0x20 && x->lx.p[n] != '<') n++;
      if (x->depth > 0)
        return commXmlErr(x, x->lx.line, "text \"%.*s\" inside <%s> (only elements are allowed)", n, x->lx.p,
                          commXmlSpecs[x->stack[x->depth - 1].el].name);
      return commXmlErr(x, x->lx.line, "text \"%.*s\" outside the root element", n, x->lx.p);
    } else if (startsWith(x, "<!--")) {
      COMMCHECK(skipUntil(x, "<!--", "-->", "comment"));
    } else if (startsWith(x, "<![CDATA[")) {
      return commXmlErr(x, x->lx.line, "CDATA sections are not supported");
    } else if (startsWith(x, "<!")) {
      return commXmlErr(x, x->lx.line, "DTDs and declarations (<!...>) are not supported");
    } else if (startsWith(x, "<?")) {
      if (!startsWith(x, "<?xml") || (x->lx.end - x->lx.p > 5 && !isWs(x->lx.p[5]) && x->lx.p[5] != '?'))
        return commXmlErr(x, x->lx.line, "processing instructions are not supported");
      if (x->prologSeen || x->rootSeen) return commXmlErr(x, x->lx.line, "<?xml ...?> is only allowed at the start");
      x->prologSeen = 1;
      COMMCHECK(skipUntil(x, "<?", "?>", "<?xml ...?> prolog"));
    } else if (startsWith(x, "</")) {
      COMMCHECK(readCloseTag(x));
    } else {
      COMMCHECK(readOpenTag(x));
    }
  }
  if (x->depth > 0) {
    int el = x->stack[x->depth - 1].el;
    return commXmlErr(x, x->stack[x->depth - 1].line, "<%s> is not closed (end of file on line %d)",
                      commXmlSpecs[el].name, x->lx.line);
  }
  if (!x->rootDone) return commXmlErr(x, x->lx.line, "no <topology> element");
  return commSuccess;
}

commResult_t commTopoParseXml(const char* text, size_t len, const char* source, commTopo** out) {
  commResult_t res = commSuccess;
  xmlParser* x = NULL;
  commTopo* topo = NULL;
  if (out == NULL || (text == NULL && len > 0)) {
    WARN("commTopoParseXml: NULL argument");
    return commInvalidArgument;
  }
  if (commNxIsNccl(text, len)) return commTopoParseNcclXml(text, len, source, out);
  *out = NULL;
  if (source == NULL) source = "<topology>";
  if (len > XML_MAX_FILE) {
    WARN("%s:1: topology file of %zu bytes is larger than the limit of %zu MiB", source, len, XML_MAX_FILE >> 20);
    return commInvalidArgument;
  }
  COMMCHECK(commCalloc(&x, 1, sizeof(*x)));
  COMMCHECKGOTO(commTopoCreate(&topo), res, exit);
  x->lx.src = source;
  x->lx.p = text ? text : "";
  x->lx.end = x->lx.p + len;
  x->lx.line = 1;
  x->topo = topo;
  x->host = -1;
  COMMCHECKGOTO(parseDocument(x), res, exit);
  res = commTopoFinish(topo);
  if (res != commSuccess) {
    char why[256];
    snprintf(why, sizeof(why), "%s", commLogLastWarn());
    WARN("%s: %s", source, why);
    goto exit;
  }
  *out = topo;
  topo = NULL;
exit:
  if (x) {
    free(x->nv);
    free(x->nodeLines);
    free(x->hostLines);
    free(x);
  }
  commTopoFree(topo);
  return res;
}

commResult_t commTopoLoadXml(const char* path, commTopo** out) {
  if (path == NULL || out == NULL) {
    WARN("commTopoLoadXml: NULL argument");
    return commInvalidArgument;
  }
  *out = NULL;
  char* buf = NULL;
  size_t len = 0;
  COMMCHECK(commTopoReadFile("topology file", path, XML_MAX_FILE, COMM_TOPO_FILE_READ_MS, &buf, &len));
  commResult_t res = commTopoParseXml(buf, len, path, out);
  free(buf);
  return res;
}
