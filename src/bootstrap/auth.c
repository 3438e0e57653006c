/* Authentication of the bootstrap's connections: SipHash-2-4 (implemented from Aumasson and Bernstein's
 * specification, "SipHash: a fast short-input PRF", 2012), the keys, both sides of the challenge-response
 * handshake (see bootstrap_auth.h) and the rate-limited report of dropped strangers. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bootstrap_auth.h"

#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "utils.h"

static_assert(sizeof(bootAuthMsg) == 104, "bootAuthMsg has no hidden padding");
static_assert(sizeof(bootChallenge) == 24 && sizeof(bootProof) == 24, "handshake messages have fixed sizes");

#define BOOT_LABEL_CLIENT "libcomm client 1"
#define BOOT_LABEL_LISTENER "libcomm listenr1"
#define BOOT_LABEL_LEN 16

/* ---------------------------------------------------------------------------------------------------- */
/* SipHash-2-4 */

static inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

static inline void sipRound(uint64_t* v) {
  v[0] += v[1];
  v[1] = rotl(v[1], 13);
  v[1] ^= v[0];
  v[0] = rotl(v[0], 32);
  v[2] += v[3];
  v[3] = rotl(v[3], 16);
  v[3] ^= v[2];
  v[0] += v[3];
  v[3] = rotl(v[3], 21);
  v[3] ^= v[0];
  v[2] += v[1];
  v[1] = rotl(v[1], 17);
  v[1] ^= v[2];
  v[2] = rotl(v[2], 32);
}

static inline void sipBlock(bootSipHash* h, uint64_t m) {
  h->v[3] ^= m;
  sipRound(h->v);
  sipRound(h->v);
  h->v[0] ^= m;
}

void bootSipInit(bootSipHash* h, const uint64_t key[2]) {
  h->v[0] = key[0] ^ 0x736f6d6570736575ull;
  h->v[1] = key[1] ^ 0x646f72616e646f6dull;
  h->v[2] = key[0] ^ 0x6c7967656e657261ull;
  h->v[3] = key[1] ^ 0x7465646279746573ull;
  h->tail = 0;
  h->len = 0;
}

void bootSipUpdate(bootSipHash* h, const void* data, size_t n) {
  const uint8_t* p = (const uint8_t*)data;
  for (size_t i = 0; i < n; i++) {
    h->tail |= (uint64_t)p[i] << (8 * (h->len & 7));
    h->len++;
    if ((h->len & 7) == 0) {
      sipBlock(h, h->tail);
      h->tail = 0;
    }
  }
}

uint64_t bootSipFinal(bootSipHash* h) {
  sipBlock(h, h->tail | ((uint64_t)(h->len & 0xff) << 56));
  h->v[2] ^= 0xff;
  for (int i = 0; i < 4; i++) sipRound(h->v);
  return h->v[0] ^ h->v[1] ^ h->v[2] ^ h->v[3];
}

uint64_t bootSipHash24(const uint64_t key[2], const void* data, size_t n) {
  bootSipHash h;
  bootSipInit(&h, key);
  bootSipUpdate(&h, data, n);
  return bootSipFinal(&h);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Keys and MACs */

void bootKeyFromString(const char* s, uint64_t key[2]) {
  /* Two halves from two fixed hash keys; the label keeps this use apart from any other hash of the string. */
  static const uint64_t k0[2] = {0x6c6962636f6d6d20ull, 0x726f6f7420736563ull};
  static const uint64_t k1[2] = {0x6b65792068616c66ull, 0x2074776f206f6620ull};
  static const char label[] = "libcomm COMM_ROOT_SECRET key v1";
  bootSipHash h;
  for (int half = 0; half < 2; half++) {
    bootSipInit(&h, half == 0 ? k0 : k1);
    bootSipUpdate(&h, label, sizeof(label));
    bootSipUpdate(&h, s, strlen(s));
    key[half] = bootSipFinal(&h);
  }
}

void bootPublicKey(uint64_t key[2]) {
  /* "libcomm public, no secret": anyone may know it, which is the point of the WARN that comes with it. */
  key[0] = 0x6c6962636f6d6d20ull;
  key[1] = 0x7075626c69632121ull;
}

commResult_t bootRandomBytes(void* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom((char*)buf + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      WARN("getrandom failed: %s", strerror(errno));
      return commSystemError;
    }
    got += (size_t)r;
  }
  return commSuccess;
}

