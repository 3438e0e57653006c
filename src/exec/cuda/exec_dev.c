/* The CUDA executor's host side: per-communicator stream, events, error and abort words; turning plans
 * into device plans; launching them joined to the callers' streams (src/include/exec_dev.h). */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "cuda_util.h"
#include "debug.h"
#include "enqueue.h"
#include "exec.h"
#include "exec_dev.h"
#include "param.h"
#include "transport.h"
#include "tune.h"
#include "utils.h"

#define PLAN_POOL 16      /* pinned plan buffers to start with (the pool grows, the host never waits) */
#define PLAN_CACHE 8      /* device plans kept for repeated calls (COMM_DEV_PLAN_CACHE=0: none) */
#define MAX_JOIN_STREAMS 8 /* distinct caller streams of one communicator in one group joined per call */

typedef struct {
  void* host;  /* pinned, mapped */
  size_t cap;
  cudaEvent_t done; /* recorded after the launch that reads it */
  int pending;
} planBuf;

typedef struct scratchBuf {
  void* ptr;
  struct scratchBuf* next;
} scratchBuf;

/* Plans whose steps move at most DEV_TINY_BYTES (COMM_DEV_TINY_BYTES) run one warp per channel: a block
 * barrier of one warp costs next to nothing, and 32 lanes hold 256 bytes of LL lines in one pass. */
#define DEV_THREADS_TINY 32
#define DEV_TINY_BYTES 256

typedef struct commDevState {
  int dev;
  int alwaysJoin;       /* COMM_DEV_STREAM_JOIN=1: every call goes through the executor's stream */
  int smemPlan;         /* COMM_DEV_SMEM_PLAN (default 1): kernels copy their plan into shared memory first */
  int earlyLaunch;      /* COMM_DEV_PDL (default 1): one-channel kernels launch early (exec_dev.h) */
  int64_t tinyBytes;    /* COMM_DEV_TINY_BYTES: plans whose steps move at most this much run one warp */
  int llBatch;          /* COMM_DEV_LL_BATCH (default 2): 1: LL sends or receives to several peers at once;
                         * 2: and one-shot allreduce folds */
  /* Stream order without an event per call: every block of a kernel launched outside graph capture adds 1 to
   * *doneBlocks (device memory) when it ends; launchedBlocks counts those blocks as launched. A call on
   * another stream than the previous one (lastStream) first makes its stream wait, on the GPU, until the
   * count reaches launchedBlocks (followLast, waitLaunched): lastStream itself is never touched again, so it may
   * have been destroyed in between. */
  uint32_t* doneBlocks;
  uint32_t launchedBlocks;
  cudaStream_t lastStream;
  int haveLast;
  volatile int32_t* abortFlagDev; /* the same words, as the kernel addresses them */
  commDevError* errorDev;
  volatile uint64_t* trace;       /* COMM_DEV_TRACE=1: the latest kernel's timeline (else NULL) */
  uint64_t* traceDev;
  cudaStream_t stream;
  cudaEvent_t joinIn, joinOut;
  volatile int32_t* abortFlag; /* mapped host memory */
  commDevError* error;         /* mapped host memory */
  int errorReported;
  planBuf* pool; /* grows when every buffer is still in use */
  struct graphFree* retired; /* pool buffers replaced by bigger ones: freed at teardown (see graphBufRelease) */
  int poolSize, poolNext;
  char* llStaging;     /* LL: 2 pieces per channel */
  scratchBuf* scratch; /* newest first; older ones may still be referenced by captured graphs */
  size_t scratchBytes;
  struct planCacheEntry* planCache; /* [PLAN_CACHE] launched plans, for calls identical to an earlier one */
  int64_t cachedCalls, cachedPreNs, cachedLaunchNs, cachedPostNs; /* COMM_DEV_TRACE: host time of cached calls */
  int planCacheNext, planCacheOff;
} commDevState;

int commDevAvailable(void) { return 1; }

/* Buffers a captured graph owns: freed when the graph goes (the destructor may not call CUDA, so it
 * queues them; a communicator's teardown frees them). Never during a call: cudaFreeHost waits for every
 * kernel on the device, and a peer's kernel of this very call may be waiting for this rank's launch. */
static pthread_mutex_t graphFreeLock = PTHREAD_MUTEX_INITIALIZER;
typedef struct graphFree {
  void* host;
  struct graphFree* next;
} graphFree;
static graphFree* graphFrees;

static void CUDART_CB graphBufRelease(void* p) {
  graphFree* f = (graphFree*)malloc(sizeof(*f));
  if (f == NULL) return; /* leaks one buffer rather than calling CUDA here */
  f->host = p;
  pthread_mutex_lock(&graphFreeLock);
  f->next = graphFrees;
  __atomic_store_n(&graphFrees, f, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&graphFreeLock);
}
static void freeGraphBufs(void) {
  if (__atomic_load_n(&graphFrees, __ATOMIC_ACQUIRE) == NULL) return;
  pthread_mutex_lock(&graphFreeLock);
  graphFree* f = graphFrees;
  graphFrees = NULL;
  pthread_mutex_unlock(&graphFreeLock);
  while (f) {
    graphFree* next = f->next;
    cudaFreeHost(f->host);
    free(f);
    f = next;
  }
}

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
static commResult_t resolveWaitValue(void) {
  pthread_once(&waitValueOnce, waitValueLookup);
  if (waitValue32 != NULL) return commSuccess;
  WARN("the CUDA driver has no cuStreamWaitValue32 (stream memory operations), which the CUDA executor orders "
       "calls on different streams with: a driver of CUDA 12 or later is needed");
  return commSystemError;
}

