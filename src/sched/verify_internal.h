/* Internal to the verifier (verify.c, verify_values.c, verify_collnet.c): the symbolic values and the
 * simulation state.
 *
 * A value is a sorted list of segments; a segment is a range of elements whose value is "the reduction over
 * the ranks in a bitset of the source element at offset srcOff + i", plus whether the pre-operation and
 * post-operation were applied. Ranges that are never written are undefined. */
#ifndef COMM_VERIFY_INTERNAL_H_
#define COMM_VERIFY_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>
#include "schedule.h"

#define V_DEF 0x1
#define V_PRE 0x2
#define V_POST 0x4

typedef struct {
  size_t lo, hi; /* [lo, hi) */
  size_t srcOff; /* source offset of element lo */
  uint8_t flags; /* V_* */
} vseg;

typedef struct {
  int n, cap;
  vseg* s;
  uint64_t* bits; /* cap * nw words: rank set of segment i at bits + i*nw */
} vlist;

typedef struct {
  vlist* slots; /* ring of nSlots pieces */
  size_t* sizes;
  int head, len;
  int ch, from, to;
} vconn;

typedef struct {
  int step;
  int entered;
  size_t sendDone, recvDone;
  int sconn, rconn; /* connection indices, -1 if none (or the side is collnet) */
  int snet, rnet;   /* the current step sends to / receives from COMM_PEER_COLLNET */
  int cnMember;     /* index in this channel's collnet group; -1 when not a member */
} vchan;

/* CollNet (verify_collnet.c): per channel, the group of ranks whose schedule names COMM_PEER_COLLNET there, in
 * the order of their nodes. A member's sends go piece by piece into its inbound queue (nSlots pieces); the head
 * of the queue is posted to the network while the member has fewer than nSlots pieces posted and not yet
 * received. Posting piece k folds it into the group's piece k (allreduce, reducescatter: reduced into it;
 * allgather: placed at member index x size); piece k completes when every member posted its k-th piece, and
 * then every member's k-th receive takes it (reducescatter: the member's part of it). */
typedef struct {
  vlist val;          /* the reduction of the pieces posted so far */
  size_t size;        /* elements (the first poster's) */
  int nPosted, nRecv; /* members that posted / received it */
  int firstRank;      /* the rank that posted it first */
} vcnPiece;

typedef struct {
  int rank;
  vlist* in; /* inbound queue: ring of nSlots pieces sent, not yet posted */
  size_t* inSizes;
  int inHead, inLen;
  size_t sent, posted, recvd; /* pieces */
} vcnMember;

typedef struct {
  int nMembers;
  vcnMember* m;
  vcnPiece* pieces; /* piece k at pieces[k % cap] for k in [base, end) */
  size_t cap, base, end;
} vcollnet;

typedef struct {
  int nBufs;
  vlist* bufs;
  size_t* size; /* elements; SIZE_MAX: unbounded */
} vrank;

typedef struct {
  int nRanks, nw, isRed;
  size_t piece, eltSize;
  int nSlots;
  commSchedule* sched; /* [nRanks] */
  int nBuilt;
  vrank* ranks;
  vchan* chans; /* [nRanks * COMM_MAX_CHANNELS] */
  vconn* conns;
  int nConns, capConns;
  int* htab;
  uint64_t* hkeys;
  size_t hcap;
  vlist tRead, tRed, tWrite, tCheck, tDst;
  uint64_t* tmpBits; /* nw */
  uint64_t* expBits; /* nw */
  size_t* bytesSent; /* per rank */
  vcollnet* cn;      /* [COMM_MAX_CHANNELS]; NULL when no schedule names COMM_PEER_COLLNET */
  int cnFunc;        /* what the network does with the pieces: commFuncAllReduce, AllGather or ReduceScatter */
  const int* nodeOf; /* the members' order in a group is their nodes' (NULL: ranks are nodes) */
  vlist tNet, tSlice;
  /* error context */
  int curRank, curCh, curStep;
  char note[128]; /* appended to errors when set (what the network was doing) */
} vctx;

/* Errors: WARNs the message with the current (rank, channel, step) context; returns commInternalError. */
commResult_t verr(vctx* v, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/* Rank sets */
int bitsEqual(const vctx* v, const uint64_t* a, const uint64_t* b);
/* Up to a few ranks of a set, for messages. */
void describeSet(const vctx* v, const uint64_t* b, char* out, size_t len);

/* Segment lists */
commResult_t vlReserve(vctx* v, vlist* l, int need);
void vlFree(vlist* l);
uint64_t* segBits(const vctx* v, const vlist* l, int i);
/* Appends [lo,hi) with the given value (bits ignored when undefined), merging with the last segment. */
commResult_t vlAppend(vctx* v, vlist* l, size_t lo, size_t hi, size_t srcOff, uint8_t flags, const uint64_t* bits);
commResult_t vlCopy(vctx* v, vlist* dst, const vlist* src);
/* First segment with hi > a. */
int vlFind(const vlist* l, size_t a);
/* out = buf[a, b), relative to a, covering [0, b-a) (gaps undefined). */
commResult_t vlRead(vctx* v, const vlist* buf, size_t a, size_t b, vlist* out);
/* buf[a, a+len) = val (val relative, covering [0, len)). */
commResult_t vlWrite(vctx* v, vlist* buf, size_t a, size_t len, const vlist* val);
/* out = x op y, element-wise (both relative, covering the same length). */
commResult_t vlReduce(vctx* v, const vlist* x, const vlist* y, vlist* out);
/* PRE on rank's own input (a value holding only that rank); POST on a value with PRE. */
commResult_t applyPre(vctx* v, vlist* l, int rank);
commResult_t applyPost(vctx* v, vlist* l);

/* Which primitives have a send side / a receive side (verify.c). */
int primHasSend(int prim);
int primHasRecv(int prim);

/* CollNet (verify_collnet.c). vcnSetup finds the groups (after the schedules are built, before the run);
 * the others act for member c->cnMember of channel ch, rank r. */
commResult_t vcnSetup(vctx* v);
int vcnCanSend(const vctx* v, int ch, const vchan* c);
commResult_t vcnPush(vctx* v, int ch, const vchan* c, const vlist* val, size_t size);
int vcnCanRecv(const vctx* v, int ch, const vchan* c);
/* The value of the next piece to receive, checking it has `expect` elements. */
commResult_t vcnHead(vctx* v, int ch, const vchan* c, size_t expect, const vlist** val);
commResult_t vcnPop(vctx* v, int ch, const vchan* c);
/* Why a blocked step waits, for the deadlock report (appends to out[used..len)). */
size_t vcnDescribe(const vctx* v, int ch, const vchan* c, char* out, size_t used, size_t len);
/* After the run: every member received every piece it sent. */
commResult_t vcnFinish(vctx* v);
void vcnFree(vctx* v);

#endif /* COMM_VERIFY_INTERNAL_H_ */
