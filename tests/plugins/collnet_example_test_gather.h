/* collnet_example_test.c's scenario of iallgather and ireducescatter (NCCL's windowed contract, as
 * collnet_example_gather.h implements it), run by every member of a group:
 *   - allgather of the whole buffer in one part (libcomm's adapter's call) for 1 .. 300007 bytes per member (odd
 *     sizes), one of each pair in place, all posted before the first test; the same bits on every member;
 *   - allgather in windows of 700 bytes (starting inside slices, crossing them) over 1001 bytes per member, each
 *     window in 3 parts placed apart (the gaps stay untouched), sendData offset as NCCL core offsets it;
 *   - reduce-scatter of the whole buffer for int32, float32, float64, uint8, int64, uint32, bfloat16, float16 and
 *     sum, prod, max, min against a reference reduced in member order (float32 with inexact values), bit for bit
 *     the slice of an iallreduce of the same input, one in place; the same in windows of 600 floats in 3 parts;
 *   - windows over maxCollBytes refused (WARN naming maxCollBytes), a window of exactly maxCollBytes (v9+) done;
 *     malformed calls refused; calls that disagree between members fail everywhere, then the group still works.
 * Included once, by collnet_example_test.c. SPDX-License-Identifier: Apache-2.0 */
#ifndef COLLNET_EXAMPLE_TEST_GATHER_H_
#define COLLNET_EXAMPLE_TEST_GATHER_H_

#define CXT_PARTS 4

typedef struct {
  void* mh;
  char* p;
  size_t size;
} cxtPart;

/* One windowed call: kind 0 = iallgather (data: sendData), 1 = ireducescatter (data: recvData). */
typedef struct {
  int kind;
  char* data;
  void* dataMh;
  int nParts;
  cxtPart parts[CXT_PARTS];
  size_t bpr, wo, wb;
  int type, op;
} cxtWin;

static ncclResult_t cxtWinCall(const cxtApi* a, void* coll, const cxtWin* w, void** req) {
  ncclNetSGE_v8_t p8[CXT_PARTS]; /* (on the stack: the plugin must copy the list) */
  ncclNetSGE_v9_t p9[CXT_PARTS];
  for (int i = 0; i < w->nParts; i++) {
    p8[i] = (ncclNetSGE_v8_t){w->parts[i].mh, w->parts[i].p, (uint32_t)w->parts[i].size};
    p9[i] = (ncclNetSGE_v9_t){w->parts[i].mh, w->parts[i].p, w->parts[i].size};
  }
  ncclDataType_t t = (ncclDataType_t)w->type;
  ncclRedOp_t o = (ncclRedOp_t)w->op;
  *req = NULL;
  if (a->version == 8)
    return w->kind == 0
               ? CXT_T(a, 8)->iallgather(coll, w->data, w->nParts, p8, w->bpr, w->wo, w->wb, w->dataMh, req)
               : CXT_T(a, 8)->ireducescatter(coll, w->nParts, p8, w->data, w->bpr, w->wo, w->wb, t, o, w->dataMh, req);
  return w->kind == 0
             ? CXT_CALL_9(a, iallgather, coll, w->data, w->nParts, p9, w->bpr, w->wo, w->wb, w->dataMh, req)
             : CXT_CALL_9(a, ireducescatter, coll, w->nParts, p9, w->data, w->bpr, w->wo, w->wb, t, o, w->dataMh, req);
}

/* Post; `NULL: retry later` is retried. */
static void* cxtWinPost(cxtMember* m, const cxtWin* w) {
  void* req = NULL;
  int64_t deadline = cxtNowMs() + 5000;
  while (!req) {
    ncclResult_t res = cxtWinCall(m->a, m->coll, w, &req);
    REQUIRE(res == ncclSuccess, "%s (%zu per member, window %zu at %zu, %d parts) failed: %d",
            w->kind ? "ireducescatter" : "iallgather", w->bpr, w->wb, w->wo, w->nParts, res);
    REQUIRE(req || cxtNowMs() < deadline, "the windowed operation never took the request");
    if (!req) usleep(100);
  }
  return req;
}

