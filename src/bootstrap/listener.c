/* A rank's bootstrap listener: one thread per commBootstrap that accepts connections, authenticates them
 * (bootstrap_auth.h) and reads what they carry, all concurrently from one poll loop, so that no number of
 * silent or flooding strangers delays a peer's message. Messages go to the queue that bootstrapRecv waits
 * on (mutex + condition variable), failure notices to the failure record and opts.onFailure; a ping's answer
 * is the handshake itself. The thread blocks in poll when nothing is under way. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bootstrap_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "utils.h"

/* Unauthenticated connections held at once; beyond that one is given up (see bootSrvVictim). */
#define BOOT_LISTEN_MAX_PENDING 64
/* Out of file descriptors: stop accepting for this long. */
#define BOOT_ACCEPT_PAUSE_MS 50

typedef struct {
  bootSrvConn srv;             /* srv.fd < 0: closed, removed on the next compaction */
  int authed;                  /* handshake done, reading the payload */
  bootMsg* msg;                /* BOOT_TYPE_MSG payload */
  commBootstrapFailure notice; /* BOOT_TYPE_FAILURE payload */
  void* buf;
  size_t size;
  size_t off; /* of payload, then trailer */
  uint64_t trailer;
  int64_t idleNs; /* authed: given up when nothing moves until then */
} lsnConn;

typedef struct {
  commBootstrap* b;
  lsnConn** conns; /* in arrival order */
  int n;
  int cap;
  int unauth; /* of conns, not yet authenticated */
  struct pollfd* pfds;
  int pfdCap;
  bootDropStats stats;
  int64_t acceptPauseNs;
  char name[64 + BOOT_ADDR_STR];
} lsnState;

static void connClose(lsnState* st, lsnConn* c) {
  if (c->srv.fd < 0) return;
  close(c->srv.fd);
  c->srv.fd = -1;
  if (!c->authed) st->unauth--;
  if (c->msg != NULL) {
    free(c->msg->data);
    free(c->msg);
    c->msg = NULL;
  }
}

static void connDrop(lsnState* st, lsnConn* c, int why) {
  bootDropNote(&st->stats, why, c->srv.from);
  connClose(st, c);
}

static void compact(lsnState* st) {
  int k = 0;
  for (int i = 0; i < st->n; i++) {
    if (st->conns[i]->srv.fd >= 0) {
      st->conns[k++] = st->conns[i];
    } else {
      free(st->conns[i]);
    }
  }
  st->n = k;
}

static bootMsg* findQueued(commBootstrap* b, int src, uint64_t seq) {
  for (bootMsg* m = b->queueHead; m != NULL; m = m->next) {
    if (m->src == src && m->seq == seq) return m;
  }
  return NULL;
}

