/* Which network the net transport runs over, and its per-communicator state: a plugin library named by
 * COMM_NET_PLUGIN or NCCL_NET_PLUGIN (libcomm's interface or NCCL's, through the adapter; unset: NCCL's default
 * libnccl-net.so when there is one), else a built-in network, IB (over libibverbs, or with COMM_IB_FAKE the
 * tests' verbs fake module) or Socket, chosen by the config, COMM_NET or automatically; commNetInit /
 * commNetFinalize make and tear down a communicator's commNetState. The connections themselves are in
 * transports/net/net.c. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm_net.h"
#include "communicator.h"
#include "debug.h"
#include "net_internal.h"
#include "nccl/net_nccl.h"
#include "param.h"
#include "transport.h"
#include "utils.h"
#ifdef COMM_HAVE_IBVERBS
#include "ib/net_ib.h"
#endif

/* ---------------------------------------------------------------- plugin loading (process-wide) */

static pthread_mutex_t netPluginLock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  char name[256];
  void* handle;
  const commNet_t* net;
  commNet_t fromV1; /* a version-1 plugin's table, widened (connectPaired NULL) */
  int viaAdapter;   /* an NCCL plugin: commNetNcclUnwrap before closing it */
  int refs;
} netPlugin;
/* NCCL's default network plugin, looked for when neither COMM_NET_PLUGIN nor NCCL_NET_PLUGIN is set. */
#define NET_DEFAULT_PLUGIN "libnccl-net.so"
static int netSocketInitDone;

void commNetPluginLogger(commNetLogLevel_t level, const char* file, int line, const char* fmt, ...) {
  commLogLevel_t lvl = level == COMM_NET_LOG_WARN   ? COMM_LOG_WARN
                       : level == COMM_NET_LOG_INFO ? COMM_LOG_INFO
                                                    : COMM_LOG_TRACE;
  if (lvl != COMM_LOG_WARN && !COMM_LOG_ENABLED((int)lvl)) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  commLog(lvl, lvl == COMM_LOG_WARN ? (unsigned long)COMM_ALLSUBSYS : (unsigned long)COMM_NET, file, line, "%s", buf);
}

static int netUsable(const commNet_t* net, const char* what) {
  int ndev = 0;
  if (net->version != COMM_NET_PLUGIN_VERSION && net->version != 1) {
    WARN("NET : plugin %s has version %d, expected 1 or %d", what, net->version, COMM_NET_PLUGIN_VERSION);
    return 0;
  }
  if (net->init(commNetPluginLogger) != commSuccess) {
    WARN("NET : plugin %s failed to initialise", what);
    return 0;
  }
  if (net->devices(&ndev) != commSuccess || ndev < 1) {
    WARN("NET : plugin %s has no device", what);
    return 0;
  }
  return 1;
}

/* dlopen of `name`; *absent set when the loader found no such file (not when it found one it could not load). */
static void* netDlopen(const char* name, char* err, size_t errLen, int* absent) {
  void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = dlerror();
    snprintf(err, errLen, "%s", e ? e : "unknown error");
    *absent = strstr(err, "No such file or directory") != NULL;
  }
  return handle;
}

/* The value as given; then, for a name (no '/', and not itself a file name lib*.so), libcomm-net-<name>.so
 * and libnccl-net-<name>.so, as NCCL tries libnccl-net-<name>.so. */
