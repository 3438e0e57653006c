/* Communicator lifecycle: init (blocking or not), finalize, destroy, abort, queries, registration handles
 * (split and shrink: comm_split.c). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "core.h"
#include "exec_dev.h"
#include "tune.h"
#include "devmem.h"
#include "enqueue.h"
#include "param.h"
#include "socket.h"
#include "topo.h"
#include "utils.h"

#define COMM_DEFAULT_TIMEOUT_MS 600000
#define COMM_DEFAULT_BUFFSIZE (4 << 20)
/* Below this, an allreduce is latency-bound: one exchange step per peer beats the ring's 2(n-1) hops. */
#define COMM_DEFAULT_ONESHOT_MAX (256 << 10)
/* Bootstrap tags used by the core (transports use small non-negative tags). */

/* ---- Registry of live communicators: handles are checked against it, so a destroyed handle is an error
 * and never a read of freed memory. ---- */
static pthread_mutex_t registryLock = PTHREAD_MUTEX_INITIALIZER;
static struct commComm** registry;
static int registryCount, registryCap;

static commResult_t registryAdd(struct commComm* comm) {
  commResult_t res = commSuccess;
  pthread_mutex_lock(&registryLock);
  if (registryCount == registryCap) {
    int cap = registryCap ? registryCap * 2 : 16;
    res = commRealloc(&registry, (size_t)registryCap, (size_t)cap, sizeof(*registry));
    if (res == commSuccess) registryCap = cap;
  }
  if (res == commSuccess) registry[registryCount++] = comm;
  pthread_mutex_unlock(&registryLock);
  return res;
}

static int registryFindLocked(const struct commComm* comm) {
  for (int i = 0; i < registryCount; i++)
    if (registry[i] == comm) return i;
  return -1;
}

/* Remove comm; returns 0 if it was not registered (already destroyed). */
static int registryRemove(struct commComm* comm) {
  pthread_mutex_lock(&registryLock);
  int i = registryFindLocked(comm);
  if (i >= 0) registry[i] = registry[--registryCount];
  pthread_mutex_unlock(&registryLock);
  return i >= 0;
}

static commResult_t checkLiveLocked(comm_t comm, const char* api) {
  if (comm == NULL) {
    WARN("%s: comm is NULL", api);
    return commInvalidArgument;
  }
  if (registryFindLocked(comm) < 0) {
    WARN("%s: comm %p is not a live communicator (destroyed, aborted, or never created)", api, (void*)comm);
    return commInvalidArgument;
  }
  return commSuccess;
}

commResult_t commCheckComm(comm_t comm, const char* api) {
  pthread_mutex_lock(&registryLock);
  commResult_t res = checkLiveLocked(comm, api);
  pthread_mutex_unlock(&registryLock);
  return res;
}

/* Checked live and counted in inFlight under the registry lock: destroyComm removes a communicator from the
 * registry first and frees it only once inFlight is back to 0, so a call holding it never reads freed memory
 * (a watchdog thread polling commGetAsyncError while another thread runs commAbort). */
commResult_t commRetain(comm_t comm, const char* api) {
  pthread_mutex_lock(&registryLock);
  commResult_t res = checkLiveLocked(comm, api);
  if (res == commSuccess) __atomic_fetch_add(&comm->inFlight, 1, __ATOMIC_ACQ_REL);
  pthread_mutex_unlock(&registryLock);
  return res;
}

void commRelease(comm_t comm) { __atomic_fetch_sub(&comm->inFlight, 1, __ATOMIC_ACQ_REL); }

/* Another rank reported a failure in a collective this rank has not reached yet: the collectives before it
 * still run (the reporter was past them; the failed rank may have done its part, as one that destroyed its
 * communicator after its last call did). */
static int beforePeerFailure(struct commComm* comm) {
  pthread_mutex_lock(&comm->errorLock);
  int before = comm->peerFailureKnown && comm->peerFailureReporter != comm->rank &&
               __atomic_load_n(&comm->collCount, __ATOMIC_RELAXED) < comm->peerFailureSeq;
  pthread_mutex_unlock(&comm->errorLock);
  return before;
}

/* commApiEnter; allowError: an earlier asynchronous error does not refuse the call (commShrink, whose purpose
 * is to go on after a failure); allowRevoked: nor does a revoke (commShrink, commSplit), which refuses every
 * other call. */
