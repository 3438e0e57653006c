/* libcomm tuner plugin ABI, version 1.
 *
 * A tuner plugin is a shared library named by COMM_TUNER_PLUGIN (a path, or NAME for libcomm-tuner-NAME.so)
 * that exports the symbol COMM_TUNER_PLUGIN_SYMBOL, a commTuner_v1_t. For every collective libcomm
 * fills a table of predicted times in microseconds, costTable[algorithm][protocol], from its cost model
 * (COMM_TUNER_UNSUPPORTED where a combination cannot run or is excluded by COMM_ALGO / COMM_PROTO), then
 * calls getCollInfo, which may lower, raise or disable entries (set them to COMM_TUNER_UNSUPPORTED); the
 * lowest remaining entry wins. The plugin may also choose the number of channels (leave *nChannels alone
 * to keep libcomm's choice). Entries the plugin marks runnable that libcomm cannot run are ignored.
 *
 * The choice must be the same on every rank of a communicator: a plugin must decide from its arguments
 * (and process-wide configuration that is the same everywhere), never from local timing.
 *
 * C99; needs no other header than comm.h. SPDX-License-Identifier: Apache-2.0 */
#ifndef COMM_TUNER_H_
#define COMM_TUNER_H_

#include <stddef.h>
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COMM_TUNER_PLUGIN_VERSION 1
#define COMM_TUNER_PLUGIN_SYMBOL "commTunerPlugin_v1"

/* Rows and columns of the cost table (stable numbering: new ones are only ever appended). */
typedef enum {
  COMM_TUNER_ALGO_RING = 0,
  COMM_TUNER_ALGO_TREE = 1,
  COMM_TUNER_ALGO_COLLTREE = 2,
  COMM_TUNER_ALGO_PAT = 3,
  COMM_TUNER_ALGO_ONESHOT = 4,
  COMM_TUNER_ALGO_PAIRWISE = 5,
  COMM_TUNER_ALGO_COLLNET = 6, /* appended: a plugin built with 6 rows still reads rows 0..5 right */
  COMM_TUNER_NUM_ALGOS = 7
} commTunerAlgo_t;

typedef enum { COMM_TUNER_PROTO_LL = 0, COMM_TUNER_PROTO_SIMPLE = 1, COMM_TUNER_NUM_PROTOS = 2 } commTunerProto_t;

/* Collectives, as in the cost table calls. */
typedef enum {
  COMM_TUNER_FUNC_ALLREDUCE = 0,
  COMM_TUNER_FUNC_BROADCAST = 1,
  COMM_TUNER_FUNC_REDUCE = 2,
  COMM_TUNER_FUNC_ALLGATHER = 3,
  COMM_TUNER_FUNC_REDUCESCATTER = 4,
  COMM_TUNER_FUNC_ALLTOALL = 5
} commTunerFunc_t;

#define COMM_TUNER_UNSUPPORTED (-1.0f)

typedef enum { COMM_TUNER_LOG_WARN = 1, COMM_TUNER_LOG_INFO = 2 } commTunerLogLevel_t;
typedef void (*commTunerLogger_t)(commTunerLogLevel_t level, const char* fmt, ...);

typedef struct {
  const char* name;
  /* Once per communicator. nRanks and nNodes describe it; *context is handed back to the other calls. */
  commResult_t (*init)(size_t nRanks, size_t nNodes, commTunerLogger_t logger, void** context);
  /* Once per collective. nBytes: the bytes of the operation's largest buffer (allreduce/broadcast/reduce:
   * count x type size; allgather/reducescatter/alltoall: nRanks x count x type size). costTable points to
   * COMM_TUNER_NUM_ALGOS rows of COMM_TUNER_NUM_PROTOS floats. */
  commResult_t (*getCollInfo)(void* context, commTunerFunc_t func, size_t nBytes,
                              float (*costTable)[COMM_TUNER_NUM_PROTOS], int* nChannels);
  /* When the communicator is destroyed. */
  commResult_t (*destroy)(void* context);
} commTuner_v1_t;

#ifdef __cplusplus
}
#endif

#endif
