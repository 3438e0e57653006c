/* The schedule IR: growable per-channel step lists, names and a human-readable dump. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "debug.h"
#include "schedule.h"
#include "utils.h"

static const char* const funcNames[commNumFuncs] = {"AllReduce",     "Broadcast", "Reduce",  "AllGather",
                                                    "ReduceScatter", "AllToAll",  "SendRecv"};

const char* commFuncName(commFunc_t f) {
  if ((int)f < 0 || f >= commNumFuncs) return "Unknown";
  return funcNames[f];
}

static const char* const primNames[COMM_NUM_PRIMS] = {
    "nop",      "send", "recv",     "recvReduceSend", "recvCopySend", "recvReduceCopy", "recvReduceCopySend",
    "copySend", "copy", "sendRecv", "reduce"};

const char* commPrimName(commPrim_t p) {
  if ((int)p < 0 || p >= COMM_NUM_PRIMS) return "unknown";
  return primNames[p];
}

static const char* const protoNames[commNumProtos] = {"LL", "Simple"};

const char* commProtoName(int proto) {
  if (proto < 0 || proto >= commNumProtos) return "Unknown";
  return protoNames[proto];
}

static const char* const algoNames[commNumAlgos] = {"Ring",    "Tree",     "CollTree", "PAT",
                                                    "OneShot", "Pairwise", "CollNet"};

const char* commAlgoName(int algo) {
  if (algo < 0 || algo >= commNumAlgos) return "Unknown";
  return algoNames[algo];
}

size_t commSplitUnit(size_t eltSize, size_t maxPart) {
  size_t unit = eltSize > 0 && eltSize < 16 && 16 % eltSize == 0 ? 16 / eltSize : 1;
  return maxPart >= 2 * unit ? unit : 1;
}

void commSplitPart(size_t total, size_t parts, size_t idx, size_t unit, size_t* off, size_t* len) {
  size_t units = total / unit + (total % unit ? 1 : 0); /* the last one may be partial */
  size_t base = units / parts, rem = units % parts;
  size_t o = (idx * base + (idx < rem ? idx : rem)) * unit, l = (base + (idx < rem ? 1 : 0)) * unit;
  *off = o < total ? o : total;
  *len = o >= total ? 0 : l < total - o ? l : total - o;
}

size_t commSplitParts(size_t total, size_t unit, size_t maxUnits) {
  if (maxUnits == 0) maxUnits = 1;
  size_t units = total / unit + (total % unit ? 1 : 0);
  return units / maxUnits + (units % maxUnits ? 1 : 0);
}

commResult_t commSchedInit(commSchedule* s, int nChannels) {
  if (s == NULL) {
    WARN("commSchedInit: NULL schedule");
    return commInvalidArgument;
  }
  memset(s, 0, sizeof(*s));
  if (nChannels < 0 || nChannels > COMM_MAX_CHANNELS) {
    WARN("commSchedInit: %d channels (must be 0..%d)", nChannels, COMM_MAX_CHANNELS);
    return commInvalidArgument;
  }
  s->nChannels = nChannels;
  s->nBufs = 2;
  s->scratchElems = 0;
  return commSuccess;
}

commResult_t commSchedEmit(commSchedule* s, int channel, commPrim_t prim, int flags, int recvPeer, int sendPeer,
                           commBufRef src, commBufRef dst, size_t count) {
  if (count == 0) return commSuccess;
  commStep st = commStepMake(prim, flags, sendPeer, recvPeer, src, dst, count, count);
  const commBufRef* refs[2] = {&src, &dst};
  for (int i = 0; i < 2; i++) {
    if (refs[i]->buf != COMM_BUF_SCRATCH) continue;
    if (refs[i]->offset + count > s->scratchElems) s->scratchElems = refs[i]->offset + count;
    if (s->nBufs < COMM_BUF_SCRATCH + 1) s->nBufs = COMM_BUF_SCRATCH + 1;
  }
  return commSchedAdd(s, channel, &st);
}

commResult_t commSchedAdd(commSchedule* s, int channel, const commStep* step) {
  if (s == NULL || step == NULL || channel < 0 || channel >= s->nChannels) {
    WARN("commSchedAdd: channel %d out of range (schedule has %d)", channel, s ? s->nChannels : -1);
    return commInvalidArgument;
  }
  commChannelSched* c = &s->channels[channel];
  if (c->nSteps == c->capacity) {
    int newCap = c->capacity ? c->capacity * 2 : 16;
    if (newCap <= c->capacity) {
      WARN("commSchedAdd: too many steps on channel %d", channel);
      return commInternalError;
    }
    COMMCHECK(commRealloc(&c->steps, (size_t)c->capacity, (size_t)newCap, sizeof(commStep)));
    c->capacity = newCap;
  }
  c->steps[c->nSteps++] = *step;
  return commSuccess;
}

void commSchedFree(commSchedule* s) {
  if (s == NULL) return;
  for (int c = 0; c < COMM_MAX_CHANNELS; c++) {
    free(s->channels[c].steps);
    s->channels[c].steps = NULL;
    s->channels[c].nSteps = 0;
    s->channels[c].capacity = 0;
  }
  s->nChannels = 0;
}

static const char* bufName(uint32_t buf, char* tmp, size_t len) {
  switch (buf) {
    case COMM_BUF_INPUT: return "in";
    case COMM_BUF_OUTPUT: return "out";
    case COMM_BUF_SCRATCH: return "scratch";
    default: snprintf(tmp, len, "user%u", (unsigned)(buf - COMM_BUF_USER0)); return tmp;
  }
}

void commSchedPrint(const commSchedule* s, int rank, void* file) {
  FILE* f = file ? (FILE*)file : stdout;
  if (s == NULL) return;
  fprintf(f, "rank %d: %d channel(s), %d buffer(s), scratch %zu elements\n", rank, s->nChannels, s->nBufs,
          s->scratchElems);
  for (int c = 0; c < s->nChannels; c++) {
    const commChannelSched* ch = &s->channels[c];
    fprintf(f, "  channel %d: %d step(s)\n", c, ch->nSteps);
    for (int i = 0; i < ch->nSteps; i++) {
      const commStep* st = &ch->steps[i];
      char t1[24], t2[24];
      fprintf(f, "    %4d %-18s", i, commPrimName((commPrim_t)st->prim));
      if (st->sendPeer >= 0) fprintf(f, " ->%d", st->sendPeer);
      if (st->recvPeer >= 0) fprintf(f, " <-%d", st->recvPeer);
      fprintf(f, " src %s[%zu] dst %s[%zu] count %zu", bufName(st->src.buf, t1, sizeof(t1)), st->src.offset,
              bufName(st->dst.buf, t2, sizeof(t2)), st->dst.offset, st->count);
      if (st->prim == COMM_PRIM_SEND_RECV) fprintf(f, " recvCount %zu", st->recvCount);
      if (st->flags & COMM_STEP_PRE) fprintf(f, " PRE");
      if (st->flags & COMM_STEP_POST) fprintf(f, " POST");
      fprintf(f, "\n");
    }
  }
}

size_t commFuncBytes(commFunc_t f, size_t count, size_t eltSize, int nRanks) {
  size_t bytes = count * eltSize;
  if (f == commFuncAllGather || f == commFuncReduceScatter || f == commFuncAllToAll) bytes *= (size_t)nRanks;
  return bytes;
}
