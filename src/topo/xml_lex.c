/* The lexing both topology file readers share (see xml_lex.h). */
#include "xml_lex.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "debug.h"

commResult_t commXmlLexErr(const xmlLex* lx, int line, const char* fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  WARN("%s:%d: %s", lx->src, line, msg);
  return commInvalidArgument;
}

int commXmlStartsWith(const xmlLex* lx, const char* s) {
  size_t n = strlen(s);
  return (size_t)(lx->end - lx->p) >= n && memcmp(lx->p, s, n) == 0;
}

void commXmlStep(xmlLex* lx) {
  if (*lx->p == '\n') lx->line++;
  lx->p++;
}

int commXmlSkipWs(xmlLex* lx) {
  int n = 0;
  while (!xmlAtEnd(lx) && isWs(*lx->p)) {
    commXmlStep(lx);
    n++;
  }
  return n;
}

const char* commXmlReadName(xmlLex* lx, int* len) {
  const char* s = lx->p;
  if (!xmlAtEnd(lx) && xmlIsNameStart(*lx->p))
    while (!xmlAtEnd(lx) && xmlIsNameChar(*lx->p)) lx->p++;
  *len = (int)(lx->p - s);
  return s;
}

/* An entity or character reference at lx->p ('&'), into *out. */
static commResult_t readEntity(xmlLex* lx, char* out) {
  static const struct {
    const char* name;
    char c;
  } named[] = {{"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
  const char* s = lx->p + 1;
  const char* semi = s;
  while (semi < lx->end && semi - s < 12 && *semi != ';' && (xmlIsNameChar(*semi) || *semi == '#')) semi++;
  int len = (int)(semi - s);
  if (semi >= lx->end || *semi != ';')
    return commXmlLexErr(lx, lx->line, "'&' that does not start an entity (use &amp;)");
  if (len > 1 && s[0] == '#') {
    long v = 0;
    int hex = s[1] == 'x', i = hex ? 2 : 1;
    if (i == len) return commXmlLexErr(lx, lx->line, "empty character reference &%.*s;", len, s);
    for (; i < len; i++) {
      if (hex ? !isHex(s[i]) : !(s[i] >= '0' && s[i] <= '9'))
        return commXmlLexErr(lx, lx->line, "bad character reference &%.*s;", len, s);
      v = v * (hex ? 16 : 10) + (hex ? hexVal(s[i]) : s[i] - '0');
      if (v > 127) break;
    }
    if (v < 1 || v > 127)
      return commXmlLexErr(lx, lx->line, "character reference &%.*s; is outside the ASCII range 1-127", len, s);
    *out = (char)v;
  } else {
    int k = -1;
    for (int i = 0; i < 5; i++)
      if ((int)strlen(named[i].name) == len && memcmp(named[i].name, s, (size_t)len) == 0) k = i;
    if (k < 0) return commXmlLexErr(lx, lx->line, "unknown entity &%.*s;", len, s);
    *out = named[k].c;
  }
  lx->p = semi + 1;
  return commSuccess;
}

commResult_t commXmlReadValue(xmlLex* lx, const char* attr, char* out) {
  char q = *lx->p;
  int qline = lx->line;
  size_t n = 0;
  lx->p++;
  for (;;) {
    if (xmlAtEnd(lx)) return commXmlLexErr(lx, qline, "unterminated string (value of %s)", attr);
    char c = *lx->p;
    if (c == q) break;
    if (c == '<') {
      if (lx->line != qline)
        return commXmlLexErr(lx, qline, "unterminated string (value of %s): '<' on line %d", attr, lx->line);
      return commXmlLexErr(lx, lx->line, "'<' in the value of %s (use &lt;)", attr);
    }
    if ((unsigned char)c < 0x20 && c != '\t' && c != '\n' && c != '\r')
      return commXmlLexErr(lx, lx->line, "invalid character 0x%02x in the value of %s", (unsigned char)c, attr);
    if (n == XML_MAX_VALUE)
      return commXmlLexErr(lx, qline, "value of %s is longer than %d characters", attr, XML_MAX_VALUE);
    if (c == '&') {
      COMMCHECK(readEntity(lx, &out[n++]));
    } else {
      out[n++] = c;
      commXmlStep(lx);
    }
  }
  lx->p++;
  out[n] = '\0';
  return commSuccess;
}

commResult_t commXmlSkipUntil(xmlLex* lx, const char* open, const char* close, const char* what) {
  int line = lx->line;
  size_t n = strlen(close);
  lx->p += strlen(open);
  while (!commXmlStartsWith(lx, close)) {
    if (xmlAtEnd(lx)) return commXmlLexErr(lx, line, "unterminated %s", what);
    commXmlStep(lx);
  }
  lx->p += n;
  return commSuccess;
}
