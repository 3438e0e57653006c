/* comm_aggd's wire protocol: a software SHARP. Shared by the daemon (tools/aggd/comm_aggd.c), its client, the
 * CollNet plugin libcomm-collnet-aggd.so (transports/collnet/aggd/aggd_plugin.c), and the test
 * (tests/integration/test_aggd.c). Header only, C11, system headers only. SPDX-License-Identifier: Apache-2.0
 *
 * ROLES. A group is the set of node leaders of one communicator's channel: nranks members, member index =
 * rank. With D daemons (COMM_AGGD=host:port,...), every member connects to every daemon; daemon i serves
 * shard i of every operation (the buffer cut into D contiguous, element-aligned, balanced parts:
 * aggdShard()). A group lives on daemon i as (G, shard i); groups are isolated from each other.
 *
 * KEYS (no secret is configured anywhere). listen() writes a handle {magic, version, commId, 128-bit random
 * nonce} (aggdHandle). libcomm exchanges the handles over its authenticated bootstrap, so the members, and
 * only they, know all of them. In connect() every member derives
 *   K = SipHash-2-4-128(key = rank 0's nonce, "comm_aggd group key v1" | nranks | handle 0 | ... | handle n-1)
 *   G = SipHash-2-4-128(key = K, "comm_aggd group id v1")                                  (aggdDeriveGroup)
 *
 * MESSAGES. Every message is a 24-byte header (aggdHdr: magic "AGGD", type, len = body bytes that follow,
 * arg, seq; little-endian) and a body. Control bodies are at most AGGD_MAX_CTRL bytes.
 *   daemon -> member  HELLO    body {version u32, daemon nonce[16]}              (on accept, before anything)
 *   member -> daemon  REGISTER body aggdRegister {G[16], rank, nranks, shard, nshards, commId,
 *                               mac = SipHash-128(K, "comm_aggd register v1" | daemon nonce | the fields)}
 *   daemon -> member  NEED_KEY (no body): the daemon does not know G yet (this member is the first)
 *   member -> daemon  KEY      body {K[16]}: the daemon checks G == H(K, "group id") and the MAC under K,
 *                               then creates the group and keeps K for its life
 *   daemon -> member  ACCEPT   body {window u32, chunk u32}: registered; the member's credits (below)
 *   daemon -> member  REFUSE   arg = AGGD_E_*, body = a message for the log; the daemon closes
 *   member -> daemon  CONTRIB  seq = k (this member's k-th contribution to this daemon), header kind = AGGD_K_*,
 *                               arg = datatype | op << 8 (allgather: 0), body = len payload bytes (len <= chunk;
 *                               allreduce: 1 <= len, whole elements; allgather / reducescatter: the length WINDOWS
 *                               gives for this round and member, 0 allowed for allgather)
 *   daemon -> member  RESULT   seq = k, body = allreduce: the reduction of the members' k-th payloads, in member
 *                               order (acc = m0 op m1 op ... op m(n-1)), the same bytes for everyone; allgather: the
 *                               other members' k-th payloads, concatenated in member order (its own left out);
 *                               reducescatter: of the reduction (as allreduce's), only the bytes of the receiving
 *                               member's slice (often none: an empty RESULT, which still returns the credit)
 *   daemon -> member  ERROR    arg = AGGD_E_*, body = why (the group failed: a member died, timed out, ...);
 *                               the daemon then closes
 *   member -> daemon  OP       body aggdOp {kind, dtype, op, 0, bytesPerRank, windowOffset, windowBytes}: announces
 *                               this member's next allgather / reducescatter on this daemon (WINDOWS below); sent
 *                               just before its first CONTRIB, only to daemons whose shard of the window is not empty
 *   member -> daemon  BYE      (no body): leaving the group cleanly (closeColl)
 *   anyone -> daemon  STATS    (no body, instead of REGISTER): the daemon answers STATS with one text line
 *                               "key=value ..." (AGGD_STAT_* names; memory, groups, refusals) and closes
 * Every member of a group contributes to op k of a daemon the same kind, datatype and op, and the same len
 * (allreduce, reducescatter) or the same OP and round (allgather, reducescatter); a mismatch fails the group.
 *
 * WINDOWS (allgather, reducescatter; NCCL's iallgather / ireducescatter). The logical buffer is nranks slices
 * of bytesPerRank; an operation covers its window [windowOffset, +windowBytes). Slice s's bytes inside the
 * window (its piece) are cut over the D daemons as aggdShard cuts a buffer (bytes for allgather, elements for
 * reducescatter): daemon i holds shard i of every slice's piece. On daemon i:
 *   allgather      member m contributes its own shard, in rounds of `chunk` bytes: round j carries bytes
 *                  [j*chunk, +chunk) of it (possibly none); rounds = the longest member shard / chunk, rounded up.
 *                  Member r receives the other members' round-j bytes; its own it copies itself.
 *   reducescatter  every member contributes the same stream: the shards of slices 0..n-1, concatenated, cut in
 *                  rounds of `chunk` bytes (whole elements: chunk % 8 == 0). The daemon reduces round j as an
 *                  allreduce and sends member r the bytes of the round that belong to slice r.
 * aggdWinInit computes the layout from the OP fields and the group (nranks, D, i, chunk), the same on both ends.
 *
 * CREDITS. ACCEPT grants `window` operations and `chunk` bytes: a member may have at most `window`
 * contributions whose results it has not received yet, each at most `chunk` bytes. A result returns one
 * credit. A member that sends beyond its credits is dropped (and its group fails). So a group holds at most
 * nranks x window x chunk bytes of buffers on a daemon; the daemon reserves that much when the group is
 * created and refuses (REFUSE AGGD_E_MEM, with the numbers) a group that would take it over --max-mem.
 * Operations larger than `chunk` are sent as several contributions (the plugin cuts shards into chunks).
 *
 * FAILURES. A member whose connection closes without BYE, errors, sends bad input, or sends nothing for the
 * daemon's --timeout-ms while others wait for its contribution fails the group: every remaining member gets
 * ERROR and is closed, the group's memory is freed. A group whose members do not all register within
 * --timeout-ms fails the same way. Bad input from anyone (wrong magic, truncated or oversized messages,
 * unknown types) only drops that connection.
 *
 * THREAT MODEL. Authenticated, not encrypted, as libcomm's bootstrap. A stranger (not a member) knows no
 * nonce, so it cannot compute K or G: it cannot join an existing group (its MAC fails under the stored K,
 * constant-time compare), take a rank, read or alter another group's data, or claim a group id it did not
 * derive (G must equal H(K, "group id")). Refusals are counted and logged once each. A stranger can still
 * create a group of its own (the daemon has no pre-shared secret); it is bounded by --max-mem, --max-conns and
 * the formation timeout. Out of scope: a passive sniffer or an active man in the middle on the network between
 * members and daemons (they see G, K and the data in clear), and a malicious member of a group (it can
 * corrupt its own group's results). The STATS query is unauthenticated and shows only aggregate numbers.
 *
 * NOT DONE. Host memory only; sum, prod, max, min (avg and user ops are never offloaded by NCCL). */
