/* NCCL's topology format, step one: the text into elements (nccl_xml_map.c puts them on the graph). The
 * syntax is the one libcomm's own reader takes (xml_lex.c: quoted values, entities, comments, the <?xml ...?>
 * prolog); the vocabulary is NCCL's: <system> holds <cpu>s, a <cpu> holds <pci>s and <nic>s, a <pci> holds
 * <pci>s, a <gpu> or a <nic> (and NCCL's <pcilink>), a <gpu> holds <nvlink>s and <c2c>s, a <nic> holds <net>s.
 * As in NCCL, an element NCCL does not define is skipped with what it holds, and so are attributes libcomm
 * does not read; both are counted for one INFO line. A known element in the wrong place, text, a DTD, a
 * duplicate attribute or a tag that does not close is an error: one WARN "<source>:<line>: <what>" and
 * commInvalidArgument. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "debug.h"
#include "nccl_xml.h"
#include "topo.h"
#include "utils.h"

#define IN(el) (1u << (el))
const nxSpec commNxSpecs[NX_COUNT] = {
    {"system", 0, 0, {"version"}},
    {"cpu", IN(NX_SYSTEM), 0, {"numaid", "affinity", "arch", "vendor", "familyid", "modelid", "host_hash"}},
    {"pci", IN(NX_CPU) | IN(NX_PCI), 0, {"busid", "class", "link_speed", "link_width"}},
    {"gpu", IN(NX_PCI), 0, {"dev", "sm"}},
    {"nvlink", IN(NX_GPU), 0, {"target", "count", "tclass"}},
    {"nic", IN(NX_CPU) | IN(NX_PCI), 0, {NULL}},
    {"net", IN(NX_NIC), 0, {"name", "speed", "port", "guid", "gdr"}},
    {"c2c", IN(NX_GPU), 1, {NULL}},
    {"pcilink", IN(NX_PCI), 1, {NULL}},
};

int commNxSlot(int el, const char* attr) {
  for (int a = 0; commNxSpecs[el].attrs[a]; a++)
    if (strcmp(commNxSpecs[el].attrs[a], attr) == 0) return a;
  return -1;
}

const char* commNxVal(const nxDoc* d, const nxElem* e, const char* attr, int* line) {
  int a = commNxSlot(e->el, attr);
  if (line) *line = a >= 0 && e->val[a] >= 0 ? e->vline[a] : e->line;
  return a >= 0 && e->val[a] >= 0 ? d->arena + e->val[a] : NULL;
}

void commNxNote(nxDoc* d, const char* what) {
  for (int i = 0; i < d->nNotes; i++)
    if (strcmp(d->notes[i].what, what) == 0) {
      d->notes[i].count++;
      return;
    }
  if (d->nNotes == NX_MAX_NOTES) {
    d->notesLost++;
    return;
  }
  snprintf(d->notes[d->nNotes].what, sizeof(d->notes[0].what), "%s", what);
  d->notes[d->nNotes++].count = 1;
}

void commNxFree(nxDoc* d) {
  free(d->el);
  free(d->arena);
  d->el = NULL;
  d->arena = NULL;
}

/* ---- Detection ---- */

int commNxIsNccl(const char* text, size_t len) {
  xmlLex lx = {"", text ? text : "", (text ? text : "") + len, 1};
  if (commXmlStartsWith(&lx, "\xef\xbb\xbf")) lx.p += 3;
  for (;;) {
    commXmlSkipWs(&lx);
    if (commXmlStartsWith(&lx, "<!--") || commXmlStartsWith(&lx, "<?xml")) {
      const char* close = lx.p[1] == '!' ? "-->" : "?>";
      lx.p += 4;
      while (!xmlAtEnd(&lx) && !commXmlStartsWith(&lx, close)) lx.p++;
      if (xmlAtEnd(&lx)) return 0;
      lx.p += strlen(close);
      continue;
    }
    if (!commXmlStartsWith(&lx, "<system")) return 0;
    lx.p += 7;
    return xmlAtEnd(&lx) || isWs(*lx.p) || *lx.p == '>' || *lx.p == '/';
  }
}

