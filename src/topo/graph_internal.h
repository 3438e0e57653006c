/* What the topology graph's files share (graph.c: builder, links, queries; paths.c: the best paths). */
#ifndef COMM_TOPO_GRAPH_INTERNAL_H_
#define COMM_TOPO_GRAPH_INTERNAL_H_

#include "topo.h"

/* paths.c: topo->paths for every host of a linked topology (commTopoFinish, after the links). */
commResult_t commTopoComputePaths(commTopo* topo);

/* graph.c: the bandwidths discovery and NCCL's topology files share. */
/* A PCIe link of `gts` GT/s per lane and `width` lanes: GB/s per direction after line encoding (8b/10b up
 * to gen2, 128b/130b gen3-5, FLIT 242/256 gen6), hwloc's unit: gen5 x16 = 63.0. */
double commTopoPciBw(double gts, int width);
/* The PCIe generation (1-6) of a lane rate in GT/s, 0 if none is near. */
int commTopoPciGen(double gts);
/* The lane rate of PCIe generation gen (1-6), 0 otherwise. */
double commTopoPciGts(int gen);
/* GB/s per NVLink and direction for a GPU of compute capability sm x 10: < 7.0 (Pascal, NVLink 1) 20.0;
 * 7.x (NVLink 2) 25.0; 8.6 (the NVLink bridge of GA10x) 14.0; other 8.x (NVLink 3) and 9.x (NVLink 4) 25.0;
 * 10.x (NVLink 5) 50.0; unknown or anything else 20.0. */
double commTopoNvlinkBw(int sm);

#endif
