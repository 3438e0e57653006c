/* Device reductions (src/exec/cuda/reduce_kernels.cu): commReduceLocal and commCopy of src/exec/reduce.h
 * on device memory, launched on a CUDA stream, with the same results bit for bit. Built when the CUDA
 * toolkit is found (COMM_HAVE_CUDA). Return a cudaError_t (0: launched). */
#ifndef COMM_REDUCE_CUDA_H_
#define COMM_REDUCE_CUDA_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "reduce.h"

/* dst[i] = post?( a[i] OP pre?(b[i]) ) on device buffers (dst may alias a or b). */
int commCudaReduceLocal(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre, int post,
                        void* stream);
/* dst[i] = post?( pre?(src[i]) ); a device-to-device copy when nothing applies. */
int commCudaCopy(const commRedOpArgs* args, void* dst, const void* src, size_t n, int pre, int post, void* stream);

#ifdef __cplusplus
}
#endif
#endif
