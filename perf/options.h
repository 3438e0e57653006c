/*
 * libcomm perf harness: the command line's options. options.c parses libcomm's flags (allreduce_perf and
 * the other libcomm names), nccl_options.c nccl-tests' flags (all_reduce_perf, perf/nccl-tests/...).
 * Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_PERF_OPTIONS_H_
#define COMM_PERF_OPTIONS_H_

#include <stddef.h>

#include "comm.h"
#include "pattern.h"

/* Buffer memory: -M host, device, or auto (device when a GPU is present, host otherwise). */
enum { memHost = 0, memDevice = 1, memAuto = -1 };

/* -a (nccl-tests): how the ranks' times make the reported one. libcomm's names report the slowest. */
enum { avgRank0 = 0, avgMean = 1, avgMin = 2, avgMax = 3 };

typedef struct {
  size_t minBytes, maxBytes, stepBytes, stepFactor;
  int iters, warmup, root;
  int check;  /* libcomm: 0|1; nccl-tests: the number of checking calls (-c N) */
  int device; /* memHost or memDevice once perfMain has resolved memAuto */
  int graphs; /* -G: launches of the graph of the timed calls; 0: plain calls. Only with device memory */
  int nprocs, nthreads;
  int hostPerProc; /* -H: with -np, each process a host of its own (COMM_HOSTID) */
  int types[commNumTypes], ntypes;
  int ops[opNum], nops;
  const char* jsonPath; /* -J: write the results as nccl-tests' JSON (NULL: none) */
  /* nccl-tests' semantics (nccl = 1; the libcomm names keep the defaults in brackets) */
  int nccl;         /* 1: nccl-tests' flags, sizes, output and JSON */
  int ngpus;        /* -g: ranks per thread, each a thread of its own here [1] */
  int aggIters;     /* -m: calls aggregated in one group per iteration [1] */
  int runCycles;    /* -N: sweeps; 0 = until killed [1] */
  int blocking;     /* -z: 0 none, 1 wait + barrier per call, 2 wait per call, 3 wait + barrier per iteration */
  int streamNull;   /* -y: device buffers on the default stream [0] */
  int timeout;      /* -T: seconds one call may wait before the process gives up; 0 none */
  int cputime;      /* -C: report the time to issue the calls instead of the time to complete them */
  int average;      /* -a: avgRank0.. [avgMax] */
  int reg;          /* -R: 1 commRegister the buffers (2: asked for symmetric, registered as 1) */
  int parallelInit; /* -p: accepted; every rank initialises on its own thread anyway */
  int timestamps;   /* -S: a time stamp after each row */
  int memReport;    /* -M (nccl-tests): GPU memory use at the end */
  int unalign;      /* -u: buffers start this many elements past their alignment */
  int allRoots;     /* -r -1 (nccl-tests): every rank in turn */
} perfOpts_t;

/* Parse argv into *out (prog: the binary's name, for messages). Returns 0 to run, 1 when help was printed,
 * -1 on a bad option (with a message on stderr). */
int perfParseOptions(int argc, char** argv, const char* prog, perfOpts_t* out);
/* The same for nccl-tests' flags (nccl_options.c). */
int perfParseNcclOptions(int argc, char** argv, const char* prog, perfOpts_t* out);
/* nccl-tests' names of the data types (by commDataType_t) and operations (by opSum..), nccl_options.c. */
extern const char* const perfNcclTypeNames[commNumTypes];
extern const char* const perfNcclOpNames[opNum];
/* Shared by both parsers (options.c): sizes with K/M/G/T suffixes, bounded integers. */
int perfParseSize(const char* s, size_t* out);

#endif /* COMM_PERF_OPTIONS_H_ */
