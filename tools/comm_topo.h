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

/* comm_topo_rdma.c (-i): the RDMA devices the IB transport sees, their ports and GIDs, and for each the GPU it
 * serves in topo (this machine's) and whether GPUDirect RDMA would be used. 0, or 1 for a bad COMM_IB_HCA. */
int printRdma(const commTopo* topo);

#endif
