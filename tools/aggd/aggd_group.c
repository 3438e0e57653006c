/* comm_aggd's groups: registration (authentication, memory reservation), contributions under credits, the
 * reduction in fixed member order (libcomm's own element reductions, src/exec/reduce.h, so the rounding of
 * half, bfloat16 and fp8 is libcomm's), results, and failures that free a group's memory.
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
    bufFree(g, s->bufs[i], s->bytes);
    s->bufs[i] = NULL;
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
  uint64_t overhead = nslots * (sizeof(aggdSlot) + r->nranks * sizeof(uint8_t*)) + r->nranks * (sizeof(aggdConn*) + 1) +
                      sizeof(aggdGroup);
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
  for (uint64_t i = 0; ok && i < nslots; i++) ok = (g->slots[i].bufs = calloc(r->nranks, sizeof(uint8_t*))) != NULL;
  if (!ok) {
    if (g) {
      for (uint64_t i = 0; g->slots && i < nslots; i++) free(g->slots[i].bufs);
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

int aggdOnContribHeader(aggdConn* c) {
  aggdGroup* g = c->g;
  const aggdHdr* h = &c->h;
  int dtype = (int)(h->arg & 0xff), op = (int)((h->arg >> 8) & 0xff);
  size_t esize = aggdTypeSize(dtype);
  if (h->seq != c->nextContrib || h->seq >= c->nextResult + g->window || h->len == 0 || h->len > g->chunk ||
      esize == 0 || op > 3 || (h->arg >> 16) != 0 || h->len % esize != 0) {
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
    s->bytes = h->len;
    s->dtype = dtype;
    s->op = op;
    s->firstMs = aggdNowMs();
  } else if (s->seq != h->seq || s->complete) {
    aggdMemberGone(c, AGGD_E_PROTO, "contributed to an operation out of its window");
    return -1;
  } else if (s->bytes != h->len || s->dtype != dtype || s->op != op) {
    aggdFailGroup(g, c, AGGD_E_MISMATCH,
                  "members disagree on operation %llu: rank %d sent %u bytes of type %d op %d, others %u bytes "
                  "of type %d op %d",
                  (unsigned long long)h->seq, c->rank, h->len, dtype, op, s->bytes, s->dtype, s->op);
    return -1;
  }
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
  if (commRedOpArgsBuiltin((commRedOp_t)s->op, (commDataType_t)s->dtype, (int)g->nranks, &args) != commSuccess) {
    aggdFailGroup(g, NULL, AGGD_E_PROTO, "cannot reduce type %d with op %d", s->dtype, s->op);
    return;
  }
  size_t n = s->bytes / aggdTypeSize(s->dtype);
  uint8_t* acc = s->bufs[0];
  for (uint32_t i = 1; i < g->nranks; i++) { /* fixed member order: acc = m0 op m1 op m2 ... */
    commReduceLocal(&args, acc, acc, s->bufs[i], n, 0, 0);
    bufFree(g, s->bufs[i], s->bytes);
    s->bufs[i] = NULL;
  }
  s->bufs[0] = NULL;
  s->result = acc;
  s->complete = 1;
  s->pending = g->nactive;
  g->completed++;
  aggd.ops++;
  for (uint32_t r = 0; r < g->nranks; r++)
    if (g->members[r]) aggdFlush(g->members[r]);
}

void aggdOnContrib(aggdConn* c) {
  aggdGroup* g = c->g;
  aggdSlot* s = &g->slots[c->h.seq % (uint64_t)g->nslots];
  s->bufs[c->rank] = c->contrib;
  c->contrib = NULL;
  s->narrived++;
  c->nextContrib++;
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

int aggdWriteResults(aggdConn* c) {
  while (c->g && c->nextResult < c->g->completed) {
    aggdGroup* g = c->g;
    aggdSlot* s = &g->slots[c->nextResult % (uint64_t)g->nslots];
    if (c->resOff == 0) aggdHdrPack(c->resHdr, AGGD_RESULT, s->bytes, 0, s->seq);
    size_t total = AGGD_HDR_BYTES + (size_t)s->bytes;
    struct iovec iov[2];
    int n = 0;
    if (c->resOff < AGGD_HDR_BYTES) {
      iov[n].iov_base = c->resHdr + c->resOff;
      iov[n++].iov_len = AGGD_HDR_BYTES - c->resOff;
      iov[n].iov_base = s->result;
      iov[n++].iov_len = s->bytes;
    } else {
      iov[n].iov_base = s->result + (c->resOff - AGGD_HDR_BYTES);
      iov[n++].iov_len = total - c->resOff;
    }
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = iov;
    mh.msg_iovlen = (size_t)n;
    ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
      return -1;
    }
    c->resOff += (size_t)w;
    if (c->resOff < total) return 0;
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
      if (!c || s->bufs[r] || c->nextContrib > s->seq) continue;
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
                            "=%llu " AGGD_STAT_MEMREF
                            "=%llu refused_other=%llu dropped=%llu ops=%llu window=%u chunk=%u",
           aggd.ngroups, members, aggd.memUsed, aggd.memPeak, aggd.memReserved, aggd.reservedPeak, aggd.maxMem,
           (unsigned long long)aggd.groupsCreated, (unsigned long long)aggd.groupsFailed,
           (unsigned long long)aggd.groupsClosed, (unsigned long long)(aggd.groupsFailed + aggd.groupsClosed),
           (unsigned long long)aggd.refusedAuth, (unsigned long long)aggd.refusedMem,
           (unsigned long long)aggd.refusedOther, (unsigned long long)aggd.dropped, (unsigned long long)aggd.ops,
           aggd.window, aggd.chunk);
}