/* ---- Elements ---- */

typedef struct {
  nxDoc* d;
  struct {
    int el;   /* spec index, -1: not NCCL's */
    int node; /* element index, -1: skipped */
    const char* name;
    int len, line;
  } stack[NX_MAX_DEPTH];
  int depth;
  int skipFrom; /* depth + 1 of the outermost element being skipped, 0: none */
  int rootSeen, rootDone, prologSeen;
  char val[XML_MAX_VALUE + 1];
  struct {
    const char* name;
    int len;
  } seen[NX_MAX_TAG_ATTRS];
} nxParser;

#define ERR(x, line, ...) commXmlLexErr(&(x)->d->lx, line, __VA_ARGS__)

static int findElem(const char* s, int len) {
  for (int e = 0; e < NX_COUNT; e++)
    if ((int)strlen(commNxSpecs[e].name) == len && memcmp(commNxSpecs[e].name, s, (size_t)len) == 0) return e;
  return -1;
}

static commResult_t newElem(nxParser* x, int el, int line, int* out) {
  nxDoc* d = x->d;
  if (d->nEl == NX_MAX_ELEMS) return ERR(x, line, "more than %d elements", NX_MAX_ELEMS);
  if (d->nEl == d->elCap) {
    int cap = d->elCap ? d->elCap * 2 : 256;
    COMMCHECK(commRealloc(&d->el, (size_t)d->elCap, (size_t)cap, sizeof(nxElem)));
    d->elCap = cap;
  }
  nxElem* e = &d->el[d->nEl];
  memset(e, 0, sizeof(*e));
  e->el = el;
  e->line = line;
  e->firstChild = e->lastChild = e->next = -1;
  for (int a = 0; a < NX_MAX_ATTRS; a++) e->val[a] = -1;
  e->parent = x->depth > 0 ? x->stack[x->depth - 1].node : -1;
  if (e->parent >= 0) {
    nxElem* p = &d->el[e->parent];
    if (p->lastChild >= 0) d->el[p->lastChild].next = d->nEl;
    else p->firstChild = d->nEl;
    p->lastChild = d->nEl;
  }
  *out = d->nEl++;
  return commSuccess;
}

static commResult_t storeValue(nxParser* x, int node, int slot, int line) {
  nxDoc* d = x->d;
  size_t n = strlen(x->val) + 1;
  if (d->arenaLen + n > d->arenaCap) {
    size_t cap = d->arenaCap ? d->arenaCap : 4096;
    while (cap < d->arenaLen + n) cap *= 2;
    COMMCHECK(commRealloc(&d->arena, d->arenaCap, cap, 1));
    d->arenaCap = cap;
  }
  memcpy(d->arena + d->arenaLen, x->val, n);
  d->el[node].val[slot] = (int)d->arenaLen;
  d->el[node].vline[slot] = line;
  d->arenaLen += n;
  return commSuccess;
}

/* Where an element goes: stored (node >= 0), or skipped (not NCCL's, one NCCL defines but libcomm does not
 * use, or inside one of those). */
