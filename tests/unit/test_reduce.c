/* Unit tests for src/exec/reduce.c: every datatype x op against a double-precision reference that is
 * rounded once to the datatype, aliasing, exhaustive narrow-float conversions, rounding corner cases,
 * and argument validation. The reference decoders/encoders here are written from the format
 * definitions (frexp/ldexp/nearbyint), independently of the library's bit manipulation. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "reduce.h"

/* ---------------------------------------------------------------------------------------------------- */
/* Reference formats                                                                                     */
/* ---------------------------------------------------------------------------------------------------- */

typedef struct {
  int ebits, mbits, bias;
  int fn; /* OCP "FN": no infinities, all-ones is NaN, overflow saturates */
} fmt_t;

static const fmt_t FMT_HALF = {5, 10, 15, 0};
static const fmt_t FMT_BF16 = {8, 7, 127, 0};
static const fmt_t FMT_E4M3 = {4, 3, 7, 1};
static const fmt_t FMT_E5M2 = {5, 2, 15, 0};

static double refDecode(const fmt_t* f, uint32_t bits) {
  uint32_t emask = (1u << f->ebits) - 1, mmask = (1u << f->mbits) - 1;
  int sign = (bits >> (f->ebits + f->mbits)) & 1;
  uint32_t e = (bits >> f->mbits) & emask, m = bits & mmask;
  double v;
  if (f->fn && e == emask && m == mmask) return NAN;
  if (!f->fn && e == emask) {
    if (m) return NAN;
    v = INFINITY;
  } else if (e == 0) {
    v = ldexp((double)m, 1 - f->bias - f->mbits);
  } else {
    v = ldexp((double)(m + (1u << f->mbits)), (int)e - f->bias - f->mbits);
  }
  return sign ? -v : v;
}

static double fmtMax(const fmt_t* f) {
  int emaxField = (1 << f->ebits) - (f->fn ? 1 : 2);
  double mant = f->fn ? (double)((1u << (f->mbits + 1)) - 2) : (double)((1u << (f->mbits + 1)) - 1);
  return ldexp(mant, emaxField - f->bias - f->mbits);
}

/* Round x to the format with round-to-nearest-even, once. */
static uint32_t refEncode(const fmt_t* f, double x) {
  uint32_t signBit = 1u << (f->ebits + f->mbits);
  uint32_t emask = (1u << f->ebits) - 1;
  uint32_t nanBits = f->fn ? (signBit - 1) : ((emask << f->mbits) | (1u << (f->mbits - 1)));
  uint32_t infBits = emask << f->mbits;
  if (isnan(x)) return nanBits;
  uint32_t s = signbit(x) ? signBit : 0;
  double ax = fabs(x), maxv = fmtMax(f);
  uint32_t overflow = f->fn ? (signBit - 2) : infBits; /* fn: saturate to max finite */
  if (isinf(ax)) return s | overflow;
  int emin = 1 - f->bias, e;
  frexp(ax, &e);
  int E = e - 1 < emin ? emin : e - 1;
  double q = ldexp(1.0, E - f->mbits);
  double k = nearbyint(ax / q);
  double v = k * q;
  if (v > maxv) return s | overflow;
  if (v < ldexp(1.0, emin)) return s | (uint32_t)k; /* subnormal (k == 2^mbits is the min normal) */
  frexp(v, &e);
  int E2 = e - 1;
  uint32_t m = (uint32_t)(v / ldexp(1.0, E2 - f->mbits)) - (1u << f->mbits);
  return s | ((uint32_t)(E2 + f->bias) << f->mbits) | m;
}

static const fmt_t* fmtOf(commDataType_t t) {
  switch (t) {
    case commFloat16: return &FMT_HALF;
    case commBfloat16: return &FMT_BF16;
    case commFloat8e4m3: return &FMT_E4M3;
    case commFloat8e5m2: return &FMT_E5M2;
    default: return NULL;
  }
}

static int isSigned(commDataType_t t) { return t == commInt8 || t == commInt32 || t == commInt64; }

/* ---------------------------------------------------------------------------------------------------- */
/* Element access                                                                                        */
/* ---------------------------------------------------------------------------------------------------- */

static uint64_t rawGet(commDataType_t t, const void* p, size_t i) {
  switch (commTypeSize(t)) {
    case 1: return ((const uint8_t*)p)[i];
    case 2: return ((const uint16_t*)p)[i];
    case 4: return ((const uint32_t*)p)[i];
    default: return ((const uint64_t*)p)[i];
  }
}
static void rawSet(commDataType_t t, void* p, size_t i, uint64_t v) {
  switch (commTypeSize(t)) {
    case 1: ((uint8_t*)p)[i] = (uint8_t)v; break;
    case 2: ((uint16_t*)p)[i] = (uint16_t)v; break;
    case 4: ((uint32_t*)p)[i] = (uint32_t)v; break;
    default: ((uint64_t*)p)[i] = v; break;
  }
}

