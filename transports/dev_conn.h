/* A device connection as the CUDA kernel sees it, whatever the transport: each transport's devConn method
 * fills one (transport.h), and the executor's kernel (src/exec/cuda/) only reads and writes through it.
 * Plain C, included by the kernel's CUDA C++ too. */
#ifndef COMM_DEV_CONN_H_
#define COMM_DEV_CONN_H_

#include <stdint.h>

/* LL protocol: 16-byte lines {4 data bytes, flag, 4 data bytes, flag}, each written with one store; the
 * flag is the slot's position + 1, so a reader knows a line is new without a fence or a head counter. A
 * slot holds COMM_DEV_LL_PIECE data bytes in twice as many line bytes, in a region of the connection of its
 * own (a Simple message's data left in a slot could otherwise look like a valid flag). */
#define COMM_DEV_LL_PIECE (16 << 10)
/* An LL message's signature (exec_dev.h): the low half of its digest mixed into every data line's second
 * flag, and the whole signature, a word per line, in COMM_DEV_LL_SIG_LINES lines at COMM_DEV_LL_SIG_OFF
 * (plain flags), which a receiver reads only when its wait goes on: to tell a message of another operation. */
#define COMM_DEV_LL_SIG_LINES 4
#define COMM_DEV_LL_SIG_OFF (2 * COMM_DEV_LL_PIECE)
#define COMM_DEV_LL_SLOT_BYTES (COMM_DEV_LL_SIG_OFF + 16 * COMM_DEV_LL_SIG_LINES)

/* One direction of a device connection, as the kernel uses it. P2P: the FIFO (slots, sizes, head) is in
 * the receiver's device memory, tail in the sender's, so each side polls only its own memory. shm: all of
 * it in host memory both processes map. net: each side's own FIFO in mapped host memory, which the proxy
 * thread moves over the network. pos is the side's own count of slots posted (sender) or drained
 * (receiver). */
typedef struct commDevConn {
  char* slots;       /* nSlots * slotBytes, receiver's memory */
  uint64_t* head;    /* slots posted: written by the sender, polled by the receiver */
  uint64_t* sizes;   /* [nSlots] bytes in each slot */
  uint64_t* tail;    /* slots drained: written by the receiver, polled by the sender */
  uint64_t* pos;     /* this side's position */
  char* llSlots;     /* nSlots * COMM_DEV_LL_SLOT_BYTES of LL lines, receiver's memory (P2P, shm; net: NULL) */
  uint32_t* failed;  /* net: set by the proxy thread when the network connection failed (else NULL) */
  uint32_t sysScope; /* the peer is another GPU (or the host): fences at system scope, else GPU scope */
  uint32_t pad;
} commDevConn;

#endif
