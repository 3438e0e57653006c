/*
 * libcomm perf harness: a small streaming JSON writer for -J (see json.h). Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What is open: the separator a value needs depends on it. */
typedef enum { inObject, inList, afterKey } jsonState_t;
enum { maxDepth = 32 };

static FILE* jf;
static jsonState_t stack[maxDepth];
static int first[maxDepth]; /* no member written yet */
static int depth;

int perfJsonActive(void) { return jf != NULL; }

static void push(jsonState_t s) {
  if (depth < maxDepth) stack[depth] = s, first[depth] = 1;
  depth++;
}

/* Before a value: a comma in a list after its first member; a key's value ends the key. */
static void beforeValue(void) {
  if (depth == 0 || depth > maxDepth) return;
  if (stack[depth - 1] == afterKey) {
    depth--;
    return;
  }
  if (!first[depth - 1]) fputc(',', jf);
  first[depth - 1] = 0;
}

static void putString(const char* s) {
  fputc('"', jf);
  for (const unsigned char* p = (const unsigned char*)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(jf, "\\%c", *p);
    else if (*p == '\n') fputs("\\n", jf);
    else if (*p == '\t') fputs("\\t", jf);
    else if (*p < 0x20 || *p >= 0x7f) fprintf(jf, "\\u%04x", *p); /* bytes as Latin-1: always valid JSON */
    else fputc(*p, jf);
  }
  fputc('"', jf);
}

void perfJsonKey(const char* key) {
  if (!jf) return;
  if (depth > 0 && depth <= maxDepth && stack[depth - 1] == inObject) {
    if (!first[depth - 1]) fputc(',', jf);
    first[depth - 1] = 0;
  }
  putString(key);
  fputc(':', jf);
  push(afterKey);
}

void perfJsonObjectStart(void) {
  if (!jf) return;
  beforeValue();
  fputc('{', jf);
  push(inObject);
}

void perfJsonObjectEnd(void) {
  if (!jf || depth == 0) return;
  depth--;
  fputc('}', jf);
}

void perfJsonListStart(void) {
  if (!jf) return;
  beforeValue();
  fputc('[', jf);
  push(inList);
}

void perfJsonListEnd(void) {
  if (!jf || depth == 0) return;
  depth--;
  fputc(']', jf);
}

void perfJsonStr(const char* s) {
  if (!jf) return;
  if (!s) {
    perfJsonNull();
    return;
  }
  beforeValue();
  putString(s);
}

void perfJsonInt(long long v) {
  if (!jf) return;
  beforeValue();
  fprintf(jf, "%lld", v);
}

void perfJsonSize(size_t v) {
  if (!jf) return;
  beforeValue();
  fprintf(jf, "%zu", v);
}

void perfJsonDouble(double v) {
  if (!jf) return;
  if (isnan(v) || isinf(v)) {
    perfJsonStr(isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
    return;
  }
  beforeValue();
  fprintf(jf, "%f", v);
}

void perfJsonNull(void) {
  if (!jf) return;
  beforeValue();
  fputs("null", jf);
}

void perfJsonBoolStr(int v) { perfJsonStr(v ? "true" : "false"); }

int perfJsonOpen(const char* path) {
  const char* dot = strrchr(path, '.');
  const char* slash = strrchr(path, '/');
  if (!dot || (slash && slash > dot) || strcasecmp(dot + 1, "json")) return 1;
  size_t n = strlen(path) + 16;
  char* p = malloc(n);
  if (!p) return -1;
  snprintf(p, n, "%s", path);
  for (int k = 0; (jf = fopen(p, "wx")) == NULL; k++) {
    if (errno != EEXIST || k > 100000) {
      printf("# skipping json output; %s not accessible\n", p);
      free(p);
      return -1;
    }
    snprintf(p, n, "%s.%d", path, k);
  }
  printf("# Writing JSON output to %s\n", p);
  free(p);
  depth = 0;
  perfJsonObjectStart();
  return 0;
}

void perfJsonClose(void) {
  if (!jf) return;
  while (depth > 0) {
    jsonState_t top = depth <= maxDepth ? stack[depth - 1] : inObject;
    if (top == afterKey) perfJsonNull();
    else if (top == inList) perfJsonListEnd();
    else perfJsonObjectEnd();
  }
  fputc('\n', jf);
  fclose(jf);
  jf = NULL;
}
