/* test_sender_leaves: a rank whose send has returned may stop calling libcomm; its data must still arrive.
 *
 * commSend returns once the message is in the connection's FIFO, not once it has left the host: over the
 * network transport the last FIFO slots (several MiB) may still be waiting for socket buffer space. The
 * network proxy thread moves them while the executor is away. Here rank 0 sends 48 MiB to rank 1 over
 * sockets (COMM_SHM_DISABLE=1), then blocks in read() on a pipe, making no libcomm call, until rank 1
 * reports that its commRecv completed with the right data. Socket buffers are kept small (64 KiB) so that
 * the data cannot all sit in the kernel when commSend returns. Without the proxy, rank 1 would time out
 * (COMM_TIMEOUT_MS=5000) and this test fails. Repeated with the helper-thread path (COMM_SOCKET_INLINE=64K).
 * Uses the public API only. SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE
#include <errno.h>
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

#define SL_BYTES ((size_t)48 << 20)
#define SL_ROUNDS 3

static unsigned char pattern(size_t i, int round) { return (unsigned char)((i * 2654435761u >> 13) + (unsigned)round); }

static int readByte(int fd, char* c) {
  for (;;) {
    ssize_t r = read(fd, c, 1);
    if (r == 1) return 0;
    if (r < 0 && errno == EINTR) continue;
    return -1;
  }
}

/* Rank 0 sends, then waits on `done` for rank 1's verdict; rank 1 receives, checks, answers on `done`. */
static int runRank(int rank, commUniqueId id, int doneRead, int doneWrite) {
  comm_t comm = NULL;
  commResult_t res = commInitRank(&comm, 2, id, rank);
  if (res != commSuccess) {
    fprintf(stderr, "test_sender_leaves: rank %d: init failed: %s\n", rank, commGetLastError(NULL));
    return 2;
  }
  unsigned char* buf = malloc(SL_BYTES);
  if (!buf) return 2;
  int bad = 0;
  for (int round = 0; round < SL_ROUNDS && !bad; round++) {
    if (rank == 0) {
      for (size_t i = 0; i < SL_BYTES; i++) buf[i] = pattern(i, round);
      res = commSend(buf, SL_BYTES, commUint8, 1, comm, NULL);
      if (res != commSuccess) {
        fprintf(stderr, "test_sender_leaves: round %d: commSend returned %d: %s\n", round, (int)res,
                commGetLastError(comm));
        bad = 1;
        break;
      }
      /* Away from libcomm until the receiver says how it went. */
      char verdict;
      if (readByte(doneRead, &verdict) != 0 || verdict != 'y') {
        fprintf(stderr, "test_sender_leaves: round %d: the receiver did not get the message\n", round);
        bad = 1;
      }
    } else {
      memset(buf, 0, SL_BYTES);
      double t0 = itNowSec();
      res = commRecv(buf, SL_BYTES, commUint8, 0, comm, NULL);
      double dt = itNowSec() - t0;
      size_t wrong = 0;
      for (size_t i = 0; i < SL_BYTES && res == commSuccess; i++) wrong += buf[i] != pattern(i, round);
      if (res != commSuccess || wrong) {
        fprintf(stderr, "test_sender_leaves: round %d: commRecv returned %d after %.2f s, %zu wrong bytes: %s\n", round,
                (int)res, dt, wrong, commGetLastError(comm));
        bad = 1;
      } else {
        printf("test_sender_leaves: round %d: 48 MiB received in %.3f s while the sender was away\n", round, dt);
      }
      char verdict = bad ? 'n' : 'y';
      if (write(doneWrite, &verdict, 1) != 1) bad = 1;
    }
  }
  free(buf);
  if (bad) {
    commAbort(comm);
    return 1;
  }
  res = commFinalize(comm);
  commResult_t d = commDestroy(comm);
  return res == commSuccess && d == commSuccess ? 0 : 1;
}

static int runCase(const char* inlineBytes) {
  printf("test_sender_leaves: COMM_SOCKET_INLINE=%s\n", inlineBytes ? inlineBytes : "<default>");
  if (inlineBytes) setenv("COMM_SOCKET_INLINE", inlineBytes, 1);
  else unsetenv("COMM_SOCKET_INLINE");
  int idPipe[2][2], done[2];
  pid_t pid[2];
  if (pipe(done) != 0) return 2;
  fflush(NULL);
  /* Fork first, then make the id (no libcomm thread in the parent while it forks). */
  for (int r = 0; r < 2; r++) {
    if (pipe(idPipe[r]) != 0) return 2;
    pid[r] = fork();
    if (pid[r] < 0) return 2;
    if (pid[r] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      close(idPipe[r][1]);
      commUniqueId id;
      if (read(idPipe[r][0], &id, sizeof(id)) != (ssize_t)sizeof(id)) _exit(3);
      _exit(runRank(r, id, done[0], done[1]));
    }
    close(idPipe[r][0]);
  }
  close(done[0]);
  close(done[1]);
  commUniqueId id;
  if (commGetUniqueId(&id) != commSuccess) return 2;
  for (int r = 0; r < 2; r++) {
    if (write(idPipe[r][1], &id, sizeof(id)) != (ssize_t)sizeof(id)) return 2;
    close(idPipe[r][1]);
  }
  int failed = 0;
  for (int r = 0; r < 2; r++) {
    int status = 0;
    waitpid(pid[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "test_sender_leaves: FAIL: rank %d ended with status 0x%x\n", r, status);
      failed = 1;
    }
  }
  return failed;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  alarm(120); /* a hang kills the test (the ranks die with it) */
  unsetenv("COMM_RANK");
  unsetenv("COMM_NRANKS");
  unsetenv("COMM_ROOT");
  setenv("COMM_SHM_DISABLE", "1", 1);
  setenv("COMM_TIMEOUT_MS", "5000", 1);
  /* Small socket buffers: the FIFO's last slots (4 MiB) cannot all be handed to the kernel before
   * commSend returns. */
  setenv("COMM_SOCKET_BUFSIZE", "65536", 1);
  int failed = runCase(NULL);
  failed |= runCase("64K");
  printf("test_sender_leaves: %s\n", failed ? "FAIL" : "PASS");
  return failed ? 1 : 0;
}
