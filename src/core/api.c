/* The collective and point-to-point entry points: validate every argument (a clear error and a WARN,
 * nothing touched on bad input), then hand a task to the group layer. */
#include <stdint.h>
#include <string.h>

#include "core.h"
#include "devmem.h"
#include "enqueue.h"
#include "exec_dev.h"
#include "reduce.h"

typedef struct {
  const char* api;
  commFunc_t func;
  int isP2p;
  int isSend;
  int hasOp;
  int hasRoot;
} apiDesc;

static commResult_t checkType(const apiDesc* d, commDataType_t t) {
  if ((int)t < 0 || (int)t >= commNumTypes) {
    WARN("%s: invalid datatype %d", d->api, (int)t);
    return commInvalidArgument;
  }
  return commSuccess;
}

/* Bytes of `elems` elements, or an error if it overflows. */
static commResult_t checkedBytes(const apiDesc* d, size_t elems, size_t mult, size_t eltSize, size_t* out) {
  if (mult != 0 && elems > SIZE_MAX / mult) goto overflow;
  elems *= mult;
  if (eltSize != 0 && elems > (SIZE_MAX / 2) / eltSize) goto overflow;
  *out = elems * eltSize;
  return commSuccess;
overflow:
  WARN("%s: count %zu x %zu elements of %zu bytes overflows the address space", d->api, elems, mult, eltSize);
  return commInvalidArgument;
}

