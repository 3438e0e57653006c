/* A standalone test of the example CollNet plugin libraries (tests/plugins/nccl_collnet_example.c built with
 * transports/collnet/aggd/aggd_net.c), without libcomm: collnet_example_test LIB.so... dlopens each library,
 * takes the newest ncclCollNetPlugin_vN it exports (v11, else v10, v9, v8; the v11 build must export v8 too) and
 * runs, with fork()ed processes as the group's members (handles passed through a MAP_SHARED mapping, a barrier of
 * our own):
 *   - groups of 1, 2 and 4: init, properties, listen, connect; int32 sum (1000 elements and 100000), float32
 *     max, bfloat16 and float16 sums (rounding through float after each op, in member order), in place and out
 *     of place, all posted before the first test; exact results, the same bits on every member; the limit of
 *     64 requests in flight; calls that disagree between members (ncclInvalidUsage, then the group still works);
 *     operations over maxCollBytes refused; regMr of device memory and regMrDmaBuf refused; iflush;
 *   - groups of 1, 3 and 4 (the v8 table of the v11 build: 3): iallgather and ireducescatter, whole and in
 *     windows of several SGE parts, odd sizes, every type and op, in place, limits (collnet_example_test_gather.h);
 *   - every table offers both; NCCL_EXAMPLE_COLLNET_NO_GATHER=1 where a library is loaded: it offers neither;
 *   - reduceSupport (float8, op 4, type 99: 0);
 *   - NCCL_EXAMPLE_COLLNET_FAIL_CONNECT_RANK (member 1, member 0): every member's connect fails within the timeout;
 *   - a member killed during an operation (member 2, member 0): the others' test() fails within the timeout.
 * Exit 0 when all passed. SPDX-License-Identifier: Apache-2.0 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NET_NCCL_ABI_ONLY
#include "collnet_nccl.h"

#define CXT_MAX 8
#define CXT_TIMEOUT_MS 2000 /* NCCL_EXAMPLE_COLLNET_TIMEOUT_MS of the failure cases */

typedef struct {
  const char* path;
  int version;
  void* table;
  char label[96];
} cxtApi;

typedef struct {
  atomic_uint count, gen;
  char handles[CXT_MAX][NCCL_NET_HANDLE_MAXSIZE];
  uint64_t hashes[CXT_MAX][8];
} cxtShared;

typedef struct {
  const cxtApi* a;
  cxtShared* sh;
  int n, rank, arg;
  void* ctx;
  void* listen;
  void* coll;
} cxtMember;

static char cxtWho[256] = "main";
/* The plugin's log lines in a member: kept, and printed only when the member fails (CXT_VERBOSE=1: at once). */
static pthread_mutex_t cxtLogMu = PTHREAD_MUTEX_INITIALIZER;
static char cxtLog[16384];
static size_t cxtLogLen;

static int64_t cxtNowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void cxtLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags;
  if (level != NCCL_LOG_WARN && !getenv("CXT_VERBOSE")) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char* base = strrchr(file, '/');
  char out[768];
  int len = snprintf(out, sizeof(out), "  [%s] plugin %s (%s:%d): %s\n", cxtWho,
                     level == NCCL_LOG_WARN ? "WARN" : "INFO", base ? base + 1 : file, line, msg);
  if (getenv("CXT_VERBOSE") || strcmp(cxtWho, "main") == 0) {
    fputs(out, stderr);
    return;
  }
  pthread_mutex_lock(&cxtLogMu);
  if (len > 0 && cxtLogLen + (size_t)len < sizeof(cxtLog)) {
    memcpy(cxtLog + cxtLogLen, out, (size_t)len);
    cxtLogLen += (size_t)len;
  }
  pthread_mutex_unlock(&cxtLogMu);
}

static void cxtDie(int line, const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&cxtLogMu);
  fwrite(cxtLog, 1, cxtLogLen, stderr);
  fprintf(stderr, "FAIL [%s] line %d: %s\n", cxtWho, line, msg);
  fflush(stderr);
  _exit(1);
}
#define REQUIRE(cond, ...)                      \
  do {                                          \
    if (!(cond)) cxtDie(__LINE__, __VA_ARGS__); \
  } while (0)

/* ---------------------------------------------------------------- calls, whatever the table's version */

#define CXT_T(a, v) ((ncclCollNet_v##v##_t*)(a)->table)
/* Members of the same type in every version. */
#define CXT_CALL(a, fn, ...) ((a)->version == 11 ? CXT_T(a, 11)->fn(__VA_ARGS__) : CXT_CALL_OLD(a, fn, __VA_ARGS__))
/* iallreduce of versions 9, 10 and 11 (size_t count). */
#define CXT_CALL_9(a, fn, ...)                          \
  ((a)->version == 9    ? CXT_T(a, 9)->fn(__VA_ARGS__)  \
   : (a)->version == 10 ? CXT_T(a, 10)->fn(__VA_ARGS__) \
                        : CXT_T(a, 11)->fn(__VA_ARGS__))
