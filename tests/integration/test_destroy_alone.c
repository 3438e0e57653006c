/* test_destroy_alone: commDestroy without commFinalize must not break the peers' last operations.
 *
 * NCCL's users often end with ncclCommDestroy alone: no barrier, so a rank that finished its last call tears
 * its connections down while slower ranks are still in theirs, waiting for data this rank already sent (it may
 * still sit in this rank's FIFO, with the network proxy thread, or in the kernel's socket buffers). Here 6
 * ranks run 200 allreduces and broadcasts of 8 B to 4 MiB, every result checked, and end unsynchronised: before
 * each of the last few calls every rank does busy work of a length that depends on its rank and the round, so
 * some ranks finish and destroy while others are still in the call (correctness never depends on that timing:
 * it only makes the bad orders likely). Every call of every rank must succeed with the right values.
 *
 *   test_destroy_alone shm [rounds]      forked ranks, the shm transport
 *   test_destroy_alone socket [rounds]   forked ranks, COMM_SHM_DISABLE=1: the Socket network
 *   test_destroy_alone ib [rounds]       ranks as threads (the verbs fake connects QPs within a process),
 *                                        COMM_NET=IB over the fake (COMM_IB_FAKE, COMM_IB_FAKE_LIB); 77 without
 *   test_destroy_alone missing-shm|missing-socket [rounds]
 *                                        negative case: rank MISSING_RANK destroys its communicator before
 *                                        its part of the last allreduce (and stays alive): every other rank's
 *                                        allreduce must fail with commRemoteError well within COMM_TIMEOUT_MS,
 *                                        and the ranks that waited on it must say which rank left.
 * In odd rounds of the forked variants a rank exits right after commDestroy; in even rounds it stays alive
 * until every rank is done (so a peer cannot learn of the close from the process's death).
 * Uses the public API only. SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"
#include "itest.h"

#define NRANKS 6
#define NOPS 200
#define NLAST 4 /* the calls preceded by rank-dependent busy work */
#define MAX_BYTES ((size_t)4 << 20)
#define MISSING_RANK 3
#define TIMEOUT_MS 10000

typedef struct {
  int rank;
  int round;
  int missing; /* negative case */
  commUniqueId id;
  int resultFd;  /* forked: one status byte to the parent after commDestroy */
  int releaseFd; /* forked, staying alive: wait here until the parent says every rank is done */
  int status;    /* 0 ok, 1 failed */
} rankArgs;

/* The bytes of call i: mostly small and medium, a 4 MiB call every 25th, and large calls at the end, where a
 * rank's last sends are the most likely to still be queued when it destroys. */
static int opIsBcast(int i, int round);
static int longDelayRound(int round) { return round % 3 == 2; }
static size_t opBytes(int i, int round) {
  /* All of it fits in the root's FIFO; 256 KiB is more than the socket buffers (64 KiB) take, so the root's
   * commDestroy must wait for its late neighbour. */
  if (i == NOPS - 1 && longDelayRound(round)) return (size_t)(round % 2 ? 256 : 128) << 10;
  if (i % 25 == 24 || i >= NOPS - 2) return MAX_BYTES - (size_t)(round % 3) * 4096;
  uint32_t h = (uint32_t)(i * 2654435761u + (uint32_t)round * 40503u);
  return (size_t)8 << ((h >> 11) % 16); /* 8 B .. 256 KiB */
}
/* Broadcast or allreduce, alternating in a pattern that changes with the round; the last call too. */
static int opIsBcast(int i, int round) { return ((i * 7 + round) % 3) == 0; }
static int opRoot(int i, int round) { return (i + round) % NRANKS; }

static int32_t inputValue(int rank, int i, size_t j) { return (int32_t)((rank + 1) * (int)(j % 1009) + i); }

