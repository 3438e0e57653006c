/* integration.aggd, part 2 (included by test_aggd.c, whose helpers it uses): allgather and reducescatter over
 * comm_aggd, two daemons.
 *   F  a group of 3 and a group of 4 at once: allgather of odd sizes over the whole buffer (libcomm's call) and
 *      in place, windowed (random windows, the parts split at random, between guard bytes, v8's SGE too);
 *      reducescatter of every type x op over the whole buffer, bit for bit against a reference reduced in member
 *      order with libcomm's reductions, the integers against a reference of their own, the floats against
 *      float64 within rounding, and equal to the same slice of an allreduce of the same input; windowed
 *      reducescatters; an allgather, a reducescatter and an allreduce in flight together; windows above
 *      maxCollBytes or not of whole elements refused. Allgather results identical on every member.
 *   X  libcomm's own adapter (collnet_nccl.c) over the plugin: a group of 2 runs its allgather and reducescatter;
 *      COMM_AGGD_NO_GATHER=1 set before init takes both out of the tables and of the adapter's; set before the
 *      library is loaded (H), they are never offered.
 *   G  a member killed in the middle of an allgather: every other member's test fails within the timeout.
 * SPDX-License-Identifier: Apache-2.0 */
#include <math.h>
#include "comm_collnet.h"
const commCollNet_t* commCollNetNcclWrap(void* lib, const char* what); /* libcomm's adapter (collnet_nccl.c) */

#define GPARTS 5

static uint8_t agByte(uint64_t seed, int m, uint64_t i) {
  return (uint8_t)mix(seed * 0x100000001b3ull + ((uint64_t)m << 40) + i);
}

/* A window in parts, each in an allocation of its own between 16 guard bytes. */
typedef struct {
  int n;
  ncclNetSGE_v9_t sge[GPARTS];
  ncclNetSGE_v8_t sge8[GPARTS];
  uint8_t* mem[GPARTS];
} gParts;
static void partsMake(gParts* p, size_t total, int nparts, uint64_t seed) {
  p->n = nparts > 0 ? nparts : 1 + (int)(mix(seed) % GPARTS);
  size_t left = total;
  for (int i = 0; i < p->n; i++) {
    size_t sz = i == p->n - 1 ? left : (size_t)(mix(seed + 1 + (uint64_t)i) % (left + 1)); /* some empty */
    left -= sz;
    p->mem[i] = malloc(sz + 32);
    CHECK(p->mem[i], "malloc");
    memset(p->mem[i], 0xee, sz + 32);
    p->sge[i].mhandle = p->sge8[i].mhandle = NULL;
    p->sge[i].address = p->sge8[i].address = p->mem[i] + 16;
    p->sge[i].size = sz;
    p->sge8[i].size = (uint32_t)sz;
  }
}
/* Concatenates the parts into buf (scatter: fills them from buf; buf NULL: neither); checks the guards. */
static void partsCopy(gParts* p, uint8_t* buf, int scatter) {
  for (int i = 0; i < p->n; i++) {
    uint8_t* a = p->sge[i].address;
    size_t sz = p->sge[i].size;
    if (buf && scatter) memcpy(a, buf, sz);
    else if (buf) memcpy(buf, a, sz);
    if (buf) buf += sz;
    for (int g = 0; g < 16; g++) CHECK(p->mem[i][g] == 0xee && a[sz + (size_t)g] == 0xee, "part %d: guard written", i);
  }
}
static void partsFree(gParts* p) {
  for (int i = 0; i < p->n; i++) free(p->mem[i]);
}

static ncclResult_t waitSize(void* req, int* size) {
  int64_t end = nowMs() + TIMEOUT_MS;
  for (;;) {
    int done = 0;
    ncclResult_t rc = api->test(req, &done, size);
    if (rc != ncclSuccess || done) return rc;
    CHECK(nowMs() < end, "a request did not complete in %d ms", TIMEOUT_MS);
    usleep(50);
  }
}

/* This member's piece of a window: [*beg, *end) of the logical buffer (empty: beg == end). */
static void myPiece(int rank, size_t bpr, size_t wo, size_t wb, size_t* beg, size_t* end) {
  size_t lo = (size_t)rank * bpr, hi = lo + bpr;
  *beg = wo > lo ? wo : lo;
  *end = wo + wb < hi ? wo + wb : hi;
  if (*end < *beg) *end = *beg;
}

