/* The ABI facts of NVIDIA's nccl.h (nccl_abi_fill.inc): the CUDA toolkit's or the system's, or the NCCL release's
 * (COMM_NCCL_REF_H). Included by its path, COMM_NCCL_REF_HEADER, which test_nccl_abi.c checks is not libcomm's own
 * header: the include path cannot put another nccl.h in its place. SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>

#include COMM_NCCL_REF_HEADER
#define ABI_FN abiToolkit
#include "nccl_abi_fill.inc"
