/* Time, allocation, hashing, host identity, randomness, polite waiting. */
#include "utils.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "debug.h"
#include "param.h"

int64_t commTimeNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t commDeadlineNs(int64_t timeoutMs) {
  if (timeoutMs < 0) return COMM_NO_DEADLINE;
  if (timeoutMs > (INT64_MAX - commTimeNs()) / 1000000) return COMM_NO_DEADLINE;
  return commTimeNs() + timeoutMs * 1000000LL;
}

commResult_t commCalloc(void* ptrOut, size_t nelem, size_t elemSize) {
  void* p = NULL;
  if (nelem != 0 && elemSize != 0) {
    if (nelem > SIZE_MAX / elemSize) {
      WARN("allocation of %zu x %zu bytes overflows", nelem, elemSize);
      return commSystemError;
    }
    p = calloc(nelem, elemSize);
    if (p == NULL) {
      WARN("failed to allocate %zu bytes", nelem * elemSize);
      return commSystemError;
    }
  }
  *(void**)ptrOut = p;
  return commSuccess;
}

commResult_t commRealloc(void* ptrInOut, size_t oldNelem, size_t newNelem, size_t elemSize) {
  if (newNelem > SIZE_MAX / elemSize) {
    WARN("allocation of %zu x %zu bytes overflows", newNelem, elemSize);
    return commSystemError;
  }
  void* old = *(void**)ptrInOut;
  void* p = realloc(old, newNelem * elemSize);
  if (p == NULL && newNelem != 0) {
    WARN("failed to allocate %zu bytes", newNelem * elemSize);
    return commSystemError;
  }
  if (newNelem > oldNelem) memset((char*)p + oldNelem * elemSize, 0, (newNelem - oldNelem) * elemSize);
  *(void**)ptrInOut = p;
  return commSuccess;
}

/* FNV-1a followed by a 64-bit finaliser (splitmix). */
uint64_t commHashBytes(const void* data, size_t n, uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ull ^ seed;
  const unsigned char* p = (const unsigned char*)data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

uint64_t commHashString(const char* s, uint64_t seed) { return commHashBytes(s, strlen(s), seed); }

uint64_t commHostHash(void) {
  const char* forced = commParamStr("COMM_HOSTID", NULL);
  if (forced != NULL) return commHashString(forced, 0x686f7374ull);
  char id[512];
  size_t o = 0;
  if (gethostname(id, 128) != 0) snprintf(id, 128, "unknown-host");
  id[127] = '\0';
  o = strlen(id);
  /* The boot id tells two machines with one hostname apart. */
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, id + o, 64);
    if (n > 0) o += (size_t)n;
    close(fd);
  }
  /* The network namespace: ranks in different namespaces cannot share loopback, so they are treated as
   * different hosts (this is also how tests build several hosts on one machine). */
  struct stat st;
  if (stat("/proc/self/ns/net", &st) == 0) {
    o += (size_t)snprintf(id + o, sizeof(id) - o, ":netns%llu", (unsigned long long)st.st_ino);
  }
  return commHashBytes(id, o, 0x686f7374ull);
}

commResult_t commRandom64(uint64_t* out) {
  uint64_t v = 0;
  size_t got = 0;
  while (got < sizeof(v)) {
    ssize_t n = getrandom((char*)&v + got, sizeof(v) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      WARN("getrandom failed: %s", strerror(errno));
      return commSystemError;
    }
    got += (size_t)n;
  }
  *out = v;
  return commSuccess;
}

void commBackoffWait(commBackoff* b) {
  if (b->spins < 256) {
    b->spins++;
    commCpuRelax();
  } else {
    /* More ranks than cores: give the core to whoever we are waiting for. */
    sched_yield();
  }
}
