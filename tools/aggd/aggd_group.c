/* comm_aggd's groups: registration (authentication, memory reservation), contributions under credits, the
 * reduction in fixed member order (libcomm's own element reductions, src/exec/reduce.h, so the rounding of
 * half, bfloat16 and fp8 is libcomm's), results, and failures that free a group's memory. Allgather and
 * reducescatter rounds (aggd_proto.h, WINDOWS) share all of it: an allgather round is not reduced (each member
 * is sent the others' contributions), a reducescatter round is reduced as an allreduce and each member is sent
 * only its slice's bytes of it.
 * SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include "aggd_daemon.h"
#include "reduce.h"

static unsigned long long gidShort(const uint8_t* g) { return (unsigned long long)aggdGet64(g); }

static aggdGroup* findGroup(const uint8_t gid[16], uint32_t shard) {
  for (aggdGroup* g = aggd.groups; g; g = g->next)
    if (g->shard == shard && !aggdCtCompare(g->gid, gid, 16)) return g;
  return NULL;
}

/* Operation buffers: accounted per group (never above its reservation) and per daemon (peak). */
static uint8_t* bufAlloc(aggdGroup* g, size_t bytes) {
  if (g->used + bytes > g->reserved) return NULL;
  uint8_t* p = malloc(bytes);
  if (!p) return NULL;
  g->used += bytes;
  aggd.memUsed += bytes;
  if (aggd.memUsed > aggd.memPeak) aggd.memPeak = aggd.memUsed;
  return p;
}
static void bufFree(aggdGroup* g, uint8_t* p, size_t bytes) {
  if (!p) return;
  free(p);
  g->used -= bytes;
  aggd.memUsed -= bytes;
}

static void slotReset(aggdGroup* g, aggdSlot* s) {
  for (uint32_t i = 0; i < g->nranks; i++) {
    bufFree(g, s->bufs[i], s->lens[i]);
    s->bufs[i] = NULL;
    s->lens[i] = 0;
    s->got[i] = 0;
  }
  bufFree(g, s->result, s->bytes);
  s->result = NULL;
  s->inUse = s->complete = 0;
  s->narrived = s->pending = 0;
}

static void freeGroup(aggdGroup* g) {
  for (aggdGroup** pp = &aggd.groups; *pp; pp = &(*pp)->next)
    if (*pp == g) {
      *pp = g->next;
      break;
    }
  for (uint32_t r = 0; r < g->nranks; r++) {
    aggdConn* c = g->members[r];
    if (!c) continue;
    if (c->contrib) bufFree(g, c->contrib, c->h.len);
    c->contrib = NULL;
    c->g = NULL;
  }
  for (int i = 0; i < g->nslots; i++) {
    slotReset(g, &g->slots[i]);
    free(g->slots[i].bufs);
    free(g->slots[i].lens);
    free(g->slots[i].got);
  }
  size_t overhead = g->used; /* what is left: the bookkeeping arrays */
  aggd.memUsed -= overhead;
  aggd.memReserved -= g->reserved;
  aggd.ngroups--;
  free(g->slots);
  free(g->members);
  free(g->left);
  free(g);
}

void aggdFailGroup(aggdGroup* g, aggdConn* culprit, int code, const char* fmt, ...) {
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  aggdLog("group %016llx (commId %llx, shard %u/%u, %u members) failed: %s; its %zu bytes freed", gidShort(g->gid),
          (unsigned long long)g->commId, g->shard, g->nshards, g->nranks, why, g->reserved);
  char msg[600];
  int n = snprintf(msg, sizeof(msg), "comm_aggd: group failed: %s", why);
  for (uint32_t r = 0; r < g->nranks; r++) {
    aggdConn* c = g->members[r];
    if (!c) continue;
    if (c == culprit || c->resOff > 0) { /* in the middle of a result: the close itself tells it */
      c->dead = 1;
    } else {
      aggdQueue(c, AGGD_ERROR, (uint32_t)code, msg, (uint32_t)(n < (int)sizeof(msg) ? n : (int)sizeof(msg) - 1));
      c->state = AGGD_C_CLOSING;
      c->closeAfterOut = 1;
      c->since = aggdNowMs();
    }
  }
  if (culprit) culprit->dead = 1;
  aggd.groupsFailed++;
  freeGroup(g);
}