/* Members of the same type in versions 8, 9 and 10 (init, listen). */
#define CXT_CALL_OLD(a, fn, ...)                      \
  ((a)->version == 8   ? CXT_T(a, 8)->fn(__VA_ARGS__) \
   : (a)->version == 9 ? CXT_T(a, 9)->fn(__VA_ARGS__) \
                       : CXT_T(a, 10)->fn(__VA_ARGS__))

typedef struct {
  const char* name;
  const char* pciPath;
  int ptrSupport, speed, maxComms, maxRecvs, devType, devVersion, maxMulti;
  size_t maxColl, maxP2p;
} cxtProps;

static ncclResult_t cxtInit(const cxtApi* a, void** ctx) {
  *ctx = NULL;
  if (a->version == 11) return CXT_T(a, 11)->init(ctx, 0x1234abcdULL, cxtLogger);
  return CXT_CALL_OLD(a, init, cxtLogger);
}

#define CXT_COPY_PROPS(p, q)                \
  do {                                      \
    (p)->name = (q).name;                   \
    (p)->pciPath = (q).pciPath;             \
    (p)->ptrSupport = (q).ptrSupport;       \
    (p)->speed = (q).speed;                 \
    (p)->maxComms = (q).maxComms;           \
    (p)->maxRecvs = (q).maxRecvs;           \
    (p)->devType = (int)(q).netDeviceType;  \
    (p)->devVersion = (q).netDeviceVersion; \
  } while (0)

static ncclResult_t cxtProperties(const cxtApi* a, cxtProps* p) {
  memset(p, 0, sizeof(*p));
  ncclResult_t res;
  if (a->version == 8) {
    ncclNetProperties_v8_t q;
    if ((res = CXT_T(a, 8)->getProperties(0, &q)) == ncclSuccess) CXT_COPY_PROPS(p, q);
  } else if (a->version == 9) {
    ncclNetProperties_v9_t q;
    if ((res = CXT_T(a, 9)->getProperties(0, &q)) != ncclSuccess) return res;
    CXT_COPY_PROPS(p, q);
    p->maxColl = q.maxCollBytes;
    p->maxP2p = q.maxP2pBytes;
  } else if (a->version == 10) {
    ncclNetProperties_v10_t q;
    if ((res = CXT_T(a, 10)->getProperties(0, &q)) != ncclSuccess) return res;
    CXT_COPY_PROPS(p, q);
    p->maxColl = q.maxCollBytes;
    p->maxP2p = q.maxP2pBytes;
  } else {
    ncclNetProperties_v11_t q;
    if ((res = CXT_T(a, 11)->getProperties(0, &q)) != ncclSuccess) return res;
    CXT_COPY_PROPS(p, q);
    p->maxColl = q.maxCollBytes;
    p->maxP2p = q.maxP2pBytes;
    p->maxMulti = q.maxMultiRequestSize;
  }
  return res;
}

static ncclResult_t cxtListen(const cxtApi* a, void* ctx, void* handle, void** lc) {
  if (a->version == 11) return CXT_T(a, 11)->listen(ctx, 0, handle, lc);
  return CXT_CALL_OLD(a, listen, 0, handle, lc);
}

static ncclResult_t cxtAllreduce(const cxtApi* a, void* coll, void* s, void* r, size_t count, int type, int op,
                                 void* smh, void* rmh, void** req) {
  if (a->version == 8)
    return CXT_T(a, 8)->iallreduce(coll, s, r, (int)count, (ncclDataType_t)type, (ncclRedOp_t)op, smh, rmh, req);
  return CXT_CALL_9(a, iallreduce, coll, s, r, count, (ncclDataType_t)type, (ncclRedOp_t)op, smh, rmh, req);
}

/* ---------------------------------------------------------------- processes and the barrier */

static int cxtBarrier(cxtShared* sh, int n) {
  unsigned gen = atomic_load(&sh->gen);
  if (atomic_fetch_add(&sh->count, 1) == (unsigned)n - 1) {
    atomic_store(&sh->count, 0);
    atomic_fetch_add(&sh->gen, 1);
    return 0;
  }
  int64_t deadline = cxtNowMs() + 10000;
  while (atomic_load(&sh->gen) == gen) {
    if (cxtNowMs() > deadline) return -1;
    usleep(200);
  }
  return 0;
}

typedef void (*cxtMemberFn)(cxtMember* m);

typedef struct {
  cxtShared* sh;
  pid_t pids[CXT_MAX];
  int n, killed;
  char what[192];
} cxtGroup;

static void cxtStart(cxtGroup* g, const cxtApi* a, int n, cxtMemberFn fn, int arg, int killed, const char* what) {
  memset(g, 0, sizeof(*g));
  g->n = n;
  g->killed = killed;
  snprintf(g->what, sizeof(g->what), "%s: %s", a->label, what);
  g->sh = mmap(NULL, sizeof(cxtShared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g->sh == MAP_FAILED) {
    perror("mmap");
    exit(2);
  }
  memset(g->sh, 0, sizeof(*g->sh));
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < n; r++) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      exit(2);
    }
    if (pid == 0) {
      alarm(30); /* never hang the test */
      snprintf(cxtWho, sizeof(cxtWho), "%s, member %d of %d", g->what, r, n);
      cxtMember m = {a, g->sh, n, r, arg, NULL, NULL, NULL};
      fn(&m);
      fflush(stdout);
      exit(0); /* (exit, not _exit: the leak checker of sanitizer builds runs) */
    }
    g->pids[r] = pid;
  }
}