/* The stream of this call waits on the GPU until every kernel launched so far outside graph capture has
 * ended (their blocks' count reached launchedBlocks). */
static commResult_t waitLaunched(commDevState* s, cudaStream_t st) {
  CUresult r = waitValue32((CUstream)st, (CUdeviceptr)(uintptr_t)s->doneBlocks, s->launchedBlocks,
                           CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS) {
    WARN("cuStreamWaitValue32 (ordering a call after the communicator's previous kernels) failed: CUresult %d",
         (int)r);
    return commUnhandledCudaError;
  }
  return commSuccess;
}

static commResult_t stateCreate(commComm* comm) {
  commDevState* s = NULL;
  commResult_t res = commSuccess;
  COMMCHECK(commCalloc(&s, 1, sizeof(*s)));
  s->dev = comm->cudaDev;
  CUDACHECKGOTO(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), res, fail);
  CUDACHECKGOTO(cudaEventCreateWithFlags(&s->joinIn, cudaEventDisableTiming), res, fail);
  CUDACHECKGOTO(cudaEventCreateWithFlags(&s->joinOut, cudaEventDisableTiming), res, fail);
  s->alwaysJoin = (int)commParamInt("COMM_DEV_STREAM_JOIN", 0, 0, 1);
  s->llBatch = (int)commParamInt("COMM_DEV_LL_BATCH", 2, 0, 2);
  s->smemPlan = (int)commParamInt("COMM_DEV_SMEM_PLAN", 1, 0, 1);
  s->earlyLaunch = (int)commParamInt("COMM_DEV_PDL", 1, 0, 1);
  s->tinyBytes = commParamInt("COMM_DEV_TINY_BYTES", DEV_TINY_BYTES, 0, 4096);
  s->planCacheOff = commParamInt("COMM_DEV_PLAN_CACHE", 1, 0, 1) == 0;
  void* words = NULL;
  CUDACHECKGOTO(cudaHostAlloc(&words, 4096, cudaHostAllocMapped | cudaHostAllocPortable), res, fail);
  memset(words, 0, 4096);
  s->abortFlag = (volatile int32_t*)words;
  s->error = (commDevError*)((char*)words + 64);
  void* wordsDev = NULL;
  cudaError_t we = cudaHostGetDevicePointer(&wordsDev, words, 0);
  if (we != cudaSuccess) {
    res = commCudaFail("cudaHostGetDevicePointer", we);
    goto fail;
  }
  s->abortFlagDev = (volatile int32_t*)wordsDev;
  s->errorDev = (commDevError*)((char*)wordsDev + 64);
  if (commParamInt("COMM_DEV_TRACE", 0, 0, 1)) {
    s->trace = (volatile uint64_t*)((char*)words + 512);
    memset((void*)s->trace, 0, (8 + COMM_DEV_TRACE_STEPS) * sizeof(uint64_t));
    s->traceDev = (uint64_t*)((char*)wordsDev + 512);
  }
  COMMCHECKGOTO(resolveWaitValue(), res, fail);
  /* The LL staging, then the block counter of the stream order, zeroed before any kernel runs. */
  const size_t staging = (size_t)COMM_MAX_CHANNELS * 2 * COMM_DEV_LL_PIECE;
  CUDACHECKGOTO(cudaMalloc((void**)&s->llStaging, staging + 256), res, fail);
  s->doneBlocks = (uint32_t*)(s->llStaging + staging);
  CUDACHECKGOTO(cudaMemsetAsync(s->doneBlocks, 0, sizeof(uint32_t), s->stream), res, fail);
  CUDACHECKGOTO(cudaStreamSynchronize(s->stream), res, fail);
  commDevKernelInfo ki = {0, 0, 0, 0, 0};
  CUDACHECKGOTO((cudaError_t)commDevLoadKernels(&ki), res, fail);
  comm->dev = s;
  INFO(COMM_INIT, "rank %d: CUDA executor on device %d: own stream, %d threads per channel; the kernel uses %d "
       "registers and %d bytes of local memory per thread, %d SMs hold %d blocks each (%d of %d threads)",
       comm->rank, comm->cudaDev, COMM_DEV_THREADS, ki.numRegs, ki.localBytes, ki.smCount, ki.blocksPerSm,
       ki.blocksPerSmSmall, COMM_DEV_THREADS_SMALL);
  return commSuccess;
