/* The CUDA executor's errors: the error record kernels write into mapped host memory when they give up
 * (timeout, abort, a failed network connection, a message of another operation or size), turned into a commResult_t and one WARN
 * per communicator, and, when asked, the executor stream's own CUDA state (commDevCheckError,
 * commDevPollError). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "debug.h"
#include "exec_dev_int.h"

/* The mapped error record, and with queryStream the stream's CUDA state too (not while a graph is being
 * captured through it: a query would end the capture). */
commResult_t commDevCheckError(commComm* comm, int queryStream) {
  commDevState* s = comm->dev;
  if (s == NULL) return commSuccess;
  commResult_t res = commSuccess;
  const commDevError* e = s->error;
  int code = __atomic_load_n(&e->code, __ATOMIC_ACQUIRE);
  if (code != COMM_DEV_OK) {
    res = code == COMM_DEV_TIMEOUT                                  ? commTimeout
          : code == COMM_DEV_ABORTED && commAborted(comm)           ? commInvalidUsage
          : code == COMM_DEV_ABORTED || code == COMM_DEV_NET_FAILED ? commRemoteError
                                                                    : commInvalidUsage;
    if (!s->errorReported) {
      s->errorReported = 1;
      char peer[32];
      if (e->peer == COMM_PEER_COLLNET) snprintf(peer, sizeof(peer), "the collnet group");
      else snprintf(peer, sizeof(peer), "rank %d", (int)e->peer);
      if (code == COMM_DEV_TIMEOUT)
        WARN("rank %d: operation opCount %llu on device timed out: no progress for %lld ms (COMM_TIMEOUT_MS) "
             "while %s %s on channel %d",
             comm->rank, (unsigned long long)e->opCount, (long long)comm->timeoutMs,
             e->isSend ? "waiting for FIFO space to" : "waiting for data from", peer, e->channel);
      else if (code == COMM_DEV_NET_FAILED)
        WARN("rank %d: operation opCount %llu on device: the network connection %s %s on channel %d failed "
             "(the peer closed it or the network failed; COMM_DEBUG=INFO shows the NET or COLLNET line on it)",
             comm->rank, (unsigned long long)e->opCount, e->isSend ? "to" : "from", peer, e->channel);
      else if (code == COMM_DEV_SIG_MISMATCH) {
        commOpSig mine, theirs;
        memcpy(&mine, (const void*)e->mySig, sizeof(mine));
        memcpy(&theirs, (const void*)e->gotSig, sizeof(theirs));
        commOpSigMismatch(comm, &mine, e->peer, &theirs, e->channel, ", on device");
      } else if (code == COMM_DEV_SIZE_MISMATCH)
        WARN("rank %d: operation opCount %llu on device: received %llu bytes from rank %d on channel %d where %llu "
             "were expected: the ranks called this operation with different counts or datatypes",
             comm->rank, (unsigned long long)e->opCount, (unsigned long long)e->got, e->peer, e->channel,
             (unsigned long long)e->expected);
      else
        WARN("rank %d: operation opCount %llu on device was aborted while %s %s on channel %d", comm->rank,
             (unsigned long long)e->opCount, e->isSend ? "sending to" : "receiving from", peer, e->channel);
    }
  } else if (queryStream) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t q = cudaStreamIsCapturing(s->stream, &cs);
    if (q == cudaSuccess && cs == cudaStreamCaptureStatusNone) q = cudaStreamQuery(s->stream);
    if (q != cudaSuccess && q != cudaErrorNotReady) {
      res = commUnhandledCudaError;
      if (!s->errorReported) {
        s->errorReported = 1;
        WARN("rank %d: the CUDA executor's stream failed: %s (%s)", comm->rank, cudaGetErrorString(q),
             cudaGetErrorName(q));
      }
    }
  }
  return res;
}

commResult_t commDevPollError(commComm* comm) { return commDevCheckError(comm, 1); }
