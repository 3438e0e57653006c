/* IB device discovery, the COMM_IB_HCA filter and GID selection (ib_topo.h), over a commIbVerbs table. */
#include "ib_topo.h"

#ifdef COMM_HAVE_IBVERBS
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"

/* ---------------------------------------------------------------- COMM_IB_HCA */

commResult_t commIbHcaParse(const char* spec, commIbHcaFilter* f) {
  memset(f, 0, sizeof(*f));
  if (!spec) return commSuccess;
  const char* s = spec;
  if (*s == '^') {
    f->exclude = 1;
    s++;
  }
  if (*s == '=') {
    f->exact = 1;
    s++;
  }
  while (*s) {
    const char* end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    if (len > 0) {
      const char* colon = memchr(s, ':', len);
      size_t nameLen = colon ? (size_t)(colon - s) : len;
      int port = 0;
      if (colon) {
        char num[8];
        size_t numLen = len - nameLen - 1;
        char* stop = NULL;
        long p = -1;
        if (numLen > 0 && numLen < sizeof(num)) {
          memcpy(num, colon + 1, numLen);
          num[numLen] = '\0';
          p = strtol(num, &stop, 10);
        }
        if (!stop || *stop != '\0' || p < 1 || p > 255) {
          WARN("NET/IB : COMM_IB_HCA=\"%s\": bad port in entry '%.*s' (a number 1-255 after ':')", spec, (int)len, s);
          return commInvalidArgument;
        }
        port = (int)p;
      }
      if (nameLen == 0 || nameLen >= COMM_IB_NAME_MAX) {
        WARN("NET/IB : COMM_IB_HCA=\"%s\": bad device name in entry '%.*s'", spec, (int)len, s);
        return commInvalidArgument;
      }
      if (f->n == COMM_IB_HCA_MAX) {
        WARN("NET/IB : COMM_IB_HCA=\"%s\": more than %d entries", spec, COMM_IB_HCA_MAX);
        return commInvalidArgument;
      }
      memcpy(f->e[f->n].name, s, nameLen);
      f->e[f->n].name[nameLen] = '\0';
      f->e[f->n].port = port;
      f->n++;
    }
    if (!end) break;
    s = end + 1;
  }
  return commSuccess;
}

int commIbHcaMatch(const commIbHcaFilter* f, const char* devName, int port) {
  if (!f || f->n == 0) return 1; /* nothing listed: everything ("^" alone excludes nothing) */
  int hit = 0;
  for (int i = 0; i < f->n && !hit; i++) {
    const char* n = f->e[i].name;
    int nameHit = f->exact ? strcmp(devName, n) == 0 : strncmp(devName, n, strlen(n)) == 0;
    hit = nameHit && (f->e[i].port == 0 || f->e[i].port == port);
  }
  return f->exclude ? !hit : hit;
}

/* ---------------------------------------------------------------- speed */

int commIbSpeedMbps(uint8_t activeSpeed, uint8_t activeWidth) {
  int lane;
  switch (activeSpeed) {
    case 1: lane = 2500; break;     /* SDR */
    case 2: lane = 5000; break;     /* DDR */
    case 4: lane = 10000; break;    /* QDR */
    case 8: lane = 10000; break;    /* FDR10 */
    case 16: lane = 14000; break;   /* FDR */
    case 32: lane = 25000; break;   /* EDR */
    case 64: lane = 50000; break;   /* HDR */
    case 128: lane = 100000; break; /* NDR */
    default: return 0;
  }
  int lanes;
  switch (activeWidth) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: return 0;
  }
  return lane * lanes;
}

/* ---------------------------------------------------------------- discovery */

static void scanDevice(const commIbVerbs* v, struct ibv_device* dev, int devIndex, const commIbHcaFilter* filter,
                       commIbPort* ports, int max, int* n) {
  const char* name = v->getDeviceName(dev);
  if (!name) name = "?";
  struct ibv_context* ctx = v->openDevice(dev);
  if (!ctx) {
    WARN("NET/IB : cannot open device %s: %s", name, strerror(errno));
    return;
  }
  struct ibv_device_attr da;
  int err = v->queryDevice(ctx, &da);
  if (err) {
    WARN("NET/IB : cannot query device %s: %s", name, strerror(err));
  } else {
    for (int p = 1; p <= da.phys_port_cnt && *n < max; p++) {
      if (!commIbHcaMatch(filter, name, p)) {
        INFO(COMM_NET | COMM_IB, "NET/IB : %s:%d not selected by COMM_IB_HCA", name, p);
        continue;
      }
      struct ibv_port_attr pa;
      err = v->queryPort(ctx, (uint8_t)p, &pa);
      if (err) {
        WARN("NET/IB : cannot query port %s:%d: %s", name, p, strerror(err));
        continue;
      }
      if (pa.state != IBV_PORT_ACTIVE) {
        INFO(COMM_NET | COMM_IB, "NET/IB : %s:%d is %s: not used", name, p, commIbPortStateStr(pa.state));
        continue;
      }
      if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND && pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
        INFO(COMM_NET | COMM_IB, "NET/IB : %s:%d has link layer %d: not used", name, p, (int)pa.link_layer);
        continue;
      }
      commIbPort* o = &ports[(*n)++];
      memset(o, 0, sizeof(*o));
      snprintf(o->devName, sizeof(o->devName), "%s", name);
      o->devIndex = devIndex;
      o->port = (uint8_t)p;
      o->linkLayer = pa.link_layer;
      o->speedMbps = commIbSpeedMbps(pa.active_speed, pa.active_width);
      o->lid = pa.lid;
      o->activeMtu = pa.active_mtu;
      o->guid = be64toh(da.node_guid);
      o->maxQpWr = da.max_qp_wr;
      o->maxSge = da.max_sge;
      o->maxCqe = da.max_cqe;
      INFO(COMM_NET | COMM_IB, "NET/IB : %s:%d %s, %d Mb/s (speed %d width %d), MTU %d, LID %u", name, p,
           commIbLinkLayerStr(pa.link_layer), o->speedMbps, (int)pa.active_speed, (int)pa.active_width,
           128 << (int)pa.active_mtu, (unsigned)pa.lid);
    }
  }
  err = v->closeDevice(ctx);
  if (err) WARN("NET/IB : cannot close device %s: %s", name, strerror(err));
}

