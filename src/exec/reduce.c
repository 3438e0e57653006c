/* Host reductions for every datatype x op (see reduce.h).
 *
 * Design:
 * - One function per (datatype, op kind), chosen once per call through a table; the inner loops have no
 *   per-element switch, so GCC -O3 vectorises them.
 * - Native types (integers, float32, float64) reduce in place of their own type. dst may be exactly a or
 *   b: every loop reads element i of both inputs before it writes element i of dst.
 * - float16, bfloat16, float8 e4m3 and e5m2 are reduced in blocks: a block of each input is decoded to
 *   float in stack arrays, combined, and encoded back with round-to-nearest-even. The conversions are
 *   branch-free bit manipulation (selects only), so every pass vectorises with SSE2 already, and no
 *   F16C instruction is needed. Decoding a whole block before writing makes dst == a / dst == b safe.
 * - Every op on a narrow float type gives the correctly rounded result of that one op: sums, products
 *   and quotients are computed in float, whose 24-bit significand is at least 2p+2 bits for all these
 *   formats, so rounding to float first and to the narrow format second gives the same result as
 *   rounding once. Products of float16/float8 values are even exact in float. A bfloat16 product can
 *   fall into float's subnormal range, but it still rounds correctly: a product of two 8-bit significands
 *   has at most 16 significant bits, so one that is not a multiple of 2^-149 is below 2^-134 by more
 *   than 2^-150 and can never round onto a bfloat16 midpoint (checked exhaustively for all products in
 *   that range while writing this; the unit test compares every op against a once-rounded reference).
 *
 * Semantics:
 * - Integers: sum, product and pre-multiplication wrap modulo 2^bits (done in unsigned arithmetic, so no
 *   signed overflow UB). SUMPOSTDIV divides the wrapped sum, truncating toward zero as C does.
 * - Floats max/min: if either input is NaN the result is NaN (unlike CUDA fmaxf/fminf, which return the
 *   other operand); max(-0, +0) = +0 and min(-0, +0) = -0, so both are commutative bit for bit (apart from
 *   which NaN payload is kept). A NaN result of a narrow type is encoded as the canonical quiet NaN.
 * - PREMULSUM with pre: b is first multiplied by the scalar and rounded to the datatype (exactly what
 *   commCopy with pre produces), then added: a + round(s * b). Never fused into an FMA.
 * - SUMPOSTDIV with post on float types: round(round(a + b) / divisor).
 * - float8 e4m3 (OCP "FN", no infinities): values beyond +-448, including infinities, saturate to +-448
 *   like CUDA's __NV_SATFINITE; NaN is 0x7f / 0xff. e5m2 follows IEEE: overflow gives +-inf.
 */
#include <stdint.h>
#include <string.h>

#include "debug.h"
#include "reduce.h"
#include "reduce_elem.h"

/* ---------------------------------------------------------------------------------------------------- */
/* Bit casts and conversions                                                                             */
/* ---------------------------------------------------------------------------------------------------- */

/* Round a double to float with round-to-odd: truncate toward zero and set the last bit when inexact.
 * Rounding that result to nearest-even in any format at least two bits coarser (bfloat16, float16,
 * float8, including their subnormals) gives the correctly rounded value of d. */
static inline float roundOddToFloat(double d) {
  float f = (float)d;
  double back = (double)f;
  uint32_t u = f2u(f);
  int inexact = back != d;
  int away = d > 0 ? back > d : back < d;
  u = inexact ? ((away ? u - 1u : u) | 1u) : u;
  return u2f(u);
}

float commHalfToFloat(uint16_t h) { return halfToFloat(h); }
uint16_t commFloatToHalf(float f) { return floatToHalf(f); }
float commBf16ToFloat(uint16_t h) { return bf16ToFloat(h); }
uint16_t commFloatToBf16(float f) { return floatToBf16(f); }
float commFp8e4m3ToFloat(uint8_t v) { return e4m3ToFloat(v); }
uint8_t commFloatToFp8e4m3(float f) { return floatToE4m3(f); }
float commFp8e5m2ToFloat(uint8_t v) { return e5m2ToFloat(v); }
uint8_t commFloatToFp8e5m2(float f) { return floatToE5m2(f); }

