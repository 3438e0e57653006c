/* The built-in Socket network plugin's internals, shared by transports/net/socket/net_socket.c (devices, requests,
 * the data path, helper threads) and transports/net/socket/net_socket_conn.c (listen, connect, accept, pairing,
 * close). The wire protocol is described at the top of net_socket.c. SPDX-License-Identifier: Apache-2.0 */
#ifndef COMM_NET_SOCKET_INTERNAL_H_
#define COMM_NET_SOCKET_INTERNAL_H_

#include <pthread.h>
#include <stdint.h>

#include "comm_net.h"
#include "socket.h"


#define SOCK_MAX_DATA 16
#define SOCK_PIECE_ALIGN (64 * 1024)
#define SOCK_MAX_REQS COMM_NET_MAX_REQUESTS
#define SOCK_HELLO_MAGIC_MASK 0xffffffffu
#define SOCK_MAX_PENDING (2 * (SOCK_MAX_DATA + 1))
#define SOCK_CONNECT_MS 30000
#define SOCK_HDR_INLINE (1ull << 63)
/* Paired connections: after this header, the payload and everything that follows travel on the other of
 * the two control sockets (shared <-> private) until the next switch. */
#define SOCK_HDR_SWITCH (1ull << 62)
#define SOCK_STAGE_BYTES 4096

typedef struct {
  commSockAddr addr;
  uint64_t magic;
} sockHandle;

typedef struct {
  uint32_t magic;
  uint16_t index; /* 0: control, 1..count: data; SOCK_HELLO_PAIRED on a shared control socket */
  uint16_t count; /* number of data sockets */
} sockHello;
#define SOCK_HELLO_PAIRED 0x8000u

/* A control socket shared by a send and a receive connection (see "Paired connections"). */
#define SOCK_SHARED_DEAD (-2) /* the acceptor's listener closed before the socket arrived */
typedef struct {
  int fd;   /* atomic: -1 until the acceptor's listener received it; SOCK_SHARED_DEAD if it never will */
  int refs; /* atomic: connections (or the listener, for the receive one to come) holding it */
} sockShared;

_Static_assert(sizeof(sockHandle) <= COMM_NET_HANDLE_MAXSIZE, "socket handle too large");
_Static_assert(sizeof(sockHello) == 8, "hello must be 8 bytes");

struct sockComm;

typedef struct {
  struct sockComm* comm;
  int used;
  int isSend;
  char* data;
  size_t cap;     /* receive: capacity posted */
  uint64_t size;  /* message size (send: given; receive: from the header) */
  uint64_t hdr;   /* the header on the wire: size, | SOCK_HDR_INLINE when the payload follows inline */
  int isInline;   /* payload on the control socket (decided by the sender) */
  int started;    /* its control part has begun: the sockets below are fixed */
  int hdrSock;    /* paired: which control socket the header is on (0 shared, 1 private) */
  int paySock;    /* ... and the inline payload */
  size_t ctrlOff; /* bytes of header + inline payload moved on the control socket */
  int ctrlDone;   /* header (and inline payload) moved, pieces queued */
  int pending;    /* pieces not finished by the helper threads (atomic) */
  int err;        /* errno of a failed piece, -1 for EOF (atomic) */
} sockReq;

typedef struct {
  int fd;
  char* buf;
  size_t len;
  sockReq* req;
} sockTask;

typedef struct {
  struct sockComm* comm;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  sockTask* queue;
  int cap, head, count;
  int stop;
  int started;
} sockThread;

typedef struct sockComm {
  int isSend;
  int dev;            /* the device (interface) it was made on: helper threads run near it */
  int ctrlFd;         /* headers (and inline payloads); paired: the shared socket, -1 on an acceptor's send
                        * connection until it arrives */
  sockShared* shared; /* the shared socket of a paired connection, else NULL */
  int privFd;         /* paired: the connection's own control socket, for bigger inline payloads; else -1 */
  size_t pairInline;  /* paired: inline payloads up to this size go on the shared socket */
  int nData;
  int dataFds[SOCK_MAX_DATA];
  char peerStr[96];
  int nThreads;
  int threadsStarted;
  sockThread threads[SOCK_MAX_DATA];
  sockReq reqs[SOCK_MAX_REQS];
  uint64_t posted;  /* requests posted so far */
  uint64_t ctrlSeq; /* requests whose control part is done */
  uint64_t largeSeq;
  size_t inlineBytes;
  int ctrlErr; /* sticky error of the control socket: errno, -1 for EOF */
  /* Receiver: bytes read from the control socket ahead of the request that needs them, so that a small
   * message (header and inline payload) costs one recv() instead of two. */
  char* stage[2]; /* per control socket: 0 the (shared) control socket, 1 the private one when paired */
  size_t stageOff[2], stageLen[2];
  int mode; /* paired: the control socket the next header goes on / comes from (0 or 1) */
} sockComm;

typedef struct {
  int fd;
  size_t off;
  sockHello hello;
  commSockAddr addr;
} sockPending;

typedef struct {
  int fd;
  uint32_t magic;
  commSockAddr addr;
  sockPending pending[SOCK_MAX_PENDING];
  int nPending;
  int fds[SOCK_MAX_DATA + 1]; /* by hello index; -1 until arrived */
  commSockAddr fdAddr;        /* the control socket's remote address */
  int count;                  /* data sockets announced (-1: not known yet) */
  int nGot;
  /* Paired: the connection to accept shares a socket with a send connection (pairShared->fd): the
   * connector made it; on the acceptor's listener it arrives with the PAIRED bit and is published there.
   * fds[0] is still the connection's own (private) control socket. The reference passes to the accepted
   * comm. */
  sockShared* pairShared;
  int pairExpect; /* acceptor: the control socket must come with the PAIRED bit */
  int dev;
} sockListen;

/* net_socket.c: the devices (one per usable interface; device 0 is the bootstrap's interface). */
#define SOCK_MAX_DEVS 16
extern int sockInitDone;
extern int sockNDevs;
extern commSockAddr sockIfAddrs[SOCK_MAX_DEVS];
/* Drop this side's reference on a shared control socket (the send side also ends its direction). */
void sockSharedRelease(sockShared* sh, int isSend);
void sockTune(int fd);
/* Helper threads and data sockets per connection (COMM_SOCKET_NTHREADS, COMM_NSOCKS_PERTHREAD). */
void sockConfig(int* nThreads, int* nSocksPerThread);
commResult_t sockNewComm(int isSend, int nData, sockComm** out);
void sockFreeComm(sockComm* c);

/* net_socket_conn.c */
commResult_t sockListenFn(int dev, void* handle, void** listenComm);
commResult_t sockConnect(int dev, void* handle, void** sendComm);
commResult_t sockConnectPaired(int dev, void* handle, void* pairListen, void** sendComm);
commResult_t sockAccept(void* listenComm, void** recvComm);
commResult_t sockCloseSend(void* sendComm);
commResult_t sockCloseRecv(void* recvComm);
commResult_t sockCloseListen(void* listenComm);

#endif