static int rangesOverlap(const void* a, size_t an, const void* b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

/* A buffer the call uses: not NULL; *ordinal gets its CUDA device, or -1 for host memory. */
static commResult_t checkPtr(const apiDesc* d, const void* p, const char* name, size_t bytes, int* ordinal) {
  *ordinal = -1;
  if (bytes == 0) return commSuccess;
  if (p == NULL) {
    WARN("%s: %s is NULL", d->api, name);
    return commInvalidArgument;
  }
  if ((uintptr_t)p > UINTPTR_MAX - bytes) {
    WARN("%s: %s %p plus the %zu bytes the count needs runs past the end of the address space (count too large)",
         d->api, name, p, bytes);
    return commInvalidArgument;
  }
  *ordinal = commDevicePointerOrdinal(p);
  return commSuccess;
}

/* Host or device: both buffers alike, device ones on the communicator's GPU, and a CUDA executor built. */
static commResult_t checkMemory(const apiDesc* d, comm_t comm, const void* sendbuff, int sendDev, const void* recvbuff,
                                int recvDev, int sendUsed, int recvUsed, int* onDevice) {
  *onDevice = 0;
  if (sendUsed && recvUsed && (sendDev >= 0) != (recvDev >= 0)) {
    WARN("%s: sendbuff %p is %s memory but recvbuff %p is %s memory; both must be host or both device", d->api,
         sendbuff, sendDev >= 0 ? "device" : "host", (void*)recvbuff, recvDev >= 0 ? "device" : "host");
    return commInvalidArgument;
  }
  if (sendUsed && recvUsed && sendDev >= 0 && recvDev >= 0 && sendDev != recvDev) {
    WARN("%s: sendbuff %p is on GPU %d but recvbuff %p is on GPU %d", d->api, sendbuff, sendDev, (void*)recvbuff,
         recvDev);
    return commInvalidArgument;
  }
  int dev = sendUsed && sendDev >= 0 ? sendDev : recvUsed && recvDev >= 0 ? recvDev : -1;
  if (dev < 0) return commSuccess;
  if (!commDevAvailable()) {
    WARN("%s: the buffers are device memory, but this libcomm was built without the CUDA executor (no CUDA "
         "toolkit at build time, or a sanitizer build)",
         d->api);
    return commInvalidUsage;
  }
  if (comm->cudaDev < 0) {
    WARN("%s: the buffers are on GPU %d, but the communicator has no GPU: make the GPU current "
         "(cudaSetDevice) before commInitRank",
         d->api, dev);
    return commInvalidUsage;
  }
  if (dev != comm->cudaDev) {
    WARN("%s: the buffers are on GPU %d, but the communicator's GPU is %d", d->api, dev, comm->cudaDev);
    return commInvalidArgument;
  }
  *onDevice = 1;
  return commSuccess;
}

/* Sizes of the buffers as the call uses them on this rank (*bytes: count elements of the datatype). */
static commResult_t callBytes(const apiDesc* d, size_t count, size_t elt, int n, int rank, int root,
                              size_t* sendBytesOut, size_t* recvBytesOut, size_t* bytesOut) {
  size_t sendBytes = 0, recvBytes = 0, bytes = 0;
  COMMCHECK(checkedBytes(d, count, 1, elt, &bytes));
  switch (d->func) {
    case commFuncAllReduce: sendBytes = recvBytes = bytes; break;
    case commFuncBroadcast:
      sendBytes = rank == root ? bytes : 0;
      recvBytes = bytes;
      break;
    case commFuncReduce:
      sendBytes = bytes;
      recvBytes = rank == root ? bytes : 0;
      break;
    case commFuncAllGather:
      sendBytes = bytes;
      COMMCHECK(checkedBytes(d, count, (size_t)n, elt, &recvBytes));
      break;
    case commFuncReduceScatter:
      recvBytes = bytes;
      COMMCHECK(checkedBytes(d, count, (size_t)n, elt, &sendBytes));
      break;
    case commFuncAllToAll:
      COMMCHECK(checkedBytes(d, count, (size_t)n, elt, &sendBytes));
      recvBytes = sendBytes;
      break;
    case commFuncSendRecv:
      if (d->isSend) sendBytes = bytes;
      else recvBytes = bytes;
      break;
    default: return commInternalError;
  }
  *sendBytesOut = sendBytes;
  *recvBytesOut = recvBytes;
  *bytesOut = bytes;
  return commSuccess;
}

/* In-place is allowed only in the exact layout each collective defines (bytes: one rank's part). */
static commResult_t checkInPlace(const apiDesc* d, int rank, size_t bytes, const void* sendbuff, size_t sendBytes,
                                 const void* recvbuff, size_t recvBytes) {
  if (d->isP2p || !rangesOverlap(sendbuff, sendBytes, recvbuff, recvBytes)) return commSuccess;
  const char* expect = NULL;
  int ok;
  switch (d->func) {
    case commFuncAllGather:
      ok = (const char*)sendbuff == (const char*)recvbuff + (size_t)rank * bytes;
      expect = "sendbuff == recvbuff + rank*count";
      break;
    case commFuncReduceScatter:
      ok = (const char*)recvbuff == (const char*)sendbuff + (size_t)rank * bytes;
      expect = "recvbuff == sendbuff + rank*count";
      break;
    case commFuncAllToAll:
      ok = 0;
      expect = "separate buffers (alltoall is not in-place)";
      break;
    default:
      ok = sendbuff == recvbuff;
      expect = "sendbuff == recvbuff";
      break;
  }
  if (!ok) {
    WARN("%s: sendbuff %p and recvbuff %p overlap; in-place needs %s", d->api, sendbuff, (void*)recvbuff, expect);
    return commInvalidArgument;
  }
  return commSuccess;
}

static commResult_t enqueueChecked(const apiDesc* d, const void* sendbuff, void* recvbuff, size_t count,
                                   commDataType_t dtype, commRedOp_t op, int root, comm_t comm, commStream_t stream) {
  commResult_t res = commSuccess;
  COMMCHECKGOTO(checkType(d, dtype), res, out);
  size_t elt = commTypeSize(dtype);
  int n = comm->nRanks, rank = comm->rank;
  commTask task;
  memset(&task, 0, sizeof(task));
  if ((d->hasRoot || d->isP2p) && (root < 0 || root >= n)) {
    WARN("%s: %s %d is out of range [0, %d)", d->api, d->isP2p ? "peer" : "root", root, n);
    res = commInvalidArgument;
    goto out;
  }
  size_t sendBytes = 0, recvBytes = 0, bytes = 0;
  COMMCHECKGOTO(callBytes(d, count, elt, n, rank, root, &sendBytes, &recvBytes, &bytes), res, out);
  int sendDev, recvDev, onDevice;
  COMMCHECKGOTO(checkPtr(d, sendbuff, "sendbuff", sendBytes, &sendDev), res, out);
  if (recvbuff == sendbuff && sendBytes > 0 && recvBytes > 0) recvDev = sendDev; /* in place: asked once */
  else COMMCHECKGOTO(checkPtr(d, recvbuff, "recvbuff", recvBytes, &recvDev), res, out);
  COMMCHECKGOTO(checkMemory(d, comm, sendbuff, sendDev, recvbuff, recvDev, sendBytes > 0, recvBytes > 0, &onDevice),
                res, out);
  if (d->hasOp) COMMCHECKGOTO(commRedOpResolve(comm, op, dtype, onDevice, &task.redop, &task.devScalar), res, out);
  COMMCHECKGOTO(checkInPlace(d, rank, bytes, sendbuff, sendBytes, recvbuff, recvBytes), res, out);
  task.kind = d->isP2p ? (d->isSend ? COMM_TASK_SEND : COMM_TASK_RECV) : COMM_TASK_COLL;
  task.func = d->func;
  task.comm = comm;
  task.sendbuff = sendbuff;
  task.recvbuff = recvbuff;
  task.count = count;
  task.dtype = dtype;
  task.op = op;
  task.root = root;
  task.onDevice = onDevice;
  task.stream = stream;
  /* Every rank numbers its collectives alike, whichever path runs them (the signature carries it). */
  if (!d->isP2p) task.collSeq = __atomic_fetch_add(&comm->collCount, 1, __ATOMIC_RELAXED);
  res = commEnqueue(&task);
out:
  return res;
}

static commResult_t apiCall(const apiDesc* d, const void* sendbuff, void* recvbuff, size_t count, commDataType_t dtype,
                            commRedOp_t op, int root, comm_t comm, commStream_t stream) {
  COMMCHECK(commApiEnter(comm, d->api));
  commResult_t res = enqueueChecked(d, sendbuff, recvbuff, count, dtype, op, root, comm, stream);
  /* Ended by a revoke (commRevoke, from another thread) wherever it waited: the revoke's result. */
  if (res != commSuccess && res != commInProgress && __atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE))
    res = commInvalidUsage;
  commApiLeave(comm);
  return res;
}

