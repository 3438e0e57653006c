/* The operation signature every FIFO slot starts with (the slot header), defined here in the ground layer
 * because every layer that touches slots reads it: the executors write and check it, and the collnet
 * transport takes a slot's datatype and op from it. */
#ifndef COMM_OP_SIG_H_
#define COMM_OP_SIG_H_

#include <stdint.h>

/* The collectives (the schedule layer names them; the signature carries them, and the collnet transport maps a
 * slot's to the network's operation). */
typedef enum {
  commFuncAllReduce = 0,
  commFuncBroadcast,
  commFuncReduce,
  commFuncAllGather,
  commFuncReduceScatter,
  commFuncAllToAll,
  commFuncSendRecv, /* a batch of grouped point-to-point operations */
  commNumFuncs
} commFunc_t;

/* Every FIFO slot the host executor fills starts with the signature of the operation it belongs to; the
 * receiver checks it before it reads a byte of the payload, so ranks that called different operations (or
 * the same one with another root, op, type, count, or out of turn) fail with a WARN naming both calls instead
 * of exchanging wrong data. 32 bytes: the payload after it stays 32-byte aligned, and a small one shares the
 * header's cache line (a 64-byte header cost the 8-byte shm allreduce 4%: a second line between cores). */
typedef struct {
  uint32_t magic; /* COMM_SIG_MAGIC */
  uint8_t func;   /* commFunc_t */
  uint8_t op;     /* a built-in commRedOp_t, COMM_SIG_OP_USER (commRedOpCreatePreMulSum) or COMM_SIG_OP_NONE */
  uint8_t dtype;  /* commDataType_t; send/recv: 0 (counted in bytes) */
  uint8_t pad0;
  int32_t root; /* -1: the collective has none */
  uint32_t pad1;
  uint64_t count; /* the API count; send/recv: 0 (each receive checks its size) */
  uint64_t seq;   /* collectives: the communicator's collective sequence number (commComm.collCount); send/recv: 0 */
} commOpSig;
#define COMM_SIG_MAGIC 0x67697363u /* "csig" */
#define COMM_SIG_OP_USER 0xfe
#define COMM_SIG_OP_NONE 0xff
#define COMM_SLOT_HDR_BYTES 32
#ifdef __cplusplus /* the CUDA executor's kernels include it through schedule.h */
static_assert(sizeof(commOpSig) == COMM_SLOT_HDR_BYTES, "the slot header is the signature");
#else
_Static_assert(sizeof(commOpSig) == COMM_SLOT_HDR_BYTES, "the slot header is the signature");
#endif
#endif