/* Spin (no sleep: the rank stays runnable, as a slow rank computing would) for about ms milliseconds. */
static volatile uint64_t sink;
static void busyWork(double ms) {
  double end = itNowSec() + ms * 1e-3;
  uint64_t x = 1;
  while (itNowSec() < end)
    for (int k = 0; k < 1000; k++) x = x * 6364136223846793005ull + 1442695040888963407ull;
  sink = x;
}

/* Rank r's delay before call i of the last NLAST: a different slowest rank each round and call. Every third
 * round ends with a 128 or 256 KiB broadcast, and there the root's neighbour comes to it LONG_DELAY_MS late: the root
 * has long returned and destroyed, its data still queued (more than the socket buffers hold), and it must
 * still arrive, however long the peer takes, within the timeout. */
#define LONG_DELAY_MS 6500.0
static double lastDelayMs(int rank, int i, int round) {
  if (i == NOPS - 1 && longDelayRound(round) && opIsBcast(i, round) && rank == (opRoot(i, round) + 1) % NRANKS)
    return LONG_DELAY_MS;
  return (double)((rank + i + round) % NRANKS) * 15.0;
}

static int runOp(rankArgs* a, comm_t comm, int32_t* buf, int i) {
  size_t bytes = opBytes(i, a->round);
  size_t n = bytes / sizeof(int32_t);
  int bcast = opIsBcast(i, a->round);
  int root = opRoot(i, a->round);
  for (size_t j = 0; j < n; j++)
    buf[j] = bcast ? (a->rank == root ? inputValue(root, i, j) : -1) : inputValue(a->rank, i, j);
  commResult_t res = bcast ? commBroadcast(buf, buf, n, commInt32, root, comm, NULL)
                           : commAllReduce(buf, buf, n, commInt32, commSum, comm, NULL);
  if (res != commSuccess) {
    fprintf(stderr, "test_destroy_alone: round %d rank %d: call %d (%s of %zu bytes) returned %d: %s\n", a->round,
            a->rank, i, bcast ? "broadcast" : "allreduce", bytes, (int)res, commGetLastError(comm));
    return 1;
  }
  size_t wrong = 0, first = 0;
  for (size_t j = 0; j < n; j++) {
    int64_t want = 0;
    if (bcast) want = inputValue(root, i, j);
    else
      for (int r = 0; r < NRANKS; r++) want += inputValue(r, i, j);
    if (buf[j] != (int32_t)want && wrong++ == 0) first = j;
  }
  if (wrong) {
    fprintf(stderr, "test_destroy_alone: round %d rank %d: call %d (%s of %zu bytes): %zu wrong elements, first %zu\n",
            a->round, a->rank, i, bcast ? "broadcast" : "allreduce", bytes, wrong, first);
    return 1;
  }
  return 0;
}

/* The negative case's last call: every rank but MISSING_RANK (which destroyed before it) must fail with
 * commRemoteError before the timeout. Ranks waiting on the missing rank name it; the others may name a rank
 * that failed after it (they each learn of the failure from their own neighbour). */
static int runMissingOp(rankArgs* a, comm_t comm, int32_t* buf, int* namedMissing) {
  size_t n = ((size_t)1 << 20) / sizeof(int32_t);
  for (size_t j = 0; j < n; j++) buf[j] = inputValue(a->rank, NOPS, j);
  double t0 = itNowSec();
  commResult_t res = commAllReduce(buf, buf, n, commInt32, commSum, comm, NULL);
  double dt = itNowSec() - t0;
  const char* err = commGetLastError(comm);
  char want[64];
  snprintf(want, sizeof(want), "rank %d destroyed its communicator", MISSING_RANK);
  *namedMissing = strstr(err, want) != NULL;
  printf("test_destroy_alone: rank %d: the allreduce without rank %d returned %d after %.2f s: %s\n", a->rank,
         MISSING_RANK, (int)res, dt, err);
  if (res != commRemoteError || dt * 1000.0 > TIMEOUT_MS * 0.8) {
    fprintf(stderr, "test_destroy_alone: rank %d: expected commRemoteError well within %d ms\n", a->rank, TIMEOUT_MS);
    return 1;
  }
  if (strstr(err, "destroyed its communicator") == NULL) {
    fprintf(stderr, "test_destroy_alone: rank %d: the error does not say which rank left\n", a->rank);
    return 1;
  }
  return 0;
}