static void* netOpen(const char* name, char* why, size_t whyLen, int* absent) {
  char firstErr[512] = "", err[512];
  int gone = 0, altGone = 1;
  void* handle = netDlopen(name, firstErr, sizeof(firstErr), &gone);
  size_t len = strlen(name);
  int alts = !strchr(name, '/') && !(strncmp(name, "lib", 3) == 0 && len > 3 && strcmp(name + len - 3, ".so") == 0);
  static const char* const altNames[] = {"libcomm-net-%s.so", "libnccl-net-%s.so"};
  for (size_t i = 0; !handle && alts && i < sizeof(altNames) / sizeof(altNames[0]); i++) {
    char alt[300];
    int g = 0;
    snprintf(alt, sizeof(alt), altNames[i], name);
    handle = netDlopen(alt, err, sizeof(err), &g);
    altGone &= g;
  }
  if (!handle)
    snprintf(why, whyLen, "%s%s", firstErr, alts ? " (nor libcomm-net-<name>.so, libnccl-net-<name>.so)" : "");
  *absent = !handle && gone && altGone;
  return handle;
}

void* commNetPluginOpen(const char* name, char* why, size_t whyLen) {
  int absent = 0;
  return netOpen(name, why, whyLen, &absent);
}

/* Load (or share) the network library `name` (an item of COMM_NET_PLUGIN / NCCL_NET_PLUGIN, or NCCL's default
 * libnccl-net.so when `isDefault`); NULL with a WARN if it cannot be used (the default one is silently absent).
 * The library exports libcomm's commNetPlugin_v2 or _v1, else an NCCL network plugin (ncclNetPlugin_v11 ..
 * _v6), used through the adapter in transports/net/nccl/. Called with netPluginLock held. */
static const commNet_t* netLoadLibrary(const char* name, int isDefault) {
  const char* var = isDefault ? "the default NCCL network plugin" : commParamSource("COMM_NET_PLUGIN");
  if (netPlugin.refs > 0) {
    if (strcmp(netPlugin.name, name) == 0) {
      netPlugin.refs++;
      return netPlugin.net;
    }
    WARN("NET : %s=%s but plugin %s is already in use by this process", var, name, netPlugin.name);
    return NULL;
  }
  char why[600];
  int absent = 0;
  void* handle = netOpen(name, why, sizeof(why), &absent);
  if (!handle && isDefault && absent) {
    INFO(COMM_NET | COMM_INIT, "NET : no %s (%s is not on the library path): the built-in networks", var, name);
    return NULL;
  }
  if (!handle) {
    WARN("NET : cannot load %s%s%s: %s", var, isDefault ? " " : "=", name, why);
    return NULL;
  }
  const commNet_t* net = (const commNet_t*)dlsym(handle, COMM_NET_PLUGIN_SYMBOL);
  if (net && net->version != COMM_NET_PLUGIN_VERSION) {
    WARN("NET : %s exports %s with version %d", name, COMM_NET_PLUGIN_SYMBOL, net->version);
    dlclose(handle);
    return NULL;
  }
  const commNet_v1_t* v1 = net ? NULL : (const commNet_v1_t*)dlsym(handle, COMM_NET_PLUGIN_SYMBOL_V1);
  if (v1 && v1->version == COMM_NET_PLUGIN_VERSION) {
    /* A version-1 plugin rebuilt against this header: its table has this header's layout. */
    net = (const commNet_t*)v1;
    v1 = NULL;
  }
  if (v1) {
    if (v1->version != 1) {
      WARN("NET : %s exports %s with version %d", name, COMM_NET_PLUGIN_SYMBOL_V1, v1->version);
      dlclose(handle);
      return NULL;
    }
    /* The version-2 table begins with the version-1 fields, in the same order. */
    memset(&netPlugin.fromV1, 0, sizeof(netPlugin.fromV1));
    memcpy(&netPlugin.fromV1, v1, sizeof(*v1));
    net = &netPlugin.fromV1;
  }
  int viaAdapter = 0;
  if (!net) {
    net = commNetNcclWrap(handle, name); /* an NCCL network plugin, through the adapter */
    viaAdapter = net != NULL;
  }
  if (!net) {
    WARN("NET : %s exports neither %s nor %s, nor a supported NCCL network plugin (%s .. %s)", name,
         COMM_NET_PLUGIN_SYMBOL, COMM_NET_PLUGIN_SYMBOL_V1, NET_NCCL_SYMBOL_V11, NET_NCCL_SYMBOL_V6);
    dlclose(handle);
    return NULL;
  }
  if (!netUsable(net, name)) {
    if (viaAdapter) commNetNcclUnwrap();
    dlclose(handle);
    return NULL;
  }
  snprintf(netPlugin.name, sizeof(netPlugin.name), "%s", name);
  netPlugin.handle = handle;
  netPlugin.net = net;
  netPlugin.viaAdapter = viaAdapter;
  netPlugin.refs = 1;
  return net;
}