/* ---------------------------------------------------------------------------------------------------- */
/* Element operations                                                                                    */
/* ---------------------------------------------------------------------------------------------------- */

typedef void (*redFn_t)(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre,
                        int post);
typedef void (*copyFn_t)(const commRedOpArgs* args, void* dst, const void* src, size_t n);

/* dst[i] = EXPR(x = a[i], y = b[i]) */
#define LOOP2(T, EXPR)                  \
  do {                                  \
    T* d_ = (T*)dst;                    \
    const T* a_ = (const T*)a;          \
    const T* b_ = (const T*)b;          \
    for (size_t i_ = 0; i_ < n; i_++) { \
      T x = a_[i_];                     \
      T y = b_[i_];                     \
      d_[i_] = (EXPR);                  \
    }                                   \
  } while (0)

/* dst[i] = EXPR(x = src[i]) */
#define LOOP1(T, EXPR)                  \
  do {                                  \
    T* d_ = (T*)dst;                    \
    const T* s_ = (const T*)src;        \
    for (size_t i_ = 0; i_ < n; i_++) { \
      T x = s_[i_];                     \
      d_[i_] = (EXPR);                  \
    }                                   \
  } while (0)

/* The scalar of PREMULSUM, in the datatype's storage width. */
#define SCALAR_BITS(ST) ((ST)args->scalarBits)

/* ---------------------------------------------------------------------------------------------------- */
/* Integers                                                                                              */
/* ---------------------------------------------------------------------------------------------------- */

/* U: the unsigned type of the same width as T (arithmetic wraps there). */
#define DEF_INT_COMMON(TN, T, U)                                                                                     \
  static void red_##TN##_sum(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre,  \
                             int post) {                                                                             \
    (void)args;                                                                                                      \
    (void)pre;                                                                                                       \
    (void)post;                                                                                                      \
    LOOP2(T, (T)(U)((U)x + (U)y));                                                                                   \
  }                                                                                                                  \
  static void red_##TN##_prod(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre, \
                              int post) {                                                                            \
    (void)args;                                                                                                      \
    (void)pre;                                                                                                       \
    (void)post;                                                                                                      \
    LOOP2(T, (T)(U)((U)x * (U)y));                                                                                   \
  }                                                                                                                  \
  static void red_##TN##_max(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre,  \
                             int post) {                                                                             \
    (void)args;                                                                                                      \
    (void)pre;                                                                                                       \
    (void)post;                                                                                                      \
    LOOP2(T, x > y ? x : y);                                                                                         \
  }                                                                                                                  \
  static void red_##TN##_min(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre,  \
                             int post) {                                                                             \
    (void)args;                                                                                                      \
    (void)pre;                                                                                                       \
    (void)post;                                                                                                      \
    LOOP2(T, x < y ? x : y);                                                                                         \
  }                                                                                                                  \
  static void red_##TN##_premulsum(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n,     \
                                   int pre, int post) {                                                              \
    (void)post;                                                                                                      \
    if (!pre) {                                                                                                      \
      LOOP2(T, (T)(U)((U)x + (U)y));                                                                                 \
    } else {                                                                                                         \
      U s = SCALAR_BITS(U);                                                                                          \
      LOOP2(T, (T)(U)((U)x + (U)(s * (U)y)));                                                                        \
    }                                                                                                                \
  }                                                                                                                  \
  static void copy_##TN##_premul(const commRedOpArgs* args, void* dst, const void* src, size_t n) {                  \
    U s = SCALAR_BITS(U);                                                                                            \
    LOOP1(T, (T)(U)(s * (U)x));                                                                                      \
  }

/* 8- and 32-bit integers divide in floating point (FT: float for 8-bit, double for 32-bit): for |v| below
 * 2^24 (float) or 2^53 (double) the rounding error of v / d is smaller than the distance 1/d from a
 * non-integer quotient to the next integer, so truncating gives exactly C's integer quotient, and the
 * loop can vectorise (x86 has no vector integer division). IT: an integer type holding every quotient. */