static int cxtWait(cxtGroup* g) {
  int fails = 0;
  for (int r = 0; r < g->n; r++) {
    int st = 0;
    while (waitpid(g->pids[r], &st, 0) < 0 && errno == EINTR) {
    }
    if (r == g->killed) {
      if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) {
        fprintf(stderr, "FAIL [%s] member %d should have been killed (status 0x%x)\n", g->what, r, st);
        fails++;
      }
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "FAIL [%s] member %d: %s %d\n", g->what, r, WIFSIGNALED(st) ? "signal" : "exit status",
              WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
      fails++;
    }
  }
  munmap(g->sh, sizeof(*g->sh));
  printf("%s [%s]\n", fails ? "FAILED" : "ok    ", g->what);
  return fails;
}

/* init, devices, properties, listen, handles exchanged; connect unless told not to. */
static void cxtSetup(cxtMember* m) {
  const cxtApi* a = m->a;
  REQUIRE(cxtInit(a, &m->ctx) == ncclSuccess, "init failed");
  REQUIRE(a->version != 11 || m->ctx != NULL, "v11 init gave no context");
  int ndev = 0;
  REQUIRE(CXT_CALL(a, devices, &ndev) == ncclSuccess && ndev == 1, "devices: %d", ndev);
  cxtProps p;
  REQUIRE(cxtProperties(a, &p) == ncclSuccess, "getProperties failed");
  REQUIRE(p.name && strcmp(p.name, "ExampleCollNet") == 0 && p.pciPath == NULL, "properties: name %s",
          p.name ? p.name : "NULL");
  REQUIRE(p.ptrSupport == NCCL_PTR_HOST && p.speed == 10000 && p.maxComms == 64 && p.maxRecvs == 1 &&
              p.devType == NCCL_NET_DEVICE_HOST && p.devVersion == 0,
          "properties: ptrSupport %d speed %d maxComms %d maxRecvs %d devType %d", p.ptrSupport, p.speed, p.maxComms,
          p.maxRecvs, p.devType);
  if (a->version >= 9) {
    const char* env = getenv("NCCL_EXAMPLE_COLLNET_MAX_BYTES");
    size_t want = env ? (size_t)strtoull(env, NULL, 10) : (size_t)4 << 20;
    REQUIRE(p.maxColl == want && p.maxP2p == (size_t)1 << 30, "maxCollBytes %zu (want %zu), maxP2pBytes %zu", p.maxColl,
            want, p.maxP2p);
  }
  REQUIRE(a->version != 11 || p.maxMulti == 1, "maxMultiRequestSize %d", p.maxMulti);
  char* h = m->sh->handles[m->rank];
  REQUIRE(cxtListen(a, m->ctx, h, &m->listen) == ncclSuccess && m->listen, "listen failed");
  REQUIRE(cxtBarrier(m->sh, m->n) == 0, "barrier after listen timed out");
}

static ncclResult_t cxtConnect(cxtMember* m) {
  void* handles[CXT_MAX];
  for (int i = 0; i < m->n; i++) handles[i] = m->sh->handles[i];
  return CXT_CALL(m->a, connect, handles, m->n, m->rank, m->listen, &m->coll);
}

static void cxtTeardown(cxtMember* m) {
  if (m->coll) REQUIRE(CXT_CALL(m->a, closeColl, m->coll) == ncclSuccess, "closeColl failed");
  if (m->listen) REQUIRE(CXT_CALL(m->a, closeListen, m->listen) == ncclSuccess, "closeListen failed");
  if (m->a->version == 11) REQUIRE(CXT_T(m->a, 11)->finalize(m->ctx) == ncclSuccess, "finalize failed");
}

/* Wait for a request: its result, and the size it reports. */
static ncclResult_t cxtWaitReq(const cxtApi* a, void* req, int* size, int timeoutMs) {
  int64_t deadline = cxtNowMs() + timeoutMs;
  for (;;) {
    int done = 0;
    ncclResult_t res = CXT_CALL(a, test, req, &done, size);
    if (res != ncclSuccess || done) return res;
    if (cxtNowMs() > deadline) return ncclTimeout;
    usleep(50);
  }
}

/* ---------------------------------------------------------------- values */

static uint16_t cxtBf16(float f) { /* exact values only */
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
static float cxtBf16ToFloat(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t cxtHalf(float f) { /* exact normal values (and 0) only */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) == 0) return (uint16_t)(u >> 16);
  return (uint16_t)(((u >> 16) & 0x8000) | ((((u >> 23) & 0xff) - 112) << 10) | ((u >> 13) & 0x3ff));
}

