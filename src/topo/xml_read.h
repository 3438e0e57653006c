/* Inside the topology file reader (xml.c: lexing, elements, tags; xml_attr.c: attribute values): the schema,
 * the parser's state and what the two files call of each other. */
#ifndef COMM_TOPO_XML_READ_H_
#define COMM_TOPO_XML_READ_H_

#include <stddef.h>
#include <stdint.h>
#include "topo.h"
#include "xml_internal.h"
#include "xml_lex.h"

#define XML_MAX_FILE COMM_TOPO_FILE_MAX_BYTES
#define XML_MAX_HOST_NODES 1024 /* paths are cubic in a host's node count */
#define XML_MAX_BW 1e6
#define XML_MAX_ATTRS 9
#define NAME_SHOWN 48 /* characters of a name or value quoted in messages */

enum { EL_TOPOLOGY, EL_HOST, EL_CPU, EL_PCI, EL_GPU, EL_NIC, EL_NVLINK, EL_COUNT };

typedef struct {
  const char* name;
  unsigned parents; /* bit mask of the elements it may appear in (0: the root) */
  const char* attrs[XML_MAX_ATTRS + 1];
} xmlElemSpec;
extern const xmlElemSpec commXmlSpecs[EL_COUNT];

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
  xmlLex lx;
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

/* xml.c: one WARN "<source>:<line>: <what>", and commInvalidArgument. */
commResult_t commXmlErr(xmlParser* x, int line, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
/* xml.c: index of attribute `name` in element el's schema (-1: none). */
int commXmlAttrIndex(int el, const char* name);

/* xml_attr.c: attribute values of the tag being read, checked and converted (absent: *out unchanged). */
commResult_t commXmlAttrStr(xmlParser* x, int el, const char* name, char* dst, size_t cap);
commResult_t commXmlAttrInt(xmlParser* x, int el, const char* name, long lo, long hi, int* out);
commResult_t commXmlAttrBw(xmlParser* x, int el, const char* name, double* out);
commResult_t commXmlAttrEnum(xmlParser* x, int el, const char* name, const char* const* names, int n, int* out);
commResult_t commXmlAttrGuid(xmlParser* x, int el, const char* name, uint64_t* out);
int commXmlNormBusId(const char* in, char out[COMM_TOPO_BUSID_MAX]);
commResult_t commXmlAttrBusId(xmlParser* x, int el, char out[COMM_TOPO_BUSID_MAX]);
int commXmlValidCpuList(const char* s);
commResult_t commXmlRequireAttr(xmlParser* x, int el, const char* name, int tagLine);

#endif
