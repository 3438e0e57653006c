/* Reductions on host memory for every datatype x op. float16/bfloat16/float8 reduce through float with
 * round-to-nearest-even. Loops are written so that the compiler vectorises them. */
#ifndef COMM_REDUCE_H_
#define COMM_REDUCE_H_

#include <stddef.h>
#include <stdint.h>
#include "comm.h"
#include "datatype.h"

/* Fill args for a built-in op: commAvg becomes PREMULSUM(1/nRanks) for floating types, SUMPOSTDIV for
 * integers (as NCCL does). */
commResult_t commRedOpArgsBuiltin(commRedOp_t op, commDataType_t t, int nRanks, commRedOpArgs* args);
/* PREMULSUM with `scalar` given in the datatype's own representation (host pointer). */
commResult_t commRedOpArgsPreMul(commDataType_t t, const void* scalar, commRedOpArgs* args);

/* dst[i] = post?( a[i] OP pre?(b[i]) ). dst may alias a or b. pre applies PREMULSUM's scalar to b; post
 * applies SUMPOSTDIV's division to the result; other kinds ignore the flags.
 * (Named commReduceLocal because comm.h's public collective already owns the name commReduce.) */
void commReduceLocal(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre, int post);
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
