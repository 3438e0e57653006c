/*
 * libcomm perf harness: data types and element encoding (the small floating formats by hand), the
 * input pattern of each rank and the value each output element must hold. Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "pattern.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------------------------------ */
/* Data types and element encoding                                                                   */

/* Indexed by commDataType_t. */
const perfType_t perfTypes[commNumTypes] = {
    {"int8", "char", 1, 127, 0, 1, 0},
    {"uint8", "uint8_t", 1, 255, 0, 0, 0},
    {"int32", "int", 4, 2147483647.0, 0, 1, 0},
    {"uint32", "uint32_t", 4, 4294967295.0, 0, 0, 0},
    {"int64", "int64_t", 8, 9007199254740992.0, 0, 1, 0},
    {"uint64", "uint64_t", 8, 9007199254740992.0, 0, 0, 0},
    {"half", "float16", 2, 2048, 1, 1, 0x1p-11},
    {"float", "float32", 4, 16777216.0, 1, 1, 0x1p-24},
    {"double", "float64", 8, 9007199254740992.0, 1, 1, 0x1p-53},
    {"bfloat16", "bf16", 2, 256, 1, 1, 0x1p-8},
    {"float8e4m3", "f8e4m3", 1, 16, 1, 1, 0x1p-4},
    {"float8e5m2", "f8e5m2", 1, 8, 1, 1, 0x1p-3},
};

/* Small floating formats: sign, ebits exponent bits, mbits mantissa bits. ieee: the all-ones exponent
 * holds inf/NaN (half, bfloat16, e5m2); otherwise only all-ones exponent and mantissa is NaN (e4m3). */
static uint32_t encMini(double v, int ebits, int mbits, int bias, int ieee) {
  uint32_t sign = signbit(v) ? 1u : 0u, out;
  int emax = (1 << ebits) - 1 - (ieee ? 1 : 0);                      /* largest biased exponent of a finite value */
  uint32_t mmaxTop = (ieee ? (1u << mbits) - 1 : (1u << mbits) - 2); /* mantissa limit at emax */
  v = fabs(v);
  if (isnan(v)) return (sign << (ebits + mbits)) | ((1u << (ebits + mbits)) - 1);
  if (v == 0) return sign << (ebits + mbits);
  int e;
  frexp(v, &e); /* v = m * 2^e, m in [0.5, 1) */
  int be = e - 1 + bias;
  if (be <= 0) { /* subnormal: units of 2^(1 - bias - mbits); rounding up may reach the first normal */
    double q = nearbyint(ldexp(v, bias - 1 + mbits));
    out = (uint32_t)q;
  } else {
    double q = nearbyint(ldexp(v, mbits - (e - 1))); /* in [2^mbits, 2^(mbits+1)] */
    uint32_t m = (uint32_t)q;
    if (m == (2u << mbits)) m >>= 1, be++;
    if (be > emax || (be == emax && (m & ((1u << mbits) - 1)) > mmaxTop)) { /* overflow */
      if (ieee) out = (uint32_t)(emax + 1) << mbits;                        /* inf */
      else out = ((uint32_t)emax << mbits) | mmaxTop;                       /* saturate */
    } else {
      out = ((uint32_t)be << mbits) | (m & ((1u << mbits) - 1));
    }
  }
  return (sign << (ebits + mbits)) | out;
}

static double decMini(uint32_t b, int ebits, int mbits, int bias, int ieee) {
  uint32_t sign = (b >> (ebits + mbits)) & 1, e = (b >> mbits) & ((1u << ebits) - 1);
  uint32_t m = b & ((1u << mbits) - 1);
  double v;
  if (e == 0) v = ldexp((double)m, 1 - bias - mbits);
  else if (ieee && e == (1u << ebits) - 1) v = m ? NAN : INFINITY;
  else if (!ieee && e == (1u << ebits) - 1 && m == (1u << mbits) - 1) v = NAN;
  else v = ldexp((double)((1u << mbits) | m), (int)e - bias - mbits);
  return sign ? -v : v;
}

void perfStoreElt(void* buf, size_t i, commDataType_t t, double v) {
  switch (t) {
    case commInt8: ((int8_t*)buf)[i] = (int8_t)v; break;
    case commUint8: ((uint8_t*)buf)[i] = (uint8_t)v; break;
    case commInt32: ((int32_t*)buf)[i] = (int32_t)v; break;
    case commUint32: ((uint32_t*)buf)[i] = (uint32_t)v; break;
    case commInt64: ((int64_t*)buf)[i] = (int64_t)v; break;
    case commUint64: ((uint64_t*)buf)[i] = (uint64_t)v; break;
    case commFloat16: ((uint16_t*)buf)[i] = (uint16_t)encMini(v, 5, 10, 15, 1); break;
    case commFloat32: ((float*)buf)[i] = (float)v; break;
    case commFloat64: ((double*)buf)[i] = v; break;
    case commBfloat16: ((uint16_t*)buf)[i] = (uint16_t)encMini(v, 8, 7, 127, 1); break;
    case commFloat8e4m3: ((uint8_t*)buf)[i] = (uint8_t)encMini(v, 4, 3, 7, 0); break;
    case commFloat8e5m2: ((uint8_t*)buf)[i] = (uint8_t)encMini(v, 5, 2, 15, 1); break;
    default: break;
  }
}

