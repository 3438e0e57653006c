/* Placement of a communicator's ranks on the topology at init (src/topo/topo.h does the geometry):
 * each rank's device in the peer exchange, its node's ring order on every channel exchanged once, the rings
 * every channel is built from, and COMM_TOPO_DUMP_FILE. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algorithms.h"
#include "bootstrap.h"
#include "check.h"
#include "core.h"
#include "param.h"
#include "topo.h"
#include "transport.h"
#include "utils.h"

static int topoHostByName(const commTopo* topo, const char* hostname) {
  for (int h = 0; h < topo->nHosts; h++)
    if (topo->hosts[h].name[0] && strcmp(topo->hosts[h].name, hostname) == 0) return h;
  return -1;
}

void commPlacementDescribeSelf(struct commComm* comm, commPeerInfo* info) {
  info->topoDevType = info->topoDevIndex = -1;
  if (comm->topo == NULL) return;
  commTopo* t = comm->topo;
  int h = topoHostByName(t, info->hostname);
  if (h < 0) h = 0; /* a file without this host: the node's host is known after the exchange */
  int dev = -1;
  for (int n = t->hosts[h].firstNode; comm->cudaDev >= 0 && n < t->hosts[h].firstNode + t->hosts[h].nNodes; n++)
    if (t->nodes[n].type == COMM_TOPO_GPU && t->nodes[n].u.gpu.dev == comm->cudaDev) dev = n;
  if (dev < 0) dev = commTopoCallerCpu(t, h);
  if (dev >= 0) {
    info->topoDevType = t->nodes[dev].type;
    info->topoDevIndex = t->nodes[dev].index;
  }
}

/* The topology's named hosts sorted by name, then index: a lookup per node is a binary search (a scan per
 * rank was 1,024 x 8,192 string compares for a 1,024-host file). */
typedef struct {
  const char* name;
  int host;
} hostName;

static int cmpHostName(const void* a, const void* b) {
  const hostName *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x->host > y->host) - (x->host < y->host);
}

static commResult_t hostNameIndex(const commTopo* t, hostName** out, int* count) {
  int n = 0;
  COMMCHECK(commCalloc(out, (size_t)t->nHosts + 1, sizeof(hostName)));
  for (int h = 0; h < t->nHosts; h++)
    if (t->hosts[h].name[0]) (*out)[n++] = (hostName){t->hosts[h].name, h};
  qsort(*out, (size_t)n, sizeof(hostName), cmpHostName);
  *count = n;
  return commSuccess;
}

/* The first host named `name` (-1: none), as topoHostByName. */
static int hostByIndex(const hostName* idx, int n, const char* name) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (strcmp(idx[mid].name, name) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && strcmp(idx[lo].name, name) == 0 ? idx[lo].host : -1;
}

/* Topology host of communicator node v: a loaded file's host named like the node, else the v-th host (mod
 * the count); a discovered topology describes this node only. */
static int topoHostOfNode(const struct commComm* comm, const hostName* idx, int nIdx, int v, int firstRank) {
  const commTopo* t = comm->topo;
  int h = hostByIndex(idx, nIdx, comm->peers[firstRank].hostname);
  if (h >= 0) return h;
  if (commParamStr("COMM_TOPO_FILE", NULL) != NULL) return v % t->nHosts;
  return v == comm->node ? 0 : -1;
}

/* COMM_TOPO_DUMP_FILE, written by one rank (COMM_TOPO_DUMP_FILE_RANK, default 0) through a temporary file
 * renamed into place, so communicators of one process that dump at the same time never mix their output. */
commResult_t commPlacementDump(struct commComm* comm) {
  const char* path = commParamStr("COMM_TOPO_DUMP_FILE", NULL);
  if (path == NULL || comm->rank != commParamInt("COMM_TOPO_DUMP_FILE_RANK", 0, 0, INT32_MAX)) return commSuccess;
  /* rename() would replace a FIFO or device node there with a file: refuse it as the reader does. */
  COMMCHECK(commTopoCheckPath("COMM_TOPO_DUMP_FILE", path));
  char tmp[4096];
  if ((size_t)snprintf(tmp, sizeof(tmp), "%s.%d.%p.tmp", path, (int)getpid(), (void*)comm) >= sizeof(tmp)) {
    WARN("COMM_TOPO_DUMP_FILE path is too long");
    return commInvalidArgument;
  }
  COMMCHECK(commTopoDumpXml(comm->topo, tmp));
  if (rename(tmp, path) != 0) {
    WARN("COMM_TOPO_DUMP_FILE: cannot rename %s to %s: %s", tmp, path, strerror(errno));
    unlink(tmp);
    return commSystemError;
  }
  INFO(COMM_TOPO | COMM_INIT, "topology written to %s (COMM_TOPO_DUMP_FILE)", path);
  return commSuccess;
}