static commResult_t apiEnter(comm_t comm, const char* api, int allowError, int allowRevoked) {
  commLogClearLastWarn();
  commResult_t res = commRetain(comm, api);
  if (res != commSuccess) return res;
  int earlierError = 0;
  commLogSetRank(comm->rank);
  int state = __atomic_load_n(&comm->initState, __ATOMIC_ACQUIRE);
  if (state != COMM_INIT_DONE) {
    WARN("%s: communicator initialisation %s", api,
         state == COMM_INIT_RUNNING ? "is still in progress (poll commGetAsyncError)" : "failed");
    res = state == COMM_INIT_RUNNING ? commInvalidUsage : (commResult_t)comm->asyncError;
  } else if (comm->finalized) {
    WARN("%s: communicator was finalized", api);
    res = commInvalidUsage;
  } else if (__atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE)) {
    if (!allowRevoked) {
      WARN("%s: communicator was revoked (commRevoke): only commShrink, commSplit, commDestroy and commAbort take it",
           api);
      res = commInvalidUsage;
    }
  } else if (commAborted(comm) == COMM_ABORT_USER) {
    WARN("%s: communicator was aborted", api);
    res = commInvalidUsage;
  } else if (!allowError && !beforePeerFailure(comm)) {
    int err = __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE);
    if (err != commSuccess && err != commInProgress) {
      char cause[sizeof(comm->lastError)];
      pthread_mutex_lock(&comm->errorLock);
      snprintf(cause, sizeof(cause), "%s", comm->lastError);
      pthread_mutex_unlock(&comm->errorLock);
      WARN("%s: communicator has an earlier error (%s: %s); abort or destroy it", api,
           commGetErrorString((commResult_t)err), cause);
      res = (commResult_t)err;
      earlierError = 1; /* the record keeps that cause rather than this refusal */
    }
  }
  if (res != commSuccess) {
    if (earlierError) commLogClearLastWarn();
    commApiLeave(comm);
  }
  return res;
}
commResult_t commApiEnter(comm_t comm, const char* api) { return apiEnter(comm, api, 0, 0); }
commResult_t commApiEnterAfterError(comm_t comm, const char* api) { return apiEnter(comm, api, 1, 1); }
commResult_t commApiEnterRevoked(comm_t comm, const char* api) { return apiEnter(comm, api, 0, 1); }

void commApiLeave(comm_t comm) {
  commRecordError(comm, commLogFirstWarn());
  commRelease(comm);
  commLogSetRank(-1);
}

/* ---- Version and errors ---- */
COMM_API commResult_t commGetVersion(int* version) {
  if (version == NULL) {
    WARN("commGetVersion: version is NULL");
    return commInvalidArgument;
  }
  *version = COMM_VERSION_CODE;
  return commSuccess;
}


/* ---- Init ---- */
typedef struct {
  struct commComm* comm;
  commUniqueId id;
} initArgs;

static void fillPeerInfo(struct commComm* comm, commPeerInfo* info) {
  memset(info, 0, sizeof(*info));
  info->rank = comm->rank;
  info->pid = (int)getpid();
  info->cudaDev = comm->cudaDev;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  info->nCores = cores > 0 && cores < INT32_MAX ? (int)cores : 1;
  info->hostHash = commHostHash();
  info->busId = -1;
  /* The interface the socket transport would use (same choice as bootstrap: COMM_SOCKET_IFNAME): ranks of
   * a node on different interfaces mean several NICs, which the tuner counts. */
  char ifName[COMM_IFNAME_MAX], addrStr[128];
  commSockAddr ifAddr;
  if (commSocketFindInterface(ifName, &ifAddr) == commSuccess) {
    commSocketAddrStr(&ifAddr, addrStr, sizeof(addrStr));
    info->netIfHash = commHashBytes(addrStr, strlen(addrStr), commHashBytes(ifName, strlen(ifName), 1));
  }
  if (gethostname(info->hostname, sizeof(info->hostname)) != 0) snprintf(info->hostname, sizeof(info->hostname), "?");
  info->hostname[sizeof(info->hostname) - 1] = '\0';
  commPlacementDescribeSelf(comm, info);
}

