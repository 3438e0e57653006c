/* The ABI facts of compat/nccl/nccl.h (nccl_abi_fill.inc). SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>

#include "nccl.h"
#define ABI_FN abiOurs
#include "nccl_abi_fill.inc"
