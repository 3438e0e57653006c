/* The NCCL drop-in (libnccl.so.2 from compat/nccl/) as an NCCL client uses it: this program is written
 * against NCCL's API only (compat/nccl/nccl.h) and linked with -lnccl. N forked processes (default 3), one
 * rank each, on host buffers (libcomm serves them; NCCL itself would want device memory):
 *  - ncclGetVersion reports 2.28.9's code; error strings; ncclGetLastError(NULL) after a bad call;
 *  - every collective (allreduce sum/avg/premulsum, broadcast and in-place bcast, reduce, allgather,
 *    reducescatter, alltoall, gather, scatter) and a ring of grouped send/recv, checked element by element;
 *  - a config struct of an older, smaller size (up to splitShare) is accepted; a bad magic is refused;
 *  - ncclCommSplit into even and odd ranks, rank 0 passing NCCL_SPLIT_NOCOLOR (gets NULL);
 *  - register/deregister and window handles: a foreign handle is refused;
 *  - ncclCommShrink excluding the last rank, which does not call it (as a failed rank would not): the
 *    survivors' new communicator allreduces right; the last rank excluding itself is refused;
 *  - ncclCommRevoke on a copy of the communicator: rank 0 revokes it while its own allreduce (another
 *    thread) and the other ranks' wait for the last rank, which calls only after the revoke: every call
 *    ends with an error within seconds (rank 0's ncclInvalidUsage, the others' ncclRemoteError; the library's
 *    timeout is the default 10 minutes, so only the revoke can end them); bad flags and a second revoke are
 *    ncclInvalidArgument, ncclCommFinalize and new collectives ncclInvalidUsage, ncclCommGetAsyncError
 *    ncclSuccess; after every rank revoked it, ncclCommShrink (excluding none) and ncclCommSplit make working
 *    communicators of it;
 *  - the device API's host functions, as ncclX and as pncclX (dlsym: the same function): those that set
 *    one up are ncclInvalidUsage (not provided); ncclTeamWorld is the world team; ncclGroupSimulateEnd
 *    estimates a group without running it;
 *  - ncclCommAbort from a watchdog thread while this thread waits in an allreduce nobody else joins
 *    (the last rank only; the others have finished): the call returns an error instead of hanging;
 *  - one more process, as nccl-tests does it: two communicators created from one thread inside
 *    ncclGroupStart/End, an allreduce over both in one group; then a non-blocking communicator
 *    (config.blocking = 0) of 2 ranks made the same way, polled with ncclCommGetAsyncError; around them
 *    ncclResetDebugInit (through dlsym: NVIDIA's header marks it deprecated) rereads the logging variables:
 *    after NCCL_DEBUG=INFO and NCCL_DEBUG_FILE, INFO lines reach the file, and none after COMM_DEBUG=WARN
 *    (COMM_DEBUG_FILE the same file) and another reset.
 * Exit 0 when every check passed. SPDX-License-Identifier: Apache-2.0 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <stddef.h>

#include "nccl.h"

/* Host functions of NCCL's device API (nccl_device.h, C++/CUDA), declared here as a C client sees them. */
typedef struct {
  int nRanks, rank, stride;
} teamT;
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void* reqs, void* outDevComm);
teamT ncclTeamWorld(ncclComm_t comm);
int ncclTeamRankToWorld(ncclComm_t comm, teamT team, int rank);

#define MAXN 16
static int nRanks = 3, me = -1, failures;

#define CHECK(cond, ...)                                                \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf(stderr, "rank %d: FAIL %s:%d: ", me, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                     \
      fprintf(stderr, "\n");                                            \
      failures++;                                                       \
    }                                                                   \
  } while (0)
#define NCCLOK(call)                                                                            \
  do {                                                                                          \
    ncclResult_t r_ = (call);                                                                   \
    CHECK(r_ == ncclSuccess, "%s returned %d (%s): %s", #call, (int)r_, ncclGetErrorString(r_), \
          ncclGetLastError(NULL));                                                              \
  } while (0)

