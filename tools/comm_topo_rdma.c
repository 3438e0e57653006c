/* comm_topo -i: the RDMA devices the IB transport sees through libibverbs (or, with COMM_IB_FAKE, the
 * in-process fake device): every port with its state, link layer, speed, MTU and LID, the GID table with
 * each entry's type and the one the transport would address the port by, whether COMM_IB_HCA selects it,
 * and for the matching NIC of this machine's topology the GPU it serves (the nearest) and whether GPUDirect
 * RDMA would be used, with the reason. */
#include <endian.h>
#include <stdio.h>
#include <string.h>

#include "comm_topo.h"

#ifndef COMM_HAVE_IBVERBS
int printRdma(const commTopo* topo) {
  (void)topo;
  printf("\nRDMA devices: this build has no IB transport (no <infiniband/verbs.h> at build time)\n");
  return 0;
}
#else
#include "ib_gdr.h"
#include "ib_topo.h"
#include "ib_verbs.h"
#include "net_ib.h"
#include "param.h"

static const char* portStateName(enum ibv_port_state s) {
  switch (s) {
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    default: return "?";
  }
}
static const char* gidTypeName(commIbGidType_t t) {
  return t == COMM_IB_GID_TYPE_ROCE_V2 ? "RoCE v2" : t == COMM_IB_GID_TYPE_ROCE_V1 ? "RoCE v1" : "IB";
}
static int mtuBytes(enum ibv_mtu m) { return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << (int)m : 0; }

/* The topology NIC node named `name` on host 0, -1 when there is none. */
static int topoNic(const commTopo* topo, const char* name) {
  if (!topo || topo->nHosts < 1) return -1;
  const commTopoHost* h = &topo->hosts[0];
  for (int i = h->firstNode; i < h->firstNode + h->nNodes; i++)
    if (topo->nodes[i].type == COMM_TOPO_NIC && strcmp(topo->nodes[i].name, name) == 0) return i;
  return -1;
}

/* The GPU nearest to NIC node `nic` (the best path class, then the most bandwidth); -1 without GPUs. */
static int nearestGpu(const commTopo* topo, int nic) {
  const commTopoHost* h = &topo->hosts[0];
  int best = -1;
  commTopoPath bp = {0};
  for (int i = h->firstNode; i < h->firstNode + h->nNodes; i++) {
    if (topo->nodes[i].type != COMM_TOPO_GPU) continue;
    commTopoPath p = commTopoPathOf(topo, i, nic);
    if (best < 0 || p.type < bp.type || (p.type == bp.type && p.bw > bp.bw)) {
      best = i;
      bp = p;
    }
  }
  return best;
}

/* "GPU1 (PIX): GPUDirect RDMA dma-buf" or the reason it is off. */
static void gpuLine(const commTopo* topo, const char* devName) {
  int nic = topoNic(topo, devName);
  if (nic < 0) {
    printf("      GPU: - (%s is not in this machine's topology)\n", devName);
    return;
  }
  int gpu = nearestGpu(topo, nic);
  if (gpu < 0) {
    printf("      GPU: - (no GPU on this host)\n");
    return;
  }
  char g[96];
  commTopoNodeLabel(topo, gpu, g, sizeof(g));
  commTopoPath p = commTopoPathOf(topo, gpu, nic);
  int level = commTopoGdrLevel();
  const char* pathName = commTopoPathName(p.type);
  if (!topo->nodes[nic].u.nic.gdr) {
    printf("      GPU: %s (%s); GPUDirect RDMA: off (the NIC cannot reach GPU memory: no peer-memory module or "
           "dma-buf support found)\n",
           g, pathName);
    return;
  }
  if (p.type > level) {
    printf("      GPU: %s (%s); GPUDirect RDMA: off (path %s is beyond COMM_NET_GDR_LEVEL %s)\n", g, pathName, pathName,
           commTopoPathName(level));
    return;
  }
  int dev = topo->nodes[gpu].u.gpu.dev;
  char why[200] = "";
  ibGdrPath path = dev >= 0 ? ibGdrPathFor(dev, why, sizeof(why)) : IB_GDR_NONE;
  if (path == IB_GDR_NONE)
    printf("      GPU: %s (%s); GPUDirect RDMA: off (%s)\n", g, pathName,
           dev >= 0 ? why : "the GPU is not matched to a CUDA device");
  else
    printf("      GPU: %s (%s, within COMM_NET_GDR_LEVEL %s); GPUDirect RDMA: on, through %s\n", g, pathName,
           commTopoPathName(level), ibGdrPathName(path));
}

