/*
 * libcomm perf harness: launching the ranks. -np forks local processes and hands them the unique id
 * through pipes; -t runs ranks as threads of one process; otherwise the ranks come from the launcher
 * environment (COMM_*, torchrun, OMPI, PMI, SLURM). Waits for the ranks and kills stragglers after a
 * failure. Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "launch.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const perfLaunch_t* L;

/* ------------------------------------------------------------------------------------------------ */
/* Threads of one process                                                                            */

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, failed;
} threadState = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

typedef struct {
  int rank, nranks, localRank;
  commUniqueId id;
} rankArg_t;

static void* rankThread(void* arg) {
  rankArg_t* a = arg;
  int failed = L->runRank(&a->id, a->rank, a->nranks, a->localRank) != 0;
  pthread_mutex_lock(&threadState.mu);
  threadState.done++;
  if (failed) threadState.failed = 1;
  pthread_cond_broadcast(&threadState.cv);
  pthread_mutex_unlock(&threadState.mu);
  return NULL;
}

/* Runs ranks base..base+nthreads-1; returns the process exit status. */
static int runThreads(const commUniqueId* id, int base, int nranks, int localBase) {
  int nt = L->nthreads;
  rankArg_t* args = calloc((size_t)nt, sizeof(rankArg_t));
  pthread_t* th = calloc((size_t)nt, sizeof(pthread_t));
  if (!args || !th) {
    fprintf(stderr, "%s: out of memory\n", L->progName);
    return 1;
  }
  int started = 0;
  for (int t = 0; t < nt; t++) {
    args[t].rank = base + t, args[t].nranks = nranks, args[t].localRank = localBase + t, args[t].id = *id;
    if (pthread_create(&th[t], NULL, rankThread, &args[t])) {
      fprintf(stderr, "%s: cannot start thread for rank %d\n", L->progName, base + t);
      pthread_mutex_lock(&threadState.mu);
      threadState.failed = 1;
      pthread_mutex_unlock(&threadState.mu);
      break;
    }
    started++;
  }
  /* After a failure, peers blocked in a collective get a grace period, then the process exits. */
  struct timespec deadline = {0, 0};
  int timedOut = 0;
  pthread_mutex_lock(&threadState.mu);
  while (threadState.done < started && !timedOut) {
    if (!threadState.failed) {
      pthread_cond_wait(&threadState.cv, &threadState.mu);
      continue;
    }
    if (deadline.tv_sec == 0) {
      clock_gettime(CLOCK_REALTIME, &deadline);
      deadline.tv_sec += 15;
    }
    if (pthread_cond_timedwait(&threadState.cv, &threadState.mu, &deadline) == ETIMEDOUT) timedOut = 1;
  }
  int failed = threadState.failed;
  pthread_mutex_unlock(&threadState.mu);
  if (timedOut) {
    fprintf(stderr, "%s: ranks still blocked 15 s after a failure; exiting\n", L->progName);
    fflush(stdout);
    fflush(stderr);
    _exit(1);
  }
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  free(args);
  free(th);
  return failed || started < nt ? 1 : 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* Processes and the launcher environment                                                            */

static int envInt(const char* name, int* out) {
  const char* s = getenv(name);
  return s && perfParseInt(s, 0, out) == 0;
}

/* Forks L->nprocs children; the parent creates the unique id (its root thread stays in the parent)
 * and hands it to the children through pipes, so no child is forked from a process running library
 * threads. */
static int runForked(void) {
  int np = L->nprocs, nranks = np * L->nthreads;
  pid_t* pids = calloc((size_t)np, sizeof(pid_t));
  int* wfd = calloc((size_t)np, sizeof(int));
  if (!pids || !wfd) {
    fprintf(stderr, "%s: out of memory\n", L->progName);
    return 1;
  }
  fflush(stdout);
  fflush(stderr);
  int forked = 0, status = 0;
  for (int p = 0; p < np; p++) {
    int fd[2];
    if (pipe(fd)) {
      perror("pipe");
      status = 1;
      break;
    }
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      close(fd[0]);
      close(fd[1]);
      status = 1;
      break;
    }
    if (pid == 0) {
      for (int q = 0; q < p; q++) close(wfd[q]);
      close(fd[1]);
      commUniqueId id;
      size_t got = 0;
      while (got < sizeof(id)) {
        ssize_t k = read(fd[0], (char*)&id + got, sizeof(id) - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) _exit(1); /* the parent failed before sending the id */
        got += (size_t)k;
      }
      close(fd[0]);
      if (L->hostPerProc) {
        char host[32];
        snprintf(host, sizeof(host), "perf-host-%d", p);
        setenv("COMM_HOSTID", host, 1);
      }
      int rc = runThreads(&id, p * L->nthreads, nranks, p * L->nthreads);
      fflush(stdout);
      exit(rc);
    }
    close(fd[0]);
    pids[p] = pid, wfd[p] = fd[1], forked++;
  }
  commUniqueId id;
  memset(&id, 0, sizeof(id));
  if (status == 0) {
    commResult_t res = commGetUniqueId(&id);
    if (res != commSuccess) {
      const char* last = commGetLastError(NULL);
      fprintf(stderr, "%s: commGetUniqueId failed: %s%s%s\n", L->progName, commGetErrorString(res),
              last && *last ? ": " : "", last && *last ? last : "");
      status = 1;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  for (int p = 0; p < forked; p++) {
    if (status == 0 && write(wfd[p], &id, sizeof(id)) != (ssize_t)sizeof(id)) status = 1;
    close(wfd[p]); /* a child that got no id exits */
  }
  int alive = forked;
  double deadline = 0;
  while (alive > 0) {
    int st;
    pid_t w = waitpid(-1, &st, deadline > 0 ? WNOHANG : 0);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) break;
    if (w == 0) {
      if (perfNowSec() > deadline) {
        fprintf(stderr, "%s: ranks still running 15 s after a failure; killing them\n", L->progName);
        for (int p = 0; p < forked; p++)
          if (pids[p] > 0) kill(pids[p], SIGKILL);
        deadline = 1e300;
      }
      struct timespec ts = {0, 50 * 1000 * 1000};
      nanosleep(&ts, NULL);
      continue;
    }
    for (int p = 0; p < forked; p++)
      if (pids[p] == w) pids[p] = 0, alive--;
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok) {
      if (WIFSIGNALED(st))
        fprintf(stderr, "%s: rank process %d died of signal %d\n", L->progName, (int)w, WTERMSIG(st));
      status = 1;
      if (deadline == 0) deadline = perfNowSec() + 15;
    }
  }
  free(pids);
  free(wfd);
  return status;
}

