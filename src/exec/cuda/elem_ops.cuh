/* Element operations of the device reductions, for every datatype x op kind: the host's semantics
 * (src/exec/reduce.c) bit for bit. Shared by the stand-alone reduction kernels (reduce_kernels.cu) and the
 * executor's kernel (exec_kernel.cu). See reduce_kernels.cu for the rounding rules. */
#ifndef COMM_ELEM_OPS_CUH_
#define COMM_ELEM_OPS_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

extern "C" {
#include "reduce.h"
}
#include "reduce_elem.h"

namespace commdev {

struct DevArgs {
  uint64_t scalarBits;
  uint64_t divisor;
  int pre, post;
};

/* ---- Element operations: Op<Kind>::apply(x, y) on the family's compute type ---- */

template <typename T, typename U>
struct IntFam {
  typedef T S; /* storage */
  static __device__ T sum(T x, T y) { return (T)(U)((U)x + (U)y); }
  static __device__ T apply(int kind, T x, T y, const DevArgs& a) {
    switch (kind) {
      case COMM_REDOP_SUM: return sum(x, y);
      case COMM_REDOP_PROD: return (T)(U)((U)x * (U)y);
      case COMM_REDOP_MAX: return x > y ? x : y;
      case COMM_REDOP_MIN: return x < y ? x : y;
      case COMM_REDOP_PREMULSUM: return a.pre ? (T)(U)((U)x + (U)((U)a.scalarBits * (U)y)) : sum(x, y);
      default: return a.post && a.divisor ? postDiv(sum(x, y), a.divisor) : sum(x, y);
    }
  }
  static __device__ T postDiv(T v, uint64_t d) {
    if (sizeof(T) == 8 && (T)-1 < 0) { /* int64: divisors above INT64_MAX, as the host's divI64 */
      int64_t x = (int64_t)v;
      if (d <= (uint64_t)INT64_MAX) return (T)(x / (int64_t)d);
      return (T)((x == INT64_MIN && d == (uint64_t)INT64_MAX + 1) ? -1 : 0);
    }
    if ((T)-1 < 0) return d > (uint64_t)INT64_MAX ? (T)0 : (T)((int64_t)v / (int64_t)d);
    return (T)((uint64_t)v / d);
  }
  static __device__ T copy(int kind, T x, const DevArgs& a) {
    if (kind == COMM_REDOP_PREMULSUM && a.pre) return (T)(U)((U)a.scalarBits * (U)x);
    if (kind == COMM_REDOP_SUMPOSTDIV && a.post) return postDiv(x, a.divisor ? a.divisor : 1);
    return x;
  }
};

struct F32Fam {
  typedef float S;
  static __device__ float apply(int kind, float x, float y, const DevArgs& a) {
    switch (kind) {
      case COMM_REDOP_SUM: return __fadd_rn(x, y);
      case COMM_REDOP_PROD: return __fmul_rn(x, y);
      case COMM_REDOP_MAX: return maxF32(x, y);
      case COMM_REDOP_MIN: return minF32(x, y);
      case COMM_REDOP_PREMULSUM: return __fadd_rn(x, a.pre ? __fmul_rn(u2f((uint32_t)a.scalarBits), y) : y);
      default: return a.post && a.divisor ? __fdiv_rn(__fadd_rn(x, y), (float)a.divisor) : __fadd_rn(x, y);
    }
  }
  static __device__ float copy(int kind, float x, const DevArgs& a) {
    if (kind == COMM_REDOP_PREMULSUM && a.pre) return __fmul_rn(u2f((uint32_t)a.scalarBits), x);
    if (kind == COMM_REDOP_SUMPOSTDIV && a.post) return __fdiv_rn(x, (float)(a.divisor ? a.divisor : 1));
    return x;
  }
};

struct F64Fam {
  typedef double S;
  static __device__ double apply(int kind, double x, double y, const DevArgs& a) {
    switch (kind) {
      case COMM_REDOP_SUM: return __dadd_rn(x, y);
      case COMM_REDOP_PROD: return __dmul_rn(x, y);
      case COMM_REDOP_MAX: return maxF64(x, y);
      case COMM_REDOP_MIN: return minF64(x, y);
      case COMM_REDOP_PREMULSUM: return __dadd_rn(x, a.pre ? __dmul_rn(u2d(a.scalarBits), y) : y);
      default: return a.post && a.divisor ? __ddiv_rn(__dadd_rn(x, y), (double)a.divisor) : __dadd_rn(x, y);
    }
  }
  static __device__ double copy(int kind, double x, const DevArgs& a) {
    if (kind == COMM_REDOP_PREMULSUM && a.pre) return __dmul_rn(u2d(a.scalarBits), x);
    if (kind == COMM_REDOP_SUMPOSTDIV && a.post) return __ddiv_rn(x, (double)(a.divisor ? a.divisor : 1));
    return x;
  }
};

/* Narrow floats: storage C::S, decoded to float by C::dec, encoded back by C::enc. */
#define CODEC(NAME, ST, D, E)                          \
  struct NAME {                                        \
    typedef ST S;                                      \
    static __device__ float dec(ST v) { return D(v); } \
    static __device__ ST enc(float f) { return E(f); } \
  };
/* The hardware conversions (one instruction each) round as the host's bit-exact software ones do
 * (reduce_elem.h; tests/gpu/test_gpu_reduce checks every op against them); only NaN payloads may differ. */
static __device__ float halfDec(uint16_t v) { return __half2float(__ushort_as_half(v)); }
static __device__ uint16_t halfEnc(float f) { return __half_as_ushort(__float2half_rn(f)); }
static __device__ float bf16Dec(uint16_t v) { return __bfloat162float(__ushort_as_bfloat16(v)); }
static __device__ uint16_t bf16Enc(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
static __device__ float e4m3Dec(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v, __NV_E4M3)));
}
static __device__ uint8_t e4m3Enc(float f) { return (uint8_t)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3); }
static __device__ float e5m2Dec(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v, __NV_E5M2)));
}
static __device__ uint8_t e5m2Enc(float f) { return (uint8_t)__nv_cvt_float_to_fp8(f, __NV_NOSAT, __NV_E5M2); }
CODEC(HalfCodec, uint16_t, halfDec, halfEnc)
CODEC(Bf16Codec, uint16_t, bf16Dec, bf16Enc)
CODEC(E4m3Codec, uint8_t, e4m3Dec, e4m3Enc)
CODEC(E5m2Codec, uint8_t, e5m2Dec, e5m2Enc)
#undef CODEC

