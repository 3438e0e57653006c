/* The tuner: for every collective, the algorithm, protocol, channels and step size with the lowest
 * predicted time. Internal (src/tune/). The model is pure (no communicator) so tools/comm_sim can price
 * machines we do not have; commTuneChoose adds COMM_ALGO / COMM_PROTO and the tuner plugin.
 *
 * Cost model (times in microseconds). Every algorithm is described, per call, by
 *  - its stages on each link class (intra-node, inter-node): the dependent hops one after another
 *    (ring allreduce: 2(n-1); tree allreduce: 2 x depth; ...), and of those the fill stages, which a
 *    chunk must cross before the last chunk can leave (pipelines: trees, chains),
 *  - the bytes its busiest rank sends on each link class,
 *  - the bytes its busiest rank reduces,
 *  - its step size (chunk), which sets how many chunk steps the executor runs and how long the pipeline
 *    takes to fill.
 * and priced as
 *    T = callUs + sum_links (stages x latUs + fillStages x chunk / bw)     hop latency, pipeline fill
 *               + max(max_links bytes / bw, reducedBytes / reduceBw)        streaming (links and reductions
 *                                                                            overlap)
 *               + steps x stepUs                                           executor work per step
 * with the link constants of commTuneConsts (calibrated on the machines we have: docs/PERF.md). Link
 * classes come from the topology; until it lands, a node is a host: intra = shm, inter = network, or
 * network for both when COMM_SHM_DISABLE=1. */
#ifndef COMM_TUNE_H_
#define COMM_TUNE_H_

#include <stddef.h>
#include <stdint.h>
#include "comm_tuner.h"
#include "algorithms.h"
#include "datatype.h"

typedef enum { COMM_LINK_SHM = 0, COMM_LINK_NET = 1, COMM_NUM_LINKS } commLinkKind_t;

typedef struct {
  double latUs; /* one hop: from a step being posted to the peer seeing it */
  double bwGBs; /* one rank streaming to one peer (GB/s = bytes/ns / 1) */
} commTuneLink;

/* The one table of constants (src/tune/model.c). */
typedef struct {
  commTuneLink link[COMM_NUM_LINKS];
  double callUs;                         /* API entry, plan, executor start and finish */
  double stepUs;                         /* executor overhead per chunk step */
  double reduceGBs;                      /* local reduction (a op b -> c) */
  double protoLatFactor[commNumProtos];  /* latency multiplier per protocol */
  double protoBwFactor[commNumProtos];   /* bandwidth multiplier per protocol */
  size_t protoChunkBytes[commNumProtos]; /* step size cap per protocol (0: the FIFO's half) */
  double algoLatFactor[commNumAlgos];    /* what an algorithm's hops cost beyond the link's (measured) */
  double algoBwFactor[commNumAlgos];     /* the share of the link's bandwidth an algorithm reaches */
} commTuneConsts;
extern const commTuneConsts commTuneDefaults;

/* A communicator's shape, as the model sees it. Same on every rank. */
typedef struct {
  int nRanks;
  int nNodes;
  int maxLocalRanks;     /* ranks on the most populated node */
  commLinkKind_t intra;  /* link between ranks of one node */
  commLinkKind_t inter;  /* link between nodes */
  size_t fifoChunkBytes; /* most bytes one send step may carry (half a connection's FIFO) */
  int maxChannels;       /* channels a collective may use (COMM_NCHANNELS) */
  int nicsPerNode;       /* network links of a node (flat default: 1; the topology will say) */
  int coresPerNode;      /* cores that run a node's ranks (0: as many as ranks). With more ranks than
                              cores, every rank's copies and reductions share them. */
  int collnetChannels;   /* channels with a collnet group (0: no collnet, commAlgoCollNet is not priced) */
  double collnetAggUs;   /* one network reduction beyond the hops (the plugin's latency; 0: one network hop) */
  uint32_t collnetFuncs; /* bit commFunc_t: the collectives the groups run (0 with collnetChannels: allreduce) */
  size_t collnetOpBytes; /* most bytes of one network allgather/reducescatter operation (a slot; 0: fifoChunkBytes) */
  commTuneConsts k;
} commTuneModel;

void commTuneModelInit(commTuneModel* m, int nRanks, int nNodes, int maxLocalRanks, commLinkKind_t intra,
                       commLinkKind_t inter, size_t fifoChunkBytes, int maxChannels);

/* Predicted time of one call, or a negative value when algo does not implement func. nBytes: the bytes
 * of the operation's largest buffer (allreduce/broadcast/reduce: count x size; allgather/reducescatter/
 * alltoall: nRanks x count x size). nChannels and chunkBytes are the values the call would run with
 * (commTuneChannels / commTuneChunkBytes). Fills *steps (stages + chunk steps) when non-NULL. */
double commTunePredict(const commTuneModel* m, commFunc_t func, int algo, int proto, size_t nBytes, int nChannels,
                       size_t chunkBytes, double* steps);