/* A call that must be refused at once (and, if want is given, say so in a WARN containing it). */
static void cxtWinRefused(cxtMember* m, const cxtWin* w, const char* want, const char* what) {
  pthread_mutex_lock(&cxtLogMu);
  size_t mark = cxtLogLen;
  pthread_mutex_unlock(&cxtLogMu);
  void* req = (void*)&req;
  ncclResult_t res = cxtWinCall(m->a, m->coll, w, &req);
  REQUIRE(res != ncclSuccess && req == NULL, "%s: taken (result %d)", what, res);
  if (!want || getenv("CXT_VERBOSE")) return;
  pthread_mutex_lock(&cxtLogMu);
  int found = memmem(cxtLog + mark, cxtLogLen - mark, want, strlen(want)) != NULL;
  pthread_mutex_unlock(&cxtLogMu);
  REQUIRE(found, "%s: no WARN saying \"%s\"", what, want);
}

/* The bytes of member r's slice inside the window [wo, wo + wb): *lo (logical offset) and the count. */
static size_t cxtPiece(size_t bpr, size_t wo, size_t wb, int r, size_t* lo) {
  size_t s = (size_t)r * bpr, e = s + bpr, b = s > wo ? s : wo, f = e < wo + wb ? e : wo + wb;
  *lo = b;
  return f > b ? f - b : 0;
}

/* sendData / recvData as NCCL core passes them: offset only when the window begins inside this slice. */
static char* cxtNcclPtr(char* base, size_t bpr, size_t wo, int me) {
  return wo / bpr == (size_t)me ? base + wo % bpr : base;
}

/* Split the window's wb bytes into 3 parts placed apart in region (wb + 64 bytes): sizes wb/3, 1, the rest. */
static void cxtSplit(cxtWin* w, char* region, void* mh) {
  size_t s0 = w->wb / 3, s1 = w->wb > s0 ? 1 : 0;
  w->nParts = 3;
  w->parts[0] = (cxtPart){mh, region, s0};
  w->parts[1] = (cxtPart){mh, region + s0 + 16, s1};
  w->parts[2] = (cxtPart){mh, region + s0 + s1 + 40, w->wb - s0 - s1};
}

/* Copy between the window's parts and buf (the window's bytes in order). */
static void cxtParts(const cxtWin* w, char* buf, int toParts) {
  for (int i = 0; i < w->nParts; buf += w->parts[i].size, i++)
    memcpy(toParts ? w->parts[i].p : buf, toParts ? buf : w->parts[i].p, w->parts[i].size);
}

static uint8_t cxtGByte(int r, size_t i) { return (uint8_t)(r * 151 + i * 13 + (i >> 9) + 1); }

/* ---------------------------------------------------------------- reduce-scatter values */

static size_t cxtTypeSize(int type) {
  static const size_t sizes[10] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return sizes[type];
}

/* Member r's input at logical element g (every value exact in its type). */
static double cxtRsIn(int type, int r, size_t g) {
  switch (type) {
    case ncclFloat32: return (double)((float)(g % 97) * 0.1f + (float)r / 3.0f); /* inexact sums: order shows */
    case ncclFloat64: return 1.0 + (double)(g % 13) * 0.01 + r * 0.001;
    case ncclBfloat16: return (double)(g % 13 + (size_t)r);
    case ncclFloat16: return (double)(g % 11) + 0.5 * r;
    case ncclUint8: return (double)((g * 31 + (size_t)r * 17) & 0xff);
    case ncclInt64: return (double)((int64_t)(g % 100003) * (r % 2 ? -1 : 1) + r);
    case ncclUint32: return (double)((g * 2654435761u + (size_t)r * 40503u) & 0xffffffffu);
    default: return (double)((int64_t)(g % 5000) * 7 + r * 1000 - 3000); /* int32 */
  }
}

static void cxtPut(int type, void* buf, size_t i, double v) {
  switch (type) {
    case ncclFloat32: ((float*)buf)[i] = (float)v; break;
    case ncclFloat64: ((double*)buf)[i] = v; break;
    case ncclBfloat16: ((uint16_t*)buf)[i] = cxtBf16((float)v); break;
    case ncclFloat16: ((uint16_t*)buf)[i] = cxtHalf((float)v); break;
    case ncclUint8: ((uint8_t*)buf)[i] = (uint8_t)v; break;
    case ncclInt64: ((int64_t*)buf)[i] = (int64_t)v; break;
    case ncclUint32: ((uint32_t*)buf)[i] = (uint32_t)v; break;
    default: ((int32_t*)buf)[i] = (int32_t)v;
  }
}

