/* Discovery of this machine as one topology host (see src/topo/topo.h), and the machine summary logged
 * at init.
 *
 * Sources, each optional (what cannot be read is a WARN once per discovery and a default, never an error):
 *  - hwloc: NUMA nodes / packages (the CPU nodes), the PCI tree, and the OS devices below PCI functions
 *    (netdevs, RDMA devices, GPUs). Caches are not loaded, and hwloc's own GPU plugins (cuda, nvml, opencl,
 *    rsmi, levelzero, gl) are blacklisted: they are slow, and the CUDA driver and NVML are asked directly; so
 *    is its libpciaccess plugin (the Linux backend reads the PCI tree from sysfs).
 *  - sysfs: PCIe generation / width (/sys/bus/pci/devices/X/current_link_*), RDMA ports
 *    (/sys/class/infiniband), netdev speeds and netdevs hwloc does not place (/sys/class/net).
 *  - the CUDA driver (libcuda.so.1, dlopen): CUDA ordinal, compute capability, memory, name of each GPU;
 *    NVML (libnvidia-ml.so.1, dlopen): NVLinks (GPU to GPU, GPU to NVSwitch). Both in discover_gpu.c.
 *
 * PCI tree rules. hwloc shows every PCI-to-PCI bridge; the graph keeps only what changes a path class:
 *  - host bridges are dropped (the CPU node stands for its host bridge);
 *  - a root port (a bridge right below a host bridge) is dropped: devices below it hang below the CPU;
 *  - a PCIe switch is one COMM_TOPO_PCI node of kind SWITCH: its upstream port is a bridge below a root port
 *    or below a switch's downstream port (or a first-level bridge with at least two bridge children, when
 *    the platform hides the root port) that has bridge children; its downstream ports (the bridges right
 *    below it) are dropped, so everything below them hangs below the switch node. A device behind one
 *    switch is one PCI node away from its neighbours (PIX), behind cascaded switches several (PXB);
 *  - any other bridge (no bridge children) becomes a PCI node of kind BRIDGE when it leads to at least two
 *    GPUs/NICs, else it is dropped (collapsed into its only child);
 *  - subtrees without a GPU or a NIC are left out.
 * Bandwidth of a PCI link (GB/s, one direction, after line encoding, the unit hwloc uses: gen5 x16 = 63.0):
 * hwloc's link speed when known, else computed from sysfs current_link_speed x current_link_width, else
 * 12.0 (gen3 x16) with one WARN. The generation and width are recorded when sysfs has them.
 *
 * GPUs: NVIDIA (vendor 0x10de) PCI functions of class 0x0300 (VGA) or 0x0302 (3D), or any PCI function with
 * an OS device "cuda*" / "nvml*" (when hwloc's GPU plugins are enabled through HWLOC_COMPONENTS). Ordered by
 * PCI bus id. A GPU the CUDA driver does not list (CUDA_VISIBLE_DEVICES, no driver) keeps dev -1; one the
 * driver lists but hwloc did not see (container without PCI information) hangs below CPU 0 with 24.0 GB/s.
 *
 * NVLink bandwidth per link and direction, by compute capability: < 7.0 (Pascal, NVLink 1): 20.0;
 * 7.x (NVLink 2): 25.0; 8.6 (NVLink bridge of GA10x): 14.0; other 8.x (NVLink 3): 25.0; 9.x (NVLink 4): 25.0;
 * 10.x (NVLink 5): 50.0; unknown or anything else: 20.0.
 *
 * NICs, ordered RDMA devices first (by name, digits compared as numbers), then netdevs (same order):
 *  - RDMA devices (hwloc OPENFABRICS, and /sys/class/infiniband entries hwloc did not show): link layer and
 *    rate of the first ACTIVE port (else port 1), netdev from device/net/ (else the netdev hwloc shows on the
 *    same PCI function), guid from node_guid. gdr = 1 for a PCI RDMA device when a peer-memory module is
 *    loaded (/sys/kernel/mm/memory_peers/nv_mem, /sys/module/nvidia_peermem), or when dma-buf is plausible:
 *    Linux >= 5.12 and the CUDA driver lists a GPU. Soft RDMA devices (no PCI function: rxe, siw) get gdr 0.
 *  - netdevs below a PCI function that are not an RDMA device's (not on an RDMA device's PCI function, not in
 *    its device/net/); then netdevs hwloc does not place (virtio without PCI, veth) that are up (operstate up
 *    or unknown), except lo, docker*, virbr*, ifb*, bridges and bridge ports; these hang below CPU 0 without
 *    a bus id, bw = speed / 8000 GB/s.
 *  - speed unreadable or negative: 10000 Mb/s with one WARN.
 * A NIC with a PCI function stands for that function: its parent is the function's parent, its bw the
 * function's link. The NICs' part is in discover_nic.c, the GPUs' in discover_gpu.c. */
