/* comm_topo -C: collnet as this process's environment would set it up. Whether COMM_COLLNET_ENABLE asks for
 * it, the plugin the library would load (COMM_AGGD, COMM_COLLNET_PLUGIN, COMM_NET_PLUGIN) with its device,
 * properties and the types and ops its network reduces, and on the laid-out communicator each collnet
 * channel's group: one member per node, the rank where the channel's ring enters the node (the leader
 * CollTree's collnet schedule gives it). Forming the groups needs the members' processes: that happens only
 * at commInitRank, whose INFO log says whether collnet came on and why not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algorithms.h"
#include "collnet/collnet_internal.h"
#include "comm_topo.h"
#include "datatype.h"
#include "param.h"

#define TOPO_COLLNET_MEMBERS 16 /* members printed per channel */

/* The plugin and what it offers; 0 when there is none. */
static int printPlugin(void) {
  char why[512] = "", source[300] = "";
  const commCollNet_t* p = commCollNetAcquire(why, sizeof(why), source, sizeof(source));
  if (!p) {
    printf("  plugin: none: %s\n", why);
    return 0;
  }
  printf("  plugin: %s, from %s\n", p->name, source);
  void* ctx = NULL;
  int ndev = 0;
  commCollNetProperties_t props;
  memset(&props, 0, sizeof(props));
  if (p->init(&ctx, 0, commNetPluginLogger) != commSuccess) {
    printf("  the plugin failed to initialise (see the WARN above)\n");
    commCollNetRelease();
    return 0;
  }
  if (p->devices(&ndev) != commSuccess || ndev < 1) {
    printf("  the plugin has no device\n");
  } else if (p->getProperties(0, &props) != commSuccess) {
    printf("  getProperties of device 0 failed\n");
  } else {
    printf("  device 0 of %d: %s, %d Mb/s, latency %.1f us, maxCollBytes %zu, memory %s%s\n", ndev,
           props.name ? props.name : "?", props.speedMbps, props.latencyUs, props.maxCollBytes,
           props.ptrSupport & COMM_PTR_HOST ? "host" : "", props.ptrSupport & COMM_PTR_CUDA ? " cuda" : "");
    printf("  reduces (sum prod max min):");
    for (int t = 0; t < commNumTypes; t++) {
      char ops[8] = "";
      for (int op = commSum; op <= commMin; op++) {
        int ok = 0;
        p->reduceSupport((commDataType_t)t, (commRedOp_t)op, &ok);
        ops[op] = ok ? "spxn"[op] : '-';
      }
      printf("%s %s %s", t % 6 == 0 ? "\n   " : "", commTypeName((commDataType_t)t), ops);
    }
    printf("\n  allgather %s, reducescatter %s\n", p->iallgather ? "offered" : "not offered",
           p->ireducescatter ? "offered" : "not offered");
  }
  p->finalize(ctx);
  commCollNetRelease();
  return ndev > 0;
}

void printCollNet(const comm_layout* L) {
  int64_t enable = commParamInt("COMM_COLLNET_ENABLE", -1, 0, 1);
  if (enable < 0) enable = commParamInt("NCCL_COLLNET_ENABLE", 0, 0, 1);
  int nCh = (int)commParamInt("COMM_COLLNET_NCHANNELS", 2, 1, COMM_MAX_CHANNELS);
  if (nCh > L->nChannels) nCh = L->nChannels;
  const char* aggd = commParamStr("COMM_AGGD", NULL);
  printf("\ncollnet:\n");
  if (aggd && *aggd) printf("  aggregation servers (COMM_AGGD): %s\n", aggd);
  int plugin = printPlugin();
  const char* state = !enable         ? "off: COMM_COLLNET_ENABLE (or NCCL_COLLNET_ENABLE) is not 1"
                      : L->nNodes < 2 ? "off: the communicator spans one node"
                      : !plugin       ? "off: no usable plugin"
                                      : "on at init if every member connects to its group";
  printf("  %s\n", state);
  if (L->nNodes < 2) return;
  commCollArgs a;
  memset(&a, 0, sizeof(a));
  int* nodeOf = calloc((size_t)L->n, sizeof(int));
  int* members = calloc((size_t)L->nNodes, sizeof(int));
  if (!nodeOf || !members) {
    free(nodeOf);
    free(members);
    return;
  }
  for (int r = 0; r < L->n; r++) nodeOf[r] = L->ranks[r].node;
  a.func = commFuncAllReduce;
  a.nRanks = L->n;
  a.nNodes = L->nNodes;
  a.nodeOf = nodeOf;
  a.nChannels = nCh;
  for (int c = 0; c < nCh; c++) a.ringRanks[c] = L->rings + (size_t)c * (size_t)L->n;
  printf("  %d collnet channel(s) (COMM_COLLNET_NCHANNELS), %d members each:\n", nCh, L->nNodes);
  for (int c = 0; c < nCh; c++) {
    if (commCollNetMembers(&a, c, members) != commSuccess) {
      printf("  channel %d: the members cannot be computed\n", c);
      continue;
    }
    printf("  channel %d: ranks", c);
    for (int v = 0; v < L->nNodes && v < TOPO_COLLNET_MEMBERS; v++) printf(" %d", members[v]);
    printf("%s\n", L->nNodes > TOPO_COLLNET_MEMBERS ? " ..." : "");
  }
  free(nodeOf);
  free(members);
}
