/* integration.aggd: comm_aggd (the software SHARP daemon) and its CollNet plugin, driven through the plugin's
 * ncclCollNetPlugin_v11 table by forked member processes (no libcomm communicator involved).
 *
 *   test_aggd PATH/comm_aggd PATH/libcomm-collnet-aggd.so
 *
 * Two daemons (small window and chunk, so operations span several chunks and credits matter), then:
 *   A  two groups of 4 members at once: every type x op on small and multi-chunk counts, in and out of place,
 *      4 in flight, checked bit for bit against a reference reduced in fixed member order with libcomm's own
 *      element reductions; identical on every member; a burst of 64 requests (and the 65th refused) while a
 *      member lags. Meanwhile strangers (wrong magic, truncated, oversized, a wrong MAC on a real group, a
 *      group id not derived from its key) are refused and the groups keep working. Peak memory <= the bound.
 *   B  a member killed while the others wait on an operation: they get an error, the daemons free the group.
 *   C  connect fails: COMM_AGGD unset, a daemon killed before connect, a group too large for --max-mem.
 *   D  a daemon killed during an operation (test fails); a member silent past --timeout-ms (test fails).
 *   E  a daemon stopped (SIGSTOP) during an operation: test fails after COMM_AGGD_TIMEOUT_MS without progress.
 *   F, X, H, G  allgather and reducescatter (test_aggd_gather.h): groups of 3 and 4, whole and windowed, every
 *      type x op; through libcomm's adapter; COMM_AGGD_NO_GATHER; a member killed in the middle of an allgather.
 * At the end the daemons hold no group and no memory, and exit 0 on SIGTERM. SPDX-License-Identifier: Apache-2.0 */
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include "aggd_proto.h"
#define NET_NCCL_ABI_ONLY
#include "collnet_nccl.h"
#include "reduce.h"

#define MAXR 8
#define BIG 20001           /* elements: several 16 KiB chunks per daemon for 2-byte and wider types */
#define NCASES (12 * 4 * 4) /* type x count x op */
#define TIMEOUT_MS 10000

static const char* daemonPath;
static const char* pluginPath;
static int64_t t0;
static int* anyFailed; /* shared: set by any process that fails, so the others stop waiting */