static commResult_t computeNodes(struct commComm* comm) {
  uint64_t* hosts = NULL;
  COMMCHECK(commCalloc(&comm->rankNode, (size_t)comm->nRanks, sizeof(int)));
  COMMCHECK(commCalloc(&hosts, (size_t)comm->nRanks, sizeof(uint64_t)));
  comm->nNodes = 0;
  comm->localRanks = 0;
  comm->localRank = 0;
  for (int r = 0; r < comm->nRanks; r++) {
    uint64_t h = comm->peers[r].hostHash;
    int n;
    for (n = 0; n < comm->nNodes; n++)
      if (hosts[n] == h) break;
    if (n == comm->nNodes) hosts[comm->nNodes++] = h;
    comm->rankNode[r] = n;
    if (h == comm->peers[comm->rank].hostHash) {
      if (r < comm->rank) comm->localRank++;
      comm->localRanks++;
    }
    if (r == comm->rank) comm->node = n;
  }
  free(hosts);
  return commSuccess;
}

static commResult_t setupChannels(struct commComm* comm) {
  /* A second channel lets network connections run in parallel when helper threads move their data (8+
   * cores); below that the calling thread moves everything and channels only add connections to poll
   * (2 cores, socket allreduce 16-64 MiB: 1.2-1.5 GB/s with 1 channel, 1.1-1.3 with 2; docs/PERF.md). */
  int64_t defChannels = ((comm->nNodes > 1 || comm->shmDisable) && comm->minCores >= 8) ? 2 : 1;
  comm->nChannels = (int)commParamInt("COMM_NCHANNELS", defChannels, 1, COMM_MAX_CHANNELS);
  for (int c = 0; c < comm->nChannels; c++) {
    COMMCHECK(commChannelEnsure(comm, c));
    if (comm->rank != 0 || !COMM_LOG_ENABLED(COMM_LOG_INFO)) continue;
    char line[512];
    int len = 0, shown = comm->nRanks < 64 ? comm->nRanks : 64;
    for (int i = 0; i < shown && len < (int)sizeof(line) - 16; i++)
      len += snprintf(line + len, sizeof(line) - (size_t)len, " %d", comm->channels[c].ringRanks[i]);
    INFO(COMM_INIT | COMM_TOPO, "Ring %02d :%s%s", c, line, shown < comm->nRanks ? " ..." : "");
  }
  return commSuccess;
}

/* Channel c's connection tables and ring, made on first use: the first nChannels at init (their rings
 * are connected then), others when an algorithm (trees use two) first schedules on them. */
commResult_t commChannelEnsure(struct commComm* comm, int c) {
  if (c < 0 || c >= COMM_MAX_CHANNELS) {
    WARN("channel %d out of range (0..%d)", c, COMM_MAX_CHANNELS - 1);
    return commInternalError;
  }
  commChannel* ch = &comm->channels[c];
  if (ch->send != NULL) return commSuccess;
  ch->id = c;
  COMMCHECK(commCalloc(&ch->ringRanks, (size_t)comm->nRanks, sizeof(int)));
  COMMCHECK(commCalloc(&ch->recv, (size_t)comm->nRanks, sizeof(commConn*)));
  COMMCHECK(commCalloc(&ch->send, (size_t)comm->nRanks, sizeof(commConn*)));
  COMMCHECK(commCalloc(&ch->devRecv, (size_t)comm->nRanks, sizeof(commConn*)));
  COMMCHECK(commCalloc(&ch->devSend, (size_t)comm->nRanks, sizeof(commConn*)));
  COMMCHECK(commPlacementRing(comm, c, ch->ringRanks));
  for (int i = 0; i < comm->nRanks; i++) {
    if (ch->ringRanks[i] == comm->rank) {
      ch->ringNext = ch->ringRanks[(i + 1) % comm->nRanks];
      ch->ringPrev = ch->ringRanks[(i + comm->nRanks - 1) % comm->nRanks];
    }
  }
  return commSuccess;
}

static commResult_t connectRings(struct commComm* comm) {
  if (comm->nRanks == 1) return commSuccess;
  commConnRequest reqs[2 * COMM_MAX_CHANNELS];
  int n = 0;
  for (int c = 0; c < comm->nChannels; c++) {
    reqs[n++] = (commConnRequest){c, comm->channels[c].ringPrev, 0, 0};
    reqs[n++] = (commConnRequest){c, comm->channels[c].ringNext, 1, 0};
  }
  return commTransportConnect(comm, reqs, n);
}