#include "topo.h"

#include <dirent.h>
#include <dlfcn.h>
#include <hwloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "utils.h"
#include "discover_internal.h"

#define DEFAULT_PCI_BW 12.0 /* PCIe gen3 x16 */

/* ---- sysfs helpers ---- */

/* Reads a small file into buf (NUL-terminated, trailing whitespace removed). Returns its length, -1 if
 * unreadable. */
int discReadText(const char* path, char* buf, size_t len) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return -1;
  size_t n = fread(buf, 1, len - 1, f);
  int err = ferror(f);
  fclose(f);
  if (err) return -1;
  buf[n] = '\0';
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\t')) buf[--n] = '\0';
  return (int)n;
}

int discPathExists(const char* path) { return access(path, F_OK) == 0; }

/* Copies src into dst[len], truncated. */
void discCopyStr(char* dst, size_t len, const char* src) {
  size_t n = strnlen(src, len - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* "0000:18:00.0", "00000000:18:00.0", "18:00.0" (any case) -> "0000:18:00.0". Returns 0, -1 if no bus id. */
int discBusIdNormalize(const char* in, char out[COMM_TOPO_BUSID_MAX]) {
  unsigned dom = 0, bus, dev, fn;
  char tail;
  if (sscanf(in, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4) {
    dom = 0;
    if (sscanf(in, "%x:%x.%x%c", &bus, &dev, &fn, &tail) != 3) return -1;
  }
  if (dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7) return -1;
  snprintf(out, COMM_TOPO_BUSID_MAX, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
  return 0;
}

/* Name order: digit runs compare as numbers (mlx5_2 < mlx5_10), ties broken by plain order. */
int discNatCmp(const char* a, const char* b) {
  const char *x = a, *y = b;
  while (*x && *y) {
    if (*x >= '0' && *x <= '9' && *y >= '0' && *y <= '9') {
      while (*x == '0') x++;
      while (*y == '0') y++;
      const char *ex = x, *ey = y;
      while (*ex >= '0' && *ex <= '9') ex++;
      while (*ey >= '0' && *ey <= '9') ey++;
      if (ex - x != ey - y) return ex - x < ey - y ? -1 : 1;
      int c = strncmp(x, y, (size_t)(ex - x));
      if (c) return c;
      x = ex;
      y = ey;
      continue;
    }
    if (*x != *y) return (unsigned char)*x < (unsigned char)*y ? -1 : 1;
    x++;
    y++;
  }
  if (*x || *y) return *x ? 1 : -1;
  return strcmp(a, b);
}

/* The entries of a directory (without "." and ".."), sorted by discNatCmp. Returns the count (0 when the
 * directory cannot be read); *names is NULL or an array to free with discFreeNames. */
static int cmpNamePtr(const void* a, const void* b) { return discNatCmp(*(char* const*)a, *(char* const*)b); }
void discFreeNames(char** names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}
commResult_t discListDir(const char* path, char*** names, int* count) {
  *names = NULL;
  *count = 0;
  DIR* d = opendir(path);
  if (d == NULL) return commSuccess;
  commResult_t res = commSuccess;
  int n = 0, cap = 0;
  char** arr = NULL;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (n == cap) {
      int newCap = cap ? cap * 2 : 16;
      COMMCHECKGOTO(commRealloc(&arr, (size_t)cap, (size_t)newCap, sizeof(char*)), res, fail);
      cap = newCap;
    }
    arr[n] = strdup(e->d_name);
    if (arr[n] == NULL) {
      WARN("topology discovery: out of memory listing %s", path);
      res = commSystemError;
      goto fail;
    }
    n++;
  }
  closedir(d);
  if (n > 1) qsort(arr, (size_t)n, sizeof(char*), cmpNamePtr);
  *names = arr;
  *count = n;
  return commSuccess;
fail:
  closedir(d);
  discFreeNames(arr, n);
  return res;
}


commResult_t discDevPush(discDevs* v, discDev** out) {
  if (v->n == v->cap) {
    int newCap = v->cap ? v->cap * 2 : 8;
    COMMCHECK(commRealloc(&v->a, (size_t)v->cap, (size_t)newCap, sizeof(discDev)));
    v->cap = newCap;
  }
  *out = &v->a[v->n++];
  memset(*out, 0, sizeof(**out));
  (*out)->dev = -1;
  return commSuccess;
}

/* ---- PCI links ---- */

/* Bandwidth, generation and width of the upstream link of PCI function busId. */
void discPciLink(discState* st, const char* busId, double hwlocSpeed, double* bw, int* gen, int* width) {
  char path[128], buf[64];
  double gts = 0;
  *gen = *width = 0;
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/current_link_speed", busId);
  if (discReadText(path, buf, sizeof(buf)) > 0) gts = strtod(buf, NULL);
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/current_link_width", busId);
  if (gts > 0 && discReadText(path, buf, sizeof(buf)) > 0) *width = atoi(buf);
  if (gts > 0 && *width > 0) {
    *gen = commTopoPciGen(gts);
  } else {
    *width = 0;
    gts = 0;
  }
  if (hwlocSpeed > 0) {
    *bw = hwlocSpeed;
  } else if (gts > 0) {
    *bw = commTopoPciBw(gts, *width);
  } else {
    *bw = DEFAULT_PCI_BW;
    st->nPciDefault++;
  }
}

/* ---- CPUs ---- */

static void cpuFromHwloc(discState* st, hwloc_obj_t obj, commTopoNode* nd) {
  hwloc_topology_t hw = st->hw;
  if (obj->type == HWLOC_OBJ_NUMANODE) {
    nd->u.cpu.numa = (int)obj->os_index;
  } else if (hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_NUMANODE) == 1) {
    nd->u.cpu.numa = (int)hwloc_get_obj_by_type(hw, HWLOC_OBJ_NUMANODE, 0)->os_index;
  }
  int need = hwloc_bitmap_list_snprintf(nd->u.cpu.cpus, sizeof(nd->u.cpu.cpus), obj->cpuset);
  if (need >= (int)sizeof(nd->u.cpu.cpus)) {
    /* Interleaved numbering makes long lists: keep the complete entries only (thread binding then uses a
     * subset of the NUMA node's cores, never another node's). */
    char* cut = strrchr(nd->u.cpu.cpus, ',');
    if (cut) *cut = '\0';
    WARN("topology: the cpu list of NUMA node %d needs %d characters; kept the first %zu (\"%.32s...\")",
         nd->u.cpu.numa, need, strlen(nd->u.cpu.cpus), nd->u.cpu.cpus);
  }
  int cores = hwloc_get_nbobjs_inside_cpuset_by_type(hw, obj->cpuset, HWLOC_OBJ_CORE);
  if (cores <= 0) cores = hwloc_bitmap_weight(obj->cpuset);
  nd->u.cpu.nCores = cores > 0 ? cores : 1;
  /* Vendor and model: the first package sharing PUs with the object, else the machine. */
  hwloc_obj_t pkg = NULL;
  for (hwloc_obj_t p = NULL; (p = hwloc_get_next_obj_by_type(hw, HWLOC_OBJ_PACKAGE, p)) != NULL;)
    if (hwloc_bitmap_intersects(p->cpuset, obj->cpuset)) {
      pkg = p;
      break;
    }
  hwloc_obj_t root = hwloc_get_root_obj(hw);
  const char* vendor = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUVendor") : NULL;
  const char* model = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;
  if (vendor == NULL) vendor = hwloc_obj_get_info_by_name(root, "CPUVendor");
  if (model == NULL) model = hwloc_obj_get_info_by_name(root, "CPUModel");
  discCopyStr(nd->u.cpu.vendor, sizeof(nd->u.cpu.vendor), vendor ? vendor : "");
  discCopyStr(nd->name, sizeof(nd->name), model ? model : "");
  /* CPUID family and model (hwloc's x86 backend), which NCCL's topology files carry */
  const char* fam = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUFamilyNumber") : NULL;
  const char* num = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModelNumber") : NULL;
  if (fam && num && atoi(fam) > 0 && atoi(fam) <= 65535 && atoi(num) >= 0 && atoi(num) <= 65535) {
    nd->u.cpu.family = atoi(fam);
    nd->u.cpu.model = atoi(num);
  }
}

static commResult_t addCpusHwloc(discState* st, const char* arch) {
  hwloc_topology_t hw = st->hw;
  hwloc_obj_t* objs = NULL;
  int n = 0;
  commResult_t res = commSuccess;
  int nNuma = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_NUMANODE);
  int nPkg = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_PACKAGE);
  int max = (nNuma > nPkg ? nNuma : nPkg) + 1;
  COMMCHECK(commCalloc(&objs, (size_t)max, sizeof(hwloc_obj_t)));
  /* NUMA nodes with PUs (memory-only nodes: GPU memory, CXL, HBM, are not CPUs), else packages, else the
   * machine. */
  for (int i = 0; i < nNuma; i++) {
    hwloc_obj_t o = hwloc_get_obj_by_type(hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
    if (o->cpuset && !hwloc_bitmap_iszero(o->cpuset)) objs[n++] = o;
  }
  if (n == 0)
    for (int i = 0; i < nPkg; i++) {
      hwloc_obj_t o = hwloc_get_obj_by_type(hw, HWLOC_OBJ_PACKAGE, (unsigned)i);
      if (o->cpuset && !hwloc_bitmap_iszero(o->cpuset)) objs[n++] = o;
    }
  if (n == 0) objs[n++] = hwloc_get_root_obj(hw);
  COMMCHECKGOTO(commCalloc(&st->cpuNode, (size_t)n, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&st->cpuSet, (size_t)n, sizeof(hwloc_const_cpuset_t)), res, exit);
  for (int i = 0; i < n; i++) {
    int node;
    COMMCHECKGOTO(commTopoAddNode(st->topo, st->host, COMM_TOPO_CPU, -1, &node), res, exit);
    commTopoNode* nd = commTopoNodeAt(st->topo, node);
    discCopyStr(nd->u.cpu.arch, sizeof(nd->u.cpu.arch), arch);
    cpuFromHwloc(st, objs[i], nd);
    st->cpuNode[i] = node;
    st->cpuSet[i] = objs[i]->cpuset;
    st->nCpus++;
  }
exit:
  free(objs);
  return res;
}

/* Without hwloc: one CPU with the PUs this process may use, vendor and model from /proc/cpuinfo. */
static commResult_t addCpuFallback(discState* st, const char* arch) {
  int node;
  COMMCHECK(commCalloc(&st->cpuNode, 1, sizeof(int)));
  COMMCHECK(commTopoAddNode(st->topo, st->host, COMM_TOPO_CPU, -1, &node));
  st->cpuNode[0] = node;
  st->nCpus = 1;
  commTopoNode* nd = commTopoNodeAt(st->topo, node);
  discCopyStr(nd->u.cpu.arch, sizeof(nd->u.cpu.arch), arch);
  cpu_set_t set;
  int count = 0;
  char* p = nd->u.cpu.cpus;
  size_t left = sizeof(nd->u.cpu.cpus);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; c++) {
      if (!CPU_ISSET(c, &set)) continue;
      int e = c;
      while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &set)) e++;
      int w = e > c ? snprintf(p, left, "%s%d-%d", count ? "," : "", c, e)
                    : snprintf(p, left, "%s%d", count ? "," : "", c);
      if (w < 0 || (size_t)w >= left) break;
      p += w;
      left -= (size_t)w;
      count += e - c + 1;
      c = e;
    }
  }
  if (count == 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    count = n > 0 ? (int)n : 1;
    if (count > 1) snprintf(nd->u.cpu.cpus, sizeof(nd->u.cpu.cpus), "0-%d", count - 1);
    else snprintf(nd->u.cpu.cpus, sizeof(nd->u.cpu.cpus), "0");
  }
  nd->u.cpu.nCores = count;
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[256];
    while (fgets(line, sizeof(line), f)) {
      char* colon = strchr(line, ':');
      if (colon == NULL) continue;
      char* v = colon + 1;
      while (*v == ' ' || *v == '\t') v++;
      v[strcspn(v, "\n")] = '\0';
      if (strncmp(line, "vendor_id", 9) == 0 && nd->u.cpu.vendor[0] == '\0')
        discCopyStr(nd->u.cpu.vendor, sizeof(nd->u.cpu.vendor), v);
      else if (strncmp(line, "model name", 10) == 0 && nd->name[0] == '\0') discCopyStr(nd->name, sizeof(nd->name), v);
      if (nd->u.cpu.vendor[0] && nd->name[0]) break;
    }
    fclose(f);
  }
  return commSuccess;
}

