/*
 * libcomm perf harness: the table, its header and footer, and the -J file (see report.h). Under nccl-tests'
 * names the lines are nccl-tests' (2.19): the "# nThread ... nGpus ..." line, "# Using devices", the column
 * header, rows of size, count, type, redop, root and per variant time, algbw, busbw, #wrong, and the
 * "# Out of bounds values" and "# Avg bus bandwidth" footer; the JSON file has nccl-tests' keys in both
 * layouts. Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json.h"
#include "pattern.h"

/* The flags and output follow nccl-tests of this version. */
#define PERF_NCCL_TESTS_VERSION "2.19.6"
#define PERF_JSON_VERSION 3

extern char** environ;

static const perfOpts_t* O;
static const perfColl_t* C;
static const char* prog;
static int nargs;
static char** args;

void perfReportInit(const perfOpts_t* o, const perfColl_t* coll, const char* p, int argc, char** argv) {
  O = o, C = coll, prog = p, nargs = argc, args = argv;
}

void perfReportNote(const char* line) { printf("%s\n", line); }

static void now(char* buf, size_t n) {
  time_t t = time(NULL);
  struct tm tmv;
  localtime_r(&t, &tmv);
  strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tmv);
}

int perfReportOpenJson(void) {
  if (!O->jsonPath) return 0;
  int r = perfJsonOpen(O->jsonPath);
  if (r < 0) return O->nccl ? 0 : -1; /* nccl-tests goes on without the file */
  if (r > 0) {
    if (O->nccl) return 0; /* nccl-tests writes only names ending in .json, silently */
    fprintf(stderr, "%s: -J %s: the name must end in .json\n", prog, O->jsonPath);
    return -1;
  }
  char ts[64];
  perfJsonKey("version"), perfJsonInt(PERF_JSON_VERSION);
  now(ts, sizeof(ts));
  perfJsonKey("start_time"), perfJsonStr(ts);
  perfJsonKey("args"), perfJsonListStart();
  for (int a = 0; a < nargs; a++) perfJsonStr(args[a]);
  perfJsonListEnd();
  perfJsonKey("env"), perfJsonListStart();
  for (char** e = environ; e && *e; e++) perfJsonStr(*e);
  perfJsonListEnd();
  int ver = 0;
  commGetVersion(&ver);
  perfJsonKey("nccl_version"), perfJsonInt(ver); /* the library's version code: libcomm's */
  perfJsonKey("libcomm_version"), perfJsonInt(ver);
  return 0;
}

static void jsonConfig(int nranks, const perfRankInfo_t* ranks) {
  if (!perfJsonActive()) return;
  perfJsonKey("config"), perfJsonObjectStart();
  perfJsonKey("nthreads"), perfJsonInt(O->nthreads);
  perfJsonKey("ngpus"), perfJsonInt(O->ngpus);
  perfJsonKey("minimum_bytes"), perfJsonSize(O->minBytes);
  perfJsonKey("maximum_bytes"), perfJsonSize(O->maxBytes);
  if (O->stepFactor > 1) perfJsonKey("step_factor"), perfJsonSize(O->stepFactor);
  else perfJsonKey("step_bytes"), perfJsonSize(O->stepBytes);
  perfJsonKey("warmup_iters"), perfJsonInt(O->warmup);
  perfJsonKey("iterations"), perfJsonInt(O->iters);
  perfJsonKey("aggregated_iterations"), perfJsonInt(O->aggIters);
  perfJsonKey("validation"), perfJsonInt(O->check);
  perfJsonKey("graph"), perfJsonInt(O->graphs);
  perfJsonKey("blocking_collectives"), perfJsonBoolStr(O->blocking);
  perfJsonKey("per_iter_timing"), perfJsonBoolStr(0);
  perfJsonKey("per_iter_skip"), perfJsonInt(0);
  perfJsonKey("parallel_init"), perfJsonBoolStr(O->parallelInit);
  perfJsonKey("nranks"), perfJsonInt(nranks); /* libcomm's additions */
  perfJsonKey("collective"), perfJsonStr(C->name);
  perfJsonKey("buffers"), perfJsonStr(O->device ? "device" : "host");
  perfJsonKey("devices"), perfJsonListStart();
  for (int r = 0; r < nranks; r++) {
    perfJsonObjectStart();
    perfJsonKey("rank"), perfJsonInt(r);
    perfJsonKey("group"), perfJsonInt(0);
    perfJsonKey("pid"), perfJsonInt(ranks[r].pid);
    perfJsonKey("hostname"), perfJsonStr(ranks[r].host);
    perfJsonKey("device"), perfJsonInt(ranks[r].dev);
    perfJsonKey("device_hex"), perfJsonStr(ranks[r].pci);
    perfJsonKey("device_info"), perfJsonStr(ranks[r].name);
    perfJsonObjectEnd();
  }
  perfJsonListEnd();
  perfJsonObjectEnd();
}