static commResult_t initBody(struct commComm* comm, const commUniqueId* id) {
  commResult_t res = commSuccess;
  commLogSetRank(comm->rank);
  /* The bootstrap ends its waits on commAbort only: after a peer's failure it still serves commShrink. */
  commBootstrapOpts opts = {.timeoutMs = comm->timeoutMs, .abortFlag = &comm->bootstrapAbort};
  commErrorBootstrapOpts(comm, &opts);
  COMMCHECK(bootstrapInit(id, comm->rank, comm->nRanks, &opts, &comm->bootstrap));
  COMMCHECK(commCalloc(&comm->peers, (size_t)comm->nRanks, sizeof(commPeerInfo)));
  int64_t topoStart = commTimeNs();
  /* A rank that cannot load its topology (a bad COMM_TOPO_FILE) still joins the exchange, so that every
   * rank fails now rather than waiting for it until the timeout. */
  commResult_t topoRes = commTopoGet(&comm->topo);
  int64_t topoLoaded = commTimeNs();
  fillPeerInfo(comm, &comm->peers[comm->rank]);
  comm->peers[comm->rank].topoError = topoRes;
  COMMCHECK(bootstrapAllGather(comm->bootstrap, comm->peers, sizeof(commPeerInfo)));
  if (topoRes != commSuccess) return topoRes;
  for (int r = 0; r < comm->nRanks; r++) {
    if (comm->peers[r].topoError == commSuccess) continue;
    WARN("rank %d could not load its topology (error %d, see its log): init fails on every rank", r,
         comm->peers[r].topoError);
    return commRemoteError;
  }
  comm->minCores = INT32_MAX;
  for (int r = 0; r < comm->nRanks; r++)
    if (comm->peers[r].nCores < comm->minCores) comm->minCores = comm->peers[r].nCores;
  COMMCHECK(computeNodes(comm));
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  comm->oversubscribed = cores > 0 && comm->localRanks > cores;
  comm->commHash = commHashBytes(id, sizeof(*id), 0);
  if (comm->rank == 0) commTopoLogMachine();
  int64_t placeStart = commTimeNs();
  COMMCHECK(commPlacementSetup(comm));
  if (commPlacementDump(comm) != commSuccess) WARN_NOTICE("COMM_TOPO_DUMP_FILE not written (see above); init goes on");
  INFO(COMM_TOPO | COMM_INIT, "topology: %s in %.2f ms, placement and ring order in %.2f ms (with one exchange)",
       commParamStr("COMM_TOPO_FILE", NULL) ? "loaded" : "discovered", (topoLoaded - topoStart) / 1e6,
       (commTimeNs() - placeStart) / 1e6);
  COMMCHECK(commTransportInit(comm));
  COMMCHECK(setupChannels(comm));
  COMMCHECK(connectRings(comm));
  COMMCHECK(commPlacementCollNet(comm));
  COMMCHECK(commTunerInit(comm));
  INFO(COMM_INIT,
       "comm %p%s%s rank %d nRanks %d localRank %d localRanks %d node %d nNodes %d channels %d "
       "slot %zu B - Init COMPLETE",
       (void*)comm, comm->name[0] ? " " : "", comm->name, comm->rank, comm->nRanks, comm->localRank, comm->localRanks,
       comm->node, comm->nNodes, comm->nChannels, comm->slotBytes);
  return res;
}

static void* initThreadMain(void* arg) {
  initArgs* a = (initArgs*)arg;
  struct commComm* comm = a->comm;
  commResult_t res = initBody(comm, &a->id);
  free(a);
  if (res != commSuccess) commSetAsyncError(comm, res);
  __atomic_store_n(&comm->initState, res == commSuccess ? COMM_INIT_DONE : COMM_INIT_FAILED, __ATOMIC_RELEASE);
  return NULL;
}

static int idIsZero(const commUniqueId* id) {
  for (size_t i = 0; i < sizeof(id->internal); i++)
    if (id->internal[i] != 0) return 0;
  return 1;
}

static void freeComm(struct commComm* comm) {
  commErrorForward(comm);
  commErrorClosing(comm); /* the bootstrap's thread leaves the executors alone from here on */
  commDevFree(comm);      /* waits for this comm's kernels (ended by now, aborted, or timing out) */
  commTransportCloseAll(comm);
  commTransportFinalize(comm);
  commTunerFree(comm);
  commTopoRelease(comm->topo);
  free(comm->topoRanks);
  free(comm->ringPos);
  if (comm->bootstrap) bootstrapClose(comm->bootstrap);
  for (int c = 0; c < COMM_MAX_CHANNELS; c++) {
    free(comm->channels[c].ringRanks);
    free(comm->channels[c].send);
    free(comm->channels[c].recv);
    free(comm->channels[c].devSend);
    free(comm->channels[c].devRecv);
  }
  free(comm->netConns);
  free(comm->peers);
  free(comm->rankNode);
  free(comm->scratch);
  comm->magic = COMM_MAGIC_DEAD;
  pthread_mutex_destroy(&comm->errorLock);
  free(comm);
}

