/* Discovery of GPUs and NVLinks (part of src/topo/discover.c's commTopoDiscover): the CUDA driver and
 * NVML, loaded with dlopen (their headers are not needed), matched to hwloc's PCI devices by bus id. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "debug.h"
#include "discover_internal.h"
#include "utils.h"

#define NVML_MAX_LINKS 18

/* ---- CUDA driver and NVML, loaded once ---- */

typedef int (*cuInit_t)(unsigned);
typedef int (*cuDeviceGetCount_t)(int*);
typedef int (*cuDeviceGet_t)(int*, int);
typedef int (*cuDeviceGetPCIBusId_t)(char*, int, int);
typedef int (*cuDeviceGetAttribute_t)(int*, int, int);
typedef int (*cuDeviceTotalMem_t)(size_t*, int);
typedef int (*cuDeviceGetName_t)(char*, int, int);
#define CU_ATTR_CC_MAJOR 75
#define CU_ATTR_CC_MINOR 76
#define CU_ERROR_NO_DEVICE 100

/* NVML's C ABI (nvml.h, not included: it may be absent). */
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
#define NVML_OK 0
#define NVML_FEATURE_ENABLED 1
#define NVML_NVLINK_DEVICE_GPU 0
#define NVML_NVLINK_DEVICE_IBMNPU 1
#define NVML_NVLINK_DEVICE_SWITCH 2
typedef int (*nvmlInit_t)(void);
typedef int (*nvmlGetHandleByPciBusId_t)(const char*, nvmlDevice_t*);
typedef int (*nvmlGetNvLinkState_t)(nvmlDevice_t, unsigned, int*);
typedef int (*nvmlGetNvLinkRemotePciInfo_t)(nvmlDevice_t, unsigned, nvmlPciInfo_t*);
typedef int (*nvmlGetNvLinkRemoteDeviceType_t)(nvmlDevice_t, unsigned, int*);
typedef int (*nvmlGetCudaComputeCapability_t)(nvmlDevice_t, int*, int*);
typedef int (*nvmlGetName_t)(nvmlDevice_t, char*, unsigned);
typedef int (*nvmlGetMemoryInfo_t)(nvmlDevice_t, nvmlMemory_t*);

static struct {
  int cudaLoaded; /* every required symbol found */
  int cuInitErr;  /* cuInit(0), called once */
  int cudaTried;  /* libcuda was found loaded and looked at */
  cuInit_t init;
  cuDeviceGetCount_t getCount;
  cuDeviceGet_t get;
  cuDeviceGetPCIBusId_t busId;
  cuDeviceGetAttribute_t attr;
  cuDeviceTotalMem_t totalMem;
  cuDeviceGetName_t name;
  int nvmlLoaded;
  nvmlInit_t nvInit;
  nvmlGetHandleByPciBusId_t nvHandle;
  nvmlGetNvLinkState_t nvLinkState;
  nvmlGetNvLinkRemotePciInfo_t nvLinkRemote;
  nvmlGetNvLinkRemoteDeviceType_t nvLinkRemoteType; /* optional */
  nvmlGetCudaComputeCapability_t nvCc;              /* optional */
  nvmlGetName_t nvName;                             /* optional */
  nvmlGetMemoryInfo_t nvMem;                        /* optional */
  int nvmlInitErr;                                  /* nvmlInit_v2, called once */
} gLib;
static pthread_once_t gLibOnce = PTHREAD_ONCE_INIT;

/* Both libraries are initialised once and stay loaded and initialised for the life of the process: the CUDA
 * driver keeps state (and threads) after cuInit, a failed cuInit fails again, and nvmlInit / nvmlShutdown
 * cost milliseconds at every discovery otherwise.
 * The CUDA driver is only used when the process has loaded it already (a program that uses GPUs has):
 * cuInit costs about 250 ms on an H200 machine, which a host-memory communicator must not pay. Until then
 * GPUs come from hwloc and NVML with CUDA device -1, and each discovery looks again. */