/* What each rank tells the others once placed: its position in its node's part of each channel's ring,
 * and a hash of the NIC it uses. */
typedef struct {
  uint16_t pos[COMM_MAX_CHANNELS];
  uint64_t nicHash;
} rankTopoMsg;

/* Where every rank sits, this node's order on every channel, and the exchange of ring positions. */
commResult_t commPlacementSetup(struct commComm* comm) {
  commResult_t res = commSuccess;
  int n = comm->nRanks;
  commTopo* t = comm->topo;
  commTopoRank* ranks = NULL;
  int *firstOfNode = NULL, *order = NULL, *hostOfNode = NULL, nNamed = 0;
  hostName* nameIdx = NULL;
  rankTopoMsg* msgs = NULL;
  int* nodeStart = NULL;
  char* seen = NULL;
  COMMCHECK(commCalloc(&ranks, (size_t)n, sizeof(commTopoRank)));
  comm->topoRanks = ranks;
  COMMCHECKGOTO(commCalloc(&firstOfNode, (size_t)comm->nNodes, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&order, (size_t)n * COMM_MAX_CHANNELS, sizeof(int)), res, exit);
  for (int v = 0; v < comm->nNodes; v++) firstOfNode[v] = -1;
  for (int r = 0; r < n; r++)
    if (firstOfNode[comm->rankNode[r]] < 0) firstOfNode[comm->rankNode[r]] = r;
  COMMCHECKGOTO(hostNameIndex(t, &nameIdx, &nNamed), res, exit);
  COMMCHECKGOTO(commCalloc(&hostOfNode, (size_t)comm->nNodes, sizeof(int)), res, exit);
  for (int v = 0; v < comm->nNodes; v++)
    hostOfNode[v] = firstOfNode[v] >= 0 ? topoHostOfNode(comm, nameIdx, nNamed, v, firstOfNode[v]) : -1;
  for (int r = 0; r < n; r++) {
    int v = comm->rankNode[r];
    int h = hostOfNode[v];
    const commPeerInfo* p = &comm->peers[r];
    int dev = h >= 0 ? commTopoFind(t, h, p->topoDevType, p->topoDevIndex) : -1;
    if (h >= 0 && dev < 0) {
      dev = commTopoFind(t, h, COMM_TOPO_CPU, 0);
      if (v == comm->node)
        WARN("topology: rank %d's device (%s %d) is not in topology host %d (%s); placing it at CPU0", r,
             commTopoNodeTypeName(p->topoDevType), p->topoDevIndex, h, t->hosts[h].name);
    }
    ranks[r] = (commTopoRank){h, dev, v};
  }
  const commTopoRank* me = &ranks[comm->rank];
  int nic = me->dev >= 0 ? commTopoRankNic(t, ranks, n, comm->rank, 0) : -1; /* its NIC on channel 0 */
  if (me->dev >= 0) {
    char devLab[96], nicLab[96] = "none";
    commTopoPath p = commTopoPathOf(t, me->dev, nic);
    if (nic >= 0) commTopoNodeLabel(t, nic, nicLab, sizeof(nicLab));
    const commTopoHost* host = &t->hosts[me->host];
    INFO(COMM_TOPO | COMM_INIT,
         "topology: rank %d on host %d (%s: %d CPU(s), %d GPU(s), %d NIC(s)), node %d, "
         "local rank %d of %d, device %s, NIC %s (path %s, %.1f GB/s)",
         comm->rank, me->host, host->name, host->nCpus, host->nGpus, host->nNics, comm->node, comm->localRank,
         comm->localRanks, commTopoNodeLabel(t, me->dev, devLab, sizeof(devLab)), nicLab,
         nic >= 0 ? commTopoPathName(p.type) : "-", nic >= 0 ? p.bw : 0.0);
  }
  /* This rank's position in its node's part of every channel's ring, and the NIC it uses, then everyone's. */
  COMMCHECKGOTO(commCalloc(&msgs, (size_t)n, sizeof(rankTopoMsg)), res, exit);
  rankTopoMsg* mine = &msgs[comm->rank];
  int m = commTopoNodeOrders(t, ranks, n, comm->node, 0, COMM_MAX_CHANNELS, order); /* all channels at once */
  for (int c = 0; c < COMM_MAX_CHANNELS; c++) {
    int i = 0;
    while (i < m && order[(size_t)c * m + i] != comm->rank) i++;
    mine->pos[c] = (uint16_t)(i < m ? i : UINT16_MAX);
  }
  /* The tuner counts a node's NICs from what its ranks report: the topology's NIC of each rank (which the
   * network transport listens on), unless COMM_SOCKET_IFNAME pins the interface (then the one hashed into
   * the peer info). */
  mine->nicHash = comm->peers[comm->rank].netIfHash;
  if (nic >= 0 && commParamStr("COMM_SOCKET_IFNAME", NULL) == NULL)
    mine->nicHash = commHashString(t->nodes[nic].name, comm->peers[comm->rank].hostHash);
  COMMCHECKGOTO(bootstrapAllGather(comm->bootstrap, msgs, sizeof(rankTopoMsg)), res, exit);
  for (int r = 0; r < n; r++) comm->peers[r].netIfHash = msgs[r].nicHash;
  /* Every rank checks the same data: each node's positions on each channel must be 0 .. m-1 exactly once.
   * Ranks of one node that saw different machines could disagree; then all fall back to rank order. */
  COMMCHECKGOTO(commCalloc(&nodeStart, (size_t)comm->nNodes + 1, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&seen, (size_t)n, 1), res, exit);
  for (int r = 0; r < n; r++) nodeStart[comm->rankNode[r] + 1]++;
  for (int v = 0; v < comm->nNodes; v++) nodeStart[v + 1] += nodeStart[v];
  int ok = 1;
  for (int c = 0; c < COMM_MAX_CHANNELS && ok; c++) {
    memset(seen, 0, (size_t)n);
    for (int r = 0; r < n && ok; r++) {
      int v = comm->rankNode[r], q = msgs[r].pos[c];
      if (q >= nodeStart[v + 1] - nodeStart[v] || seen[nodeStart[v] + q]++) ok = 0;
    }
  }
  if (!ok) {
    WARN("topology: the ranks of a node disagree on their ring order (different machine descriptions?); rings "
         "follow rank order");
  } else {
    COMMCHECKGOTO(commCalloc(&comm->ringPos, (size_t)n * COMM_MAX_CHANNELS, sizeof(uint16_t)), res, exit);
    for (int r = 0; r < n; r++) memcpy(comm->ringPos + (size_t)r * COMM_MAX_CHANNELS, msgs[r].pos, sizeof(msgs[r].pos));
  }
exit:
  free(firstOfNode);
  free(nameIdx);
  free(hostOfNode);
  free(order);
  free(msgs);
  free(nodeStart);
  free(seen);
  return res;
}

