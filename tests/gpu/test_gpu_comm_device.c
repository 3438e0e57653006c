/* test_gpu_comm_device: a communicator is bound to its rank's current CUDA device, as NCCL binds it, and
 * the topology places the rank at that GPU. Two ranks as threads of one process, each with device 0
 * current (several ranks may share a GPU): commCuDevice says 0, the INFO log places each rank at GPU0,
 * a host-buffer allreduce is right, one on cudaMalloc'd buffers is right too (the CUDA executor), and one
 * that mixes a host sendbuff with a device recvbuff is refused (commInvalidArgument). A third thread with no CUDA context makes a 1-rank communicator:
 * commCuDevice says -1 there. Public API only. Exit 77 (skipped) without a GPU, 1 when CUDA fails otherwise
 * (test_gpu_coll.h: gpuTestDevices). */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "test_gpu_coll.h"

static commUniqueId id;
static int devOf[2] = {-2, -2}, ok[2];
static pthread_barrier_t allocated;

static void* rankMain(void* arg) {
  int rank = (int)(long)arg;
  comm_t comm;
  if (cudaSetDevice(0) != cudaSuccess || cudaFree(0) != cudaSuccess || /* make the context */
      commInitRank(&comm, 2, id, rank) != commSuccess) {
    pthread_barrier_wait(&allocated); /* the other rank waits there */
    return NULL;
  }
  commCuDevice(comm, &devOf[rank]);
  float v[3] = {1.0f + rank, 2.0f, 3.0f * rank};
  if (commAllReduce(v, v, 3, commFloat32, commSum, comm, NULL) == commSuccess)
    ok[rank] = v[0] == 3.0f && v[1] == 4.0f && v[2] == 3.0f;
  /* Device buffers go to the CUDA executor, on a stream of the rank's own (two ranks of one process on the
   * legacy default stream would serialise each other's kernels, which wait on each other: a deadlock, as
   * with NCCL); mixing is refused. */
  float* d = NULL;
  float h[3] = {1.0f + rank, 2.0f, 3.0f * rank};
  cudaStream_t s = NULL;
  int made = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
             cudaMalloc((void**)&d, 3 * sizeof(float)) == cudaSuccess &&
             cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice) == cudaSuccess;
  /* Both ranks allocate before either launches: the kernel waits for its peer, and a peer still inside
   * cudaMalloc (which may wait for the GPU's running kernels) would never come (both share the GPU). */
  pthread_barrier_wait(&allocated);
  if (!made || commAllReduce(d, d, 3, commFloat32, commSum, comm, (commStream_t)s) != commSuccess ||
      cudaMemcpyAsync(h, d, sizeof(h), cudaMemcpyDeviceToHost, s) != cudaSuccess ||
      cudaStreamSynchronize(s) != cudaSuccess || h[0] != 3.0f || h[1] != 4.0f || h[2] != 3.0f)
    ok[rank] = 0;
  if (s) cudaStreamDestroy(s);
  if (commAllReduce(v, d, 3, commFloat32, commSum, comm, NULL) != commInvalidArgument) ok[rank] = 0;
  cudaFree(d);
  commFinalize(comm);
  commDestroy(comm);
  return NULL;
}

static int noCtxDev = -2;
static void* noContextMain(void* arg) {
  (void)arg;
  commUniqueId one;
  comm_t comm;
  if (commGetUniqueId(&one) != commSuccess || commInitRank(&comm, 1, one, 0) != commSuccess) return NULL;
  commCuDevice(comm, &noCtxDev);
  commDestroy(comm);
  return NULL;
}

int main(void) {
  int n = 0, dv = gpuTestDevices("test_gpu_comm_device", &n);
  if (dv != 0) return dv; /* 77: no device (skipped); 1: a CUDA error */
  const char* log = "test_gpu_comm_device.log";
  remove(log); /* count only this run's lines */
  setenv("COMM_DEBUG", "INFO", 1);
  setenv("COMM_DEBUG_SUBSYS", "TOPO", 1);
  setenv("COMM_DEBUG_FILE", log, 1);
  if (commGetUniqueId(&id) != commSuccess) return 1;
  pthread_barrier_init(&allocated, NULL, 2);
  pthread_t t[3];
  for (long r = 0; r < 2; r++) pthread_create(&t[r], NULL, rankMain, (void*)r);
  for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
  pthread_create(&t[2], NULL, noContextMain, NULL);
  pthread_join(t[2], NULL);
  int placed = 0;
  FILE* f = fopen(log, "r");
  char line[1024];
  while (f && fgets(line, sizeof(line), f))
    if (strstr(line, "topology: rank") && strstr(line, "device GPU0")) placed++;
  if (f) fclose(f);
  int pass = devOf[0] == 0 && devOf[1] == 0 && ok[0] && ok[1] && placed >= 2 && noCtxDev == -1;
  printf("test_gpu_comm_device: commCuDevice %d %d, allreduce %s, %d rank(s) placed at GPU0, no context: %d: %s\n",
         devOf[0], devOf[1], ok[0] && ok[1] ? "right" : "wrong", placed, noCtxDev, pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
