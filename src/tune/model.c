/* The tuner's cost model: what each algorithm costs for a call, from the link constants of one table.
 * See src/tune/tune.h for the formula. Pure functions: the same inputs give the same answer on every
 * rank, and tools/comm_sim prices machines we do not have. */
#include <math.h>
#include <string.h>

#include "tune.h"

/* Calibration (docs/PERF.md, "tuner constants"): 2-core VM, 2 local ranks, host memory.
 * - shm: 8-byte one-shot allreduce 2.2-2.6 us end to end (callUs + one hop); busbw 6-7 GB/s at 4-16 MiB
 *   (ring of 2: every byte sent once, half of them reduced).
 * - net (loopback TCP): 8-byte one-shot allreduce 8-10 us; busbw 1.5-2 GB/s at 1-16 MiB.
 * - stepUs: one chunk step of the host executor (FIFO bookkeeping, a memcpy set-up), measured as the
 *   difference between 64 KiB and 512 KiB slots at equal bytes.
 * - LL: the host executor runs LL as Simple with small steps; the latency and bandwidth factors are 1.
 *   (The CUDA executor's LL will halve bandwidth and latency: its entries change with it.) */
const commTuneConsts commTuneDefaults = {
    .link = {[COMM_LINK_SHM] = {.latUs = 0.9, .bwGBs = 7.0}, [COMM_LINK_NET] = {.latUs = 7.0, .bwGBs = 2.0}},
    .callUs = 1.3,
    .stepUs = 0.35,
    .reduceGBs = 12.0,
    .protoLatFactor = {[commProtoLL] = 1.0, [commProtoSimple] = 1.0},
    .protoBwFactor = {[commProtoLL] = 1.0, [commProtoSimple] = 1.0},
    .protoChunkBytes = {[commProtoLL] = 32 * 1024, [commProtoSimple] = 0},
    /* PAT pairs every rank with a different peer each round; with more ranks than cores (4 ranks, 2 cores)
     * that costs 1.2-1.5x the ring's neighbour steps at equal bytes (allgather 32 KiB-2 MiB), with 2 ranks
     * nothing. */
    .algoLatFactor = {[commAlgoRing] = 1.0,
                      [commAlgoTree] = 1.0,
                      [commAlgoCollTree] = 1.0,
                      [commAlgoPat] = 1.4,
                      [commAlgoOneShot] = 1.0,
                      [commAlgoPairwise] = 1.0,
                      [commAlgoCollNet] = 1.0},
    .algoBwFactor = {[commAlgoRing] = 1.0,
                     [commAlgoTree] = 1.0,
                     [commAlgoCollTree] = 1.0,
                     [commAlgoPat] = 0.75,
                     [commAlgoOneShot] = 1.0,
                     [commAlgoPairwise] = 1.0,
                     [commAlgoCollNet] = 1.0},
};

void commTuneModelInit(commTuneModel* m, int nRanks, int nNodes, int maxLocalRanks, commLinkKind_t intra,
                       commLinkKind_t inter, size_t fifoChunkBytes, int maxChannels) {
  memset(m, 0, sizeof(*m));
  m->nRanks = nRanks < 1 ? 1 : nRanks;
  m->nNodes = nNodes < 1 ? 1 : nNodes;
  m->maxLocalRanks = maxLocalRanks < 1 ? 1 : maxLocalRanks;
  m->intra = intra;
  m->inter = inter;
  m->fifoChunkBytes = fifoChunkBytes ? fifoChunkBytes : 1;
  m->maxChannels = maxChannels < 1 ? 1 : maxChannels;
  m->nicsPerNode = 1;
  m->k = commTuneDefaults;
}

static int ceilLog2(int n) {
  int d = 0;
  while ((1 << d) < n) d++;
  return d;
}

/* Depth of the double binary tree over n (odd n: one more level, the extra leaf). */
static int dbtDepth(int n) {
  if (n <= 1) return 0;
  return n % 2 == 0 ? commBitTreeDepth(n) : commBitTreeDepth(n - 1) + 1;
}


size_t commTuneChunkBytes(const commTuneModel* m, int proto) {
  size_t cap = proto >= 0 && proto < commNumProtos ? m->k.protoChunkBytes[proto] : 0;
  if (cap == 0 || cap > m->fifoChunkBytes) cap = m->fifoChunkBytes;
  return cap;
}

/* Below this many bytes per rank and channel, another channel costs more latency than it gains. */
#define TUNE_MIN_BYTES_PER_CHANNEL (64 * 1024)