static void printPort(const commIbVerbs* v, struct ibv_context* ctx, const char* devName, uint8_t port,
                      const commIbHcaFilter* filter, const commTopo* topo) {
  struct ibv_port_attr pa;
  if (v->queryPort(ctx, port, &pa) != 0) {
    printf("    port %u: cannot be queried\n", port);
    return;
  }
  char sp[32];
  int roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
  printf("    port %u: %s, %s, %s, MTU %d, LID %u%s\n", port, portStateName(pa.state),
         roce                                         ? "RoCE (Ethernet)"
         : pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand"
                                                      : "link layer ?",
         fmtSpeed(commIbSpeedMbps(pa.active_speed, pa.active_width), sp, sizeof(sp)), mtuBytes(pa.active_mtu), pa.lid,
         commIbHcaMatch(filter, devName, port) ? "" : ", not selected by COMM_IB_HCA");
  int nGids = pa.gid_tbl_len > 0 ? pa.gid_tbl_len : 0;
  for (int i = 0; i < nGids; i++) {
    union ibv_gid gid;
    commIbGidType_t type;
    if (v->queryGid(ctx, port, i, &gid) != 0 || v->queryGidType(ctx, port, i, &type) != 0) continue;
    int used = 0;
    for (int b = 0; b < 16; b++) used |= gid.raw[b];
    if (!used) continue;
    char s[64];
    printf("      GID %d: %s (%s)\n", i, commIbGidStr(&gid, s, sizeof(s)), gidTypeName(type));
  }
  if (pa.state == IBV_PORT_ACTIVE) {
    int forced = (int)commParamInt("COMM_IB_GID_INDEX", -1, -1, 255);
    int index = -1;
    union ibv_gid gid;
    commIbGidType_t type;
    char s[64];
    if (commIbSelectGid(v, ctx, port, forced, &index, &gid, &type) == commSuccess)
      printf("      addressed by GID %d (%s, %s)%s\n", index, commIbGidStr(&gid, s, sizeof(s)), gidTypeName(type),
             forced >= 0 ? ", forced by COMM_IB_GID_INDEX" : "");
    gpuLine(topo, devName);
  }
}

int printRdma(const commTopo* topo) {
  char how[128] = "", why[300] = "";
  const commIbVerbs* v = commNetIbVerbs(how, sizeof(how), why, sizeof(why));
  if (!v) {
    printf("\nRDMA devices: none usable: %s\n", why);
    return 0;
  }
  commIbHcaFilter filter;
  const char* hca = commParamStr("COMM_IB_HCA", NULL);
  if (commIbHcaParse(hca ? hca : "", &filter) != commSuccess) {
    printf("\nRDMA devices: COMM_IB_HCA=%s cannot be parsed\n", hca);
    return 1;
  }
  int n = 0;
  struct ibv_device** list = v->getDeviceList(&n);
  printf("\nRDMA devices (through %s): %d\n", how, list ? n : 0);
  for (int d = 0; list && d < n; d++) {
    const char* name = v->getDeviceName(list[d]);
    struct ibv_context* ctx = v->openDevice(list[d]);
    struct ibv_device_attr da;
    if (!ctx || v->queryDevice(ctx, &da) != 0) {
      printf("  %s: cannot be opened or queried\n", name);
      if (ctx) v->closeDevice(ctx);
      continue;
    }
    printf("  %s: %d port%s, node GUID %016llx, max %d QP WRs, %d SGEs\n", name, da.phys_port_cnt,
           da.phys_port_cnt == 1 ? "" : "s", (unsigned long long)be64toh(da.node_guid), da.max_qp_wr, da.max_sge);
    for (int p = 1; p <= da.phys_port_cnt; p++) printPort(v, ctx, name, (uint8_t)p, &filter, topo);
    v->closeDevice(ctx);
  }
  if (list) v->freeDeviceList(list);
  return 0;
}
#endif /* COMM_HAVE_IBVERBS */