commResult_t commCheckConfig(const commConfig_t* config) {
  if (config == NULL) return commSuccess;
  if (config->magic != COMM_CONFIG_MAGIC || config->size < offsetof(commConfig_t, cgaClusterSize)) {
    WARN("commConfig_t is not initialised: use COMM_CONFIG_INITIALIZER (magic 0x%x size %zu)", config->magic,
         config->size);
    return commInvalidArgument;
  }
  if (config->size > sizeof(commConfig_t)) {
    WARN_NOTICE("commConfig_t of size %zu is newer than this library (%zu); extra fields are ignored", config->size,
                sizeof(commConfig_t));
  }
  if (config->blocking != COMM_CONFIG_UNDEF_INT && config->blocking != 0 && config->blocking != 1) {
    WARN("commConfig_t.blocking must be 0 or 1, not %d", config->blocking);
    return commInvalidArgument;
  }
  return commSuccess;
}

/* A config field is readable if the caller's struct is large enough to hold it. */
#define CONFIG_HAS(cfg, field) ((cfg) != NULL && (cfg)->size >= offsetof(commConfig_t, field) + sizeof((cfg)->field))

commResult_t commDeferCall(const commDeferredCall* call, commGroupJobFn run, int phase) {
  commDeferredCall* a = NULL;
  COMMCHECK(commCalloc(&a, 1, sizeof(*a)));
  *a = *call;
  commResult_t res = commGroupDefer(run, a, phase);
  if (res != commSuccess) free(a);
  return res;
}

void commDeferCopyConfig(commDeferredCall* call, const commConfig_t* config) {
  call->hasConfig = config != NULL;
  if (config == NULL) return;
  size_t n = config->size < sizeof(commConfig_t) ? config->size : sizeof(commConfig_t);
  commConfig_t c = COMM_CONFIG_INITIALIZER;
  memcpy(&c, config, n);
  call->config = c;
}

/* The device the next commInitRankConfig of this thread binds to; BIND_CURRENT: the one current here. Set by
 * commInitRankOnDevice around its call: NCCL binds a communicator to the device current where the user called
 * init, and a group's end, commInitAll and a split run inits on threads of their own. */
#define BIND_CURRENT (-2)
static __thread int bindDevice = BIND_CURRENT;

commResult_t commInitRankOnDevice(comm_t* newcomm, int nranks, commUniqueId commId, int rank, commConfig_t* config,
                                  int cudaDev) {
  int saved = bindDevice;
  bindDevice = cudaDev < 0 ? -1 : cudaDev;
  commResult_t res = commInitRankConfig(newcomm, nranks, commId, rank, config);
  bindDevice = saved;
  return res;
}

/* Runs on a thread of the group's: that thread's current device is the caller's (CUDA calls of the init that
 * take no device use it). */
void commInitBindWorkerThread(int cudaDev) {
  if (cudaDev >= 0 && commDevBindThread(cudaDev) != commSuccess)
    INFO(COMM_INIT, "init: could not make device %d current in the init thread (%s)", cudaDev, commLogLastWarn());
}

static commResult_t deferredInit(void* p) {
  commDeferredCall* a = (commDeferredCall*)p;
  commInitBindWorkerThread(a->cudaDev);
  commResult_t res = commInitRankOnDevice(a->newcomm, a->nranks, a->id, a->rank, a->hasConfig ? &a->config : NULL,
                                          a->cudaDev);
  free(a);
  return res;
}