static commResult_t placeElement(nxParser* x, int el, const char* name, int len, int line, int* node) {
  *node = -1;
  if (x->depth == 0) {
    if (x->rootSeen) return ERR(x, line, "<%.*s> after the end of <system>", COMM_MIN(len, 48), name);
    if (el != NX_SYSTEM) return ERR(x, line, "the root element is <%.*s>, expected <system>", COMM_MIN(len, 48), name);
    return newElem(x, el, line, node);
  }
  if (x->depth >= NX_MAX_DEPTH) return ERR(x, line, "elements nested deeper than %d", NX_MAX_DEPTH);
  if (x->skipFrom) return commSuccess;
  char what[64];
  if (el < 0) {
    snprintf(what, sizeof(what), "<%.*s>", COMM_MIN(len, 48), name);
    commNxNote(x->d, what);
    x->skipFrom = x->depth + 1;
    return commSuccess;
  }
  int parentEl = x->stack[x->depth - 1].el;
  if (!(commNxSpecs[el].parents & IN(parentEl)))
    return ERR(x, line, "<%s> is not allowed inside <%s>", commNxSpecs[el].name, commNxSpecs[parentEl].name);
  if (commNxSpecs[el].ignored) {
    snprintf(what, sizeof(what), "<%s>", commNxSpecs[el].name);
    commNxNote(x->d, what);
    x->skipFrom = x->depth + 1;
    return commSuccess;
  }
  return newElem(x, el, line, node);
}

static commResult_t readOpenTag(nxParser* x) {
  xmlLex* lx = &x->d->lx;
  int line = lx->line, len;
  lx->p++; /* '<' */
  const char* name = commXmlReadName(lx, &len);
  if (len == 0) {
    if (xmlAtEnd(lx)) return ERR(x, line, "unterminated tag");
    return ERR(x, line, "expected an element name after '<'");
  }
  int el = findElem(name, len), node;
  char shown[52];
  snprintf(shown, sizeof(shown), "%.*s", COMM_MIN(len, 48), name);
  COMMCHECK(placeElement(x, el, name, len, line, &node));
  if (el == NX_SYSTEM && x->depth == 0) x->rootSeen = 1;
  int nSeen = 0, selfClose = 0;
  for (;;) {
    int ws = commXmlSkipWs(lx);
    if (xmlAtEnd(lx)) return ERR(x, line, "unterminated tag <%s>", shown);
    if (*lx->p == '>') {
      lx->p++;
      break;
    }
    if (*lx->p == '/') {
      lx->p++;
      if (xmlAtEnd(lx)) return ERR(x, line, "unterminated tag <%s>", shown);
      if (*lx->p != '>') return ERR(x, lx->line, "expected '>' after '/' in <%s>", shown);
      lx->p++;
      selfClose = 1;
      break;
    }
    int aline = lx->line, alen;
    const char* aname = commXmlReadName(lx, &alen);
    if (alen == 0) {
      unsigned char c = (unsigned char)*lx->p;
      if (c < 0x20 || c >= 0x7f) return ERR(x, aline, "unexpected character 0x%02x in <%s>", c, shown);
      return ERR(x, aline, "unexpected character '%c' in <%s>", c, shown);
    }
    if (!ws) return ERR(x, aline, "missing whitespace before attribute %.*s", COMM_MIN(alen, 48), aname);
    for (int i = 0; i < nSeen; i++)
      if (x->seen[i].len == alen && memcmp(x->seen[i].name, aname, (size_t)alen) == 0)
        return ERR(x, aline, "duplicate attribute %.*s on <%s>", COMM_MIN(alen, 48), aname, shown);
    if (nSeen == NX_MAX_TAG_ATTRS) return ERR(x, aline, "more than %d attributes on <%s>", NX_MAX_TAG_ATTRS, shown);
    x->seen[nSeen].name = aname;
    x->seen[nSeen++].len = alen;
    char an[64];
    snprintf(an, sizeof(an), "%.*s", COMM_MIN(alen, 48), aname);
    commXmlSkipWs(lx);
    if (xmlAtEnd(lx)) return ERR(x, line, "unterminated tag <%s>", shown);
    if (*lx->p != '=') return ERR(x, lx->line, "expected '=' after attribute %s", an);
    lx->p++;
    commXmlSkipWs(lx);
    if (xmlAtEnd(lx)) return ERR(x, line, "unterminated tag <%s>", shown);
    if (*lx->p != '"' && *lx->p != '\'') return ERR(x, lx->line, "expected a quoted value for attribute %s", an);
    COMMCHECK(commXmlReadValue(lx, an, x->val));
    if (node < 0) continue;
    int slot = commNxSlot(el, an);
    if (slot >= 0 && (int)strlen(an) == alen) {
      COMMCHECK(storeValue(x, node, slot, aline));
    } else {
      char what[80];
      snprintf(what, sizeof(what), "%s.%.48s", commNxSpecs[el].name, an);
      commNxNote(x->d, what);
    }
  }
  if (selfClose) {
    if (x->skipFrom == x->depth + 1) x->skipFrom = 0;
    if (x->depth == 0) x->rootDone = 1;
    return commSuccess;
  }
  x->stack[x->depth].el = el;
  x->stack[x->depth].node = node;
  x->stack[x->depth].name = name;
  x->stack[x->depth].len = len;
  x->stack[x->depth].line = line;
  x->depth++;
  return commSuccess;
}