fail:
  if (s->abortFlag) cudaFreeHost((void*)s->abortFlag);
  if (s->llStaging) cudaFree(s->llStaging);
  if (s->joinOut) cudaEventDestroy(s->joinOut);
  if (s->joinIn) cudaEventDestroy(s->joinIn);
  if (s->stream) cudaStreamDestroy(s->stream);
  free(s);
  return res;
}

commResult_t commDevEnsure(commComm* comm) {
  if (comm->dev != NULL) return commSuccess;
  commCudaDevGuard g;
  COMMCHECK(commCudaDevEnter(comm->cudaDev, &g));
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode); /* the first call may come inside a graph capture */
  commResult_t res = stateCreate(comm);
  cudaThreadExchangeStreamCaptureMode(&mode);
  commCudaDevLeave(comm->cudaDev, &g);
  return res;
}

commResult_t commDevScratch(commComm* comm, size_t bytes, void** scratch) {
  COMMCHECK(commDevEnsure(comm));
  commDevState* s = comm->dev;
  if (bytes <= s->scratchBytes) {
    *scratch = s->scratch->ptr;
    return commSuccess;
  }
  scratchBuf* b = NULL;
  COMMCHECK(commCalloc(&b, 1, sizeof(*b)));
  commCudaDevGuard g;
  COMMCHECK(commCudaDevEnter(comm->cudaDev, &g));
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode); /* allowed while the caller captures a graph */
  cudaError_t e = cudaMalloc(&b->ptr, bytes);
  cudaThreadExchangeStreamCaptureMode(&mode);
  commCudaDevLeave(comm->cudaDev, &g);
  if (e != cudaSuccess) {
    free(b);
    WARN("rank %d: cannot allocate %zu bytes of device scratch: %s", comm->rank, bytes, cudaGetErrorString(e));
    return commSystemError;
  }
  b->next = s->scratch;
  s->scratch = b;
  s->scratchBytes = bytes;
  *scratch = b->ptr;
  return commSuccess;
}

static commResult_t pollError(commComm* comm, int queryStream);

/* ---- Device plans ---- */

typedef struct {
  int channel, peer, isSend;
} connKey;

static int connIndex(connKey* keys, int* n, int channel, int peer, int isSend) {
  for (int i = *n - 1; i >= 0; i--)
    if (keys[i].channel == channel && keys[i].peer == peer && keys[i].isSend == isSend) return i;
  keys[*n] = (connKey){channel, peer, isSend};
  return (*n)++;
}

static inline uint64_t devAddr(const commPlan* plan, commBufRef ref) {
  return (uint64_t)(uintptr_t)((char*)plan->bufs[ref.buf] + ref.offset * plan->eltSize);
}

/* A device plan's layout: its connections (keys, in order of first use), each step's connection indices
 * (stepConn[2i] send, [2i+1] receive; -1: none), hdr's channel and step ranges, the bytes of connections
 * then steps (*bytes), and the most data one step moves (*mostStepBytes). */
static commResult_t planLayout(commComm* comm, const commPlan* plan, connKey* keys, int* stepConn,
                               commDevPlanHdr* hdr, size_t* bytes, size_t* mostStepBytes) {
  int nConns = 0, k = 0;
  size_t most = 0;
  const commSchedule* sc = &plan->sched;
  for (int c = 0; c < sc->nChannels; c++) {
    hdr->stepBegin[c] = k;
    for (int i = 0; i < sc->channels[c].nSteps; i++, k++) {
      const commStep* st = &sc->channels[c].steps[i];
      if (st->prim >= COMM_NUM_PRIMS) {
        WARN("rank %d: %s: unknown primitive %d in schedule", comm->rank, commFuncName(plan->func), st->prim);
        return commInternalError;
      }
      stepConn[2 * k] = st->sendPeer >= 0 ? connIndex(keys, &nConns, c, st->sendPeer, 1) : -1;
      stepConn[2 * k + 1] = st->recvPeer >= 0 ? connIndex(keys, &nConns, c, st->recvPeer, 0) : -1;
      size_t n = (st->count > st->recvCount ? st->count : st->recvCount) * plan->eltSize;
      if (n > most) most = n;
    }
  }
  hdr->stepBegin[sc->nChannels] = k;
  hdr->nChannels = sc->nChannels;
  hdr->nConns = nConns;
  int mostSteps = 0;
  for (int c = 0; c < sc->nChannels; c++)
    if (hdr->stepBegin[c + 1] - hdr->stepBegin[c] > mostSteps) mostSteps = hdr->stepBegin[c + 1] - hdr->stepBegin[c];
  size_t smem = (size_t)nConns * sizeof(commDevConn) + (size_t)mostSteps * sizeof(commDevStep);
  hdr->smemPlanBytes = comm->dev->smemPlan && smem <= COMM_DEV_SMEM_PLAN_MAX ? (uint32_t)smem : 0;
  hdr->earlyLaunch = (uint32_t)comm->dev->earlyLaunch;
  *bytes = (size_t)nConns * sizeof(commDevConn) + (size_t)k * sizeof(commDevStep);
  *mostStepBytes = most;
  return commSuccess;
}

