/* Helpers shared by the integration tests. They use the public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0 */
#ifndef ITEST_H_
#define ITEST_H_

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm.h"

static inline double itNowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline size_t itTypeSize(commDataType_t t) {
  switch (t) {
    case commInt8:
    case commUint8:
    case commFloat8e4m3:
    case commFloat8e5m2: return 1;
    case commFloat16:
    case commBfloat16: return 2;
    case commInt32:
    case commUint32:
    case commFloat32: return 4;
    case commInt64:
    case commUint64:
    case commFloat64: return 8;
    default: return 0;
  }
}

static inline const char* itTypeName(commDataType_t t) {
  static const char* names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
                                "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return (t >= 0 && t < commNumTypes) ? names[t] : "?";
}

static inline int itTypeIsFloat(commDataType_t t) {
  return t == commFloat16 || t == commFloat32 || t == commFloat64 || t == commBfloat16 || t == commFloat8e4m3 ||
         t == commFloat8e5m2;
}
static inline int itTypeIsSigned(commDataType_t t) {
  return t == commInt8 || t == commInt32 || t == commInt64 || itTypeIsFloat(t);
}

/* Small floating formats: 1 sign bit, ebits exponent bits, mbits mantissa bits.
 * e4m3 is the OCP "FN" variant: no infinities, S.1111.111 is NaN, largest finite 448. */
typedef struct {
  int ebits, mbits, bias, ieeeSpecials;
} itMiniFmt;
static const itMiniFmt itFmtHalf = {5, 10, 15, 1};
static const itMiniFmt itFmtBf16 = {8, 7, 127, 1};
static const itMiniFmt itFmtE4m3 = {4, 3, 7, 0};
static const itMiniFmt itFmtE5m2 = {5, 2, 15, 1};

static inline double itMiniDecode(itMiniFmt f, uint32_t bits) {
  uint32_t sign = (bits >> (f.ebits + f.mbits)) & 1u;
  uint32_t e = (bits >> f.mbits) & ((1u << f.ebits) - 1u);
  uint32_t m = bits & ((1u << f.mbits) - 1u);
  double v;
  if (e == 0) {
    v = ldexp((double)m, 1 - f.bias - f.mbits);
  } else if (f.ieeeSpecials && e == (1u << f.ebits) - 1u) {
    v = m ? NAN : INFINITY;
  } else if (!f.ieeeSpecials && e == (1u << f.ebits) - 1u && m == (1u << f.mbits) - 1u) {
    v = NAN;
  } else {
    v = ldexp((double)(m | (1u << f.mbits)), (int)e - f.bias - f.mbits);
  }
  return sign ? -v : v;
}

/* Round to nearest even; values beyond the range saturate to the largest finite (tests never go there). */
static inline uint32_t itMiniEncode(itMiniFmt f, double v) {
  uint32_t sign = signbit(v) ? 1u : 0u;
  double a = fabs(v);
  uint32_t emax = f.ieeeSpecials ? (1u << f.ebits) - 2u : (1u << f.ebits) - 1u;
  uint32_t bits;
  if (a == 0.0) {
    bits = 0;
  } else {
    int e2;
    frexp(a, &e2); /* a = frac * 2^e2, frac in [0.5, 1) */
    int e = e2 - 1;
    if (e < 1 - f.bias) e = 1 - f.bias;          /* subnormal range */
    double m = nearbyint(ldexp(a, f.mbits - e)); /* mantissa with implicit bit, rounded */
    if (m >= ldexp(1.0, f.mbits + 1)) {
      m /= 2;
      e += 1;
    }
    uint32_t efield = (m >= ldexp(1.0, f.mbits)) ? (uint32_t)(e + f.bias) : 0u;
    uint32_t mfield = (uint32_t)m & ((1u << f.mbits) - 1u);
    if (efield > emax || (!f.ieeeSpecials && efield == emax && mfield == (1u << f.mbits) - 1u)) {
      efield = emax;
      mfield = f.ieeeSpecials ? (1u << f.mbits) - 1u : (1u << f.mbits) - 2u;
    }
    bits = (efield << f.mbits) | mfield;
  }
  return (sign << (f.ebits + f.mbits)) | bits;
}

/* Store v (an integer or a value exact in the type) as element i of buffer p of type t. Integer types
 * take the low bits of the integer value (wrapping), so a generator may hand any integer below 2^52. */
static inline void itPut(commDataType_t t, void* p, size_t i, double v) {
  switch (t) {
    case commInt8: ((int8_t*)p)[i] = (int8_t)(int64_t)v; break;
    case commUint8: ((uint8_t*)p)[i] = (uint8_t)(int64_t)v; break;
    case commInt32: ((int32_t*)p)[i] = (int32_t)(int64_t)v; break;
    case commUint32: ((uint32_t*)p)[i] = (uint32_t)(int64_t)v; break;
    case commInt64: ((int64_t*)p)[i] = (int64_t)v; break;
    case commUint64: ((uint64_t*)p)[i] = (uint64_t)(int64_t)v; break;
    case commFloat16: ((uint16_t*)p)[i] = (uint16_t)itMiniEncode(itFmtHalf, v); break;
    case commFloat32: ((float*)p)[i] = (float)v; break;
    case commFloat64: ((double*)p)[i] = v; break;
    case commBfloat16: ((uint16_t*)p)[i] = (uint16_t)itMiniEncode(itFmtBf16, v); break;
    case commFloat8e4m3: ((uint8_t*)p)[i] = (uint8_t)itMiniEncode(itFmtE4m3, v); break;
    case commFloat8e5m2: ((uint8_t*)p)[i] = (uint8_t)itMiniEncode(itFmtE5m2, v); break;
    default: break;
  }
}

static inline double itGet(commDataType_t t, const void* p, size_t i) {
  switch (t) {
    case commInt8: return ((const int8_t*)p)[i];
    case commUint8: return ((const uint8_t*)p)[i];
    case commInt32: return ((const int32_t*)p)[i];
    case commUint32: return ((const uint32_t*)p)[i];
    case commInt64: return (double)((const int64_t*)p)[i];
    case commUint64: return (double)((const uint64_t*)p)[i];
    case commFloat16: return itMiniDecode(itFmtHalf, ((const uint16_t*)p)[i]);
    case commFloat32: return ((const float*)p)[i];
    case commFloat64: return ((const double*)p)[i];
    case commBfloat16: return itMiniDecode(itFmtBf16, ((const uint16_t*)p)[i]);
    case commFloat8e4m3: return itMiniDecode(itFmtE4m3, ((const uint8_t*)p)[i]);
    case commFloat8e5m2: return itMiniDecode(itFmtE5m2, ((const uint8_t*)p)[i]);
    default: return NAN;
  }
}

/* The value v takes once stored in type t (integer wrap, float rounding). */
static inline double itCanon(commDataType_t t, double v) {
  unsigned char tmp[8];
  itPut(t, tmp, 0, v);
  return itGet(t, tmp, 0);
}

#endif