/* An allgather of window [wo, +wb) of n x bpr bytes (inPlace: one part, sendData inside it). */
static uint64_t agCase(void* cc, int rank, int n, size_t bpr, size_t wo, size_t wb, int nparts, int inPlace, int v8,
                       uint64_t seed, uint64_t dig) {
  uint8_t* mine = malloc(bpr);
  uint8_t* out = malloc(wb + 1);
  CHECK(mine && out, "malloc");
  for (size_t i = 0; i < bpr; i++) mine[i] = agByte(seed, rank, i);
  gParts p;
  partsMake(&p, wb, inPlace ? 1 : nparts, seed * 31 + (uint64_t)rank); /* every member splits differently */
  size_t beg, end;
  myPiece(rank, bpr, wo, wb, &beg, &end);
  uint8_t* send = mine + (end > beg ? beg - (size_t)rank * bpr : 0); /* NCCL's rule: its first byte in the window */
  if (inPlace) {
    memcpy((uint8_t*)p.sge[0].address + (beg - wo), send, end - beg);
    send = (uint8_t*)p.sge[0].address + (beg - wo);
  }
  void* req = NULL;
  ncclResult_t rc = v8 ? api8->iallgather(cc, send, p.n, p.sge8, bpr, wo, wb, NULL, &req)
                       : api->iallgather(cc, send, p.n, p.sge, bpr, wo, wb, NULL, &req);
  CHECK(rc == ncclSuccess && req, "iallgather of [%zu, +%zu) of %d x %zu: %d", wo, wb, n, bpr, rc);
  int size = -1;
  CHECK(waitSize(req, &size) == ncclSuccess, "allgather [%zu, +%zu) of %d x %zu failed: %s", wo, wb, n, bpr, lastWarn);
  CHECK(size == (int)wb, "allgather: test's size %d, not %zu", size, wb);
  partsCopy(&p, out, 0);
  for (size_t k = 0; k < wb; k++) {
    size_t at = wo + k;
    CHECK(out[k] == agByte(seed, (int)(at / bpr), at % bpr),
          "rank %d: allgather [%zu, +%zu) of %d x %zu in %d parts: byte %zu is %02x, member %zu's byte %zu %02x", rank,
          wo, wb, n, bpr, p.n, at, out[k], at / bpr, at % bpr, agByte(seed, (int)(at / bpr), at % bpr));
  }
  dig = digestOf(dig, out, wb);
  partsFree(&p);
  free(mine);
  free(out);
  return dig;
}

/* Element i of a buffer of type t as a double. */
static double asDouble(int t, const void* p, size_t i) {
  switch (t) {
    case 6: return commHalfToFloat(((const uint16_t*)p)[i]);
    case 7: return ((const float*)p)[i];
    case 8: return ((const double*)p)[i];
    case 9: return commBf16ToFloat(((const uint16_t*)p)[i]);
    case 10: return commFp8e4m3ToFloat(((const uint8_t*)p)[i]);
    default: return commFp8e5m2ToFloat(((const uint8_t*)p)[i]);
  }
}
/* Element i of an integer buffer of type t (0..5): its bits, and as a signed or unsigned value. */
static uint64_t intBits(int t, const void* p, size_t i) {
  switch (t) {
    case 0: return (uint64_t)(int64_t)((const int8_t*)p)[i];
    case 1: return ((const uint8_t*)p)[i];
    case 2: return (uint64_t)(int64_t)((const int32_t*)p)[i];
    case 3: return ((const uint32_t*)p)[i];
    default: return ((const uint64_t*)p)[i];
  }
}
/* The members' element i reduced, independently of libcomm: integers wrap in their width; floats in float64,
 * with the bound *tol of n - 1 roundings in the type (max and min: exact). */
