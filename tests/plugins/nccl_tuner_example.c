/* An NCCL-shaped tuner plugin (ncclTunerPlugin_vN, src/tune/tuner_nccl.h), written from the semantics of NCCL's
 * public tuner headers, one source for every version: built with -DNCCL_EXAMPLE_TUNER_VERSION=N (2, 3, 4 or 5)
 * it exports ncclTunerPlugin_vN only, named "ExampleTuner". What it decides, every version alike:
 *  - allreduce of at least NCCL_EXAMPLE_TUNER_RING_MIN bytes (default 32768): Ring with Simple on 3 channels;
 *  - smaller allreduce (more than 0 bytes): Tree with LL;
 *  - allgather: NVLS with Simple (v3 and later: also a price for Ring with LL128), which libcomm does not have
 *    (its adapter ignores them and says so once);
 *  - anything else: no opinion.
 * v2 answers with a choice (algorithm, protocol); v3 - v5 edit the cost table (the chosen entry set to 0, as
 * NCCL's v2 path does). What it was asked is logged through the logger NCCL (or libcomm's adapter) gives: init's
 * arguments, the first call of each collective (with the table's shape, or v2's support flags), and at the
 * end (destroy / v5 finalize) how many calls of each collective it saw and how many it decided.
 * Build: cc -shared -fPIC -DNCCL_EXAMPLE_TUNER_VERSION=5 -I src/tune nccl_tuner_example.c -o libnccl-tuner-example.so
 * SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>

#include "tuner_nccl.h"

#ifndef NCCL_EXAMPLE_TUNER_VERSION
#define NCCL_EXAMPLE_TUNER_VERSION 5
#endif
#define EX_VERSION NCCL_EXAMPLE_TUNER_VERSION
#define EX_EXPORT __attribute__((visibility("default")))
#define EX_NFUNCS 5

#define EX_LOG(c, ...)                                                                                           \
  do {                                                                                                           \
    if ((c)->log)                                                                                                \
      (c)->log(NCCL_LOG_INFO, NCCL_TUNING, __FILE__, __LINE__, "TUNER/ExampleTuner v" EX_STR " : " __VA_ARGS__); \
  } while (0)
#define EX_STR EX_STR2(NCCL_EXAMPLE_TUNER_VERSION)
#define EX_STR2(x) EX_STR3(x)
#define EX_STR3(x) #x

typedef struct {
  ncclDebugLogger_t log;
  size_t ringMin;
  unsigned long asked[EX_NFUNCS], decided[EX_NFUNCS];
} exCtx;

static const char* const exFuncNames[EX_NFUNCS] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"};

static ncclResult_t exInitCommon(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context) {
  exCtx* c = calloc(1, sizeof(*c));
  if (!c) return ncclSystemError;
  c->log = logFunction;
  const char* env = getenv("NCCL_EXAMPLE_TUNER_RING_MIN");
  c->ringMin = env ? (size_t)strtoull(env, NULL, 10) : 32768;
  *context = c;
  EX_LOG(c, "init: %zu ranks, %zu nodes, ring from %zu bytes", nRanks, nNodes, c->ringMin);
  return ncclSuccess;
}

/* The decision: algorithm and protocol (NCCL's numbers), channels (0: no opinion). Returns 0 without one. */
static int exDecide(exCtx* c, ncclFunc_t f, size_t nBytes, int* algo, int* proto, int* nChannels) {
  if (f == ncclFuncAllReduce && nBytes >= c->ringMin) {
    *algo = NCCL_ALGO_RING, *proto = NCCL_PROTO_SIMPLE, *nChannels = 3;
  } else if (f == ncclFuncAllReduce && nBytes > 0) {
    *algo = NCCL_ALGO_TREE, *proto = NCCL_PROTO_LL;
  } else if (f == ncclFuncAllGather) {
    *algo = NCCL_ALGO_NVLS, *proto = NCCL_PROTO_SIMPLE;
  } else {
    return 0;
  }
  return 1;
}

/* Counts the call; 1 for the first call of f (which the caller logs). */
static int exAsked(exCtx* c, ncclFunc_t f) { return (int)f >= 0 && (int)f < EX_NFUNCS && c->asked[f]++ == 0; }

static ncclResult_t exDestroy(void* context) {
  exCtx* c = (exCtx*)context;
  if (!c) return ncclSuccess;
  EX_LOG(c, "asked %lu broadcast, %lu reduce, %lu allgather, %lu reducescatter, %lu allreduce; decided %lu allreduce",
         c->asked[0], c->asked[1], c->asked[2], c->asked[3], c->asked[4], c->decided[ncclFuncAllReduce]);
  free(c);
  return ncclSuccess;
}

