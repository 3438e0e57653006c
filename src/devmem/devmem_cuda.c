/* Memory the CUDA executor's transports use (devmem.h): host memory the kernels address (the
 * shm and net transports' device connections), device memory for network FIFOs with GPUDirect RDMA, the
 * proxy thread's GPU binding, and the copies the verbs fake makes into and out of GPU memory. */
#include <cuda_runtime_api.h>
#include <string.h>

#include "check.h"
#include "cuda_util.h"
#include "devmem.h"

/* ---- Host memory the kernels address (the shm and net transports' device connections) ---- */

/* Run fn with cudaDev current and the caller's graph capture (if any) relaxed: connections are made on
 * first use, which may be inside a capture. */
#define WITH_DEV(cudaDev, stmt)                                   \
  do {                                                            \
    commCudaDevGuard g_;                                          \
    COMMCHECK(commCudaDevEnter(cudaDev, &g_));                    \
    enum cudaStreamCaptureMode m_ = cudaStreamCaptureModeRelaxed; \
    cudaThreadExchangeStreamCaptureMode(&m_);                     \
    stmt;                                                         \
    cudaThreadExchangeStreamCaptureMode(&m_);                     \
    commCudaDevLeave(cudaDev, &g_);                               \
  } while (0)

/* Release p with fn (cudaFreeHost, cudaHostUnregister, cudaFree) while cudaDev is current; nothing for NULL. */
static void releaseOnDev(int cudaDev, cudaError_t (*fn)(void*), void* p) {
  if (p == NULL) return;
  commCudaDevGuard g;
  if (commCudaDevEnter(cudaDev, &g) != commSuccess) return;
  fn(p);
  commCudaDevLeave(cudaDev, &g);
}

void commDevHostFree(int cudaDev, void* host) { releaseOnDev(cudaDev, cudaFreeHost, host); }
void commDevHostUnregister(int cudaDev, void* host) { releaseOnDev(cudaDev, cudaHostUnregister, host); }
void commDevMemFree(int cudaDev, void* ptr) { releaseOnDev(cudaDev, cudaFree, ptr); }

commResult_t commDevHostAlloc(int cudaDev, size_t bytes, void** host, void** dev) {
  cudaError_t e = cudaSuccess;
  *host = *dev = NULL;
  WITH_DEV(cudaDev, {
    e = cudaHostAlloc(host, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaSuccess) e = cudaHostGetDevicePointer(dev, *host, 0);
  });
  if (e != cudaSuccess) {
    if (*host) cudaFreeHost(*host);
    *host = *dev = NULL;
    return commCudaFail("cudaHostAlloc of a FIFO in mapped host memory", e);
  }
  memset(*host, 0, bytes);
  return commSuccess;
}

commResult_t commDevHostRegister(int cudaDev, void* host, size_t bytes, void** dev) {
  cudaError_t e = cudaSuccess;
  *dev = NULL;
  WITH_DEV(cudaDev, {
    e = cudaHostRegister(host, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e == cudaSuccess) {
      e = cudaHostGetDevicePointer(dev, host, 0);
      if (e != cudaSuccess) cudaHostUnregister(host);
    }
  });
  if (e != cudaSuccess) {
    *dev = NULL;
    return commCudaFail("cudaHostRegister of a shared FIFO", e);
  }
  return commSuccess;
}

commResult_t commDevMemAlloc(int cudaDev, size_t bytes, void** ptr) {
  cudaError_t e = cudaSuccess;
  *ptr = NULL;
  WITH_DEV(cudaDev, {
    e = cudaMalloc(ptr, bytes);
    if (e == cudaSuccess) e = cudaMemset(*ptr, 0, bytes);
  });
  if (e != cudaSuccess) {
    if (*ptr) commDevMemFree(cudaDev, *ptr);
    *ptr = NULL;
    return commCudaFail("cudaMalloc of a FIFO in device memory", e);
  }
  return commSuccess;
}

commResult_t commDevBindThread(int cudaDev) {
  CUDACHECK(cudaSetDevice(cudaDev));
  return commSuccess;
}

/* A stream of this thread's own, for commDevCopy: non-blocking, so the copy never queues behind kernels of
 * the legacy default stream (a spinning kernel may be waiting for this very copy). */
static __thread cudaStream_t copyStream;

int commDevCopy(void* dst, const void* src, size_t bytes) {
  enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&m);
  cudaError_t e = copyStream ? cudaSuccess : cudaStreamCreateWithFlags(&copyStream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, copyStream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(copyStream);
  cudaThreadExchangeStreamCaptureMode(&m);
  return (int)e;
}
