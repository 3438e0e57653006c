/* reducescatter_perf: commReduceScatter bandwidth and correctness. SPDX-License-Identifier: Apache-2.0 */
#include "common.h"

static double busBw(int n) { return (double)(n - 1) / n; }

static commResult_t run(const perfCallArgs_t* a) {
  return commReduceScatter(a->sendbuff, a->recvbuff, a->count, a->type, a->op, a->comm, a->stream);
}

/* recvbuff[i] = reduction over ranks of input rank * count + i */
static int source(int rank, int nranks, int root, size_t count, size_t j, int* srcRank, size_t* srcIdx) {
  (void)nranks, (void)root;
  *srcRank = -1;
  *srcIdx = (size_t)rank * count + j;
  return 1;
}

static const perfColl_t coll = {.name = "ReduceScatter",
                                .usesOp = 1,
                                .usesRoot = 0,
                                .sizeIsTotal = 1,
                                .sendMul = 0,
                                .recvMul = 1,
                                .inPlace = perfInPlaceRecvInSend,
                                .busBwFactor = busBw,
                                .run = run,
                                .source = source};

int main(int argc, char** argv) { return perfMain(&coll, argc, argv); }
