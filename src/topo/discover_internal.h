/* What the parts of discovery share: discover.c (hwloc, CPUs, the PCI tree, NICs) and discover_gpu.c (the
 * CUDA driver and NVML: GPUs and NVLinks). */
#ifndef COMM_TOPO_DISCOVER_INTERNAL_H_
#define COMM_TOPO_DISCOVER_INTERNAL_H_

#include <hwloc.h>

#include "graph_internal.h"
#include "topo.h"

#define DEFAULT_CUDA_GPU_BW 24.0 /* GB/s of the link of a GPU hwloc did not see */

/* ---- Discovery state ---- */

typedef struct {
  int parent; /* builder node */
  char busId[COMM_TOPO_BUSID_MAX];
  char name[COMM_TOPO_NAME_MAX];
  double bw;
  int gen, width;
  int rdma;                        /* NIC: an RDMA device (else a netdev) */
  char netdev[COMM_TOPO_NAME_MAX]; /* RDMA device: a netdev of the same PCI function (hwloc), "" none */
  int dev, sm, memMB;              /* GPU */
} discDev;

typedef struct {
  discDev* a;
  int n, cap;
} discDevs;

typedef struct {
  commTopo* topo;
  int host;
  hwloc_topology_t hw; /* NULL when hwloc failed */
  int nCpus;
  int* cpuNode;                 /* builder node of each CPU */
  hwloc_const_cpuset_t* cpuSet; /* its PUs (hwloc's), NULL without hwloc */
  discDevs gpus, nics;
  int nPciDefault; /* PCI links of unknown speed (one WARN) */
  int nNetDefault; /* NIC speeds unknown (one WARN) */
  int nCudaOnly;   /* GPUs CUDA lists and hwloc did not see (one WARN) */
  int cudaGpus;    /* GPUs the CUDA driver lists */
} discState;

commResult_t discDevPush(discDevs* v, discDev** out);
void discCopyStr(char* dst, size_t len, const char* src);
/* "0000:17:00.0" from any case and domain width; 0 on success. */
int discBusIdNormalize(const char* in, char out[COMM_TOPO_BUSID_MAX]);
void discHwBusId(unsigned dom, unsigned bus, unsigned dev, unsigned fn, char out[COMM_TOPO_BUSID_MAX]);

/* discover.c: sysfs and PCI helpers */
#define DEFAULT_NET_MBPS 10000                             /* a NIC whose speed cannot be read */
int discReadText(const char* path, char* buf, size_t len); /* a small file, trailing whitespace cut: its length, -1 */
int discPathExists(const char* path);
/* The entries of a directory, sorted by discNatCmp (digits compared as numbers); discFreeNames after. */
commResult_t discListDir(const char* path, char*** names, int* count);
void discFreeNames(char** names, int n);
int discNatCmp(const char* a, const char* b);
/* A PCI function's link: bandwidth (GB/s), generation and width, from hwloc's speed or sysfs. */
void discPciLink(discState* st, const char* busId, double hwlocSpeed, double* bw, int* gen, int* width);

/* discover_nic.c */
commResult_t discAddNics(discState* st);

/* discover_gpu.c */
void discLoadGpuLibs(void); /* NVML once; the CUDA driver when the process has loaded it */
commResult_t discCudaGpus(discState* st, int hwlocGpus);
commResult_t discAddGpus(discState* st, int* node);
commResult_t discNvlinks(discState* st, const int* gpuNode);

#endif
