/* The one place environment variables are read. docs/ENV.md lists every name used here and elsewhere.
 *
 * NCCL's variables: a variable of libcomm that NCCL also has (under its NCCL_ name) is read from the NCCL_
 * name when the COMM_ one is unset or empty (the alias table below), so a NCCL user's settings carry over;
 * the COMM_ name wins when both are set, and an INFO line (subsystem ENV) says which one gave the value.
 * How the values differ, where they do, is the consumers' business (their parsers accept NCCL's syntax);
 * the table's notes say it in the INFO line. NCCL variables libcomm does not provide are in the second
 * table: commParamWarnNccl, called at every communicator init, WARNs once per process for each of them
 * that is set (unless its value asks for what libcomm does anyway). */
#include "param.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "debug.h"

extern char** environ;

/* ---------------------------------------------------------------- NCCL's names */

typedef struct {
  const char* comm;
  const char* nccl;
  const char* note; /* how NCCL's values differ, printed with the INFO line (NULL: they do not) */
} paramAlias;

static const paramAlias aliases[] = {
    {"COMM_DEBUG", "NCCL_DEBUG", "ABORT is taken as INFO, VERSION as WARN"},
    {"COMM_DEBUG_SUBSYS", "NCCL_DEBUG_SUBSYS", "NCCL's subsystem names map onto libcomm's"},
    {"COMM_DEBUG_FILE", "NCCL_DEBUG_FILE", NULL},
    {"COMM_ALGO", "NCCL_ALGO", "NCCL's names: Tree is tree and colltree, CollnetDirect/CollnetChain collnet"},
    {"COMM_PROTO", "NCCL_PROTO", "libcomm has LL and Simple, no LL128"},
    {"COMM_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", NULL},
    {"COMM_SOCKET_NTHREADS", "NCCL_SOCKET_NTHREADS", NULL},
    {"COMM_NSOCKS_PERTHREAD", "NCCL_NSOCKS_PERTHREAD", NULL},
    {"COMM_IB_HCA", "NCCL_IB_HCA", NULL},
    {"COMM_IB_GID_INDEX", "NCCL_IB_GID_INDEX", NULL},
    {"COMM_IB_TIMEOUT", "NCCL_IB_TIMEOUT", NULL},
    {"COMM_IB_RETRY_CNT", "NCCL_IB_RETRY_CNT", NULL},
    {"COMM_IB_QPS_PER_CONNECTION", "NCCL_IB_QPS_PER_CONNECTION", NULL},
    {"COMM_IB_DISABLE", "NCCL_IB_DISABLE", NULL},
    {"COMM_NET", "NCCL_NET", NULL},
    {"COMM_NET_PLUGIN", "NCCL_NET_PLUGIN", "libcomm's plugin ABI, or NCCL's net v6-v11"},
    {"COMM_TUNER_PLUGIN", "NCCL_TUNER_PLUGIN", "libcomm's tuner ABI, or NCCL's tuner v2-v5"},
    {"COMM_NCHANNELS", "NCCL_MAX_NCHANNELS", NULL},
    {"COMM_DEV_NCHANNELS", "NCCL_MAX_NCHANNELS", NULL},
    {"COMM_BUFFSIZE", "NCCL_BUFFSIZE", NULL},
    {"COMM_P2P_DISABLE", "NCCL_P2P_DISABLE", NULL},
    {"COMM_P2P_LEVEL", "NCCL_P2P_LEVEL", "numbers are libcomm's path classes 0-5: LOC NVL PIX PXB PHB SYS"},
    {"COMM_SHM_DISABLE", "NCCL_SHM_DISABLE", NULL},
    {"COMM_NET_GDR_LEVEL", "NCCL_NET_GDR_LEVEL", "numbers are libcomm's path classes 0-5: LOC NVL PIX PXB PHB SYS"},
    {"COMM_TOPO_FILE", "NCCL_TOPO_FILE", "NCCL's format is read; the file is all there is (NCCL adds what it finds)"},
    {"COMM_TOPO_DUMP_FILE", "NCCL_TOPO_DUMP_FILE", "written in NCCL's format (COMM_TOPO_DUMP_FORMAT=comm: libcomm's)"},
    {"COMM_BLOCKING", "NCCL_COMM_BLOCKING", "commConfig_t.blocking wins over it"},
    {"COMM_COLLNET_ENABLE", "NCCL_COLLNET_ENABLE", NULL},
    {"COMM_HOSTID", "NCCL_HOSTID", NULL},
    {"COMM_ROOT", "NCCL_COMM_ID", NULL},
};
#define N_ALIASES (sizeof(aliases) / sizeof(aliases[0]))

