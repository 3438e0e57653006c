/* Internal to the verifier (verify.c, verify_values.c): the symbolic values and the simulation state.
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
  int sconn, rconn; /* connection indices, -1 if none */
} vchan;

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
  /* error context */
  int curRank, curCh, curStep;
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

#endif /* COMM_VERIFY_INTERNAL_H_ */
