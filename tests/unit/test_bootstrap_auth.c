/* The bootstrap's authentication and its listeners under attack: SipHash-2-4 test vectors, forged hellos,
 * ids whose key was derived from the root's address, silent clients, a connection flood at the root, and
 * the key never on the wire (fake listeners record what clients send). Ranks run as threads, over loopback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "bootstrap_internal.h"
#include "debug.h"
#include "socket.h"
#include "utils.h"
#include "test_bootstrap_util.h"

#define NRANKS 4
#define SLOT 32

typedef struct {
  commUniqueId id;
  int rank;
  int nranks;
  int64_t timeoutMs;
  pthread_barrier_t* afterInit; /* the main thread meddles between init and the allgather */
  commBootstrap** publish;      /* where the rank puts its bootstrap for the main thread */
  /* waits for the flood to reach this many connections before init */
  int startAt;
  const int* floodCount;
  commResult_t res;
  char where[32];
  char lastWarn[512];
} rankArgs;

static void* rankMain(void* arg) {
  rankArgs* a = (rankArgs*)arg;
  commBootstrap* b = NULL;
  commBootstrapOpts opts = {.timeoutMs = a->timeoutMs, .abortFlag = NULL};
  unsigned char buf[NRANKS * SLOT];
  if (a->floodCount != NULL) {
    int64_t until = commDeadlineNs(10000);
    while (__atomic_load_n(a->floodCount, __ATOMIC_ACQUIRE) < a->startAt && commTimeNs() < until) poll(NULL, 0, 1);
  }
  snprintf(a->where, sizeof(a->where), "init");
  a->res = bootstrapInit(&a->id, a->rank, a->nranks, &opts, &b);
  if (a->publish != NULL) a->publish[a->rank] = a->res == commSuccess ? b : NULL;
  if (a->afterInit != NULL) {
    pthread_barrier_wait(a->afterInit);
    pthread_barrier_wait(a->afterInit);
  }
  if (a->res != commSuccess) goto out;
  for (int i = 0; i < SLOT; i++) buf[a->rank * SLOT + i] = (unsigned char)(a->rank * 7 + i);
  snprintf(a->where, sizeof(a->where), "allgather");
  a->res = bootstrapAllGather(b, buf, SLOT);
  for (int r = 0; r < a->nranks && a->res == commSuccess; r++) {
    for (int i = 0; i < SLOT; i++) {
      if (buf[r * SLOT + i] != (unsigned char)(r * 7 + i)) a->res = commInternalError;
    }
  }
  if (a->res == commSuccess) {
    snprintf(a->where, sizeof(a->where), "barrier");
    a->res = bootstrapBarrier(b);
  }
out:
  if (a->res != commSuccess) snprintf(a->lastWarn, sizeof(a->lastWarn), "%s", commLogLastWarn());
  if (b != NULL) bootstrapClose(b);
  return NULL;
}

static void prepare(rankArgs* args, int n, const commUniqueId* id) {
  memset(args, 0, sizeof(rankArgs) * (size_t)n);
  for (int r = 0; r < n; r++) {
    args[r].id = *id;
    args[r].rank = r;
    args[r].nranks = n;
    args[r].timeoutMs = 20000;
  }
}

static void startRanks(rankArgs* args, int n, pthread_t* th) {
  for (int r = 0; r < n; r++) assert_int_equal(pthread_create(&th[r], NULL, rankMain, &args[r]), 0);
}

static void joinRanks(rankArgs* args, int n, pthread_t* th) {
  for (int r = 0; r < n; r++) assert_int_equal(pthread_join(th[r], NULL), 0);
  for (int r = 0; r < n; r++) {
    if (args[r].res != commSuccess) {
      print_error("rank %d failed at %s: %d (%s)\n", r, args[r].where, (int)args[r].res, args[r].lastWarn);
    }
    assert_int_equal(args[r].res, commSuccess);
  }
}

static void runRanks(rankArgs* args, int n) {
  pthread_t th[NRANKS];
  startRanks(args, n, th);
  joinRanks(args, n, th);
}

