/* compat/nccl/nccl.h against NVIDIA's nccl.h (COMM_NCCL_REF_HEADER: the CUDA toolkit's or the system's, or the NCCL
 * release's): every type size, field offset, enum value and initializer value of nccl_abi_fill.inc must be the
 * same (the functions' types are compared by nccl_abi_protos.cmake, and the symbols libnccl.so.2 exports with
 * the reference's declarations by nccl_abi_symbols.cmake). First, the reference must be NVIDIA's header and
 * not ours (COMM_NCCL_OURS_HEADER) under another name: comparing ours with ours would always pass. The same
 * rule as nccl_abi_ref.cmake's, which CMake applied when it chose the header; checked again here on the files
 * as they are now. SPDX-License-Identifier: Apache-2.0 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int abiOurs(long* v, const char** names);
int abiToolkit(long* v, const char** names);

/* The whole file, NUL-terminated (NULL when it cannot be read). */
static char* readAll(const char* path, long* len) {
  FILE* f = fopen(path, "rb");
  char* buf = NULL;
  if (f != NULL && fseek(f, 0, SEEK_END) == 0 && (*len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (buf = malloc((size_t)*len + 1)) != NULL) {
    if (fread(buf, 1, (size_t)*len, f) != (size_t)*len) {
      free(buf);
      buf = NULL;
    } else {
      buf[*len] = '\0';
    }
  }
  if (f != NULL) fclose(f);
  return buf;
}

/* Why ref cannot be the reference, or NULL when it can. */
static const char* refusal(const char* ref, const char* ours) {
  static char why[PATH_MAX * 2 + 128];
  char refReal[PATH_MAX], oursReal[PATH_MAX];
  if (realpath(ref, refReal) == NULL) return "it cannot be found";
  if (realpath(ours, oursReal) == NULL) return "libcomm's own header cannot be found to compare with";
  char* slash = strrchr(oursReal, '/');
  size_t dirLen = slash != NULL ? (size_t)(slash - oursReal) + 1 : 0;
  if (strncmp(refReal, oursReal, dirLen) == 0 && strchr(refReal + dirLen, '/') == NULL) { /* ours, or beside it */
    snprintf(why, sizeof(why), "it is libcomm's own header (%s)", refReal);
    return why;
  }
  long nr = 0, no = 0;
  char *r = readAll(refReal, &nr), *o = readAll(oursReal, &no);
  const char* res = NULL;
  if (r == NULL || o == NULL) res = "it cannot be read";
  else if (nr == no && memcmp(r, o, (size_t)nr) == 0) res = "it is a copy of libcomm's own compat/nccl/nccl.h";
  else if (strstr(r, "libcomm") != NULL) res = "it mentions libcomm: a derivative of compat/nccl/nccl.h, not NVIDIA's";
  else if (strstr(r, "NVIDIA CORPORATION") == NULL) res = "it has no NVIDIA copyright line: not NVIDIA's nccl.h";
  free(r);
  free(o);
  return res;
}

int main(void) {
  const char* why = refusal(COMM_NCCL_REF_HEADER, COMM_NCCL_OURS_HEADER);
  if (why != NULL) {
    printf("test_nccl_abi: FAIL: refusing %s as NVIDIA's nccl.h: %s\n", COMM_NCCL_REF_HEADER, why);
    return 1;
  }
  long a[256], b[256];
  const char *na[256], *nb[256];
  int n = abiOurs(a, na), m = abiToolkit(b, nb), bad = n != m;
  for (int i = 0; i < n && i < m; i++)
    if (a[i] != b[i]) {
      printf("test_nccl_abi: %s: compat/nccl/nccl.h %ld, %s %ld\n", na[i], a[i], COMM_NCCL_REF_HEADER, b[i]);
      bad = 1;
    }
  printf("test_nccl_abi: %d facts compared with %s: %s\n", n, COMM_NCCL_REF_HEADER, bad ? "FAIL" : "PASS");
  return bad;
}
