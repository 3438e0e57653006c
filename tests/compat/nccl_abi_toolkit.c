/* The ABI facts of the CUDA toolkit's nccl.h (nccl_abi_fill.inc), built only where the toolkit is.
 * SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>

#include <nccl.h>
#define ABI_FN abiToolkit
#include "nccl_abi_fill.inc"
