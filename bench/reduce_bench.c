/* reduce_bench: throughput of the host reduction kernels (src/exec/reduce.c), standalone.
 *
 *   gcc -std=gnu11 -O3 -Iinclude -Isrc/base -Isrc/exec bench/reduce_bench.c src/exec/reduce.c src/base/datatype.c \
 *       src/base/debug.c src/base/param.c src/base/utils.c -o reduce_bench && ./reduce_bench [elements]
 *
 * Prints, per datatype x op, the time of dst = a OP b on `elements` elements (default 16M, beyond the
 * caches) and the memory traffic rate (3 x bytes moved: two reads and one write), for separate buffers
 * and for dst == a (in place). A memcpy of the same size is printed first as a bandwidth yardstick
 * (2 x bytes moved). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reduce.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best of a few repetitions (seconds per call). */
static double timeIt(const commRedOpArgs* args, void* dst, const void* a, const void* b, size_t n, int pre, int post) {
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    double t0 = now();
    commReduceLocal(args, dst, a, b, n, pre, post);
    double t = now() - t0;
    if (t < best) best = t;
  }
  return best;
}

int main(int argc, char** argv) {
  size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : (size_t)16 << 20;
  size_t bytes = n * 8;
  uint8_t* a = malloc(bytes);
  uint8_t* b = malloc(bytes);
  uint8_t* d = malloc(bytes);
  if (!a || !b || !d) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  /* Small positive values in every type's encoding: bytes of 0x01..0x3f patterns. */
  for (size_t i = 0; i < bytes; i++) {
    a[i] = (uint8_t)(0x21 + i % 17);
    b[i] = (uint8_t)(0x23 + i % 13);
    d[i] = 0;
  }
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    double t0 = now();
    memcpy(d, a, n * 4);
    double t = now() - t0;
    if (t < best) best = t;
  }
  printf("memcpy %zu x 4 bytes: %.2f ms, %.2f GB/s (2 x bytes)\n", n, best * 1e3, 2.0 * (double)n * 4 / best / 1e9);
  printf("%-11s %-10s %10s %10s %12s %12s\n", "type", "op", "ms", "ms(dst=a)", "GB/s", "GB/s(dst=a)");
  static const char* kinds[] = {"sum", "prod", "max", "min", "premulsum", "sumpostdiv"};
  for (int t = 0; t < commNumTypes; t++) {
    for (int k = 0; k < COMM_NUM_REDOP_KINDS; k++) {
      commRedOpArgs args;
      commRedOpArgsBuiltin(commSum, (commDataType_t)t, 2, &args);
      args.kind = (commRedOpKind_t)k;
      args.divisor = 3;
      int pre = k == COMM_REDOP_PREMULSUM, post = k == COMM_REDOP_SUMPOSTDIV;
      double t1 = timeIt(&args, d, a, b, n, pre, post);
      memcpy(d, a, n * commTypeSize((commDataType_t)t));
      double t2 = timeIt(&args, d, d, b, n, pre, post);
      double mb = 3.0 * (double)n * (double)commTypeSize((commDataType_t)t);
      printf("%-11s %-10s %10.2f %10.2f %12.2f %12.2f\n", commTypeName((commDataType_t)t), kinds[k], t1 * 1e3, t2 * 1e3,
             mb / t1 / 1e9, mb / t2 / 1e9);
    }
  }
  free(a);
  free(b);
  free(d);
  return 0;
}