static void collectives(ncclComm_t comm) {
  const size_t n = 1001;
  float* s = malloc(MAXN * n * sizeof(float));
  float* r = malloc(MAXN * n * sizeof(float));
  for (size_t i = 0; i < MAXN * n; i++) s[i] = (float)(me + 1) + (float)(i % 7);
  float sumRanks = (float)nRanks * (nRanks + 1) / 2;

  NCCLOK(ncclAllReduce(s, r, n, ncclFloat, ncclSum, comm, NULL));
  for (size_t i = 0; i < n; i++) CHECK(r[i] == sumRanks + nRanks * (float)(i % 7), "allreduce[%zu] %g", i, r[i]);
  NCCLOK(ncclAllReduce(s, r, n, ncclFloat, ncclAvg, comm, NULL));
  for (size_t i = 0; i < n; i++) CHECK(r[i] == (sumRanks + nRanks * (float)(i % 7)) / nRanks, "avg[%zu] %g", i, r[i]);
  float half = 0.5f;
  ncclRedOp_t pre;
  NCCLOK(ncclRedOpCreatePreMulSum(&pre, &half, ncclFloat, ncclScalarHostImmediate, comm));
  CHECK((int)pre >= (int)ncclNumOps, "premulsum op %d", (int)pre);
  NCCLOK(ncclAllReduce(s, r, n, ncclFloat, pre, comm, NULL));
  for (size_t i = 0; i < n; i++)
    CHECK(r[i] == 0.5f * (sumRanks + nRanks * (float)(i % 7)), "premulsum[%zu] %g", i, r[i]);
  NCCLOK(ncclRedOpDestroy(pre, comm));

  int root = nRanks - 1;
  NCCLOK(ncclBroadcast(s, r, n, ncclFloat, root, comm, NULL));
  for (size_t i = 0; i < n; i++) CHECK(r[i] == (float)(root + 1) + (float)(i % 7), "broadcast[%zu]", i);
  memcpy(r, s, n * sizeof(float));
  NCCLOK(ncclBcast(r, n, ncclFloat, 0, comm, NULL));
  for (size_t i = 0; i < n; i++) CHECK(r[i] == 1.0f + (float)(i % 7), "bcast[%zu]", i);
  memset(r, 0, n * sizeof(float));
  NCCLOK(ncclReduce(s, r, n, ncclFloat, ncclMax, 0, comm, NULL));
  if (me == 0)
    for (size_t i = 0; i < n; i++) CHECK(r[i] == (float)nRanks + (float)(i % 7), "reduce[%zu]", i);
  NCCLOK(ncclAllGather(s, r, n, ncclFloat, comm, NULL));
  for (int p = 0; p < nRanks; p++)
    for (size_t i = 0; i < n; i++) CHECK(r[p * n + i] == (float)(p + 1) + (float)(i % 7), "allgather[%d][%zu]", p, i);
  NCCLOK(ncclReduceScatter(s, r, n, ncclFloat, ncclSum, comm, NULL));
  for (size_t i = 0; i < n; i++)
    CHECK(r[i] == sumRanks + nRanks * (float)((me * n + i) % 7), "reducescatter[%zu] %g", i, r[i]);
  NCCLOK(ncclAlltoAll(s, r, n, ncclFloat, comm, NULL));
  for (int p = 0; p < nRanks; p++)
    for (size_t i = 0; i < n; i++)
      CHECK(r[p * n + i] == (float)(p + 1) + (float)((me * n + i) % 7), "alltoall[%d][%zu]", p, i);
  memset(r, 0, MAXN * n * sizeof(float));
  NCCLOK(ncclGather(s, r, n, ncclFloat, 1 % nRanks, comm, NULL));
  if (me == 1 % nRanks)
    for (int p = 0; p < nRanks; p++)
      for (size_t i = 0; i < n; i++) CHECK(r[p * n + i] == (float)(p + 1) + (float)(i % 7), "gather[%d][%zu]", p, i);
  NCCLOK(ncclScatter(s, r, n, ncclFloat, 0, comm, NULL));
  for (size_t i = 0; i < n; i++) CHECK(r[i] == 1.0f + (float)((me * n + i) % 7), "scatter[%zu]", i);
  /* A ring of grouped send/recv. */
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclSend(s, n, ncclFloat, (me + 1) % nRanks, comm, NULL));
  NCCLOK(ncclRecv(r, n, ncclFloat, (me + nRanks - 1) % nRanks, comm, NULL));
  NCCLOK(ncclGroupEnd());
  int from = (me + nRanks - 1) % nRanks;
  for (size_t i = 0; i < n; i++) CHECK(r[i] == (float)(from + 1) + (float)(i % 7), "sendrecv[%zu]", i);
  free(s);
  free(r);
}

