/* comm_aggd: the aggregation daemon of libcomm's software SHARP (protocol: transports/collnet/aggd/aggd_proto.h;
 * client: the CollNet plugin libcomm-collnet-aggd.so).
 *
 *   comm_aggd --listen ADDR:PORT [--max-mem BYTES] [--timeout-ms N] [--window N] [--chunk BYTES]
 *             [--max-conns N]
 *
 * One process, one thread: a poll() loop over non-blocking sockets. Serves many groups at once, each isolated
 * (its own key, buffers and credits). Prints "comm_aggd listening on ADDR:PORT" on stdout when ready (PORT 0:
 * the port the kernel chose), one line per group event and every error on stderr. SIGINT / SIGTERM: frees
 * everything and exits 0. SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include "aggd_daemon.h"

aggdState aggd;
static volatile sig_atomic_t stopFlag;
static aggdConn** conns;
static int nconns, capConns;

int64_t aggdNowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void aggdLog(const char* fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  fprintf(stderr, "comm_aggd: %s\n", line);
}

void aggdLogLimited(const char* fmt, ...) {
  static int64_t windowStart;
  static int lines;
  static long suppressed;
  int64_t now = aggdNowMs();
  if (now - windowStart >= 1000) {
    if (suppressed) aggdLog("(%ld more refusals or drops not logged)", suppressed);
    windowStart = now;
    lines = 0;
    suppressed = 0;
  }
  if (lines >= 20) {
    suppressed++;
    return;
  }
  lines++;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  aggdLog("%s", line);
}

void aggdQueue(aggdConn* c, uint16_t type, uint32_t arg, const void* body, uint32_t len) {
  if (len > AGGD_MAX_CTRL) len = AGGD_MAX_CTRL;
  if (c->outOff == c->outLen) c->outOff = c->outLen = 0;
  if (c->outLen + AGGD_HDR_BYTES + len > sizeof(c->out)) {
    aggdLog("%s: control output full, message %u dropped", c->peer, type);
    return;
  }
  aggdHdrPack(c->out + c->outLen, type, len, arg, 0);
  if (len) memcpy(c->out + c->outLen + AGGD_HDR_BYTES, body, len);
  c->outLen += AGGD_HDR_BYTES + len;
}

void aggdRefuse(aggdConn* c, int code, const char* fmt, ...) {
  char msg[AGGD_MAX_CTRL];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if (n >= (int)sizeof(msg)) n = (int)sizeof(msg) - 1;
  if (code != AGGD_E_AUTH && code != AGGD_E_MEM) aggd.refusedOther++;
  aggdLogLimited("refused %s: %s", c->peer, msg);
  aggdQueue(c, AGGD_REFUSE, (uint32_t)code, msg, (uint32_t)n);
  c->state = AGGD_C_CLOSING;
  c->closeAfterOut = 1;
  c->since = aggdNowMs();
}

void aggdFlush(aggdConn* c) {
  if (c->dead) return;
  while (c->outOff < c->outLen) {
    ssize_t w = send(c->fd, c->out + c->outOff, c->outLen - c->outOff, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      c->dead = 1;
      return;
    }
    c->outOff += (size_t)w;
  }
  if (c->closeAfterOut) { /* then drain its input until it closes, so the close carries no reset */
    if (!c->wrShut) shutdown(c->fd, SHUT_WR);
    c->wrShut = 1;
    return;
  }
  if (c->state == AGGD_C_MEMBER && aggdWriteResults(c) != 0) c->dead = 1;
}

static void drop(aggdConn* c, const char* why) {
  if (c->g) {
    aggdMemberGone(c, AGGD_E_PROTO, why);
  } else {
    aggd.dropped++;
    aggdLogLimited("dropped %s: %s", c->peer, why);
  }
  c->dead = 1;
}