static pthread_mutex_t gCudaLock = PTHREAD_MUTEX_INITIALIZER;
static void loadCuda(void) {
  pthread_mutex_lock(&gCudaLock);
  void* h = gLib.cudaLoaded || gLib.cudaTried ? NULL : dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (h) {
    gLib.cudaTried = 1;
    gLib.init = (cuInit_t)dlsym(h, "cuInit");
    gLib.getCount = (cuDeviceGetCount_t)dlsym(h, "cuDeviceGetCount");
    gLib.get = (cuDeviceGet_t)dlsym(h, "cuDeviceGet");
    gLib.busId = (cuDeviceGetPCIBusId_t)dlsym(h, "cuDeviceGetPCIBusId");
    gLib.attr = (cuDeviceGetAttribute_t)dlsym(h, "cuDeviceGetAttribute");
    gLib.totalMem = (cuDeviceTotalMem_t)dlsym(h, "cuDeviceTotalMem_v2");
    gLib.name = (cuDeviceGetName_t)dlsym(h, "cuDeviceGetName");
    gLib.cudaLoaded = gLib.init && gLib.getCount && gLib.get && gLib.busId && gLib.attr && gLib.totalMem && gLib.name;
    if (gLib.cudaLoaded) gLib.cuInitErr = gLib.init(0);
  }
  pthread_mutex_unlock(&gCudaLock);
}

static void loadLibs(void) {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h) {
    gLib.nvInit = (nvmlInit_t)dlsym(h, "nvmlInit_v2");
    gLib.nvHandle = (nvmlGetHandleByPciBusId_t)dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
    gLib.nvLinkState = (nvmlGetNvLinkState_t)dlsym(h, "nvmlDeviceGetNvLinkState");
    gLib.nvLinkRemote = (nvmlGetNvLinkRemotePciInfo_t)dlsym(h, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    gLib.nvLinkRemoteType = (nvmlGetNvLinkRemoteDeviceType_t)dlsym(h, "nvmlDeviceGetNvLinkRemoteDeviceType");
    gLib.nvCc = (nvmlGetCudaComputeCapability_t)dlsym(h, "nvmlDeviceGetCudaComputeCapability");
    gLib.nvName = (nvmlGetName_t)dlsym(h, "nvmlDeviceGetName");
    gLib.nvMem = (nvmlGetMemoryInfo_t)dlsym(h, "nvmlDeviceGetMemoryInfo");
    gLib.nvmlLoaded = gLib.nvInit && gLib.nvHandle && gLib.nvLinkState && gLib.nvLinkRemote;
    if (gLib.nvmlLoaded) gLib.nvmlInitErr = gLib.nvInit();
  }
}


void discLoadGpuLibs(void) {
  pthread_once(&gLibOnce, loadLibs);
  loadCuda();
}


/* ---- GPUs ---- */

static int findDev(const discDevs* v, const char* busId) {
  for (int i = 0; i < v->n; i++)
    if (strcmp(v->a[i].busId, busId) == 0) return i;
  return -1;
}

