/* The tuner of a communicator: COMM_ALGO / COMM_PROTO, the tuner plugin, and the choice per call.
 *
 * Per collective it prices every algorithm x protocol the collective may use with the cost model
 * (model.c), lets the plugin (COMM_TUNER_PLUGIN) edit the table, and takes the cheapest entry. Every input
 * is the same on every rank (the call's arguments, the communicator's shape, the environment), so every
 * rank makes the same choice without talking to the others. */
#include <ctype.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "communicator.h"
#include "debug.h"
#include "param.h"
#include "tune.h"
#include "utils.h"

/* ---------------------------------------------------------------- COMM_ALGO / COMM_PROTO */

static const char* const funcKeys[commNumFuncs] = {"allreduce",     "broadcast", "reduce",  "allgather",
                                                   "reducescatter", "alltoall",  "sendrecv"};
static const char* const algoKeys[commNumAlgos] = {"ring", "tree", "colltree", "pat", "oneshot", "pairwise", "collnet"};
static const char* const protoKeys[commNumProtos] = {"ll", "simple"};

/* Index of the name s[0..len) in keys (case-insensitive), or -1. */
static int lookup(const char* const* keys, int nKeys, const char* s, size_t len) {
  for (int i = 0; i < nKeys; i++)
    if (strlen(keys[i]) == len && strncasecmp(keys[i], s, len) == 0) return i;
  return -1;
}

/* NCCL's names (NCCL_ALGO, NCCL_PROTO; accepted in COMM_ALGO and COMM_PROTO too): the choices each one
 * stands for, or 0 with what libcomm lacks. NCCL's Tree (chains inside nodes, a double binary tree across
 * them) is libcomm's tree and colltree, but only in NCCL_ALGO: in COMM_ALGO "tree" is libcomm's tree. */
static const struct {
  int isAlgo;
  const char* name;
  uint32_t bits;
  const char* lacks;
} ncclChoices[] = {
    {1, "collnetdirect", 1u << commAlgoCollNet, NULL}, {1, "collnetchain", 1u << commAlgoCollNet, NULL},
    {1, "nvls", 0, "libcomm has no NVLink SHARP"},     {1, "nvlstree", 0, "libcomm has no NVLink SHARP"},
    {0, "ll128", 0, "libcomm has no LL128 protocol"},
};

/* The choices s[0..len) names, as bits; 0 with *lacks set for an NCCL name libcomm does not have; 0 with
 * *lacks NULL for an unknown name. */
static uint32_t nameBits(const char* var, int isAlgo, const char* s, size_t len, const char** lacks) {
  *lacks = NULL;
  if (isAlgo && strncmp(var, "NCCL_", 5) == 0 && len == 4 && strncasecmp(s, "tree", 4) == 0)
    return 1u << commAlgoTree | 1u << commAlgoCollTree;
  int i = lookup(isAlgo ? algoKeys : protoKeys, isAlgo ? commNumAlgos : commNumProtos, s, len);
  if (i >= 0) return 1u << i;
  for (size_t k = 0; k < sizeof(ncclChoices) / sizeof(ncclChoices[0]); k++) {
    if (ncclChoices[k].isAlgo != isAlgo || strlen(ncclChoices[k].name) != len) continue;
    if (strncasecmp(ncclChoices[k].name, s, len) != 0) continue;
    *lacks = ncclChoices[k].lacks;
    return ncclChoices[k].bits;
  }
  return 0;
}

static int tunedFunc(int f) { return f != commFuncSendRecv; }

/* Does choice i (algorithm or protocol) exist for f? Protocols exist for every tuned collective. */
static int supports(int isAlgo, int i, int f) {
  return isAlgo ? commAlgoBuilder(i, (commFunc_t)f) != NULL : tunedFunc(f);
}

static void trim(const char** s, const char** e) {
  while (*s < *e && isspace((unsigned char)**s)) (*s)++;
  while (*e > *s && isspace((unsigned char)(*e)[-1])) (*e)--;
}

