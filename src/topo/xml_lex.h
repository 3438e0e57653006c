/* The lexing both topology file readers share (libcomm's format in xml.c, NCCL's in nccl_xml.c): a cursor
 * over the text with its line number, names, quoted values with the five predefined entities and ASCII
 * character references, and "<!--" ... "-->" / "<?xml" ... "?>" skipping. Every error is one WARN
 * "<source>:<line>: <what>" and commInvalidArgument. */
#ifndef COMM_TOPO_XML_LEX_H_
#define COMM_TOPO_XML_LEX_H_

#include <stddef.h>

#include "comm.h"

#define XML_MAX_VALUE 1024 /* characters of an attribute value */

typedef struct {
  const char* src; /* the file's name, for messages */
  const char* p;
  const char* end;
  int line;
} xmlLex;

static inline int isWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static inline int isHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static inline int hexVal(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }
static inline int xmlIsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
static inline int xmlIsNameChar(char c) { return xmlIsNameStart(c) || (c >= '0' && c <= '9') || c == '-' || c == '.'; }
static inline int xmlAtEnd(const xmlLex* lx) { return lx->p >= lx->end; }

commResult_t commXmlLexErr(const xmlLex* lx, int line, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
int commXmlStartsWith(const xmlLex* lx, const char* s);
void commXmlStep(xmlLex* lx);  /* one character, counting lines */
int commXmlSkipWs(xmlLex* lx); /* returns how many were skipped */
/* A name at lx->p (its length in *len, 0 when there is none). */
const char* commXmlReadName(xmlLex* lx, int* len);
/* A quoted attribute value at lx->p (' or "), decoded into out (XML_MAX_VALUE + 1 bytes); `attr` names it in
 * messages. */
commResult_t commXmlReadValue(xmlLex* lx, const char* attr, char* out);
/* From `open` at lx->p to the end of `close` ("<!--" ... "-->"); `what` names it when unterminated. */
commResult_t commXmlSkipUntil(xmlLex* lx, const char* open, const char* close, const char* what);

#endif
