// Gloo's ring_chunked allreduce (float32, sum) over its TCP transport on loopback, measured the way
// perf/allreduce_perf measures commAllReduce: per size, warmup runs, a barrier, timed runs, and the
// maximum over ranks of the average time. -np N forks N local ranks that meet through a FileStore in a
// fresh directory under /tmp. Prints allreduce_perf's out-of-place columns.
// SPDX-License-Identifier: Apache-2.0
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <exception>
#include <memory>
#include <vector>

#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

namespace {

struct Options {
  size_t minBytes = 8, maxBytes = 64u << 20, factor = 2;
  int iters = 20, warmup = 5, check = 1, nprocs = 2;
};

int parseSize(const char* s, size_t* out) {
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

double nowSec() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

float inputValue(size_t i, int rank) { return (float)((i * 7 + (size_t)rank * 13 + 3) % 64); }

double reduceMax(const std::shared_ptr<gloo::Context>& ctx, double v) {
  std::vector<double*> p{&v};
  gloo::AllreduceRingChunked<double> ar(ctx, p, 1, gloo::ReductionFunction<double>::max);
  ar.run();
  return v;
}

double reduceSum(const std::shared_ptr<gloo::Context>& ctx, double v) {
  std::vector<double*> p{&v};
  gloo::AllreduceRingChunked<double> ar(ctx, p, 1, gloo::ReductionFunction<double>::sum);
  ar.run();
  return v;
}

int runRank(const Options& o, int rank, const char* dir) {
  gloo::transport::tcp::attr attr("127.0.0.1");
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, o.nprocs);
  ctx->connectFullMesh(store, dev);
  std::shared_ptr<gloo::Context> base = ctx;
  const int n = o.nprocs;
  std::vector<float> buf(o.maxBytes / sizeof(float) + 16);
  if (rank == 0) {
    printf("# Gloo AllreduceRingChunked (tcp, loopback)\n# nRanks %d minBytes %zu maxBytes %zu step: %zu(factor) "
           "warmup iters: %d iters: %d validation: %d\n#\n",
           n, o.minBytes, o.maxBytes, o.factor, o.warmup, o.iters, o.check);
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop", "root", "time",
           "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
           "(GB/s)", "");
    fflush(stdout);
  }
  double bwSum = 0, wrongTotal = 0;
  int lines = 0;
  for (size_t size = o.minBytes; size <= o.maxBytes; size *= o.factor) {
    size_t count = size / sizeof(float);
    if (count == 0) continue;
    size_t bytes = count * sizeof(float);
    float* p = buf.data();
    for (size_t i = 0; i < count; i++) p[i] = inputValue(i, rank);
    std::vector<float*> ptrs{p};
    gloo::AllreduceRingChunked<float> ar(base, ptrs, (int)count, gloo::ReductionFunction<float>::sum);
    for (int i = 0; i < o.warmup; i++) ar.run();
    gloo::BarrierAllToAll(base).run();
    double t0 = nowSec();
    for (int i = 0; i < o.iters; i++) ar.run();
    double us = (nowSec() - t0) * 1e6 / o.iters;
    double maxUs = reduceMax(base, us);
    double wrong = 0;
    if (o.check) {  // in place: fresh input, one run, compare
      for (size_t i = 0; i < count; i++) p[i] = inputValue(i, rank);
      ar.run();
      for (size_t i = 0; i < count; i++) {
        double exp = 0;
        for (int r = 0; r < n; r++) exp += inputValue(i, r);
        if (p[i] != (float)exp) wrong++;
      }
    }
    wrong = reduceSum(base, wrong);
    wrongTotal += wrong;
    double algbw = (double)bytes / 1e9 / (maxUs * 1e-6), busbw = algbw * (n > 1 ? 2.0 * (n - 1) / n : 1.0);
    bwSum += busbw, lines++;
    if (rank == 0) {
      char ws[16];
      if (o.check) snprintf(ws, sizeof(ws), "%6.0f", wrong);
      else snprintf(ws, sizeof(ws), "%6s", "N/A");
      printf("%12zu  %12zu  %8s  %6s  %6d  %7.2f  %6.2f  %6.2f  %6s\n", bytes, count, "float", "sum", -1, maxUs, algbw,
             busbw, ws);
      fflush(stdout);
    }
    if (size > o.maxBytes / o.factor) break;
  }
  if (rank == 0) {
    printf("# Out of bounds values : %.0f %s\n", wrongTotal, wrongTotal ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n#\n", lines ? bwSum / lines : 0.0);
    fflush(stdout);
  }
  return wrongTotal > 0 ? 1 : 0;
}

int removeEntry(const char* path, const struct stat*, int, struct FTW*) { return remove(path); }

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int a = 1; a < argc; a++) {
    bool ok = a + 1 < argc;
    if (ok && !strcmp(argv[a], "-b")) ok = !parseSize(argv[++a], &o.minBytes);
    else if (ok && !strcmp(argv[a], "-e")) ok = !parseSize(argv[++a], &o.maxBytes);
    else if (ok && !strcmp(argv[a], "-f")) o.factor = (size_t)atol(argv[++a]);
    else if (ok && !strcmp(argv[a], "-n")) o.iters = atoi(argv[++a]);
    else if (ok && !strcmp(argv[a], "-w")) o.warmup = atoi(argv[++a]);
    else if (ok && !strcmp(argv[a], "-c")) o.check = atoi(argv[++a]);
    else if (ok && !strcmp(argv[a], "-np")) o.nprocs = atoi(argv[++a]);
    else ok = false;
    if (!ok || o.iters < 1 || o.warmup < 0 || o.factor < 2 || o.minBytes < 1 || o.maxBytes < o.minBytes ||
        o.nprocs < 1) {
      fprintf(stderr, "usage: %s [-np n] [-b minbytes] [-e maxbytes] [-f factor>=2] [-n iters] [-w warmup] [-c 0|1]\n",
              argv[0]);
      return 2;
    }
  }
  char dir[] = "/tmp/gloo_allreduce.XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  fflush(stdout);
  std::vector<pid_t> pids;
  for (int r = 0; r < o.nprocs; r++) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      break;
    }
    if (pid == 0) {
      int rc;
      try {
        rc = runRank(o, r, dir);
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: %s\n", r, e.what());
        rc = 1;
      }
      fflush(stdout);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  int status = (int)pids.size() == o.nprocs ? 0 : 1;
  for (pid_t pid : pids) {
    if (status && (int)pids.size() != o.nprocs) kill(pid, SIGKILL);  // a rank could not start: no peers
    int st;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) status = 1;
  }
  nftw(dir, removeEntry, 8, FTW_DEPTH | FTW_PHYS);
  return status;
}