COMM_API commResult_t commInitRankConfig(comm_t* newcomm, int nranks, commUniqueId commId, int rank,
                                         commConfig_t* config) {
  commLogClearLastWarn();
  if (commGroupDepth() > 0 && newcomm != NULL) {
    /* Ranks of one thread initialise together at commGroupEnd (*newcomm is set then). */
    *newcomm = NULL;
    COMMCHECK(commCheckConfig(config));
    commDeferredCall call = {newcomm, nranks, rank, commId, NULL, 0, 0, 0, COMM_CONFIG_INITIALIZER, -1};
    commDeferCopyConfig(&call, config);
    call.cudaDev = bindDevice != BIND_CURRENT ? bindDevice : commCudaCurrentDevice();
    return commDeferCall(&call, deferredInit, 0);
  }
  commLogSetRank(rank);
  commParamWarnNccl(); /* NCCL variables libcomm does not provide: one WARN each, once per process */
  commResult_t res = commSuccess;
  struct commComm* comm = NULL;
  if (newcomm == NULL) {
    WARN("commInitRank: newcomm is NULL");
    return commInvalidArgument;
  }
  *newcomm = NULL;
  if (nranks < 1) {
    WARN("commInitRank: nranks %d must be at least 1", nranks);
    return commInvalidArgument;
  }
  if (rank < 0 || rank >= nranks) {
    WARN("commInitRank: rank %d is out of range [0, %d)", rank, nranks);
    return commInvalidArgument;
  }
  COMMCHECK(commCheckConfig(config));
  if (idIsZero(&commId)) {
    const char* root = commParamStr("COMM_ROOT", NULL);
    if (root == NULL) {
      WARN("commInitRank: the unique id is empty and COMM_ROOT is not set");
      return commInvalidArgument;
    }
    COMMCHECK(bootstrapIdFromRootAddr(root, &commId, rank == 0));
  }
  COMMCHECK(commCalloc(&comm, 1, sizeof(*comm)));
  comm->magic = COMM_MAGIC_ALIVE;
  comm->failedPeer = -1;
  pthread_mutex_init(&comm->errorLock, NULL);
  comm->rank = rank;
  comm->nRanks = nranks;
  /* The device this rank uses, as NCCL binds a communicator to the caller's current device: it places the
   * rank in the topology (its GPU, and the NIC nearest to it). -1 for host-only programs. */
  comm->cudaDev = bindDevice != BIND_CURRENT ? bindDevice : commCudaCurrentDevice();
  comm->blocking = (int)commParamInt("COMM_BLOCKING", 1, 0, 1); /* or NCCL_COMM_BLOCKING; the config wins */
  if (CONFIG_HAS(config, blocking) && config->blocking != COMM_CONFIG_UNDEF_INT) comm->blocking = config->blocking;
  comm->timeoutMs = commParamInt("COMM_TIMEOUT_MS", COMM_DEFAULT_TIMEOUT_MS, -1, INT64_MAX / 1000000);
  if (CONFIG_HAS(config, timeoutMs) && config->timeoutMs != COMM_CONFIG_UNDEF_INT) comm->timeoutMs = config->timeoutMs;
  if (CONFIG_HAS(config, commName) && config->commName != NULL)
    snprintf(comm->name, sizeof(comm->name), "%s", config->commName);
  if (CONFIG_HAS(config, netName) && config->netName != NULL)
    snprintf(comm->netName, sizeof(comm->netName), "%s", config->netName);
  int64_t buffSize = commParamSize("COMM_BUFFSIZE", COMM_DEFAULT_BUFFSIZE, 64 * 1024, 1LL << 30);
  comm->nSlots = COMM_NSLOTS;
  comm->slotBytes = (size_t)buffSize / COMM_NSLOTS / 64 * 64;
  comm->shmDisable = (int)commParamInt("COMM_SHM_DISABLE", 0, 0, 1);
  comm->p2pDisable = (int)commParamInt("COMM_P2P_DISABLE", 0, 0, 1);
  comm->oneShotMaxBytes = (size_t)commParamSize("COMM_ALLREDUCE_ONESHOT_MAX", COMM_DEFAULT_ONESHOT_MAX, 0, 1LL << 30);
  if (rank == 0) {
    INFO(COMM_INIT, "libcomm version %d.%d.%d", COMM_MAJOR, COMM_MINOR, COMM_PATCH);
  }
  COMMCHECKGOTO(registryAdd(comm), res, fail);
  if (!comm->blocking) {
    initArgs* a = NULL;
    COMMCHECKGOTO(commCalloc(&a, 1, sizeof(*a)), res, failRegistered);
    a->comm = comm;
    a->id = commId;
    comm->initState = COMM_INIT_RUNNING;
    if (pthread_create(&comm->initThread, NULL, initThreadMain, a) != 0) {
      free(a);
      WARN("commInitRank: could not start the init thread");
      res = commSystemError;
      goto failRegistered;
    }
    *newcomm = comm;
    return commInProgress;
  }
  comm->initState = COMM_INIT_RUNNING;
  res = initBody(comm, &commId);
  if (res != commSuccess) goto failRegistered;
  __atomic_store_n(&comm->initState, COMM_INIT_DONE, __ATOMIC_RELEASE);
  *newcomm = comm;
  commLogSetRank(-1);
  return commSuccess;
failRegistered:
  commSetAsyncError(comm, res); /* ranks still in init hear who failed now, not at their timeout */
  registryRemove(comm);
  /* commGetLastError(NULL) then gives the record's cause: the rank that failed, when one is known. */
  pthread_mutex_lock(&comm->errorLock);
  if (comm->lastError[0] != '\0') commLogSetCause(comm->lastError);
  pthread_mutex_unlock(&comm->errorLock);
fail:
  WARN("commInitRank: rank %d of %d failed: %s", rank, nranks, commGetErrorString(res));
  freeComm(comm);
  commLogSetRank(-1);
  return res;
}