static commResult_t readCloseTag(nxParser* x) {
  xmlLex* lx = &x->d->lx;
  int line = lx->line, len;
  lx->p += 2; /* "</" */
  const char* name = commXmlReadName(lx, &len);
  int shown = COMM_MIN(len, 48);
  commXmlSkipWs(lx);
  if (xmlAtEnd(lx)) return ERR(x, line, "unterminated tag </%.*s", shown, name);
  if (*lx->p != '>') return ERR(x, lx->line, "expected '>' to end </%.*s>", shown, name);
  lx->p++;
  if (x->depth == 0) return ERR(x, line, "</%.*s> without an open element", shown, name);
  int top = x->depth - 1;
  if (x->stack[top].len != len || memcmp(x->stack[top].name, name, (size_t)len) != 0)
    return ERR(x, line, "</%.*s> does not match <%.*s> opened on line %d", shown, name, COMM_MIN(x->stack[top].len, 48),
               x->stack[top].name, x->stack[top].line);
  x->depth--;
  if (x->skipFrom == x->depth + 1) x->skipFrom = 0;
  if (x->depth == 0) x->rootDone = 1;
  return commSuccess;
}

commResult_t commNxParse(nxDoc* d) {
  nxParser* x = NULL;
  commResult_t res = commSuccess;
  xmlLex* lx = &d->lx;
  COMMCHECK(commCalloc(&x, 1, sizeof(*x)));
  x->d = d;
  if (commXmlStartsWith(lx, "\xef\xbb\xbf")) lx->p += 3;
  while (!xmlAtEnd(lx) && res == commSuccess) {
    char c = *lx->p;
    if (isWs(c)) {
      commXmlStep(lx);
    } else if (c != '<') {
      if ((unsigned char)c < 0x20 || (unsigned char)c == 0x7f) {
        res = ERR(x, lx->line, "invalid character 0x%02x", (unsigned char)c);
        break;
      }
      int n = 0;
      while (lx->p + n < lx->end && n < 24 && (unsigned char)lx->p[n] >= 0x20 && lx->p[n] != '<') n++;
      if (x->depth > 0)
        res = ERR(x, lx->line, "text \"%.*s\" inside <%.*s> (only elements are allowed)", n, lx->p,
                  COMM_MIN(x->stack[x->depth - 1].len, 48), x->stack[x->depth - 1].name);
      else res = ERR(x, lx->line, "text \"%.*s\" outside the root element", n, lx->p);
    } else if (commXmlStartsWith(lx, "<!--")) {
      res = commXmlSkipUntil(lx, "<!--", "-->", "comment");
    } else if (commXmlStartsWith(lx, "<![CDATA[")) {
      res = ERR(x, lx->line, "CDATA sections are not supported");
    } else if (commXmlStartsWith(lx, "<!")) {
      res = ERR(x, lx->line, "DTDs and declarations (<!...>) are not supported");
    } else if (commXmlStartsWith(lx, "<?")) {
      if (!commXmlStartsWith(lx, "<?xml") || (lx->end - lx->p > 5 && !isWs(lx->p[5]) && lx->p[5] != '?'))
        res = ERR(x, lx->line, "processing instructions are not supported");
      else if (x->prologSeen || x->rootSeen) res = ERR(x, lx->line, "<?xml ...?> is only allowed at the start");
      else {
        x->prologSeen = 1;
        res = commXmlSkipUntil(lx, "<?", "?>", "<?xml ...?> prolog");
      }
    } else if (commXmlStartsWith(lx, "</")) {
      res = readCloseTag(x);
    } else {
      res = readOpenTag(x);
    }
  }
  if (res == commSuccess && x->depth > 0)
    res = ERR(x, x->stack[x->depth - 1].line, "<%.*s> is not closed (end of file on line %d)",
              COMM_MIN(x->stack[x->depth - 1].len, 48), x->stack[x->depth - 1].name, lx->line);
  if (res == commSuccess && !x->rootDone) res = ERR(x, lx->line, "no <system> element");
  free(x);
  return res;
}

