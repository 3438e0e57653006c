/* Reduction operators: built-ins and pre-multiplied sums made at run time. */
#include <string.h>

#include "core.h"
#include "devmem.h"
#include "enqueue.h"
#include "reduce.h"

commResult_t commRedOpResolve(comm_t comm, commRedOp_t op, commDataType_t type, int onDevice, commRedOpArgs* args,
                              const void** devScalar) {
  *devScalar = NULL;
  if ((int)op >= 0 && (int)op < commNumOps) return commRedOpArgsBuiltin(op, type, comm->nRanks, args);
  int idx = (int)op - commNumOps;
  if (idx < 0 || idx >= COMM_MAX_USER_REDOPS || !comm->userOps[idx].inUse) {
    WARN("invalid reduction operator %d (not built-in, and not a live op made by commRedOpCreatePreMulSum on "
         "this communicator)",
         (int)op);
    return commInvalidArgument;
  }
  const commUserRedOp* u = &comm->userOps[idx];
  if (u->args.dtype != type) {
    WARN("reduction operator %d was made for %s but is used with %s", (int)op, commTypeName(u->args.dtype),
         commTypeName(type));
    return commInvalidArgument;
  }
  *args = u->args;
  if (u->scalarOnDevice) {
    if (!onDevice) {
      WARN("reduction operator %d has its scalar in device memory (%p); host buffers need a host scalar", (int)op,
           u->scalarPtr);
      return commInvalidUsage;
    }
    *devScalar = u->scalarPtr;
  } else if (u->scalarPtr != NULL) {
    /* commScalarDevice: the scalar is read when the collective runs (host-visible memory here). */
    COMMCHECK(commRedOpArgsPreMul(type, u->scalarPtr, args));
  }
  return commSuccess;
}

COMM_API commResult_t commRedOpCreatePreMulSum(commRedOp_t* op, void* scalar, commDataType_t datatype,
                                               commScalarResidence_t residence, comm_t comm) {
  COMMCHECK(commApiEnter(comm, "commRedOpCreatePreMulSum"));
  commResult_t res = commSuccess;
  if (op == NULL || scalar == NULL) {
    WARN("commRedOpCreatePreMulSum: %s is NULL", op == NULL ? "op" : "scalar");
    res = commInvalidArgument;
    goto out;
  }
  if ((int)datatype < 0 || (int)datatype >= commNumTypes) {
    WARN("commRedOpCreatePreMulSum: invalid datatype %d", (int)datatype);
    res = commInvalidArgument;
    goto out;
  }
  if (residence != commScalarDevice && residence != commScalarHostImmediate) {
    WARN("commRedOpCreatePreMulSum: invalid residence %d", (int)residence);
    res = commInvalidArgument;
    goto out;
  }
  int onDevice = residence == commScalarDevice && commIsDevicePointer(scalar);
  int idx;
  for (idx = 0; idx < COMM_MAX_USER_REDOPS; idx++)
    if (!comm->userOps[idx].inUse) break;
  if (idx == COMM_MAX_USER_REDOPS) {
    WARN("commRedOpCreatePreMulSum: all %d operator slots are in use; destroy some with commRedOpDestroy",
         COMM_MAX_USER_REDOPS);
    res = commInvalidUsage;
    goto out;
  }
  commUserRedOp* u = &comm->userOps[idx];
  memset(u, 0, sizeof(*u));
  /* A device scalar is read by the kernel at each collective; the arguments get a placeholder. */
  static const uint64_t zero = 0;
  COMMCHECKGOTO(commRedOpArgsPreMul(datatype, onDevice ? (const void*)&zero : scalar, &u->args), res, out);
  u->scalarPtr = residence == commScalarDevice ? scalar : NULL;
  u->scalarOnDevice = onDevice;
  u->inUse = 1;
  *op = (commRedOp_t)(commNumOps + idx);
out:
  commApiLeave(comm);
  return res;
}

COMM_API commResult_t commRedOpDestroy(commRedOp_t op, comm_t comm) {
  COMMCHECK(commApiEnterRevoked(comm, "commRedOpDestroy")); /* releasing stays possible */
  commResult_t res = commSuccess;
  int idx = (int)op - commNumOps;
  if ((int)op >= 0 && (int)op < commNumOps) {
    WARN("commRedOpDestroy: %d is a built-in operator", (int)op);
    res = commInvalidArgument;
  } else if (idx < 0 || idx >= COMM_MAX_USER_REDOPS || !comm->userOps[idx].inUse) {
    WARN("commRedOpDestroy: operator %d is not a live operator of this communicator", (int)op);
    res = commInvalidArgument;
  } else {
    comm->userOps[idx].inUse = 0;
  }
  commApiLeave(comm);
  return res;
}