/* One "[func:][^]name,name" item. */
static void parseItem(const char* var, int isAlgo, const char* s, const char* e, uint32_t allow[commNumFuncs]) {
  const int nKeys = isAlgo ? commNumAlgos : commNumProtos;
  const char* (*nameOf)(int) = isAlgo ? commAlgoName : commProtoName;
  trim(&s, &e);
  if (s == e) return;
  int func = -1;
  const char* colon = memchr(s, ':', (size_t)(e - s));
  if (colon) {
    const char* fs = s;
    const char* fe = colon;
    trim(&fs, &fe);
    func = lookup(funcKeys, commNumFuncs, fs, (size_t)(fe - fs));
    if (func < 0 || !tunedFunc(func)) {
      WARN("%s: unknown collective '%.*s' in '%.*s' (allreduce, broadcast, reduce, allgather, reducescatter, "
           "alltoall): item ignored",
           var, (int)(fe - fs), fs, (int)(e - s), s);
      return;
    }
    s = colon + 1;
    trim(&s, &e);
  }
  int exclude = 0;
  if (s < e && *s == '^') {
    exclude = 1;
    s++;
  }
  uint32_t listed = 0;
  while (s < e) {
    const char* comma = memchr(s, ',', (size_t)(e - s));
    const char* ne = comma ? comma : e;
    const char* ns = s;
    trim(&ns, &ne);
    if (ns < ne) {
      const char* lacks;
      uint32_t bits = nameBits(var, isAlgo, ns, (size_t)(ne - ns), &lacks);
      uint32_t fits = bits;
      for (int i = 0; i < nKeys; i++)
        if ((bits >> i & 1u) && func >= 0 && !supports(isAlgo, i, func)) fits &= ~(1u << i);
      if (bits == 0 && lacks && exclude) {
        /* excluding what libcomm does not have asks for what it does anyway */
      } else if (bits == 0 && lacks) {
        WARN_NOTICE("%s: %.*s is not provided (%s): ignored", var, (int)(ne - ns), ns, lacks);
      } else if (bits == 0) {
        WARN_NOTICE("%s: unknown %s '%.*s': ignored", var, isAlgo ? "algorithm" : "protocol", (int)(ne - ns), ns);
      } else if (fits == 0) {
        WARN_NOTICE("%s: %s does not implement %s: ignored", var, nameOf(__builtin_ctz(bits)),
                    commFuncName((commFunc_t)func));
      } else {
        listed |= fits;
      }
    }
    s = comma ? comma + 1 : e;
  }
  if (listed == 0) return;
  for (int f = 0; f < commNumFuncs; f++) {
    if (!tunedFunc(f) || (func >= 0 && f != func)) continue;
    uint32_t mine = 0; /* what the list means for f: only the choices f has */
    for (int i = 0; i < nKeys; i++)
      if ((listed >> i & 1u) && supports(isAlgo, i, f)) mine |= 1u << i;
    if (mine == 0) continue; /* a global item naming nothing f can run leaves f alone */
    uint32_t next = exclude ? allow[f] & ~mine : mine;
    if (next == 0) {
      WARN_NOTICE("%s: '%s' leaves %s nothing to run: ignored for it", var, exclude ? "exclusion" : "choice",
                  commFuncName((commFunc_t)f));
      continue;
    }
    allow[f] = next;
  }
}

static void parseSpec(const char* var, int isAlgo, const char* spec, uint32_t allow[commNumFuncs]) {
  const int nKeys = isAlgo ? commNumAlgos : commNumProtos;
  for (int f = 0; f < commNumFuncs; f++) {
    allow[f] = 0;
    for (int i = 0; i < nKeys; i++)
      if (supports(isAlgo, i, f)) allow[f] |= 1u << i;
  }
  if (spec == NULL) return;
  const char* s = spec;
  const char* end = spec + strlen(spec);
  while (s < end) {
    const char* semi = memchr(s, ';', (size_t)(end - s));
    const char* e = semi ? semi : end;
    parseItem(var, isAlgo, s, e, allow);
    s = semi ? semi + 1 : end;
  }
}

void commTuneParseAlgo(const char* spec, uint32_t allow[commNumFuncs]) { parseSpec("COMM_ALGO", 1, spec, allow); }
void commTuneParseProto(const char* spec, uint32_t allow[commNumFuncs]) { parseSpec("COMM_PROTO", 0, spec, allow); }
void commTuneParseVar(const char* var, int isAlgo, const char* spec, uint32_t allow[commNumFuncs]) {
  parseSpec(var, isAlgo, spec, allow);
}

