/* The CUDA executor's host side, internal to src/exec/cuda/exec_dev*.c: the per-communicator state
 * (commDevState: stream, events, mapped abort and error words, plan buffers, scratch, plan cache, stream
 * order) and the functions its files call across one another. exec_dev.c owns the state's life (create,
 * sync, abort, free), exec_dev_plan.c turns plans into device plans and their buffers, exec_dev_cache.c
 * keeps launched plans for repeated calls, exec_dev_stream.c orders launches and joins callers' streams,
 * exec_dev_error.c reads the error record. The public interface is src/exec/exec_dev.h. */
#ifndef COMM_EXEC_DEV_INT_H_
#define COMM_EXEC_DEV_INT_H_

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "communicator.h"
#include "exec.h"
#include "exec_dev.h"

/* Plans whose steps move at most DEV_TINY_BYTES (COMM_DEV_TINY_BYTES) run one warp per channel: a block
 * barrier of one warp costs next to nothing, and 32 lanes hold 256 bytes of LL lines in one pass. */
#define DEV_THREADS_TINY 32
#define DEV_TINY_BYTES 256

typedef struct {
  void* host; /* pinned, mapped */
  size_t cap;
  cudaEvent_t done; /* recorded after the launch that reads it */
  int pending;
} planBuf;

typedef struct scratchBuf {
  void* ptr;
  struct scratchBuf* next;
} scratchBuf;

typedef struct commDevState {
  int dev;
  int alwaysJoin;    /* COMM_DEV_STREAM_JOIN=1: every call goes through the executor's stream */
  int smemPlan;      /* COMM_DEV_SMEM_PLAN (default 1): kernels copy their plan into shared memory first */
  int earlyLaunch;   /* COMM_DEV_PDL (default 1): one-channel kernels launch early (exec_dev.h) */
  int64_t tinyBytes; /* COMM_DEV_TINY_BYTES: plans whose steps move at most this much run one warp */
  int llBatch;       /* COMM_DEV_LL_BATCH (default 2): 1: LL sends or receives to several peers at once;
                         * 2: and one-shot allreduce folds */
  /* Stream order without an event per call: every block of a kernel launched outside graph capture adds 1 to
   * *doneBlocks (device memory) when it ends; launchedBlocks counts those blocks as launched. A call on
   * another stream than the previous one (lastStream) first makes its stream wait, on the GPU, until the
   * count reaches launchedBlocks (commDevFollowLast, commDevWaitLaunched; exec_dev_stream.c): lastStream
   * itself is never touched again, so it may have been destroyed in between. */
  uint32_t* doneBlocks;
  uint32_t launchedBlocks;
  cudaStream_t lastStream;
  int haveLast;
  volatile int32_t* abortFlagDev; /* the same words, as the kernel addresses them */
  commDevError* errorDev;
  volatile uint64_t* trace; /* COMM_DEV_TRACE=1: the latest kernel's timeline (else NULL) */
  uint64_t* traceDev;
  cudaStream_t stream;
  cudaEvent_t joinIn, joinOut;
  volatile int32_t* abortFlag; /* mapped host memory */
  commDevError* error;         /* mapped host memory */
  int errorReported;
  planBuf* pool;             /* grows when every buffer is still in use */
  struct graphFree* retired; /* pool buffers replaced by bigger ones: freed at teardown (see graphBufRelease) */
  int poolSize, poolNext;
  char* llStaging;     /* LL: 2 pieces per channel */
  scratchBuf* scratch; /* newest first; older ones may still be referenced by captured graphs */
  size_t scratchBytes;
  struct planCacheEntry* planCache; /* [PLAN_CACHE] launched plans, for calls identical to an earlier one */
  int64_t cachedCalls, cachedPreNs, cachedLaunchNs, cachedPostNs; /* COMM_DEV_TRACE: host time of cached calls */
  int planCacheNext, planCacheOff;
} commDevState;

/* exec_dev_plan.c: build the device plan of one plan and launch it on stream (capturing: a graph is being
 * captured through it); plan buffers and the buffers captured graphs own. */
commResult_t commDevLaunchPlan(commComm* comm, const commPlan* plan, cudaStream_t stream, int capturing);
/* Free the pool of plan buffers and the retired ones (teardown, after every kernel ended). */
void commDevPlanBufsFree(commDevState* s);
/* Free the buffers of captured graphs that have gone since (never during a call: cudaFreeHost waits). */
void commDevFreeGraphBufs(void);

/* exec_dev_cache.c: keep the plan just launched for identical later calls (commDevRunCached). */
commResult_t commDevPlanCacheStore(commComm* comm, const commPlan* plan, const commDevArgs* args, size_t inlineBytes,
                                   int threads);

/* exec_dev_stream.c: the stream order of a communicator's launches. */
/* cuStreamWaitValue32 found in the driver (else a WARN and commSystemError). */
commResult_t commDevResolveWaitValue(void);
/* Stream st waits on the GPU until every kernel launched so far outside graph capture has ended. */
commResult_t commDevWaitLaunched(commDevState* s, cudaStream_t st);
/* Before a launch on st: after the previous launches when those were on another stream. */
commResult_t commDevFollowLast(commDevState* s, cudaStream_t st, int capturing);
/* After the launches on st: st is the stream later calls follow. */
void commDevMarkLast(commDevState* s, cudaStream_t st, int capturing);
/* A kernel of nBlocks launched (counted when its blocks will count themselves: outside graph capture). */
void commDevCountLaunch(commDevState* s, int nBlocks, int capturing);

/* exec_dev_error.c: the mapped error record, and with queryStream the executor stream's CUDA state too. */
commResult_t commDevCheckError(commComm* comm, int queryStream);

#endif