#define CXT_OP(x, y, op)                        \
  ((op) == ncclSum    ? (x) + (y)               \
   : (op) == ncclProd ? (x) * (y)               \
   : (op) == ncclMax  ? ((x) > (y) ? (x) : (y)) \
                      : ((x) < (y) ? (x) : (y)))
#define CXT_REF(T)                                                                \
  do {                                                                            \
    T acc = (T)cxtRsIn(type, 0, g);                                               \
    for (int r = 1; r < n; r++) acc = (T)CXT_OP(acc, (T)cxtRsIn(type, r, g), op); \
    ref = (double)acc;                                                            \
  } while (0)

/* The reduction of element g over members 0, 1, ..., n-1, in that order, in the type's arithmetic (bfloat16 and
 * float16 values stay exact), stored at out[i]. */
static void cxtRsRef(int type, int op, int n, size_t g, void* out, size_t i) {
  double ref;
  switch (type) {
    case ncclFloat32: {
      float acc = (float)cxtRsIn(type, 0, g);
      for (int r = 1; r < n; r++) acc = CXT_OP(acc, (float)cxtRsIn(type, r, g), op);
      ((float*)out)[i] = acc;
      return;
    }
    case ncclFloat64: CXT_REF(double); break;
    case ncclUint8: CXT_REF(uint8_t); break;
    case ncclInt64: CXT_REF(int64_t); break;
    case ncclUint32: CXT_REF(uint32_t); break;
    case ncclInt32: CXT_REF(int64_t); break;
    default: CXT_REF(float); /* bfloat16, float16 */
  }
  cxtPut(type, out, i, ref);
}

static const struct {
  int type, op;
  size_t count; /* per member */
} cxtRsCases[] = {{ncclInt32, ncclSum, 1001},   {ncclFloat32, ncclSum, 1003}, {ncclFloat64, ncclProd, 257},
                  {ncclUint8, ncclMax, 1001},   {ncclInt64, ncclMin, 333},    {ncclUint32, ncclProd, 77},
                  {ncclBfloat16, ncclSum, 501}, {ncclFloat16, ncclSum, 499},  {ncclInt32, ncclMax, 200003}};
#define CXT_RS_N (sizeof(cxtRsCases) / sizeof(cxtRsCases[0]))
#define CXT_RS_F32 1 /* the float32 case, also run in place and in windows */

/* ---------------------------------------------------------------- the scenario */

static void cxtGatherWhole(cxtMember* m) {
  static const size_t sizes[7] = {1, 7, 13, 1000, 4099, 65537, 300007};
  int n = m->n, me = m->rank;
  cxtBuf s[7], r[7];
  void* req[7];
  for (int k = 0; k < 7; k++) {
    size_t bpr = sizes[k];
    cxtAlloc(m, &s[k], bpr);
    cxtAlloc(m, &r[k], bpr * (size_t)n);
    char* send = k % 2 ? r[k].p + (size_t)me * bpr : s[k].p; /* odd: in place */
    for (size_t i = 0; i < bpr; i++) send[i] = (char)cxtGByte(me, i);
    cxtWin w = {0,   send, k % 2 ? r[k].mh : s[k].mh, 1, {{r[k].mh, r[k].p, bpr * (size_t)n}},
                bpr, 0,    bpr * (size_t)n,           0, 0};
    req[k] = cxtWinPost(m, &w);
  }
  for (int k = 6; k >= 0; k--) {
    int size = -1;
    ncclResult_t res = cxtWaitReq(m->a, req[k], &size, 10000);
    REQUIRE(res == ncclSuccess && (size_t)size == sizes[k] * (size_t)n, "allgather %zu: result %d, size %d", sizes[k],
            res, size);
  }
  for (int k = 0; k < 7; k++) {
    for (size_t x = 0; x < sizes[k] * (size_t)n; x++)
      REQUIRE((uint8_t)r[k].p[x] == cxtGByte((int)(x / sizes[k]), x % sizes[k]), "allgather %zu: byte %zu is %u",
              sizes[k], x, (uint8_t)r[k].p[x]);
    m->sh->hashes[me][k] = cxtHash(r[k].p, r[k].size);
    cxtFree(m, &s[k]);
    cxtFree(m, &r[k]);
  }
}

