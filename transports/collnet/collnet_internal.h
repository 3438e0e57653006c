/* Inside the collnet transport (transports/collnet/): the plugin loader, the lanes (FIFO pairs to a group) and
 * the per-communicator state. */
#ifndef COMM_COLLNET_INTERNAL_H_
#define COMM_COLLNET_INTERNAL_H_

#include <pthread.h>
#include "comm_collnet.h"
#include "comm_limits.h"
#include "transport.h"

/* collnet_plugin.c: the process's collnet plugin (loaded on first use, shared, counted): COMM_AGGD's
 * aggregation service plugin, else the library of COMM_COLLNET_PLUGIN, else COMM_NET_PLUGIN's (NCCL_NET_PLUGIN's)
 * library, exporting commCollNetPlugin_v1 or NCCL's ncclCollNetPlugin_v11.._v8. NULL with the reason in why
 * (no library named, it exports no collnet, it cannot be loaded). */
const commCollNet_t* commCollNetAcquire(char* why, size_t whyLen, char* source, size_t sourceLen);
void commCollNetRelease(void);

/* A lane: one group in the network (its own collComm, so that its operations are paired across members in
 * the order one thread posts them) and the FIFO pair a member's executor fills and drains. Lane 0 serves host
 * buffers (the host executor progresses it); lane 1, on GPU-bound communicators, device buffers: its FIFOs are
 * in pinned host memory the GPU maps, the kernel fills and drains them, the collnet proxy thread moves them. */
enum { CN_LANE_HOST = 0, CN_LANE_DEVICE = 1, CN_LANES = 2 };
typedef struct commCollNetLane {
  void* listenComm;
  void* collComm;
  int onDevice;
  int channel;
  commConn* send;            /* the executor fills its slots ... */
  commConn* recv;            /* ... and drains the results from this one */
  char *sendArea, *recvArea; /* ctrl page, then nSlots x slotBytes of slots (host addresses) */
  void *sendDev, *recvDev;   /* the device lane's areas as the kernel addresses them */
  void *sendMh, *recvMh;
  uint64_t posted;    /* send slots whose operations are all posted */
  uint64_t completed; /* slots whose results are in (in order) */
  int nSubPosted;     /* operations of slot `posted` posted so far */
  size_t subBytes;    /* most bytes of one operation (the plugin's maxCollBytes, 16-byte multiple) */
  int maxSub;         /* operations per slot at most */
  void** reqs;        /* [nSlots][maxSub]: outstanding requests, NULL when done */
  int* nSub;          /* [nSlots]: operations of each slot */
  size_t* result;     /* [nSlots]: bytes of each slot's result (collnet_lane.c's slotPlan) */
  int failed;         /* commResult_t of the first failure */
  char members[96];   /* the group's ranks in member (node) order, for WARNs: a plugin names members by index */
} commCollNetLane;

typedef struct {
  commCollNetLane lane[CN_LANES];
} commCollNetChan;

struct commCollNetState {
  struct commComm* comm;
  const commCollNet_t* plugin;
  void* ctx;
  int dev;
  commCollNetProperties_t props;
  int nChannels;
  commCollNetChan chan[COMM_MAX_CHANNELS];
  /* The device lanes' proxy thread (collnet_dev.c). */
  pthread_t proxy;
  int proxyStarted, proxyStop;
  int64_t kickNs;            /* the last launch from this process */
  volatile uint32_t* busy;   /* [COMM_MAX_CHANNELS] words kernels using these lanes set while they run */
  uint32_t* busyDev;         /* the same, as kernels address them */
  pthread_mutex_t proxyLock; /* the proxy's passes against teardown */
};

/* collnet_lane.c. Make a lane's FIFOs and registrations once its group is formed (why: the reason of a
 * failure); free everything of a lane; post and retire what it can without waiting. */
commResult_t commCollNetLaneMake(struct commComm* comm, struct commCollNetState* st, commCollNetLane* l, int channel,
                                 int onDevice, char* why, size_t whyLen);
void commCollNetLaneFree(struct commComm* comm, struct commCollNetState* st, commCollNetLane* l);
commResult_t commCollNetLaneProgress(struct commComm* comm, commCollNetLane* l);

/* collnet_dev.c: start the device lanes' proxy thread (once), stop it (before the lanes are freed). */
commResult_t commCollNetProxyStart(struct commCollNetState* st);
void commCollNetProxyStop(struct commCollNetState* st);

#endif
