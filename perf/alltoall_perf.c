/* alltoall_perf: commAllToAll bandwidth and correctness. SPDX-License-Identifier: Apache-2.0
 * There is no in-place variant: commAllToAll, like ncclAllToAll, needs separate buffers. */
#include "common.h"

static double busBw(int n) { return (double)(n - 1) / n; }

static commResult_t run(const perfCallArgs_t* a) {
  return commAllToAll(a->sendbuff, a->recvbuff, a->count, a->type, a->comm, a->stream);
}

/* recvbuff[p * count + i] = input rank * count + i of rank p */
static int source(int rank, int nranks, int root, size_t count, size_t j, int* srcRank, size_t* srcIdx) {
  (void)nranks, (void)root;
  *srcRank = (int)(j / count);
  *srcIdx = (size_t)rank * count + j % count;
  return 1;
}

static const perfColl_t coll = {"AllToAll", 0, 0, 1, 0, 0, perfInPlaceNone, busBw, run, source};

int main(int argc, char** argv) { return perfMain(&coll, argc, argv); }
