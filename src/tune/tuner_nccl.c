/* NCCL's tuner plugins in libcomm: the tuner library looked up as NCCL looks it up, and an adapter that puts an
 * NCCL tuner (ncclTunerPlugin_v5 .. _v2, src/tune/tuner_nccl.h) behind libcomm's own tuner table
 * (include/comm_tuner.h), so that tuner.c drives either kind alike.
 *
 * The library (commTunerOpenLibrary): COMM_TUNER_PLUGIN (or NCCL_TUNER_PLUGIN) as given (a path or a file name),
 * else for a name NAME libcomm-tuner-NAME.so and libnccl-tuner-NAME.so; unset: NCCL's default libnccl-tuner.so
 * (silently absent); "none": no tuner. When none of these opens, the network plugin's library (the one
 * COMM_NET_PLUGIN / NCCL_NET_PLUGIN names, or the default libnccl-net.so, if this process has it loaded) is
 * used when it carries a tuner, as NCCL does.
 *
 * The cost table. libcomm prices its algorithms x protocols (rows ring, tree, colltree, pat, oneshot, pairwise,
 * collnet; columns LL, Simple); the plugin sees NCCL's table (rows Tree, Ring, CollNetDirect, CollNetChain,
 * NVLS, NVLSTree, PAT; columns LL, LL128, Simple), filled as
 *    Tree          <- the cheaper of libcomm's tree and colltree (its representative, per protocol)
 *    Ring          <- ring                      PAT <- pat
 *    CollNetDirect, CollNetChain <- collnet     NVLS, NVLSTree, and the LL128 column: NCCL_ALGO_PROTO_IGNORE
 *    LL <- LL, Simple <- Simple
 * and read back, where the plugin changed an entry: Ring, PAT as they are; Tree into its representative (a
 * negative value disables tree and colltree both); collnet takes the lower non-negative of CollNetDirect and
 * CollNetChain (both negative: disabled). Values the plugin gives NVLS, NVLSTree or LL128 have no libcomm
 * counterpart and are ignored, with one INFO per communicator. libcomm's oneshot and pairwise have no NCCL row:
 * they keep libcomm's price, so an entry the plugin lowers below it (as a v2 choice is: set to 0) wins over
 * them. v2's choice of an algorithm and protocol becomes a 0 at that entry (when the entry can run), as NCCL
 * does. The plugin is not asked about alltoall (NCCL's tuner never is; libcomm's alltoall is pairwise). A
 * getCollInfo that fails leaves libcomm's table (one WARN per communicator). SPDX-License-Identifier: Apache-2.0 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "communicator.h"
#include "debug.h"
#include "param.h"
#include "tune.h"
#include "tuner_nccl.h"

/* ---------------------------------------------------------------- the library */

static void* tnDlopen(const char* name, int flags, char* err, size_t errLen, int* absent) {
  void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL | flags);
  if (!h && err) {
    const char* e = dlerror();
    snprintf(err, errLen, "%s", e ? e : "unknown error");
    *absent = strstr(err, "No such file or directory") != NULL;
  }
  return h;
}

/* NAME, then for a name (no '/' and not a file name lib*.so) prefix-NAME.so for each prefix. */
static void* tnOpenName(const char* name, const char* const* prefixes, int flags, char* opened, size_t openedLen,
                        char* err, size_t errLen, int* absent) {
  int gone = 1, g = 0;
  char e2[256];
  void* h = tnDlopen(name, flags, err, errLen, &gone);
  snprintf(opened, openedLen, "%s", name);
  size_t len = strlen(name);
  int alts = !strchr(name, '/') && !(strncmp(name, "lib", 3) == 0 && len > 3 && strcmp(name + len - 3, ".so") == 0);
  for (int i = 0; !h && alts && prefixes[i]; i++) {
    snprintf(opened, openedLen, "%s-%s.so", prefixes[i], name);
    h = tnDlopen(opened, flags, e2, sizeof(e2), &g);
    gone &= g;
  }
  if (absent) *absent = !h && gone;
  return h;
}

