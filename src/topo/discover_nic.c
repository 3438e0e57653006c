/* Discovery's NICs (the rules are in discover.c's header): RDMA devices from hwloc and /sys/class/infiniband,
 * netdevs from hwloc and /sys/class/net, their speeds, GPUDirect RDMA plausibility, and the order they are
 * added to the topology in. SPDX-License-Identifier: Apache-2.0 */
#include "topo.h"

#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "check.h"
#include "debug.h"
#include "utils.h"
#include "discover_internal.h"

/* ---- NICs ---- */

static int kernelAtLeast(int major, int minor) {
  struct utsname u;
  int ma = 0, mi = 0;
  if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &ma, &mi) != 2) return 0;
  return ma > major || (ma == major && mi >= minor);
}

static int gdrPossible(const discState* st) {
  if (discPathExists("/sys/kernel/mm/memory_peers/nv_mem/version") || discPathExists("/sys/module/nvidia_peermem"))
    return 1;
  return st->cudaGpus > 0 && kernelAtLeast(5, 12); /* dma-buf */
}

/* The speed (Mb/s) of "400 Gb/sec (4X NDR)", 0 if unreadable. */
static int rateMbps(const char* s) {
  char* end;
  double v = strtod(s, &end);
  if (end == s || v <= 0) return 0;
  while (*end == ' ') end++;
  if (strncmp(end, "Mb", 2) == 0) return (int)v;
  return (int)(v * 1000.0 + 0.5);
}

/* Port, link layer, speed, netdev and guid of RDMA device d->name. */
static commResult_t rdmaInfo(discState* st, const discDev* d, commTopoNode* nd, int gdr) {
  char path[256], buf[128];
  char** ports = NULL;
  int nPorts = 0, port = 0;
  snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports", d->name);
  COMMCHECK(discListDir(path, &ports, &nPorts));
  for (int i = 0; i < nPorts && port == 0; i++) {
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%s/state", d->name, ports[i]);
    if (discReadText(path, buf, sizeof(buf)) > 0 && strstr(buf, "ACTIVE")) port = atoi(ports[i]);
  }
  if (port <= 0) port = nPorts > 0 && atoi(ports[0]) > 0 ? atoi(ports[0]) : 1;
  discFreeNames(ports, nPorts);
  nd->u.nic.port = port;
  nd->u.nic.link = COMM_NIC_IB;
  snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/link_layer", d->name, port);
  if (discReadText(path, buf, sizeof(buf)) > 0 && strcmp(buf, "Ethernet") == 0) nd->u.nic.link = COMM_NIC_ROCE;
  snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/rate", d->name, port);
  int speed = discReadText(path, buf, sizeof(buf)) > 0 ? rateMbps(buf) : 0;
  if (speed <= 0) {
    speed = DEFAULT_NET_MBPS;
    st->nNetDefault++;
  }
  nd->u.nic.speedMbps = speed;
  char** nets = NULL;
  int nNets = 0;
  snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/net", d->name);
  COMMCHECK(discListDir(path, &nets, &nNets));
  discCopyStr(nd->u.nic.netdev, sizeof(nd->u.nic.netdev), nNets > 0 ? nets[0] : d->netdev);
  discFreeNames(nets, nNets);
  snprintf(path, sizeof(path), "/sys/class/infiniband/%s/node_guid", d->name);
  unsigned g0, g1, g2, g3;
  if (discReadText(path, buf, sizeof(buf)) > 0 && sscanf(buf, "%x:%x:%x:%x", &g0, &g1, &g2, &g3) == 4)
    nd->u.nic.guid = ((uint64_t)g0 << 48) | ((uint64_t)g1 << 32) | ((uint64_t)g2 << 16) | g3;
  nd->u.nic.gdr = d->busId[0] ? gdr : 0;
  return commSuccess;
}

static int netdevMbps(discState* st, const char* name) {
  char path[256], buf[64];
  snprintf(path, sizeof(path), "/sys/class/net/%s/speed", name);
  int speed = discReadText(path, buf, sizeof(buf)) > 0 ? atoi(buf) : -1;
  if (speed <= 0) {
    st->nNetDefault++;
    speed = DEFAULT_NET_MBPS;
  }
  return speed;
}

/* RDMA devices from /sys/class/infiniband that hwloc did not show (soft RDMA, no hwloc I/O): below CPU 0, on
 * their PCI function's link when they have one. */
static commResult_t sweepRdma(discState* st) {
  char** names = NULL;
  int n = 0;
  commResult_t res = commSuccess;
  COMMCHECK(discListDir("/sys/class/infiniband", &names, &n));
  for (int i = 0; i < n; i++) {
    int known = 0;
    for (int j = 0; j < st->nics.n && !known; j++)
      known = st->nics.a[j].rdma && strcmp(st->nics.a[j].name, names[i]) == 0;
    if (known || strlen(names[i]) >= COMM_TOPO_NAME_MAX) continue;
    discDev* d;
    COMMCHECKGOTO(discDevPush(&st->nics, &d), res, exit);
    d->parent = st->cpuNode[0];
    d->rdma = 1;
    discCopyStr(d->name, sizeof(d->name), names[i]);
    char path[256], real[4096];
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device", names[i]);
    if (realpath(path, real)) {
      const char* base = strrchr(real, '/');
      if (base && discBusIdNormalize(base + 1, d->busId) == 0 && strstr(real, "/pci") != NULL)
        discPciLink(st, d->busId, 0, &d->bw, &d->gen, &d->width);
      else d->busId[0] = '\0';
    }
  }
exit:
  discFreeNames(names, n);
  return res;
}

