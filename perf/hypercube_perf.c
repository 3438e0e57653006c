/* hypercube_perf: an allgather by exchanges across the dimensions of a hypercube, as nccl-tests measures
 * it: the rank's own part copied into place, then for mask = 1, 2, 4, ... a send and a receive of the mask
 * parts gathered so far with rank ^ mask, in one group per dimension. Power-of-two rank counts only.
 * SPDX-License-Identifier: Apache-2.0 */
#include "common.h"
#include "pattern.h"

static double busBw(int n) {
  (void)n;
  return 1.0;
}

/* each rank receives n - 1 of the n parts */
static double algBw(int n) { return (double)(n - 1) / n; }

static commResult_t run(const perfCallArgs_t* a) {
  size_t part = a->count * perfTypes[a->type].size;
  char* recv = a->recvbuff;
  commResult_t res = commSuccess;
  if (recv + (size_t)a->rank * part != (const char*)a->sendbuff)
    res = a->copy(recv + (size_t)a->rank * part, a->sendbuff, part, a->stream);
  for (int mask = 1; mask < a->nranks && res == commSuccess; mask <<= 1) {
    int have = a->rank & ~(mask - 1), get = have ^ mask, peer = a->rank ^ mask;
    res = commGroupStart();
    if (res != commSuccess) break;
    res = commSend(recv + (size_t)have * part, a->count * (size_t)mask, a->type, peer, a->comm, a->stream);
    if (res == commSuccess)
      res = commRecv(recv + (size_t)get * part, a->count * (size_t)mask, a->type, peer, a->comm, a->stream);
    commResult_t end = commGroupEnd();
    if (res == commSuccess) res = end;
  }
  return res;
}

/* recvbuff[p * count + i] = input i of rank p */
static int source(int rank, int nranks, int root, size_t count, size_t j, int* srcRank, size_t* srcIdx) {
  (void)rank, (void)nranks, (void)root;
  *srcRank = (int)(j / count);
  *srcIdx = j % count;
  return 1;
}

static const perfColl_t coll = {.name = "HyperCube",
                                .usesOp = 0,
                                .usesRoot = 0,
                                .sizeIsTotal = 1,
                                .sendMul = 1,
                                .recvMul = 0,
                                .inPlace = perfInPlaceSendInRecv,
                                .busBwFactor = busBw,
                                .algBwFactor = algBw,
                                .noOpName = 1,
                                .powerOfTwo = 1,
                                .run = run,
                                .source = source};

int main(int argc, char** argv) { return perfMain(&coll, argc, argv); }
