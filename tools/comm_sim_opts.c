/* comm_sim's command line (tools/comm_sim.c is the tool): the options, the machine they describe (nodes,
 * ring order, the tuner's model with its collnet groups) and the sizes of the sweep. */
#include "comm_sim_opts.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "param.h"

const simFunc simFuncs[] = {{"allreduce", commFuncAllReduce, 0},
                            {"broadcast", commFuncBroadcast, 0},
                            {"reduce", commFuncReduce, 0},
                            {"allgather", commFuncAllGather, 1},
                            {"reducescatter", commFuncReduceScatter, 1},
                            {"alltoall", commFuncAllToAll, 1}};
const int simNumFuncs = (int)(sizeof(simFuncs) / sizeof(simFuncs[0]));

const char* const simAlgoKeys[commNumAlgos] = {"ring", "tree", "colltree", "pat", "oneshot", "pairwise", "collnet"};
const char* const simProtoKeys[commNumProtos] = {"ll", "simple"};
const char* const simLinkKeys[COMM_NUM_LINKS] = {"shm", "net"};

enum { OPT_AGG_US = 256 }; /* long options without a letter */

void simUsage(FILE* f, const char* prog) {
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
          "  -a ALGOS    ring, tree, colltree, pat, oneshot, pairwise, collnet, a comma list, or all (default:\n"
          "              every algorithm that implements the collective and the model prices)\n"
          "  -P PROTO    ll, simple or all (default all)\n"
          "  -C CH       channels (default: what the tuner would use, commTuneChannels)\n"
          "  -G CH, --collnet CH\n"
          "              channels with a collnet group (in-network reduction: one member per node and channel;\n"
          "              default 0: none). Collnet allreduce is then priced and a candidate as in the library\n"
          "              (on at most -M channels, across 2+ nodes)\n"
          "  --agg-us US the collnet switch's aggregation latency in the simulation (default: the inter link's)\n"
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
          "bytes the busiest node sends across nodes (its NIC), and the verifier's verdict. Pieces sent to\n"
          "collnet count as bytes across nodes.\n",
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
    int k = lookupKey(simLinkKeys, COMM_NUM_LINKS, eq + 1, len - (size_t)(eq + 1 - s));
    if (k < 0) return -1;
    if ((size_t)(eq - s) == 5 && strncasecmp(s, "intra", 5) == 0) *intra = (commLinkKind_t)k;
    else if ((size_t)(eq - s) == 5 && strncasecmp(s, "inter", 5) == 0) *inter = (commLinkKind_t)k;
    else return -1;
    s += len + (comma ? 1 : 0);
  }
  return 0;
}

int simOptsParse(int argc, char** argv, simOpts* op) {
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
  o.aggUs = -1;
  long long count = -1;
  size_t minB = 8, maxB = 64u << 20, factor = 8;
  int haveB = 0, haveE = 0, opt;
  static const struct option longOpts[] = {{"collnet", required_argument, NULL, 'G'},
                                           {"agg-us", required_argument, NULL, OPT_AGG_US},
                                           {NULL, 0, NULL, 0}};
  while ((opt = getopt_long(argc, argv, "c:n:R:N:b:e:f:a:P:C:G:M:t:r:s:k:xXL:T:E:ph", longOpts, NULL)) != -1) {
    int bad = 0;
    char* end = NULL;
    switch (opt) {
      case 'c':
        for (int i = 0; i < simNumFuncs; i++)
          if (strcasecmp(optarg, simFuncs[i].name) == 0) o.fi = i;
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
        bad = parseList(optarg, simAlgoKeys, commNumAlgos, &o.algoMask) != 0;
        o.algosExplicit = strcasecmp(optarg, "all") != 0;
        break;
      case 'P': bad = parseList(optarg, simProtoKeys, commNumProtos, &o.protoMask) != 0; break;
      case 'C':
        o.channels = atoi(optarg);
        bad = o.channels < 1 || o.channels > COMM_MAX_CHANNELS;
        break;
      case 'G':
        o.collnetAsked = (int)strtol(optarg, &end, 10);
        bad = *end != '\0' || o.collnetAsked < 0 || o.collnetAsked > COMM_MAX_CHANNELS;
        break;
      case OPT_AGG_US:
        o.aggUs = strtod(optarg, &end);
        bad = end == optarg || *end != '\0' || !(o.aggUs >= 0);
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
      case 'h': simUsage(stdout, argv[0]); return 0;
      default: bad = 1;
    }
    if (bad) {
      if (opt == OPT_AGG_US) fprintf(stderr, "comm_sim: bad value for --agg-us: %s\n", optarg);
      else if (opt != '?') fprintf(stderr, "comm_sim: bad value for -%c: %s\n", opt, optarg ? optarg : "");
      simUsage(stderr, argv[0]);
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
    simUsage(stderr, argv[0]);
    return 2;
  }
  o.func = simFuncs[o.fi].func;
  o.elt = commTypeSize(o.type);
  o.oneShotMax = (size_t)commParamSize("COMM_ALLREDUCE_ONESHOT_MAX", SIM_ONESHOT_MAX_DEFAULT, 0, 1LL << 30);

  /* Nodes: rank r on node r / R. The ring visits the ranks of each node together (src/core/comm.c). */
  const int n = o.nRanks;
  o.nodeOf = calloc((size_t)n, sizeof(int));
  o.ring = calloc((size_t)n, sizeof(int));
  if (o.nodeOf == NULL || o.ring == NULL) {
    free(o.nodeOf);
    free(o.ring);
    return 1;
  }
  for (int r = 0; r < n; r++) o.nodeOf[r] = r / o.perNode;
  o.nNodes = (n + o.perNode - 1) / o.perNode;
  o.maxLocal = n < o.perNode ? n : o.perNode;
  int pos = 0;
  for (int node = 0; node < o.nNodes; node++)
    for (int r = 0; r < n; r++)
      if (o.nodeOf[r] == node) o.ring[pos++] = r;
  if (o.maxCh == 0) o.maxCh = (o.nNodes > 1 || o.intra == COMM_LINK_NET) ? 2 : 1;
  commTuneModelInit(&o.model, n, o.nNodes, o.maxLocal, o.intra, o.inter, (SIM_NSLOTS / 2) * simPieceElems(&o) * o.elt,
                    o.maxCh);
  /* Collnet groups, as the library forms them (COMM_COLLNET_NCHANNELS): at most the communicator's
   * channels, only across two or more nodes. */
  if (o.nNodes > 1) o.model.collnetChannels = o.collnetAsked < o.maxCh ? o.collnetAsked : o.maxCh;
  if (o.aggUs >= 0) o.model.collnetAggUs = o.aggUs; /* the model prices what the simulation runs */

  /* Sizes: API counts. */
  if (count >= 0) {
    o.counts[o.nCounts++] = (size_t)count;
  } else {
    size_t div = o.elt * (simFuncs[o.fi].perRankBlocks ? (size_t)n : 1);
    for (size_t b = minB; o.nCounts < SIM_MAX_SIZES; b *= factor) {
      size_t c = b / div;
      if (c < 1) c = 1;
      if (o.nCounts == 0 || o.counts[o.nCounts - 1] != c) o.counts[o.nCounts++] = c;
      if (b > maxB / factor) break;
    }
  }
  *op = o;
  return -1;
}
