/* comm_aggd's internals, shared by its event loop (comm_aggd.c: sockets, connections, messages) and its groups
 * (aggd_group.c: registration, contributions, reduction, results, failures). The protocol is
 * transports/collnet/aggd/aggd_proto.h. SPDX-License-Identifier: Apache-2.0 */
#ifndef COMM_AGGD_DAEMON_H_
#define COMM_AGGD_DAEMON_H_

#include <stddef.h>
#include <stdint.h>
#include "aggd_proto.h"

typedef struct aggdGroup aggdGroup;

enum { AGGD_C_REG, AGGD_C_KEY, AGGD_C_MEMBER, AGGD_C_CLOSING };

typedef struct aggdConn {
  int fd;
  int state;        /* AGGD_C_* */
  int dead;         /* closed at the end of this pass */
  int64_t since;    /* accept time (handshake deadline); in CLOSING the time it began */
  int64_t lastRecv; /* last bytes received */
  char peer[64];
  uint8_t nonce[16]; /* this connection's HELLO nonce */
  /* input: a header, then its body (into ctrl, or a contribution buffer) */
  uint8_t hdrBuf[AGGD_HDR_BYTES];
  size_t hdrGot;
  int haveHdr;
  aggdHdr h;
  uint8_t ctrl[AGGD_MAX_CTRL];
  uint8_t* body;
  size_t bodyGot;
  uint8_t* contrib; /* the contribution being read (the group's memory), or NULL */
  /* control output (HELLO, NEED_KEY, ACCEPT, REFUSE, ERROR, STATS) */
  uint8_t out[AGGD_HDR_BYTES + AGGD_MAX_CTRL];
  size_t outLen, outOff;
  int closeAfterOut; /* CLOSING: shut the write side down once out is sent */
  int wrShut;
  aggdRegister reg; /* the registration being verified */
  /* member */
  aggdGroup* g;
  int rank;
  uint64_t nextContrib; /* seq of its next contribution */
  uint64_t nextResult;  /* seq of the next result to send it (the results it was sent: its credits back) */
  uint8_t resHdr[AGGD_HDR_BYTES];
  size_t resOff;     /* bytes of the RESULT message being written (0: none started) */
  size_t resLen;     /* its body's bytes */
  aggdWin win;       /* its allgather / reducescatter (from its last OP) */
  uint64_t winRound; /* rounds of it contributed (== win.rounds: none open) */
} aggdConn;

typedef struct {
  uint64_t seq;
  int inUse, complete;
  int kind;       /* AGGD_K_* */
  uint32_t bytes; /* allreduce, reducescatter: every member's contribution (allgather: their sum) */
  int dtype, op;
  uint64_t round; /* allgather, reducescatter: the round of win */
  aggdWin win;    /* allgather, reducescatter: the operation (the first member's OP; the others' must match) */
  int narrived;
  int pending; /* members still to be sent the result */
  int64_t firstMs;
  uint8_t** bufs;  /* [nranks]: contributions arrived (NULL for an empty one) */
  uint32_t* lens;  /* [nranks]: their bytes */
  uint8_t* got;    /* [nranks]: arrived */
  uint8_t* result; /* allreduce, reducescatter: the reduction (allgather: bufs are the result) */
} aggdSlot;

struct aggdGroup {
  uint8_t gid[16], key[16];
  uint32_t nranks, shard, nshards;
  uint64_t commId, serial;
  uint32_t window, chunk;
  size_t reserved, used;
  aggdConn** members; /* [nranks]: NULL until registered, and after leaving */
  uint8_t* left;      /* [nranks]: left with BYE */
  int nregistered, nactive, nleft;
  uint64_t completed; /* operations reduced */
  aggdSlot* slots;    /* 2 x window, slot of seq k: k % nslots */
  int nslots;
  int64_t created;
  aggdGroup* next;
};

typedef struct {
  /* configuration */
  size_t maxMem;
  int64_t timeoutMs;
  uint32_t window, chunk;
  int maxConns;
  /* state */
  aggdGroup* groups;
  int ngroups;
  uint64_t nextSerial;
  size_t memUsed, memPeak, memReserved, reservedPeak;
  /* counters */
  uint64_t groupsCreated, groupsFailed, groupsClosed, refusedAuth, refusedMem, refusedOther, dropped, ops;
  uint64_t opsKind[3]; /* rounds completed per AGGD_K_* */
} aggdState;

extern aggdState aggd;

int64_t aggdNowMs(void);
void aggdLog(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same, at most 20 lines a second (refusals and drops: a flood of strangers does not flood the log). */
void aggdLogLimited(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/* comm_aggd.c: queue a control message on a connection (dropped with a log line if it does not fit). */
void aggdQueue(aggdConn* c, uint16_t type, uint32_t arg, const void* body, uint32_t len);
/* Queue REFUSE and close after it (counts the refusal under `code`). */
void aggdRefuse(aggdConn* c, int code, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
/* Write what the connection has to send (control, then results); marks it dead on errors. */
void aggdFlush(aggdConn* c);

/* aggd_group.c */
void aggdOnRegister(aggdConn* c); /* c->reg filled from a REGISTER */
void aggdOnKey(aggdConn* c, const uint8_t k[16]);
int aggdOnContribHeader(aggdConn* c); /* 0: read the body into c->contrib; -1: c dropped */
void aggdOnContrib(aggdConn* c);      /* the body is in c->contrib */
void aggdOnOp(aggdConn* c);           /* an OP (its body in c->ctrl) */
void aggdOnBye(aggdConn* c);
/* The member's connection closed or misbehaved: fail its group. */
void aggdMemberGone(aggdConn* c, int code, const char* why);
void aggdFailGroup(aggdGroup* g, aggdConn* culprit, int code, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
void aggdCheckTimeouts(int64_t now);
void aggdFreeAll(void);
/* The STATS line. */
void aggdStats(char* buf, size_t n);
/* Pending results of member c: 1 when it has bytes to write. */
int aggdHasResults(const aggdConn* c);
/* Write results of member c (c->fd non-blocking): 0 ok / would block, -1 error. */
int aggdWriteResults(aggdConn* c);

#endif /* COMM_AGGD_DAEMON_H_ */