#ifndef COMM_AGGD_PROTO_H_
#define COMM_AGGD_PROTO_H_

#include <netdb.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#define AGGD_MAGIC 0x44474741u        /* "AGGD" little-endian */
#define AGGD_VERSION 2u               /* 2: allgather and reducescatter (OP, CONTRIB kind) */
#define AGGD_HANDLE_MAGIC 0x31484741u /* "AGH1" */
#define AGGD_HDR_BYTES 24
#define AGGD_MAX_CTRL 1024 /* largest control body */
#define AGGD_MAX_NRANKS 65536
#define AGGD_MAX_SHARDS 64
#define AGGD_MAX_CHUNK (64u << 20)

enum {
  AGGD_HELLO = 1,
  AGGD_REGISTER = 2,
  AGGD_NEED_KEY = 3,
  AGGD_KEY = 4,
  AGGD_ACCEPT = 5,
  AGGD_REFUSE = 6,
  AGGD_CONTRIB = 7,
  AGGD_RESULT = 8,
  AGGD_ERROR = 9,
  AGGD_BYE = 10,
  AGGD_STATS = 11,
  AGGD_OP = 12
};

/* Operation kinds (CONTRIB header's kind, OP's kind). */
enum { AGGD_K_ALLREDUCE = 0, AGGD_K_ALLGATHER = 1, AGGD_K_REDUCESCATTER = 2 };

