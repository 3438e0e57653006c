/* The CUDA executor's stream order: the kernels of a communicator run one after another, whichever
 * streams the callers name. This file owns the driver's cuStreamWaitValue32 (looked up once), the block
 * count a call on another stream waits for (commDevWaitLaunched, commDevFollowLast, commDevMarkLast,
 * commDevCountLaunch), and commDevRunPlans: a group's plans launched on its single caller stream, or on a
 * hub stream joined to every caller stream in both directions. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>

#include "check.h"
#include "cuda_util.h"
#include "debug.h"
#include "exec_dev_int.h"

#define MAX_JOIN_STREAMS 8 /* distinct caller streams of one communicator in one group joined per call */

/* cuStreamWaitValue32 (driver API, through the runtime's entry point lookup: libcomm links no libcuda). */
typedef CUresult (*waitValue32_t)(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
static waitValue32_t waitValue32;
static pthread_once_t waitValueOnce = PTHREAD_ONCE_INIT;
static void waitValueLookup(void) {
  void* fn = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess)
    waitValue32 = (waitValue32_t)fn;
}
commResult_t commDevResolveWaitValue(void) {
  pthread_once(&waitValueOnce, waitValueLookup);
  if (waitValue32 != NULL) return commSuccess;
  WARN("the CUDA driver has no cuStreamWaitValue32 (stream memory operations), which the CUDA executor orders "
       "calls on different streams with: a driver of CUDA 12 or later is needed");
  return commSystemError;
}

/* The stream of this call waits on the GPU until every kernel launched so far outside graph capture has
 * ended (their blocks' count reached launchedBlocks). */
commResult_t commDevWaitLaunched(commDevState* s, cudaStream_t st) {
  CUresult r = waitValue32((CUstream)st, (CUdeviceptr)(uintptr_t)s->doneBlocks, s->launchedBlocks,
                           CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS) {
    WARN("cuStreamWaitValue32 (ordering a call after the communicator's previous kernels) failed: CUresult %d", (int)r);
    return commUnhandledCudaError;
  }
  return commSuccess;
}

/* One caller stream: the launch goes after the communicator's previous ones when those were on another
 * stream, and the stream is remembered after. (A graph being captured cannot depend on work outside it: its
 * replays are ordered by the caller's streams, as every launch outside it is.) */
commResult_t commDevFollowLast(commDevState* s, cudaStream_t st, int capturing) {
  if (!capturing && s->haveLast && s->lastStream != st) COMMCHECK(commDevWaitLaunched(s, st));
  return commSuccess;
}
void commDevMarkLast(commDevState* s, cudaStream_t st, int capturing) {
  if (capturing) return;
  s->lastStream = st;
  s->haveLast = 1;
}
/* A kernel of nBlocks launched: counted when its blocks will count themselves (outside graph capture). */
void commDevCountLaunch(commDevState* s, int nBlocks, int capturing) {
  if (!capturing) s->launchedBlocks += (uint32_t)nBlocks;
}

commResult_t commDevRunPlans(commComm* comm, commPlan** plans, int nPlans) {
  if (nPlans == 0) return commSuccess;
  commResult_t res = commSuccess;
  commCudaDevGuard g;
  COMMCHECK(commCudaDevEnter(comm->cudaDev, &g));
  if (comm->dev == NULL) COMMCHECKGOTO(commDevEnsure(comm), res, out);
  COMMCHECKGOTO(commDevCheckError(comm, 0), res, out);
  commDevState* s = comm->dev;
  /* The callers' streams (one per call; a group may name several). */
  cudaStream_t streams[MAX_JOIN_STREAMS];
  int nStreams = 0;
  for (int p = 0; p < nPlans; p++) {
    for (int k = 0; k < plans[p]->nStreams; k++) {
      cudaStream_t st = (cudaStream_t)plans[p]->streams[k];
      int seen = 0;
      for (int i = 0; i < nStreams && !seen; i++) seen = streams[i] == st;
      if (seen) continue;
      if (nStreams == MAX_JOIN_STREAMS) {
        WARN("rank %d: a group uses more than %d CUDA streams on one communicator", comm->rank, MAX_JOIN_STREAMS);
        res = commInvalidUsage;
        goto out;
      }
      streams[nStreams++] = st;
    }
  }
  int capturing = 0;
  for (int i = 0; i < nStreams; i++) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    CUDACHECKGOTO(cudaStreamIsCapturing(streams[i], &cs), res, out);
    if (cs == cudaStreamCaptureStatusActive) capturing = 1;
  }
  /* The kernels of a communicator run one after another (FIFO positions carry over), and each is ordered
   * after the work queued before the call on its caller's streams, and before the work queued after.
   * One caller stream: launch on it, after the previous launch if that was on another stream; no join
   * costs (in a graph too: the captured kernels chain on the caller's stream). Otherwise (several streams
   * in a group, COMM_DEV_STREAM_JOIN=1):
   * the executor's stream waits for every caller stream, runs the plans, and every caller stream waits
   * for it. */
  if (nStreams == 1 && !s->alwaysJoin) {
    cudaStream_t st = streams[0];
    COMMCHECKGOTO(commDevFollowLast(s, st, capturing), res, out);
    for (int p = 0; p < nPlans; p++) COMMCHECKGOTO(commDevLaunchPlan(comm, plans[p], st, capturing), res, out);
    commDevMarkLast(s, st, capturing);
    goto out;
  }
  /* The hub the plans run on: the executor's stream; inside graph capture the first caller stream (the
   * executor's stream joined into a capture did not keep long captured chains in order). */
  cudaStream_t hub = capturing ? streams[0] : s->stream;
  for (int i = 0; i < nStreams; i++) {
    if (streams[i] == hub) continue;
    CUDACHECKGOTO(cudaEventRecord(s->joinIn, streams[i]), res, out);
    CUDACHECKGOTO(cudaStreamWaitEvent(hub, s->joinIn, 0), res, out);
  }
  COMMCHECKGOTO(commDevFollowLast(s, hub, capturing), res, out);
  for (int p = 0; p < nPlans; p++) COMMCHECKGOTO(commDevLaunchPlan(comm, plans[p], hub, capturing), res, out);
  commDevMarkLast(s, hub, capturing);
  CUDACHECKGOTO(cudaEventRecord(s->joinOut, hub), res, out);
  for (int i = 0; i < nStreams; i++)
    if (streams[i] != hub) CUDACHECKGOTO(cudaStreamWaitEvent(streams[i], s->joinOut, 0), res, out);
out:
  commCudaDevLeave(comm->cudaDev, &g);
  return res;
}
