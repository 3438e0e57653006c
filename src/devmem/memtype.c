/* Is a pointer CUDA device memory? Asked of the CUDA driver, loaded at run time when present, so that the
 * host-only library needs no CUDA at build or run time. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

#include "debug.h"
#include "devmem.h"

/* Values from the CUDA driver API (cuda.h), which this file does not include. */
#define COMM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define COMM_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define COMM_CU_MEMORYTYPE_DEVICE 2
typedef int (*cuInitFn)(unsigned int);
/* cuPointerGetAttributes (plural), unlike the singular call, succeeds on pointers CUDA does not know
 * (their memory type reads 0), so host buffers raise no CUDA error (compute-sanitizer counts those). */
typedef int (*cuPointerGetAttributesFn)(unsigned int n, int* attributes, void** data, uintptr_t ptr);

static pthread_once_t driverOnce = PTHREAD_ONCE_INIT;
static cuPointerGetAttributesFn pointerGetAttributes;

static void loadDriver(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return;
  cuInitFn init = (cuInitFn)dlsym(lib, "cuInit");
  cuPointerGetAttributesFn get = (cuPointerGetAttributesFn)dlsym(lib, "cuPointerGetAttributes");
  if (init == NULL || get == NULL || init(0) != 0) {
    INFO(COMM_INIT, "CUDA driver present but not usable; all buffers are treated as host memory");
    return;
  }
  pointerGetAttributes = get;
}

int commDevicePointerOrdinal(const void* ptr) {
  if (ptr == NULL) return -1;
  pthread_once(&driverOnce, loadDriver);
  if (pointerGetAttributes == NULL) return -1;
  unsigned int memType = 0;
  int ordinal = -1;
  int attrs[2] = {COMM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, COMM_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void* data[2] = {&memType, &ordinal};
  if (pointerGetAttributes(2, attrs, data, (uintptr_t)ptr) != 0) return -1;
  return memType == COMM_CU_MEMORYTYPE_DEVICE ? ordinal : -1;
}

int commIsDevicePointer(const void* ptr) { return commDevicePointerOrdinal(ptr) >= 0; }

/* The device of the calling thread's current CUDA context, -1 when there is none. Only asked when the
 * process has loaded the CUDA driver already (a program that uses GPUs has): a host-only program never
 * pays for loading or initialising it. */
typedef int (*cuCtxGetCurrentFn)(void** ctx);
typedef int (*cuCtxGetDeviceFn)(int* dev);

int commCudaCurrentDevice(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib == NULL) return -1;
  cuCtxGetCurrentFn getCurrent = (cuCtxGetCurrentFn)dlsym(lib, "cuCtxGetCurrent");
  cuCtxGetDeviceFn getDevice = (cuCtxGetDeviceFn)dlsym(lib, "cuCtxGetDevice");
  void* ctx = NULL;
  int dev = -1;
  if (getCurrent == NULL || getDevice == NULL || getCurrent(&ctx) != 0 || ctx == NULL || getDevice(&dev) != 0) dev = -1;
  dlclose(lib); /* drops the reference RTLD_NOLOAD took; the driver stays loaded */
  return dev;
}
