/*
 * libcomm perf harness: the command line's options (options.c). Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_PERF_OPTIONS_H_
#define COMM_PERF_OPTIONS_H_

#include <stddef.h>

#include "comm.h"
#include "pattern.h"

/* Buffer memory: -M host, device, or auto (device when a GPU is present, host otherwise). */
enum { memHost = 0, memDevice = 1, memAuto = -1 };

typedef struct {
  size_t minBytes, maxBytes, stepBytes, stepFactor;
  int iters, warmup, check, root;
  int device; /* memHost or memDevice once perfMain has resolved memAuto */
  int graphs; /* -G: launches of the graph of `iters` captured calls; 0: plain calls. Only with device memory */
  int nprocs, nthreads;
  int hostPerProc; /* -H: with -np, each process a host of its own (COMM_HOSTID) */
  int types[commNumTypes], ntypes;
  int ops[opNum], nops;
} perfOpts_t;

/* Parse argv into *out (prog: the binary's name, for messages). Returns 0 to run, 1 when help was printed,
 * -1 on a bad option (with a message on stderr). */
int perfParseOptions(int argc, char** argv, const char* prog, perfOpts_t* out);

#endif /* COMM_PERF_OPTIONS_H_ */
