/*
 * libcomm perf harness: launching the ranks (fork -np, -t threads, launcher environment) and
 * waiting for them. Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_PERF_LAUNCH_H_
#define COMM_PERF_LAUNCH_H_

#include "comm.h"

typedef struct {
  const char* progName; /* prefix of the messages */
  int nprocs;           /* -np: fork this many processes; 0: ranks come from the launcher environment */
  int nthreads;         /* -t: ranks per process, one thread each */
  int hostPerProc;      /* -H 1: each forked process sets COMM_HOSTID=perf-host-<p> (a host of its own) */
  /* Called once the total rank count is known, before any rank starts; prints why and returns
   * nonzero to refuse it (exit status 2). */
  int (*checkRanks)(int nranks);
  /* Runs one rank to the end on the calling thread; returns nonzero when the rank failed. */
  int (*runRank)(const commUniqueId* id, int rank, int nranks, int localRank);
} perfLaunch_t;

/* Starts the ranks as l says, waits for them; returns the process exit status. */
int perfLaunch(const perfLaunch_t* l);

/* Shared with common.c, which defines them. */
int perfParseInt(const char* s, int minv, int* out);
double perfNowSec(void);

#endif /* COMM_PERF_LAUNCH_H_ */
