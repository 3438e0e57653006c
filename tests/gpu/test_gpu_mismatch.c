/* test_gpu_mismatch: test_mismatch's cases on device buffers. Ranks that call different collectives fail, on
 * every rank involved, before a byte of a user buffer is written wrongly, with a WARN naming both calls, and
 * commGetAsyncError reports it:
 *  (a) both ranks broadcast as root, then an allreduce of ones: no rank holds a wrong sum;
 *  (b) allreduce on rank 0 against broadcast (root 1) on rank 1;
 *  (c) sum on one rank against max on the other (2 and 4 ranks);
 *  (d) float32 on one rank against int32 on the other (the same bytes: sizes alone do not tell);
 *  (e) out of turn: allreduce then allgather on rank 0, allgather then allreduce on rank 1.
 * Each over P2P, shm (COMM_P2P_DISABLE=1) and the network (COMM_SHM_DISABLE=1 too), with the Simple and the LL
 * protocol, and LL's three ways of running steps (COMM_DEV_LL_BATCH 2: the one-shot fold, 1: batches, 0:
 * step by step). Ranks are processes on GPU rank % GPUs. Exit 77 without a GPU (gpuTestDevices' rule).
 * SPDX-License-Identifier: Apache-2.0 */
#include "rtest.h"

#include <cuda_runtime_api.h>

#include "test_gpu_coll.h"

#define MISMATCH_PROG "test_gpu_mismatch"
#include "mismatch_cases.h"

static int nDevices;

/* Until the stream's work is done (a kernel that waits on a failed peer ends when the failure reaches this
 * rank), polling the async error as a framework's watchdog does. 0 when it finished in time. */
static int waitStream(comm_t comm, cudaStream_t st, double limitSec) {
  double t0 = rtNow();
  while (rtNow() - t0 < limitSec) {
    cudaError_t q = cudaStreamQuery(st);
    if (q == cudaSuccess) return 0;
    if (q != cudaErrorNotReady) return -1;
    commResult_t err = commSuccess;
    if (commGetAsyncError(comm, &err) != commSuccess) return -1;
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return -1;
}

/* Each rank's GPU is current before commInitRank (the communicator takes it then). */
static void pickDevice(int rank, void* arg) {
  (void)arg;
  cudaSetDevice(rank % nDevices);
}

static void rankMain(int rank, int nranks, comm_t* commp, void* arg, rtReport* out) {
  comm_t comm = *commp;
  caseId c = *(const caseId*)arg;
  float host[2 * COUNT], res[2 * COUNT];
  float *send = NULL, *recv = NULL;
  cudaStream_t st = NULL;
  commResult_t first = commSuccess, second = commSuccess;
  out->status = 1;
  if (cudaSetDevice(rank % nDevices) != cudaSuccess || cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) ||
      cudaMalloc((void**)&send, sizeof(host)) != cudaSuccess || cudaMalloc((void**)&recv, sizeof(host))) {
    snprintf(out->message, sizeof(out->message), "CUDA setup failed: %s", cudaGetErrorName(cudaGetLastError()));
    return;
  }
  for (int i = 0; i < 2 * COUNT; i++) host[i] = SENTINEL;
  cudaMemcpy(recv, host, sizeof(host), cudaMemcpyHostToDevice);
  for (int i = 0; i < 2 * COUNT; i++) host[i] = 1.0f;
  if (c == CASE_TWO_ROOTS || c == CASE_ALLREDUCE_BCAST)
    for (int i = 0; i < COUNT; i++) host[i] = 100.0f + (float)rank;
  if (c == CASE_ALLREDUCE_BCAST && rank == 0)
    for (int i = 0; i < COUNT; i++) host[i] = 1.0f;
  cudaMemcpy(send, host, sizeof(host), cudaMemcpyHostToDevice);
  commStream_t s = (commStream_t)st;
  switch (c) {
    case CASE_TWO_ROOTS:
      first = commBroadcast(send, send, COUNT, commFloat32, rank, comm, s);
      for (int i = 0; i < COUNT; i++) host[i] = 1.0f;
      cudaMemcpyAsync(send + COUNT, host, COUNT * sizeof(float), cudaMemcpyHostToDevice, st);
      cudaStreamSynchronize(st);
      second = commAllReduce(send + COUNT, recv, COUNT, commFloat32, commSum, comm, s);
      break;
    case CASE_ALLREDUCE_BCAST:
      if (rank == 0) first = commAllReduce(send, recv, COUNT, commFloat32, commSum, comm, s);
      else first = commBroadcast(send, send, COUNT, commFloat32, 1, comm, s);
      break;
    case CASE_SUM_MAX:
      first = commAllReduce(send, recv, COUNT, commFloat32, rank == 0 ? commMax : commSum, comm, s);
      break;
    case CASE_TYPES:
      first = commAllReduce(send, recv, COUNT, rank == 0 ? commFloat32 : commInt32, commSum, comm, s);
      break;
    case CASE_OUT_OF_TURN:
      if (rank == 0) first = commAllReduce(send, recv, COUNT, commFloat32, commSum, comm, s);
      else first = commAllGather(send, recv, COUNT / 2, commFloat32, comm, s);
      break;
  }
  int hung = waitStream(comm, st, 20.0);
  int wrong = 0;
  if (hung == 0 && cudaMemcpy(res, recv, sizeof(res), cudaMemcpyDeviceToHost) == cudaSuccess) {
    /* Two ranks: each checks the other's data before writing a byte (the allgather's output is not an
     * allreduce's: case (e) checks rank 0, whose allreduce met the allgather's data). */
    if (nranks == 2 && (c != CASE_OUT_OF_TURN || rank == 0)) wrong = countWrong(res, COUNT, (float)nranks);
  }
  commResult_t asyncErr = awaitAsyncError(comm, 5.0);
  const char* why = commGetLastError(comm);
  out->result = first != commSuccess ? first : second != commSuccess ? second : asyncErr;
  snprintf(out->message, sizeof(out->message), "first %d second %d async %d hung %d wrong %d: %s", (int)first,
           (int)second, (int)asyncErr, hung, wrong, why);
  out->status = hung != 0 || wrong != 0 || asyncErr == commSuccess || strstr(why, "mismatched calls") == NULL;
  /* The communicator refuses further work with that error. */
  if (commAllReduce(send, recv, COUNT, commFloat32, commSum, comm, s) == commSuccess) out->status = 1;
  commAbort(comm);
  *commp = NULL;
  cudaStreamSynchronize(st);
  cudaFree(send);
  cudaFree(recv);
  cudaStreamDestroy(st);
}

