/* test_faults: what callers see when things go wrong.
 *  (a) a peer killed during a 64 MiB allreduce: the other ranks return commRemoteError or commTimeout well
 *      within 3 x COMM_TIMEOUT_MS, and commGetLastError names the peer; shm and socket transports;
 *  (b) commAbort from another thread while a rank is blocked in an allreduce its peer never joins: the call
 *      returns an error promptly;
 *  (c) an init that its peers never join: commTimeout after COMM_TIMEOUT_MS (environment) or
 *      config.timeoutMs.
 * Uses the public API only. SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "itest.h"

static int failures, checks;
#define CHECK(cond, ...)                                   \
  do {                                                     \
    checks++;                                              \
    if (!(cond)) {                                         \
      failures++;                                          \
      fprintf(stderr, "test_faults:%d: FAIL: ", __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
    }                                                      \
  } while (0)

/* Processes this program started: the watchdog kills them if a part hangs. */
static pid_t pids[16];
static int npids;
static void trackPid(pid_t p) {
  if (npids < 16) pids[npids++] = p;
}
static void untrackPid(pid_t p) {
  for (int i = 0; i < npids; i++)
    if (pids[i] == p) pids[i] = 0;
}
static void onAlarm(int sig) {
  (void)sig;
  static const char msg[] = "test_faults: FAIL: watchdog expired (a call hung); killing the ranks\n";
  ssize_t w = write(2, msg, sizeof(msg) - 1);
  (void)w;
  for (int i = 0; i < npids; i++)
    if (pids[i] > 0) kill(pids[i], SIGKILL);
  _exit(124);
}

/* ---------------------------------------------------------------------------------------------- */
/* (a) killed peer */
#define KP_RANKS 3
#define KP_VICTIM 2
#define KP_TIMEOUT_MS 5000
#define KP_COUNT ((size_t)16 << 20) /* float32: 64 MiB */

typedef struct {
  int rank;
  int kind; /* 0: about to enter the big allreduce; 1: its result; 2: setup failed */
  int code;
  int abortCode;
  double elapsed, abortElapsed;
  char msg[300];
} kpReport;

static void kpRank(int rank, commUniqueId id, int fd) {
  kpReport rep;
  memset(&rep, 0, sizeof(rep));
  rep.rank = rank;
  comm_t comm = NULL;
  commResult_t res = commInitRank(&comm, KP_RANKS, id, rank);
  float* buf = malloc(KP_COUNT * sizeof(float));
  float* out = malloc(KP_COUNT * sizeof(float));
  if (res == commSuccess && buf && out) {
    for (size_t i = 0; i < KP_COUNT; i++) buf[i] = (float)(i % 7);
    res = commAllReduce(buf, out, 1024, commFloat32, commSum, comm, NULL); /* all connections up */
  }
  if (res != commSuccess || !buf || !out) {
    rep.kind = 2;
    rep.code = res;
    snprintf(rep.msg, sizeof(rep.msg), "%s", commGetLastError(comm));
    if (write(fd, &rep, sizeof(rep)) != sizeof(rep)) _exit(3);
    _exit(2);
  }
  rep.kind = 0;
  if (write(fd, &rep, sizeof(rep)) != sizeof(rep)) _exit(3);
  double t0 = itNowSec();
  res = commAllReduce(buf, out, KP_COUNT, commFloat32, commSum, comm, NULL);
  rep.elapsed = itNowSec() - t0;
  rep.kind = 1;
  rep.code = res;
  snprintf(rep.msg, sizeof(rep.msg), "%s", commGetLastError(comm));
  /* Tear down without waiting for the dead peer. */
  t0 = itNowSec();
  rep.abortCode = commAbort(comm);
  rep.abortElapsed = itNowSec() - t0;
  if (write(fd, &rep, sizeof(rep)) != sizeof(rep)) _exit(3);
  free(buf);
  free(out);
  _exit(0);
}