int commTuneChannels(const commTuneModel* m, commFunc_t func, int algo, size_t nBytes) {
  if (algo == commAlgoOneShot || algo == commAlgoPat || algo == commAlgoPairwise || func == commFuncAllToAll) return 1;
  size_t perRank = nBytes / (size_t)m->nRanks;
  size_t n = perRank / TUNE_MIN_BYTES_PER_CHANNEL;
  if (n < 1) n = 1;
  if (n > (size_t)m->maxChannels) n = (size_t)m->maxChannels;
  int c = (int)n;
  if (algo == commAlgoCollNet) { /* a leader per node and channel carries the node's share */
    size_t perNode = nBytes / (size_t)m->nNodes / TUNE_MIN_BYTES_PER_CHANNEL;
    c = perNode < 1 ? 1 : perNode > (size_t)m->collnetChannels ? m->collnetChannels : (int)perNode;
    return c < 1 ? 1 : c;
  }
  /* The double binary tree (flat, or across nodes) has one tree per channel parity: use both. CollTree
   * gives each leader both trees (channels 2j, 2j+1): two leaders per node spread the network traffic
   * over two ranks (and NICs, where a node has several) until the topology says how many there are. */
  /* Tree allreduce: one tree on one channel while latency rules, both trees (an even number of channels,
   * beyond COMM_NCHANNELS if need be) once a rank has bandwidth-sized data. */
  if (func == commFuncAllReduce && algo == commAlgoTree && perRank >= TUNE_MIN_BYTES_PER_CHANNEL)
    c = c < 2 ? 2 : c + (c & 1);
  if (func == commFuncAllReduce && algo == commAlgoCollTree && m->nNodes > 1) {
    int want = 2 * (m->maxLocalRanks < 2 ? 1 : 2);
    if (c < want) c = want;
    c += c & 1;
  }
  if (c > COMM_MAX_CHANNELS) c = COMM_MAX_CHANNELS - (COMM_MAX_CHANNELS & 1);
  return c;
}

/* What an algorithm asks of the machine for one call. bytes[] is what the busiest sender puts on a link
 * of that class: on the network, what one NIC carries (a node's ranks share its NICs). */
typedef struct {
  double stages[COMM_NUM_LINKS];     /* dependent hops, one after another */
  double fillStages[COMM_NUM_LINKS]; /* hops a chunk must cross before the last one is out (pipelines) */
  double bytes[COMM_NUM_LINKS];
  double reduced;   /* bytes the busiest rank reduces */
  int serialReduce; /* reductions follow the transfers instead of overlapping them */
  double chunk;     /* bytes per step */
  double fixedUs;   /* latency that is no hop (the network's aggregation) */
} algoCost;

static double minD(double a, double b) { return a < b ? a : b; }

/* bytes sent by `senders` ranks of a node across the network, spread over its NICs. */
static double perNic(const commTuneModel* m, double bytesPerNode, double senders) {
  double nics = minD((double)m->nicsPerNode, senders);
  return bytesPerNode / (nics < 1 ? 1 : nics);
}

/* A communicator's shape as describe() and the per-algorithm costs read it. Ranks on one node, in position
 * order, are adjacent in flat trees and rings (ranks are grouped by node): of a flat algorithm's log2(n)
 * levels, log2(L) stay within a node and log2(N) cross nodes. */
typedef struct {
  int n, N, L;      /* ranks, nodes, ranks on the most populated node */
  int intra, inter; /* link kinds within and between nodes */
  int gate;         /* a step every rank takes at once (ring, PAT, exchanges) waits for its slowest hop: the
                      * network once the ranks span nodes */
  int multi;        /* more than one node */
  double nn;        /* n as a double */
} modelShape;