/* Refusal and error codes (REFUSE / ERROR arg). */
enum {
  AGGD_E_AUTH = 1,     /* wrong MAC, or G not derived from K */
  AGGD_E_MEM = 2,      /* the group's buffers would exceed --max-mem */
  AGGD_E_RANK = 3,     /* rank already registered, or out of range */
  AGGD_E_MISMATCH = 4, /* nranks / shard count differ from the group's, or members disagree on an op */
  AGGD_E_PROTO = 5,    /* malformed message */
  AGGD_E_LIMIT = 6,    /* too many connections, nranks too large */
  AGGD_E_FAILED = 7,   /* the group failed: a member closed or errored */
  AGGD_E_TIMEOUT = 8   /* a member sent nothing for --timeout-ms, or the group did not form in time */
};

/* The plugin's handle (first bytes of NCCL's 128-byte handle buffer). */
#define AGGD_HANDLE_BYTES 32
typedef struct {
  uint32_t magic;   /* AGGD_HANDLE_MAGIC */
  uint32_t version; /* AGGD_VERSION */
  uint64_t commId;  /* v11 init's commId (0 before v11): for the daemon's log lines */
  uint8_t nonce[16];
} aggdHandle;

typedef struct {
  uint32_t magic;
  uint16_t type;
  uint16_t kind; /* CONTRIB: AGGD_K_*; 0 on every other message */
  uint32_t len;  /* body bytes after the header */
  uint32_t arg;
  uint64_t seq;
} aggdHdr;

#define AGGD_REGISTER_BYTES 56 /* G 16 | rank 4 | nranks 4 | shard 4 | nshards 4 | commId 8 | mac 16 */
typedef struct {
  uint8_t g[16];
  uint32_t rank, nranks, shard, nshards;
  uint64_t commId;
  uint8_t mac[16];
} aggdRegister;

/* STATS keys (the daemon's reply: "groups=1 members=4 ..."). */
#define AGGD_STAT_GROUPS "groups" /* groups alive */
#define AGGD_STAT_MEM "mem_used"  /* bytes of operation buffers held now */
#define AGGD_STAT_PEAK "mem_peak" /* the most ever held at once */
#define AGGD_STAT_RESERVED "mem_reserved"
#define AGGD_STAT_MAX "max_mem"
#define AGGD_STAT_FREED "groups_freed"   /* groups failed or closed, their memory freed */
#define AGGD_STAT_FAILED "groups_failed" /* groups failed (a member died, timed out, misbehaved) */
#define AGGD_STAT_AUTH "refused_auth"
#define AGGD_STAT_MEMREF "refused_mem"
#define AGGD_STAT_AG "rounds_allgather"     /* allgather rounds served */
#define AGGD_STAT_RS "rounds_reducescatter" /* reducescatter rounds served */

/* ---------------------------------------------------------------- little-endian helpers */
static inline void aggdPut32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void aggdPut64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t aggdGet32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static inline uint64_t aggdGet64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static inline void aggdHdrPackKind(uint8_t* p, uint16_t type, uint16_t kind, uint32_t len, uint32_t arg, uint64_t seq) {
  aggdPut32(p, AGGD_MAGIC);
  p[4] = (uint8_t)type;
  p[5] = (uint8_t)(type >> 8);
  p[6] = (uint8_t)kind;
  p[7] = (uint8_t)(kind >> 8);
  aggdPut32(p + 8, len);
  aggdPut32(p + 12, arg);
  aggdPut64(p + 16, seq);
}
static inline void aggdHdrPack(uint8_t* p, uint16_t type, uint32_t len, uint32_t arg, uint64_t seq) {
  aggdHdrPackKind(p, type, 0, len, arg, seq);
}
static inline void aggdHdrUnpack(const uint8_t* p, aggdHdr* h) {
  h->magic = aggdGet32(p);
  h->type = (uint16_t)(p[4] | (p[5] << 8));
  h->kind = (uint16_t)(p[6] | (p[7] << 8));
  h->len = aggdGet32(p + 8);
  h->arg = aggdGet32(p + 12);
  h->seq = aggdGet64(p + 16);
}