/* ---------------------------------------------------------------- built-in networks: IB and Socket */

/* The built-in IB network, probed once per process (called with netPluginLock held): the real libibverbs,
 * or with COMM_IB_FAKE=<n>[:ib|:roce][:gdr|:gdrfail] (tests only) the verbs fake, a module loaded by
 * ib/ib_verbs_fake_load.c, with n active one-port devices (InfiniBand, or RoCE with v2 GIDs). The fake
 * connects QPs only within this process, so it serves ranks that are threads of one process. NULL when IB
 * cannot be used, with the reason in `why`. */
#ifdef COMM_HAVE_IBVERBS
static int netIbState; /* 0: not probed; 1: usable; -1: not usable (netIbWhy says why) */
static char netIbWhy[512];
static char netIbHow[128];     /* what IB runs over, for the INFO line */
static const commNet_t* netIb; /* the IB table, once usable */

const commIbVerbs* commNetIbVerbs(char* how, size_t howLen, char* why, size_t whyLen) {
  const char* fake = commParamStr("COMM_IB_FAKE", NULL);
  const commIbVerbs* verbs = NULL;
  if (fake && *fake && strcmp(fake, "0") != 0) {
    verbs = commIbVerbsLoadFake(fake, why, whyLen);
    if (verbs) snprintf(netIbHow, sizeof(netIbHow), "fake verbs (COMM_IB_FAKE=%s, tests only)", fake);
  } else {
    char loadWhy[256] = "";
    if (commIbVerbsLoad(&verbs, loadWhy, sizeof(loadWhy)) != commSuccess || !verbs) {
      verbs = NULL;
      snprintf(why, whyLen, "libibverbs cannot be loaded (%s)", loadWhy);
    } else {
      snprintf(netIbHow, sizeof(netIbHow), "%s", verbs->name);
    }
  }
  if (how && howLen) snprintf(how, howLen, "%s", netIbHow);
  return verbs;
}

static const commNet_t* netIbGet(char* why, size_t whyLen) {
  if (netIbState == 0) {
    netIbState = -1;
    const commIbVerbs* verbs = commNetIbVerbs(NULL, 0, netIbWhy, sizeof(netIbWhy));
    if (verbs) {
      const commNet_t* ib = commNetIbPlugin(verbs);
      const char* hca = commParamStr("COMM_IB_HCA", NULL);
      int ndev = 0;
      if (ib->init(commNetPluginLogger) != commSuccess) {
        snprintf(netIbWhy, sizeof(netIbWhy), "the IB network failed to initialise over %s", netIbHow);
      } else if (ib->devices(&ndev) != commSuccess || ndev < 1) {
        snprintf(netIbWhy, sizeof(netIbWhy), "%s found no active RDMA port%s%s", netIbHow,
                 hca && *hca ? " selected by COMM_IB_HCA=" : "", hca && *hca ? hca : "");
      } else {
        netIbState = 1;
        netIb = ib;
        INFO(COMM_NET | COMM_INIT, "NET : IB is usable: %d active RDMA port(s) over %s", ndev, netIbHow);
      }
    }
  }
  if (netIbState == 1) return netIb;
  snprintf(why, whyLen, "%s", netIbWhy);
  return NULL;
}
#else
static const commNet_t* netIbGet(char* why, size_t whyLen) {
  snprintf(why, whyLen, "the IB transport is not built into this library (COMM_IB=OFF, or no <infiniband/verbs.h>)");
  return NULL;
}
#endif