static void costRing(const commTuneModel* m, const modelShape* s, commFunc_t func, double B, int nChannels,
                     algoCost* c) {
  const int n = s->n, N = s->N, intra = s->intra, inter = s->inter, multi = s->multi;
  const double nn = s->nn;
  /* Node-aware ring: each channel's ring leaves a node once, so a node's NIC carries what one rank
   * sends. */
  int perRankBlocks = func == commFuncAllReduce || func == commFuncAllGather || func == commFuncReduceScatter;
  double perStep = perRankBlocks ? B / (nn * nChannels) : B / nChannels;
  c->chunk = minD(c->chunk, perStep > 1 ? perStep : 1);
  double sent, stages;
  int chain = 0; /* broadcast and reduce: the last chunk crosses every hop */
  switch (func) {
    case commFuncAllReduce:
      stages = 2.0 * (n - 1);
      sent = 2.0 * (nn - 1) / nn * B;
      break;
    case commFuncBroadcast:
    case commFuncReduce:
      stages = n - 1;
      sent = B;
      chain = 1;
      break;
    default:
      stages = n - 1;
      sent = (nn - 1) / nn * B;
      break;
  }
  /* The ring's hops run one after another around the ring, and one hop in (n / N) leaves a node. */
  double crossing = multi ? (double)N / nn : 0.0;
  c->stages[inter] += stages * crossing;
  c->stages[intra] += stages * (1.0 - crossing);
  if (chain) {
    c->fillStages[inter] += stages * crossing;
    c->fillStages[intra] += stages * (1.0 - crossing);
  }
  c->bytes[intra] = sent;
  /* Every channel's ring leaves a node from the same rank (one order for all channels), so one NIC. */
  if (multi) c->bytes[inter] = perNic(m, sent, 1);
  c->reduced = func == commFuncAllReduce || func == commFuncReduceScatter ? (nn - 1) / nn * B
               : func == commFuncReduce                                   ? B
                                                                          : 0;
  return;
}

static void costTree(const commTuneModel* m, const modelShape* s, commFunc_t func, double B, int nChannels,
                     algoCost* c) {
  const int n = s->n, N = s->N, intra = s->intra, inter = s->inter, multi = s->multi;
  c->chunk = minD(c->chunk, B / nChannels > 1 ? B / nChannels : 1);
  int ways = func == commFuncAllReduce ? 2 : 1;
  int single = func != commFuncAllReduce || nChannels == 1; /* one bit tree (allreduce on one channel) */
  int depth = single ? commBitTreeDepth(n) : dbtDepth(n);
  int interDepth = multi ? commBitTreeDepth(N) : 0;
  if (interDepth > depth) interDepth = depth;
  c->stages[intra] = c->fillStages[intra] = (double)ways * (depth - interDepth);
  c->stages[inter] += (double)ways * interDepth;
  c->fillStages[inter] += (double)ways * interDepth;
  /* allreduce: interior in one tree (reduce two children's halves, send up, send down to two children),
   * leaf in the other: 2B sent, B reduced. broadcast: to two children. reduce: once up, two reductions. */
  /* One tree for everything: an interior rank sends it up once and down twice. */
  double sent = func == commFuncReduce ? B : (func == commFuncAllReduce && single) ? 3.0 * B : 2.0 * B;
  c->bytes[intra] = sent;
  /* Across nodes, a node's ranks are interior and leaf at once: its NIC carries 1.5x one rank's bytes
   * (tools/comm_sim: 3B for allreduce at 1024 ranks, 8 per node). */
  if (multi) c->bytes[inter] = perNic(m, 1.5 * sent, nChannels);
  c->reduced = func == commFuncAllReduce ? B : func == commFuncReduce ? 2.0 * B : 0;
  return;
}

static void costCollTree(const commTuneModel* m, const modelShape* s, commFunc_t func, double B, int nChannels,
                         algoCost* c) {
  const int N = s->N, L = s->L, intra = s->intra, inter = s->inter, multi = s->multi;
  c->chunk = minD(c->chunk, B / nChannels > 1 ? B / nChannels : 1);
  int ways = func == commFuncAllReduce ? 2 : 1;
  /* Within a node, algorithms/colltree.c runs a chain when it is no longer than the chunks per channel
   * plus the tree's depth, a bit tree otherwise. */
  double chunksPerChannel = ceil(B / nChannels / c->chunk);
  int localStages = L <= 1 ? 0 : (L - 1 <= chunksPerChannel + commBitTreeDepth(L)) ? L - 1 : commBitTreeDepth(L);
  int interStages = commBitTreeDepth(N);
  c->stages[intra] = c->fillStages[intra] = (double)ways * localStages;
  c->stages[inter] += (double)ways * interStages;
  c->fillStages[inter] += (double)ways * interStages;
  /* Within the node everyone sends its data once each way. Across nodes each channel's leader (a
   * different local rank per channel) carries that channel's share; the double binary tree over nodes
   * balances it, so a node's NICs carry its data once each way (tools/comm_sim: 2B at 64 MiB). */
  if (localStages > 0) c->bytes[intra] = (double)ways * B;
  if (multi) c->bytes[inter] = perNic(m, (double)ways * B, minD(nChannels, L));
  c->reduced = func == commFuncBroadcast ? 0 : 2.0 * B;
  return;
}

