/* The CUDA executor's plan cache: device plans that fit the launch parameters, kept per communicator
 * (commDevPlanCacheStore, after a launch) and launched again as they are for a later identical call
 * (commDevRunCached), skipping the tuner, the schedule and the plan's layout. */
#include <cuda_runtime_api.h>
#include <string.h>

#include "check.h"
#include "cuda_util.h"
#include "debug.h"
#include "exec_dev_int.h"
#include "transport.h"
#include "utils.h"

#define PLAN_CACHE 8 /* device plans kept for repeated calls (COMM_DEV_PLAN_CACHE=0: none) */

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
         e->redop.kind == redop->kind && e->redop.scalarBits == redop->scalarBits && e->redop.divisor == redop->divisor;
}

/* Keep the plan just launched (inline, one caller stream, a collective). */
commResult_t commDevPlanCacheStore(commComm* comm, const commPlan* plan, const commDevArgs* args, size_t inlineBytes,
                                   int threads) {
  commDevState* s = comm->dev;
  if (s->planCacheOff || plan->func == commFuncSendRecv || plan->nStreams != 1 || !plan->repeatable) return commSuccess;
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

commResult_t commDevRunCached(commComm* comm, const commDevCall* t, int* launched) {
  *launched = 0;
  commDevState* s = comm->dev;
  if (s == NULL || s->planCache == NULL || s->alwaysJoin) return commSuccess;
  planCacheEntry* e = NULL;
  for (int i = 0; i < PLAN_CACHE && e == NULL; i++)
    if (planCacheKeyEq(&s->planCache[i], t->func, t->count, t->dtype, t->redop, t->devScalar, t->root, t->sendbuff,
                       t->recvbuff))
      e = &s->planCache[i];
  if (e == NULL) return commSuccess;
  int64_t t0 = s->trace ? commTimeNs() : 0, t1 = 0, t2 = 0;
  commResult_t res = commSuccess;
  commCudaDevGuard g;
  COMMCHECK(commCudaDevEnter(comm->cudaDev, &g));
  COMMCHECKGOTO(commDevCheckError(comm, 0), res, out);
  cudaStream_t st = (cudaStream_t)t->stream;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CUDACHECKGOTO(cudaStreamIsCapturing(st, &cs), res, out);
  const int capturing = cs == cudaStreamCaptureStatusActive;
  COMMCHECKGOTO(commDevFollowLast(s, st, capturing), res, out);
  e->args.hdr.opCount = comm->opCount++;
  e->args.hdr.sig[COMM_DEV_SIG_SEQ_WORD] = t->collSeq; /* the rest of the signature is the key's */
  e->args.hdr.sigDigest = commDevSigDigest(e->args.hdr.sig);
  e->args.hdr.doneBlocks = capturing ? NULL : s->doneBlocks;
  if (e->args.hdr.proxyBusy) commTransportDevLaunched(comm);
  if (t0) t1 = commTimeNs();
  cudaError_t ce = (cudaError_t)commDevLaunch(&e->args, e->inlineBytes, e->threads, st);
  if (t0) t2 = commTimeNs();
  if (ce != cudaSuccess) {
    res = commCudaFail("the executor's kernel launch", ce);
    goto out;
  }
  commDevCountLaunch(s, e->args.hdr.nChannels, capturing);
  commDevMarkLast(s, st, capturing);
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
