/* test_gpu_coll's cases of their own (test_gpu_coll.h): mixed host and device buffers, repeated calls, calls
 * on changing streams, graph replays, the timeout and abort of a lone rank, and a peer that leaves. SPDX-License-Identifier: Apache-2.0 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "test_gpu_coll.h"

/* Host send buffer with a device receive buffer, and the reverse: commInvalidArgument, nothing enqueued. */
int runMixed(rankCtx* x) {
  for (int dir = 0; dir < 2; dir++) {
    const char* what = dir ? "allreduce float32 device sendbuff, host recvbuff"
                           : "allreduce float32 host sendbuff, device recvbuff";
    commResult_t rc = commAllReduce(dir ? x->ds : x->hs, dir ? x->hr : x->dr, 1001, commFloat32, commSum, x->comm,
                                    (commStream_t)x->stream);
    int bad = rc != commInvalidArgument, cudaBad = 0;
    if (bad) report(x, what, "returned %d (%s), expected commInvalidArgument", (int)rc, commGetErrorString(rc));
    int f = agreeCall(x, rc != commSuccess, what); /* "ok" here: nothing enqueued */
    if (f < 0) return -1;
    if (f == 1) cudaBad = cudaStreamSynchronize(x->stream) != cudaSuccess; /* enqueued on every rank: let it end */
    if (agreeResult(x, cudaBad, bad, what) < 0) return -1;
  }
  return 0;
}

/* The same allreduce three times with new inputs, each checked: the second and third calls are identical to
 * the first (function, count, type, op, buffers), so they launch its device plan again without building it. */
int runRepeat(rankCtx* x) {
  const char* what = "repeat: the same allreduce int32 max count 777, three times";
  const size_t cnt = 777;
  cudaStream_t st = x->stream;
  for (int it = 0; it < 3; it++) {
    int32_t* in = (int32_t*)x->hs;
    int32_t* out = (int32_t*)x->res;
    for (size_t i = 0; i < cnt; i++) in[i] = (int32_t)((x->rank * 7 + it * 13 + (int)i) % 101);
    cudaError_t ce = cudaMemcpyAsync(x->ds, in, cnt * sizeof(int32_t), cudaMemcpyHostToDevice, st);
    if (ce == cudaSuccess) ce = cudaMemsetAsync(x->dr, 0, cnt * sizeof(int32_t), st);
    commResult_t rc = ce == cudaSuccess
                          ? commAllReduce(x->ds, x->dr, cnt, commInt32, commMax, x->comm, (commStream_t)st)
                          : commInternalError;
    if (ce != cudaSuccess || rc != commSuccess)
      report(x, what, "call %d: commAllReduce %d (%s), CUDA %s", it, (int)rc, commGetErrorString(rc),
             cudaGetErrorName(ce));
    int f = agreeCall(x, ce == cudaSuccess && rc == commSuccess, what);
    if (f < 0) return -1;
    int bad = f != 0, cudaBad = 0;
    if (f == 0) {
      ce = cudaMemcpyAsync(out, x->dr, cnt * sizeof(int32_t), cudaMemcpyDeviceToHost, st);
      if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);
      cudaBad = ce != cudaSuccess;
      if (cudaBad) report(x, what, "call %d: %s", it, cudaGetErrorName(ce));
      for (size_t i = 0; i < cnt && !cudaBad && !bad; i++) {
        int32_t e = 0;
        for (int r = 0; r < x->n; r++) {
          int32_t v = (int32_t)((r * 7 + it * 13 + (int)i) % 101);
          e = r == 0 || v > e ? v : e;
        }
        if (out[i] != e) {
          bad = 1;
          report(x, what, "call %d: element %zu is %d, expected %d", it, i, (int)out[i], (int)e);
        }
      }
    }
    if (agreeResult(x, cudaBad, bad, what) < 0) return -1;
  }
  return 0;
}

static void CUDART_CB sleepFn(void* arg) {
  (void)arg;
  usleep(5000);
}

/* Calls on changing streams: in-place allreduces of uint32 ones, each on the next of three streams of this
 * rank, with nothing between them but a host function that sleeps 5 ms before some of them; the stream of
 * one delayed call is destroyed right after it (and replaced). Each call must run after the one before it,
 * whatever its stream (else it reads its input too early, or two kernels share the FIFOs at once): every
 * element ends as n^calls (mod 2^32). A small count (LL, one channel) and 4 MiB (Simple, several). */
