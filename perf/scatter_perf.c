/* scatter_perf: the root's nranks * count elements, count to each rank, as nccl-tests measures it: on the
 * root a send to every rank, grouped with every rank's receive. SPDX-License-Identifier: Apache-2.0 */
#include "common.h"
#include "pattern.h"

static double busBw(int n) { return (double)(n - 1) / n; }

static commResult_t run(const perfCallArgs_t* a) {
  if (a->count == 0) return commSuccess;
  size_t bytes = a->count * perfTypes[a->type].size;
  commResult_t res = commGroupStart();
  if (res != commSuccess) return res;
  for (int r = 0; a->rank == a->root && r < a->nranks && res == commSuccess; r++)
    res = commSend((const char*)a->sendbuff + (size_t)r * bytes, a->count, a->type, r, a->comm, a->stream);
  if (res == commSuccess) res = commRecv(a->recvbuff, a->count, a->type, a->root, a->comm, a->stream);
  commResult_t end = commGroupEnd();
  return res != commSuccess ? res : end;
}

/* recvbuff[i] = the root's input rank * count + i */
static int source(int rank, int nranks, int root, size_t count, size_t j, int* srcRank, size_t* srcIdx) {
  (void)nranks;
  *srcRank = root;
  *srcIdx = (size_t)rank * count + j;
  return 1;
}

static const perfColl_t coll = {.name = "Scatter",
                                .usesOp = 0,
                                .usesRoot = 1,
                                .sizeIsTotal = 1,
                                .sendMul = 0,
                                .recvMul = 1,
                                .inPlace = perfInPlaceRecvInSend,
                                .busBwFactor = busBw,
                                .run = run,
                                .source = source};

int main(int argc, char** argv) { return perfMain(&coll, argc, argv); }
