/* test_args: argument validation through the public API. Every bad call must return
 * commInvalidArgument (or commInvalidUsage where the API is used out of order), leave a WARN that names
 * the problem (commGetLastError), and leave the buffers untouched. Single process: a 1-rank communicator
 * from commInitAll and a 2-rank communicator from two threads.
 * SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "itest.h"

static int failures, checks;

#define BUF 256
static unsigned char sendbuf[BUF], recvbuf[BUF];

static void fillBuffers(void) {
  for (int i = 0; i < BUF; i++) sendbuf[i] = (unsigned char)(i * 7 + 1);
  memset(recvbuf, 0x77, sizeof(recvbuf));
}

static int buffersIntact(void) {
  for (int i = 0; i < BUF; i++)
    if (sendbuf[i] != (unsigned char)(i * 7 + 1) || recvbuf[i] != 0x77) return 0;
  return 1;
}

/* Case-insensitive: does s contain one of the '|'-separated words? */
static int mentions(const char* s, const char* words) {
  char lower[1024];
  size_t n = 0;
  for (; s[n] && n < sizeof(lower) - 1; n++) lower[n] = (char)tolower((unsigned char)s[n]);
  lower[n] = 0;
  const char* w = words;
  while (*w) {
    const char* e = strchr(w, '|');
    size_t len = e ? (size_t)(e - w) : strlen(w);
    char word[64];
    if (len >= sizeof(word)) len = sizeof(word) - 1;
    for (size_t i = 0; i < len; i++) word[i] = (char)tolower((unsigned char)w[i]);
    word[len] = 0;
    if (len && strstr(lower, word)) return 1;
    w += len + (e ? 1 : 0);
    if (!e) break;
  }
  return 0;
}

/* The WARN of the previous check: each bad call must leave its own message, not an older one. */
static char prevMsg[1024];

static void check(int line, const char* what, commResult_t got, commResult_t want, commResult_t alt, comm_t errComm,
                  const char* words) {
  checks++;
  int ok = 1;
  char why[1024] = "";
  if (got != want && got != alt) {
    ok = 0;
    snprintf(why, sizeof(why), "returned %d (%s), expected %d (%s)", (int)got, commGetErrorString(got), (int)want,
             commGetErrorString(want));
  } else if (words) {
    const char* msg = commGetLastError(errComm);
    if (!msg || !*msg) {
      ok = 0;
      snprintf(why, sizeof(why), "no WARN recorded (commGetLastError is empty)");
    } else if (!mentions(msg, words)) {
      ok = 0;
      snprintf(why, sizeof(why), "the WARN \"%s\" mentions none of \"%s\"", msg, words);
    } else if (strcmp(msg, prevMsg) == 0) {
      ok = 0;
      snprintf(why, sizeof(why), "commGetLastError still shows the previous call's WARN \"%s\"", msg);
    }
    snprintf(prevMsg, sizeof(prevMsg), "%s", msg ? msg : "");
  }
  if (!buffersIntact()) {
    ok = 0;
    snprintf(why + strlen(why), sizeof(why) - strlen(why), "%sa buffer was modified", *why ? "; " : "");
  }
  if (!ok) {
    failures++;
    fprintf(stderr, "test_args:%d: FAIL: %s: %s\n", line, what, why);
  }
}