static uint64_t cxtHash(const void* p, size_t len) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < len; i++) h = (h ^ ((const unsigned char*)p)[i]) * 1099511628211ULL;
  return h;
}

#define CXT_N_A 1000
#define CXT_N_B 100000 /* more than 64 Ki elements */
#define CXT_N_C 5000
#define CXT_N_D 3000
#define CXT_N_E 500

static int32_t cxtA(int r, int i) { return i * 7 + r * 100000 - 50000; }
static int32_t cxtB(int r, int i) { return (i % 1000) * (r + 1) - r; }
static float cxtC(int r, int i) { return (float)(((i * 37 + r * 101) % 1999) - 999) * 0.25f; }
/* bf16 / half inputs: small exact values, except the first elements, which test rounding to nearest even
 * after each op in member order: 1 + 2^-8 is a tie in bf16 (-> 1), 1 + 3*2^-9 rounds up, and with three
 * members 1 + 2^-8 + 2^-8 gives 1 (each sum rounds) where the exact 1 + 2^-7 is representable. */
static float cxtD(int r, int i, int n) {
  if (n >= 2 && i < 3) {
    static const float v[3][3] = {{1.0f, 0.00390625f, 0}, {1.0f, 0.005859375f, 0}, {1.0f, 0.00390625f, 0.00390625f}};
    return r < 3 ? v[i][r] : 0;
  }
  return (float)(i % 17) + 0.5f * (float)r;
}
static float cxtDWant(int i, int n) {
  if (n >= 2 && (i == 0 || i == 2)) return 1.0f;
  if (n >= 2 && i == 1) return 1.0078125f;
  float s = 0;
  for (int r = 0; r < n; r++) s += cxtD(r, i, n);
  return s;
}
static float cxtE(int r, int i, int n) { /* half: 1 + 2^-11 is a tie (-> 1), 1 + 3*2^-12 rounds up */
  if (n >= 2 && i < 2) return r == 0 ? 1.0f : r == 1 ? (i == 0 ? 0.00048828125f : 0.000732421875f) : 0;
  return (float)(i % 11 + r);
}
static float cxtEWant(int i, int n) {
  if (n >= 2 && i == 0) return 1.0f;
  if (n >= 2 && i == 1) return 1.0009765625f;
  float s = 0;
  for (int r = 0; r < n; r++) s += cxtE(r, i, n);
  return s;
}

/* ---------------------------------------------------------------- the scenarios */

typedef struct {
  char* p;
  size_t size;
  void* mh;
} cxtBuf;

static void cxtAlloc(cxtMember* m, cxtBuf* b, size_t size) {
  b->size = size;
  b->p = calloc(1, size ? size : 1);
  REQUIRE(b->p, "out of memory");
  REQUIRE(CXT_CALL(m->a, regMr, m->coll, b->p, size, NCCL_PTR_HOST, &b->mh) == ncclSuccess && b->mh, "regMr failed");
}

static void cxtFree(cxtMember* m, cxtBuf* b) {
  REQUIRE(CXT_CALL(m->a, deregMr, m->coll, b->mh) == ncclSuccess, "deregMr failed");
  free(b->p);
}

/* Post one operation; `NULL: retry later` is retried. */
static void* cxtPost(cxtMember* m, cxtBuf* s, cxtBuf* r, size_t count, int type, int op) {
  void* req = NULL;
  int64_t deadline = cxtNowMs() + 5000;
  while (!req) {
    ncclResult_t res = cxtAllreduce(m->a, m->coll, s->p, r->p, count, type, op, s->mh, r->mh, &req);
    REQUIRE(res == ncclSuccess, "iallreduce (count %zu, type %d, op %d) failed: %d", count, type, op, res);
    REQUIRE(req || cxtNowMs() < deadline, "iallreduce never took the request");
    if (!req) usleep(100);
  }
  return req;
}

