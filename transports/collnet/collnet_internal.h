/* Inside the collnet transport (transports/collnet/): the plugin loader and the per-communicator state. */
#ifndef COMM_COLLNET_INTERNAL_H_
#define COMM_COLLNET_INTERNAL_H_

#include "comm_collnet.h"
#include "comm_limits.h"
#include "transport.h"

/* collnet_plugin.c: the process's collnet plugin (loaded on first use, shared, counted): COMM_AGGD's
 * aggregation service plugin, else the library of COMM_COLLNET_PLUGIN, else COMM_NET_PLUGIN's (NCCL_NET_PLUGIN's)
 * library, exporting commCollNetPlugin_v1 or NCCL's ncclCollNetPlugin_v11.._v8. NULL with the reason in why
 * (no library named, it exports no collnet, it cannot be loaded). */
const commCollNet_t* commCollNetAcquire(char* why, size_t whyLen, char* source, size_t sourceLen);
void commCollNetRelease(void);

/* One channel's group at a member. */
typedef struct commCollNetChan {
  void* listenComm;
  void* collComm;
  commConn* send; /* the executor fills its slots ... */
  commConn* recv; /* ... and drains the results from this one */
  commFifoCtrl sendCtrl, recvCtrl;
  char *sendSlots, *recvSlots; /* nSlots x slotBytes each, registered */
  void *sendMh, *recvMh;
  uint64_t posted;    /* send slots whose operations are all posted */
  uint64_t completed; /* slots whose results are in (in order) */
  int nSubPosted;     /* operations of slot `posted` posted so far */
  size_t subBytes;    /* most bytes of one operation (the plugin's maxCollBytes, 16-byte multiple) */
  int maxSub;         /* operations per slot at most */
  void** reqs;        /* [nSlots][maxSub]: outstanding requests, NULL when done */
  int* nSub;          /* [nSlots]: operations of each slot */
  int failed;         /* commResult_t of the first failure */
} commCollNetChan;

struct commCollNetState {
  const commCollNet_t* plugin;
  void* ctx;
  int dev;
  commCollNetProperties_t props;
  int nChannels;
  commCollNetChan chan[COMM_MAX_CHANNELS];
};

#endif