commResult_t commIbDiscover(const commIbVerbs* v, const commIbHcaFilter* filter, commIbPort* ports, int max, int* n) {
  *n = 0;
  int nDevs = 0;
  errno = 0;
  struct ibv_device** list = v->getDeviceList(&nDevs);
  if (!list) { /* libibverbs without the kernel's uverbs: no device, not an error */
    INFO(COMM_NET | COMM_IB, "NET/IB : no RDMA devices (%s)", errno ? strerror(errno) : "empty list");
    return commSuccess;
  }
  for (int d = 0; d < nDevs && *n < max; d++) scanDevice(v, list[d], d, filter, ports, max, n);
  v->freeDeviceList(list);
  if (*n == 0 && nDevs > 0) INFO(COMM_NET | COMM_IB, "NET/IB : %d RDMA device(s), no usable port", nDevs);
  return commSuccess;
}

/* ---------------------------------------------------------------- GID */

const char* commIbGidStr(const union ibv_gid* gid, char* buf, size_t len) {
  if (!inet_ntop(AF_INET6, gid->raw, buf, (socklen_t)len)) snprintf(buf, len, "?");
  return buf;
}

static int gidIsZero(const union ibv_gid* g) {
  static const uint8_t zero[16] = {0};
  return memcmp(g->raw, zero, 16) == 0;
}

static int gidIsV4Mapped(const union ibv_gid* g) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g->raw, prefix, 12) == 0;
}

static int gidIsLinkLocal(const union ibv_gid* g) { return g->raw[0] == 0xfe && (g->raw[1] & 0xc0) == 0x80; }

/* Higher is better: RoCE version first, then the address kind. */
static int gidScore(const union ibv_gid* g, commIbGidType_t type) {
  int version = type == COMM_IB_GID_TYPE_ROCE_V2 ? 2 : type == COMM_IB_GID_TYPE_ROCE_V1 ? 1 : 0;
  int kind = gidIsV4Mapped(g) ? 2 : gidIsLinkLocal(g) ? 0 : 1;
  return version * 4 + kind;
}

commResult_t commIbSelectGid(const commIbVerbs* v, struct ibv_context* ctx, uint8_t port, int forcedIndex,
                             int* gidIndex, union ibv_gid* gid, commIbGidType_t* type) {
  const char* name = ctx->device ? v->getDeviceName(ctx->device) : "?";
  struct ibv_port_attr pa;
  int err = v->queryPort(ctx, port, &pa);
  if (err) {
    WARN("NET/IB : cannot query port %s:%u: %s", name, (unsigned)port, strerror(err));
    return commSystemError;
  }
  char buf[64];
  if (forcedIndex >= 0 || pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
    int idx = forcedIndex >= 0 ? forcedIndex : 0;
    commIbGidType_t t = COMM_IB_GID_TYPE_IB;
    if (idx >= pa.gid_tbl_len || v->queryGid(ctx, port, idx, gid) != 0 || gidIsZero(gid) ||
        v->queryGidType(ctx, port, idx, &t) != 0) {
      WARN("NET/IB : %s:%u has no GID at index %d%s", name, (unsigned)port, idx,
           forcedIndex >= 0 ? " (COMM_IB_GID_INDEX)" : "");
      return commSystemError;
    }
    *gidIndex = idx;
    *type = t;
    INFO(COMM_NET | COMM_IB, "NET/IB : %s:%u GID %d %s (%s)%s", name, (unsigned)port, idx,
         commIbGidStr(gid, buf, sizeof(buf)), commIbGidTypeStr(t), forcedIndex >= 0 ? " from COMM_IB_GID_INDEX" : "");
    return commSuccess;
  }
  int best = -1, bestScore = -1;
  commIbGidType_t bestType = COMM_IB_GID_TYPE_IB;
  for (int i = 0; i < pa.gid_tbl_len; i++) {
    union ibv_gid g;
    commIbGidType_t t;
    if (v->queryGid(ctx, port, i, &g) != 0 || gidIsZero(&g) || v->queryGidType(ctx, port, i, &t) != 0) continue;
    int score = gidScore(&g, t);
    if (score > bestScore) {
      best = i;
      bestScore = score;
      bestType = t;
      *gid = g;
    }
  }
  if (best < 0) {
    WARN("NET/IB : %s:%u (RoCE) has no GID in use: is an IP address configured on its interface?", name,
         (unsigned)port);
    return commSystemError;
  }
  *gidIndex = best;
  *type = bestType;
  INFO(COMM_NET | COMM_IB, "NET/IB : %s:%u GID %d %s (%s)", name, (unsigned)port, best,
       commIbGidStr(gid, buf, sizeof(buf)), commIbGidTypeStr(bestType));
  return commSuccess;
}

#else
typedef int commIbNoVerbs_t; /* without <infiniband/verbs.h>: nothing (ISO C wants a declaration) */
#endif /* COMM_HAVE_IBVERBS */