/* Hands a complete message to the queue (takes m). */
static void queueMsg(lsnState* st, bootMsg* m, const char* from) {
  commBootstrap* b = st->b;
  pthread_mutex_lock(&b->mu);
  if (m->seq < b->recvContig[m->src] || findQueued(b, m->src, m->seq) != NULL) {
    pthread_mutex_unlock(&b->mu);
    WARN("rank %d: dropped bootstrap message %llu of rank %d (%s) tag %d: it arrived twice", b->rank,
         (unsigned long long)m->seq, m->src, from, m->tag);
    free(m->data);
    free(m);
    return;
  }
  m->next = NULL;
  if (b->queueTail != NULL) {
    b->queueTail->next = m;
  } else {
    b->queueHead = m;
  }
  b->queueTail = m;
  if (m->seq == b->recvContig[m->src]) {
    do {
      b->recvContig[m->src]++;
    } while (findQueued(b, m->src, b->recvContig[m->src]) != NULL);
  }
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

static void takeNotice(lsnState* st, commBootstrapFailure* f, int src) {
  commBootstrap* b = st->b;
  f->reporter = src; /* the authenticated sender, whatever the notice says */
  f->reason[sizeof(f->reason) - 1] = '\0';
  pthread_mutex_lock(&b->mu);
  int first = b->failureNotices++ == 0;
  if (first) b->failure = *f;
  pthread_mutex_unlock(&b->mu);
  if (!first) {
    INFO(COMM_BOOTSTRAP, "rank %d: another failure notice (rank %d about rank %d) ignored", b->rank, src, f->culprit);
    return;
  }
  WARN("rank %d: rank %d reports that rank %d failed: %s (error %d)", b->rank, f->reporter, f->culprit, f->reason,
       f->result);
  /* The owner hears of it before any wait ends because of it: whoever a wait returns to finds it recorded. */
  if (b->onFailure != NULL) b->onFailure(b->failureArg, f);
  pthread_mutex_lock(&b->mu);
  COMM_STORE_REL(&b->failed, 1);
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

/* The handshake is done: what the peer asked for. */
static commResult_t startAuthed(lsnState* st, lsnConn* c) {
  commBootstrap* b = st->b;
  const bootAuthMsg* a = &c->srv.auth;
  c->authed = 1;
  st->unauth--;
  c->idleNs = commDeadlineNs(BOOT_IDLE_TIMEOUT_MS);
  if (a->rank < 0 || a->rank >= b->nranks || a->nranks != b->nranks) {
    WARN("rank %d: dropped a bootstrap connection from %s: it claims rank %d of %d ranks, this job has %d", b->rank,
         c->srv.from, a->rank, a->nranks, b->nranks);
    connClose(st, c);
    return commSuccess;
  }
  if (a->type == BOOT_TYPE_PING) {
    connClose(st, c); /* the proof was the answer */
    return commSuccess;
  }
  if (a->type == BOOT_TYPE_FAILURE && a->size == sizeof(commBootstrapFailure)) {
    c->buf = &c->notice;
    c->size = sizeof(c->notice);
    return commSuccess;
  }
  if (a->type != BOOT_TYPE_MSG || a->size > BOOT_MAX_MSG_BYTES) {
    WARN("rank %d: dropped a bootstrap connection from rank %d (%s): type %u of %llu bytes is not one it serves",
         b->rank, a->rank, c->srv.from, a->type, (unsigned long long)a->size);
    connClose(st, c);
    return commSuccess;
  }
  bootMsg* m = NULL;
  COMMCHECK(commCalloc(&m, 1, sizeof(bootMsg)));
  m->src = a->rank;
  m->tag = a->tag;
  m->seq = a->seq;
  m->size = (size_t)a->size;
  if (m->size == 0) {
    queueMsg(st, m, c->srv.from);
    connClose(st, c);
    return commSuccess;
  }
  commResult_t res = commCalloc(&m->data, m->size, 1);
  if (res != commSuccess) {
    free(m);
    return res;
  }
  c->msg = m;
  c->buf = m->data;
  c->size = m->size;
  return commSuccess;
}

static void readPayload(lsnState* st, lsnConn* c) {
  commBootstrap* b = st->b;
  size_t before = c->off;
  commResult_t r = commSuccess;
  if (c->off < c->size) r = commSocketProgress(c->srv.fd, 0, c->buf, c->size, &c->off);
  size_t toff = c->off >= c->size ? c->off - c->size : 0;
  if (r == commSuccess && c->off >= c->size) {
    r = commSocketProgress(c->srv.fd, 0, &c->trailer, sizeof(c->trailer), &toff);
    c->off = c->size + toff;
  }
  if (r != commSuccess) {
    WARN("rank %d: bootstrap message from rank %d (%s) tag %d cut short after %zu of %zu bytes", b->rank,
         c->srv.auth.rank, c->srv.from, c->srv.auth.tag, c->off, c->size);
    connClose(st, c);
    return;
  }
  if (c->off > before) c->idleNs = commDeadlineNs(BOOT_IDLE_TIMEOUT_MS);
  if (toff < sizeof(c->trailer)) return;
  uint64_t mac = bootMacData(b->key, BOOT_LABEL_PAYLOAD, c->srv.nonce, c->srv.auth.nonce, c->buf, c->size, NULL, 0);
  if (mac != c->trailer) {
    WARN("rank %d: dropped a bootstrap message from rank %d (%s) tag %d: its payload fails authentication", b->rank,
         c->srv.auth.rank, c->srv.from, c->srv.auth.tag);
    connClose(st, c);
    return;
  }
  if (c->msg != NULL) {
    queueMsg(st, c->msg, c->srv.from);
    c->msg = NULL;
  } else {
    takeNotice(st, &c->notice, c->srv.auth.rank);
  }
  connClose(st, c);
}

static commResult_t serve(lsnState* st, lsnConn* c) {
  if (c->authed) {
    readPayload(st, c);
    return commSuccess;
  }
  int why = BOOT_DROP_GARBAGE;
  const uint64_t* calls = st->b->progress;
  int r = bootSrvProgress(&c->srv, st->b->key, calls ? (uint32_t)__atomic_load_n(calls, __ATOMIC_RELAXED) : 0, &why);
  if (r == BOOT_SRV_DROP) connDrop(st, c, why);
  if (r == BOOT_SRV_DONE) COMMCHECK(startAuthed(st, c));
  if (c->srv.fd >= 0 && c->authed) readPayload(st, c); /* the payload may be there already */
  return commSuccess;
}

static commResult_t acceptAll(lsnState* st) {
  commBootstrap* b = st->b;
  /* A bounded batch per pass: what the accepted ones sent is read before more arrive. */
  for (int batch = 0; batch < BOOT_ACCEPT_BATCH; batch++) {
    commSockAddr from;
    socklen_t len = sizeof(from);
    memset(&from, 0, sizeof(from));
    int fd = accept4(b->listenFd, &from.sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return commSuccess;
      if (errno != EMFILE && errno != ENFILE) WARN("%s: accept failed: %s", st->name, strerror(errno));
      st->acceptPauseNs = commDeadlineNs(BOOT_ACCEPT_PAUSE_MS);
      return commSuccess;
    }
    commSocketSetNoDelay(fd);
    if (st->unauth >= BOOT_LISTEN_MAX_PENDING) {
      lsnConn* victim = NULL;
      for (int i = 0; i < st->n && victim == NULL; i++) {
        lsnConn* c = st->conns[i];
        if (c->srv.fd >= 0 && !c->authed && c->srv.off == 0) victim = c;
      }
      for (int i = 0; i < st->n && victim == NULL; i++) {
        lsnConn* c = st->conns[i];
        if (c->srv.fd >= 0 && !c->authed) victim = c;
      }
      if (victim != NULL) connDrop(st, victim, BOOT_DROP_SILENT);
    }
    if (st->n == st->cap) {
      int cap = st->cap ? 2 * st->cap : 16;
      commResult_t res = commRealloc(&st->conns, (size_t)st->cap, (size_t)cap, sizeof(lsnConn*));
      if (res != commSuccess) {
        close(fd);
        return res;
      }
      st->cap = cap;
    }
    lsnConn* c = NULL;
    commResult_t res = commCalloc(&c, 1, sizeof(lsnConn));
    if (res != commSuccess) {
      close(fd);
      return res;
    }
    int r = bootSrvStart(&c->srv, fd, &from);
    st->conns[st->n++] = c;
    st->unauth++;
    if (r == BOOT_SRV_DROP) connDrop(st, c, BOOT_DROP_CLOSED);
  }
  return commSuccess;
}

static commResult_t loop(lsnState* st) {
  commBootstrap* b = st->b;
  for (;;) {
    int64_t now = commTimeNs();
    int64_t wake = bootDropNextNs(&st->stats);
    for (int i = 0; i < st->n; i++) {
      lsnConn* c = st->conns[i];
      if (!c->authed && now >= c->srv.deadlineNs) {
        connDrop(st, c, BOOT_DROP_SILENT);
      } else if (c->authed && now >= c->idleNs) {
        WARN("rank %d: gave up a bootstrap message from rank %d (%s) tag %d: nothing arrived for %d ms (%zu of %zu "
             "bytes)",
             b->rank, c->srv.auth.rank, c->srv.from, c->srv.auth.tag, BOOT_IDLE_TIMEOUT_MS, c->off, c->size);
        connClose(st, c);
      } else {
        wake = minDeadline(wake, c->authed ? c->idleNs : c->srv.deadlineNs);
      }
    }
    compact(st);
    bootDropFlush(&st->stats, st->name, 0);
    wake = minDeadline(wake, bootDropNextNs(&st->stats));
    int paused = st->acceptPauseNs != 0 && now < st->acceptPauseNs;
    if (paused) wake = minDeadline(wake, st->acceptPauseNs);
    if (st->n + 2 > st->pfdCap) {
      int cap = st->n + 2 + 16;
      COMMCHECK(commRealloc(&st->pfds, (size_t)st->pfdCap, (size_t)cap, sizeof(struct pollfd)));
      st->pfdCap = cap;
    }
    st->pfds[0] = (struct pollfd){.fd = b->wakeFd[0], .events = POLLIN, .revents = 0};
    st->pfds[1] = (struct pollfd){.fd = paused ? -1 : b->listenFd, .events = POLLIN, .revents = 0};
    for (int i = 0; i < st->n; i++) {
      st->pfds[2 + i] = (struct pollfd){.fd = st->conns[i]->srv.fd, .events = POLLIN, .revents = 0};
    }
    int ms = -1;
    if (wake != COMM_NO_DEADLINE) {
      int64_t left = (wake - now + 999999) / 1000000;
      ms = left < 0 ? 0 : left > 60000 ? 60000 : (int)left;
    }
    int pr = poll(st->pfds, (nfds_t)(st->n + 2), ms);
    if (pr < 0) {
      if (errno == EINTR) continue;
      WARN("%s: poll failed: %s", st->name, strerror(errno));
      return commSystemError;
    }
    if (st->pfds[0].revents != 0) return commSuccess;
    int n = st->n;
    for (int i = 0; i < n; i++) {
      if (st->pfds[2 + i].revents != 0 && st->conns[i]->srv.fd >= 0) COMMCHECK(serve(st, st->conns[i]));
    }
    if (st->pfds[1].revents != 0) COMMCHECK(acceptAll(st));
  }
}

static void* lsnThread(void* arg) {
  commBootstrap* b = (commBootstrap*)arg;
  lsnState st;
  memset(&st, 0, sizeof(st));
  st.b = b;
  char addr[BOOT_ADDR_STR];
  snprintf(st.name, sizeof(st.name), "rank %d: bootstrap listener at %s", b->rank,
           commSocketAddrStr(&b->listenAddr, addr, sizeof(addr)));
  commLogSetRank(b->rank);
  commResult_t res = loop(&st);
  if (res != commSuccess) WARN("%s: stopped serving (error %d): peers' messages to this rank fail", st.name, res);
  for (int i = 0; i < st.n; i++) {
    if (!st.conns[i]->authed) bootDropNote(&st.stats, BOOT_DROP_SILENT, st.conns[i]->srv.from);
    connClose(&st, st.conns[i]);
  }
  compact(&st);
  bootDropFlush(&st.stats, st.name, 1);
  free(st.conns);
  free(st.pfds);
  return NULL;
}

commResult_t bootListenerStart(commBootstrap* b) {
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca) != 0) return commSystemError;
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int err = pthread_cond_init(&b->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (err != 0 || pthread_mutex_init(&b->mu, NULL) != 0) {
    if (err == 0) pthread_cond_destroy(&b->cv);
    WARN("rank %d: bootstrap: could not create the listener's mutex and condition variable", b->rank);
    return commSystemError;
  }
  b->syncInit = 1;
  if (pipe2(b->wakeFd, O_CLOEXEC | O_NONBLOCK) != 0) {
    WARN("rank %d: bootstrap: pipe failed: %s", b->rank, strerror(errno));
    b->wakeFd[0] = b->wakeFd[1] = -1;
    return commSystemError;
  }
  err = pthread_create(&b->thread, NULL, lsnThread, b);
  if (err != 0) {
    WARN("rank %d: bootstrap: could not start the listener thread: %s", b->rank, strerror(err));
    return commSystemError;
  }
  b->threadStarted = 1;
  return commSuccess;
}

void bootListenerStop(commBootstrap* b) {
  if (b->threadStarted) {
    char c = 1;
    while (write(b->wakeFd[1], &c, 1) < 0 && errno == EINTR) {
    }
    pthread_join(b->thread, NULL);
    b->threadStarted = 0;
  }
  for (int i = 0; i < 2; i++) {
    if (b->wakeFd[i] >= 0) close(b->wakeFd[i]);
    b->wakeFd[i] = -1;
  }
}
