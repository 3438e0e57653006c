/* GPUDirect RDMA for the IB transport (ib_gdr.h). SPDX-License-Identifier: Apache-2.0 */
#include "ib_gdr.h"

#ifdef COMM_HAVE_IBVERBS

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "debug.h"
#include "devmem.h"
#include "param.h"

/* ---------------------------------------------------------------- the CUDA driver, loaded at run time */

/* Values of the CUDA driver API (cuda.h), which this file does not include. */
#define GDR_CU_DEVICE_ATTRIBUTE_FLUSH_WRITES_OPTIONS 117
#define GDR_CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 124
#define GDR_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1
#define GDR_CU_FLUSH_OPTION_HOST 1
#define GDR_CU_FLUSH_TARGET_CURRENT_CTX 0
#define GDR_CU_FLUSH_TO_OWNER 100

static struct {
  int (*deviceGet)(int* dev, int ordinal);
  int (*deviceGetAttribute)(int* value, int attribute, int dev);
  int (*memGetHandleForAddressRange)(void* handle, unsigned long long dptr, size_t size, int type,
                                     unsigned long long flags);
  int (*flushGPUDirectRDMAWrites)(int target, int scope);
} cu;
static pthread_once_t cuOnce = PTHREAD_ONCE_INIT;

static void cuLoad(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return;
  *(void**)&cu.deviceGet = dlsym(lib, "cuDeviceGet");
  *(void**)&cu.deviceGetAttribute = dlsym(lib, "cuDeviceGetAttribute");
  *(void**)&cu.memGetHandleForAddressRange = dlsym(lib, "cuMemGetHandleForAddressRange");
  *(void**)&cu.flushGPUDirectRDMAWrites = dlsym(lib, "cuFlushGPUDirectRDMAWrites");
}

static int cuAttribute(int ordinal, int attribute) {
  pthread_once(&cuOnce, cuLoad);
  int dev = 0, value = 0;
  if (!cu.deviceGet || !cu.deviceGetAttribute || cu.deviceGet(&dev, ordinal) != 0 ||
      cu.deviceGetAttribute(&value, attribute, dev) != 0)
    return 0;
  return value;
}
static int drvDeviceOf(const void* ptr) { return commDevicePointerOrdinal(ptr); }
static int drvDmabufSupported(int dev) {
  pthread_once(&cuOnce, cuLoad);
  return cu.memGetHandleForAddressRange != NULL && cuAttribute(dev, GDR_CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED);
}
static int drvDmabufFd(uintptr_t start, size_t size, int* fd) {
  pthread_once(&cuOnce, cuLoad);
  if (!cu.memGetHandleForAddressRange) return -1;
  return cu.memGetHandleForAddressRange(fd, (unsigned long long)start, size, GDR_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                                        0);
}
static int drvPeermemLoaded(void) {
  return access("/sys/kernel/mm/memory_peers/nv_mem/version", F_OK) == 0 ||
         access("/sys/module/nvidia_peermem/version", F_OK) == 0 ||
         access("/sys/module/nv_peer_mem/version", F_OK) == 0;
}
static int drvFlushSupported(int dev) {
  pthread_once(&cuOnce, cuLoad);
  return cu.flushGPUDirectRDMAWrites != NULL &&
         (cuAttribute(dev, GDR_CU_DEVICE_ATTRIBUTE_FLUSH_WRITES_OPTIONS) & GDR_CU_FLUSH_OPTION_HOST);
}
static int drvFlush(void) {
  pthread_once(&cuOnce, cuLoad);
  return cu.flushGPUDirectRDMAWrites
             ? cu.flushGPUDirectRDMAWrites(GDR_CU_FLUSH_TARGET_CURRENT_CTX, GDR_CU_FLUSH_TO_OWNER)
             : -1;
}

static const ibGdrOps driverOps = {drvDeviceOf,      drvDmabufSupported, drvDmabufFd,
                                   drvPeermemLoaded, drvFlushSupported,  drvFlush};