static inline void aggdHandlePack(uint8_t* p, const aggdHandle* h) {
  aggdPut32(p, h->magic);
  aggdPut32(p + 4, h->version);
  aggdPut64(p + 8, h->commId);
  memcpy(p + 16, h->nonce, 16);
}
static inline void aggdHandleUnpack(const uint8_t* p, aggdHandle* h) {
  h->magic = aggdGet32(p);
  h->version = aggdGet32(p + 4);
  h->commId = aggdGet64(p + 8);
  memcpy(h->nonce, p + 16, 16);
}

static inline void aggdRegisterPack(uint8_t* p, const aggdRegister* r) {
  memcpy(p, r->g, 16);
  aggdPut32(p + 16, r->rank);
  aggdPut32(p + 20, r->nranks);
  aggdPut32(p + 24, r->shard);
  aggdPut32(p + 28, r->nshards);
  aggdPut64(p + 32, r->commId);
  memcpy(p + 40, r->mac, 16);
}
static inline void aggdRegisterUnpack(const uint8_t* p, aggdRegister* r) {
  memcpy(r->g, p, 16);
  r->rank = aggdGet32(p + 16);
  r->nranks = aggdGet32(p + 20);
  r->shard = aggdGet32(p + 24);
  r->nshards = aggdGet32(p + 28);
  r->commId = aggdGet64(p + 32);
  memcpy(r->mac, p + 40, 16);
}

/* Shard i of n of a buffer of count elements: [*first, *first + *num) (balanced, the first count % n shards
 * one element longer). */
static inline void aggdShard(size_t count, int n, int i, size_t* first, size_t* num) {
  size_t base = count / (size_t)n, rem = count % (size_t)n, ui = (size_t)i;
  *first = ui * base + (ui < rem ? ui : rem);
  *num = base + (ui < rem ? 1 : 0);
}

/* Element sizes of NCCL's datatypes 0..11 (0: unknown). */
static inline size_t aggdTypeSize(int t) {
  static const unsigned char sz[12] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return (t >= 0 && t < 12) ? sz[t] : 0;
}

/* ---------------------------------------------------------------- windows: allgather and reducescatter */
#define AGGD_OP_BYTES 40 /* kind 4 | dtype 4 | op 4 | 0 4 | bytesPerRank 8 | windowOffset 8 | windowBytes 8 */
typedef struct {
  /* OP's fields */
  uint32_t kind, dtype, op; /* allgather: dtype = op = 0 */
  uint64_t bpr, wo, wb;     /* bytesPerRank, windowOffset, windowBytes */
  /* the group's, and what aggdWinInit derives */
  uint32_t nranks, nshards, shard, chunk;
  uint64_t esize;               /* allgather: 1 */
  uint64_t s0, s1;              /* the slices the window touches */
  uint64_t lFirst, lMid, lLast; /* shard bytes on this daemon of slice s0, of any slice between, of slice s1 */
  uint64_t total;               /* reducescatter: the stream's bytes on this daemon */
  uint64_t rounds;
} aggdWin;

