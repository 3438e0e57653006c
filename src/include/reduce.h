/* Reductions on host memory for every datatype x op. float16/bfloat16/float8 reduce through float with
 * round-to-nearest-even. Loops are written so that the compiler vectorises them. */
#ifndef COMM_REDUCE_H_
#define COMM_REDUCE_H_

#include <stddef.h>
#include <stdint.h>
#include "comm.h"

typedef enum {
  COMM_REDOP_SUM = 0,
  COMM_REDOP_PROD,
  COMM_REDOP_MAX,
  COMM_REDOP_MIN,
  COMM_REDOP_PREMULSUM,   /* sum of (scalar * x): pre-multiplied sum, float avg */
  COMM_REDOP_SUMPOSTDIV,  /* sum, then divide by divisor at the end: integer avg */
  COMM_NUM_REDOP_KINDS
} commRedOpKind_t;

typedef struct {
  commRedOpKind_t kind;
  commDataType_t dtype;
  /* PREMULSUM: the scalar, as the datatype's bits (scalarBits) and as a double. */
  uint64_t scalarBits;
  double scalar;
  /* SUMPOSTDIV: the divisor (nranks). */
  uint64_t divisor;
} commRedOpArgs;

size_t commTypeSize(commDataType_t t);
const char* commTypeName(commDataType_t t);
const char* commOpName(commRedOp_t op);
/* 1 for float16, float32, float64, bfloat16, float8 types. */
int commTypeIsFloat(commDataType_t t);

/* Fill args for a built-in op: commAvg becomes PREMULSUM(1/nRanks) for floating types, SUMPOSTDIV for
 * integers (as NCCL does). */
commResult_t commRedOpArgsBuiltin(commRedOp_t op, commDataType_t t, int nRanks, commRedOpArgs* args);
/* PREMULSUM with `scalar` given in the datatype's own representation (host pointer). */
commResult_t commRedOpArgsPreMul(commDataType_t t, const void* scalar, commRedOpArgs* args);

/* dst[i] = post?( a[i] OP pre?(b[i]) ). dst may alias a or b. pre applies PREMULSUM's scalar to b; post
 * applies SUMPOSTDIV's division to the result; other kinds ignore the flags.
 * (Named commReduceLocal because comm.h's public collective already owns the name commReduce.) */
void commReduceLocal(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n,
                     int pre, int post);
/* dst[i] = post?( pre?(src[i]) ). Plain memcpy when nothing applies (dst == src allowed). */
void commCopy(const commRedOpArgs* args, void* dst, const void* src, size_t n, int pre, int post);

/* Conversions (exposed for tests). */
float commHalfToFloat(uint16_t h);
uint16_t commFloatToHalf(float f);
float commBf16ToFloat(uint16_t h);
uint16_t commFloatToBf16(float f);
float commFp8e4m3ToFloat(uint8_t v);
uint8_t commFloatToFp8e4m3(float f); /* saturates to +-448, NaN stays NaN */
float commFp8e5m2ToFloat(uint8_t v);
uint8_t commFloatToFp8e5m2(float f); /* overflow to +-inf as IEEE */

#endif