/* ---------------------------------------------------------------- the choice, per device */

#define GDR_MAX_DEVS 64
static pthread_mutex_t gdrLock = PTHREAD_MUTEX_INITIALIZER;
static const ibGdrOps* ops = &driverOps;
static int dmabufVerbsOff;             /* the verbs library or NIC refused dma-buf once: never again */
static int probed[GDR_MAX_DEVS];       /* 1 + ibGdrPath, 0: not yet */
static int flushable[GDR_MAX_DEVS];    /* 1 + (flush supported), 0: not yet */
static char whyNot[GDR_MAX_DEVS][160]; /* why the paths not taken are not */
static int warnedOff;

const ibGdrOps* ibGdrDriverOps(void) { return &driverOps; }

void ibGdrSetOps(const ibGdrOps* o) {
  pthread_mutex_lock(&gdrLock);
  ops = o ? o : &driverOps;
  dmabufVerbsOff = 0;
  warnedOff = 0;
  memset(probed, 0, sizeof(probed));
  memset(flushable, 0, sizeof(flushable));
  pthread_mutex_unlock(&gdrLock);
}

const char* ibGdrPathName(ibGdrPath p) {
  return p == IB_GDR_DMABUF ? "dma-buf" : p == IB_GDR_PEERMEM ? "nvidia-peermem" : "none";
}

int ibGdrDeviceOf(const void* ptr) {
  pthread_mutex_lock(&gdrLock);
  const ibGdrOps* o = ops;
  pthread_mutex_unlock(&gdrLock);
  return o->deviceOf(ptr);
}

/* COMM_IB_GDR: auto (default), dmabuf, peermem, 0 (off). Bit 0: dma-buf allowed, bit 1: peermem. */
static int allowedPaths(void) {
  const char* s = commParamStr("COMM_IB_GDR", "auto");
  if (!strcmp(s, "0") || !strcmp(s, "off")) return 0;
  if (!strcmp(s, "dmabuf")) return 1;
  if (!strcmp(s, "peermem")) return 2;
  if (strcmp(s, "auto") && strcmp(s, "1"))
    WARN("NET/IB : COMM_IB_GDR=%s is not one of auto, dmabuf, peermem, 0; using auto", s);
  return 3;
}

static ibGdrPath probeLocked(int dev) {
  int slot = dev >= 0 && dev < GDR_MAX_DEVS ? dev : 0;
  if (probed[slot]) return (ibGdrPath)(probed[slot] - 1);
  int allowed = allowedPaths();
  ibGdrPath p = IB_GDR_NONE;
  char dmaWhy[64], peerWhy[64];
  snprintf(dmaWhy, sizeof(dmaWhy), "dma-buf: %s",
           !(allowed & 1)               ? "not allowed by COMM_IB_GDR"
           : dmabufVerbsOff             ? "refused by the verbs library or NIC"
           : !ops->dmabufSupported(dev) ? "not supported by the CUDA driver or GPU"
                                        : "usable");
  snprintf(peerWhy, sizeof(peerWhy), "nvidia-peermem: %s",
           !(allowed & 2)          ? "not allowed by COMM_IB_GDR"
           : !ops->peermemLoaded() ? "not loaded"
                                   : "loaded");
  if ((allowed & 1) && !dmabufVerbsOff && ops->dmabufSupported(dev)) p = IB_GDR_DMABUF;
  else if ((allowed & 2) && ops->peermemLoaded()) p = IB_GDR_PEERMEM;
  snprintf(whyNot[slot], sizeof(whyNot[slot]), "%s; %s", dmaWhy, peerWhy);
  probed[slot] = 1 + (int)p;
  return p;
}

ibGdrPath ibGdrPathFor(int dev, char* why, size_t whyLen) {
  pthread_mutex_lock(&gdrLock);
  ibGdrPath p = probeLocked(dev);
  if (why && whyLen) snprintf(why, whyLen, "%s", whyNot[dev >= 0 && dev < GDR_MAX_DEVS ? dev : 0]);
  pthread_mutex_unlock(&gdrLock);
  return p;
}