static void cxtGatherWindows(cxtMember* m) {
  const size_t bpr = 1001, win = 700, total = bpr * (size_t)m->n, nw = (total + win - 1) / win;
  int me = m->rank;
  cxtBuf c, pb, res;
  cxtAlloc(m, &c, bpr);
  cxtAlloc(m, &pb, nw * (win + 64));
  cxtAlloc(m, &res, total);
  memset(pb.p, 0xee, pb.size);
  for (size_t i = 0; i < bpr; i++) c.p[i] = (char)cxtGByte(me, i);
  cxtWin w[16];
  void* req[16];
  REQUIRE(nw <= 16, "%zu windows", nw);
  for (size_t k = 0; k < nw; k++) {
    size_t wo = k * win, wb = total - wo < win ? total - wo : win;
    w[k] = (cxtWin){0, cxtNcclPtr(c.p, bpr, wo, me), c.mh, 0, {{0}}, bpr, wo, wb, 0, 0};
    cxtSplit(&w[k], pb.p + k * (win + 64), pb.mh);
    req[k] = cxtWinPost(m, &w[k]);
  }
  for (size_t k = 0; k < nw; k++) {
    int size = -1;
    REQUIRE(cxtWaitReq(m->a, req[k], &size, 10000) == ncclSuccess && (size_t)size == w[k].wb,
            "allgather window %zu: size %d, want %zu", k, size, w[k].wb);
    cxtParts(&w[k], res.p + w[k].wo, 0);
    for (size_t i = 0; i < 16; i++) /* the gaps between the parts */
      REQUIRE((uint8_t)w[k].parts[1].p[-16 + (ptrdiff_t)i] == 0xee &&
                  (uint8_t)w[k].parts[2].p[-24 + (ptrdiff_t)i] == 0xee,
              "allgather window %zu: a gap between the parts was written", k);
  }
  for (size_t x = 0; x < total; x++)
    REQUIRE((uint8_t)res.p[x] == cxtGByte((int)(x / bpr), x % bpr), "allgather in windows: byte %zu is %u", x,
            (uint8_t)res.p[x]);
  m->sh->hashes[me][7] = cxtHash(res.p, res.size);
  cxtFree(m, &c);
  cxtFree(m, &pb);
  cxtFree(m, &res);
}

static void cxtFillInput(int type, int me, size_t count, int n, char* p) {
  for (size_t g = 0; g < count * (size_t)n; g++) cxtPut(type, p, g, cxtRsIn(type, me, g));
}