#if EX_VERSION == 2
static ncclResult_t exGetCollInfoV2(void* context, ncclFunc_t collType, size_t nBytes, int collNetSupport,
                                    int nvlsSupport, int numPipeOps, int* algorithm, int* protocol, int* nChannels) {
  exCtx* c = (exCtx*)context;
  if (exAsked(c, collType))
    EX_LOG(c, "asked %s of %zu bytes: collNetSupport %d nvlsSupport %d numPipeOps %d", exFuncNames[collType], nBytes,
           collNetSupport, nvlsSupport, numPipeOps);
  int a, p, ch = 0;
  if (!exDecide(c, collType, nBytes, &a, &p, &ch)) return ncclSuccess;
  c->decided[collType]++;
  *algorithm = a, *protocol = p;
  if (ch) *nChannels = ch;
  return ncclSuccess;
}

EX_EXPORT const ncclTuner_v2_t ncclTunerPlugin_v2 = {
    .name = "ExampleTuner", .init = exInitCommon, .getCollInfo = exGetCollInfoV2, .destroy = exDestroy};
#else
/* v3 - v5: the cost table, numAlgo x numProto floats from its first row. */
static ncclResult_t exTable(exCtx* c, ncclFunc_t collType, size_t nBytes, int numPipeOps, float** collCostTable,
                            int numAlgo, int numProto, int regBuff, int* nChannels) {
  if (exAsked(c, collType))
    EX_LOG(c, "asked %s of %zu bytes: numPipeOps %d, table of %d algorithms x %d protocols, regBuff %d",
           exFuncNames[collType], nBytes, numPipeOps, numAlgo, numProto, regBuff);
  int a, p, ch = 0;
  if (numAlgo < NCCL_NUM_ALGORITHMS || numProto < NCCL_NUM_PROTOCOLS) return ncclSuccess; /* an older layout */
  if (!exDecide(c, collType, nBytes, &a, &p, &ch)) return ncclSuccess;
  float* t = (float*)collCostTable;
  if (t[a * numProto + p] != (float)NCCL_ALGO_PROTO_IGNORE || a == NCCL_ALGO_NVLS) t[a * numProto + p] = 0.0f;
  if (collType == ncclFuncAllGather) t[NCCL_ALGO_RING * numProto + NCCL_PROTO_LL128] = 1.0f;
  if (collType == ncclFuncAllReduce) c->decided[collType]++;
  if (ch) *nChannels = ch;
  return ncclSuccess;
}

#if EX_VERSION == 3
static ncclResult_t exGetCollInfoV3(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                    float** collCostTable, int numAlgo, int numProto, int* nChannels) {
  return exTable((exCtx*)context, collType, nBytes, numPipeOps, collCostTable, numAlgo, numProto, -1, nChannels);
}
EX_EXPORT const ncclTuner_v3_t ncclTunerPlugin_v3 = {
    .name = "ExampleTuner", .init = exInitCommon, .getCollInfo = exGetCollInfoV3, .destroy = exDestroy};
#else
static ncclResult_t exGetCollInfoV4(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                    float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels) {
  return exTable((exCtx*)context, collType, nBytes, numPipeOps, collCostTable, numAlgo, numProto, regBuff, nChannels);
}
#if EX_VERSION == 4
EX_EXPORT const ncclTuner_v4_t ncclTunerPlugin_v4 = {
    .name = "ExampleTuner", .init = exInitCommon, .getCollInfo = exGetCollInfoV4, .destroy = exDestroy};
#else
static ncclResult_t exInitV5(void** context, uint64_t commId, size_t nRanks, size_t nNodes,
                             ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v5_t* nvlDomainInfo,
                             ncclTunerConstants_v5_t* constants) {
  ncclResult_t r = exInitCommon(nRanks, nNodes, logFunction, context);
  if (r != ncclSuccess) return r;
  exCtx* c = (exCtx*)*context;
  EX_LOG(c, "init: comm 0x%llx, %d NVLink domains of %d to %d ranks", (unsigned long long)commId,
         nvlDomainInfo ? nvlDomainInfo->nNvlDomains : -1, nvlDomainInfo ? nvlDomainInfo->minRanksPerNvlDomain : -1,
         nvlDomainInfo ? nvlDomainInfo->maxRanksPerNvlDomain : -1);
  /* A plugin may change NCCL's constants: libcomm's adapter says it does not use them. */
  if (constants) constants->baseLatencies[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] += 1.0;
  return ncclSuccess;
}
EX_EXPORT const ncclTuner_v5_t ncclTunerPlugin_v5 = {
    .name = "ExampleTuner", .init = exInitV5, .getCollInfo = exGetCollInfoV4, .finalize = exDestroy};
#endif
#endif
#endif
