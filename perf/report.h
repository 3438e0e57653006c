/*
 * libcomm perf harness: what rank 0 prints and writes to the -J file, in libcomm's layout or in nccl-tests'
 * (opts->nccl). The order of the calls is the order of the output: init, json, header, rows (start, one
 * body per variant, end), footer, end. Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_PERF_REPORT_H_
#define COMM_PERF_REPORT_H_

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "options.h"

typedef struct {
  int pid, dev; /* dev: the GPU, -1 with host memory */
  char host[64];
  char pci[24];  /* "0000:19:00" */
  char name[64]; /* the GPU's name */
} perfRankInfo_t;

void perfReportInit(const perfOpts_t* o, const perfColl_t* coll, const char* prog, int argc, char** argv);
/* -J: opens the file (rank 0) and writes what nccl-tests writes before the run; 0 also when skipped. */
int perfReportOpenJson(void);
void perfReportHeader(int nranks, const perfRankInfo_t* ranks, int graphIgnored);
/* nccl-tests' names: every row's type and op column come from these names; root -1: none. */
void perfReportRowStart(size_t bytes, size_t count, int type, int op, int root);
/* One variant: us (time, or issue time with -C), bandwidths, the wrong count (checked 0: N/A). */
void perfReportRowBody(double us, double algbw, double busbw, int checked, double wrong, int inPlace);
void perfReportRowNone(int inPlace); /* a variant the collective does not have (libcomm's names) */
void perfReportRowEnd(int iters);
/* errors: nccl-tests' names count failing tests over the ranks, libcomm's wrong elements; returns 1
 * when NCCL_TESTS_MIN_BW is set and the bandwidth is below 0.9 of it. */
int perfReportFooter(double errors, double avgBusBw);
/* -M: device memory in use (bytes; init < 0: host buffers, nothing measured). */
void perfReportMemory(int64_t init, int64_t user, int64_t coll);
void perfReportEnd(const char* lastError);
/* A line of text, printed by rank 0 as it is (nccl-tests' notes). */
void perfReportNote(const char* line);

#endif /* COMM_PERF_REPORT_H_ */
