/* NCCL's tuner plugin ABI (ncclTunerPlugin_v2 .. _v5), declared for libcomm's adapter (src/tune/tuner_nccl.c)
 * and for the NCCL-shaped test tuner (tests/plugins/nccl_tuner_example.c). Needs no other header.
 *
 * Our own declarations of the binary interface: the field order, the types and the numbering follow NCCL's
 * public headers (read, not copied): NVIDIA/nccl src/include/plugin/tuner/tuner_v2.h .. tuner_v5.h,
 * src/include/plugin/nccl_tuner.h (algorithm and protocol indices, NCCL_ALGO_PROTO_IGNORE),
 * src/include/nccl_common.h (ncclFunc_t), as in NCCL 2.28. Only the ABI matters: the struct tags are ours.
 *
 * What each version asks of the plugin, per collective (getCollInfo):
 *  - v2: it returns a choice, an algorithm and a protocol (either left NCCL_ALGO_UNDEF / NCCL_PROTO_UNDEF:
 *    no choice) and may set the channels; it is told whether CollNet and NVLS could run the call;
 *  - v3: it edits the cost table, collCostTable[algorithm][protocol] (numAlgo x numProto floats, microseconds,
 *    NCCL_ALGO_PROTO_IGNORE where a combination cannot run; the lowest non-negative entry wins; the pointer is
 *    the table's first row, handed as float**), and may set the channels (0: the caller's choice);
 *  - v4: the same, also told whether the user buffers are registered (regBuff);
 *  - v5: as v4; init and finalize change: a context per communicator made with its commId, the NVLink domains,
 *    and NCCL's tuning constants (in/out).
 * A getCollInfo that does not return ncclSuccess leaves the call to the caller's own tuning.
 * SPDX-License-Identifier: Apache-2.0 */
#ifndef COMM_TUNER_NCCL_H_
#define COMM_TUNER_NCCL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The result codes and the logger, as in transports/net/nccl/net_nccl.h (whichever comes first declares them). */
#ifndef COMM_NCCL_COMMON_TYPES_
#define COMM_NCCL_COMMON_TYPES_
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclTimeout = 8
} ncclResult_t;
typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;
typedef enum {
  NCCL_INIT = 1,
  NCCL_COLL = 2,
  NCCL_P2P = 4,
  NCCL_SHM = 8,
  NCCL_NET = 16,
  NCCL_GRAPH = 32,
  NCCL_TUNING = 64,
  NCCL_ENV = 128,
  NCCL_ALLOC = 256,
  NCCL_CALL = 512,
  NCCL_PROXY = 1024,
  NCCL_NVLS = 2048,
  NCCL_BOOTSTRAP = 4096,
  NCCL_REG = 8192,
  NCCL_ALL = ~0
} ncclDebugLogSubSys;
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);
#endif /* COMM_NCCL_COMMON_TYPES_ */

/* nccl_common.h: the collectives (an int-sized enum). The tuner is asked about the first five. */
typedef enum {
  ncclFuncBroadcast = 0,
  ncclFuncReduce = 1,
  ncclFuncAllGather = 2,
  ncclFuncReduceScatter = 3,
  ncclFuncAllReduce = 4,
  ncclFuncSendRecv = 5,
  ncclFuncSend = 6,
  ncclFuncRecv = 7
} ncclFunc_t;

/* nccl_tuner.h: the rows and columns of the cost table. */
#define NCCL_ALGO_UNDEF -1
#define NCCL_ALGO_TREE 0
#define NCCL_ALGO_RING 1
#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN 3
#define NCCL_ALGO_NVLS 4
#define NCCL_ALGO_NVLS_TREE 5
#define NCCL_ALGO_PAT 6
#define NCCL_NUM_ALGORITHMS 7
#define NCCL_PROTO_UNDEF -1
#define NCCL_PROTO_LL 0
#define NCCL_PROTO_LL128 1
#define NCCL_PROTO_SIMPLE 2
#define NCCL_NUM_PROTOCOLS 3
#define NCCL_ALGO_PROTO_IGNORE -1.0

/* ---------------------------------------------------------------- version 2 */

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int collNetSupport, int nvlsSupport,
                              int numPipeOps, int* algorithm, int* protocol, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v2_t;

/* ---------------------------------------------------------------- version 3 */

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps, float** collCostTable,
                              int numAlgo, int numProto, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v3_t;

/* ---------------------------------------------------------------- version 4: regBuff */

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps, float** collCostTable,
                              int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v4_t;

/* ---------------------------------------------------------------- version 5: per-communicator init, constants */

typedef struct {
  int nNvlDomains;          /* NVLink domains of the communicator */
  int minRanksPerNvlDomain; /* fewest ranks of a domain */
  int maxRanksPerNvlDomain; /* most ranks of a domain */
} ncclNvlDomainInfo_v5_t;

#define NCCL_NUM_ALGORITHMS_V5 7
#define NCCL_NUM_PROTOCOLS_V5 3
#define NCCL_NUM_HW_LINKS_V5 3      /* NVLink, PCI, network */
#define NCCL_NUM_COMPCAPS_V5 4      /* Volta, Ampere, Hopper, Blackwell */
#define NCCL_NUM_TUNING_SCALES_V5 3 /* 1, 2, 4 nodes */

/* NCCL's model constants, which a v5 plugin may read and change at init. */
typedef struct {
  double baseLatencies[NCCL_NUM_ALGORITHMS_V5][NCCL_NUM_PROTOCOLS_V5];
  double hwLatencies[NCCL_NUM_HW_LINKS_V5][NCCL_NUM_ALGORITHMS_V5][NCCL_NUM_PROTOCOLS_V5];
  double llMaxBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxRingLL128Bws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxTreeLL128Bws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxTreeBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxNVLSTreeBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
} ncclTunerConstants_v5_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       ncclNvlDomainInfo_v5_t* nvlDomainInfo, ncclTunerConstants_v5_t* constants);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps, float** collCostTable,
                              int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*finalize)(void* context);
} ncclTuner_v5_t;

#define NCCL_TUNER_SYMBOL_V5 "ncclTunerPlugin_v5"
#define NCCL_TUNER_SYMBOL_V4 "ncclTunerPlugin_v4"
#define NCCL_TUNER_SYMBOL_V3 "ncclTunerPlugin_v3"
#define NCCL_TUNER_SYMBOL_V2 "ncclTunerPlugin_v2"

#ifdef __cplusplus
}
#endif
#endif /* COMM_TUNER_NCCL_H_ */
