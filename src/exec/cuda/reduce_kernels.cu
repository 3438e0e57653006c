/* Device reductions for every datatype x op: the element semantics of the host reductions
 * (src/exec/reduce.c, commReduceLocal / commCopy), bit for bit, as CUDA kernels that the device executor's
 * steps build on.
 *
 * - The conversions and comparisons are the host's own (src/exec/reduce_elem.h, compiled for both).
 * - Integers wrap in unsigned arithmetic; SUMPOSTDIV truncates as C does (the host's float-division trick
 *   gives the same quotients).
 * - float32/float64: products and sums are rounded separately (__fmul_rn / __fadd_rn and the double
 *   forms), so PREMULSUM's a + round(s * b) is never fused into an FMA, as on the host.
 * - float16, bfloat16, float8: decoded to float, combined, encoded with round-to-nearest-even (e4m3
 *   saturating to +-448, e5m2 overflowing to infinity), as the host's block loops do, through the
 *   hardware conversions.
 * - NaN: a NaN result is a NaN on both sides, but its sign and payload are the hardware's (the GPU makes
 *   canonical NaNs where x86 propagates the input's); no other bit differs.
 * - Memory access: each thread moves 16-byte vectors (uint4) when dst, a and b are 16-byte aligned alike;
 *   the head and tail, or misaligned buffers, go element by element. Grid-stride loops.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "elem_ops.cuh"
#include "reduce_cuda.h"

namespace {
using namespace commdev;

/* ---- Kernels ---- */

template <class F, int KIND>
__global__ void reduceKernel(void* dst, const void* a, const void* b, size_t n, DevArgs args) {
  typedef typename F::S S;
  const size_t per = sizeof(uint4) / sizeof(S);
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
  S* d = (S*)dst;
  const S* x = (const S*)a;
  const S* y = (const S*)b;
  uintptr_t mis = ((uintptr_t)dst | (uintptr_t)a | (uintptr_t)b) & (sizeof(uint4) - 1);
  size_t nVec = mis ? 0 : n / per;
  for (size_t v = tid; v < nVec; v += stride) {
    uint4 va = ((const uint4*)x)[v], vb = ((const uint4*)y)[v], vd;
    const S* ea = (const S*)&va;
    const S* eb = (const S*)&vb;
    S* ed = (S*)&vd;
#pragma unroll
    for (size_t k = 0; k < per; k++) ed[k] = Elem<F>::red(KIND, ea[k], eb[k], args);
    ((uint4*)d)[v] = vd;
  }
  for (size_t i = nVec * per + tid; i < n; i += stride) d[i] = Elem<F>::red(KIND, x[i], y[i], args);
}

template <class F, int KIND>
__global__ void copyKernel(void* dst, const void* src, size_t n, DevArgs args) {
  typedef typename F::S S;
  const size_t per = sizeof(uint4) / sizeof(S);
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
  S* d = (S*)dst;
  const S* x = (const S*)src;
  uintptr_t mis = ((uintptr_t)dst | (uintptr_t)src) & (sizeof(uint4) - 1);
  size_t nVec = mis ? 0 : n / per;
  for (size_t v = tid; v < nVec; v += stride) {
    uint4 va = ((const uint4*)x)[v], vd;
    const S* ea = (const S*)&va;
    S* ed = (S*)&vd;
#pragma unroll
    for (size_t k = 0; k < per; k++) ed[k] = Elem<F>::cpy(KIND, ea[k], args);
    ((uint4*)d)[v] = vd;
  }
  for (size_t i = nVec * per + tid; i < n; i += stride) d[i] = Elem<F>::cpy(KIND, x[i], args);
}

/* Grid: enough blocks to cover the vectors once, at most 4 per SM (memory bound: more only queue). */
static void gridFor(size_t n, size_t eltSize, int* blocks, int* threads) {
  static int smCount = 0;
  if (smCount == 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&smCount, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      smCount = 1;
  }
  *threads = 512;
  size_t vecs = (n * eltSize + 15) / 16;
  size_t want = (vecs + (size_t)*threads - 1) / (size_t)*threads;
  size_t cap = (size_t)smCount * 4;
  *blocks = (int)(want < 1 ? 1 : want > cap ? cap : want);
}

template <class F>
static cudaError_t launchRed(int kind, void* dst, const void* a, const void* b, size_t n, const DevArgs& args,
                             cudaStream_t s) {
  int blocks, threads;
  gridFor(n, sizeof(typename F::S), &blocks, &threads);
  switch (kind) {
    case COMM_REDOP_SUM: reduceKernel<F, COMM_REDOP_SUM><<<blocks, threads, 0, s>>>(dst, a, b, n, args); break;
    case COMM_REDOP_PROD: reduceKernel<F, COMM_REDOP_PROD><<<blocks, threads, 0, s>>>(dst, a, b, n, args); break;
    case COMM_REDOP_MAX: reduceKernel<F, COMM_REDOP_MAX><<<blocks, threads, 0, s>>>(dst, a, b, n, args); break;
    case COMM_REDOP_MIN: reduceKernel<F, COMM_REDOP_MIN><<<blocks, threads, 0, s>>>(dst, a, b, n, args); break;
    case COMM_REDOP_PREMULSUM:
      reduceKernel<F, COMM_REDOP_PREMULSUM><<<blocks, threads, 0, s>>>(dst, a, b, n, args);
      break;
    default: reduceKernel<F, COMM_REDOP_SUMPOSTDIV><<<blocks, threads, 0, s>>>(dst, a, b, n, args); break;
  }
  return cudaGetLastError();
}

template <class F>
static cudaError_t launchCopy(int kind, void* dst, const void* src, size_t n, const DevArgs& args, cudaStream_t s) {
  int blocks, threads;
  gridFor(n, sizeof(typename F::S), &blocks, &threads);
  if (kind == COMM_REDOP_PREMULSUM) copyKernel<F, COMM_REDOP_PREMULSUM><<<blocks, threads, 0, s>>>(dst, src, n, args);
  else copyKernel<F, COMM_REDOP_SUMPOSTDIV><<<blocks, threads, 0, s>>>(dst, src, n, args);
  return cudaGetLastError();
}

}  // namespace

extern "C" int commCudaReduceLocal(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n,
                                   int pre, int post, void* stream) {
  if (n == 0) return cudaSuccess;
  DevArgs d = {args->scalarBits, args->divisor, pre, post};
  cudaStream_t s = (cudaStream_t)stream;
#define RED_CALL(F) launchRed<F>((int)args->kind, dst, a, b, n, d, s)
  COMM_DISPATCH(args->dtype, RED_CALL)
#undef RED_CALL
}

extern "C" int commCudaCopy(const commRedOpArgs* args, void* dst, const void* src, size_t n, int pre, int post,
                            void* stream) {
  if (n == 0) return cudaSuccess;
  cudaStream_t s = (cudaStream_t)stream;
  int applies = (pre && args->kind == COMM_REDOP_PREMULSUM) || (post && args->kind == COMM_REDOP_SUMPOSTDIV);
  if (!applies) {
    if (dst == src) return cudaSuccess;
    return cudaMemcpyAsync(dst, src, n * commTypeSize(args->dtype), cudaMemcpyDeviceToDevice, s);
  }
  DevArgs d = {args->scalarBits, args->divisor, pre, post};
#define COPY_CALL(F) launchCopy<F>((int)args->kind, dst, src, n, d, s)
  COMM_DISPATCH(args->dtype, COPY_CALL)
#undef COPY_CALL
}