static inline void aggdOpPack(uint8_t* p, const aggdWin* w) {
  aggdPut32(p, w->kind);
  aggdPut32(p + 4, w->dtype);
  aggdPut32(p + 8, w->op);
  aggdPut32(p + 12, 0);
  aggdPut64(p + 16, w->bpr);
  aggdPut64(p + 24, w->wo);
  aggdPut64(p + 32, w->wb);
}
static inline int aggdOpUnpack(const uint8_t* p, aggdWin* w) {
  memset(w, 0, sizeof(*w));
  w->kind = aggdGet32(p);
  w->dtype = aggdGet32(p + 4);
  w->op = aggdGet32(p + 8);
  w->bpr = aggdGet64(p + 16);
  w->wo = aggdGet64(p + 24);
  w->wb = aggdGet64(p + 32);
  return aggdGet32(p + 12) == 0 ? 0 : -1;
}

/* Slice s's piece of the window starts at byte *a of the slice; its shard on this daemon is *len bytes at byte
 * *f of the piece (all 0 when the window misses slice s). */
static inline void aggdWinSlice(const aggdWin* w, uint64_t s, uint64_t* a, uint64_t* f, uint64_t* len) {
  *a = *f = *len = 0;
  if (w->wb == 0 || s < w->s0 || s > w->s1) return;
  uint64_t lo = s * w->bpr, hi = lo + w->bpr, end = w->wo + w->wb;
  uint64_t beg = w->wo > lo ? w->wo : lo;
  if (end > hi) end = hi;
  size_t first, num;
  aggdShard((size_t)((end - beg) / w->esize), (int)w->nshards, (int)w->shard, &first, &num);
  *a = beg - lo;
  *f = (uint64_t)first * w->esize;
  *len = (uint64_t)num * w->esize;
}

/* Checks OP's fields against the group and derives the layout on daemon `shard` of `nshards`: 0, or -1 when they
 * are malformed (unknown kind, type or op, a window outside nranks x bytesPerRank, not whole elements). */
static inline int aggdWinInit(aggdWin* w, uint32_t nranks, uint32_t nshards, uint32_t shard, uint32_t chunk) {
  w->nranks = nranks;
  w->nshards = nshards;
  w->shard = shard;
  w->chunk = chunk;
  if (w->kind == AGGD_K_ALLGATHER) {
    if (w->dtype != 0 || w->op != 0) return -1;
    w->esize = 1;
  } else if (w->kind == AGGD_K_REDUCESCATTER) {
    w->esize = aggdTypeSize((int)w->dtype);
    if (w->esize == 0 || w->op > 3) return -1;
  } else {
    return -1;
  }
  if (nranks < 1 || nshards < 1 || shard >= nshards || chunk < 8 || chunk % 8 != 0) return -1;
  if (w->bpr == 0 || w->bpr > UINT64_MAX / nranks) return -1;
  uint64_t all = w->bpr * nranks;
  if (w->wo > all || w->wb > all - w->wo) return -1;
  if (w->bpr % w->esize != 0 || w->wo % w->esize != 0 || w->wb % w->esize != 0) return -1;
  w->lFirst = w->lMid = w->lLast = w->total = w->rounds = 0;
  w->s0 = 1;
  w->s1 = 0;
  if (w->wb == 0) return 0;
  w->s0 = w->wo / w->bpr;
  w->s1 = (w->wo + w->wb - 1) / w->bpr;
  uint64_t a, f;
  aggdWinSlice(w, w->s0, &a, &f, &w->lFirst);
  w->lLast = w->lFirst;
  if (w->s1 > w->s0) aggdWinSlice(w, w->s1, &a, &f, &w->lLast);
  if (w->s1 > w->s0 + 1) aggdWinSlice(w, w->s0 + 1, &a, &f, &w->lMid);
  uint64_t most = w->lFirst > w->lMid ? w->lFirst : w->lMid;
  if (w->lLast > most) most = w->lLast;
  w->total = w->s1 > w->s0 ? w->lFirst + (w->s1 - w->s0 - 1) * w->lMid + w->lLast : w->lFirst;
  uint64_t bytes = w->kind == AGGD_K_ALLGATHER ? most : w->total;
  w->rounds = (bytes + chunk - 1) / chunk;
  return 0;
}