static void handles(ncclComm_t comm, ncclComm_t other) {
  char buf[4096];
  void* h = NULL;
  NCCLOK(ncclCommRegister(comm, buf, sizeof(buf), &h));
  CHECK(h != NULL, "register gave no handle");
  if (other)
    CHECK(ncclCommDeregister(other, h) == ncclInvalidArgument, "a handle of another communicator was accepted");
  NCCLOK(ncclCommDeregister(comm, h));
  long bogus[8] = {0}; /* (the drop-in reads a handle's header before refusing it) */
  CHECK(ncclCommDeregister(comm, bogus) == ncclInvalidArgument, "a bogus handle was accepted");
  ncclWindow_t w = NULL;
  NCCLOK(ncclCommWindowRegister(comm, buf, sizeof(buf), &w, NCCL_WIN_COLL_SYMMETRIC));
  CHECK(ncclCommWindowRegister(comm, buf, sizeof(buf), &w, 0x80) == ncclInvalidArgument, "unknown window flag");
  NCCLOK(ncclCommWindowDeregister(comm, w));
}

/* The device API's host functions: each found as ncclX and pncclX, one function; those that set up the
 * device API refuse (ncclInvalidUsage). */
typedef ncclResult_t (*devCommCreateFn)(ncclComm_t, const void*, void*);
typedef ncclResult_t (*devCommDestroyFn)(ncclComm_t, const void*);
typedef ncclResult_t (*ginBarrierFn)(ncclComm_t, teamT, int, void*, void*);
typedef ncclResult_t (*lsaBarrierFn)(teamT, int, void*, void*);
typedef ncclResult_t (*llA2AFn)(int, int, void*, void*);
typedef teamT (*teamFn)(ncclComm_t);
static void deviceApi(ncclComm_t comm) {
  static const char names[] = "DevCommCreate DevCommDestroy GinBarrierCreateRequirement LsaBarrierCreateRequirement "
                              "LLA2ACreateRequirement LLA2ACalcSlots TeamWorld TeamLsa TeamRail TeamRankToWorld "
                              "TeamRankToLsa";
  void* fp[16] = {NULL};
  int i = 0;
  for (const char* p = names; *p; i++) {
    int len = (int)strcspn(p, " ");
    char n[64], pn[64];
    snprintf(n, sizeof(n), "nccl%.*s", len, p);
    snprintf(pn, sizeof(pn), "pnccl%.*s", len, p);
    fp[i] = dlsym(RTLD_DEFAULT, pn);
    CHECK(fp[i] != NULL && fp[i] == dlsym(RTLD_DEFAULT, n), "%s %p and %s %p", pn, fp[i], n, dlsym(RTLD_DEFAULT, n));
    p += len + (p[len] == ' ');
  }
  CHECK(i == 11, "%d device API functions", i);
  if (failures) return;
  char buf[256];
  teamT world = ncclTeamWorld(comm);
  CHECK(((devCommCreateFn)fp[0])(comm, buf, buf) == ncclInvalidUsage, "pncclDevCommCreate");
  CHECK(((devCommDestroyFn)fp[1])(comm, buf) == ncclInvalidUsage, "pncclDevCommDestroy");
  CHECK(((ginBarrierFn)fp[2])(comm, world, 1, buf, buf) == ncclInvalidUsage, "pncclGinBarrierCreateRequirement");
  CHECK(((lsaBarrierFn)fp[3])(world, 1, buf, buf) == ncclInvalidUsage, "pncclLsaBarrierCreateRequirement");
  CHECK(((llA2AFn)fp[4])(1, 1, buf, buf) == ncclInvalidUsage, "pncclLLA2ACreateRequirement");
  CHECK(((teamFn)fp[6])(comm).nRanks == nRanks, "pncclTeamWorld");
}

