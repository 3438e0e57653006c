/* Groups: calls between commGroupStart and the outermost commGroupEnd are collected per thread and run
 * together, so one thread can drive several communicators (and a rank's sends and receives progress
 * together). Outside a group, a call is a group of one. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "enqueue.h"
#include "exec.h"
#include "exec_dev.h"
#include "tune.h"
#include "utils.h"

static __thread int groupDepth;
static __thread commTask* groupHead;
static __thread commTask* groupTail;

typedef struct commGroupJob {
  commGroupJobFn run;
  void* arg;
  int phase;
  commResult_t res;
  pthread_t thread;
  struct commGroupJob* next;
} commGroupJob;
static __thread commGroupJob* groupJobs;

commResult_t commGroupDefer(commGroupJobFn run, void* arg, int phase) {
  commGroupJob* job = NULL;
  COMMCHECK(commCalloc(&job, 1, sizeof(*job)));
  job->run = run;
  job->arg = arg;
  job->phase = phase;
  /* Keep call order (append). */
  commGroupJob** tail = &groupJobs;
  while (*tail) tail = &(*tail)->next;
  *tail = job;
  return commSuccess;
}

static void* jobThread(void* p) {
  commGroupJob* job = (commGroupJob*)p;
  job->res = job->run(job->arg);
  return NULL;
}

/* Run every job of `phase` concurrently, wait for all; the first error wins. */
static commResult_t runJobs(commGroupJob* jobs, int phase) {
  commResult_t res = commSuccess;
  int started = 0;
  for (commGroupJob* j = jobs; j; j = j->next) {
    if (j->phase != phase) continue;
    if (pthread_create(&j->thread, NULL, jobThread, j) != 0) {
      /* No thread: run it here (it may then wait on a peer deferred after it, bounded by its timeout). */
      WARN("commGroupEnd: could not start a thread for a deferred call; running it inline");
      j->res = j->run(j->arg);
      j->thread = 0;
    } else {
      started++;
    }
  }
  for (commGroupJob* j = jobs; j; j = j->next) {
    if (j->phase != phase) continue;
    if (j->thread) pthread_join(j->thread, NULL);
    if (j->res != commSuccess && j->res != commInProgress && res == commSuccess) res = j->res;
  }
  (void)started;
  return res;
}

int commGroupDepth(void) { return groupDepth; }

static void freeTasks(commTask* t) {
  while (t != NULL) {
    commTask* next = t->next;
    free(t);
    t = next;
  }
}

static commResult_t runTasks(commTask* tasks);

commResult_t commEnqueue(const commTask* task) {
  if (groupDepth == 0) { /* run now: the task lives on the stack */
    commTask local = *task;
    local.next = NULL;
    return runTasks(&local);
  }
  commTask* t = NULL;
  COMMCHECK(commCalloc(&t, 1, sizeof(*t)));
  *t = *task;
  t->next = NULL;
  if (groupTail) groupTail->next = t;
  else groupHead = t;
  groupTail = t;
  return commSuccess;
}

COMM_API commResult_t commGroupStart(void) {
  commLogClearLastWarn();
  groupDepth++;
  return commSuccess;
}

COMM_API commResult_t commGroupEnd(void) {
  commLogClearLastWarn();
  if (groupDepth == 0) {
    WARN("commGroupEnd: no matching commGroupStart");
    return commInvalidUsage;
  }
  if (--groupDepth > 0) return commSuccess;
  commTask* tasks = groupHead;
  commGroupJob* jobs = groupJobs;
  groupHead = groupTail = NULL;
  groupJobs = NULL;
  commResult_t res = runJobs(jobs, 0);
  if (tasks != NULL) {
    commResult_t r = res == commSuccess ? runTasks(tasks) : commSuccess;
    if (res == commSuccess) res = r;
    freeTasks(tasks);
  }
  commResult_t r = runJobs(jobs, 1);
  if (res == commSuccess) res = r;
  while (jobs) {
    commGroupJob* next = jobs->next;
    free(jobs);
    jobs = next;
  }
  return res;
}

