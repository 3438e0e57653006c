/* test_mismatch: ranks that call different collectives fail, on every rank involved, before a byte of a user
 * buffer is written wrongly, with a WARN naming both calls; commGetAsyncError reports it.
 *  (a) both ranks broadcast as root, then an allreduce of ones: no rank returns a wrong sum;
 *  (b) allreduce on rank 0 against broadcast (root 1) on rank 1;
 *  (c) sum on one rank against max on the other (2 and 4 ranks);
 *  (d) float32 on one rank against int32 on the other (the same bytes: sizes alone do not tell);
 *  (e) out of turn: allreduce then allgather on rank 0, allgather then allreduce on rank 1.
 * Over shm and over sockets (COMM_SHM_DISABLE=1). Uses the public API only. SPDX-License-Identifier: Apache-2.0 */
#include "rtest.h"

#define MISMATCH_PROG "test_mismatch"
#include "mismatch_cases.h"

static void rankMain(int rank, int nranks, comm_t* commp, void* arg, rtReport* out) {
  comm_t comm = *commp;
  caseId c = *(const caseId*)arg;
  float send[COUNT], recv[COUNT];
  commResult_t first = commSuccess, second = commSuccess;
  for (int i = 0; i < COUNT; i++) recv[i] = SENTINEL;
  switch (c) {
    case CASE_TWO_ROOTS:
      for (int i = 0; i < COUNT; i++) send[i] = 100.0f + (float)rank;
      first = commBroadcast(send, send, COUNT, commFloat32, rank, comm, NULL);
      for (int i = 0; i < COUNT; i++) send[i] = 1.0f;
      second = commAllReduce(send, recv, COUNT, commFloat32, commSum, comm, NULL);
      break;
    case CASE_ALLREDUCE_BCAST:
      for (int i = 0; i < COUNT; i++) send[i] = rank == 0 ? 1.0f : 100.0f;
      if (rank == 0) first = commAllReduce(send, recv, COUNT, commFloat32, commSum, comm, NULL);
      else first = commBroadcast(send, send, COUNT, commFloat32, 1, comm, NULL);
      break;
    case CASE_SUM_MAX:
      for (int i = 0; i < COUNT; i++) send[i] = 1.0f;
      first = commAllReduce(send, recv, COUNT, commFloat32, rank == 0 ? commMax : commSum, comm, NULL);
      break;
    case CASE_TYPES:
      for (int i = 0; i < COUNT; i++) send[i] = 1.0f;
      first = commAllReduce(send, recv, COUNT, rank == 0 ? commFloat32 : commInt32, commSum, comm, NULL);
      break;
    case CASE_OUT_OF_TURN:
      for (int i = 0; i < COUNT; i++) send[i] = 1.0f;
      if (rank == 0) {
        first = commAllReduce(send, recv, COUNT, commFloat32, commSum, comm, NULL);
      } else {
        float gathered[COUNT * 2];
        first = commAllGather(send, gathered, COUNT / 2, commFloat32, comm, NULL);
      }
      break;
  }
  commResult_t failed = first != commSuccess ? first : second;
  /* Two ranks: each checks the other's data before writing a byte. With more, a rank that reduces the data of
   * several peers (one-shot) may have added a matching peer's before it meets the mismatched one; it fails
   * all the same, and the check is that no rank returns success. */
  int wrong = nranks == 2 ? countWrong(recv, COUNT, (float)nranks) : 0;
  /* A rank that only sent (a broadcast root) returned success; it must hear of the mismatch now. */
  commResult_t asyncErr = awaitAsyncError(comm, 5.0);
  out->result = failed;
  const char* why = commGetLastError(comm);
  snprintf(out->message, sizeof(out->message), "first %d second %d async %d wrong %d: %s", (int)first, (int)second,
           (int)asyncErr, wrong, why);
  out->status = wrong != 0 || asyncErr == commSuccess || strstr(why, "mismatched calls") == NULL;
  /* The communicator refuses further work with that error. */
  if (commAllReduce(send, recv, COUNT, commFloat32, commSum, comm, NULL) == commSuccess) out->status = 1;
  commAbort(comm);
  *commp = NULL;
}

static void runCase(caseId c, int nranks) {
  rtReport reps[RT_MAX_RANKS];
  caseId arg = c;
  int r0 = rtRun(nranks, rankMain, &arg, 60, reps);
  CHECK(r0 == 0, "%s, %d ranks: a rank died or hung", caseNames[c], nranks);
  int anyFailed = 0;
  for (int r = 0; r < nranks; r++) {
    anyFailed |= reps[r].result != commSuccess;
    CHECK(reps[r].status == 0, "%s, %d ranks, rank %d: %s", caseNames[c], nranks, r, reps[r].message);
    printf("test_mismatch: %s (%s, %d ranks) rank %d: %s\n", caseNames[c],
           getenv("COMM_SHM_DISABLE") ? "sockets" : "shm", nranks, r, reps[r].message);
  }
  CHECK(anyFailed, "%s, %d ranks: every rank returned commSuccess", caseNames[c], nranks);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  unsetenv("COMM_RANK");
  unsetenv("COMM_NRANKS");
  unsetenv("COMM_ROOT");
  setenv("COMM_TIMEOUT_MS", "10000", 1);
  for (int transport = 0; transport < 2; transport++) {
    if (transport == 1) setenv("COMM_SHM_DISABLE", "1", 1);
    runCase(CASE_TWO_ROOTS, 2);
    runCase(CASE_ALLREDUCE_BCAST, 2);
    runCase(CASE_SUM_MAX, 2);
    runCase(CASE_SUM_MAX, 4);
    runCase(CASE_TYPES, 2);
    runCase(CASE_OUT_OF_TURN, 2);
  }
  printf("test_mismatch: %s\n", failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