/* Write the plan (connections, then steps with device addresses) at area, as planLayout laid it out. */
static commResult_t planFill(commComm* comm, const commPlan* plan, const connKey* keys, const int* stepConn,
                             commDevPlanHdr* hdr, char* area) {
  commDevConn* conns = (commDevConn*)area;
  for (int i = 0; i < hdr->nConns; i++) {
    commChannel* ch = &comm->channels[keys[i].channel];
    commConn* conn = keys[i].isSend ? ch->devSend[keys[i].peer] : ch->devRecv[keys[i].peer];
    if (conn == NULL) {
      WARN("rank %d: %s opCount %llu: no device connection %s rank %d on channel %d", comm->rank,
           commFuncName(plan->func), (unsigned long long)plan->opCount, keys[i].isSend ? "to" : "from",
           keys[i].peer, keys[i].channel);
      return commInternalError;
    }
    if (conn->transport == NULL || conn->transport->devConn == NULL) {
      WARN("rank %d: device connection %s rank %d on channel %d: transport %s cannot serve device buffers",
           comm->rank, keys[i].isSend ? "to" : "from", keys[i].peer, keys[i].channel,
           conn->transport ? conn->transport->name : "(none)");
      return commInternalError;
    }
    COMMCHECK(conn->transport->devConn(conn, &conns[i]));
    if (conns[i].failed != NULL && hdr->proxyBusy == NULL) hdr->proxyBusy = commNetDevBusyWords(comm);
  }
  commDevStep* out = (commDevStep*)(area + (size_t)hdr->nConns * sizeof(commDevConn));
  const commSchedule* sc = &plan->sched;
  int k = 0;
  for (int c = 0; c < sc->nChannels; c++) {
    for (int i = 0; i < sc->channels[c].nSteps; i++, k++) {
      const commStep* st = &sc->channels[c].steps[i];
      commDevStep* d = &out[k];
      memset(d, 0, sizeof(*d));
      d->prim = st->prim;
      d->flags = st->flags;
      d->sendPeer = st->sendPeer;
      d->recvPeer = st->recvPeer;
      d->sendConn = stepConn[2 * k];
      d->recvConn = stepConn[2 * k + 1];
      d->src = devAddr(plan, st->src);
      d->dst = devAddr(plan, st->dst);
      d->count = st->count;
      d->recvCount = st->recvCount;
    }
  }
  return commSuccess;
}

/* Plan bytes too big for the parameters: a pinned buffer the kernel reads in place. Outside capture, from
 * the pool; inside, one of its own that the graph owns. */
static commResult_t planStorage(commComm* comm, size_t bytes, int capturing, void** host, planBuf** pooled) {
  commDevState* s = comm->dev;
  *pooled = NULL;
  if (capturing) {
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t e = cudaHostAlloc(host, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) return commCudaFail("cudaHostAlloc (captured plan)", e);
    return commSuccess;
  }
  /* A buffer whose launch has finished, else a new one: the host never waits here (a kernel still
   * reading a buffer may wait for a peer this very thread launches later in the same group). */
  planBuf* b = NULL;
  for (int i = 0; i < s->poolSize && b == NULL; i++) {
    planBuf* c = &s->pool[(s->poolNext + i) % s->poolSize];
    if (c->pending) {
      cudaError_t q = cudaEventQuery(c->done);
      if (q == cudaErrorNotReady) continue;
      if (q != cudaSuccess) return commCudaFail("cudaEventQuery (plan buffer)", q);
      c->pending = 0;
    }
    b = c;
    s->poolNext = (int)(c - s->pool + 1) % s->poolSize;
  }
  if (b == NULL) {
    int n = s->poolSize ? s->poolSize * 2 : PLAN_POOL;
    COMMCHECK(commRealloc(&s->pool, (size_t)s->poolSize, (size_t)n, sizeof(*s->pool)));
    b = &s->pool[s->poolSize];
    s->poolNext = (s->poolSize + 1) % n;
    s->poolSize = n;
  }
  if (b->cap < bytes) {
    if (b->host) { /* retired, not freed: cudaFreeHost would wait for peers' kernels waiting for us */
      struct graphFree* r = NULL;
      COMMCHECK(commCalloc(&r, 1, sizeof(*r)));
      r->host = b->host;
      r->next = s->retired;
      s->retired = r;
    }
    b->host = NULL;
    b->cap = 0;
    size_t cap = bytes < 65536 ? 65536 : bytes * 2;
    CUDACHECK(cudaHostAlloc(&b->host, cap, cudaHostAllocMapped | cudaHostAllocPortable));
    b->cap = cap;
  }
  if (b->done == NULL) CUDACHECK(cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming));
  *host = b->host;
  *pooled = b;
  return commSuccess;
}