/* Run `call`, which must fail with `want` (or `alt`) and a WARN naming one of `words`. */
#define EXPECT2(comm, call, want, alt, words)                     \
  do {                                                            \
    fillBuffers();                                                \
    commResult_t res_ = (call);                                   \
    check(__LINE__, #call, res_, (want), (alt), (comm), (words)); \
  } while (0)
#define EXPECT(comm, call, want, words) EXPECT2(comm, call, want, want, words)
#define MUST(call)                                                                                 \
  do {                                                                                             \
    commResult_t res_ = (call);                                                                    \
    checks++;                                                                                      \
    if (res_ != commSuccess) {                                                                     \
      failures++;                                                                                  \
      fprintf(stderr, "test_args:%d: FAIL: %s returned %d (%s): %s\n", __LINE__, #call, (int)res_, \
              commGetErrorString(res_), commGetLastError(NULL));                                   \
    }                                                                                              \
  } while (0)
#define ASSERT_TRUE(cond, ...)                                      \
  do {                                                              \
    checks++;                                                       \
    if (!(cond)) {                                                  \
      failures++;                                                   \
      fprintf(stderr, "test_args:%d: FAIL: %s: ", __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                 \
      fprintf(stderr, "\n");                                        \
    }                                                               \
  } while (0)

static const char* W_BUF = "buff|buffer|null|pointer";
static const char* W_COUNT = "count|overflow|size|large";
static const char* W_TYPE = "datatype|type";
static const char* W_OP = "op|operator|reduction";
static const char* W_ROOT = "root|rank";
static const char* W_PEER = "peer|rank";
static const char* W_COMM = "comm|communicator";

static void testGlobal(void) {
  int v = -1;
  MUST(commGetVersion(&v));
  ASSERT_TRUE(v == COMM_VERSION_CODE, "commGetVersion gave %d, header has %d", v, COMM_VERSION_CODE);
  EXPECT(NULL, commGetVersion(NULL), commInvalidArgument, "version|null|pointer");

  /* One distinct, non-empty string per code; something printable for codes out of range. */
  const char* seen[commNumResults];
  for (int r = 0; r < commNumResults; r++) {
    const char* s = commGetErrorString((commResult_t)r);
    seen[r] = s;
    ASSERT_TRUE(s && *s, "commGetErrorString(%d) is empty", r);
    for (int q = 0; q < r; q++)
      if (s && seen[q]) ASSERT_TRUE(strcmp(s, seen[q]) != 0, "codes %d and %d share the string \"%s\"", q, r, s);
  }
  ASSERT_TRUE(commGetErrorString(commNumResults) != NULL, "commGetErrorString(commNumResults) is NULL");
  ASSERT_TRUE(commGetErrorString((commResult_t)-1) != NULL, "commGetErrorString(-1) is NULL");
  ASSERT_TRUE(commGetErrorString((commResult_t)12345) != NULL, "commGetErrorString(12345) is NULL");

  EXPECT(NULL, commGetUniqueId(NULL), commInvalidArgument, "id|null|pointer");
  EXPECT(NULL, commGroupEnd(), commInvalidUsage, "group|start");

  commUniqueId zero;
  memset(&zero, 0, sizeof(zero));
  comm_t c = (comm_t)&zero;
  EXPECT(NULL, commInitRank(NULL, 2, zero, 0), commInvalidArgument, "comm|null|pointer");
  EXPECT(NULL, commInitRank(&c, 0, zero, 0), commInvalidArgument, "nranks|rank|size");
  EXPECT(NULL, commInitRank(&c, 2, zero, 2), commInvalidArgument, "rank");
  EXPECT(NULL, commInitRank(&c, 2, zero, -1), commInvalidArgument, "rank");
  commConfig_t bad = COMM_CONFIG_INITIALIZER;
  bad.magic = 0x12345678u;
  EXPECT(NULL, commInitRankConfig(&c, 1, zero, 0, &bad), commInvalidArgument, "config|magic");
  comm_t comms[2];
  EXPECT(NULL, commInitAll(NULL, 1, NULL), commInvalidArgument, "comm|null|pointer");
  EXPECT(NULL, commInitAll(comms, 0, NULL), commInvalidArgument, "ndev|nranks|count|number");
  EXPECT(NULL, commInitAll(comms, -3, NULL), commInvalidArgument, "ndev|nranks|count|number");

  /* A NULL communicator everywhere. */
  EXPECT(NULL, commAllReduce(sendbuf, recvbuf, 4, commInt32, commSum, NULL, NULL), commInvalidArgument, W_COMM);
  EXPECT(NULL, commBroadcast(sendbuf, recvbuf, 4, commInt32, 0, NULL, NULL), commInvalidArgument, W_COMM);
  EXPECT(NULL, commSend(sendbuf, 4, commInt32, 0, NULL, NULL), commInvalidArgument, W_COMM);
  EXPECT(NULL, commCount(NULL, &v), commInvalidArgument, W_COMM);
  EXPECT(NULL, commUserRank(NULL, &v), commInvalidArgument, W_COMM);
  EXPECT(NULL, commCuDevice(NULL, &v), commInvalidArgument, W_COMM);
  commResult_t async;
  EXPECT(NULL, commGetAsyncError(NULL, &async), commInvalidArgument, W_COMM);
  EXPECT(NULL, commSplit(NULL, 0, 0, &c, NULL), commInvalidArgument, W_COMM);
  EXPECT(NULL, commFinalize(NULL), commInvalidArgument, W_COMM);
}

/* Checks that any communicator must pass; comm has nranks ranks and is rank `rank`. */
static void testComm(comm_t comm, int nranks) {
  int v;
  size_t big = SIZE_MAX / 2; /* * 4 bytes overflows size_t */

  EXPECT(comm, commCount(comm, NULL), commInvalidArgument, "count|null|pointer");
  EXPECT(comm, commUserRank(comm, NULL), commInvalidArgument, "rank|null|pointer");
  EXPECT(comm, commCuDevice(comm, NULL), commInvalidArgument, "device|null|pointer");
  EXPECT(comm, commGetAsyncError(comm, NULL), commInvalidArgument, "error|null|pointer");
  MUST(commCount(comm, &v));
  ASSERT_TRUE(v == nranks, "commCount = %d, expected %d", v, nranks);

  /* NULL buffers */
  EXPECT(comm, commAllReduce(NULL, recvbuf, 4, commInt32, commSum, comm, NULL), commInvalidArgument, W_BUF);
  EXPECT(comm, commAllReduce(sendbuf, NULL, 4, commInt32, commSum, comm, NULL), commInvalidArgument, W_BUF);
  EXPECT(comm, commAllGather(NULL, recvbuf, 4, commInt8, comm, NULL), commInvalidArgument, W_BUF);
  EXPECT(comm, commAllGather(sendbuf, NULL, 4, commInt8, comm, NULL), commInvalidArgument, W_BUF);
  EXPECT(comm, commReduceScatter(NULL, recvbuf, 4, commInt8, commSum, comm, NULL), commInvalidArgument, W_BUF);
  EXPECT(comm, commAllToAll(sendbuf, NULL, 4, commInt8, comm, NULL), commInvalidArgument, W_BUF);
  EXPECT(comm, commSend(NULL, 4, commInt8, 0, comm, NULL), commInvalidArgument, W_BUF);
  EXPECT(comm, commRecv(NULL, 4, commInt8, 0, comm, NULL), commInvalidArgument, W_BUF);
  /* the root's buffers must exist: rank 0 is the root here when comm is rank 0 */
  int me = -1;
  MUST(commUserRank(comm, &me));
  EXPECT(comm, commBroadcast(NULL, recvbuf, 4, commInt32, me, comm, NULL), commInvalidArgument, W_BUF);
  EXPECT(comm, commReduce(sendbuf, NULL, 4, commInt32, commSum, me, comm, NULL), commInvalidArgument, W_BUF);

  /* count * element size, and nranks * count, overflowing size_t */
  EXPECT(comm, commAllReduce(sendbuf, recvbuf, big, commFloat32, commSum, comm, NULL), commInvalidArgument, W_COUNT);
  EXPECT(comm, commAllReduce(sendbuf, recvbuf, SIZE_MAX, commInt8, commSum, comm, NULL), commInvalidArgument, W_COUNT);
  EXPECT(comm, commBroadcast(sendbuf, recvbuf, big, commFloat64, 0, comm, NULL), commInvalidArgument, W_COUNT);
  EXPECT(comm, commReduce(sendbuf, recvbuf, big, commInt64, commMax, 0, comm, NULL), commInvalidArgument, W_COUNT);
  EXPECT(comm, commSend(sendbuf, big, commUint32, 0, comm, NULL), commInvalidArgument, W_COUNT);
  EXPECT(comm, commRecv(recvbuf, big, commUint32, 0, comm, NULL), commInvalidArgument, W_COUNT);
  if (nranks > 1) {
    size_t half = SIZE_MAX / 2 + 1; /* fits with 1-byte elements, nranks * half does not */
    EXPECT(comm, commAllGather(sendbuf, recvbuf, half, commInt8, comm, NULL), commInvalidArgument, W_COUNT);
    EXPECT(comm, commReduceScatter(sendbuf, recvbuf, half, commUint8, commSum, comm, NULL), commInvalidArgument,
           W_COUNT);
    EXPECT(comm, commAllToAll(sendbuf, recvbuf, half, commInt8, comm, NULL), commInvalidArgument, W_COUNT);
  }
  EXPECT(comm, commAllGather(sendbuf, recvbuf, big, commFloat32, comm, NULL), commInvalidArgument, W_COUNT);

  /* bad datatypes */
  EXPECT(comm, commAllReduce(sendbuf, recvbuf, 4, (commDataType_t)-1, commSum, comm, NULL), commInvalidArgument,
         W_TYPE);
  EXPECT(comm, commAllReduce(sendbuf, recvbuf, 4, commNumTypes, commSum, comm, NULL), commInvalidArgument, W_TYPE);
  EXPECT(comm, commBroadcast(sendbuf, recvbuf, 4, commNumTypes, 0, comm, NULL), commInvalidArgument, W_TYPE);
  EXPECT(comm, commAllGather(sendbuf, recvbuf, 4, (commDataType_t)-1, comm, NULL), commInvalidArgument, W_TYPE);
  EXPECT(comm, commSend(sendbuf, 4, commNumTypes, 0, comm, NULL), commInvalidArgument, W_TYPE);
  EXPECT(comm, commRecv(recvbuf, 4, (commDataType_t)1000, 0, comm, NULL), commInvalidArgument, W_TYPE);

  /* bad ops: out of range, never created, destroyed */
  EXPECT(comm, commAllReduce(sendbuf, recvbuf, 4, commInt32, commNumOps, comm, NULL), commInvalidArgument, W_OP);
  EXPECT(comm, commAllReduce(sendbuf, recvbuf, 4, commInt32, (commRedOp_t)-1, comm, NULL), commInvalidArgument, W_OP);
  EXPECT(comm, commReduce(sendbuf, recvbuf, 4, commInt32, (commRedOp_t)(commNumOps + 77), 0, comm, NULL),
         commInvalidArgument, W_OP);
  EXPECT(comm, commReduceScatter(sendbuf, recvbuf, 1, commInt32, commMaxRedOp, comm, NULL), commInvalidArgument, W_OP);
  commRedOp_t op = commSum;
  float two = 2.0f;
  MUST(commRedOpCreatePreMulSum(&op, &two, commFloat32, commScalarHostImmediate, comm));
  ASSERT_TRUE((int)op >= (int)commNumOps, "a premulsum op got the value %d, below commNumOps", (int)op);
  MUST(commRedOpDestroy(op, comm));
  EXPECT(comm, commAllReduce(sendbuf, recvbuf, 4, commFloat32, op, comm, NULL), commInvalidArgument, W_OP);
  EXPECT(comm, commRedOpDestroy(op, comm), commInvalidArgument, W_OP);
  EXPECT(comm, commRedOpDestroy(commSum, comm), commInvalidArgument, W_OP);
  EXPECT(comm, commRedOpCreatePreMulSum(NULL, &two, commFloat32, commScalarHostImmediate, comm), commInvalidArgument,
         "op|null|pointer");
  EXPECT(comm, commRedOpCreatePreMulSum(&op, NULL, commFloat32, commScalarHostImmediate, comm), commInvalidArgument,
         "scalar|null|pointer");
  EXPECT(comm, commRedOpCreatePreMulSum(&op, &two, commNumTypes, commScalarHostImmediate, comm), commInvalidArgument,
         W_TYPE);
  EXPECT(comm, commRedOpCreatePreMulSum(&op, &two, commFloat32, (commScalarResidence_t)7, comm), commInvalidArgument,
         "residence|scalar");
  /* an op made on one comm is not an op of another comm created later: tested by the destroyed case */

  /* root and peer out of range */
  EXPECT(comm, commBroadcast(sendbuf, recvbuf, 4, commInt32, nranks, comm, NULL), commInvalidArgument, W_ROOT);
  EXPECT(comm, commBroadcast(sendbuf, recvbuf, 4, commInt32, -1, comm, NULL), commInvalidArgument, W_ROOT);
  EXPECT(comm, commReduce(sendbuf, recvbuf, 4, commInt32, commSum, nranks, comm, NULL), commInvalidArgument, W_ROOT);
  EXPECT(comm, commReduce(sendbuf, recvbuf, 4, commInt32, commSum, -5, comm, NULL), commInvalidArgument, W_ROOT);
  EXPECT(comm, commSend(sendbuf, 4, commInt32, nranks, comm, NULL), commInvalidArgument, W_PEER);
  EXPECT(comm, commSend(sendbuf, 4, commInt32, -1, comm, NULL), commInvalidArgument, W_PEER);
  EXPECT(comm, commRecv(recvbuf, 4, commInt32, nranks + 3, comm, NULL), commInvalidArgument, W_PEER);
  EXPECT(comm, commRecv(recvbuf, 4, commInt32, -1, comm, NULL), commInvalidArgument, W_PEER);

  /* split: bad color, NULL result */
  comm_t child = NULL;
  EXPECT(comm, commSplit(comm, 0, 0, NULL, NULL), commInvalidArgument, "newcomm|null|pointer");
  EXPECT(comm, commSplit(comm, -7, 0, &child, NULL), commInvalidArgument, "color");

  /* A bad call inside a group fails at once; the group must still close, and later calls work. */
  MUST(commGroupStart());
  EXPECT(comm, commAllReduce(sendbuf, recvbuf, 4, commNumTypes, commSum, comm, NULL), commInvalidArgument, W_TYPE);
  commResult_t endRes = commGroupEnd();
  (void)endRes; /* the group's result may carry the error; what matters is what follows */
  EXPECT(NULL, commGroupEnd(), commInvalidUsage, "group|start");

  /* The queries again, now that the communicator has recorded other errors: the WARN must be theirs. */
  EXPECT(comm, commCount(comm, NULL), commInvalidArgument, "count|null|pointer");
  EXPECT(comm, commUserRank(comm, NULL), commInvalidArgument, "rank|null|pointer");
  EXPECT(comm, commCuDevice(comm, NULL), commInvalidArgument, "device|null|pointer");
  EXPECT(comm, commGetAsyncError(comm, NULL), commInvalidArgument, "error|null|pointer");
}

/* A 1-rank communicator must also do real work after all the rejected calls. */
static void testOneRankWorks(comm_t comm) {
  int32_t in[5] = {1, -2, 3, -4, 5}, out[5] = {0};
  MUST(commAllReduce(in, out, 5, commInt32, commSum, comm, NULL));
  for (int i = 0; i < 5; i++)
    ASSERT_TRUE(out[i] == in[i], "1-rank allreduce: element %d = %d, expected %d", i, out[i], in[i]);
  float scal = 0.5f, fin[3] = {2, 4, -8}, fout[3] = {0};
  commRedOp_t op;
  MUST(commRedOpCreatePreMulSum(&op, &scal, commFloat32, commScalarHostImmediate, comm));
  MUST(commAllReduce(fin, fout, 3, commFloat32, op, comm, NULL));
  MUST(commRedOpDestroy(op, comm));
  for (int i = 0; i < 3; i++) ASSERT_TRUE(fout[i] == fin[i] * 0.5f, "1-rank premulsum: element %d = %g", i, fout[i]);
}

/* Finalized and destroyed communicators: rejected with a WARN, never a crash. */
static void testDeadComm(void) {
  comm_t c = NULL;
  MUST(commInitAll(&c, 1, NULL));
  if (!c) return;
  MUST(commFinalize(c));
  EXPECT2(c, commAllReduce(sendbuf, recvbuf, 4, commInt32, commSum, c, NULL), commInvalidUsage, commInvalidArgument,
          "final|comm|destroy|usable");
  EXPECT2(c, commFinalize(c), commInvalidUsage, commInvalidArgument, "final|comm");
  MUST(commDestroy(c));
  /* Destroyed: the library keeps the handle's magic dead (it does not hand the memory back while a stale
   * handle may still be used), so the call is rejected. */
  EXPECT2(NULL, commAllReduce(sendbuf, recvbuf, 4, commInt32, commSum, c, NULL), commInvalidArgument, commInvalidUsage,
          W_COMM);
  int v;
  EXPECT2(NULL, commCount(c, &v), commInvalidArgument, commInvalidUsage, W_COMM);
}

/* Device pointers: only where a CUDA driver and a GPU exist (the driver is loaded at run time, so this
 * test needs no CUDA at build time). A host-only communicator must refuse device memory with a WARN
 * and leave it untouched. Returns 0 when skipped. */
typedef int (*cuInitFn)(unsigned);
typedef int (*cuDeviceGetFn)(int*, int);
typedef int (*cuPrimaryCtxRetainFn)(void**, int);
typedef int (*cuCtxSetCurrentFn)(void*);
typedef int (*cuMemAllocFn)(unsigned long long*, size_t);
typedef int (*cuMemFreeFn)(unsigned long long);
typedef int (*cuMemsetD8Fn)(unsigned long long, unsigned char, size_t);
typedef int (*cuMemcpyDtoHFn)(void*, unsigned long long, size_t);

static int testDevicePointers(comm_t comm) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return 0;
  cuInitFn init = (cuInitFn)dlsym(lib, "cuInit");
  cuDeviceGetFn devGet = (cuDeviceGetFn)dlsym(lib, "cuDeviceGet");
  cuPrimaryCtxRetainFn retain = (cuPrimaryCtxRetainFn)dlsym(lib, "cuDevicePrimaryCtxRetain");
  cuCtxSetCurrentFn setCurrent = (cuCtxSetCurrentFn)dlsym(lib, "cuCtxSetCurrent");
  cuMemAllocFn memAlloc = (cuMemAllocFn)dlsym(lib, "cuMemAlloc_v2");
  cuMemFreeFn memFree = (cuMemFreeFn)dlsym(lib, "cuMemFree_v2");
  cuMemsetD8Fn memset8 = (cuMemsetD8Fn)dlsym(lib, "cuMemsetD8_v2");
  cuMemcpyDtoHFn dtoh = (cuMemcpyDtoHFn)dlsym(lib, "cuMemcpyDtoH_v2");
  int dev = 0;
  void* ctx = NULL;
  unsigned long long dbuf = 0;
  if (!init || !devGet || !retain || !setCurrent || !memAlloc || !memFree || !memset8 || !dtoh || init(0) != 0 ||
      devGet(&dev, 0) != 0 || retain(&ctx, dev) != 0 || setCurrent(ctx) != 0 || memAlloc(&dbuf, BUF) != 0) {
    dlclose(lib);
    return 0;
  }
  void* d = (void*)(uintptr_t)dbuf;
  int me = -1;
  MUST(commUserRank(comm, &me));
  const char* W_DEV = "device";
#define DEVICE_CALL(call)                                                 \
  do {                                                                    \
    ASSERT_TRUE(memset8(dbuf, 0x77, BUF) == 0, "cuMemsetD8 failed");      \
    EXPECT2(comm, call, commInvalidUsage, commInvalidArgument, W_DEV);    \
    unsigned char back[BUF];                                              \
    memset(back, 0, sizeof(back));                                        \
    ASSERT_TRUE(dtoh(back, dbuf, BUF) == 0, "cuMemcpyDtoH failed");       \
    int same = 1;                                                         \
    for (int i = 0; i < BUF; i++) same &= back[i] == 0x77;                \
    ASSERT_TRUE(same, "%s wrote to the device buffer it refused", #call); \
  } while (0)
  DEVICE_CALL(commAllReduce(sendbuf, d, 4, commInt32, commSum, comm, NULL));
  DEVICE_CALL(commAllReduce(d, recvbuf, 4, commInt32, commSum, comm, NULL));
  DEVICE_CALL(commBroadcast(d, recvbuf, 4, commInt32, me, comm, NULL));
  DEVICE_CALL(commAllGather(sendbuf, d, 4, commInt8, comm, NULL));
  DEVICE_CALL(commRecv(d, 4, commInt8, 0, comm, NULL));
  DEVICE_CALL(commSend(d, 4, commInt8, 0, comm, NULL));
  commRedOp_t op;
  DEVICE_CALL(commRedOpCreatePreMulSum(&op, d, commFloat32, commScalarDevice, comm));
#undef DEVICE_CALL
  memFree(dbuf);
  dlclose(lib);
  return 1;
}

typedef struct {
  commUniqueId id;
  int rank;
  comm_t comm;
  commResult_t res;
} tArg;
static void* initThread(void* p) {
  tArg* a = p;
  a->res = commInitRank(&a->comm, 2, a->id, a->rank);
  return NULL;
}
static void* destroyThread(void* p) {
  tArg* a = p;
  a->res = commFinalize(a->comm);
  if (a->res == commSuccess) a->res = commDestroy(a->comm);
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  testGlobal();

  comm_t one = NULL;
  MUST(commInitAll(&one, 1, NULL));
  int deviceTested = 0;
  if (one) {
    testComm(one, 1);
    deviceTested = testDevicePointers(one);
    testOneRankWorks(one);
    MUST(commFinalize(one));
    MUST(commDestroy(one));
  }

  tArg a[2];
  memset(a, 0, sizeof(a));
  MUST(commGetUniqueId(&a[0].id));
  a[1].id = a[0].id;
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    a[r].rank = r;
    pthread_create(&th[r], NULL, initThread, &a[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < 2; r++) {
    ASSERT_TRUE(a[r].res == commSuccess, "2-rank commInitRank(rank %d) returned %d", r, (int)a[r].res);
  }
  if (a[0].res == commSuccess && a[1].res == commSuccess) {
    /* argument checks fail locally, before any communication: one thread can test both ranks */
    testComm(a[0].comm, 2);
    testComm(a[1].comm, 2);
    for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, destroyThread, &a[r]);
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++)
      ASSERT_TRUE(a[r].res == commSuccess, "2-rank finalize/destroy (rank %d) returned %d", r, (int)a[r].res);
  }

  testDeadComm();

  if (deviceTested) printf("test_args: device pointers refused by the host-only communicator\n");
  else printf("test_args: device-pointer checks skipped: no CUDA driver or GPU here\n");
  printf("test_args: %d checks, %d failures: %s\n", checks, failures, failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
