/* An NCCL program without CUDA (host buffers, one rank), built against the installed NCCL_HOME: nccl.h from its
 * include/, libnccl.so from its lib/. SPDX-License-Identifier: Apache-2.0 */
#include <nccl.h>
#include <stdio.h>

int main(void) {
  int version = 0;
  ncclComm_t comm;
  float x[3] = {1, 2, 3}, y[3] = {0, 0, 0};
  if (ncclGetVersion(&version) != ncclSuccess || version != NCCL_VERSION_CODE) return 1;
  if (ncclCommInitAll(&comm, 1, NULL) != ncclSuccess) return 1;
  if (ncclAllReduce(x, y, 3, ncclFloat, ncclSum, comm, NULL) != ncclSuccess) return 1;
  if (ncclCommDestroy(comm) != ncclSuccess) return 1;
  printf("nccl_host: NCCL %d, y = %g %g %g\n", version, y[0], y[1], y[2]);
  return !(y[0] == 1 && y[1] == 2 && y[2] == 3);
}