/* The built-in Socket network, initialised once per process. */
static const commNet_t* netSocket(void) {
  if (!netSocketInitDone) netSocketInitDone = netUsable(&commNetSocket, "Socket");
  return netSocketInitDone ? &commNetSocket : NULL;
}

/* Drop this process's reference to the plugin library (called with netPluginLock held). */
static void netPluginReleaseLocked(void) {
  if (--netPlugin.refs == 0) {
    if (netPlugin.viaAdapter) commNetNcclUnwrap();
    dlclose(netPlugin.handle);
    memset(&netPlugin, 0, sizeof(netPlugin));
  }
}

/* Choose between the built-in networks (called with netPluginLock held): `forced` ("IB" or "Socket", any
 * case; NULL: automatic) comes from the config's netName or COMM_NET (`source` names which). Automatic: IB
 * when usable (the real libibverbs loads and has an active port that COMM_IB_HCA selects) and not disabled
 * by COMM_IB_DISABLE, else Socket. A forced network that cannot be had fails (commInvalidUsage, a WARN
 * saying why), as NCCL's NCCL_NET does: no fallback; `pluginNet` is the network of the plugin loaded, for the
 * WARN. *out NULL when even Socket cannot be used. */
static commResult_t netChooseBuiltin(const char* forced, const char* source, const char* pluginNet,
                                     const commNet_t** out) {
  char why[512] = "";
  const commNet_t* net = NULL;
  const char* ibOff = commParamInt("COMM_IB_DISABLE", 0, 0, 1) == 1 ? commParamSource("COMM_IB_DISABLE") : NULL;
  *out = NULL;
  if (forced && strcasecmp(forced, "Socket") == 0) {
    INFO(COMM_NET | COMM_INIT, "NET : using the built-in Socket network (%s=%s)", source, forced);
  } else if (forced && strcasecmp(forced, "IB") == 0) {
    if (!ibOff) net = netIbGet(why, sizeof(why));
    else snprintf(why, sizeof(why), "%s=1 disables it", ibOff);
    if (!net) {
      WARN("NET : %s=%s, but IB cannot be used: %s", source, forced, why);
      return commInvalidUsage;
    }
    INFO(COMM_NET | COMM_INIT, "NET : using the built-in IB network (%s=%s)", source, forced);
    *out = net;
    return commSuccess;
  } else if (forced) {
    WARN("NET : %s=%s names no network libcomm has: the built-in IB and Socket, %s%s", source, forced,
         pluginNet ? "and the plugin's " : "or a plugin's (COMM_NET_PLUGIN)", pluginNet ? pluginNet : "");
    return commInvalidUsage;
  } else if (ibOff) {
    INFO(COMM_NET | COMM_INIT, "NET : using the built-in Socket network (automatic: %s=1 disables IB)", ibOff);
  } else {
    net = netIbGet(why, sizeof(why));
    if (net) INFO(COMM_NET | COMM_INIT, "NET : using the built-in IB network (automatic: IB has an active RDMA port)");
    else INFO(COMM_NET | COMM_INIT, "NET : using the built-in Socket network (automatic: IB cannot be used: %s)", why);
  }
  *out = net ? net : netSocket();
  return commSuccess;
}

/* Is the plugin variable's value one that names no library: libcomm's "socket" (the built-in Socket network)
 * or NCCL's "none" (the built-in networks)? */
static int netNoLibrary(const char* name) { return strcasecmp(name, "socket") == 0 || strcasecmp(name, "none") == 0; }

