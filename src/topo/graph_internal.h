/* What the topology graph's files share (graph.c: builder, links, queries; paths.c: the best paths). */
#ifndef COMM_TOPO_GRAPH_INTERNAL_H_
#define COMM_TOPO_GRAPH_INTERNAL_H_

#include "topo.h"

/* paths.c: topo->paths for every host of a linked topology (commTopoFinish, after the links). */
commResult_t commTopoComputePaths(commTopo* topo);

#endif
