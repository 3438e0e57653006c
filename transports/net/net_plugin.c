/* Which network the net transport runs over, and its per-communicator state: a plugin library named by
 * COMM_NET_PLUGIN (libcomm's interface or NCCL's, through the adapter), else a built-in network, IB (over
 * libibverbs, or with COMM_IB_FAKE the tests' verbs fake module) or Socket, chosen by the config, COMM_NET or
 * automatically; commNetInit / commNetFinalize make and tear down a communicator's commNetState. The
 * connections themselves are in transports/net/net.c. */
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
  int refs;
} netPlugin;
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

void* commNetPluginOpen(const char* name, char* why, size_t whyLen) {
  void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  char firstErr[512] = "";
  if (!handle) {
    const char* e = dlerror();
    snprintf(firstErr, sizeof(firstErr), "%s", e ? e : "unknown error");
  }
  static const char* const altNames[] = {"libcomm-net-%s.so", "libnccl-net-%s.so"};
  for (size_t i = 0; !handle && !strchr(name, '/') && i < sizeof(altNames) / sizeof(altNames[0]); i++) {
    char alt[300];
    snprintf(alt, sizeof(alt), altNames[i], name);
    handle = dlopen(alt, RTLD_NOW | RTLD_LOCAL);
  }
  if (!handle)
    snprintf(why, whyLen, "%s%s", firstErr,
             strchr(name, '/') ? "" : " (nor libcomm-net-<name>.so, libnccl-net-<name>.so)");
  return handle;
}

/* Load (or share) the library named by COMM_NET_PLUGIN (or NCCL_NET_PLUGIN); NULL with a WARN if it cannot be
 * used. Tries the name as given, then (a name without '/') libcomm-net-<name>.so and libnccl-net-<name>.so. The library
 * exports libcomm's commNetPlugin_v2 or _v1, else an NCCL network plugin (ncclNetPlugin_v10, _v9 or _v8),
 * used through the adapter in transports/net/nccl/net_nccl.c. Called with netPluginLock held. */
static const commNet_t* netLoadLibrary(const char* name) {
  if (netPlugin.refs > 0) {
    if (strcmp(netPlugin.name, name) == 0) {
      netPlugin.refs++;
      return netPlugin.net;
    }
    WARN("NET : %s=%s but plugin %s is already in use by this process", commParamSource("COMM_NET_PLUGIN"), name,
         netPlugin.name);
    return NULL;
  }
  char why[600];
  void* handle = commNetPluginOpen(name, why, sizeof(why));
  if (!handle) {
    WARN("NET : cannot load %s=%s: %s", commParamSource("COMM_NET_PLUGIN"), name, why);
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
  if (!net) net = commNetNcclWrap(handle, name); /* an NCCL network plugin, through the adapter */
  if (!net) {
    WARN("NET : %s exports neither %s nor %s, nor a supported NCCL network plugin (%s, %s or %s)", name,
         COMM_NET_PLUGIN_SYMBOL, COMM_NET_PLUGIN_SYMBOL_V1, NET_NCCL_SYMBOL_V10, NET_NCCL_SYMBOL_V9,
         NET_NCCL_SYMBOL_V8);
    dlclose(handle);
    return NULL;
  }
  if (!netUsable(net, name)) {
    dlclose(handle);
    return NULL;
  }
  snprintf(netPlugin.name, sizeof(netPlugin.name), "%s", name);
  netPlugin.handle = handle;
  netPlugin.net = net;
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

/* The network of `comm` (called with netPluginLock held): a library named by COMM_NET_PLUGIN (falling back
 * to Socket when it cannot be loaded), else a built-in one chosen by the config's netName, COMM_NET or
 * automatically ("socket" as COMM_NET_PLUGIN means the built-in Socket). A network named by netName or
 * COMM_NET (NCCL_NET) must be had: the plugin's own (its name, any case), IB or Socket; else init fails. */
static commResult_t netChoose(struct commComm* comm, const commNet_t** out, int* fromLibrary) {
  const char* forced = comm->netName[0] ? comm->netName : commParamStr("COMM_NET", NULL);
  const char* source = comm->netName[0] ? "config netName" : forced ? commParamSource("COMM_NET") : "COMM_NET";
  const char* name = commParamStr("COMM_NET_PLUGIN", NULL);
  char pluginNet[64] = "";
  *out = NULL;
  *fromLibrary = 0;
  if (name && strcasecmp(name, "socket") != 0) {
    const commNet_t* net = netLoadLibrary(name);
    if (net && forced && strcasecmp(forced, net->name) != 0) {
      INFO(COMM_NET | COMM_INIT, "NET : %s=%s is not the network of plugin %s (%s)", source, forced, name, net->name);
      snprintf(pluginNet, sizeof(pluginNet), "%s", net->name);
      netPluginReleaseLocked();
    } else if (net) {
      *out = net;
      *fromLibrary = 1;
      return commSuccess;
    } else if (!forced) {
      WARN("NET : falling back to the built-in Socket network");
    }
  }
  if (name && !forced) {
    *out = netSocket();
    return commSuccess;
  }
  return netChooseBuiltin(forced, source, pluginNet[0] ? pluginNet : NULL, out);
}

commResult_t commNetInit(struct commComm* comm) {
  /* Needed when ranks sit on different hosts, or shm is off (then every connection is a network one). A
   * built-in network asked for by name is checked even when none is needed, as NCCL does (a plugin is not
   * loaded only for that: its name is checked when a communicator needs it). */
  int needed = comm->nNodes > 1 || comm->shmDisable;
  if (comm->net) return commSuccess;
  if (!needed) {
    const char* plugin = commParamStr("COMM_NET_PLUGIN", NULL);
    if ((!comm->netName[0] && !commParamStr("COMM_NET", NULL)) || (plugin && strcasecmp(plugin, "socket") != 0))
      return commSuccess;
  }
  const commNet_t* net = NULL;
  int fromLibrary = 0;
  pthread_mutex_lock(&netPluginLock);
  commResult_t res = netChoose(comm, &net, &fromLibrary);
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
    if (fromLibrary) netPluginReleaseLocked();
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
