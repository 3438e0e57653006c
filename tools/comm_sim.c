/* comm_sim: build the schedules of every rank of a collective at any scale, verify them symbolically
 * (matching, deadlock freedom, exact results) and print what they cost in steps and bytes.
 *
 *   comm_sim -c allreduce -n 1024 -N 1048576 [-a ring|oneshot|pairwise] [-C channels] [-t float]
 *            [-r root] [-s slotBytes] [-p]      (-p: print rank 0's schedule)
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "reduce.h"
#include "schedule.h"

static const struct {
  const char* name;
  commFunc_t func;
} funcs[] = {{"allreduce", commFuncAllReduce},         {"broadcast", commFuncBroadcast},
             {"reduce", commFuncReduce},               {"allgather", commFuncAllGather},
             {"reducescatter", commFuncReduceScatter}, {"alltoall", commFuncAllToAll}};

static void usage(const char* prog) {
  fprintf(stderr,
          "usage: %s -c allreduce|broadcast|reduce|allgather|reducescatter|alltoall -n nranks -N count\n"
          "          [-a ring|oneshot|pairwise] [-C channels (1)] [-t type (float32)] [-r root (0)]\n"
          "          [-s slotBytes (524288)] [-p]\n",
          prog);
}

int main(int argc, char** argv) {
  commCollArgs a;
  memset(&a, 0, sizeof(a));
  a.func = commNumFuncs;
  a.nRanks = 0;
  a.nChannels = 1;
  const char* algo = NULL;
  commDataType_t type = commFloat32;
  size_t slotBytes = 512 * 1024;
  int print = 0, opt;
  long long count = -1;
  while ((opt = getopt(argc, argv, "c:n:N:a:C:t:r:s:ph")) != -1) {
    switch (opt) {
      case 'c':
        for (size_t i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++)
          if (strcmp(optarg, funcs[i].name) == 0) a.func = funcs[i].func;
        break;
      case 'n': a.nRanks = atoi(optarg); break;
      case 'N': count = atoll(optarg); break;
      case 'a': algo = optarg; break;
      case 'C': a.nChannels = atoi(optarg); break;
      case 't':
        type = commNumTypes;
        for (int t = 0; t < commNumTypes; t++)
          if (strcmp(optarg, commTypeName((commDataType_t)t)) == 0) type = (commDataType_t)t;
        break;
      case 'r': a.root = atoi(optarg); break;
      case 's': slotBytes = (size_t)atoll(optarg); break;
      case 'p': print = 1; break;
      default: usage(argv[0]); return opt == 'h' ? 0 : 2;
    }
  }
  if (a.func == commNumFuncs || a.nRanks < 1 || count < 0 || type == commNumTypes || a.nChannels < 1 ||
      a.nChannels > COMM_MAX_CHANNELS || a.root < 0 || a.root >= a.nRanks || slotBytes < 64) {
    usage(argv[0]);
    return 2;
  }
  a.count = (size_t)count;
  a.eltSize = commTypeSize(type);
  a.isReduction = a.func == commFuncAllReduce || a.func == commFuncReduce || a.func == commFuncReduceScatter;
  size_t piece = slotBytes / a.eltSize;
  if (piece == 0) piece = 1;
  a.chunkElems = piece * 4; /* half of an 8-slot FIFO, as the executor */
  int* ring = calloc((size_t)a.nRanks, sizeof(int));
  if (ring == NULL) return 1;
  for (int i = 0; i < a.nRanks; i++) ring[i] = i;
  for (int c = 0; c < a.nChannels; c++) a.ringRanks[c] = ring;

  commSchedBuilder_t build = commRingBuild;
  if (algo == NULL) algo = a.func == commFuncAllToAll ? "pairwise" : "ring";
  if (strcmp(algo, "oneshot") == 0) {
    build = commOneShotBuild;
    a.nChannels = 1;
  } else if (strcmp(algo, "pairwise") == 0) {
    build = commAllToAllBuild;
  } else if (strcmp(algo, "ring") != 0) {
    fprintf(stderr, "comm_sim: unknown algorithm %s\n", algo);
    return 2;
  }
  if (print) {
    commSchedule s;
    a.rank = 0;
    if (build(&a, &s) == commSuccess) {
      commSchedPrint(&s, 0, stdout);
      commSchedFree(&s);
    }
  }
  commVerifyStats st;
  commResult_t res = commVerifyColl(&a, build, piece * 8, piece, &st);
  printf("%s %s nranks %d count %zu %s channels %d: %s\n", commFuncName(a.func), algo, a.nRanks, a.count,
         commTypeName(type), a.nChannels, res == commSuccess ? "VERIFIED" : "FAILED");
  if (res != commSuccess) {
    printf("  %s\n", commLogLastWarn());
    free(ring);
    return 1;
  }
  printf("  steps per channel (max) %zu, bytes sent: max per rank %zu, total %zu\n", st.maxStepsPerChannel,
         st.maxBytesSent, st.totalBytesSent);
  free(ring);
  return 0;
}