/* ---- The reader ---- */

static void logNotes(const nxDoc* d, const commTopo* topo) {
  char list[512] = "";
  size_t pos = 0;
  for (int i = 0; i < d->nNotes && pos < sizeof(list); i++) {
    int n = d->notes[i].count > 1 ? snprintf(list + pos, sizeof(list) - pos, "%s%s (%d)", i ? ", " : "",
                                             d->notes[i].what, d->notes[i].count)
                                  : snprintf(list + pos, sizeof(list) - pos, "%s%s", i ? ", " : "", d->notes[i].what);
    pos += n > 0 ? (size_t)n : 0;
  }
  if (d->notesLost && pos < sizeof(list)) snprintf(list + pos, sizeof(list) - pos, " and %d more", d->notesLost);
  int gpus = 0, nics = 0;
  for (int h = 0; h < topo->nHosts; h++) {
    gpus += topo->hosts[h].nGpus;
    nics += topo->hosts[h].nNics;
  }
  INFO(COMM_TOPO | COMM_INIT, "%s: NCCL's topology format: %d host(s), %d GPU(s), %d NIC(s)%s%s", d->lx.src,
       topo->nHosts, gpus, nics, d->nNotes ? "; not used by libcomm: " : "", list);
  if (gpus == 0)
    WARN_NOTICE("%s: the NCCL topology file lists no <gpu>: NCCL adds the GPUs it finds to such a file, libcomm takes "
                "the file as the whole machine (no GPUs)",
                d->lx.src);
}

commResult_t commTopoParseNcclXml(const char* text, size_t len, const char* source, commTopo** out) {
  commResult_t res = commSuccess;
  commTopo* topo = NULL;
  nxDoc d;
  if (out == NULL || (text == NULL && len > 0)) {
    WARN("commTopoParseNcclXml: NULL argument");
    return commInvalidArgument;
  }
  *out = NULL;
  if (source == NULL) source = "<topology>";
  if (len > COMM_TOPO_FILE_MAX_BYTES) {
    WARN("%s:1: topology file of %zu bytes is larger than the limit of %zu MiB", source, len,
         COMM_TOPO_FILE_MAX_BYTES >> 20);
    return commInvalidArgument;
  }
  memset(&d, 0, sizeof(d));
  d.lx.src = source;
  d.lx.p = text ? text : "";
  d.lx.end = d.lx.p + len;
  d.lx.line = 1;
  COMMCHECKGOTO(commNxParse(&d), res, exit);
  COMMCHECKGOTO(commTopoCreate(&topo), res, exit);
  COMMCHECKGOTO(commNxMap(&d, topo), res, exit);
  res = commTopoFinish(topo);
  if (res != commSuccess) {
    char why[256];
    snprintf(why, sizeof(why), "%s", commLogLastWarn());
    WARN("%s: %s", source, why);
    goto exit;
  }
  logNotes(&d, topo);
  *out = topo;
  topo = NULL;
exit:
  commNxFree(&d);
  commTopoFree(topo);
  return res;
}