/* Revoke (ncclCommRevoke) while calls wait: see the header. */
static int revokeDone[2]; /* a pipe: rank 0 writes a byte once its revoke has returned */
static ncclComm_t revokeComm;
static ncclResult_t revokeThreadRes;
static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static void* revokedAllReduce(void* arg) {
  (void)arg;
  float x = 1.0f, y = 0.0f;
  revokeThreadRes = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, revokeComm, NULL);
  return NULL;
}
static void revokeCheck(ncclComm_t comm) {
  ncclComm_t rv = NULL;
  NCCLOK(ncclCommSplit(comm, 0, me, &rv, NULL));
  if (rv == NULL) return;
  float x = (float)(me + 1), y = 0.0f;
  double t0 = seconds();
  ncclResult_t r;
  if (me == 0) {
    revokeComm = rv;
    pthread_t t;
    pthread_create(&t, NULL, revokedAllReduce, NULL);
    usleep(200 * 1000); /* (the allreduces wait by now, nearly always; an earlier revoke refuses them) */
    CHECK(ncclCommRevoke(rv, 0x1) == ncclInvalidArgument, "revoke with unknown flags");
    NCCLOK(ncclCommRevoke(rv, NCCL_REVOKE_DEFAULT));
    pthread_join(t, NULL);
    r = revokeThreadRes;
    CHECK(r == ncclInvalidUsage, "rank 0's revoked allreduce returned %d", (int)r);
    CHECK(write(revokeDone[1], "x", 1) == 1, "telling the last rank");
    ncclResult_t st = ncclInternalError;
    NCCLOK(ncclCommGetAsyncError(rv, &st));
    CHECK(st == ncclSuccess, "async error %d after the revoke", (int)st);
    CHECK(ncclCommRevoke(rv, NCCL_REVOKE_DEFAULT) == ncclInvalidArgument, "a second revoke");
    CHECK(ncclCommFinalize(rv) == ncclInvalidUsage, "finalize after revoke");
  } else {
    if (me == nRanks - 1) { /* calls once the revoke has returned: the notice ended it, or will */
      char b = 0;
      CHECK(read(revokeDone[0], &b, 1) == 1, "waiting for rank 0's revoke");
    }
    r = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, rv, NULL);
    CHECK(r == ncclRemoteError, "allreduce on a communicator another rank revoked returned %d", (int)r);
    NCCLOK(ncclCommRevoke(rv, NCCL_REVOKE_DEFAULT));
  }
  double took = seconds() - t0;
  CHECK(took < 20.0, "the revoked calls took %.1f s", took);
  r = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, rv, NULL);
  CHECK(r == ncclInvalidUsage, "allreduce after revoke returned %d", (int)r);
  CHECK(strstr(ncclGetLastError(NULL), "revoked") != NULL, "last error: %s", ncclGetLastError(NULL));
  /* Recovery: every rank revoked it; shrink (excluding none) and split still make communicators of it. */
  ncclComm_t c[2] = {NULL, NULL};
  NCCLOK(ncclCommShrink(rv, NULL, 0, &c[0], NULL, NCCL_SHRINK_DEFAULT));
  NCCLOK(ncclCommSplit(rv, 0, -me, &c[1], NULL));
  for (int k = 0; k < 2; k++) {
    if (c[k] == NULL) continue;
    int rank = -1;
    NCCLOK(ncclCommUserRank(c[k], &rank));
    CHECK(rank == (k == 0 ? me : nRanks - 1 - me), "rank %d in the %s communicator", rank, k ? "split" : "shrunk");
    y = 0.0f;
    NCCLOK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, c[k], NULL));
    CHECK(y == (float)nRanks * (nRanks + 1) / 2, "allreduce after revoke and %s: %g", k ? "split" : "shrink", y);
    NCCLOK(ncclCommDestroy(c[k]));
  }
  NCCLOK(ncclCommDestroy(rv));
}

static ncclComm_t abortComm;
static int abortDone[2]; /* a pipe: the last rank writes a byte once its aborted call has returned */
/* The abort may land before the call waits or while it waits (the second, with this pause, nearly always):
 * either way the call must fail, and soon. */
static void* watchdog(void* arg) {
  (void)arg;
  sleep(1);
  ncclCommAbort(abortComm);
  return NULL;
}