/* The network of `comm` (called with netPluginLock held), looked up as NCCL does:
 *  - COMM_NET_PLUGIN (or NCCL_NET_PLUGIN) set: each library of its comma-separated list in turn (a path, or a
 *    name: also libcomm-net-<name>.so and libnccl-net-<name>.so); the first that loads and is usable (and whose
 *    network is the one netName or COMM_NET names, if any) is used. None: a WARN and the built-in Socket
 *    network. "none" (NCCL's) or "socket" (libcomm's) loads no library: the built-in networks, or Socket;
 *  - unset: NCCL's default libnccl-net.so when it is on the library path (absent: nothing said but an INFO),
 *    else the built-in networks.
 * The built-in ones are chosen by netName, COMM_NET (NCCL_NET) or automatically; a network named by netName
 * or COMM_NET must be had (the plugin's own, its name in any case, IB or Socket), else init fails. mayLoad 0:
 * no library is loaded (only the built-in names are checked). */
static commResult_t netChoose(struct commComm* comm, int mayLoad, const commNet_t** out, int* fromLibrary) {
  const char* forced = comm->netName[0] ? comm->netName : commParamStr("COMM_NET", NULL);
  const char* source = comm->netName[0] ? "config netName" : forced ? commParamSource("COMM_NET") : "COMM_NET";
  const char* name = commParamStr("COMM_NET_PLUGIN", NULL);
  const char* list = name ? name : NET_DEFAULT_PLUGIN;
  char pluginNet[64] = "";
  *out = NULL;
  *fromLibrary = 0;
  if (mayLoad && !(name && netNoLibrary(name))) {
    int tried = 0, inUse = 0;
    /* A library of the list that another communicator of this process uses already is the one (the items
     * before it failed for that one). */
    for (const char* s = list; *s && netPlugin.refs > 0 && !inUse;) {
      size_t n = strcspn(s, ",");
      inUse = n == strlen(netPlugin.name) && strncmp(s, netPlugin.name, n) == 0;
      s += n + (s[n] == ',');
    }
    for (const char* s = list; *s;) {
      size_t n = strcspn(s, ",");
      char item[256];
      snprintf(item, sizeof(item), "%.*s", (int)n, s);
      s += n + (s[n] == ',');
      if (!item[0] || (inUse && strcmp(item, netPlugin.name) != 0)) continue;
      tried++;
      const commNet_t* net = netLoadLibrary(item, name == NULL);
      if (net && forced && strcasecmp(forced, net->name) != 0) {
        INFO(COMM_NET | COMM_INIT, "NET : %s=%s is not the network of plugin %s (%s)", source, forced, item, net->name);
        snprintf(pluginNet, sizeof(pluginNet), "%s", net->name);
        netPluginReleaseLocked();
      } else if (net) {
        *out = net;
        *fromLibrary = 1;
        return commSuccess;
      }
    }
    if (name && tried && !forced) {
      WARN("NET : falling back to the built-in Socket network");
      *out = netSocket();
      return commSuccess;
    }
  }
  if (name && strcasecmp(name, "socket") == 0 && !forced) {
    *out = netSocket();
    return commSuccess;
  }
  return netChooseBuiltin(forced, source, pluginNet[0] ? pluginNet : NULL, out);
}

/* A communicator starts on the library's network: NCCL v11 plugins make its context (commNetNcclCommInit). If
 * that fails, the library is given back and, unless a network was named, Socket is used (a WARN each). */
static commResult_t netCommStart(struct commComm* comm, const commNet_t** net, int* fromLibrary) {
  const commNet_t* mine = *net;
  commResult_t res = commNetNcclCommInit(*net, comm->commHash, &mine);
  if (res == commSuccess) {
    *net = mine;
    return commSuccess;
  }
  netPluginReleaseLocked();
  *fromLibrary = 0;
  *net = NULL;
  if (comm->netName[0] || commParamStr("COMM_NET", NULL)) return res;
  WARN("NET : falling back to the built-in Socket network");
  *net = netSocket();
  return commSuccess;
}

