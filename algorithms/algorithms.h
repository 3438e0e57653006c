/* The algorithms: one schedule generator per file, each a pure function of its arguments (commCollArgs:
 * rank, ranks, count, channels, ring order...), and the one table of which algorithm serves which
 * collective (algorithms.c). They build schedules (src/sched/schedule.h) and move no bytes. */
#ifndef COMM_ALGORITHMS_H_
#define COMM_ALGORITHMS_H_

#include "schedule.h"

/* algorithms/ring.c */
commResult_t commRingBuild(const commCollArgs* args, commSchedule* out);
/* algorithms/p2p.c: alltoall and grouped send/recv as pairwise exchanges, step k pairing rank r with
 * r+k (send) and r-k (recv). */
commResult_t commAllToAllBuild(const commCollArgs* args, commSchedule* out);
commResult_t commP2pBuild(int rank, int nRanks, const commP2pOp* ops, int nOps, commSchedule* out);
/* algorithms/oneshot.c: small-message allreduce, every rank exchanges its input with every other rank and
 * reduces locally in rank order (one channel). */
commResult_t commOneShotBuild(const commCollArgs* args, commSchedule* out);

/* algorithms/tree.c: double binary tree allreduce (tree 0 on even channels, tree 1 on odd ones, half of
 * the data each), single-tree pipelined reduce and broadcast rooted at args->root. */
commResult_t commTreeBuild(const commCollArgs* args, commSchedule* out);
/* algorithms/colltree.c: hierarchical allreduce, reduce and broadcast over args->nodeOf. */
commResult_t commCollTreeBuild(const commCollArgs* args, commSchedule* out);
/* algorithms/collnet.c: commAlgoCollNet, collectives whose inter-node part the network does (the schedule peer
 * COMM_PEER_COLLNET): allreduce (CollTree with the collnet stage), allgather and reducescatter (the network's
 * gather and scatter; nodes of one size). algorithms/colltree.c: the member of each node in channel ch's
 * collnet group (members[v] for each node v: the leader CollTree gives it), which init forms the groups from. */
commResult_t commCollNetBuild(const commCollArgs* args, commSchedule* out);
commResult_t commCollNetMembers(const commCollArgs* args, int ch, int* members);
/* algorithms/pat.c: Bruck-style allgather and reducescatter, log2(n) steps, bounded scratch. */
commResult_t commPatBuild(const commCollArgs* args, commSchedule* out);

/* algorithms/tree_shape.c. The bit tree over positions 0..m-1 (root 0; odd positions are leaves);
 * -1 where there is no such neighbour. */
void commBitTree(int m, int pos, int* parent, int* child0, int* child1);
int commBitTreeDepth(int m); /* edges from the root to the deepest leaf */
/* Tree t (0 or 1) of the double binary tree over n ranks, as ranks; every rank is interior in at most
 * one of the two trees. */
void commDoubleTree(int n, int t, int rank, int* parent, int* child0, int* child1);
int commDoubleTreeRoot(int n, int t);

/* The generator of algo for func, or NULL when algo does not implement func. */
commSchedBuilder_t commAlgoBuilder(int algo, commFunc_t func);

#endif