COMM_API commResult_t commAllReduce(const void* sendbuff, void* recvbuff, size_t count, commDataType_t datatype,
                                    commRedOp_t op, comm_t comm, commStream_t stream) {
  static const apiDesc d = {"commAllReduce", commFuncAllReduce, 0, 0, 1, 0};
  return apiCall(&d, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

COMM_API commResult_t commBroadcast(const void* sendbuff, void* recvbuff, size_t count, commDataType_t datatype,
                                    int root, comm_t comm, commStream_t stream) {
  static const apiDesc d = {"commBroadcast", commFuncBroadcast, 0, 0, 0, 1};
  return apiCall(&d, sendbuff, recvbuff, count, datatype, commSum, root, comm, stream);
}

COMM_API commResult_t commReduce(const void* sendbuff, void* recvbuff, size_t count, commDataType_t datatype,
                                 commRedOp_t op, int root, comm_t comm, commStream_t stream) {
  static const apiDesc d = {"commReduce", commFuncReduce, 0, 0, 1, 1};
  return apiCall(&d, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

COMM_API commResult_t commAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, commDataType_t datatype,
                                    comm_t comm, commStream_t stream) {
  static const apiDesc d = {"commAllGather", commFuncAllGather, 0, 0, 0, 0};
  return apiCall(&d, sendbuff, recvbuff, sendcount, datatype, commSum, 0, comm, stream);
}

COMM_API commResult_t commReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, commDataType_t datatype,
                                        commRedOp_t op, comm_t comm, commStream_t stream) {
  static const apiDesc d = {"commReduceScatter", commFuncReduceScatter, 0, 0, 1, 0};
  return apiCall(&d, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
}

COMM_API commResult_t commAllToAll(const void* sendbuff, void* recvbuff, size_t count, commDataType_t datatype,
                                   comm_t comm, commStream_t stream) {
  static const apiDesc d = {"commAllToAll", commFuncAllToAll, 0, 0, 0, 0};
  return apiCall(&d, sendbuff, recvbuff, count, datatype, commSum, 0, comm, stream);
}

COMM_API commResult_t commSend(const void* sendbuff, size_t count, commDataType_t datatype, int peer, comm_t comm,
                               commStream_t stream) {
  static const apiDesc d = {"commSend", commFuncSendRecv, 1, 1, 0, 0};
  return apiCall(&d, sendbuff, NULL, count, datatype, commSum, peer, comm, stream);
}

COMM_API commResult_t commRecv(void* recvbuff, size_t count, commDataType_t datatype, int peer, comm_t comm,
                               commStream_t stream) {
  static const apiDesc d = {"commRecv", commFuncSendRecv, 1, 0, 0, 0};
  return apiCall(&d, NULL, recvbuff, count, datatype, commSum, peer, comm, stream);
}

/* Gather and scatter: grouped sends and receives through the root (inside the caller's group, if any). */
static commResult_t rootedExchange(int gather, const void* sendbuff, void* recvbuff, size_t count,
                                   commDataType_t datatype, int root, comm_t comm, commStream_t stream) {
  const char* api = gather ? "commGather" : "commScatter";
  int n = 0, me = 0;
  COMMCHECK(commCount(comm, &n));
  COMMCHECK(commUserRank(comm, &me));
  if (root < 0 || root >= n || (int)datatype < 0 || datatype >= commNumTypes) {
    WARN("%s: root %d of %d ranks, datatype %d", api, root, n, (int)datatype);
    return commInvalidArgument;
  }
  const size_t bytes = count * commTypeSize(datatype);
  COMMCHECK(commGroupStart());
  commResult_t first = commSuccess;
  for (int p = 0; me == root && p < n && first == commSuccess; p++) {
    if (gather) first = commRecv((char*)recvbuff + (size_t)p * bytes, count, datatype, p, comm, stream);
    else first = commSend((const char*)sendbuff + (size_t)p * bytes, count, datatype, p, comm, stream);
  }
  if (first == commSuccess) {
    if (gather) first = commSend(sendbuff, count, datatype, root, comm, stream);
    else first = commRecv(recvbuff, count, datatype, root, comm, stream);
  }
  commResult_t end = commGroupEnd(); /* always, so the group is closed */
  return first != commSuccess ? first : end;
}

COMM_API commResult_t commGather(const void* sendbuff, void* recvbuff, size_t count, commDataType_t datatype, int root,
                                 comm_t comm, commStream_t stream) {
  return rootedExchange(1, sendbuff, recvbuff, count, datatype, root, comm, stream);
}

COMM_API commResult_t commScatter(const void* sendbuff, void* recvbuff, size_t count, commDataType_t datatype, int root,
                                  comm_t comm, commStream_t stream) {
  return rootedExchange(0, sendbuff, recvbuff, count, datatype, root, comm, stream);
}
