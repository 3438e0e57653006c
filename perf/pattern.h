/*
 * libcomm perf harness: data types, element encoding, the input pattern and the expected results.
 * Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_PERF_PATTERN_H_
#define COMM_PERF_PATTERN_H_

#include <stddef.h>

#include "comm.h"

typedef struct {
  const char* name;  /* printed and accepted by -d */
  const char* alias; /* also accepted by -d */
  size_t size;
  double exactMax; /* every integer in [0, exactMax] is exact in the type */
  int isFloat;
  int isSigned;
  double eps; /* unit roundoff for floating types */
} perfType_t;

/* Indexed by commDataType_t. */
extern const perfType_t perfTypes[commNumTypes];

/* Writes v (an exactly representable value) as element i of type t; reads element i back. */
void perfStoreElt(void* buf, size_t i, commDataType_t t, double v);
double perfLoadElt(const void* buf, size_t i, commDataType_t t);
/* Builds the decoding tables perfLoadElt needs; call once before any rank starts. -1: out of memory. */
int perfBuildTables(void);

/* The -o operations; opSum..opAvg match commSum..commAvg. */
enum { opSum = 0, opProd, opMax, opMin, opAvg, opPreMulSum, opNum };
extern const char* const perfOpNames[opNum];

/* Input value of rank r at element i: small integers chosen so that every partial result of the
 * operation is exact in the type for any reduction order (see perfMakePattern). */
typedef struct {
  int op; /* opSum.. ; -1 for collectives that only move data */
  int nranks;
  int vmax; /* values in [0, vmax] (minus off) */
  int off;
  int sparse; /* sum of n values would not stay exact: one rank in n contributes 1, the others 0 */
} pattern_t;

/* The premulsum factor of each rank. */
int perfScalarOf(int rank);
/* The pattern for op (-1: data movement) over type t and nranks ranks. */
pattern_t perfMakePattern(int op, commDataType_t t, int nranks);
/* Input value of rank r at element i. */
int perfPatternValue(const pattern_t* p, int r, size_t i);
/* Expected output: input element idx of srcRank, or (srcRank -1) the reduction over all ranks. */
double perfExpectedValue(const pattern_t* p, int srcRank, size_t idx);

#endif /* COMM_PERF_PATTERN_H_ */
