/* Machine summary from hwloc, logged at init. */
#include "topo.h"

#include <hwloc.h>
#include <string.h>

#include "debug.h"

commResult_t commTopoSummary(commMachineSummary* out) {
  memset(out, 0, sizeof(*out));
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) {
    WARN("hwloc_topology_init failed; machine layout unknown");
    return commSuccess;
  }
  if (hwloc_topology_load(topo) != 0) {
    WARN("hwloc_topology_load failed; machine layout unknown");
    hwloc_topology_destroy(topo);
    return commSuccess;
  }
  out->nPackages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  out->nNumaNodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  out->nCores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  out->nPUs = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  hwloc_topology_destroy(topo);
  return commSuccess;
}

void commTopoLogMachine(void) {
  if (!COMM_LOG_ENABLED(COMM_LOG_INFO)) return;
  commMachineSummary m;
  commTopoSummary(&m);
  INFO(COMM_TOPO, "machine: %d package(s), %d NUMA node(s), %d core(s), %d PU(s)", m.nPackages, m.nNumaNodes,
       m.nCores, m.nPUs);
}