void aggdMemberGone(aggdConn* c, int code, const char* why) {
  aggdGroup* g = c->g;
  if (!g) return;
  aggdFailGroup(g, c, code, "member %d (%s) %s", c->rank, c->peer, why);
}

static aggdGroup* createGroup(aggdConn* c, const uint8_t k[16]) {
  const aggdRegister* r = &c->reg;
  uint64_t window = aggd.window, chunk = aggd.chunk, nslots = 2 * window;
  uint64_t overhead = nslots * (sizeof(aggdSlot) + r->nranks * (sizeof(uint8_t*) + sizeof(uint32_t) + 1)) +
                      r->nranks * (sizeof(aggdConn*) + 1) + sizeof(aggdGroup);
  uint64_t need = (uint64_t)r->nranks * window * chunk + overhead;
  if (need > aggd.maxMem || aggd.memReserved + need > aggd.maxMem) {
    aggd.refusedMem++;
    aggdRefuse(c, AGGD_E_MEM,
               "not enough memory: a group of %u members needs %llu bytes (%u x window %llu x chunk %llu + %llu), "
               "comm_aggd has %zu of --max-mem %zu free",
               r->nranks, (unsigned long long)need, r->nranks, (unsigned long long)window, (unsigned long long)chunk,
               (unsigned long long)overhead, aggd.maxMem - aggd.memReserved, aggd.maxMem);
    return NULL;
  }
  aggdGroup* g = calloc(1, sizeof(*g));
  if (g) {
    g->members = calloc(r->nranks, sizeof(aggdConn*));
    g->left = calloc(r->nranks, 1);
    g->slots = calloc(nslots, sizeof(aggdSlot));
  }
  int ok = g && g->members && g->left && g->slots;
  for (uint64_t i = 0; ok && i < nslots; i++) {
    aggdSlot* sl = &g->slots[i];
    sl->bufs = calloc(r->nranks, sizeof(uint8_t*));
    sl->lens = calloc(r->nranks, sizeof(uint32_t));
    sl->got = calloc(r->nranks, 1);
    ok = sl->bufs && sl->lens && sl->got;
  }
  if (!ok) {
    if (g) {
      for (uint64_t i = 0; g->slots && i < nslots; i++) {
        free(g->slots[i].bufs);
        free(g->slots[i].lens);
        free(g->slots[i].got);
      }
      free(g->slots);
      free(g->members);
      free(g->left);
      free(g);
    }
    aggdRefuse(c, AGGD_E_MEM, "out of memory creating the group");
    return NULL;
  }
  memcpy(g->gid, r->g, 16);
  memcpy(g->key, k, 16);
  g->nranks = r->nranks;
  g->shard = r->shard;
  g->nshards = r->nshards;
  g->commId = r->commId;
  g->serial = ++aggd.nextSerial;
  g->window = (uint32_t)window;
  g->chunk = (uint32_t)chunk;
  g->nslots = (int)nslots;
  g->reserved = need;
  g->used = overhead;
  g->created = aggdNowMs();
  aggd.memUsed += overhead;
  if (aggd.memUsed > aggd.memPeak) aggd.memPeak = aggd.memUsed;
  aggd.memReserved += need;
  if (aggd.memReserved > aggd.reservedPeak) aggd.reservedPeak = aggd.memReserved;
  g->next = aggd.groups;
  aggd.groups = g;
  aggd.ngroups++;
  aggd.groupsCreated++;
  aggdLog("group %016llx (commId %llx, shard %u/%u, %u members) created by rank %u (%s): %llu bytes reserved",
          gidShort(g->gid), (unsigned long long)g->commId, g->shard, g->nshards, g->nranks, r->rank, c->peer,
          (unsigned long long)need);
  return g;
}

