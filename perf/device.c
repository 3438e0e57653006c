/*
 * libcomm perf harness: the CUDA driver, loaded at run time (see device.h). Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "device.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

perfCu_t perfCu;

const char* perfCuErr(perfCuResult_t r) {
  const char* s = NULL;
  if (perfCu.getErrorString) perfCu.getErrorString(r, &s);
  return s ? s : "unknown CUDA error";
}

/* A GPU is present when the NVIDIA driver lists one (/proc/driver/nvidia/gpus/<pci id>, or /dev/nvidia0)
 * and libcuda.so.1 loads (it stays loaded: perfCudaLoad opens it again). A machine without a GPU pays
 * nothing. */
int perfGpuPresent(void) {
  int found = access("/dev/nvidia0", F_OK) == 0;
  DIR* d = opendir("/proc/driver/nvidia/gpus");
  if (d) {
    struct dirent* e;
    while (!found && (e = readdir(d)) != NULL) found = e->d_name[0] != '.';
    closedir(d);
  }
  if (!found) return 0;
  if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
    dlerror();
    return 0;
  }
  return 1;
}

int perfCudaLoad(const char* prog, const char* flag, int graphs) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    fprintf(stderr, "%s: %s: %s: cannot load the CUDA driver (%s)\n", prog, flag, commGetErrorString(commInvalidUsage),
            dlerror());
    return -1;
  }
#define CU_SYM(field, name)                                                 \
  do {                                                                      \
    *(void**)&perfCu.field = dlsym(h, name);                                \
    if (!perfCu.field) {                                                    \
      fprintf(stderr, "%s: %s: libcuda.so.1 lacks %s\n", prog, flag, name); \
      return -1;                                                            \
    }                                                                       \
  } while (0)
  CU_SYM(init, "cuInit");
  CU_SYM(deviceGetCount, "cuDeviceGetCount");
  CU_SYM(deviceGet, "cuDeviceGet");
  CU_SYM(deviceGetName, "cuDeviceGetName");
  CU_SYM(deviceGetPCIBusId, "cuDeviceGetPCIBusId");
  CU_SYM(primaryCtxRetain, "cuDevicePrimaryCtxRetain");
  CU_SYM(ctxSetCurrent, "cuCtxSetCurrent");
  CU_SYM(memAlloc, "cuMemAlloc_v2");
  CU_SYM(memFree, "cuMemFree_v2");
  CU_SYM(memGetInfo, "cuMemGetInfo_v2");
  CU_SYM(memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  CU_SYM(memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  CU_SYM(memcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  CU_SYM(streamCreate, "cuStreamCreate");
  CU_SYM(streamSynchronize, "cuStreamSynchronize");
  CU_SYM(streamDestroy, "cuStreamDestroy_v2");
  CU_SYM(getErrorString, "cuGetErrorString");
  if (graphs > 0) {
    CU_SYM(streamBeginCapture, "cuStreamBeginCapture_v2");
    CU_SYM(streamEndCapture, "cuStreamEndCapture");
    CU_SYM(graphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
    CU_SYM(graphLaunch, "cuGraphLaunch");
    CU_SYM(graphExecDestroy, "cuGraphExecDestroy");
    CU_SYM(graphDestroy, "cuGraphDestroy");
  }
#undef CU_SYM
  return 0; /* cuInit waits for the ranks: CUDA does not survive fork() */
}
