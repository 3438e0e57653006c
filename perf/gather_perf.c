/* gather_perf: every rank's count elements into the root, as nccl-tests measures it: grouped sends to the
 * root and, on the root, a receive from every rank. SPDX-License-Identifier: Apache-2.0 */
#include "common.h"
#include "pattern.h"

static double busBw(int n) { return (double)(n - 1) / n; }

static commResult_t run(const perfCallArgs_t* a) {
  if (a->count == 0) return commSuccess;
  size_t bytes = a->count * perfTypes[a->type].size;
  commResult_t res = commGroupStart();
  if (res != commSuccess) return res;
  res = commSend(a->sendbuff, a->count, a->type, a->root, a->comm, a->stream);
  for (int r = 0; a->rank == a->root && r < a->nranks && res == commSuccess; r++)
    res = commRecv((char*)a->recvbuff + (size_t)r * bytes, a->count, a->type, r, a->comm, a->stream);
  commResult_t end = commGroupEnd();
  return res != commSuccess ? res : end;
}

/* the root's recvbuff[p * count + i] = input i of rank p; nothing defined elsewhere */
static int source(int rank, int nranks, int root, size_t count, size_t j, int* srcRank, size_t* srcIdx) {
  (void)nranks;
  *srcRank = (int)(j / count);
  *srcIdx = j % count;
  return rank == root;
}

static const perfColl_t coll = {.name = "Gather",
                                .usesOp = 0,
                                .usesRoot = 1,
                                .sizeIsTotal = 1,
                                .sendMul = 1,
                                .recvMul = 0,
                                .inPlace = perfInPlaceSendInRecv,
                                .busBwFactor = busBw,
                                .run = run,
                                .source = source};

int main(int argc, char** argv) { return perfMain(&coll, argc, argv); }
