/* comm_aggd's CollNet plugin, the data path: iallreduce cuts the buffer into one shard per daemon and each
 * shard into chunks of the daemon's grant; iallgather and ireducescatter cut each slice's part of the window
 * the same way (aggd_proto.h, WINDOWS); test() moves bytes on every daemon connection of the collComm
 * (non-blocking sockets, partial reads and writes, never blocking): contributions go out in order within
 * the daemon's credits, gathered from the send buffer or parts, results are read straight into the receive
 * buffer or parts. Never part of libcomm (see
 * aggd_plugin.c). SPDX-License-Identifier: Apache-2.0 */
#ifndef COMM_BUILDING_LIBRARY
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include "aggd_plugin.h"

/* The first failure of cc: logged once; every call on cc returns it from then on. */
static void failColl(aggdColl* cc, ncclResult_t err, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void failColl(aggdColl* cc, ncclResult_t err, const char* fmt, ...) {
  if (cc->err != ncclSuccess) return;
  char msg[1100];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  cc->err = err;
  AGGD_WARN("aggd: rank %d of %d: %s", cc->rank, cc->nranks, msg);
}

static size_t chunkLen(const aggdEnt* e, uint64_t i) {
  size_t off = (size_t)i * e->chunkBytes;
  return e->bytes - off < e->chunkBytes ? e->bytes - off : e->chunkBytes;
}

static int wouldBlock(void) { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR; }

/* ---------------------------------------------------------------- the bytes of a round, as an iovec */
#define AGGD_IOV 32
typedef struct {
  struct iovec v[AGGD_IOV];
  int n;
  size_t skip;  /* bytes still to leave out from the front */
  size_t bytes; /* in v */
} aggdIov;

/* Appends len bytes at p, after leaving out what skip says. 0 once io is full. */
static int iovAdd(aggdIov* io, uint8_t* p, size_t len) {
  if (io->skip >= len) {
    io->skip -= len;
    return io->n < AGGD_IOV;
  }
  if (io->n == AGGD_IOV) return 0;
  io->v[io->n].iov_base = p + io->skip;
  io->v[io->n++].iov_len = len - io->skip;
  io->bytes += len - io->skip;
  io->skip = 0;
  return io->n < AGGD_IOV;
}
/* Appends bytes [pos, pos + len) of the window, in request r's parts. 0 once io is full. */
static int partsAdd(const aggdReq* r, uint64_t pos, uint64_t len, aggdIov* io) {
  for (int i = 0; i < r->nparts && len > 0; i++) {
    const aggdPart* p = &r->parts[i];
    if (pos >= p->size) {
      pos -= p->size;
      continue;
    }
    size_t n = p->size - pos < len ? p->size - (size_t)pos : (size_t)len;
    if (!iovAdd(io, p->addr + pos, n)) return 0;
    len -= n;
    pos = 0;
  }
  return 1;
}
/* Window position of member m's round-j bytes on this daemon (allgather), or of stream byte x (reducescatter). */
static uint64_t agPos(const aggdWin* w, uint64_t m, uint64_t j) {
  uint64_t a, f, l;
  aggdWinSlice(w, m, &a, &f, &l);
  return m * w->bpr + a + f + j * w->chunk - w->wo;
}

/* The payload of round j of e. */
static void contribIov(const aggdColl* cc, const aggdEnt* e, uint64_t j, aggdIov* io) {
  const aggdReq* r = e->req;
  const aggdWin* w = &e->w;
  uint64_t a, f, len, at = j * w->chunk;
  if (r->kind == AGGD_K_ALLREDUCE) {
    iovAdd(io, r->send + e->off + (size_t)j * e->chunkBytes, chunkLen(e, j));
  } else if (r->kind == AGGD_K_ALLGATHER) { /* its own shard, from sendData (its first byte in the window) */
    aggdWinSlice(w, (uint64_t)cc->rank, &a, &f, &len);
    iovAdd(io, r->send + f + at, aggdWinRoundLen(w, j, (uint64_t)cc->rank));
  } else { /* the stream's bytes of round j: pieces of the slices' shards, from the window in sendParts */
    uint64_t end = at + aggdWinRoundLen(w, j, 0);
    for (uint64_t x = at; x < end;) {
      uint64_t s = aggdWinSliceAt(w, x), so = aggdWinStreamOff(w, s);
      aggdWinSlice(w, s, &a, &f, &len);
      uint64_t n = (so + len < end ? so + len : end) - x;
      if (n == 0 || !partsAdd(r, s * w->bpr + a + f + (x - so) - w->wo, n, io)) return;
      x += n;
    }
  }
}

/* The body bytes of round j's result on this member. */
static uint64_t resultLen(const aggdColl* cc, const aggdEnt* e, uint64_t j) {
  const aggdWin* w = &e->w;
  uint64_t off, at, len = 0;
  if (e->req->kind == AGGD_K_ALLREDUCE) return chunkLen(e, j);
  if (e->req->kind == AGGD_K_REDUCESCATTER) {
    aggdWinRsPart(w, j, (uint64_t)cc->rank, &off, &at, &len);
    return len;
  }
  for (uint64_t m = 0; m < w->nranks; m++)
    if (m != (uint64_t)cc->rank) len += aggdWinRoundLen(w, j, m);
  return len;
}

/* Where round j's result goes, from body byte got on (io->skip 0). */
static void resultIov(const aggdColl* cc, aggdDaemon* d, const aggdEnt* e, uint64_t j, size_t got, aggdIov* io) {
  const aggdReq* r = e->req;
  const aggdWin* w = &e->w;
  uint64_t me = (uint64_t)cc->rank, a, f, l, off, at, len;
  if (r->kind == AGGD_K_ALLREDUCE) {
    iovAdd(io, r->recv + e->off + (size_t)j * e->chunkBytes + got, chunkLen(e, j) - got);
    return;
  }
  if (r->kind == AGGD_K_REDUCESCATTER) { /* its slice's bytes of the round, into recvData */
    aggdWinRsPart(w, j, me, &off, &at, &len);
    aggdWinSlice(w, me, &a, &f, &l);
    iovAdd(io, r->recv + f + at + got, (size_t)len - got);
    return;
  }
  for (; d->rcMember < w->nranks; d->rcMember++) { /* the others' bytes in member order: skip to byte got */
    uint64_t n = d->rcMember == me ? 0 : aggdWinRoundLen(w, j, d->rcMember);
    if (d->rcBase + n > got) break;
    d->rcBase += n;
  }
  io->skip = got - d->rcBase;
  for (uint64_t m = d->rcMember; m < w->nranks; m++) {
    uint64_t n = m == me ? 0 : aggdWinRoundLen(w, j, m);
    if (n > 0 && !partsAdd(r, agPos(w, m, j), n, io)) return;
  }
}

static ssize_t ioMsg(int fd, aggdIov* io, int out) {
  struct msghdr mh;
  memset(&mh, 0, sizeof(mh));
  mh.msg_iov = io->v;
  mh.msg_iovlen = (size_t)io->n;
  return out ? sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) : recvmsg(fd, &mh, MSG_DONTWAIT);
}