/* ---------------------------------------------------------------- tuner plugin */

static void pluginLogger(commTunerLogLevel_t level, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (level == COMM_TUNER_LOG_WARN) WARN("TUNER plugin: %s", buf);
  else INFO(COMM_TUNE, "TUNER plugin: %s", buf);
}

/* The tuner plugin of comm (tuner_nccl.c finds the library): libcomm's commTunerPlugin_v1, else NCCL's
 * ncclTunerPlugin_v5 .. _v2 through the adapter. Nothing usable: the built-in cost model alone (a WARN says
 * why, unless no library was asked for). */
static void loadPlugin(commTuner* t, const struct commComm* comm) {
  char what[300] = "";
  int isDefault = 0;
  void* h = commTunerOpenLibrary(what, sizeof(what), &isDefault);
  if (!h) return;
  const commTuner_v1_t* p = (const commTuner_v1_t*)dlsym(h, COMM_TUNER_PLUGIN_SYMBOL);
  void* ctx = NULL;
  if (p && p->getCollInfo) {
    if (p->init && p->init((size_t)comm->nRanks, (size_t)comm->nNodes, pluginLogger, &ctx) != commSuccess) {
      WARN("TUNER : plugin %s failed to initialise; using the built-in cost model only", p->name ? p->name : what);
      dlclose(h);
      return;
    }
    INFO(COMM_TUNE | COMM_INIT, "TUNER : using plugin %s (%s)", p->name ? p->name : "?", what);
  } else {
    int found = 0;
    p = commTunerNcclLoad(h, what, comm, &ctx, &found);
    if (!p) {
      if (!found && !isDefault)
        WARN("TUNER : %s exports neither %s (with getCollInfo) nor an NCCL tuner plugin (ncclTunerPlugin_v5 .. _v2); "
             "using the built-in cost model only",
             what, COMM_TUNER_PLUGIN_SYMBOL);
      dlclose(h);
      return;
    }
  }
  t->pluginHandle = h;
  t->plugin = p;
  t->pluginContext = ctx;
}

/* ---------------------------------------------------------------- per communicator */

/* NICs per node: the fewest distinct NICs the ranks of any node report (src/core/comm.c fills netIfHash
 * from the topology's NIC of each rank, or from the interface COMM_SOCKET_IFNAME pins). Same on every
 * rank. Ranks are grouped by node first, so this is linear in ranks times ranks per node. */
int commTuneNicsPerNode(const struct commComm* comm) {
  if (comm->peers == NULL || comm->nNodes < 1) return 1;
  int n = comm->nRanks, fewest = 0;
  int* start = calloc((size_t)comm->nNodes + 1, sizeof(int));
  int* byNode = calloc((size_t)n + 1, sizeof(int));
  if (start == NULL || byNode == NULL) {
    free(start);
    free(byNode);
    return 1;
  }
  for (int r = 0; r < n; r++) start[comm->rankNode[r] + 1]++;
  for (int v = 0; v < comm->nNodes; v++) start[v + 1] += start[v];
  for (int r = 0; r < n; r++) byNode[start[comm->rankNode[r]]++] = r;
  for (int v = comm->nNodes; v > 0; v--) start[v] = start[v - 1];
  start[0] = 0;
  for (int v = 0; v < comm->nNodes; v++) {
    int distinct = 0;
    for (int i = start[v]; i < start[v + 1]; i++) {
      uint64_t h = comm->peers[byNode[i]].netIfHash;
      int seen = h == 0;
      for (int j = start[v]; j < i && !seen; j++) seen = comm->peers[byNode[j]].netIfHash == h;
      distinct += !seen;
    }
    if (distinct < 1) distinct = 1;
    if (fewest == 0 || distinct < fewest) fewest = distinct;
  }
  free(start);
  free(byNode);
  return fewest < 1 ? 1 : fewest;
}

/* Can the collnet groups run func? Allreduce wherever they exist; allgather and reducescatter where every
 * member's plugin offers the network's gather / scatter and the nodes have as many ranks each. */
