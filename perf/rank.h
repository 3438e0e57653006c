/*
 * libcomm perf harness, inside: one rank's state and the helpers common.c (ranks, buffers, perfMain) and
 * sweep.c (the timed and checked calls, size by size) share. Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_PERF_RANK_H_
#define COMM_PERF_RANK_H_

#include <stddef.h>

#include "comm.h"
#include "common.h"
#include "options.h"

extern perfOpts_t perfOpts;
extern const perfColl_t* perfColl;
extern const char* perfProg;

typedef struct {
  int rank, nranks, localRank;
  int cudaDev; /* the GPU of this rank, -1 with host memory */
  commUniqueId id;
  comm_t comm;
  commStream_t stream;
  char* sendbuf; /* the buffers the collective sees (device pointers with device memory) */
  char* recvbuf;
  char* hsend; /* host copies: the same as sendbuf/recvbuf with host memory */
  char* hrecv;
  size_t bufBytes;
  void* regs[2]; /* -R: commRegister handles of sendbuf and recvbuf */
  double* meta;  /* small host buffer for timing/error reductions */
  double busbwSum;
  long busbwCount;
  double wrongTotal;   /* wrong elements over every row (the same on every rank) */
  double errTests;     /* checks of this rank that found wrong elements (nccl-tests' out-of-bounds count) */
  long long callSince; /* -T: when this rank's current call began (ns, 0: in none); the watchdog reads it */
  int failed;
} rankCtx_t;

void perfRankFailure(rankCtx_t* c, const char* what, commResult_t res);

#define PCHECK(c, call)                  \
  do {                                   \
    commResult_t res_ = (call);          \
    if (res_ != commSuccess) {           \
      perfRankFailure((c), #call, res_); \
      return -1;                         \
    }                                    \
  } while (0)

/* Device memory: waits for the rank's stream; then a failure a kernel reported fails the rank. */
int perfSyncStream(rankCtx_t* c);
int perfCheckAsync(rankCtx_t* c);
/* -T: marks the rank as waiting in a call (begin) or not (end). */
void perfCallBegin(rankCtx_t* c);
void perfCallEnd(rankCtx_t* c);
/* Copies [off, off + bytes) of a host mirror to the buffer the library sees (toBuf) or back (fromBuf). */
int perfToBuf(rankCtx_t* c, char* buf, const char* host, size_t off, size_t bytes);
int perfFromBuf(rankCtx_t* c, char* host, const char* buf, size_t off, size_t bytes);
/* Reduces n doubles of c->meta in place across ranks (host memory, outside any timed region). */
int perfMetaAllReduce(rankCtx_t* c, size_t n, commRedOp_t op);
/* A local copy of the kind of memory the tool runs on (perfCallArgs_t.copy). */
commResult_t perfLocalCopy(void* dst, const void* src, size_t bytes, commStream_t stream);

/* sweep.c: every data type, operation and root the options name; 0, or -1 when the rank failed. */
int perfRunSweeps(rankCtx_t* c);

#endif /* COMM_PERF_RANK_H_ */