static void cxtScenarioBasic(cxtMember* m) {
  const cxtApi* a = m->a;
  int n = m->n, me = m->rank;
  if (m->arg) setenv("NCCL_EXAMPLE_COLLNET_MAX_BYTES", "1048576", 1);
  cxtSetup(m);
  REQUIRE(cxtConnect(m) == ncclSuccess && m->coll, "connect failed");
  REQUIRE(CXT_CALL(a, closeListen, m->listen) == ncclSuccess, "closeListen failed");
  m->listen = NULL;

  cxtBuf sA, rA, bB, sC, rC, bD, sE, rE;
  cxtAlloc(m, &sA, CXT_N_A * 4);
  cxtAlloc(m, &rA, CXT_N_A * 4);
  cxtAlloc(m, &bB, CXT_N_B * 4);
  cxtAlloc(m, &sC, CXT_N_C * 4);
  cxtAlloc(m, &rC, CXT_N_C * 4);
  cxtAlloc(m, &bD, CXT_N_D * 2);
  cxtAlloc(m, &sE, CXT_N_E * 2);
  cxtAlloc(m, &rE, CXT_N_E * 2);
  for (int i = 0; i < CXT_N_A; i++) ((int32_t*)sA.p)[i] = cxtA(me, i);
  for (int i = 0; i < CXT_N_B; i++) ((int32_t*)bB.p)[i] = cxtB(me, i);
  for (int i = 0; i < CXT_N_C; i++) ((float*)sC.p)[i] = cxtC(me, i);
  for (int i = 0; i < CXT_N_D; i++) ((uint16_t*)bD.p)[i] = cxtBf16(cxtD(me, i, n));
  for (int i = 0; i < CXT_N_E; i++) ((uint16_t*)sE.p)[i] = cxtHalf(cxtE(me, i, n));

  /* Five operations posted before the first test. */
  void* req[5];
  req[0] = cxtPost(m, &sA, &rA, CXT_N_A, ncclInt32, ncclSum);
  req[1] = cxtPost(m, &bB, &bB, CXT_N_B, ncclInt32, ncclSum);
  req[2] = cxtPost(m, &sC, &rC, CXT_N_C, ncclFloat32, ncclMax);
  req[3] = cxtPost(m, &bD, &bD, CXT_N_D, ncclBfloat16, ncclSum);
  req[4] = cxtPost(m, &sE, &rE, CXT_N_E, ncclFloat16, ncclSum);
  const int bytes[5] = {CXT_N_A * 4, CXT_N_B * 4, CXT_N_C * 4, CXT_N_D * 2, CXT_N_E * 2};
  for (int k = 4; k >= 0; k--) { /* (tested out of order) */
    int size = -1;
    ncclResult_t res = cxtWaitReq(a, req[k], &size, 10000);
    REQUIRE(res == ncclSuccess && size == bytes[k], "operation %d: result %d, size %d (want %d)", k, res, size,
            bytes[k]);
  }
  for (int i = 0; i < CXT_N_A; i++) {
    int64_t want = 0;
    for (int r = 0; r < n; r++) want += cxtA(r, i);
    REQUIRE(((int32_t*)rA.p)[i] == (int32_t)want, "int32 sum [%d]: %d, want %lld", i, ((int32_t*)rA.p)[i],
            (long long)want);
    REQUIRE(((int32_t*)sA.p)[i] == cxtA(me, i), "int32 sum: the send buffer changed");
  }
  for (int i = 0; i < CXT_N_B; i++) {
    int64_t want = 0;
    for (int r = 0; r < n; r++) want += cxtB(r, i);
    REQUIRE(((int32_t*)bB.p)[i] == (int32_t)want, "int32 sum in place [%d]: %d, want %lld", i, ((int32_t*)bB.p)[i],
            (long long)want);
  }
  for (int i = 0; i < CXT_N_C; i++) {
    float want = cxtC(0, i);
    for (int r = 1; r < n; r++) want = cxtC(r, i) > want ? cxtC(r, i) : want;
    REQUIRE(((float*)rC.p)[i] == want, "float32 max [%d]: %g, want %g", i, (double)((float*)rC.p)[i], (double)want);
  }
  for (int i = 0; i < CXT_N_D; i++) {
    float got = cxtBf16ToFloat(((uint16_t*)bD.p)[i]), want = cxtDWant(i, n);
    REQUIRE(got == want, "bfloat16 sum in place [%d]: %.9g, want %.9g", i, (double)got, (double)want);
  }
  for (int i = 0; i < CXT_N_E; i++) {
    uint16_t got = ((uint16_t*)rE.p)[i], want = cxtHalf(cxtEWant(i, n));
    REQUIRE(got == want, "float16 sum [%d]: 0x%04x, want 0x%04x", i, got, want);
  }
  /* The same bits on every member. */
  cxtBuf* res[5] = {&rA, &bB, &rC, &bD, &rE};
  for (int k = 0; k < 5; k++) m->sh->hashes[me][k] = cxtHash(res[k]->p, res[k]->size);
  REQUIRE(cxtBarrier(m->sh, n) == 0, "barrier after the operations timed out");
  for (int k = 0; k < 5; k++)
    REQUIRE(m->sh->hashes[me][k] == m->sh->hashes[0][k], "operation %d: bits differ from member 0's", k);

  /* At most 64 requests in flight: the 65th gets NULL (retry) until one is tested. */
  cxtBuf sR, rR;
  cxtAlloc(m, &sR, 65 * 16 * 4);
  cxtAlloc(m, &rR, 65 * 16 * 4);
  for (int i = 0; i < 65 * 16; i++) ((int32_t*)sR.p)[i] = i + me;
  void* ring[65];
  for (int k = 0; k < 65; k++) {
    ring[k] = NULL;
    REQUIRE(cxtAllreduce(a, m->coll, sR.p + k * 64, rR.p + k * 64, 16, ncclInt32, ncclSum, sR.mh, rR.mh, &ring[k]) ==
                ncclSuccess,
            "iallreduce %d of the ring failed", k);
    REQUIRE(k == 64 ? ring[k] == NULL : ring[k] != NULL, "request %d: %s", k, ring[k] ? "taken" : "not taken");
  }
  REQUIRE(cxtWaitReq(a, ring[0], NULL, 10000) == ncclSuccess, "ring request 0 failed (size NULL)");
  ring[64] = cxtPost(m, &sR, &rR, 0, ncclInt32, ncclSum); /* (the slot is free now; count 0 is fine) */
  REQUIRE(cxtWaitReq(a, ring[64], NULL, 10000) == ncclSuccess, "the count-0 request failed");
  for (int k = 1; k < 64; k++) REQUIRE(cxtWaitReq(a, ring[k], NULL, 10000) == ncclSuccess, "ring request %d", k);
  for (int i = 0; i < 64 * 16; i++)
    REQUIRE(((int32_t*)rR.p)[i] == n * i + n * (n - 1) / 2, "ring result [%d]: %d", i, ((int32_t*)rR.p)[i]);

  /* Calls that disagree: member 1 posts half the count. Everyone's operation fails; the group still works. */
  if (n >= 2) {
    void* r = cxtPost(m, &sA, &rA, me == 1 ? CXT_N_A / 2 : CXT_N_A, ncclInt32, ncclSum);
    ncclResult_t rc = cxtWaitReq(a, r, NULL, 10000);
    REQUIRE(rc == ncclInvalidUsage, "mismatched operation: %d, want ncclInvalidUsage", rc);
    r = cxtPost(m, &sA, &rA, CXT_N_A, ncclInt32, ncclMin);
    REQUIRE(cxtWaitReq(a, r, NULL, 10000) == ncclSuccess, "the operation after a mismatch failed");
    for (int i = 0; i < CXT_N_A; i++)
      REQUIRE(((int32_t*)rA.p)[i] == cxtA(0, i), "int32 min [%d]: %d", i, ((int32_t*)rA.p)[i]);
  }

  /* Refused locally: over maxCollBytes (v9+), unsupported types and ops, device memory, dmabuf. */
  void* none = NULL;
  if (a->version >= 9) {
    size_t maxColl = m->arg ? (size_t)1 << 20 : (size_t)4 << 20;
    cxtBuf big;
    cxtAlloc(m, &big, maxColl + 4);
    REQUIRE(cxtAllreduce(a, m->coll, big.p, big.p, maxColl / 4 + 1, ncclInt32, ncclSum, big.mh, big.mh, &none) !=
                    ncclSuccess &&
                !none,
            "an operation over maxCollBytes was taken");
    REQUIRE(cxtAllreduce(a, m->coll, big.p, big.p, maxColl / 4, ncclUint8, ncclMax, big.mh, big.mh, &none) ==
                    ncclSuccess &&
                none,
            "an operation of maxCollBytes was refused");
    REQUIRE(cxtWaitReq(a, none, NULL, 10000) == ncclSuccess, "the operation of maxCollBytes failed");
    cxtFree(m, &big);
    none = NULL;
  }
  REQUIRE(cxtAllreduce(a, m->coll, sA.p, rA.p, 10, ncclFloat8e4m3, ncclSum, sA.mh, rA.mh, &none) != ncclSuccess &&
              !none,
          "a float8 operation was taken");
  REQUIRE(cxtAllreduce(a, m->coll, sA.p, rA.p, 10, ncclInt32, ncclAvg, sA.mh, rA.mh, &none) != ncclSuccess && !none,
          "an avg operation was taken");
  REQUIRE(cxtAllreduce(a, m->coll, sA.p, rA.p, CXT_N_A + 1, ncclInt32, ncclSum, sA.mh, rA.mh, &none) != ncclSuccess,
          "an operation past its registration was taken");
  void* mh = NULL;
  REQUIRE(CXT_CALL(a, regMr, m->coll, sA.p, 64, NCCL_PTR_CUDA, &mh) != ncclSuccess, "regMr of device memory worked");
  REQUIRE(CXT_CALL(a, regMrDmaBuf, m->coll, sA.p, 64, NCCL_PTR_CUDA, 0, -1, &mh) == ncclInvalidUsage,
          "regMrDmaBuf did not say ncclInvalidUsage");
  void* flush = (void*)&flush;
  REQUIRE(CXT_CALL(a, iflush, m->coll, rA.p, 64, rA.mh, &flush) == ncclSuccess && flush == NULL, "iflush");

  REQUIRE(cxtBarrier(m->sh, n) == 0, "barrier before closing timed out");
  cxtBuf* all[] = {&sA, &rA, &bB, &sC, &rC, &bD, &sE, &rE, &sR, &rR};
  for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) cxtFree(m, all[k]);
  cxtTeardown(m);
}