/* The CPU node (index into st->cpuNode) for I/O attached to an object with this cpuset: the CPU whose PUs
 * include it, else the first sharing PUs with it, else CPU 0. */
static int cpuFor(const discState* st, hwloc_const_cpuset_t set) {
  if (set == NULL || st->cpuSet == NULL) return 0;
  for (int i = 0; i < st->nCpus; i++)
    if (hwloc_bitmap_isincluded(set, st->cpuSet[i])) return i;
  for (int i = 0; i < st->nCpus; i++)
    if (hwloc_bitmap_intersects(set, st->cpuSet[i])) return i;
  return 0;
}

/* ---- PCI walk ---- */

static int isNvidiaGpu(hwloc_obj_t pci) {
  const struct hwloc_pcidev_attr_s* a = &pci->attr->pcidev;
  if (a->vendor_id == 0x10de && (a->class_id == 0x0300 || a->class_id == 0x0302)) return 1;
  for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
    if (c->type == HWLOC_OBJ_OS_DEVICE &&
        (c->attr->osdev.type == HWLOC_OBJ_OSDEV_GPU || c->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC) && c->name &&
        (strncmp(c->name, "cuda", 4) == 0 || strncmp(c->name, "nvml", 4) == 0))
      return 1;
  return 0;
}

static int isNicOsdev(hwloc_obj_t c) {
  return c->type == HWLOC_OBJ_OS_DEVICE && c->name &&
         (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS || c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK);
}

