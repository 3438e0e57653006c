/*
 * libcomm perf harness: nccl-tests' command line, for the tools run under nccl-tests' names
 * (all_reduce_perf, ..., and every name in perf/nccl-tests/): nccl-tests' flags with their meanings and
 * defaults, parsed with getopt_long as nccl-tests does (attached values, long names, abbreviations).
 * Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "options.h"

/* nccl-tests' names of the data types (indexed by commDataType_t) and of the operations (by opSum..). */
const char* const perfNcclTypeNames[commNumTypes] = {"int8", "uint8", "int32",  "uint32",   "int64",  "uint64",
                                                     "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
const char* const perfNcclOpNames[opNum] = {"sum", "prod", "max", "min", "avg", "mulsum"};

static const char* progName;

static void usage(void) {
  printf("USAGE: %s\n"
         "  -t,--nthreads <n>          threads per process (default 1)\n"
         "  -g,--ngpus <n>             GPUs per thread (default 1); each is a rank on a thread of its own here,\n"
         "                             on GPU (process's first + index) with device buffers, on host memory without\n"
         "  -b,--minbytes <size>       smallest size (default 32M); K/M/G suffixes\n"
         "  -e,--maxbytes <size>       largest size (default 32M)\n"
         "  -i,--stepbytes <size>      add this many bytes each step (default 1M)\n"
         "  -f,--stepfactor <n>        multiply the size by n each step (default: off, -i steps)\n"
         "  -n,--iters <n>             timed iterations (default 20)\n"
         "  -m,--agg_iters <n>         calls aggregated in one group per iteration (default 1)\n"
         "  -w,--warmup_iters <n>      warmup iterations of every size before the sweep (default 1)\n"
         "  -N,--run_cycles <n>        run the sweep n times, printing each; 0 = until killed (default 1)\n"
         "  -p,--parallel_init <0/1>   accepted: every rank initialises on its own thread (default 0)\n"
         "  -c,--check <n>             checking calls after the timed ones, each checked (default 1; 0 none)\n"
         "  -o,--op <sum/prod/min/max/avg/mulsum/all>  reduction (default sum)\n"
         "  -d,--datatype <type/all>   int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 f8e4m3\n"
         "                             f8e5m2 (default float)\n"
         "  -r,--root <root>           root of broadcast, reduce, gather, scatter; -1: every rank (default 0)\n"
         "  -z,--blocking <0/1/2/3>    1 wait and barrier after each call (-m), 2 wait only, 3 wait and barrier\n"
         "                             after each iteration (-n), time without the barrier (default 0)\n"
         "  -y,--stream_null <0/1>     device buffers: calls on the default stream (default 0)\n"
         "  -T,--timeout <seconds>     a call waiting longer ends the process (exit 4) (default 0: none)\n"
         "  -G,--cudagraph <n>         device buffers: capture the timed calls in a CUDA graph, launch it n times\n"
         "  -C,--report_cputime <0/1>  report the time to issue the calls (default 0)\n"
         "  -S,--report_timestamps <0/1>  a time stamp after each row (default 0)\n"
         "  -J,--output_file <file>    write JSON there (name ending in .json; an existing file is kept and\n"
         "                             FILE.0, FILE.1, ... is written instead)\n"
         "  -a,--average <0/1/2/3>     time reported: 0 rank 0's, 1 the ranks' mean, 2 min, 3 max (default 1)\n"
         "  -R,--local_register <0/1/2>  register the buffers (commRegister; 2 is registered as 1) (default 0)\n"
         "  -M,--memory <0/1>          report GPU memory use (device buffers) (default 0)\n"
         "  -u,--unalign <n>           buffers start n elements past their alignment (default 0)\n"
         "  -x, -D 0, -V, -I, -K       accepted and ignored (-D above 0 is not provided)\n"
         "  -h,--help\n"
         "libcomm's additions: --buffers <host|device|auto> (default auto: device where a GPU is),\n"
         "  -np,--nprocs <n> (fork n local processes), --hostperproc <0/1> (each forked process a host).\n"
         "Ranks also come from a launcher (mpirun, srun, torchrun) with COMM_ROOT=host:port set; see\n"
         "allreduce_perf --help.\n",
         progName);
}

static int num(const char* s, long minv, long maxv, int* out) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 0);
  if (end == s || *end || errno || v < minv || v > maxv) return -1;
  *out = (int)v;
  return 0;
}