/* Decoding tables for the 16- and 8-bit floating types, built once before any rank starts. */
static double* decHalf;
static double* decBf16;
static double decE4m3[256], decE5m2[256];

int perfBuildTables(void) {
  decHalf = malloc(65536 * sizeof(double));
  decBf16 = malloc(65536 * sizeof(double));
  if (!decHalf || !decBf16) return -1;
  for (uint32_t b = 0; b < 65536; b++) {
    decHalf[b] = decMini(b, 5, 10, 15, 1);
    decBf16[b] = decMini(b, 8, 7, 127, 1);
  }
  for (uint32_t b = 0; b < 256; b++) {
    decE4m3[b] = decMini(b, 4, 3, 7, 0);
    decE5m2[b] = decMini(b, 5, 2, 15, 1);
  }
  return 0;
}

double perfLoadElt(const void* buf, size_t i, commDataType_t t) {
  switch (t) {
    case commInt8: return ((const int8_t*)buf)[i];
    case commUint8: return ((const uint8_t*)buf)[i];
    case commInt32: return ((const int32_t*)buf)[i];
    case commUint32: return ((const uint32_t*)buf)[i];
    case commInt64: return (double)((const int64_t*)buf)[i];
    case commUint64: return (double)((const uint64_t*)buf)[i];
    case commFloat16: return decHalf[((const uint16_t*)buf)[i]];
    case commFloat32: return ((const float*)buf)[i];
    case commFloat64: return ((const double*)buf)[i];
    case commBfloat16: return decBf16[((const uint16_t*)buf)[i]];
    case commFloat8e4m3: return decE4m3[((const uint8_t*)buf)[i]];
    case commFloat8e5m2: return decE5m2[((const uint8_t*)buf)[i]];
    default: return NAN;
  }
}

/* ------------------------------------------------------------------------------------------------ */
/* Operations and the input pattern                                                                  */

const char* const perfOpNames[opNum] = {"sum", "prod", "max", "min", "avg", "premulsum"};

int perfScalarOf(int rank) { return 1 + (rank & 1); } /* premulsum factor of each rank */

pattern_t perfMakePattern(int op, commDataType_t t, int nranks) {
  pattern_t p = {op, nranks, 0, 0, 0};
  double lim = perfTypes[t].exactMax;
  double cap = 63;
  switch (op) {
    case opSum:
    case opAvg: p.vmax = (int)fmin(cap, floor(lim / nranks)); break;
    case opPreMulSum: p.vmax = (int)fmin(cap, floor(lim / (2.0 * nranks))); break;
    case opMax:
    case opMin:
      p.vmax = (int)fmin(cap, lim);
      p.off = perfTypes[t].isSigned ? p.vmax / 2 : 0;
      break;
    case opProd: p.vmax = 2; break;
    default: p.vmax = (int)fmin(100, lim); break; /* data movement: no arithmetic */
  }
  if (p.vmax < 1 && op != opAvg) p.sparse = 1, p.vmax = 1;
  return p;
}

int perfPatternValue(const pattern_t* p, int r, size_t i) {
  size_t h = i * 7 + (size_t)r * 13 + 3;
  switch (p->op) {
    case opProd: return ((i + (size_t)r) % (size_t)p->nranks == 0) ? 2 : 1;
    case opAvg: return (int)((i * 7 + 3) % (size_t)(p->vmax + 1)); /* same on every rank */
    default:
      if (p->sparse) return ((i + (size_t)r) % (size_t)p->nranks == 0) ? 1 : 0;
      return (int)(h % (size_t)(p->vmax + 1)) - p->off;
  }
}

double perfExpectedValue(const pattern_t* p, int srcRank, size_t idx) {
  if (srcRank >= 0) return perfPatternValue(p, srcRank, idx);
  double acc = perfPatternValue(p, 0, idx);
  if (p->op == opPreMulSum) acc *= perfScalarOf(0);
  for (int r = 1; r < p->nranks; r++) {
    double v = perfPatternValue(p, r, idx);
    switch (p->op) {
      case opProd: acc *= v; break;
      case opMax: acc = v > acc ? v : acc; break;
      case opMin: acc = v < acc ? v : acc; break;
      case opPreMulSum: acc += perfScalarOf(r) * v; break;
      default: acc += v; break;
    }
  }
  if (p->op == opAvg) acc /= p->nranks; /* exact: every rank holds the same value */
  return acc;
}