/* NCCL_EXAMPLE_COLLNET_FAIL_CONNECT_RANK=arg: that member's connect says ncclInvalidUsage, the others fail
 * within the timeout. */
static void cxtScenarioFailConnect(cxtMember* m) {
  char v[16];
  snprintf(v, sizeof(v), "%d", m->arg);
  setenv("NCCL_EXAMPLE_COLLNET_FAIL_CONNECT_RANK", v, 1);
  snprintf(v, sizeof(v), "%d", CXT_TIMEOUT_MS);
  setenv("NCCL_EXAMPLE_COLLNET_TIMEOUT_MS", v, 1);
  cxtSetup(m);
  int64_t t0 = cxtNowMs();
  ncclResult_t res = cxtConnect(m);
  int64_t ms = cxtNowMs() - t0;
  if (m->rank == m->arg)
    REQUIRE(res == ncclInvalidUsage && !m->coll, "the failing member's connect: %d, want ncclInvalidUsage", res);
  else REQUIRE(res != ncclSuccess && !m->coll, "connect worked with member %d failing", m->arg);
  REQUIRE(ms <= CXT_TIMEOUT_MS + 2000, "connect took %lld ms (timeout %d)", (long long)ms, CXT_TIMEOUT_MS);
  cxtTeardown(m);
}

