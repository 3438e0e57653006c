/* Bootstrap and socket helpers: rendezvous, allgather, barrier, tagged send/recv, strangers and garbage,
 * timeouts, abort, COMM_ROOT-style ids. Ranks run as threads of this process, over loopback. */
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
#include "debug.h"
#include "socket.h"
#include "utils.h"
#include "test_bootstrap_util.h"

#define MAX_RANKS 8
#define SMALL_BYTES 24
#define BIG_BYTES 40000 /* larger than the eager size: exercises the odd/even ordering of the ring */

typedef struct {
  commUniqueId id;
  const char* rootAddr; /* COMM_ROOT-style: derive the id in the thread */
  int isRoot;
  int rank;
  int nranks;
  int64_t timeoutMs;
  const int* abortFlag;
  pthread_barrier_t* afterInit; /* the main thread meddles between init and the first exchange */
  /* results */
  commResult_t res;
  char where[64];
  char lastWarn[512];
  int64_t elapsedMs;
} rankArgs;

#define TCHECK(call, what)                              \
  do {                                                  \
    commResult_t r_ = (call);                           \
    if (r_ != commSuccess) {                            \
      a->res = r_;                                      \
      snprintf(a->where, sizeof(a->where), "%s", what); \
      goto out;                                         \
    }                                                   \
  } while (0)

#define TEXPECT(cond, what)                             \
  do {                                                  \
    if (!(cond)) {                                      \
      a->res = commInternalError;                       \
      snprintf(a->where, sizeof(a->where), "%s", what); \
      goto out;                                         \
    }                                                   \
  } while (0)

static unsigned char pattern(int rank, size_t i, int round) { return (unsigned char)(rank * 31 + i * 7 + round); }

static commResult_t checkedAllGather(commBootstrap* b, int rank, int nranks, size_t bytes, int round, int* ok) {
  unsigned char* buf = calloc((size_t)nranks, bytes);
  if (buf == NULL) return commSystemError;
  for (size_t i = 0; i < bytes; i++) buf[(size_t)rank * bytes + i] = pattern(rank, i, round);
  commResult_t res = bootstrapAllGather(b, buf, bytes);
  *ok = 1;
  for (int r = 0; r < nranks && res == commSuccess; r++) {
    for (size_t i = 0; i < bytes; i++) {
      if (buf[(size_t)r * bytes + i] != pattern(r, i, round)) *ok = 0;
    }
  }
  free(buf);
  return res;
}

/* Everything a rank does in the functional tests. */
static void* fullRank(void* arg) {
  rankArgs* a = (rankArgs*)arg;
  commBootstrap* b = NULL;
  commBootstrapOpts opts = {.timeoutMs = a->timeoutMs, .abortFlag = a->abortFlag};
  int ok = 0;
  a->res = commSuccess;
  if (a->rootAddr != NULL) TCHECK(bootstrapIdFromRootAddr(a->rootAddr, &a->id, a->isRoot), "id from root addr");
  TCHECK(bootstrapInit(&a->id, a->rank, a->nranks, &opts, &b), "init");
  if (a->afterInit != NULL) {
    pthread_barrier_wait(a->afterInit); /* initialised */
    pthread_barrier_wait(a->afterInit); /* the main thread has queued its strangers at our listener */
  }
  TCHECK(checkedAllGather(b, a->rank, a->nranks, SMALL_BYTES, 1, &ok), "allgather small");
  TEXPECT(ok, "allgather small contents");
  TCHECK(bootstrapBarrier(b), "barrier 1");
  TCHECK(checkedAllGather(b, a->rank, a->nranks, BIG_BYTES, 2, &ok), "allgather big");
  TEXPECT(ok, "allgather big contents");
  TCHECK(checkedAllGather(b, a->rank, a->nranks, 1, 3, &ok), "allgather 1 byte");
  TEXPECT(ok, "allgather 1 byte contents");
  {
    int next = (a->rank + 1) % a->nranks, prev = (a->rank + a->nranks - 1) % a->nranks;
    int out2[2] = {a->rank, 2}, out1[2] = {a->rank, 1}, in[2] = {-1, -1};
    TCHECK(bootstrapSend(b, next, 2, out2, sizeof(out2)), "send tag 2");
    TCHECK(bootstrapSend(b, next, 1, out1, sizeof(out1)), "send tag 1");
    TCHECK(bootstrapRecv(b, prev, 1, in, sizeof(in)), "recv tag 1");
    TEXPECT(in[0] == prev && in[1] == 1, "recv tag 1 contents");
    TCHECK(bootstrapRecv(b, prev, 2, in, sizeof(in)), "recv tag 2");
    TEXPECT(in[0] == prev && in[1] == 2, "recv tag 2 contents");
    /* Same tag twice: delivered in the order sent. */
    int s1 = 100 + a->rank, s2 = 200 + a->rank, r1 = 0, r2 = 0;
    TCHECK(bootstrapSend(b, next, 7, &s1, sizeof(s1)), "send tag 7 first");
    TCHECK(bootstrapSend(b, next, 7, &s2, sizeof(s2)), "send tag 7 second");
    TCHECK(bootstrapRecv(b, prev, 7, &r1, sizeof(r1)), "recv tag 7 first");
    TCHECK(bootstrapRecv(b, prev, 7, &r2, sizeof(r2)), "recv tag 7 second");
    TEXPECT(r1 == 100 + prev && r2 == 200 + prev, "tag 7 order");
  }
  TCHECK(bootstrapBarrier(b), "barrier 2");
out:
  if (a->res != commSuccess) snprintf(a->lastWarn, sizeof(a->lastWarn), "%s", commLogLastWarn());
  if (b != NULL) bootstrapClose(b);
  return NULL;
}

