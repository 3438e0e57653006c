/*
 * MPI_Allreduce (float32, sum) measured the way perf/allreduce_perf measures commAllReduce: per size,
 * warmup iterations, a barrier, timed iterations, and the maximum over ranks of the average time.
 * Prints the same columns as allreduce_perf's out-of-place block, so bench/compare.sh reads both alike.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parseSize(const char* s, size_t* out) {
  char* end;
  double v = strtod(s, &end);
  if (end == s || v < 0) return -1;
  double mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
  else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
  else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
  if (*end) return -1;
  *out = (size_t)(v * mul);
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  size_t minBytes = 8, maxBytes = 64u << 20, factor = 2;
  int iters = 20, warmup = 5, check = 1;
  for (int a = 1; a < argc; a++) {
    int ok = a + 1 < argc;
    if (ok && !strcmp(argv[a], "-b")) ok = !parseSize(argv[++a], &minBytes);
    else if (ok && !strcmp(argv[a], "-e")) ok = !parseSize(argv[++a], &maxBytes);
    else if (ok && !strcmp(argv[a], "-f")) factor = (size_t)atol(argv[++a]);
    else if (ok && !strcmp(argv[a], "-n")) iters = atoi(argv[++a]);
    else if (ok && !strcmp(argv[a], "-w")) warmup = atoi(argv[++a]);
    else if (ok && !strcmp(argv[a], "-c")) check = atoi(argv[++a]);
    else ok = 0;
    if (!ok || iters < 1 || warmup < 0 || factor < 2 || minBytes < 1 || maxBytes < minBytes) {
      if (rank == 0)
        fprintf(stderr, "usage: %s [-b minbytes] [-e maxbytes] [-f factor>=2] [-n iters] [-w warmup] [-c 0|1]\n",
                argv[0]);
      MPI_Finalize();
      return 2;
    }
  }
  float* send = malloc(maxBytes + 64);
  float* recv = malloc(maxBytes + 64);
  if (!send || !recv) {
    fprintf(stderr, "rank %d: cannot allocate 2 x %zu bytes\n", rank, maxBytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(send, 0, maxBytes + 64);
  memset(recv, 0, maxBytes + 64);
  if (rank == 0) {
    int len;
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(ver, &len);
    char* nl = strchr(ver, '\n');
    if (nl) *nl = 0;
    printf("# MPI_Allreduce (%s)\n# nRanks %d minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %d iters: %d "
           "validation: %d\n#\n",
           ver, nranks, minBytes, maxBytes, factor, warmup, iters, check);
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop", "root", "time",
           "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
           "(GB/s)", "");
  }
  double bwSum = 0, wrongTotal = 0;
  int lines = 0;
  for (size_t size = minBytes; size <= maxBytes; size *= factor) {
    size_t count = size / sizeof(float);
    if (count == 0) continue;
    size_t bytes = count * sizeof(float);
    for (size_t i = 0; i < count; i++) send[i] = (float)((i * 7 + (size_t)rank * 13 + 3) % 64);
    for (int i = 0; i < warmup; i++) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double us = (MPI_Wtime() - t0) * 1e6 / iters, maxUs;
    MPI_Allreduce(&us, &maxUs, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double wrong = 0, wrongSum = 0;
    if (check) {
      for (size_t i = 0; i < count; i++) {
        double exp = 0;
        for (int r = 0; r < nranks; r++) exp += (double)((i * 7 + (size_t)r * 13 + 3) % 64);
        if (recv[i] != (float)exp) wrong++;
      }
    }
    MPI_Allreduce(&wrong, &wrongSum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    wrongTotal += wrongSum;
    double algbw = (double)bytes / 1e9 / (maxUs * 1e-6), busbw = algbw * (nranks > 1 ? 2.0 * (nranks - 1) / nranks : 1);
    bwSum += busbw, lines++;
    if (rank == 0) {
      char ws[16];
      if (check) snprintf(ws, sizeof(ws), "%6.0f", wrongSum);
      else snprintf(ws, sizeof(ws), "%6s", "N/A");
      printf("%12zu  %12zu  %8s  %6s  %6d  %7.2f  %6.2f  %6.2f  %6s\n", bytes, count, "float", "sum", -1, maxUs, algbw,
             busbw, ws);
      fflush(stdout);
    }
    if (size > maxBytes / factor) break;
  }
  if (rank == 0) {
    printf("# Out of bounds values : %.0f %s\n", wrongTotal, wrongTotal ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n#\n", lines ? bwSum / lines : 0.0);
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return wrongTotal > 0 ? 1 : 0;
}
