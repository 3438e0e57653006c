/* The CUDA executor's host side (src/exec/exec_dev.h), its per-communicator state: made on first use
 * (commDevEnsure: own stream, join events, mapped abort and error words, LL staging and the stream order's
 * block counter, the kernels loaded), device scratch (commDevScratch), and the end of it all: waiting for
 * every kernel (commDevSync), the abort word (commDevAbort) and teardown (commDevFree). Device plans are
 * built in exec_dev_plan.c, cached in exec_dev_cache.c, ordered and joined to the callers' streams in
 * exec_dev_stream.c; errors are read in exec_dev_error.c (their shared state: exec_dev_int.h). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_util.h"
#include "debug.h"
#include "exec_dev_int.h"
#include "param.h"
#include "utils.h"

int commDevAvailable(void) { return 1; }

static commResult_t stateCreate(commComm* comm) {
  commDevState* s = NULL;
  commResult_t res = commSuccess;
  COMMCHECK(commCalloc(&s, 1, sizeof(*s)));
  s->dev = comm->cudaDev;
  CUDACHECKGOTO(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), res, fail);
  CUDACHECKGOTO(cudaEventCreateWithFlags(&s->joinIn, cudaEventDisableTiming), res, fail);
  CUDACHECKGOTO(cudaEventCreateWithFlags(&s->joinOut, cudaEventDisableTiming), res, fail);
  s->alwaysJoin = (int)commParamInt("COMM_DEV_STREAM_JOIN", 0, 0, 1);
  s->llBatch = (int)commParamInt("COMM_DEV_LL_BATCH", 2, 0, 2);
  s->smemPlan = (int)commParamInt("COMM_DEV_SMEM_PLAN", 1, 0, 1);
  s->earlyLaunch = (int)commParamInt("COMM_DEV_PDL", 1, 0, 1);
  s->tinyBytes = commParamInt("COMM_DEV_TINY_BYTES", DEV_TINY_BYTES, 0, 4096);
  s->planCacheOff = commParamInt("COMM_DEV_PLAN_CACHE", 1, 0, 1) == 0;
  void* words = NULL;
  CUDACHECKGOTO(cudaHostAlloc(&words, 4096, cudaHostAllocMapped | cudaHostAllocPortable), res, fail);
  memset(words, 0, 4096);
  s->abortFlag = (volatile int32_t*)words;
  s->error = (commDevError*)((char*)words + 64);
  void* wordsDev = NULL;
  cudaError_t we = cudaHostGetDevicePointer(&wordsDev, words, 0);
  if (we != cudaSuccess) {
    res = commCudaFail("cudaHostGetDevicePointer", we);
    goto fail;
  }
  s->abortFlagDev = (volatile int32_t*)wordsDev;
  s->errorDev = (commDevError*)((char*)wordsDev + 64);
  if (commParamInt("COMM_DEV_TRACE", 0, 0, 1)) {
    s->trace = (volatile uint64_t*)((char*)words + 512);
    memset((void*)s->trace, 0, (8 + COMM_DEV_TRACE_STEPS) * sizeof(uint64_t));
    s->traceDev = (uint64_t*)((char*)wordsDev + 512);
  }
  COMMCHECKGOTO(commDevResolveWaitValue(), res, fail);
  /* The LL staging, then the block counter of the stream order, zeroed before any kernel runs. */
  const size_t staging = (size_t)COMM_MAX_CHANNELS * 2 * COMM_DEV_LL_PIECE;
  CUDACHECKGOTO(cudaMalloc((void**)&s->llStaging, staging + 256), res, fail);
  s->doneBlocks = (uint32_t*)(s->llStaging + staging);
  CUDACHECKGOTO(cudaMemsetAsync(s->doneBlocks, 0, sizeof(uint32_t), s->stream), res, fail);
  CUDACHECKGOTO(cudaStreamSynchronize(s->stream), res, fail);
  commDevKernelInfo ki = {0, 0, 0, 0, 0};
  CUDACHECKGOTO((cudaError_t)commDevLoadKernels(&ki), res, fail);
  __atomic_store_n(&comm->dev, s, __ATOMIC_RELEASE); /* commDevAbort may read it from another thread */
  INFO(COMM_INIT,
       "rank %d: CUDA executor on device %d: own stream, %d threads per channel; the kernel uses %d "
       "registers and %d bytes of local memory per thread, %d SMs hold %d blocks each (%d of %d threads)",
       comm->rank, comm->cudaDev, COMM_DEV_THREADS, ki.numRegs, ki.localBytes, ki.smCount, ki.blocksPerSm,
       ki.blocksPerSmSmall, COMM_DEV_THREADS_SMALL);
  return commSuccess;
fail:
  if (s->abortFlag) cudaFreeHost((void*)s->abortFlag);
  if (s->llStaging) cudaFree(s->llStaging);
  if (s->joinOut) cudaEventDestroy(s->joinOut);
  if (s->joinIn) cudaEventDestroy(s->joinIn);
  if (s->stream) cudaStreamDestroy(s->stream);
  free(s);
  return res;
}

commResult_t commDevEnsure(commComm* comm) {
  if (comm->dev != NULL) return commSuccess;
  commCudaDevGuard g;
  COMMCHECK(commCudaDevEnter(comm->cudaDev, &g));
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode); /* the first call may come inside a graph capture */
  commResult_t res = stateCreate(comm);
  cudaThreadExchangeStreamCaptureMode(&mode);
  commCudaDevLeave(comm->cudaDev, &g);
  return res;
}