static int64_t nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#define FAIL(...)                                                      \
  do {                                                                 \
    fprintf(stderr, "test_aggd FAILED (%s:%d): ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                                      \
    fprintf(stderr, "\n");                                             \
    if (anyFailed) __atomic_store_n(anyFailed, 1, __ATOMIC_RELEASE);   \
    _exit(1);                                                          \
  } while (0)
#define CHECK(c, ...)            \
  do {                           \
    if (!(c)) FAIL(__VA_ARGS__); \
  } while (0)

/* ---------------------------------------------------------------- shared state of a group's members */
typedef struct {
  int nranks;
  uint8_t handles[MAXR][NCCL_NET_HANDLE_MAXSIZE];
  int ready, connected, posted, flag;
  uint64_t digest[MAXR];
  int err[MAXR];
  int64_t errMs[MAXR];
} shGroup;
static shGroup* sh; /* [8], MAP_SHARED */
static const size_t counts[4] = {1, 3, 1000, BIG};
static size_t caseOff[NCASES + 1]; /* case (t, ci, op) = (t * 4 + ci) * 4 + op: its reference in refs[group] */
static uint8_t* refs[2];           /* MAP_SHARED, computed by the parent before the members start */

static void waitCount(int* v, int n, int ms, const char* what) {
  int64_t end = nowMs() + ms;
  while (__atomic_load_n(v, __ATOMIC_ACQUIRE) < n) {
    CHECK(nowMs() < end, "timed out waiting for %s (%d of %d)", what, *v, n);
    CHECK(!__atomic_load_n(anyFailed, __ATOMIC_ACQUIRE), "another process failed while waiting for %s", what);
    usleep(1000);
  }
}

/* ---------------------------------------------------------------- daemons */
typedef struct {
  pid_t pid;
  int port;
} daemonProc;

static daemonProc startDaemon(const char* maxMem) {
  int p[2];
  CHECK(pipe(p) == 0, "pipe");
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    execl(daemonPath, daemonPath, "--listen", "127.0.0.1:0", "--max-mem", maxMem, "--window", "4", "--chunk", "16K",
          "--timeout-ms", "3000", (char*)NULL);
    _exit(127);
  }
  close(p[1]);
  char line[256];
  size_t n = 0;
  int64_t end = nowMs() + 10000;
  while (n < sizeof(line) - 1 && (n == 0 || line[n - 1] != '\n')) {
    struct pollfd pf = {p[0], POLLIN, 0};
    CHECK(nowMs() < end && poll(&pf, 1, 1000) >= 0, "comm_aggd did not say it listens");
    if (!pf.revents) continue;
    ssize_t r = read(p[0], line + n, 1);
    CHECK(r == 1, "comm_aggd exited before listening");
    n++;
  }
  line[n] = '\0';
  close(p[0]);
  daemonProc d = {pid, 0};
  CHECK(sscanf(line, "comm_aggd listening on 127.0.0.1:%d", &d.port) == 1, "unexpected first line: %s", line);
  return d;
}

static uint64_t mix(uint64_t x);

/* ---------------------------------------------------------------- raw protocol (strangers, stats) */
static int rawConnect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(fd >= 0 && connect(fd, (struct sockaddr*)&a, sizeof(a)) == 0, "connect to port %d: %s", port, strerror(errno));
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}
static int rawRead(int fd, void* buf, size_t n) { /* 1: all, 0: EOF first, -1: error */
  uint8_t* p = buf;
  while (n > 0) {
    ssize_t r = recv(fd, p, n, 0);
    if (r == 0) return 0;
    if (r < 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 1;
}
static void rawHello(int fd, uint8_t nonce[16]) {
  uint8_t b[AGGD_HDR_BYTES + 20];
  CHECK(rawRead(fd, b, sizeof(b)) == 1, "no HELLO");
  aggdHdr h;
  aggdHdrUnpack(b, &h);
  CHECK(h.magic == AGGD_MAGIC && h.type == AGGD_HELLO && h.len == 20, "bad HELLO");
  memcpy(nonce, b + AGGD_HDR_BYTES + 4, 16);
}
/* The next message's header (body into body, at most AGGD_MAX_CTRL); 0 on EOF. */
static int rawMsg(int fd, aggdHdr* h, char* body) {
  uint8_t b[AGGD_HDR_BYTES];
  int r = rawRead(fd, b, sizeof(b));
  if (r != 1) return 0;
  aggdHdrUnpack(b, h);
  CHECK(h->len <= AGGD_MAX_CTRL && rawRead(fd, body, h->len) == 1, "bad message body");
  body[h->len] = '\0';
  return 1;
}
static long long statOf(int port, const char* key) {
  int fd = rawConnect(port);
  uint8_t nonce[16], q[AGGD_HDR_BYTES];
  rawHello(fd, nonce);
  aggdHdrPack(q, AGGD_STATS, 0, 0, 0);
  CHECK(send(fd, q, sizeof(q), 0) == (ssize_t)sizeof(q), "send STATS");
  aggdHdr h;
  char body[AGGD_MAX_CTRL + 1];
  CHECK(rawMsg(fd, &h, body) && h.type == AGGD_STATS, "no STATS reply");
  close(fd);
  char pat[64];
  snprintf(pat, sizeof(pat), " %s=", key);
  char line[AGGD_MAX_CTRL + 2] = " ";
  strcat(line, body);
  char* p = strstr(line, pat);
  CHECK(p, "no %s in the stats: %s", key, body);
  return atoll(p + strlen(pat));
}
/* Expect the daemon to close the connection (after at most a REFUSE with code `refuse`, 0: none). */
static void expectDropped(int fd, int refuse, const char* what) {
  aggdHdr h;
  char body[AGGD_MAX_CTRL + 1];
  if (rawMsg(fd, &h, body)) {
    CHECK(refuse && h.type == AGGD_REFUSE && (int)h.arg == refuse, "%s: got message %u (arg %u), not refused", what,
          h.type, h.arg);
    CHECK(!rawMsg(fd, &h, body), "%s: not closed after the refusal", what);
  } else {
    CHECK(!refuse, "%s: closed without the refusal", what);
  }
  close(fd);
}

/* REGISTER for shard 0 of 2; the MAC given, or (key not NULL) the right one under key. */
static void sendReg(int fd, const uint8_t g[16], const uint8_t mac[16], const uint8_t* key, const uint8_t nonce[16],
                    uint32_t rank, uint32_t nranks) {
  aggdRegister r;
  memcpy(r.g, g, 16);
  r.rank = rank;
  r.nranks = nranks;
  r.shard = 0;
  r.nshards = 2;
  r.commId = 0;
  memcpy(r.mac, mac, 16);
  if (key) aggdRegisterMac(key, nonce, &r, r.mac);
  uint8_t m[AGGD_HDR_BYTES + AGGD_REGISTER_BYTES];
  aggdHdrPack(m, AGGD_REGISTER, AGGD_REGISTER_BYTES, 0, 0);
  aggdRegisterPack(m + AGGD_HDR_BYTES, &r);
  CHECK(send(fd, m, sizeof(m), 0) == (ssize_t)sizeof(m), "send REGISTER");
}

/* Strangers against daemon `port` while group `real` works: all dropped or refused. */
static void strangers(int port, const shGroup* real) {
  uint8_t nonce[16], junk[AGGD_HDR_BYTES], m[AGGD_HDR_BYTES + 16];
  long long auth0 = statOf(port, AGGD_STAT_AUTH), drop0 = statOf(port, "dropped");
  int fd = rawConnect(port); /* wrong magic */
  rawHello(fd, nonce);
  memset(junk, 0x55, sizeof(junk));
  CHECK(send(fd, junk, sizeof(junk), 0) == (ssize_t)sizeof(junk), "send");
  expectDropped(fd, 0, "wrong magic");
  fd = rawConnect(port); /* truncated header */
  rawHello(fd, nonce);
  aggdHdrPack(junk, AGGD_REGISTER, AGGD_REGISTER_BYTES, 0, 0);
  CHECK(send(fd, junk, 10, 0) == 10, "send");
  shutdown(fd, SHUT_WR);
  expectDropped(fd, 0, "truncated header");
  fd = rawConnect(port); /* a huge size */
  rawHello(fd, nonce);
  aggdHdrPack(junk, AGGD_REGISTER, 0xfffffff0u, 0, 0);
  CHECK(send(fd, junk, sizeof(junk), 0) == (ssize_t)sizeof(junk), "send");
  expectDropped(fd, 0, "huge size");
  /* A wrong MAC for the real group's id (as if the stranger had learnt G). */
  const uint8_t* hs[MAXR];
  for (int r = 0; r < real->nranks; r++) hs[r] = real->handles[r];
  uint8_t k[16], g[16], mac[16];
  aggdDeriveGroup(hs, real->nranks, k, g);
  memset(mac, 0xa5, sizeof(mac));
  fd = rawConnect(port);
  rawHello(fd, nonce);
  sendReg(fd, g, mac, NULL, nonce, 1, (uint32_t)real->nranks);
  expectDropped(fd, AGGD_E_AUTH, "wrong MAC");
  /* With the real key (a member's mistakes, not a stranger's): a rank taken, a different nranks. */
  fd = rawConnect(port);
  rawHello(fd, nonce);
  sendReg(fd, g, mac, k, nonce, 1, (uint32_t)real->nranks);
  expectDropped(fd, AGGD_E_RANK, "rank taken");
  fd = rawConnect(port);
  rawHello(fd, nonce);
  sendReg(fd, g, mac, k, nonce, 1, (uint32_t)real->nranks + 1);
  expectDropped(fd, AGGD_E_MISMATCH, "nranks mismatch");
  /* A random group id with a key it was not derived from. */
  fd = rawConnect(port);
  rawHello(fd, nonce);
  for (int i = 0; i < 16; i++) g[i] = (uint8_t)(i * 37 + 11), k[i] = (uint8_t)(i * 13 + 5);
  sendReg(fd, g, mac, NULL, nonce, 0, 4);
  aggdHdr h;
  char body[AGGD_MAX_CTRL + 1];
  CHECK(rawMsg(fd, &h, body) && h.type == AGGD_NEED_KEY, "random group: no NEED_KEY");
  aggdHdrPack(m, AGGD_KEY, 16, 0, 0);
  memcpy(m + AGGD_HDR_BYTES, k, 16);
  CHECK(send(fd, m, sizeof(m), 0) == (ssize_t)sizeof(m), "send KEY");
  expectDropped(fd, AGGD_E_AUTH, "random group");
  CHECK(statOf(port, AGGD_STAT_AUTH) == auth0 + 2, "refused_auth did not count 2 strangers");
  CHECK(statOf(port, "dropped") >= drop0 + 3, "dropped did not count 3 bad connections");
  /* Fuzz-ish: random bytes, some behind a valid magic and type, then gone; the daemon stays up. */
  for (int i = 0; i < 24; i++) {
    uint8_t b[256];
    size_t n = 1 + mix(9000 + (uint64_t)i) % sizeof(b);
    for (size_t j = 0; j < n; j++) b[j] = (uint8_t)mix((uint64_t)i * 1000 + j);
    if (i % 2) aggdHdrPack(b, (uint16_t)(i % 13), (uint32_t)mix((uint64_t)i) % 2048, 0, 0);
    fd = rawConnect(port);
    rawHello(fd, nonce);
    send(fd, b, i % 2 && n < AGGD_HDR_BYTES ? AGGD_HDR_BYTES : n, MSG_NOSIGNAL);
    close(fd);
  }
  CHECK(statOf(port, AGGD_STAT_GROUPS) >= 2, "the daemon lost the real groups");
}

/* ---------------------------------------------------------------- members */
static char lastWarn[1024];
static int logRank = -1;
static void logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  if (level != NCCL_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(lastWarn, sizeof(lastWarn), fmt, ap);
  va_end(ap);
  fprintf(stderr, "[member %d] WARN %s\n", logRank, lastWarn);
}

static ncclCollNet_v11_t* api;
static ncclCollNet_v8_t* api8; /* the same functions; its iallreduce takes an int count */
static void* ctx;
static void loadPlugin(const char* daemons) {
  if (daemons) setenv("COMM_AGGD", daemons, 1);
  else unsetenv("COMM_AGGD");
  if (!api) {
    void* lib = dlopen(pluginPath, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib, "dlopen %s: %s", pluginPath, dlerror());
    api = dlsym(lib, "ncclCollNetPlugin_v11");
    api8 = dlsym(lib, "ncclCollNetPlugin_v8");
    CHECK(api && dlsym(lib, "ncclCollNetPlugin_v10") && dlsym(lib, "ncclCollNetPlugin_v9") &&
              dlsym(lib, "ncclCollNetPlugin_v8"),
          "the plugin lacks a CollNet table");
  }
  if (ctx) api->finalize(ctx);
  CHECK(api->init(&ctx, 0x1234, logger) == ncclSuccess, "init");
}

/* Listen, publish the handle, wait for every member's, connect. */
static void* joinGroup(shGroup* s, int rank) {
  void* lc;
  CHECK(api->listen(ctx, 0, s->handles[rank], &lc) == ncclSuccess, "listen");
  __atomic_add_fetch(&s->ready, 1, __ATOMIC_ACQ_REL);
  waitCount(&s->ready, s->nranks, 20000, "the handles");
  void* hp[MAXR];
  for (int r = 0; r < s->nranks; r++) hp[r] = s->handles[r];
  void* cc = NULL;
  ncclResult_t rc = api->connect(hp, s->nranks, rank, lc, &cc);
  CHECK(rc == ncclSuccess && cc, "rank %d: connect failed (%d): %s", rank, rc, lastWarn);
  api->closeListen(lc);
  __atomic_add_fetch(&s->connected, 1, __ATOMIC_ACQ_REL);
  return cc;
}

/* Test until done: the result code (timeout: FAIL). */
static ncclResult_t waitReq(void* req, int ms) {
  int64_t end = nowMs() + ms;
  for (;;) {
    int done = 0, size = -1;
    ncclResult_t rc = api->test(req, &done, &size);
    if (rc != ncclSuccess || done) return rc;
    CHECK(nowMs() < end, "a request did not complete in %d ms", ms);
    usleep(50);
  }
}

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
/* Member `rank`'s input of case `seed`: random integers, small floats (products of 8 stay finite in fp8). */
static void gen(void* buf, int t, size_t n, int rank, uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    uint64_t h = mix(seed * 1000003u + (uint64_t)rank * 7919u + i);
    float f = (float)((int)(h % 33) - 16) / 8.0f;
    switch (t) {
      case 0:
      case 1: ((uint8_t*)buf)[i] = (uint8_t)h; break;
      case 2:
      case 3: ((uint32_t*)buf)[i] = (uint32_t)h; break;
      case 4:
      case 5: ((uint64_t*)buf)[i] = h; break;
      case 6: ((uint16_t*)buf)[i] = commFloatToHalf(f); break;
      case 7: ((float*)buf)[i] = f; break;
      case 8: ((double*)buf)[i] = (double)((int)(h % 2001) - 1000) / 64.0; break;
      case 9: ((uint16_t*)buf)[i] = commFloatToBf16(f); break;
      case 10: ((uint8_t*)buf)[i] = commFloatToFp8e4m3(f); break;
      default: ((uint8_t*)buf)[i] = commFloatToFp8e5m2(f); break;
    }
  }
}
/* The reference: acc = m0 op m1 op ... in member order, with libcomm's reductions. */
static void reference(void* ref, void* tmp, int t, int op, size_t n, int nranks, uint64_t seed) {
  commRedOpArgs a;
  CHECK(commRedOpArgsBuiltin((commRedOp_t)op, (commDataType_t)t, nranks, &a) == commSuccess, "op args");
  gen(ref, t, n, 0, seed);
  for (int m = 1; m < nranks; m++) {
    gen(tmp, t, n, m, seed);
    commReduceLocal(&a, ref, ref, tmp, n, 0, 0);
  }
}
static void computeRefs(uint8_t* out, uint64_t seed0, int nranks) {
  uint8_t* tmp = malloc((size_t)BIG * 8);
  CHECK(tmp, "malloc");
  for (int c = 0; c < NCASES; c++) {
    int t = c / 16, ci = (c / 4) % 4, op = c % 4;
    reference(out + caseOff[c], tmp, t, op, counts[ci], nranks, seed0 + (uint64_t)c);
  }
  free(tmp);
}
static uint64_t digestOf(uint64_t d, const void* p, size_t n) {
  for (size_t i = 0; i < n; i++) d = (d ^ ((const uint8_t*)p)[i]) * 0x100000001b3ull;
  return d;
}

/* Scenario A: the sweep, the burst, then (after the strangers) one more operation. */
static void memberSweep(shGroup* s, int rank, const char* daemons, uint64_t seed0, const uint8_t* ref) {
  loadPlugin(daemons);
  void* cc = joinGroup(s, rank);
  size_t cap = (size_t)BIG * 8;
  uint8_t *sendb[4], *recvb[4];
  void* mh[8];
  for (int i = 0; i < 4; i++) {
    sendb[i] = malloc(cap);
    recvb[i] = malloc(cap);
    CHECK(sendb[i] && recvb[i], "malloc");
    CHECK(api->regMr(cc, sendb[i], cap, NCCL_PTR_HOST, &mh[2 * i]) == ncclSuccess &&
              api->regMr(cc, recvb[i], cap, NCCL_PTR_HOST, &mh[2 * i + 1]) == ncclSuccess,
          "regMr");
  }
  /* An independent check first: int32 sum of (rank + 1) is n(n+1)/2. */
  for (int i = 0; i < 5; i++) ((int32_t*)sendb[0])[i] = rank + 1;
  void* req = NULL;
  CHECK(api8->iallreduce(cc, sendb[0], recvb[0], 5, ncclInt32, ncclSum, mh[0], mh[1], &req) == ncclSuccess && req,
        "iallreduce (v8)");
  for (int done = 0; !done;) { /* size may be NULL */
    CHECK(api->test(req, &done, NULL) == ncclSuccess, "int32 sum failed: %s", lastWarn);
    if (!done) usleep(50);
  }
  void* flush = (void*)1;
  CHECK(api->iflush(cc, recvb[0], 20, mh[1], &flush) == ncclSuccess && flush == NULL, "iflush");
  for (int i = 0; i < 5; i++)
    CHECK(((int32_t*)recvb[0])[i] == s->nranks * (s->nranks + 1) / 2, "int32 sum = %d", ((int32_t*)recvb[0])[i]);
  uint64_t dig = 0xcbf29ce484222325ull;
  for (int t = 0; t < 12; t++) {
    size_t es = aggdTypeSize(t);
    for (int ci = 0; ci < 4; ci++) {
      size_t n = counts[ci];
      void* reqs[4];
      for (int op = 0; op < 4; op++) { /* 4 in flight; odd ops in place */
        uint64_t seed = seed0 + (uint64_t)((t * 4 + ci) * 4 + op);
        gen(sendb[op], t, n, rank, seed);
        uint8_t* dst = (op & 1) ? sendb[op] : recvb[op];
        reqs[op] = NULL;
        CHECK(api->iallreduce(cc, sendb[op], dst, n, (ncclDataType_t)t, (ncclRedOp_t)op, mh[2 * op], mh[2 * op + 1],
                              &reqs[op]) == ncclSuccess &&
                  reqs[op],
              "iallreduce type %d op %d count %zu", t, op, n);
      }
      for (int op = 0; op < 4; op++) {
        CHECK(waitReq(reqs[op], TIMEOUT_MS) == ncclSuccess, "type %d op %d count %zu failed: %s", t, op, n, lastWarn);
        uint8_t* dst = (op & 1) ? sendb[op] : recvb[op];
        const uint8_t* want = ref + caseOff[(t * 4 + ci) * 4 + op];
        if (memcmp(dst, want, n * es) != 0) {
          size_t i = 0;
          while (i < n * es && dst[i] == want[i]) i++;
          FAIL("rank %d: type %d op %d count %zu: byte %zu is %02x, the reference %02x", rank, t, op, n, i, dst[i],
               want[i]);
        }
        dig = digestOf(dig, dst, n * es);
      }
    }
  }
  /* The burst: 64 requests posted as fast as possible (the 65th must wait) while rank 1 lags. */
  if (rank == 1) usleep(200000);
  void* burst[64];
  size_t bn = 8192; /* 32 KiB of float32: one chunk per daemon */
  float* bsend = malloc(64 * bn * 4);
  float* brecv = malloc(64 * bn * 4);
  CHECK(bsend && brecv, "malloc");
  for (int i = 0; i < 64; i++) {
    for (size_t j = 0; j < bn; j++) bsend[(size_t)i * bn + j] = (float)(rank + i);
    burst[i] = NULL;
    CHECK(api->iallreduce(cc, bsend + (size_t)i * bn, brecv + (size_t)i * bn, bn, ncclFloat32, ncclMax, mh[0], mh[1],
                          &burst[i]) == ncclSuccess &&
              burst[i],
          "burst request %d not posted", i);
  }
  void* extra = (void*)1;
  CHECK(api->iallreduce(cc, sendb[1], recvb[1], 16, ncclFloat32, ncclSum, mh[2], mh[3], &extra) == ncclSuccess &&
            extra == NULL,
        "a 65th request in flight was accepted");
  for (int i = 0; i < 64; i++) {
    CHECK(waitReq(burst[i], TIMEOUT_MS) == ncclSuccess, "burst request %d failed: %s", i, lastWarn);
    for (size_t j = 0; j < bn; j++)
      CHECK(brecv[(size_t)i * bn + j] == (float)(s->nranks - 1 + i), "burst %d: %g", i,
            (double)brecv[(size_t)i * bn + j]);
  }
  free(bsend);
  free(brecv);
  /* After the strangers: still working. */
  waitCount(&s->flag, 1, 30000, "the strangers");
  for (int i = 0; i < 1000; i++) ((int32_t*)sendb[0])[i] = rank * 1000 + i;
  CHECK(api->iallreduce(cc, sendb[0], sendb[0], 1000, ncclInt32, ncclMax, mh[0], mh[0], &req) == ncclSuccess && req,
        "iallreduce after the strangers");
  CHECK(waitReq(req, TIMEOUT_MS) == ncclSuccess, "failed after the strangers: %s", lastWarn);
  for (int i = 0; i < 1000; i++) CHECK(((int32_t*)sendb[0])[i] == (s->nranks - 1) * 1000 + i, "max after strangers");
  s->digest[rank] = digestOf(dig, sendb[0], 4000);
  for (int i = 0; i < 8; i++) api->deregMr(cc, mh[i]);
  CHECK(api->closeColl(cc) == ncclSuccess, "closeColl");
  api->finalize(ctx);
  for (int i = 0; i < 4; i++) free(sendb[i]), free(recvb[i]);
}

/* Scenario B: the last rank is killed while the others wait on an operation. */
static void memberKilled(shGroup* s, int rank, const char* daemons) {
  loadPlugin(daemons);
  void* cc = joinGroup(s, rank);
  static int32_t buf[BIG];
  if (rank == s->nranks - 1) {
    waitCount(&s->posted, s->nranks - 1, 20000, "the others' posts");
    usleep(100000);
    raise(SIGKILL);
  }
  void* req = NULL;
  CHECK(api->iallreduce(cc, buf, buf, BIG, ncclInt32, ncclSum, NULL, NULL, &req) == ncclSuccess && req, "post");
  __atomic_add_fetch(&s->posted, 1, __ATOMIC_ACQ_REL);
  int64_t start = nowMs();
  s->err[rank] = waitReq(req, TIMEOUT_MS + 5000);
  s->errMs[rank] = nowMs() - start;
  api->closeColl(cc);
}

/* Scenario C: connect must fail, with a reason. */
static void memberMisc(int port0, int deadPort) {
  char list[128];
  int ok;
  loadPlugin(NULL);
  CHECK(api->reduceSupport(ncclFloat8e5m2, ncclMin, &ok) == ncclSuccess && ok == 1, "fp8 min unsupported");
  CHECK(api->reduceSupport((ncclDataType_t)12, ncclSum, &ok) == ncclSuccess && ok == 0, "type 12 supported");
  CHECK(api->reduceSupport(ncclFloat32, ncclAvg, &ok) == ncclSuccess && ok == 0, "avg supported");
  ncclNetProperties_v11_t props;
  CHECK(api->getProperties(0, &props) == ncclSuccess && props.maxCollBytes > 0 && props.ptrSupport == NCCL_PTR_HOST,
        "properties");
  shGroup one;
  memset(&one, 0, sizeof(one));
  one.nranks = 1;
  void* lc;
  void* hp[64];
  void* cc;
  CHECK(api->listen(ctx, 0, one.handles[0], &lc) == ncclSuccess, "listen");
  hp[0] = one.handles[0];
  CHECK(api->connect(hp, 1, 0, lc, &cc) != ncclSuccess, "connect without COMM_AGGD succeeded");
  snprintf(list, sizeof(list), "127.0.0.1:%d,127.0.0.1:%d", port0, deadPort);
  loadPlugin(list);
  int64_t start = nowMs();
  CHECK(api->connect(hp, 1, 0, lc, &cc) == ncclSystemError, "connect with a dead daemon did not fail");
  CHECK(strstr(lastWarn, "unreachable"), "the reason is not given: %s", lastWarn);
  CHECK(nowMs() - start < 3000, "connect took %lld ms to fail", (long long)(nowMs() - start));
  /* 64 members x window 4 x chunk 16 KiB = 4 MiB > --max-mem 2 MiB: refused, with the numbers. */
  snprintf(list, sizeof(list), "127.0.0.1:%d", port0);
  loadPlugin(list);
  for (int r = 0; r < 64; r++) hp[r] = one.handles[0];
  CHECK(api->connect(hp, 64, 0, lc, &cc) == ncclSystemError, "a too-large group was accepted");
  CHECK(strstr(lastWarn, "not enough memory"), "not refused for memory: %s", lastWarn);
  api->closeListen(lc);
  api->finalize(ctx);
}

/* Scenario D (ranks 0 and 1 in this one process): the second daemon killed during an operation, then a
 * silent member (rank 1 never contributes) failed by the daemon's --timeout-ms. */
static void memberDaemonKilled(shGroup* s, int port0, int port3) {
  char list[128];
  snprintf(list, sizeof(list), "127.0.0.1:%d,127.0.0.1:%d", port0, port3);
  for (int phase = 0; phase < 2; phase++) {
    loadPlugin(list);
    void *lc[2], *hp[2], *cc[2], *req[2];
    uint8_t handles[2][NCCL_NET_HANDLE_MAXSIZE];
    static int32_t a[2][4096];
    for (int r = 0; r < 2; r++) {
      CHECK(api->listen(ctx, 0, handles[r], &lc[r]) == ncclSuccess, "listen");
      hp[r] = handles[r];
    }
    for (int r = 0; r < 2; r++) {
      CHECK(api->connect(hp, 2, r, lc[r], &cc[r]) == ncclSuccess, "connect rank %d: %s", r, lastWarn);
      api->closeListen(lc[r]);
    }
    for (int r = 0; r < 2; r++)
      CHECK(api->iallreduce(cc[r], a[r], a[r], 4096, ncclInt32, ncclSum, NULL, NULL, &req[r]) == ncclSuccess, "post");
    for (int r = 0; r < 2; r++) CHECK(waitReq(req[r], TIMEOUT_MS) == ncclSuccess, "first op: %s", lastWarn);
    CHECK(api->iallreduce(cc[0], a[0], a[0], 4096, ncclInt32, ncclSum, NULL, NULL, &req[0]) == ncclSuccess, "post");
    int64_t start = nowMs();
    if (phase == 0) {
      __atomic_store_n(&s->flag, 1, __ATOMIC_RELEASE); /* the parent kills daemon 3 */
      CHECK(waitReq(req[0], TIMEOUT_MS + 5000) == ncclSystemError, "test did not fail when the daemon died");
      CHECK(nowMs() - start < 5000, "the daemon's death took %lld ms to see", (long long)(nowMs() - start));
    } else {
      CHECK(waitReq(req[0], TIMEOUT_MS + 5000) == ncclRemoteError, "a silent member did not fail the group");
      CHECK(strstr(lastWarn, "sent nothing"), "not failed for the silence: %s", lastWarn);
      int64_t ms = nowMs() - start;
      CHECK(ms >= 2500 && ms < 9000, "the silent member failed the group after %lld ms", (long long)ms);
    }
    for (int r = 0; r < 2; r++) api->closeColl(cc[r]);
    snprintf(list, sizeof(list), "127.0.0.1:%d", port0);
  }
  api->finalize(ctx);
}

/* Scenario E: a daemon that stops answering (SIGSTOP): test fails after COMM_AGGD_TIMEOUT_MS without progress. */
static void memberDaemonStopped(shGroup* s, int port) {
  char list[64];
  snprintf(list, sizeof(list), "127.0.0.1:%d", port);
  setenv("COMM_AGGD_TIMEOUT_MS", "1500", 1);
  loadPlugin(list);
  s->nranks = 1;
  void* cc = joinGroup(s, 0);
  static float a[1000];
  void* req = NULL;
  CHECK(api->iallreduce(cc, a, a, 1000, ncclFloat32, ncclSum, NULL, NULL, &req) == ncclSuccess, "post");
  CHECK(waitReq(req, TIMEOUT_MS) == ncclSuccess, "first op: %s", lastWarn);
  __atomic_store_n(&s->flag, 1, __ATOMIC_RELEASE); /* the parent stops the daemon */
  waitCount(&s->posted, 1, 20000, "the daemon stopped");
  CHECK(api->iallreduce(cc, a, a, 1000, ncclFloat32, ncclSum, NULL, NULL, &req) == ncclSuccess, "post");
  int64_t start = nowMs();
  CHECK(waitReq(req, TIMEOUT_MS) == ncclSystemError, "a stopped daemon did not fail the request");
  int64_t ms = nowMs() - start;
  CHECK(strstr(lastWarn, "no progress") && ms >= 1400 && ms < 5000, "failed after %lld ms: %s", (long long)ms,
        lastWarn);
  api->closeColl(cc);
  api->finalize(ctx);
}

/* ---------------------------------------------------------------- parent */
static pid_t spawn(int rank) {
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    logRank = rank;
  }
  return pid;
}
static void reap(pid_t pid, int wantSignal, const char* what) {
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  if (wantSignal)
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == wantSignal, "%s: status %d, expected signal %d", what, st, wantSignal);
  else CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed (status %d)", what, st);
}
static void phase(const char* name) {
  fprintf(stderr, "test_aggd: [%6.2f s] %s\n", (double)(nowMs() - t0) / 1000.0, name);
}
static void waitFreed(int port, long long groups) {
  int64_t end = nowMs() + 5000;
  while (statOf(port, AGGD_STAT_GROUPS) != groups || statOf(port, AGGD_STAT_MEM) != 0) {
    CHECK(nowMs() < end, "daemon %d still holds %lld groups, %lld bytes", port, statOf(port, AGGD_STAT_GROUPS),
          statOf(port, AGGD_STAT_MEM));
    usleep(20000);
  }
}

