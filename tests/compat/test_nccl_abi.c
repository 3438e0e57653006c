/* compat/nccl/nccl.h against the CUDA toolkit's nccl.h: every type size, field offset, enum value and
 * initializer value of nccl_abi_fill.inc must be the same (the symbols libnccl.so.2 exports are compared with
 * the toolkit header's declarations by nccl_abi_symbols.cmake). SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>

int abiOurs(long* v, const char** names);
int abiToolkit(long* v, const char** names);

int main(void) {
  long a[256], b[256];
  const char *na[256], *nb[256];
  int n = abiOurs(a, na), m = abiToolkit(b, nb), bad = n != m;
  for (int i = 0; i < n && i < m; i++)
    if (a[i] != b[i]) {
      printf("test_nccl_abi: %s: compat/nccl/nccl.h %ld, the toolkit's nccl.h %ld\n", na[i], a[i], b[i]);
      bad = 1;
    }
  printf("test_nccl_abi: %d facts compared: %s\n", n, bad ? "FAIL" : "PASS");
  return bad;
}