commResult_t commDevScratch(commComm* comm, size_t bytes, void** scratch) {
  COMMCHECK(commDevEnsure(comm));
  commDevState* s = comm->dev;
  if (bytes <= s->scratchBytes) {
    *scratch = s->scratch->ptr;
    return commSuccess;
  }
  scratchBuf* b = NULL;
  COMMCHECK(commCalloc(&b, 1, sizeof(*b)));
  commCudaDevGuard g;
  COMMCHECK(commCudaDevEnter(comm->cudaDev, &g));
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode); /* allowed while the caller captures a graph */
  cudaError_t e = cudaMalloc(&b->ptr, bytes);
  cudaThreadExchangeStreamCaptureMode(&mode);
  commCudaDevLeave(comm->cudaDev, &g);
  if (e != cudaSuccess) {
    free(b);
    WARN("rank %d: cannot allocate %zu bytes of device scratch: %s", comm->rank, bytes, cudaGetErrorString(e));
    return commSystemError;
  }
  b->next = s->scratch;
  s->scratch = b;
  s->scratchBytes = bytes;
  *scratch = b->ptr;
  return commSuccess;
}

commResult_t commDevSync(commComm* comm) {
  commDevState* s = comm->dev;
  if (s == NULL) return commSuccess;
  commCudaDevGuard g;
  COMMCHECK(commCudaDevEnter(comm->cudaDev, &g));
  /* Every kernel launched outside graph capture ends (the executor's stream waits for their count). */
  commResult_t res = commDevWaitLaunched(s, s->stream);
  cudaError_t e = cudaStreamSynchronize(s->stream);
  commCudaDevLeave(comm->cudaDev, &g);
  if (e != cudaSuccess) return commCudaFail("cudaStreamSynchronize (finalize)", e);
  if (res != commSuccess) return res;
  return commDevPollError(comm);
}

void commDevAbort(commComm* comm) {
  commDevState* s = __atomic_load_n(&comm->dev, __ATOMIC_ACQUIRE);
  if (s == NULL) return;
  *s->abortFlag = 1;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

void commDevFree(commComm* comm) {
  commDevState* s = comm->dev;
  if (s == NULL) return;
  commCudaDevGuard g;
  if (commCudaDevEnter(comm->cudaDev, &g) != commSuccess) return;
  /* Kernels end: finished, aborted (commDevAbort) or timed out. */
  commDevWaitLaunched(s, s->stream);
  cudaStreamSynchronize(s->stream);
  if (s->trace)
    INFO(COMM_INIT,
         "rank %d: COMM_DEV_TRACE: latest kernel started at %llu ns (GPU clock), ran %.2f us, thread 0 "
         "of channel 0 waited %.2f us in %llu waits, the first ending %.2f us after the start",
         comm->rank, (unsigned long long)s->trace[0], (s->trace[1] - s->trace[0]) / 1e3, s->trace[2] / 1e3,
         (unsigned long long)s->trace[3], s->trace[3] ? (s->trace[4] - s->trace[0]) / 1e3 : 0.0);
  if (s->trace && s->trace[5] >= s->trace[0] && s->trace[5] <= s->trace[1])
    INFO(COMM_INIT, "rank %d: COMM_DEV_TRACE: latest kernel's prologue ended %.2f us after its start", comm->rank,
         (s->trace[5] - s->trace[0]) / 1e3);
  if (s->trace && s->trace[6] > s->trace[5] && s->trace[7] >= s->trace[6] && s->trace[7] <= s->trace[1])
    INFO(COMM_INIT,
         "rank %d: COMM_DEV_TRACE: its one-shot fold: thread 0 sent its lines %.2f us after the start, "
         "received its first line %.2f us after the start",
         comm->rank, (s->trace[6] - s->trace[0]) / 1e3, (s->trace[7] - s->trace[0]) / 1e3);
  if (s->trace && s->cachedCalls)
    INFO(COMM_INIT,
         "rank %d: COMM_DEV_TRACE: %lld calls launched a cached plan; per call %.3f us before the launch "
         "(device, error poll, capture status, stream order), %.3f us in the launch, %.3f us after",
         comm->rank, (long long)s->cachedCalls, s->cachedPreNs / 1e3 / s->cachedCalls,
         s->cachedLaunchNs / 1e3 / s->cachedCalls, s->cachedPostNs / 1e3 / s->cachedCalls);
  if (s->trace) {
    char line[512];
    int len = 0;
    uint64_t prev = s->trace[0];
    for (int i = 0; i < COMM_DEV_TRACE_STEPS && s->trace[8 + i] >= prev && s->trace[8 + i] <= s->trace[1]; i++) {
      len += snprintf(line + len, sizeof(line) - (size_t)len, " %.2f", (s->trace[8 + i] - prev) / 1e3);
      prev = s->trace[8 + i];
      if (len >= (int)sizeof(line) - 16) break;
    }
    INFO(COMM_INIT, "rank %d: COMM_DEV_TRACE: channel 0's phases took (us; a step, or steps run as one):%s", comm->rank,
         len ? line : " -");
  }
  commDevPlanBufsFree(s);
  free(s->planCache);
  while (s->scratch) {
    scratchBuf* next = s->scratch->next;
    cudaFree(s->scratch->ptr);
    free(s->scratch);
    s->scratch = next;
  }
  cudaEventDestroy(s->joinIn);
  cudaEventDestroy(s->joinOut);
  cudaFree(s->llStaging);
  cudaStreamDestroy(s->stream);
  cudaFreeHost((void*)s->abortFlag);
  commCudaDevLeave(comm->cudaDev, &g);
  commDevFreeGraphBufs();
  free(s);
  comm->dev = NULL;
}