/* c's registration against an existing group: MAC under the stored key, same shape, free rank. */
static void join(aggdConn* c, aggdGroup* g) {
  const aggdRegister* r = &c->reg;
  uint8_t mac[16];
  aggdRegisterMac(g->key, c->nonce, r, mac);
  if (aggdCtCompare(mac, r->mac, 16)) {
    aggd.refusedAuth++;
    aggdRefuse(c, AGGD_E_AUTH, "authentication failed for group %016llx rank %u", gidShort(r->g), r->rank);
    return;
  }
  if (r->nranks != g->nranks || r->nshards != g->nshards) {
    aggdRefuse(c, AGGD_E_MISMATCH, "group %016llx has %u members and %u shards, rank %u says %u and %u",
               gidShort(g->gid), g->nranks, g->nshards, r->rank, r->nranks, r->nshards);
    return;
  }
  if (g->members[r->rank] || g->left[r->rank]) {
    aggdRefuse(c, AGGD_E_RANK, "rank %u of group %016llx is already registered", r->rank, gidShort(g->gid));
    return;
  }
  g->members[r->rank] = c;
  g->nregistered++;
  g->nactive++;
  c->g = g;
  c->rank = (int)r->rank;
  c->state = AGGD_C_MEMBER;
  c->nextContrib = c->nextResult = 0;
  c->win.rounds = c->winRound = 0;
  c->lastRecv = aggdNowMs();
  uint8_t body[8];
  aggdPut32(body, g->window);
  aggdPut32(body + 4, g->chunk);
  aggdQueue(c, AGGD_ACCEPT, 0, body, 8);
}

void aggdOnRegister(aggdConn* c) {
  const aggdRegister* r = &c->reg;
  if (r->nranks < 1 || r->nranks > AGGD_MAX_NRANKS || r->rank >= r->nranks || r->nshards < 1 ||
      r->nshards > AGGD_MAX_SHARDS || r->shard >= r->nshards) {
    aggdRefuse(c, AGGD_E_LIMIT, "bad registration: rank %u of %u, shard %u of %u (at most %d members, %d shards)",
               r->rank, r->nranks, r->shard, r->nshards, AGGD_MAX_NRANKS, AGGD_MAX_SHARDS);
    return;
  }
  aggdGroup* g = findGroup(r->g, r->shard);
  if (g) {
    join(c, g);
  } else { /* the first member of this group here: it proves K */
    c->state = AGGD_C_KEY;
    aggdQueue(c, AGGD_NEED_KEY, 0, NULL, 0);
  }
}

void aggdOnKey(aggdConn* c, const uint8_t k[16]) {
  static const char glabel[] = "comm_aggd group id v1";
  const aggdRegister* r = &c->reg;
  uint8_t gid[16], mac[16];
  aggdSip s;
  aggdSipInit(&s, k);
  aggdSipUpdate(&s, glabel, sizeof(glabel) - 1);
  aggdSipFinal(&s, gid);
  aggdRegisterMac(k, c->nonce, r, mac);
  if (aggdCtCompare(gid, r->g, 16) || aggdCtCompare(mac, r->mac, 16)) {
    aggd.refusedAuth++;
    aggdRefuse(c, AGGD_E_AUTH, "authentication failed: group id %016llx is not derived from the key, or wrong MAC",
               gidShort(r->g));
    return;
  }
  aggdGroup* g = findGroup(r->g, r->shard); /* another member may have created it meanwhile */
  if (!g) g = createGroup(c, k);
  if (g) join(c, g);
}

void aggdOnOp(aggdConn* c) {
  aggdGroup* g = c->g;
  aggdWin w;
  if (c->winRound < c->win.rounds) {
    aggdMemberGone(c, AGGD_E_PROTO, "announced an operation before contributing to all rounds of the last");
    return;
  }
  if (aggdOpUnpack(c->ctrl, &w) != 0 || aggdWinInit(&w, g->nranks, g->nshards, g->shard, g->chunk) != 0 ||
      w.rounds == 0 || (w.kind == AGGD_K_ALLGATHER && (uint64_t)(g->nranks - 1) * g->chunk > UINT32_MAX)) {
    aggdMemberGone(c, AGGD_E_PROTO, "announced a malformed allgather or reducescatter");
    return;
  }
  c->win = w;
  c->winRound = 0;
}

/* Two members' OPs are the same operation. */
static int sameWin(const aggdWin* a, const aggdWin* b) {
  return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->bpr == b->bpr && a->wo == b->wo &&
         a->wb == b->wb;
}

