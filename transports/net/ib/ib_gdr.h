/* GPUDirect RDMA for the IB transport: how a NIC reaches GPU memory, and the registration of device buffers.
 *
 * Two paths, tried in this order (COMM_IB_GDR: auto, the default; dmabuf or peermem to allow one path
 * only; 0 to allow none):
 *  - dma-buf: the CUDA driver exports the buffer's page-aligned range as a dma-buf file descriptor
 *    (cuMemGetHandleForAddressRange, on a device whose CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is set) and
 *    the verbs library registers it (ibv_reg_dmabuf_mr, rdma-core 34 and Linux 5.12 or later);
 *  - nvidia-peermem: with that kernel module loaded, ibv_reg_mr accepts a device pointer directly.
 * With neither, a device buffer cannot be registered: registration fails with commInvalidUsage and one WARN
 * per process says that GPUDirect RDMA is off and why. (libcomm's own device-buffer connections across
 * hosts keep their FIFOs in pinned host memory, transports/net/net_dev.c, so they never need this path; it
 * serves callers that register device memory with the plugin.)
 *
 * After the NIC wrote into GPU memory, the GPU may read stale data unless the writes are flushed where the
 * platform needs it: ibGdrFlush calls cuFlushGPUDirectRDMAWrites (CUDA 11.3 and later) on devices that
 * support it, and does nothing on the others (where the PCIe ordering of the writes before the completion
 * suffices).
 *
 * The CUDA side is reached through a table of functions (the driver, loaded at run time, by default), so a
 * test without a GPU can stand in for it. SPDX-License-Identifier: Apache-2.0 */
#ifndef COMM_IB_GDR_H_
#define COMM_IB_GDR_H_

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "ib_verbs.h"

#ifdef COMM_HAVE_IBVERBS

typedef enum { IB_GDR_NONE = 0, IB_GDR_DMABUF = 1, IB_GDR_PEERMEM = 2 } ibGdrPath;

/* What the transport needs of CUDA. Every function returns 0 on success. */
typedef struct {
  int (*deviceOf)(const void* ptr);                       /* the CUDA device ordinal of a device pointer, else -1 */
  int (*dmabufSupported)(int dev);                        /* 1: the device can export dma-bufs */
  int (*dmabufFd)(uintptr_t start, size_t size, int* fd); /* a dma-buf fd for [start, start + size) (page
                                                           * aligned); the caller closes it */
  int (*peermemLoaded)(void);                             /* 1: nvidia-peermem (or nv_peer_mem) is loaded */
  int (*flushSupported)(int dev);                         /* 1: cuFlushGPUDirectRDMAWrites works on the device */
  int (*flush)(void);                                     /* flush the NIC's writes for the current context */
} ibGdrOps;

/* Replace the CUDA side (tests); NULL restores the driver's. Also forgets what was probed. */
void ibGdrSetOps(const ibGdrOps* ops);
/* The CUDA driver's side (what ibGdrSetOps(NULL) restores), for a fake to build on. */
const ibGdrOps* ibGdrDriverOps(void);

/* A device buffer's registration. The path is chosen once per device and kept. */
typedef struct {
  ibGdrPath path;
  uintptr_t start, end; /* the registered range (page aligned) */
  struct ibv_mr* mr;
} ibGdrReg;

/* Is ptr device memory (its CUDA ordinal), -1 otherwise. */
int ibGdrDeviceOf(const void* ptr);
/* Register [data, data + size) of device `dev` on pd with `access`. commInvalidUsage (and one WARN per
 * process) when no GPUDirect RDMA path exists; commSystemError (WARN) when the path exists but the
 * registration failed. `nic` names the device in messages. */
commResult_t ibGdrRegister(const commIbVerbs* v, struct ibv_pd* pd, const char* nic, int dev, void* data, size_t size,
                           int access, ibGdrReg* out);
/* The path this process uses for device `dev` (probed on first use), and why the others are not used. */
ibGdrPath ibGdrPathFor(int dev, char* why, size_t whyLen);
const char* ibGdrPathName(ibGdrPath p);
/* Make the NIC's writes into device `dev`'s memory visible to it (see above). */
commResult_t ibGdrFlush(int dev);

#endif /* COMM_HAVE_IBVERBS */
#endif /* COMM_IB_GDR_H_ */
