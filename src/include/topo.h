/* Topology (hwloc). The topology issue grows this into the full machine graph. */
#ifndef COMM_TOPO_H_
#define COMM_TOPO_H_

#include "comm.h"

typedef struct {
  int nPackages, nNumaNodes, nCores, nPUs;
} commMachineSummary;

/* Counts from hwloc; on failure a WARN and zeros (never an error: the machine still works). */
commResult_t commTopoSummary(commMachineSummary* out);
/* INFO line describing the machine. */
void commTopoLogMachine(void);

#endif
