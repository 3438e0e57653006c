#ifndef COMM_UTILS_H_
#define COMM_UTILS_H_

#include <stddef.h>
#include <stdint.h>
#include "comm.h"

#define COMM_NO_DEADLINE INT64_MAX

/* Monotonic clock in nanoseconds. */
int64_t commTimeNs(void);
/* now + ms (ms < 0: no deadline). */
int64_t commDeadlineNs(int64_t timeoutMs);

/* Allocation: returns commSystemError with a WARN on failure; memory is zeroed. */
commResult_t commCalloc(void* ptrOut, size_t nelem, size_t elemSize);
commResult_t commRealloc(void* ptrInOut, size_t oldNelem, size_t newNelem, size_t elemSize);

uint64_t commHashBytes(const void* data, size_t n, uint64_t seed);
uint64_t commHashString(const char* s, uint64_t seed);
/* Identity of this host: hostname, boot id and network namespace (or COMM_HOSTID when set). */
uint64_t commHostHash(void);
/* Random 64-bit value from the OS. */
commResult_t commRandom64(uint64_t* out);

/* Atomics on plain fields, usable from C and CUDA C++. */
#define COMM_LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define COMM_LOAD_RLX(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define COMM_STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define COMM_STORE_RLX(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

static inline void commCpuRelax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Waiting politely: spin for a while, then yield the CPU, so that more ranks than cores still progress. */
typedef struct {
  uint32_t spins;
} commBackoff;
void commBackoffWait(commBackoff* b);
static inline void commBackoffReset(commBackoff* b) { b->spins = 0; }

#endif