static void runRanks(rankArgs* args, int n, void* (*fn)(void*)) {
  pthread_t th[MAX_RANKS];
  for (int r = 0; r < n; r++) assert_int_equal(pthread_create(&th[r], NULL, fn, &args[r]), 0);
  for (int r = 0; r < n; r++) assert_int_equal(pthread_join(th[r], NULL), 0);
}

static void assertAllOk(rankArgs* args, int n) {
  for (int r = 0; r < n; r++) {
    if (args[r].res != commSuccess) {
      print_error("rank %d failed at %s: %d (%s)\n", r, args[r].where, (int)args[r].res, args[r].lastWarn);
    }
    assert_int_equal(args[r].res, commSuccess);
  }
}

static void prepare(rankArgs* args, int n, const commUniqueId* id, int64_t timeoutMs) {
  memset(args, 0, sizeof(rankArgs) * (size_t)n);
  for (int r = 0; r < n; r++) {
    if (id != NULL) args[r].id = *id;
    args[r].rank = r;
    args[r].nranks = n;
    args[r].timeoutMs = timeoutMs;
  }
}

static void runFunctional(int n) {
  commUniqueId id;
  rankArgs args[MAX_RANKS];
  assert_int_equal(bootstrapGetUniqueId(&id), commSuccess);
  prepare(args, n, &id, 20000);
  runRanks(args, n, fullRank);
  assertAllOk(args, n);
}

static void test_ranks1(void** state) {
  (void)state;
  runFunctional(1);
}
static void test_ranks2(void** state) {
  (void)state;
  runFunctional(2);
}
static void test_ranks3(void** state) {
  (void)state;
  runFunctional(3);
}
static void test_ranks8(void** state) {
  (void)state;
  runFunctional(8);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Strangers */

#define rawConnect tbRawConnect
#define rawSend tbRawSend
#define assertClosedByPeer tbAssertClosedByPeer


/* Ports of the listening TCP sockets of this process. */
static int listeningPorts(int* ports, int max) {
  int n = 0;
  for (int fd = 0; fd < 4096 && n < max; fd++) {
    int acc = 0, dom = 0;
    socklen_t len = sizeof(acc);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) != 0 || !acc) continue;
    len = sizeof(dom);
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &len) != 0 || dom != AF_INET) continue;
    struct sockaddr_in sin;
    len = sizeof(sin);
    if (getsockname(fd, (struct sockaddr*)&sin, &len) != 0) continue;
    ports[n++] = ntohs(sin.sin_port);
  }
  return n;
}

static int contains(const int* v, int n, int x) {
  for (int i = 0; i < n; i++) {
    if (v[i] == x) return 1;
  }
  return 0;
}