COMM_API commResult_t commInitRank(comm_t* newcomm, int nranks, commUniqueId commId, int rank) {
  return commInitRankConfig(newcomm, nranks, commId, rank, NULL);
}

COMM_API commResult_t commGetUniqueId(commUniqueId* id) {
  commLogClearLastWarn();
  if (id == NULL) {
    WARN("commGetUniqueId: uniqueId is NULL");
    return commInvalidArgument;
  }
  const char* root = commParamStr("COMM_ROOT", NULL);
  if (root != NULL) return bootstrapIdFromRootAddr(root, id, 0);
  return bootstrapGetUniqueId(id);
}

/* ---- Buffer registration ---- */
/* libcomm registers buffers with its transports on first use (and caches the registration), so an explicit
 * registration only hands out a handle, which deregistration checks: it must come from this communicator
 * and not have been deregistered. */
#define COMM_REG_MAGIC 0x7265676eu
typedef struct {
  uint32_t magic;
  comm_t comm;
  void* buff;
  size_t size;
} commRegHandle;

COMM_API commResult_t commRegister(const comm_t comm, void* buff, size_t size, void** handle) {
  COMMCHECK(commApiEnter(comm, "commRegister"));
  commResult_t res = commSuccess;
  commRegHandle* h = NULL;
  if (handle == NULL || (buff == NULL && size > 0)) {
    WARN("commRegister: %s", handle == NULL ? "handle is NULL" : "NULL buffer with a size");
    res = commInvalidArgument;
  } else if ((res = commCalloc(&h, 1, sizeof(*h))) == commSuccess) {
    *h = (commRegHandle){COMM_REG_MAGIC, comm, buff, size};
    *handle = h;
  }
  commApiLeave(comm);
  return res;
}

COMM_API commResult_t commDeregister(const comm_t comm, void* handle) {
  COMMCHECK(commApiEnterRevoked(comm, "commDeregister")); /* releasing stays possible */
  commRegHandle* h = (commRegHandle*)handle;
  commResult_t res = commSuccess;
  if (h == NULL || h->magic != COMM_REG_MAGIC || h->comm != comm) {
    WARN("commDeregister: %p is not a handle this communicator gave out", handle);
    res = commInvalidArgument;
  } else {
    h->magic = 0;
    free(h);
  }
  commApiLeave(comm);
  return res;
}

/* ---- Teardown ---- */
static void joinInitThread(struct commComm* comm) {
  if (!comm->blocking && comm->initThread) {
    pthread_join(comm->initThread, NULL);
    comm->initThread = 0;
  }
}

static commResult_t deferredFinalize(void* p) {
  commDeferredCall* a = (commDeferredCall*)p;
  commResult_t res = commFinalize(a->parent);
  free(a);
  return res;
}

static commResult_t finalizeHeld(comm_t comm) {
  if (__atomic_load_n(&comm->initState, __ATOMIC_ACQUIRE) == COMM_INIT_RUNNING) {
    WARN("commFinalize: initialisation still in progress");
    return commNoteCallError(comm, commInvalidUsage);
  }
  if (comm->finalized) {
    WARN("commFinalize: communicator already finalized");
    return commNoteCallError(comm, commInvalidUsage);
  }
  if (__atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE)) {
    WARN("commFinalize: communicator was revoked (commRevoke): destroy it (commDestroy) instead");
    return commNoteCallError(comm, commInvalidUsage);
  }
  /* Operations on device buffers finish first (a kernel ends on abort or timeout too). */
  commResult_t res = commDevSync(comm);
  if (res != commSuccess) {
    commSetAsyncError(comm, res);
    WARN("commFinalize: rank %d: operations on device buffers failed", comm->rank);
  }
  int earlier = __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE);
  if (res == commSuccess && earlier != commSuccess) {
    /* No barrier with ranks that may be gone; the caller learns that the communicator had failed. */
    WARN("commFinalize: rank %d: the communicator has an earlier error (%s)", comm->rank,
         commGetErrorString((commResult_t)earlier));
    res = (commResult_t)earlier;
  }
  if (res == commSuccess && comm->initState == COMM_INIT_DONE && comm->bootstrap != NULL) {
    /* Every rank is past its last operation before connections close. */
    res = bootstrapBarrier(comm->bootstrap);
    if (res != commSuccess) {
      WARN("commFinalize: rank %d: barrier with the other ranks failed", comm->rank);
      commSetAsyncError(comm, res); /* the ranks still in the barrier hear of it now */
    }
  }
  commErrorForward(comm);
  commTransportCloseAll(comm);
  comm->finalized = 1;
  return commNoteCallError(comm, res);
}

