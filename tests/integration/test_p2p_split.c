/* test_p2p_split: point-to-point where the two ranks of a pair make their connections in different rounds.
 *
 * Over the network transport a rank that makes both directions to a peer in one connect round may pair
 * them on shared resources (the socket plugin shares one TCP socket); pairing must only happen when the
 * peer does the same. Here 4 ranks (COMM_SHM_DISABLE=1, so every pair uses sockets; 0 and 2 are not ring
 * neighbours): rank 0 posts send(2) and recv(2) in one group, rank 2 calls send(0) and then recv(0) as two
 * separate calls, so rank 0 makes both directions in one round and rank 2 in two. Then the reverse roles
 * (rank 2 grouped, rank 0 split), then both grouped, 3 rounds each, small and large messages. Every
 * message is checked; a disagreement on pairing hangs or fails (COMM_TIMEOUT_MS=10000, alarm 120 s).
 * Uses the public API only. SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"

#define NR 4

static unsigned char pat(size_t i, int from, int round) {
  return (unsigned char)(i * 131u + (unsigned)from * 7u + (unsigned)round);
}

/* One exchange between ranks a and b (the others do nothing): `grouped` says which of them posts both
 * directions in one group; the other calls send, then recv. Fresh communicators each time, so that every
 * exchange makes its connections. */
static int exchange(comm_t comm, int rank, int peer, int grouped, size_t bytes, int round) {
  unsigned char* out = malloc(bytes);
  unsigned char* in = malloc(bytes);
  if (!out || !in) return 1;
  for (size_t i = 0; i < bytes; i++) out[i] = pat(i, rank, round);
  memset(in, 0, bytes);
  commResult_t r1, r2 = commSuccess;
  if (grouped) {
    commGroupStart();
    r1 = commSend(out, bytes, commUint8, peer, comm, NULL);
    if (r1 == commSuccess) r2 = commRecv(in, bytes, commUint8, peer, comm, NULL);
    commResult_t g = commGroupEnd();
    if (r1 == commSuccess && r2 == commSuccess) r2 = g;
  } else {
    r1 = commSend(out, bytes, commUint8, peer, comm, NULL);
    if (r1 == commSuccess) r2 = commRecv(in, bytes, commUint8, peer, comm, NULL);
  }
  int bad = r1 != commSuccess || r2 != commSuccess;
  for (size_t i = 0; i < bytes && !bad; i++) bad = in[i] != pat(i, peer, round);
  if (bad)
    fprintf(stderr, "test_p2p_split: rank %d <-> %d (%s, %zu B, round %d) failed: %d %d %s\n", rank, peer,
            grouped ? "grouped" : "split", bytes, round, (int)r1, (int)r2, commGetLastError(comm));
  free(out);
  free(in);
  return bad;
}

static int runRank(int rank, const commUniqueId* ids) {
  static const size_t sizes[] = {8, 100000, 3 << 20};
  int bad = 0;
  /* case 0: rank 0 grouped, rank 2 split; case 1: the reverse; case 2: both grouped */
  for (int c = 0; c < 3 && !bad; c++) {
    for (int round = 0; round < 3 && !bad; round++) {
      comm_t comm = NULL;
      if (commInitRank(&comm, NR, ids[c * 3 + round], rank) != commSuccess) {
        fprintf(stderr, "test_p2p_split: rank %d: init failed: %s\n", rank, commGetLastError(NULL));
        return 2;
      }
      if (rank == 0 || rank == 2) {
        int grouped = c == 2 || (c == 0 && rank == 0) || (c == 1 && rank == 2);
        for (int s = 0; s < 3 && !bad; s++) bad = exchange(comm, rank, 2 - rank, grouped, sizes[s], round);
      }
      if (bad) {
        commAbort(comm);
        return 1;
      }
      if (commFinalize(comm) != commSuccess || commDestroy(comm) != commSuccess) return 1;
    }
  }
  return bad;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  alarm(120);
  unsetenv("COMM_RANK");
  unsetenv("COMM_NRANKS");
  setenv("COMM_SHM_DISABLE", "1", 1);
  setenv("COMM_TIMEOUT_MS", "10000", 0);
  /* Every communicator needs its own id: one per (case, round), made in the parent after the forks (no
   * libcomm thread while forking) and sent to every rank. */
  commUniqueId ids[9];
  int idPipe[NR][2];
  pid_t pid[NR];
  fflush(NULL);
  for (int r = 0; r < NR; r++) {
    if (pipe(idPipe[r]) != 0) return 2;
    pid[r] = fork();
    if (pid[r] < 0) return 2;
    if (pid[r] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      close(idPipe[r][1]);
      if (read(idPipe[r][0], ids, sizeof(ids)) != (ssize_t)sizeof(ids)) _exit(3);
      _exit(runRank(r, ids));
    }
    close(idPipe[r][0]);
  }
  for (int k = 0; k < 9; k++)
    if (commGetUniqueId(&ids[k]) != commSuccess) return 2;
  for (int r = 0; r < NR; r++) {
    if (write(idPipe[r][1], ids, sizeof(ids)) != (ssize_t)sizeof(ids)) return 2;
    close(idPipe[r][1]);
  }
  int failed = 0;
  for (int r = 0; r < NR; r++) {
    int status = 0;
    waitpid(pid[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "test_p2p_split: FAIL: rank %d ended with status 0x%x\n", r, status);
      failed = 1;
    }
  }
  printf("test_p2p_split: %s\n", failed ? "FAIL" : "PASS");
  return failed;
}