commResult_t commNetInit(struct commComm* comm) {
  /* Needed when ranks sit on different hosts, or shm is off (then every connection is a network one). A
   * built-in network asked for by name is checked even when none is needed, as NCCL does (a plugin library
   * named by COMM_NET_PLUGIN is not loaded only for that: its name is checked when a communicator needs it;
   * the default libnccl-net.so is, when the name is not a built-in one, and given back at once). */
  int needed = comm->nNodes > 1 || comm->shmDisable;
  if (comm->net) return commSuccess;
  const char* forced = comm->netName[0] ? comm->netName : commParamStr("COMM_NET", NULL);
  const char* plugin = commParamStr("COMM_NET_PLUGIN", NULL);
  if (!needed && (!forced || (plugin && !netNoLibrary(plugin)))) return commSuccess;
  int mayLoad = needed || (strcasecmp(forced, "IB") != 0 && strcasecmp(forced, "Socket") != 0);
  const commNet_t* net = NULL;
  int fromLibrary = 0;
  pthread_mutex_lock(&netPluginLock);
  commResult_t res = netChoose(comm, mayLoad, &net, &fromLibrary);
  if (res == commSuccess && fromLibrary && !needed) {
    netPluginReleaseLocked(); /* only its name was checked */
    fromLibrary = 0;
  } else if (res == commSuccess && fromLibrary) {
    res = netCommStart(comm, &net, &fromLibrary);
  }
  pthread_mutex_unlock(&netPluginLock);
  if (res != commSuccess) return res;
  if (!net) {
    WARN("NET : no usable network plugin");
    return commSystemError;
  }
  if (!needed) return commSuccess;
  struct commNetState* st;
  res = commCalloc(&st, 1, sizeof(*st));
  if (res != commSuccess) {
    pthread_mutex_lock(&netPluginLock);
    if (fromLibrary) {
      commNetNcclCommFinalize(net);
      netPluginReleaseLocked();
    }
    pthread_mutex_unlock(&netPluginLock);
    return res;
  }
  st->net = net;
  st->fromLibrary = fromLibrary;
  st->comm = comm;
  pthread_mutex_init(&st->listLock, NULL);
  pthread_mutex_init(&st->wakeLock, NULL);
  pthread_cond_init(&st->wake, NULL);
  comm->net = st;
  int ndev = 0;
  if (st->net->devices(&ndev) != commSuccess || ndev < 1) ndev = 1;
  st->nDevs = ndev < NET_MAX_DEVS ? ndev : NET_MAX_DEVS;
  for (int d = 0; d < st->nDevs; d++) {
    commNetProperties_t props;
    if (st->net->getProperties(d, &props) == commSuccess) {
      snprintf(st->devName[d], sizeof(st->devName[d]), "%s", props.name ? props.name : "");
      INFO(COMM_NET | COMM_INIT, "NET : using network %s, device %d %s (%d Mbps)", st->net->name, d, st->devName[d],
           props.speedMbps);
    }
  }
  return commSuccess;
}

commResult_t commNetFinalize(struct commComm* comm) {
  struct commNetState* st = comm->net;
  if (!st) return commSuccess;
  if (st->proxyStarted) {
    pthread_mutex_lock(&st->wakeLock);
    __atomic_store_n(&st->proxyStop, 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&st->wake);
    pthread_mutex_unlock(&st->wakeLock);
    pthread_join(st->proxy, NULL);
    st->proxyStarted = 0;
  }
  netDevStop(st);
  pthread_cond_destroy(&st->wake);
  pthread_mutex_destroy(&st->wakeLock);
  pthread_mutex_destroy(&st->listLock);
  if (st->fromLibrary) {
    pthread_mutex_lock(&netPluginLock);
    commNetNcclCommFinalize(st->net);
    netPluginReleaseLocked();
    pthread_mutex_unlock(&netPluginLock);
  }
  free(st);
  comm->net = NULL;
  return commSuccess;
}

const char* commNetName(const struct commComm* comm) {
  return comm->net && comm->net->net ? comm->net->net->name : "none";
}