static void cxtScatter(cxtMember* m) {
  int n = m->n, me = m->rank;
  cxtBuf s[CXT_RS_N], r[CXT_RS_N], ar[CXT_RS_N], sIn, pb, rw;
  void *req[CXT_RS_N], *arReq[CXT_RS_N];
  for (size_t k = 0; k < CXT_RS_N; k++) {
    int t = cxtRsCases[k].type;
    size_t cnt = cxtRsCases[k].count, bpr = cnt * cxtTypeSize(t);
    cxtAlloc(m, &s[k], bpr * (size_t)n);
    cxtAlloc(m, &r[k], bpr);
    cxtAlloc(m, &ar[k], bpr * (size_t)n);
    cxtFillInput(t, me, cnt, n, s[k].p);
    cxtWin w = {1, r[k].p, r[k].mh, 1, {{s[k].mh, s[k].p, s[k].size}}, bpr, 0, s[k].size, t, cxtRsCases[k].op};
    req[k] = cxtWinPost(m, &w);
    arReq[k] = cxtPost(m, &s[k], &ar[k], cnt * (size_t)n, t, cxtRsCases[k].op);
  }
  /* In place (recvData inside the input), and in windows of 600 floats in 3 parts, of the float32 case. */
  const size_t cnt = cxtRsCases[CXT_RS_F32].count, bpr = cnt * 4, total = bpr * (size_t)n, win = 600 * 4;
  const size_t nw = (total + win - 1) / win;
  cxtAlloc(m, &sIn, total);
  cxtAlloc(m, &pb, nw * (win + 64));
  cxtAlloc(m, &rw, bpr);
  memset(rw.p, 0xee, rw.size);
  cxtFillInput(ncclFloat32, me, cnt, n, sIn.p);
  cxtWin in = {1, sIn.p + (size_t)me * bpr, sIn.mh, 1, {{sIn.mh, sIn.p, total}}, bpr, 0, total, ncclFloat32, ncclSum};
  REQUIRE(cxtWaitReq(m->a, cxtWinPost(m, &in), NULL, 10000) == ncclSuccess, "reduce-scatter in place failed");
  char* inPlace = malloc(bpr);
  REQUIRE(inPlace, "out of memory");
  memcpy(inPlace, sIn.p + (size_t)me * bpr, bpr);
  cxtFillInput(ncclFloat32, me, cnt, n, sIn.p); /* (the input again) */
  cxtWin w[16];
  void* wReq[16];
  REQUIRE(nw <= 16, "%zu windows", nw);
  for (size_t k = 0; k < nw; k++) {
    size_t wo = k * win, wb = total - wo < win ? total - wo : win;
    w[k] = (cxtWin){1, cxtNcclPtr(rw.p, bpr, wo, me), rw.mh, 0, {{0}}, bpr, wo, wb, ncclFloat32, ncclSum};
    cxtSplit(&w[k], pb.p + k * (win + 64), pb.mh);
    cxtParts(&w[k], sIn.p + wo, 1);
    wReq[k] = cxtWinPost(m, &w[k]);
  }
  for (size_t k = 0; k < nw; k++) {
    size_t lo, want = cxtPiece(bpr, w[k].wo, w[k].wb, me, &lo);
    int size = -1;
    REQUIRE(cxtWaitReq(m->a, wReq[k], &size, 10000) == ncclSuccess && (size_t)size == want,
            "reduce-scatter window %zu: size %d, want %zu", k, size, want);
  }
  for (size_t k = 0; k < CXT_RS_N; k++) {
    int t = cxtRsCases[k].type, op = cxtRsCases[k].op, size = -1;
    size_t c = cxtRsCases[k].count, esz = cxtTypeSize(t);
    REQUIRE(cxtWaitReq(m->a, req[k], &size, 10000) == ncclSuccess && (size_t)size == c * esz,
            "reduce-scatter %zu: size %d, want %zu", k, size, c * esz);
    REQUIRE(cxtWaitReq(m->a, arReq[k], NULL, 10000) == ncclSuccess, "allreduce %zu failed", k);
    char want[8];
    for (size_t i = 0; i < c; i++) {
      cxtRsRef(t, op, n, (size_t)me * c + i, want, 0);
      REQUIRE(memcmp(r[k].p + i * esz, want, esz) == 0, "reduce-scatter (type %d, op %d) element %zu differs", t, op,
              i);
    }
    REQUIRE(memcmp(r[k].p, ar[k].p + (size_t)me * c * esz, c * esz) == 0,
            "reduce-scatter (type %d, op %d): not the bits of the allreduce", t, op);
  }
  REQUIRE(memcmp(inPlace, r[CXT_RS_F32].p, bpr) == 0, "reduce-scatter in place: not the bits of the other one");
  free(inPlace);
  REQUIRE(memcmp(rw.p, r[CXT_RS_F32].p, bpr) == 0, "reduce-scatter in windows: not the bits of the whole one");
  for (size_t k = 0; k < CXT_RS_N; k++) {
    cxtFree(m, &s[k]);
    cxtFree(m, &r[k]);
    cxtFree(m, &ar[k]);
  }
  cxtFree(m, &sIn);
  cxtFree(m, &pb);
  cxtFree(m, &rw);
}