/* Launcher environment: fills rank/size/localRank and exports COMM_ROOT/COMM_RANK/COMM_NRANKS.
 * Returns 1 when the process was started by a launcher. */
static int fromEnvironment(int* rank, int* size, int* local) {
  *local = -1;
  if (envInt("COMM_RANK", rank) && envInt("COMM_NRANKS", size) && getenv("COMM_ROOT")) {
    if (!envInt("COMM_LOCAL_RANK", local) && !envInt("LOCAL_RANK", local)) *local = *rank;
    return 1;
  }
  const char* addr = getenv("MASTER_ADDR");
  const char* port = getenv("MASTER_PORT");
  if (envInt("RANK", rank) && envInt("WORLD_SIZE", size) && addr && port) {
    if (!getenv("COMM_ROOT")) {
      /* torchrun's agent may already listen on MASTER_PORT with its own store: take the next port. */
      const char* agentStore = getenv("TORCHELASTIC_USE_AGENT_STORE");
      int p = atoi(port) + (agentStore && !strcasecmp(agentStore, "true") ? 1 : 0);
      char root[300];
      snprintf(root, sizeof(root), "%s:%d", addr, p);
      setenv("COMM_ROOT", root, 1);
    }
    if (!envInt("LOCAL_RANK", local)) *local = *rank;
  } else if (getenv("COMM_ROOT") && envInt("OMPI_COMM_WORLD_RANK", rank) && envInt("OMPI_COMM_WORLD_SIZE", size)) {
    if (!envInt("OMPI_COMM_WORLD_LOCAL_RANK", local)) *local = *rank;
  } else if (getenv("COMM_ROOT") && envInt("PMI_RANK", rank) && envInt("PMI_SIZE", size)) {
    if (!envInt("MPI_LOCALRANKID", local)) *local = *rank;
  } else if (getenv("COMM_ROOT") && envInt("SLURM_PROCID", rank) && envInt("SLURM_NTASKS", size)) {
    if (!envInt("SLURM_LOCALID", local)) *local = *rank;
  } else {
    return 0;
  }
  char v[32];
  snprintf(v, sizeof(v), "%d", *rank * L->nthreads);
  setenv("COMM_RANK", v, 1);
  snprintf(v, sizeof(v), "%d", *size * L->nthreads);
  setenv("COMM_NRANKS", v, 1);
  return 1;
}

int perfLaunch(const perfLaunch_t* l) {
  L = l;
  if (L->nprocs > 0) return L->checkRanks(L->nprocs * L->nthreads) ? 2 : runForked();

  commUniqueId id;
  memset(&id, 0, sizeof(id));
  int rank, size, local;
  if (fromEnvironment(&rank, &size, &local)) {
    if (rank >= size) {
      fprintf(stderr, "%s: launcher rank %d is not below its size %d\n", L->progName, rank, size);
      return 2;
    }
    if (L->checkRanks(size * L->nthreads)) return 2;
    /* A zeroed id: the library finds its peers through COMM_ROOT. */
    return runThreads(&id, rank * L->nthreads, size * L->nthreads, local * L->nthreads);
  }
  if (L->checkRanks(L->nthreads)) return 2;
  commResult_t res = commGetUniqueId(&id);
  if (res != commSuccess) {
    const char* last = commGetLastError(NULL);
    fprintf(stderr, "%s: commGetUniqueId failed: %s%s%s\n", L->progName, commGetErrorString(res),
            last && *last ? ": " : "", last && *last ? last : "");
    return 1;
  }
  return runThreads(&id, 0, L->nthreads, 0);
}
