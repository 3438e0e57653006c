/* The CUDA executor's device plans: a commPlan turned into a commDevArgs (its connections in order of
 * first use, its steps with device addresses, the header's channel ranges and settings), carried in the
 * launch parameters or, when too big, in a pinned mapped buffer: from a pool that grows (the host never
 * waits for a buffer), or one of its own inside graph capture that the graph owns (cudaUserObject; freed
 * at a later teardown). commDevLaunchPlan builds and launches one plan. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_util.h"
#include "debug.h"
#include "exec_dev_int.h"
#include "transport.h"
#include "utils.h"

/* The kernel sees the host executor's signature as words (exec_dev.h). */
_Static_assert(sizeof(commOpSig) == COMM_DEV_SIG_BYTES && COMM_DEV_SIG_BYTES == COMM_SLOT_HDR_BYTES,
               "a device message's signature is a host slot's header");
_Static_assert(offsetof(commOpSig, seq) == 8 * COMM_DEV_SIG_SEQ_WORD, "the sequence number is the last word");

#define PLAN_POOL 16 /* pinned plan buffers to start with (the pool grows, the host never waits) */

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
void commDevFreeGraphBufs(void) {
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
static commResult_t planLayout(commComm* comm, const commPlan* plan, connKey* keys, int* stepConn, commDevPlanHdr* hdr,
                               size_t* bytes, size_t* mostStepBytes) {
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
      stepConn[2 * k] = st->sendPeer != -1 ? connIndex(keys, &nConns, c, st->sendPeer, 1) : -1;
      stepConn[2 * k + 1] = st->recvPeer != -1 ? connIndex(keys, &nConns, c, st->recvPeer, 0) : -1;
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
    int peer = keys[i].peer;
    commConn* conn = peer == COMM_PEER_COLLNET ? (keys[i].isSend ? ch->collnetDevSend : ch->collnetDevRecv)
                     : keys[i].isSend          ? ch->devSend[peer]
                                               : ch->devRecv[peer];
    if (conn == NULL) {
      WARN("rank %d: %s opCount %llu: no device connection %s %s %d on channel %d", comm->rank,
           commFuncName(plan->func), (unsigned long long)plan->opCount, keys[i].isSend ? "to" : "from",
           peer == COMM_PEER_COLLNET ? "the collnet group" : "rank", peer, keys[i].channel);
      return commInternalError;
    }
    if (conn->transport == NULL || conn->transport->devConn == NULL) {
      WARN("rank %d: device connection %s rank %d on channel %d: transport %s cannot serve device buffers", comm->rank,
           keys[i].isSend ? "to" : "from", keys[i].peer, keys[i].channel,
           conn->transport ? conn->transport->name : "(none)");
      return commInternalError;
    }
    COMMCHECK(conn->transport->devConn(conn, &conns[i]));
    if (conn->transport->devBusyWords && hdr->proxyBusy == NULL) hdr->proxyBusy = conn->transport->devBusyWords(comm);
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

#define STACK_CONN_KEYS 64

commResult_t commDevLaunchPlan(commComm* comm, const commPlan* plan, cudaStream_t stream, int capturing) {
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
  memcpy(h->sig, &plan->sig, sizeof(h->sig));
  h->sigDigest = commDevSigDigest(h->sig);
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
  if (h->proxyBusy) commTransportDevLaunched(comm); /* its net FIFOs move from now on */
  if (h->nChannels > 0) {
    /* Steps that move little run with fewer threads: less to synchronise per step. */
    int threads = mostStepBytes <= (size_t)s->tinyBytes        ? DEV_THREADS_TINY
                  : mostStepBytes <= COMM_DEV_SMALL_STEP_BYTES ? COMM_DEV_THREADS_SMALL
                                                               : COMM_DEV_THREADS;
    cudaError_t e = (cudaError_t)commDevLaunch(&args, h->planAddr ? 0 : bytes, threads, stream);
    if (e != cudaSuccess) {
      res = commCudaFail("the executor's kernel launch", e);
      goto out;
    }
    commDevCountLaunch(s, h->nChannels, capturing);
    if (!h->planAddr) COMMCHECKGOTO(commDevPlanCacheStore(comm, plan, &args, bytes, threads), res, out);
  }
  if (pooled) {
    CUDACHECKGOTO(cudaEventRecord(pooled->done, stream), res, out);
    pooled->pending = 1;
  } else if (host && capturing) {
    COMMCHECKGOTO(giveToGraph(stream, host), res, out);
  }
  INFO(COMM_COLL, "rank %d: %s opCount %llu on device: %d channels, %d connections, plan %zu bytes %s", comm->rank,
       commFuncName(plan->func), (unsigned long long)plan->opCount, h->nChannels, h->nConns, bytes,
       h->planAddr ? "in pinned memory" : "in the launch parameters");
out:
  if (keys != keysStack) free(keys);
  if (stepConn != stepConnStack) free(stepConn);
  return res;
}

void commDevPlanBufsFree(commDevState* s) {
  for (int i = 0; i < s->poolSize; i++) {
    if (s->pool[i].host) cudaFreeHost(s->pool[i].host);
    if (s->pool[i].done) cudaEventDestroy(s->pool[i].done);
  }
  free(s->pool);
  while (s->retired) {
    struct graphFree* next = s->retired->next;
    cudaFreeHost(s->retired->host);
    free(s->retired);
    s->retired = next;
  }
}