static void test_strangers_dropped(void** state) {
  (void)state;
  const int n = 3;
  commUniqueId id;
  commBootstrapId bid;
  rankArgs args[MAX_RANKS];
  assert_int_equal(bootstrapGetUniqueId(&id), commSuccess);
  memcpy(&bid, id.internal, sizeof(bid));
  assert_true(bid.magic == COMM_BOOTSTRAP_MAGIC);
  int rootPort = ntohs(bid.root.sin.sin_port);

  /* At the root: a wrong secret, garbage, and a connection that says nothing at all. */
  uint64_t wrongKey[2] = {bid.secret[0] ^ 0x5a5a5a5aull, bid.secret[1]};
  int badSecret = rawConnect(&bid.root);
  assert_int_equal(tbHandshake(badSecret, wrongKey, BOOT_TYPE_HELLO, 0, n, 0), BOOT_PROOF_REFUSED);
  int garbage = rawConnect(&bid.root);
  unsigned char junk[96];
  memset(junk, 0xab, sizeof(junk));
  rawSend(garbage, junk, sizeof(junk));
  int silent = rawConnect(&bid.root);
  assertClosedByPeer(badSecret);
  assertClosedByPeer(garbage);

  int before[256];
  int nbefore = listeningPorts(before, 256);
  pthread_barrier_t bar;
  assert_int_equal(pthread_barrier_init(&bar, NULL, (unsigned)n + 1), 0);
  prepare(args, n, &id, 20000);
  pthread_t th[MAX_RANKS];
  for (int r = 0; r < n; r++) {
    args[r].afterInit = &bar;
    assert_int_equal(pthread_create(&th[r], NULL, fullRank, &args[r]), 0);
  }
  pthread_barrier_wait(&bar); /* every rank is initialised (or failed) */

  /* At every rank's listener: a header with the wrong secret, and garbage. */
  int after[256];
  int nafter = listeningPorts(after, 256);
  int bad[2 * MAX_RANKS];
  int nbad = 0, nlisteners = 0;
  for (int i = 0; i < nafter; i++) {
    if (contains(before, nbefore, after[i]) || after[i] == rootPort) continue;
    commSockAddr a;
    assert_int_equal(commSocketParseAddr("127.0.0.1:0", &a), commSuccess);
    a.sin.sin_port = htons((uint16_t)after[i]);
    bad[nbad] = rawConnect(&a);
    assert_int_equal(tbHandshake(bad[nbad++], wrongKey, BOOT_TYPE_MSG, 0, n, 0), BOOT_PROOF_REFUSED);
    bad[nbad] = rawConnect(&a);
    rawSend(bad[nbad++], junk, sizeof(junk));
    nlisteners++;
  }
  pthread_barrier_wait(&bar);
  for (int r = 0; r < n; r++) assert_int_equal(pthread_join(th[r], NULL), 0);
  assert_int_equal(pthread_barrier_destroy(&bar), 0);
  assertAllOk(args, n);
  assert_int_equal(nlisteners, n);
  for (int i = 0; i < nbad; i++) assertClosedByPeer(bad[i]);
  close(silent);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Timeouts and abort */

static void* initOnly(void* arg) {
  rankArgs* a = (rankArgs*)arg;
  commBootstrap* b = NULL;
  commBootstrapOpts opts = {.timeoutMs = a->timeoutMs, .abortFlag = a->abortFlag};
  int64_t t0 = commTimeNs();
  commLogClearLastWarn();
  a->res = bootstrapInit(&a->id, a->rank, a->nranks, &opts, &b);
  a->elapsedMs = (commTimeNs() - t0) / 1000000;
  snprintf(a->lastWarn, sizeof(a->lastWarn), "%s", commLogLastWarn());
  if (b != NULL) bootstrapClose(b);
  return NULL;
}

static void test_rendezvous_timeout(void** state) {
  (void)state;
  commUniqueId id;
  rankArgs args[MAX_RANKS];
  assert_int_equal(bootstrapGetUniqueId(&id), commSuccess);
  prepare(args, 3, &id, 500);
  runRanks(args, 2, initOnly); /* rank 2 never comes */
  for (int r = 0; r < 2; r++) {
    assert_int_equal(args[r].res, commTimeout);
    assert_true(args[r].elapsedMs >= 250);
    assert_true(args[r].elapsedMs <= 2000);
    assert_non_null(strstr(args[r].lastWarn, "root did not complete the rendezvous of 3 ranks within 500 ms"));
    assert_non_null(strstr(args[r].lastWarn, "missing ranks: 2"));
  }
}

typedef struct {
  commBootstrap* b;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started;
  commResult_t res;
  int64_t doneNs;
  char lastWarn[512];
} recvArgs;

static void* pendingRecv(void* arg) {
  recvArgs* a = (recvArgs*)arg;
  int v = 0;
  pthread_mutex_lock(&a->mu);
  a->started = 1;
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
  a->res = bootstrapRecv(a->b, 0, 42, &v, sizeof(v));
  a->doneNs = commTimeNs();
  snprintf(a->lastWarn, sizeof(a->lastWarn), "%s", commLogLastWarn());
  return NULL;
}

static void test_abort_recv(void** state) {
  (void)state;
  int abortFlag = 0;
  commUniqueId id;
  commBootstrap* b = NULL;
  commBootstrapOpts opts = {.timeoutMs = 10000, .abortFlag = &abortFlag};
  assert_int_equal(bootstrapGetUniqueId(&id), commSuccess);
  assert_int_equal(bootstrapInit(&id, 0, 1, &opts, &b), commSuccess);
  bootstrapSetTimeout(b, -1); /* only the abort can end the wait */
  recvArgs a = {.b = b, .started = 0, .res = commSuccess};
  pthread_mutex_init(&a.mu, NULL);
  pthread_cond_init(&a.cv, NULL);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, pendingRecv, &a), 0);
  pthread_mutex_lock(&a.mu);
  while (!a.started) pthread_cond_wait(&a.cv, &a.mu);
  pthread_mutex_unlock(&a.mu);
  int64_t t0 = commTimeNs();
  __atomic_store_n(&abortFlag, 1, __ATOMIC_RELEASE);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(a.res, commInternalError);
  assert_true((a.doneNs - t0) / 1000000 < 1000);
  assert_non_null(strstr(a.lastWarn, "aborted"));
  pthread_mutex_destroy(&a.mu);
  pthread_cond_destroy(&a.cv);
  assert_int_equal(bootstrapClose(b), commSuccess);
}