static void setType(perfOpts_t* o, const char* s) {
  if (!strcmp(s, "all")) {
    for (int t = 0; t < commNumTypes; t++) o->types[t] = t;
    o->ntypes = commNumTypes;
    return;
  }
  o->ntypes = 1;
  for (int t = 0; t < commNumTypes; t++) {
    if (!strcmp(s, perfNcclTypeNames[t]) || !strcasecmp(s, perfTypes[t].name) || !strcasecmp(s, perfTypes[t].alias)) {
      o->types[0] = t;
      return;
    }
  }
  printf("invalid type %s, defaulting to %s .. \n", s, perfNcclTypeNames[commFloat32]); /* as nccl-tests */
  o->types[0] = commFloat32;
}

static void setOp(perfOpts_t* o, const char* s) {
  if (!strcmp(s, "all")) {
    for (int k = 0; k < opNum; k++) o->ops[k] = k;
    o->nops = opNum;
    return;
  }
  o->nops = 1;
  for (int k = 0; k < opNum; k++) {
    if (!strcmp(s, perfNcclOpNames[k]) || !strcasecmp(s, perfOpNames[k])) {
      o->ops[0] = k;
      return;
    }
  }
  printf("invalid op %s, defaulting to %s .. \n", s, perfNcclOpNames[opSum]);
  o->ops[0] = opSum;
}

enum { optNprocs = 1000, optHostPerProc, optBuffers };

