/* allreduce_perf: commAllReduce bandwidth and correctness. SPDX-License-Identifier: Apache-2.0 */
#include "common.h"

static double busBw(int n) { return 2.0 * (n - 1) / n; }

static commResult_t run(const perfCallArgs_t* a) {
  return commAllReduce(a->sendbuff, a->recvbuff, a->count, a->type, a->op, a->comm, a->stream);
}

static int source(int rank, int nranks, int root, size_t count, size_t j, int* srcRank, size_t* srcIdx) {
  (void)rank, (void)nranks, (void)root, (void)count;
  *srcRank = -1;
  *srcIdx = j;
  return 1;
}

static const perfColl_t coll = {.name = "AllReduce",
                                .usesOp = 1,
                                .usesRoot = 0,
                                .sizeIsTotal = 0,
                                .sendMul = 1,
                                .recvMul = 1,
                                .inPlace = perfInPlaceSame,
                                .busBwFactor = busBw,
                                .run = run,
                                .source = source};

int main(int argc, char** argv) { return perfMain(&coll, argc, argv); }