static int readFull(int fd, void* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char*)p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static void testKilledPeer(int shmDisable) {
  const char* label = shmDisable ? "killed peer (socket)" : "killed peer (shm)";
  printf("test_faults: (a) %s: %d ranks, rank %d killed during a 64 MiB allreduce, COMM_TIMEOUT_MS=%d\n", label,
         KP_RANKS, KP_VICTIM, KP_TIMEOUT_MS);
  setenv("COMM_TIMEOUT_MS", "5000", 1);
  setenv("COMM_SHM_DISABLE", shmDisable ? "1" : "0", 1);
  int fds[2], idPipe[KP_RANKS];
  if (pipe(fds) != 0) {
    perror("pipe");
    exit(2);
  }
  pid_t parent = getpid(), rankPid[KP_RANKS];
  fflush(NULL);
  /* Fork first, then make the id and pass it down a pipe: no libcomm thread runs in the parent while it
   * forks (a fork beside running threads can leave an ASan allocator lock held in the child). */
  for (int r = 0; r < KP_RANKS; r++) {
    int idFds[2];
    if (pipe(idFds) != 0) {
      perror("pipe");
      exit(2);
    }
    pid_t p = fork();
    if (p < 0) {
      perror("fork");
      exit(2);
    }
    if (p == 0) {
      close(fds[0]);
      close(idFds[1]);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(3);
      commUniqueId id;
      if (readFull(idFds[0], &id, sizeof(id)) != 0) _exit(3);
      close(idFds[0]);
      kpRank(r, id, fds[1]);
    }
    close(idFds[0]);
    idPipe[r] = idFds[1];
    rankPid[r] = p;
    trackPid(p);
  }
  close(fds[1]);
  commUniqueId id;
  commResult_t res = commGetUniqueId(&id);
  CHECK(res == commSuccess, "%s: commGetUniqueId returned %d", label, (int)res);
  for (int r = 0; r < KP_RANKS; r++) {
    /* on failure the ranks read end-of-file and leave */
    if (res == commSuccess && write(idPipe[r], &id, sizeof(id)) != (ssize_t)sizeof(id)) perror("write");
    close(idPipe[r]);
  }

  int ready = 0, setupFailed = 0;
  kpReport rep;
  while (ready + setupFailed < KP_RANKS && readFull(fds[0], &rep, sizeof(rep)) == 0) {
    if (rep.kind == 0) ready++;
    if (rep.kind == 2) {
      setupFailed++;
      CHECK(0, "%s: rank %d: setup failed with %d: %s", label, rep.rank, rep.code, rep.msg);
    }
  }
  double tKill = itNowSec();
  /* Everyone is in (or entering) the collective: kill the victim, and reap it so that it is gone, not a
   * zombie whose pid still answers. */
  kill(rankPid[KP_VICTIM], SIGKILL);
  int status;
  waitpid(rankPid[KP_VICTIM], &status, 0);
  untrackPid(rankPid[KP_VICTIM]);
  CHECK(ready == KP_RANKS, "%s: only %d ranks reached the allreduce", label, ready);

  int results = 0;
  while (ready == KP_RANKS && results < KP_RANKS - 1 && readFull(fds[0], &rep, sizeof(rep)) == 0) {
    if (rep.kind != 1) continue;
    results++;
    double sinceKill = itNowSec() - tKill;
    printf("test_faults:   rank %d: allreduce returned %d (%s) after %.2f s (%.2f s after the kill); "
           "last error: %s; commAbort %d in %.3f s\n",
           rep.rank, rep.code, commGetErrorString((commResult_t)rep.code), rep.elapsed, sinceKill, rep.msg,
           rep.abortCode, rep.abortElapsed);
    CHECK(rep.code == commRemoteError || rep.code == commTimeout,
          "%s: rank %d: allreduce returned %d (%s), expected commRemoteError or commTimeout", label, rep.rank, rep.code,
          commGetErrorString((commResult_t)rep.code));
    CHECK(sinceKill < 3.0 * KP_TIMEOUT_MS / 1000.0, "%s: rank %d: the error came %.2f s after the kill (limit %.1f s)",
          label, rep.rank, sinceKill, 3.0 * KP_TIMEOUT_MS / 1000.0);
    /* The peer by rank, or the transport's own words about the connection (a survivor may first see the
     * other survivor hang up, after that one gave up on the dead rank). */
    int names = strstr(rep.msg, "rank 2") != NULL || strstr(rep.msg, "net connection") != NULL ||
                strstr(rep.msg, "NET/Socket") != NULL || strstr(rep.msg, "is gone") != NULL;
    int timeoutMsg = rep.code == commTimeout && (strstr(rep.msg, "time") != NULL);
    CHECK(names || timeoutMsg,
          "%s: rank %d: commGetLastError names neither the dead peer (\"rank 2\") nor the transport's failure: "
          "\"%s\"",
          label, rep.rank, rep.msg);
    CHECK(rep.abortCode == commSuccess, "%s: rank %d: commAbort after the failure returned %d", label, rep.rank,
          rep.abortCode);
    CHECK(rep.abortElapsed < 3.0 * KP_TIMEOUT_MS / 1000.0, "%s: rank %d: commAbort took %.2f s", label, rep.rank,
          rep.abortElapsed);
  }
  CHECK(ready != KP_RANKS || results == KP_RANKS - 1, "%s: only %d of %d survivors reported a result", label, results,
        KP_RANKS - 1);
  close(fds[0]);
  for (int r = 0; r < KP_RANKS; r++) {
    if (r == KP_VICTIM) continue;
    if (ready != KP_RANKS || results != KP_RANKS - 1) kill(rankPid[r], SIGKILL);
    waitpid(rankPid[r], &status, 0);
    untrackPid(rankPid[r]);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: survivor rank %d ended with status 0x%x", label, r,
          status);
  }
  unsetenv("COMM_SHM_DISABLE");
  unsetenv("COMM_TIMEOUT_MS");
}