/* Whether an I/O subtree holds a GPU or a NIC. */
static int ioUseful(hwloc_obj_t obj) {
  if (obj->type == HWLOC_OBJ_PCI_DEVICE) {
    if (isNvidiaGpu(obj)) return 1;
    for (hwloc_obj_t c = obj->io_first_child; c; c = c->next_sibling)
      if (isNicOsdev(c)) return 1;
    return 0;
  }
  if (obj->type != HWLOC_OBJ_BRIDGE) return 0;
  for (hwloc_obj_t c = obj->io_first_child; c; c = c->next_sibling)
    if (ioUseful(c)) return 1;
  return 0;
}

void discHwBusId(unsigned dom, unsigned bus, unsigned dev, unsigned fn, char out[COMM_TOPO_BUSID_MAX]) {
  snprintf(out, COMM_TOPO_BUSID_MAX, "%04x:%02x:%02x.%x", dom & 0xffff, bus & 0xff, dev & 0x1f, fn & 7);
}

static commResult_t pciDevice(discState* st, hwloc_obj_t obj, int parent) {
  const struct hwloc_pcidev_attr_s* a = &obj->attr->pcidev;
  char busId[COMM_TOPO_BUSID_MAX];
  discHwBusId(a->domain, a->bus, a->dev, a->func, busId);
  int haveLink = 0, gen = 0, width = 0;
  double bw = 0;
  if (isNvidiaGpu(obj)) {
    discDev* g;
    COMMCHECK(discDevPush(&st->gpus, &g));
    g->parent = parent;
    discCopyStr(g->busId, sizeof(g->busId), busId);
    discPciLink(st, busId, a->linkspeed, &g->bw, &g->gen, &g->width);
    const char* model = hwloc_obj_get_info_by_name(obj, "PCIDevice");
    if (model) discCopyStr(g->name, sizeof(g->name), model);
    else snprintf(g->name, sizeof(g->name), "NVIDIA GPU [%04x:%04x]", a->vendor_id, a->device_id);
    return commSuccess;
  }
  for (hwloc_obj_t c = obj->io_first_child; c; c = c->next_sibling) {
    if (!isNicOsdev(c)) continue;
    if (!haveLink) {
      discPciLink(st, busId, a->linkspeed, &bw, &gen, &width);
      haveLink = 1;
    }
    discDev* d;
    COMMCHECK(discDevPush(&st->nics, &d));
    d->parent = parent;
    discCopyStr(d->busId, sizeof(d->busId), busId);
    discCopyStr(d->name, sizeof(d->name), c->name);
    d->bw = bw;
    d->gen = gen;
    d->width = width;
    d->rdma = c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
  }
  /* The netdev of the function's RDMA devices, for when sysfs does not say (first in name order). */
  const char* net = NULL;
  for (hwloc_obj_t c = obj->io_first_child; c; c = c->next_sibling)
    if (isNicOsdev(c) && c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK &&
        (net == NULL || discNatCmp(c->name, net) < 0))
      net = c->name;
  for (int i = 0; net && i < st->nics.n; i++)
    if (st->nics.a[i].rdma && strcmp(st->nics.a[i].busId, busId) == 0)
      discCopyStr(st->nics.a[i].netdev, sizeof(st->nics.a[i].netdev), net);
  return commSuccess;
}

