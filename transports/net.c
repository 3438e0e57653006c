/* The "net" transport: connections over any network plugin (include/comm_net.h).
 *
 * Each side keeps its FIFO in local memory. On the sender, progress() posts an isend for every slot the
 * executor filled (head) and, as sends complete in order, advances tail so the slot can be reused. On the
 * receiver, progress() keeps an irecv posted on every free slot and, as receives complete in order,
 * stores the size and advances head. progress() is called from the executor's wait loops.
 *
 * The executor stops calling progress() once its collective is done, yet its last slots may not have
 * left: a peer would then wait until this rank's next collective. So each comm with network connections
 * also has a proxy thread that moves filled send slots while the executor is away. It sleeps on a
 * condition variable until the executor, finishing a collective, finds sends still pending and calls
 * commNetKickProxy(); it then polls every NET_PROXY_BUSY_US until they have left, staying out of the way
 * while the executor is calling progress(). A per-connection try-lock makes the two callers exclusive.
 * (A proxy that polled all the time cost 2-4 us per 8-byte allreduce on 2 cores: its timer wake-ups
 * preempt the ranks.)
 *
 * Device-buffer connections (conn->onDevice) keep the same FIFO in pinned host memory the GPU maps; the
 * CUDA kernel fills and drains it, and a proxy thread of their own moves it (transports/net_dev.c). */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "comm_net.h"
#include "core.h"
#include "topo.h"
#include "debug.h"
#include "net_nccl.h"
#include "param.h"
#include "transport.h"
#include "utils.h"
#include "net_internal.h"
#ifdef COMM_HAVE_IBVERBS
#include "ib/ib_gdr.h"
#include "ib/ib_verbs_fake.h"
#include "ib/net_ib.h"
#endif

#define NET_PAGE 4096
#define NET_PROXY_BUSY_US 20

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

static void netLogger(commNetLogLevel_t level, const char* file, int line, const char* fmt, ...) {
  commLogLevel_t lvl = level == COMM_NET_LOG_WARN ? COMM_LOG_WARN
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
  if (net->init(netLogger) != commSuccess) {
    WARN("NET : plugin %s failed to initialise", what);
    return 0;
  }
  if (net->devices(&ndev) != commSuccess || ndev < 1) {
    WARN("NET : plugin %s has no device", what);
    return 0;
  }
  return 1;
}

/* Load (or share) the library named by COMM_NET_PLUGIN; NULL with a WARN if it cannot be used. Tries the
 * name as given, then (a name without '/') libcomm-net-<name>.so and libnccl-net-<name>.so. The library
 * exports libcomm's commNetPlugin_v2 or _v1, else an NCCL network plugin (ncclNetPlugin_v10, _v9 or _v8),
 * used through the adapter in transports/net_nccl.c. Called with netPluginLock held. */