#define DEF_INT_SMALL(TN, T, U, FT, IT)                                                                           \
  DEF_INT_COMMON(TN, T, U)                                                                                        \
  static void red_##TN##_sumpostdiv(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, \
                                    int pre, int post) {                                                          \
    (void)pre;                                                                                                    \
    if (!post || args->divisor == 0) {                                                                            \
      LOOP2(T, (T)(U)((U)x + (U)y));                                                                              \
    } else {                                                                                                      \
      FT dd = (FT)args->divisor;                                                                                  \
      LOOP2(T, (T)(IT)((FT)(T)(U)((U)x + (U)y) / dd));                                                            \
    }                                                                                                             \
  }                                                                                                               \
  static void copy_##TN##_postdiv(const commRedOpArgs* args, void* dst, const void* src, size_t n) {              \
    FT dd = (FT)(args->divisor ? args->divisor : 1);                                                              \
    LOOP1(T, (T)(IT)((FT)x / dd));                                                                                \
  }

DEF_INT_SMALL(int8, int8_t, uint8_t, float, int32_t)
DEF_INT_SMALL(uint8, uint8_t, uint8_t, float, int32_t)
DEF_INT_SMALL(int32, int32_t, uint32_t, double, int32_t)
DEF_INT_SMALL(uint32, uint32_t, uint32_t, double, int64_t)
DEF_INT_COMMON(int64, int64_t, uint64_t)
DEF_INT_COMMON(uint64, uint64_t, uint64_t)

/* int64 by a divisor: C truncation. A divisor above INT64_MAX only leaves INT64_MIN / 2^63 = -1. */
static inline int64_t divI64(int64_t v, uint64_t d) {
  if (d <= (uint64_t)INT64_MAX) return v / (int64_t)d;
  return (v == INT64_MIN && d == (uint64_t)INT64_MAX + 1) ? -1 : 0;
}

static void red_int64_sumpostdiv(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre,
                                 int post) {
  (void)pre;
  uint64_t d = args->divisor;
  if (!post || d == 0) {
    LOOP2(int64_t, (int64_t)((uint64_t)x + (uint64_t)y));
  } else if (d <= (uint64_t)INT64_MAX) {
    int64_t di = (int64_t)d;
    LOOP2(int64_t, (int64_t)((uint64_t)x + (uint64_t)y) / di);
  } else {
    LOOP2(int64_t, divI64((int64_t)((uint64_t)x + (uint64_t)y), d));
  }
}
static void copy_int64_postdiv(const commRedOpArgs* args, void* dst, const void* src, size_t n) {
  uint64_t d = args->divisor ? args->divisor : 1;
  LOOP1(int64_t, divI64(x, d));
}
static void red_uint64_sumpostdiv(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre,
                                  int post) {
  (void)pre;
  uint64_t d = args->divisor;
  if (!post || d == 0) {
    LOOP2(uint64_t, x + y);
  } else {
    LOOP2(uint64_t, (x + y) / d);
  }
}
static void copy_uint64_postdiv(const commRedOpArgs* args, void* dst, const void* src, size_t n) {
  uint64_t d = args->divisor ? args->divisor : 1;
  LOOP1(uint64_t, x / d);
}

/* ---------------------------------------------------------------------------------------------------- */
/* float32 and float64                                                                                   */
/* ---------------------------------------------------------------------------------------------------- */

#define NATIVE_BLOCK 512

/* PREMULSUM with pre goes through a block of s*b in a stack array, so that no compiler setting can
 * contract s*b + a into an FMA: the product is rounded to the type first, as in commCopy. */