static double msSince(int64_t t0) { return (double)(commTimeNs() - t0) / 1e6; }

/* Every log line of this program goes to a file (set before the first line, so that the log is never
 * re-initialised while threads log); a test counts the WARN lines written while it ran. */
static char logPath[128];
static long captureFrom;

static int countWarns(long from, const char* with, int* all, long* lines) {
  FILE* f = fopen(logPath, "r");
  assert_non_null(f);
  char line[2048];
  long no = 0;
  int n = 0, total = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    if (no++ < from) continue;
    fprintf(stderr, "%s", line);
    if (strstr(line, " COMM WARN ") == NULL) continue;
    total++;
    if (with == NULL || strstr(line, with) != NULL) n++;
  }
  fclose(f);
  if (all != NULL) *all = total;
  if (lines != NULL) *lines = no;
  return n;
}

static void captureLog(void) { (void)countWarns(captureFrom, NULL, NULL, &captureFrom); }

/* The number of WARN lines since captureLog that contain `with`; *all: every WARN line. */
static int endCapture(const char* with, int* all) {
  long lines = 0;
  int n = countWarns(captureFrom, with, all, &lines);
  captureFrom = lines;
  return n;
}

/* ---------------------------------------------------------------------------------------------------- */

/* SipHash-2-4 written out block by block from the paper, to check the streaming version against. */
static uint64_t rl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }
#define SIPROUND                                          \
  do {                                                    \
    v0 += v1, v1 = rl(v1, 13), v1 ^= v0, v0 = rl(v0, 32); \
    v2 += v3, v3 = rl(v3, 16), v3 ^= v2;                  \
    v0 += v3, v3 = rl(v3, 21), v3 ^= v0;                  \
    v2 += v1, v1 = rl(v1, 17), v1 ^= v2, v2 = rl(v2, 32); \
  } while (0)
static uint64_t bootSip24Ref(const uint64_t key[2], const uint8_t* m, size_t n) {
  uint64_t v0 = key[0] ^ 0x736f6d6570736575ull, v1 = key[1] ^ 0x646f72616e646f6dull;
  uint64_t v2 = key[0] ^ 0x6c7967656e657261ull, v3 = key[1] ^ 0x7465646279746573ull;
  size_t full = n / 8 * 8;
  for (size_t i = 0; i < full; i += 8) {
    uint64_t w = 0;
    for (int j = 0; j < 8; j++) w |= (uint64_t)m[i + j] << (8 * j);
    v3 ^= w;
    SIPROUND;
    SIPROUND;
    v0 ^= w;
  }
  uint64_t last = (uint64_t)(n & 0xff) << 56;
  for (size_t j = 0; j < n - full; j++) last |= (uint64_t)m[full + j] << (8 * j);
  v3 ^= last;
  SIPROUND;
  SIPROUND;
  v0 ^= last;
  v2 ^= 0xff;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}

/* The vectors of the SipHash paper (Appendix A, and the first entries of its table of 64 outputs). */
static void test_siphash_vectors(void** state) {
  (void)state;
  uint8_t kb[16], msg[64];
  for (int i = 0; i < 16; i++) kb[i] = (uint8_t)i;
  for (int i = 0; i < 64; i++) msg[i] = (uint8_t)i;
  uint64_t key[2];
  memcpy(&key[0], kb, 8);
  memcpy(&key[1], kb + 8, 8);
  assert_true(bootSipHash24(key, msg, 15) == 0xa129ca6149be45e5ull);
  assert_true(bootSipHash24(key, msg, 0) == 0x726fdb47dd0e0e31ull);
  assert_true(bootSipHash24(key, msg, 1) == 0x74f839c593dc67fdull);
  assert_true(bootSipHash24(key, msg, 8) == 0x93f5f5799a932462ull);
  /* Streaming in odd pieces gives the one-shot result. */
  for (size_t n = 0; n <= 64; n++) {
    bootSipHash h;
    bootSipInit(&h, key);
    for (size_t o = 0; o < n;) {
      size_t k = (o % 3) + 1 < n - o ? (o % 3) + 1 : n - o;
      bootSipUpdate(&h, msg + o, k);
      o += k;
    }
    assert_true(bootSipFinal(&h) == bootSip24Ref(key, msg, n));
  }
}

