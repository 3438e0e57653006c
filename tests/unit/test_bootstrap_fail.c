/* The bootstrap when a peer fails: failure notices (bootstrapReportFailure, opts.onFailure, waits that end
 * with commRemoteError), probes of live, closed and stopped ranks, and sends to a rank that is gone. Ranks
 * run as threads of this process, over loopback; a "stopped" rank is a socket that listens and never serves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "bootstrap_internal.h"
#include "debug.h"
#include "socket.h"
#include "utils.h"
#include "test_bootstrap_util.h"

#define NRANKS 4

typedef struct {
  pthread_mutex_t mu;
  int calls;
  commBootstrapFailure first;
  uint64_t progress; /* the rank's "collective calls", which its listener tells probes */
} failureLog;

static void onFailure(void* arg, const commBootstrapFailure* f) {
  failureLog* l = (failureLog*)arg;
  pthread_mutex_lock(&l->mu);
  if (l->calls++ == 0) l->first = *f;
  pthread_mutex_unlock(&l->mu);
}

static int calls(failureLog* l) {
  pthread_mutex_lock(&l->mu);
  int c = l->calls;
  pthread_mutex_unlock(&l->mu);
  return c;
}

typedef struct {
  const commUniqueId* id;
  int rank;
  int nranks;
  failureLog* log;
  commBootstrap* b;
  commResult_t res;
} initArgs;

static void* initRank(void* arg) {
  initArgs* a = (initArgs*)arg;
  commBootstrapOpts opts = {.timeoutMs = 20000,
                            .abortFlag = NULL,
                            .onFailure = onFailure,
                            .failureArg = a->log,
                            .progress = &a->log->progress};
  a->res = bootstrapInit(a->id, a->rank, a->nranks, &opts, &a->b);
  return NULL;
}

/* Brings up n ranks (threads that only init) and hands back their bootstraps. */
static void initAll(int n, commBootstrap** bs, failureLog* logs) {
  commUniqueId id;
  initArgs args[NRANKS];
  pthread_t th[NRANKS];
  assert_int_equal(bootstrapGetUniqueId(&id), commSuccess);
  for (int r = 0; r < n; r++) {
    memset(&logs[r], 0, sizeof(logs[r]));
    pthread_mutex_init(&logs[r].mu, NULL);
    args[r] = (initArgs){.id = &id, .rank = r, .nranks = n, .log = &logs[r], .b = NULL, .res = commSuccess};
    assert_int_equal(pthread_create(&th[r], NULL, initRank, &args[r]), 0);
  }
  for (int r = 0; r < n; r++) {
    assert_int_equal(pthread_join(th[r], NULL), 0);
    assert_int_equal(args[r].res, commSuccess);
    bs[r] = args[r].b;
  }
}

static void closeAll(int n, commBootstrap** bs, failureLog* logs) {
  for (int r = 0; r < n; r++) {
    if (bs[r] != NULL) assert_int_equal(bootstrapClose(bs[r]), commSuccess);
    pthread_mutex_destroy(&logs[r].mu);
  }
}

static double msSince(int64_t t0) { return (double)(commTimeNs() - t0) / 1e6; }

typedef struct {
  commBootstrap* b;
  int peer;
  commResult_t res;
  int64_t doneNs;
  char lastWarn[512];
} recvArgs;

static void* recvFrom(void* arg) {
  recvArgs* a = (recvArgs*)arg;
  int v = 0;
  a->res = bootstrapRecv(a->b, a->peer, 5, &v, sizeof(v));
  a->doneNs = commTimeNs();
  snprintf(a->lastWarn, sizeof(a->lastWarn), "%s", commLogLastWarn());
  return NULL;
}

/* Rank 2 reports that rank 3 failed while ranks 0 and 1 wait for rank 3: both waits end at once with
 * commRemoteError, each rank's onFailure runs once with culprit 3 and reporter 2; rank 3 (alive) is told too. */