/* NCCL variables libcomm does not provide. `same`: values (comma list, any case; "*": any) that ask for what
 * libcomm does anyway, so they are accepted without a WARN; `why`: what libcomm lacks, for the WARN. */
typedef struct {
  const char* nccl;
  const char* same;
  const char* why;
} paramNcclOnly;

static const paramNcclOnly ncclOnly[] = {
    {"NCCL_SOCKET_FAMILY", NULL, "libcomm picks the address family itself; COMM_SOCKET_IFNAME picks interfaces"},
    {"NCCL_PROFILER_PLUGIN", NULL, "libcomm has no profiler plugin interface"},
    {"NCCL_MIN_NCHANNELS", "0,1", "no minimum: the tuner picks each call's channels, at most COMM_NCHANNELS"},
    {"NCCL_IGNORE_CPU_AFFINITY", "0", "libcomm binds its threads within the process's CPU affinity only"},
    {"NCCL_LAUNCH_MODE", NULL, "libcomm has no launch modes"},
    {"NCCL_CUMEM_ENABLE", "0", "libcomm allocates device memory with cudaMalloc, not cuMem"},
    {"NCCL_CUMEM_HOST_ENABLE", "0", "libcomm allocates host memory without cuMem"},
    {"NCCL_NVLS_ENABLE", "0", "libcomm has no NVLink SHARP, NVLS"},
    {"NCCL_MNNVL_ENABLE", "0", "libcomm has no multi-node NVLink"},
    {"NCCL_NVB_DISABLE", "1", "libcomm does not route through an intermediate GPU"},
    {"NCCL_PXN_DISABLE", "1", "libcomm does not send through another GPU's NIC (PXN)"},
    {"NCCL_P2P_PXN_LEVEL", NULL, "libcomm does not send through another GPU's NIC (PXN)"},
    {"NCCL_RAS_ENABLE", "0", "libcomm has no RAS service"},
    {"NCCL_GDRCOPY_ENABLE", "0", "libcomm does not use GDRCopy"},
    {"NCCL_DMABUF_ENABLE", "1", "the IB network chooses with COMM_IB_GDR (dmabuf, peermem, 0)"},
    {"NCCL_CONF_FILE", NULL, "libcomm reads no configuration file (nor /etc/nccl.conf)"},
    {"NCCL_IB_GDR_LEVEL", NULL, "the old name: NCCL_NET_GDR_LEVEL is read"},
    {"NCCL_IB_SL", NULL, "the IB network uses service level 0"},
    {"NCCL_IB_TC", NULL, "the IB network sets no traffic class"},
    {"NCCL_IB_ADAPTIVE_ROUTING", NULL, "no such setting"},
    {"NCCL_IB_AR_THRESHOLD", NULL, "no such setting"},
    {"NCCL_IB_PCI_RELAXED_ORDERING", NULL, "no such setting"},
    {"NCCL_IB_SPLIT_DATA_ON_QPS", NULL, "messages are always striped over the QPs"},
    {"NCCL_CROSS_NIC", NULL, "no such setting: the topology places each channel's NIC"},
    {"NCCL_NET_GDR_READ", NULL, "no such setting (COMM_NET_GDR)"},
    {"NCCL_NET_SHARED_BUFFERS", NULL, "no such setting"},
    {"NCCL_NET_SHARED_COMMS", NULL, "no such setting"},
    {"NCCL_NCHANNELS_PER_NET_PEER", NULL, "no such setting"},
    {"NCCL_NTHREADS", NULL, "device kernels choose their threads per block"},
    {"NCCL_MIN_CTAS", NULL, "no minimum (COMM_DEV_NCHANNELS is the maximum)"},
    {"NCCL_MAX_CTAS", NULL, "COMM_DEV_NCHANNELS (or NCCL_MAX_NCHANNELS) is read"},
    {"NCCL_CGA_CLUSTER_SIZE", NULL, "no such setting"},
    {"NCCL_P2P_NET_CHUNKSIZE", NULL, "no such setting"},
    {"NCCL_P2P_NVL_CHUNKSIZE", NULL, "no such setting"},
    {"NCCL_P2P_PCI_CHUNKSIZE", NULL, "no such setting"},
    {"NCCL_LL_THRESHOLD", NULL, "COMM_DEV_LL_MAX is the nearest"},
    {"NCCL_TREE_THRESHOLD", NULL, "no such setting (COMM_ALGO)"},
    {"NCCL_CHECK_POINTERS", NULL, "no such setting"},
    {"NCCL_GRAPH_DUMP_FILE", NULL, "libcomm has no graph search (comm_topo shows rings and trees)"},
    {"NCCL_GRAPH_FILE", NULL, "libcomm has no graph search"},
    {"NCCL_DEBUG_TIMESTAMP_FORMAT", NULL, "log lines carry no timestamp"},
    {"NCCL_DEBUG_TIMESTAMP_LEVELS", NULL, "log lines carry no timestamp"},
    {"NCCL_WARN_ENABLE_DEBUG_INFO", NULL, "no such setting"},
    {"NCCL_SET_THREAD_NAME", NULL, "no such setting"},
    {"NCCL_ASYNC_ERROR_HANDLING", "*", "read by PyTorch, not by NCCL"},
    {"NCCL_BLOCKING_WAIT", "*", "read by PyTorch, not by NCCL"},
    {"NCCL_DESYNC_DEBUG", "*", "read by PyTorch, not by NCCL"},
};
#define N_NCCL_ONLY (sizeof(ncclOnly) / sizeof(ncclOnly[0]))

