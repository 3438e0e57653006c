/* Element conversions and comparisons shared by the host reductions (src/exec/reduce.c) and the device
 * ones (src/exec/cuda/): one definition, so host and device results are the same bits. Plain C that also
 * compiles as CUDA C++ (COMM_HD marks the functions __host__ __device__ there). See reduce.c for the
 * rounding and NaN rules these implement. */
#ifndef COMM_REDUCE_ELEM_H_
#define COMM_REDUCE_ELEM_H_

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define COMM_HD __host__ __device__
#else
#define COMM_HD
#endif

static inline COMM_HD uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
static inline COMM_HD float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* c ? a : b for c in {0, 1}, as mask arithmetic: a conditional expression here would let GCC sink the
 * (possibly trapping, under -ftrapping-math) float operation feeding one arm into a branch, and a loop
 * with a branch is not vectorised. */
static inline COMM_HD uint32_t sel(uint32_t c, uint32_t a, uint32_t b) {
  uint32_t m = 0u - c;
  return (a & m) | (b & ~m);
}

static inline COMM_HD float halfToFloat(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  uint32_t o = (em << 13) + 0x38000000u;      /* rebias exponent 15 -> 127 */
  o = sel(em >= 0x7c00u, o + 0x38000000u, o); /* inf/NaN: exponent 31 -> 255, payload kept */
  float sub = (float)(int32_t)em * 0x1p-24f;  /* zero and subnormals: exact */
  o = sel(em < 0x400u, f2u(sub), o);
  return u2f(o | sign);
}

static inline COMM_HD uint16_t floatToHalf(float f) {
  uint32_t x = f2u(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  /* Normal range: rebias and round the 13 dropped bits to nearest even; a carry moves into the
   * exponent, which is what rounding up to the next binade needs. */
  uint32_t norm = (ax - 0x38000000u + 0xfffu + ((ax >> 13) & 1u)) >> 13;
  /* Below 2^-14: adding 0.5 (ulp 2^-24, the half subnormal quantum) lets the FPU round to nearest even;
   * the low bits are then the subnormal encoding (0x400 when it rounds up to the smallest normal). */
  uint32_t sub = f2u(u2f(ax) + 0.5f) - 0x3f000000u;
  uint32_t h = sel(ax < 0x38800000u, sub, norm);
  h = sel(ax >= 0x477ff000u, 0x7c00u, h); /* >= 65520 (max + half ulp, ties to even = up): inf */
  h = sel(ax > 0x7f800000u, 0x7e00u, h);  /* NaN: canonical quiet NaN */
  return (uint16_t)(h | sign);
}

static inline COMM_HD float bf16ToFloat(uint16_t h) { return u2f((uint32_t)h << 16); }

static inline COMM_HD uint16_t floatToBf16(float f) {
  uint32_t x = f2u(f);
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16; /* RNE; carries into inf on overflow */
  uint32_t q = (x >> 16) | 0x40u;                      /* NaN stays NaN (quiet) */
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? q : r);
}

static inline COMM_HD float e4m3ToFloat(uint8_t v) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24;
  uint32_t em = v & 0x7fu;
  uint32_t o = (em << 20) + 0x3c000000u; /* rebias exponent 7 -> 127 */
  float sub = (float)(int32_t)em * 0x1p-9f;
  o = sel(em < 8u, f2u(sub), o);
  o = sel(em == 0x7fu, 0x7fc00000u, o); /* the only NaN encoding; no infinities */
  return u2f(o | sign);
}

static inline COMM_HD uint8_t floatToE4m3(float f) {
  uint32_t x = f2u(f);
  uint32_t sign = (x >> 24) & 0x80u;
  uint32_t ax = x & 0x7fffffffu;
  uint32_t norm = (ax - 0x3c000000u + 0x7ffffu + ((ax >> 20) & 1u)) >> 20;
  uint32_t sub = f2u(u2f(ax) + 16384.0f) - 0x46800000u; /* ulp(2^14) = 2^-9, the subnormal quantum */
  uint32_t r = sel(ax < 0x3c800000u, sub, norm);        /* below 2^-6 */
  r = sel(ax >= 0x43e00000u, 0x7eu, r);                 /* >= 448 (and inf): saturate to 448 */
  r = sel(ax > 0x7f800000u, 0x7fu, r);
  return (uint8_t)(r | sign);
}

static inline COMM_HD float e5m2ToFloat(uint8_t v) { return halfToFloat((uint16_t)((uint32_t)v << 8)); }

static inline COMM_HD uint8_t floatToE5m2(float f) {
  uint32_t x = f2u(f);
  uint32_t sign = (x >> 24) & 0x80u;
  uint32_t ax = x & 0x7fffffffu;
  uint32_t norm = (ax - 0x38000000u + 0xfffffu + ((ax >> 21) & 1u)) >> 21;
  uint32_t sub = f2u(u2f(ax) + 128.0f) - 0x43000000u; /* ulp(2^7) = 2^-16 */
  uint32_t r = sel(ax < 0x38800000u, sub, norm);      /* below 2^-14 */
  r = sel(ax >= 0x47700000u, 0x7cu, r);               /* >= 61440 (max + half ulp, ties up): inf */
  r = sel(ax > 0x7f800000u, 0x7eu, r);
  return (uint8_t)(r | sign);
}

/* NaN-propagating max/min with -0 < +0 (see the header comment), selecting bit patterns so that GCC
 * if-converts and vectorises the loops. For two zeros, the AND of the bits is +0 unless both are -0
 * (max) and the OR is -0 if either is (min). */
static inline COMM_HD uint64_t d2u(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof(u));
  return u;
}
static inline COMM_HD double u2d(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof(d));
  return d;
}
static inline COMM_HD float maxF32(float a, float b) {
  uint32_t ua = f2u(a), ub = f2u(b);
  uint32_t r = ((a > b) | (a != a)) ? ua : ub;
  r = ((a == 0) & (b == 0)) ? (ua & ub) : r;
  return u2f(r);
}
static inline COMM_HD float minF32(float a, float b) {
  uint32_t ua = f2u(a), ub = f2u(b);
  uint32_t r = ((a < b) | (a != a)) ? ua : ub;
  r = ((a == 0) & (b == 0)) ? (ua | ub) : r;
  return u2f(r);
}
static inline COMM_HD double maxF64(double a, double b) {
  uint64_t ua = d2u(a), ub = d2u(b);
  uint64_t r = ((a > b) | (a != a)) ? ua : ub;
  r = ((a == 0) & (b == 0)) ? (ua & ub) : r;
  return u2d(r);
}
static inline COMM_HD double minF64(double a, double b) {
  uint64_t ua = d2u(a), ub = d2u(b);
  uint64_t r = ((a < b) | (a != a)) ? ua : ub;
  r = ((a == 0) & (b == 0)) ? (ua | ub) : r;
  return u2d(r);
}

#endif