/* Contributions of daemon d, in order, within its credits (an allgather's / reducescatter's first one after its
 * OP). 1 when bytes moved. */
static int sendSome(aggdColl* cc, aggdDaemon* d) {
  int moved = 0;
  while (d->sendPos < d->count && cc->err == ncclSuccess) {
    aggdEnt* e = &d->ents[(d->head + d->sendPos) % AGGD_MAX_REQS];
    const aggdReq* r = e->req;
    if (e->sent == e->nrounds) {
      d->sendPos++;
      continue;
    }
    if (d->sendOff == 0) {
      if (d->sendSeq - d->recvSeq >= d->window) break; /* no credit: wait for a result */
      uint32_t arg = r->kind == AGGD_K_ALLGATHER ? 0 : (uint32_t)(r->dtype | (r->op << 8));
      d->sendPre = 0;
      if (r->kind == AGGD_K_ALLREDUCE) {
        d->sendLen = chunkLen(e, e->sent);
      } else {
        d->sendLen = (size_t)aggdWinRoundLen(&e->w, e->sent, r->kind == AGGD_K_ALLGATHER ? (uint64_t)cc->rank : 0);
        if (e->sent == 0) {
          aggdHdrPack(d->opMsg, AGGD_OP, AGGD_OP_BYTES, 0, 0);
          aggdOpPack(d->opMsg + AGGD_HDR_BYTES, &e->w);
          d->sendPre = sizeof(d->opMsg);
        }
      }
      aggdHdrPackKind(d->sendHdr, AGGD_CONTRIB, (uint16_t)r->kind, (uint32_t)d->sendLen, arg, d->sendSeq);
    }
    size_t total = d->sendPre + AGGD_HDR_BYTES + d->sendLen;
    aggdIov io;
    io.n = 0;
    io.bytes = 0;
    io.skip = d->sendOff;
    if (iovAdd(&io, d->opMsg, d->sendPre) && iovAdd(&io, d->sendHdr, AGGD_HDR_BYTES)) contribIov(cc, e, e->sent, &io);
    if (io.bytes == 0 || io.bytes > total - d->sendOff) {
      failColl(cc, ncclInternalError, "round %llu to daemon %s: its bytes do not add up", (unsigned long long)e->sent,
               d->name);
      break;
    }
    ssize_t w = ioMsg(d->fd, &io, 1);
    if (w < 0) {
      if (!wouldBlock()) failColl(cc, ncclSystemError, "sending to daemon %s failed: %s", d->name, strerror(errno));
      break;
    }
    moved = 1;
    d->sendOff += (size_t)w;
    if (d->sendOff < total) {
      if ((size_t)w < io.bytes) break; /* the socket is full */
      continue;                        /* more pieces than one iovec */
    }
    d->sendOff = 0;
    e->sent++;
    d->sendSeq++;
  }
  return moved;
}