static int tnHasTuner(void* h) {
  static const char* const syms[] = {COMM_TUNER_PLUGIN_SYMBOL, NCCL_TUNER_SYMBOL_V5, NCCL_TUNER_SYMBOL_V4,
                                     NCCL_TUNER_SYMBOL_V3, NCCL_TUNER_SYMBOL_V2};
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
    if (dlsym(h, syms[i])) return 1;
  return 0;
}

/* The network plugin's library, if this process has it loaded (RTLD_NOLOAD) and it carries a tuner. */
static void* tnFromNetLibrary(char* what, size_t whatLen) {
  static const char* const netPrefixes[] = {"libcomm-net", "libnccl-net", NULL};
  const char* name = commParamStr("COMM_NET_PLUGIN", NULL);
  const char* list = name ? name : "libnccl-net.so";
  if (strcasecmp(list, "none") == 0 || strcasecmp(list, "socket") == 0) return NULL;
  for (const char* s = list; *s;) {
    size_t n = strcspn(s, ",");
    char item[256];
    snprintf(item, sizeof(item), "%.*s", (int)n, s);
    s += n + (s[n] == ',');
    if (!item[0]) continue;
    void* h = tnOpenName(item, netPrefixes, RTLD_NOLOAD, what, whatLen, NULL, 0, NULL);
    if (h && tnHasTuner(h)) return h;
    if (h) dlclose(h);
  }
  return NULL;
}

void* commTunerOpenLibrary(char* what, size_t whatLen, int* isDefault) {
  static const char* const prefixes[] = {"libcomm-tuner", "libnccl-tuner", NULL};
  const char* name = commParamStr("COMM_TUNER_PLUGIN", NULL);
  const char* var = name ? commParamSource("COMM_TUNER_PLUGIN") : "COMM_TUNER_PLUGIN";
  *isDefault = name == NULL;
  if (name && strcasecmp(name, "none") == 0) {
    INFO(COMM_TUNE | COMM_INIT, "TUNER : %s=none: no tuner plugin", var);
    return NULL;
  }
  char err[512] = "";
  int absent = 0;
  void* h = tnOpenName(name ? name : "libnccl-tuner.so", prefixes, 0, what, whatLen, err, sizeof(err), &absent);
  if (h) return h;
  char net[300] = "";
  void* fromNet = tnFromNetLibrary(net, sizeof(net));
  if (name || !absent)
    WARN("TUNER : cannot load %s%s%s: %s; %s%s", name ? var : "the default NCCL tuner plugin ", name ? "=" : "",
         name ? name : "libnccl-tuner.so", err,
         fromNet ? "using the tuner of the network plugin's library " : "using the built-in cost model only",
         fromNet ? net : "");
  if (!fromNet) return NULL;
  INFO(COMM_TUNE | COMM_INIT, "TUNER : the network plugin's library %s carries a tuner plugin: using it", net);
  snprintf(what, whatLen, "%s", net);
  *isDefault = 0;
  return fromNet;
}

/* ---------------------------------------------------------------- the adapter */

typedef struct {
  int version; /* 2 .. 5 */
  union {
    const ncclTuner_v2_t* v2;
    const ncclTuner_v3_t* v3;
    const ncclTuner_v4_t* v4;
    const ncclTuner_v5_t* v5;
  } t;
  const char* name;
  void* ctx; /* the plugin's */
  int nNodes;
  int ignoredNoted; /* the INFO about entries without a libcomm counterpart was given */
  int failNoted;    /* the WARN about a failed getCollInfo was given */
} tnCtx;

static void tnLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags;
  if (level == NCCL_LOG_NONE || !fmt) return;
  commLogLevel_t lvl = level == NCCL_LOG_WARN || level == NCCL_LOG_ABORT ? COMM_LOG_WARN
                       : level == NCCL_LOG_TRACE                         ? COMM_LOG_TRACE
                                                                         : COMM_LOG_INFO;
  if (lvl != COMM_LOG_WARN && !COMM_LOG_ENABLED((int)lvl)) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  commLog(lvl, lvl == COMM_LOG_WARN ? (unsigned long)COMM_ALLSUBSYS : (unsigned long)COMM_TUNE, file ? file : "?", line,
          "%s", buf);
}