/* Channels and step size the plan uses for this call. */
int commTuneChannels(const commTuneModel* m, commFunc_t func, int algo, size_t nBytes);
size_t commTuneChunkBytes(const commTuneModel* m, int proto);

/* COMM_ALGO / COMM_PROTO: which algorithms / protocols each collective may use. Bit i of allow[f] set:
 * algorithm (protocol) i allowed for function f. Unknown names and unsupported choices are WARNs and are
 * ignored; a collective left with nothing allowed keeps every choice (and WARNs). NULL or "" allows all. */
void commTuneParseAlgo(const char* spec, uint32_t allow[commNumFuncs]);
void commTuneParseProto(const char* spec, uint32_t allow[commNumFuncs]);
/* The same, for the variable `var` gave the spec (WARNs name it): NCCL_ALGO / NCCL_PROTO read NCCL's names. */
void commTuneParseVar(const char* var, int isAlgo, const char* spec, uint32_t allow[commNumFuncs]);

typedef struct {
  int algo;  /* commAlgo_t */
  int proto; /* commProto_t */
  int nChannels;
  size_t chunkBytes;
  double predictedUs;
  int repeatable; /* an identical call always gets this choice (no tuner plugin), so its plan may be kept */
  size_t nBytes;  /* the call's bytes as priced */
} commTuneChoice;

/* Choices already made, by (collective, bytes): the same call again costs a lookup (hot loops repeat
 * sizes). Not used with a plugin, which may decide differently from call to call. */
#define COMM_TUNE_CACHE 64
typedef struct {
  int valid;
  int func;
  size_t nBytes;
  commTuneChoice choice;
} commTuneCacheEntry;

/* A communicator's tuner state (src/tune/tuner.c). */
typedef struct commTuner {
  commTuneModel model;
  uint32_t allowAlgo[commNumFuncs];
  uint32_t allowProto[commNumFuncs];
  /* Tuner plugin (COMM_TUNER_PLUGIN): libcomm's table, or the NCCL adapter's (tuner_nccl.c); NULL: none. */
  void* pluginHandle;
  const commTuner_v1_t* plugin;
  void* pluginContext;
  commTuneCacheEntry cache[COMM_TUNE_CACHE];
  uint64_t collnetWarned[commNumFuncs]; /* reasons said for collnet choices that ran another (commTuneCollNetCheck) */
} commTuner;

struct commComm;
commResult_t commTunerInit(struct commComm* comm);
/* src/tune/tuner_nccl.c. The tuner plugin's library for a communicator, looked up as NCCL does:
 * COMM_TUNER_PLUGIN (or NCCL_TUNER_PLUGIN) as given, else libcomm-tuner-NAME.so, libnccl-tuner-NAME.so; unset:
 * libnccl-tuner.so (silently absent); "none": none; then the network plugin's library if loaded and it carries a
 * tuner. NULL when there is none (a WARN or INFO says why); `what` names the library opened; *isDefault: it is
 * the default one (a library without a tuner symbol is then no WARN). */
void* commTunerOpenLibrary(char* what, size_t whatLen, int* isDefault);
/* The NCCL tuner plugin of lib (ncclTunerPlugin_v5, _v4, _v3, _v2: the newest exported), initialised for comm,
 * behind libcomm's tuner table: returns the adapter's table and its *context (the mapping of NCCL's cost table
 * onto libcomm's: tuner_nccl.c). NULL when lib exports none (*found 0) or it cannot be used (*found 1, a WARN). */
const commTuner_v1_t* commTunerNcclLoad(void* lib, const char* what, const struct commComm* comm, void** context,
                                        int* found);
int commTuneNicsPerNode(const struct commComm* comm);
void commTunerFree(struct commComm* comm);
/* A choice of collnet for a call the groups cannot run (a type or op the network refused; device buffers; more
 * nodes than one network operation has elements): CollTree (allreduce) or the ring (allgather, reducescatter)
 * instead, with one WARN per communicator and reason. Same answer on every rank. */
void commTuneCollNetCheck(struct commComm* comm, commFunc_t func, commDataType_t type, const commRedOpArgs* redop,
                          int onDevice, commTuneChoice* choice);
/* The algorithm for a collective (not point-to-point). Same answer on every rank. */
commResult_t commTuneChoose(struct commComm* comm, commFunc_t func, size_t count, size_t eltSize, commTuneChoice* out);
/* src/tune/device.c: the same for a collective on device buffers: the algorithm as above, then the CUDA
 * executor's protocol (LL up to COMM_DEV_LL_MAX bytes within a host), channels (by size, within the blocks
 * one GPU's ranks share) and step size (the FIFO). */
commResult_t commTuneChooseDevice(struct commComm* comm, commFunc_t func, size_t count, size_t eltSize,
                                  commTuneChoice* out);

#endif