/* A hello with the wrong key is refused at once; it takes no slot and the job goes on. */
static void test_forged_hello_refused(void** state) {
  (void)state;
  commUniqueId id;
  commBootstrapId bid;
  rankArgs args[NRANKS];
  assert_int_equal(bootstrapGetUniqueId(&id), commSuccess);
  memcpy(&bid, id.internal, sizeof(bid));
  uint64_t wrong[2] = {bid.secret[0] + 1, bid.secret[1]};
  for (int r = 0; r < NRANKS; r++) {
    int64_t t0 = commTimeNs();
    int fd = tbRawConnect(&bid.root);
    assert_int_equal(tbHandshake(fd, wrong, BOOT_TYPE_HELLO, r, NRANKS, 0), BOOT_PROOF_REFUSED);
    tbAssertClosedByPeer(fd);
    assert_true(msSince(t0) < 5000);
  }
  prepare(args, NRANKS, &id);
  runRanks(args, NRANKS);
}

/* COMM_ROOT ids: the key comes from COMM_ROOT_SECRET; one made the old way (a hash of the address) is turned
 * away at once; without the secret the key is the public one, the same whatever the address. */
static void test_address_key_refused(void** state) {
  (void)state;
  char hostport[64];
  commUniqueId id, forged, p1, p2;
  commBootstrapId bid, fb, b1, b2;
  snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", tbFreeRootPort());
  setenv("COMM_ROOT_SECRET", "test-secret-3f9a", 1);
  assert_int_equal(bootstrapIdFromRootAddr(hostport, &id, 1), commSuccess);
  unsetenv("COMM_ROOT_SECRET");
  memcpy(&bid, id.internal, sizeof(bid));
  /* The forger knows the address and how ids were made before. */
  fb = bid;
  uint64_t old = commHashString(hostport, 0x636f6d6d726f6f74ull);
  fb.secret[0] = old;
  fb.secret[1] = 0;
  assert_true(memcmp(fb.secret, bid.secret, sizeof(bid.secret)) != 0);
  memset(&forged, 0, sizeof(forged));
  memcpy(forged.internal, &fb, sizeof(fb));
  commBootstrap* b = NULL;
  commBootstrapOpts opts = {.timeoutMs = 10000, .abortFlag = NULL};
  int64_t t0 = commTimeNs();
  commLogClearLastWarn();
  assert_int_equal(bootstrapInit(&forged, 1, NRANKS, &opts, &b), commInvalidUsage);
  assert_true(msSince(t0) < 5000);
  assert_non_null(strstr(commLogLastWarn(), "refused this rank's key"));
  /* The public key (no secret) is refused as well: the job has a secret. */
  bootPublicKey(fb.secret);
  memcpy(forged.internal, &fb, sizeof(fb));
  assert_int_equal(bootstrapInit(&forged, 1, NRANKS, &opts, &b), commInvalidUsage);

  rankArgs args[NRANKS];
  prepare(args, NRANKS, &id);
  runRanks(args, NRANKS);

  /* Without COMM_ROOT_SECRET: the public key, not a function of the address. */
  assert_int_equal(bootstrapIdFromRootAddr("127.0.0.1:1111", &p1, 0), commSuccess);
  assert_int_equal(bootstrapIdFromRootAddr("127.0.0.2:2222", &p2, 0), commSuccess);
  memcpy(&b1, p1.internal, sizeof(b1));
  memcpy(&b2, p2.internal, sizeof(b2));
  assert_memory_equal(b1.secret, b2.secret, sizeof(b1.secret));
  uint64_t pub[2];
  bootPublicKey(pub);
  assert_memory_equal(b1.secret, pub, sizeof(pub));
  assert_true(b1.secret[0] != commHashString("127.0.0.1:1111", 0x636f6d6d726f6f74ull));
}