static void test_abort_init(void** state) {
  (void)state;
  int abortFlag = 0;
  commUniqueId id;
  rankArgs args[MAX_RANKS];
  assert_int_equal(bootstrapGetUniqueId(&id), commSuccess);
  prepare(args, 2, &id, -1);
  args[0].abortFlag = &abortFlag;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, initOnly, &args[0]), 0);
  __atomic_store_n(&abortFlag, 1, __ATOMIC_RELEASE);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(args[0].res, commInternalError);
  assert_true(args[0].elapsedMs < 1000);
  assert_non_null(strstr(args[0].lastWarn, "aborted"));
}

/* ---------------------------------------------------------------------------------------------------- */
/* COMM_ROOT-style ids */

static int freePort(void) {
  commSockAddr a;
  int fd = -1;
  assert_int_equal(commSocketParseAddr("127.0.0.1:0", &a), commSuccess);
  assert_int_equal(commSocketListen(&a, &fd), commSuccess);
  int port = ntohs(a.sin.sin_port);
  close(fd);
  return port;
}

static void runRootAddr(const char* fmt) {
  const int n = 3;
  char hostport[64];
  rankArgs args[MAX_RANKS];
  snprintf(hostport, sizeof(hostport), fmt, tbFreeRootPort());
  prepare(args, n, NULL, 20000);
  pthread_t th[MAX_RANKS];
  /* Ranks that start before the root retry their connection until it listens. */
  for (int r = n - 1; r >= 0; r--) {
    args[r].rootAddr = hostport;
    args[r].isRoot = r == 0;
    assert_int_equal(pthread_create(&th[r], NULL, fullRank, &args[r]), 0);
  }
  for (int r = 0; r < n; r++) assert_int_equal(pthread_join(th[r], NULL), 0);
  assertAllOk(args, n);
  for (int r = 1; r < n; r++) assert_memory_equal(&args[r].id, &args[0].id, sizeof(commUniqueId));
  commUniqueId other;
  setenv("COMM_ROOT_SECRET", "s3cret", 1);
  assert_int_equal(bootstrapIdFromRootAddr(hostport, &other, 0), commSuccess);
  unsetenv("COMM_ROOT_SECRET");
  commBootstrapId b0, b1;
  memcpy(&b0, args[0].id.internal, sizeof(b0));
  memcpy(&b1, other.internal, sizeof(b1));
  assert_true(memcmp(b0.secret, b1.secret, sizeof(b0.secret)) != 0);
  assert_true(b0.magic == COMM_BOOTSTRAP_MAGIC && b1.magic == COMM_BOOTSTRAP_MAGIC);
}