/* Whether netdev n belongs to one of the RDMA devices: on the same PCI function, or listed in its device/net/
 * (all of its ports). */
static int isRdmaNetdev(const discState* st, const discDev* n) {
  char path[256];
  for (int i = 0; i < st->nics.n; i++) {
    const discDev* r = &st->nics.a[i];
    if (!r->rdma) continue;
    if (n->busId[0] && strcmp(r->busId, n->busId) == 0) return 1;
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/net/%s", r->name, n->name);
    if (discPathExists(path)) return 1;
  }
  return 0;
}

/* Netdevs hwloc did not place below a PCI function: up, not loopback, not a bridge or a container bridge. */
static commResult_t sweepNetdevs(discState* st) {
  char** names = NULL;
  int n = 0;
  commResult_t res = commSuccess;
  COMMCHECK(discListDir("/sys/class/net", &names, &n));
  for (int i = 0; i < n; i++) {
    const char* nm = names[i];
    char path[256], buf[64];
    if (strcmp(nm, "lo") == 0 || strncmp(nm, "docker", 6) == 0 || strncmp(nm, "virbr", 5) == 0 ||
        strncmp(nm, "ifb", 3) == 0 || strlen(nm) >= COMM_TOPO_NAME_MAX)
      continue;
    int known = 0;
    for (int j = 0; j < st->nics.n && !known; j++) known = !st->nics.a[j].rdma && strcmp(st->nics.a[j].name, nm) == 0;
    if (known) continue;
    snprintf(path, sizeof(path), "/sys/class/net/%s/bridge", nm);
    if (discPathExists(path)) continue;
    snprintf(path, sizeof(path), "/sys/class/net/%s/brport", nm); /* a bridge's port: the host end of a veth */
    if (discPathExists(path)) continue;
    snprintf(path, sizeof(path), "/sys/class/net/%s/operstate", nm);
    if (discReadText(path, buf, sizeof(buf)) <= 0 || (strcmp(buf, "up") != 0 && strcmp(buf, "unknown") != 0)) continue;
    discDev* d;
    COMMCHECKGOTO(discDevPush(&st->nics, &d), res, exit);
    d->parent = st->cpuNode[0];
    discCopyStr(d->name, sizeof(d->name), nm);
  }
exit:
  discFreeNames(names, n);
  return res;
}

static int cmpNic(const void* a, const void* b) {
  const discDev *x = a, *y = b;
  if (x->rdma != y->rdma) return x->rdma ? -1 : 1;
  int c = discNatCmp(x->name, y->name);
  return c ? c : strcmp(x->busId, y->busId);
}

commResult_t discAddNics(discState* st) {
  COMMCHECK(sweepRdma(st));
  if (st->nics.n > 1) qsort(st->nics.a, (size_t)st->nics.n, sizeof(discDev), cmpNic);
  int gdr = gdrPossible(st);
  /* RDMA devices first (they come first in the order). */
  int nRdma = 0;
  for (; nRdma < st->nics.n && st->nics.a[nRdma].rdma; nRdma++) {
    const discDev* d = &st->nics.a[nRdma];
    int node;
    COMMCHECK(commTopoAddNode(st->topo, st->host, COMM_TOPO_NIC, d->parent, &node));
    commTopoNode* nd = commTopoNodeAt(st->topo, node);
    discCopyStr(nd->name, sizeof(nd->name), d->name);
    discCopyStr(nd->busId, sizeof(nd->busId), d->busId);
    COMMCHECK(rdmaInfo(st, d, nd, gdr));
    nd->bw = d->busId[0] ? d->bw : nd->u.nic.speedMbps / 8000.0;
  }
  /* Netdevs: those of the PCI tree that are not an RDMA device's, and the others, in one order. */
  COMMCHECK(sweepNetdevs(st));
  if (st->nics.n - nRdma > 1) qsort(st->nics.a + nRdma, (size_t)(st->nics.n - nRdma), sizeof(discDev), cmpNic);
  for (int i = nRdma; i < st->nics.n; i++) {
    const discDev* d = &st->nics.a[i];
    if (isRdmaNetdev(st, d)) continue;
    int node;
    COMMCHECK(commTopoAddNode(st->topo, st->host, COMM_TOPO_NIC, d->parent, &node));
    commTopoNode* nd = commTopoNodeAt(st->topo, node);
    discCopyStr(nd->name, sizeof(nd->name), d->name);
    discCopyStr(nd->busId, sizeof(nd->busId), d->busId);
    discCopyStr(nd->u.nic.netdev, sizeof(nd->u.nic.netdev), d->name);
    nd->u.nic.link = COMM_NIC_ETH;
    nd->u.nic.speedMbps = netdevMbps(st, d->name);
    nd->bw = d->busId[0] ? d->bw : nd->u.nic.speedMbps / 8000.0;
  }
  return commSuccess;
}
