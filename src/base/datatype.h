/* Datatypes and reduction operators: their names and sizes, and the description of an operator as the
 * executors apply it (commRedOpArgs). The ground layer: every layer may use it. */
#ifndef COMM_DATATYPE_H_
#define COMM_DATATYPE_H_

#include <stddef.h>
#include <stdint.h>
#include "comm.h"

typedef enum {
  COMM_REDOP_SUM = 0,
  COMM_REDOP_PROD,
  COMM_REDOP_MAX,
  COMM_REDOP_MIN,
  COMM_REDOP_PREMULSUM,  /* sum of (scalar * x): pre-multiplied sum, float avg */
  COMM_REDOP_SUMPOSTDIV, /* sum, then divide by divisor at the end: integer avg */
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

#endif
