/* sim_trace: a discrete-event timing simulation of the schedules of all ranks of one collective, and the
 * Chrome trace (Perfetto) of its result. Used by tools/comm_sim; see sim_trace.c for what is modelled. */
#ifndef COMM_SIM_TRACE_H_
#define COMM_SIM_TRACE_H_

#include <stddef.h>
#include <stdint.h>

#include "schedule.h"

/* One step in the compact form the simulator keeps for every rank (a commStep without buffers). */
typedef struct {
  uint64_t bytes;     /* count in bytes: what the step sends, receives or (local steps) copies/reduces */
  uint64_t recvBytes; /* bytes received: == bytes except for SEND_RECV */
  int32_t sendPeer;   /* a rank, COMM_PEER_COLLNET (the channel's collnet group), or -1: none */
  int32_t recvPeer;   /* the same */
  uint8_t prim;       /* commPrim_t */
} simStep;

/* The schedules of all ranks. Steps of (rank r, channel c) are steps[off[r * maxCh + c] ..
 * off[r * maxCh + c + 1]); ranks are added in order 0, 1, ... */
typedef struct {
  int nRanks;
  int maxCh;   /* channels per rank in the tables (COMM_MAX_CHANNELS) */
  int nAdded;  /* ranks added so far */
  size_t* off; /* nRanks * maxCh + 1 */
  simStep* steps;
  size_t nSteps, capSteps;
} simSet;

/* Does primitive p send / receive? (SEND_RECV: both, where its peers are set) */
int simPrimSends(int prim);
int simPrimRecvs(int prim);
/* Is peer a peer (a rank or COMM_PEER_COLLNET), not "none"? */
static inline int simHasPeer(int32_t peer) { return peer >= 0 || peer == COMM_PEER_COLLNET; }

int simSetInit(simSet* s, int nRanks);
/* Appends rank `rank`'s schedule (rank == s->nAdded); eltSize converts counts to bytes. 0 on success. */
int simSetAddRank(simSet* s, int rank, const commSchedule* sched, size_t eltSize);
void simSetFree(simSet* s);
static inline size_t simSetLen(const simSet* s, int r, int c) {
  return s->off[(size_t)r * s->maxCh + c + 1] - s->off[(size_t)r * s->maxCh + c];
}

/* The machine: link constants per class (the cost model's, protocol factors applied). */
typedef struct {
  double latUs;
  double bwGBs; /* GB/s = bytes per ns */
} simLink;

typedef struct {
  int nRanks;
  int nNodes;
  const int* nodeOf; /* rank -> node, nNodes distinct values */
  simLink intra;     /* between ranks of one node: one link per sending rank */
  simLink inter;     /* between nodes: one link (NIC) per node, shared by its ranks */
  double callUs;     /* fixed cost of a call (added once to the total) */
  double stepUs;     /* executor overhead per step */
  double reduceGBs;  /* local reduction and copy speed */
  size_t pieceBytes; /* a FIFO slot: steps move in pieces of at most this many bytes */
  int nSlots;        /* pieces a sender may be ahead of its receiver on one connection */
  double aggUs;      /* collnet: the switch's aggregation latency (from the last member's piece to the result) */
} simParams;

typedef struct {
  double totalUs;     /* callUs + the time the last (rank, channel) finishes */
  double lastRankUs;  /* the same without callUs */
  int lastRank;       /* a rank that finishes last */
  size_t actions;     /* pieces and local steps executed */
  size_t conns;       /* connections (channel, sender, receiver) used */
  int collnetMembers; /* (rank, channel)s in a collnet group (steps with peer COMM_PEER_COLLNET) */
  int stalled;        /* 1: some (rank, channel) could never continue (send/recv mismatch or deadlock) */
  char msg[256];      /* what stalled */
} simResult;

/* Runs the simulation. stepStart/stepEnd: NULL, or arrays of s->nSteps receiving the time (us, from the
 * start of the call, callUs excluded) each step started and ended. Returns 0, or -1 when out of memory
 * (res->msg says so); a stall is reported in res, not by the return value. */
int simRun(const simSet* s, const simParams* p, double* stepStart, double* stepEnd, simResult* res);

/* Writes the Chrome trace JSON ({"traceEvents": [...]}) of a simulated run: an "X" event per step
 * (pid = rank, tid = channel), "M" events naming ranks and channels. At most maxEvents step events: whole
 * (rank, channel) rows in rank order until the cap; *written and *truncated say what went out. title goes
 * into "otherData". Returns 0, or -1 (errno) when the file cannot be written. */
int simWriteTrace(const char* path, const simSet* s, const simParams* p, const double* stepStart, const double* stepEnd,
                  size_t maxEvents, const char* title, size_t* written, int* truncated);

#endif