/* ---------------------------------------------------------------------------------------------- */
/* (b) commAbort from another thread */
typedef struct {
  commUniqueId id;
  int rank;
  comm_t comm;
  commResult_t res;
} initArg;
static void* initMain(void* p) {
  initArg* a = p;
  a->res = commInitRank(&a->comm, 2, a->id, a->rank);
  return NULL;
}

static comm_t blockedComm;
static int returned; /* set after the call returned */
static commResult_t blockedRes;
static double tReturned;
static void* blockedMain(void* p) {
  (void)p;
  static float in[4096], out[4096];
  blockedRes = commAllReduce(in, out, 4096, commFloat32, commSum, blockedComm, NULL);
  tReturned = itNowSec();
  __atomic_store_n(&returned, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Does the file contain needle? */
static int logHas(const char* path, const char* needle) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return 0;
  char line[1024];
  int found = 0;
  while (!found && fgets(line, sizeof(line), f) != NULL) found = strstr(line, needle) != NULL;
  fclose(f);
  return found;
}

static void testAbort(void) {
  printf("test_faults: (b) commAbort from another thread while rank 1 waits in an allreduce rank 0 never joins\n");
  setenv("COMM_TIMEOUT_MS", "60000", 1); /* abort, not the timeout, must end the call */
  /* The event that says the blocked call is inside: the INFO line its plan logs before it runs. (This part
   * runs in a process of its own, which has not logged yet.) */
  char logPath[64];
  snprintf(logPath, sizeof(logPath), "/tmp/test_faults_abort.%d.log", (int)getpid());
  setenv("COMM_DEBUG", "INFO", 1);
  setenv("COMM_DEBUG_SUBSYS", "COLL", 1);
  setenv("COMM_DEBUG_FILE", logPath, 1);
  initArg a[2];
  memset(a, 0, sizeof(a));
  commResult_t res = commGetUniqueId(&a[0].id);
  CHECK(res == commSuccess, "abort: commGetUniqueId returned %d", (int)res);
  if (res != commSuccess) return;
  a[1].id = a[0].id;
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    a[r].rank = r;
    pthread_create(&th[r], NULL, initMain, &a[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  CHECK(a[0].res == commSuccess && a[1].res == commSuccess, "abort: init returned %d/%d", (int)a[0].res, (int)a[1].res);
  if (a[0].res != commSuccess || a[1].res != commSuccess) return;

  blockedComm = a[1].comm;
  pthread_t blocked;
  pthread_create(&blocked, NULL, blockedMain, NULL);
  /* Wait (bounded) for the call's plan to be logged: it is inside and about to wait for rank 0. */
  double deadline = itNowSec() + 10;
  int inside = 0;
  while (!inside && itNowSec() < deadline) {
    inside = logHas(logPath, "AllReduce: opCount");
    if (!inside) sched_yield();
  }
  CHECK(inside, "abort: the blocked allreduce never logged its plan (%s)", logPath);
  CHECK(!__atomic_load_n(&returned, __ATOMIC_ACQUIRE),
        "abort: the allreduce returned %d before the abort although rank 0 never joined", (int)blockedRes);

  double t0 = itNowSec();
  res = commAbort(a[1].comm);
  double abortTime = itNowSec() - t0;
  CHECK(res == commSuccess, "abort: commAbort returned %d", (int)res);
  /* commAbort may return before or after the blocked call does; wait for the call, bounded. */
  deadline = itNowSec() + 10;
  while (!__atomic_load_n(&returned, __ATOMIC_ACQUIRE) && itNowSec() < deadline) sched_yield();
  int ret = __atomic_load_n(&returned, __ATOMIC_ACQUIRE);
  CHECK(ret, "abort: the blocked allreduce had not returned 10 s after commAbort");
  if (ret) {
    pthread_join(blocked, NULL);
    double after = tReturned - t0;
    printf("test_faults:   allreduce returned %d (%s) %.3f s after commAbort was called; commAbort took %.3f s\n",
           (int)blockedRes, commGetErrorString(blockedRes), after, abortTime);
    CHECK(blockedRes != commSuccess, "abort: the aborted allreduce returned commSuccess");
    CHECK(after < 5.0, "abort: the allreduce returned %.2f s after commAbort", after);
  }
  CHECK(abortTime < 5.0, "abort: commAbort took %.2f s", abortTime);
  /* The aborted handle is dead: a later call is rejected, not a crash. */
  int v;
  res = commCount(a[1].comm, &v);
  CHECK(res == commInvalidArgument, "abort: commCount on the aborted comm returned %d", (int)res);
  res = commAbort(a[0].comm);
  CHECK(res == commSuccess, "abort: commAbort of the idle rank 0 returned %d", (int)res);
  if (failures == 0) unlink(logPath); /* kept for a look when something failed */
  unsetenv("COMM_TIMEOUT_MS");
}

/* ---------------------------------------------------------------------------------------------- */
/* (c) init timeout */
static void testInitTimeout(int viaConfig) {
  const char* label = viaConfig ? "init timeout (config.timeoutMs=1000)" : "init timeout (COMM_TIMEOUT_MS=1000)";
  printf("test_faults: (c) %s: only rank 0 of 2 calls commInitRank\n", label);
  if (viaConfig) unsetenv("COMM_TIMEOUT_MS");
  else setenv("COMM_TIMEOUT_MS", "1000", 1);
  commUniqueId id;
  commResult_t res = commGetUniqueId(&id);
  CHECK(res == commSuccess, "%s: commGetUniqueId returned %d", label, (int)res);
  if (res != commSuccess) return;
  comm_t comm = NULL;
  double t0 = itNowSec();
  if (viaConfig) {
    commConfig_t cfg = COMM_CONFIG_INITIALIZER;
    cfg.timeoutMs = 1000;
    res = commInitRankConfig(&comm, 2, id, 0, &cfg);
  } else {
    res = commInitRank(&comm, 2, id, 0);
  }
  double el = itNowSec() - t0;
  const char* msg = commGetLastError(NULL);
  printf("test_faults:   commInitRank returned %d (%s) after %.2f s: %s\n", (int)res, commGetErrorString(res), el, msg);
  CHECK(res == commTimeout, "%s: commInitRank returned %d (%s), expected commTimeout", label, (int)res,
        commGetErrorString(res));
  /* The root gives up a little before the ranks' deadline (it keeps a margin to tell them), so allow an
   * early return, but not an immediate one. */
  CHECK(el >= 0.5 && el < 5.0, "%s: returned after %.2f s, expected about 1 s", label, el);
  CHECK(comm == NULL, "%s: a failed init left *comm = %p", label, (void*)comm);
  /* The root cause, not the wrapper ("commInitRank ... failed"): the rendezvous ran out of time, rank 1 missing. */
  CHECK(msg && (strstr(msg, "time") || strstr(msg, "within")) && strstr(msg, "missing ranks: 1"),
        "%s: the WARN does not say the rendezvous timed out without rank 1: \"%s\"", label, msg ? msg : "(null)");
  unsetenv("COMM_TIMEOUT_MS");
}

/* Run a part in its own process (fresh library state, its own environment). */
static void inChild(void (*fn)(void)) {
  fflush(NULL);
  pid_t p = fork();
  if (p < 0) {
    perror("fork");
    exit(2);
  }
  if (p == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    failures = checks = 0;
    fn();
    fflush(NULL);
    _exit(failures ? 1 : 0);
  }
  trackPid(p);
  int status;
  while (waitpid(p, &status, 0) < 0 && errno == EINTR) {
  }
  untrackPid(p);
  checks++;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    failures++;
    fprintf(stderr, "test_faults: FAIL: a part ended with status 0x%x (see above)\n", status);
  }
}
static void initTimeoutEnv(void) { testInitTimeout(0); }
static void initTimeoutConfig(void) { testInitTimeout(1); }

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = onAlarm;
  sigaction(SIGALRM, &sa, NULL);
  alarm(240);
  unsetenv("COMM_RANK");
  unsetenv("COMM_NRANKS");
  unsetenv("COMM_ROOT");

  /* The parts that fork run while this process has no libcomm thread yet. */
  inChild(testAbort);
  inChild(initTimeoutEnv);
  inChild(initTimeoutConfig);
  testKilledPeer(0);
  testKilledPeer(1);

  printf("test_faults: %d checks, %d failures: %s\n", checks, failures, failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