int aggdOnContribHeader(aggdConn* c) {
  aggdGroup* g = c->g;
  const aggdHdr* h = &c->h;
  int kind = h->kind, dtype = (int)(h->arg & 0xff), op = (int)((h->arg >> 8) & 0xff);
  size_t esize = aggdTypeSize(dtype);
  int bad = h->seq != c->nextContrib || h->seq >= c->nextResult + g->window || h->len > g->chunk;
  if (kind == AGGD_K_ALLREDUCE) {
    bad = bad || h->len == 0 || esize == 0 || op > 3 || (h->arg >> 16) != 0 || h->len % esize != 0;
  } else { /* the round of its open OP, of the length the layout gives */
    bad = bad || kind != (int)c->win.kind || c->winRound >= c->win.rounds ||
          h->arg != (kind == AGGD_K_REDUCESCATTER ? c->win.dtype | (c->win.op << 8) : 0u) ||
          h->len != aggdWinRoundLen(&c->win, c->winRound, (uint64_t)c->rank);
  }
  if (bad) {
    aggdMemberGone(c, AGGD_E_PROTO, "sent a bad contribution (beyond its credits, or malformed)");
    return -1;
  }
  if (g->nleft > 0) {
    aggdMemberGone(c, AGGD_E_FAILED, "contributed after another member left the group");
    return -1;
  }
  aggdSlot* s = &g->slots[h->seq % (uint64_t)g->nslots];
  if (!s->inUse) {
    s->inUse = 1;
    s->seq = h->seq;
    s->kind = kind;
    s->bytes = kind == AGGD_K_ALLGATHER ? 0 : h->len;
    s->dtype = dtype;
    s->op = op;
    s->round = c->winRound;
    if (kind != AGGD_K_ALLREDUCE) s->win = c->win;
    s->firstMs = aggdNowMs();
  } else if (s->seq != h->seq || s->complete) {
    aggdMemberGone(c, AGGD_E_PROTO, "contributed to an operation out of its window");
    return -1;
  } else if (s->kind != kind ||
             (kind == AGGD_K_ALLREDUCE && (s->bytes != h->len || s->dtype != dtype || s->op != op)) ||
             (kind != AGGD_K_ALLREDUCE && (s->round != c->winRound || !sameWin(&s->win, &c->win)))) {
    aggdFailGroup(g, c, AGGD_E_MISMATCH,
                  "members disagree on operation %llu: rank %d sent %u bytes of kind %d type %d op %d (round %llu), "
                  "others %u bytes of kind %d type %d op %d (round %llu)",
                  (unsigned long long)h->seq, c->rank, h->len, kind, dtype, op, (unsigned long long)c->winRound,
                  s->bytes, s->kind, s->dtype, s->op, (unsigned long long)s->round);
    return -1;
  }
  if (h->len == 0) return 0; /* an empty allgather contribution: nothing to hold */
  c->contrib = bufAlloc(g, h->len);
  if (!c->contrib) {
    aggdFailGroup(g, c, AGGD_E_MEM, "no memory for a contribution of %u bytes (group holds %zu of %zu)", h->len,
                  g->used, g->reserved);
    return -1;
  }
  return 0;
}

static void complete(aggdGroup* g, aggdSlot* s) {
  commRedOpArgs args;
  if (s->kind == AGGD_K_ALLGATHER) { /* nothing to reduce: each member is sent the others' contributions */
    s->complete = 1;
    s->pending = g->nactive;
    g->completed++;
    aggd.ops++;
    aggd.opsKind[AGGD_K_ALLGATHER]++;
    for (uint32_t r = 0; r < g->nranks; r++)
      if (g->members[r]) aggdFlush(g->members[r]);
    return;
  }
  if (commRedOpArgsBuiltin((commRedOp_t)s->op, (commDataType_t)s->dtype, (int)g->nranks, &args) != commSuccess) {
    aggdFailGroup(g, NULL, AGGD_E_PROTO, "cannot reduce type %d with op %d", s->dtype, s->op);
    return;
  }
  size_t n = s->bytes / aggdTypeSize(s->dtype);
  uint8_t* acc = s->bufs[0];
  for (uint32_t i = 1; i < g->nranks; i++) { /* fixed member order: acc = m0 op m1 op m2 ... */
    commReduceLocal(&args, acc, acc, s->bufs[i], n, 0, 0);
    bufFree(g, s->bufs[i], s->lens[i]);
    s->bufs[i] = NULL;
    s->lens[i] = 0;
  }
  s->bufs[0] = NULL;
  s->lens[0] = 0;
  s->result = acc;
  s->complete = 1;
  s->pending = g->nactive;
  g->completed++;
  aggd.ops++;
  aggd.opsKind[s->kind]++;
  for (uint32_t r = 0; r < g->nranks; r++)
    if (g->members[r]) aggdFlush(g->members[r]);
}

