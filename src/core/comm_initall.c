/* commInitAll: a communicator of ndev ranks in this process, one thread per rank initialising it (NCCL's
 * ncclCommInitAll). Kept apart from comm.c's single-rank init, which it calls on each thread. */
#include <pthread.h>
#include <stdlib.h>
#include "bootstrap.h"
#include "core.h"
#include "debug.h"
#include "devmem.h"
#include "enqueue.h"
#include "utils.h"

typedef struct {
  comm_t* slot;
  int nranks, rank;
  commUniqueId id;
  commResult_t res;
  int cudaDev; /* -1: a host rank */
} initAllArgs;

static void* initAllThread(void* arg) {
  initAllArgs* a = (initAllArgs*)arg;
  commInitBindWorkerThread(a->cudaDev);
  a->res = commInitRankOnDevice(a->slot, a->nranks, a->id, a->rank, NULL, a->cudaDev);
  return NULL;
}

COMM_API commResult_t commInitAll(comm_t* comms, int ndev, const int* devlist) {
  commLogClearLastWarn();
  if (comms == NULL) {
    WARN("commInitAll: comms is NULL");
    return commInvalidArgument;
  }
  if (ndev < 1) {
    WARN("commInitAll: ndev %d must be at least 1", ndev);
    return commInvalidArgument;
  }
  if (devlist != NULL) {
    for (int i = 0; i < ndev; i++) {
      for (int j = 0; j < i; j++) {
        if (devlist[i] == devlist[j]) {
          WARN("commInitAll: device %d appears twice in devlist", devlist[i]);
          return commInvalidArgument;
        }
      }
    }
  }
  /* A program that uses CUDA (a device is current here) gets rank i on devlist[i] (device i without a list), as
   * NCCL's; a host-only program gets host ranks, and a devlist is then not used. */
  int useDevices = commCudaCurrentDevice() >= 0;
  if (devlist != NULL && !useDevices)
    INFO(COMM_INIT, "commInitAll: no CUDA device is current in this thread: host ranks; devlist is not used");
  commUniqueId id;
  COMMCHECK(bootstrapGetUniqueId(&id));
  initAllArgs* args = NULL;
  pthread_t* threads = NULL;
  commResult_t res = commSuccess;
  COMMCHECK(commCalloc(&args, (size_t)ndev, sizeof(*args)));
  COMMCHECKGOTO(commCalloc(&threads, (size_t)ndev, sizeof(*threads)), res, out);
  int started = 0;
  for (int i = 0; i < ndev; i++) {
    comms[i] = NULL;
    args[i] = (initAllArgs){&comms[i], ndev, i, id, commSuccess, useDevices ? (devlist ? devlist[i] : i) : -1};
    if (pthread_create(&threads[i], NULL, initAllThread, &args[i]) != 0) {
      WARN("commInitAll: could not start thread %d", i);
      res = commSystemError;
      break;
    }
    started++;
  }
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
  for (int i = 0; i < started; i++)
    if (args[i].res != commSuccess && res == commSuccess) res = args[i].res;
  if (started < ndev && res == commSuccess) res = commSystemError;
  if (res != commSuccess) {
    for (int i = 0; i < ndev; i++) {
      if (comms[i] != NULL) commDestroy(comms[i]);
      comms[i] = NULL;
    }
  }
out:
  free(threads);
  free(args);
  return res;
}
