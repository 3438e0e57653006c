/* test_shrink_gather: commGather, commScatter, commGroupSimulateEnd and commShrink through the public API,
 * 4 ranks as processes (COMM_TIMEOUT_MS=3000, alarm 120 s):
 *  - gather and scatter with roots 0 and 3, 1 and 1000 elements, float32 and int8, every element checked;
 *    a bad root is commInvalidArgument on every rank (nothing sent, nobody waits);
 *  - a group of an allreduce and an allgather ended by commGroupSimulateEnd: an estimate above 0, the
 *    receive buffer untouched; simulating with no group, or an inner group, is commInvalidUsage;
 *  - rank 3 then leaves (exits). The survivors' allreduce on the parent fails (the peer is gone) within
 *    the timeout, and commShrink (COMM_SHRINK_ABORT) excluding rank 3 still works (an earlier error does
 *    not refuse it): a 3-rank communicator whose allreduce is right. Excluding oneself is commInvalidArgument.
 * SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"

#define NR 4
static int me, bad;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "test_shrink_gather: rank %d: line %d: ", me, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      bad = 1;                                                                 \
    }                                                                          \
  } while (0)

static void gatherScatter(comm_t comm) {
  static const size_t counts[2] = {1, 1000};
  static const int roots[2] = {0, NR - 1};
  for (int ci = 0; ci < 2; ci++) {
    for (int ri = 0; ri < 2; ri++) {
      size_t n = counts[ci];
      int root = roots[ri];
      float* s = malloc(NR * n * sizeof(float));
      float* r = malloc(NR * n * sizeof(float));
      for (size_t i = 0; i < NR * n; i++) s[i] = (float)(me * 10000 + (int)i), r[i] = -1.0f;
      CHECK(commGather(s, r, n, commFloat32, root, comm, NULL) == commSuccess, "gather: %s", commGetLastError(comm));
      if (me == root)
        for (int p = 0; p < NR; p++)
          for (size_t i = 0; i < n; i++)
            CHECK(r[p * n + i] == (float)(p * 10000 + (int)i), "gather root %d [%d][%zu] = %g", root, p, i,
                  r[p * n + i]);
      CHECK(commScatter(s, r, n, commFloat32, root, comm, NULL) == commSuccess, "scatter: %s", commGetLastError(comm));
      for (size_t i = 0; i < n; i++)
        CHECK(r[i] == (float)(root * 10000 + (int)(me * n + i)), "scatter root %d [%zu] = %g", root, i, r[i]);
      signed char cs[NR * 8], cr[NR * 8];
      for (int i = 0; i < NR * 8; i++) cs[i] = (signed char)(me * 8 + i % 8), cr[i] = 0;
      CHECK(commGather(cs, cr, 7, commInt8, root, comm, NULL) == commSuccess, "int8 gather");
      if (me == root)
        for (int p = 0; p < NR; p++)
          for (int i = 0; i < 7; i++) CHECK(cr[p * 7 + i] == (signed char)(p * 8 + i), "int8 gather [%d][%d]", p, i);
      free(s);
      free(r);
    }
  }
  float x = 0;
  CHECK(commGather(&x, &x, 1, commFloat32, NR, comm, NULL) == commInvalidArgument, "a bad root");
}

static void simulate(comm_t comm) {
  float s[64], r[64], us = -1;
  for (int i = 0; i < 64; i++) s[i] = 1.0f, r[i] = -1.0f;
  CHECK(commGroupSimulateEnd(&us) == commInvalidUsage, "simulating with no group");
  commGroupStart();
  CHECK(commAllReduce(s, r, 64, commFloat32, commSum, comm, NULL) == commSuccess, "allreduce in a group");
  CHECK(commAllGather(s, r, 16, commFloat32, comm, NULL) == commSuccess, "allgather in a group");
  CHECK(commGroupSimulateEnd(&us) == commSuccess, "simulate: %s", commGetLastError(comm));
  CHECK(us > 0 && r[0] == -1.0f, "estimate %g us, recvbuff %g", us, r[0]);
  commGroupStart();
  commGroupStart();
  CHECK(commGroupSimulateEnd(&us) == commInvalidUsage, "simulating an inner group");
  CHECK(commGroupEnd() == commSuccess && commGroupEnd() == commSuccess, "closing the groups");
}

static int runRank(const commUniqueId* id) {
  comm_t comm = NULL;
  if (commInitRank(&comm, NR, *id, me) != commSuccess) return 1;
  gatherScatter(comm);
  simulate(comm);
  if (me == NR - 1) {
    int self = me;
    comm_t none = NULL;
    CHECK(commShrink(comm, &self, 1, &none, NULL, COMM_SHRINK_DEFAULT) == commInvalidArgument && none == NULL,
          "excluding oneself");
    return bad; /* leaves: its peers go on without it */
  }
  /* The parent's allreduce now fails: rank 3 is gone. */
  float x = 1.0f, y = 0.0f;
  commResult_t r = commAllReduce(&x, &y, 1, commFloat32, commSum, comm, NULL);
  CHECK(r != commSuccess, "an allreduce with a departed rank succeeded");
  int excl = NR - 1;
  comm_t small = NULL;
  r = commShrink(comm, &excl, 1, &small, NULL, COMM_SHRINK_ABORT);
  CHECK(r == commSuccess && small != NULL, "shrink: %d %s", (int)r, commGetLastError(comm));
  if (small) {
    int n = 0, rank = -1;
    commCount(small, &n);
    commUserRank(small, &rank);
    CHECK(n == NR - 1 && rank == me, "shrunk: %d ranks, rank %d", n, rank);
    x = (float)(me + 1);
    y = 0;
    CHECK(commAllReduce(&x, &y, 1, commFloat32, commSum, small, NULL) == commSuccess && y == 6.0f,
          "allreduce on the shrunk communicator: %g", y);
    commFinalize(small);
    commDestroy(small);
  }
  commAbort(comm); /* the parent has a departed rank: no finalize barrier */
  return bad;
}

int main(void) {
  setenv("COMM_TIMEOUT_MS", "3000", 0);
  pid_t pid[NR];
  int fds[NR][2];
  for (int r = 0; r < NR; r++) { /* fork first: no library thread in the parent while forking */
    if (pipe(fds[r]) != 0 || (pid[r] = fork()) < 0) return 2;
    if (pid[r] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      alarm(120);
      me = r;
      close(fds[r][1]);
      commUniqueId id;
      if (read(fds[r][0], &id, sizeof(id)) != (ssize_t)sizeof(id)) _exit(3);
      _exit(runRank(&id) ? 1 : 0);
    }
    close(fds[r][0]);
  }
  commUniqueId id;
  int ok = commGetUniqueId(&id) == commSuccess;
  for (int r = 0; r < NR; r++) {
    if (!ok || write(fds[r][1], &id, sizeof(id)) != (ssize_t)sizeof(id)) kill(pid[r], SIGKILL);
    close(fds[r][1]);
  }
  int fail = !ok;
  for (int r = 0; r < NR; r++) {
    int st = 0;
    waitpid(pid[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "test_shrink_gather: rank %d ended with status 0x%x\n", r, st);
      fail = 1;
    }
  }
  printf("test_shrink_gather: %s\n", fail ? "FAIL" : "PASS");
  return fail;
}
