/* gpu_reduce_bench [-s bytes] [-r runs] [-i iters]: the device reduce-copy step (commCudaReduceLocal:
 * dst = a OP b) against cudaMemcpy device to device of the same buffer, in the same run. Rates count bytes
 * read plus written (reduce: 3 x n x size, copy: 2 x bytes), timed with CUDA events over `iters` calls,
 * median of `runs`. The target: reduce-copy at no less than 80% of the copy rate. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce.h"
#include "reduce_cuda.h"

#define CK(call)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (cudaError_t)(call);                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

static int cmpF(const void* a, const void* b) {
  float x = *(const float*)a, y = *(const float*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  size_t bytes = 256u << 20;
  int runs = 9, iters = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-s")) bytes = strtoull(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "-r")) runs = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-i")) iters = atoi(argv[i + 1]);
  }
  if (runs < 1 || runs > 99 || iters < 1) return 2;
  int nDev = 0;
  if (cudaGetDeviceCount(&nDev) != cudaSuccess || nDev == 0) {
    printf("gpu_reduce_bench: no CUDA device\n");
    return 77;
  }
  void *a, *b, *d;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMalloc(&d, bytes));
  CK(cudaMemset(a, 0x11, bytes));
  CK(cudaMemset(b, 0x22, bytes));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  struct {
    const char* name;
    commDataType_t t;
    commRedOpKind_t kind;
    int pre;
  } cases[] = {{"float32 sum", commFloat32, COMM_REDOP_SUM, 0},
               {"float32 premulsum", commFloat32, COMM_REDOP_PREMULSUM, 1},
               {"bfloat16 sum", commBfloat16, COMM_REDOP_SUM, 0},
               {"float16 sum", commFloat16, COMM_REDOP_SUM, 0},
               {"float8e4m3 sum", commFloat8e4m3, COMM_REDOP_SUM, 0},
               {"int32 sum", commInt32, COMM_REDOP_SUM, 0},
               {"float64 max", commFloat64, COMM_REDOP_MAX, 0}};
  const int nCases = (int)(sizeof(cases) / sizeof(cases[0]));
  float copyRate[99], rate[99];
  printf("# gpu_reduce_bench: %zu MiB buffers, %d runs x %d calls, medians; GB/s = (bytes read + written) / time\n",
         bytes >> 20, runs, iters);
  /* The copy first, then each case (the device is not shared while this runs). */
  float copyMed = 0;
  for (int c = -1; c < nCases; c++) {
    for (int r = 0; r < runs; r++) {
      float ms = 0;
      if (c < 0) {
        CK(cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice, s)); /* warm */
        CK(cudaEventRecord(e0, s));
        for (int i = 0; i < iters; i++) CK(cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        copyRate[r] = (float)(2.0 * (double)bytes * iters / (ms * 1e-3) / 1e9);
      } else {
        commRedOpArgs args;
        memset(&args, 0, sizeof(args));
        args.kind = cases[c].kind;
        args.dtype = cases[c].t;
        args.scalarBits = cases[c].t == commFloat32 ? 0x3f000000u : 1;
        size_t n = bytes / commTypeSize(cases[c].t);
        CK(commCudaReduceLocal(&args, d, a, b, n, cases[c].pre, 0, s)); /* warm */
        CK(cudaEventRecord(e0, s));
        for (int i = 0; i < iters; i++) CK(commCudaReduceLocal(&args, d, a, b, n, cases[c].pre, 0, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        rate[r] = (float)(3.0 * (double)bytes * iters / (ms * 1e-3) / 1e9);
      }
    }
    if (c < 0) {
      qsort(copyRate, (size_t)runs, sizeof(float), cmpF);
      copyMed = copyRate[runs / 2];
      printf("%-20s %9.1f GB/s\n", "cudaMemcpy D2D", copyMed);
    } else {
      qsort(rate, (size_t)runs, sizeof(float), cmpF);
      printf("%-20s %9.1f GB/s  %5.2fx copy\n", cases[c].name, rate[runs / 2], rate[runs / 2] / copyMed);
    }
  }
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaFree(d));
  return 0;
}
