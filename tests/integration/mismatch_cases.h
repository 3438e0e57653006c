/* What test_mismatch (host buffers) and test_gpu_mismatch (device buffers) share: the mismatched calls
 * they make, what a rank may hold after one, how a rank that only sent learns of it, and the failure count.
 * Include after rtest.h; define MISMATCH_PROG (the program's name, for messages) first.
 * SPDX-License-Identifier: Apache-2.0 */
#ifndef MISMATCH_CASES_H_
#define MISMATCH_CASES_H_

#include <stdio.h>
#include <time.h>

#include "comm.h"

#define COUNT 100
#define SENTINEL -7.0f

static int failures;
#define CHECK(cond, ...)                                      \
  do {                                                        \
    if (!(cond)) {                                            \
      failures++;                                             \
      fprintf(stderr, MISMATCH_PROG ":%d: FAIL: ", __LINE__); \
      fprintf(stderr, __VA_ARGS__);                           \
      fprintf(stderr, "\n");                                  \
    }                                                         \
  } while (0)

/* (a) both ranks broadcast as root, then an allreduce of ones; (b) allreduce on rank 0 against broadcast
 * (root 1) on rank 1; (c) sum on one rank against max on the other; (d) float32 against int32 (the same
 * bytes: sizes alone do not tell); (e) out of turn: allreduce on rank 0, allgather on rank 1. */
typedef enum { CASE_TWO_ROOTS, CASE_ALLREDUCE_BCAST, CASE_SUM_MAX, CASE_TYPES, CASE_OUT_OF_TURN } caseId;
static const char* caseNames[] = {"two roots", "allreduce vs broadcast", "sum vs max", "float vs int", "out of turn"};

/* Values a rank may hold in an allreduce of ones that failed: untouched, its own one, or the right sum. Any
 * other value came from the other rank's mismatched data. */
static inline int countWrong(const float* buf, int n, float rightSum) {
  int wrong = 0;
  for (int i = 0; i < n; i++) wrong += buf[i] != SENTINEL && buf[i] != 1.0f && buf[i] != rightSum;
  return wrong;
}

/* A rank whose own part of the mismatched operation only sent learns of it from the rank that found it: its
 * async error turns within the limit. */
static inline commResult_t awaitAsyncError(comm_t comm, double limitSec) {
  double t0 = rtNow();
  commResult_t err = commSuccess;
  while (rtNow() - t0 < limitSec) {
    if (commGetAsyncError(comm, &err) != commSuccess) return commInternalError;
    if (err != commSuccess) return err;
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return err;
}

#endif
