/* comm_aggd's CollNet plugin, the data path: iallreduce cuts the buffer into one shard per daemon and each
 * shard into chunks of the daemon's grant; test() moves bytes on every daemon connection of the collComm
 * (non-blocking sockets, partial reads and writes, never blocking): contributions go out in order within
 * the daemon's credits, results are read straight into the receive buffer. Never part of libcomm (see
 * aggd_plugin.c). SPDX-License-Identifier: Apache-2.0 */
#ifndef COMM_BUILDING_LIBRARY
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
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

/* Contributions of daemon d, in order, within its credits. 1 when bytes moved. */
static int sendSome(aggdColl* cc, aggdDaemon* d) {
  int moved = 0;
  while (d->sendPos < d->count && cc->err == ncclSuccess) {
    aggdEnt* e = &d->ents[(d->head + d->sendPos) % AGGD_MAX_REQS];
    if (e->sent == e->nchunks) {
      d->sendPos++;
      continue;
    }
    size_t len = chunkLen(e, e->sent);
    if (d->sendOff == 0) {
      if (d->sendSeq - d->recvSeq >= d->window) break; /* no credit: wait for a result */
      aggdHdrPack(d->sendHdr, AGGD_CONTRIB, (uint32_t)len, (uint32_t)(e->req->dtype | (e->req->op << 8)), d->sendSeq);
    }
    uint8_t* payload = e->req->send + e->off + (size_t)e->sent * e->chunkBytes;
    struct iovec iov[2];
    int n = 0;
    if (d->sendOff < AGGD_HDR_BYTES) {
      iov[n].iov_base = d->sendHdr + d->sendOff;
      iov[n++].iov_len = AGGD_HDR_BYTES - d->sendOff;
      iov[n].iov_base = payload;
      iov[n++].iov_len = len;
    } else {
      iov[n].iov_base = payload + (d->sendOff - AGGD_HDR_BYTES);
      iov[n++].iov_len = AGGD_HDR_BYTES + len - d->sendOff;
    }
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = iov;
    mh.msg_iovlen = (size_t)n;
    ssize_t w = sendmsg(d->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (!wouldBlock()) failColl(cc, ncclSystemError, "sending to daemon %s failed: %s", d->name, strerror(errno));
      break;
    }
    moved = 1;
    d->sendOff += (size_t)w;
    if (d->sendOff < AGGD_HDR_BYTES + len) break; /* the socket is full */
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
  if (e->recvd < e->nchunks) return;
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
    uint8_t* dst;
    size_t want;
    if (!d->inBody) {
      dst = d->recvHdr + d->recvHdrGot;
      want = AGGD_HDR_BYTES - d->recvHdrGot;
    } else {
      dst = d->bodyDst + d->bodyGot;
      want = d->rh.len - d->bodyGot;
    }
    ssize_t r = want ? recv(d->fd, dst, want, MSG_DONTWAIT) : 0;
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
      if (h->magic != AGGD_MAGIC) {
        failColl(cc, ncclSystemError, "daemon %s sent a message with a wrong magic", d->name);
        break;
      }
      if (h->type == AGGD_ERROR && h->len <= AGGD_MAX_CTRL) {
        d->bodyDst = d->ctrl;
      } else if (h->type == AGGD_RESULT && d->count > 0) {
        aggdEnt* e = &d->ents[d->head];
        if (h->seq != d->recvSeq || e->recvd >= e->sent || h->len != chunkLen(e, e->recvd)) {
          failColl(cc, ncclSystemError, "daemon %s sent result %llu of %u bytes, expected %llu of %zu bytes", d->name,
                   (unsigned long long)h->seq, h->len, (unsigned long long)d->recvSeq, chunkLen(e, e->recvd));
          break;
        }
        d->bodyDst = e->req->recv + e->off + (size_t)e->recvd * e->chunkBytes;
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
  ncclResult_t err = cc->err;
  aggdReq* r = NULL;
  for (int i = 0; err == ncclSuccess && i < AGGD_MAX_REQS && !r; i++)
    if (!cc->reqs[i].used) r = &cc->reqs[i];
  if (err != ncclSuccess || !r) { /* failed, or 64 in flight: the caller retries */
    pthread_mutex_unlock(&cc->mu);
    return err;
  }
  int waiting = 0;
  for (int i = 0; i < AGGD_MAX_REQS; i++) waiting |= cc->reqs[i].used && !cc->reqs[i].done;
  if (!waiting) cc->lastProgress = aggdPlugNowMs();
  r->used = 1;
  r->done = 0;
  r->pending = 0;
  r->bytes = count * esize;
  r->dtype = (int)dataType;
  r->op = (int)redOp;
  r->send = sendData;
  r->recv = recvData;
  cc->nused++;
  for (int i = 0; i < cc->nd; i++) {
    size_t first, num;
    aggdShard(count, cc->nd, i, &first, &num);
    if (num == 0) continue;
    aggdDaemon* d = &cc->d[i];
    aggdEnt* e = &d->ents[(d->head + d->count) % AGGD_MAX_REQS];
    d->count++;
    e->req = r;
    e->off = first * esize;
    e->bytes = num * esize;
    e->chunkBytes = (d->chunk / esize) * esize;
    e->nchunks = (e->bytes + e->chunkBytes - 1) / e->chunkBytes;
    e->sent = e->recvd = 0;
    r->pending++;
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
  if (r->done || err != ncclSuccess) { /* the caller never tests it again */
    r->used = 0;
    cc->nused--;
  }
  pthread_mutex_unlock(&cc->mu);
  return err;
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
