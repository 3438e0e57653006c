/* test_gpu_coll: what its two files share. test_gpu_coll.c has the collectives' cases, the checks against the
 * host executor and the drivers (threads, processes); test_gpu_coll_special.c the cases of their own: mixed
 * host and device buffers, repeated calls, calls on changing streams, graph replays, the timeout and abort of a lone rank, and a peer
 * that leaves. Also the rule every GPU test skips by (gpuTestDevices, used by test_gpu_reduce.c and
 * test_gpu_comm_device.c too). SPDX-License-Identifier: Apache-2.0 */
#ifndef TEST_GPU_COLL_H_
#define TEST_GPU_COLL_H_

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "comm.h"

typedef struct {
  int rank, n, quick, procMode, dev; /* dev: the CUDA device of this rank */
  commUniqueId ids[3];               /* main, timeout, abort communicators */
  comm_t comm;
  cudaStream_t stream;
  char *hs, *hr, *res, *ds, *dr;
  float* dScalar; /* device memory for the device-resident pre-multiplier */
  size_t cap;
  unsigned gen;
  uint64_t seed;
} rankCtx;

extern int verbose;      /* TEST_GPU_VERBOSE=1 */
extern int ownHostsMode; /* -H */

double now(void);
void sleepMs(int ms);
/* A failure of this rank, printed (the first ones) and counted. */
void report(const rankCtx* x, const char* what, const char* fmt, ...);
/* Stop every process now (a rank is stuck: its peers would wait forever). */
void hardExit(const char* what, const char* why);
/* Barrier of every rank, OR of their flags. */
int agree(rankCtx* x, int f);
void countCase(const rankCtx* x, int failed);
/* Wait up to secs for the stream to be idle: 1 when it is. */
int waitIdle(cudaStream_t s, double secs);
/* After a call that enqueues device work on every rank: -1 fatal (it failed on some ranks only), 1 it failed
 * on every rank, 0 it succeeded everywhere. */
int agreeCall(rankCtx* x, int ok, const char* what);
/* Every rank's verdict on a case, counted once: -1 after a CUDA error (fatal). */
int agreeResult(rankCtx* x, int cudaBad, int bad, const char* what);

/* test_gpu_coll_special.c */
int runMixed(rankCtx* x);
int runRepeat(rankCtx* x);
int runStreamOrder(rankCtx* x);
int runGraph(rankCtx* x);
int runSolo(rankCtx* x, int isAbort);
int runPeerGone(rankCtx* x);

/* The CUDA devices a GPU test may use. A test skips (77) only where there is no GPU to use: CUDA reports no device
 * (cudaErrorNoDevice, or success with a count of 0), or the machine has no NVIDIA driver at all
 * (cudaErrorInsufficientDriver while libcuda.so.1 cannot be loaded, as on a build machine with the toolkit only).
 * Any other error, e.g. a driver older than the runtime or one that fails to initialise, is a GPU machine that
 * cannot run the test: a failure (1), with the error's name. Each outcome prints one line, "PROG: SKIP (no CUDA
 * device: ...)" or "PROG: FAIL: ...", which tests/gpu/run_on_gpu.sh reads. Returns 0 with *count >= 1. */
static inline int gpuTestDevices(const char* prog, int* count) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  *count = 0;
  if (e == cudaSuccess && n > 0) {
    *count = n;
    return 0;
  }
  if (e == cudaSuccess || e == cudaErrorNoDevice) {
    printf("%s: SKIP (no CUDA device: cudaGetDeviceCount says %s, %d devices)\n", prog, cudaGetErrorName(e), n);
    return 77;
  }
  if (e == cudaErrorInsufficientDriver) {
    void* drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (drv == NULL) {
      printf("%s: SKIP (no CUDA device: no NVIDIA driver, libcuda.so.1 cannot be loaded)\n", prog);
      return 77;
    }
    dlclose(drv);
  }
  printf("%s: FAIL: cudaGetDeviceCount: %s (%s)\n", prog, cudaGetErrorName(e), cudaGetErrorString(e));
  return 1;
}

#endif
