/* allgather_perf: commAllGather bandwidth and correctness. SPDX-License-Identifier: Apache-2.0 */
#include "common.h"

static double busBw(int n) { return (double)(n - 1) / n; }

static commResult_t run(const perfCallArgs_t* a) {
  return commAllGather(a->sendbuff, a->recvbuff, a->count, a->type, a->comm, a->stream);
}

/* recvbuff[p * count + i] = input i of rank p */
static int source(int rank, int nranks, int root, size_t count, size_t j, int* srcRank, size_t* srcIdx) {
  (void)rank, (void)nranks, (void)root;
  *srcRank = (int)(j / count);
  *srcIdx = j % count;
  return 1;
}

static const perfColl_t coll = {.name = "AllGather",
                                .usesOp = 0,
                                .usesRoot = 0,
                                .sizeIsTotal = 1,
                                .sendMul = 1,
                                .recvMul = 0,
                                .inPlace = perfInPlaceSendInRecv,
                                .busBwFactor = busBw,
                                .run = run,
                                .source = source};

int main(int argc, char** argv) { return perfMain(&coll, argc, argv); }