static int rankMain(ncclUniqueId id, ncclUniqueId abortId) {
  int v = 0;
  NCCLOK(ncclGetVersion(&v));
  CHECK(v == 22809, "version %d", v);
  CHECK(strlen(ncclGetErrorString(ncclInvalidUsage)) > 0, "error string");
  /* An older client's config: only up to splitShare (NCCL 2.17's size). */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.size = offsetof(ncclConfig_t, splitShare) + sizeof(int);
  cfg.commName = (const char*)0x1; /* beyond the declared size: must not be read */
  ncclComm_t comm = NULL;
  NCCLOK(ncclCommInitRankConfig(&comm, nRanks, id, me, &cfg));
  int cnt = 0, rank = -1;
  NCCLOK(ncclCommCount(comm, &cnt));
  NCCLOK(ncclCommUserRank(comm, &rank));
  CHECK(cnt == nRanks && rank == me, "count %d rank %d", cnt, rank);
  ncclResult_t async = ncclInternalError;
  NCCLOK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess, "async error %d", (int)async);
  CHECK(ncclAllReduce(NULL, NULL, 4, ncclFloat, ncclSum, comm, NULL) == ncclInvalidArgument, "NULL buffers");
  CHECK(strlen(ncclGetLastError(NULL)) > 0, "ncclGetLastError(NULL) after a bad call is empty");
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  ncclComm_t none = NULL;
  CHECK(ncclCommSplit(comm, 0, me, &none, &bad) == ncclInvalidArgument, "a config with a bad magic");

  collectives(comm);

  ncclComm_t sub = NULL;
  NCCLOK(ncclCommSplit(comm, me == 0 ? NCCL_SPLIT_NOCOLOR : me % 2, me, &sub, NULL));
  if (me == 0) {
    CHECK(sub == NULL, "NOCOLOR gave a communicator");
  } else {
    int sc = 0;
    NCCLOK(ncclCommCount(sub, &sc));
    int expect = 0;
    for (int p = 1; p < nRanks; p++) expect += p % 2 == me % 2;
    CHECK(sc == expect, "split size %d, expected %d", sc, expect);
    float x = 1.0f, y = 0.0f;
    NCCLOK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, sub, NULL));
    CHECK(y == (float)expect, "split allreduce %g", y);
  }
  handles(comm, sub);
  ncclComm_t shrunk = NULL;
  int excl = nRanks - 1;
  if (me == nRanks - 1) {
    CHECK(ncclCommShrink(comm, &excl, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument && !shrunk,
          "excluding itself");
  } else {
    NCCLOK(ncclCommShrink(comm, &excl, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT));
    int sc = 0, sr = -1;
    NCCLOK(ncclCommCount(shrunk, &sc));
    NCCLOK(ncclCommUserRank(shrunk, &sr));
    CHECK(sc == nRanks - 1 && sr == me, "shrunk: %d ranks, rank %d", sc, sr);
    float x = (float)(me + 1), y = 0.0f;
    NCCLOK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, shrunk, NULL));
    CHECK(y == (float)(nRanks - 1) * nRanks / 2, "shrunk allreduce %g", y);
    NCCLOK(ncclCommDestroy(shrunk));
  }
  revokeCheck(comm);
  char devComm[256];
  CHECK(ncclDevCommCreate(comm, devComm, devComm) == ncclInvalidUsage, "the device API is not provided");
  deviceApi(comm);
  teamT world = ncclTeamWorld(comm);
  CHECK(world.nRanks == nRanks && world.rank == me && world.stride == 1, "world team %d %d %d", world.nRanks,
        world.rank, world.stride);
  CHECK(ncclTeamRankToWorld(comm, world, nRanks - 1) == nRanks - 1, "team rank to world");
  /* Simulated group: an estimate, and nothing runs (the receive buffer keeps its value; no peer waits). */
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  float sx[64], sy[64];
  for (int i = 0; i < 64; i++) sx[i] = 1.0f, sy[i] = -1.0f;
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclAllReduce(sx, sy, 64, ncclFloat, ncclSum, comm, NULL));
  NCCLOK(ncclAllGather(sx, sy, 16, ncclFloat, comm, NULL));
  NCCLOK(ncclGroupSimulateEnd(&sim));
  CHECK(sim.estimatedTime > 0.0f && sy[0] == -1.0f, "simulated group: %g us, recvbuff %g", sim.estimatedTime, sy[0]);
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclGroupStart());
  CHECK(ncclGroupSimulateEnd(&sim) == ncclInvalidUsage, "simulating an inner group");
  NCCLOK(ncclGroupEnd());
  NCCLOK(ncclGroupEnd());
  if (sub) {
    NCCLOK(ncclCommFinalize(sub));
    NCCLOK(ncclCommDestroy(sub));
  }
  NCCLOK(ncclCommFinalize(comm));
  NCCLOK(ncclCommDestroy(comm));

  /* Abort from a watchdog while this thread waits in a call its peer never makes: the last rank, in a
   * 2-rank communicator with rank 0, which creates it and never calls. */
  if (me == 0 || me == nRanks - 1) {
    ncclComm_t c = NULL;
    NCCLOK(ncclCommInitRank(&c, 2, abortId, me == 0 ? 0 : 1));
    if (me == nRanks - 1 && c) {
      abortComm = c;
      pthread_t t;
      pthread_create(&t, NULL, watchdog, NULL);
      float x = 1.0f, y = 0.0f;
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      ncclResult_t r = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, c, NULL);
      clock_gettime(CLOCK_MONOTONIC, &t1);
      pthread_join(t, NULL);
      double took = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
      CHECK(r != ncclSuccess, "the aborted allreduce succeeded");
      CHECK(took < 30.0, "the aborted allreduce took %.1f s", took);
      CHECK(write(abortDone[1], "x", 1) == 1, "telling rank 0");
    } else if (c) {
      /* Never joins: the peer's call must end by its own abort, so this rank aborts only after it has. */
      char b = 0;
      CHECK(read(abortDone[0], &b, 1) == 1, "waiting for the last rank's aborted call");
      ncclCommAbort(c);
    }
  }
  return failures;
}