/* Reducescatter: where slice s's shard starts in the stream (slices s0 .. s-1 before it). */
static inline uint64_t aggdWinStreamOff(const aggdWin* w, uint64_t s) {
  if (w->wb == 0 || s <= w->s0) return 0;
  if (s > w->s1) return w->total;
  return w->lFirst + (s - w->s0 - 1) * w->lMid;
}
/* Reducescatter: the slice whose shard holds stream byte x (x < total). */
static inline uint64_t aggdWinSliceAt(const aggdWin* w, uint64_t x) {
  if (x < w->lFirst || w->s1 == w->s0) return w->s0;
  x -= w->lFirst;
  if (w->lMid > 0 && x < (w->s1 - w->s0 - 1) * w->lMid) return w->s0 + 1 + x / w->lMid;
  return w->s1;
}
/* Allgather: member m's bytes in round j (from byte j * chunk of its shard). Reducescatter: round j's bytes. */
static inline uint64_t aggdWinRoundLen(const aggdWin* w, uint64_t j, uint64_t m) {
  uint64_t have = w->total, a, f, at = j * w->chunk;
  if (w->kind == AGGD_K_ALLGATHER) aggdWinSlice(w, m, &a, &f, &have);
  if (have <= at) return 0;
  return have - at < w->chunk ? have - at : w->chunk;
}
/* Reducescatter: member m's part of round j: *len bytes at byte *off of the round, byte *at of m's shard. */
static inline void aggdWinRsPart(const aggdWin* w, uint64_t j, uint64_t m, uint64_t* off, uint64_t* at, uint64_t* len) {
  uint64_t a, f, l;
  aggdWinSlice(w, m, &a, &f, &l);
  uint64_t s = aggdWinStreamOff(w, m), lo = j * w->chunk, hi = lo + aggdWinRoundLen(w, j, 0);
  uint64_t b = s > lo ? s : lo, e = s + l < hi ? s + l : hi;
  *off = *at = *len = 0;
  if (l == 0 || b >= e) return;
  *off = b - lo;
  *at = b - s;
  *len = e - b;
}

/* ---------------------------------------------------------------- SipHash-2-4, 128-bit output, streaming */
typedef struct {
  uint64_t v0, v1, v2, v3;
  uint8_t tail[8];
  size_t ntail, total;
} aggdSip;

#define AGGD_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
static inline void aggdSipRound(aggdSip* s) {
  s->v0 += s->v1;
  s->v1 = AGGD_ROTL(s->v1, 13);
  s->v1 ^= s->v0;
  s->v0 = AGGD_ROTL(s->v0, 32);
  s->v2 += s->v3;
  s->v3 = AGGD_ROTL(s->v3, 16);
  s->v3 ^= s->v2;
  s->v0 += s->v3;
  s->v3 = AGGD_ROTL(s->v3, 21);
  s->v3 ^= s->v0;
  s->v2 += s->v1;
  s->v1 = AGGD_ROTL(s->v1, 17);
  s->v1 ^= s->v2;
  s->v2 = AGGD_ROTL(s->v2, 32);
}
static inline void aggdSipBlock(aggdSip* s, uint64_t m) {
  s->v3 ^= m;
  aggdSipRound(s);
  aggdSipRound(s);
  s->v0 ^= m;
}
/* key: 16 bytes (k0 = bytes 0..7, k1 = bytes 8..15, little-endian, as the SipHash paper). */
static inline void aggdSipInit(aggdSip* s, const uint8_t key[16]) {
  uint64_t k0 = aggdGet64(key), k1 = aggdGet64(key + 8);
  s->v0 = 0x736f6d6570736575ull ^ k0;
  s->v1 = 0x646f72616e646f6dull ^ k1 ^ 0xee; /* 0xee: the 128-bit output variant */
  s->v2 = 0x6c7967656e657261ull ^ k0;
  s->v3 = 0x7465646279746573ull ^ k1;
  s->ntail = 0;
  s->total = 0;
}
static inline void aggdSipUpdate(aggdSip* s, const void* data, size_t n) {
  const uint8_t* p = (const uint8_t*)data;
  s->total += n;
  while (n > 0) {
    if (s->ntail == 0 && n >= 8) {
      aggdSipBlock(s, aggdGet64(p));
      p += 8;
      n -= 8;
      continue;
    }
    s->tail[s->ntail++] = *p++;
    n--;
    if (s->ntail == 8) {
      aggdSipBlock(s, aggdGet64(s->tail));
      s->ntail = 0;
    }
  }
}
static inline void aggdSipFinal(aggdSip* s, uint8_t out[16]) {
  uint64_t b = (uint64_t)(s->total & 0xff) << 56;
  for (size_t i = 0; i < s->ntail; i++) b |= (uint64_t)s->tail[i] << (8 * i);
  aggdSipBlock(s, b);
  s->v2 ^= 0xee;
  for (int i = 0; i < 4; i++) aggdSipRound(s);
  aggdPut64(out, s->v0 ^ s->v1 ^ s->v2 ^ s->v3);
  s->v1 ^= 0xdd;
  for (int i = 0; i < 4; i++) aggdSipRound(s);
  aggdPut64(out + 8, s->v0 ^ s->v1 ^ s->v2 ^ s->v3);
}
#undef AGGD_ROTL