/* libcomm's collectives as NCCL numbers them; -1: not asked (alltoall). */
static int tnFunc(commTunerFunc_t f) {
  switch (f) {
    case COMM_TUNER_FUNC_ALLREDUCE: return ncclFuncAllReduce;
    case COMM_TUNER_FUNC_BROADCAST: return ncclFuncBroadcast;
    case COMM_TUNER_FUNC_REDUCE: return ncclFuncReduce;
    case COMM_TUNER_FUNC_ALLGATHER: return ncclFuncAllGather;
    case COMM_TUNER_FUNC_REDUCESCATTER: return ncclFuncReduceScatter;
    default: return -1;
  }
}

/* NCCL's protocol column of libcomm's protocol p. */
static const int tnProto[COMM_TUNER_NUM_PROTOS] = {NCCL_PROTO_LL, NCCL_PROTO_SIMPLE};

static int tnChanged(float a, float b) { return memcmp(&a, &b, sizeof(a)) != 0; }

/* The plugin's choice of v2 as a table entry: 0 where it can run (NCCL's rule). 1 when the choice names what
 * libcomm lacks. */
static int tnApplyChoice(float nt[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS], int a, int p) {
  if (a < 0 || a >= NCCL_NUM_ALGORITHMS || p < 0 || p >= NCCL_NUM_PROTOCOLS) return 0;
  if (a == NCCL_ALGO_NVLS || a == NCCL_ALGO_NVLS_TREE || p == NCCL_PROTO_LL128) return 1;
  if (nt[a][p] != (float)NCCL_ALGO_PROTO_IGNORE) nt[a][p] = 0.0f;
  return 0;
}