/* Give a captured plan's buffer to the graph being captured on stream. */
static commResult_t giveToGraph(cudaStream_t stream, void* host) {
  enum cudaStreamCaptureStatus status;
  cudaGraph_t graph = NULL;
  CUDACHECK(cudaStreamGetCaptureInfo(stream, &status, NULL, &graph, NULL, NULL, NULL));
  cudaUserObject_t obj;
  CUDACHECK(cudaUserObjectCreate(&obj, host, graphBufRelease, 1, cudaUserObjectNoDestructorSync));
  CUDACHECK(cudaGraphRetainUserObject(graph, obj, 1, cudaGraphUserObjectMove));
  return commSuccess;
}

/* ---- Repeated calls ----
 * A collective on device buffers identical to an earlier one of the communicator (function, count, datatype,
 * op, root, buffers) gets the same device plan: everything in it (connections, scratch, staging, the
 * schedule's steps) stays valid while the communicator lives (scratch buffers that grew are kept, and its
 * kernels run one after another). So a plan that fits the launch parameters is kept and launched again
 * as is, with its new opCount: the host skips the tuner, the schedule and the plan's layout (the target:
 * host time per call close to a bare launch). Not with a tuner plugin, whose answers may change. */
typedef struct planCacheEntry {
  int used;
  commFunc_t func;
  size_t count;
  commDataType_t dtype;
  commRedOpArgs redop;
  const void* devScalar;
  int root;
  const void* sendbuff;
  const void* recvbuff;
  size_t inlineBytes;
  int threads;
  commDevArgs args;
} planCacheEntry;

static int planCacheKeyEq(const planCacheEntry* e, commFunc_t func, size_t count, commDataType_t dtype,
                          const commRedOpArgs* redop, const void* devScalar, int root, const void* sendbuff,
                          const void* recvbuff) {
  return e->used && e->func == func && e->count == count && e->dtype == dtype && e->root == root &&
         e->sendbuff == sendbuff && e->recvbuff == recvbuff && e->devScalar == devScalar &&
         e->redop.kind == redop->kind && e->redop.scalarBits == redop->scalarBits &&
         e->redop.divisor == redop->divisor;
}

/* Keep the plan just launched (inline, one caller stream, a collective). */
static commResult_t planCacheStore(commComm* comm, const commPlan* plan, const commDevArgs* args, size_t inlineBytes,
                                   int threads) {
  commDevState* s = comm->dev;
  if (s->planCacheOff || plan->func == commFuncSendRecv || plan->nStreams != 1 ||
      (comm->tuner && comm->tuner->plugin))
    return commSuccess;
  if (s->planCache == NULL) COMMCHECK(commCalloc(&s->planCache, PLAN_CACHE, sizeof(planCacheEntry)));
  planCacheEntry* e = NULL;
  for (int i = 0; i < PLAN_CACHE && e == NULL; i++)
    if (planCacheKeyEq(&s->planCache[i], plan->func, plan->count, plan->dtype, &plan->redop, plan->devScalar,
                       plan->root, plan->bufs[COMM_BUF_INPUT], plan->bufs[COMM_BUF_OUTPUT]))
      e = &s->planCache[i];
  if (e == NULL) {
    e = &s->planCache[s->planCacheNext];
    s->planCacheNext = (s->planCacheNext + 1) % PLAN_CACHE;
  }
  e->used = 1;
  e->func = plan->func;
  e->count = plan->count;
  e->dtype = plan->dtype;
  e->redop = plan->redop;
  e->devScalar = plan->devScalar;
  e->root = plan->root;
  e->sendbuff = plan->bufs[COMM_BUF_INPUT];
  e->recvbuff = plan->bufs[COMM_BUF_OUTPUT];
  e->inlineBytes = inlineBytes;
  e->threads = threads;
  e->args.hdr = args->hdr;
  memcpy(e->args.inl.bytes, args->inl.bytes, inlineBytes);
  return commSuccess;
}

/* One caller stream: the launch goes after the communicator's previous ones when those were on another
 * stream, and the stream is remembered after. (A graph being captured cannot depend on work outside it: its
 * replays are ordered by the caller's streams, as every launch outside it is.) */
static commResult_t followLast(commDevState* s, cudaStream_t st, int capturing) {
  if (!capturing && s->haveLast && s->lastStream != st) COMMCHECK(waitLaunched(s, st));
  return commSuccess;
}
static void markLast(commDevState* s, cudaStream_t st, int capturing) {
  if (capturing) return;
  s->lastStream = st;
  s->haveLast = 1;
}
/* A kernel of nBlocks launched: counted when its blocks will count themselves (outside graph capture). */
static void countLaunch(commDevState* s, int nBlocks, int capturing) {
  if (!capturing) s->launchedBlocks += (uint32_t)nBlocks;
}

#define STACK_CONN_KEYS 64

