/* The topology file reader's attribute values (see xml.c): strings, integers and bandwidths in range, enum
 * names, GUIDs, PCI bus ids and cpu lists, each refused with "<source>:<line>: <what>" when malformed. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "xml_read.h"

commResult_t commXmlAttrStr(xmlParser* x, int el, const char* name, char* dst, size_t cap) {
  int a = commXmlAttrIndex(el, name);
  if (!x->have[a]) return commSuccess;
  size_t n = strlen(x->val[a]);
  if (n >= cap)
    return commXmlErr(x, x->attrLine[a], "%s on <%s> is longer than %zu characters", name, commXmlSpecs[el].name,
                      cap - 1);
  memcpy(dst, x->val[a], n + 1);
  return commSuccess;
}

commResult_t commXmlAttrInt(xmlParser* x, int el, const char* name, long lo, long hi, int* out) {
  int a = commXmlAttrIndex(el, name);
  if (!x->have[a]) return commSuccess;
  const char* s = x->val[a];
  char* e = NULL;
  errno = 0;
  long v = strtol(s, &e, 10);
  if (s[0] == '\0' || isWs(s[0]) || *e != '\0' || errno == ERANGE)
    return commXmlErr(x, x->attrLine[a], "%s=\"%.*s\" on <%s> is not an integer", name, NAME_SHOWN, s,
                      commXmlSpecs[el].name);
  if (v < lo || v > hi)
    return commXmlErr(x, x->attrLine[a], "%s=%ld on <%s> is outside [%ld, %ld]", name, v, commXmlSpecs[el].name, lo,
                      hi);
  *out = (int)v;
  return commSuccess;
}

commResult_t commXmlAttrBw(xmlParser* x, int el, const char* name, double* out) {
  int a = commXmlAttrIndex(el, name);
  if (!x->have[a]) return commSuccess;
  const char* s = x->val[a];
  char* e = NULL;
  double v = strtod(s, &e);
  if (s[0] == '\0' || isWs(s[0]) || *e != '\0' || !isfinite(v))
    return commXmlErr(x, x->attrLine[a], "%s=\"%.*s\" on <%s> is not a number", name, NAME_SHOWN, s,
                      commXmlSpecs[el].name);
  if (!(v >= 0 && v <= XML_MAX_BW))
    return commXmlErr(x, x->attrLine[a], "%s=%s on <%s> is outside [0, %.0f] GB/s", name, s, commXmlSpecs[el].name,
                      XML_MAX_BW);
  *out = v == 0 ? 0.0 : v; /* no -0 */
  return commSuccess;
}

commResult_t commXmlAttrEnum(xmlParser* x, int el, const char* name, const char* const* names, int n, int* out) {
  int a = commXmlAttrIndex(el, name);
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
  return commXmlErr(x, x->attrLine[a], "%s=\"%.*s\" on <%s> is not one of %s", name, NAME_SHOWN, x->val[a],
                    commXmlSpecs[el].name, list);
}

commResult_t commXmlAttrGuid(xmlParser* x, int el, const char* name, uint64_t* out) {
  int a = commXmlAttrIndex(el, name);
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
    return commXmlErr(x, x->attrLine[a], "%s=\"%.*s\" on <%s> is not a hexadecimal 0x... of at most 16 digits", name,
                      NAME_SHOWN, s, commXmlSpecs[el].name);
  *out = v;
  return commSuccess;
}

/* "dddd:bb:dd.f" or "bb:dd.f" (hex, any case) to "dddd:bb:dd.f" in lower case; -1 when malformed. */
int commXmlNormBusId(const char* in, char out[COMM_TOPO_BUSID_MAX]) {
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

commResult_t commXmlAttrBusId(xmlParser* x, int el, char out[COMM_TOPO_BUSID_MAX]) {
  int a = commXmlAttrIndex(el, "busid");
  if (!x->have[a]) return commSuccess;
  if (commXmlNormBusId(x->val[a], out) != 0)
    return commXmlErr(x, x->attrLine[a], "busid=\"%.*s\" on <%s> is not a PCI address dddd:bb:dd.f", NAME_SHOWN,
                      x->val[a], commXmlSpecs[el].name);
  return commSuccess;
}

/* A Linux cpu list: "", or comma-separated N or N-M with N <= M. */
int commXmlValidCpuList(const char* s) {
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

commResult_t commXmlRequireAttr(xmlParser* x, int el, const char* name, int tagLine) {
  if (!x->have[commXmlAttrIndex(el, name)])
    return commXmlErr(x, tagLine, "<%s> lacks the required attribute %s", commXmlSpecs[el].name, name);
  return commSuccess;
}
