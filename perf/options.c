/*
 * libcomm perf harness: the command line of the libcomm names (allreduce_perf, ...): nccl-tests' names for
 * the common flags (-b -e -f -i -n -w -c -d -o -r -G -t -J) and libcomm's own (-M -np -H). nccl_options.c
 * parses nccl-tests' flags for the nccl-tests names. Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "options.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "launch.h"

static perfOpts_t opts; /* what parseArgs fills */
static const char* progName;

static void usage(FILE* f) {
  fprintf(f,
          "usage: %s [options]\n"
          "  -b, --minbytes <size>     smallest size (default 8); K/M/G suffixes\n"
          "  -e, --maxbytes <size>     largest size (default 64M)\n"
          "  -f, --stepfactor <n>      multiply the size by n each step (default 2)\n"
          "  -i, --stepbytes <size>    add this many bytes each step (used when -f is absent or 1; default 1M)\n"
          "  -n, --iters <n>           timed iterations (default 20)\n"
          "  -w, --warmup_iters <n>    warmup iterations (default 5)\n"
          "  -c, --check <0|1>         check results (default 1)\n"
          "  -d, --datatype <type>     int8 uint8 int32 uint32 int64 uint64 half float16 float bfloat16 double\n"
          "                            float8e4m3 float8e5m2, or all (default float)\n"
          "  -o, --op <op>             sum prod max min avg premulsum, or all (default sum)\n"
          "  -r, --root <rank>         root of broadcast and reduce (default 0)\n"
          "  -M, -m, --memory <host|device|auto>\n"
          "                            buffer memory (default auto: device when a GPU is present, else host)\n"
          "  -G, --cudagraph <n>       device memory: capture the -n calls of each size into one CUDA graph and\n"
          "                            time n launches of it (time per call = elapsed / (n * iters)); 0: plain\n"
          "                            calls (default 0). Ignored with host memory\n"
          "  -np, --nprocs <n>         fork n local processes\n"
          "  -t, --nthreads <n>        ranks per process, one thread each (default 1)\n"
          "  -H, --hostperproc <0|1>   with -np: 1 makes each process a host of its own (COMM_HOSTID), so\n"
          "                            ranks of different processes talk over the network (default 0)\n"
          "  -J, --output_file <file>  also write the results as nccl-tests' JSON (the name must end in .json;\n"
          "                            an existing file is kept and FILE.0, FILE.1, ... is written instead)\n"
          "  -h, --help\n"
          "Without -np, ranks come from the environment: COMM_RANK/COMM_NRANKS/COMM_ROOT; torchrun's\n"
          "RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT; or, when COMM_ROOT is set, OMPI_COMM_WORLD_RANK/SIZE,\n"
          "PMI_RANK/PMI_SIZE or SLURM_PROCID/SLURM_NTASKS. Otherwise one process runs -t ranks.\n"
          "With nccl-tests' flags and output: perf/nccl-tests/<name> (all_reduce_perf, ...), see --help there.\n",
          progName);
}

int perfParseSize(const char* s, size_t* out) {
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno || v < 0) return -1;
  double mul = 1;
  switch (*end) {
    case 'k':
    case 'K': mul = 1024.0, end++; break;
    case 'm':
    case 'M': mul = 1024.0 * 1024, end++; break;
    case 'g':
    case 'G': mul = 1024.0 * 1024 * 1024, end++; break;
    case 't':
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024, end++; break;
    default: break;
  }
  if (*end == 'b' || *end == 'B') end++;
  if (*end) return -1;
  *out = (size_t)(v * mul);
  return 0;
}

int perfParseInt(const char* s, int minv, int* out) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < minv || v > INT32_MAX) return -1;
  *out = (int)v;
  return 0;
}

static int parseType(const char* s) {
  if (!strcasecmp(s, "all")) {
    for (int t = 0; t < commNumTypes; t++) opts.types[t] = t;
    opts.ntypes = commNumTypes;
    return 0;
  }
  for (int t = 0; t < commNumTypes; t++) {
    if (!strcasecmp(s, perfTypes[t].name) || !strcasecmp(s, perfTypes[t].alias)) {
      opts.types[0] = t, opts.ntypes = 1;
      return 0;
    }
  }
  return -1;
}

static int parseOp(const char* s) {
  if (!strcasecmp(s, "all")) {
    for (int o = 0; o < opNum; o++) opts.ops[o] = o;
    opts.nops = opNum;
    return 0;
  }
  for (int o = 0; o < opNum; o++) {
    if (!strcasecmp(s, perfOpNames[o])) {
      opts.ops[0] = o, opts.nops = 1;
      return 0;
    }
  }
  return -1;
}