/* A complete message (header in c->h, body read) on connection c. */
static void dispatch(aggdConn* c) {
  const aggdHdr* h = &c->h;
  switch (c->state) {
    case AGGD_C_REG:
      if (h->type == AGGD_STATS && h->len == 0) {
        char line[AGGD_MAX_CTRL];
        aggdStats(line, sizeof(line));
        aggdQueue(c, AGGD_STATS, 0, line, (uint32_t)strlen(line));
        c->state = AGGD_C_CLOSING;
        c->closeAfterOut = 1;
        c->since = aggdNowMs();
      } else if (h->type == AGGD_REGISTER && h->len == AGGD_REGISTER_BYTES) {
        aggdRegisterUnpack(c->ctrl, &c->reg);
        aggdOnRegister(c);
      } else {
        drop(c, "expected a registration");
      }
      return;
    case AGGD_C_KEY:
      if (h->type == AGGD_KEY && h->len == 16) {
        aggdOnKey(c, c->ctrl);
      } else {
        drop(c, "expected the group key");
      }
      return;
    case AGGD_C_MEMBER:
      if (h->type == AGGD_CONTRIB) {
        aggdOnContrib(c);
      } else if (h->type == AGGD_OP && h->len == AGGD_OP_BYTES) {
        aggdOnOp(c);
      } else if (h->type == AGGD_BYE && h->len == 0) {
        aggdOnBye(c);
      } else {
        drop(c, "sent an unexpected message");
      }
      return;
    default: return;
  }
}

/* Header checks before its body is read: where the body goes, or -1 (dropped). */
static int onHeader(aggdConn* c) {
  aggdHdrUnpack(c->hdrBuf, &c->h);
  const aggdHdr* h = &c->h;
  int contrib = c->state == AGGD_C_MEMBER && h->type == AGGD_CONTRIB;
  if (h->magic != AGGD_MAGIC || (h->kind != 0 && !contrib)) {
    drop(c, "wrong magic");
    return -1;
  }
  if (contrib) {
    if (aggdOnContribHeader(c) != 0) return -1;
    c->body = c->contrib;
  } else {
    if (h->len > AGGD_MAX_CTRL) {
      drop(c, "oversized control message");
      return -1;
    }
    c->body = c->ctrl;
  }
  c->bodyGot = 0;
  c->haveHdr = 1;
  return 0;
}

static void readConn(aggdConn* c) {
  if (c->state == AGGD_C_CLOSING) { /* discard what it still sends; its close ends it */
    uint8_t junk[4096];
    for (int i = 0; i < 64; i++) {
      ssize_t r = recv(c->fd, junk, sizeof(junk), MSG_DONTWAIT);
      if (r > 0) continue;
      if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) c->dead = 1;
      return;
    }
    return;
  }
  size_t budget = 8u << 20; /* per pass, so one sender cannot starve the others */
  while (!c->dead && c->state != AGGD_C_CLOSING && budget > 0) {
    uint8_t* dst;
    size_t want;
    if (!c->haveHdr) {
      dst = c->hdrBuf + c->hdrGot;
      want = AGGD_HDR_BYTES - c->hdrGot;
    } else {
      dst = c->body + c->bodyGot;
      want = c->h.len - c->bodyGot;
    }
    ssize_t r = want ? recv(c->fd, dst, want, MSG_DONTWAIT) : 0;
    if (want && r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      drop(c, strerror(errno));
      return;
    }
    if (want && r == 0) {
      if (c->g) {
        aggdMemberGone(c, AGGD_E_FAILED, "closed its connection");
      } else if (c->state != AGGD_C_REG || c->hdrGot > 0) {
        drop(c, "closed in the middle of the handshake");
      }
      c->dead = 1;
      return;
    }
    c->lastRecv = aggdNowMs();
    budget -= (size_t)r < budget ? (size_t)r : budget;
    if (!c->haveHdr) {
      c->hdrGot += (size_t)r;
      if (c->hdrGot < AGGD_HDR_BYTES) continue;
      c->hdrGot = 0;
      if (onHeader(c) != 0) return;
      if (c->h.len > 0) continue;
    } else {
      c->bodyGot += (size_t)r;
      if (c->bodyGot < c->h.len) continue;
    }
    c->haveHdr = 0;
    dispatch(c);
  }
}