static void independent(int t, int op, uint8_t* const* in, int n, size_t i, uint64_t* bits, double* val, double* tol) {
  static const double unit[12] = {0, 0, 0, 0, 0, 0, 0x1p-11, 0x1p-24, 0x1p-53, 0x1p-8, 0x1p-4, 0x1p-3};
  static const double tiny[12] = {0, 0, 0, 0, 0, 0, 0x1p-24, 0x1p-149, 0x1p-1074, 0x1p-133, 0x1p-9, 0x1p-16};
  int sgn = t == 0 || t == 2 || t == 4;
  uint64_t acc = t < 6 ? intBits(t, in[0], i) : 0;
  double v = t < 6 ? 0 : asDouble(t, in[0], i), mag = fabs(v);
  for (int m = 1; m < n; m++) {
    if (t < 6) {
      uint64_t x = intBits(t, in[m], i);
      int less = sgn ? (int64_t)x < (int64_t)acc : x < acc;
      acc = op == 0 ? acc + x : op == 1 ? acc * x : op == 2 ? (less ? acc : x) : (less ? x : acc);
    } else {
      double x = asDouble(t, in[m], i);
      v = op == 0 ? v + x : op == 1 ? v * x : op == 2 ? fmax(v, x) : fmin(v, x);
      mag = op == 0 ? mag + fabs(x) : fabs(v);
    }
  }
  *bits = acc;
  *val = v;
  *tol = op >= 2 ? 0 : (pow(1 + unit[t], n - 1) - 1) * mag * 1.01 + 16 * tiny[t];
}

/* A reducescatter of the window [woE, +wbE) elements of n x cpr of type t; arCheck: an allreduce of the same
 * input must give the same bytes. */
static void rsCase(void* cc, int rank, int n, int t, int op, size_t cpr, size_t woE, size_t wbE, int nparts, int v8,
                   int arCheck, uint64_t seed) {
  size_t es = aggdTypeSize(t), bpr = cpr * es, tot = (size_t)n * cpr, wo = woE * es, wb = wbE * es;
  uint8_t* in[MAXR];
  uint8_t* ref = malloc(tot * es);
  uint8_t* slice = malloc(bpr + 32);
  CHECK(ref && slice, "malloc");
  for (int m = 0; m < n; m++) {
    in[m] = malloc(tot * es);
    CHECK(in[m], "malloc");
    gen(in[m], t, tot, 0, seed * 131 + (uint64_t)m);
  }
  commRedOpArgs a;
  CHECK(commRedOpArgsBuiltin((commRedOp_t)op, (commDataType_t)t, n, &a) == commSuccess, "op args");
  memcpy(ref, in[0], tot * es);
  for (int m = 1; m < n; m++) commReduceLocal(&a, ref, ref, in[m], tot, 0, 0);
  gParts p;
  partsMake(&p, wb, nparts, seed * 37 + (uint64_t)rank);
  partsCopy(&p, in[rank] + wo, 1);
  memset(slice, 0xee, bpr + 32);
  size_t beg, end, lo = (size_t)rank * bpr;
  myPiece(rank, bpr, wo, wb, &beg, &end);
  uint8_t* recv = slice + 16 + (end > beg ? beg - lo : 0); /* NCCL's rule, as for allgather's sendData */
  void* req = NULL;
  ncclResult_t rc = v8 ? api8->ireducescatter(cc, p.n, p.sge8, recv, bpr, wo, wb, (ncclDataType_t)t, (ncclRedOp_t)op,
                                              NULL, &req)
                       : api->ireducescatter(cc, p.n, p.sge, recv, bpr, wo, wb, (ncclDataType_t)t, (ncclRedOp_t)op,
                                             NULL, &req);
  CHECK(rc == ncclSuccess && req, "ireducescatter type %d op %d [%zu, +%zu) of %d x %zu: %d", t, op, wo, wb, n, bpr,
        rc);
  int size = -1;
  CHECK(waitSize(req, &size) == ncclSuccess, "reducescatter type %d op %d failed: %s", t, op, lastWarn);
  CHECK(size == (int)(end - beg), "reducescatter: test's size %d, not %zu", size, end - beg);
  partsCopy(&p, NULL, 0); /* the guards */
  for (size_t b = 0; b < bpr + 32; b++) {
    size_t at = lo + b - 16; /* logical byte, for b in the slice */
    int inside = b >= 16 && b < bpr + 16 && at >= beg && at < end;
    if (!inside)
      CHECK(slice[b] == 0xee, "rank %d: reducescatter wrote byte %zu of its slice outside the window", rank, b);
    else
      CHECK(slice[b] == ref[at], "rank %d: type %d op %d [%zu, +%zu): byte %zu is %02x, the reference %02x", rank, t,
            op, wo, wb, at, slice[b], ref[at]);
  }
  for (size_t e = beg / es; e < end / es; e++) { /* an independent reference */
    uint64_t bits, mask = es == 8 ? ~0ull : (1ull << (8 * es)) - 1;
    double v, tol;
    const uint8_t* got = slice + 16 + (e * es - lo);
    independent(t, op, in, n, e, &bits, &v, &tol);
    if (t < 6)
      CHECK((intBits(t, got, 0) & mask) == (bits & mask), "rank %d: type %d op %d element %zu", rank, t, op, e);
    else
      CHECK(fabs(asDouble(t, got, 0) - v) <= tol, "rank %d: type %d op %d element %zu: %g, float64 says %g", rank, t,
            op, e, asDouble(t, got, 0), v);
  }
  if (arCheck) { /* the same reduction as an allreduce */
    uint8_t* ar = malloc(tot * es);
    CHECK(ar, "malloc");
    CHECK(api->iallreduce(cc, in[rank], ar, tot, (ncclDataType_t)t, (ncclRedOp_t)op, NULL, NULL, &req) == ncclSuccess &&
              req,
          "iallreduce");
    CHECK(waitReq(req, TIMEOUT_MS) == ncclSuccess, "allreduce: %s", lastWarn);
    CHECK(memcmp(ar + beg, slice + 16 + (beg - lo), end - beg) == 0,
          "rank %d: type %d op %d: not the allreduce's bytes", rank, t, op);
    free(ar);
  }
  partsFree(&p);
  for (int m = 0; m < n; m++) free(in[m]);
  free(ref);
  free(slice);
}