/* Refused locally: over maxCollBytes, malformed; a window of exactly maxCollBytes (v9+) works. */
static void cxtWinLimits(cxtMember* m) {
  int n = m->n, me = m->rank;
  size_t maxColl = m->a->version == 8 ? (size_t)512 << 20 : m->arg ? (size_t)1 << 20 : (size_t)4 << 20;
  cxtBuf small;
  cxtAlloc(m, &small, 4096);
  size_t bpr = (maxColl / (size_t)n / 4 + 1) * 4; /* n x bpr > maxColl, whole int32 and floats */
  cxtWin ag = {0, small.p, small.mh, 1, {{small.mh, small.p, maxColl + 1}}, bpr, 0, maxColl + 1, 0, 0};
  cxtWinRefused(m, &ag, "maxCollBytes", "an allgather window over maxCollBytes");
  cxtWin rs = {1, small.p, small.mh, 1, {{small.mh, small.p, maxColl + 4}}, bpr, 0, maxColl + 4, ncclFloat32, ncclSum};
  cxtWinRefused(m, &rs, "maxCollBytes", "a reduce-scatter window over maxCollBytes");
  cxtWin bad = {0, small.p, small.mh, 1, {{small.mh, small.p, 999}}, 500, 0, 1000, 0, 0};
  cxtWinRefused(m, &bad, NULL, "parts of 999 bytes for a window of 1000");
  bad = (cxtWin){0, small.p, small.mh, 1, {{small.mh, small.p, 10}}, 500, 500 * (size_t)n - 5, 10, 0, 0};
  cxtWinRefused(m, &bad, NULL, "a window past the buffer");
  bad = (cxtWin){0, small.p + 4000, small.mh, 1, {{small.mh, small.p, 500 * (size_t)n}}, 500, 0, 500 * (size_t)n, 0, 0};
  cxtWinRefused(m, &bad, NULL, "sendData past its registration");
  bad = (cxtWin){1, small.p, small.mh, 1, {{small.mh, small.p, 400}}, 400, 2, 400, ncclFloat32, ncclSum};
  cxtWinRefused(m, &bad, NULL, "a float window at byte 2");
  bad.wo = 0;
  bad.type = ncclFloat8e4m3;
  cxtWinRefused(m, &bad, NULL, "a float8 reduce-scatter");
  bad.type = ncclFloat32;
  bad.op = ncclAvg;
  cxtWinRefused(m, &bad, NULL, "an avg reduce-scatter");
  cxtFree(m, &small);
  if (m->a->version == 8) return;
  /* Exactly maxCollBytes, the window [0, maxCollBytes) of a larger buffer. */
  cxtBuf c, r;
  cxtAlloc(m, &c, bpr);
  cxtAlloc(m, &r, maxColl);
  for (size_t i = 0; i < bpr; i++) c.p[i] = (char)cxtGByte(me, i);
  ag = (cxtWin){0, cxtNcclPtr(c.p, bpr, 0, me), c.mh, 1, {{r.mh, r.p, maxColl}}, bpr, 0, maxColl, 0, 0};
  int size = -1;
  REQUIRE(cxtWaitReq(m->a, cxtWinPost(m, &ag), &size, 10000) == ncclSuccess && (size_t)size == maxColl,
          "an allgather window of maxCollBytes: size %d", size);
  for (size_t x = 0; x < maxColl; x++)
    REQUIRE((uint8_t)r.p[x] == cxtGByte((int)(x / bpr), x % bpr), "allgather of maxCollBytes: byte %zu", x);
  for (size_t g = 0; g < maxColl / 4; g++) cxtPut(ncclInt32, r.p, g, cxtRsIn(ncclInt32, me, g)); /* the window */
  rs = (cxtWin){1, c.p, c.mh, 1, {{r.mh, r.p, maxColl}}, bpr, 0, maxColl, ncclInt32, ncclSum};
  size_t lo, want = cxtPiece(bpr, 0, maxColl, me, &lo);
  REQUIRE(cxtWaitReq(m->a, cxtWinPost(m, &rs), &size, 10000) == ncclSuccess && (size_t)size == want,
          "a reduce-scatter window of maxCollBytes: size %d, want %zu", size, want);
  int32_t ref;
  for (size_t i = 0; i < want / 4; i++) {
    cxtRsRef(ncclInt32, ncclSum, n, lo / 4 + i, &ref, 0);
    REQUIRE(((int32_t*)c.p)[i] == ref, "reduce-scatter of maxCollBytes: element %zu", i);
  }
  cxtFree(m, &c);
  cxtFree(m, &r);
}