/* Constant-time compare of n bytes: 0 when equal. */
static inline int aggdCtCompare(const uint8_t* a, const uint8_t* b, size_t n) {
  uint8_t d = 0;
  for (size_t i = 0; i < n; i++) d |= (uint8_t)(a[i] ^ b[i]);
  return d != 0;
}

/* K and G from the nranks packed handles (handles[r] = AGGD_HANDLE_BYTES bytes of rank r's handle). */
static inline void aggdDeriveGroup(const uint8_t* const* handles, int nranks, uint8_t k[16], uint8_t g[16]) {
  static const char klabel[] = "comm_aggd group key v1", glabel[] = "comm_aggd group id v1";
  aggdSip s;
  uint8_t n4[4];
  aggdSipInit(&s, handles[0] + 16); /* rank 0's nonce */
  aggdSipUpdate(&s, klabel, sizeof(klabel) - 1);
  aggdPut32(n4, (uint32_t)nranks);
  aggdSipUpdate(&s, n4, 4);
  for (int r = 0; r < nranks; r++) aggdSipUpdate(&s, handles[r], AGGD_HANDLE_BYTES);
  aggdSipFinal(&s, k);
  aggdSipInit(&s, k);
  aggdSipUpdate(&s, glabel, sizeof(glabel) - 1);
  aggdSipFinal(&s, g);
}

/* The registration MAC under K: over the daemon's nonce and the packed fields (everything but the MAC). */
static inline void aggdRegisterMac(const uint8_t k[16], const uint8_t dnonce[16], const aggdRegister* r,
                                   uint8_t mac[16]) {
  static const char label[] = "comm_aggd register v1";
  uint8_t body[AGGD_REGISTER_BYTES];
  aggdRegisterPack(body, r);
  aggdSip s;
  aggdSipInit(&s, k);
  aggdSipUpdate(&s, label, sizeof(label) - 1);
  aggdSipUpdate(&s, dnonce, 16);
  aggdSipUpdate(&s, body, AGGD_REGISTER_BYTES - 16);
  aggdSipFinal(&s, mac);
}

/* "host:port" (host may be [v6]) resolved for TCP; flags AI_PASSIVE for a listener. 0 and *res (freeaddrinfo
 * it), or a getaddrinfo error code (EAI_NONAME when spec is not host:port). Daemon and plugin both use it. */
static inline int aggdResolve(const char* spec, int flags, struct addrinfo** res) {
  char host[256];
  const char* colon = strrchr(spec, ':');
  *res = NULL;
  if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof(host)) return EAI_NONAME;
  memcpy(host, spec, (size_t)(colon - spec));
  host[colon - spec] = '\0';
  char* h = host;
  size_t n = strlen(h);
  if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
    h[n - 1] = '\0';
    h++;
  }
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  return getaddrinfo(h, colon + 1, &hints, res);
}

#endif /* COMM_AGGD_PROTO_H_ */