/* A whole message arrived on daemon d. */
static void onMessage(aggdColl* cc, aggdDaemon* d) {
  if (d->rh.type == AGGD_ERROR) {
    d->ctrl[d->rh.len] = '\0';
    failColl(cc, ncclRemoteError, "daemon %s: %s", d->name, (char*)d->ctrl);
    return;
  }
  aggdEnt* e = &d->ents[d->head];
  e->recvd++;
  d->recvSeq++;
  if (e->recvd < e->nrounds) return;
  aggdReq* r = e->req;
  d->head = (d->head + 1) % AGGD_MAX_REQS;
  d->count--;
  d->sendPos--;
  if (--r->pending == 0) r->done = 1;
}

/* Results (and errors) of daemon d. 1 when bytes moved. */
static int recvSome(aggdColl* cc, aggdDaemon* d) {
  int moved = 0;
  while (cc->err == ncclSuccess) {
    aggdIov io;
    io.n = 0;
    io.bytes = io.skip = 0;
    size_t want;
    if (!d->inBody) {
      want = AGGD_HDR_BYTES - d->recvHdrGot;
      iovAdd(&io, d->recvHdr + d->recvHdrGot, want);
    } else {
      want = d->rh.len - d->bodyGot;
      if (d->rh.type == AGGD_ERROR) iovAdd(&io, d->ctrl + d->bodyGot, want);
      else if (want > 0) resultIov(cc, d, &d->ents[d->head], d->ents[d->head].recvd, d->bodyGot, &io);
      if (io.bytes > want || (want > 0 && io.bytes == 0)) {
        failColl(cc, ncclInternalError, "a result of daemon %s: its bytes do not add up", d->name);
        break;
      }
    }
    ssize_t r = want ? ioMsg(d->fd, &io, 0) : 0;
    if (want && r < 0) {
      if (!wouldBlock()) failColl(cc, ncclSystemError, "receiving from daemon %s failed: %s", d->name, strerror(errno));
      break;
    }
    if (want && r == 0) {
      failColl(cc, ncclSystemError, "daemon %s closed the connection", d->name);
      break;
    }
    moved = 1;
    if (!d->inBody) {
      d->recvHdrGot += (size_t)r;
      if (d->recvHdrGot < AGGD_HDR_BYTES) continue;
      d->recvHdrGot = 0;
      aggdHdrUnpack(d->recvHdr, &d->rh);
      const aggdHdr* h = &d->rh;
      if (h->magic != AGGD_MAGIC || h->kind != 0) {
        failColl(cc, ncclSystemError, "daemon %s sent a message with a wrong magic", d->name);
        break;
      }
      if (h->type == AGGD_ERROR && h->len <= AGGD_MAX_CTRL) {
        /* its body into ctrl */
      } else if (h->type == AGGD_RESULT && d->count > 0) {
        aggdEnt* e = &d->ents[d->head];
        uint64_t expect = e->recvd < e->sent ? resultLen(cc, e, e->recvd) : 0;
        if (h->seq != d->recvSeq || e->recvd >= e->sent || h->len != expect) {
          failColl(cc, ncclSystemError, "daemon %s sent result %llu of %u bytes, expected %llu of %llu bytes", d->name,
                   (unsigned long long)h->seq, h->len, (unsigned long long)d->recvSeq, (unsigned long long)expect);
          break;
        }
        d->rcMember = d->rcBase = 0;
      } else {
        failColl(cc, ncclSystemError, "daemon %s sent an unexpected message (type %u)", d->name, h->type);
        break;
      }
      d->bodyGot = 0;
      d->inBody = 1;
      if (h->len > 0) continue;
    } else {
      d->bodyGot += (size_t)r;
      if (d->bodyGot < d->rh.len) continue;
    }
    d->inBody = 0;
    onMessage(cc, d);
  }
  return moved;
}

