/* alltoall_perf: commAllToAll bandwidth and correctness. SPDX-License-Identifier: Apache-2.0
 * There is no in-place variant: commAllToAll needs separate buffers. Under nccl-tests' names the in-place
 * columns time what nccl-tests falls back to where the library has no all-to-all: a send and a receive
 * with every rank in one group, here on one buffer (not checked, as in nccl-tests). */
#include "common.h"
#include "pattern.h"

static double busBw(int n) { return (double)(n - 1) / n; }

static commResult_t run(const perfCallArgs_t* a) {
  if (a->sendbuff != a->recvbuff) return commAllToAll(a->sendbuff, a->recvbuff, a->count, a->type, a->comm, a->stream);
  size_t bytes = a->count * perfTypes[a->type].size;
  commResult_t res = commGroupStart();
  for (int r = 0; r < a->nranks && res == commSuccess; r++) {
    res = commSend((const char*)a->sendbuff + (size_t)r * bytes, a->count, a->type, r, a->comm, a->stream);
    if (res == commSuccess)
      res = commRecv((char*)a->recvbuff + (size_t)r * bytes, a->count, a->type, r, a->comm, a->stream);
  }
  commResult_t end = commGroupEnd();
  return res != commSuccess ? res : end;
}

/* recvbuff[p * count + i] = input rank * count + i of rank p */
static int source(int rank, int nranks, int root, size_t count, size_t j, int* srcRank, size_t* srcIdx) {
  (void)nranks, (void)root;
  *srcRank = (int)(j / count);
  *srcIdx = (size_t)rank * count + j % count;
  return 1;
}

static const perfColl_t coll = {.name = "AllToAll",
                                .usesOp = 0,
                                .usesRoot = 0,
                                .sizeIsTotal = 1,
                                .sendMul = 0,
                                .recvMul = 0,
                                .inPlace = perfInPlaceNone,
                                .busBwFactor = busBw,
                                .run = run,
                                .source = source};

int main(int argc, char** argv) { return perfMain(&coll, argc, argv); }