static void test_failure_report(void** state) {
  (void)state;
  commBootstrap* bs[NRANKS];
  failureLog logs[NRANKS];
  initAll(NRANKS, bs, logs);
  recvArgs ra[2];
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    ra[r] = (recvArgs){.b = bs[r], .peer = 3, .res = commSuccess};
    assert_int_equal(pthread_create(&th[r], NULL, recvFrom, &ra[r]), 0);
  }
  commBootstrapFailure f;
  memset(&f, 0, sizeof(f));
  f.culprit = 3;
  f.reporter = 2;
  f.result = commRemoteError;
  snprintf(f.reason, sizeof(f.reason), "rank 3's proxy stopped answering");
  int64_t t0 = commTimeNs();
  assert_int_equal(bootstrapReportFailure(bs[2], &f), commSuccess);
  double reportMs = msSince(t0);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(pthread_join(th[r], NULL), 0);
    assert_int_equal(ra[r].res, commRemoteError);
    assert_true((ra[r].doneNs - t0) / 1000000 < 1500);
    assert_non_null(strstr(ra[r].lastWarn, "rank 2 reported that rank 3 failed"));
    assert_non_null(strstr(ra[r].lastWarn, "proxy stopped answering"));
    assert_int_equal(calls(&logs[r]), 1);
    assert_int_equal(logs[r].first.culprit, 3);
    assert_int_equal(logs[r].first.reporter, 2);
    assert_int_equal(logs[r].first.result, commRemoteError);
  }
  assert_true(reportMs < 1500);
  assert_int_equal(calls(&logs[2]), 0); /* the reporter itself is not told */
  /* The culprit is told too (it may be alive: mismatched calls); its thread may still be taking the notice. */
  for (int i = 0; i < 200 && calls(&logs[3]) == 0; i++) usleep(5000);
  assert_int_equal(calls(&logs[3]), 1);
  assert_int_equal(logs[3].first.culprit, 3);
  /* Later waits end too, a later notice changes nothing. */
  int v = 0;
  assert_int_equal(bootstrapBarrier(bs[0]), commRemoteError);
  f.culprit = 1;
  assert_int_equal(bootstrapReportFailure(bs[3], &f), commSuccess);
  assert_int_equal(bootstrapRecv(bs[0], 1, 6, &v, sizeof(v)), commRemoteError);
  assert_int_equal(calls(&logs[0]), 1);
  assert_int_equal(logs[0].first.culprit, 3);
  /* Cleared: point-to-point messages work again (as commShrink's survivors need). */
  bootstrapClearFailure(bs[0]);
  bootstrapClearFailure(bs[1]);
  int out = 77;
  assert_int_equal(bootstrapSend(bs[1], 0, 6, &out, sizeof(out)), commSuccess);
  assert_int_equal(bootstrapRecv(bs[0], 1, 6, &v, sizeof(v)), commSuccess);
  assert_int_equal(v, 77);
  assert_int_equal(calls(&logs[0]), 1);
  closeAll(NRANKS, bs, logs);
}

/* Probes: a live rank answers; a closed one is gone at once (and so is a send to it); a listener that
 * accepts and never answers (a stopped process) fails the probe after its timeout; a failure report that
 * meets both returns within its bound. */
