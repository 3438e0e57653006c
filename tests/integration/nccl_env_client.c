/* nccl_env_client: a small NCCL client of the drop-in (libnccl.so.2 from compat/nccl/), for
 * tests/integration/nccl_env_check.sh, which runs it under NCCL's environment variables: two ranks made from
 * one thread inside ncclGroupStart/End (as nccl-tests does), an allreduce and a broadcast on host buffers,
 * then destroy. Exit 0 when both results are right; 3 when init fails (printing ncclGetErrorString and
 * ncclGetLastError); 1 for a wrong result. NCCL's API only. SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>

#include "nccl.h"

#define N 1024

int main(void) {
  ncclUniqueId id;
  ncclComm_t c[2] = {NULL, NULL};
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    printf("nccl_env_client: ncclGetUniqueId failed: %s\n", ncclGetLastError(NULL));
    return 3;
  }
  ncclResult_t res = ncclGroupStart();
  for (int r = 0; r < 2 && res == ncclSuccess; r++) res = ncclCommInitRank(&c[r], 2, id, r);
  ncclResult_t endRes = ncclGroupEnd();
  if (res == ncclSuccess) res = endRes;
  if (res != ncclSuccess || c[0] == NULL || c[1] == NULL) {
    printf("nccl_env_client: init failed: %d (%s): %s\n", (int)res, ncclGetErrorString(res), ncclGetLastError(NULL));
    return 3;
  }
  static float x[2][N];
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < N; i++) x[r][i] = (float)(r + 1) * (float)(i % 7);
  int bad = 0;
  if (ncclGroupStart() != ncclSuccess) bad = 1;
  for (int r = 0; r < 2; r++)
    if (ncclAllReduce(x[r], x[r], N, ncclFloat32, ncclSum, c[r], NULL) != ncclSuccess) bad = 1;
  if (ncclGroupEnd() != ncclSuccess) bad = 1;
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < N; i++) bad |= x[r][i] != 3.0f * (float)(i % 7);
  if (ncclGroupStart() != ncclSuccess) bad = 1;
  for (int r = 0; r < 2; r++) {
    for (int i = 0; i < N; i++) x[r][i] = r == 1 ? (float)i : -1.0f;
    if (ncclBroadcast(x[r], x[r], N, ncclFloat32, 1, c[r], NULL) != ncclSuccess) bad = 1;
  }
  if (ncclGroupEnd() != ncclSuccess) bad = 1;
  for (int i = 0; i < N; i++) bad |= x[0][i] != (float)i;
  for (int r = 0; r < 2; r++) ncclCommDestroy(c[r]);
  printf("nccl_env_client: %s\n", bad ? "FAIL: wrong results" : "PASS");
  return bad ? 1 : 0;
}