commResult_t ibGdrRegister(const commIbVerbs* v, struct ibv_pd* pd, const char* nic, int dev, void* data, size_t size,
                           int access, ibGdrReg* out) {
  memset(out, 0, sizeof(*out));
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t pg = page > 0 ? (uintptr_t)page : 4096;
  uintptr_t start = (uintptr_t)data & ~(pg - 1);
  uintptr_t end = ((uintptr_t)data + (size ? size : 1) + pg - 1) & ~(pg - 1);
  for (;;) {
    pthread_mutex_lock(&gdrLock);
    ibGdrPath p = probeLocked(dev);
    const ibGdrOps* o = ops;
    if (p == IB_GDR_NONE) {
      int first = !warnedOff;
      warnedOff = 1;
      char why[sizeof(whyNot[0])];
      memcpy(why, whyNot[dev >= 0 && dev < GDR_MAX_DEVS ? dev : 0], sizeof(why));
      pthread_mutex_unlock(&gdrLock);
      if (first)
        WARN("NET/IB : %s: GPUDirect RDMA is off for GPU %d (%s): the NIC cannot reach device buffers, which "
             "must be staged through pinned host memory",
             nic, dev, why);
      return commInvalidUsage;
    }
    pthread_mutex_unlock(&gdrLock);
    if (p == IB_GDR_PEERMEM) {
      out->mr = v->regMr(pd, (void*)start, end - start, access);
      if (!out->mr) {
        WARN("NET/IB : %s: cannot register %zu bytes of GPU %d memory at %p through nvidia-peermem: %s", nic, size, dev,
             data, strerror(errno));
        return commSystemError;
      }
    } else {
      int fd = -1;
      if (o->dmabufFd(start, end - start, &fd) != 0 || fd < 0) {
        WARN("NET/IB : %s: the CUDA driver gave no dma-buf for %zu bytes of GPU %d memory at %p", nic, size, dev, data);
        return commSystemError;
      }
      out->mr = v->regDmabufMr(pd, 0, end - start, (uint64_t)start, fd, access);
      int err = errno;
      close(fd);
      if (!out->mr && (err == EOPNOTSUPP || err == EPROTONOSUPPORT)) {
        /* The library or the NIC cannot do dma-buf: fall back (to peermem, if it is there) for good. */
        INFO(COMM_NET | COMM_IB, "NET/IB : %s: ibv_reg_dmabuf_mr not supported (%s); trying nvidia-peermem", nic,
             strerror(err));
        pthread_mutex_lock(&gdrLock);
        dmabufVerbsOff = 1;
        memset(probed, 0, sizeof(probed));
        pthread_mutex_unlock(&gdrLock);
        continue;
      }
      if (!out->mr) {
        WARN("NET/IB : %s: cannot register %zu bytes of GPU %d memory at %p through dma-buf: %s", nic, size, dev, data,
             strerror(err));
        return commSystemError;
      }
    }
    out->path = p;
    out->start = start;
    out->end = end;
    return commSuccess;
  }
}

commResult_t ibGdrFlush(int dev) {
  pthread_mutex_lock(&gdrLock);
  int slot = dev >= 0 && dev < GDR_MAX_DEVS ? dev : 0;
  if (!flushable[slot]) flushable[slot] = 1 + (ops->flushSupported(dev) ? 1 : 0);
  int needed = flushable[slot] == 2;
  const ibGdrOps* o = ops;
  pthread_mutex_unlock(&gdrLock);
  if (!needed) return commSuccess;
  if (o->flush() != 0) {
    WARN("NET/IB : flushing GPUDirect RDMA writes to GPU %d failed", dev);
    return commUnhandledCudaError;
  }
  return commSuccess;
}

#endif /* COMM_HAVE_IBVERBS */