int runStreamOrder(rankCtx* x) {
  const size_t counts[2] = {1001, x->cap / sizeof(uint32_t) < ((size_t)1 << 20) ? x->cap / sizeof(uint32_t)
                                                                                : (size_t)1 << 20};
  const int calls = 9, destroyAt = 4;
  for (int c = 0; c < 2; c++) {
    const size_t cnt = counts[c];
    char what[128];
    snprintf(what, sizeof(what), "stream order: %d in-place allreduces uint32 sum count %zu on three streams", calls,
             cnt);
    if (verbose && x->rank == 0) printf("case %s\n", what), fflush(stdout);
    cudaStream_t sts[3] = {NULL, NULL, NULL};
    int cudaBad = 0, bad = 0;
    for (int i = 0; i < 3; i++) cudaBad |= cudaStreamCreateWithFlags(&sts[i], cudaStreamNonBlocking) != cudaSuccess;
    uint32_t* h = (uint32_t*)x->res;
    for (size_t i = 0; i < cnt; i++) h[i] = 1;
    if (!cudaBad)
      cudaBad = cudaMemcpyAsync(x->dr, h, cnt * sizeof(uint32_t), cudaMemcpyHostToDevice, sts[0]) != cudaSuccess;
    if (!cudaBad) cudaBad = cudaStreamSynchronize(sts[0]) != cudaSuccess;
    if (cudaBad) report(x, what, "setting up the streams failed");
    if (agree(x, cudaBad)) {
      for (int i = 0; i < 3; i++)
        if (sts[i]) cudaStreamDestroy(sts[i]);
      if (agreeResult(x, cudaBad, 1, what) < 0) return -1;
      continue;
    }
    uint32_t expect = 1;
    int k = 0;
    for (; k < calls; k++) {
      cudaStream_t st = sts[k % 3];
      cudaError_t ce = k % 3 == 1 ? cudaLaunchHostFunc(st, sleepFn, NULL) : cudaSuccess;
      commResult_t rc = ce == cudaSuccess
                            ? commAllReduce(x->dr, x->dr, cnt, commUint32, commSum, x->comm, (commStream_t)st)
                            : commInternalError;
      if (ce != cudaSuccess || rc != commSuccess)
        report(x, what, "call %d: commAllReduce %d (%s), CUDA %s", k, (int)rc, commGetErrorString(rc),
               cudaGetErrorName(ce));
      int f = agreeCall(x, ce == cudaSuccess && rc == commSuccess, what);
      if (f < 0) return -1;
      if (f == 1) break;
      expect *= (uint32_t)x->n;
      if (k == destroyAt) { /* its work still runs; the next call, on another stream, must follow it */
        cudaBad |= cudaStreamDestroy(st) != cudaSuccess;
        sts[k % 3] = NULL;
        cudaBad |= cudaStreamCreateWithFlags(&sts[k % 3], cudaStreamNonBlocking) != cudaSuccess;
      }
    }
    bad = k < calls;
    cudaStream_t last = sts[(k + 2) % 3];
    if (!bad && !cudaBad) {
      cudaError_t ce = cudaMemcpyAsync(h, x->dr, cnt * sizeof(uint32_t), cudaMemcpyDeviceToHost, last);
      if (ce == cudaSuccess) ce = cudaStreamSynchronize(last);
      cudaBad = ce != cudaSuccess;
      if (cudaBad) report(x, what, "reading the result: %s", cudaGetErrorName(ce));
      for (size_t i = 0; i < cnt && !cudaBad && !bad; i++)
        if (h[i] != expect) {
          bad = 1;
          report(x, what, "element %zu is %u, expected %u (%d^%d): a call ran before the one before it", i, h[i],
                 expect, x->n, calls);
        }
    }
    for (int i = 0; i < 3; i++)
      if (sts[i]) {
        cudaBad |= cudaStreamSynchronize(sts[i]) != cudaSuccess;
        cudaStreamDestroy(sts[i]);
      }
    if (agreeResult(x, cudaBad, bad, what) < 0) return -1;
  }
  return 0;
}

