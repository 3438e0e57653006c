/*
 * libcomm network plugin ABI. A network (TCP sockets, InfiniBand verbs, a vendor fabric) implements this
 * versioned table of functions; libcomm moves FIFO slots across it. The built-in socket transport uses
 * this same interface. A plugin library exports a symbol named COMM_NET_PLUGIN_SYMBOL.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_NET_H_
#define COMM_NET_H_

#include <stddef.h>
#include <stdint.h>
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version 2 adds connectPaired. libcomm loads a plugin exporting commNetPlugin_v2, else commNetPlugin_v1
 * (a version-1 table: connect is used for every connection). */
#define COMM_NET_PLUGIN_VERSION 2
#define COMM_NET_PLUGIN_SYMBOL "commNetPlugin_v2"
#define COMM_NET_PLUGIN_SYMBOL_V1 "commNetPlugin_v1"
#define COMM_NET_HANDLE_MAXSIZE 128
#define COMM_NET_MAX_REQUESTS 32

#define COMM_PTR_HOST 0x1
#define COMM_PTR_CUDA 0x2

typedef enum { COMM_NET_LOG_WARN = 1, COMM_NET_LOG_INFO = 2, COMM_NET_LOG_TRACE = 3 } commNetLogLevel_t;
typedef void (*commNetLogger_t)(commNetLogLevel_t level, const char* file, int line, const char* fmt, ...);

typedef struct {
  char* name;     /* device name, e.g. "eth0" or "mlx5_0" */
  char* pciPath;  /* sysfs PCI path, or NULL */
  uint64_t guid;  /* unique id of the device */
  int ptrSupport; /* COMM_PTR_HOST | COMM_PTR_CUDA */
  int speedMbps;  /* link speed */
  int port;
  float latencyUs; /* 0: unknown */
  int maxComms;
  int maxRecvs; /* grouped receives supported by irecv (1: none) */
  size_t maxMessageBytes;
} commNetProperties_t;

/* Every call returns commSuccess or an error; a call that cannot finish now returns commSuccess with its
 * output (comm or request) set to NULL, and the caller calls it again later. */
typedef struct {
  const char* name;
  int version; /* 1 (a table exported as COMM_NET_PLUGIN_SYMBOL_V1 with this header's version is read as
                * the current layout) */
  commResult_t (*init)(commNetLogger_t logger);
  commResult_t (*devices)(int* ndev);
  commResult_t (*getProperties)(int dev, commNetProperties_t* props);
  /* Create a listening endpoint; fill `handle` (<= COMM_NET_HANDLE_MAXSIZE bytes) to give the peer. */
  commResult_t (*listen)(int dev, void* handle, void** listenComm);
  /* Connect to a peer's handle. *sendComm stays NULL until the connection is established. */
  commResult_t (*connect)(int dev, void* handle, void** sendComm);
  /* Accept one connection. *recvComm stays NULL until one arrives. */
  commResult_t (*accept)(void* listenComm, void** recvComm);
  commResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  commResult_t (*deregMr)(void* comm, void* mhandle);
  /* Post a send. *request stays NULL if it cannot be posted now. */
  commResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  /* Post n receives (n <= maxRecvs). sizes[i] is the capacity of data[i]. */
  commResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request);
  /* Make received data visible to the GPU (no-op for host memory). */
  commResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  /* *done becomes 1 when the request completed; sizes[i] then holds the received bytes. A completed
   * request is freed by the plugin. */
  commResult_t (*test)(void* request, int* done, size_t* sizes);
  commResult_t (*closeSend)(void* sendComm);
  commResult_t (*closeRecv)(void* recvComm);
  commResult_t (*closeListen)(void* listenComm);
} commNet_v1_t;

typedef struct {
  const char* name;
  int version; /* COMM_NET_PLUGIN_VERSION */
  commResult_t (*init)(commNetLogger_t logger);
  commResult_t (*devices)(int* ndev);
  commResult_t (*getProperties)(int dev, commNetProperties_t* props);
  commResult_t (*listen)(int dev, void* handle, void** listenComm);
  commResult_t (*connect)(int dev, void* handle, void** sendComm);
  commResult_t (*accept)(void* listenComm, void** recvComm);
  commResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  commResult_t (*deregMr)(void* comm, void* mhandle);
  commResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  commResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request);
  commResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  commResult_t (*test)(void* request, int* done, size_t* sizes);
  commResult_t (*closeSend)(void* sendComm);
  commResult_t (*closeRecv)(void* recvComm);
  commResult_t (*closeListen)(void* listenComm);
  /* Optional (NULL: connect is used). Connect to a peer's handle, as connect() does, for a send connection
   * that has a partner: pairListen is this process's own listenComm (from listen(), not yet accepted) for
   * the receive connection from the same peer on the same channel, and the peer makes the mirror call
   * (its send connection to pairListen's handle, paired with the listener `handle` came from) in the same
   * round. A plugin may then carry both directions on shared resources (the socket plugin sends both on
   * one TCP control connection, so acknowledgements ride on the data going the other way); the accept()
   * of pairListen returns a receive connection that uses them; libcomm calls it only after connectPaired
   * (listen, then connect/connectPaired, then accept, in every round). It must not wait for the peer's
   * half: a peer may make its mirror call only after its other connections. Both sides pair only when
   * each makes both directions in the round (libcomm exchanges that with the handles). */
  commResult_t (*connectPaired)(int dev, void* handle, void* pairListen, void** sendComm);
} commNet_v2_t;

typedef commNet_v2_t commNet_t;

#ifdef __cplusplus
}
#endif
#endif /* COMM_NET_H_ */
