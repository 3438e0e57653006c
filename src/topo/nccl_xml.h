/* NCCL's topology format (the NCCL_TOPO_FILE and NCCL_TOPO_DUMP_FILE files of NCCL's src/graph/xml.cc): the
 * reader in two steps, nccl_xml.c (the text into elements, with what libcomm reads of their attributes) and
 * nccl_xml_map.c (the elements onto the graph's builder), and the writer, nccl_xml_write.c. What maps onto
 * what is in docs/ARCHITECTURE.md ("NCCL's topology files"). */
#ifndef COMM_TOPO_NCCL_XML_H_
#define COMM_TOPO_NCCL_XML_H_

#include <stddef.h>
#include <stdint.h>

#include "topo.h"
#include "xml_lex.h"

enum { NX_SYSTEM, NX_CPU, NX_PCI, NX_GPU, NX_NVLINK, NX_NIC, NX_NET, NX_C2C, NX_PCILINK, NX_COUNT };

#define NX_MAX_ATTRS 7      /* attributes libcomm reads of one element */
#define NX_MAX_TAG_ATTRS 64 /* attributes of one tag, read or not */
#define NX_MAX_DEPTH 40     /* nesting (libcomm's files allow 32; NCCL's add a level below GPUs and NICs) */
#define NX_MAX_ELEMS (1 << 18)
#define NX_MAX_NOTES 24 /* kinds of things not used, listed in the INFO line */
#define NX_NVSWITCH_CLASS 0x068000
#define NX_CPU_CLASS 0x068001 /* an NVLink to the CPU (POWER9) */
#define NX_BRIDGE_CLASS 0x060400
#define NX_HOSTBRIDGE_CLASS 0x060000
#define NX_GPU_CLASS 0x030200
#define NX_ETH_CLASS 0x020000
#define NX_IB_CLASS 0x020700
#define NX_HIDDEN_NVSWITCH "fffffff:ff:ff.0" /* NCCL's target for NVSwitches a VM does not show */

typedef struct {
  const char* name;
  unsigned parents;                    /* bit mask of the elements it may appear in (0: the root) */
  int ignored;                         /* known, but nothing of it is used: skipped with what it holds */
  const char* attrs[NX_MAX_ATTRS + 1]; /* the attributes libcomm reads; the others are ignored */
} nxSpec;
extern const nxSpec commNxSpecs[NX_COUNT];

typedef struct {
  int el, parent, line;
  int firstChild, lastChild, next; /* children in document order */
  int val[NX_MAX_ATTRS];           /* offset of each read attribute's value in the arena, -1: absent */
  int vline[NX_MAX_ATTRS];
} nxElem;

typedef struct {
  char what[64];
  int count;
} nxNote;

typedef struct {
  xmlLex lx;
  nxElem* el; /* el[0] is the root <system> */
  int nEl, elCap;
  char* arena;
  size_t arenaLen, arenaCap;
  nxNote notes[NX_MAX_NOTES];
  int nNotes, notesLost;
} nxDoc;

/* nccl_xml.c */
int commNxIsNccl(const char* text, size_t len); /* the root element is <system> */
commResult_t commNxParse(nxDoc* d);             /* d->lx set: the elements; errors WARN with the line */
void commNxFree(nxDoc* d);
void commNxNote(nxDoc* d, const char* what); /* something not used, for the INFO line */
int commNxSlot(int el, const char* attr);    /* index in commNxSpecs[el].attrs, -1: not read */
/* The value of attribute `attr` of element e (NULL: absent), and the line it is on (the element's if absent). */
const char* commNxVal(const nxDoc* d, const nxElem* e, const char* attr, int* line);

/* nccl_xml_map.c: the elements onto a new topology's builder (not finished). */
commResult_t commNxMap(nxDoc* d, commTopo* topo);

#endif
