/* The P2P transport: device-buffer connections between ranks of one host, for the CUDA executor.
 *
 * The receiver's FIFO (head, sizes, slots) is in the receiver's device memory; the sender's block (tail)
 * in the sender's, so each side polls only its own memory and writes the other's. Ranks of one process
 * use each other's pointers directly (peer access is enabled when their GPUs differ; several ranks may
 * share one GPU); ranks of different processes open each other's blocks through CUDA IPC handles carried
 * in the connect messages ("same process" is a random per-process nonce, not the pid, which containers
 * may share). Each side also keeps its position (slots posted or drained) in its own block. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "communicator.h"
#include "cuda_util.h"
#include "debug.h"
#include "dev_conn.h"
#include "devmem.h"
#include "transport.h"
#include "utils.h"

/* Block layouts (bytes). Receiver: head, its position, sizes, the Simple slots, then the LL slots. Sender:
 * tail, position. */
#define P2P_HEAD_OFF 0
#define P2P_POS_OFF 64
#define P2P_SIZES_OFF 128
#define P2P_SLOTS_OFF 256
#define P2P_TAIL_OFF 0
#define P2P_SEND_BYTES 128

typedef struct {
  int32_t pid;
  int32_t dev;
  uint64_t hostHash;
  uint64_t processNonce;     /* random per process: "same process" without trusting pids (containers) */
  uint64_t ptr;              /* the block, in the owner's address space */
  cudaIpcMemHandle_t handle; /* the block, for another process */
} p2pInfo;

typedef struct {
  int localDev; /* this side's GPU */
  int peerDev;  /* the other side's GPU (same host) */
  int peerSameProcess;
  char* local;   /* this side's block */
  char* remote;  /* the other side's block, as this process addresses it */
  int remoteIpc; /* remote came from cudaIpcOpenMemHandle */
} p2pState;

static pthread_once_t nonceOnce = PTHREAD_ONCE_INIT;
static uint64_t processNonce;
static void makeNonce(void) {
  uint64_t v = 0;
  FILE* f = fopen("/dev/urandom", "rb");
  if (f == NULL || fread(&v, sizeof(v), 1, f) != 1) v = 0;
  if (f) fclose(f);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  processNonce = v ^ ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
}

/* Zero a new block and wait for it, on a stream of its own: the legacy stream would be ordered with
 * nothing the kernels run on (and may not be used while a caller captures a graph). */
static cudaError_t zeroBlock(void* p, size_t bytes) {
  cudaStream_t st;
  cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  if (e != cudaSuccess) return e;
  e = cudaMemsetAsync(p, 0, bytes, st);
  if (e == cudaSuccess) e = cudaStreamSynchronize(st);
  cudaStreamDestroy(st);
  return e;
}

static commResult_t allocBlock(commComm* comm, commConn* conn, size_t bytes, void* infoOut) {
  p2pState* st = NULL;
  COMMCHECK(commCalloc(&st, 1, sizeof(*st)));
  conn->priv = st;
  st->localDev = comm->cudaDev;
  st->peerDev = -1;
  commCudaDevGuard g;
  COMMCHECK(commCudaDevEnter(comm->cudaDev, &g));
  pthread_once(&nonceOnce, makeNonce);
  /* Connections are made on first use, possibly while the caller captures a graph. */
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  commResult_t res = commSuccess;
  cudaError_t e = cudaMalloc((void**)&st->local, bytes);
  if (e != cudaSuccess) {
    res = commCudaFail("cudaMalloc of a FIFO", e);
    goto out;
  }
  if ((e = zeroBlock(st->local, bytes)) != cudaSuccess) {
    res = commCudaFail("zeroing a FIFO", e);
    goto out;
  }
  p2pInfo info;
  memset(&info, 0, sizeof(info));
  info.pid = (int32_t)getpid();
  info.dev = comm->cudaDev;
  info.hostHash = comm->peers[comm->rank].hostHash;
  info.processNonce = processNonce;
  info.ptr = (uint64_t)(uintptr_t)st->local;
  if ((e = cudaIpcGetMemHandle(&info.handle, st->local)) != cudaSuccess) {
    /* Ranks of this process can still connect; another process cannot. */
    INFO(COMM_INIT, "P2P transport: no IPC handle for a FIFO (%s); only ranks of this process can use it",
         cudaGetErrorString(e));
    cudaGetLastError();
    memset(&info.handle, 0, sizeof(info.handle));
  }
  memcpy(infoOut, &info, sizeof(info));
out:
  cudaThreadExchangeStreamCaptureMode(&mode);
  commCudaDevLeave(comm->cudaDev, &g);
  return res;
}