enum { ROLE_ROOT, ROLE_UP, ROLE_DOWN }; /* the position a bridge may have: root port, upstream, downstream port */

static commResult_t walkIo(discState* st, hwloc_obj_t obj, int parent, int role) {
  if (obj->type == HWLOC_OBJ_PCI_DEVICE) return pciDevice(st, obj, parent);
  if (obj->type != HWLOC_OBJ_BRIDGE || !ioUseful(obj)) return commSuccess;
  const struct hwloc_bridge_attr_s* b = &obj->attr->bridge;
  int childRole = ROLE_ROOT, kind = -1;
  if (b->upstream_type == HWLOC_OBJ_BRIDGE_HOST) {
    childRole = ROLE_ROOT;
  } else {
    int nBridges = 0, nUseful = 0;
    for (hwloc_obj_t c = obj->io_first_child; c; c = c->next_sibling) {
      if (c->type == HWLOC_OBJ_BRIDGE) nBridges++;
      if (ioUseful(c)) nUseful++;
    }
    if (role == ROLE_DOWN || (role == ROLE_ROOT && nBridges < 2)) {
      childRole = ROLE_UP; /* root port or downstream port: dropped */
    } else if (nBridges >= 1) {
      kind = COMM_PCI_SWITCH;
      childRole = ROLE_DOWN;
    } else {
      if (nUseful >= 2) kind = COMM_PCI_BRIDGE;
      childRole = ROLE_UP;
    }
  }
  if (kind >= 0) {
    int node;
    COMMCHECK(commTopoAddNode(st->topo, st->host, COMM_TOPO_PCI, parent, &node));
    commTopoNode* nd = commTopoNodeAt(st->topo, node);
    const struct hwloc_pcidev_attr_s* up = &b->upstream.pci;
    discHwBusId(up->domain, up->bus, up->dev, up->func, nd->busId);
    nd->u.pci.kind = kind;
    double bw;
    int gen, width;
    discPciLink(st, nd->busId, up->linkspeed, &bw, &gen, &width);
    nd = commTopoNodeAt(st->topo, node);
    nd->bw = bw;
    nd->u.pci.gen = gen;
    nd->u.pci.width = width;
    parent = node;
  }
  for (hwloc_obj_t c = obj->io_first_child; c; c = c->next_sibling) COMMCHECK(walkIo(st, c, parent, childRole));
  return commSuccess;
}

