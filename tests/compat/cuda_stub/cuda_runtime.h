/* Stand-in for compiling NVIDIA's nccl.h where no CUDA toolkit is installed (the drop-in's ABI test in CI):
 * only what nccl.h uses from it, with CUDA's ABI (a stream is a pointer to an opaque struct).
 * SPDX-License-Identifier: Apache-2.0 */
#ifndef COMM_CUDA_STUB_RUNTIME_H_
#define COMM_CUDA_STUB_RUNTIME_H_
#define CUDART_VERSION 13000
typedef struct CUstream_st* cudaStream_t;
#endif
