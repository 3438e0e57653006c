/* The verifier's symbolic values: segment lists over rank sets, and the error reporter (the
 * representation is described in verify_internal.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "debug.h"
#include "schedule.h"
#include "utils.h"
#include "verify_internal.h"

/* ---------------------------------------------------------------------------------------------------- */
/* Errors */

commResult_t verr(vctx* v, const char* fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  int used = vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (v->note[0] && used >= 0 && (size_t)used < sizeof(msg))
    snprintf(msg + used, sizeof(msg) - (size_t)used, " (%s)", v->note);
  if (v->curRank >= 0 && v->curStep >= 0) {
    const commStep* st = &v->sched[v->curRank].channels[v->curCh].steps[v->curStep];
    WARN("schedule verification failed: rank %d channel %d step %d (%s count %zu): %s", v->curRank, v->curCh,
         v->curStep, commPrimName((commPrim_t)st->prim), st->count, msg);
  } else if (v->curRank >= 0) {
    WARN("schedule verification failed: rank %d: %s", v->curRank, msg);
  } else {
    WARN("schedule verification failed: %s", msg);
  }
  return commInternalError;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Rank sets */

int bitsEqual(const vctx* v, const uint64_t* a, const uint64_t* b) {
  return memcmp(a, b, (size_t)v->nw * sizeof(uint64_t)) == 0;
}

/* Up to a few ranks of a set, for messages. */
void describeSet(const vctx* v, const uint64_t* b, char* out, size_t len) {
  int count = 0, shown = 0;
  size_t used = 0;
  out[0] = '\0';
  used += (size_t)snprintf(out + used, len - used, "{");
  for (int r = 0; r < v->nRanks; r++) {
    if (!(b[r / 64] >> (r % 64) & 1)) continue;
    count++;
    if (shown < 6 && used < len) {
      used += (size_t)snprintf(out + used, len - used, "%s%d", shown ? "," : "", r);
      shown++;
    }
  }
  if (used < len)
    snprintf(out + used, len - used, "%s} (%d rank%s)", count > shown ? ",..." : "", count, count == 1 ? "" : "s");
}

/* ---------------------------------------------------------------------------------------------------- */
/* Segment lists */

commResult_t vlReserve(vctx* v, vlist* l, int need) {
  if (need <= l->cap) return commSuccess;
  int nc = l->cap ? l->cap * 2 : 4;
  if (nc < need) nc = need;
  COMMCHECK(commRealloc(&l->s, (size_t)l->cap, (size_t)nc, sizeof(vseg)));
  COMMCHECK(commRealloc(&l->bits, (size_t)l->cap * (size_t)v->nw, (size_t)nc * (size_t)v->nw, sizeof(uint64_t)));
  l->cap = nc;
  return commSuccess;
}

void vlFree(vlist* l) {
  free(l->s);
  free(l->bits);
  memset(l, 0, sizeof(*l));
}

uint64_t* segBits(const vctx* v, const vlist* l, int i) { return l->bits + (size_t)i * (size_t)v->nw; }

static int mergeable(const vctx* v, const vlist* l, int i, const vseg* b, const uint64_t* bbits) {
  const vseg* a = &l->s[i];
  if (a->hi != b->lo || a->flags != b->flags) return 0;
  if (!(a->flags & V_DEF)) return 1;
  return a->srcOff + (a->hi - a->lo) == b->srcOff && bitsEqual(v, segBits(v, l, i), bbits);
}

/* Appends [lo,hi) with the given value (bits ignored when undefined), merging with the last segment. */
commResult_t vlAppend(vctx* v, vlist* l, size_t lo, size_t hi, size_t srcOff, uint8_t flags, const uint64_t* bits) {
  if (hi <= lo) return commSuccess;
  vseg s = {lo, hi, (flags & V_DEF) ? srcOff : 0, flags};
  if (!(flags & V_DEF)) bits = NULL;
  if (l->n > 0) {
    if (bits == NULL) {
      if (!(l->s[l->n - 1].flags & V_DEF) && l->s[l->n - 1].hi == lo && l->s[l->n - 1].flags == flags) {
        l->s[l->n - 1].hi = hi;
        return commSuccess;
      }
    } else if (mergeable(v, l, l->n - 1, &s, bits)) {
      l->s[l->n - 1].hi = hi;
      return commSuccess;
    }
  }
  COMMCHECK(vlReserve(v, l, l->n + 1));
  l->s[l->n] = s;
  uint64_t* dst = segBits(v, l, l->n);
  if (bits) memcpy(dst, bits, (size_t)v->nw * sizeof(uint64_t));
  else memset(dst, 0, (size_t)v->nw * sizeof(uint64_t));
  l->n++;
  return commSuccess;
}

commResult_t vlCopy(vctx* v, vlist* dst, const vlist* src) {
  COMMCHECK(vlReserve(v, dst, src->n));
  memcpy(dst->s, src->s, (size_t)src->n * sizeof(vseg));
  memcpy(dst->bits, src->bits, (size_t)src->n * (size_t)v->nw * sizeof(uint64_t));
  dst->n = src->n;
  return commSuccess;
}

/* First segment with hi > a. */
int vlFind(const vlist* l, size_t a) {
  int lo = 0, hi = l->n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (l->s[mid].hi > a) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/* out = buf[a, b), relative to a, covering [0, b-a) (gaps undefined). */
commResult_t vlRead(vctx* v, const vlist* buf, size_t a, size_t b, vlist* out) {
  out->n = 0;
  int i = vlFind(buf, a);
  size_t pos = a;
  while (pos < b) {
    if (i < buf->n && buf->s[i].lo <= pos) {
      const vseg* s = &buf->s[i];
      size_t e = s->hi < b ? s->hi : b;
      COMMCHECK(vlAppend(v, out, pos - a, e - a, s->srcOff + (pos - s->lo), s->flags, segBits(v, buf, i)));
      pos = e;
      i++;
    } else {
      size_t e = (i < buf->n && buf->s[i].lo < b) ? buf->s[i].lo : b;
      COMMCHECK(vlAppend(v, out, pos - a, e - a, 0, 0, NULL));
      pos = e;
    }
  }
  return commSuccess;
}

/* buf[a, a+len) = val (val relative, covering [0, len)). */
commResult_t vlWrite(vctx* v, vlist* buf, size_t a, size_t len, const vlist* val) {
  if (len == 0) return commSuccess;
  size_t b = a + len;
  vlist* t = &v->tWrite;
  t->n = 0;
  int i0 = vlFind(buf, a);
  int i1 = i0;
  while (i1 < buf->n && buf->s[i1].lo < b) i1++;
  if (i0 < i1 && buf->s[i0].lo < a) {
    const vseg* s = &buf->s[i0];
    COMMCHECK(vlAppend(v, t, s->lo, a, s->srcOff, s->flags, segBits(v, buf, i0)));
  }
  for (int i = 0; i < val->n; i++) {
    const vseg* s = &val->s[i];
    if (!(s->flags & V_DEF)) continue;
    COMMCHECK(vlAppend(v, t, a + s->lo, a + s->hi, s->srcOff, s->flags, segBits(v, val, i)));
  }
  if (i1 > i0 && buf->s[i1 - 1].hi > b) {
    const vseg* s = &buf->s[i1 - 1];
    COMMCHECK(vlAppend(v, t, b, s->hi, s->srcOff + (b - s->lo), s->flags, segBits(v, buf, i1 - 1)));
  }
  int removed = i1 - i0;
  int newN = buf->n - removed + t->n;
  COMMCHECK(vlReserve(v, buf, newN));
  size_t nw = (size_t)v->nw;
  int tail = buf->n - i1;
  memmove(&buf->s[i0 + t->n], &buf->s[i1], (size_t)tail * sizeof(vseg));
  memmove(buf->bits + (size_t)(i0 + t->n) * nw, buf->bits + (size_t)i1 * nw, (size_t)tail * nw * sizeof(uint64_t));
  memcpy(&buf->s[i0], t->s, (size_t)t->n * sizeof(vseg));
  memcpy(buf->bits + (size_t)i0 * nw, t->bits, (size_t)t->n * nw * sizeof(uint64_t));
  buf->n = newN;
  /* Merge across the boundaries of the inserted run. */
  int w0 = i0 > 0 ? i0 - 1 : 0;
  int w1 = i0 + t->n + 1 < newN ? i0 + t->n + 1 : newN;
  if (w1 - w0 < 2) return commSuccess;
  int j = w0;
  for (int i = w0 + 1; i < w1; i++) {
    if (mergeable(v, buf, j, &buf->s[i], segBits(v, buf, i))) {
      buf->s[j].hi = buf->s[i].hi;
    } else {
      j++;
      if (j != i) {
        buf->s[j] = buf->s[i];
        memcpy(segBits(v, buf, j), segBits(v, buf, i), nw * sizeof(uint64_t));
      }
    }
  }
  int gone = (w1 - 1) - j;
  if (gone > 0) {
    tail = newN - w1;
    memmove(&buf->s[j + 1], &buf->s[w1], (size_t)tail * sizeof(vseg));
    memmove(buf->bits + (size_t)(j + 1) * nw, buf->bits + (size_t)w1 * nw, (size_t)tail * nw * sizeof(uint64_t));
    buf->n = newN - gone;
  }
  return commSuccess;
}

/* out = x op y, element-wise (both relative, covering the same length). */
commResult_t vlReduce(vctx* v, const vlist* x, const vlist* y, vlist* out) {
  out->n = 0;
  int i = 0, j = 0;
  size_t pos = 0;
  while (i < x->n && j < y->n) {
    const vseg* a = &x->s[i];
    const vseg* b = &y->s[j];
    size_t e = a->hi < b->hi ? a->hi : b->hi;
    if (!(a->flags & V_DEF) || !(b->flags & V_DEF))
      return verr(v, "reduces undefined data (%s operand) at piece element %zu",
                  (a->flags & V_DEF) ? "local" : "received", pos);
    size_t oa = a->srcOff + (pos - a->lo), ob = b->srcOff + (pos - b->lo);
    if (oa != ob) return verr(v, "reduces source element %zu (received) with source element %zu (local)", oa, ob);
    const uint64_t* ba = segBits(v, x, i);
    const uint64_t* bb = segBits(v, y, j);
    int overlap = -1;
    for (int w = 0; w < v->nw; w++) {
      uint64_t c = ba[w] & bb[w];
      if (c) {
        overlap = w * 64 + __builtin_ctzll(c);
        break;
      }
      v->tmpBits[w] = ba[w] | bb[w];
    }
    if (overlap >= 0) return verr(v, "rank %d's contribution to source element %zu is counted twice", overlap, oa);
    if ((a->flags | b->flags) & V_POST)
      return verr(v, "reduces a value that was already post-processed (source element %zu)", oa);
    if (v->isRed && !((a->flags & V_PRE) && (b->flags & V_PRE)))
      return verr(v, "reduces a %s contribution without PRE (source element %zu)",
                  (a->flags & V_PRE) ? "local" : "received", oa);
    COMMCHECK(vlAppend(v, out, pos, e, oa, (uint8_t)(V_DEF | (a->flags & b->flags & V_PRE)), v->tmpBits));
    pos = e;
    if (a->hi == e) i++;
    if (b->hi == e) j++;
  }
  return commSuccess;
}

commResult_t applyPre(vctx* v, vlist* l, int rank) {
  for (int i = 0; i < l->n; i++) {
    vseg* s = &l->s[i];
    if (!(s->flags & V_DEF)) return verr(v, "PRE applied to undefined data");
    if (s->flags & V_PRE) return verr(v, "PRE applied twice (source element %zu)", s->srcOff);
    const uint64_t* b = segBits(v, l, i);
    int own = 1;
    for (int w = 0; w < v->nw; w++)
      if (b[w] != (w == rank / 64 ? (uint64_t)1 << (rank % 64) : 0)) own = 0;
    if (!own) {
      char d[128];
      describeSet(v, b, d, sizeof(d));
      return verr(v, "PRE applied to a value holding ranks %s, not rank %d's own input", d, rank);
    }
    s->flags |= V_PRE;
  }
  return commSuccess;
}

commResult_t applyPost(vctx* v, vlist* l) {
  for (int i = 0; i < l->n; i++) {
    vseg* s = &l->s[i];
    if (!(s->flags & V_DEF)) return verr(v, "POST applied to undefined data");
    if (s->flags & V_POST) return verr(v, "POST applied twice (source element %zu)", s->srcOff);
    if (!(s->flags & V_PRE)) return verr(v, "POST applied to a value without PRE (source element %zu)", s->srcOff);
    s->flags |= V_POST;
  }
  return commSuccess;
}