uint64_t bootMacAuth(const uint64_t key[2], const uint8_t nonceL[BOOT_NONCE_BYTES], const bootAuthMsg* m) {
  bootSipHash h;
  bootSipInit(&h, key);
  bootSipUpdate(&h, BOOT_LABEL_CLIENT, BOOT_LABEL_LEN);
  bootSipUpdate(&h, nonceL, BOOT_NONCE_BYTES);
  bootSipUpdate(&h, m, offsetof(bootAuthMsg, mac)); /* the client's nonce and every claimed field */
  return bootSipFinal(&h);
}

uint64_t bootMacProof(const uint64_t key[2], const uint8_t nonceL[BOOT_NONCE_BYTES],
                      const uint8_t nonceC[BOOT_NONCE_BYTES], uint64_t clientMac, uint32_t status, uint32_t progress) {
  bootSipHash h;
  bootSipInit(&h, key);
  bootSipUpdate(&h, BOOT_LABEL_LISTENER, BOOT_LABEL_LEN);
  bootSipUpdate(&h, nonceL, BOOT_NONCE_BYTES);
  bootSipUpdate(&h, nonceC, BOOT_NONCE_BYTES);
  bootSipUpdate(&h, &clientMac, sizeof(clientMac));
  bootSipUpdate(&h, &status, sizeof(status));
  bootSipUpdate(&h, &progress, sizeof(progress));
  return bootSipFinal(&h);
}

