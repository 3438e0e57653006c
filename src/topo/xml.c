/* Topology files: a small XML reader that fills the graph through the builder (the canonical writer is
 * src/topo/xml_write.c; format in src/topo/topo.h). The reader knows only what the format needs: elements, attributes
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
#include "xml_internal.h"

#define XML_MAX_VALUE 1024
#define XML_MAX_FILE ((size_t)256 << 20)
#define XML_MAX_HOST_NODES 1024 /* paths are cubic in a host's node count */
#define XML_MAX_BW 1e6
#define XML_MAX_ATTRS 9

/* ---- Schema ---- */

enum { EL_TOPOLOGY, EL_HOST, EL_CPU, EL_PCI, EL_GPU, EL_NIC, EL_NVLINK, EL_COUNT };

typedef struct {
  const char* name;
  unsigned parents; /* bit mask of the elements it may appear in (0: the root) */
  const char* attrs[XML_MAX_ATTRS + 1];
} xmlElemSpec;

#define IN(el) (1u << (el))
/* The attribute order here is the order the writer uses. */
static const xmlElemSpec xmlSpecs[EL_COUNT] = {
    {"topology", 0, {"version"}},
    {"host", IN(EL_TOPOLOGY), {"name", "cpulinkbw"}},
    {"cpu", IN(EL_HOST), {"numa", "arch", "vendor", "cpus", "cores", "name"}},
    {"pci", IN(EL_CPU) | IN(EL_PCI), {"busid", "kind", "gen", "width", "bw"}},
    {"gpu", IN(EL_CPU) | IN(EL_PCI), {"busid", "dev", "sm", "mem", "name", "bw"}},
    {"nic", IN(EL_CPU) | IN(EL_PCI), {"busid", "name", "link", "port", "speed", "netdev", "guid", "gdr", "bw"}},
    {"nvlink", IN(EL_GPU), {"target", "count", "bw"}},
};

const char* const commTopoPciKindNames[3] = {"bridge", "switch", "hostbridge"};
const char* const commTopoNicLinkNames[3] = {"eth", "ib", "roce"};

/* ---- Parser state ---- */

typedef struct {
  int gpu, line, count;
  double bw;
  char target[COMM_TOPO_BUSID_MAX]; /* "" : the host's NVSwitch */
} xmlNvPending;

typedef struct {
  const char* busId;
  int node, line;
} xmlBusEntry;

typedef struct {
  const char* name;
  int line;
} xmlHostEntry;

typedef struct {
  const char* src;
  const char* p;
  const char* end;
  int line;
  commTopo* topo;
  struct {
    int el, node, line;
  } stack[XML_MAX_DEPTH];
  int depth;
  int rootSeen, rootDone, prologSeen;
  /* The tag being read */
  int have[XML_MAX_ATTRS], attrLine[XML_MAX_ATTRS];
  char val[XML_MAX_ATTRS][XML_MAX_VALUE + 1];
  /* The host being read */
  int host, hostLine, hostFirstNode;
  xmlNvPending* nv;
  int nNv, nvCap;
  /* Source line of every node, and of every host */
  int* nodeLines;
  int nodeLinesCap;
  int* hostLines;
  int hostLinesCap;
} xmlParser;