static void runRank(rankArgs* a) {
  a->status = 1;
  comm_t comm = NULL;
  commResult_t res = commInitRank(&comm, NRANKS, a->id, a->rank);
  if (res != commSuccess) {
    fprintf(stderr, "test_destroy_alone: rank %d: init failed: %s\n", a->rank, commGetLastError(NULL));
    return;
  }
  int32_t* buf = malloc(MAX_BYTES);
  int bad = buf == NULL;
  for (int i = 0; i < NOPS && !bad; i++) {
    if (i >= NOPS - NLAST) busyWork(lastDelayMs(a->rank, i, a->round));
    bad = runOp(a, comm, buf, i);
  }
  int namedMissing = 0;
  if (!bad && a->missing && a->rank == MISSING_RANK) {
    /* Leaves before its part of the next allreduce: the peers must find out. */
  } else if (!bad && a->missing) {
    bad = runMissingOp(a, comm, buf, &namedMissing);
  }
  res = commDestroy(comm); /* no commFinalize */
  if (res != commSuccess) {
    fprintf(stderr, "test_destroy_alone: rank %d: commDestroy returned %d\n", a->rank, (int)res);
    bad = 1;
  }
  free(buf);
  a->status = bad ? 1 : 0;
  if (!bad && namedMissing) a->status = 2; /* ok, and named the missing rank */
}

/* ---------------------------------------------------------------- forked ranks */

static int readByte(int fd, char* c) {
  for (;;) {
    ssize_t r = read(fd, c, 1);
    if (r == 1) return 0;
    if (r < 0 && errno == EINTR) continue;
    return -1;
  }
}

/* 0 when every rank passed (the negative case: and some rank named the missing one). */
static int runForked(int round, int missing) {
  int stay = round % 2 == 0;
  int idPipe[NRANKS][2], resultPipe[2], releasePipe[2];
  pid_t pid[NRANKS];
  if (pipe(resultPipe) != 0 || pipe(releasePipe) != 0) return 2;
  fflush(NULL);
  /* Fork first, then make the id (no libcomm thread in the parent while it forks). */
  for (int r = 0; r < NRANKS; r++) {
    if (pipe(idPipe[r]) != 0) return 2;
    pid[r] = fork();
    if (pid[r] < 0) return 2;
    if (pid[r] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      close(idPipe[r][1]);
      close(resultPipe[0]);
      close(releasePipe[1]);
      rankArgs a = {.rank = r, .round = round, .missing = missing};
      if (read(idPipe[r][0], &a.id, sizeof(a.id)) != (ssize_t)sizeof(a.id)) _exit(3);
      runRank(&a);
      char st = (char)('0' + a.status);
      if (write(resultPipe[1], &st, 1) != 1) _exit(3);
      if (stay) {
        char c;
        (void)readByte(releasePipe[0], &c); /* EOF when the parent releases everyone */
      }
      _exit(a.status == 1 ? 1 : 0);
    }
    close(idPipe[r][0]);
  }
  close(resultPipe[1]);
  close(releasePipe[0]);
  commUniqueId id;
  if (commGetUniqueId(&id) != commSuccess) return 2;
  for (int r = 0; r < NRANKS; r++) {
    if (write(idPipe[r][1], &id, sizeof(id)) != (ssize_t)sizeof(id)) return 2;
    close(idPipe[r][1]);
  }
  int failed = 0, named = 0;
  for (int r = 0; r < NRANKS; r++) {
    char st;
    if (readByte(resultPipe[0], &st) != 0) break; /* a rank died: its status below says so */
    failed |= st == '1';
    named |= st == '2';
  }
  close(releasePipe[1]);
  close(resultPipe[0]);
  for (int r = 0; r < NRANKS; r++) {
    int status = 0;
    waitpid(pid[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "test_destroy_alone: round %d: rank %d ended with status 0x%x\n", round, r, status);
      failed = 1;
    }
  }
  if (missing && !failed && !named) {
    fprintf(stderr, "test_destroy_alone: round %d: no rank named rank %d as the one that left\n", round, MISSING_RANK);
    failed = 1;
  }
  return failed;
}

