/* comm_sim: what a collective costs on a machine of any size, per algorithm and protocol, without running it.
 *
 *   comm_sim -c allreduce -n 1024 -R 8 -b 8 -e 64M -f 8        (see usage() or -h for every option)
 *
 * For every size and algorithm x protocol it builds the schedules of all ranks (the generators in
 * algorithms/, with the arguments src/core/plan.c would give them) and prints
 *  - predicted(us): the tuner's cost model (commTunePredict, src/tune/model.c), '*' on the choice the
 *    tuner would make among all algorithms and protocols (lowest prediction, one-shot only where the
 *    library allows it),
 *  - simulated(us): a discrete-event simulation of those schedules with the model's link constants
 *    (tools/sim_trace.c says what it models),
 *  - steps/ch: the longest step list of any (rank, channel),
 *  - the bytes on the busiest links: the most any rank sends to ranks of its own node (rank-intra) and of
 *    other nodes (rank-inter), and the most any node sends to other nodes (node-inter: what its NIC
 *    carries),
 *  - verified: commVerifyColl's verdict (matching, deadlock freedom, exact results).
 * -T writes the simulated run of one algorithm as a Chrome trace JSON (open it in ui.perfetto.dev).
 *
 * Scale: the simulation, the byte counts and the verifier all need every rank's schedule. Rank 0, the
 * root, rank n/2 and rank n-1 are built first to estimate the work; above -L pieces (sum over ranks of the
 * pieces their steps move) the simulation is skipped, above 8 x -L steps the byte counts too (steps/ch then
 * comes from the sampled ranks, marked '~'). The verifier runs by default up to -L / 8 pieces and 4096
 * ranks (-x: always, -X: never). The prediction is always printed. LL and Simple rows that would build
 * the same schedules (same step size) over links of the same speed are computed once.
 *
 * Exit status: 0; 1 when a schedule fails to build, fails verification or stalls in the simulation;
 * 2 on bad options. */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "debug.h"
#include "param.h"
#include "reduce.h"
#include "algorithms.h"
#include "sim_trace.h"
#include "tune.h"

/* The executor's FIFO geometry: COMM_NSLOTS (transports/transport.h) slots of COMM_BUFFSIZE / 8. */
#define SIM_NSLOTS 8
#define SIM_DEFAULT_SLOT (512 * 1024)
/* The library's default COMM_ALLREDUCE_ONESHOT_MAX (src/core/comm.c): the tuner considers one-shot only
 * up to this many bytes. */
#define SIM_ONESHOT_MAX_DEFAULT (256 * 1024)
#define SIM_DEFAULT_LIMIT (16u << 20)
#define SIM_DEFAULT_MAX_EVENTS 200000
#define SIM_STATS_FACTOR 8 /* byte counts are made up to this many times the simulation limit (in steps) */
/* Automatic verification (no -x/-X): up to -L / SIM_VERIFY_FRACTION pieces (about a second) and this many
 * ranks (the verifier's rank sets grow with n). */
#define SIM_VERIFY_FRACTION 8
#define SIM_VERIFY_MAX_RANKS 4096

static const struct {
  const char* name;
  commFunc_t func;
  int perRankBlocks; /* count is per rank: the sizes are the total of n blocks */
} funcs[] = {{"allreduce", commFuncAllReduce, 0},
             {"broadcast", commFuncBroadcast, 0},
             {"reduce", commFuncReduce, 0},
             {"allgather", commFuncAllGather, 1},
             {"reducescatter", commFuncReduceScatter, 1},
             {"alltoall", commFuncAllToAll, 1}};
#define NFUNCS ((int)(sizeof(funcs) / sizeof(funcs[0])))

static const char* const algoKeys[commNumAlgos] = {"ring", "tree", "colltree", "pat", "oneshot", "pairwise", "collnet"};
static const char* const protoKeys[commNumProtos] = {"ll", "simple"};
static const char* const linkKeys[COMM_NUM_LINKS] = {"shm", "net"};

typedef struct {
  int fi; /* index in funcs[] */
  commFunc_t func;
  int nRanks, perNode, nNodes, maxLocal;
  int* nodeOf;
  int* ring;
  commDataType_t type;
  size_t elt;
  int root;
  size_t slotBytes;
  int channels; /* -C, or 0: the tuner's */
  int maxCh;    /* the model's maxChannels */
  commLinkKind_t intra, inter;
  uint32_t algoMask, protoMask;
  int algosExplicit;
  int verify; /* -1: automatic */
  int print;
  const char* tracePath;
  size_t simLimit, maxEvents;
  size_t oneShotMax;
  commTuneModel model;
} simOpts;