static commResult_t launchPlan(commComm* comm, const commPlan* plan, cudaStream_t stream, int capturing) {
  commDevState* s = comm->dev;
  static __thread commDevArgs args; /* 2 KB: off the stack */
  /* Connections and per-step indices: on the stack for small plans (at most 2 per step each). */
  connKey keysStack[STACK_CONN_KEYS];
  int stepConnStack[STACK_CONN_KEYS];
  connKey* keys = keysStack;
  int* stepConn = stepConnStack;
  commResult_t res = commSuccess;
  size_t maxConns = 0;
  for (int c = 0; c < plan->sched.nChannels; c++) maxConns += 2 * (size_t)plan->sched.channels[c].nSteps;
  if (maxConns > STACK_CONN_KEYS) {
    keys = NULL;
    stepConn = NULL;
    COMMCHECKGOTO(commCalloc(&keys, maxConns, sizeof(*keys)), res, out);
    COMMCHECKGOTO(commCalloc(&stepConn, maxConns, sizeof(*stepConn)), res, out);
  }
  memset(&args.hdr, 0, sizeof(args.hdr));
  commDevPlanHdr* h = &args.hdr;
  size_t bytes = 0, mostStepBytes = 0;
  COMMCHECKGOTO(planLayout(comm, plan, keys, stepConn, h, &bytes, &mostStepBytes), res, out);
  h->dtype = plan->dtype;
  h->redopKind = plan->redop.kind;
  h->scalarBits = plan->redop.scalarBits;
  h->divisor = plan->redop.divisor;
  h->scalarAddr = (uint64_t)(uintptr_t)plan->devScalar;
  h->slotBytes = comm->slotBytes;
  h->nSlots = (uint32_t)comm->nSlots;
  h->eltSize = (uint32_t)plan->eltSize;
  h->abortFlag = s->abortFlagDev;
  h->error = s->errorDev;
  h->trace = s->traceDev;
  h->proto = plan->devProto;
  h->llBatch = s->llBatch;
  h->llStaging = s->llStaging;
  h->timeoutNs = comm->timeoutMs < 0 ? 0 : comm->timeoutMs == 0 ? 1 : (uint64_t)comm->timeoutMs * 1000000ull;
  h->opCount = plan->opCount;
  h->doneBlocks = capturing ? NULL : s->doneBlocks;
  planBuf* pooled = NULL;
  void* host = NULL;
  char* area = args.inl.bytes;
  if (bytes > COMM_DEV_INLINE_BYTES) {
    COMMCHECKGOTO(planStorage(comm, bytes, capturing, &host, &pooled), res, out);
    area = host;
    void* devPtr = NULL;
    CUDACHECKGOTO(cudaHostGetDevicePointer(&devPtr, host, 0), res, out);
    h->planAddr = (uint64_t)(uintptr_t)devPtr;
  }
  COMMCHECKGOTO(planFill(comm, plan, keys, stepConn, h, area), res, out);
  if (h->proxyBusy) commNetDevKick(comm); /* its net FIFOs move from now on */
  if (h->nChannels > 0) {
    /* Steps that move little run with fewer threads: less to synchronise per step. */
    int threads = mostStepBytes <= (size_t)s->tinyBytes       ? DEV_THREADS_TINY
                  : mostStepBytes <= COMM_DEV_SMALL_STEP_BYTES ? COMM_DEV_THREADS_SMALL
                                                               : COMM_DEV_THREADS;
    cudaError_t e = (cudaError_t)commDevLaunch(&args, h->planAddr ? 0 : bytes, threads, stream);
    if (e != cudaSuccess) {
      res = commCudaFail("the executor's kernel launch", e);
      goto out;
    }
    countLaunch(s, h->nChannels, capturing);
    if (!h->planAddr) COMMCHECKGOTO(planCacheStore(comm, plan, &args, bytes, threads), res, out);
  }
  if (pooled) {
    CUDACHECKGOTO(cudaEventRecord(pooled->done, stream), res, out);
    pooled->pending = 1;
  } else if (host && capturing) {
    COMMCHECKGOTO(giveToGraph(stream, host), res, out);
  }
  INFO(COMM_COLL, "rank %d: %s opCount %llu on device: %d channels, %d connections, plan %zu bytes %s",
       comm->rank, commFuncName(plan->func), (unsigned long long)plan->opCount, h->nChannels, h->nConns, bytes,
       h->planAddr ? "in pinned memory" : "in the launch parameters");
out:
  if (keys != keysStack) free(keys);
  if (stepConn != stepConnStack) free(stepConn);
  return res;
}