static void progress(aggdColl* cc) {
  for (int round = 0; round < 64 && cc->err == ncclSuccess; round++) {
    int moved = 0;
    for (int i = 0; i < cc->nd && cc->err == ncclSuccess; i++) {
      moved |= sendSome(cc, &cc->d[i]);
      moved |= recvSome(cc, &cc->d[i]);
    }
    if (!moved) break;
    cc->lastProgress = aggdPlugNowMs();
  }
  if (cc->err != ncclSuccess) return;
  int waiting = 0;
  for (int i = 0; i < AGGD_MAX_REQS; i++) waiting |= cc->reqs[i].used && !cc->reqs[i].done;
  int64_t idle = aggdPlugNowMs() - cc->lastProgress;
  if (waiting && idle > cc->timeoutMs)
    failColl(cc, ncclSystemError, "no progress from the aggregation daemons for %lld ms (COMM_AGGD_TIMEOUT_MS)",
             (long long)idle);
}

/* A free request of cc, set up for kind (under cc->mu), or NULL: failed (*err set), or 64 in flight. */
static aggdReq* takeReq(aggdColl* cc, int kind, ncclResult_t* err) {
  aggdReq* r = NULL;
  *err = cc->err;
  for (int i = 0; *err == ncclSuccess && i < AGGD_MAX_REQS && !r; i++)
    if (!cc->reqs[i].used) r = &cc->reqs[i];
  if (!r) return NULL;
  int waiting = 0;
  for (int i = 0; i < AGGD_MAX_REQS; i++) waiting |= cc->reqs[i].used && !cc->reqs[i].done;
  if (!waiting) cc->lastProgress = aggdPlugNowMs();
  r->used = 1;
  r->done = 0;
  r->pending = 0;
  r->kind = kind;
  r->dtype = r->op = 0;
  r->send = r->recv = NULL;
  r->parts = r->inl;
  r->nparts = 0;
  cc->nused++;
  return r;
}

static void dropReq(aggdColl* cc, aggdReq* r) {
  if (r->parts != r->inl) free(r->parts);
  r->parts = r->inl;
  r->nparts = 0;
  r->used = 0;
  cc->nused--;
}

/* e: the next entry of daemon d, for r. */
static aggdEnt* addEnt(aggdDaemon* d, aggdReq* r) {
  aggdEnt* e = &d->ents[(d->head + d->count) % AGGD_MAX_REQS];
  d->count++;
  memset(e, 0, sizeof(*e));
  e->req = r;
  r->pending++;
  return e;
}