/* Capture one allreduce in a graph; replay it 5 times with new inputs. */
int runGraph(rankCtx* x) {
  const char* what = "graph: captured allreduce float32 sum count 1001";
  const size_t cnt = 1001;
  cudaStream_t st = x->stream;
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  commResult_t rc = commInternalError;
  cudaError_t ce = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
  if (ce == cudaSuccess) {
    rc = commAllReduce(x->ds, x->dr, cnt, commFloat32, commSum, x->comm, (commStream_t)st);
    ce = cudaStreamEndCapture(st, &g);
  }
  if (ce == cudaSuccess && rc == commSuccess) ce = cudaGraphInstantiate(&ge, g, 0);
  if (ce != cudaSuccess || rc != commSuccess)
    report(x, what, "capture: commAllReduce %d (%s), CUDA %s", (int)rc, commGetErrorString(rc), cudaGetErrorName(ce));
  int f = agreeCall(x, ce == cudaSuccess && rc == commSuccess, what);
  if (f < 0) return -1;
  if (f == 1 && agreeResult(x, 0, 1, what) < 0) return -1;
  for (int it = 0; it < 5 && f == 0; it++) {
    float* in = (float*)x->hs;
    float* out = (float*)x->res;
    for (size_t i = 0; i < cnt; i++) in[i] = (float)((x->rank + 1) * (it + 1) + (int)(i % 5));
    ce = cudaMemcpyAsync(x->ds, in, cnt * sizeof(float), cudaMemcpyHostToDevice, st);
    if (ce == cudaSuccess) ce = cudaMemsetAsync(x->dr, 0, cnt * sizeof(float), st);
    if (ce == cudaSuccess) ce = cudaGraphLaunch(ge, st);
    if (ce != cudaSuccess) report(x, what, "replay %d: %s", it, cudaGetErrorName(ce));
    int fl = agreeCall(x, ce == cudaSuccess, what);
    if (fl < 0) return -1;
    int bad = fl != 0, cudaBad = 0;
    if (fl == 0) {
      ce = cudaStreamSynchronize(st);
      if (ce == cudaSuccess) ce = cudaMemcpyAsync(out, x->dr, cnt * sizeof(float), cudaMemcpyDeviceToHost, st);
      if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);
      cudaBad = ce != cudaSuccess;
      if (cudaBad) report(x, what, "replay %d: %s", it, cudaGetErrorName(ce));
      for (size_t i = 0; i < cnt && !cudaBad && !bad; i++) {
        float e = (float)((it + 1) * x->n * (x->n + 1) / 2 + x->n * (int)(i % 5));
        if (out[i] != e) {
          bad = 1;
          report(x, what, "replay %d: element %zu is %g, expected %g", it, i, (double)out[i], (double)e);
        }
      }
    }
    if (agreeResult(x, cudaBad, bad, what) < 0) return -1;
  }
  if (ge) cudaGraphExecDestroy(ge);
  if (g) cudaGraphDestroy(g);
  return 0;
}

