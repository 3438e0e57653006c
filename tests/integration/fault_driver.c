/* fault_driver: one fault, and what every survivor sees. N ranks (forked) run a random sequence of
 * collectives (the same on every rank, from -seed); the victim rank is killed (SIGKILL), stopped (SIGSTOP)
 * or skips one call, at a random point of one phase: init, a collective, or finalize. Every survivor must
 * return an error within the limit (kill: about a second; stop and skip: COMM_TIMEOUT_MS plus the culprit
 * search), and its commGetLastError must name the victim (kill, stop, and a skipped collective: the victim
 * answers probes with fewer calls) or say that a rank did not make the call (a skipped init or finalize).
 * Prints one line "PASS|FAIL <scenario> ..." and exits 0 or 1.
 *   fault_driver [-np N] [-mode kill|stop|skip] [-phase init|coll|finalize] [-victim R] [-seed S]
 * The transport is the environment's (COMM_SHM_DISABLE=1: sockets). scripts/fault_campaign.sh runs it
 * with random arguments many times. Uses the public API only. SPDX-License-Identifier: Apache-2.0 */
#include "rtest.h"

#include <pthread.h>
#include <sys/mman.h>

typedef enum { MODE_KILL, MODE_STOP, MODE_SKIP } faultMode;
typedef enum { PHASE_INIT, PHASE_COLL, PHASE_FINALIZE } faultPhase;
static const char* modeNames[] = {"kill", "stop", "skip"};
static const char* phaseNames[] = {"init", "coll", "finalize"};

#define MAX_OPS 24
typedef struct {
  faultMode mode;
  faultPhase phase;
  int victim;
  unsigned seed;
  int nOps;
  int faultOp;       /* PHASE_COLL: the collective during which the fault strikes */
  int kind[MAX_OPS]; /* 0 allreduce, 1 broadcast, 2 allgather, 3 reducescatter, 4 reduce */
  size_t count[MAX_OPS];
  int delayUs;              /* how long after the call starts (kill, stop) */
  volatile double* faultAt; /* shared with every rank: when the victim struck */
} scenario;

static unsigned nextRand(unsigned* s) {
  *s = *s * 1103515245u + 12345u;
  return (*s >> 8) & 0xffffff;
}

static void spinUs(int us) {
  double t0 = rtNow();
  while ((rtNow() - t0) * 1e6 < us) {
  }
}

typedef struct {
  const scenario* sc;
} strikeArgs;

static void strikeNow(const scenario* sc) {
  *sc->faultAt = rtNow();
  __sync_synchronize();
  raise(sc->mode == MODE_KILL ? SIGKILL : SIGSTOP);
}

/* Strikes delayUs after it starts, while the main thread is inside a call. */
static void* strikeThread(void* p) {
  const scenario* sc = ((strikeArgs*)p)->sc;
  spinUs(sc->delayUs);
  strikeNow(sc);
  return NULL;
}

static void strikeLater(const scenario* sc) {
  static strikeArgs a;
  a.sc = sc;
  pthread_t t;
  pthread_create(&t, NULL, strikeThread, &a);
  pthread_detach(t);
}

static void beforeInit(int rank, void* arg) {
  const scenario* sc = (const scenario*)arg;
  if (rank != sc->victim || sc->phase != PHASE_INIT) return;
  if (sc->mode == MODE_SKIP) {
    *sc->faultAt = rtNow();
    pause(); /* never joins; killed by the driver */
  }
  strikeLater(sc);
}

static commResult_t runOp(const scenario* sc, int i, comm_t comm, int nranks, float* a, float* b) {
  size_t n = sc->count[i];
  switch (sc->kind[i]) {
    case 0: return commAllReduce(a, b, n, commFloat32, commSum, comm, NULL);
    case 1: return commBroadcast(a, b, n, commFloat32, i % nranks, comm, NULL);
    case 2: return commAllGather(a, b, n / (size_t)nranks, commFloat32, comm, NULL);
    case 3: return commReduceScatter(a, b, n / (size_t)nranks, commFloat32, commSum, comm, NULL);
    default: return commReduce(a, b, n, commFloat32, commSum, i % nranks, comm, NULL);
  }
}

static void rankMain(int rank, int nranks, comm_t* commp, void* arg, rtReport* out) {
  const scenario* sc = (const scenario*)arg;
  comm_t comm = *commp;
  size_t maxCount = 0;
  for (int i = 0; i < sc->nOps; i++) maxCount = sc->count[i] > maxCount ? sc->count[i] : maxCount;
  float* a = calloc(maxCount, sizeof(float));
  float* b = calloc(maxCount, sizeof(float));
  commResult_t res = commSuccess;
  int isVictim = rank == sc->victim;
  for (int i = 0; i < sc->nOps && res == commSuccess && a && b; i++) {
    if (isVictim && sc->phase == PHASE_COLL && i == sc->faultOp) {
      if (sc->mode == MODE_SKIP) {
        *sc->faultAt = rtNow();
        pause();
      }
      strikeLater(sc);
    }
    res = runOp(sc, i, comm, nranks, a, b);
    if (isVictim && sc->phase == PHASE_COLL && i == sc->faultOp) {
      while (1) spinUs(1000); /* the strike comes during the call or just after it */
    }
  }
  if (res == commSuccess) {
    if (isVictim && sc->phase == PHASE_FINALIZE) {
      if (sc->mode == MODE_SKIP) {
        *sc->faultAt = rtNow();
        pause();
      }
      strikeNow(sc);
    }
    res = commFinalize(comm);
  }
  out->failedAt = rtNow();
  out->result = res;
  snprintf(out->message, sizeof(out->message), "%s", res == commSuccess ? "" : commGetLastError(comm));
  free(a);
  free(b);
  commDestroy(comm);
  *commp = NULL;
}

