/*
 * libcomm perf harness: perfMain (which flags, which output), one rank's life (GPU, communicator, buffers,
 * header, sweeps, footer), the -T watchdog, and the helpers sweep.c uses. The sweep itself is in sweep.c,
 * the table and the -J file in report.c, the options in options.c and nccl_options.c, launching the ranks
 * in launch.c, the CUDA driver in device.c, data types and the input pattern in pattern.c.
 * Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "device.h"
#include "launch.h"
#include "pattern.h"
#include "rank.h"
#include "report.h"

perfOpts_t perfOpts;
const perfColl_t* perfColl;
const char* perfProg;
#define O perfOpts

static int memAutoPicked; /* 1 when auto picked device memory (for the messages) */
static int graphIgnored;  /* 1 when -G was given with host memory: rank 0 says so and the graphs are off */
static int resultsBad;    /* rank 0 found wrong results or NCCL_TESTS_MIN_BW not met (nccl-tests: exit 7) */
static const char* memFlag(void) {
  if (memAutoPicked) return O.nccl ? "--buffers auto (a GPU was found)" : "-M auto (a GPU was found)";
  return O.nccl ? "--buffers device" : "-M device";
}

void perfRankFailure(rankCtx_t* c, const char* what, commResult_t res) {
  const char* last = commGetLastError(c->comm);
  fprintf(stderr, "# rank %d: %s failed: %s%s%s\n", c->rank, what, commGetErrorString(res), last && *last ? ": " : "",
          last && *last ? last : "");
  c->failed = 1;
}