static commResult_t tnGetCollInfo(void* context, commTunerFunc_t func, size_t nBytes,
                                  float (*table)[COMM_TUNER_NUM_PROTOS], int* nChannels) {
  tnCtx* c = (tnCtx*)context;
  int nf = tnFunc(func);
  if (nf < 0) return commSuccess;
  float nt[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS], before[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
  int treeRep[COMM_TUNER_NUM_PROTOS];
  for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++)
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) nt[a][p] = (float)NCCL_ALGO_PROTO_IGNORE;
  for (int lp = 0; lp < COMM_TUNER_NUM_PROTOS; lp++) {
    int np = tnProto[lp];
    float tr = table[COMM_TUNER_ALGO_TREE][lp], ct = table[COMM_TUNER_ALGO_COLLTREE][lp];
    int rep = tr >= 0 && (!(ct >= 0) || tr <= ct) ? COMM_TUNER_ALGO_TREE
              : ct >= 0                           ? COMM_TUNER_ALGO_COLLTREE
              : c->nNodes > 1                     ? COMM_TUNER_ALGO_COLLTREE
                                                  : COMM_TUNER_ALGO_TREE;
    treeRep[lp] = rep;
    nt[NCCL_ALGO_TREE][np] = table[rep][lp];
    nt[NCCL_ALGO_RING][np] = table[COMM_TUNER_ALGO_RING][lp];
    nt[NCCL_ALGO_COLLNET_DIRECT][np] = table[COMM_TUNER_ALGO_COLLNET][lp];
    nt[NCCL_ALGO_COLLNET_CHAIN][np] = table[COMM_TUNER_ALGO_COLLNET][lp];
    nt[NCCL_ALGO_PAT][np] = table[COMM_TUNER_ALGO_PAT][lp];
  }
  memcpy(before, nt, sizeof(nt));
  int ch = 0, lacking = 0;
  ncclResult_t r;
  float** costs = (float**)nt; /* NCCL hands the table's first row as float** */
  switch (c->version) {
    case 2: {
      int a = NCCL_ALGO_UNDEF, p = NCCL_PROTO_UNDEF;
      int collnet = nt[NCCL_ALGO_COLLNET_CHAIN][NCCL_PROTO_SIMPLE] >= 0;
      r = c->t.v2->getCollInfo(c->ctx, (ncclFunc_t)nf, nBytes, collnet, 0, 1, &a, &p, &ch);
      if (r == ncclSuccess) lacking = tnApplyChoice(nt, a, p);
      break;
    }
    case 3:
      r = c->t.v3->getCollInfo(c->ctx, (ncclFunc_t)nf, nBytes, 1, costs, NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, &ch);
      break;
    case 4:
      r = c->t.v4->getCollInfo(c->ctx, (ncclFunc_t)nf, nBytes, 1, costs, NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, 0,
                               &ch);
      break;
    default:
      r = c->t.v5->getCollInfo(c->ctx, (ncclFunc_t)nf, nBytes, 1, costs, NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, 0,
                               &ch);
      break;
  }
  if (r != ncclSuccess) {
    if (!c->failNoted++)
      WARN("TUNER : NCCL tuner plugin %s: getCollInfo failed (%d): libcomm's own choice for such calls (said once "
           "per communicator)",
           c->name, (int)r);
    return commSuccess;
  }
  for (int lp = 0; lp < COMM_TUNER_NUM_PROTOS; lp++) {
    int np = tnProto[lp];
    if (tnChanged(nt[NCCL_ALGO_RING][np], before[NCCL_ALGO_RING][np]))
      table[COMM_TUNER_ALGO_RING][lp] = nt[NCCL_ALGO_RING][np];
    if (tnChanged(nt[NCCL_ALGO_PAT][np], before[NCCL_ALGO_PAT][np]))
      table[COMM_TUNER_ALGO_PAT][lp] = nt[NCCL_ALGO_PAT][np];
    float tree = nt[NCCL_ALGO_TREE][np];
    if (tnChanged(tree, before[NCCL_ALGO_TREE][np])) {
      table[treeRep[lp]][lp] = tree;
      if (!(tree >= 0)) table[COMM_TUNER_ALGO_TREE][lp] = table[COMM_TUNER_ALGO_COLLTREE][lp] = COMM_TUNER_UNSUPPORTED;
    }
    float d = nt[NCCL_ALGO_COLLNET_DIRECT][np], k = nt[NCCL_ALGO_COLLNET_CHAIN][np];
    if (tnChanged(d, before[NCCL_ALGO_COLLNET_DIRECT][np]) || tnChanged(k, before[NCCL_ALGO_COLLNET_CHAIN][np]))
      table[COMM_TUNER_ALGO_COLLNET][lp] = d >= 0 && (!(k >= 0) || d <= k) ? d : k >= 0 ? k : COMM_TUNER_UNSUPPORTED;
  }
  for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++)
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++)
      if ((a == NCCL_ALGO_NVLS || a == NCCL_ALGO_NVLS_TREE || p == NCCL_PROTO_LL128) && nt[a][p] >= 0) lacking = 1;
  if (lacking && !c->ignoredNoted++)
    INFO(COMM_TUNE,
         "TUNER : NCCL tuner plugin %s chose or priced NVLS, NVLSTree or LL128, which libcomm does not "
         "have: ignored (said once per communicator)",
         c->name);
  if (ch > 0) *nChannels = ch;
  return commSuccess;
}

static commResult_t tnDestroy(void* context) {
  tnCtx* c = (tnCtx*)context;
  if (!c) return commSuccess;
  ncclResult_t r = ncclSuccess;
  if (c->version == 5 && c->t.v5->finalize) r = c->t.v5->finalize(c->ctx);
  else if (c->version == 4 && c->t.v4->destroy) r = c->t.v4->destroy(c->ctx);
  else if (c->version == 3 && c->t.v3->destroy) r = c->t.v3->destroy(c->ctx);
  else if (c->version == 2 && c->t.v2->destroy) r = c->t.v2->destroy(c->ctx);
  free(c);
  return r == ncclSuccess ? commSuccess : commInternalError;
}