static int collnetRuns(const struct commComm* comm, commFunc_t func) {
  const commCollNetInfo* cn = &comm->collnet;
  if (cn->nChannels == 0) return 0;
  if (func == commFuncAllReduce) return 1;
  if (func == commFuncAllGather) return cn->allGather && cn->uniformNodes;
  if (func == commFuncReduceScatter) return cn->reduceScatter && cn->uniformNodes;
  return 0;
}

static const char* collnetWhyNot(const struct commComm* comm) {
  const commCollNetInfo* cn = &comm->collnet;
  if (cn->nChannels == 0) return cn->why;
  if (!cn->uniformNodes) return "its allgather and reducescatter need nodes of one size";
  return "the collnet plugin offers no network allgather or reducescatter";
}

commResult_t commTunerInit(struct commComm* comm) {
  commTuner* t;
  COMMCHECK(commCalloc(&t, 1, sizeof(*t)));
  int maxLocal = 1;
  for (int node = 0; node < comm->nNodes; node++) {
    int k = 0;
    for (int r = 0; r < comm->nRanks; r++) k += comm->rankNode[r] == node;
    if (k > maxLocal) maxLocal = k;
  }
  commTuneModelInit(&t->model, comm->nRanks, comm->nNodes, maxLocal, comm->shmDisable ? COMM_LINK_NET : COMM_LINK_SHM,
                    COMM_LINK_NET, (size_t)(comm->nSlots / 2) * comm->slotBytes, comm->nChannels);
  t->model.nicsPerNode = commTuneNicsPerNode(comm);
  t->model.coresPerNode = comm->minCores; /* the smallest host's: every rank must price alike */
  t->model.collnetChannels = comm->collnet.nChannels;
  t->model.collnetAggUs = comm->collnet.latencyUs;
  for (int f = 0; f < commNumFuncs; f++)
    if (collnetRuns(comm, (commFunc_t)f)) t->model.collnetFuncs |= 1u << f;
  t->model.collnetOpBytes = comm->slotBytes - COMM_SLOT_HDR_BYTES;
  if (comm->collnet.maxCollBytes && comm->collnet.maxCollBytes < t->model.collnetOpBytes)
    t->model.collnetOpBytes = comm->collnet.maxCollBytes;
  INFO(COMM_TUNE | COMM_INIT,
       "TUNER : %d ranks, %d nodes, at most %d per node, %d NIC(s) and %d cores per node; links intra=%s inter=net",
       comm->nRanks, comm->nNodes, maxLocal, t->model.nicsPerNode, t->model.coresPerNode,
       comm->shmDisable ? "net" : "shm");
  const char* algo = commParamStr("COMM_ALGO", NULL);
  const char* proto = commParamStr("COMM_PROTO", NULL);
  commTuneParseVar(algo ? commParamSource("COMM_ALGO") : "COMM_ALGO", 1, algo, t->allowAlgo);
  commTuneParseVar(proto ? commParamSource("COMM_PROTO") : "COMM_PROTO", 0, proto, t->allowProto);
  /* COMM_ALGO asks for collnet (among fewer than all) where the groups cannot run it: allreduce runs CollTree
   * in its place, allgather and reducescatter what the tuner picks among the rest. */
  uint32_t all[commNumFuncs];
  commTuneParseAlgo(NULL, all);
  for (int f = 0; f < commNumFuncs; f++) {
    uint32_t* allow = &t->allowAlgo[f];
    if (*allow == all[f] || !(*allow >> commAlgoCollNet & 1u) || collnetRuns(comm, (commFunc_t)f)) continue;
    *allow &= ~(1u << commAlgoCollNet);
    if (f == commFuncAllReduce) *allow |= 1u << commAlgoCollTree;
    if (*allow == 0) *allow = all[f] & ~(1u << commAlgoCollNet);
    WARN_NOTICE("TUNER : COMM_ALGO asks for collnet, but collnet cannot run %s (%s): it runs %s instead",
                commFuncName((commFunc_t)f), collnetWhyNot(comm),
                f == commFuncAllReduce ? "CollTree" : "what the tuner picks among the rest");
  }
  loadPlugin(t, comm);
  comm->tuner = t;
  return commSuccess;
}