/* Two ranks driven by one thread, as nccl-tests does: init in a group, a collective on both in a group. */
/* ncclResetDebugInit with PREFIX_DEBUG=level and PREFIX_DEBUG_FILE=path (prefix NCCL or COMM; the other
 * prefix's unset; path NULL: all four unset); the file's size after it (-1: no file). */
static long resetDebug(const char* prefix, const char* level, const char* path) {
  void (*reset)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "ncclResetDebugInit");
  CHECK(reset != NULL && dlsym(RTLD_DEFAULT, "pncclResetDebugInit") != NULL, "ncclResetDebugInit not exported");
  static const char* const vars[] = {"COMM_DEBUG", "COMM_DEBUG_FILE", "NCCL_DEBUG", "NCCL_DEBUG_FILE"};
  for (int i = 0; i < 4; i++) unsetenv(vars[i]);
  char lv[32], fv[32];
  snprintf(lv, sizeof(lv), "%s_DEBUG", prefix);
  snprintf(fv, sizeof(fv), "%s_DEBUG_FILE", prefix);
  if (path) {
    setenv(lv, level, 1);
    setenv(fv, path, 1);
  }
  if (reset) reset();
  struct stat st;
  return path && stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static int oneThreadMain(ncclUniqueId id, ncclUniqueId nbId) {
  char logPath[64];
  snprintf(logPath, sizeof(logPath), "/tmp/test_nccl_dropin.%d.log", (int)getpid());
  resetDebug("COMM", NULL, NULL); /* logging set up at WARN, on stderr: the next reset must change both */
  long logSize = resetDebug("NCCL", "INFO", logPath);
  CHECK(logSize >= 0, "NCCL_DEBUG_FILE %s not opened by ncclResetDebugInit", logPath);
  ncclComm_t c[2] = {NULL, NULL};
  NCCLOK(ncclGroupStart());
  for (int r = 0; r < 2; r++) NCCLOK(ncclCommInitRank(&c[r], 2, id, r));
  NCCLOK(ncclGroupEnd());
  CHECK(c[0] && c[1], "group init gave no communicators");
  float x[2] = {1.0f, 2.0f}, y[2] = {0, 0};
  NCCLOK(ncclGroupStart());
  for (int r = 0; r < 2; r++) NCCLOK(ncclAllReduce(&x[r], &y[r], 1, ncclFloat, ncclSum, c[r], NULL));
  NCCLOK(ncclGroupEnd());
  CHECK(y[0] == 3.0f && y[1] == 3.0f, "one-thread allreduce %g %g", y[0], y[1]);
  for (int r = 0; r < 2; r++) NCCLOK(ncclCommDestroy(c[r]));
  /* INFO lines (init, destroy) went to the file; from here on, at WARN, none do. */
  char text[8192] = "";
  FILE* f = fopen(logPath, "r");
  size_t got = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
  text[got] = '\0';
  if (f) fclose(f);
  CHECK(strstr(text, " COMM INFO ") != NULL, "no INFO line in %s after NCCL_DEBUG=INFO and ncclResetDebugInit",
        logPath);
  logSize = resetDebug("COMM", "WARN", logPath);
  /* Non-blocking: init returns at once (ncclSuccess or ncclInProgress); poll until it is done. */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  NCCLOK(ncclGroupStart());
  for (int r = 0; r < 2; r++) {
    ncclResult_t res = ncclCommInitRankConfig(&c[r], 2, nbId, r, &cfg);
    CHECK(res == ncclSuccess || res == ncclInProgress, "non-blocking init returned %d", (int)res);
  }
  ncclResult_t gres = ncclGroupEnd();
  CHECK(gres == ncclSuccess || gres == ncclInProgress, "non-blocking group end returned %d", (int)gres);
  for (int r = 0; r < 2; r++) {
    ncclResult_t st = ncclInProgress;
    for (int i = 0; i < 30000 && st == ncclInProgress; i++) {
      if (ncclCommGetAsyncError(c[r], &st) != ncclSuccess) break;
      if (st == ncclInProgress) usleep(1000);
    }
    CHECK(st == ncclSuccess, "non-blocking rank %d ended in %d", r, (int)st);
  }
  for (int r = 0; r < 2; r++) NCCLOK(ncclCommDestroy(c[r]));
  long after = resetDebug("COMM", "WARN", logPath);
  CHECK(after == logSize, "%s grew from %ld to %ld bytes at COMM_DEBUG=WARN", logPath, logSize, after);
  resetDebug("COMM", NULL, NULL);
  unlink(logPath);
  return failures;
}