#define DEF_FLOAT(TN, T, LOADS, MAXF, MINF)                                                                          \
  static void red_##TN##_sum(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre,  \
                             int post) {                                                                             \
    (void)args;                                                                                                      \
    (void)pre;                                                                                                       \
    (void)post;                                                                                                      \
    LOOP2(T, x + y);                                                                                                 \
  }                                                                                                                  \
  static void red_##TN##_prod(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre, \
                              int post) {                                                                            \
    (void)args;                                                                                                      \
    (void)pre;                                                                                                       \
    (void)post;                                                                                                      \
    LOOP2(T, x* y);                                                                                                  \
  }                                                                                                                  \
  static void red_##TN##_max(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre,  \
                             int post) {                                                                             \
    (void)args;                                                                                                      \
    (void)pre;                                                                                                       \
    (void)post;                                                                                                      \
    LOOP2(T, MAXF(x, y));                                                                                            \
  }                                                                                                                  \
  static void red_##TN##_min(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre,  \
                             int post) {                                                                             \
    (void)args;                                                                                                      \
    (void)pre;                                                                                                       \
    (void)post;                                                                                                      \
    LOOP2(T, MINF(x, y));                                                                                            \
  }                                                                                                                  \
  static void red_##TN##_premulsum(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n,     \
                                   int pre, int post) {                                                              \
    (void)post;                                                                                                      \
    if (!pre) {                                                                                                      \
      LOOP2(T, x + y);                                                                                               \
      return;                                                                                                        \
    }                                                                                                                \
    T s = LOADS(args->scalarBits);                                                                                   \
    const T* pa = (const T*)a;                                                                                       \
    const T* pb = (const T*)b;                                                                                       \
    T* pd = (T*)dst;                                                                                                 \
    T t[NATIVE_BLOCK];                                                                                               \
    for (size_t o = 0; o < n; o += NATIVE_BLOCK) {                                                                   \
      size_t m = n - o < NATIVE_BLOCK ? n - o : NATIVE_BLOCK;                                                        \
      for (size_t i = 0; i < m; i++) t[i] = s * pb[o + i];                                                           \
      for (size_t i = 0; i < m; i++) pd[o + i] = pa[o + i] + t[i];                                                   \
    }                                                                                                                \
  }                                                                                                                  \
  static void red_##TN##_sumpostdiv(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n,    \
                                    int pre, int post) {                                                             \
    (void)pre;                                                                                                       \
    if (!post || args->divisor == 0) {                                                                               \
      LOOP2(T, x + y);                                                                                               \
    } else {                                                                                                         \
      T dv = (T)args->divisor;                                                                                       \
      LOOP2(T, (x + y) / dv);                                                                                        \
    }                                                                                                                \
  }                                                                                                                  \
  static void copy_##TN##_premul(const commRedOpArgs* args, void* dst, const void* src, size_t n) {                  \
    T s = LOADS(args->scalarBits);                                                                                   \
    LOOP1(T, s* x);                                                                                                  \
  }                                                                                                                  \
  static void copy_##TN##_postdiv(const commRedOpArgs* args, void* dst, const void* src, size_t n) {                 \
    T dv = (T)(args->divisor ? args->divisor : 1);                                                                   \
    LOOP1(T, x / dv);                                                                                                \
  }

static inline float loadF32(uint64_t bits) { return u2f((uint32_t)bits); }
static inline double loadF64(uint64_t bits) { return u2d(bits); }

DEF_FLOAT(float32, float, loadF32, maxF32, minF32)
DEF_FLOAT(float64, double, loadF64, maxF64, minF64)

/* ---------------------------------------------------------------------------------------------------- */
/* Narrow floats: float16, bfloat16, float8 e4m3 / e5m2, through float in blocks                         */
/* ---------------------------------------------------------------------------------------------------- */

#define LP_BLOCK 512

/* For each block: fa = decode(a), fb = decode(b), PREP (may rewrite fb), dst = encode(EXPR(x, y)). */
#define LP_LOOP2(ST, DEC, ENC, PREP, EXPR)                            \
  do {                                                                \
    const ST* pa_ = (const ST*)a;                                     \
    const ST* pb_ = (const ST*)b;                                     \
    ST* pd_ = (ST*)dst;                                               \
    float fa_[LP_BLOCK], fb_[LP_BLOCK];                               \
    for (size_t o_ = 0; o_ < n; o_ += LP_BLOCK) {                     \
      size_t m_ = n - o_ < LP_BLOCK ? n - o_ : LP_BLOCK;              \
      for (size_t i_ = 0; i_ < m_; i_++) fa_[i_] = DEC(pa_[o_ + i_]); \
      for (size_t i_ = 0; i_ < m_; i_++) fb_[i_] = DEC(pb_[o_ + i_]); \
      PREP;                                                           \
      for (size_t i_ = 0; i_ < m_; i_++) {                            \
        float x = fa_[i_];                                            \
        float y = fb_[i_];                                            \
        pd_[o_ + i_] = ENC(EXPR);                                     \
      }                                                               \
    }                                                                 \
  } while (0)

