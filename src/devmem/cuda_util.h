/* CUDA runtime helpers shared by the CUDA executor (src/exec/cuda/exec_dev.c) and the P2P transport
 * (transports/p2p/p2p.c). Only for files built with the CUDA toolkit (COMM_HAVE_CUDA). */
#ifndef COMM_CUDA_UTIL_H_
#define COMM_CUDA_UTIL_H_

#include <cuda_runtime_api.h>

#include "comm.h"
#include "debug.h"

/* A failed CUDA call: a WARN naming it, and commUnhandledCudaError. */
static inline commResult_t commCudaFail(const char* what, cudaError_t err) {
  WARN("CUDA error in %s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
  return commUnhandledCudaError;
}
#define CUDACHECK(call)                                    \
  do {                                                     \
    cudaError_t e_ = (call);                               \
    if (e_ != cudaSuccess) return commCudaFail(#call, e_); \
  } while (0)
#define CUDACHECKGOTO(call, res, label) \
  do {                                  \
    cudaError_t e_ = (call);            \
    if (e_ != cudaSuccess) {            \
      res = commCudaFail(#call, e_);    \
      goto label;                       \
    }                                   \
  } while (0)

/* Run with device `dev` current, then put the caller's back: enter, work, leave. */
typedef struct {
  int saved;
} commCudaDevGuard;
static inline commResult_t commCudaDevEnter(int dev, commCudaDevGuard* g) {
  CUDACHECK(cudaGetDevice(&g->saved));
  if (g->saved != dev) CUDACHECK(cudaSetDevice(dev));
  return commSuccess;
}
static inline void commCudaDevLeave(int dev, const commCudaDevGuard* g) {
  if (g->saved != dev) cudaSetDevice(g->saved);
}

#endif
