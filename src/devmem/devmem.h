/* Device memory, the one leaf interface the layers above use for it: what a pointer is (memtype.c, asked of
 * the CUDA driver when the process has loaded it), host memory the kernels address, device memory, copies,
 * and a thread's GPU binding (devmem_cuda.c with the CUDA toolkit, devmem_none.c without: every call then
 * fails with commInvalidUsage and a WARN). Calls nothing but the ground layer and CUDA. */
#ifndef COMM_DEVMEM_H_
#define COMM_DEVMEM_H_

#include <stddef.h>
#include "comm.h"

/* memtype.c: 1 if ptr is CUDA device memory (only detectable when the CUDA driver is present). */
int commIsDevicePointer(const void* ptr);
/* The CUDA device ordinal of device memory at ptr, -1 if it is not device memory. */
int commDevicePointerOrdinal(const void* ptr);
/* CUDA device of the calling thread's current context; -1 without one (or without a loaded driver). */
int commCudaCurrentDevice(void);

/* Host memory the kernels of GPU cudaDev address (the shm and net transports' device connections keep
 * their FIFOs there): *host for the CPU, *dev for the kernel. Alloc: new pinned, mapped, zeroed memory;
 * Register: memory the caller has (a shared mapping), registered mapped. Free / Unregister at teardown
 * only (they wait for the device). */
commResult_t commDevHostAlloc(int cudaDev, size_t bytes, void** host, void** dev);
void commDevHostFree(int cudaDev, void* host);
commResult_t commDevHostRegister(int cudaDev, void* host, size_t bytes, void** dev);
void commDevHostUnregister(int cudaDev, void* host);
/* Device memory on cudaDev, zeroed (a network FIFO's slots with GPUDirect RDMA), and its release. */
commResult_t commDevMemAlloc(int cudaDev, size_t bytes, void** ptr);
void commDevMemFree(int cudaDev, void* ptr);
/* Copy bytes where either side may be device memory, synchronously, on a non-blocking stream of the calling
 * thread (the verbs fake's RDMA into and out of GPU memory). cudaError_t (0: done). */
int commDevCopy(void* dst, const void* src, size_t bytes);
/* Make cudaDev the calling thread's current GPU (a proxy thread that flushes GPUDirect RDMA writes). */
commResult_t commDevBindThread(int cudaDev);

#endif