commResult_t commPlacementRing(struct commComm* comm, int c, int* ringRanks) {
  /* Ring order: ranks grouped by node in order of each node's first rank (so that one hop per node
   * crosses the network); within a node the topology's order for this channel (src/topo/order.c: fastest
   * paths, entering at the rank nearest the channel's NIC), or without one rank order turned to start at
   * the (c mod m)-th rank, so channels still enter each node (and CollTree leaders sit) at different
   * ranks. */
  int* start = NULL;
  int* seen = NULL;
  commResult_t res = commSuccess;
  COMMCHECKGOTO(commCalloc(&start, (size_t)comm->nNodes + 1, sizeof(int)), res, exit);
  COMMCHECKGOTO(commCalloc(&seen, (size_t)comm->nNodes, sizeof(int)), res, exit);
  for (int q = 0; q < comm->nRanks; q++) start[comm->rankNode[q] + 1]++;
  for (int v = 0; v < comm->nNodes; v++) start[v + 1] += start[v];
  for (int q = 0; q < comm->nRanks; q++) {
    int v = comm->rankNode[q], m = start[v + 1] - start[v], local = seen[v]++;
    int p = comm->ringPos ? comm->ringPos[(size_t)q * COMM_MAX_CHANNELS + c] : (local - c % m + m) % m;
    ringRanks[start[v] + p] = q;
  }
exit:
  free(start);
  free(seen);
  return res;
}

commResult_t commPlacementCollNet(struct commComm* comm) {
  int nCh = commCollNetWanted(comm);
  int* members = NULL;
  if (nCh > 0) {
    COMMCHECK(commCalloc(&members, (size_t)nCh * (size_t)comm->nNodes, sizeof(int)));
    commCollArgs a;
    memset(&a, 0, sizeof(a));
    a.func = commFuncAllReduce;
    a.rank = comm->rank;
    a.nRanks = comm->nRanks;
    a.nChannels = nCh;
    a.nNodes = comm->nNodes;
    a.nodeOf = comm->rankNode;
    for (int c = 0; c < nCh; c++) a.ringRanks[c] = comm->channels[c].ringRanks;
    for (int c = 0; c < nCh; c++) {
      commResult_t res = commCollNetMembers(&a, c, members + (size_t)c * (size_t)comm->nNodes);
      if (res != commSuccess) {
        free(members);
        return res;
      }
    }
  }
  commResult_t res = commCollNetSetup(comm, nCh, members);
  free(members);
  return res;
}
