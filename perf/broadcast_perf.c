/* broadcast_perf: commBroadcast bandwidth and correctness. SPDX-License-Identifier: Apache-2.0 */
#include "common.h"

static double busBw(int n) {
  (void)n;
  return 1.0;
}

static commResult_t run(const perfCallArgs_t* a) {
  return commBroadcast(a->sendbuff, a->recvbuff, a->count, a->type, a->root, a->comm, a->stream);
}

/* every rank receives the root's input */
static int source(int rank, int nranks, int root, size_t count, size_t j, int* srcRank, size_t* srcIdx) {
  (void)rank, (void)nranks, (void)count;
  *srcRank = root;
  *srcIdx = j;
  return 1;
}

static const perfColl_t coll = {.name = "Broadcast",
                                .usesOp = 0,
                                .usesRoot = 1,
                                .sizeIsTotal = 0,
                                .sendMul = 1,
                                .recvMul = 1,
                                .inPlace = perfInPlaceSame,
                                .busBwFactor = busBw,
                                .run = run,
                                .source = source};

int main(int argc, char** argv) { return perfMain(&coll, argc, argv); }