/* Scenario F, one member. */
static void memberGather(shGroup* s, int rank, const char* daemons, uint64_t seed) {
  loadPlugin(daemons);
  void* lib = dlopen(pluginPath, RTLD_NOW | RTLD_NOLOAD);
  ncclCollNet_v9_t* v9 = lib ? dlsym(lib, "ncclCollNetPlugin_v9") : NULL;
  ncclCollNet_v10_t* v10 = lib ? dlsym(lib, "ncclCollNetPlugin_v10") : NULL;
  CHECK(v9 && v10 && api->iallgather && api->ireducescatter && api8->iallgather && api8->ireducescatter &&
            v9->iallgather && v9->ireducescatter && v10->iallgather && v10->ireducescatter,
        "a table lacks iallgather or ireducescatter");
  void* cc = joinGroup(s, rank);
  int n = s->nranks;
  uint64_t dig = 0xcbf29ce484222325ull;
  static const size_t bprs[4] = {1, 7, 1001, 40003}; /* 40003: several rounds of 16 KiB on each daemon */
  for (int i = 0; i < 4; i++)
    for (int inPlace = 0; inPlace < 2; inPlace++)
      dig = agCase(cc, rank, n, bprs[i], 0, (size_t)n * bprs[i], 1, inPlace, 0, seed + (uint64_t)i, dig);
  for (int i = 0; i < 14; i++) { /* windows: random, empty, inside one slice, the last byte */
    uint64_t h = mix(seed * 7 + (uint64_t)i);
    size_t bpr = 1 + (size_t)(h % 5000), total = (size_t)n * bpr;
    size_t wo = (size_t)(mix(h) % total), wb = (size_t)(mix(h + 1) % (total - wo + 1));
    if (i == 0) wb = 0;
    if (i == 1) wo = bpr + 3 < total ? bpr + 3 : 0, wb = bpr / 2 < total - wo ? bpr / 2 : total - wo;
    if (i == 2) wo = total - 1, wb = 1;
    dig = agCase(cc, rank, n, bpr, wo, wb, 0, 0, i % 3 == 0, seed + 100 + (uint64_t)i, dig);
  }
  for (int t = 0; t < 12; t++)
    for (int op = 0; op < 4; op++)
      rsCase(cc, rank, n, t, op, 1001, 0, (size_t)n * 1001, 1, 0, 1, seed + 200 + (uint64_t)(t * 4 + op));
  rsCase(cc, rank, n, 7, 0, 20001, 0, (size_t)n * 20001, 1, 0, 1, seed + 300);
  for (int i = 0; i < 12; i++) {
    uint64_t h = mix(seed * 11 + (uint64_t)i);
    int t = (int)(h % 12), op = (int)((h >> 8) % 4);
    size_t cpr = 1 + (size_t)((h >> 16) % 3000), tot = (size_t)n * cpr;
    size_t woE = (size_t)(mix(h) % tot), wbE = (size_t)(mix(h + 1) % (tot - woE + 1));
    if (i == 0) wbE = 0;
    rsCase(cc, rank, n, t, op, cpr, woE, wbE, 0, i % 4 == 1, i % 3 == 0, seed + 400 + (uint64_t)i);
  }
  /* An allgather, a reducescatter and an allreduce in flight together. */
  size_t bpr = 3001, cpr = 2000;
  uint8_t *ag = malloc((size_t)n * bpr), *mine = malloc(bpr), *rsIn = malloc((size_t)n * cpr * 4);
  int32_t* rsOut = malloc(cpr * 4);
  float* ar = malloc(5000 * 4);
  CHECK(ag && mine && rsIn && rsOut && ar, "malloc");
  for (size_t i = 0; i < bpr; i++) mine[i] = agByte(seed + 500, rank, i);
  for (size_t i = 0; i < (size_t)n * cpr; i++) ((int32_t*)rsIn)[i] = (int32_t)(i * 3 + (size_t)rank);
  for (int i = 0; i < 5000; i++) ar[i] = (float)(rank * i);
  ncclNetSGE_v9_t agPart = {NULL, ag, (size_t)n * bpr}, rsPart = {NULL, rsIn, (size_t)n * cpr * 4};
  void* reqs[3] = {NULL, NULL, NULL};
  CHECK(api->iallgather(cc, mine, 1, &agPart, bpr, 0, (size_t)n * bpr, NULL, &reqs[0]) == ncclSuccess &&
            api->ireducescatter(cc, 1, &rsPart, rsOut, cpr * 4, 0, (size_t)n * cpr * 4, ncclInt32, ncclSum, NULL,
                                &reqs[1]) == ncclSuccess &&
            api->iallreduce(cc, ar, ar, 5000, ncclFloat32, ncclMax, NULL, NULL, &reqs[2]) == ncclSuccess && reqs[0] &&
            reqs[1] && reqs[2],
        "three requests not posted");
  for (int i = 0; i < 3; i++) CHECK(waitReq(reqs[i], TIMEOUT_MS) == ncclSuccess, "request %d of 3: %s", i, lastWarn);
  for (size_t i = 0; i < (size_t)n * bpr; i++) CHECK(ag[i] == agByte(seed + 500, (int)(i / bpr), i % bpr), "ag %zu", i);
  for (size_t i = 0; i < cpr; i++) {
    int64_t want = 0;
    for (int m = 0; m < n; m++) want += (int64_t)(((size_t)rank * cpr + i) * 3 + (size_t)m);
    CHECK(rsOut[i] == (int32_t)want, "rs %zu: %d, not %lld", i, rsOut[i], (long long)want);
  }
  for (int i = 0; i < 5000; i++) CHECK(ar[i] == (float)((n - 1) * i), "ar %d", i);
  dig = digestOf(dig, ag, (size_t)n * bpr);
  /* Refused: a window above maxCollBytes, a reducescatter window not of whole elements. */
  ncclNetProperties_v11_t props;
  CHECK(api->getProperties(0, &props) == ncclSuccess, "properties");
  size_t big = props.maxCollBytes + 8;
  ncclNetSGE_v9_t bigPart = {NULL, ag, big};
  void* req = (void*)1;
  CHECK(api->iallgather(cc, mine, 1, &bigPart, big / (size_t)n + 8, 0, big, NULL, &req) == ncclInvalidArgument &&
            req == NULL,
        "a window above maxCollBytes was taken");
  ncclNetSGE_v9_t odd = {NULL, rsIn, 8};
  CHECK(api->ireducescatter(cc, 1, &odd, rsOut, cpr * 4, 2, 8, ncclFloat32, ncclSum, NULL, &req) == ncclInvalidArgument,
        "a window of half elements was taken");
  s->digest[rank] = dig;
  free(ag), free(mine), free(rsIn), free(rsOut), free(ar);
  CHECK(api->closeColl(cc) == ncclSuccess, "closeColl");
  api->finalize(ctx);
}