COMM_API commResult_t commFinalize(comm_t comm) {
  commLogClearLastWarn();
  COMMCHECK(commCheckComm(comm, "commFinalize"));
  if (commGroupDepth() > 0) {
    /* Finalizes of this thread's group run together after its collectives, at commGroupEnd. */
    commDeferredCall call = {NULL, 0, 0, {{0}}, comm, 0, 0, 0, COMM_CONFIG_INITIALIZER, -1};
    return commDeferCall(&call, deferredFinalize, 1);
  }
  COMMCHECK(commRetain(comm, "commFinalize"));
  commResult_t res = finalizeHeld(comm);
  commRelease(comm);
  return res;
}

static commResult_t destroyComm(comm_t comm, const char* api, int abort) {
  if (!registryRemove(comm)) {
    WARN("%s: comm %p is not a live communicator (destroyed twice?)", api, (void*)comm);
    return commInvalidArgument;
  }
  if (abort) {
    __atomic_store_n(&comm->abortFlag, COMM_ABORT_USER, __ATOMIC_RELEASE);
    __atomic_store_n(&comm->bootstrapAbort, 1, __ATOMIC_RELEASE);
    commDevAbort(comm); /* kernels of this comm see it and end */
  }
  /* Wait for calls still inside the communicator (they see the abort flag and leave). */
  commBackoff b = {0};
  while (__atomic_load_n(&comm->inFlight, __ATOMIC_ACQUIRE) > 0) commBackoffWait(&b);
  joinInitThread(comm);
  INFO(COMM_INIT, "comm %p rank %d nRanks %d - %s COMPLETE", (void*)comm, comm->rank, comm->nRanks,
       abort ? "Abort" : "Destroy");
  freeComm(comm);
  return commSuccess;
}

COMM_API commResult_t commDestroy(comm_t comm) {
  commLogClearLastWarn();
  if (comm == NULL) return commSuccess; /* as free(NULL) */
  return destroyComm(comm, "commDestroy", 0);
}

COMM_API commResult_t commAbort(comm_t comm) {
  commLogClearLastWarn();
  if (comm == NULL) return commSuccess;
  return destroyComm(comm, "commAbort", 1);
}


/* ---- Queries ---- */
COMM_API commResult_t commCount(const comm_t comm, int* count) {
  commLogClearLastWarn();
  COMMCHECK(commRetain(comm, "commCount"));
  commResult_t res = commSuccess;
  if (count == NULL) {
    WARN("commCount: count is NULL");
    res = commNoteCallError(comm, commInvalidArgument);
  } else {
    *count = comm->nRanks;
  }
  commRelease(comm);
  return res;
}

COMM_API commResult_t commUserRank(const comm_t comm, int* rank) {
  commLogClearLastWarn();
  COMMCHECK(commRetain(comm, "commUserRank"));
  commResult_t res = commSuccess;
  if (rank == NULL) {
    WARN("commUserRank: rank is NULL");
    res = commNoteCallError(comm, commInvalidArgument);
  } else {
    *rank = comm->rank;
  }
  commRelease(comm);
  return res;
}

COMM_API commResult_t commCuDevice(const comm_t comm, int* device) {
  commLogClearLastWarn();
  COMMCHECK(commRetain(comm, "commCuDevice"));
  commResult_t res = commSuccess;
  if (device == NULL) {
    WARN("commCuDevice: device is NULL");
    res = commNoteCallError(comm, commInvalidArgument);
  } else {
    *device = comm->cudaDev;
  }
  commRelease(comm);
  return res;
}