static void test_probe(void** state) {
  (void)state;
  commBootstrap* bs[3];
  failureLog logs[3];
  initAll(3, bs, logs);
  int64_t t0 = commTimeNs();
  assert_int_equal(bootstrapProbe(bs[0], 1, 5000, NULL), commSuccess);
  assert_int_equal(bootstrapProbe(bs[0], 0, 5000, NULL), commSuccess);
  assert_true(msSince(t0) < 5000);
  /* The answer carries the rank's count of collective calls (the low 32 bits), as it is now. */
  uint32_t calls = 99;
  assert_int_equal(bootstrapProbe(bs[0], 1, 5000, &calls), commSuccess);
  assert_int_equal(calls, 0);
  __atomic_store_n(&logs[1].progress, (1ull << 32) + 41, __ATOMIC_RELAXED);
  assert_int_equal(bootstrapProbe(bs[0], 1, 5000, &calls), commSuccess);
  assert_int_equal(calls, 41);

  /* Rank 2 "stopped": its place taken by a socket that listens and never accepts. */
  commSockAddr sa;
  int silent = -1;
  assert_int_equal(commSocketParseAddr("127.0.0.1:0", &sa), commSuccess);
  assert_int_equal(commSocketListen(&sa, &silent), commSuccess);
  bootTestSetPeerAddr(bs[0], 2, &sa);
  t0 = commTimeNs();
  commLogClearLastWarn();
  assert_int_equal(bootstrapProbe(bs[0], 2, 300, NULL), commRemoteError);
  double ms = msSince(t0);
  assert_true(ms >= 250 && ms < 3000);
  assert_non_null(strstr(commLogLastWarn(), "did not answer a probe within 300 ms"));

  /* Rank 1 closed. */
  commSockAddr gone;
  bootTestListenAddr(bs[1], &gone);
  assert_int_equal(bootstrapClose(bs[1]), commSuccess);
  bs[1] = NULL;
  bootstrapSetTimeout(bs[0], 10000);
  t0 = commTimeNs();
  commLogClearLastWarn();
  assert_int_equal(bootstrapProbe(bs[0], 1, 5000, NULL), commRemoteError);
  assert_true(msSince(t0) < 1000);
  assert_non_null(strstr(commLogLastWarn(), "rank 1 (127.0.0.1:"));
  assert_non_null(strstr(commLogLastWarn(), "is gone: connection refused"));
  t0 = commTimeNs();
  int v = 1;
  assert_int_equal(bootstrapSend(bs[0], 1, 0, &v, sizeof(v)), commRemoteError);
  assert_true(msSince(t0) < 1000);
  assert_non_null(strstr(commLogLastWarn(), "is gone: connection refused"));

  /* A notice to both: bounded by about a second. */
  commBootstrapFailure f;
  memset(&f, 0, sizeof(f));
  f.culprit = -1;
  f.result = commRemoteError;
  snprintf(f.reason, sizeof(f.reason), "test");
  t0 = commTimeNs();
  assert_int_equal(bootstrapReportFailure(bs[0], &f), commSuccess);
  ms = msSince(t0);
  assert_true(ms < 2500);
  close(silent);
  closeAll(3, bs, logs);
}

/* The handshake of a probe against a plain listener that accepts and then says nothing. */
static void test_probe_silent_accept(void** state) {
  (void)state;
  commBootstrap* bs[2];
  failureLog logs[2];
  initAll(2, bs, logs);
  commSockAddr sa;
  int lfd = -1;
  assert_int_equal(commSocketParseAddr("127.0.0.1:0", &sa), commSuccess);
  assert_int_equal(commSocketListen(&sa, &lfd), commSuccess);
  commSockAddr real;
  bootTestListenAddr(bs[1], &real);
  bootTestSetPeerAddr(bs[0], 1, &sa);
  int64_t t0 = commTimeNs();
  assert_int_equal(bootstrapProbe(bs[0], 1, 200, NULL), commRemoteError);
  double ms = msSince(t0);
  assert_true(ms >= 150 && ms < 3000);
  int fd = -1;
  assert_int_equal(commSocketAccept(lfd, &fd, commDeadlineNs(1000), NULL), commSuccess);
  close(fd);
  bootTestSetPeerAddr(bs[0], 1, &real);
  assert_int_equal(bootstrapProbe(bs[0], 1, 5000, NULL), commSuccess);
  close(lfd);
  closeAll(2, bs, logs);
}

static int setup(void** state) {
  (void)state;
  setenv("COMM_SOCKET_IFNAME", "lo", 1);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_failure_report),
      cmocka_unit_test(test_probe),
      cmocka_unit_test(test_probe_silent_accept),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