/* "rank V" followed by something that is not a digit. */
static int namesRank(const char* msg, int v) {
  char pat[24];
  int len = snprintf(pat, sizeof(pat), "rank %d", v);
  for (const char* p = strstr(msg, pat); p != NULL; p = strstr(p + 1, pat)) {
    char next = p[len];
    if (next < '0' || next > '9') return 1;
  }
  const char* missing = strstr(msg, "missing ranks: "); /* the rendezvous's list: "missing ranks: 0, 2" */
  for (const char* p = missing ? missing + 15 : NULL; p != NULL && *p >= '0' && *p <= '9';) {
    char* end = NULL;
    if (strtol(p, &end, 10) == v) return 1;
    p = strncmp(end, ", ", 2) == 0 ? end + 2 : NULL;
  }
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int nranks = 4;
  scenario sc;
  memset(&sc, 0, sizeof(sc));
  sc.victim = -1;
  sc.seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-np")) nranks = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-mode"))
      sc.mode = !strcmp(argv[i + 1], "stop") ? MODE_STOP : !strcmp(argv[i + 1], "skip") ? MODE_SKIP : MODE_KILL;
    else if (!strcmp(argv[i], "-phase"))
      sc.phase = !strcmp(argv[i + 1], "init")       ? PHASE_INIT
                 : !strcmp(argv[i + 1], "finalize") ? PHASE_FINALIZE
                                                    : PHASE_COLL;
    else if (!strcmp(argv[i], "-victim")) sc.victim = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-seed")) sc.seed = (unsigned)strtoul(argv[i + 1], NULL, 10);
  }
  if (nranks < 2 || nranks > RT_MAX_RANKS) {
    fprintf(stderr, "fault_driver: -np must be 2..%d\n", RT_MAX_RANKS);
    return 2;
  }
  unsetenv("COMM_RANK");
  unsetenv("COMM_NRANKS");
  unsetenv("COMM_ROOT");
  unsigned s = sc.seed;
  if (sc.victim < 0) sc.victim = (int)(nextRand(&s) % (unsigned)nranks);
  sc.nOps = 4 + (int)(nextRand(&s) % (MAX_OPS - 4));
  sc.faultOp = (int)(nextRand(&s) % (unsigned)sc.nOps);
  sc.delayUs = (int)(nextRand(&s) % 3000);
  for (int i = 0; i < sc.nOps; i++) {
    sc.kind[i] = (int)(nextRand(&s) % 5);
    sc.count[i] = (size_t)nranks * (1 + nextRand(&s) % (1u << (2 + nextRand(&s) % 18)));
  }
  sc.faultAt = mmap(NULL, sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sc.faultAt == MAP_FAILED) return 2;
  *sc.faultAt = 0;
  long timeoutMs = getenv("COMM_TIMEOUT_MS") ? atol(getenv("COMM_TIMEOUT_MS")) : 600000;
  /* Kill: the death is seen at once (a closed connection, a pid gone) and travels; allow 2 s on a loaded
   * 2-core machine. Stop and skip: only the timeout tells, then the culprit search (probes). */
  double limit = sc.mode == MODE_KILL ? 2.0 : timeoutMs / 1000.0 + 3.0;
  /* A rank killed in init before it reached the root is missed only when the rendezvous times out. */
  if (sc.phase == PHASE_INIT) limit = timeoutMs / 1000.0 + 3.0;
  rtReport reps[RT_MAX_RANKS];
  rtBeforeInit = beforeInit;
  int watchdog = (int)(timeoutMs / 1000) * 3 + 30;
  rtRunVictim(nranks, rankMain, &sc, watchdog, sc.victim, reps);
  char scen[160];
  snprintf(scen, sizeof(scen), "np=%d mode=%s phase=%s victim=%d seed=%u ops=%d faultOp=%d %s", nranks,
           modeNames[sc.mode], phaseNames[sc.phase], sc.victim, sc.seed, sc.nOps, sc.faultOp,
           getenv("COMM_SHM_DISABLE") ? "sockets" : "shm");
  int bad = 0;
  double worst = 0;
  for (int r = 0; r < nranks; r++) {
    if (r == sc.victim) continue;
    const rtReport* p = &reps[r];
    double after = p->failedAt - *sc.faultAt;
    if (after > worst) worst = after;
    const char* why = NULL;
    if (p->status < 0) why = "died or hung";
    else if (*sc.faultAt == 0) why = "the fault never struck";
    else if (p->result == commSuccess) why = "returned success";
    else if (after > limit) why = "returned too late";
    /* A rank that skips a collective answers probes; the ranks waiting in that collective name it (its count
     * of calls tells); one that skips init is missing at the rendezvous, one that skips finalize is not. */
    else if ((sc.mode != MODE_SKIP || sc.phase == PHASE_COLL) && !namesRank(p->message, sc.victim))
      why = "does not name the victim";
    else if (sc.mode == MODE_SKIP && !strstr(p->message, "did not make the call") && !strstr(p->message, "missing"))
      why = "does not say a rank did not make the call";
    if (why != NULL) {
      bad = 1;
      printf("fault_driver: rank %d %s (result %d, %.2f s after the fault): %s\n", r, why, p->result, after,
             p->message);
    }
  }
  printf("%s %s worst %.3f s (limit %.1f s)\n", bad ? "FAIL" : "PASS", scen, worst, limit);
  return bad;
}