static void adLog(commNetLogLevel_t level, const char* file, int line, const char* fmt, ...) {
  (void)level, (void)file, (void)line, (void)fmt;
}

/* Scenario X: libcomm's adapter drives the plugin (a group of 2 in this process), then COMM_AGGD_NO_GATHER
 * set before init. Scenario H (late == 0): the switch set before the library is loaded. */
static void memberAdapter(const char* daemons, int late) {
  if (daemons) setenv("COMM_AGGD", daemons, 1);
  if (!late) setenv("COMM_AGGD_NO_GATHER", "1", 1);
  void* lib = dlopen(pluginPath, RTLD_NOW | RTLD_LOCAL);
  CHECK(lib, "dlopen: %s", dlerror());
  const char* names[4] = {"ncclCollNetPlugin_v8", "ncclCollNetPlugin_v9", "ncclCollNetPlugin_v10",
                          "ncclCollNetPlugin_v11"};
  const commCollNet_t* t = commCollNetNcclWrap(lib, "test_aggd");
  CHECK(t && t->iallreduce, "the adapter refused the plugin");
  CHECK(late ? t->iallgather && t->ireducescatter : !t->iallgather && !t->ireducescatter,
        "the adapter's allgather / reducescatter: %p %p", (void*)t->iallgather, (void*)t->ireducescatter);
  void *actx, *lc[2], *hp[2], *cc[2], *req[4];
  uint8_t handles[2][NCCL_NET_HANDLE_MAXSIZE];
  CHECK(t->init(&actx, 7, adLog) == commSuccess, "adapter init");
  if (late) {
    static uint8_t send[2][777], ag[2][2 * 777];
    static float rsIn[2][2 * 555], rsOut[2][555];
    for (int r = 0; r < 2; r++) {
      CHECK(t->listen(actx, 0, handles[r], &lc[r]) == commSuccess, "listen");
      hp[r] = handles[r];
    }
    for (int r = 0; r < 2; r++) {
      CHECK(t->connect(hp, 2, r, lc[r], &cc[r]) == commSuccess, "adapter connect rank %d", r);
      t->closeListen(lc[r]);
      for (int i = 0; i < 777; i++) send[r][i] = agByte(77, r, (uint64_t)i);
      for (int i = 0; i < 2 * 555; i++) rsIn[r][i] = (float)(i % 97) * (r ? 0.25f : 1.0f);
    }
    for (int r = 0; r < 2; r++) {
      CHECK(t->iallgather(cc[r], send[r], ag[r], 777, NULL, NULL, &req[r]) == commSuccess && req[r], "adapter ag");
      CHECK(t->ireducescatter(cc[r], rsIn[r], rsOut[r], 555, commFloat32, commSum, NULL, NULL, &req[2 + r]) ==
                    commSuccess &&
                req[2 + r],
            "adapter rs");
    }
    for (int i = 0; i < 4; i++) {
      int64_t end = nowMs() + TIMEOUT_MS;
      for (int done = 0; !done;) {
        size_t size = 0;
        CHECK(t->test(req[i], &done, &size) == commSuccess, "adapter request %d: %s", i, lastWarn);
        CHECK(!done || size == (i < 2 ? 2 * 777u : 555 * 4u), "adapter request %d: size %zu", i, size);
        CHECK(nowMs() < end, "adapter request %d did not complete", i);
      }
    }
    for (int r = 0; r < 2; r++) {
      for (int i = 0; i < 2 * 777; i++) CHECK(ag[r][i] == agByte(77, i / 777, (uint64_t)(i % 777)), "adapter ag %d", i);
      for (int i = 0; i < 555; i++) {
        int k = r * 555 + i;
        CHECK(rsOut[r][i] == (float)(k % 97) * 1.25f, "adapter rs %d: %g", k, (double)rsOut[r][i]);
      }
      CHECK(t->closeColl(cc[r]) == commSuccess, "closeColl");
    }
    setenv("COMM_AGGD_NO_GATHER", "1", 1); /* read again at init: NCCL reads the tables after init */
    void* c2;
    CHECK(t->init(&c2, 8, adLog) == commSuccess, "adapter init");
    t->finalize(c2);
    CHECK(commCollNetNcclWrap(lib, "test_aggd")->iallgather == NULL, "the switch at init is not seen by the adapter");
  }
  for (int v = 0; v < 4; v++) {
    ncclCollNet_v8_t* tb = dlsym(lib, names[v]); /* the two members sit at the same place in every version */
    CHECK(tb && !tb->iallgather && !tb->ireducescatter, "%s still offers allgather or reducescatter", names[v]);
  }
  t->finalize(actx);
}