void commTunerFree(struct commComm* comm) {
  commTuner* t = comm->tuner;
  if (!t) return;
  if (t->plugin) {
    if (t->plugin->destroy) t->plugin->destroy(t->pluginContext);
    dlclose(t->pluginHandle);
  }
  free(t);
  comm->tuner = NULL;
}

static const commTunerFunc_t tunerFuncOf[commNumFuncs] = {COMM_TUNER_FUNC_ALLREDUCE,     COMM_TUNER_FUNC_BROADCAST,
                                                          COMM_TUNER_FUNC_REDUCE,        COMM_TUNER_FUNC_ALLGATHER,
                                                          COMM_TUNER_FUNC_REDUCESCATTER, COMM_TUNER_FUNC_ALLTOALL,
                                                          COMM_TUNER_FUNC_ALLTOALL};

_Static_assert((int)COMM_TUNER_NUM_ALGOS == (int)commNumAlgos, "tuner plugin rows must match the algorithms");
_Static_assert((int)COMM_TUNER_NUM_PROTOS == (int)commNumProtos, "tuner plugin columns must match the protocols");

/* Can this communicator run algo for this call at all? (beyond the algorithm implementing func) */
static int runnable(const struct commComm* comm, int algo, commFunc_t func, size_t nBytes) {
  if (commAlgoBuilder(algo, func) == NULL) return 0;
  if (algo == commAlgoOneShot) return comm->nRanks <= COMM_ONESHOT_MAX_RANKS && nBytes <= comm->oneShotMaxBytes;
  if (algo == commAlgoCollNet) return collnetRuns(comm, func);
  return 1;
}

/* One WARN per communicator, collective and reason (bit) for a collnet choice that runs another algorithm. */
static void collnetFallback(struct commComm* comm, commFunc_t func, int reason, const char* fmt, const char* a,
                            const char* b) {
  commTuner* t = comm->tuner;
  if (t->collnetWarned[func] >> reason & 1u) return;
  t->collnetWarned[func] |= (uint64_t)1 << reason;
  char why[256];
  snprintf(why, sizeof(why), fmt, a, b);
  WARN_NOTICE("TUNER : collnet cannot run %s %s: %s instead (said once per communicator)", commFuncName(func), why,
              func == commFuncAllReduce ? "CollTree" : "the ring");
}

void commTuneCollNetCheck(struct commComm* comm, commFunc_t func, commDataType_t type, const commRedOpArgs* redop,
                          int onDevice, commTuneChoice* choice) {
  if (choice->algo != commAlgoCollNet) return;
  int netOp = redop->kind == COMM_REDOP_SUM || redop->kind == COMM_REDOP_PREMULSUM ||
                      redop->kind == COMM_REDOP_SUMPOSTDIV
                  ? commSum
              : redop->kind == COMM_REDOP_PROD ? commProd
              : redop->kind == COMM_REDOP_MAX  ? commMax
                                               : commMin;
  int ok = 1;
  size_t elt = commTypeSize(type);
  if (onDevice && !comm->collnet.devOn) {
    collnetFallback(comm, func, 0,
                    "on device buffers%s%s (this communicator has no device groups: see the COLLNET WARN)", "", "");
    ok = 0;
  } else if (func != commFuncAllGather && !(comm->collnet.opsOfType[type] >> netOp & 1u)) {
    collnetFallback(comm, func, 1 + (int)type * 4 + netOp, "of %s with %s: the network does not reduce it",
                    commTypeName(type), commOpName((commRedOp_t)netOp));
    ok = 0;
  } else if (func != commFuncAllReduce && comm->tuner->model.collnetOpBytes / elt < (size_t)comm->nNodes) {
    /* the nodes' pieces of one network operation share a slot: not even one element each */
    collnetFallback(comm, func, 63, "of %s%s: one network operation cannot carry an element per node",
                    commTypeName(type), "");
    ok = 0;
  }
  if (ok) {
    /* Only the channels with groups (the device rules choose channels by size). */
    if (choice->nChannels > comm->collnet.nChannels) choice->nChannels = comm->collnet.nChannels;
    return;
  }
  choice->algo = func == commFuncAllReduce ? commAlgoCollTree : commAlgoRing;
  if (!onDevice) choice->nChannels = commTuneChannels(&comm->tuner->model, func, choice->algo, choice->nBytes);
}