int main(int argc, char** argv) {
  if (argc > 1) nRanks = atoi(argv[1]);
  if (nRanks < 2 || nRanks > MAXN) {
    fprintf(stderr, "usage: %s [ranks 2..%d]\n", argv[0], MAXN);
    return 2;
  }
  /* Fork first, then make the ids and send them down pipes: the parent has no library thread running when
   * it forks (a child of a threaded parent may inherit a lock held by a thread it does not have). */
  pid_t pid[MAXN + 1];
  int fds[MAXN + 1][2];
  if (pipe(abortDone) != 0 || pipe(revokeDone) != 0) return 2;
  for (int r = 0; r <= nRanks; r++) {
    fflush(NULL);
    if (pipe(fds[r]) != 0 || (pid[r] = fork()) < 0) return 2;
    if (pid[r] == 0) {
      me = r;
      alarm(120); /* a hang is a failure, not a stuck CI job */
      close(fds[r][1]);
      ncclUniqueId ids[4];
      if (read(fds[r][0], ids, sizeof(ids)) != (ssize_t)sizeof(ids)) _exit(3);
      _exit((r < nRanks ? rankMain(ids[0], ids[1]) : oneThreadMain(ids[2], ids[3])) ? 1 : 0);
    }
    close(fds[r][0]);
  }
  ncclUniqueId ids[4];
  int idsOk = 1;
  for (int k = 0; k < 4; k++) idsOk &= ncclGetUniqueId(&ids[k]) == ncclSuccess;
  for (int r = 0; r <= nRanks; r++) {
    if (!idsOk || write(fds[r][1], ids, sizeof(ids)) != (ssize_t)sizeof(ids)) kill(pid[r], SIGKILL);
    close(fds[r][1]);
  }
  int bad = !idsOk;
  for (int r = 0; r <= nRanks; r++) {
    int st = 0;
    waitpid(pid[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "test_nccl_dropin: rank %d ended with status 0x%x\n", r, st);
      bad = 1;
    }
  }
  printf("test_nccl_dropin: %d ranks: %s\n", nRanks, bad ? "FAIL" : "PASS");
  return bad;
}