/* Scenario G: the last member is killed in the middle of an allgather of 3 x 2 MiB. */
static void memberKilledInGather(shGroup* s, int rank, const char* daemons) {
  loadPlugin(daemons);
  void* cc = joinGroup(s, rank);
  size_t bpr = (size_t)2 << 20;
  uint8_t* mine = calloc(bpr, 1);
  uint8_t* out = malloc((size_t)s->nranks * bpr);
  CHECK(mine && out, "malloc");
  ncclNetSGE_v9_t part = {NULL, out, (size_t)s->nranks * bpr};
  void* req = NULL;
  CHECK(api->iallgather(cc, mine, 1, &part, bpr, 0, part.size, NULL, &req) == ncclSuccess && req, "post");
  if (rank == s->nranks - 1) {
    waitCount(&s->posted, s->nranks - 1, 20000, "the others' posts");
    for (int i = 0; i < 3; i++) { /* a few rounds move, then it dies */
      int done = 0;
      CHECK(api->test(req, &done, NULL) == ncclSuccess && !done, "the allgather ended before the kill");
      usleep(2000);
    }
    raise(SIGKILL);
  }
  __atomic_add_fetch(&s->posted, 1, __ATOMIC_ACQ_REL);
  int64_t start = nowMs();
  s->err[rank] = waitReq(req, TIMEOUT_MS + 5000);
  s->errMs[rank] = nowMs() - start;
  api->closeColl(cc);
}

