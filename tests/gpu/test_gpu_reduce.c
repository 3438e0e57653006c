/* Device reductions (src/exec/cuda/reduce_kernels.cu) against the host ones (src/exec/reduce.c), bit for
 * bit: every datatype x op kind x pre/post, counts from 0 to 65541 (odd ones, vector bodies and tails),
 * aligned and misaligned buffers, in place (dst == a, dst == b) and out of place, inputs of random bits
 * (NaN, infinities, subnormals, signed zeros for the float types). Exit 77 (skipped) without a GPU, 1 when CUDA
 * fails otherwise (test_gpu_coll.h: gpuTestDevices). */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce.h"
#include "reduce_cuda.h"
#include "test_gpu_coll.h"

#define CK(call)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

static uint64_t rngState = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  rngState ^= rngState << 13;
  rngState ^= rngState >> 7;
  rngState ^= rngState << 17;
  return rngState;
}
static void fillRandom(uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(rnd() >> 24);
}

/* Scalar of a PREMULSUM: a finite value of the type (random bits for integers). */
static uint64_t scalarBits(commDataType_t t) {
  switch (t) {
    case commFloat32: {
      float f = (float)((int)(rnd() % 2001) - 1000) / 37.0f;
      uint32_t u;
      memcpy(&u, &f, 4);
      return u;
    }
    case commFloat64: {
      double d = (double)((int)(rnd() % 2001) - 1000) / 37.0;
      uint64_t u;
      memcpy(&u, &d, 8);
      return u;
    }
    case commFloat16: return commFloatToHalf((float)((int)(rnd() % 201) - 100) / 7.0f);
    case commBfloat16: return commFloatToBf16((float)((int)(rnd() % 201) - 100) / 7.0f);
    case commFloat8e4m3: return commFloatToFp8e4m3((float)((int)(rnd() % 21) - 10) / 3.0f);
    case commFloat8e5m2: return commFloatToFp8e5m2((float)((int)(rnd() % 21) - 10) / 3.0f);
    default: return rnd();
  }
}

static int failures = 0, checks = 0;

/* Is element p of type t a NaN? (Integers: never.) */
static int isNaN(commDataType_t t, const uint8_t* p) {
  uint16_t h;
  uint32_t f;
  uint64_t d;
  switch (t) {
    case commFloat16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7c00;
    case commBfloat16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7f80;
    case commFloat32: memcpy(&f, p, 4); return (f & 0x7fffffffu) > 0x7f800000u;
    case commFloat64: memcpy(&d, p, 8); return (d & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    case commFloat8e4m3: return (p[0] & 0x7f) == 0x7f;
    case commFloat8e5m2: return (p[0] & 0x7f) > 0x7c;
    default: return 0;
  }
}

/* Bit for bit, except that two NaNs are equal whatever their sign and payload. */
static void compare(const char* what, commDataType_t t, int kind, int pre, int post, size_t n, const uint8_t* want,
                    const uint8_t* got, size_t bytes) {
  checks++;
  size_t es = commTypeSize(t);
  for (size_t i = 0; i < n; i++) {
    const uint8_t *w = want + i * es, *g = got + i * es;
    if (memcmp(w, g, es) == 0 || (isNaN(t, w) && isNaN(t, g))) continue;
    if (failures++ < 20) {
      fprintf(stderr, "FAIL %s %s kind %d pre %d post %d n %zu: element %zu: host", what, commTypeName(t), kind, pre,
              post, n, i);
      for (size_t k = es; k-- > 0;) fprintf(stderr, "%02x", w[k]);
      fprintf(stderr, " device ");
      for (size_t k = es; k-- > 0;) fprintf(stderr, "%02x", g[k]);
      fprintf(stderr, "\n");
    }
    return;
  }
  (void)bytes;
}

int main(void) {
  int nDev = 0, dv = gpuTestDevices("test_gpu_reduce", &nDev);
  if (dv != 0) return dv; /* 77: no device (skipped); 1: a CUDA error */
  static const size_t counts[] = {0, 1, 2, 7, 16, 33, 1000, 4099, 65541};
  const int nCounts = (int)(sizeof(counts) / sizeof(counts[0]));
  const size_t maxBytes = 65541 * 8 + 64;
  uint8_t *ha = malloc(maxBytes), *hb = malloc(maxBytes), *want = malloc(maxBytes), *got = malloc(maxBytes);
  uint8_t *da, *db, *dd;
  if (!ha || !hb || !want || !got) return 1;
  CK(cudaMalloc((void**)&da, maxBytes));
  CK(cudaMalloc((void**)&db, maxBytes));
  CK(cudaMalloc((void**)&dd, maxBytes));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  for (int t = 0; t < (int)commNumTypes; t++) {
    size_t es = commTypeSize((commDataType_t)t);
    for (int kind = 0; kind < COMM_NUM_REDOP_KINDS; kind++) {
      for (int pp = 0; pp < 4; pp++) {
        int pre = pp & 1, post = pp >> 1;
        for (int ci = 0; ci < nCounts; ci++) {
          size_t n = counts[ci];
          /* offset 0: 16-byte aligned (vector path); offset 1 element: misaligned (element path) */
          for (size_t off = 0; off <= es; off += es) {
            commRedOpArgs args;
            memset(&args, 0, sizeof(args));
            args.kind = (commRedOpKind_t)kind;
            args.dtype = (commDataType_t)t;
            args.scalarBits = scalarBits((commDataType_t)t);
            args.divisor = (rnd() % 4 == 0) ? rnd() : 1 + rnd() % 17;
            size_t bytes = n * es;
            fillRandom(ha, bytes);
            fillRandom(hb, bytes);
            CK(cudaMemcpy(da + off, ha, bytes, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(db + off, hb, bytes, cudaMemcpyHostToDevice));
            /* out of place */
            commReduceLocal(&args, want, ha, hb, n, pre, post);
            CK((cudaError_t)commCudaReduceLocal(&args, dd + off, da + off, db + off, n, pre, post, s));
            CK(cudaStreamSynchronize(s));
            CK(cudaMemcpy(got, dd + off, bytes, cudaMemcpyDeviceToHost));
            compare("reduce", (commDataType_t)t, kind, pre, post, n, want, got, bytes);
            /* copy (pre/post of one input) */
            commCopy(&args, want, hb, n, pre, post);
            CK((cudaError_t)commCudaCopy(&args, dd + off, db + off, n, pre, post, s));
            CK(cudaStreamSynchronize(s));
            CK(cudaMemcpy(got, dd + off, bytes, cudaMemcpyDeviceToHost));
            compare("copy", (commDataType_t)t, kind, pre, post, n, want, got, bytes);
            /* in place: dst == a */
            CK((cudaError_t)commCudaReduceLocal(&args, da + off, da + off, db + off, n, pre, post, s));
            CK(cudaStreamSynchronize(s));
            CK(cudaMemcpy(got, da + off, bytes, cudaMemcpyDeviceToHost));
            commReduceLocal(&args, want, ha, hb, n, pre, post);
            compare("reduce in place", (commDataType_t)t, kind, pre, post, n, want, got, bytes);
          }
        }
      }
    }
  }
  CK(cudaStreamDestroy(s));
  CK(cudaFree(da));
  CK(cudaFree(db));
  CK(cudaFree(dd));
  free(ha);
  free(hb);
  free(want);
  free(got);
  printf("test_gpu_reduce: %d comparisons, %d failures: %s\n", checks, failures, failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