static double bitsToDouble(commDataType_t t, uint64_t bits) {
  if (t == commFloat32) {
    float f;
    uint32_t u = (uint32_t)bits;
    memcpy(&f, &u, 4);
    return f;
  }
  if (t == commFloat64) {
    double d;
    memcpy(&d, &bits, 8);
    return d;
  }
  return refDecode(fmtOf(t), (uint32_t)bits);
}
static uint64_t doubleToBits(commDataType_t t, double x) {
  if (t == commFloat32) {
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
  }
  if (t == commFloat64) {
    uint64_t u;
    memcpy(&u, &x, 8);
    return u;
  }
  return refEncode(fmtOf(t), x);
}
/* Round once to the datatype. */
static double R(commDataType_t t, double x) { return bitsToDouble(t, doubleToBits(t, x)); }

/* Integer value: truncate to the width, sign-extend for signed types. */
static uint64_t intNorm(commDataType_t t, uint64_t v) {
  int w = 8 * (int)commTypeSize(t);
  if (w == 64) return v;
  v &= (1ull << w) - 1;
  if (isSigned(t) && (v >> (w - 1))) v |= ~0ull << w;
  return v;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Random inputs                                                                                         */
/* ---------------------------------------------------------------------------------------------------- */

static uint64_t rngState = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rngState += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t randomElement(commDataType_t t) {
  if (!commTypeIsFloat(t)) return rnd();
  uint64_t r = rnd() % 16;
  if (r < 5) return rnd(); /* any bit pattern: NaN, inf, subnormals, extremes */
  if (r == 5) return doubleToBits(t, (rnd() & 1) ? 0.0 : -0.0);
  if (r == 6) return doubleToBits(t, (rnd() & 1) ? INFINITY : -INFINITY);
  if (r == 7) return doubleToBits(t, NAN);
  /* moderate values, so that sums and products mostly stay in range and round */
  double v = ((double)(rnd() >> 11) / 9007199254740992.0 - 0.5) * 40.0;
  return doubleToBits(t, v);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Reference reduction                                                                                   */
/* ---------------------------------------------------------------------------------------------------- */

static double refMax(double x, double y) {
  if (isnan(x) || isnan(y)) return NAN;
  if (x == 0 && y == 0) return (signbit(x) && signbit(y)) ? -0.0 : 0.0;
  return x > y ? x : y;
}
static double refMin(double x, double y) {
  if (isnan(x) || isnan(y)) return NAN;
  if (x == 0 && y == 0) return (signbit(x) || signbit(y)) ? -0.0 : 0.0;
  return x < y ? x : y;
}

static uint64_t refFloatOp(const commRedOpArgs* args, uint64_t abits, uint64_t bbits, int pre, int post) {
  commDataType_t t = args->dtype;
  double x = bitsToDouble(t, abits), y = bitsToDouble(t, bbits), r;
  switch (args->kind) {
    case COMM_REDOP_SUM: r = R(t, x + y); break;
    case COMM_REDOP_PROD: r = R(t, x * y); break;
    case COMM_REDOP_MAX: r = refMax(x, y); break;
    case COMM_REDOP_MIN: r = refMin(x, y); break;
    case COMM_REDOP_PREMULSUM: {
      double s = bitsToDouble(t, args->scalarBits);
      r = pre ? R(t, x + R(t, s * y)) : R(t, x + y);
      break;
    }
    default:
      r = R(t, x + y);
      if (post) r = R(t, r / (double)args->divisor);
      break;
  }
  return doubleToBits(t, r);
}

static uint64_t refIntOp(const commRedOpArgs* args, uint64_t abits, uint64_t bbits, int pre, int post) {
  commDataType_t t = args->dtype;
  uint64_t x = intNorm(t, abits), y = intNorm(t, bbits), r;
  switch (args->kind) {
    case COMM_REDOP_SUM: r = x + y; break;
    case COMM_REDOP_PROD: r = x * y; break;
    case COMM_REDOP_MAX: r = isSigned(t) ? ((int64_t)x > (int64_t)y ? x : y) : (x > y ? x : y); break;
    case COMM_REDOP_MIN: r = isSigned(t) ? ((int64_t)x < (int64_t)y ? x : y) : (x < y ? x : y); break;
    case COMM_REDOP_PREMULSUM: r = pre ? x + intNorm(t, args->scalarBits) * y : x + y; break;
    default:
      r = intNorm(t, x + y);
      if (post) r = isSigned(t) ? (uint64_t)((int64_t)r / (int64_t)args->divisor) : r / args->divisor;
      break;
  }
  return intNorm(t, r);
}

static uint64_t refOp(const commRedOpArgs* args, uint64_t a, uint64_t b, int pre, int post) {
  return commTypeIsFloat(args->dtype) ? refFloatOp(args, a, b, pre, post) : refIntOp(args, a, b, pre, post);
}

/* Same value (floats: bit-identical after decoding, any NaN matches any NaN; ints: same bits). */
static int sameElement(commDataType_t t, uint64_t got, uint64_t want) {
  if (!commTypeIsFloat(t)) return intNorm(t, got) == intNorm(t, want);
  double g = bitsToDouble(t, got), w = bitsToDouble(t, want);
  if (isnan(w)) return isnan(g);
  return g == w && !signbit(g) == !signbit(w);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Reduction tests                                                                                       */
/* ---------------------------------------------------------------------------------------------------- */

static const size_t LENGTHS[] = {0, 1, 7, 1000, 4099};
#define NLENGTHS (sizeof(LENGTHS) / sizeof(LENGTHS[0]))

static int checkOne(const commRedOpArgs* args, int pre, int post, size_t n, int aliasMode) {
  commDataType_t t = args->dtype;
  size_t es = commTypeSize(t);
  size_t bytes = n > 0 ? n * es : 1;
  uint8_t* a = malloc(bytes);
  uint8_t* b = malloc(bytes);
  uint8_t* d = malloc(bytes);
  assert_non_null(a);
  assert_non_null(b);
  assert_non_null(d);
  for (size_t i = 0; i < n; i++) {
    rawSet(t, a, i, randomElement(t));
    rawSet(t, b, i, randomElement(t));
    rawSet(t, d, i, rnd());
  }
  uint8_t* dst = d;
  const uint8_t* pa = a;
  const uint8_t* pb = b;
  if (aliasMode == 1) {
    memcpy(d, a, n * es);
    pa = d;
  } else if (aliasMode == 2) {
    memcpy(d, b, n * es);
    pb = d;
  }
  commReduceLocal(args, dst, pa, pb, n, pre, post);
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t want = refOp(args, rawGet(t, a, i), rawGet(t, b, i), pre, post);
    uint64_t got = rawGet(t, dst, i);
    if (!sameElement(t, got, want)) {
      if (bad < 5)
        fprintf(stderr,
                "MISMATCH %s kind %d pre %d post %d n %zu alias %d i %zu: a=%#llx b=%#llx got=%#llx want=%#llx\n",
                commTypeName(t), (int)args->kind, pre, post, n, aliasMode, i, (unsigned long long)rawGet(t, a, i),
                (unsigned long long)rawGet(t, b, i), (unsigned long long)got, (unsigned long long)want);
      bad++;
    }
  }
  free(a);
  free(b);
  free(d);
  return bad;
}

static int checkArgs(const commRedOpArgs* args, int pre, int post) {
  int bad = 0;
  for (size_t l = 0; l < NLENGTHS; l++)
    for (int alias = 0; alias < 3; alias++) bad += checkOne(args, pre, post, LENGTHS[l], alias);
  return bad;
}

static void test_reduce_builtin_ops(void** state) {
  (void)state;
  int bad = 0;
  for (int t = 0; t < commNumTypes; t++) {
    for (int op = commSum; op <= commMin; op++) {
      commRedOpArgs args;
      assert_int_equal(commRedOpArgsBuiltin((commRedOp_t)op, (commDataType_t)t, 3, &args), commSuccess);
      assert_int_equal(args.dtype, t);
      assert_int_equal((int)args.kind, op); /* SUM, PROD, MAX, MIN in the same order */
      for (int flags = 0; flags < 4; flags++) bad += checkArgs(&args, flags & 1, flags >> 1); /* flags ignored */
    }
  }
  assert_int_equal(bad, 0);
}

static void test_reduce_avg(void** state) {
  (void)state;
  int bad = 0;
  for (int t = 0; t < commNumTypes; t++) {
    commRedOpArgs args;
    assert_int_equal(commRedOpArgsBuiltin(commAvg, (commDataType_t)t, 3, &args), commSuccess);
    if (commTypeIsFloat((commDataType_t)t)) {
      assert_int_equal(args.kind, COMM_REDOP_PREMULSUM);
      assert_true(args.scalarBits == doubleToBits((commDataType_t)t, 1.0 / 3.0));
      assert_true(args.scalar == R((commDataType_t)t, 1.0 / 3.0));
      bad += checkArgs(&args, 1, 0);
      bad += checkArgs(&args, 0, 0);
    } else {
      assert_int_equal(args.kind, COMM_REDOP_SUMPOSTDIV);
      assert_true(args.divisor == 3);
      bad += checkArgs(&args, 0, 1);
      bad += checkArgs(&args, 0, 0);
    }
  }
  assert_int_equal(bad, 0);
}

static void test_reduce_premulsum(void** state) {
  (void)state;
  int bad = 0;
  const double fscalars[] = {0.37, -2.5, 1.0 / 3.0, 0.0};
  const int64_t iscalars[] = {3, -7, 0};
  for (int t = 0; t < commNumTypes; t++) {
    size_t ns = commTypeIsFloat((commDataType_t)t) ? 4 : 3;
    for (size_t k = 0; k < ns; k++) {
      uint64_t bits = commTypeIsFloat((commDataType_t)t) ? doubleToBits((commDataType_t)t, fscalars[k])
                                                         : (uint64_t)iscalars[k];
      uint8_t scalar[8];
      /* the scalar in the datatype's own representation */
      rawSet((commDataType_t)t, scalar, 0, bits);
      commRedOpArgs args;
      assert_int_equal(commRedOpArgsPreMul((commDataType_t)t, scalar, &args), commSuccess);
      assert_int_equal(args.kind, COMM_REDOP_PREMULSUM);
      assert_true(intNorm((commDataType_t)t, args.scalarBits) == intNorm((commDataType_t)t, bits) ||
                  commTypeIsFloat((commDataType_t)t));
      if (commTypeIsFloat((commDataType_t)t))
        assert_true(args.scalarBits == (bits & (commTypeSize((commDataType_t)t) == 8
                                                    ? ~0ull
                                                    : (1ull << (8 * commTypeSize((commDataType_t)t))) - 1)));
      bad += checkArgs(&args, 1, 0);
      bad += checkArgs(&args, 0, 1); /* pre off: plain sum; post ignored */
    }
  }
  assert_int_equal(bad, 0);
}

static void test_reduce_sumpostdiv(void** state) {
  (void)state;
  int bad = 0;
  const uint64_t divisors[] = {1, 3, 7, 1000};
  for (int t = 0; t < commNumTypes; t++) {
    for (size_t k = 0; k < 4; k++) {
      commRedOpArgs args;
      memset(&args, 0, sizeof(args));
      args.kind = COMM_REDOP_SUMPOSTDIV;
      args.dtype = (commDataType_t)t;
      args.divisor = divisors[k];
      bad += checkArgs(&args, 0, 1);
      bad += checkArgs(&args, 1, 0);
    }
  }
  assert_int_equal(bad, 0);
}

/* commCopy: pre/post on a single operand, plain copy otherwise (also in place). */
static void test_copy(void** state) {
  (void)state;
  const size_t n = 1037;
  for (int t = 0; t < commNumTypes; t++) {
    size_t es = commTypeSize((commDataType_t)t);
    uint8_t* src = malloc(n * es);
    uint8_t* dst = malloc(n * es);
    uint8_t* in = malloc(n * es);
    assert_non_null(src);
    assert_non_null(dst);
    assert_non_null(in);
    for (size_t i = 0; i < n; i++) rawSet((commDataType_t)t, src, i, randomElement((commDataType_t)t));
    int isF = commTypeIsFloat((commDataType_t)t);
    commRedOpArgs pm, pd, sum;
    uint8_t scalar[8];
    rawSet((commDataType_t)t, scalar, 0, isF ? doubleToBits((commDataType_t)t, -0.37) : (uint64_t)-5);
    assert_int_equal(commRedOpArgsPreMul((commDataType_t)t, scalar, &pm), commSuccess);
    memset(&pd, 0, sizeof(pd));
    pd.kind = COMM_REDOP_SUMPOSTDIV;
    pd.dtype = (commDataType_t)t;
    pd.divisor = 3;
    assert_int_equal(commRedOpArgsBuiltin(commSum, (commDataType_t)t, 4, &sum), commSuccess);

    for (int inPlace = 0; inPlace < 2; inPlace++) {
      uint8_t* out = inPlace ? in : dst;
      /* pre-multiply */
      memcpy(in, src, n * es);
      commCopy(&pm, out, in, n, 1, 0);
      for (size_t i = 0; i < n; i++) {
        uint64_t v = rawGet((commDataType_t)t, src, i), want;
        if (isF)
          want = doubleToBits((commDataType_t)t,
                              bitsToDouble((commDataType_t)t, pm.scalarBits) * bitsToDouble((commDataType_t)t, v));
        else
          want = intNorm((commDataType_t)t, intNorm((commDataType_t)t, pm.scalarBits) * intNorm((commDataType_t)t, v));
        assert_true(sameElement((commDataType_t)t, rawGet((commDataType_t)t, out, i), want));
      }
      /* post-divide */
      memcpy(in, src, n * es);
      commCopy(&pd, out, in, n, 0, 1);
      for (size_t i = 0; i < n; i++) {
        uint64_t v = rawGet((commDataType_t)t, src, i), want;
        if (isF) want = doubleToBits((commDataType_t)t, bitsToDouble((commDataType_t)t, v) / 3.0);
        else if (isSigned((commDataType_t)t)) want = (uint64_t)((int64_t)intNorm((commDataType_t)t, v) / 3);
        else want = intNorm((commDataType_t)t, v) / 3;
        assert_true(sameElement((commDataType_t)t, rawGet((commDataType_t)t, out, i), want));
      }
      /* nothing applies: exact copy of the bits (flags that do not match the kind are ignored) */
      const commRedOpArgs* plain[3] = {&sum, &pm, &pd};
      const int pres[3] = {1, 0, 1}, posts[3] = {1, 1, 0};
      for (int k = 0; k < 3; k++) {
        memcpy(in, src, n * es);
        commCopy(plain[k], out, in, n, pres[k], posts[k]);
        assert_memory_equal(out, src, n * es);
      }
    }
    free(src);
    free(dst);
    free(in);
  }
}

/* NaN propagation and signed zeros of max/min, on every float type, both argument orders. */
static void test_minmax_nan_zero(void** state) {
  (void)state;
  for (int t = 0; t < commNumTypes; t++) {
    if (!commTypeIsFloat((commDataType_t)t)) continue;
    commRedOpArgs mx, mn;
    assert_int_equal(commRedOpArgsBuiltin(commMax, (commDataType_t)t, 2, &mx), commSuccess);
    assert_int_equal(commRedOpArgsBuiltin(commMin, (commDataType_t)t, 2, &mn), commSuccess);
    const double xs[] = {NAN, 1.0, NAN, 0.0, -0.0, 0.0, -0.0, -1.0};
    const double ys[] = {1.0, NAN, NAN, -0.0, 0.0, 0.0, -0.0, 2.0};
    const double wantMax[] = {NAN, NAN, NAN, 0.0, 0.0, 0.0, -0.0, 2.0};
    const double wantMin[] = {NAN, NAN, NAN, -0.0, -0.0, 0.0, -0.0, -1.0};
    uint8_t a[64], b[64], d[64];
    for (int i = 0; i < 8; i++) {
      rawSet((commDataType_t)t, a, i, doubleToBits((commDataType_t)t, xs[i]));
      rawSet((commDataType_t)t, b, i, doubleToBits((commDataType_t)t, ys[i]));
    }
    commReduceLocal(&mx, d, a, b, 8, 0, 0);
    for (int i = 0; i < 8; i++)
      assert_true(
          sameElement((commDataType_t)t, rawGet((commDataType_t)t, d, i), doubleToBits((commDataType_t)t, wantMax[i])));
    commReduceLocal(&mn, d, a, b, 8, 0, 0);
    for (int i = 0; i < 8; i++)
      assert_true(
          sameElement((commDataType_t)t, rawGet((commDataType_t)t, d, i), doubleToBits((commDataType_t)t, wantMin[i])));
  }
}

/* Integer specifics: wrap-around and truncation toward zero. */
static void test_int_semantics(void** state) {
  (void)state;
  commRedOpArgs s, p, avg;
  int32_t a[4] = {INT32_MAX, INT32_MIN, -7, 7}, b[4] = {1, -1, 0, 0}, d[4];
  assert_int_equal(commRedOpArgsBuiltin(commSum, commInt32, 2, &s), commSuccess);
  commReduceLocal(&s, d, a, b, 4, 0, 0);
  assert_int_equal(d[0], INT32_MIN);
  assert_int_equal(d[1], INT32_MAX);
  assert_int_equal(commRedOpArgsBuiltin(commProd, commInt32, 2, &p), commSuccess);
  int32_t c[4] = {65536, -3, 1 << 30, -1};
  int32_t e[4] = {65536, 5, 4, INT32_MIN};
  commReduceLocal(&p, d, c, e, 4, 0, 0);
  assert_int_equal(d[0], 0);
  assert_int_equal(d[1], -15);
  assert_int_equal(d[2], 0);
  assert_int_equal(d[3], INT32_MIN);
  assert_int_equal(commRedOpArgsBuiltin(commAvg, commInt32, 2, &avg), commSuccess);
  int32_t x[2] = {-7, 7}, y[2] = {0, 0};
  commReduceLocal(&avg, d, x, y, 2, 0, 1);
  assert_int_equal(d[0], -3); /* truncation toward zero */
  assert_int_equal(d[1], 3);
  int8_t i8a[1] = {-128}, i8b[1] = {-1}, i8d[1];
  commRedOpArgs a8;
  assert_int_equal(commRedOpArgsBuiltin(commAvg, commInt8, 2, &a8), commSuccess);
  commReduceLocal(&a8, i8d, i8a, i8b, 1, 0, 1); /* -129 wraps to 127, 127 / 2 = 63 */
  assert_int_equal(i8d[0], 63);
  int64_t l[1] = {INT64_MIN}, m[1] = {0}, ld[1];
  commRedOpArgs big = avg;
  big.dtype = commInt64;
  big.divisor = (uint64_t)INT64_MAX + 1;
  commReduceLocal(&big, ld, l, m, 1, 0, 1);
  assert_true(ld[0] == -1);
  big.divisor = 3;
  l[0] = -10;
  commReduceLocal(&big, ld, l, m, 1, 0, 1);
  assert_true(ld[0] == -3);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Conversions                                                                                           */
/* ---------------------------------------------------------------------------------------------------- */

static float libDecode(const fmt_t* f, uint32_t v) {
  if (f == &FMT_HALF) return commHalfToFloat((uint16_t)v);
  if (f == &FMT_BF16) return commBf16ToFloat((uint16_t)v);
  if (f == &FMT_E4M3) return commFp8e4m3ToFloat((uint8_t)v);
  return commFp8e5m2ToFloat((uint8_t)v);
}
static uint32_t libEncode(const fmt_t* f, float x) {
  if (f == &FMT_HALF) return commFloatToHalf(x);
  if (f == &FMT_BF16) return commFloatToBf16(x);
  if (f == &FMT_E4M3) return commFloatToFp8e4m3(x);
  return commFloatToFp8e5m2(x);
}
static int bitsIsNan(const fmt_t* f, uint32_t v) { return isnan(refDecode(f, v)); }

static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Decode matches the definition for every pattern; decode -> encode is the identity (NaN stays NaN). */
static void exhaustiveRoundTrip(const fmt_t* f) {
  uint32_t count = 1u << (1 + f->ebits + f->mbits);
  for (uint32_t v = 0; v < count; v++) {
    double want = refDecode(f, v);
    float got = libDecode(f, v);
    if (isnan(want)) {
      assert_true(isnan(got));
      assert_true(bitsIsNan(f, libEncode(f, got)));
    } else {
      if (!((double)got == want && !signbit(got) == !signbit(want)))
        fprintf(stderr, "decode mismatch: format e%dm%d bits %#x got %a want %a\n", f->ebits, f->mbits, v, (double)got,
                want);
      assert_true((double)got == want && !signbit(got) == !signbit(want));
      assert_int_equal(libEncode(f, got), v);
    }
  }
}

static void test_conv_exhaustive(void** state) {
  (void)state;
  exhaustiveRoundTrip(&FMT_HALF);
  exhaustiveRoundTrip(&FMT_BF16);
  exhaustiveRoundTrip(&FMT_E4M3);
  exhaustiveRoundTrip(&FMT_E5M2);
}

/* Every midpoint between two adjacent finite values rounds to the even one, and the float just above or
 * below it rounds to the nearer one. Midpoints of these formats are exact floats. */
static void midpoints(const fmt_t* f) {
  uint32_t signBit = 1u << (f->ebits + f->mbits);
  for (uint32_t v = 0; v + 1 < signBit; v++) {
    double lo = refDecode(f, v), hi = refDecode(f, v + 1);
    if (isnan(lo) || isnan(hi) || isinf(hi)) continue;
    float mid = (float)((lo + hi) / 2);
    assert_true((double)mid == (lo + hi) / 2);
    uint32_t even = (v & 1) ? v + 1 : v;
    for (int s = 0; s < 2; s++) {
      uint32_t sb = s ? signBit : 0;
      float m = s ? -mid : mid;
      assert_int_equal(libEncode(f, m), even | sb);
      assert_int_equal(libEncode(f, nextafterf(m, s ? -INFINITY : INFINITY)), (v + 1) | sb);
      assert_int_equal(libEncode(f, nextafterf(m, 0.0f)), v | sb);
    }
  }
}

static void test_conv_rne_ties(void** state) {
  (void)state;
  midpoints(&FMT_HALF);
  midpoints(&FMT_BF16);
  midpoints(&FMT_E4M3);
  midpoints(&FMT_E5M2);
}

/* Random float bit patterns against the reference rounding (covers overflow, underflow, subnormals). */
static void test_conv_random(void** state) {
  (void)state;
  const fmt_t* fmts[4] = {&FMT_HALF, &FMT_BF16, &FMT_E4M3, &FMT_E5M2};
  for (int i = 0; i < 400000; i++) {
    uint32_t u = (uint32_t)rnd();
    if (i & 1) u = (u & 0x87ffffffu) | 0x38000000u; /* half the draws near the narrow formats' range */
    float x = u2f(u);
    for (int k = 0; k < 4; k++) {
      uint32_t got = libEncode(fmts[k], x), want = refEncode(fmts[k], (double)x);
      if (isnan(x)) assert_true(bitsIsNan(fmts[k], got));
      else assert_int_equal(got, want);
    }
  }
}

static void test_conv_corners(void** state) {
  (void)state;
  /* float16 */
  assert_int_equal(commFloatToHalf(65504.0f), 0x7bff);
  assert_int_equal(commFloatToHalf(65519.996f), 0x7bff);
  assert_int_equal(commFloatToHalf(65520.0f), 0x7c00); /* tie at max + half ulp rounds to even = inf */
  assert_int_equal(commFloatToHalf(1e10f), 0x7c00);
  assert_int_equal(commFloatToHalf(-INFINITY), 0xfc00);
  assert_true((commFloatToHalf(NAN) & 0x7fff) > 0x7c00);
  assert_true((commFloatToHalf(u2f(0x7f800001u)) & 0x7fff) > 0x7c00); /* signalling NaN stays NaN */
  assert_int_equal(commFloatToHalf(0x1p-24f), 0x0001);
  assert_int_equal(commFloatToHalf(0x1p-25f), 0x0000);   /* tie to even: 0 */
  assert_int_equal(commFloatToHalf(0x1.8p-24f), 0x0002); /* tie to even: 2 */
  assert_int_equal(commFloatToHalf(nextafterf(0x1p-25f, 1.0f)), 0x0001);
  assert_int_equal(commFloatToHalf(-0.0f), 0x8000);
  assert_int_equal(commFloatToHalf(0x1.ffcp-15f), 0x0400);      /* largest subnormal + half ulp -> min normal */
  assert_int_equal(commFloatToHalf(1.0f + 0x1p-11f), 0x3c00);   /* tie to even below */
  assert_int_equal(commFloatToHalf(1.0f + 0x1.8p-10f), 0x3c02); /* tie to even above */
  assert_true(commHalfToFloat(0x0001) == 0x1p-24f);
  assert_true(isinf(commHalfToFloat(0x7c00)));
  /* bfloat16 */
  assert_int_equal(commFloatToBf16(FLT_MAX), 0x7f80);
  assert_int_equal(commFloatToBf16(u2f(0x7f7f7fffu)), 0x7f7f);
  assert_int_equal(commFloatToBf16(u2f(0x7f7f8000u)), 0x7f80);
  assert_true((commFloatToBf16(u2f(0x7f800001u)) & 0x7fff) > 0x7f80); /* truncation would give inf */
  assert_true((commFloatToBf16(u2f(0xffffffffu)) & 0x7fff) > 0x7f80);
  assert_int_equal(commFloatToBf16(u2f(0x00008000u)), 0x0000); /* subnormal tie to even */
  assert_int_equal(commFloatToBf16(u2f(0x00018000u)), 0x0002);
  assert_int_equal(commFloatToBf16(u2f(0x80008001u)), 0x8001);
  /* float8 e4m3: saturating, NaN 0x7f/0xff */
  assert_int_equal(commFloatToFp8e4m3(448.0f), 0x7e);
  assert_int_equal(commFloatToFp8e4m3(464.0f), 0x7e);
  assert_int_equal(commFloatToFp8e4m3(1e9f), 0x7e);
  assert_int_equal(commFloatToFp8e4m3(INFINITY), 0x7e);
  assert_int_equal(commFloatToFp8e4m3(-INFINITY), 0xfe);
  assert_int_equal(commFloatToFp8e4m3(-1000.0f), 0xfe);
  assert_int_equal(commFloatToFp8e4m3(NAN), 0x7f);
  assert_int_equal(commFloatToFp8e4m3(-NAN), 0xff);
  assert_int_equal(commFloatToFp8e4m3(0x1p-9f), 0x01);
  assert_int_equal(commFloatToFp8e4m3(0x1p-10f), 0x00);
  assert_int_equal(commFloatToFp8e4m3(0x1.8p-9f), 0x02);
  assert_int_equal(commFloatToFp8e4m3(0x1.fp-7f), 0x08); /* rounds up to min normal 2^-6 */
  assert_true(commFp8e4m3ToFloat(0x7e) == 448.0f);
  assert_true(isnan(commFp8e4m3ToFloat(0x7f)) && isnan(commFp8e4m3ToFloat(0xff)));
  assert_true(commFp8e4m3ToFloat(0x78) == 256.0f);
  /* float8 e5m2: IEEE-like */
  assert_int_equal(commFloatToFp8e5m2(57344.0f), 0x7b);
  assert_int_equal(commFloatToFp8e5m2(61439.0f), 0x7b);
  assert_int_equal(commFloatToFp8e5m2(61440.0f), 0x7c);
  assert_int_equal(commFloatToFp8e5m2(-1e6f), 0xfc);
  assert_true((commFloatToFp8e5m2(NAN) & 0x7f) > 0x7c);
  assert_int_equal(commFloatToFp8e5m2(0x1p-16f), 0x01);
  assert_int_equal(commFloatToFp8e5m2(0x1p-17f), 0x00);
  assert_true(isinf(commFp8e5m2ToFloat(0xfc)) && commFp8e5m2ToFloat(0xfc) < 0);
  /* reductions saturate / overflow like the conversions */
  commRedOpArgs s;
  uint8_t a[2] = {0x7e, 0xfe}, b[2] = {0x7e, 0xfe}, d[2];
  assert_int_equal(commRedOpArgsBuiltin(commSum, commFloat8e4m3, 2, &s), commSuccess);
  commReduceLocal(&s, d, a, b, 2, 0, 0);
  assert_int_equal(d[0], 0x7e);
  assert_int_equal(d[1], 0xfe);
  uint16_t h[1] = {0x7bff}, hd[1];
  assert_int_equal(commRedOpArgsBuiltin(commSum, commFloat16, 2, &s), commSuccess);
  commReduceLocal(&s, hd, h, h, 1, 0, 0);
  assert_int_equal(hd[0], 0x7c00);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Names, sizes, argument checks                                                                         */
/* ---------------------------------------------------------------------------------------------------- */

static void test_names_sizes(void** state) {
  (void)state;
  static const char* names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
                                "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  static const int isf[] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
  for (int t = 0; t < commNumTypes; t++) {
    assert_string_equal(commTypeName((commDataType_t)t), names[t]);
    assert_int_equal(commTypeSize((commDataType_t)t), sizes[t]);
    assert_int_equal(commTypeIsFloat((commDataType_t)t), isf[t]);
  }
  assert_int_equal(commTypeSize(commNumTypes), 0);
  assert_int_equal(commTypeIsFloat(commNumTypes), 0);
  assert_non_null(commTypeName(commNumTypes));
  assert_string_equal(commOpName(commSum), "sum");
  assert_string_equal(commOpName(commProd), "prod");
  assert_string_equal(commOpName(commMax), "max");
  assert_string_equal(commOpName(commMin), "min");
  assert_string_equal(commOpName(commAvg), "avg");
  assert_string_equal(commOpName((commRedOp_t)(commNumOps + 3)), "premulsum");
}

static void test_invalid(void** state) {
  (void)state;
  commRedOpArgs args;
  memset(&args, 0x5a, sizeof(args));
  commRedOpArgs before = args;
  assert_int_equal(commRedOpArgsBuiltin(commNumOps, commFloat32, 2, &args), commInvalidArgument);
  assert_int_equal(commRedOpArgsBuiltin((commRedOp_t)-1, commFloat32, 2, &args), commInvalidArgument);
  assert_int_equal(commRedOpArgsBuiltin((commRedOp_t)(commNumOps + 1), commFloat32, 2, &args), commInvalidArgument);
  assert_int_equal(commRedOpArgsBuiltin(commSum, commNumTypes, 2, &args), commInvalidArgument);
  assert_int_equal(commRedOpArgsBuiltin(commSum, (commDataType_t)-1, 2, &args), commInvalidArgument);
  assert_int_equal(commRedOpArgsBuiltin(commAvg, commInt32, 0, &args), commInvalidArgument);
  assert_int_equal(commRedOpArgsBuiltin(commSum, commInt32, 2, NULL), commInvalidArgument);
  float one = 1.0f;
  assert_int_equal(commRedOpArgsPreMul(commNumTypes, &one, &args), commInvalidArgument);
  assert_int_equal(commRedOpArgsPreMul(commFloat32, NULL, &args), commInvalidArgument);
  assert_memory_equal(&args, &before, sizeof(args)); /* nothing touched on error */
  /* invalid args to the kernels: nothing written */
  commRedOpArgs bad;
  assert_int_equal(commRedOpArgsBuiltin(commSum, commFloat32, 2, &bad), commSuccess);
  bad.dtype = commNumTypes;
  float a[2] = {1, 2}, d[2] = {7, 7};
  commReduceLocal(&bad, d, a, a, 2, 0, 0);
  commCopy(&bad, d, a, 2, 0, 0);
  assert_true(d[0] == 7 && d[1] == 7);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names_sizes),
      cmocka_unit_test(test_invalid),
      cmocka_unit_test(test_conv_exhaustive),
      cmocka_unit_test(test_conv_rne_ties),
      cmocka_unit_test(test_conv_random),
      cmocka_unit_test(test_conv_corners),
      cmocka_unit_test(test_reduce_builtin_ops),
      cmocka_unit_test(test_reduce_avg),
      cmocka_unit_test(test_reduce_premulsum),
      cmocka_unit_test(test_reduce_sumpostdiv),
      cmocka_unit_test(test_copy),
      cmocka_unit_test(test_minmax_nan_zero),
      cmocka_unit_test(test_int_semantics),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