/* 50 silent clients at the root and 50 at a rank's listener: init and allgather go on at full speed, and the
 * strangers cost one summary line per listener. */
static void test_silent_clients(void** state) {
  (void)state;
  enum { SILENT = 50 };
  commUniqueId id;
  commBootstrapId bid;
  rankArgs args[NRANKS];
  commBootstrap* bs[NRANKS] = {NULL};
  int rootFds[SILENT], rankFds[SILENT];
  pthread_t th[NRANKS];
  pthread_barrier_t bar;
  captureLog();
  assert_int_equal(bootstrapGetUniqueId(&id), commSuccess);
  memcpy(&bid, id.internal, sizeof(bid));
  for (int i = 0; i < SILENT; i++) rootFds[i] = tbRawConnect(&bid.root);
  int64_t t0 = commTimeNs();
  prepare(args, NRANKS, &id);
  assert_int_equal(pthread_barrier_init(&bar, NULL, NRANKS + 1), 0);
  for (int r = 0; r < NRANKS; r++) {
    args[r].afterInit = &bar;
    args[r].publish = bs;
  }
  startRanks(args, NRANKS, th);
  pthread_barrier_wait(&bar);
  double initMs = msSince(t0);
  assert_non_null(bs[1]);
  commSockAddr la;
  bootTestListenAddr(bs[1], &la);
  for (int i = 0; i < SILENT; i++) rankFds[i] = tbRawConnect(&la);
  int64_t t1 = commTimeNs();
  pthread_barrier_wait(&bar);
  joinRanks(args, NRANKS, th);
  double collMs = msSince(t1);
  assert_int_equal(pthread_barrier_destroy(&bar), 0);
  for (int i = 0; i < SILENT; i++) {
    close(rootFds[i]);
    close(rankFds[i]);
  }
  int all = 0;
  int summaries = endCapture("unauthenticated connections", &all);
  print_message("init %.0f ms, allgather+barrier %.0f ms, %d WARN lines\n", initMs, collMs, all);
  assert_true(initMs < 3000);
  assert_true(collMs < 3000);
  assert_true(all <= 2);
  assert_true(summaries >= 1);
}

typedef struct {
  commSockAddr root;
  int total;
  int count; /* connections made so far */
  int stop;
} floodArgs;