/* CollTree inside a node; between nodes the network reduces: a leader sends its node's partial once and
 * receives the result once (one hop each way, pipelined), so a node's NICs carry B each way instead of the
 * tree's 2B sent. */
static void costCollNet(const commTuneModel* m, const modelShape* s, commFunc_t func, double B, int nChannels,
                        algoCost* c) {
  const int L = s->L, intra = s->intra, inter = s->inter;
  if (func == commFuncAllGather || func == commFuncReduceScatter) {
    /* algorithms/collnet.c: a chain through the node's ranks (the gathered result down it, the partials up it),
     * one hop between the leader and each rank the other way, one hop to the network and back; each network
     * operation carries one slot: every node's piece of one chunk. A node's NICs carry B one way (the result
     * of the gather in, the partials of the scatter out), as the ring's; the gain is the hops. */
    double op = m->collnetOpBytes ? (double)m->collnetOpBytes : (double)m->fifoChunkBytes;
    c->chunk = minD(c->chunk, op);
    c->chunk = minD(c->chunk, B / nChannels > 1 ? B / nChannels : 1);
    int local = L > 1 ? L : 0;
    c->stages[intra] = c->fillStages[intra] = local;
    c->stages[inter] += 2.0;
    c->fillStages[inter] += 2.0;
    c->fixedUs = m->collnetAggUs > 0 ? m->collnetAggUs : m->k.link[inter].latUs;
    if (local > 0) c->bytes[intra] = B;
    c->bytes[inter] = perNic(m, B, minD(nChannels, L));
    c->reduced = func == commFuncReduceScatter && L > 1 ? B : 0;
    return;
  }
  c->chunk = minD(c->chunk, B / nChannels > 1 ? B / nChannels : 1);
  double chunksPerChannel = ceil(B / nChannels / c->chunk);
  int localStages = L <= 1 ? 0 : (L - 1 <= chunksPerChannel + commBitTreeDepth(L)) ? L - 1 : commBitTreeDepth(L);
  c->stages[intra] = c->fillStages[intra] = 2.0 * localStages;
  /* up to the network, the aggregation (the plugin's latency, else about one hop), back down */
  c->stages[inter] += 2.0;
  c->fixedUs = m->collnetAggUs > 0 ? m->collnetAggUs : m->k.link[inter].latUs;
  c->fillStages[inter] += 2.0;
  if (localStages > 0) c->bytes[intra] = 2.0 * B;
  c->bytes[inter] = perNic(m, B, minD(nChannels, L));
  c->reduced = L > 1 ? B : 0;
}

static void costPat(const commTuneModel* m, const modelShape* s, commFunc_t func, double B, int nChannels,
                    algoCost* c) {
  const int n = s->n, L = s->L, intra = s->intra, inter = s->inter, gate = s->gate, multi = s->multi;
  const double nn = s->nn;
  /* Every rank exchanges at distances 1, 2, 4, ...: the far rounds, which carry most of the bytes,
   * cross nodes for every rank of a node at once. */
  /* algorithms/pat.c runs all rounds once per window of at most 4 chunks (4 MiB) of the n blocks; its
   * transfers carry up to half the data of a window. */
  double window = minD(4.0 * c->chunk, 4.0 * 1024 * 1024);
  double windows = ceil(B / window);
  c->stages[gate] = ceilLog2(n) * windows;
  double sent = (nn - 1) / nn * B;
  c->bytes[intra] = sent;
  if (multi) c->bytes[inter] = perNic(m, sent * L, L);
  c->reduced = func == commFuncReduceScatter ? (nn - 1) / nn * B : 0;
  c->chunk = minD(c->chunk, B / windows / 2 > 1 ? B / windows / 2 : 1);
  return;
}

static void costOneShot(const commTuneModel* m, const modelShape* s, commFunc_t func, double B, int nChannels,
                        algoCost* c) {
  const int n = s->n, L = s->L, intra = s->intra, inter = s->inter, gate = s->gate, multi = s->multi;
  const double nn = s->nn;
  c->stages[gate] = n - 1; /* n-1 exchanges, one after another */
  double sent = (nn - 1) * B;
  c->bytes[intra] = sent;
  if (multi) c->bytes[inter] = perNic(m, sent * L, L);
  c->reduced = (nn - 1) * B;
  c->serialReduce = 1; /* the reductions start once every exchange is done */
  c->chunk = B > 1 ? B : 1;
  return;
}