enum { SIM_NONE = 0, SIM_OK, SIM_SKIPPED, SIM_STALLED };
enum { VER_OFF = 0, VER_OK, VER_FAILED };

typedef struct {
  int algo, proto, nChannels;
  double predicted;
  int picked;
  int failed; /* building the schedules failed */
  char note[640];
  size_t stepsPerCh;
  int stepsExact;
  int haveStats;
  uint64_t rankIntra, rankInter, nodeInter;
  int simState;
  double simUs;
  int verState;
} rowResult;

static void usage(FILE* f, const char* prog) {
  fprintf(f,
          "usage: %s -c COLL -n NRANKS [options]\n"
          "  -c COLL     allreduce | broadcast | reduce | allgather | reducescatter | alltoall\n"
          "  -n NRANKS   ranks\n"
          "  -R L        ranks per node (default 1: every rank a node of its own); node of rank r = r / L\n"
          "              (a topology file will replace this once the format exists)\n"
          "  -N COUNT    one size, as the API count (per rank for allgather/reducescatter/alltoall)\n"
          "  -b MIN -e MAX -f FACTOR\n"
          "              size sweep in bytes (K/M/G suffixes: powers of 1024), as the perf tools count them:\n"
          "              allreduce/broadcast/reduce: the buffer's bytes (count = bytes / type size);\n"
          "              allgather/reducescatter/alltoall: the total of the n blocks (count per rank =\n"
          "              bytes / n / type size, at least 1). Default: -b 8 -e 64M -f 8 without -N.\n"
          "  -a ALGOS    ring, tree, colltree, pat, oneshot, pairwise, a comma list, or all (default: every\n"
          "              algorithm that implements the collective)\n"
          "  -P PROTO    ll, simple or all (default all)\n"
          "  -C CH       channels (default: what the tuner would use, commTuneChannels)\n"
          "  -M CH       the model's channel limit (the communicator's COMM_NCHANNELS; default as the library\n"
          "              on a host of 8+ cores: 2 when ranks span nodes or intra=net, else 1)\n"
          "  -t TYPE     datatype (default float32)\n"
          "  -r ROOT     root of broadcast/reduce (default 0)\n"
          "  -s BYTES    FIFO slot size (default 512K = COMM_BUFFSIZE / %d); a connection holds %d slots\n"
          "  -k LINKS    link classes, e.g. intra=shm,inter=net (the default); shm or net each\n"
          "  -x / -X     verify every schedule with commVerifyColl / never (default: up to -L / %d pieces\n"
          "              and %d ranks; '-' in the table where it did not run)\n"
          "  -L PIECES   simulate only up to this many pieces (slot-sized transfers) summed over ranks\n"
          "              (default %u); the byte counts go up to %d x as many steps; above: prediction only\n"
          "  -T FILE     write a Chrome trace JSON of the simulated run of one algorithm (the first in the\n"
          "              table that simulates, with its protocol of lower prediction) at the first size\n"
          "  -E EVENTS   most step events in the trace (default %d; whole (rank, channel) rows, rank order)\n"
          "  -p          print rank 0's schedule (first size, every algorithm and protocol)\n"
          "Columns: predicted and simulated time (us; '*': the tuner's pick), steps per channel (max over\n"
          "ranks; '~': from sampled ranks only), bytes the busiest rank sends within its node and across nodes,\n"
          "bytes the busiest node sends across nodes (its NIC), and the verifier's verdict.\n",
          prog, SIM_NSLOTS, SIM_NSLOTS, SIM_VERIFY_FRACTION, SIM_VERIFY_MAX_RANKS, SIM_DEFAULT_LIMIT, SIM_STATS_FACTOR,
          SIM_DEFAULT_MAX_EVENTS);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Option parsing */

static int lookupKey(const char* const* keys, int n, const char* s, size_t len) {
  for (int i = 0; i < n; i++)
    if (strlen(keys[i]) == len && strncasecmp(keys[i], s, len) == 0) return i;
  return -1;
}

/* "8", "64K", "1M", "2G" -> bytes. 0 on success. */
static int parseSize(const char* s, size_t* out) {
  char* end;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return -1;
  unsigned long long mul = 1;
  if (*end == 'k' || *end == 'K') mul = 1ull << 10;
  if (*end == 'm' || *end == 'M') mul = 1ull << 20;
  if (*end == 'g' || *end == 'G') mul = 1ull << 30;
  if (mul != 1) end++;
  if (*end == 'b' || *end == 'B') end++;
  if (*end != '\0' || (v != 0 && v > ~0ull / mul)) return -1;
  *out = (size_t)(v * mul);
  return 0;
}

/* A comma list of names (or "all") -> bit mask. 0 on success. */
static int parseList(const char* s, const char* const* keys, int nKeys, uint32_t* mask) {
  *mask = 0;
  if (strcasecmp(s, "all") == 0) {
    *mask = (1u << nKeys) - 1;
    return 0;
  }
  while (*s) {
    const char* comma = strchr(s, ',');
    size_t len = comma ? (size_t)(comma - s) : strlen(s);
    int i = lookupKey(keys, nKeys, s, len);
    if (i < 0) {
      fprintf(stderr, "comm_sim: unknown name '%.*s'\n", (int)len, s);
      return -1;
    }
    *mask |= 1u << i;
    s += len + (comma ? 1 : 0);
  }
  return *mask ? 0 : -1;
}

/* "intra=shm,inter=net" (either part may be left out). 0 on success. */
static int parseLinks(const char* s, commLinkKind_t* intra, commLinkKind_t* inter) {
  while (*s) {
    const char* comma = strchr(s, ',');
    size_t len = comma ? (size_t)(comma - s) : strlen(s);
    const char* eq = memchr(s, '=', len);
    if (eq == NULL) return -1;
    int k = lookupKey(linkKeys, COMM_NUM_LINKS, eq + 1, len - (size_t)(eq + 1 - s));
    if (k < 0) return -1;
    if ((size_t)(eq - s) == 5 && strncasecmp(s, "intra", 5) == 0) *intra = (commLinkKind_t)k;
    else if ((size_t)(eq - s) == 5 && strncasecmp(s, "inter", 5) == 0) *inter = (commLinkKind_t)k;
    else return -1;
    s += len + (comma ? 1 : 0);
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Schedules */

static int isReductionFunc(commFunc_t f) {
  return f == commFuncAllReduce || f == commFuncReduce || f == commFuncReduceScatter;
}

/* Bytes of the operation as the model counts them (its largest buffer). */
static size_t opBytes(const simOpts* o, size_t count) {
  size_t b = count * o->elt;
  return funcs[o->fi].perRankBlocks ? b * (size_t)o->nRanks : b;
}

static size_t pieceElems(const simOpts* o) {
  size_t p = o->slotBytes / o->elt;
  return p ? p : 1;
}

/* The generator's arguments, as src/core/plan.c makes them (rank filled in by the caller). */
static void collArgs(const simOpts* o, size_t count, int proto, int nChannels, commCollArgs* a) {
  memset(a, 0, sizeof(*a));
  a->func = o->func;
  a->nRanks = o->nRanks;
  a->count = count;
  a->eltSize = o->elt;
  a->root = o->root;
  a->isReduction = isReductionFunc(o->func);
  a->nChannels = nChannels;
  a->proto = proto;
  size_t fifoHalf = (SIM_NSLOTS / 2) * pieceElems(o);
  a->chunkElems = commTuneChunkBytes(&o->model, proto) / o->elt;
  if (a->chunkElems > fifoHalf) a->chunkElems = fifoHalf;
  if (a->chunkElems < 1) a->chunkElems = 1;
  for (int c = 0; c < COMM_MAX_CHANNELS; c++) a->ringRanks[c] = o->ring;
  a->nNodes = o->nNodes;
  a->nodeOf = o->nodeOf;
}

static size_t schedSteps(const commSchedule* s, size_t* maxPerCh, size_t* pieces, size_t pieceBytes, size_t elt) {
  size_t total = 0;
  for (int c = 0; c < s->nChannels; c++) {
    const commChannelSched* cs = &s->channels[c];
    total += (size_t)cs->nSteps;
    if ((size_t)cs->nSteps > *maxPerCh) *maxPerCh = (size_t)cs->nSteps;
    for (int i = 0; i < cs->nSteps; i++) {
      size_t b = cs->steps[i].count > cs->steps[i].recvCount ? cs->steps[i].count : cs->steps[i].recvCount;
      size_t k = (b * elt + pieceBytes - 1) / pieceBytes;
      *pieces += k ? k : 1;
    }
  }
  return total;
}

/* Adds what rank r sends to its node's total and returns its intra/inter bytes. */
static void accountRank(const simOpts* o, const commSchedule* s, int r, uint64_t* intra, uint64_t* inter) {
  *intra = *inter = 0;
  for (int c = 0; c < s->nChannels; c++) {
    const commChannelSched* cs = &s->channels[c];
    for (int i = 0; i < cs->nSteps; i++) {
      const commStep* st = &cs->steps[i];
      if (!simPrimSends(st->prim) || st->sendPeer < 0 || st->sendPeer >= o->nRanks) continue;
      uint64_t b = (uint64_t)st->count * o->elt;
      if (o->nodeOf[st->sendPeer] == o->nodeOf[r]) *intra += b;
      else *inter += b;
    }
  }
}

/* Appends a remark to the row's note ("; " between remarks). */
static void addNote(rowResult* row, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void addNote(rowResult* row, const char* fmt, ...) {
  size_t used = strlen(row->note);
  if (used + 3 >= sizeof(row->note)) return;
  if (used > 0) {
    memcpy(row->note + used, "; ", 3);
    used += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(row->note + used, sizeof(row->note) - used, fmt, ap);
  va_end(ap);
}

/* Appends `what`, with the text of the last WARN (why it failed). */
static void noteWarn(rowResult* row, const char* what) {
  const char* w = commLogLastWarn();
  addNote(row, "%s%s%s", what, w[0] ? ": " : "", w);
}

static double nowS(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------------------------------------------- */
/* One row: an algorithm x protocol at one size */

typedef struct {
  int wanted; /* write the trace of this row if it simulates */
  int done;   /* written (or failed: message printed) */
} traceReq;

static void simParamsOf(const simOpts* o, int proto, simParams* p) {
  const commTuneConsts* k = &o->model.k;
  memset(p, 0, sizeof(*p));
  p->nRanks = o->nRanks;
  p->nNodes = o->nNodes;
  p->nodeOf = o->nodeOf;
  p->intra.latUs = k->link[o->intra].latUs * k->protoLatFactor[proto];
  p->intra.bwGBs = k->link[o->intra].bwGBs * k->protoBwFactor[proto];
  p->inter.latUs = k->link[o->inter].latUs * k->protoLatFactor[proto];
  p->inter.bwGBs = k->link[o->inter].bwGBs * k->protoBwFactor[proto];
  p->callUs = k->callUs;
  p->stepUs = k->stepUs;
  p->reduceGBs = k->reduceGBs;
  p->pieceBytes = pieceElems(o) * o->elt;
  p->nSlots = SIM_NSLOTS;
}

static void runSim(const simOpts* o, simSet* set, rowResult* row, traceReq* tr, size_t count) {
  simParams sp;
  simParamsOf(o, row->proto, &sp);
  double* t0 = NULL;
  double* t1 = NULL;
  if (tr->wanted && !tr->done) {
    t0 = malloc((set->nSteps ? set->nSteps : 1) * sizeof(double));
    t1 = malloc((set->nSteps ? set->nSteps : 1) * sizeof(double));
    if (t0 == NULL || t1 == NULL) {
      free(t0);
      free(t1);
      t0 = t1 = NULL;
    }
  }
  simResult res;
  if (simRun(set, &sp, t0, t1, &res) != 0) {
    row->simState = SIM_SKIPPED;
    addNote(row, "%s", res.msg);
  } else if (res.stalled) {
    row->simState = SIM_STALLED;
    addNote(row, "simulation stalled: %s", res.msg);
  } else {
    row->simState = SIM_OK;
    row->simUs = res.totalUs;
    if (t0 && t1) {
      char title[256];
      snprintf(title, sizeof(title), "%s %s/%s, %d ranks (%d per node), count %zu %s, %d channel(s)", funcs[o->fi].name,
               algoKeys[row->algo], protoKeys[row->proto], o->nRanks, o->perNode, count, commTypeName(o->type),
               row->nChannels);
      size_t written;
      int truncated;
      tr->done = 1;
      if (simWriteTrace(o->tracePath, set, &sp, t0, t1, o->maxEvents, title, &written, &truncated) != 0) {
        fprintf(stderr, "comm_sim: cannot write %s\n", o->tracePath);
        printf("# trace: cannot write %s\n", o->tracePath);
      } else {
        printf("# trace: %s -> %s (%zu step events%s)\n", title, o->tracePath, written,
               truncated ? "; TRUNCATED at the -E cap: the first ranks only" : "");
      }
    }
  }
  free(t0);
  free(t1);
}

static void runRow(const simOpts* o, size_t count, int first, rowResult* row, traceReq* tr) {
  const int n = o->nRanks;
  commSchedBuilder_t build = commAlgoBuilder(row->algo, o->func);
  commCollArgs a;
  collArgs(o, count, row->proto, row->nChannels, &a);
  const size_t pieceBytes = pieceElems(o) * o->elt;
  commLogClearLastWarn();

  /* Sample: a few ranks, for the estimate (and rank 0's printout). */
  int sample[4] = {0, o->root, n / 2, n - 1};
  size_t sSteps = 0, sPieces = 0, maxPerCh = 0;
  int nSample = 0, schedCh = 0;
  for (int i = 0; i < 4; i++) {
    int dup = 0;
    for (int j = 0; j < i; j++) dup |= sample[j] == sample[i];
    if (dup) continue;
    commSchedule s;
    a.rank = sample[i];
    if (build(&a, &s) != commSuccess) {
      row->failed = 1;
      char what[64];
      snprintf(what, sizeof(what), "building rank %d failed", sample[i]);
      noteWarn(row, what);
      return;
    }
    if (o->print && first && sample[i] == 0) {
      printf("## rank 0's schedule, %s/%s:\n", algoKeys[row->algo], protoKeys[row->proto]);
      commSchedPrint(&s, 0, stdout);
    }
    if (s.nChannels > schedCh) schedCh = s.nChannels;
    sSteps += schedSteps(&s, &maxPerCh, &sPieces, pieceBytes, o->elt);
    nSample++;
    commSchedFree(&s);
  }
  row->stepsPerCh = maxPerCh;
  if (schedCh > 0) row->nChannels = schedCh;
  double estSteps = (double)sSteps / nSample * n, estPieces = (double)sPieces / nSample * n;
  int doSim = estPieces <= (double)o->simLimit;
  int doStats = estSteps <= (double)o->simLimit * SIM_STATS_FACTOR;
  int doVerify = o->verify < 0 ? estPieces <= (double)o->simLimit / SIM_VERIFY_FRACTION && n <= SIM_VERIFY_MAX_RANKS
                               : o->verify;
  if (!doSim) {
    row->simState = SIM_SKIPPED;
    addNote(row, "about %.3g pieces in all, above -L %zu: %s", estPieces, o->simLimit,
            doStats ? "simulation skipped" : "simulation and byte counts skipped");
  }

  /* Every rank: bytes per link class, and the compact schedules for the simulation. */
  simSet set;
  memset(&set, 0, sizeof(set));
  if (doSim && simSetInit(&set, n) != 0) doSim = 0;
  if (doStats) {
    uint64_t* nodeBytes = calloc((size_t)o->nNodes, sizeof(uint64_t));
    if (nodeBytes == NULL) doStats = 0;
    for (int r = 0; r < n && doStats; r++) {
      commSchedule s;
      a.rank = r;
      if (build(&a, &s) != commSuccess) {
        row->failed = 1;
        char what[64];
        snprintf(what, sizeof(what), "building rank %d failed", r);
        noteWarn(row, what);
        free(nodeBytes);
        simSetFree(&set);
        return;
      }
      size_t pieces = 0;
      schedSteps(&s, &maxPerCh, &pieces, pieceBytes, o->elt);
      uint64_t intra, inter;
      accountRank(o, &s, r, &intra, &inter);
      if (intra > row->rankIntra) row->rankIntra = intra;
      if (inter > row->rankInter) row->rankInter = inter;
      nodeBytes[o->nodeOf[r]] += inter;
      if (doSim && (simSetAddRank(&set, r, &s, o->elt) != 0 || set.nSteps > 2 * o->simLimit)) {
        /* Out of memory, or far more steps than the sampled ranks suggested. */
        row->simState = SIM_SKIPPED;
        addNote(row, "simulation skipped: %s at rank %d",
                set.nSteps > 2 * o->simLimit ? "more than 2 x -L steps" : "out of memory", r);
        simSetFree(&set);
        doSim = 0;
      }
      commSchedFree(&s);
    }
    if (doStats) {
      for (int k = 0; k < o->nNodes; k++)
        if (nodeBytes[k] > row->nodeInter) row->nodeInter = nodeBytes[k];
      row->haveStats = 1;
      row->stepsExact = 1;
      row->stepsPerCh = maxPerCh;
    }
    free(nodeBytes);
  }
  if (doSim && doStats) runSim(o, &set, row, tr, count);
  simSetFree(&set);

  if (doVerify) {
    size_t piece = pieceElems(o);
    commLogClearLastWarn();
    commVerifyStats st;
    if (commVerifyColl(&a, build, piece * SIM_NSLOTS, piece, &st) == commSuccess) {
      row->verState = VER_OK;
    } else {
      row->verState = VER_FAILED;
      noteWarn(row, "verification failed");
    }
  }
}

/* ---------------------------------------------------------------------------------------------------- */
/* Output */

static void printHeader(const simOpts* o) {
  printf("# comm_sim: %s, %d ranks, %d per node (%d nodes), %s, intra=%s inter=%s\n", funcs[o->fi].name, o->nRanks,
         o->perNode, o->nNodes, commTypeName(o->type), linkKeys[o->intra], linkKeys[o->inter]);
  if (funcs[o->fi].perRankBlocks)
    printf("# bytes: the total of the %d blocks (count per rank = bytes / %d / %zu)\n", o->nRanks, o->nRanks, o->elt);
  else printf("# bytes: the buffer (count = bytes / %zu)\n", o->elt);
  char ch[64];
  if (o->channels) snprintf(ch, sizeof(ch), "%d (-C)", o->channels);
  else snprintf(ch, sizeof(ch), "the tuner's (max %d)", o->maxCh);
  printf("# FIFO: %d slots of %zu B per connection; channels: %s; root %d; '*': the tuner's pick; '-': not run\n",
         SIM_NSLOTS, pieceElems(o) * o->elt, ch, o->root);
  printf("#%11s  %-9s %-6s %3s %14s %14s %8s %9s %14s %14s %14s  %s\n", "bytes", "algo", "proto", "ch", "predicted(us)",
         "simulated(us)", "sim/pred", "steps/ch", "rank-intra(B)", "rank-inter(B)", "node-inter(B)", "verified");
}

static void printRow(size_t bytes, const rowResult* r) {
  char pred[32], sim[32], ratio[16], steps[32], bi[24], be[24], bn[24];
  const char* ver = "-";
  if (r->predicted >= 0) snprintf(pred, sizeof(pred), "%.2f%c", r->predicted, r->picked ? '*' : ' ');
  else snprintf(pred, sizeof(pred), "n/a ");
  snprintf(sim, sizeof(sim), "-");
  snprintf(ratio, sizeof(ratio), "-");
  snprintf(steps, sizeof(steps), "-");
  snprintf(bi, sizeof(bi), "-");
  snprintf(be, sizeof(be), "-");
  snprintf(bn, sizeof(bn), "-");
  if (r->failed) {
    ver = "FAILED(build)";
  } else {
    if (r->simState == SIM_OK) {
      snprintf(sim, sizeof(sim), "%.2f", r->simUs);
      if (r->predicted > 0) snprintf(ratio, sizeof(ratio), "%.2f", r->simUs / r->predicted);
    } else if (r->simState == SIM_SKIPPED) {
      snprintf(sim, sizeof(sim), "skipped");
    } else if (r->simState == SIM_STALLED) {
      snprintf(sim, sizeof(sim), "STALLED");
    }
    snprintf(steps, sizeof(steps), "%zu%s", r->stepsPerCh, r->stepsExact ? "" : "~");
    if (r->haveStats) {
      snprintf(bi, sizeof(bi), "%llu", (unsigned long long)r->rankIntra);
      snprintf(be, sizeof(be), "%llu", (unsigned long long)r->rankInter);
      snprintf(bn, sizeof(bn), "%llu", (unsigned long long)r->nodeInter);
    }
    ver = r->verState == VER_OK ? "VERIFIED" : r->verState == VER_FAILED ? "FAILED" : "-";
  }
  printf(" %11zu  %-9s %-6s %3d %14s %14s %8s %9s %14s %14s %14s  %s\n", bytes, algoKeys[r->algo], protoKeys[r->proto],
         r->nChannels, pred, sim, ratio, steps, bi, be, bn, ver);
  if (r->note[0]) printf("#   %s/%s at %zu B: %s\n", algoKeys[r->algo], protoKeys[r->proto], bytes, r->note);
  fflush(stdout);
}

/* ---------------------------------------------------------------------------------------------------- */

/* Can the library run algo for this call at all (src/tune/tuner.c, runnable())? */
static int runnable(const simOpts* o, int algo, size_t nBytes) {
  if (commAlgoBuilder(algo, o->func) == NULL) return 0;
  if (algo == commAlgoOneShot) return o->nRanks <= COMM_ONESHOT_MAX_RANKS && nBytes <= o->oneShotMax;
  return 1;
}

/* Do protocols p and q run the same schedules (same step size) over links of the same speed? */
static int sameRun(const simOpts* o, int p, int q) {
  const commTuneConsts* k = &o->model.k;
  commCollArgs ap, aq;
  collArgs(o, 1, p, 1, &ap);
  collArgs(o, 1, q, 1, &aq);
  return ap.chunkElems == aq.chunkElems && k->protoLatFactor[p] == k->protoLatFactor[q] &&
         k->protoBwFactor[p] == k->protoBwFactor[q];
}

static int channelsFor(const simOpts* o, int algo, size_t nBytes) {
  return o->channels ? o->channels : commTuneChannels(&o->model, o->func, algo, nBytes);
}

int main(int argc, char** argv) {
  /* Failures are reported in the table (with the WARN's text); COMM_DEBUG=WARN shows the log as well. */
  setenv("COMM_DEBUG", "NONE", 0);
  simOpts o;
  memset(&o, 0, sizeof(o));
  o.fi = -1;
  o.perNode = 1;
  o.type = commFloat32;
  o.slotBytes = SIM_DEFAULT_SLOT;
  o.intra = COMM_LINK_SHM;
  o.inter = COMM_LINK_NET;
  o.algoMask = (1u << commNumAlgos) - 1;
  o.protoMask = (1u << commNumProtos) - 1;
  o.verify = -1;
  o.simLimit = SIM_DEFAULT_LIMIT;
  o.maxEvents = SIM_DEFAULT_MAX_EVENTS;
  long long count = -1;
  size_t minB = 8, maxB = 64u << 20, factor = 8;
  int haveB = 0, haveE = 0, opt;
  while ((opt = getopt(argc, argv, "c:n:R:N:b:e:f:a:P:C:M:t:r:s:k:xXL:T:E:ph")) != -1) {
    int bad = 0;
    switch (opt) {
      case 'c':
        for (int i = 0; i < NFUNCS; i++)
          if (strcasecmp(optarg, funcs[i].name) == 0) o.fi = i;
        bad = o.fi < 0;
        break;
      case 'n': o.nRanks = atoi(optarg); break;
      case 'R': o.perNode = atoi(optarg); break;
      case 'N': count = atoll(optarg); break;
      case 'b':
        bad = parseSize(optarg, &minB) != 0;
        haveB = 1;
        break;
      case 'e':
        bad = parseSize(optarg, &maxB) != 0;
        haveE = 1;
        break;
      case 'f': bad = parseSize(optarg, &factor) != 0 || factor < 2; break;
      case 'a':
        bad = parseList(optarg, algoKeys, commNumAlgos, &o.algoMask) != 0;
        o.algosExplicit = strcasecmp(optarg, "all") != 0;
        break;
      case 'P': bad = parseList(optarg, protoKeys, commNumProtos, &o.protoMask) != 0; break;
      case 'C':
        o.channels = atoi(optarg);
        bad = o.channels < 1 || o.channels > COMM_MAX_CHANNELS;
        break;
      case 'M':
        o.maxCh = atoi(optarg);
        bad = o.maxCh < 1 || o.maxCh > COMM_MAX_CHANNELS;
        break;
      case 't':
        o.type = commNumTypes;
        for (int t = 0; t < commNumTypes; t++)
          if (strcasecmp(optarg, commTypeName((commDataType_t)t)) == 0) o.type = (commDataType_t)t;
        bad = o.type == commNumTypes;
        break;
      case 'r': o.root = atoi(optarg); break;
      case 's': bad = parseSize(optarg, &o.slotBytes) != 0; break;
      case 'k': bad = parseLinks(optarg, &o.intra, &o.inter) != 0; break;
      case 'x': o.verify = 1; break;
      case 'X': o.verify = 0; break;
      case 'L': bad = parseSize(optarg, &o.simLimit) != 0; break;
      case 'T': o.tracePath = optarg; break;
      case 'E': bad = parseSize(optarg, &o.maxEvents) != 0; break;
      case 'p': o.print = 1; break;
      case 'h': usage(stdout, argv[0]); return 0;
      default: bad = 1;
    }
    if (bad) {
      if (opt != '?') fprintf(stderr, "comm_sim: bad value for -%c: %s\n", opt, optarg ? optarg : "");
      usage(stderr, argv[0]);
      return 2;
    }
  }
  if (haveB && !haveE) maxB = minB; /* -b alone: one size */
  if (optind < argc || o.fi < 0 || o.nRanks < 1 || o.perNode < 1 || o.root < 0 || o.root >= o.nRanks ||
      o.slotBytes < 64 || minB > maxB || minB == 0) {
    const char* why = "bad arguments";
    if (o.fi < 0) why = "-c is missing";
    else if (o.nRanks < 1) why = "-n is missing";
    else if (o.root < 0 || o.root >= o.nRanks) why = "-r must be a rank";
    else if (minB > maxB || minB == 0) why = "sizes: 0 < -b <= -e";
    else if (o.slotBytes < 64) why = "-s: at least 64 bytes";
    fprintf(stderr, "comm_sim: %s\n", why);
    usage(stderr, argv[0]);
    return 2;
  }
  o.func = funcs[o.fi].func;
  o.elt = commTypeSize(o.type);
  o.oneShotMax = (size_t)commParamSize("COMM_ALLREDUCE_ONESHOT_MAX", SIM_ONESHOT_MAX_DEFAULT, 0, 1LL << 30);

  /* Nodes: rank r on node r / R. The ring visits the ranks of each node together (src/core/comm.c). */
  const int n = o.nRanks;
  o.nodeOf = calloc((size_t)n, sizeof(int));
  o.ring = calloc((size_t)n, sizeof(int));
  if (o.nodeOf == NULL || o.ring == NULL) return 1;
  for (int r = 0; r < n; r++) o.nodeOf[r] = r / o.perNode;
  o.nNodes = (n + o.perNode - 1) / o.perNode;
  o.maxLocal = n < o.perNode ? n : o.perNode;
  int pos = 0;
  for (int node = 0; node < o.nNodes; node++)
    for (int r = 0; r < n; r++)
      if (o.nodeOf[r] == node) o.ring[pos++] = r;
  if (o.maxCh == 0) o.maxCh = (o.nNodes > 1 || o.intra == COMM_LINK_NET) ? 2 : 1;
  commTuneModelInit(&o.model, n, o.nNodes, o.maxLocal, o.intra, o.inter, (SIM_NSLOTS / 2) * pieceElems(&o) * o.elt,
                    o.maxCh);

  /* Sizes: API counts. */
  size_t counts[64];
  int nCounts = 0;
  if (count >= 0) {
    counts[nCounts++] = (size_t)count;
  } else {
    size_t div = o.elt * (funcs[o.fi].perRankBlocks ? (size_t)n : 1);
    for (size_t b = minB; nCounts < 64; b *= factor) {
      size_t c = b / div;
      if (c < 1) c = 1;
      if (nCounts == 0 || counts[nCounts - 1] != c) counts[nCounts++] = c;
      if (b > maxB / factor) break;
    }
  }

  printHeader(&o);
  int failures = 0;
  traceReq tr = {0, 0};
  double t0 = nowS();
  for (int si = 0; si < nCounts; si++) {
    size_t nBytes = opBytes(&o, counts[si]);
    /* The tuner's pick, among everything it may run (not only what is listed). */
    int bestA = -1, bestP = -1;
    double best = 0;
    for (int a = 0; a < commNumAlgos; a++) {
      if (!runnable(&o, a, nBytes)) continue;
      for (int p = 0; p < commNumProtos; p++) {
        int ch = commTuneChannels(&o.model, o.func, a, nBytes);
        double us = commTunePredict(&o.model, o.func, a, p, nBytes, ch, commTuneChunkBytes(&o.model, p), NULL);
        if (us >= 0 && (bestA < 0 || us < best)) {
          best = us;
          bestA = a;
          bestP = p;
        }
      }
    }
    for (int a = 0; a < commNumAlgos; a++) {
      if (!(o.algoMask >> a & 1u)) continue;
      if (commAlgoBuilder(a, o.func) == NULL) {
        if (o.algosExplicit && si == 0) printf("#   %s does not implement %s\n", algoKeys[a], funcs[o.fi].name);
        continue;
      }
      int ch = channelsFor(&o, a, nBytes);
      /* Algorithms the model cannot price here (one-shot beyond its rank limit) only when asked for. */
      if (!o.algosExplicit &&
          commTunePredict(&o.model, o.func, a, 0, nBytes, ch, commTuneChunkBytes(&o.model, 0), NULL) < 0)
        continue;
      /* The trace: the first algorithm of the table that simulates, with its protocol of lower prediction. */
      int traceProto = -1;
      double traceBest = 0;
      for (int p = 0; p < commNumProtos; p++) {
        if (!(o.protoMask >> p & 1u)) continue;
        double us = commTunePredict(&o.model, o.func, a, p, nBytes, ch, commTuneChunkBytes(&o.model, p), NULL);
        if (traceProto < 0 || us < traceBest) {
          traceProto = p;
          traceBest = us;
        }
      }
      rowResult prev;
      int havePrev = 0;
      for (int p = 0; p < commNumProtos; p++) {
        if (!(o.protoMask >> p & 1u)) continue;
        tr.wanted = o.tracePath != NULL && si == 0 && p == traceProto && !tr.done;
        /* Protocols that give the same schedules on the same links give the same results. */
        int reuse = havePrev && !tr.wanted && sameRun(&o, prev.proto, p);
        rowResult row;
        if (reuse) {
          row = prev;
        } else {
          memset(&row, 0, sizeof(row));
          row.nChannels = ch;
        }
        row.algo = a;
        row.proto = p;
        row.predicted = commTunePredict(&o.model, o.func, a, p, nBytes, ch, commTuneChunkBytes(&o.model, p), NULL);
        row.picked = a == bestA && p == bestP && ch == commTuneChannels(&o.model, o.func, a, nBytes);
        if (!reuse) runRow(&o, counts[si], si == 0, &row, &tr);
        printRow(nBytes, &row);
        prev = row;
        havePrev = 1;
        if (row.failed || row.verState == VER_FAILED || row.simState == SIM_STALLED) failures++;
      }
    }
  }
  if (o.tracePath && !tr.done) printf("# trace: not written (no algorithm simulated at the first size)\n");
  printf("# %d failure(s); %.2f s\n", failures, nowS() - t0);
  free(o.nodeOf);
  free(o.ring);
  return failures ? 1 : 0;
}