static void* floodMain(void* arg) {
  floodArgs* f = (floodArgs*)arg;
  unsigned char junk[200];
  memset(junk, 0xee, sizeof(junk));
  for (int i = 0; i < f->total && !__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE); i++) {
    int fd = -1, err = 0;
    if (commSocketConnectStart(&f->root, &fd, &err) == commSuccess) {
      struct pollfd p = {.fd = fd, .events = POLLOUT, .revents = 0};
      if (poll(&p, 1, 1000) == 1 && commSocketConnectResult(fd) == 0 && (i % 2) == 1) {
        (void)send(fd, junk, sizeof(junk), MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      close(fd);
    }
    __atomic_store_n(&f->count, i + 1, __ATOMIC_RELEASE);
  }
  return NULL;
}

/* 2000 connect+close and garbage connections at the root while 4 ranks arrive one after another. */
static void test_flood_root(void** state) {
  (void)state;
  commUniqueId id;
  commBootstrapId bid;
  rankArgs args[NRANKS];
  pthread_t th[NRANKS], ft;
  captureLog();
  assert_int_equal(bootstrapGetUniqueId(&id), commSuccess);
  memcpy(&bid, id.internal, sizeof(bid));
  floodArgs f = {.root = bid.root, .total = 2000, .count = 0, .stop = 0};
  prepare(args, NRANKS, &id);
  for (int r = 0; r < NRANKS; r++) {
    args[r].floodCount = &f.count;
    args[r].startAt = 100 + 400 * r;
  }
  assert_int_equal(pthread_create(&ft, NULL, floodMain, &f), 0);
  startRanks(args, NRANKS, th);
  for (int r = 0; r < NRANKS; r++) assert_int_equal(pthread_join(th[r], NULL), 0);
  __atomic_store_n(&f.stop, 1, __ATOMIC_RELEASE);
  assert_int_equal(pthread_join(ft, NULL), 0);
  int all = 0;
  int summaries = endCapture("unauthenticated connections", &all);
  print_message("flood: %d connections, %d WARN lines (%d summaries)\n", f.count, all, summaries);
  for (int r = 0; r < NRANKS; r++) {
    if (args[r].res != commSuccess) print_error("rank %d: %s: %s\n", r, args[r].where, args[r].lastWarn);
    assert_int_equal(args[r].res, commSuccess);
  }
  assert_true(f.count >= 1300); /* the last rank arrived during the flood */
  assert_true(all <= 3);
}

/* ---------------------------------------------------------------------------------------------------- */
/* The key never on the wire */

typedef struct {
  int listenFd;
  unsigned char rec[4096];
  size_t n;
} fakeListener;

/* Accepts one connection, challenges it, records what the client sends, answers with a made-up proof. */
static void fakeServe(fakeListener* f) {
  int fd = -1;
  assert_int_equal(commSocketAccept(f->listenFd, &fd, commDeadlineNs(5000), NULL), commSuccess);
  bootChallenge ch = {.magic = BOOT_CHAL_MAGIC};
  memset(ch.nonce, 0x17, sizeof(ch.nonce));
  tbRawSend(fd, &ch, sizeof(ch));
  assert_int_equal(commSocketRecvAll(fd, f->rec, sizeof(bootAuthMsg), commDeadlineNs(5000), NULL), commSuccess);
  f->n = sizeof(bootAuthMsg);
  bootProof p = {.magic = BOOT_PROOF_MAGIC, .status = BOOT_PROOF_OK, .progress = 0, .mac = 0x1234567890abcdefull};
  tbRawSend(fd, &p, sizeof(p));
  /* Whatever else comes before the client hangs up. */
  for (;;) {
    struct pollfd q = {.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&q, 1, 5000) != 1) break;
    ssize_t r = recv(fd, f->rec + f->n, sizeof(f->rec) - f->n, 0);
    if (r <= 0) break;
    f->n += (size_t)r;
  }
  close(fd);
}

static int containsBytes(const unsigned char* hay, size_t n, const void* needle, size_t k) {
  for (size_t i = 0; i + k <= n; i++) {
    if (memcmp(hay + i, needle, k) == 0) return 1;
  }
  return 0;
}

static void assertNoKey(const fakeListener* f, const uint64_t key[2]) {
  assert_true(f->n >= sizeof(bootAuthMsg));
  assert_false(containsBytes(f->rec, f->n, &key[0], sizeof(key[0])));
  assert_false(containsBytes(f->rec, f->n, &key[1], sizeof(key[1])));
}

typedef struct {
  commUniqueId id;
  commResult_t res;
  char lastWarn[512];
} initArgs;

static void* initAlone(void* arg) {
  initArgs* a = (initArgs*)arg;
  commBootstrap* b = NULL;
  commBootstrapOpts opts = {.timeoutMs = 5000, .abortFlag = NULL};
  a->res = bootstrapInit(&a->id, 0, 2, &opts, &b);
  snprintf(a->lastWarn, sizeof(a->lastWarn), "%s", commLogLastWarn());
  if (b != NULL) bootstrapClose(b);
  return NULL;
}

typedef struct {
  commBootstrap* b;
  const char* payload;
  commResult_t res;
  char lastWarn[512];
} sendArgs;

static void* sendToFake(void* arg) {
  sendArgs* a = (sendArgs*)arg;
  a->res = bootstrapSend(a->b, 1, 3, a->payload, strlen(a->payload));
  snprintf(a->lastWarn, sizeof(a->lastWarn), "%s", commLogLastWarn());
  return NULL;
}