static void setNonBlocking(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void acceptConns(int lfd) {
  for (int i = 0; i < 64; i++) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int fd = accept(lfd, (struct sockaddr*)&ss, &sl);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
        aggdLog("accept: %s", strerror(errno));
      return;
    }
    if (nconns >= aggd.maxConns) {
      aggd.refusedOther++;
      aggdLogLimited("refused a connection: %d connections open (--max-conns)", nconns);
      close(fd);
      continue;
    }
    if (nconns == capConns) {
      aggdConn** nc = realloc(conns, sizeof(*conns) * (size_t)(capConns * 2 + 16));
      if (nc) conns = nc, capConns = capConns * 2 + 16;
    }
    aggdConn* c = nconns < capConns ? calloc(1, sizeof(*c)) : NULL;
    if (!c) {
      aggdLog("out of memory for a connection");
      close(fd);
      return;
    }
    setNonBlocking(fd);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char host[INET6_ADDRSTRLEN] = "?", serv[16] = "?";
    getnameinfo((struct sockaddr*)&ss, sl, host, sizeof(host), serv, sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(c->peer, sizeof(c->peer), "%s:%s", host, serv);
    c->fd = fd;
    c->state = AGGD_C_REG;
    c->since = c->lastRecv = aggdNowMs();
    if (getrandom(c->nonce, sizeof(c->nonce), 0) != (ssize_t)sizeof(c->nonce)) {
      aggdLog("getrandom: %s", strerror(errno));
      close(fd);
      free(c);
      continue;
    }
    uint8_t hello[20];
    aggdPut32(hello, AGGD_VERSION);
    memcpy(hello + 4, c->nonce, 16);
    aggdQueue(c, AGGD_HELLO, 0, hello, sizeof(hello));
    conns[nconns++] = c;
    aggdFlush(c);
  }
}

static int parseSize(const char* s, size_t* out) {
  char* end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  switch (*end) {
    case 'k':
    case 'K':
      v <<= 10;
      end++;
      break;
    case 'm':
    case 'M':
      v <<= 20;
      end++;
      break;
    case 'g':
    case 'G':
      v <<= 30;
      end++;
      break;
    default: break;
  }
  if (*end == 'i' || *end == 'B') end++;
  if (*end == 'B') end++;
  if (*end != '\0') return -1;
  *out = (size_t)v;
  return 0;
}