ncclResult_t aggdIallreduce(void* collComm, void* sendData, void* recvData, size_t count, ncclDataType_t dataType,
                            ncclRedOp_t redOp, void* sendMhandle, void* recvMhandle, void** request) {
  aggdColl* cc = collComm;
  *request = NULL;
  size_t esize = aggdTypeSize((int)dataType);
  if (!cc || esize == 0 || (int)redOp < 0 || (int)redOp > 3 || count > SIZE_MAX / esize) {
    AGGD_WARN("aggd: iallreduce of type %d op %d count %zu is not supported", (int)dataType, (int)redOp, count);
    return ncclInvalidArgument;
  }
  pthread_mutex_lock(&cc->mu);
  ncclResult_t err;
  aggdReq* r = takeReq(cc, AGGD_K_ALLREDUCE, &err);
  if (!r) { /* failed, or 64 in flight: the caller retries */
    pthread_mutex_unlock(&cc->mu);
    return err;
  }
  r->bytes = count * esize;
  r->dtype = (int)dataType;
  r->op = (int)redOp;
  r->send = sendData;
  r->recv = recvData;
  for (int i = 0; i < cc->nd; i++) {
    size_t first, num;
    aggdShard(count, cc->nd, i, &first, &num);
    if (num == 0) continue;
    aggdDaemon* d = &cc->d[i];
    aggdEnt* e = addEnt(d, r);
    e->off = first * esize;
    e->bytes = num * esize;
    e->chunkBytes = (d->chunk / esize) * esize;
    e->nrounds = (e->bytes + e->chunkBytes - 1) / e->chunkBytes;
  }
  if (r->pending == 0) r->done = 1;
  progress(cc);
  *request = r;
  pthread_mutex_unlock(&cc->mu);
  return ncclSuccess;
}

/* Bytes [pos, pos + len) of the window in r's parts from src (allgather: the member's own bytes). */
static void copyToParts(const aggdReq* r, uint64_t pos, const uint8_t* src, uint64_t len) {
  for (int i = 0; i < r->nparts && len > 0; i++) {
    const aggdPart* p = &r->parts[i];
    if (pos >= p->size) {
      pos -= p->size;
      continue;
    }
    size_t n = p->size - pos < len ? p->size - (size_t)pos : (size_t)len;
    if (p->addr + pos != src) memmove(p->addr + pos, src, n);
    src += n;
    len -= n;
    pos = 0;
  }
}

ncclResult_t aggdPostWindow(void* collComm, int kind, void* buf, int nparts, const void* parts, int sgeV8,
                            size_t bytesPerRank, size_t windowOffset, size_t windowBytes, ncclDataType_t dataType,
                            ncclRedOp_t redOp, void** request) {
  aggdColl* cc = collComm;
  const char* what = kind == AGGD_K_ALLGATHER ? "iallgather" : "ireducescatter";
  *request = NULL;
  if (!cc || nparts < 0 || (nparts > 0 && !parts)) {
    AGGD_WARN("aggd: %s with %d parts at %p: invalid", what, nparts, parts);
    return ncclInvalidArgument;
  }
  uint64_t sum = 0;
  int badPart = 0;
  for (int i = 0; i < nparts; i++) {
    size_t sz = sgeV8 ? ((const ncclNetSGE_v8_t*)parts)[i].size : ((const ncclNetSGE_v9_t*)parts)[i].size;
    void* ad = sgeV8 ? ((const ncclNetSGE_v8_t*)parts)[i].address : ((const ncclNetSGE_v9_t*)parts)[i].address;
    badPart |= (sz > 0 && !ad) || sz > UINT64_MAX - sum;
    sum += sz;
  }
  aggdWin w0; /* the whole window, as one shard: validates it and gives this member's piece */
  memset(&w0, 0, sizeof(w0));
  w0.kind = (uint32_t)kind;
  w0.dtype = kind == AGGD_K_REDUCESCATTER ? (uint32_t)dataType : 0;
  w0.op = kind == AGGD_K_REDUCESCATTER ? (uint32_t)redOp : 0;
  w0.bpr = bytesPerRank;
  w0.wo = windowOffset;
  w0.wb = windowBytes;
  uint64_t a = 0, f, mine = 0;
  int bad = badPart || sum != windowBytes || (int)dataType < 0 || (int)redOp < 0 ||
            (windowBytes > 0 && aggdWinInit(&w0, (uint32_t)cc->nranks, 1, 0, 8) != 0);
  if (!bad && windowBytes > 0) aggdWinSlice(&w0, (uint64_t)cc->rank, &a, &f, &mine);
  if (bad || (mine > 0 && !buf)) {
    AGGD_WARN("aggd: %s of the window [%zu, +%zu) of %d x %zu bytes in %d parts of %llu bytes (type %d op %d) is "
              "invalid or not supported",
              what, windowOffset, windowBytes, cc->nranks, bytesPerRank, nparts, (unsigned long long)sum, (int)dataType,
              (int)redOp);
    return ncclInvalidArgument;
  }
  if (windowBytes > AGGD_MAX_COLL_BYTES) {
    AGGD_WARN("aggd: %s of a %zu-byte window: above the plugin's maxCollBytes %zu", what, windowBytes,
              AGGD_MAX_COLL_BYTES);
    return ncclInvalidArgument;
  }
  pthread_mutex_lock(&cc->mu);
  ncclResult_t err;
  aggdReq* r = takeReq(cc, kind, &err);
  if (!r) {
    pthread_mutex_unlock(&cc->mu);
    return err;
  }
  if (nparts > AGGD_INLINE_PARTS && !(r->parts = malloc(sizeof(aggdPart) * (size_t)nparts))) {
    r->parts = r->inl;
    dropReq(cc, r);
    pthread_mutex_unlock(&cc->mu);
    return ncclSystemError;
  }
  for (int i = 0; i < nparts; i++) {
    r->parts[i].addr = sgeV8 ? ((const ncclNetSGE_v8_t*)parts)[i].address : ((const ncclNetSGE_v9_t*)parts)[i].address;
    r->parts[i].size = sgeV8 ? ((const ncclNetSGE_v8_t*)parts)[i].size : ((const ncclNetSGE_v9_t*)parts)[i].size;
  }
  r->nparts = nparts;
  r->dtype = (int)w0.dtype;
  r->op = (int)w0.op;
  if (kind == AGGD_K_ALLGATHER) {
    r->send = buf;
    r->bytes = windowBytes;
    if (mine > 0) copyToParts(r, (uint64_t)cc->rank * bytesPerRank + a - windowOffset, buf, mine); /* its own */
  } else {
    r->recv = buf;
    r->bytes = (size_t)mine;
  }
  for (int i = 0; i < cc->nd && windowBytes > 0; i++) {
    aggdWin w = w0;
    if (aggdWinInit(&w, (uint32_t)cc->nranks, (uint32_t)cc->nd, (uint32_t)i, cc->d[i].chunk) != 0 || w.rounds == 0)
      continue; /* (the chunk was checked at registration) nothing of the window on daemon i */
    aggdEnt* e = addEnt(&cc->d[i], r);
    e->w = w;
    e->nrounds = w.rounds;
  }
  if (r->pending == 0) r->done = 1;
  progress(cc);
  *request = r;
  pthread_mutex_unlock(&cc->mu);
  return ncclSuccess;
}

