/* Authentication of the bootstrap's connections (src/bootstrap/auth.c): SipHash-2-4, the keys, the
 * challenge-response handshake every listener (root and ranks) runs before it takes any state, and the
 * rate-limited report of the connections it dropped.
 *
 * Handshake, on every connection to a listener:
 *   listener -> client  bootChallenge {magic, nonceL[16]}                       (sent at accept)
 *   client -> listener  bootAuthMsg {magic, nonceC[16], type, rank, nranks, tag, size, seq, remainingMs,
 *                                    addr, mac = SipHash(key, "client" label | nonceL | the fields)}
 *   listener -> client  bootProof {magic, status, progress, mac = SipHash(key, "listener" label | nonceL |
 *                                    nonceC | client mac | status | progress)}  (status REFUSED: wrong key,
 *                                    mac 0; progress: a rank's collective calls so far, the root's 0)
 * The key never crosses the wire; both nonces are fresh, so neither side can replay the other's answer.
 * What follows the proof (a payload, the root's answer) carries a MAC of its own over both nonces. */
#ifndef COMM_BOOTSTRAP_AUTH_H_
#define COMM_BOOTSTRAP_AUTH_H_

#include <stddef.h>
#include <stdint.h>
#include "comm.h"
#include "socket.h"

#define BOOT_ADDR_STR 96
#define BOOT_NONCE_BYTES 16
/* An unauthenticated connection must complete its handshake within this time. */
#define BOOT_AUTH_TIMEOUT_MS 1000
/* A listener accepts at most this many connections per pass of its event loop. */
#define BOOT_ACCEPT_BATCH 32
/* One summary WARN per listener per window about the strangers it dropped. */
#define BOOT_WARN_WINDOW_MS 5000

#define BOOT_CHAL_MAGIC 0x636f6d6d63686c32ull  /* "commchl2" */
#define BOOT_AUTH_MAGIC 0x636f6d6d61757432ull  /* "commaut2" */
#define BOOT_PROOF_MAGIC 0x636f6d6d70726632ull /* "commprf2" */

/* What a connection is for (bootAuthMsg.type). */
enum { BOOT_TYPE_HELLO = 1, BOOT_TYPE_MSG = 2, BOOT_TYPE_FAILURE = 3, BOOT_TYPE_PING = 4 };
enum { BOOT_PROOF_OK = 0, BOOT_PROOF_REFUSED = 1 };
/* MAC domain labels of what follows the handshake. */
#define BOOT_LABEL_PAYLOAD "libcomm payload1"
#define BOOT_LABEL_REPLY "libcomm rootrep1"

typedef struct {
  uint64_t magic;
  uint8_t nonce[BOOT_NONCE_BYTES];
} bootChallenge;

typedef struct {
  uint64_t magic;
  uint8_t nonce[BOOT_NONCE_BYTES];
  uint32_t type;
  int32_t rank; /* the sender's rank */
  int32_t nranks;
  int32_t tag;
  uint64_t size; /* payload bytes that follow the listener's proof */
  uint64_t seq;
  int64_t remainingMs; /* hello: time left before this rank gives up; <0: never */
  commSockAddr addr;   /* hello: the rank's listener */
  uint32_t pad;
  uint64_t mac;
} bootAuthMsg;

typedef struct {
  uint64_t magic;
  uint32_t status;
  uint32_t progress; /* the listener's rank: the low 32 bits of its collective calls so far (a probe's answer) */
  uint64_t mac;
} bootProof;

/* SipHash-2-4 with a 128-bit key (k0, k1 as the spec's two little-endian halves), streaming. */
typedef struct {
  uint64_t v[4];
  uint64_t tail;
  size_t len;
} bootSipHash;
void bootSipInit(bootSipHash* h, const uint64_t key[2]);
void bootSipUpdate(bootSipHash* h, const void* data, size_t n);
uint64_t bootSipFinal(bootSipHash* h);
uint64_t bootSipHash24(const uint64_t key[2], const void* data, size_t n);

/* The key of COMM_ROOT_SECRET=s (a keyed hash of the string), and the fixed public key of jobs without it. */
void bootKeyFromString(const char* s, uint64_t key[2]);
void bootPublicKey(uint64_t key[2]);
commResult_t bootRandomBytes(void* buf, size_t n);

uint64_t bootMacAuth(const uint64_t key[2], const uint8_t nonceL[BOOT_NONCE_BYTES], const bootAuthMsg* m);
uint64_t bootMacProof(const uint64_t key[2], const uint8_t nonceL[BOOT_NONCE_BYTES],
                      const uint8_t nonceC[BOOT_NONCE_BYTES], uint64_t clientMac, uint32_t status, uint32_t progress);
