/* Is a pointer CUDA device memory? Asked of the CUDA driver, loaded at run time when present, so that the
 * host-only library needs no CUDA at build or run time. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

#include "debug.h"
#include "enqueue.h"

/* Values from the CUDA driver API (cuda.h), which this file does not include. */
#define COMM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define COMM_CU_MEMORYTYPE_DEVICE 2
typedef int (*cuInitFn)(unsigned int);
typedef int (*cuPointerGetAttributeFn)(void* data, int attribute, uintptr_t ptr);

static pthread_once_t driverOnce = PTHREAD_ONCE_INIT;
static cuPointerGetAttributeFn pointerGetAttribute;

static void loadDriver(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return;
  cuInitFn init = (cuInitFn)dlsym(lib, "cuInit");
  cuPointerGetAttributeFn get = (cuPointerGetAttributeFn)dlsym(lib, "cuPointerGetAttribute");
  if (init == NULL || get == NULL || init(0) != 0) {
    INFO(COMM_INIT, "CUDA driver present but not usable; all buffers are treated as host memory");
    return;
  }
  pointerGetAttribute = get;
}

int commIsDevicePointer(const void* ptr) {
  if (ptr == NULL) return 0;
  pthread_once(&driverOnce, loadDriver);
  if (pointerGetAttribute == NULL) return 0;
  unsigned int memType = 0;
  /* Host memory unknown to CUDA makes the call fail: that is host memory. */
  if (pointerGetAttribute(&memType, COMM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (uintptr_t)ptr) != 0) return 0;
  return memType == COMM_CU_MEMORYTYPE_DEVICE;
}
