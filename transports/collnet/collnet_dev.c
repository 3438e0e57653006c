/* The collnet device lanes' proxy thread (collnet_internal.h). A kernel fills a device lane's send slots and
 * drains its receive slots in pinned host memory; nothing on the host waits for the kernel, so a thread per
 * communicator posts and retires the lanes' operations with the plugin (commCollNetLaneProgress, the host
 * lane's own code). When to look, as the net transport's device proxy does: while a kernel that uses these
 * lanes runs (each of its blocks sets a word of `busy` from its start to its end; graph replays announce
 * themselves this way), for CN_KICK_NS after each launch from this process (commCollNetDevLaunched), and while
 * operations are still in flight; otherwise every CN_IDLE_US. A lane that fails sets devFailed in its ctrl
 * pages, which a kernel waiting on it turns into commRemoteError instead of its timeout. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "check.h"
#include "collnet_internal.h"
#include "communicator.h"
#include "debug.h"
#include "devmem.h"
#include "utils.h"

#define CN_IDLE_US 50
#define CN_KICK_NS (5ll * 1000000)

static int anyBusy(const struct commCollNetState* st) {
  for (int c = 0; c < COMM_MAX_CHANNELS; c++)
    if (st->busy[c]) return 1;
  return 0;
}

/* One pass over the device lanes; 1 when operations are still in flight. */
static int proxyPass(struct commCollNetState* st) {
  int inFlight = 0;
  pthread_mutex_lock(&st->proxyLock);
  for (int c = 0; c < st->nChannels; c++) {
    commCollNetLane* l = &st->chan[c].lane[CN_LANE_DEVICE];
    if (!l->collComm || l->failed) continue;
    (void)commCollNetLaneProgress(st->comm, l); /* a failure is in devFailed for the kernel, and WARNed */
    if (l->completed < COMM_LOAD_ACQ(&l->send->ctrl->head)) inFlight = 1;
  }
  pthread_mutex_unlock(&st->proxyLock);
  return inFlight;
}

static void* proxyMain(void* arg) {
  struct commCollNetState* st = arg;
  commLogSetRank(st->comm->rank);
  while (!__atomic_load_n(&st->proxyStop, __ATOMIC_ACQUIRE)) {
    int active = anyBusy(st) || commTimeNs() - __atomic_load_n(&st->kickNs, __ATOMIC_ACQUIRE) < CN_KICK_NS;
    int inFlight = proxyPass(st);
    if (active || inFlight) {
      sched_yield();
    } else {
      struct timespec ts = {0, CN_IDLE_US * 1000L};
      nanosleep(&ts, NULL);
    }
  }
  return NULL;
}

commResult_t commCollNetProxyStart(struct commCollNetState* st) {
  if (st->proxyStarted) return commSuccess;
  void* host = NULL;
  void* dev = NULL;
  COMMCHECK(commDevHostAlloc(st->comm->cudaDev, COMM_MAX_CHANNELS * sizeof(uint32_t), &host, &dev));
  st->busy = (volatile uint32_t*)host;
  st->busyDev = (uint32_t*)dev;
  pthread_mutex_init(&st->proxyLock, NULL);
  int err = pthread_create(&st->proxy, NULL, proxyMain, st);
  if (err) {
    WARN("COLLNET : cannot start the device lanes' proxy thread: %s", strerror(err));
    pthread_mutex_destroy(&st->proxyLock);
    commDevHostFree(st->comm->cudaDev, host);
    st->busy = NULL;
    st->busyDev = NULL;
    return commSystemError;
  }
  st->proxyStarted = 1;
  return commSuccess;
}

void commCollNetProxyStop(struct commCollNetState* st) {
  if (!st->proxyStarted) return;
  __atomic_store_n(&st->proxyStop, 1, __ATOMIC_RELEASE);
  pthread_join(st->proxy, NULL);
  pthread_mutex_destroy(&st->proxyLock);
  commDevHostFree(st->comm->cudaDev, (void*)st->busy);
  st->busy = NULL;
  st->busyDev = NULL;
  st->proxyStarted = 0;
}

void commCollNetDevLaunched(struct commComm* comm) {
  struct commCollNetState* st = comm->collnetState;
  if (st && st->proxyStarted) __atomic_store_n(&st->kickNs, commTimeNs(), __ATOMIC_RELEASE);
}