/* ---------------------------------------------------------------- ranks as threads */

static void* threadMain(void* arg) {
  runRank((rankArgs*)arg);
  return NULL;
}

static int runThreads(int round) {
  rankArgs a[NRANKS];
  pthread_t th[NRANKS];
  commUniqueId id;
  if (commGetUniqueId(&id) != commSuccess) return 2;
  for (int r = 0; r < NRANKS; r++) {
    a[r] = (rankArgs){.rank = r, .round = round, .id = id};
    if (pthread_create(&th[r], NULL, threadMain, &a[r]) != 0) return 2;
  }
  int failed = 0;
  for (int r = 0; r < NRANKS; r++) {
    pthread_join(th[r], NULL);
    failed |= a[r].status == 1;
  }
  return failed;
}

static int usage(void) {
  fprintf(stderr, "usage: test_destroy_alone shm|socket|ib|missing-shm|missing-socket [rounds]\n");
  return 2;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) return usage();
  const char* variant = argv[1];
  int rounds = argc > 2 ? atoi(argv[2]) : 2;
  if (rounds < 1) return usage();
  int missing = strncmp(variant, "missing-", 8) == 0;
  const char* transport = missing ? variant + 8 : variant;
  unsetenv("COMM_RANK");
  unsetenv("COMM_NRANKS");
  unsetenv("COMM_ROOT");
  char timeout[32];
  snprintf(timeout, sizeof(timeout), "%d", TIMEOUT_MS);
  setenv("COMM_TIMEOUT_MS", timeout, 1);
  if (!strcmp(transport, "shm")) {
    unsetenv("COMM_SHM_DISABLE");
  } else if (!strcmp(transport, "socket")) {
    setenv("COMM_SHM_DISABLE", "1", 1);
    setenv("COMM_NET", "Socket", 1);
    /* Small socket buffers: a rank's last sends cannot all be in the kernel when its call returns. */
    if (!getenv("COMM_SOCKET_BUFSIZE")) setenv("COMM_SOCKET_BUFSIZE", "65536", 1);
  } else if (!strcmp(transport, "ib") && !missing) {
    const char* lib = getenv("COMM_IB_FAKE_LIB");
    if (lib == NULL || access(lib, R_OK) != 0) {
      printf("test_destroy_alone: SKIP: no verbs fake module (COMM_IB_FAKE_LIB)\n");
      return 77;
    }
    setenv("COMM_SHM_DISABLE", "1", 1);
    setenv("COMM_NET", "IB", 1);
    if (getenv("COMM_IB_FAKE") == NULL) setenv("COMM_IB_FAKE", "1", 1);
  } else {
    return usage();
  }
  alarm((unsigned)(60 + 40 * rounds)); /* a hang kills the test (the forked ranks die with it) */
  int fails = 0;
  for (int round = 0; round < rounds; round++) {
    double t0 = itNowSec();
    int failed = !strcmp(transport, "ib") ? runThreads(round) : runForked(round, missing);
    printf("test_destroy_alone: %s: round %d: %s (%.1f s)\n", variant, round, failed ? "FAIL" : "pass",
           itNowSec() - t0);
    fails += failed != 0;
  }
  printf("test_destroy_alone: %s: %d of %d rounds failed: %s\n", variant, fails, rounds, fails ? "FAIL" : "PASS");
  return fails ? 1 : 0;
}