static void test_root_addr(void** state) {
  (void)state;
  runRootAddr("127.0.0.1:%d");
}

/* The root on IPv6 loopback (the ranks' own listeners stay on IPv4 "lo"). */
static void test_root_addr_v6(void** state) {
  (void)state;
  if (access("/proc/net/if_inet6", R_OK) != 0) skip();
  runRootAddr("[::1]:%d");
}

/* ---------------------------------------------------------------------------------------------------- */
/* Argument errors */

static void test_errors(void** state) {
  (void)state;
  commUniqueId id;
  commBootstrap* b = NULL;
  commBootstrapOpts opts = {.timeoutMs = 5000, .abortFlag = NULL};
  memset(&id, 0, sizeof(id));
  assert_int_equal(bootstrapInit(&id, 0, 1, &opts, &b), commInvalidArgument);
  assert_int_equal(bootstrapGetUniqueId(&id), commSuccess);
  assert_int_equal(bootstrapInit(&id, 1, 1, &opts, &b), commInvalidArgument);
  assert_int_equal(bootstrapInit(&id, 0, 1, &opts, &b), commSuccess);
  uint64_t v = 7;
  uint32_t small = 0;
  assert_int_equal(bootstrapSend(b, 1, 0, &v, sizeof(v)), commInvalidArgument);
  assert_int_equal(bootstrapSend(b, 0, -1, &v, sizeof(v)), commInvalidArgument);
  assert_int_equal(bootstrapSend(b, 0, 3, &v, sizeof(v)), commSuccess);
  assert_int_equal(bootstrapRecv(b, 0, 3, &small, sizeof(small)), commInternalError);
  /* The mismatched message is consumed; a message to ourselves of the right size works. */
  assert_int_equal(bootstrapSend(b, 0, 3, &v, sizeof(v)), commSuccess);
  uint64_t w = 0;
  assert_int_equal(bootstrapRecv(b, 0, 3, &w, sizeof(w)), commSuccess);
  assert_true(w == 7);
  /* Nothing arrives: a short timeout. */
  bootstrapSetTimeout(b, 200);
  int64_t t0 = commTimeNs();
  assert_int_equal(bootstrapRecv(b, 0, 9, &w, sizeof(w)), commTimeout);
  int64_t ms = (commTimeNs() - t0) / 1000000;
  assert_true(ms >= 150 && ms < 2000);
  assert_int_equal(bootstrapClose(b), commSuccess);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Socket helpers */

static void test_socket_addrs(void** state) {
  (void)state;
  char buf[128];
  commSockAddr a;
  assert_int_equal(commSocketParseAddr("127.0.0.1:1234", &a), commSuccess);
  assert_int_equal(a.sa.sa_family, AF_INET);
  assert_string_equal(commSocketAddrStr(&a, buf, sizeof(buf)), "127.0.0.1:1234");
  assert_int_equal(commSocketAddrLen(&a), (int)sizeof(struct sockaddr_in));
  assert_int_equal(commSocketParseAddr("[::1]:80", &a), commSuccess);
  assert_int_equal(a.sa.sa_family, AF_INET6);
  assert_string_equal(commSocketAddrStr(&a, buf, sizeof(buf)), "[::1]:80");
  assert_int_equal(commSocketAddrLen(&a), (int)sizeof(struct sockaddr_in6));
  assert_int_equal(commSocketParseAddr("localhost:5", &a), commSuccess);
  assert_int_equal(commSocketParseAddr("127.0.0.1", &a), commInvalidArgument);
  assert_int_equal(commSocketParseAddr("127.0.0.1:70000", &a), commInvalidArgument);
  assert_int_equal(commSocketParseAddr("127.0.0.1:x", &a), commInvalidArgument);
  assert_int_equal(commSocketParseAddr("[::1:80", &a), commInvalidArgument);

  char ifName[COMM_IFNAME_MAX];
  assert_int_equal(commSocketFindInterface(ifName, &a), commSuccess);
  assert_string_equal(ifName, "lo");
  assert_int_equal(a.sa.sa_family, AF_INET);
  setenv("COMM_SOCKET_IFNAME", "=lo", 1);
  assert_int_equal(commSocketFindInterface(ifName, &a), commSuccess);
  assert_string_equal(ifName, "lo");
  setenv("COMM_SOCKET_IFNAME", "=l", 1);
  assert_int_equal(commSocketFindInterface(ifName, &a), commSystemError);
  setenv("COMM_SOCKET_IFNAME", "nosuchif0,nosuchif1", 1);
  assert_int_equal(commSocketFindInterface(ifName, &a), commSystemError);
  setenv("COMM_SOCKET_IFNAME", "^lo", 1);
  commResult_t r = commSocketFindInterface(ifName, &a);
  assert_true(r == commSystemError || (r == commSuccess && strcmp(ifName, "lo") != 0));
  unsetenv("COMM_SOCKET_IFNAME");
  r = commSocketFindInterface(ifName, &a);
  assert_int_equal(r, commSuccess);
  setenv("COMM_SOCKET_IFNAME", "lo", 1);
}

static void test_socket_io(void** state) {
  (void)state;
  int abortFlag = 0;
  int sv[2];
  char buf[16];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  /* Nothing to read: timeout, then abort. */
  assert_int_equal(commSocketRecvAll(sv[0], buf, 4, commDeadlineNs(50), NULL), commTimeout);
  abortFlag = 1;
  assert_int_equal(commSocketRecvAll(sv[0], buf, 4, COMM_NO_DEADLINE, &abortFlag), commInternalError);
  abortFlag = 0;
  assert_int_equal(commSocketSendAll(sv[1], "abcd", 4, commDeadlineNs(1000), &abortFlag), commSuccess);
  assert_int_equal(commSocketRecvAll(sv[0], buf, 4, commDeadlineNs(1000), &abortFlag), commSuccess);
  assert_memory_equal(buf, "abcd", 4);
  /* Non-blocking progress moves what it can. */
  size_t off = 0;
  assert_int_equal(commSocketSetNonBlocking(sv[0], 1), commSuccess);
  assert_int_equal(commSocketProgress(sv[0], 0, buf, 4, &off), commSuccess);
  assert_int_equal(off, 0);
  assert_int_equal(commSocketSendAll(sv[1], "xy", 2, commDeadlineNs(1000), NULL), commSuccess);
  assert_int_equal(commSocketProgress(sv[0], 0, buf, 4, &off), commSuccess);
  assert_int_equal(off, 2);
  /* EOF: remote error. */
  close(sv[1]);
  assert_int_equal(commSocketProgress(sv[0], 0, buf, 4, &off), commRemoteError);
  assert_int_equal(commSocketRecvAll(sv[0], buf, 4, commDeadlineNs(1000), NULL), commRemoteError);
  close(sv[0]);

  /* Connect to a port nobody listens on: retried until the deadline. */
  commSockAddr a;
  int fd = -1;
  assert_int_equal(commSocketParseAddr("127.0.0.1:0", &a), commSuccess);
  a.sin.sin_port = htons((uint16_t)freePort());
  int64_t t0 = commTimeNs();
  assert_int_equal(commSocketConnect(&a, &fd, commDeadlineNs(200), NULL), commTimeout);
  assert_true((commTimeNs() - t0) / 1000000 >= 150);
  /* Accept honours the deadline. */
  int lfd = -1;
  assert_int_equal(commSocketParseAddr("127.0.0.1:0", &a), commSuccess);
  assert_int_equal(commSocketListen(&a, &lfd), commSuccess);
  assert_true(a.sin.sin_port != 0);
  assert_int_equal(commSocketAccept(lfd, &fd, commDeadlineNs(50), NULL), commTimeout);
  int cfd = rawConnect(&a);
  assert_int_equal(commSocketAccept(lfd, &fd, commDeadlineNs(5000), NULL), commSuccess);
  close(fd);
  close(cfd);
  close(lfd);
}

static int setup(void** state) {
  (void)state;
  setenv("COMM_SOCKET_IFNAME", "lo", 1);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_socket_addrs),
      cmocka_unit_test(test_socket_io),
      cmocka_unit_test(test_ranks1),
      cmocka_unit_test(test_ranks2),
      cmocka_unit_test(test_ranks3),
      cmocka_unit_test(test_ranks8),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_strangers_dropped),
      cmocka_unit_test(test_rendezvous_timeout),
      cmocka_unit_test(test_root_addr),
      cmocka_unit_test(test_root_addr_v6),
      cmocka_unit_test(test_abort_recv),
      cmocka_unit_test(test_abort_init),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
