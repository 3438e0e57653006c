/* comm_sim's options and the machine they describe (tools/comm_sim_opts.c); the tool is tools/comm_sim.c. */
#ifndef COMM_SIM_OPTS_H_
#define COMM_SIM_OPTS_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "schedule.h"
#include "tune.h"

/* The executor's FIFO geometry: COMM_NSLOTS (transports/transport.h) slots of COMM_BUFFSIZE / 8. */
#define SIM_NSLOTS 8
#define SIM_DEFAULT_SLOT (512 * 1024)
/* The library's default COMM_ALLREDUCE_ONESHOT_MAX (src/core/comm.c): the tuner considers one-shot only
 * up to this many bytes. */
#define SIM_ONESHOT_MAX_DEFAULT (256 * 1024)
#define SIM_DEFAULT_LIMIT (16u << 20)
#define SIM_DEFAULT_MAX_EVENTS 200000
#define SIM_STATS_FACTOR 8 /* byte counts are made up to this many times the simulation limit (in steps) */
/* Automatic verification (no -x/-X): up to -L / SIM_VERIFY_FRACTION pieces (about a second) and this many
 * ranks (the verifier's rank sets grow with n). */
#define SIM_VERIFY_FRACTION 8
#define SIM_VERIFY_MAX_RANKS 4096
#define SIM_MAX_SIZES 64

typedef struct {
  const char* name;
  commFunc_t func;
  int perRankBlocks; /* count is per rank: the sizes are the total of n blocks */
} simFunc;
extern const simFunc simFuncs[];
extern const int simNumFuncs;

extern const char* const simAlgoKeys[commNumAlgos];
extern const char* const simProtoKeys[commNumProtos];
extern const char* const simLinkKeys[COMM_NUM_LINKS];

typedef struct {
  int fi; /* index in simFuncs[] */
  commFunc_t func;
  int nRanks, perNode, nNodes, maxLocal;
  int* nodeOf;
  int* ring;
  commDataType_t type;
  size_t elt;
  int root;
  size_t slotBytes;
  int channels; /* -C, or 0: the tuner's */
  int maxCh;    /* the model's maxChannels */
  commLinkKind_t intra, inter;
  uint32_t algoMask, protoMask;
  int algosExplicit;
  int verify; /* -1: automatic */
  int print;
  const char* tracePath;
  size_t simLimit, maxEvents;
  size_t oneShotMax;
  int collnetAsked; /* -G: channels with a collnet group asked for (model.collnetChannels: what the library
                       would have, at most the channels and only across nodes) */
  double aggUs;     /* --agg-us: the switch's aggregation latency; < 0: the inter link's latency */
  commTuneModel model;
  size_t counts[SIM_MAX_SIZES]; /* the sizes, as API counts */
  int nCounts;
} simOpts;

/* Elements per FIFO slot (a piece), at least 1. */
static inline size_t simPieceElems(const simOpts* o) {
  size_t p = o->slotBytes / o->elt;
  return p ? p : 1;
}

void simUsage(FILE* f, const char* prog);
/* Parses the command line into *o and sets up the machine (nodes, ring order, the model, the sizes).
 * Returns -1 to go on, or the exit status (0 after -h, 2 on bad options, 1 out of memory). */
int simOptsParse(int argc, char** argv, simOpts* o);

#endif