#include "test_aggd_gather.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: test_aggd PATH/comm_aggd PATH/libcomm-collnet-aggd.so\n");
    return 2;
  }
  daemonPath = argv[1];
  pluginPath = argv[2];
  t0 = nowMs();
  signal(SIGPIPE, SIG_IGN);
  alarm(110);
  char ms[16];
  snprintf(ms, sizeof(ms), "%d", TIMEOUT_MS);
  setenv("COMM_AGGD_TIMEOUT_MS", ms, 1);
  sh = mmap(NULL, sizeof(shGroup) * 8 + sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(sh != MAP_FAILED, "mmap");
  memset(sh, 0, sizeof(shGroup) * 8 + sizeof(int));
  anyFailed = (int*)(sh + 8);
  { /* SipHash-2-4-128, the paper's first vector (key 00..0f, empty message) */
    uint8_t key[16], out[16];
    static const uint8_t want[16] = {0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6,
                                     0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55, 0x02, 0x93};
    for (int i = 0; i < 16; i++) key[i] = (uint8_t)i;
    aggdSip s;
    aggdSipInit(&s, key);
    aggdSipFinal(&s, out);
    CHECK(memcmp(out, want, 16) == 0, "SipHash-2-4-128 test vector");
  }
  for (int c = 0; c < NCASES; c++) caseOff[c + 1] = caseOff[c] + counts[(c / 4) % 4] * aggdTypeSize(c / 16);
  for (int gi = 0; gi < 2; gi++) {
    refs[gi] = mmap(NULL, caseOff[NCASES], PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(refs[gi] != MAP_FAILED, "mmap");
    computeRefs(refs[gi], 1000u * (uint64_t)(gi + 1), 4);
  }
  daemonProc d0 = startDaemon("2M"), d1 = startDaemon("2M");
  char list[128];
  snprintf(list, sizeof(list), "127.0.0.1:%d,127.0.0.1:%d", d0.port, d1.port);
  phase("daemons up; A: two groups of 4, every type x op, strangers");
  pid_t pids[8];
  for (int gi = 0; gi < 2; gi++) {
    sh[gi].nranks = 4;
    for (int r = 0; r < 4; r++)
      if ((pids[gi * 4 + r] = spawn(r)) == 0) {
        memberSweep(&sh[gi], r, list, 1000u * (uint64_t)(gi + 1), refs[gi]);
        _exit(0);
      }
  }
  waitCount(&sh[0].connected, 4, 20000, "group A connected");
  waitCount(&sh[1].connected, 4, 20000, "group B connected");
  strangers(d0.port, &sh[0]);
  sh[0].flag = sh[1].flag = 1;
  for (int i = 0; i < 8; i++) reap(pids[i], 0, "a member of group A or B");
  for (int gi = 0; gi < 2; gi++)
    for (int r = 1; r < 4; r++)
      CHECK(sh[gi].digest[r] == sh[gi].digest[0], "group %d: rank %d's results differ", gi, r);
  CHECK(sh[0].digest[0] != sh[1].digest[0], "the two groups' results are the same");
  for (int i = 0; i < 2; i++) {
    int port = i ? d1.port : d0.port;
    long long peak = statOf(port, AGGD_STAT_PEAK), rpeak = statOf(port, "reserved_peak"),
              max = statOf(port, AGGD_STAT_MAX);
    fprintf(stderr, "test_aggd: daemon %d: peak %lld bytes, reserved peak %lld, max %lld\n", i, peak, rpeak, max);
    CHECK(peak > 0 && peak <= rpeak && rpeak <= max, "daemon %d: memory beyond its bound", i);
    waitFreed(port, 0);
  }

  phase("B: a member killed during an operation");
  sh[2].nranks = 4;
  for (int r = 0; r < 4; r++)
    if ((pids[r] = spawn(r)) == 0) {
      memberKilled(&sh[2], r, list);
      _exit(0);
    }
  long long failed0 = statOf(d0.port, AGGD_STAT_FAILED);
  reap(pids[3], SIGKILL, "the killed member");
  for (int r = 0; r < 3; r++) {
    reap(pids[r], 0, "a member beside the killed one");
    CHECK(sh[2].err[r] == ncclRemoteError || sh[2].err[r] == ncclSystemError, "rank %d: test returned %d", r,
          sh[2].err[r]);
    CHECK(sh[2].errMs[r] < 5000, "rank %d saw the failure after %lld ms", r, (long long)sh[2].errMs[r]);
  }
  waitFreed(d0.port, 0);
  waitFreed(d1.port, 0);
  CHECK(statOf(d0.port, AGGD_STAT_FAILED) > failed0, "the daemon did not count the failed group");
  gatherScenarios(list, d0.port, d1.port);

  phase("C, D, E: connect failures; a daemon killed during an operation; a silent member; a stopped daemon");
  daemonProc d2 = startDaemon("2M"), d3 = startDaemon("2M");
  kill(d2.pid, SIGKILL);
  reap(d2.pid, SIGKILL, "daemon 2");
  pid_t misc = spawn(0), dk;
  if (misc == 0) {
    memberMisc(d0.port, d2.port);
    _exit(0);
  }
  if ((dk = spawn(0)) == 0) {
    memberDaemonKilled(&sh[3], d0.port, d3.port);
    _exit(0);
  }
  daemonProc d4 = startDaemon("2M");
  pid_t ds = spawn(0);
  if (ds == 0) {
    memberDaemonStopped(&sh[4], d4.port);
    _exit(0);
  }
  waitCount(&sh[3].flag, 1, 20000, "the operation on daemon 3");
  usleep(50000);
  kill(d3.pid, SIGKILL);
  reap(d3.pid, SIGKILL, "daemon 3");
  waitCount(&sh[4].flag, 1, 20000, "the first operation on daemon 4");
  kill(d4.pid, SIGSTOP);
  __atomic_store_n(&sh[4].posted, 1, __ATOMIC_RELEASE);
  reap(ds, 0, "the stopped daemon");
  kill(d4.pid, SIGKILL);
  reap(d4.pid, SIGKILL, "daemon 4");
  reap(misc, 0, "the connect failures");
  reap(dk, 0, "the daemon killed during an operation");
  waitFreed(d0.port, 0);
  waitFreed(d1.port, 0);
  CHECK(statOf(d0.port, AGGD_STAT_RESERVED) == 0 && statOf(d0.port, AGGD_STAT_MEMREF) >= 1, "daemon 0's final state");

  phase("done: daemons stop");
  kill(d0.pid, SIGTERM);
  kill(d1.pid, SIGTERM);
  reap(d0.pid, 0, "daemon 0 on SIGTERM");
  reap(d1.pid, 0, "daemon 1 on SIGTERM");
  phase("PASSED");
  return 0;
}