/* For each block: fa = decode(src), dst = encode(EXPR(x)). */
#define LP_LOOP1(ST, DEC, ENC, EXPR)                                  \
  do {                                                                \
    const ST* ps_ = (const ST*)src;                                   \
    ST* pd_ = (ST*)dst;                                               \
    float fa_[LP_BLOCK];                                              \
    for (size_t o_ = 0; o_ < n; o_ += LP_BLOCK) {                     \
      size_t m_ = n - o_ < LP_BLOCK ? n - o_ : LP_BLOCK;              \
      for (size_t i_ = 0; i_ < m_; i_++) fa_[i_] = DEC(ps_[o_ + i_]); \
      for (size_t i_ = 0; i_ < m_; i_++) {                            \
        float x = fa_[i_];                                            \
        pd_[o_ + i_] = ENC(EXPR);                                     \
      }                                                               \
    }                                                                 \
  } while (0)

#define NOPREP ((void)0)

#define DEF_LP(TN, ST, DEC, ENC)                                                                                     \
  static void red_##TN##_sum(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre,  \
                             int post) {                                                                             \
    (void)args;                                                                                                      \
    (void)pre;                                                                                                       \
    (void)post;                                                                                                      \
    LP_LOOP2(ST, DEC, ENC, NOPREP, x + y);                                                                           \
  }                                                                                                                  \
  static void red_##TN##_prod(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre, \
                              int post) {                                                                            \
    (void)args;                                                                                                      \
    (void)pre;                                                                                                       \
    (void)post;                                                                                                      \
    LP_LOOP2(ST, DEC, ENC, NOPREP, x* y);                                                                            \
  }                                                                                                                  \
  static void red_##TN##_max(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre,  \
                             int post) {                                                                             \
    (void)args;                                                                                                      \
    (void)pre;                                                                                                       \
    (void)post;                                                                                                      \
    LP_LOOP2(ST, DEC, ENC, NOPREP, maxF32(x, y));                                                                    \
  }                                                                                                                  \
  static void red_##TN##_min(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre,  \
                             int post) {                                                                             \
    (void)args;                                                                                                      \
    (void)pre;                                                                                                       \
    (void)post;                                                                                                      \
    LP_LOOP2(ST, DEC, ENC, NOPREP, minF32(x, y));                                                                    \
  }                                                                                                                  \
  static void red_##TN##_premulsum(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n,     \
                                   int pre, int post) {                                                              \
    (void)post;                                                                                                      \
    if (!pre) {                                                                                                      \
      LP_LOOP2(ST, DEC, ENC, NOPREP, x + y);                                                                         \
    } else {                                                                                                         \
      float s = DEC(SCALAR_BITS(ST));                                                                                \
      LP_LOOP2(ST, DEC, ENC, for (size_t j_ = 0; j_ < m_; j_++) fb_[j_] = DEC(ENC(s * fb_[j_])), x + y);             \
    }                                                                                                                \
  }                                                                                                                  \
  static void red_##TN##_sumpostdiv(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n,    \
                                    int pre, int post) {                                                             \
    (void)pre;                                                                                                       \
    if (!post || args->divisor == 0) {                                                                               \
      LP_LOOP2(ST, DEC, ENC, NOPREP, x + y);                                                                         \
    } else {                                                                                                         \
      float dv = (float)args->divisor;                                                                               \
      LP_LOOP2(ST, DEC, ENC, NOPREP, DEC(ENC(x + y)) / dv);                                                          \
    }                                                                                                                \
  }                                                                                                                  \
  static void copy_##TN##_premul(const commRedOpArgs* args, void* dst, const void* src, size_t n) {                  \
    float s = DEC(SCALAR_BITS(ST));                                                                                  \
    LP_LOOP1(ST, DEC, ENC, s* x);                                                                                    \
  }                                                                                                                  \
  static void copy_##TN##_postdiv(const commRedOpArgs* args, void* dst, const void* src, size_t n) {                 \
    float dv = (float)(args->divisor ? args->divisor : 1);                                                           \
    LP_LOOP1(ST, DEC, ENC, x / dv);                                                                                  \
  }

