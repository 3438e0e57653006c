/* An NCCL program as written for NVIDIA's NCCL: it includes nccl.h alone and calls the CUDA runtime, whose
 * declarations nccl.h brings in (as NVIDIA's does). Built against the installed NCCL_HOME with the CUDA toolkit's
 * include folder on the path. Run with "device" (libcomm built with its CUDA parts): an allreduce of device
 * buffers on one rank. Exit 77 where no CUDA device is usable. SPDX-License-Identifier: Apache-2.0 */
#include <nccl.h>
#include <stdio.h>
#include <string.h>

#define CUDA_OK(call) ((call) == cudaSuccess)

int main(int argc, char** argv) {
  int version = 0, ndev = 0;
  if (ncclGetVersion(&version) != ncclSuccess || version != NCCL_VERSION_CODE) return 1;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    printf("nccl_cuda: built and linked (CUDA runtime %d); no CUDA device to run on (%s)\n", CUDART_VERSION,
           e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  float* buf = NULL;
  if (!CUDA_OK(cudaMalloc((void**)&buf, 4 * sizeof(float)))) return 1;
  if (argc < 2 || strcmp(argv[1], "device") != 0) { /* libcomm without its CUDA executor: no device buffers */
    printf("nccl_cuda: NCCL %d, cudaMalloc on %d device(s)\n", version, ndev);
    return !CUDA_OK(cudaFree(buf));
  }
  float host[4] = {1, 2, 3, 4};
  cudaStream_t stream;
  ncclComm_t comm;
  ncclUniqueId id;
  if (!CUDA_OK(cudaStreamCreate(&stream)) || !CUDA_OK(cudaMemcpy(buf, host, sizeof(host), cudaMemcpyHostToDevice)))
    return 1;
  /* One rank on GPU 0 (cudaMalloc made it current), the way an NCCL program with one GPU per process starts. */
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) return 1;
  if (ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comm, stream) != ncclSuccess) return 1;
  if (!CUDA_OK(cudaStreamSynchronize(stream))) return 1;
  memset(host, 0, sizeof(host));
  if (!CUDA_OK(cudaMemcpy(host, buf, sizeof(host), cudaMemcpyDeviceToHost))) return 1;
  ncclCommDestroy(comm);
  cudaStreamDestroy(stream);
  cudaFree(buf);
  printf("nccl_cuda: NCCL %d, device allreduce: %g %g %g %g\n", version, host[0], host[1], host[2], host[3]);
  return !(host[0] == 1 && host[1] == 2 && host[2] == 3 && host[3] == 4);
}