void aggdOnContrib(aggdConn* c) {
  aggdGroup* g = c->g;
  aggdSlot* s = &g->slots[c->h.seq % (uint64_t)g->nslots];
  s->bufs[c->rank] = c->contrib;
  s->lens[c->rank] = c->h.len;
  s->got[c->rank] = 1;
  c->contrib = NULL;
  s->narrived++;
  c->nextContrib++;
  if (s->kind != AGGD_K_ALLREDUCE) c->winRound++;
  /* Members contribute in order, so operations complete in order: this one is the oldest incomplete. */
  if (s->narrived == (int)g->nranks && s->seq == g->completed) complete(g, s);
}

/* One result fewer to send for slot s (sent, or its member left). */
static void resultDone(aggdGroup* g, aggdSlot* s) {
  if (--s->pending <= 0) slotReset(g, s);
}

void aggdOnBye(aggdConn* c) {
  aggdGroup* g = c->g;
  for (int i = 0; i < g->nslots; i++)
    if (g->slots[i].inUse && !g->slots[i].complete) {
      aggdMemberGone(c, AGGD_E_FAILED, "left the group with operations in flight");
      return;
    }
  for (uint64_t k = c->nextResult; k < g->completed; k++) resultDone(g, &g->slots[k % (uint64_t)g->nslots]);
  g->members[c->rank] = NULL;
  g->left[c->rank] = 1;
  g->nleft++;
  g->nactive--;
  c->g = NULL;
  c->dead = 1;
  if (g->nactive == 0) {
    aggdLog("group %016llx (commId %llx, shard %u/%u) closed after %llu operations; its %zu bytes freed",
            gidShort(g->gid), (unsigned long long)g->commId, g->shard, g->nshards, (unsigned long long)g->completed,
            g->reserved);
    aggd.groupsClosed++;
    freeGroup(g);
  }
}

int aggdHasResults(const aggdConn* c) { return c->g && c->nextResult < c->g->completed; }

/* Member rank's result of slot s: its body's bytes. */
static size_t resultLen(const aggdGroup* g, const aggdSlot* s, int rank) {
  if (s->kind == AGGD_K_ALLREDUCE) return s->bytes;
  if (s->kind == AGGD_K_REDUCESCATTER) {
    uint64_t off, at, len;
    aggdWinRsPart(&s->win, s->round, (uint64_t)rank, &off, &at, &len);
    return (size_t)len;
  }
  size_t n = 0;
  for (uint32_t m = 0; m < g->nranks; m++)
    if ((int)m != rank) n += s->lens[m];
  return n;
}

#define AGGD_RES_IOV 64
/* The body of member rank's result of slot s from byte skip on, into iov (at most AGGD_RES_IOV - 1 entries). */
static int resultIov(const aggdGroup* g, const aggdSlot* s, int rank, size_t skip, struct iovec* iov) {
  int n = 0;
  if (s->kind != AGGD_K_ALLGATHER) {
    uint64_t off = 0, at, len = s->bytes;
    if (s->kind == AGGD_K_REDUCESCATTER) aggdWinRsPart(&s->win, s->round, (uint64_t)rank, &off, &at, &len);
    if (skip < len) {
      iov[n].iov_base = s->result + off + skip;
      iov[n++].iov_len = (size_t)len - skip;
    }
    return n;
  }
  for (uint32_t m = 0; m < g->nranks && n < AGGD_RES_IOV - 1; m++) { /* the others' contributions, in order */
    if ((int)m == rank || s->lens[m] == 0) continue;
    if (skip >= s->lens[m]) {
      skip -= s->lens[m];
      continue;
    }
    iov[n].iov_base = s->bufs[m] + skip;
    iov[n++].iov_len = s->lens[m] - skip;
    skip = 0;
  }
  return n;
}