static const commNet_t* netLoadLibrary(const char* name) {
  if (netPlugin.refs > 0) {
    if (strcmp(netPlugin.name, name) == 0) {
      netPlugin.refs++;
      return netPlugin.net;
    }
    WARN("NET : COMM_NET_PLUGIN=%s but plugin %s is already in use by this process", name, netPlugin.name);
    return NULL;
  }
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
  if (!handle) {
    WARN("NET : cannot load COMM_NET_PLUGIN=%s: %s%s", name, firstErr,
         strchr(name, '/') ? "" : " (nor libcomm-net-<name>.so, libnccl-net-<name>.so)");
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
 * or with COMM_IB_FAKE=<n>[:ib|:roce] (tests only) the in-process fake verbs with n active one-port
 * devices (InfiniBand, or RoCE with v2 GIDs). The fake connects QPs only within this process, so it
 * serves ranks that are threads of one process. NULL when IB cannot be used, with the reason in `why`. */
#ifdef COMM_HAVE_IBVERBS
static int netIbState; /* 0: not probed; 1: usable; -1: not usable (netIbWhy says why) */
static char netIbWhy[300];
static char netIbHow[128]; /* what IB runs over, for the INFO line */
static const commNet_t* netIb; /* the IB table, once usable */

/* COMM_IB_FAKE=...:gdr: the fake takes device memory as a dma-buf registration (the CUDA side claims a
 * dma-buf for any device pointer; the fake registers its address and moves data with CUDA copies), so the
 * GPUDirect RDMA data path runs end to end on a machine with a GPU and no NIC. */
static int fakeGdrDmabufSupported(int dev) { return dev >= 0; }
static int fakeGdrDmabufFd(uintptr_t start, size_t size, int* fd) {
  (void)start, (void)size;
  *fd = open("/dev/null", O_RDONLY | O_CLOEXEC); /* the fake checks only fd >= 0; the caller closes it */
  return *fd >= 0 ? 0 : -1;
}
static ibGdrOps fakeGdrOps;

static const commIbVerbs* netIbFakeVerbs(const char* spec, char* why, size_t whyLen) {
  char* end = NULL;
  long n = strtol(spec, &end, 10);
  uint8_t linkLayer = IBV_LINK_LAYER_INFINIBAND;
  int gdr = 0, bad = end == spec;
  while (!bad && end && *end == ':') { /* :ib, :roce, :gdr */
    const char* word = end + 1;
    size_t len = strcspn(word, ":");
    if (len == 2 && strncasecmp(word, "ib", 2) == 0) linkLayer = IBV_LINK_LAYER_INFINIBAND;
    else if (len == 4 && strncasecmp(word, "roce", 4) == 0) linkLayer = IBV_LINK_LAYER_ETHERNET;
    else if (len == 3 && strncasecmp(word, "gdr", 3) == 0) gdr = 1;
    else bad = 1;
    end = (char*)word + len;
  }
  if (bad || end == NULL || *end != '\0' || n < 1 || n > COMM_IB_FAKE_MAX_DEVS) {
    snprintf(why, whyLen, "COMM_IB_FAKE=%s is not <n>[:ib|:roce][:gdr] with n in 1..%d", spec,
             COMM_IB_FAKE_MAX_DEVS);
    return NULL;
  }
  commIbFakeDevice devs[COMM_IB_FAKE_MAX_DEVS];
  for (int i = 0; i < (int)n; i++) {
    char name[32];
    snprintf(name, sizeof(name), "%s%d", linkLayer == IBV_LINK_LAYER_ETHERNET ? "fakeroce" : "fakeib", i);
    commIbFakeDeviceInit(&devs[i], name, linkLayer, i);
  }
  int err = commIbFakeConfigure((int)n, devs);
  if (err) {
    snprintf(why, whyLen, "COMM_IB_FAKE=%s: cannot configure the fake devices: %s", spec, strerror(err));
    return NULL;
  }
  if (gdr) {
    commIbFakeOptions opt;
    commIbFakeGetOptions(&opt);
    opt.dmabuf = 1;
    commIbFakeSetOptions(&opt);
    fakeGdrOps = *ibGdrDriverOps();
    fakeGdrOps.dmabufSupported = fakeGdrDmabufSupported;
    fakeGdrOps.dmabufFd = fakeGdrDmabufFd;
    ibGdrSetOps(&fakeGdrOps);
  }
  snprintf(netIbHow, sizeof(netIbHow), "fake verbs (COMM_IB_FAKE=%s, tests only)", spec);
  return commIbFakeVerbs();
}

const commIbVerbs* commNetIbVerbs(char* how, size_t howLen, char* why, size_t whyLen) {
  const char* fake = commParamStr("COMM_IB_FAKE", NULL);
  const commIbVerbs* verbs = NULL;
  if (fake && *fake && strcmp(fake, "0") != 0) {
    verbs = netIbFakeVerbs(fake, why, whyLen);
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
      if (ib->init(netLogger) != commSuccess) {
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

/* Choose between the built-in networks (called with netPluginLock held): `forced` ("IB" or "Socket", any
 * case; NULL: automatic) comes from COMM_NET. Automatic: IB when usable (the real libibverbs loads and
 * has an active port that COMM_IB_HCA selects), else Socket. A forced IB that cannot be used is a WARN and
 * Socket. NULL when even Socket cannot be used. */
static const commNet_t* netChooseBuiltin(const char* forced, const char* source) {
  char why[300] = "";
  if (forced && strcasecmp(forced, "IB") != 0 && strcasecmp(forced, "Socket") != 0) {
    WARN("NET : %s=%s is not a built-in network (IB or Socket): choosing automatically", source, forced);
    forced = NULL;
  }
  const commNet_t* net = NULL;
  if (forced && strcasecmp(forced, "Socket") == 0) {
    INFO(COMM_NET | COMM_INIT, "NET : using the built-in Socket network (%s=%s)", source, forced);
  } else if (forced) {
    net = netIbGet(why, sizeof(why));
    if (net) INFO(COMM_NET | COMM_INIT, "NET : using the built-in IB network (%s=%s)", source, forced);
    else WARN("NET : %s=%s but IB cannot be used: %s; falling back to the built-in Socket network", source, forced,
              why);
  } else {
    net = netIbGet(why, sizeof(why));
    if (net) INFO(COMM_NET | COMM_INIT, "NET : using the built-in IB network (automatic: IB has an active RDMA port)");
    else INFO(COMM_NET | COMM_INIT, "NET : using the built-in Socket network (automatic: IB cannot be used: %s)", why);
  }
  return net ? net : netSocket();
}

commResult_t commNetInit(struct commComm* comm) {
  if (comm->net) return commSuccess;
  struct commNetState* st;
  COMMCHECK(commCalloc(&st, 1, sizeof(*st)));
  /* Which network: a library named by COMM_NET_PLUGIN (falling back to Socket), else a built-in one
   * chosen by COMM_NET or automatically. ("socket" as COMM_NET_PLUGIN means the built-in Socket.) */
  const char* name = commParamStr("COMM_NET_PLUGIN", NULL);
  pthread_mutex_lock(&netPluginLock);
  if (name && strcasecmp(name, "socket") != 0) {
    st->net = netLoadLibrary(name);
    if (st->net) st->fromLibrary = 1;
    else WARN("NET : falling back to the built-in Socket network");
  }
  if (!st->net && name) {
    st->net = netSocket();
  } else if (!st->net) {
    /* The communicator's config wins over COMM_NET. */
    const char* forced = comm->netName[0] ? comm->netName : commParamStr("COMM_NET", NULL);
    st->net = netChooseBuiltin(forced && *forced ? forced : NULL, comm->netName[0] ? "config netName" : "COMM_NET");
  }
  pthread_mutex_unlock(&netPluginLock);
  if (!st->net) {
    WARN("NET : no usable network plugin");
    free(st);
    return commSystemError;
  }
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
      INFO(COMM_NET | COMM_INIT, "NET : using network %s, device %d %s (%d Mbps)", st->net->name, d,
           st->devName[d], props.speedMbps);
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
    if (--netPlugin.refs == 0) {
      dlclose(netPlugin.handle);
      memset(&netPlugin, 0, sizeof(netPlugin));
    }
    pthread_mutex_unlock(&netPluginLock);
  }
  free(st);
  comm->net = NULL;
  return commSuccess;
}

const char* commNetName(const struct commComm* comm) {
  return comm->net && comm->net->net ? comm->net->net->name : "none";
}

/* ---------------------------------------------------------------- connections */

/* The network device this rank uses on a channel: the plugin device named like the topology's NIC for the
 * rank on that channel (commTopoRankNic: nearest its device, ranks of one device spread over equal NICs,
 * a rank alone turning through them by channel); a NIC the plugin does not offer (COMM_SOCKET_IFNAME
 * narrowed the list, or the topology came from a file) falls back to device 0, the interface bootstrap
 * reached every rank through. The receiving side's device is the one that counts: its address is what
 * the sender connects to. */
static int netDevice(struct commComm* comm, int channel) {
  struct commNetState* st = comm->net;
  if (st->nDevs <= 1) return 0;
  int nic = comm->topo && comm->topoRanks ? commTopoRankNic(comm->topo, comm->topoRanks, comm->nRanks, comm->rank,
                                                            channel)
                                          : -1;
  if (nic >= 0) {
    const commTopoNode* nd = &comm->topo->nodes[nic];
    for (int d = 0; d < st->nDevs; d++)
      if (strcmp(st->devName[d], nd->name) == 0 || strcmp(st->devName[d], nd->u.nic.netdev) == 0) return d;
  }
  return 0;
}

static void* netProxyMain(void* arg);

int netFailed(const netPriv* p) { return __atomic_load_n(&p->failed, __ATOMIC_RELAXED); }
static void netSetFailed(netPriv* p) { __atomic_store_n(&p->failed, 1, __ATOMIC_RELAXED); }

commResult_t netListAdd(struct commNetState* st, commConn*** list, int* n, int* cap, commConn* conn) {
  commResult_t res = commSuccess;
  pthread_mutex_lock(&st->listLock);
  if (*n == *cap) {
    int c = *cap ? 2 * *cap : 16;
    res = commRealloc(list, (size_t)*cap, (size_t)c, sizeof(commConn*));
    if (res == commSuccess) *cap = c;
  }
  if (res == commSuccess) (*list)[(*n)++] = conn;
  pthread_mutex_unlock(&st->listLock);
  return res;
}

void netListRemove(struct commNetState* st, commConn** list, int* n, commConn* conn) {
  if (st) pthread_mutex_lock(&st->listLock);
  for (int i = 0; i < *n; i++) {
    if (list[i] == conn) {
      list[i] = list[--*n];
      list[*n] = NULL;
      break;
    }
  }
  if (st) pthread_mutex_unlock(&st->listLock);
}

void netBindProxy(struct commComm* comm, const char* what) {
  if (comm->topo == NULL || comm->topoRanks == NULL) return;
  int nic = commTopoRankNic(comm->topo, comm->topoRanks, comm->nRanks, comm->rank, 0);
  commTopoBindThread(comm->topo, nic >= 0 ? nic : comm->topoRanks[comm->rank].dev, what);
}

static commResult_t netRegister(struct commComm* comm, commConn* conn) {
  if (conn->onDevice) return netDevRegister(comm, conn);
  struct commNetState* st = comm->net;
  commResult_t res = netListAdd(st, &comm->netConns, &comm->nNetConns, &comm->netConnsCap, conn);
  if (res != commSuccess || st->proxyStarted) return res;
  int err = pthread_create(&st->proxy, NULL, netProxyMain, st);
  if (err) {
    WARN("NET : cannot start the network proxy thread: %s", strerror(err));
    return commSystemError;
  }
  st->proxyStarted = 1;
  return commSuccess;
}

/* Free the (by now empty) list of network connections, under the lock the proxy thread reads it with. */
void commNetReleaseConnList(struct commComm* comm) {
  struct commNetState* st = comm->net;
  if (st) pthread_mutex_lock(&st->listLock);
  free(comm->netConns);
  comm->netConns = NULL;
  comm->nNetConns = 0;
  comm->netConnsCap = 0;
  if (st) pthread_mutex_unlock(&st->listLock);
}


static commResult_t netSetup(struct commComm* comm, commConn* conn) {
  if (!comm->net || !comm->net->net) {
    WARN("NET : network transport used before commNetInit");
    return commInternalError;
  }
  if (comm->nSlots < 1 || comm->nSlots > COMM_NSLOTS || comm->slotBytes == 0) {
    WARN("NET : invalid FIFO geometry (%d slots of %zu bytes)", comm->nSlots, comm->slotBytes);
    return commInternalError;
  }
  netPriv* p;
  COMMCHECK(commCalloc(&p, 1, sizeof(*p)));
  p->net = comm->net->net;
  p->dev = netDevice(comm, conn->channel);
  conn->priv = p;
  size_t ctrlBytes = COMM_ALIGN_UP(sizeof(commFifoCtrl), (size_t)NET_PAGE);
  size_t bytes = ctrlBytes + (size_t)comm->nSlots * comm->slotBytes;
  if (conn->onDevice) { /* the kernel fills and drains it in place (net_dev.c) */
    p->onDevice = 1;
    p->cudaDev = comm->cudaDev;
    COMMCHECK(netDevSetup(comm, conn, p, ctrlBytes, (size_t)comm->nSlots * comm->slotBytes));
  } else {
    int err = posix_memalign(&p->mem, NET_PAGE, bytes);
    if (err) {
      p->mem = NULL;
      WARN("NET : cannot allocate a FIFO of %zu bytes: %s", bytes, strerror(err));
      return commSystemError;
    }
    memset(p->mem, 0, bytes);
  }
  if (!conn->onDevice) {
    conn->ctrl = (commFifoCtrl*)p->mem;
    conn->slots = (char*)p->mem + ctrlBytes;
  }
  conn->slotBytes = comm->slotBytes;
  conn->nSlots = comm->nSlots;
  conn->step = 0;
  return commSuccess;
}

/* The connection is dead. That is only an error if the executor still needs it: a peer that finished its
 * last operation and closed makes our speculatively posted receives fail. So progress stops here quietly
 * and check() reports the failure when a wait stalls on this connection. */
static commResult_t netFail(commConn* conn, commResult_t res) {
  netPriv* p = (netPriv*)conn->priv;
  if (!netFailed(p))
    INFO(COMM_NET, "net connection %s rank %d closed or failed (%d)", conn->isSend ? "to" : "from", conn->peer,
         (int)res);
  netSetFailed(p);
  return commSuccess;
}

/* Setting a connection up failed: an error at once. */
static commResult_t netSetupFail(commConn* conn, const char* what, commResult_t res) {
  netSetFailed((netPriv*)conn->priv);
  WARN("net connection %s rank %d: %s failed", conn->isSend ? "to" : "from", conn->peer, what);
  return res == commSuccess ? commRemoteError : res;
}

/* Calls fn until *out is non-NULL, giving up at the comm's deadline or abort. */
static commResult_t netWait(struct commComm* comm, commConn* conn, const char* what, commResult_t (*fn)(void*, void*, void**),
                            void* a, void* b, void** out) {
  int64_t deadline = commDeadlineNs(comm->timeoutMs);
  commBackoff bo = {0};
  for (;;) {
    commResult_t res = fn(a, b, out);
    if (res != commSuccess) return netSetupFail(conn, what, res);
    if (*out) return commSuccess;
    if (commAborted(comm)) {
      WARN("net connection %s rank %d: %s aborted", conn->isSend ? "to" : "from", conn->peer, what);
      return commInternalError;
    }
    if (commTimeNs() > deadline) {
      WARN("net connection %s rank %d: %s timed out after %lld ms", conn->isSend ? "to" : "from", conn->peer,
           what, (long long)comm->timeoutMs);
      return commTimeout;
    }
    commBackoffWait(&bo);
  }
}

/* What a connect call needs: the plugin, the device, the peer's handle, and the partner listener (the
 * receive connection from the same peer on the same channel, made in the same round) or NULL. */
typedef struct {
  const commNet_t* net;
  int dev;
  void* pairListen;
} netConnectArgs;

static commResult_t netConnectFn(void* args, void* handle, void** out) {
  const netConnectArgs* a = (const netConnectArgs*)args;
  if (a->pairListen && a->net->connectPaired) return a->net->connectPaired(a->dev, handle, a->pairListen, out);
  return a->net->connect(a->dev, handle, out);
}

/* Pairing (connectPaired) needs both ranks to agree, so each says what it can do in the receive info it
 * sends: byte PAIR_FLAG_AT of the info is 1 when this rank is willing (the plugin has connectPaired,
 * COMM_SOCKET_PAIR is on) and makes, in this same connect round, its send connection to that peer on that
 * channel (not yet connected). A sender pairs only when the peer's flag says so and its own receive
 * connection from the peer on the channel is of this round too (its listener not accepted yet): both
 * sides then test the same two facts, "each rank makes both directions in this round". Collectives
 * always do; point-to-point calls that split the directions over separate calls do not pair. */
#define PAIR_FLAG_AT COMM_NET_HANDLE_MAXSIZE
_Static_assert(PAIR_FLAG_AT < COMM_CONN_INFO_BYTES - 8, "the pairing flag must fit in the connection info");

static int netPairWilling(const struct commComm* comm) {
  return comm->net->net->connectPaired != NULL && commParamInt("COMM_SOCKET_PAIR", 1, 0, 1) == 1;
}

/* The receive connection `conn` is being set up: will this rank pair the mirror direction? */
static int netPairOffer(struct commComm* comm, const commConn* conn) {
  if (!netPairWilling(comm)) return 0;
  commConn* snd = comm->channels[conn->channel].send ? comm->channels[conn->channel].send[conn->peer] : NULL;
  return snd != NULL && snd->transport == NULL; /* made in this round: connected in its phase 2 */
}

/* The partner listener of send connection `conn` when both sides pair (see above), else NULL. */
static void* netPairListen(struct commComm* comm, const commConn* conn, int peerOffers) {
  if (!peerOffers || !netPairWilling(comm)) return NULL;
  commConn* r = comm->channels[conn->channel].recv ? comm->channels[conn->channel].recv[conn->peer] : NULL;
  if (r == NULL || r->transport != conn->transport || r->priv == NULL) return NULL;
  netPriv* rp = (netPriv*)r->priv;
  return rp->listenComm != NULL && rp->recvComm == NULL ? rp->listenComm : NULL;
}

static commResult_t netAcceptFn(void* net, void* listenComm, void** out) {
  return ((const commNet_t*)net)->accept(listenComm, out);
}

static commResult_t netRecvSetup(struct commComm* comm, commConn* conn, void* info) {
  COMMCHECK(netSetup(comm, conn));
  netPriv* p = (netPriv*)conn->priv;
  commResult_t res = p->net->listen(p->dev, info, &p->listenComm);
  if (res != commSuccess) return netSetupFail(conn, "listen", res);
  ((char*)info)[PAIR_FLAG_AT] = (char)netPairOffer(comm, conn);
  if (comm->net->nDevs > 1)
    INFO(COMM_NET | COMM_INIT, "NET : channel %02d : rank %d receives from rank %d on device %d (%s)", conn->channel,
         comm->rank, conn->peer, p->dev, comm->net->devName[p->dev]);
  return commSuccess;
}

static commResult_t netSendConnect(struct commComm* comm, commConn* conn, const void* info, void* ack) {
  (void)ack;
  COMMCHECK(netSetup(comm, conn));
  netPriv* p = (netPriv*)conn->priv;
  char handle[COMM_NET_HANDLE_MAXSIZE];
  memcpy(handle, info, sizeof(handle));
  netConnectArgs args = {p->net, p->dev, netPairListen(comm, conn, ((const char*)info)[PAIR_FLAG_AT] == 1)};
  COMMCHECK(netWait(comm, conn, "connect", netConnectFn, &args, handle, &p->sendComm));
  commResult_t res = p->onDevice ? netDevRegMr(conn, p, p->sendComm)
                                 : p->net->regMr(p->sendComm, conn->slots, (size_t)conn->nSlots * conn->slotBytes,
                                                 COMM_PTR_HOST, &p->mhandle);
  if (res != commSuccess) return netSetupFail(conn, "regMr", res);
  return netRegister(comm, conn);
}

static commResult_t netRecvConnect(struct commComm* comm, commConn* conn, const void* ack) {
  (void)ack;
  netPriv* p = (netPriv*)conn->priv;
  COMMCHECK(netWait(comm, conn, "accept", netAcceptFn, (void*)p->net, p->listenComm, &p->recvComm));
  p->net->closeListen(p->listenComm);
  p->listenComm = NULL;
  commResult_t res = p->onDevice ? netDevRegMr(conn, p, p->recvComm)
                                 : p->net->regMr(p->recvComm, conn->slots, (size_t)conn->nSlots * conn->slotBytes,
                                                 COMM_PTR_HOST, &p->mhandle);
  if (res != commSuccess) return netSetupFail(conn, "regMr", res);
  return netRegister(comm, conn);
}

/* Retire posted requests in order as the plugin completes them and publish each to the executor: a send
 * frees its slot (tail), a receive fills one (its size, then head). */
static commResult_t netComplete(commConn* conn, netPriv* p) {
  commFifoCtrl* ctrl = conn->ctrl;
  while (p->done < p->posted) {
    int i = (int)(p->done % (uint64_t)conn->nSlots);
    int done = 0;
    size_t size = 0;
    commResult_t res = p->net->test(p->reqs[i], &done, &size);
    if (res != commSuccess) return netFail(conn, res);
    if (!done) break;
    p->reqs[i] = NULL;
    if (!conn->isSend && p->slotsOnDevice && size > 0 && (res = netDevFlush(conn, p, i, size)) != commSuccess)
      return netFail(conn, res);
    if (!conn->isSend) ctrl->sizes[i] = size;
    p->done++;
    COMM_STORE_REL(conn->isSend ? &ctrl->tail : &ctrl->head, p->done);
  }
  return commSuccess;
}

commResult_t netProgressSend(commConn* conn, netPriv* p) {
  commFifoCtrl* ctrl = conn->ctrl;
  uint64_t head = COMM_LOAD_ACQ(&ctrl->head);
  if (head == p->posted && p->done == p->posted) return commSuccess; /* idle */
  int n = conn->nSlots;
  while (p->posted < head) {
    int i = (int)(p->posted % (uint64_t)n);
    uint64_t size = ctrl->sizes[i];
    if (size > conn->slotBytes) {
      WARN("net connection to rank %d: slot of %llu bytes exceeds the slot size %zu", conn->peer,
           (unsigned long long)size, conn->slotBytes);
      netSetFailed(p);
      return commInternalError;
    }
    void* req = NULL;
    commResult_t res = p->net->isend(p->sendComm, conn->slots + (size_t)i * conn->slotBytes, (size_t)size, 0,
                                     p->mhandle, &req);
    if (res != commSuccess) return netFail(conn, res);
    if (!req) break;
    p->reqs[i] = req;
    p->posted++;
  }
  return netComplete(conn, p);
}

commResult_t netProgressRecv(commConn* conn, netPriv* p) {
  commFifoCtrl* ctrl = conn->ctrl;
  uint64_t tail = COMM_LOAD_ACQ(&ctrl->tail);
  int n = conn->nSlots;
  while (p->posted - tail < (uint64_t)n) {
    int i = (int)(p->posted % (uint64_t)n);
    void* data = conn->slots + (size_t)i * conn->slotBytes;
    size_t cap = conn->slotBytes;
    int tag = 0;
    void* req = NULL;
    commResult_t res = p->net->irecv(p->recvComm, 1, &data, &cap, &tag, &p->mhandle, &req);
    if (res != commSuccess) return netFail(conn, res);
    if (!req) break;
    p->reqs[i] = req;
    p->posted++;
  }
  return netComplete(conn, p);
}

static commResult_t netProgress(struct commComm* comm, commConn* conn) {
  netPriv* p = (netPriv*)conn->priv;
  if (!p) return commInternalError;
  if (netFailed(p)) return commSuccess; /* reported by check() if a wait needs this connection */
  if (comm->net) __atomic_fetch_add(&comm->net->execCalls, 1, __ATOMIC_RELAXED);
  if (__atomic_exchange_n(&p->busy, 1, __ATOMIC_ACQUIRE)) return commSuccess; /* the other thread is on it */
  commResult_t res = commSuccess;
  if (conn->isSend) {
    if (p->sendComm) res = netProgressSend(conn, p);
  } else if (p->recvComm) {
    res = netProgressRecv(conn, p);
  }
  __atomic_store_n(&p->busy, 0, __ATOMIC_RELEASE);
  return res;
}

/* Has some send connection of this comm filled slots that have not left yet? (Owner thread or proxy.) */
static int netSendsPending(struct commComm* comm) {
  for (int i = 0; i < comm->nNetConns; i++) {
    commConn* conn = comm->netConns[i];
    netPriv* p = (netPriv*)conn->priv;
    if (!conn->isSend || !p || !p->sendComm || netFailed(p)) continue;
    if (COMM_LOAD_ACQ(&conn->ctrl->tail) < COMM_LOAD_ACQ(&conn->ctrl->head)) return 1;
  }
  return 0;
}

void commNetKickProxy(struct commComm* comm) {
  struct commNetState* st = comm->net;
  if (!st || !st->proxyStarted || !netSendsPending(comm)) return;
  pthread_mutex_lock(&st->wakeLock);
  st->wanted = 1;
  pthread_cond_signal(&st->wake);
  pthread_mutex_unlock(&st->wakeLock);
}

/* Moves filled send slots while the executor is not calling progress(). */
static void* netProxyMain(void* arg) {
  struct commNetState* st = (struct commNetState*)arg;
  struct commComm* comm = st->comm;
  netBindProxy(comm, "NET proxy thread");
  for (;;) {
    pthread_mutex_lock(&st->wakeLock);
    while (!st->wanted && !__atomic_load_n(&st->proxyStop, __ATOMIC_ACQUIRE))
      pthread_cond_wait(&st->wake, &st->wakeLock);
    st->wanted = 0; /* a kick from now on wakes us again */
    pthread_mutex_unlock(&st->wakeLock);
    if (__atomic_load_n(&st->proxyStop, __ATOMIC_ACQUIRE)) break;
    uint64_t lastExec = __atomic_load_n(&st->execCalls, __ATOMIC_RELAXED);
    for (;;) {
      struct timespec ts = {0, NET_PROXY_BUSY_US * 1000L};
      nanosleep(&ts, NULL);
      if (__atomic_load_n(&st->proxyStop, __ATOMIC_ACQUIRE)) break;
      uint64_t exec = __atomic_load_n(&st->execCalls, __ATOMIC_RELAXED);
      /* The executor is back: it moves the sends itself and kicks us again if it leaves some behind. */
      if (exec != lastExec) break;
      int pending = 0;
      pthread_mutex_lock(&st->listLock);
      for (int i = 0; i < comm->nNetConns; i++) {
        commConn* conn = comm->netConns[i];
        netPriv* p = (netPriv*)conn->priv;
        if (!conn->isSend || !p || !p->sendComm || netFailed(p)) continue;
        if (__atomic_exchange_n(&p->busy, 1, __ATOMIC_ACQUIRE)) { /* the executor is back */
          pending = 1;
          continue;
        }
        if (netProgressSend(conn, p) == commSuccess && p->done < COMM_LOAD_ACQ(&conn->ctrl->head)) pending = 1;
        __atomic_store_n(&p->busy, 0, __ATOMIC_RELEASE);
      }
      pthread_mutex_unlock(&st->listLock);
      if (!pending) break;
    }
  }
  return NULL;
}

static commResult_t netCheck(struct commComm* comm, commConn* conn) {
  (void)comm;
  netPriv* p = (netPriv*)conn->priv;
  if (p && netFailed(p)) {
    WARN("net connection %s rank %d failed: the peer closed the connection or the network failed",
         conn->isSend ? "to" : "from", conn->peer);
    return commRemoteError;
  }
  return commSuccess;
}

static commResult_t netClose(struct commComm* comm, commConn* conn) {
  netPriv* p = (netPriv*)conn->priv;
  if (conn->onDevice) netDevUnregister(comm, conn);
  else netListRemove(comm->net, comm->netConns, &comm->nNetConns, conn);
  if (!p) return commSuccess;
  if (p->sendComm) {
    if (p->mhandle) p->net->deregMr(p->sendComm, p->mhandle);
    p->net->closeSend(p->sendComm);
  }
  if (p->recvComm) {
    if (p->mhandle) p->net->deregMr(p->recvComm, p->mhandle);
    p->net->closeRecv(p->recvComm);
  }
  if (p->listenComm) p->net->closeListen(p->listenComm);
  if (p->onDevice) netDevFreeMem(p);
  else free(p->mem);
  free(p);
  conn->priv = NULL;
  conn->ctrl = NULL;
  conn->slots = NULL;
  return commSuccess;
}

const commTransport commTransportNet = {
    .name = "NET",
    .recvSetup = netRecvSetup,
    .sendConnect = netSendConnect,
    .recvConnect = netRecvConnect,
    .progress = netProgress,
    .check = netCheck,
    .close = netClose,
    .devConn = netDevConn,
};
