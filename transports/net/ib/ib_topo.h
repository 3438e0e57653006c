/* IB device discovery for the IB transport, as pure functions over a commIbVerbs table (the real
 * libibverbs or the fake device): which (device, port) pairs are usable, their link layer, speed and
 * limits; the COMM_IB_HCA filter; the choice of GID (RoCE v2 and IPv4-mapped preferred, COMM_IB_GID_INDEX
 * forces). The callers read the environment (commParamStr / commParamInt) and pass the values in.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_IB_TOPO_H_
#define COMM_IB_TOPO_H_

#include "ib_verbs.h"

#ifdef COMM_HAVE_IBVERBS
#ifdef __cplusplus
extern "C" {
#endif

#define COMM_IB_NAME_MAX 64
#define COMM_IB_HCA_MAX 32

/* COMM_IB_HCA: "[^][=]name[:port],name[:port],...". '^' excludes the listed devices instead of selecting
 * them; '=' makes names exact (otherwise each is a prefix: "mlx5" selects mlx5_0, mlx5_1, ...); ":port"
 * limits an entry to that port (otherwise every port of the device). Empty entries are ignored; unset or
 * empty selects everything. */
typedef struct {
  int exclude, exact;
  int n;
  struct {
    char name[COMM_IB_NAME_MAX];
    int port; /* 0: any */
  } e[COMM_IB_HCA_MAX];
} commIbHcaFilter;

/* commInvalidArgument (with a WARN naming the bad entry) for a port that is not a number in 1..255, a
 * name of COMM_IB_NAME_MAX characters or more, or more than COMM_IB_HCA_MAX entries. */
commResult_t commIbHcaParse(const char* spec, commIbHcaFilter* filter);
int commIbHcaMatch(const commIbHcaFilter* filter, const char* devName, int port);

/* Link speed in Mb/s from ibv_port_attr's active_speed and active_width codes (HDR 4x: 200000); 0 for a
 * code this table does not know. */
int commIbSpeedMbps(uint8_t activeSpeed, uint8_t activeWidth);

/* One usable port. */
typedef struct {
  char devName[COMM_IB_NAME_MAX];
  int devIndex; /* in the verbs device list */
  uint8_t port;
  uint8_t linkLayer; /* IBV_LINK_LAYER_INFINIBAND or IBV_LINK_LAYER_ETHERNET */
  int speedMbps;
  uint16_t lid;
  enum ibv_mtu activeMtu;
  uint64_t guid; /* node GUID, host order */
  int maxQpWr, maxSge, maxCqe;
} commIbPort;

/* Every ACTIVE port with an InfiniBand or Ethernet link layer that `filter` (NULL: all) selects, in device
 * then port order, up to `max`. No device at all (or a verbs library reporting none) is success with
 * *n == 0; a device that cannot be opened or queried is skipped with a WARN. */
commResult_t commIbDiscover(const commIbVerbs* v, const commIbHcaFilter* filter, commIbPort* ports, int max, int* n);

/* The GID to address a port by. InfiniBand: index 0 (or the forced one). Ethernet (RoCE), automatic
 * (forcedIndex < 0): among the entries in use, RoCE v2 before v1, then an IPv4-mapped address before a
 * global IPv6 one before a link-local one, then the lowest index. forcedIndex >= 0 (COMM_IB_GID_INDEX)
 * takes that entry as it is, if it is in use. commSystemError with a WARN when there is none. */
commResult_t commIbSelectGid(const commIbVerbs* v, struct ibv_context* ctx, uint8_t port, int forcedIndex,
                             int* gidIndex, union ibv_gid* gid, commIbGidType_t* type);

/* "fe80::1" style text of a GID (buf of at least 46 bytes). */
const char* commIbGidStr(const union ibv_gid* gid, char* buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* COMM_HAVE_IBVERBS */
#endif /* COMM_IB_TOPO_H_ */
