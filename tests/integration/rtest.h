/* A small harness for the reliability tests: fork n ranks, hand them a unique id through pipes, run a
 * function in each with its initialised communicator, collect what each reports. Public API only.
 * SPDX-License-Identifier: Apache-2.0 */
#ifndef RTEST_H_
#define RTEST_H_

#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"

#define RT_MAX_RANKS 16

/* What a rank sends back to the parent. */
typedef struct {
  int status; /* 0: the rank's checks passed */
  int result; /* a commResult_t the case wants to see */
  double seconds;
  double failedAt; /* CLOCK_MONOTONIC seconds when the failing call returned (0: none failed) */
  char message[480];
} rtReport;

/* Runs in each rank's process with its communicator; fills *out. The rank then destroys comm unless the
 * function set *comm to NULL (it destroyed or aborted it itself). */
typedef void (*rtRankFn)(int rank, int nranks, comm_t* comm, void* arg, rtReport* out);
/* Optional: runs in each rank's process just before commInitRank (a fault test arms its fault there). */
static void (*rtBeforeInit)(int rank, void* arg);

static inline double rtNow(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int rtReadAll(int fd, void* buf, size_t n) {
  char* p = (char*)buf;
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static inline int rtWriteAll(int fd, const void* buf, size_t n) {
  const char* p = (const char*)buf;
  while (n > 0) {
    ssize_t r = write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

/* Fork nranks ranks running fn; reports[r] gets rank r's report. Returns 0 when every rank reported (a rank
 * that died or hung past watchdogSec gets status -1 and a message). victim >= 0: that rank is expected to
 * die or stop; it is read last and then killed, so that a stopped one does not hold the others up. */
static inline int rtRunVictim(int nranks, rtRankFn fn, void* arg, int watchdogSec, int victim, rtReport* reports) {
  int idPipe[RT_MAX_RANKS][2], repPipe[RT_MAX_RANKS][2];
  pid_t pid[RT_MAX_RANKS];
  fflush(NULL);
  for (int r = 0; r < nranks; r++) {
    if (pipe(idPipe[r]) != 0 || pipe(repPipe[r]) != 0) return -1;
    pid[r] = fork();
    if (pid[r] < 0) return -1;
    if (pid[r] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      alarm((unsigned)watchdogSec);
      close(idPipe[r][1]);
      close(repPipe[r][0]);
      rtReport rep;
      memset(&rep, 0, sizeof(rep));
      commUniqueId id;
      if (rtReadAll(idPipe[r][0], &id, sizeof(id)) != 0) _exit(3);
      comm_t comm = NULL;
      if (rtBeforeInit != NULL) rtBeforeInit(r, arg);
      commResult_t res = commInitRank(&comm, nranks, id, r);
      if (res != commSuccess) {
        rep.status = 1;
        rep.result = res;
        rep.failedAt = rtNow();
        snprintf(rep.message, sizeof(rep.message), "init failed: %s", commGetLastError(NULL));
      } else {
        fn(r, nranks, &comm, arg, &rep);
        if (comm != NULL) commDestroy(comm);
      }
      _exit(rtWriteAll(repPipe[r][1], &rep, sizeof(rep)) == 0 ? 0 : 4);
    }
    close(idPipe[r][0]);
    close(repPipe[r][1]);
  }
  commUniqueId id;
  int failed = commGetUniqueId(&id) != commSuccess;
  for (int r = 0; r < nranks; r++) {
    if (!failed) failed = rtWriteAll(idPipe[r][1], &id, sizeof(id)) != 0;
    close(idPipe[r][1]);
  }
  for (int i = 0; i < nranks; i++) {
    int r = victim >= 0 ? (victim + 1 + i) % nranks : i; /* the victim last */
    if (r == victim) {
      reports[r].status = -1;
      snprintf(reports[r].message, sizeof(reports[r].message), "the victim");
      kill(pid[r], SIGKILL);
      close(repPipe[r][0]);
      continue;
    }
    memset(&reports[r], 0, sizeof(reports[r]));
    if (rtReadAll(repPipe[r][0], &reports[r], sizeof(reports[r])) != 0) {
      reports[r].status = -1;
      snprintf(reports[r].message, sizeof(reports[r].message), "the rank died or hung (no report)");
      failed = 1;
    }
    close(repPipe[r][0]);
  }
  for (int r = 0; r < nranks; r++) {
    int st = 0;
    waitpid(pid[r], &st, 0);
  }
  return failed ? -1 : 0;
}

static inline int rtRun(int nranks, rtRankFn fn, void* arg, int watchdogSec, rtReport* reports) {
  return rtRunVictim(nranks, fn, arg, watchdogSec, -1, reports);
}

#endif