/* Member arg dies during an operation: the others' operations fail within the timeout, closeColl returns. */
static void cxtScenarioKill(cxtMember* m) {
  char v[16];
  snprintf(v, sizeof(v), "%d", CXT_TIMEOUT_MS);
  setenv("NCCL_EXAMPLE_COLLNET_TIMEOUT_MS", v, 1);
  cxtSetup(m);
  REQUIRE(cxtConnect(m) == ncclSuccess && m->coll, "connect failed");
  cxtBuf b;
  cxtAlloc(m, &b, CXT_N_B * 4);
  REQUIRE(cxtBarrier(m->sh, m->n) == 0, "barrier after connect timed out");
  if (m->rank == m->arg) {
    cxtPost(m, &b, &b, CXT_N_B, ncclInt32, ncclSum);
    usleep(1000);
    raise(SIGKILL);
  }
  int64_t t0 = cxtNowMs();
  ncclResult_t res = ncclSuccess;
  for (int k = 0; k < 1000 && res == ncclSuccess; k++) {
    void* req = NULL;
    res = cxtAllreduce(m->a, m->coll, b.p, b.p, CXT_N_B, ncclInt32, ncclSum, b.mh, b.mh, &req);
    if (res == ncclSuccess && req) res = cxtWaitReq(m->a, req, NULL, 3 * CXT_TIMEOUT_MS);
    REQUIRE(cxtNowMs() - t0 < CXT_TIMEOUT_MS + 2000, "no error %lld ms after member %d died",
            (long long)(cxtNowMs() - t0), m->arg);
  }
  REQUIRE(res == ncclSystemError, "operations with a dead member: %d, want ncclSystemError", res);
  void* req = NULL;
  REQUIRE(cxtAllreduce(m->a, m->coll, b.p, b.p, 1, ncclInt32, ncclSum, b.mh, b.mh, &req) != ncclSuccess && !req,
          "an operation was taken after the group failed");
  int64_t t1 = cxtNowMs();
  cxtFree(m, &b);
  cxtTeardown(m);
  REQUIRE(cxtNowMs() - t1 < 2000, "closing took %lld ms", (long long)(cxtNowMs() - t1));
}

#include "collnet_example_test_gather.h"

/* ---------------------------------------------------------------- per library */

static int cxtCheckTables(const cxtApi* a, void* lib, const char* wantName) {
  int fails = 0;
#define CHECK(cond, ...)                       \
  do {                                         \
    if (!(cond)) {                             \
      fprintf(stderr, "FAIL [%s] ", a->label); \
      fprintf(stderr, __VA_ARGS__);            \
      fprintf(stderr, "\n");                   \
      fails++;                                 \
    }                                          \
  } while (0)
  CHECK(dlsym(lib, "ncclNetPlugin_v8") != NULL, "no ncclNetPlugin_v8 beside the CollNet table");
  const char* name = *(const char* const*)a->table;
  CHECK(name && strcmp(name, wantName) == 0, "table name %s, want %s", name ? name : "NULL", wantName);
  if (a->version == 8)
    CHECK(CXT_T(a, 8)->iallgather && CXT_T(a, 8)->ireducescatter, "v8: no iallgather/ireducescatter");
  if (a->version == 9)
    CHECK(CXT_T(a, 9)->iallgather && CXT_T(a, 9)->ireducescatter && !CXT_T(a, 9)->makeVDevice, "v9: the members");
  if (a->version == 10)
    CHECK(CXT_T(a, 10)->iallgather && CXT_T(a, 10)->ireducescatter && !CXT_T(a, 10)->makeVDevice, "v10: the members");
  if (a->version == 11)
    CHECK(CXT_T(a, 11)->iallgather && CXT_T(a, 11)->ireducescatter && CXT_T(a, 11)->finalize, "v11: the members");
  /* reduceSupport: ops 0..3 on the ten types, nothing else (and no crash on odd values). */
  for (int t = -1; t <= 12; t++)
    for (int op = -1; op <= 5; op++) {
      int s = -1;
      ncclResult_t res = CXT_CALL(a, reduceSupport, (ncclDataType_t)t, (ncclRedOp_t)op, &s);
      int want = t >= 0 && t <= 9 && op >= 0 && op <= 3;
      CHECK(res == ncclSuccess && s == want, "reduceSupport(%d, %d): %d (result %d), want %d", t, op, s, res, want);
    }
  int s = -1;
  CHECK(CXT_CALL(a, reduceSupport, (ncclDataType_t)99, ncclSum, &s) == ncclSuccess && s == 0, "type 99: %d", s);
  CHECK(CXT_CALL(a, reduceSupport, ncclFloat8e5m2, ncclMax, &s) == ncclSuccess && s == 0, "float8e5m2: %d", s);
  CHECK(CXT_CALL(a, reduceSupport, ncclFloat32, (ncclRedOp_t)1000, &s) == ncclSuccess && s == 0, "op 1000: %d", s);
#undef CHECK
  return fails;
}