static void runCase(const char* variant, caseId c, int nranks) {
  /* TEST_GPU_MISMATCH_ONLY=text: only the runs whose "variant: case" contains it (to look at one with a log). */
  const char* only = getenv("TEST_GPU_MISMATCH_ONLY");
  char label[128];
  snprintf(label, sizeof(label), "%s: %s", variant, caseNames[c]);
  if (only != NULL && strstr(label, only) == NULL) return;
  rtReport reps[RT_MAX_RANKS];
  caseId arg = c;
  int r0 = rtRun(nranks, rankMain, &arg, 90, reps);
  CHECK(r0 == 0, "%s, %s, %d ranks: a rank died or hung", variant, caseNames[c], nranks);
  for (int r = 0; r < nranks; r++) {
    CHECK(reps[r].status == 0, "%s, %s, %d ranks, rank %d: %s", variant, caseNames[c], nranks, r, reps[r].message);
    printf("test_gpu_mismatch: %s: %s (%d ranks) rank %d: %s\n", variant, caseNames[c], nranks, r, reps[r].message);
  }
}

/* The device count, asked in a child: the ranks are forked, and CUDA must not be initialised before. */
static int probeDevices(int* count) {
  int fds[2];
  if (pipe(fds) != 0) return 1;
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0, rc = gpuTestDevices("test_gpu_mismatch", &n);
    fflush(stdout);
    if (write(fds[1], &n, sizeof(n)) != sizeof(n)) _exit(1);
    _exit(rc);
  }
  close(fds[1]);
  int st = 0;
  if (read(fds[0], count, sizeof(*count)) != sizeof(*count)) *count = 0;
  close(fds[0]);
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  unsetenv("COMM_RANK");
  unsetenv("COMM_NRANKS");
  unsetenv("COMM_ROOT");
  int rc = probeDevices(&nDevices);
  if (rc != 0) return rc;
  setenv("COMM_TIMEOUT_MS", "10000", 1);
  rtBeforeInit = pickDevice;
  static const struct {
    const char* name;
    const char* env[4]; /* NAME=value settings */
  } variants[] = {
      {"P2P Simple", {"COMM_PROTO=Simple"}},
      {"P2P LL (one-shot fold)", {"COMM_PROTO=LL"}},
      {"P2P LL batches", {"COMM_PROTO=LL", "COMM_DEV_LL_BATCH=1"}},
      {"P2P LL step by step", {"COMM_PROTO=LL", "COMM_DEV_LL_BATCH=0"}},
      {"shm Simple", {"COMM_PROTO=Simple", "COMM_P2P_DISABLE=1"}},
      {"shm LL", {"COMM_PROTO=LL", "COMM_P2P_DISABLE=1", "COMM_DEV_LL_BATCH=0"}},
      {"net Simple", {"COMM_PROTO=Simple", "COMM_P2P_DISABLE=1", "COMM_SHM_DISABLE=1"}},
  };
  static const char* knobs[] = {"COMM_PROTO", "COMM_DEV_LL_BATCH", "COMM_P2P_DISABLE", "COMM_SHM_DISABLE"};
  for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
    for (size_t k = 0; k < sizeof(knobs) / sizeof(knobs[0]); k++) unsetenv(knobs[k]);
    for (int e = 0; e < 4 && variants[v].env[e]; e++) putenv((char*)variants[v].env[e]);
    runCase(variants[v].name, CASE_TWO_ROOTS, 2);
    runCase(variants[v].name, CASE_ALLREDUCE_BCAST, 2);
    runCase(variants[v].name, CASE_SUM_MAX, 2);
    runCase(variants[v].name, CASE_SUM_MAX, 4);
    runCase(variants[v].name, CASE_TYPES, 2);
    runCase(variants[v].name, CASE_OUT_OF_TURN, 2);
  }
  printf("test_gpu_mismatch: %s\n", failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