COMM_API commResult_t commGroupSimulateEnd(float* estimatedUs) {
  commLogClearLastWarn();
  if (groupDepth != 1 || groupJobs != NULL) {
    WARN("commGroupSimulateEnd: %s", groupDepth == 0  ? "no matching commGroupStart"
                                     : groupDepth > 1 ? "not the outermost group: end the inner ones first"
                                                      : "the group creates, splits or finalizes communicators: end "
                                                        "it with commGroupEnd");
    return commInvalidUsage;
  }
  /* The tuner's prediction for each collective (what it would choose), summed; nothing runs. */
  double us = 0;
  commResult_t res = commSuccess;
  for (commTask* t = groupHead; t && res == commSuccess; t = t->next) {
    if (t->kind != COMM_TASK_COLL) continue;
    commTuneChoice c;
    res = commTuneChoose(t->comm, t->func, t->count, commTypeSize(t->dtype), &c);
    if (res == commSuccess) us += c.predictedUs;
  }
  if (res != commSuccess) return res; /* the group stays open: end it with commGroupEnd */
  freeTasks(groupHead);
  groupHead = groupTail = NULL;
  groupDepth = 0;
  if (estimatedUs) *estimatedUs = (float)us;
  return commSuccess;
}

/* Per-communicator arrays of runTasks: on the stack for up to this many tasks (every call outside a group
 * and most groups), allocated above (malloc and free were ~7% of an 8-byte socket allreduce). */
#define RUN_STACK_TASKS 8

/* One collective on device buffers: an identical earlier call's plan, when there is one. *finished = 1
 * when that settled the call (launched, or failed: the communicator then holds the error). */
static commResult_t runCachedTask(commTask* task, int* finished) {
  int launched = 0;
  commLogSetRank(task->comm->rank);
  const commDevCall call = {task->func, task->count,   task->dtype,    &task->redop,   task->devScalar,
                            task->root, task->collSeq, task->sendbuff, task->recvbuff, task->stream};
  commResult_t res = commDevRunCached(task->comm, &call, &launched);
  if (res != commSuccess) commSetAsyncError(task->comm, res);
  *finished = res != commSuccess || launched;
  return res;
}

/* Split the task list by communicator, keeping order: comms[c]'s tasks chained from lists[c] (at most
 * nTasks communicators; *nComms of them found). On failure the list is untouched. */
static commResult_t splitByComm(commTask* tasks, int nTasks, struct commComm** comms, commTask** lists, int* nComms) {
  commTask* tailsStack[RUN_STACK_TASKS];
  commTask** tails = tailsStack;
  if (nTasks > RUN_STACK_TASKS) {
    tails = NULL;
    COMMCHECK(commCalloc(&tails, (size_t)nTasks, sizeof(*tails)));
  }
  commTask* t = tasks;
  while (t) {
    commTask* next = t->next;
    t->next = NULL;
    int c;
    for (c = 0; c < *nComms; c++)
      if (comms[c] == t->comm) break;
    if (c == *nComms) {
      comms[(*nComms)++] = t->comm;
      lists[c] = t;
    } else {
      tails[c]->next = t;
    }
    tails[c] = t;
    t = next;
  }
  if (tails != tailsStack) free(tails);
  return commSuccess;
}

/* Relink the task lists so that the caller frees them all: splitByComm left each communicator's tasks
 * chained on their own, and the caller's list (freed by commGroupEnd's freeTasks from the first task, which
 * heads lists[0]) would reach only the first communicator's: the tasks of every other communicator of a
 * group would leak. Chained again here, one communicator's after another, from that same first task. */
static void relinkTasks(commTask** lists, int nComms) {
  commTask* tail = NULL;
  for (int c = 0; c < nComms; c++) {
    for (commTask* t = lists[c]; t;) {
      commTask* next = t->next;
      t->next = NULL;
      if (tail) tail->next = t;
      tail = t;
      t = next;
    }
  }
}

/* Device plans are enqueued on the callers' streams by the CUDA executor (the host does not wait for
 * them); host plans of every communicator then run here to completion. */
