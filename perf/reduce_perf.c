/* reduce_perf: commReduce bandwidth and correctness. SPDX-License-Identifier: Apache-2.0 */
#include "common.h"

static double busBw(int n) {
  (void)n;
  return 1.0;
}

static commResult_t run(const perfCallArgs_t* a) {
  return commReduce(a->sendbuff, a->recvbuff, a->count, a->type, a->op, a->root, a->comm, a->stream);
}

/* only the root's output is defined */
static int source(int rank, int nranks, int root, size_t count, size_t j, int* srcRank, size_t* srcIdx) {
  (void)nranks, (void)count;
  *srcRank = -1;
  *srcIdx = j;
  return rank == root;
}

static const perfColl_t coll = {.name = "Reduce",
                                .usesOp = 1,
                                .usesRoot = 1,
                                .sizeIsTotal = 0,
                                .sendMul = 1,
                                .recvMul = 1,
                                .inPlace = perfInPlaceSame,
                                .busBwFactor = busBw,
                                .run = run,
                                .source = source};

int main(int argc, char** argv) { return perfMain(&coll, argc, argv); }
