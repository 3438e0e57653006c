/*
 * libcomm perf harness: shared by every *_perf binary. Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 *
 * A binary describes its collective with one perfColl_t and calls perfMain(); everything else
 * (buffers, timing, checking) lives in common.c, the table and the -J file in report.c (json.c), the
 * options in options.c (libcomm's flags) and nccl_options.c (nccl-tests' flags), launching the ranks in
 * launch.c, the CUDA driver in device.c, and the data types, input pattern and expected values in pattern.c.
 *
 * Which flags and output: nccl-tests' under nccl-tests' names (all_reduce_perf, all_gather_perf,
 * reduce_scatter_perf anywhere, and every name run from a folder named nccl-tests: the build's
 * perf/nccl-tests/ and the install's bin/nccl-tests/ hold links of all ten), libcomm's otherwise.
 */
#ifndef COMM_PERF_COMMON_H_
#define COMM_PERF_COMMON_H_

#include <stddef.h>

#include "comm.h"

/* Where the in-place variant puts the send buffer relative to the receive buffer. */
typedef enum {
  perfInPlaceSame = 0,       /* sendbuff == recvbuff */
  perfInPlaceSendInRecv = 1, /* sendbuff = recvbuff + rank * count (allgather) */
  perfInPlaceRecvInSend = 2, /* recvbuff = sendbuff + rank * count (reducescatter) */
  perfInPlaceNone = 3        /* no in-place variant: N/A under libcomm's names; nccl-tests' run it on one
                                buffer (sendbuff == recvbuff) and do not check it */
} perfInPlace_t;

/* Arguments of one collective call. count is the per-call count the API takes. */
typedef struct {
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  commDataType_t type;
  commRedOp_t op;
  int root;
  int rank;
  int nranks;
  comm_t comm;
  commStream_t stream;
  /* copies bytes between two buffers of this rank (memory of the kind the tool runs on), on stream */
  commResult_t (*copy)(void* dst, const void* src, size_t bytes, commStream_t stream);
} perfCallArgs_t;

typedef struct {
  const char* name; /* "AllReduce": printed in the header */
  int usesOp;       /* 1: the redop column and -o matter */
  int usesRoot;     /* 1: the root column and -r matter */
  int sizeIsTotal;  /* 1: "size" is nranks * count * eltsize (allgather, reducescatter, alltoall) */
  size_t sendMul;   /* send buffer holds sendMul * count elements (a multiplier of 0 means nranks) */
  size_t recvMul;   /* receive buffer holds recvMul * count elements (0 means nranks) */
  perfInPlace_t inPlace;
  double (*busBwFactor)(int nranks);
  double (*algBwFactor)(int nranks); /* algbw = size / time * this; NULL: 1 */
  int noOpName;                      /* 1: nccl-tests prints an empty redop column (hypercube) */
  int powerOfTwo;                    /* 1: runs only on a power-of-two rank count (hypercube) */
  commResult_t (*run)(const perfCallArgs_t* args);
  /* Which inputs output element j of rank `rank` is made from: sets *srcRank to one rank (a copy of
   * that rank's input element *srcIdx) or to -1 (the reduction over all ranks of input element *srcIdx).
   * Returns 0 when element j is not defined by the collective (reduce on a non-root) and is not checked. */
  int (*source)(int rank, int nranks, int root, size_t count, size_t j, int* srcRank, size_t* srcIdx);
} perfColl_t;

/* Parses argv, launches the ranks, runs the sweep; returns the process exit status. */
int perfMain(const perfColl_t* coll, int argc, char** argv);

#endif /* COMM_PERF_COMMON_H_ */
