/* test_watchdog: the PyTorch watchdog pattern. Two ranks (threads of this process, commInitAll) run
 * allreduces in worker threads; a watchdog thread polls commGetAsyncError, commGetLastError, commCount,
 * commUserRank and commCuDevice on both communicators without pause; the main thread aborts both while all
 * of that runs. Every call must return (an error once the handle is gone), nothing may read freed memory
 * (run under ASan and ThreadSanitizer: scripts/test.sh), and the workers' calls end with an error.
 * Events are ordered by counters the threads advance, not by sleeps. Uses the public API only.
 * SPDX-License-Identifier: Apache-2.0 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"

#define NRANKS 2
#define COUNT 4096
#define ROUNDS 3

static comm_t comms[NRANKS];
static int opsDone[NRANKS]; /* allreduces completed by each worker */
static int workerResult[NRANKS];
static int polls; /* watchdog rounds */
static int stopWatchdog;
static int failures;

#define FAIL(...)                                       \
  do {                                                  \
    __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED); \
    fprintf(stderr, "test_watchdog: FAIL: ");           \
    fprintf(stderr, __VA_ARGS__);                       \
    fprintf(stderr, "\n");                              \
  } while (0)

static void* worker(void* arg) {
  int r = (int)(intptr_t)arg;
  float* buf = malloc(COUNT * sizeof(float));
  if (buf == NULL) return NULL;
  for (int i = 0; i < COUNT; i++) buf[i] = 1.0f;
  commResult_t res = commSuccess;
  while (res == commSuccess) {
    res = commAllReduce(buf, buf, COUNT, commFloat32, commSum, comms[r], NULL);
    if (res == commSuccess) __atomic_fetch_add(&opsDone[r], 1, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&workerResult[r], (int)res, __ATOMIC_RELEASE);
  free(buf);
  return NULL;
}

static void* watchdog(void* arg) {
  (void)arg;
  while (!__atomic_load_n(&stopWatchdog, __ATOMIC_ACQUIRE)) {
    for (int r = 0; r < NRANKS; r++) {
      comm_t c = __atomic_load_n(&comms[r], __ATOMIC_ACQUIRE);
      commResult_t err = commSuccess;
      int v = 0;
      (void)commGetAsyncError(c, &err);
      (void)commCount(c, &v);
      (void)commUserRank(c, &v);
      (void)commCuDevice(c, &v);
      const char* msg = commGetLastError(c);
      if (msg == NULL) FAIL("commGetLastError returned NULL");
      else if (strlen(msg) > 4096) FAIL("commGetLastError returned an unterminated string");
    }
    __atomic_fetch_add(&polls, 1, __ATOMIC_RELEASE);
  }
  return NULL;
}

static void waitFor(int* counter, int atLeast) {
  while (__atomic_load_n(counter, __ATOMIC_ACQUIRE) < atLeast) sched_yield();
}

static int runRound(int round) {
  if (commInitAll(comms, NRANKS, NULL) != commSuccess) {
    FAIL("round %d: commInitAll: %s", round, commGetLastError(NULL));
    return 1;
  }
  memset(opsDone, 0, sizeof(opsDone));
  __atomic_store_n(&polls, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&stopWatchdog, 0, __ATOMIC_RELEASE);
  pthread_t w[NRANKS], wd;
  for (int r = 0; r < NRANKS; r++) pthread_create(&w[r], NULL, worker, (void*)(intptr_t)r);
  pthread_create(&wd, NULL, watchdog, NULL);
  /* Abort while every thread is busy: each worker has completed some allreduces (so they are in the loop)
   * and the watchdog has polled. */
  for (int r = 0; r < NRANKS; r++) waitFor(&opsDone[r], 20);
  waitFor(&polls, 20);
  for (int r = 0; r < NRANKS; r++) {
    comm_t c = comms[r];
    if (commAbort(c) != commSuccess) FAIL("round %d: commAbort of rank %d failed", round, r);
  }
  /* The watchdog goes on polling the dead handles for a while: errors, not crashes. */
  int seen = __atomic_load_n(&polls, __ATOMIC_ACQUIRE);
  waitFor(&polls, seen + 50);
  for (int r = 0; r < NRANKS; r++) pthread_join(w[r], NULL);
  __atomic_store_n(&stopWatchdog, 1, __ATOMIC_RELEASE);
  pthread_join(wd, NULL);
  for (int r = 0; r < NRANKS; r++) {
    if (workerResult[r] == commSuccess) FAIL("round %d: worker %d ended with success", round, r);
    printf("test_watchdog: round %d: rank %d did %d allreduces, then %s\n", round, r, opsDone[r],
           commGetErrorString((commResult_t)workerResult[r]));
  }
  commResult_t err;
  if (commGetAsyncError(comms[0], &err) == commSuccess) FAIL("round %d: a destroyed handle answered", round);
  return 0;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  unsetenv("COMM_ROOT");
  setenv("COMM_TIMEOUT_MS", "20000", 0);
  for (int round = 0; round < ROUNDS; round++) runRound(round);
  printf("test_watchdog: %s\n", failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