static int cxtRunApi(const cxtApi* a, void* lib, int full) {
  int fails = cxtCheckTables(a, lib, full ? "ExampleCollNet" : "ExampleCollNetV8");
  cxtGroup g[2];
  static const int sizes[3] = {1, 2, 4};
  for (int k = 0; k < 3; k++) {
    if (!full && sizes[k] != 2) continue;
    char what[64];
    snprintf(what, sizeof(what), "%d member%s%s", sizes[k], sizes[k] > 1 ? "s" : "",
             sizes[k] == 1 ? " (maxCollBytes 1 MiB)" : "");
    cxtStart(&g[0], a, sizes[k], cxtScenarioBasic, sizes[k] == 1, -1, what);
    fails += cxtWait(&g[0]);
  }
  static const int gatherSizes[3] = {1, 3, 4};
  for (int k = 0; k < 3; k++) {
    if (!full && gatherSizes[k] != 3) continue;
    char what[96];
    snprintf(what, sizeof(what), "iallgather, ireducescatter: %d member%s%s", gatherSizes[k],
             gatherSizes[k] > 1 ? "s" : "", gatherSizes[k] == 1 ? " (maxCollBytes 1 MiB)" : "");
    cxtStart(&g[0], a, gatherSizes[k], cxtScenarioGather, gatherSizes[k] == 1, -1, what);
    fails += cxtWait(&g[0]);
  }
  if (!full) return fails;
  /* The two failure cases of each kind run at the same time (each takes up to the timeout). */
  cxtStart(&g[0], a, 3, cxtScenarioFailConnect, 1, -1, "connect fails at member 1");
  cxtStart(&g[1], a, 3, cxtScenarioFailConnect, 0, -1, "connect fails at member 0");
  fails += cxtWait(&g[0]) + cxtWait(&g[1]);
  cxtStart(&g[0], a, 3, cxtScenarioKill, 2, 2, "member 2 killed");
  cxtStart(&g[1], a, 3, cxtScenarioKill, 0, 0, "member 0 killed");
  fails += cxtWait(&g[0]) + cxtWait(&g[1]);
  return fails;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s LIB.so...\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  unsetenv("NCCL_EXAMPLE_COLLNET_NO_GATHER"); /* (read when a library is loaded) */
  int64_t t0 = cxtNowMs();
  int fails = 0;
  for (int i = 1; i < argc; i++) {
    const char* name = strrchr(argv[i], '/');
    fails += cxtCheckNoGather(argv[i], name ? name + 1 : argv[i]);
    void* lib = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      fprintf(stderr, "FAIL cannot load %s: %s\n", argv[i], dlerror());
      fails++;
      continue;
    }
    const char* base = strrchr(argv[i], '/');
    base = base ? base + 1 : argv[i];
    cxtApi a = {argv[i], 0, NULL, ""};
    static const int versions[4] = {11, 10, 9, 8};
    for (int k = 0; k < 4 && !a.table; k++) {
      char sym[32];
      snprintf(sym, sizeof(sym), "ncclCollNetPlugin_v%d", versions[k]);
      if ((a.table = dlsym(lib, sym)) != NULL) a.version = versions[k];
    }
    if (!a.table) {
      fprintf(stderr, "FAIL %s exports no ncclCollNetPlugin_v8..v11\n", base);
      fails++;
      dlclose(lib);
      continue;
    }
    snprintf(a.label, sizeof(a.label), "%s v%d", base, a.version);
    printf("%s: ncclCollNetPlugin_v%d\n", base, a.version);
    fails += cxtRunApi(&a, lib, 1);
    if (a.version == 11) { /* the v11 build's v8 table too */
      cxtApi a8 = {argv[i], 8, dlsym(lib, "ncclCollNetPlugin_v8"), ""};
      snprintf(a8.label, sizeof(a8.label), "%s v8 table", base);
      if (!a8.table) {
        fprintf(stderr, "FAIL %s: the v11 build exports no ncclCollNetPlugin_v8\n", base);
        fails++;
      } else {
        fails += cxtRunApi(&a8, lib, 0);
      }
    }
    dlclose(lib);
  }
  printf("collnet_example_test: %s (%d failure%s, %.1f s)\n", fails ? "FAILED" : "passed", fails, fails == 1 ? "" : "s",
         (double)(cxtNowMs() - t0) / 1000.0);
  return fails ? 1 : 0;
}