static commResult_t walkNormal(discState* st, hwloc_obj_t obj) {
  if (obj->io_first_child) {
    int cpu = st->cpuNode[cpuFor(st, obj->cpuset)];
    for (hwloc_obj_t c = obj->io_first_child; c; c = c->next_sibling) COMMCHECK(walkIo(st, c, cpu, ROLE_ROOT));
  }
  for (hwloc_obj_t c = obj->first_child; c; c = c->next_sibling) COMMCHECK(walkNormal(st, c));
  return commSuccess;
}

/* ---- hwloc ---- */

/* Loads the machine with PCI devices, bridges and OS devices, without caches and without hwloc's GPU
 * plugins. Returns NULL on failure. */
static hwloc_topology_t hwLoad(int io) {
  hwloc_topology_t hw;
  if (hwloc_topology_init(&hw) != 0) return NULL;
  hwloc_topology_set_cache_types_filter(hw, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_icache_types_filter(hw, HWLOC_TYPE_FILTER_KEEP_NONE);
  if (io) {
    hwloc_topology_set_io_types_filter(hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    /* hwloc's Linux backend reads the PCI tree from sysfs itself; its "pci" plugin (libpciaccess) would only
     * add device names, and leaks memory at every load. */
    static const char* const skip[] = {"pci", "cuda", "nvml", "opencl", "rsmi", "levelzero", "gl"};
    for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
      (void)hwloc_topology_set_components(hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, skip[i]); /* absent: fine */
  }
  if (hwloc_topology_load(hw) != 0) {
    hwloc_topology_destroy(hw);
    return NULL;
  }
  return hw;
}

/* ---- Discovery ---- */

commResult_t commTopoDiscover(commTopo** out) {
  int64_t t0 = commTimeNs();
  *out = NULL;
  discState st;
  memset(&st, 0, sizeof(st));
  commResult_t res = commSuccess;
  int* gpuNode = NULL;
  discLoadGpuLibs();

  char hostname[COMM_TOPO_NAME_MAX] = "";
  if (gethostname(hostname, sizeof(hostname)) != 0) hostname[0] = '\0';
  hostname[sizeof(hostname) - 1] = '\0';
  struct utsname u;
  const char* arch = uname(&u) == 0 ? u.machine : "";

  COMMCHECK(commTopoCreate(&st.topo));
  COMMCHECKGOTO(commTopoAddHost(st.topo, hostname, &st.host), res, fail);
  st.hw = hwLoad(1);
  if (st.hw) {
    COMMCHECKGOTO(addCpusHwloc(&st, arch), res, fail);
    COMMCHECKGOTO(walkNormal(&st, hwloc_get_root_obj(st.hw)), res, fail);
  } else {
    WARN("topology: hwloc cannot load this machine; one CPU node from the affinity mask, no PCI tree");
    COMMCHECKGOTO(addCpuFallback(&st, arch), res, fail);
  }

  int hwlocGpus = st.gpus.n;
  COMMCHECKGOTO(discCudaGpus(&st, hwlocGpus), res, fail);
  if (st.nCudaOnly)
    WARN("topology: %d CUDA GPU(s) not on hwloc's PCI tree (no PCI information?): placed below CPU 0 at %.1f GB/s",
         st.nCudaOnly, DEFAULT_CUDA_GPU_BW);
  COMMCHECKGOTO(commCalloc(&gpuNode, (size_t)st.gpus.n + 1, sizeof(int)), res, fail);
  COMMCHECKGOTO(discAddGpus(&st, gpuNode), res, fail);
  COMMCHECKGOTO(discAddNics(&st), res, fail);
  COMMCHECKGOTO(discNvlinks(&st, gpuNode), res, fail);

  if (st.nPciDefault)
    WARN_NOTICE("topology: PCI link speed unknown for %d device(s); assuming %.1f GB/s (PCIe gen3 x16)", st.nPciDefault,
                DEFAULT_PCI_BW);
  if (st.nNetDefault)
    WARN_NOTICE("topology: network speed unknown for %d NIC(s); assuming %d Mb/s", st.nNetDefault, DEFAULT_NET_MBPS);

  COMMCHECKGOTO(commTopoFinish(st.topo), res, fail);
  const commTopoHost* h = &st.topo->hosts[0];
  INFO(COMM_TOPO, "topology: discovered %s: %d CPU(s), %d GPU(s), %d NIC(s), %d node(s) in %.1f ms", h->name, h->nCpus,
       h->nGpus, h->nNics, h->nNodes, (double)(commTimeNs() - t0) / 1e6);
  *out = st.topo;
  st.topo = NULL;
fail:
  commTopoFree(st.topo);
  if (st.hw) hwloc_topology_destroy(st.hw);
  free(st.cpuNode);
  free(st.cpuSet);
  free(st.gpus.a);
  free(st.nics.a);
  free(gpuNode);
  return res;
}

/* ---- Machine summary ---- */

commResult_t commTopoSummary(commMachineSummary* out) {
  memset(out, 0, sizeof(*out));
  hwloc_topology_t hw = hwLoad(0);
  if (hw == NULL) {
    WARN("hwloc cannot load this machine; machine layout unknown");
    return commSuccess;
  }
  out->nPackages = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_PACKAGE);
  out->nNumaNodes = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_NUMANODE);
  out->nCores = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_CORE);
  out->nPUs = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_PU);
  hwloc_topology_destroy(hw);
  return commSuccess;
}

void commTopoLogMachine(void) {
  if (!COMM_LOG_ENABLED(COMM_LOG_INFO)) return;
  commMachineSummary m;
  commTopoSummary(&m);
  INFO(COMM_TOPO, "machine: %d package(s), %d NUMA node(s), %d core(s), %d PU(s)", m.nPackages, m.nNumaNodes, m.nCores,
       m.nPUs);
}