commResult_t discCudaGpus(discState* st, int hwlocGpus) {
  if (!gLib.cudaLoaded) {
    if (hwlocGpus)
      INFO(COMM_TOPO,
           "topology: %d NVIDIA GPU(s) on PCI; the CUDA driver is not loaded in this process, so their CUDA device "
           "numbers are not matched (a program that uses them loads CUDA before it creates a communicator)",
           hwlocGpus);
    else INFO(COMM_TOPO, "topology: the CUDA driver is not loaded in this process: no CUDA GPUs");
    return commSuccess;
  }
  int err = gLib.cuInitErr, count = 0;
  if (err == 0) err = gLib.getCount(&count);
  if (err == CU_ERROR_NO_DEVICE) {
    INFO(COMM_TOPO, "topology: the CUDA driver lists no GPU%s", hwlocGpus ? " (CUDA_VISIBLE_DEVICES?)" : "");
    return commSuccess;
  }
  if (err != 0) {
    if (hwlocGpus)
      WARN("topology: %d NVIDIA GPU(s) on PCI but the CUDA driver fails (error %d); their CUDA devices are unknown",
           hwlocGpus, err);
    else INFO(COMM_TOPO, "topology: CUDA driver present but unusable (error %d): no CUDA GPUs", err);
    return commSuccess;
  }
  for (int i = 0; i < count; i++) {
    int dev, major = 0, minor = 0;
    char raw[64], busId[COMM_TOPO_BUSID_MAX], name[COMM_TOPO_NAME_MAX];
    size_t mem = 0;
    if (gLib.get(&dev, i) != 0 || gLib.busId(raw, (int)sizeof(raw), dev) != 0 || discBusIdNormalize(raw, busId) != 0) {
      WARN("topology: CUDA device %d: no PCI bus id; left out of the topology", i);
      continue;
    }
    st->cudaGpus++;
    int g = findDev(&st->gpus, busId);
    discDev* d;
    if (g < 0) {
      COMMCHECK(discDevPush(&st->gpus, &d));
      d->parent = st->cpuNode[0];
      d->bw = DEFAULT_CUDA_GPU_BW;
      discCopyStr(d->busId, sizeof(d->busId), busId);
      st->nCudaOnly++;
    } else {
      d = &st->gpus.a[g];
    }
    d->dev = i;
    if (gLib.attr(&major, CU_ATTR_CC_MAJOR, dev) == 0 && gLib.attr(&minor, CU_ATTR_CC_MINOR, dev) == 0)
      d->sm = major * 10 + minor;
    if (gLib.totalMem(&mem, dev) == 0) d->memMB = (int)(mem >> 20);
    if (gLib.name(name, (int)sizeof(name), dev) == 0) {
      name[sizeof(name) - 1] = '\0';
      discCopyStr(d->name, sizeof(d->name), name);
    }
  }
  INFO(COMM_TOPO, "topology: CUDA driver lists %d GPU(s)", count);
  return commSuccess;
}

static int cmpBusId(const void* a, const void* b) {
  return strcmp(((const discDev*)a)->busId, ((const discDev*)b)->busId);
}

/* Adds the GPU nodes (ordered by bus id); node[i] receives the builder node of st->gpus.a[i]. */
commResult_t discAddGpus(discState* st, int* node) {
  if (st->gpus.n > 1) qsort(st->gpus.a, (size_t)st->gpus.n, sizeof(discDev), cmpBusId);
  for (int i = 0; i < st->gpus.n; i++) {
    const discDev* d = &st->gpus.a[i];
    COMMCHECK(commTopoAddNode(st->topo, st->host, COMM_TOPO_GPU, d->parent, &node[i]));
    commTopoNode* nd = commTopoNodeAt(st->topo, node[i]);
    discCopyStr(nd->busId, sizeof(nd->busId), d->busId);
    discCopyStr(nd->name, sizeof(nd->name), d->name);
    nd->bw = d->bw;
    nd->u.gpu.dev = d->dev;
    nd->u.gpu.sm = d->sm;
    nd->u.gpu.memMB = d->memMB;
  }
  return commSuccess;
}