commResult_t commDevRunCached(commComm* comm, const commTask* t, int* launched) {
  *launched = 0;
  commDevState* s = comm->dev;
  if (s == NULL || s->planCache == NULL || s->alwaysJoin) return commSuccess;
  planCacheEntry* e = NULL;
  for (int i = 0; i < PLAN_CACHE && e == NULL; i++)
    if (planCacheKeyEq(&s->planCache[i], t->func, t->count, t->dtype, &t->redop, t->devScalar, t->root, t->sendbuff,
                       t->recvbuff))
      e = &s->planCache[i];
  if (e == NULL) return commSuccess;
  int64_t t0 = s->trace ? commTimeNs() : 0, t1 = 0, t2 = 0;
  commResult_t res = commSuccess;
  commCudaDevGuard g;
  COMMCHECK(commCudaDevEnter(comm->cudaDev, &g));
  COMMCHECKGOTO(pollError(comm, 0), res, out);
  cudaStream_t st = (cudaStream_t)t->stream;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CUDACHECKGOTO(cudaStreamIsCapturing(st, &cs), res, out);
  const int capturing = cs == cudaStreamCaptureStatusActive;
  COMMCHECKGOTO(followLast(s, st, capturing), res, out);
  e->args.hdr.opCount = comm->opCount++;
  e->args.hdr.doneBlocks = capturing ? NULL : s->doneBlocks;
  if (e->args.hdr.proxyBusy) commNetDevKick(comm);
  if (t0) t1 = commTimeNs();
  cudaError_t ce = (cudaError_t)commDevLaunch(&e->args, e->inlineBytes, e->threads, st);
  if (t0) t2 = commTimeNs();
  if (ce != cudaSuccess) {
    res = commCudaFail("the executor's kernel launch", ce);
    goto out;
  }
  countLaunch(s, e->args.hdr.nChannels, capturing);
  markLast(s, st, capturing);
  *launched = 1;
  if (t0) { /* where the host time of a cached call goes (reported at teardown) */
    s->cachedCalls++;
    s->cachedPreNs += t1 - t0;
    s->cachedLaunchNs += t2 - t1;
    s->cachedPostNs += commTimeNs() - t2;
  }
  INFO(COMM_COLL, "rank %d: %s opCount %llu on device: the plan of an identical earlier call", comm->rank,
       commFuncName(t->func), (unsigned long long)e->args.hdr.opCount);
out:
  commCudaDevLeave(comm->cudaDev, &g);
  return res;
}

commResult_t commDevRunPlans(commComm* comm, commPlan** plans, int nPlans) {
  if (nPlans == 0) return commSuccess;
  commResult_t res = commSuccess;
  commCudaDevGuard g;
  COMMCHECK(commCudaDevEnter(comm->cudaDev, &g));
  if (comm->dev == NULL) COMMCHECKGOTO(commDevEnsure(comm), res, out);
  COMMCHECKGOTO(pollError(comm, 0), res, out);
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
    COMMCHECKGOTO(followLast(s, st, capturing), res, out);
    for (int p = 0; p < nPlans; p++) COMMCHECKGOTO(launchPlan(comm, plans[p], st, capturing), res, out);
    markLast(s, st, capturing);
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
  COMMCHECKGOTO(followLast(s, hub, capturing), res, out);
  for (int p = 0; p < nPlans; p++) COMMCHECKGOTO(launchPlan(comm, plans[p], hub, capturing), res, out);
  markLast(s, hub, capturing);
  CUDACHECKGOTO(cudaEventRecord(s->joinOut, hub), res, out);
  for (int i = 0; i < nStreams; i++)
    if (streams[i] != hub) CUDACHECKGOTO(cudaStreamWaitEvent(streams[i], s->joinOut, 0), res, out);
out:
  commCudaDevLeave(comm->cudaDev, &g);
  return res;
}

/* The mapped error record, and with queryStream the stream's CUDA state too (not while a graph is being
 * captured through it: a query would end the capture). */