static const commTuner_v1_t tnTable = {.name = "NCCL tuner adapter",
                                       .getCollInfo = tnGetCollInfo,
                                       .destroy = tnDestroy};

/* v5's NVLink domains: libcomm knows no NVLink fabric across hosts, so each node is one domain. */
static void tnNvlDomains(const struct commComm* comm, ncclNvlDomainInfo_v5_t* d) {
  d->nNvlDomains = comm->nNodes;
  d->minRanksPerNvlDomain = comm->nRanks;
  d->maxRanksPerNvlDomain = 0;
  for (int node = 0; node < comm->nNodes; node++) {
    int k = 0;
    for (int r = 0; r < comm->nRanks; r++) k += comm->rankNode[r] == node;
    if (k < d->minRanksPerNvlDomain) d->minRanksPerNvlDomain = k;
    if (k > d->maxRanksPerNvlDomain) d->maxRanksPerNvlDomain = k;
  }
}

const commTuner_v1_t* commTunerNcclLoad(void* lib, const char* what, const struct commComm* comm, void** context,
                                        int* found) {
  static const char* const syms[] = {NCCL_TUNER_SYMBOL_V5, NCCL_TUNER_SYMBOL_V4, NCCL_TUNER_SYMBOL_V3,
                                     NCCL_TUNER_SYMBOL_V2};
  *context = NULL;
  *found = 0;
  tnCtx c = {0};
  for (int i = 0; i < 4 && !c.version; i++) {
    const void* t = dlsym(lib, syms[i]);
    if (!t) continue;
    c.version = 5 - i;
    c.t.v5 = (const ncclTuner_v5_t*)t; /* the union's members are all a table pointer */
  }
  if (!c.version) return NULL;
  *found = 1;
  /* name, init, getCollInfo lead every version's table */
  c.name = c.t.v2->name && c.t.v2->name[0] ? c.t.v2->name : "unnamed";
  c.nNodes = comm->nNodes;
  if (!c.t.v2->init || !c.t.v2->getCollInfo) {
    WARN("TUNER : %s exports ncclTunerPlugin_v%d (%s) without init or getCollInfo; using the built-in cost model "
         "only",
         what, c.version, c.name);
    return NULL;
  }
  tnCtx* mine = malloc(sizeof(*mine));
  if (!mine) {
    WARN("TUNER : out of memory for the NCCL tuner adapter; using the built-in cost model only");
    return NULL;
  }
  ncclResult_t r;
  ncclTunerConstants_v5_t constants, zero;
  memset(&constants, 0, sizeof(constants));
  memset(&zero, 0, sizeof(zero));
  if (c.version == 5) {
    ncclNvlDomainInfo_v5_t nvl;
    tnNvlDomains(comm, &nvl);
    r = c.t.v5->init(&c.ctx, comm->commHash, (size_t)comm->nRanks, (size_t)comm->nNodes, tnLogger, &nvl, &constants);
  } else {
    r = c.t.v2->init((size_t)comm->nRanks, (size_t)comm->nNodes, tnLogger, &c.ctx); /* same in v2, v3, v4 */
  }
  if (r != ncclSuccess) {
    free(mine);
    WARN("TUNER : NCCL tuner plugin %s (ncclTunerPlugin_v%d) failed to initialise (%d); using the built-in cost "
         "model only",
         c.name, c.version, (int)r);
    return NULL;
  }
  *mine = c;
  *context = mine;
  INFO(COMM_TUNE | COMM_INIT, "TUNER : using NCCL tuner plugin %s (ncclTunerPlugin_v%d) from %s through the adapter",
       c.name, c.version, what);
  if (memcmp(&constants, &zero, sizeof(zero)) != 0)
    INFO(COMM_TUNE,
         "TUNER : NCCL tuner plugin %s set NCCL's tuning constants: not used (libcomm's cost model has "
         "its own)",
         c.name);
  return &tnTable;
}