/* Member 1 disagrees (a shorter allgather window; an allreduce instead; another op): all fail, then all work. */
static void cxtWinMismatch(cxtMember* m) {
  int n = m->n, me = m->rank;
  const size_t bpr = 1001, total = bpr * (size_t)n;
  cxtBuf c, r;
  cxtAlloc(m, &c, total);
  cxtAlloc(m, &r, total);
  cxtWin ag = {0, c.p, c.mh, 1, {{r.mh, r.p, total}}, bpr, 0, total, 0, 0};
  cxtWin shorter = ag;
  shorter.wb = shorter.parts[0].size = total - 1;
  void* req = cxtWinPost(m, me == 1 ? &shorter : &ag);
  REQUIRE(cxtWaitReq(m->a, req, NULL, 10000) == ncclInvalidUsage, "a mismatched allgather window did not fail");
  req = me == 1 ? cxtPost(m, &c, &r, total, ncclUint8, ncclSum) : cxtWinPost(m, &ag);
  REQUIRE(cxtWaitReq(m->a, req, NULL, 10000) == ncclInvalidUsage, "allgather against allreduce did not fail");
  cxtFillInput(ncclInt32, me, bpr / 4, n, c.p);
  cxtWin rs = {1,
               r.p,
               r.mh,
               1,
               {{c.mh, c.p, bpr / 4 * 4 * (size_t)n}},
               bpr / 4 * 4,
               0,
               bpr / 4 * 4 * (size_t)n,
               ncclInt32,
               me == 1 ? ncclMax : ncclSum};
  REQUIRE(cxtWaitReq(m->a, cxtWinPost(m, &rs), NULL, 10000) == ncclInvalidUsage, "mismatched ops did not fail");
  rs.op = ncclSum;
  REQUIRE(cxtWaitReq(m->a, cxtWinPost(m, &rs), NULL, 10000) == ncclSuccess, "the reduce-scatter after failed");
  int32_t ref;
  for (size_t i = 0; i < bpr / 4; i++) {
    cxtRsRef(ncclInt32, ncclSum, n, (size_t)me * (bpr / 4) + i, &ref, 0);
    REQUIRE(((int32_t*)r.p)[i] == ref, "the reduce-scatter after a mismatch: element %zu", i);
  }
  cxtFree(m, &c);
  cxtFree(m, &r);
}

static void cxtScenarioGather(cxtMember* m) {
  if (m->arg) setenv("NCCL_EXAMPLE_COLLNET_MAX_BYTES", "1048576", 1);
  cxtSetup(m);
  REQUIRE(cxtConnect(m) == ncclSuccess && m->coll, "connect failed");
  REQUIRE(CXT_CALL(m->a, closeListen, m->listen) == ncclSuccess, "closeListen failed");
  m->listen = NULL;
  cxtGatherWhole(m);
  cxtGatherWindows(m);
  REQUIRE(cxtBarrier(m->sh, m->n) == 0, "barrier after the allgathers timed out");
  for (int k = 0; k < 8; k++)
    REQUIRE(m->sh->hashes[m->rank][k] == m->sh->hashes[0][k], "allgather %d: bits differ from member 0's", k);
  cxtScatter(m);
  cxtWinLimits(m);
  if (m->n >= 2) cxtWinMismatch(m);
  REQUIRE(cxtBarrier(m->sh, m->n) == 0, "barrier before closing timed out");
  cxtTeardown(m);
}

/* NCCL_EXAMPLE_COLLNET_NO_GATHER=1 where the library is loaded (a child, forked before this process loads it):
 * every CollNet table it exports has iallgather and ireducescatter NULL, and iallreduce still set. */
static int cxtCheckNoGather(const char* path, const char* base) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(2);
  }
  if (pid == 0) {
    alarm(30);
    setenv("NCCL_EXAMPLE_COLLNET_NO_GATHER", "1", 1);
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    int found = 0, bad = !lib;
    for (int v = 8; lib && v <= 11; v++) {
      char sym[32];
      snprintf(sym, sizeof(sym), "ncclCollNetPlugin_v%d", v);
      cxtApi a = {path, v, dlsym(lib, sym), ""};
      if (!a.table) continue;
      found++;
      int offered = v == 8   ? CXT_T(&a, 8)->iallgather || CXT_T(&a, 8)->ireducescatter || !CXT_T(&a, 8)->iallreduce
                    : v == 9 ? CXT_T(&a, 9)->iallgather || CXT_T(&a, 9)->ireducescatter || !CXT_T(&a, 9)->iallreduce
                    : v == 10
                        ? CXT_T(&a, 10)->iallgather || CXT_T(&a, 10)->ireducescatter || !CXT_T(&a, 10)->iallreduce
                        : CXT_T(&a, 11)->iallgather || CXT_T(&a, 11)->ireducescatter || !CXT_T(&a, 11)->iallreduce;
      if (offered) fprintf(stderr, "FAIL [%s] %s: iallgather/ireducescatter not NULL (or no iallreduce)\n", base, sym);
      bad |= offered;
    }
    if (lib) dlclose(lib);
    exit(found && !bad ? 0 : 1);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  int fails = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  printf("%s [%s: NCCL_EXAMPLE_COLLNET_NO_GATHER=1 offers neither]\n", fails ? "FAILED" : "ok    ", base);
  return fails;
}

#endif