uint64_t bootMacData(const uint64_t key[2], const char* label, const uint8_t nonceL[BOOT_NONCE_BYTES],
                     const uint8_t nonceC[BOOT_NONCE_BYTES], const void* a, size_t na, const void* b, size_t nb) {
  bootSipHash h;
  bootSipInit(&h, key);
  bootSipUpdate(&h, label, BOOT_LABEL_LEN);
  bootSipUpdate(&h, nonceL, BOOT_NONCE_BYTES);
  bootSipUpdate(&h, nonceC, BOOT_NONCE_BYTES);
  if (na > 0) bootSipUpdate(&h, a, na);
  if (nb > 0) bootSipUpdate(&h, b, nb);
  return bootSipFinal(&h);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Listener side */

/* Sends all of a small message on a fresh non-blocking socket: it fits the socket buffer, or the peer is
 * not worth waiting for. */
static int sendSmall(int fd, const void* buf, size_t n) {
  size_t off = 0;
  return commSocketProgress(fd, 1, (void*)buf, n, &off) == commSuccess && off == n;
}

int bootSrvStart(bootSrvConn* c, int fd, const commSockAddr* from) {
  memset(c, 0, sizeof(*c));
  c->fd = fd;
  c->deadlineNs = commDeadlineNs(BOOT_AUTH_TIMEOUT_MS);
  commSocketAddrStr(from, c->from, sizeof(c->from));
  bootChallenge ch;
  ch.magic = BOOT_CHAL_MAGIC;
  if (bootRandomBytes(c->nonce, sizeof(c->nonce)) != commSuccess) return BOOT_SRV_DROP;
  memcpy(ch.nonce, c->nonce, sizeof(ch.nonce));
  return sendSmall(fd, &ch, sizeof(ch)) ? BOOT_SRV_MORE : BOOT_SRV_DROP;
}

/* Reads without the WARN commSocketProgress gives on EOF: a stranger's EOF is not news. */
static int recvSome(int fd, void* buf, size_t n, size_t* off) {
  while (*off < n) {
    ssize_t r = recv(fd, (char*)buf + *off, n - *off, MSG_DONTWAIT);
    if (r > 0) {
      *off += (size_t)r;
      continue;
    }
    if (r == 0) return -1;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return -1;
  }
  return 0;
}

int bootSrvProgress(bootSrvConn* c, const uint64_t key[2], uint32_t progress, int* why) {
  size_t before = c->off;
  if (recvSome(c->fd, &c->auth, sizeof(c->auth), &c->off) != 0) {
    *why = c->off >= sizeof(uint64_t) && c->auth.magic != BOOT_AUTH_MAGIC ? BOOT_DROP_GARBAGE : BOOT_DROP_CLOSED;
    return BOOT_SRV_DROP;
  }
  if (c->off >= sizeof(uint64_t) && before < sizeof(uint64_t) && c->auth.magic != BOOT_AUTH_MAGIC) {
    *why = BOOT_DROP_GARBAGE;
    return BOOT_SRV_DROP;
  }
  if (c->off < sizeof(c->auth)) return BOOT_SRV_MORE;
  bootProof p;
  memset(&p, 0, sizeof(p));
  p.magic = BOOT_PROOF_MAGIC;
  if (bootMacAuth(key, c->nonce, &c->auth) != c->auth.mac) {
    p.status = BOOT_PROOF_REFUSED; /* unauthenticated: the client cannot check it, and learns nothing */
    (void)sendSmall(c->fd, &p, sizeof(p));
    *why = BOOT_DROP_KEY;
    return BOOT_SRV_DROP;
  }
  p.status = BOOT_PROOF_OK;
  p.progress = progress;
  p.mac = bootMacProof(key, c->nonce, c->auth.nonce, c->auth.mac, p.status, p.progress);
  if (!sendSmall(c->fd, &p, sizeof(p))) {
    *why = BOOT_DROP_CLOSED;
    return BOOT_SRV_DROP;
  }
  return BOOT_SRV_DONE;
}

int bootSrvVictim(bootSrvConn* const* conns, int n) {
  for (int i = 0; i < n; i++) {
    if (conns[i]->off == 0) return i;
  }
  return 0;
}

void bootDropNote(bootDropStats* s, int why, const char* from) {
  if (s->windowStartNs == 0) s->windowStartNs = commTimeNs();
  if (why < 0 || why >= BOOT_DROP_KINDS) why = BOOT_DROP_GARBAGE;
  s->counts[why]++;
  snprintf(s->lastFrom, sizeof(s->lastFrom), "%s", from);
}

int64_t bootDropNextNs(const bootDropStats* s) {
  return s->windowStartNs == 0 ? COMM_NO_DEADLINE : s->windowStartNs + BOOT_WARN_WINDOW_MS * 1000000LL;
}

void bootDropFlush(bootDropStats* s, const char* listener, int force) {
  if (s->windowStartNs == 0) return;
  int64_t now = commTimeNs();
  if (!force && now < bootDropNextNs(s)) return;
  int total = 0;
  for (int i = 0; i < BOOT_DROP_KINDS; i++) total += s->counts[i];
  WARN_NOTICE("%s: dropped %d unauthenticated connections in the last %.1f s: %d silent, %d wrong secret, %d garbage, "
              "%d closed early; last from %s",
              listener, total, (double)(now - s->windowStartNs) / 1e9, s->counts[BOOT_DROP_SILENT],
              s->counts[BOOT_DROP_KEY], s->counts[BOOT_DROP_GARBAGE], s->counts[BOOT_DROP_CLOSED], s->lastFrom);
  memset(s, 0, sizeof(*s));
}

/* ---------------------------------------------------------------------------------------------------- */
/* Client side */

static void cliClose(bootCliConn* c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
}

static void cliFail(bootCliConn* c, int fail) {
  cliClose(c);
  c->phase = BOOT_CLI_FAILED;
  c->fail = fail;
}

static void cliConnect(bootCliConn* c) {
  int err = 0;
  c->off = 0;
  commResult_t r = commSocketConnectStart(&c->addr, &c->fd, &err);
  if (r == commSuccess) {
    c->phase = BOOT_CLI_CONNECTING;
  } else if (r == commRemoteError) {
    c->err = err;
    cliFail(c, err == ECONNREFUSED ? BOOT_FAIL_REFUSED : BOOT_FAIL_DROPPED);
  } else {
    cliFail(c, BOOT_FAIL_SYSTEM);
  }
}

/* One step of the state machine as far as the socket allows. */
static void cliStep(bootCliConn* c, const uint64_t key[2]) {
  for (;;) {
    switch (c->phase) {
      case BOOT_CLI_CONNECTING: {
        int e = commSocketConnectResult(c->fd);
        if (e == EINPROGRESS) return;
        if (e != 0) {
          c->err = e;
          cliFail(c, e == ECONNREFUSED ? BOOT_FAIL_REFUSED : BOOT_FAIL_DROPPED);
          return;
        }
        c->phase = BOOT_CLI_CHALLENGE;
        c->off = 0;
        break;
      }
      case BOOT_CLI_CHALLENGE:
        if (recvSome(c->fd, &c->chal, sizeof(c->chal), &c->off) != 0) {
          cliFail(c, BOOT_FAIL_DROPPED);
          return;
        }
        if (c->off < sizeof(c->chal)) return;
        if (c->chal.magic != BOOT_CHAL_MAGIC) {
          cliFail(c, BOOT_FAIL_FAKE);
          return;
        }
        c->auth.magic = BOOT_AUTH_MAGIC;
        if (bootRandomBytes(c->auth.nonce, sizeof(c->auth.nonce)) != commSuccess) {
          cliFail(c, BOOT_FAIL_SYSTEM);
          return;
        }
        c->auth.mac = bootMacAuth(key, c->chal.nonce, &c->auth);
        c->phase = BOOT_CLI_AUTH;
        c->off = 0;
        break;
      case BOOT_CLI_AUTH:
        if (commSocketProgress(c->fd, 1, &c->auth, sizeof(c->auth), &c->off) != commSuccess) {
          cliFail(c, BOOT_FAIL_DROPPED);
          return;
        }
        if (c->off < sizeof(c->auth)) return;
        c->phase = BOOT_CLI_PROOF;
        c->off = 0;
        break;
      case BOOT_CLI_PROOF:
        if (recvSome(c->fd, &c->proof, sizeof(c->proof), &c->off) != 0) {
          cliFail(c, BOOT_FAIL_DROPPED);
          return;
        }
        if (c->off < sizeof(c->proof)) return;
        if (c->proof.magic != BOOT_PROOF_MAGIC) {
          cliFail(c, BOOT_FAIL_FAKE);
          return;
        }
        if (c->proof.status == BOOT_PROOF_REFUSED) {
          cliFail(c, BOOT_FAIL_KEY);
          return;
        }
        if (c->proof.status != BOOT_PROOF_OK ||
            c->proof.mac !=
                bootMacProof(key, c->chal.nonce, c->auth.nonce, c->auth.mac, c->proof.status, c->proof.progress)) {
          cliFail(c, BOOT_FAIL_FAKE);
          return;
        }
        if (c->auth.size == 0) {
          c->phase = BOOT_CLI_DONE;
          if (!c->keepOpen) cliClose(c);
          return;
        }
        c->trailer = bootMacData(key, BOOT_LABEL_PAYLOAD, c->chal.nonce, c->auth.nonce, c->payload,
                                 (size_t)c->auth.size, NULL, 0);
        c->phase = BOOT_CLI_PAYLOAD;
        c->off = 0;
        break;
      case BOOT_CLI_PAYLOAD: {
        size_t n = (size_t)c->auth.size;
        if (c->off < n) {
          if (commSocketProgress(c->fd, 1, (void*)c->payload, n, &c->off) != commSuccess) {
            cliFail(c, BOOT_FAIL_BROKEN);
            return;
          }
          if (c->off < n) return;
        }
        size_t toff = c->off - n;
        if (commSocketProgress(c->fd, 1, &c->trailer, sizeof(c->trailer), &toff) != commSuccess) {
          cliFail(c, BOOT_FAIL_BROKEN);
          return;
        }
        c->off = n + toff;
        if (toff < sizeof(c->trailer)) return;
        c->phase = BOOT_CLI_DONE;
        if (!c->keepOpen) cliClose(c);
        return;
      }
      default: return;
    }
  }
}

static short cliEvents(const bootCliConn* c) {
  switch (c->phase) {
    case BOOT_CLI_CONNECTING:
    case BOOT_CLI_AUTH:
    case BOOT_CLI_PAYLOAD: return POLLOUT;
    case BOOT_CLI_CHALLENGE:
    case BOOT_CLI_PROOF: return POLLIN;
    default: return 0;
  }
}

static int isAborted(const int* abortFlag) { return abortFlag != NULL && COMM_LOAD_ACQ(abortFlag) != 0; }

/* Longest poll, so that the abort flag is looked at often. */
#define BOOT_CLI_SLICE_MS 20
#define BOOT_CLI_BACKOFF_MAX_MS 100

static int cliRetryable(const bootCliConn* c, int retryRefused) {
  return c->phase == BOOT_CLI_FAILED &&
         (c->fail == BOOT_FAIL_DROPPED || (retryRefused && c->fail == BOOT_FAIL_REFUSED));
}

static int cliBusy(const bootCliConn* c) { return c->phase != BOOT_CLI_DONE && c->phase != BOOT_CLI_FAILED; }

commResult_t bootCliRun(bootCliConn* cs, int n, const uint64_t key[2], int64_t deadlineNs, const int* abortFlag,
                        const int* failFlag, int retryRefused) {
  struct pollfd* pfds = NULL;
  commResult_t res = commSuccess;
  for (int i = 0; i < n; i++) {
    cs[i].fd = -1;
    cs[i].phase = BOOT_CLI_IDLE;
    cs[i].fail = BOOT_FAIL_NONE;
    cs[i].retryNs = 0;
    cs[i].backoffMs = 1;
  }
  COMMCHECKGOTO(commCalloc(&pfds, (size_t)(n > 0 ? n : 1), sizeof(struct pollfd)), res, out);
  for (;;) {
    if (isAborted(abortFlag)) {
      res = commInternalError;
      break;
    }
    if (isAborted(failFlag)) {
      res = commRemoteError;
      break;
    }
    int64_t now = commTimeNs();
    int past = deadlineNs != COMM_NO_DEADLINE && now >= deadlineNs;
    int64_t wake = deadlineNs;
    int np = 0, active = 0;
    for (int i = 0; i < n; i++) {
      bootCliConn* c = &cs[i];
      if (!past && cliRetryable(c, retryRefused)) {
        if (c->retryNs == 0) {
          c->retryNs = now + c->backoffMs * 1000000LL;
          c->backoffMs = COMM_MIN(c->backoffMs * 2, BOOT_CLI_BACKOFF_MAX_MS);
        }
        if (now < c->retryNs) {
          wake = COMM_MIN(wake, c->retryNs);
          active++;
          continue;
        }
        c->phase = BOOT_CLI_IDLE;
        c->retryNs = 0;
      }
      if (c->phase == BOOT_CLI_IDLE) {
        c->fail = BOOT_FAIL_NONE;
        cliConnect(c);
      }
      if (cliBusy(c)) cliStep(c, key);
      if (cliBusy(c)) {
        pfds[np++] = (struct pollfd){.fd = c->fd, .events = cliEvents(c), .revents = 0};
        active++;
      } else if (!past && cliRetryable(c, retryRefused)) {
        wake = now; /* the retry is scheduled on the next pass */
        active++;
      }
    }
    if (past) {
      for (int i = 0; i < n; i++) {
        if (cliBusy(&cs[i]) || cliRetryable(&cs[i], retryRefused)) cliFail(&cs[i], BOOT_FAIL_TIMEOUT);
      }
      break;
    }
    if (active == 0) break;
    int ms = BOOT_CLI_SLICE_MS;
    if (wake != COMM_NO_DEADLINE) {
      int64_t left = (wake - now + 999999) / 1000000;
      if (left < ms) ms = left < 0 ? 0 : (int)left;
    }
    if (poll(pfds, (nfds_t)np, ms) < 0 && errno != EINTR) {
      WARN("bootstrap: poll failed: %s", strerror(errno));
      res = commSystemError;
      break;
    }
  }
out:
  if (res != commSuccess) {
    for (int i = 0; i < n; i++) {
      if (cs[i].phase != BOOT_CLI_DONE || cs[i].keepOpen) cliFail(&cs[i], BOOT_FAIL_SYSTEM);
    }
  }
  free(pfds);
  return res;
}
