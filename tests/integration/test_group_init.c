/* One thread sets up, uses and tears down several communicators whose ranks wait on each other: init,
 * split and finalize inside commGroupStart/End are deferred to the group's end and run together (as NCCL
 * programs that drive all local GPUs from one thread do). */
#include <comm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 4
static int failures;
#define CHECK(cond, ...)                          \
  do {                                            \
    if (!(cond)) {                                \
      fprintf(stderr, "test_group_init: FAIL: "); \
      fprintf(stderr, __VA_ARGS__);               \
      fprintf(stderr, "\n");                      \
      failures++;                                 \
    }                                             \
  } while (0)
#define OK(call) CHECK((call) == commSuccess, "%s: %s", #call, commGetLastError(NULL))

int main(void) {
  comm_t comms[N], halves[N];
  commUniqueId id;
  OK(commGetUniqueId(&id));
  /* Init of all ranks from one thread: without the group every commInitRank would wait for the others. */
  OK(commGroupStart());
  for (int r = 0; r < N; r++) OK(commInitRank(&comms[r], N, id, r));
  for (int r = 0; r < N; r++) CHECK(comms[r] == NULL, "rank %d: comm set before commGroupEnd", r);
  OK(commGroupEnd());
  for (int r = 0; r < N; r++) {
    int rank = -1, count = -1;
    CHECK(comms[r] != NULL, "rank %d: no comm after commGroupEnd", r);
    if (comms[r] == NULL) return 1;
    OK(commUserRank(comms[r], &rank));
    OK(commCount(comms[r], &count));
    CHECK(rank == r && count == N, "rank %d: commUserRank %d commCount %d", r, rank, count);
  }
  /* A collective on all of them. */
  float in[N][5], out[N][5];
  for (int r = 0; r < N; r++)
    for (int i = 0; i < 5; i++) in[r][i] = (float)(r + i);
  OK(commGroupStart());
  for (int r = 0; r < N; r++) OK(commAllReduce(in[r], out[r], 5, commFloat, commSum, comms[r], NULL));
  OK(commGroupEnd());
  for (int r = 0; r < N; r++)
    for (int i = 0; i < 5; i++)
      CHECK(out[r][i] == (float)(N * (N - 1) / 2 + N * i), "allreduce rank %d [%d] = %g", r, i, out[r][i]);
  /* Split in a group: even and odd ranks, the last rank opts out. */
  OK(commGroupStart());
  for (int r = 0; r < N; r++) OK(commSplit(comms[r], r == N - 1 ? COMM_SPLIT_NOCOLOR : r % 2, -r, &halves[r], NULL));
  OK(commGroupEnd());
  CHECK(halves[N - 1] == NULL, "the rank without a color got a communicator");
  for (int r = 0; r < N - 1; r++) {
    int count = -1, rank = -1;
    CHECK(halves[r] != NULL, "rank %d: no split communicator", r);
    if (halves[r] == NULL) return 1;
    OK(commCount(halves[r], &count));
    OK(commUserRank(halves[r], &rank));
    int expectCount = r % 2 == 0 ? (N - 1 + 1) / 2 : (N - 1) / 2;
    CHECK(count == expectCount, "split rank %d: count %d, expected %d", r, count, expectCount);
    /* key -r reverses the order within a color */
    int members = 0, before = 0;
    for (int q = 0; q < N - 1; q++)
      if (q % 2 == r % 2) {
        members++;
        if (q > r) before++;
      }
    CHECK(rank == before && members == count, "split rank %d: new rank %d, expected %d", r, rank, before);
  }
  /* Finalize everything in one group, then destroy. */
  OK(commGroupStart());
  for (int r = 0; r < N - 1; r++) OK(commFinalize(halves[r]));
  for (int r = 0; r < N; r++) OK(commFinalize(comms[r]));
  OK(commGroupEnd());
  for (int r = 0; r < N - 1; r++) OK(commDestroy(halves[r]));
  for (int r = 0; r < N; r++) OK(commDestroy(comms[r]));
  printf("test_group_init: %s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
  return failures != 0;
}