int perfParseNcclOptions(int argc, char** argv, const char* prog, perfOpts_t* out) {
  static const struct option longopts[] = {{"nthreads", required_argument, 0, 't'},
                                           {"ngpus", required_argument, 0, 'g'},
                                           {"minbytes", required_argument, 0, 'b'},
                                           {"maxbytes", required_argument, 0, 'e'},
                                           {"stepbytes", required_argument, 0, 'i'},
                                           {"stepfactor", required_argument, 0, 'f'},
                                           {"iters", required_argument, 0, 'n'},
                                           {"agg_iters", required_argument, 0, 'm'},
                                           {"warmup_iters", required_argument, 0, 'w'},
                                           {"run_cycles", required_argument, 0, 'N'},
                                           {"parallel_init", required_argument, 0, 'p'},
                                           {"check", required_argument, 0, 'c'},
                                           {"op", required_argument, 0, 'o'},
                                           {"datatype", required_argument, 0, 'd'},
                                           {"root", required_argument, 0, 'r'},
                                           {"blocking", required_argument, 0, 'z'},
                                           {"stream_null", required_argument, 0, 'y'},
                                           {"timeout", required_argument, 0, 'T'},
                                           {"cudagraph", required_argument, 0, 'G'},
                                           {"report_cputime", required_argument, 0, 'C'},
                                           {"report_timestamps", required_argument, 0, 'S'},
                                           {"output_file", required_argument, 0, 'J'},
                                           {"average", required_argument, 0, 'a'},
                                           {"local_register", required_argument, 0, 'R'},
                                           {"cta_policy", required_argument, 0, 'x'},
                                           {"device_implementation", required_argument, 0, 'D'},
                                           {"device_cta_count", required_argument, 0, 'V'},
                                           {"memory", required_argument, 0, 'M'},
                                           {"unalign", required_argument, 0, 'u'},
                                           {"per_iter_timing", required_argument, 0, 'I'},
                                           {"per_iter_skip", required_argument, 0, 'K'},
                                           {"nprocs", required_argument, 0, optNprocs},
                                           {"hostperproc", required_argument, 0, optHostPerProc},
                                           {"buffers", required_argument, 0, optBuffers},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  progName = prog;
  perfOpts_t o = {.minBytes = 32u << 20,
                  .maxBytes = 32u << 20,
                  .stepBytes = 1u << 20,
                  .stepFactor = 1,
                  .iters = 20,
                  .warmup = 1,
                  .check = 1,
                  .device = memAuto,
                  .nthreads = 1,
                  .types = {commFloat32},
                  .ntypes = 1,
                  .ops = {opSum},
                  .nops = 1,
                  .nccl = 1,
                  .ngpus = 1,
                  .aggIters = 1,
                  .runCycles = 1,
                  .average = avgMean};
  /* getopt_long reorders its vector: work on a copy (the JSON lists the arguments as given), in which
   * libcomm's "-np N" becomes "--nprocs N" (getopt would read it as "-n p"). */
  char** av = calloc((size_t)argc + 1, sizeof(char*));
  if (!av) return -1;
  for (int a = 0; a < argc; a++) av[a] = !strcmp(argv[a], "-np") ? "--nprocs" : argv[a];
  int rc = 0, v = 0;
  optind = 1;
  for (;;) {
    int li = 0;
    int c = getopt_long(argc, av, "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:", longopts, &li);
    if (c == -1) break;
    int bad = 0;
    switch (c) {
      case 't': bad = num(optarg, 1, 1 << 16, &o.nthreads); break;
      case 'g': bad = num(optarg, 1, 1 << 16, &o.ngpus); break;
      case 'b': bad = perfParseSize(optarg, &o.minBytes); break;
      case 'e': bad = perfParseSize(optarg, &o.maxBytes); break;
      case 'i': bad = perfParseSize(optarg, &o.stepBytes); break;
      case 'f':
        bad = num(optarg, 0, 1 << 30, &v);
        o.stepFactor = (size_t)v;
        break;
      case 'n': bad = num(optarg, 1, 1 << 30, &o.iters); break;
      case 'm': bad = num(optarg, 1, 1 << 20, &o.aggIters); break;
      case 'w': bad = num(optarg, 0, 1 << 30, &o.warmup); break;
      case 'N': bad = num(optarg, 0, 1 << 30, &o.runCycles); break;
      case 'p': bad = num(optarg, 0, 1, &o.parallelInit); break;
      case 'c': bad = num(optarg, 0, 1 << 20, &o.check); break;
      case 'o': setOp(&o, optarg); break;
      case 'd': setType(&o, optarg); break;
      case 'r':
        if (!strcmp(optarg, "all")) v = -1;
        else bad = num(optarg, -1, 1 << 30, &v);
        o.allRoots = v < 0, o.root = v < 0 ? 0 : v;
        break;
      case 'z': bad = num(optarg, 0, 3, &o.blocking); break;
      case 'y': bad = num(optarg, 0, 1, &o.streamNull); break;
      case 'T': bad = num(optarg, 0, 1 << 30, &o.timeout); break;
      case 'G': bad = num(optarg, 0, 1 << 30, &o.graphs); break;
      case 'C': bad = num(optarg, 0, 1, &o.cputime); break;
      case 'S': bad = num(optarg, 0, 1, &o.timestamps); break;
      case 'J': o.jsonPath = optarg; break;
      case 'a': bad = num(optarg, 0, 3, &o.average); break;
      case 'R':
        bad = num(optarg, 0, 2, &o.reg);
        if (!bad && o.reg == 2) {
          printf("Option -R 2 (symmetric) is not provided by libcomm's perf tools. Defaulting to local registration\n");
          o.reg = 1;
        }
        break;
      case 'M': bad = num(optarg, 0, 1, &o.memReport); break;
      case 'u': bad = num(optarg, 0, 1 << 20, &o.unalign); break;
      case 'D':
        bad = num(optarg, 0, 1 << 20, &v);
        if (!bad && v > 0) {
          fprintf(stderr, "%s: device implementations (-D %d) are not provided by libcomm's perf tools\n", prog, v);
          rc = -1;
        }
        break;
      case 'I':
        bad = num(optarg, 0, 1, &v);
        if (!bad && v) fprintf(stderr, "%s: per-iteration timing (-I) is not provided; ignored\n", prog);
        break;
      case 'x':
      case 'V':
      case 'K': bad = num(optarg, -1, 1 << 20, &v); break; /* accepted, no effect */
      case optNprocs: bad = num(optarg, 1, 1 << 16, &o.nprocs); break;
      case optHostPerProc: bad = num(optarg, 0, 1, &o.hostPerProc); break;
      case optBuffers:
        if (!strcmp(optarg, "host")) o.device = memHost;
        else if (!strcmp(optarg, "device")) o.device = memDevice;
        else if (!strcmp(optarg, "auto")) o.device = memAuto;
        else bad = 1;
        break;
      case 'h':
        usage();
        rc = 1;
        break;
      default: /* getopt said what it did not understand */
        fprintf(stderr, "%s: see %s -h\n", prog, prog);
        rc = -1;
        break;
    }
    if (bad) {
      fprintf(stderr, "%s: invalid value '%s' for %s\n", prog, optarg,
              c >= optNprocs ? longopts[li].name : (char[]){'-', (char)c, 0});
      rc = -1;
    }
    if (rc) break;
  }
  if (rc == 0 && optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", prog, av[optind]);
    rc = -1;
  }
  free(av);
  if (rc) return rc;
  if (o.minBytes > o.maxBytes) {
    fprintf(stderr, "invalid sizes for 'minbytes' and 'maxbytes': %zu > %zu\n", o.minBytes, o.maxBytes);
    return -1;
  }
  if (o.stepFactor <= 1 && o.stepBytes == 0 && o.maxBytes > o.minBytes) {
    fprintf(stderr, "%s: -i 0 without -f never reaches maxbytes\n", prog);
    return -1;
  }
  if (o.blocking == 3 && o.graphs >= 1) {
    fprintf(stderr, "blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling.\n");
    o.blocking = 0;
  }
  *out = o;
  return 0;
}