ncclResult_t aggdTest(void* request, int* done, int* size) {
  aggdReq* r = request;
  *done = 0;
  if (!r || !r->cc) return ncclInternalError;
  aggdColl* cc = r->cc;
  pthread_mutex_lock(&cc->mu);
  if (!r->used) {
    pthread_mutex_unlock(&cc->mu);
    return ncclInternalError;
  }
  if (!r->done && cc->err == ncclSuccess) progress(cc);
  ncclResult_t err = ncclSuccess;
  if (r->done) {
    *done = 1;
    if (size) *size = (int)(r->bytes > (size_t)INT32_MAX ? INT32_MAX : r->bytes);
  } else {
    err = cc->err;
  }
  if (r->done || err != ncclSuccess) dropReq(cc, r); /* the caller never tests it again */
  pthread_mutex_unlock(&cc->mu);
  return err;
}

void aggdFreeReqs(aggdColl* cc) {
  for (int i = 0; i < AGGD_MAX_REQS; i++)
    if (cc->reqs[i].used) dropReq(cc, &cc->reqs[i]);
}

void aggdSayBye(aggdColl* cc) {
  uint8_t bye[AGGD_HDR_BYTES];
  aggdHdrPack(bye, AGGD_BYE, 0, 0, 0);
  for (int i = 0; i < cc->nd; i++) {
    aggdDaemon* d = &cc->d[i];
    if (d->fd < 0 || d->sendOff != 0 || cc->err != ncclSuccess) continue; /* mid-message: the close says it */
    if (send(d->fd, bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(bye))
      AGGD_INFO("aggd: BYE to daemon %s not sent; the daemon sees a close", d->name);
  }
}

#else
typedef int commAggdClientNotInLibcomm; /* built only as its own library (tools/aggd/CMakeLists.txt) */
#endif /* COMM_BUILDING_LIBRARY */