static commResult_t pollError(commComm* comm, int queryStream) {
  commDevState* s = comm->dev;
  if (s == NULL) return commSuccess;
  commResult_t res = commSuccess;
  const commDevError* e = s->error;
  int code = __atomic_load_n(&e->code, __ATOMIC_ACQUIRE);
  if (code != COMM_DEV_OK) {
    res = code == COMM_DEV_TIMEOUT ? commTimeout : code == COMM_DEV_ABORTED && commAborted(comm) ? commInvalidUsage
          : code == COMM_DEV_ABORTED || code == COMM_DEV_NET_FAILED ? commRemoteError : commInvalidUsage;
    if (!s->errorReported) {
      s->errorReported = 1;
      if (code == COMM_DEV_TIMEOUT)
        WARN("rank %d: operation opCount %llu on device timed out: no progress for %lld ms (COMM_TIMEOUT_MS) "
             "while %s rank %d on channel %d", comm->rank, (unsigned long long)e->opCount,
             (long long)comm->timeoutMs, e->isSend ? "waiting for FIFO space to" : "waiting for data from", e->peer,
             e->channel);
      else if (code == COMM_DEV_NET_FAILED)
        WARN("rank %d: operation opCount %llu on device: the network connection %s rank %d on channel %d failed "
             "(the peer closed it or the network failed; COMM_DEBUG=INFO shows the NET proxy's line on it)", comm->rank,
             (unsigned long long)e->opCount, e->isSend ? "to" : "from", e->peer, e->channel);
      else if (code == COMM_DEV_SIZE_MISMATCH)
        WARN("rank %d: operation opCount %llu on device: received %llu bytes from rank %d on channel %d where %llu "
             "were expected: the ranks called this operation with different counts or datatypes", comm->rank,
             (unsigned long long)e->opCount, (unsigned long long)e->got, e->peer, e->channel,
             (unsigned long long)e->expected);
      else
        WARN("rank %d: operation opCount %llu on device was aborted while %s rank %d on channel %d", comm->rank,
             (unsigned long long)e->opCount, e->isSend ? "sending to" : "receiving from", e->peer, e->channel);
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
  if (res != commSuccess) commSetAsyncError(comm, res);
  return res;
}

commResult_t commDevPollError(commComm* comm) { return pollError(comm, 1); }

commResult_t commDevSync(commComm* comm) {
  commDevState* s = comm->dev;
  if (s == NULL) return commSuccess;
  commCudaDevGuard g;
  COMMCHECK(commCudaDevEnter(comm->cudaDev, &g));
  /* Every kernel launched outside graph capture ends (the executor's stream waits for their count). */
  commResult_t res = waitLaunched(s, s->stream);
  cudaError_t e = cudaStreamSynchronize(s->stream);
  commCudaDevLeave(comm->cudaDev, &g);
  if (e != cudaSuccess) return commCudaFail("cudaStreamSynchronize (finalize)", e);
  if (res != commSuccess) return res;
  return commDevPollError(comm);
}

void commDevAbort(commComm* comm) {
  commDevState* s = comm->dev;
  if (s == NULL) return;
  *s->abortFlag = 1;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

void commDevFree(commComm* comm) {
  commDevState* s = comm->dev;
  if (s == NULL) return;
  commCudaDevGuard g;
  if (commCudaDevEnter(comm->cudaDev, &g) != commSuccess) return;
  /* Kernels end: finished, aborted (commDevAbort) or timed out. */
  waitLaunched(s, s->stream);
  cudaStreamSynchronize(s->stream);
  if (s->trace)
    INFO(COMM_INIT, "rank %d: COMM_DEV_TRACE: latest kernel started at %llu ns (GPU clock), ran %.2f us, thread 0 "
         "of channel 0 waited %.2f us in %llu waits, the first ending %.2f us after the start", comm->rank,
         (unsigned long long)s->trace[0], (s->trace[1] - s->trace[0]) / 1e3, s->trace[2] / 1e3,
         (unsigned long long)s->trace[3], s->trace[3] ? (s->trace[4] - s->trace[0]) / 1e3 : 0.0);
  if (s->trace && s->trace[5] >= s->trace[0] && s->trace[5] <= s->trace[1])
    INFO(COMM_INIT, "rank %d: COMM_DEV_TRACE: latest kernel's prologue ended %.2f us after its start", comm->rank,
         (s->trace[5] - s->trace[0]) / 1e3);
  if (s->trace && s->trace[6] > s->trace[5] && s->trace[7] >= s->trace[6] && s->trace[7] <= s->trace[1])
    INFO(COMM_INIT, "rank %d: COMM_DEV_TRACE: its one-shot fold: thread 0 sent its lines %.2f us after the start, "
         "received its first line %.2f us after the start", comm->rank, (s->trace[6] - s->trace[0]) / 1e3,
         (s->trace[7] - s->trace[0]) / 1e3);
  if (s->trace && s->cachedCalls)
    INFO(COMM_INIT, "rank %d: COMM_DEV_TRACE: %lld calls launched a cached plan; per call %.3f us before the launch "
         "(device, error poll, capture status, stream order), %.3f us in the launch, %.3f us after",
         comm->rank, (long long)s->cachedCalls, s->cachedPreNs / 1e3 / s->cachedCalls,
         s->cachedLaunchNs / 1e3 / s->cachedCalls, s->cachedPostNs / 1e3 / s->cachedCalls);
  if (s->trace) {
    char line[512];
    int len = 0;
    uint64_t prev = s->trace[0];
    for (int i = 0; i < COMM_DEV_TRACE_STEPS && s->trace[8 + i] >= prev && s->trace[8 + i] <= s->trace[1]; i++) {
      len += snprintf(line + len, sizeof(line) - (size_t)len, " %.2f", (s->trace[8 + i] - prev) / 1e3);
      prev = s->trace[8 + i];
      if (len >= (int)sizeof(line) - 16) break;
    }
    INFO(COMM_INIT, "rank %d: COMM_DEV_TRACE: channel 0's phases took (us; a step, or steps run as one):%s",
         comm->rank, len ? line : " -");
  }
  for (int i = 0; i < s->poolSize; i++) {
    if (s->pool[i].host) cudaFreeHost(s->pool[i].host);
    if (s->pool[i].done) cudaEventDestroy(s->pool[i].done);
  }
  free(s->pool);
  free(s->planCache);
  while (s->retired) {
    struct graphFree* next = s->retired->next;
    cudaFreeHost(s->retired->host);
    free(s->retired);
    s->retired = next;
  }
  while (s->scratch) {
    scratchBuf* next = s->scratch->next;
    cudaFree(s->scratch->ptr);
    free(s->scratch);
    s->scratch = next;
  }
  cudaEventDestroy(s->joinIn);
  cudaEventDestroy(s->joinOut);
  cudaFree(s->llStaging);
  cudaStreamDestroy(s->stream);
  cudaFreeHost((void*)s->abortFlag);
  commCudaDevLeave(comm->cudaDev, &g);
  freeGraphBufs();
  free(s);
  comm->dev = NULL;
}
