/* Which algorithm serves which collective: the one table (algorithms.h). */
#include "algorithms.h"

commSchedBuilder_t commAlgoBuilder(int algo, commFunc_t func) {
  switch (algo) {
    case commAlgoRing:
      return func == commFuncAllReduce || func == commFuncBroadcast || func == commFuncReduce ||
                     func == commFuncAllGather || func == commFuncReduceScatter
                 ? commRingBuild
                 : NULL;
    case commAlgoTree:
    case commAlgoCollTree:
      if (func != commFuncAllReduce && func != commFuncBroadcast && func != commFuncReduce) return NULL;
      return algo == commAlgoTree ? commTreeBuild : commCollTreeBuild;
    case commAlgoPat: return func == commFuncAllGather || func == commFuncReduceScatter ? commPatBuild : NULL;
    case commAlgoOneShot: return func == commFuncAllReduce ? commOneShotBuild : NULL;
    case commAlgoPairwise: return func == commFuncAllToAll ? commAllToAllBuild : NULL;
    case commAlgoCollNet:
      return func == commFuncAllReduce || func == commFuncAllGather || func == commFuncReduceScatter ? commCollNetBuild
                                                                                                     : NULL;
    default: return NULL;
  }
}
