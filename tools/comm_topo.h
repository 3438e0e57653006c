/* comm_topo's files: comm_topo.c (options, the printed views), comm_topo_dot.c (the Graphviz DOT and PNG
 * output), comm_topo_rdma.c (the RDMA devices, -i). What they share. */
#ifndef COMM_TOOLS_COMM_TOPO_H_
#define COMM_TOOLS_COMM_TOPO_H_

#include <stddef.h>

#include "topo.h"

/* Formatting (comm_topo.c): a bandwidth in GB/s with at most two decimals; a link speed ("400 Gb/s"); a
 * node's details without its label, on one line or (multiline) with groups on lines of their own. */
const char* fmtBw(double bw, char* buf, size_t len);
const char* fmtSpeed(int mbps, char* buf, size_t len);
void nodeDetails(const commTopo* topo, int n, int multiline, char* buf, size_t len);

/* comm_topo_dot.c: topo (the first nShown hosts) as Graphviz DOT at path (0; -1 with a message); rendered
 * as PNG at pngPath by Graphviz's dot, from the DOT at dotPath or (NULL) a temporary one (0; 1 failed;
 * 3 dot is not installed). */
int writeDotFile(const commTopo* topo, const char* path, int nShown);
int renderPng(const commTopo* topo, const char* dotPath, const char* pngPath, int nShown);

/* The communicator comm_topo lays out on the topology: ranks, the rings of every channel, the double binary
 * trees over the nodes (comm_topo.c builds it). */
typedef struct {
  const commTopo* topo;
  int n, perHost, nNodes, nChannels;
  commTopoRank* ranks;
  int* rings;     /* nChannels x n */
  int* parent[2]; /* per tree: parent node of each node */
  int* child[2];  /* per tree: 2 children of each node */
} comm_layout;

/* comm_topo_collnet.c (-C): collnet as this process's environment sets it up (COMM_COLLNET_ENABLE, the
 * plugin COMM_AGGD / COMM_COLLNET_PLUGIN / COMM_NET_PLUGIN names, its device, what it reduces) and each
 * collnet channel's group members on L. */
void printCollNet(const comm_layout* L);

/* comm_topo_rdma.c (-i): the RDMA devices the IB transport sees, their ports and GIDs, and for each the GPU it
 * serves in topo (this machine's) and whether GPUDirect RDMA would be used. 0, or 1 for a bad COMM_IB_HCA. */
int printRdma(const commTopo* topo);

#endif
