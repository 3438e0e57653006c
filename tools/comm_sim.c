/* comm_sim: what a collective costs on a machine of any size, per algorithm and protocol, without running it.
 *
 *   comm_sim -c allreduce -n 1024 -R 8 -b 8 -e 64M -f 8        (see simUsage() or -h for every option;
 *                                                               tools/comm_sim_opts.c parses them)
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
 * CollNet: -G N (--collnet N) says the machine reduces in the network on N channels (the library's
 * COMM_COLLNET_NCHANNELS, at most -M, only across 2+ nodes): the model then prices collnet allreduce
 * (commTuneModel.collnetChannels) and the tuner's pick may be it, as in the library. Its rows run at most N
 * channels. The simulation models each channel's group (one member per node: a switch that reduces the
 * members' k-th pieces, with --agg-us of aggregation latency, default the inter link's; sim_trace.c), the
 * pieces members send to collnet count as bytes across nodes, and the verifier runs the virtual peer.
 * Without -G, collnet appears only when asked for (-a collnet): unpriced, simulated as if it had groups.
 * Collnet's allgather and reducescatter (the network's gather and scatter) are not modelled: allreduce only.
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
#include "comm_sim_opts.h"
#include "sim_trace.h"
#include "tune.h"

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

/* ---------------------------------------------------------------------------------------------------- */
/* Schedules */

static int isReductionFunc(commFunc_t f) {
  return f == commFuncAllReduce || f == commFuncReduce || f == commFuncReduceScatter;
}

/* Bytes of the operation as the model counts them (its largest buffer). */
static size_t opBytes(const simOpts* o, size_t count) {
  size_t b = count * o->elt;
  return simFuncs[o->fi].perRankBlocks ? b * (size_t)o->nRanks : b;
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
  size_t fifoHalf = (SIM_NSLOTS / 2) * simPieceElems(o);
  a->chunkElems = commTuneChunkBytes(&o->model, proto) / o->elt;
  if (a->chunkElems > fifoHalf) a->chunkElems = fifoHalf;
  if (a->chunkElems < 1) a->chunkElems = 1;
  a->pieceElems = simPieceElems(o);
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
      if (!simPrimSends(st->prim)) continue;
      uint64_t b = (uint64_t)st->count * o->elt;
      if (st->sendPeer == COMM_PEER_COLLNET) *inter += b; /* to the switch, over the node's NIC */
      if (st->sendPeer < 0 || st->sendPeer >= o->nRanks) continue;
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
  p->pieceBytes = simPieceElems(o) * o->elt;
  p->nSlots = SIM_NSLOTS;
  p->aggUs = o->aggUs >= 0 ? o->aggUs : p->inter.latUs;
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
      snprintf(title, sizeof(title), "%s %s/%s, %d ranks (%d per node), count %zu %s, %d channel(s)",
               simFuncs[o->fi].name, simAlgoKeys[row->algo], simProtoKeys[row->proto], o->nRanks, o->perNode, count,
               commTypeName(o->type), row->nChannels);
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
  const size_t pieceBytes = simPieceElems(o) * o->elt;
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
      printf("## rank 0's schedule, %s/%s:\n", simAlgoKeys[row->algo], simProtoKeys[row->proto]);
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
    size_t piece = simPieceElems(o);
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
  printf("# comm_sim: %s, %d ranks, %d per node (%d nodes), %s, intra=%s inter=%s\n", simFuncs[o->fi].name, o->nRanks,
         o->perNode, o->nNodes, commTypeName(o->type), simLinkKeys[o->intra], simLinkKeys[o->inter]);
  if (simFuncs[o->fi].perRankBlocks)
    printf("# bytes: the total of the %d blocks (count per rank = bytes / %d / %zu)\n", o->nRanks, o->nRanks, o->elt);
  else printf("# bytes: the buffer (count = bytes / %zu)\n", o->elt);
  char ch[64];
  if (o->channels) snprintf(ch, sizeof(ch), "%d (-C)", o->channels);
  else snprintf(ch, sizeof(ch), "the tuner's (max %d)", o->maxCh);
  printf("# FIFO: %d slots of %zu B per connection; channels: %s; root %d; '*': the tuner's pick; '-': not run\n",
         SIM_NSLOTS, simPieceElems(o) * o->elt, ch, o->root);
  if (o->collnetAsked > 0 && o->model.collnetChannels == 0)
    printf("# collnet: none (-G %d, but one node: the library turns collnet on only across nodes)\n", o->collnetAsked);
  else if (o->collnetAsked > 0)
    printf("# collnet: groups on %d channel(s) (-G %d, at most -M %d), one member per node; aggregation latency "
           "%.2f us (%s)\n",
           o->model.collnetChannels, o->collnetAsked, o->maxCh,
           o->aggUs >= 0 ? o->aggUs : o->model.k.link[o->inter].latUs, o->aggUs >= 0 ? "--agg-us" : "the inter link's");
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
  printf(" %11zu  %-9s %-6s %3d %14s %14s %8s %9s %14s %14s %14s  %s\n", bytes, simAlgoKeys[r->algo],
         simProtoKeys[r->proto], r->nChannels, pred, sim, ratio, steps, bi, be, bn, ver);
  if (r->note[0]) printf("#   %s/%s at %zu B: %s\n", simAlgoKeys[r->algo], simProtoKeys[r->proto], bytes, r->note);
  fflush(stdout);
}

/* ---------------------------------------------------------------------------------------------------- */

/* Can the library run algo for this call at all (src/tune/tuner.c, runnable())? */
static int runnable(const simOpts* o, int algo, size_t nBytes) {
  if (commAlgoBuilder(algo, o->func) == NULL) return 0;
  if (algo == commAlgoOneShot) return o->nRanks <= COMM_ONESHOT_MAX_RANKS && nBytes <= o->oneShotMax;
  /* collnet's allgather and reducescatter (pieces whose result differs in size) are not modelled here */
  if (algo == commAlgoCollNet) return o->model.collnetChannels > 0 && o->func == commFuncAllReduce;
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
  int ch = o->channels ? o->channels : commTuneChannels(&o->model, o->func, algo, nBytes);
  /* collnet runs on the channels that have a group */
  if (algo == commAlgoCollNet && o->model.collnetChannels > 0 && ch > o->model.collnetChannels)
    ch = o->model.collnetChannels;
  return ch;
}

int main(int argc, char** argv) {
  /* Failures are reported in the table (with the WARN's text); COMM_DEBUG=WARN shows the log as well. */
  setenv("COMM_DEBUG", "NONE", 0);
  simOpts o;
  int rc = simOptsParse(argc, argv, &o);
  if (rc >= 0) return rc;
  const size_t* counts = o.counts;
  const int nCounts = o.nCounts;

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
        if (o.algosExplicit && si == 0) printf("#   %s does not implement %s\n", simAlgoKeys[a], simFuncs[o.fi].name);
        continue;
      }
      if (a == commAlgoCollNet && o.func != commFuncAllReduce) {
        if (o.algosExplicit && si == 0)
          printf("#   collnet's %s is not modelled (the simulated network reduces as allreduce does)\n",
                 simFuncs[o.fi].name);
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
        if (!reuse && a == commAlgoCollNet && o.model.collnetChannels == 0)
          addNote(&row, "%s",
                  o.nNodes > 1 ? "no collnet groups (-G): not priced; simulated as if every channel had one"
                               : "one node: no collnet (the schedule is CollTree's); not priced");
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