/* NVLinks of every GPU from NVML. GPU pairs are added once, from the GPU first in bus id order. */
commResult_t discNvlinks(discState* st, const int* gpuNode) {
  if (st->gpus.n == 0) return commSuccess;
  if (!gLib.nvmlLoaded) {
    INFO(COMM_TOPO, "topology: NVML (libnvidia-ml.so.1) not available: no NVLinks");
    return commSuccess;
  }
  if (gLib.nvmlInitErr != NVML_OK) {
    WARN("topology: nvmlInit failed (error %d): NVLinks unknown, GPUs treated as PCI-only", gLib.nvmlInitErr);
    return commSuccess;
  }
  int nvsNode = -1, nLinks = 0;
  for (int g = 0; g < st->gpus.n; g++) {
    discDev* d = &st->gpus.a[g];
    nvmlDevice_t h;
    if (gLib.nvHandle(d->busId, &h) != NVML_OK) continue;
    commTopoNode* nd = commTopoNodeAt(st->topo, gpuNode[g]);
    /* What CUDA did not say (GPUs hidden by CUDA_VISIBLE_DEVICES). */
    if (nd->u.gpu.sm == 0 && gLib.nvCc) {
      int major, minor;
      if (gLib.nvCc(h, &major, &minor) == NVML_OK) nd->u.gpu.sm = major * 10 + minor;
    }
    if (nd->u.gpu.memMB == 0 && gLib.nvMem) {
      nvmlMemory_t m;
      if (gLib.nvMem(h, &m) == NVML_OK) nd->u.gpu.memMB = (int)(m.total >> 20);
    }
    if (nd->u.gpu.dev < 0 && gLib.nvName) {
      char name[96];
      if (gLib.nvName(h, name, sizeof(name)) == NVML_OK) {
        name[sizeof(name) - 1] = '\0';
        discCopyStr(nd->name, sizeof(nd->name), name);
      }
    }
    struct {
      char busId[COMM_TOPO_BUSID_MAX];
      int type, count;
    } peers[NVML_MAX_LINKS];
    int nPeers = 0;
    for (unsigned l = 0; l < NVML_MAX_LINKS; l++) {
      int active = 0, type = -1;
      nvmlPciInfo_t pci;
      char busId[COMM_TOPO_BUSID_MAX];
      if (gLib.nvLinkState(h, l, &active) != NVML_OK || active != NVML_FEATURE_ENABLED) continue;
      memset(&pci, 0, sizeof(pci));
      if (gLib.nvLinkRemote(h, l, &pci) != NVML_OK) continue;
      pci.busId[sizeof(pci.busId) - 1] = '\0';
      if (discBusIdNormalize(pci.busId, busId) != 0) discHwBusId(pci.domain, pci.bus, pci.device, 0, busId);
      if (gLib.nvLinkRemoteType == NULL || gLib.nvLinkRemoteType(h, l, &type) != NVML_OK)
        type = findDev(&st->gpus, busId) >= 0 ? NVML_NVLINK_DEVICE_GPU : NVML_NVLINK_DEVICE_SWITCH;
      int p = 0;
      while (p < nPeers && !(peers[p].type == type && strcmp(peers[p].busId, busId) == 0)) p++;
      if (p == nPeers) {
        discCopyStr(peers[p].busId, sizeof(peers[p].busId), busId);
        peers[p].type = type;
        peers[p].count = 0;
        nPeers++;
      }
      peers[p].count++;
      TRACE(COMM_TOPO, "topology: GPU %s NVLink %u -> %s (%s)", d->busId, l, busId,
            type == NVML_NVLINK_DEVICE_GPU      ? "GPU"
            : type == NVML_NVLINK_DEVICE_SWITCH ? "NVSwitch"
                                                : "other");
    }
    int nvsCount = 0;
    for (int p = 0; p < nPeers; p++) {
      if (peers[p].type == NVML_NVLINK_DEVICE_SWITCH) {
        nvsCount += peers[p].count;
      } else if (peers[p].type == NVML_NVLINK_DEVICE_GPU) {
        int q = findDev(&st->gpus, peers[p].busId);
        if (q <= g) continue; /* unknown GPU, or added from the other end */
        int sm = commTopoNodeAt(st->topo, gpuNode[q])->u.gpu.sm;
        if (sm == 0 || (nd->u.gpu.sm > 0 && nd->u.gpu.sm < sm)) sm = nd->u.gpu.sm;
        COMMCHECK(
            commTopoAddNvlink(st->topo, gpuNode[g], gpuNode[q], peers[p].count, peers[p].count * commTopoNvlinkBw(sm)));
        nLinks += peers[p].count;
      } else {
        INFO(COMM_TOPO, "topology: GPU %s: %d NVLink(s) to a CPU or an unknown device (%s) left out", d->busId,
             peers[p].count, peers[p].busId);
      }
    }
    if (nvsCount > 0) {
      if (nvsNode < 0) COMMCHECK(commTopoAddNode(st->topo, st->host, COMM_TOPO_NVS, -1, &nvsNode));
      nd = commTopoNodeAt(st->topo, gpuNode[g]);
      COMMCHECK(commTopoAddNvlink(st->topo, gpuNode[g], nvsNode, nvsCount, nvsCount * commTopoNvlinkBw(nd->u.gpu.sm)));
      nLinks += nvsCount;
    }
  }
  if (nLinks) INFO(COMM_TOPO, "topology: %d NVLink(s)%s", nLinks, nvsNode >= 0 ? ", NVSwitch present" : "");
  return commSuccess;
}