static int ncclWarned[N_NCCL_ONLY]; /* WARNed (or accepted) once in this process */
static int ncclUnknownLogged;
static uint64_t aliasLogged[N_ALIASES]; /* hash of the value last logged for an alias (0: none) */

static const paramAlias* findAlias(const char* name) {
  for (size_t i = 0; i < N_ALIASES; i++)
    if (strcmp(aliases[i].comm, name) == 0) return &aliases[i];
  return NULL;
}

static const char* envValue(const char* name) {
  const char* s = getenv(name);
  return s != NULL && *s != '\0' ? s : NULL;
}

const char* commParamLookup(const char* name, const char** source) {
  const char* s = envValue(name);
  const char* src = s ? name : NULL;
  const paramAlias* a = s ? NULL : findAlias(name);
  if (a && (s = envValue(a->nccl)) != NULL) src = a->nccl;
  if (source) *source = src;
  return s;
}

const char* commParamSource(const char* name) {
  const char* src = NULL;
  commParamLookup(name, &src);
  return src;
}

int commParamFromNccl(const char* name) {
  const char* src = commParamSource(name);
  return src != NULL && strncmp(src, "NCCL_", 5) == 0;
}

static uint64_t hashStr(const char* a, const char* b) {
  uint64_t h = 1469598103934665603ULL;
  for (const char* p = a; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
  h = (h ^ 0xff) * 1099511628211ULL;
  for (const char* p = b; p && *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
  return h | 1;
}

void commParamLogSource(const char* name, const char* shown) {
  const paramAlias* a = findAlias(name);
  if (a == NULL) return;
  const char* mine = envValue(name);
  const char* theirs = envValue(a->nccl);
  if (theirs == NULL) return;
  uint64_t h = hashStr(mine ? mine : "", theirs);
  uint64_t* last = &aliasLogged[a - aliases];
  if (__atomic_exchange_n(last, h, __ATOMIC_RELAXED) == h) return; /* logged already, with these values */
  if (mine) {
    INFO(COMM_ENV, "%s set by environment to %s (%s=%s is also set: %s wins)", name, shown ? shown : mine, a->nccl,
         theirs, name);
  } else {
    INFO(COMM_ENV, "%s (for %s) set by environment to %s%s%s%s", a->nccl, name, shown ? shown : theirs,
         a->note ? " (" : "", a->note ? a->note : "", a->note ? ")" : "");
  }
}

void commParamLogReset(void) {
  memset(aliasLogged, 0, sizeof(aliasLogged));
  memset(ncclWarned, 0, sizeof(ncclWarned));
  ncclUnknownLogged = 0;
}

/* Does `value` match one of the comma list `list` (any case; "*" matches everything)? */
static int valueIn(const char* value, const char* list) {
  if (list == NULL) return 0;
  if (strcmp(list, "*") == 0) return 1;
  size_t n = strlen(value);
  for (const char* p = list; *p;) {
    const char* e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && strncasecmp(p, value, n) == 0) return 1;
    p = e ? e + 1 : p + len;
  }
  return 0;
}

static int isAliasNccl(const char* name, size_t len) {
  for (size_t i = 0; i < N_ALIASES; i++)
    if (strlen(aliases[i].nccl) == len && strncmp(aliases[i].nccl, name, len) == 0) return 1;
  return 0;
}

int commParamWarnNccl(void) {
  int warned = 0;
  for (size_t i = 0; i < N_NCCL_ONLY; i++) {
    const char* v = envValue(ncclOnly[i].nccl);
    if (v == NULL || __atomic_exchange_n(&ncclWarned[i], 1, __ATOMIC_RELAXED)) continue;
    if (valueIn(v, ncclOnly[i].same)) {
      INFO(COMM_ENV, "%s=%s accepted, no effect (%s)", ncclOnly[i].nccl, v, ncclOnly[i].why);
    } else {
      WARN_NOTICE("%s=%s is set, but libcomm does not provide it (%s): ignored", ncclOnly[i].nccl, v, ncclOnly[i].why);
      warned++;
    }
  }
  if (__atomic_exchange_n(&ncclUnknownLogged, 1, __ATOMIC_RELAXED) || !COMM_LOG_ENABLED(COMM_LOG_INFO)) return warned;
  for (char** e = environ; e && *e; e++) {
    const char* eq = strchr(*e, '=');
    if (strncmp(*e, "NCCL_", 5) != 0 || eq == NULL || eq[1] == '\0') continue;
    size_t len = (size_t)(eq - *e);
    int known = isAliasNccl(*e, len);
    for (size_t i = 0; !known && i < N_NCCL_ONLY; i++)
      known = strlen(ncclOnly[i].nccl) == len && strncmp(ncclOnly[i].nccl, *e, len) == 0;
    if (!known) INFO(COMM_ENV, "%.*s is set; libcomm does not know it (a plugin may read it)", (int)len, *e);
  }
  return warned;
}

/* ---------------------------------------------------------------- values */

static int parseInt(const char* s, int64_t* out, int allowSuffix) {
  errno = 0;
  char* end = NULL;
  long long v = strtoll(s, &end, 0);
  if (errno != 0 || end == s) return -1;
  if (allowSuffix && *end) {
    int64_t mult = 1;
    switch (*end) {
      case 'k':
      case 'K': mult = 1LL << 10; break;
      case 'm':
      case 'M': mult = 1LL << 20; break;
      case 'g':
      case 'G': mult = 1LL << 30; break;
      default: return -1;
    }
    end++;
    if (*end == 'i' || *end == 'B' || *end == 'b') end++;
    if (*end == 'B') end++;
    if (v > INT64_MAX / mult || v < INT64_MIN / mult) return -1;
    v *= mult;
  }
  while (*end == ' ' || *end == '\t' || *end == '\n') end++;
  if (*end != '\0') return -1;
  *out = v;
  return 0;
}

/* A COMM_ value outside [min, max] is refused (the default); an NCCL_ one is clamped into it, as NCCL clamps
 * its own (its ranges are wider: NCCL_MAX_NCHANNELS=64 means "as many as there may be"). */
static int64_t paramNumber(const char* name, int64_t def, int64_t min, int64_t max, int allowSuffix) {
  const char* src = NULL;
  const char* s = commParamLookup(name, &src);
  if (s == NULL) return def;
  int nccl = src != name;
  int64_t v;
  if (parseInt(s, &v, allowSuffix) != 0) {
    WARN_NOTICE("%s=%s%s%s%s is not %s; using the default %lld", src, s, nccl ? " (for " : "", nccl ? name : "",
                nccl ? ")" : "", allowSuffix ? "a size" : "an integer", (long long)def);
    return def;
  }
  if ((v < min || v > max) && !nccl) {
    WARN_NOTICE("%s=%s is outside [%lld, %lld]; using the default %lld", name, s, (long long)min, (long long)max,
                (long long)def);
    return def;
  }
  char shown[96];
  if (v < min || v > max) {
    int64_t c = v < min ? min : max;
    snprintf(shown, sizeof(shown), "%lld, clamped to %lld (libcomm's range [%lld, %lld])", (long long)v, (long long)c,
             (long long)min, (long long)max);
    v = c;
  } else {
    snprintf(shown, sizeof(shown), "%lld", (long long)v);
  }
  const paramAlias* a = findAlias(name);
  if (a != NULL && envValue(a->nccl) != NULL) commParamLogSource(name, shown);
  else INFO(COMM_ENV, "%s set by environment to %lld", name, (long long)v);
  return v;
}

int64_t commParamInt(const char* name, int64_t def, int64_t min, int64_t max) {
  return paramNumber(name, def, min, max, 0);
}

int64_t commParamSize(const char* name, int64_t def, int64_t min, int64_t max) {
  return paramNumber(name, def, min, max, 1);
}

const char* commParamStr(const char* name, const char* def) {
  const char* s = commParamLookup(name, NULL);
  if (s == NULL) return def;
  commParamLogSource(name, NULL);
  return s;
}