/* MAC of data that follows a handshake: label (16 chars), both nonces, then a and b. */
uint64_t bootMacData(const uint64_t key[2], const char* label, const uint8_t nonceL[BOOT_NONCE_BYTES],
                     const uint8_t nonceC[BOOT_NONCE_BYTES], const void* a, size_t na, const void* b, size_t nb);

/* ---------------------------------------------------------------------------------------------------- */
/* The listener's side of one connection, non-blocking. */

/* Why a listener dropped a connection before it authenticated. */
enum { BOOT_DROP_SILENT = 0, BOOT_DROP_KEY = 1, BOOT_DROP_GARBAGE = 2, BOOT_DROP_CLOSED = 3, BOOT_DROP_KINDS = 4 };

typedef struct {
  int fd;
  size_t off; /* bytes of auth received */
  int64_t deadlineNs;
  uint8_t nonce[BOOT_NONCE_BYTES];
  bootAuthMsg auth;
  char from[BOOT_ADDR_STR];
} bootSrvConn;

enum { BOOT_SRV_MORE = 0, BOOT_SRV_DONE = 1, BOOT_SRV_DROP = 2 };
/* Takes an accepted non-blocking socket and sends the challenge. BOOT_SRV_MORE, or BOOT_SRV_DROP (*why). */
int bootSrvStart(bootSrvConn* c, int fd, const commSockAddr* from);
/* Reads what arrived; on a complete, valid auth sends the proof (with progress) and returns BOOT_SRV_DONE
 * (c->auth holds the claim, c->fd stays open). BOOT_SRV_DROP: *why says why, the caller closes. */
int bootSrvProgress(bootSrvConn* c, const uint64_t key[2], uint32_t progress, int* why);

/* Rate-limited report of dropped strangers: one WARN per window at most, plus one when the listener ends. */
typedef struct {
  int64_t windowStartNs; /* 0: nothing counted */
  int counts[BOOT_DROP_KINDS];
  char lastFrom[BOOT_ADDR_STR];
} bootDropStats;
void bootDropNote(bootDropStats* s, int why, const char* from);
/* WARNs the summary if the window is over (or force) and something was dropped. */
void bootDropFlush(bootDropStats* s, const char* listener, int force);
/* When bootDropFlush has something to say next (COMM_NO_DEADLINE: nothing counted). */
int64_t bootDropNextNs(const bootDropStats* s);
/* Which unauthenticated connection to give up when a listener holds its maximum: the oldest one that has
 * sent nothing yet, else the oldest (conns in arrival order). */
int bootSrvVictim(bootSrvConn* const* conns, int n);

/* ---------------------------------------------------------------------------------------------------- */
/* The client's side: connections to listeners, run concurrently. */

enum {
  BOOT_CLI_IDLE = 0,
  BOOT_CLI_CONNECTING,
  BOOT_CLI_CHALLENGE,
  BOOT_CLI_AUTH,
  BOOT_CLI_PROOF,
  BOOT_CLI_PAYLOAD,
  BOOT_CLI_DONE,
  BOOT_CLI_FAILED
};
/* Why a client connection failed (bootCliConn.fail). */
enum {
  BOOT_FAIL_NONE = 0,
  BOOT_FAIL_REFUSED, /* connection refused: nobody listens */
  BOOT_FAIL_DROPPED, /* closed before the listener's proof (retried until the deadline) */
  BOOT_FAIL_KEY,     /* the listener refused our key */
  BOOT_FAIL_FAKE,    /* the listener's proof is wrong: it does not hold the key */
  BOOT_FAIL_BROKEN,  /* the connection failed after the proof */
  BOOT_FAIL_TIMEOUT, /* the deadline passed */
  BOOT_FAIL_SYSTEM   /* a local error (socket(), ...) */
};

typedef struct {
  /* set by the caller */
  commSockAddr addr;
  bootAuthMsg auth; /* type, rank, nranks, tag, size, seq, remainingMs, addr */
  const void* payload;
  int keepOpen; /* hello: keep fd open after the proof for the answer */
  /* state */
  int fd;
  int phase;
  int fail;
  int err; /* errno of a connect that failed */
  size_t off;
  int64_t retryNs;
  int64_t backoffMs;
  bootChallenge chal;
  bootProof proof;
  uint64_t trailer;
} bootCliConn;

/* Runs every connection until it is done or failed. Refused connections are retried (with a backoff) only
 * when retryRefused; connections dropped before the proof always, until the deadline. Returns
 * commInternalError when *abortFlag was raised and commRemoteError when *failFlag was (either may be NULL;
 * connections not done are closed), commSuccess otherwise: each connection's phase (DONE/FAILED) and fail
 * say how it went. */
commResult_t bootCliRun(bootCliConn* cs, int n, const uint64_t key[2], int64_t deadlineNs, const int* abortFlag,
                        const int* failFlag, int retryRefused);

#endif