static void ncclHeader(int nranks, const perfRankInfo_t* ranks) {
  int ver = 0;
  commGetVersion(&ver);
  printf("# nccl-tests version %s nccl-headers=%d nccl-library=%d\n", PERF_NCCL_TESTS_VERSION, COMM_VERSION_CODE, ver);
  printf("# libcomm %d.%d.%d perf tool, nccl-tests' flags and output\n", ver / 10000, ver / 100 % 100, ver % 100);
  printf("# Collective test starting: %s\n", prog);
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: %d "
         "validation: %d graph: %d unalign: %d\n",
         O->nthreads, O->ngpus, O->minBytes, O->maxBytes, O->stepFactor > 1 ? O->stepFactor : O->stepBytes,
         O->stepFactor > 1 ? "factor" : "bytes", O->warmup, O->iters, O->aggIters, O->check, O->graphs, O->unalign);
  if (O->blocking == 1) printf("# Blocking Enabled: wait and barrier after each inner iteration (-m) \n");
  if (O->blocking == 2) printf("# Blocking Enabled: wait after each inner iteration (-m), no barrier \n");
  if (O->blocking == 3)
    printf("# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier \n");
  if (O->parallelInit) printf("# Parallel Init Enabled: threads call into NcclInitRank concurrently \n");
  printf("#\n");
  jsonConfig(nranks, ranks);
  printf("# Using devices\n");
  for (int r = 0; r < nranks; r++) {
    const perfRankInfo_t* i = &ranks[r];
    printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s\n", r, 0, i->pid, i->host, i->dev, i->pci,
           i->name);
  }
  printf("#\n");
  const char* t = O->cputime ? "cputime" : "time";
  int tsPad = O->timestamps ? 19 : 0;
  printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "",
         "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "size", "count", "type", "redop",
         "root", t, "algbw", "busbw", "#wrong", t, "algbw", "busbw", "#wrong", tsPad, O->timestamps ? "timestamp" : "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)", "(elements)", "", "", "",
         "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", tsPad,
         O->timestamps ? "%Y-%m-%d %H:%M:%S" : "");
}