static void test_key_not_on_wire(void** state) {
  (void)state;
  fakeListener f;
  memset(&f, 0, sizeof(f));
  commSockAddr fa;
  assert_int_equal(commSocketParseAddr("127.0.0.1:0", &fa), commSuccess);
  assert_int_equal(commSocketListen(&fa, &f.listenFd), commSuccess);

  /* A rank pointed at a fake root: it tells, and nothing it sends holds the key. */
  initArgs ia;
  memset(&ia, 0, sizeof(ia));
  commBootstrapId bid;
  memset(&bid, 0, sizeof(bid));
  bid.magic = COMM_BOOTSTRAP_MAGIC;
  assert_int_equal(bootRandomBytes(bid.secret, sizeof(bid.secret)), commSuccess);
  bid.root = fa;
  memcpy(ia.id.internal, &bid, sizeof(bid));
  pthread_t th;
  int64_t t0 = commTimeNs();
  assert_int_equal(pthread_create(&th, NULL, initAlone, &ia), 0);
  fakeServe(&f);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(ia.res, commRemoteError);
  assert_true(msSince(t0) < 4000);
  assert_non_null(strstr(ia.lastWarn, "not this job's bootstrap root"));
  assertNoKey(&f, bid.secret);

  /* A send to a fake in place of rank 1: neither the key nor the payload leaves. */
  commUniqueId id;
  commBootstrapId real;
  rankArgs args[2];
  commBootstrap* bs[2] = {NULL, NULL};
  pthread_barrier_t bar;
  pthread_t rt[2];
  assert_int_equal(bootstrapGetUniqueId(&id), commSuccess);
  memcpy(&real, id.internal, sizeof(real));
  prepare(args, 2, &id);
  assert_int_equal(pthread_barrier_init(&bar, NULL, 3), 0);
  for (int r = 0; r < 2; r++) {
    args[r].afterInit = &bar;
    args[r].publish = bs;
  }
  startRanks(args, 2, rt);
  pthread_barrier_wait(&bar);
  assert_non_null(bs[0]);
  commSockAddr saved;
  bootTestSetPeerAddr(bs[0], 1, &fa);
  sendArgs sa = {.b = bs[0], .payload = "PAYLOAD-NOT-FOR-STRANGERS", .res = commSuccess};
  memset(f.rec, 0, sizeof(f.rec));
  f.n = 0;
  assert_int_equal(pthread_create(&th, NULL, sendToFake, &sa), 0);
  fakeServe(&f);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(sa.res, commRemoteError);
  assert_non_null(strstr(sa.lastWarn, "could not prove it holds the job's key"));
  assertNoKey(&f, real.secret);
  assert_false(containsBytes(f.rec, f.n, sa.payload, strlen(sa.payload)));
  /* Rank 1 again: the job goes on. */
  bootTestListenAddr(bs[1], &saved);
  bootTestSetPeerAddr(bs[0], 1, &saved);
  pthread_barrier_wait(&bar);
  joinRanks(args, 2, rt);
  assert_int_equal(pthread_barrier_destroy(&bar), 0);
  close(f.listenFd);
}

static int setup(void** state) {
  (void)state;
  setenv("COMM_SOCKET_IFNAME", "lo", 1);
  snprintf(logPath, sizeof(logPath), "/tmp/test_bootstrap_auth.%d.log", (int)getpid());
  unlink(logPath);
  setenv("COMM_DEBUG", "WARN", 1);
  setenv("COMM_DEBUG_FILE", logPath, 1);
  return 0;
}

static int teardown(void** state) {
  (void)state;
  (void)countWarns(captureFrom, NULL, NULL, NULL); /* the rest of the log, for whoever reads the output */
  unlink(logPath);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_siphash_vectors),     cmocka_unit_test(test_forged_hello_refused),
      cmocka_unit_test(test_address_key_refused), cmocka_unit_test(test_silent_clients),
      cmocka_unit_test(test_flood_root),          cmocka_unit_test(test_key_not_on_wire),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