static int parseArgs(int argc, char** argv) {
  /* s2: a second short name (-M and -m both set the memory). */
  static const struct {
    const char* s;
    const char* s2;
    const char* l;
  } names[] = {{"-b", NULL, "--minbytes"},   {"-e", NULL, "--maxbytes"},  {"-f", NULL, "--stepfactor"},
               {"-i", NULL, "--stepbytes"},  {"-n", NULL, "--iters"},     {"-w", NULL, "--warmup_iters"},
               {"-c", NULL, "--check"},      {"-d", NULL, "--datatype"},  {"-o", NULL, "--op"},
               {"-r", NULL, "--root"},       {"-M", "-m", "--memory"},    {"-np", NULL, "--nprocs"},
               {"-t", NULL, "--nthreads"},   {"-G", NULL, "--cudagraph"}, {"-H", NULL, "--hostperproc"},
               {"-J", NULL, "--output_file"}};
  int factorSet = 0, stepSet = 0;
  opts = (perfOpts_t){.minBytes = 8,
                      .maxBytes = 64u << 20,
                      .stepBytes = 1u << 20,
                      .stepFactor = 2,
                      .iters = 20,
                      .warmup = 5,
                      .check = 1,
                      .device = memAuto,
                      .nthreads = 1,
                      .types = {commFloat32},
                      .ntypes = 1,
                      .ops = {opSum},
                      .nops = 1,
                      .ngpus = 1,
                      .aggIters = 1,
                      .runCycles = 1,
                      .average = avgMax};
  for (int a = 1; a < argc; a++) {
    const char* arg = argv[a];
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      usage(stdout);
      return 1;
    }
    int which = -1;
    const char* val = NULL;
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
      size_t ll = strlen(names[k].l);
      if (!strcmp(arg, names[k].s) || (names[k].s2 && !strcmp(arg, names[k].s2)) || !strcmp(arg, names[k].l)) {
        which = (int)k;
        break;
      }
      if (!strncmp(arg, names[k].l, ll) && arg[ll] == '=') {
        which = (int)k, val = arg + ll + 1;
        break;
      }
    }
    if (which < 0) {
      /* A flag only nccl-tests has: say where those are taken. */
      static const char ncclOnly[] = "gazyTCRNpSu";
      int nccl = arg[0] == '-' && arg[1] && !arg[2] && strchr(ncclOnly, arg[1]);
      fprintf(stderr, "%s: unknown option '%s'%s%s%s\n", progName, arg,
              nccl ? " (nccl-tests' flags are taken under nccl-tests' names: perf/nccl-tests/" : "",
              nccl ? progName : "", nccl ? ")" : "");
      return -1;
    }
    if (!val) {
      if (a + 1 >= argc) {
        fprintf(stderr, "%s: option '%s' needs a value\n", progName, arg);
        return -1;
      }
      val = argv[++a];
    }
    int bad = 0, iv = 0;
    switch (which) {
      case 0: bad = perfParseSize(val, &opts.minBytes); break;
      case 1: bad = perfParseSize(val, &opts.maxBytes); break;
      case 2:
        bad = perfParseInt(val, 1, &iv);
        opts.stepFactor = (size_t)iv;
        factorSet = 1;
        break;
      case 3:
        bad = perfParseSize(val, &opts.stepBytes) || opts.stepBytes == 0;
        stepSet = 1;
        break;
      case 4: bad = perfParseInt(val, 1, &opts.iters); break;
      case 5: bad = perfParseInt(val, 0, &opts.warmup); break;
      case 6: bad = perfParseInt(val, 0, &opts.check) || opts.check > 1; break;
      case 7: bad = parseType(val); break;
      case 8: bad = parseOp(val); break;
      case 9: bad = perfParseInt(val, 0, &opts.root); break;
      case 10:
        if (!strcmp(val, "host")) opts.device = memHost;
        else if (!strcmp(val, "device")) opts.device = memDevice;
        else if (!strcmp(val, "auto")) opts.device = memAuto;
        else bad = 1;
        break;
      case 11: bad = perfParseInt(val, 1, &opts.nprocs); break;
      case 12: bad = perfParseInt(val, 1, &opts.nthreads); break;
      case 13: bad = perfParseInt(val, 0, &opts.graphs); break;
      case 14: bad = perfParseInt(val, 0, &opts.hostPerProc) || opts.hostPerProc > 1; break;
      case 15: opts.jsonPath = val; break;
      default: bad = 1; break;
    }
    if (bad) {
      fprintf(stderr, "%s: bad value '%s' for %s\n", progName, val, arg);
      return -1;
    }
  }
  if (stepSet && !factorSet) opts.stepFactor = 1; /* -i alone: additive steps */
  if (opts.maxBytes < opts.minBytes) {
    fprintf(stderr, "%s: maxbytes (%zu) is below minbytes (%zu)\n", progName, opts.maxBytes, opts.minBytes);
    return -1;
  }
  if (opts.stepFactor > 1 && opts.minBytes == 0) opts.minBytes = 1;
  return 0;
}

int perfParseOptions(int argc, char** argv, const char* prog, perfOpts_t* out) {
  progName = prog;
  int r = parseArgs(argc, argv);
  *out = opts;
  return r;
}