static void libcommHeader(int nranks, const perfRankInfo_t* ranks, int graphIgnored) {
  if (graphIgnored) fprintf(stderr, "%s: -G needs device memory: ignored with host memory\n", prog);
  int ver = 0;
  commGetVersion(&ver);
  char types[256] = "", ops[128] = "";
  for (int i = 0; i < O->ntypes; i++)
    snprintf(types + strlen(types), sizeof(types) - strlen(types), "%s%s", i ? "," : "", perfTypes[O->types[i]].name);
  for (int i = 0; i < O->nops; i++)
    snprintf(ops + strlen(ops), sizeof(ops) - strlen(ops), "%s%s", i ? "," : "", perfOpNames[O->ops[i]]);
  printf("# %s (%s), libcomm %d.%d.%d\n", C->name, prog, ver / 10000, ver / 100 % 100, ver % 100);
  char graphs[48] = "";
  if (O->graphs > 0) snprintf(graphs, sizeof(graphs), " graph launches: %d", O->graphs);
  printf("# nRanks %d nThread %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
         "validation: %d memory: %s%s\n",
         nranks, O->nthreads, O->minBytes, O->maxBytes, O->stepFactor > 1 ? O->stepFactor : O->stepBytes,
         O->stepFactor > 1 ? "factor" : "bytes", O->warmup, O->iters, O->check, O->device ? "device" : "host", graphs);
  printf("# Collective %s  datatype %s  redop %s  root %d\n", C->name, types, C->usesOp ? ops : "none",
         C->usesRoot ? O->root : -1);
  jsonConfig(nranks, ranks);
  printf("#\n# Using ranks\n");
  for (int r = 0; r < nranks; r++) {
    char where[32];
    if (ranks[r].dev >= 0) snprintf(where, sizeof(where), "device %d", ranks[r].dev);
    else snprintf(where, sizeof(where), "host memory");
    printf("#  Rank %3d Pid %7d on %10s %s\n", r, ranks[r].pid, ranks[r].host, where);
  }
  printf("#\n");
  printf("#%51s%-33s%s\n", "", "           out-of-place", "              in-place");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop",
         "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "", "",
         "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

void perfReportHeader(int nranks, const perfRankInfo_t* ranks, int graphIgnored) {
  if (O->nccl) ncclHeader(nranks, ranks);
  else libcommHeader(nranks, ranks, graphIgnored);
  if (perfJsonActive()) perfJsonKey("results"), perfJsonListStart();
  fflush(stdout);
}

void perfReportRowStart(size_t bytes, size_t count, int type, int op, int root) {
  const char* tn = O->nccl ? perfNcclTypeNames[type] : perfTypes[type].name;
  /* nccl-tests' hypercube passes an empty op name */
  const char* on = op >= 0 ? (O->nccl ? perfNcclOpNames[op] : perfOpNames[op]) : (O->nccl && C->noOpName ? "" : "none");
  char rootName[16];
  snprintf(rootName, sizeof(rootName), "%6i", root);
  if (O->nccl) printf("%12zu  %12zu  %8s  %6s  %6s", bytes, count, tn, on, rootName);
  else printf("%12zu  %12zu  %8s  %6s  %6d", bytes, count, tn, on, root);
  if (perfJsonActive()) {
    perfJsonObjectStart();
    perfJsonKey("size"), perfJsonSize(bytes);
    perfJsonKey("count"), perfJsonSize(count);
    perfJsonKey("type"), perfJsonStr(tn);
    perfJsonKey("redop"), perfJsonStr(on);
    perfJsonKey("root"), perfJsonStr(rootName);
  }
}

/* nccl-tests' numbers: two decimals where they fit the width, then fewer, then an exponent. */
static void fitFloat(char* out, int width, double v) {
  if (snprintf(out, (size_t)width + 1, "%*.2f", width, v) <= width) return;
  if (snprintf(out, (size_t)width + 1, "%*.1f", width, v) <= width) return;
  if (snprintf(out, (size_t)width + 1, "%*.0f", width, v) <= width) return;
  snprintf(out, (size_t)width + 1, width >= 7 ? "%*.1e" : "%*.0e", width, v);
}

static void stamp(void) {
  char ts[64];
  now(ts, sizeof(ts));
  printf("%21s", ts);
}

void perfReportRowBody(double us, double algbw, double busbw, int checked, double wrong, int inPlace) {
  if (O->nccl) {
    char t[16], a[16], b[16];
    fitFloat(t, 7, us), fitFloat(a, 6, algbw), fitFloat(b, 6, busbw);
    if (checked) printf("  %7s  %6s  %6s  %6g", t, a, b, wrong);
    else printf("  %7s  %6s  %6s    N/A", t, a, b);
    if (inPlace && O->timestamps) stamp();
  } else {
    char t[32], w[32];
    if (us < 1e4) snprintf(t, sizeof(t), "%7.2f", us);
    else if (us < 1e5) snprintf(t, sizeof(t), "%7.1f", us);
    else snprintf(t, sizeof(t), "%7.0f", us);
    if (checked) snprintf(w, sizeof(w), "%6.0f", wrong);
    else snprintf(w, sizeof(w), "%6s", "N/A");
    printf("  %7s  %6.2f  %6.2f  %6s", t, algbw, busbw, w);
  }
  if (perfJsonActive()) {
    perfJsonKey(inPlace ? "in_place" : "out_of_place"), perfJsonObjectStart();
    perfJsonKey(O->cputime ? "cpu_time" : "time"), perfJsonDouble(us);
    perfJsonKey("alg_bw"), perfJsonDouble(algbw);
    perfJsonKey("bus_bw"), perfJsonDouble(busbw);
    perfJsonKey("nwrong");
    if (checked) perfJsonDouble(wrong);
    else perfJsonNull();
    perfJsonObjectEnd();
  }
}

void perfReportRowNone(int inPlace) {
  printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
  if (perfJsonActive()) perfJsonKey(inPlace ? "in_place" : "out_of_place"), perfJsonNull();
}

void perfReportRowEnd(int iters) {
  printf("\n");
  fflush(stdout);
  if (perfJsonActive()) {
    perfJsonKey("actual_iterations"), perfJsonInt(iters);
    perfJsonKey("experiment_name"), perfJsonStr("");
    perfJsonObjectEnd();
  }
}

int perfReportFooter(double errors, double avgBusBw) {
  const char* env = O->nccl ? getenv("NCCL_TESTS_MIN_BW") : NULL;
  double minBw = env ? atof(env) : -1;
  int low = minBw != -1 && avgBusBw < minBw * 0.9;
  if (perfJsonActive()) perfJsonListEnd(); /* results */
  printf("# %-20s : %.0f %s\n", "Out of bounds values", errors, errors ? "FAILED" : "OK");
  printf("# %-20s : %g %s\n", "Avg bus bandwidth", avgBusBw, minBw == -1 ? "" : low ? "FAILED" : "OK");
  printf("#\n");
  if (O->nccl) printf("# Collective test concluded: %s\n", prog);
  if (perfJsonActive()) {
    perfJsonKey("out_of_bounds"), perfJsonObjectStart();
    perfJsonKey("count"), perfJsonInt((long long)errors);
    perfJsonKey("okay"), perfJsonBoolStr(errors == 0);
    perfJsonObjectEnd();
    perfJsonKey("average_bus_bandwidth"), perfJsonObjectStart();
    perfJsonKey("bandwidth"), perfJsonDouble(avgBusBw);
    perfJsonKey("okay");
    if (minBw == -1) perfJsonStr("unchecked");
    else perfJsonBoolStr(!low);
    perfJsonObjectEnd();
  }
  fflush(stdout);
  return low;
}

static void memString(char* out, size_t n, int64_t bytes) {
  double v = (double)bytes;
  const char* unit = " B";
  if (fabs(v) >= 1024.0 * 1024 * 1024) unit = " GB", v /= 1024.0 * 1024 * 1024;
  else if (fabs(v) >= 1024.0 * 1024) unit = " MB", v /= 1024.0 * 1024;
  else if (fabs(v) >= 1024.0) unit = " KB", v /= 1024.0;
  snprintf(out, n, "%.*f%s", fabs(v) < 10 ? 2 : fabs(v) < 100 ? 1 : 0, v, unit);
}

void perfReportMemory(int64_t init, int64_t user, int64_t coll) {
  if (init < 0) {
    printf("# %-20s : %s\n", "GPU memory usage", "not measured (host buffers)");
    return;
  }
  char a[32], b[32], c[32], t[32];
  memString(a, sizeof(a), init), memString(b, sizeof(b), user), memString(c, sizeof(c), coll);
  memString(t, sizeof(t), init + user + coll);
  printf("# %-20s : Initialization %s | User-Allocated %s | Collective %s | Total  %s\n", "GPU memory usage", a, b, c,
         t);
}

void perfReportEnd(const char* lastError) {
  if (O->nccl) {
    printf("#\n");
    if (lastError && *lastError) printf("# error: %s\n", lastError);
    else printf("\n");
  }
  if (perfJsonActive()) {
    perfJsonKey("errors"), perfJsonListStart();
    if (lastError && *lastError) perfJsonStr(lastError);
    perfJsonListEnd();
    char ts[64];
    now(ts, sizeof(ts));
    perfJsonKey("end_time"), perfJsonStr(ts);
    perfJsonClose();
  }
  fflush(stdout);
}