static commResult_t xmlErr(xmlParser* x, int line, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static commResult_t xmlErr(xmlParser* x, int line, const char* fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  WARN("%s:%d: %s", x->src, line, msg);
  return commInvalidArgument;
}

static commResult_t growInts(int** arr, int* cap, int need) {
  if (need <= *cap) return commSuccess;
  int newCap = *cap ? *cap : 64;
  while (newCap < need) newCap *= 2;
  COMMCHECK(commRealloc(arr, (size_t)*cap, (size_t)newCap, sizeof(int)));
  *cap = newCap;
  return commSuccess;
}

/* ---- Lexing ---- */

static int isWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int isNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
static int isNameChar(char c) { return isNameStart(c) || (c >= '0' && c <= '9') || c == '-' || c == '.'; }
static int isHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static int hexVal(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

static int atEnd(const xmlParser* x) { return x->p >= x->end; }
static int startsWith(const xmlParser* x, const char* s) {
  size_t n = strlen(s);
  return (size_t)(x->end - x->p) >= n && memcmp(x->p, s, n) == 0;
}
static void step(xmlParser* x) {
  if (*x->p == '\n') x->line++;
  x->p++;
}
static int skipWs(xmlParser* x) {
  int n = 0;
  while (!atEnd(x) && isWs(*x->p)) {
    step(x);
    n++;
  }
  return n;
}
/* A name at x->p (length in *len, 0 when there is none). */
static const char* readName(xmlParser* x, int* len) {
  const char* s = x->p;
  if (!atEnd(x) && isNameStart(*x->p))
    while (!atEnd(x) && isNameChar(*x->p)) x->p++;
  *len = (int)(x->p - s);
  return s;
}
#define NAME_SHOWN 48 /* characters of a name or value quoted in messages */

static int findElem(const char* s, int len) {
  for (int e = 0; e < EL_COUNT; e++)
    if ((int)strlen(xmlSpecs[e].name) == len && memcmp(xmlSpecs[e].name, s, (size_t)len) == 0) return e;
  return -1;
}
static int findAttr(int el, const char* s, int len) {
  for (int a = 0; xmlSpecs[el].attrs[a]; a++)
    if ((int)strlen(xmlSpecs[el].attrs[a]) == len && memcmp(xmlSpecs[el].attrs[a], s, (size_t)len) == 0) return a;
  return -1;
}
static int attrIndex(int el, const char* name) { return findAttr(el, name, (int)strlen(name)); }

/* An entity or character reference at x->p ('&'), appended to out. */
static commResult_t readEntity(xmlParser* x, char* out) {
  static const struct {
    const char* name;
    char c;
  } named[] = {{"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
  const char* s = x->p + 1;
  const char* semi = s;
  while (semi < x->end && semi - s < 12 && *semi != ';' && (isNameChar(*semi) || *semi == '#')) semi++;
  int len = (int)(semi - s);
  if (semi >= x->end || *semi != ';') return xmlErr(x, x->line, "'&' that does not start an entity (use &amp;)");
  if (len > 1 && s[0] == '#') {
    long v = 0;
    int hex = s[1] == 'x', i = hex ? 2 : 1;
    if (i == len) return xmlErr(x, x->line, "empty character reference &%.*s;", len, s);
    for (; i < len; i++) {
      if (hex ? !isHex(s[i]) : !(s[i] >= '0' && s[i] <= '9'))
        return xmlErr(x, x->line, "bad character reference &%.*s;", len, s);
      v = v * (hex ? 16 : 10) + (hex ? hexVal(s[i]) : s[i] - '0');
      if (v > 127) break;
    }
    if (v < 1 || v > 127)
      return xmlErr(x, x->line, "character reference &%.*s; is outside the ASCII range 1-127", len, s);
    *out = (char)v;
  } else {
    int k = -1;
    for (int i = 0; i < 5; i++)
      if ((int)strlen(named[i].name) == len && memcmp(named[i].name, s, (size_t)len) == 0) k = i;
    if (k < 0) return xmlErr(x, x->line, "unknown entity &%.*s;", len, s);
    *out = named[k].c;
  }
  x->p = semi + 1;
  return commSuccess;
}

/* A quoted attribute value at x->p, decoded into out (at most XML_MAX_VALUE characters). */
static commResult_t readValue(xmlParser* x, const char* attr, char* out) {
  char q = *x->p;
  int qline = x->line;
  size_t n = 0;
  x->p++;
  for (;;) {
    if (atEnd(x)) return xmlErr(x, qline, "unterminated string (value of %s)", attr);
    char c = *x->p;
    if (c == q) break;
    if (c == '<') {
      if (x->line != qline) return xmlErr(x, qline, "unterminated string (value of %s): '<' on line %d", attr, x->line);
      return xmlErr(x, x->line, "'<' in the value of %s (use &lt;)", attr);
    }
    if ((unsigned char)c < 0x20 && c != '\t' && c != '\n' && c != '\r')
      return xmlErr(x, x->line, "invalid character 0x%02x in the value of %s", (unsigned char)c, attr);
    if (n == XML_MAX_VALUE) return xmlErr(x, qline, "value of %s is longer than %d characters", attr, XML_MAX_VALUE);
    if (c == '&') {
      COMMCHECK(readEntity(x, &out[n++]));
    } else {
      out[n++] = c;
      step(x);
    }
  }
  x->p++;
  out[n] = '\0';
  return commSuccess;
}

/* ---- Attribute values ---- */

static commResult_t attrStr(xmlParser* x, int el, const char* name, char* dst, size_t cap) {
  int a = attrIndex(el, name);
  if (!x->have[a]) return commSuccess;
  size_t n = strlen(x->val[a]);
  if (n >= cap)
    return xmlErr(x, x->attrLine[a], "%s on <%s> is longer than %zu characters", name, xmlSpecs[el].name, cap - 1);
  memcpy(dst, x->val[a], n + 1);
  return commSuccess;
}

static commResult_t attrInt(xmlParser* x, int el, const char* name, long lo, long hi, int* out) {
  int a = attrIndex(el, name);
  if (!x->have[a]) return commSuccess;
  const char* s = x->val[a];
  char* e = NULL;
  errno = 0;
  long v = strtol(s, &e, 10);
  if (s[0] == '\0' || isWs(s[0]) || *e != '\0' || errno == ERANGE)
    return xmlErr(x, x->attrLine[a], "%s=\"%.*s\" on <%s> is not an integer", name, NAME_SHOWN, s, xmlSpecs[el].name);
  if (v < lo || v > hi)
    return xmlErr(x, x->attrLine[a], "%s=%ld on <%s> is outside [%ld, %ld]", name, v, xmlSpecs[el].name, lo, hi);
  *out = (int)v;
  return commSuccess;
}

static commResult_t attrBw(xmlParser* x, int el, const char* name, double* out) {
  int a = attrIndex(el, name);
  if (!x->have[a]) return commSuccess;
  const char* s = x->val[a];
  char* e = NULL;
  double v = strtod(s, &e);
  if (s[0] == '\0' || isWs(s[0]) || *e != '\0' || !isfinite(v))
    return xmlErr(x, x->attrLine[a], "%s=\"%.*s\" on <%s> is not a number", name, NAME_SHOWN, s, xmlSpecs[el].name);
  if (!(v >= 0 && v <= XML_MAX_BW))
    return xmlErr(x, x->attrLine[a], "%s=%s on <%s> is outside [0, %.0f] GB/s", name, s, xmlSpecs[el].name, XML_MAX_BW);
  *out = v == 0 ? 0.0 : v; /* no -0 */
  return commSuccess;
}

static commResult_t attrEnum(xmlParser* x, int el, const char* name, const char* const* names, int n, int* out) {
  int a = attrIndex(el, name);
  if (!x->have[a]) return commSuccess;
  for (int i = 0; i < n; i++) {
    if (strcmp(x->val[a], names[i]) == 0) {
      *out = i;
      return commSuccess;
    }
  }
  char list[64] = "";
  for (int i = 0; i < n; i++)
    snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? "|" : "", names[i]);
  return xmlErr(x, x->attrLine[a], "%s=\"%.*s\" on <%s> is not one of %s", name, NAME_SHOWN, x->val[a],
                xmlSpecs[el].name, list);
}

static commResult_t attrGuid(xmlParser* x, int el, const char* name, uint64_t* out) {
  int a = attrIndex(el, name);
  if (!x->have[a]) return commSuccess;
  const char* s = x->val[a];
  size_t n = strlen(s);
  int ok = n > 2 && n <= 18 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  uint64_t v = 0;
  for (size_t i = 2; ok && i < n; i++) {
    if (!isHex(s[i])) ok = 0;
    else v = v << 4 | (uint64_t)hexVal(s[i]);
  }
  if (!ok)
    return xmlErr(x, x->attrLine[a], "%s=\"%.*s\" on <%s> is not a hexadecimal 0x... of at most 16 digits", name,
                  NAME_SHOWN, s, xmlSpecs[el].name);
  *out = v;
  return commSuccess;
}

/* "dddd:bb:dd.f" or "bb:dd.f" (hex, any case) to "dddd:bb:dd.f" in lower case; -1 when malformed. */
static int normBusId(const char* in, char out[COMM_TOPO_BUSID_MAX]) {
  size_t len = strlen(in);
  char buf[13];
  if (len == 7) {
    memcpy(buf, "0000:", 5);
    memcpy(buf + 5, in, 8);
  } else if (len == 12) {
    memcpy(buf, in, 13);
  } else {
    return -1;
  }
  for (int i = 0; i < 12; i++) {
    int sep = i == 4 || i == 7 ? ':' : i == 10 ? '.' : 0;
    if (sep ? buf[i] != sep : !isHex(buf[i])) return -1;
    if (!sep && buf[i] >= 'A' && buf[i] <= 'F') buf[i] = (char)(buf[i] | 0x20);
  }
  if (hexVal(buf[8]) * 16 + hexVal(buf[9]) > 0x1f || buf[11] > '7') return -1;
  memcpy(out, buf, 13);
  return 0;
}

static commResult_t attrBusId(xmlParser* x, int el, char out[COMM_TOPO_BUSID_MAX]) {
  int a = attrIndex(el, "busid");
  if (!x->have[a]) return commSuccess;
  if (normBusId(x->val[a], out) != 0)
    return xmlErr(x, x->attrLine[a], "busid=\"%.*s\" on <%s> is not a PCI address dddd:bb:dd.f", NAME_SHOWN, x->val[a],
                  xmlSpecs[el].name);
  return commSuccess;
}

/* A Linux cpu list: "", or comma-separated N or N-M with N <= M. */
static int validCpuList(const char* s) {
  if (*s == '\0') return 1;
  for (;;) {
    char* e;
    if (!(*s >= '0' && *s <= '9')) return 0;
    long a = strtol(s, &e, 10), b = a;
    s = e;
    if (*s == '-') {
      s++;
      if (!(*s >= '0' && *s <= '9')) return 0;
      b = strtol(s, &e, 10);
      s = e;
    }
    if (a > b || b > (1L << 24)) return 0;
    if (*s == '\0') return 1;
    if (*s++ != ',') return 0;
  }
}

static commResult_t requireAttr(xmlParser* x, int el, const char* name, int tagLine) {
  if (!x->have[attrIndex(el, name)])
    return xmlErr(x, tagLine, "<%s> lacks the required attribute %s", xmlSpecs[el].name, name);
  return commSuccess;
}

/* ---- Elements ---- */

static commResult_t addNode(xmlParser* x, int type, int parent, int line, int* node) {
  if (x->topo->nNodes - x->hostFirstNode >= XML_MAX_HOST_NODES)
    return xmlErr(x, line, "host has more than %d nodes", XML_MAX_HOST_NODES);
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
      COMMCHECK(attrInt(x, el, "version", 1, 1, &version));
      break;
    }
    case EL_HOST: {
      char name[COMM_TOPO_NAME_MAX] = "";
      double bw = 0;
      COMMCHECK(attrStr(x, el, "name", name, sizeof(name)));
      COMMCHECK(attrBw(x, el, "cpulinkbw", &bw));
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
      COMMCHECK(attrInt(x, el, "numa", -1, 65535, &tmp.u.cpu.numa));
      COMMCHECK(attrStr(x, el, "arch", tmp.u.cpu.arch, sizeof(tmp.u.cpu.arch)));
      COMMCHECK(attrStr(x, el, "vendor", tmp.u.cpu.vendor, sizeof(tmp.u.cpu.vendor)));
      COMMCHECK(attrStr(x, el, "cpus", tmp.u.cpu.cpus, sizeof(tmp.u.cpu.cpus)));
      if (!validCpuList(tmp.u.cpu.cpus))
        return xmlErr(x, x->attrLine[attrIndex(el, "cpus")], "cpus=\"%.*s\" on <cpu> is not a cpu list like 0-7,16-23",
                      NAME_SHOWN, tmp.u.cpu.cpus);
      COMMCHECK(attrInt(x, el, "cores", 0, 1 << 24, &tmp.u.cpu.nCores));
      COMMCHECK(attrStr(x, el, "name", tmp.name, sizeof(tmp.name)));
      COMMCHECK(addNode(x, COMM_TOPO_CPU, -1, line, node));
      commTopoNode* n = commTopoNodeAt(topo, *node);
      memcpy(n->name, tmp.name, sizeof(n->name));
      n->u.cpu = tmp.u.cpu;
      break;
    }
    case EL_PCI: {
      commTopoNode tmp;
      memset(&tmp, 0, sizeof(tmp));
      COMMCHECK(attrBusId(x, el, tmp.busId));
      COMMCHECK(attrEnum(x, el, "kind", commTopoPciKindNames, 3, &tmp.u.pci.kind));
      COMMCHECK(attrInt(x, el, "gen", 0, 16, &tmp.u.pci.gen));
      COMMCHECK(attrInt(x, el, "width", 0, 32, &tmp.u.pci.width));
      COMMCHECK(attrBw(x, el, "bw", &tmp.bw));
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
      COMMCHECK(requireAttr(x, el, "busid", line));
      COMMCHECK(attrBusId(x, el, tmp.busId));
      COMMCHECK(attrInt(x, el, "dev", -1, 65535, &tmp.u.gpu.dev));
      COMMCHECK(attrInt(x, el, "sm", 0, 10000, &tmp.u.gpu.sm));
      COMMCHECK(attrInt(x, el, "mem", 0, 0x7fffffff, &tmp.u.gpu.memMB));
      COMMCHECK(attrStr(x, el, "name", tmp.name, sizeof(tmp.name)));
      COMMCHECK(attrBw(x, el, "bw", &tmp.bw));
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
      COMMCHECK(requireAttr(x, el, "name", line));
      COMMCHECK(attrBusId(x, el, tmp.busId));
      COMMCHECK(attrStr(x, el, "name", tmp.name, sizeof(tmp.name)));
      if (tmp.name[0] == '\0') return xmlErr(x, x->attrLine[attrIndex(el, "name")], "name on <nic> is empty");
      COMMCHECK(attrEnum(x, el, "link", commTopoNicLinkNames, 3, &tmp.u.nic.link));
      COMMCHECK(attrInt(x, el, "port", 0, 255, &tmp.u.nic.port));
      COMMCHECK(attrInt(x, el, "speed", 0, 0x7fffffff, &tmp.u.nic.speedMbps));
      memcpy(tmp.u.nic.netdev, tmp.name, sizeof(tmp.name)); /* a netdev's own name unless told */
      COMMCHECK(attrStr(x, el, "netdev", tmp.u.nic.netdev, sizeof(tmp.u.nic.netdev)));
      COMMCHECK(attrGuid(x, el, "guid", &tmp.u.nic.guid));
      COMMCHECK(attrInt(x, el, "gdr", 0, 1, &tmp.u.nic.gdr));
      COMMCHECK(attrBw(x, el, "bw", &tmp.bw));
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
      COMMCHECK(requireAttr(x, el, "target", line));
      int a = attrIndex(el, "target");
      if (strcmp(x->val[a], "nvswitch") != 0) {
        if (normBusId(x->val[a], nv.target) != 0)
          return xmlErr(x, x->attrLine[a], "nvlink target=\"%.*s\" is neither nvswitch nor a GPU bus id", NAME_SHOWN,
                        x->val[a]);
        if (strcmp(nv.target, topo->nodes[parent].busId) == 0)
          return xmlErr(x, x->attrLine[a], "nvlink target %s is the GPU itself", nv.target);
      }
      COMMCHECK(attrInt(x, el, "count", 1, 1024, &nv.count));
      COMMCHECK(attrBw(x, el, "bw", &nv.bw));
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
  if (nCpus == 0) return xmlErr(x, x->hostLine, "<host> has no <cpu>");
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
    res = xmlErr(x, bus[dup].line, "duplicate bus id %s (also on line %d)", bus[dup].busId, bus[dup - 1].line);
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
        res = xmlErr(x, nv->line, "nvlink target %s not found in this host", nv->target);
        goto exit;
      }
      peer = bus[lo].node;
      if (topo->nodes[peer].type != COMM_TOPO_GPU) {
        res = xmlErr(x, nv->line, "nvlink target %s (line %d) is not a <gpu>", nv->target, bus[lo].line);
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
  if (dup >= 0) res = xmlErr(x, e[dup].line, "duplicate host name %s (also on line %d)", e[dup].name, e[dup - 1].line);
  free(e);
  return res;
}

static commResult_t closeElement(xmlParser* x, int el, int line) {
  if (el == EL_HOST) COMMCHECK(closeHost(x));
  if (el == EL_TOPOLOGY) {
    if (x->topo->nHosts == 0) return xmlErr(x, line, "<topology> has no <host>");
    COMMCHECK(checkHostNames(x));
    x->rootDone = 1;
  }
  return commSuccess;
}

/* ---- Tags ---- */

static commResult_t readOpenTag(xmlParser* x) {
  int line = x->line, len;
  x->p++; /* '<' */
  const char* name = readName(x, &len);
  if (len == 0) {
    if (atEnd(x)) return xmlErr(x, line, "unterminated tag");
    return xmlErr(x, line, "expected an element name after '<'");
  }
  int el = findElem(name, len);
  if (el < 0) return xmlErr(x, line, "unknown element <%.*s>", COMM_MIN(len, NAME_SHOWN), name);
  if (x->depth == 0) {
    if (x->rootSeen) return xmlErr(x, line, "<%s> after the end of <topology>", xmlSpecs[el].name);
    if (el != EL_TOPOLOGY) return xmlErr(x, line, "the root element is <%s>, expected <topology>", xmlSpecs[el].name);
  } else {
    int parentEl = x->stack[x->depth - 1].el;
    if (!(xmlSpecs[el].parents & IN(parentEl)))
      return xmlErr(x, line, "<%s> is not allowed inside <%s>", xmlSpecs[el].name, xmlSpecs[parentEl].name);
    if (x->depth >= XML_MAX_DEPTH) return xmlErr(x, line, "elements nested deeper than %d", XML_MAX_DEPTH);
  }
  memset(x->have, 0, sizeof(x->have));
  int selfClose = 0;
  for (;;) {
    int ws = skipWs(x);
    if (atEnd(x)) return xmlErr(x, line, "unterminated tag <%s>", xmlSpecs[el].name);
    if (*x->p == '>') {
      x->p++;
      break;
    }
    if (*x->p == '/') {
      x->p++;
      if (atEnd(x)) return xmlErr(x, line, "unterminated tag <%s>", xmlSpecs[el].name);
      if (*x->p != '>') return xmlErr(x, x->line, "expected '>' after '/' in <%s>", xmlSpecs[el].name);
      x->p++;
      selfClose = 1;
      break;
    }
    int aline = x->line, alen;
    const char* aname = readName(x, &alen);
    if (alen == 0) {
      char c = *x->p;
      if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
        return xmlErr(x, aline, "unexpected character 0x%02x in <%s>", (unsigned char)c, xmlSpecs[el].name);
      return xmlErr(x, aline, "unexpected character '%c' in <%s>", c, xmlSpecs[el].name);
    }
    if (!ws) return xmlErr(x, aline, "missing whitespace before attribute %.*s", COMM_MIN(alen, NAME_SHOWN), aname);
    int a = findAttr(el, aname, alen);
    if (a < 0)
      return xmlErr(x, aline, "unknown attribute %.*s on <%s>", COMM_MIN(alen, NAME_SHOWN), aname, xmlSpecs[el].name);
    const char* an = xmlSpecs[el].attrs[a];
    if (x->have[a]) return xmlErr(x, aline, "duplicate attribute %s on <%s>", an, xmlSpecs[el].name);
    skipWs(x);
    if (atEnd(x)) return xmlErr(x, line, "unterminated tag <%s>", xmlSpecs[el].name);
    if (*x->p != '=') return xmlErr(x, x->line, "expected '=' after attribute %s", an);
    x->p++;
    skipWs(x);
    if (atEnd(x)) return xmlErr(x, line, "unterminated tag <%s>", xmlSpecs[el].name);
    if (*x->p != '"' && *x->p != '\'') return xmlErr(x, x->line, "expected a quoted value for attribute %s", an);
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
  int line = x->line, len;
  x->p += 2; /* "</" */
  const char* name = readName(x, &len);
  skipWs(x);
  if (atEnd(x)) return xmlErr(x, line, "unterminated tag </%.*s", COMM_MIN(len, NAME_SHOWN), name);
  if (*x->p != '>') return xmlErr(x, x->line, "expected '>' to end </%.*s>", COMM_MIN(len, NAME_SHOWN), name);
  x->p++;
  if (x->depth == 0) return xmlErr(x, line, "</%.*s> without an open element", COMM_MIN(len, NAME_SHOWN), name);
  int el = x->stack[x->depth - 1].el;
  if ((int)strlen(xmlSpecs[el].name) != len || memcmp(xmlSpecs[el].name, name, (size_t)len) != 0)
    return xmlErr(x, line, "</%.*s> does not match <%s> opened on line %d", COMM_MIN(len, NAME_SHOWN), name,
                  xmlSpecs[el].name, x->stack[x->depth - 1].line);
  x->depth--;
  return closeElement(x, el, x->stack[x->depth].line);
}

/* "<!--" ... "-->" or "<?xml" ... "?>" */
static commResult_t skipUntil(xmlParser* x, const char* open, const char* close, const char* what) {
  int line = x->line;
  size_t n = strlen(close);
  x->p += strlen(open);
  while (!startsWith(x, close)) {
    if (atEnd(x)) return xmlErr(x, line, "unterminated %s", what);
    step(x);
  }
  x->p += n;
  return commSuccess;
}

static commResult_t parseDocument(xmlParser* x) {
  if (startsWith(x, "\xef\xbb\xbf")) x->p += 3; /* UTF-8 byte order mark */
  while (!atEnd(x)) {
    char c = *x->p;
    if (isWs(c)) {
      step(x);
    } else if (c != '<') {
      if ((unsigned char)c < 0x20 || (unsigned char)c == 0x7f)
        return xmlErr(x, x->line, "invalid character 0x%02x", (unsigned char)c);
      int n = 0;
      while (x->p + n < x->end && n < 24 && (unsigned char)x->p[n] >= 0x20 && x->p[n] != '<') n++;
      if (x->depth > 0)
        return xmlErr(x, x->line, "text \"%.*s\" inside <%s> (only elements are allowed)", n, x->p,
                      xmlSpecs[x->stack[x->depth - 1].el].name);
      return xmlErr(x, x->line, "text \"%.*s\" outside the root element", n, x->p);
    } else if (startsWith(x, "<!--")) {
      COMMCHECK(skipUntil(x, "<!--", "-->", "comment"));
    } else if (startsWith(x, "<![CDATA[")) {
      return xmlErr(x, x->line, "CDATA sections are not supported");
    } else if (startsWith(x, "<!")) {
      return xmlErr(x, x->line, "DTDs and declarations (<!...>) are not supported");
    } else if (startsWith(x, "<?")) {
      if (!startsWith(x, "<?xml") || (x->end - x->p > 5 && !isWs(x->p[5]) && x->p[5] != '?'))
        return xmlErr(x, x->line, "processing instructions are not supported");
      if (x->prologSeen || x->rootSeen) return xmlErr(x, x->line, "<?xml ...?> is only allowed at the start");
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
    return xmlErr(x, x->stack[x->depth - 1].line, "<%s> is not closed (end of file on line %d)", xmlSpecs[el].name,
                  x->line);
  }
  if (!x->rootDone) return xmlErr(x, x->line, "no <topology> element");
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
  *out = NULL;
  if (source == NULL) source = "<topology>";
  if (len > XML_MAX_FILE) {
    WARN("%s:1: topology file of %zu bytes is larger than the limit of %zu MiB", source, len, XML_MAX_FILE >> 20);
    return commInvalidArgument;
  }
  COMMCHECK(commCalloc(&x, 1, sizeof(*x)));
  COMMCHECKGOTO(commTopoCreate(&topo), res, exit);
  x->src = source;
  x->p = text ? text : "";
  x->end = x->p + len;
  x->line = 1;
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
  commResult_t res = commSuccess;
  char* buf = NULL;
  size_t len = 0, cap = 0;
  if (path == NULL || out == NULL) {
    WARN("commTopoLoadXml: NULL argument");
    return commInvalidArgument;
  }
  *out = NULL;
  FILE* f = fopen(path, "rb");
  if (f == NULL) {
    WARN("cannot open topology file %s: %s", path, strerror(errno));
    return commSystemError;
  }
  /* Read in chunks: the file may be a pipe or /proc entry whose size stat cannot tell. */
  for (;;) {
    if (len == cap) {
      if (cap > XML_MAX_FILE) {
        WARN("%s:1: topology file is larger than the limit of %zu MiB", path, XML_MAX_FILE >> 20);
        res = commInvalidArgument;
        goto exit;
      }
      size_t newCap = cap ? COMM_MIN(cap * 2, XML_MAX_FILE + 1) : (size_t)1 << 16;
      COMMCHECKGOTO(commRealloc(&buf, cap, newCap, 1), res, exit);
      cap = newCap;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) {
      if (ferror(f)) {
        WARN("cannot read topology file %s: %s", path, strerror(errno));
        res = commSystemError;
        goto exit;
      }
      break;
    }
  }
  res = commTopoParseXml(buf, len, path, out);
exit:
  fclose(f);
  free(buf);
  return res;
}