commResult_t commTuneChoose(struct commComm* comm, commFunc_t func, size_t count, size_t eltSize, commTuneChoice* out) {
  commTuner* t = comm->tuner;
  if (!t || func < 0 || func >= commNumFuncs || !tunedFunc(func)) {
    WARN("commTuneChoose: no tuner or not a collective (%d)", (int)func);
    return commInternalError;
  }
  const commTuneModel* m = &t->model;
  size_t nBytes = commFuncBytes(func, count, eltSize, comm->nRanks);
  commTuneCacheEntry* hit = &t->cache[(nBytes * 31u + (size_t)func * 7u + (nBytes >> 12)) % COMM_TUNE_CACHE];
  if (!t->plugin && hit->valid && hit->func == (int)func && hit->nBytes == nBytes) {
    *out = hit->choice;
    return commSuccess;
  }
  float table[COMM_TUNER_NUM_ALGOS][COMM_TUNER_NUM_PROTOS];
  int filled = 0;
  for (int pass = 0; pass < 2 && !filled; pass++) {
    /* Pass 1 only when COMM_ALGO allows nothing that can run this call (oneshot above its size cap):
     * then every algorithm is a candidate again. */
    if (pass == 1)
      INFO(COMM_TUNE, "TUNER : COMM_ALGO allows nothing that can run %s of %zu bytes here: choosing among all",
           commFuncName(func), nBytes);
    for (int a = 0; a < commNumAlgos; a++) {
      for (int p = 0; p < commNumProtos; p++) {
        table[a][p] = COMM_TUNER_UNSUPPORTED;
        if ((pass == 0 && !(t->allowAlgo[func] >> a & 1u)) || !(t->allowProto[func] >> p & 1u)) continue;
        if (!runnable(comm, a, func, nBytes)) continue;
        int ch = commTuneChannels(m, func, a, nBytes);
        double us = commTunePredict(m, func, a, p, nBytes, ch, commTuneChunkBytes(m, p), NULL);
        if (us >= 0) {
          table[a][p] = (float)us;
          filled = 1;
        }
      }
    }
  }
  int pluginChannels = 0;
  if (t->plugin) {
    int ch = 0;
    commResult_t res = t->plugin->getCollInfo(t->pluginContext, tunerFuncOf[func], nBytes, table, &ch);
    if (res != commSuccess) WARN("TUNER : plugin getCollInfo failed (%d): its edits are used as they are", (int)res);
    if (ch >= 1 && ch <= COMM_MAX_CHANNELS) pluginChannels = ch;
  }
  int best = -1, bestProto = -1;
  for (int a = 0; a < commNumAlgos; a++) {
    if (!runnable(comm, a, func, nBytes)) continue; /* whatever the plugin says */
    for (int p = 0; p < commNumProtos; p++) {
      if (!(table[a][p] >= 0)) continue; /* negative or NaN: not a choice */
      if (best < 0 || table[a][p] < table[best][bestProto]) {
        best = a;
        bestProto = p;
      }
    }
  }
  if (best < 0) {
    /* Every entry disabled (by the plugin): the collective still has to run. */
    best = func == commFuncAllToAll ? commAlgoPairwise : commAlgoRing;
    bestProto = commProtoSimple;
    WARN("TUNER : no algorithm left for %s of %zu bytes; running %s", commFuncName(func), nBytes, commAlgoName(best));
  }
  out->algo = best;
  out->proto = bestProto;
  out->nChannels = pluginChannels ? pluginChannels : commTuneChannels(m, func, best, nBytes);
  out->chunkBytes = commTuneChunkBytes(m, bestProto);
  out->repeatable = !t->plugin;
  out->nBytes = nBytes;
  out->predictedUs = table[best][bestProto] >= 0
                         ? table[best][bestProto]
                         : commTunePredict(m, func, best, bestProto, nBytes, out->nChannels, out->chunkBytes, NULL);
  if (!t->plugin) {
    hit->valid = 1;
    hit->func = (int)func;
    hit->nBytes = nBytes;
    hit->choice = *out;
  }
  return commSuccess;
}
