/* The example CollNet plugin's reductions (tests/plugins/nccl_collnet_example.c): element sizes, what it
 * reduces, half and bfloat16 through float with round-to-nearest-even after each operation. Included once, by
 * the plugin. SPDX-License-Identifier: Apache-2.0 */
#ifndef COLLNET_EXAMPLE_REDUCE_H_
#define COLLNET_EXAMPLE_REDUCE_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>


/* Element sizes of the types offered (int8 .. bfloat16); float8 and unknown types are not. */
static int cxTypeSize(int type) {
  static const int sizes[10] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return type >= ncclInt8 && type <= ncclBfloat16 ? sizes[type] : 0;
}

static int cxSupported(int type, int op) { return op >= ncclSum && op <= ncclMin && cxTypeSize(type) > 0; }

static float cxBitsToFloat(uint32_t u) {
  return ((union {
           uint32_t u;
           float f;
         }){.u = u})
      .f;
}
static uint32_t cxFloatToBits(float f) {
  return ((union {
           float f;
           uint32_t u;
         }){.f = f})
      .u;
}

static float cxHalfToFloat(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0) { /* zero or subnormal: man * 2^-24, exact in float */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return cxBitsToFloat(sign | 0x7f800000u | (man << 13));
  return cxBitsToFloat(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round to nearest, ties to even. */
static uint16_t cxFloatToHalf(float v) {
  uint32_t f = cxFloatToBits(v);
  uint32_t sign = (f >> 16) & 0x8000, exp = (f >> 23) & 0xff, man = f & 0x7fffff;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
  int e = (int)exp - 112; /* the half exponent field */
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) { /* a half subnormal (or zero): the value in units of 2^-24 */
    if (e < -10) return (uint16_t)sign;
    uint32_t m = man | 0x800000, s = (uint32_t)(14 - e), q = m >> s, rem = m & ((1u << s) - 1), halfway = 1u << (s - 1);
    if (rem > halfway || (rem == halfway && (q & 1))) q++;
    return (uint16_t)(sign | q);
  }
  uint32_t q = ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++; /* a carry into the exponent is right (up to inf) */
  return (uint16_t)(sign | q);
}

static float cxBf16ToFloat(uint16_t b) { return cxBitsToFloat((uint32_t)b << 16); }

static uint16_t cxFloatToBf16(float v) {
  uint32_t f = cxFloatToBits(v);
  if ((f & 0x7f800000u) == 0x7f800000u && (f & 0x7fffff)) return (uint16_t)((f >> 16) | 0x40); /* quiet NaN */
  f += 0x7fffu + ((f >> 16) & 1);
  return (uint16_t)(f >> 16);
}

#define CX_APPLY(x, y, op)                      \
  ((op) == ncclSum    ? (x) + (y)               \
   : (op) == ncclProd ? (x) * (y)               \
   : (op) == ncclMax  ? ((x) > (y) ? (x) : (y)) \
                      : ((x) < (y) ? (x) : (y)))
/* acc[i] = acc[i] op in[i]; signed sums and products wrap (computed unsigned). */
#define CX_REDUCE_INT(T, U)                                          \
  do {                                                               \
    T* a = (T*)acc;                                                  \
    const T* b = (const T*)in;                                       \
    for (size_t i = 0; i < n; i++) {                                 \
      T x = a[i], y = b[i];                                          \
      if (op == ncclSum) a[i] = (T)((U)x + (U)y);                    \
      else if (op == ncclProd) a[i] = (T)((U)x * (U)y);              \
      else a[i] = op == ncclMax ? (x > y ? x : y) : (x < y ? x : y); \
    }                                                                \
  } while (0)
/* Floating point: through float for half and bfloat16, rounded back after each op. */
#define CX_REDUCE_FP(T, LOAD, STORE)                                                   \
  do {                                                                                 \
    T* a = (T*)acc;                                                                    \
    const T* b = (const T*)in;                                                         \
    for (size_t i = 0; i < n; i++) a[i] = STORE(CX_APPLY(LOAD(a[i]), LOAD(b[i]), op)); \
  } while (0)
#define CX_AS_IS(x) (x)

static void cxReduce(void* acc, const void* in, size_t n, int type, int op) {
  switch (type) {
    case ncclInt8: CX_REDUCE_INT(int8_t, uint8_t); break;
    case ncclUint8: CX_REDUCE_INT(uint8_t, unsigned); break;
    case ncclInt32: CX_REDUCE_INT(int32_t, uint32_t); break;
    case ncclUint32: CX_REDUCE_INT(uint32_t, uint32_t); break;
    case ncclInt64: CX_REDUCE_INT(int64_t, uint64_t); break;
    case ncclUint64: CX_REDUCE_INT(uint64_t, uint64_t); break;
    case ncclFloat32: CX_REDUCE_FP(float, CX_AS_IS, CX_AS_IS); break;
    case ncclFloat64: CX_REDUCE_FP(double, CX_AS_IS, CX_AS_IS); break;
    case ncclFloat16: CX_REDUCE_FP(uint16_t, cxHalfToFloat, cxFloatToHalf); break;
    case ncclBfloat16: CX_REDUCE_FP(uint16_t, cxBf16ToFloat, cxFloatToBf16); break;
    default: break;
  }
}

#endif
