/* mp_colls: the shared types and declarations of the test program (mp_colls.c runs the cases;
 * mp_cases.c defines them and computes the expected results on the host).
 * SPDX-License-Identifier: Apache-2.0 */
#ifndef MP_COLLS_H_
#define MP_COLLS_H_

#include <stddef.h>

#include "comm.h"
#include "itest.h"

enum { C_ALLREDUCE, C_BROADCAST, C_REDUCE, C_ALLGATHER, C_REDUCESCATTER, C_ALLTOALL, C_SENDRECV, C_ALLPAIRS };
extern const char* collName[];
enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_PREMUL, OP_COPY };
extern const char* opName[];

typedef struct {
  int coll;
  commDataType_t type;
  int op;
  double scalar; /* premulsum */
  int root;
  size_t count;
  int inplace;
  int salt; /* varies the data of otherwise identical cases (several in one batch) */
} tcase;

/* State of one case on one rank: its buffers and op. */
typedef struct {
  unsigned char *aBlock, *bBlock; /* allocations, guard included */
  size_t aBytes, bBytes;
  void *send, *recv;
  size_t sendElems, recvElems;
  commRedOp_t op;
  size_t *scnt, *sdispl, *rcnt, *rdispl; /* all-pairs: elements to/from each peer */
} caseState;

#define MAX_BATCH 16

typedef struct {
  comm_t comm;
  int rank;
  long cases, checks, fails;
  int printed;
  caseState cs[MAX_BATCH]; /* one per case of the current batch */
} rankst;

extern int N; /* ranks */
extern int quick;
extern int allReduceOnly; /* -A: only the allreduce cases (and the batches) */
extern int collnetOnly;   /* -C: only the allreduce, allgather and reducescatter cases (and the batches) */

/* mp_cases.c: inputs and the host reference. */
double genRaw(const tcase* c, int q, size_t j);
double inVal(const tcase* c, int q, size_t j);
size_t pairCount(const tcase* c, int s, int d);
double tolerance(const tcase* c, double expect);
int expectAt(rankst* rk, caseState* cs, const tcase* c, size_t i, double* out);
void describe(const tcase* c, char* buf, size_t len);

/* mp_cases.c: the list of cases and the batches, identical on every rank. */
#define MAX_BATCHES 8
extern tcase* cases;
extern size_t ncases;
extern tcase batches[MAX_BATCHES][MAX_BATCH];
extern int batchLen[MAX_BATCHES], nbatches;
void buildBatches(void);
void buildCases(void);

#endif
