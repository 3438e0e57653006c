/*
 * libcomm perf harness: device memory through the CUDA driver, loaded at run time (perf links libcomm only,
 * so the tools build and run without CUDA). Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_PERF_DEVICE_H_
#define COMM_PERF_DEVICE_H_

#include <stddef.h>

#include "comm.h"

typedef int perfCuResult_t;
typedef unsigned long long perfCuDeviceptr_t;
typedef void* perfCuGraph_t;                       /* CUgraph */
typedef void* perfCuGraphExec_t;                   /* CUgraphExec */
#define PERF_CU_STREAM_NON_BLOCKING 0x1            /* CU_STREAM_NON_BLOCKING */
#define PERF_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1 /* CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: ranks are threads */

/* The driver's functions the tools call; filled by perfCudaLoad. */
typedef struct {
  perfCuResult_t (*init)(unsigned);
  perfCuResult_t (*deviceGetCount)(int*);
  perfCuResult_t (*deviceGet)(int*, int);
  perfCuResult_t (*deviceGetName)(char*, int, int);
  perfCuResult_t (*deviceGetPCIBusId)(char*, int, int);
  perfCuResult_t (*primaryCtxRetain)(void**, int);
  perfCuResult_t (*ctxSetCurrent)(void*);
  perfCuResult_t (*memAlloc)(perfCuDeviceptr_t*, size_t);
  perfCuResult_t (*memFree)(perfCuDeviceptr_t);
  perfCuResult_t (*memGetInfo)(size_t*, size_t*);
  perfCuResult_t (*memcpyHtoDAsync)(perfCuDeviceptr_t, const void*, size_t, commStream_t);
  perfCuResult_t (*memcpyDtoHAsync)(void*, perfCuDeviceptr_t, size_t, commStream_t);
  perfCuResult_t (*memcpyDtoDAsync)(perfCuDeviceptr_t, perfCuDeviceptr_t, size_t, commStream_t);
  perfCuResult_t (*streamCreate)(commStream_t*, unsigned);
  perfCuResult_t (*streamSynchronize)(commStream_t);
  perfCuResult_t (*streamDestroy)(commStream_t);
  perfCuResult_t (*getErrorString)(perfCuResult_t, const char**);
  /* -G only */
  perfCuResult_t (*streamBeginCapture)(commStream_t, int);
  perfCuResult_t (*streamEndCapture)(commStream_t, perfCuGraph_t*);
  perfCuResult_t (*graphInstantiateWithFlags)(perfCuGraphExec_t*, perfCuGraph_t, unsigned long long);
  perfCuResult_t (*graphLaunch)(perfCuGraphExec_t, commStream_t);
  perfCuResult_t (*graphExecDestroy)(perfCuGraphExec_t);
  perfCuResult_t (*graphDestroy)(perfCuGraph_t);
} perfCu_t;

extern perfCu_t perfCu;

/* -M auto: is there a GPU? Asks the file system and the loader only (no cuInit before -np forks). */
int perfGpuPresent(void);
/* Loads libcuda.so.1 and its functions before any rank starts (graphs: also the -G ones); prints why not
 * (prog, flag: for the message) and returns -1 when it cannot. Runs no CUDA call. */
int perfCudaLoad(const char* prog, const char* flag, int graphs);
const char* perfCuErr(perfCuResult_t r);

#endif /* COMM_PERF_DEVICE_H_ */
