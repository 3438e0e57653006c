/* Device memory in a build without CUDA (no toolkit, or a sanitizer build): device buffers never get this
 * far, because the API refuses them first; each call still fails cleanly with a WARN. */
#ifndef COMM_HAVE_CUDA
#include "debug.h"
#include "devmem.h"

static commResult_t noDeviceMemory(const char* what) {
  WARN("%s: this libcomm was built without CUDA", what);
  return commInvalidUsage;
}

commResult_t commDevHostAlloc(int cudaDev, size_t bytes, void** host, void** dev) {
  (void)cudaDev, (void)bytes, (void)host, (void)dev;
  return noDeviceMemory("commDevHostAlloc");
}
void commDevHostFree(int cudaDev, void* host) { (void)cudaDev, (void)host; }
commResult_t commDevHostRegister(int cudaDev, void* host, size_t bytes, void** dev) {
  (void)cudaDev, (void)host, (void)bytes, (void)dev;
  return noDeviceMemory("commDevHostRegister");
}
void commDevHostUnregister(int cudaDev, void* host) { (void)cudaDev, (void)host; }
commResult_t commDevMemAlloc(int cudaDev, size_t bytes, void** ptr) {
  (void)cudaDev, (void)bytes, *ptr = NULL;
  return noDeviceMemory("commDevMemAlloc");
}
void commDevMemFree(int cudaDev, void* ptr) { (void)cudaDev, (void)ptr; }
commResult_t commDevBindThread(int cudaDev) {
  (void)cudaDev;
  return noDeviceMemory("commDevBindThread");
}
int commDevCopy(void* dst, const void* src, size_t bytes) {
  (void)dst, (void)src, (void)bytes;
  return 1;
}
#else
typedef int commDevmemNoneUnused; /* ISO C wants something in a translation unit */
#endif