static void costPairwise(const commTuneModel* m, const modelShape* s, commFunc_t func, double B, int nChannels,
                         algoCost* c) {
  const int n = s->n, L = s->L, intra = s->intra, inter = s->inter, gate = s->gate, multi = s->multi;
  const double nn = s->nn;
  c->stages[gate] = n - 1;
  double sent = (nn - 1) / nn * B;
  c->bytes[intra] = sent;
  if (multi) c->bytes[inter] = perNic(m, sent * L, L);
  c->chunk = minD(c->chunk, B / nn > 1 ? B / nn : 1);
  return;
}

static int describe(const commTuneModel* m, commFunc_t func, int algo, double B, int nChannels, double chunk,
                    algoCost* c) {
  memset(c, 0, sizeof(*c));
  modelShape s;
  s.n = m->nRanks;
  s.N = m->nNodes;
  s.L = m->maxLocalRanks;
  s.intra = m->intra;
  s.inter = m->inter;
  s.gate = s.N > 1 ? s.inter : s.intra;
  s.multi = s.N > 1;
  s.nn = s.n;
  c->chunk = chunk;
  if (commAlgoBuilder(algo, func) == NULL) return 0;
  if (algo == commAlgoOneShot && s.n > COMM_ONESHOT_MAX_RANKS) return 0;
  if (algo == commAlgoCollNet && (m->collnetChannels < 1 || !s.multi)) return 0;
  if (algo == commAlgoCollNet && func != commFuncAllReduce && !(m->collnetFuncs >> func & 1u)) return 0;
  if (s.n == 1) return 1; /* a local copy: the call's fixed cost */
  switch (algo) {
    case commAlgoRing: costRing(m, &s, func, B, nChannels, c); return 1;
    case commAlgoTree: costTree(m, &s, func, B, nChannels, c); return 1;
    case commAlgoCollTree: costCollTree(m, &s, func, B, nChannels, c); return 1;
    case commAlgoPat: costPat(m, &s, func, B, nChannels, c); return 1;
    case commAlgoOneShot: costOneShot(m, &s, func, B, nChannels, c); return 1;
    case commAlgoPairwise: costPairwise(m, &s, func, B, nChannels, c); return 1;
    case commAlgoCollNet: costCollNet(m, &s, func, B, nChannels, c); return 1;
    default: return 0;
  }
}

double commTunePredict(const commTuneModel* m, commFunc_t func, int algo, int proto, size_t nBytes, int nChannels,
                       size_t chunkBytes, double* steps) {
  if (proto < 0 || proto >= commNumProtos || nChannels < 1) return -1.0;
  algoCost c;
  if (!describe(m, func, algo, (double)nBytes, nChannels, (double)(chunkBytes ? chunkBytes : 1), &c)) return -1.0;
  const commTuneConsts* k = &m->k;
  double t = k->callUs + c.fixedUs, nSteps = 0, stream = 0;
  if (nBytes == 0) { /* nothing moves */
    if (steps) *steps = 0;
    return t;
  }
  /* The executor forwards a chunk slot by slot: the pipeline fills in slots. */
  double fillPiece = minD(c.chunk, (double)m->fifoChunkBytes / 4);
  for (int l = 0; l < COMM_NUM_LINKS; l++) {
    double bw = k->link[l].bwGBs * k->protoBwFactor[proto] * k->algoBwFactor[algo] * 1e3; /* bytes per us */
    double lat = k->link[l].latUs * k->protoLatFactor[proto] * k->algoLatFactor[algo];
    t += c.stages[l] * lat + c.fillStages[l] * fillPiece / bw;
    /* Links of different classes stream at the same time (different ranks, or one rank's pipeline). */
    if (c.bytes[l] / bw > stream) stream = c.bytes[l] / bw;
    nSteps += c.stages[l] + ceil(c.bytes[l] / c.chunk);
  }
  /* With more ranks on a node than cores, the host executor's copies and reductions of all of them share
   * the cores (4 ranks on 2 cores: one-shot allreduce of 128 KiB, (n-1) x the ring's bytes, 505 us against
   * the ring's 74). */
  double share = m->coresPerNode > 0 && m->maxLocalRanks > m->coresPerNode ? (double)m->maxLocalRanks / m->coresPerNode
                                                                           : 1.0;
  stream *= share;
  /* Chunks are reduced while the next ones travel: the slower of the two streams sets the pace. */
  double reduce = share * c.reduced / (k->reduceGBs * 1e3);
  t += (c.serialReduce ? stream + reduce : (stream > reduce ? stream : reduce)) + nSteps * k->stepUs;
  if (steps) *steps = nSteps;
  return t;
}
