/* sendrecv_perf: ring of commSend/commRecv pairs in one group. SPDX-License-Identifier: Apache-2.0
 * Rank r sends to (r + 1) % n and receives from (r - 1 + n) % n. There is no in-place variant: a
 * send and a receive on the same buffer in one group race with each other (nccl-tests' names time it
 * and do not check it, as nccl-tests does). */
#include "common.h"

static double busBw(int n) {
  (void)n;
  return 1.0;
}

static commResult_t run(const perfCallArgs_t* a) {
  int next = (a->rank + 1) % a->nranks, prev = (a->rank - 1 + a->nranks) % a->nranks;
  commResult_t res = commGroupStart();
  if (res != commSuccess) return res;
  commResult_t sres = commSend(a->sendbuff, a->count, a->type, next, a->comm, a->stream);
  commResult_t rres = commRecv(a->recvbuff, a->count, a->type, prev, a->comm, a->stream);
  res = commGroupEnd();
  if (sres != commSuccess) return sres;
  if (rres != commSuccess) return rres;
  return res;
}

static int source(int rank, int nranks, int root, size_t count, size_t j, int* srcRank, size_t* srcIdx) {
  (void)root, (void)count;
  *srcRank = (rank - 1 + nranks) % nranks;
  *srcIdx = j;
  return 1;
}

static const perfColl_t coll = {.name = "SendRecv",
                                .usesOp = 0,
                                .usesRoot = 0,
                                .sizeIsTotal = 0,
                                .sendMul = 1,
                                .recvMul = 1,
                                .inPlace = perfInPlaceNone,
                                .busBwFactor = busBw,
                                .run = run,
                                .source = source};

int main(int argc, char** argv) { return perfMain(&coll, argc, argv); }