typedef struct {
  comm_t comm;
  int go, done;
  commResult_t rc;
} watchT; /* the abort's watchdog thread */
static void* watchMain(void* p) {
  watchT* w = p;
  double t0 = now();
  while (!__atomic_load_n(&w->go, __ATOMIC_ACQUIRE) && now() - t0 < 10.0) sleepMs(10); /* or a blocked call */
  w->rc = commAbort(w->comm);
  __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* n >= 2, a fresh communicator: one allreduce on every rank (so that the connections exist: a call that had to
 * make them would wait for its peers), then rank 0 alone starts one (its peers never join); it must return
 * at once. Timeout (timeoutMs 1000): commGetAsyncError reports an error within 15 s, then commAbort. Abort
 * (default timeout, 1<<20 floats): 200 ms later the stream is still busy; commAbort from a watchdog thread.
 * Either way the stream is idle within 10 s of commAbort. The other ranks only commAbort theirs. */
int runSolo(rankCtx* x, int isAbort) {
  const char* what = isAbort ? "abort: allreduce of 1<<20 float32 on rank 0 only, commAbort from a watchdog"
                             : "timeout: allreduce of 1001 float32 on rank 0 only, timeoutMs 1000";
  commConfig_t cfg = COMM_CONFIG_INITIALIZER;
  if (!isAbort) cfg.timeoutMs = 1000;
  comm_t c = NULL;
  size_t cnt = isAbort ? (size_t)1 << 20 : 1001;
  commResult_t rc = commInitRankConfig(&c, x->n, x->ids[1 + isAbort], x->rank, &cfg);
  if (rc != commSuccess) report(x, what, "commInitRankConfig returned %d", (int)rc);
  if (agree(x, rc == commSuccess ? 1 : 2) != 1) {
    if (rc == commSuccess) commAbort(c);
    return agreeResult(x, 0, 1, what);
  }
  x->comm = c; /* so that fatal() aborts it */
  rc = commAllReduce(x->ds, x->dr, cnt, commFloat32, commSum, c, (commStream_t)x->stream);
  if (rc != commSuccess) report(x, what, "warm-up allreduce on every rank returned %d", (int)rc);
  int f = agreeCall(x, rc == commSuccess, what), bad = f != 0, cudaBad = 0;
  if (f < 0) return -1;
  if (f == 0 && (cudaBad = cudaStreamSynchronize(x->stream) != cudaSuccess)) report(x, what, "warm-up: CUDA error");
  x->comm = NULL;
  int solo = x->rank == 0 && !bad && !cudaBad; /* rank 0 goes on alone (and aborts c itself) */
  if (solo) {
    watchT w = {c, 0, 0, commSuccess};
    pthread_t th;
    if (isAbort && pthread_create(&th, NULL, watchMain, &w) != 0) hardExit(what, "pthread_create failed");
    double t0 = now();
    rc = commAllReduce(x->ds, x->dr, cnt, commFloat32, commSum, c, (commStream_t)x->stream);
    double took = now() - t0;
    if ((bad = rc != commSuccess))
      report(x, what, "the call returned %d (%s), expected commSuccess", (int)rc, commGetErrorString(rc));
    if (took > 5.0 && (bad = 1)) report(x, what, "the call blocked %.1f s (device buffers: must return at once)", took);
    if (isAbort) {
      if (rc == commSuccess && !__atomic_load_n(&w.done, __ATOMIC_ACQUIRE)) {
        /* A check that nothing happens (the kernel, whose peers never join, must still run), not an order. */
        sleepMs(200);
        cudaError_t q = cudaStreamQuery(x->stream);
        if (q != cudaErrorNotReady && (bad = 1))
          report(x, what, "cudaStreamQuery before the abort: %s (expected cudaErrorNotReady)", cudaGetErrorName(q));
      }
      __atomic_store_n(&w.go, 1, __ATOMIC_RELEASE);
      t0 = now();
      while (!__atomic_load_n(&w.done, __ATOMIC_ACQUIRE)) {
        if (now() - t0 > 10.0) hardExit(what, "commAbort did not return within 10 s");
        sleepMs(10);
      }
      pthread_join(th, NULL);
      rc = w.rc;
    } else {
      commResult_t e = commSuccess;
      for (t0 = now(); rc == commSuccess && now() - t0 < 15.0 && (e == commSuccess || e == commInProgress); sleepMs(10))
        if (commGetAsyncError(c, &e) != commSuccess) e = commInternalError;
      if (rc == commSuccess && (e == commSuccess || e == commInProgress) && (bad = 1))
        report(x, what, "commGetAsyncError still says %d after 15 s", (int)e);
      else if (rc == commSuccess)
        printf("test_gpu_coll: %d ranks: timeout: rank 0 saw %d (%s) after %.2f s\n", x->n, (int)e,
               commGetErrorString(e), now() - t0);
      rc = commAbort(c);
    }
    if (rc != commSuccess && (bad = 1)) report(x, what, "commAbort returned %d", (int)rc);
    if (!waitIdle(x->stream, 10.0)) hardExit(what, "the stream was still busy 10 s after commAbort returned");
    cudaError_t q = cudaStreamQuery(x->stream);
    if ((cudaBad = q != cudaSuccess)) report(x, what, "stream after the abort: %s", cudaGetErrorName(q));
  }
  agree(x, 1); /* rank 0 is done */
  if (!solo && (rc = commAbort(c)) != commSuccess && (bad = 1)) report(x, what, "commAbort returned %d", (int)rc);
  return agreeResult(x, cudaBad, bad, what);
}

/* -H, last: rank n-1 leaves without a word (as a process that died would); the others' next device allreduce
 * ends with commRemoteError well before the communicator's timeout: the device proxy sees the network
 * connection fail and the kernel waiting on it stops. Nothing runs after it on any rank (the barriers would
 * wait for the rank that left); the survivors abort the communicator. Returns 1: the rank must not meet the
 * others again. */
int runPeerGone(rankCtx* x) {
  const char* what = "peer gone: rank n-1 exits; the others' device allreduce ends with commRemoteError";
  agree(x, 1);
  if (x->rank == x->n - 1) {
    fflush(NULL);
    _exit(0);
  }
  /* No wait for the exit: whether the peer is gone before the call or leaves while its kernel waits, the
   * call (or the kernel after it) ends with commRemoteError. */
  double t0 = now();
  commResult_t rc = commAllReduce(x->ds, x->dr, 1001, commFloat32, commSum, x->comm, (commStream_t)x->stream);
  commResult_t async = commSuccess;
  while (rc == commSuccess && now() - t0 < 20.0) {
    if (commGetAsyncError(x->comm, &async) != commSuccess || (async != commSuccess && async != commInProgress)) break;
    sleepMs(5);
  }
  double took = now() - t0;
  int bad = rc != commRemoteError && async != commRemoteError;
  if (bad)
    report(x, what, "the call returned %d and commGetAsyncError %d after %.1f s (expected commRemoteError)", (int)rc,
           (int)async, took);
  else if (verbose) printf("test_gpu_coll: rank %d: %s: after %.2f s\n", x->rank, what, took);
  countCase(x, bad);
  commAbort(x->comm);
  x->comm = NULL;
  return 1;
}
