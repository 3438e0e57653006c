/* An example tuner plugin (include/comm_tuner.h), used by the tests: it makes every allreduce run the
 * tree with the LL protocol on 4 channels, disables PAT, and otherwise keeps libcomm's cost table.
 * Build: cc -shared -fPIC -I include tuner_example.c -o libcomm-tuner-example.so
 * Use:   COMM_TUNER_PLUGIN=/path/libcomm-tuner-example.so (or COMM_TUNER_PLUGIN=example if on the search path)
 * SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>

#include "comm_tuner.h"

typedef struct {
  size_t nRanks, nNodes;
  commTunerLogger_t log;
} exampleContext;

static commResult_t exampleInit(size_t nRanks, size_t nNodes, commTunerLogger_t logger, void** context) {
  exampleContext* c = calloc(1, sizeof(*c));
  if (!c) return commSystemError;
  c->nRanks = nRanks;
  c->nNodes = nNodes;
  c->log = logger;
  if (logger) logger(COMM_TUNER_LOG_INFO, "example tuner for %zu ranks on %zu nodes", nRanks, nNodes);
  *context = c;
  return commSuccess;
}

static commResult_t exampleGetCollInfo(void* context, commTunerFunc_t func, size_t nBytes,
                                       float (*costTable)[COMM_TUNER_NUM_PROTOS], int* nChannels) {
  (void)context;
  (void)nBytes;
  for (int p = 0; p < COMM_TUNER_NUM_PROTOS; p++) costTable[COMM_TUNER_ALGO_PAT][p] = COMM_TUNER_UNSUPPORTED;
  if (func == COMM_TUNER_FUNC_ALLREDUCE) {
    for (int a = 0; a < COMM_TUNER_NUM_ALGOS; a++)
      for (int p = 0; p < COMM_TUNER_NUM_PROTOS; p++) costTable[a][p] = COMM_TUNER_UNSUPPORTED;
    costTable[COMM_TUNER_ALGO_TREE][COMM_TUNER_PROTO_LL] = 1.0f;
    *nChannels = 4;
  }
  return commSuccess;
}

static commResult_t exampleDestroy(void* context) {
  free(context);
  return commSuccess;
}

const commTuner_v1_t commTunerPlugin_v1 = {
    .name = "example",
    .init = exampleInit,
    .getCollInfo = exampleGetCollInfo,
    .destroy = exampleDestroy,
};
