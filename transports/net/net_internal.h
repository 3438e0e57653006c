/* The net transport's state, shared by transports/net/net.c (plugins, connections, the host executor's proxy)
 * and transports/net/net_dev.c (device-buffer connections and the proxy thread that moves them). */
#ifndef COMM_NET_INTERNAL_H_
#define COMM_NET_INTERNAL_H_

#include <pthread.h>
#include <stdint.h>

#include "comm_net.h"
#include "check.h"
#include "communicator.h"
#include "dev_conn.h"
#include "devmem.h"
#include "transport.h"

#define NET_MAX_DEVS 64

struct commNetState {
  const commNet_t* net;
  int nDevs; /* the plugin's devices (at most NET_MAX_DEVS are used) */
  char devName[NET_MAX_DEVS][64];
  int fromLibrary; /* holds a reference on the loaded plugin library */
  /* Proxy thread. listLock guards comm->netConns against the proxy (the owner thread reads it freely). */
  struct commComm* comm;
  pthread_mutex_t listLock;
  pthread_t proxy;
  int proxyStarted;
  int proxyStop;            /* atomic */
  pthread_mutex_t wakeLock; /* guards wanted, proxyStop's wake-up */
  pthread_cond_t wake;
  int wanted;         /* the executor left sends pending: the proxy should run */
  uint64_t execCalls; /* progress() calls from the executor (atomic, relaxed) */
  /* Device-buffer connections (net_dev.c): their own list (under listLock) and proxy thread, which moves
   * them all the time a kernel of this comm that uses them runs (its blocks set busy words) and a while
   * after each launch (devKickNs). */
  commConn** devConns;
  int nDevConns, devConnsCap;
  pthread_t devProxy;
  int devProxyStarted;
  int devProxyStop;           /* atomic */
  volatile uint32_t* devBusy; /* [COMM_MAX_CHANNELS] in mapped host memory: block c of a running kernel */
  uint32_t* devBusyDev;       /* the same words, as kernels address them */
  int64_t devKickNs;          /* atomic: when the owner last launched a plan using device connections */
};

typedef struct {
  const commNet_t* net;
  int dev;
  void* listenComm;
  void* sendComm;
  void* recvComm;
  void* mhandle;
  void* mem;            /* the FIFO: ctrl page, then slots (onDevice: the ctrl page alone) */
  void* memDev;         /* onDevice: the same memory as the kernel addresses it (mapped, pinned) */
  void* slotMem;        /* onDevice: the slots, in device memory (slotsOnDevice) or in mapped, pinned host memory */
  void* slotMemDev;     /* onDevice: the slots as the kernel addresses them */
  int slotsOnDevice;    /* GPUDirect RDMA: the plugin reads and writes the slots in GPU memory */
  void* slotMemRefused; /* device slots the plugin would not register: freed at close, not at once (a
                         * cudaFree waits for every kernel on the GPU, and a peer's may be waiting for us) */
  int onDevice;         /* a device-buffer connection: moved by the device proxy thread only */
  int cudaDev;
  void* reqs[COMM_NSLOTS];
  uint64_t posted; /* isend/irecv posted */
  uint64_t done;   /* completed, in order */
  uint64_t bytes;  /* moved by the completed requests (for the message of a failed connection) */
  int failed;
  int reported; /* onDevice: the failure was reported (device proxy thread) */
  int busy;     /* try-lock between the executor and the proxy thread */
} netPriv;

/* net.c */
int netFailed(const netPriv* p);
/* The connection lists the proxy threads walk: add (growing it) and remove, under st->listLock (when st). */
commResult_t netListAdd(struct commNetState* st, commConn*** list, int* n, int* cap, commConn* conn);
void netListRemove(struct commNetState* st, commConn** list, int* n, commConn* conn);
/* Bind the calling proxy thread near the NIC this rank's traffic leaves through (or its device). */
void netBindProxy(struct commComm* comm, const char* what);
/* Post sends for the slots filled up to head / receives on every free slot, and retire completed requests
 * in order (tail / sizes and head). */
commResult_t netProgressSend(commConn* conn, netPriv* p);
commResult_t netProgressRecv(commConn* conn, netPriv* p);

/* net_dev.c */
commResult_t netDevRegister(struct commComm* comm, commConn* conn);
void netDevUnregister(struct commComm* comm, commConn* conn);
/* Stop the device proxy thread and free its words (commNetFinalize, after every connection closed). */
void netDevStop(struct commNetState* st);
commResult_t netDevConn(const commConn* conn, struct commDevConn* out);
/* A device connection's FIFO: the ctrl page in mapped host memory; the slots in GPU memory when the plugin
 * can reach it (GPUDirect RDMA, COMM_NET_GDR), else in mapped host memory too. Sets conn->ctrl, conn->slots. */
commResult_t netDevSetup(struct commComm* comm, commConn* conn, netPriv* p, size_t ctrlBytes, size_t slotBytes);
/* Register the slots with the plugin on netComm; slots in GPU memory the plugin refuses move to host memory
 * (with a WARN that GPUDirect RDMA is off and why). */
commResult_t netDevRegMr(commConn* conn, netPriv* p, void* netComm);
/* Slot i received `size` bytes into GPU memory: make the NIC's writes visible to the GPU (iflush). */
commResult_t netDevFlush(commConn* conn, netPriv* p, int i, size_t size);
void netDevFreeMem(netPriv* p);

/* The net transport's table operations beyond connections (transport.h): the network plugin of a
 * communicator (net_plugin.c), the host proxy's kick (net.c), the device proxy's words and kick (net_dev.c). */
commResult_t commNetInit(struct commComm* comm);
commResult_t commNetFinalize(struct commComm* comm);
void commNetKickProxy(struct commComm* comm);
uint32_t* commNetDevBusyWords(struct commComm* comm);
void commNetDevKick(struct commComm* comm);

#endif