template <class C>
struct NarrowFam {
  typedef typename C::S ST;
  typedef ST S;
  static __device__ ST apply(int kind, ST sx, ST sy, const DevArgs& a) {
    float x = C::dec(sx), y = C::dec(sy), r;
    switch (kind) {
      case COMM_REDOP_SUM: r = __fadd_rn(x, y); break;
      case COMM_REDOP_PROD: r = __fmul_rn(x, y); break;
      case COMM_REDOP_MAX: r = maxF32(x, y); break;
      case COMM_REDOP_MIN: r = minF32(x, y); break;
      case COMM_REDOP_PREMULSUM:
        if (a.pre) y = C::dec(C::enc(__fmul_rn(C::dec((ST)a.scalarBits), y)));
        r = __fadd_rn(x, y);
        break;
      default:
        r = a.post && a.divisor ? __fdiv_rn(C::dec(C::enc(__fadd_rn(x, y))), (float)a.divisor) : __fadd_rn(x, y);
        break;
    }
    return C::enc(r);
  }
  static __device__ ST copy(int kind, ST sx, const DevArgs& a) {
    if (kind == COMM_REDOP_PREMULSUM && a.pre) return C::enc(__fmul_rn(C::dec((ST)a.scalarBits), C::dec(sx)));
    if (kind == COMM_REDOP_SUMPOSTDIV && a.post)
      return C::enc(__fdiv_rn(C::dec(sx), (float)(a.divisor ? a.divisor : 1)));
    return sx;
  }
};

/* Integers (IntFam) reduce T directly; the others reduce their storage type through apply. */
template <class F>
struct Elem {
  typedef typename F::S S;
  static __device__ S red(int kind, S x, S y, const DevArgs& a) { return F::apply(kind, x, y, a); }
  static __device__ S cpy(int kind, S x, const DevArgs& a) { return F::copy(kind, x, a); }
};

typedef IntFam<int8_t, uint8_t> I8Fam;
typedef IntFam<uint8_t, uint8_t> U8Fam;
typedef IntFam<int32_t, uint32_t> I32Fam;
typedef IntFam<uint32_t, uint32_t> U32Fam;
typedef IntFam<int64_t, uint64_t> I64Fam;
typedef IntFam<uint64_t, uint64_t> U64Fam;
typedef NarrowFam<HalfCodec> HalfFam;
typedef NarrowFam<Bf16Codec> Bf16Fam;
typedef NarrowFam<E4m3Codec> E4m3Fam;
typedef NarrowFam<E5m2Codec> E5m2Fam;

#define COMM_DISPATCH(DT, CALL)                \
  switch (DT) {                                \
    case commInt8: return CALL(I8Fam);         \
    case commUint8: return CALL(U8Fam);        \
    case commInt32: return CALL(I32Fam);       \
    case commUint32: return CALL(U32Fam);      \
    case commInt64: return CALL(I64Fam);       \
    case commUint64: return CALL(U64Fam);      \
    case commFloat16: return CALL(HalfFam);    \
    case commFloat32: return CALL(F32Fam);     \
    case commFloat64: return CALL(F64Fam);     \
    case commBfloat16: return CALL(Bf16Fam);   \
    case commFloat8e4m3: return CALL(E4m3Fam); \
    case commFloat8e5m2: return CALL(E5m2Fam); \
    default: return cudaErrorInvalidValue;     \
  }


}  // namespace commdev

#endif