#define CUCHECK(c, call)                                                              \
  do {                                                                                \
    perfCuResult_t r_ = (call);                                                       \
    if (r_ != 0) {                                                                    \
      fprintf(stderr, "# rank %d: %s failed: %s\n", (c)->rank, #call, perfCuErr(r_)); \
      (c)->failed = 1;                                                                \
      return -1;                                                                      \
    }                                                                                 \
  } while (0)

double perfNowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int perfSyncStream(rankCtx_t* c) {
  if (O.device) CUCHECK(c, perfCu.streamSynchronize(c->stream));
  return 0;
}

/* After a sync, outside any timed region and any capture: a failure a kernel of this rank reported
 * (the stream itself completes normally) fails the rank now instead of leaving its peers waiting. */
int perfCheckAsync(rankCtx_t* c) {
  if (!O.device) return 0;
  commResult_t err = commSuccess;
  PCHECK(c, commGetAsyncError(c->comm, &err));
  if (err != commSuccess && err != commInProgress) {
    perfRankFailure(c, "a collective on the device (commGetAsyncError)", err);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* -T: a watchdog per process ends it when a rank has waited in one call for longer                  */

static struct {
  pthread_mutex_t mu;
  rankCtx_t** ranks;
  int n, cap;
  pthread_t thread;
} watch = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0};

static long long nowNs(void) { return (long long)(perfNowSec() * 1e9); }

void perfCallBegin(rankCtx_t* c) {
  if (O.timeout > 0) __atomic_store_n(&c->callSince, nowNs(), __ATOMIC_RELAXED);
}
void perfCallEnd(rankCtx_t* c) {
  if (O.timeout > 0) __atomic_store_n(&c->callSince, 0, __ATOMIC_RELAXED);
}

static void* watchdog(void* arg) {
  (void)arg;
  for (;;) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    long long t = nowNs();
    pthread_mutex_lock(&watch.mu);
    for (int i = 0; i < watch.n; i++) {
      long long since = __atomic_load_n(&watch.ranks[i]->callSince, __ATOMIC_RELAXED);
      if (since && t - since > (long long)O.timeout * 1000000000LL) {
        char host[64] = "?";
        gethostname(host, sizeof(host) - 1);
        printf("%s: Test timeout (%ds) rank %d\n", host, O.timeout, watch.ranks[i]->rank); /* as nccl-tests */
        fflush(stdout);
        fflush(stderr);
        _exit(4); /* nccl-tests' testTimeout */
      }
    }
    pthread_mutex_unlock(&watch.mu);
  }
  return NULL;
}

static void watchRank(rankCtx_t* c, int on) {
  if (O.timeout <= 0) return;
  pthread_mutex_lock(&watch.mu);
  if (on) {
    if (!watch.ranks) {
      watch.cap = O.nthreads * O.ngpus;
      watch.ranks = calloc((size_t)watch.cap, sizeof(rankCtx_t*));
      if (watch.ranks && pthread_create(&watch.thread, NULL, watchdog, NULL) == 0) pthread_detach(watch.thread);
    }
    if (watch.ranks && watch.n < watch.cap) watch.ranks[watch.n++] = c;
  } else {
    for (int i = 0; i < watch.n; i++)
      if (watch.ranks[i] == c) watch.ranks[i] = watch.ranks[--watch.n];
  }
  pthread_mutex_unlock(&watch.mu);
}

/* ------------------------------------------------------------------------------------------------ */
/* Buffers                                                                                           */

/* Copy [off, off+bytes) of a host mirror to the buffer the library sees, or back. The copies go on the
 * rank's own (non-blocking) stream, never on the legacy default stream unless -y asks: that one waits for
 * the work of every blocking stream of the context, so with several ranks (threads) on one GPU a copy of one
 * rank would wait for a collective of another rank that waits for this rank's next call. The host-to-device
 * copy is staged (the host mirror may change once it returns) and ordered before the next call. */
int perfToBuf(rankCtx_t* c, char* buf, const char* host, size_t off, size_t bytes) {
  if (O.device && bytes)
    CUCHECK(c, perfCu.memcpyHtoDAsync((perfCuDeviceptr_t)(uintptr_t)(buf + off), host + off, bytes, c->stream));
  return 0;
}
int perfFromBuf(rankCtx_t* c, char* host, const char* buf, size_t off, size_t bytes) {
  if (!O.device || !bytes) return 0;
  CUCHECK(c, perfCu.memcpyDtoHAsync(host + off, (perfCuDeviceptr_t)(uintptr_t)buf + off, bytes, c->stream));
  return perfSyncStream(c);
}

commResult_t perfLocalCopy(void* dst, const void* src, size_t bytes, commStream_t stream) {
  if (!bytes) return commSuccess;
  if (!O.device) {
    memmove(dst, src, bytes);
    return commSuccess;
  }
  perfCuResult_t r = perfCu.memcpyDtoDAsync((perfCuDeviceptr_t)(uintptr_t)dst, (perfCuDeviceptr_t)(uintptr_t)src, bytes,
                                            stream);
  if (r) fprintf(stderr, "# cuMemcpyDtoDAsync failed: %s\n", perfCuErr(r));
  return r ? commUnhandledCudaError : commSuccess;
}

static int allocBuffers(rankCtx_t* c) {
  c->bufBytes = O.maxBytes + (size_t)O.unalign * 8 + 64;
  c->meta = calloc(4, sizeof(double));
  if (posix_memalign((void**)&c->hsend, 4096, c->bufBytes) || posix_memalign((void**)&c->hrecv, 4096, c->bufBytes) ||
      !c->meta) {
    fprintf(stderr, "# rank %d: cannot allocate 2 x %zu bytes of host memory\n", c->rank, c->bufBytes);
    c->failed = 1;
    return -1;
  }
  memset(c->hsend, 0, c->bufBytes);
  memset(c->hrecv, 0, c->bufBytes);
  if (!O.device) {
    c->sendbuf = c->hsend, c->recvbuf = c->hrecv;
  } else {
    perfCuDeviceptr_t s = 0, r = 0;
    CUCHECK(c, perfCu.memAlloc(&s, c->bufBytes));
    c->sendbuf = (char*)(uintptr_t)s;
    CUCHECK(c, perfCu.memAlloc(&r, c->bufBytes));
    c->recvbuf = (char*)(uintptr_t)r;
    if (!O.streamNull) CUCHECK(c, perfCu.streamCreate(&c->stream, PERF_CU_STREAM_NON_BLOCKING));
  }
  if (O.reg) { /* -R */
    PCHECK(c, commRegister(c->comm, c->sendbuf, c->bufBytes, &c->regs[0]));
    PCHECK(c, commRegister(c->comm, c->recvbuf, c->bufBytes, &c->regs[1]));
  }
  return 0;
}

static void freeBuffers(rankCtx_t* c) {
  if (O.device) {
    if (c->sendbuf) perfCu.memFree((perfCuDeviceptr_t)(uintptr_t)c->sendbuf);
    if (c->recvbuf) perfCu.memFree((perfCuDeviceptr_t)(uintptr_t)c->recvbuf);
    if (c->stream) perfCu.streamDestroy(c->stream);
  }
  free(c->hsend);
  free(c->hrecv);
  free(c->meta);
}

int perfMetaAllReduce(rankCtx_t* c, size_t n, commRedOp_t op) {
  PCHECK(c, commAllReduce(c->meta, c->meta, n, commFloat64, op, c->comm, NULL));
  return 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* One rank                                                                                          */

/* Every rank's pid, GPU and host, for the header: each rank writes "pid\tdev\thost\tpci\tname" into its
 * own slot; a sum over uint8 gathers them. Rank 0 prints the header. */
static int header(rankCtx_t* c) {
  enum { slot = 192 };
  size_t bytes = (size_t)c->nranks * slot;
  unsigned char* info = calloc(bytes, 1);
  perfRankInfo_t* ranks = calloc((size_t)c->nranks, sizeof(perfRankInfo_t));
  if (!info || !ranks) {
    free(info), free(ranks);
    c->failed = 1;
    return -1;
  }
  char host[64] = "?", pci[24] = "host", name[64] = "host memory";
  gethostname(host, sizeof(host) - 1);
  if (O.nccl) host[strcspn(host, ".")] = 0; /* nccl-tests prints the name up to the first dot */
  if (c->cudaDev >= 0) {
    int dev = 0;
    if (perfCu.deviceGet(&dev, c->cudaDev) == 0) {
      if (perfCu.deviceGetPCIBusId(pci, sizeof(pci), dev) == 0) pci[strcspn(pci, ".")] = 0; /* no function */
      if (perfCu.deviceGetName(name, sizeof(name), dev) != 0) snprintf(name, sizeof(name), "?");
    }
  }
  snprintf((char*)info + (size_t)c->rank * slot, slot, "%d\t%d\t%s\t%s\t%s", (int)getpid(), c->cudaDev, host, pci,
           name);
  commResult_t res = commAllReduce(info, info, bytes, commUint8, commSum, c->comm, NULL);
  if (res != commSuccess) {
    free(info), free(ranks);
    perfRankFailure(c, "commAllReduce (rank information)", res);
    return -1;
  }
  if (c->rank == 0) {
    for (int r = 0; r < c->nranks; r++) {
      char* s = (char*)info + (size_t)r * slot;
      s[slot - 1] = 0;
      char* f[5] = {0};
      for (int k = 0; k < 5; k++) f[k] = strsep(&s, "\t");
      ranks[r].pid = f[0] ? atoi(f[0]) : 0;
      ranks[r].dev = f[1] ? atoi(f[1]) : -1;
      snprintf(ranks[r].host, sizeof(ranks[r].host), "%s", f[2] ? f[2] : "?");
      snprintf(ranks[r].pci, sizeof(ranks[r].pci), "%s", f[3] ? f[3] : "?");
      snprintf(ranks[r].name, sizeof(ranks[r].name), "%s", f[4] ? f[4] : "?");
    }
    perfReportHeader(c->nranks, ranks, graphIgnored);
  }
  free(info), free(ranks);
  return 0;
}

static int64_t freeMem(void) {
  size_t fr = 0, total = 0;
  return O.device && perfCu.memGetInfo(&fr, &total) == 0 ? (int64_t)fr : 0;
}

static int rankRun(rankCtx_t* c) {
  if (O.device) {
    int dev, ndev = 0;
    void* ctx;
    perfCuResult_t r = perfCu.init(0);
    if (r == 0) r = perfCu.deviceGetCount(&ndev);
    if (r != 0 || ndev < 1) {
      fprintf(stderr, "# rank %d: %s: %s: no usable CUDA device (%s); %s runs on host memory\n", c->rank, memFlag(),
              commGetErrorString(commInvalidUsage), r ? perfCuErr(r) : "the driver counts none",
              O.nccl ? "--buffers host" : "-M host");
      c->failed = 1;
      return -1;
    }
    /* Several ranks may share a GPU (-t, -g, -np or a launcher with more local ranks than GPUs);
     * NCCL_TESTS_DEVICE names the first GPU, as in nccl-tests. */
    const char* first = O.nccl ? getenv("NCCL_TESTS_DEVICE") : NULL;
    c->cudaDev = ((first ? atoi(first) : 0) + c->localRank) % ndev;
    CUCHECK(c, perfCu.deviceGet(&dev, c->cudaDev));
    CUCHECK(c, perfCu.primaryCtxRetain(&ctx, dev));
    CUCHECK(c, perfCu.ctxSetCurrent(ctx));
  }
  int64_t mem[4] = {freeMem(), 0, 0, 0};
  PCHECK(c, commInitRank(&c->comm, c->nranks, c->id, c->rank));
  mem[1] = freeMem();
  /* Device buffers go to the library as they are: it says itself whether it takes them. */
  if (allocBuffers(c)) return -1;
  mem[2] = freeMem();
  if (c->rank == 0 && perfReportOpenJson()) {
    c->failed = 1;
    return -1;
  }
  if (header(c) || perfRunSweeps(c)) return -1;
  mem[3] = freeMem();
  /* Footer: nccl-tests counts the checks that found wrong elements, over the ranks. */
  c->meta[0] = c->errTests;
  if (perfMetaAllReduce(c, 1, commSum)) return -1;
  double errors = O.nccl ? c->meta[0] : c->wrongTotal;
  int bad = errors > 0;
  if (c->rank == 0) {
    double avg = O.nccl ? c->busbwSum / (double)c->busbwCount : c->busbwCount ? c->busbwSum / (double)c->busbwCount : 0;
    if (perfReportFooter(errors, avg)) bad = 1;
    if (O.memReport) {
      if (O.device) perfReportMemory(mem[0] - mem[1], mem[1] - mem[2], mem[2] > mem[3] ? mem[2] - mem[3] : 0);
      else perfReportMemory(-1, 0, 0);
    }
    perfReportEnd(commGetLastError(c->comm));
    if (bad) resultsBad = 1;
  }
  for (int k = 0; k < 2; k++) {
    if (c->regs[k]) PCHECK(c, commDeregister(c->comm, c->regs[k]));
    c->regs[k] = NULL;
  }
  PCHECK(c, commFinalize(c->comm));
  commResult_t res = commDestroy(c->comm);
  c->comm = NULL;
  if (res != commSuccess) {
    perfRankFailure(c, "commDestroy", res);
    return -1;
  }
  return bad ? 1 : 0;
}

/* One rank on the calling thread (launch.c starts them); nonzero when it failed. */
static int runRank(const commUniqueId* id, int rank, int nranks, int localRank) {
  rankCtx_t c;
  memset(&c, 0, sizeof(c));
  c.rank = rank, c.nranks = nranks, c.localRank = localRank, c.cudaDev = -1, c.id = *id;
  watchRank(&c, 1);
  int rc = rankRun(&c);
  watchRank(&c, 0);
  if (rc < 0 && c.comm) commAbort(c.comm); /* let the peers see the failure instead of waiting */
  if (rc < 0) c.comm = NULL;
  if (rc) c.failed = 1;
  freeBuffers(&c);
  return c.failed;
}

static int checkRanks(int nranks) {
  if (perfColl->usesRoot && !O.allRoots && O.root >= nranks) {
    fprintf(stderr, "%s: root %d is not a rank of %d\n", perfProg, O.root, nranks);
    return -1;
  }
  if (perfColl->powerOfTwo && (nranks & (nranks - 1)) && !O.nccl) {
    fprintf(stderr, "%s: %s needs a power-of-two number of ranks, not %d\n", perfProg, perfColl->name, nranks);
    return -1;
  }
  return 0;
}

static int lastIs(const char* dir, size_t len, const char* name) {
  while (len > 1 && dir[len - 1] == '/') len--;
  size_t start = len;
  while (start > 0 && dir[start - 1] != '/') start--;
  return len - start == strlen(name) && !strncmp(dir + start, name, len - start);
}

/* nccl-tests' flags and output: under nccl-tests' own names (those libcomm does not share), and under every
 * name when run from a folder called nccl-tests (perf/nccl-tests/ in the build, bin/nccl-tests/ installed):
 * the folder of argv[0], or, for a bare name, the first folder of PATH that has it; "./x" from inside such a
 * folder counts too (the folder's real path). */
static int ncclStyle(const char* argv0, const char* base) {
  static const char* const names[] = {"all_reduce_perf", "all_gather_perf", "reduce_scatter_perf"};
  for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
    if (!strcmp(base, names[k])) return 1;
  char dir[4096] = "", real[4096];
  if (base != argv0) {
    snprintf(dir, sizeof(dir), "%.*s", (int)(base - argv0), argv0);
  } else {
    const char* path = getenv("PATH");
    while (path && *path && !dir[0]) {
      size_t n = strcspn(path, ":");
      char cand[4096];
      snprintf(cand, sizeof(cand), "%.*s/%s", (int)n, path, base);
      if (n && access(cand, X_OK) == 0) snprintf(dir, sizeof(dir), "%.*s", (int)n, path);
      path += n + (path[n] == ':');
    }
  }
  if (!dir[0]) return 0;
  if (lastIs(dir, strlen(dir), "nccl-tests")) return 1;
  return realpath(dir, real) && lastIs(real, strlen(real), "nccl-tests");
}

int perfMain(const perfColl_t* c, int argc, char** argv) {
  perfColl = c;
  perfProg = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  int nccl = ncclStyle(argv[0], perfProg);
  int pr = nccl ? perfParseNcclOptions(argc, argv, perfProg, &O) : perfParseOptions(argc, argv, perfProg, &O);
  if (pr) return pr > 0 ? 0 : 2;
  if (!nccl && O.jsonPath) {
    const char* dot = strrchr(O.jsonPath, '.');
    if (!dot || strchr(dot, '/') || strcasecmp(dot, ".json")) {
      fprintf(stderr, "%s: -J %s: the name must end in .json\n", perfProg, O.jsonPath);
      return 2;
    }
  }
  if (perfBuildTables()) {
    fprintf(stderr, "%s: out of memory\n", perfProg);
    return 1;
  }
  if (nccl && (getenv("NCCL_TESTS_SPLIT") || getenv("NCCL_TESTS_SPLIT_MASK")))
    fprintf(stderr, "%s: NCCL_TESTS_SPLIT is not provided: every rank runs in one communicator\n", perfProg);
  if (O.device == memAuto) O.device = memAutoPicked = perfGpuPresent(); /* no GPU: host, silently */
  if (!O.device && O.graphs > 0) {                                      /* libcomm's names: rank 0 says so */
    if (O.nccl) fprintf(stderr, "%s: -G needs device buffers: ignored with host buffers\n", perfProg);
    graphIgnored = !O.nccl, O.graphs = 0;
  }
  if (O.device && perfCudaLoad(perfProg, memFlag(), O.graphs)) return 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  perfReportInit(&O, c, perfProg, argc, argv);
  perfLaunch_t l = {perfProg, O.nprocs, O.nthreads * O.ngpus, O.hostPerProc, checkRanks, runRank};
  int rc = perfLaunch(&l);
  return rc == 1 && O.nccl && resultsBad ? 7 : rc; /* nccl-tests: testNumResults */
}