static commResult_t runPlans(struct commComm** comms, commPlan*** plans, const int* nPlans, int nComms) {
  commResult_t res = commSuccess;
  commPlan* allStack[RUN_STACK_TASKS];
  commPlan** all = NULL;
  int nAll = 0;
  for (int c = 0; c < nComms; c++) nAll += nPlans[c];
  if (nAll <= RUN_STACK_TASKS) all = allStack;
  else COMMCHECKGOTO(commCalloc(&all, (size_t)nAll, sizeof(*all)), res, out);
  nAll = 0;
  for (int c = 0; c < nComms && res == commSuccess; c++) {
    int nDev = 0;
    for (int p = 0; p < nPlans[c]; p++)
      if (plans[c][p]->onDevice) all[nAll + nDev++] = plans[c][p];
    if (nDev == 0) continue;
    commLogSetRank(comms[c]->rank);
    res = commDevRunPlans(comms[c], all + nAll, nDev);
    if (res != commSuccess) commSetAsyncError(comms[c], res);
  }
  if (res != commSuccess) goto out;
  for (int c = 0; c < nComms; c++)
    for (int p = 0; p < nPlans[c]; p++)
      if (!plans[c][p]->onDevice) all[nAll++] = plans[c][p];
  if (nAll > 0) {
    res = commExecHostRun(all, nAll);
    /* The FIFOs of every unfinished plan's communicator are now out of step with their peers. */
    for (int p = 0; p < nAll && res != commSuccess; p++) {
      if (all[p]->done) continue;
      /* The first unfinished collective: ranks still in an earlier one may finish it (0: stop everything). */
      uint64_t seq = all[p]->func == commFuncSendRecv ? 0 : all[p]->sig.seq;
      uint64_t unset = 0;
      __atomic_compare_exchange_n(&all[p]->comm->failingSeq, &unset, seq, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
      unset = 0;
      if (all[p]->func != commFuncSendRecv)
        __atomic_compare_exchange_n(&all[p]->comm->failingColl, &unset, seq + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
      commSetAsyncError(all[p]->comm, res);
    }
  }
out:
  if (all != allStack) free(all);
  return res;
}

/* Split the task list by communicator (keeping order), build each communicator's plans, run them all. */
static commResult_t runTasks(commTask* tasks) {
  commResult_t res = commSuccess;
  /* A communicator revoked while the group was open (its calls were checked when they were made). */
  for (commTask* t = tasks; t; t = t->next) {
    if (!__atomic_load_n(&t->comm->revoked, __ATOMIC_ACQUIRE)) continue;
    commLogSetRank(t->comm->rank);
    WARN("commGroupEnd: a communicator of the group was revoked (commRevoke) after its calls were made: the "
         "group does not run");
    return commInvalidUsage;
  }
  if (tasks && !tasks->next && tasks->kind == COMM_TASK_COLL && tasks->onDevice) {
    int finished = 0;
    res = runCachedTask(tasks, &finished);
    if (finished) return res;
  }
  int nComms = 0;
  struct commComm* commsStack[RUN_STACK_TASKS];
  commTask* listsStack[RUN_STACK_TASKS];
  commPlan** plansStack[RUN_STACK_TASKS];
  int nPlansStack[RUN_STACK_TASKS];
  struct commComm** comms = commsStack;
  commTask** lists = listsStack;
  commPlan*** plans = plansStack;
  int* nPlans = nPlansStack;
  for (commTask* t = tasks; t; t = t->next) nComms++;
  int onHeap = nComms > RUN_STACK_TASKS;
  if (onHeap) {
    comms = NULL;
    lists = NULL;
    plans = NULL;
    nPlans = NULL;
    COMMCHECKGOTO(commCalloc(&comms, (size_t)nComms, sizeof(*comms)), res, out);
    COMMCHECKGOTO(commCalloc(&lists, (size_t)nComms, sizeof(*lists)), res, out);
    COMMCHECKGOTO(commCalloc(&plans, (size_t)nComms, sizeof(*plans)), res, out);
    COMMCHECKGOTO(commCalloc(&nPlans, (size_t)nComms, sizeof(*nPlans)), res, out);
  } else {
    memset(plansStack, 0, sizeof(plansStack));
    memset(nPlansStack, 0, sizeof(nPlansStack));
  }
  int nTasks = nComms;
  nComms = 0;
  COMMCHECKGOTO(splitByComm(tasks, nTasks, comms, lists, &nComms), res, out);
  /* Plans and connections for every communicator (connection setup of all comms of this thread runs
   * phase by phase together inside commPlansBuildMulti, so in-process ranks cannot wait on each other). */
  res = commPlansBuildMulti(comms, lists, nComms, plans, nPlans);
  relinkTasks(lists, nComms);
  if (res != commSuccess) {
    for (int c = 0; c < nComms; c++) commSetAsyncError(comms[c], res);
    goto out;
  }
  res = runPlans(comms, plans, nPlans, nComms);
out:
  if (plans) {
    for (int c = 0; c < nComms; c++) {
      if (plans[c] == NULL) continue;
      for (int p = 0; p < nPlans[c]; p++) commPlanFree(plans[c][p]);
      free(plans[c]);
    }
  }
  if (onHeap) {
    free(nPlans);
    free(plans);
    free(lists);
    free(comms);
  }
  return res;
}