/* The parent's part: F, X and H, then G. */
static void gatherScenarios(const char* list, int port0, int port1) {
  phase("F: allgather and reducescatter, groups of 3 and 4; X, H: libcomm's adapter, COMM_AGGD_NO_GATHER");
  pid_t pids[9];
  int k = 0;
  for (int gi = 0; gi < 2; gi++) {
    shGroup* s = &sh[5 + gi];
    memset(s, 0, sizeof(*s));
    s->nranks = 3 + gi;
    for (int r = 0; r < s->nranks; r++, k++)
      if ((pids[k] = spawn(r)) == 0) {
        memberGather(s, r, list, 5000u * (uint64_t)(gi + 1));
        _exit(0);
      }
  }
  if ((pids[k++] = spawn(0)) == 0) {
    memberAdapter(list, 1);
    _exit(0);
  }
  if ((pids[k++] = spawn(0)) == 0) {
    memberAdapter(NULL, 0);
    _exit(0);
  }
  for (int i = 0; i < k; i++) reap(pids[i], 0, "a member of F, X or H");
  for (int gi = 0; gi < 2; gi++)
    for (int r = 1; r < sh[5 + gi].nranks; r++)
      CHECK(sh[5 + gi].digest[r] == sh[5 + gi].digest[0], "group %d: rank %d's allgathers differ", gi, r);
  for (int i = 0; i < 2; i++) {
    int port = i ? port1 : port0;
    CHECK(statOf(port, AGGD_STAT_AG) > 0 && statOf(port, AGGD_STAT_RS) > 0, "daemon %d served no rounds", i);
    waitFreed(port, 0);
  }

  phase("G: a member killed in the middle of an allgather");
  shGroup* s = &sh[7];
  memset(s, 0, sizeof(*s));
  s->nranks = 3;
  for (int r = 0; r < 3; r++)
    if ((pids[r] = spawn(r)) == 0) {
      memberKilledInGather(s, r, list);
      _exit(0);
    }
  reap(pids[2], SIGKILL, "the member killed in an allgather");
  for (int r = 0; r < 2; r++) {
    reap(pids[r], 0, "a member beside the killed one");
    CHECK(s->err[r] == ncclRemoteError || s->err[r] == ncclSystemError, "rank %d: test returned %d", r, s->err[r]);
    CHECK(s->errMs[r] < 5000, "rank %d saw the failure after %lld ms", r, (long long)s->errMs[r]);
  }
  waitFreed(port0, 0);
  waitFreed(port1, 0);
}
