/* Stand-in (see cuda_runtime.h here): nccl.h includes it and uses nothing from it in C.
 * SPDX-License-Identifier: Apache-2.0 */