/* Address the peer's block described by info. */
static commResult_t openRemote(commComm* comm, commConn* conn, const void* infoIn) {
  p2pState* st = conn->priv;
  p2pInfo info;
  memcpy(&info, infoIn, sizeof(info));
  st->peerDev = info.dev;
  st->peerSameProcess = info.processNonce == processNonce && info.pid == (int32_t)getpid();
  commCudaDevGuard g;
  COMMCHECK(commCudaDevEnter(comm->cudaDev, &g));
  commResult_t res = commSuccess;
  cudaError_t e;
  if (st->peerSameProcess) {
    st->remote = (char*)(uintptr_t)info.ptr;
    if (info.dev != comm->cudaDev) {
      int can = 0;
      cudaDeviceCanAccessPeer(&can, comm->cudaDev, info.dev);
      if (!can) {
        WARN("P2P transport: GPU %d cannot access GPU %d directly (rank %d, channel %d)", comm->cudaDev, info.dev,
             conn->peer, conn->channel);
        res = commSystemError;
        goto out;
      }
      e = cudaDeviceEnablePeerAccess(info.dev, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
      else if (e != cudaSuccess) {
        res = commCudaFail("cudaDeviceEnablePeerAccess", e);
        goto out;
      }
    }
  } else {
    e = cudaIpcOpenMemHandle((void**)&st->remote, info.handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      res = commCudaFail("cudaIpcOpenMemHandle (the peer rank runs in another process)", e);
      goto out;
    }
    st->remoteIpc = 1;
  }
out:
  commCudaDevLeave(comm->cudaDev, &g);
  return res;
}

static commResult_t p2pRecvSetup(commComm* comm, commConn* conn, void* info) {
  conn->slotBytes = comm->slotBytes;
  conn->nSlots = comm->nSlots;
  /* The Simple slots, then the LL slots. */
  return allocBlock(comm, conn, P2P_SLOTS_OFF + (size_t)comm->nSlots * (comm->slotBytes + COMM_DEV_LL_SLOT_BYTES),
                    info);
}

static commResult_t p2pSendConnect(commComm* comm, commConn* conn, const void* info, void* ack) {
  conn->slotBytes = comm->slotBytes;
  conn->nSlots = comm->nSlots;
  COMMCHECK(allocBlock(comm, conn, P2P_SEND_BYTES, ack));
  return openRemote(comm, conn, info);
}

static commResult_t p2pRecvConnect(commComm* comm, commConn* conn, const void* ack) {
  return openRemote(comm, conn, ack);
}

static commResult_t p2pClose(commComm* comm, commConn* conn) {
  p2pState* st = conn->priv;
  if (st == NULL) return commSuccess;
  commCudaDevGuard g;
  if (commCudaDevEnter(comm->cudaDev, &g) == commSuccess) {
    if (st->remoteIpc && st->remote) cudaIpcCloseMemHandle(st->remote);
    if (st->local) cudaFree(st->local);
    commCudaDevLeave(comm->cudaDev, &g);
  }
  free(st);
  conn->priv = NULL;
  return commSuccess;
}

static commResult_t p2pDevConn(const commConn* conn, commDevConn* out) {
  const p2pState* st = conn->priv;
  if (st == NULL || st->local == NULL || st->remote == NULL) {
    WARN("P2P transport: connection %s rank %d on channel %d is not connected", conn->isSend ? "to" : "from",
         conn->peer, conn->channel);
    return commInternalError;
  }
  memset(out, 0, sizeof(*out)); /* failed: NULL (a dead peer: the kernel's timeout) */
  char* recvBlock = conn->isSend ? st->remote : st->local;
  char* sendBlock = conn->isSend ? st->local : st->remote;
  out->slots = recvBlock + P2P_SLOTS_OFF;
  out->llSlots = out->slots + (size_t)conn->nSlots * conn->slotBytes;
  out->head = (uint64_t*)(recvBlock + P2P_HEAD_OFF);
  out->sizes = (uint64_t*)(recvBlock + P2P_SIZES_OFF);
  out->tail = (uint64_t*)(sendBlock + P2P_TAIL_OFF);
  out->pos = (uint64_t*)(st->local + P2P_POS_OFF);
  /* Both ends on one GPU in one process: GPU-scope fences order the FIFO. Another process may have
   * another device numbering, so it gets system scope, as another GPU does. */
  out->sysScope = !st->peerSameProcess || st->peerDev != st->localDev;
  return commSuccess;
}

const commTransport commTransportP2p = {
    .name = "P2P",
    .recvSetup = p2pRecvSetup,
    .sendConnect = p2pSendConnect,
    .recvConnect = p2pRecvConnect,
    .close = p2pClose,
    .devConn = p2pDevConn,
};