static int listenOn(const char* spec, char* shown, size_t shownLen) {
  struct addrinfo* res = NULL;
  int rc = aggdResolve(spec, AI_PASSIVE, &res);
  if (rc != 0) {
    aggdLog("--listen %s: %s", spec, rc == EAI_NONAME && !strrchr(spec, ':') ? "not host:port" : gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (struct addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
      aggdLog("--listen %s: %s", spec, strerror(errno));
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return -1;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof(ss);
  char port[16] = "?";
  if (getsockname(fd, (struct sockaddr*)&ss, &sl) == 0)
    getnameinfo((struct sockaddr*)&ss, sl, NULL, 0, port, sizeof(port), NI_NUMERICSERV);
  snprintf(shown, shownLen, "%.*s:%s", (int)(strrchr(spec, ':') - spec), spec, port); /* resolved: has a ':' */
  setNonBlocking(fd);
  return fd;
}

static void usage(void) {
  fprintf(stderr,
          "usage: comm_aggd --listen ADDR:PORT [--max-mem BYTES] [--timeout-ms N] [--window N] [--chunk BYTES]\n"
          "                 [--max-conns N]\n"
          "  --max-mem    bound on all groups' buffers (default 1G); a group that would exceed it is refused\n"
          "  --timeout-ms a member silent this long while others wait, or a group not formed in it, fails (20000)\n"
          "  --window     operations a member may have outstanding (credits, default 8)\n"
          "  --chunk      largest contribution in bytes (default 1M); a group reserves members x window x chunk\n"
          "  --max-conns  connections held at once (default 4096)\n");
}

static void onSignal(int sig) {
  (void)sig;
  stopFlag = 1;
}

static void closeConn(aggdConn* c) {
  close(c->fd);
  free(c);
}

int main(int argc, char** argv) {
  const char* listenSpec = NULL;
  aggd.maxMem = (size_t)1 << 30;
  aggd.timeoutMs = 20000;
  aggd.window = 8;
  aggd.chunk = 1u << 20;
  aggd.maxConns = 4096;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    size_t n = 0;
    int bad = v == NULL;
    if (!strcmp(a, "--listen")) {
      listenSpec = v;
    } else if (!strcmp(a, "--max-mem")) {
      bad = bad || parseSize(v, &aggd.maxMem) != 0 || aggd.maxMem == 0;
    } else if (!strcmp(a, "--timeout-ms")) {
      bad = bad || parseSize(v, &n) != 0 || n == 0;
      aggd.timeoutMs = (int64_t)n;
    } else if (!strcmp(a, "--window")) {
      bad = bad || parseSize(v, &n) != 0 || n == 0 || n > 1024;
      aggd.window = (uint32_t)n;
    } else if (!strcmp(a, "--chunk")) {
      bad = bad || parseSize(v, &n) != 0 || n < 64 || n > AGGD_MAX_CHUNK || n % 8 != 0;
      aggd.chunk = (uint32_t)n;
    } else if (!strcmp(a, "--max-conns")) {
      bad = bad || parseSize(v, &n) != 0 || n == 0 || n > 1000000;
      aggd.maxConns = (int)n;
    } else {
      bad = 1;
    }
    if (bad) {
      fprintf(stderr, "comm_aggd: bad argument %s %s\n", a, v ? v : "");
      usage();
      return 2;
    }
    i++;
  }
  if (!listenSpec) {
    usage();
    return 2;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  char shown[300];
  int lfd = listenOn(listenSpec, shown, sizeof(shown));
  if (lfd < 0) {
    aggdLog("cannot listen on %s", listenSpec);
    return 1;
  }
  printf("comm_aggd listening on %s\n", shown);
  fflush(stdout);
  aggdLog("max-mem %zu, timeout %lld ms, window %u, chunk %u", aggd.maxMem, (long long)aggd.timeoutMs, aggd.window,
          aggd.chunk);
  struct pollfd* pfds = NULL;
  int capPfds = 0;
  while (!stopFlag) {
    if (capPfds < nconns + 1) {
      capPfds = (nconns + 1) * 2;
      struct pollfd* np = realloc(pfds, sizeof(*pfds) * (size_t)capPfds);
      if (!np) {
        aggdLog("out of memory");
        break;
      }
      pfds = np;
    }
    pfds[0].fd = lfd;
    pfds[0].events = POLLIN;
    for (int i = 0; i < nconns; i++) {
      aggdConn* c = conns[i];
      pfds[i + 1].fd = c->fd;
      pfds[i + 1].events = (short)(POLLIN | (c->outOff < c->outLen || aggdHasResults(c) ? POLLOUT : 0));
      pfds[i + 1].revents = 0;
    }
    int n = nconns;
    int rc = poll(pfds, (nfds_t)(n + 1), 100);
    if (rc < 0 && errno != EINTR) {
      aggdLog("poll: %s", strerror(errno));
      break;
    }
    for (int i = 0; rc > 0 && i < n; i++) {
      aggdConn* c = conns[i];
      short re = pfds[i + 1].revents;
      if (c->dead || !re) continue;
      if (re & (POLLIN | POLLHUP | POLLERR)) readConn(c);
      if (!c->dead) aggdFlush(c);
      if (!c->dead && c->state == AGGD_C_CLOSING && (re & POLLERR)) c->dead = 1;
    }
    if (rc > 0 && (pfds[0].revents & POLLIN)) acceptConns(lfd);
    int64_t now = aggdNowMs();
    aggdCheckTimeouts(now);
    for (int i = 0; i < nconns; i++) {
      aggdConn* c = conns[i];
      if (c->dead) continue;
      if ((c->state == AGGD_C_REG || c->state == AGGD_C_KEY) && now - c->since > aggd.timeoutMs)
        drop(c, "no registration in time");
      else if (c->state == AGGD_C_CLOSING && now - c->since > 1000) c->dead = 1;
    }
    /* Dead members fail their groups (which may mark more connections dead), then every dead one closes. */
    for (int again = 1; again;) {
      again = 0;
      for (int i = 0; i < nconns; i++)
        if (conns[i]->dead && conns[i]->g) {
          aggdMemberGone(conns[i], AGGD_E_FAILED, "connection failed");
          again = 1;
        }
    }
    for (int i = 0; i < nconns;) {
      if (conns[i]->dead) {
        closeConn(conns[i]);
        conns[i] = conns[--nconns];
      } else {
        i++;
      }
    }
  }
  aggdLog("exiting: %d groups, %d connections closed", aggd.ngroups, nconns);
  aggdFreeAll();
  for (int i = 0; i < nconns; i++) closeConn(conns[i]);
  free(conns);
  free(pfds);
  close(lfd);
  return 0;
}