DEF_LP(float16, uint16_t, halfToFloat, floatToHalf)
DEF_LP(bfloat16, uint16_t, bf16ToFloat, floatToBf16)
DEF_LP(float8e4m3, uint8_t, e4m3ToFloat, floatToE4m3)
DEF_LP(float8e5m2, uint8_t, e5m2ToFloat, floatToE5m2)

/* ---------------------------------------------------------------------------------------------------- */
/* Dispatch tables (indexed by commDataType_t, then commRedOpKind_t)                                     */
/* ---------------------------------------------------------------------------------------------------- */

#define RED_ROW(TN) \
  { red_##TN##_sum, red_##TN##_prod, red_##TN##_max, red_##TN##_min, red_##TN##_premulsum, red_##TN##_sumpostdiv }

static const redFn_t redTable[commNumTypes][COMM_NUM_REDOP_KINDS] = {
    RED_ROW(int8),    RED_ROW(uint8),   RED_ROW(int32),   RED_ROW(uint32),   RED_ROW(int64),      RED_ROW(uint64),
    RED_ROW(float16), RED_ROW(float32), RED_ROW(float64), RED_ROW(bfloat16), RED_ROW(float8e4m3), RED_ROW(float8e5m2)};

static const copyFn_t copyPreTable[commNumTypes] = {
    copy_int8_premul,    copy_uint8_premul,    copy_int32_premul,      copy_uint32_premul,
    copy_int64_premul,   copy_uint64_premul,   copy_float16_premul,    copy_float32_premul,
    copy_float64_premul, copy_bfloat16_premul, copy_float8e4m3_premul, copy_float8e5m2_premul};

static const copyFn_t copyPostTable[commNumTypes] = {
    copy_int8_postdiv,    copy_uint8_postdiv,    copy_int32_postdiv,      copy_uint32_postdiv,
    copy_int64_postdiv,   copy_uint64_postdiv,   copy_float16_postdiv,    copy_float32_postdiv,
    copy_float64_postdiv, copy_bfloat16_postdiv, copy_float8e4m3_postdiv, copy_float8e5m2_postdiv};

/* ---------------------------------------------------------------------------------------------------- */
/* Public (internal-API) functions                                                                       */
/* ---------------------------------------------------------------------------------------------------- */

static int typeValid(commDataType_t t) { return (int)t >= 0 && (int)t < (int)commNumTypes; }

/* The datatype's bits of the value v (correctly rounded for float types). */
static uint64_t encodeScalar(commDataType_t t, double v) {
  switch (t) {
    case commInt8:
    case commUint8:
    case commInt32:
    case commUint32:
    case commInt64:
    case commUint64:
      return (uint64_t)(int64_t)v & (commTypeSize(t) == 8 ? ~0ull : ((1ull << (8 * commTypeSize(t))) - 1));
    case commFloat16: return floatToHalf(roundOddToFloat(v));
    case commBfloat16: return floatToBf16(roundOddToFloat(v));
    case commFloat8e4m3: return floatToE4m3(roundOddToFloat(v));
    case commFloat8e5m2: return floatToE5m2(roundOddToFloat(v));
    case commFloat32: return f2u((float)v);
    case commFloat64: return d2u(v);
    default: return 0;
  }
}

static double decodeScalar(commDataType_t t, uint64_t bits) {
  switch (t) {
    case commInt8: return (double)(int8_t)(uint8_t)bits;
    case commUint8: return (double)(uint8_t)bits;
    case commInt32: return (double)(int32_t)(uint32_t)bits;
    case commUint32: return (double)(uint32_t)bits;
    case commInt64: return (double)(int64_t)bits;
    case commUint64: return (double)bits;
    case commFloat16: return halfToFloat((uint16_t)bits);
    case commBfloat16: return bf16ToFloat((uint16_t)bits);
    case commFloat8e4m3: return e4m3ToFloat((uint8_t)bits);
    case commFloat8e5m2: return e5m2ToFloat((uint8_t)bits);
    case commFloat32: return loadF32(bits);
    case commFloat64: return loadF64(bits);
    default: return 0;
  }
}

commResult_t commRedOpArgsBuiltin(commRedOp_t op, commDataType_t t, int nRanks, commRedOpArgs* args) {
  if (args == NULL) {
    WARN("commRedOpArgsBuiltin: args is NULL");
    return commInvalidArgument;
  }
  if (!typeValid(t)) {
    WARN("Invalid datatype %d (valid: 0..%d)", (int)t, (int)commNumTypes - 1);
    return commInvalidArgument;
  }
  if ((int)op < 0 || (int)op >= (int)commNumOps) {
    WARN("Invalid reduction op %d: not a built-in op (sum, prod, max, min, avg)", (int)op);
    return commInvalidArgument;
  }
  commRedOpArgs r;
  memset(&r, 0, sizeof(r));
  r.dtype = t;
  r.scalarBits = encodeScalar(t, 1.0);
  r.scalar = 1.0;
  r.divisor = 1;
  switch (op) {
    case commSum: r.kind = COMM_REDOP_SUM; break;
    case commProd: r.kind = COMM_REDOP_PROD; break;
    case commMax: r.kind = COMM_REDOP_MAX; break;
    case commMin: r.kind = COMM_REDOP_MIN; break;
    default: /* commAvg */
      if (nRanks < 1) {
        WARN("commAvg needs nRanks >= 1 (got %d)", nRanks);
        return commInvalidArgument;
      }
      if (commTypeIsFloat(t)) {
        r.kind = COMM_REDOP_PREMULSUM;
        r.scalarBits = encodeScalar(t, 1.0 / (double)nRanks);
        r.scalar = decodeScalar(t, r.scalarBits);
      } else {
        r.kind = COMM_REDOP_SUMPOSTDIV;
        r.divisor = (uint64_t)nRanks;
      }
      break;
  }
  *args = r;
  return commSuccess;
}

commResult_t commRedOpArgsPreMul(commDataType_t t, const void* scalar, commRedOpArgs* args) {
  if (args == NULL || scalar == NULL) {
    WARN("commRedOpArgsPreMul: %s is NULL", args == NULL ? "args" : "scalar");
    return commInvalidArgument;
  }
  if (!typeValid(t)) {
    WARN("Invalid datatype %d (valid: 0..%d)", (int)t, (int)commNumTypes - 1);
    return commInvalidArgument;
  }
  uint64_t bits;
  switch (commTypeSize(t)) {
    case 1: {
      uint8_t v;
      memcpy(&v, scalar, 1);
      bits = v;
      break;
    }
    case 2: {
      uint16_t v;
      memcpy(&v, scalar, 2);
      bits = v;
      break;
    }
    case 4: {
      uint32_t v;
      memcpy(&v, scalar, 4);
      bits = v;
      break;
    }
    default: {
      uint64_t v;
      memcpy(&v, scalar, 8);
      bits = v;
      break;
    }
  }
  commRedOpArgs r;
  memset(&r, 0, sizeof(r));
  r.kind = COMM_REDOP_PREMULSUM;
  r.dtype = t;
  r.scalarBits = bits;
  r.scalar = decodeScalar(t, bits);
  r.divisor = 1;
  *args = r;
  return commSuccess;
}

static int argsValid(const commRedOpArgs* args, const char* fn) {
  if (args == NULL || !typeValid(args->dtype) || (int)args->kind < 0 || (int)args->kind >= (int)COMM_NUM_REDOP_KINDS) {
    WARN("%s: invalid reduction arguments (dtype %d, kind %d)", fn, args ? (int)args->dtype : -1,
         args ? (int)args->kind : -1);
    return 0;
  }
  return 1;
}

void commReduceLocal(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre, int post) {
  if (n == 0) return;
  if (!argsValid(args, "commReduceLocal")) return;
  redTable[args->dtype][args->kind](args, dst, a, b, n, pre, post);
}

void commCopy(const commRedOpArgs* args, void* dst, const void* src, size_t n, int pre, int post) {
  if (n == 0) return;
  if (!argsValid(args, "commCopy")) return;
  if (pre && args->kind == COMM_REDOP_PREMULSUM) {
    copyPreTable[args->dtype](args, dst, src, n);
  } else if (post && args->kind == COMM_REDOP_SUMPOSTDIV) {
    copyPostTable[args->dtype](args, dst, src, n);
  } else if (dst != src) {
    memmove(dst, src, n * commTypeSize(args->dtype));
  }
}