int aggdWriteResults(aggdConn* c) {
  while (c->g && c->nextResult < c->g->completed) {
    aggdGroup* g = c->g;
    aggdSlot* s = &g->slots[c->nextResult % (uint64_t)g->nslots];
    if (c->resOff == 0) {
      c->resLen = resultLen(g, s, c->rank);
      aggdHdrPack(c->resHdr, AGGD_RESULT, (uint32_t)c->resLen, 0, s->seq);
    }
    size_t total = AGGD_HDR_BYTES + c->resLen;
    struct iovec iov[AGGD_RES_IOV];
    int n = 0;
    if (c->resOff < AGGD_HDR_BYTES) {
      iov[n].iov_base = c->resHdr + c->resOff;
      iov[n++].iov_len = AGGD_HDR_BYTES - c->resOff;
    }
    size_t bodyOff = c->resOff > AGGD_HDR_BYTES ? c->resOff - AGGD_HDR_BYTES : 0, want = 0;
    n += resultIov(g, s, c->rank, bodyOff, iov + n);
    for (int i = 0; i < n; i++) want += iov[i].iov_len;
    ssize_t w = 0;
    if (want > 0) {
      struct msghdr mh;
      memset(&mh, 0, sizeof(mh));
      mh.msg_iov = iov;
      mh.msg_iovlen = (size_t)n;
      w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
        return -1;
      }
    }
    c->resOff += (size_t)w;
    if (c->resOff < total) {
      if ((size_t)w < want || want == 0) return 0; /* the socket is full (want 0: cannot happen) */
      continue;                                    /* more pieces than one sendmsg took */
    }
    c->resOff = 0;
    c->nextResult++;
    resultDone(g, s);
  }
  return 0;
}

void aggdCheckTimeouts(int64_t now) {
  aggdGroup* next;
  for (aggdGroup* g = aggd.groups; g; g = next) {
    next = g->next;
    if (g->nregistered < (int)g->nranks && now - g->created > aggd.timeoutMs) {
      aggdFailGroup(g, NULL, AGGD_E_TIMEOUT, "only %d of %u members registered within %lld ms", g->nregistered,
                    g->nranks, (long long)aggd.timeoutMs);
      continue;
    }
    aggdSlot* s = &g->slots[g->completed % (uint64_t)g->nslots];
    if (!s->inUse || s->complete || s->seq != g->completed) continue;
    for (uint32_t r = 0; r < g->nranks; r++) {
      aggdConn* c = g->members[r];
      if (!c || s->got[r] || c->nextContrib > s->seq) continue;
      int64_t since = c->lastRecv > s->firstMs ? c->lastRecv : s->firstMs;
      if (now - since > aggd.timeoutMs) {
        aggdFailGroup(g, c, AGGD_E_TIMEOUT, "member %u (%s) sent nothing for %lld ms while the others waited", r,
                      c->peer, (long long)(now - since));
        break;
      }
    }
  }
}

void aggdFreeAll(void) {
  while (aggd.groups) freeGroup(aggd.groups);
}

void aggdStats(char* buf, size_t n) {
  int members = 0;
  for (aggdGroup* g = aggd.groups; g; g = g->next) members += g->nactive;
  snprintf(buf, n,
           AGGD_STAT_GROUPS "=%d members=%d " AGGD_STAT_MEM "=%zu " AGGD_STAT_PEAK "=%zu " AGGD_STAT_RESERVED
                            "=%zu reserved_peak=%zu " AGGD_STAT_MAX "=%zu groups_created=%llu " AGGD_STAT_FAILED
                            "=%llu groups_closed=%llu " AGGD_STAT_FREED "=%llu " AGGD_STAT_AUTH
                            "=%llu " AGGD_STAT_MEMREF "=%llu refused_other=%llu dropped=%llu ops=%llu " AGGD_STAT_AG
                            "=%llu " AGGD_STAT_RS "=%llu window=%u chunk=%u",
           aggd.ngroups, members, aggd.memUsed, aggd.memPeak, aggd.memReserved, aggd.reservedPeak, aggd.maxMem,
           (unsigned long long)aggd.groupsCreated, (unsigned long long)aggd.groupsFailed,
           (unsigned long long)aggd.groupsClosed, (unsigned long long)(aggd.groupsFailed + aggd.groupsClosed),
           (unsigned long long)aggd.refusedAuth, (unsigned long long)aggd.refusedMem,
           (unsigned long long)aggd.refusedOther, (unsigned long long)aggd.dropped, (unsigned long long)aggd.ops,
           (unsigned long long)aggd.opsKind[AGGD_K_ALLGATHER], (unsigned long long)aggd.opsKind[AGGD_K_REDUCESCATTER],
           aggd.window, aggd.chunk);
}
