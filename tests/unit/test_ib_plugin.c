/* The IB network plugin (transports/net/ib/net_ib.c) over the fake RDMA device, pair by pair in one process:
 * connection setup, messages small and large (striped over 1, 2 and 4 QPs), more messages than credits,
 * tags, the fake's out-of-order mode, an injected completion error, connection timeouts. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ib_verbs.h"

#ifndef COMM_HAVE_IBVERBS
int main(void) {
  printf("test_ib_plugin: built without <infiniband/verbs.h>: skipped\n");
  return 77;
}
#else
#include "comm_net.h"
#include "debug.h"
#include "ib_verbs_fake.h"
#include "net_ib.h"
#include "socket.h"
#include "utils.h"

#define DEADLINE_MS 30000
#define DEV_IB 0
#define DEV_ROCE 1

static const commNet_t* net;
static void transfer(void* s, void* r, const size_t* sizes, const int* tags, int n, uint64_t seed);
static void closePair(void* s, void* r);

static int setup(void** state) {
  (void)state;
  commIbFakeResetOptions();
  unsetenv("COMM_IB_QPS_PER_CONNECTION");
  unsetenv("COMM_TIMEOUT_MS");
  return 0;
}

static int teardown(void** state) {
  (void)state;
  commIbFakeResetOptions();
  unsetenv("COMM_IB_QPS_PER_CONNECTION");
  unsetenv("COMM_TIMEOUT_MS");
  commIbFakeStats s;
  commIbFakeGetStats(&s);
  return s.contexts || s.pds || s.mrs || s.cqs || s.qps ? -1 : 0;
}

static uint8_t patternByte(uint64_t seed, size_t i) { return (uint8_t)((i * 131u + seed * 7u + (i >> 12)) & 0xff); }

/* As libcomm does it: listen, connect until it returns the comm (the peer's accept is not called
 * meanwhile: connect must not wait for it), then accept until it returns the comm. */
static void makePair(int dev, void** s, void** r) {
  char handle[COMM_NET_HANDLE_MAXSIZE];
  void* l = NULL;
  assert_int_equal(net->listen(dev, handle, &l), commSuccess);
  assert_non_null(l);
  *s = *r = NULL;
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  while (!*s) {
    assert_int_equal(net->connect(dev, handle, s), commSuccess);
    assert_true(commTimeNs() < deadline);
  }
  while (!*r) {
    assert_int_equal(net->accept(l, r), commSuccess);
    assert_true(commTimeNs() < deadline);
  }
  assert_int_equal(net->closeListen(l), commSuccess);
}

/* Two ranks that each send to the other, both connecting before either accepts (libcomm's order). */
static void testCrossConnect(void** state) {
  (void)state;
  char h[2][COMM_NET_HANDLE_MAXSIZE];
  void* l[2] = {NULL, NULL};
  void* s[2] = {NULL, NULL};
  void* r[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) assert_int_equal(net->listen(DEV_IB, h[i], &l[i]), commSuccess);
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  for (int i = 0; i < 2; i++) /* rank i sends to rank 1-i */
    while (!s[i]) {
      assert_int_equal(net->connect(DEV_IB, h[1 - i], &s[i]), commSuccess);
      assert_true(commTimeNs() < deadline);
    }
  for (int i = 0; i < 2; i++)
    while (!r[i]) {
      assert_int_equal(net->accept(l[i], &r[i]), commSuccess);
      assert_true(commTimeNs() < deadline);
    }
  for (int i = 0; i < 2; i++) assert_int_equal(net->closeListen(l[i]), commSuccess);
  size_t sizes[2] = {65536, 10};
  transfer(s[0], r[1], sizes, NULL, 2, 3);
  transfer(s[1], r[0], sizes, NULL, 2, 4);
  closePair(s[0], r[1]);
  closePair(s[1], r[0]);
}

/* n messages of sizes[i] bytes (tag tags[i]), posted as credits allow, both sides driven from here. */
static void transfer(void* s, void* r, const size_t* sizes, const int* tags, int n, uint64_t seed) {
  size_t total = 0;
  size_t* off = calloc((size_t)n, sizeof(size_t));
  assert_non_null(off);
  for (int i = 0; i < n; i++) {
    off[i] = total;
    total += sizes[i];
  }
  uint8_t* sbuf = malloc(total + 1);
  uint8_t* rbuf = malloc(total + 1);
  assert_true(sbuf && rbuf);
  for (size_t i = 0; i < total; i++) sbuf[i] = patternByte(seed, i);
  memset(rbuf, 0, total + 1);
  void *smh = NULL, *rmh = NULL;
  assert_int_equal(net->regMr(s, sbuf, total + 1, COMM_PTR_HOST, &smh), commSuccess);
  assert_int_equal(net->regMr(r, rbuf, total + 1, COMM_PTR_HOST, &rmh), commSuccess);

  void* sreq[COMM_NET_IB_FIFO_DEPTH * 2] = {0};
  void* rreq[COMM_NET_IB_FIFO_DEPTH * 2] = {0};
  int sIdx[COMM_NET_IB_FIFO_DEPTH * 2], rIdx[COMM_NET_IB_FIFO_DEPTH * 2];
  int nsPosted = 0, nrPosted = 0, nsDone = 0, nrDone = 0, sOut = 0, rOut = 0, refused = 0;
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  while (nsDone < n || nrDone < n) {
    assert_true(commTimeNs() < deadline);
    /* Post as many as the plugin takes. */
    while (nrPosted < n) {
      void* req = NULL;
      void* data = rbuf + off[nrPosted];
      size_t cap = sizes[nrPosted];
      int tag = tags ? tags[nrPosted] : 0;
      assert_int_equal(net->irecv(r, 1, &data, &cap, &tag, &rmh, &req), commSuccess);
      if (!req) {
        refused++;
        break;
      }
      assert_true(rOut < COMM_NET_IB_FIFO_DEPTH * 2);
      rreq[rOut] = req;
      rIdx[rOut++] = nrPosted++;
    }
    while (nsPosted < n) {
      void* req = NULL;
      assert_int_equal(net->isend(s, sbuf + off[nsPosted], sizes[nsPosted], tags ? tags[nsPosted] : 0, smh, &req),
                       commSuccess);
      if (!req) {
        refused++;
        break;
      }
      assert_true(sOut < COMM_NET_IB_FIFO_DEPTH * 2);
      sreq[sOut] = req;
      sIdx[sOut++] = nsPosted++;
    }
    for (int i = 0; i < sOut;) {
      int done = 0;
      size_t sz = 0;
      assert_int_equal(net->test(sreq[i], &done, &sz), commSuccess);
      if (!done) {
        i++;
        continue;
      }
      assert_int_equal(sz, sizes[sIdx[i]]);
      nsDone++;
      sreq[i] = sreq[sOut - 1];
      sIdx[i] = sIdx[--sOut];
    }
    for (int i = 0; i < rOut;) {
      int done = 0;
      size_t sz = 0;
      assert_int_equal(net->test(rreq[i], &done, &sz), commSuccess);
      if (!done) {
        i++;
        continue;
      }
      assert_int_equal(sz, sizes[rIdx[i]]);
      nrDone++;
      rreq[i] = rreq[rOut - 1];
      rIdx[i] = rIdx[--rOut];
    }
  }
  for (size_t i = 0; i < total; i++)
    if (rbuf[i] != patternByte(seed, i)) fail_msg("byte %zu differs", i);
  assert_int_equal(rbuf[total], 0);                         /* nothing written past the data */
  if (n > COMM_NET_IB_FIFO_DEPTH) assert_true(refused > 0); /* credits held posting back */
  assert_int_equal(net->deregMr(s, smh), commSuccess);
  assert_int_equal(net->deregMr(r, rmh), commSuccess);
  free(sbuf);
  free(rbuf);
  free(off);
}

static void closePair(void* s, void* r) {
  assert_int_equal(net->closeSend(s), commSuccess);
  assert_int_equal(net->closeRecv(r), commSuccess);
}

/* ---------------------------------------------------------------- tests */

static void testProperties(void** state) {
  (void)state;
  int n = 0;
  assert_int_equal(net->devices(&n), commSuccess);
  assert_int_equal(n, 2); /* the fake's default: fakeib0 (InfiniBand), fakeroce0 (RoCE) */
  commNetProperties_t p;
  assert_int_equal(net->getProperties(DEV_IB, &p), commSuccess);
  assert_string_equal(p.name, "fakeib0");
  assert_int_equal(p.speedMbps, 200000);
  assert_int_equal(p.port, 1);
  assert_int_equal(p.ptrSupport, COMM_PTR_HOST);
  assert_int_equal(p.maxRecvs, 1);
  assert_true(p.maxComms > 0);
  assert_true(p.guid != 0);
  assert_int_equal(net->getProperties(DEV_ROCE, &p), commSuccess);
  assert_string_equal(p.name, "fakeroce0");
  assert_int_equal(p.speedMbps, 100000);
  assert_int_equal(net->getProperties(2, &p), commInvalidArgument);
  assert_string_equal(net->name, "IB");
  assert_int_equal(net->version, COMM_NET_PLUGIN_VERSION);
}

static void testOneMessage(void** state) {
  (void)state;
  int devs[2] = {DEV_IB, DEV_ROCE};
  for (int d = 0; d < 2; d++) {
    void *s, *r;
    makePair(devs[d], &s, &r);
    assert_int_equal(commNetIbCommNumQps(s), 1);
    assert_int_equal(commNetIbCommNumQps(r), 1);
    size_t sizes[3] = {4096, 1, 0};
    int tags[3] = {7, 8, 9};
    transfer(s, r, sizes, tags, 3, 1 + (uint64_t)d);
    void* req = NULL;
    assert_int_equal(net->iflush(r, 0, NULL, NULL, NULL, &req), commSuccess);
    assert_null(req);
    closePair(s, r);
  }
}

/* COMM_IB_TIMEOUT and COMM_IB_RETRY_CNT reach the QPs' RTS attributes; defaults 20 and 7; out of range
 * values fall back to the defaults. Both sides connected (RTS), PSNs crossed. */
static void testQpAttributes(void** state) {
  (void)state;
  const commIbVerbs* v = commIbFakeVerbs();
  for (int round = 0; round < 3; round++) {
    if (round == 1) {
      setenv("COMM_IB_TIMEOUT", "14", 1);
      setenv("COMM_IB_RETRY_CNT", "3", 1);
      setenv("COMM_IB_QPS_PER_CONNECTION", "3", 1);
    } else if (round == 2) {
      setenv("COMM_IB_TIMEOUT", "99", 1);
      setenv("COMM_IB_QPS_PER_CONNECTION", "9", 1);
    }
    void *s, *r;
    makePair(DEV_IB, &s, &r);
    int nq = round == 1 ? 3 : 1;
    assert_int_equal(commNetIbCommNumQps(s), nq);
    assert_int_equal(commNetIbCommNumQps(r), nq);
    /* Drive the sender's bring-up (ready byte) with an empty message. */
    size_t zero = 0;
    transfer(s, r, &zero, NULL, 1, 0);
    for (int q = 0; q < nq; q++) {
      struct ibv_qp_attr sa, ra;
      struct ibv_qp_init_attr ia;
      assert_int_equal(v->queryQp(commNetIbCommQp(s, q), &sa, IBV_QP_STATE, &ia), 0);
      assert_int_equal(v->queryQp(commNetIbCommQp(r, q), &ra, IBV_QP_STATE, &ia), 0);
      assert_int_equal(sa.qp_state, IBV_QPS_RTS);
      assert_int_equal(ra.qp_state, IBV_QPS_RTS);
      assert_int_equal(sa.timeout, round == 1 ? 14 : 20);
      assert_int_equal(sa.retry_cnt, round == 0 ? 7 : 3);
      assert_int_equal(ra.timeout, round == 1 ? 14 : 20);
      assert_int_equal(sa.dest_qp_num, commNetIbCommQp(r, q)->qp_num);
      assert_int_equal(ra.dest_qp_num, commNetIbCommQp(s, q)->qp_num);
      assert_int_equal(sa.rq_psn, ra.sq_psn);
      assert_int_equal(ra.rq_psn, sa.sq_psn);
    }
    closePair(s, r);
  }
  unsetenv("COMM_IB_TIMEOUT");
  unsetenv("COMM_IB_RETRY_CNT");
}

/* The registration cache: overlapping registrations share one MR; each handle is released on its own. */
static void testRegCache(void** state) {
  (void)state;
  void *s, *r;
  makePair(DEV_IB, &s, &r);
  uint8_t* buf = malloc(1 << 20);
  assert_non_null(buf);
  commIbFakeStats st0, st;
  commIbFakeGetStats(&st0);
  void *a, *b, *c, *d;
  assert_int_equal(net->regMr(s, buf, 1 << 20, COMM_PTR_HOST, &a), commSuccess);
  assert_int_equal(net->regMr(s, buf + 4096, 1000, COMM_PTR_HOST, &b), commSuccess); /* inside a */
  commIbFakeGetStats(&st);
  assert_int_equal(st.mrs, st0.mrs + 1);
  assert_int_equal(net->regMr(r, buf + 4096, 1000, COMM_PTR_HOST, &c), commSuccess); /* another comm */
  commIbFakeGetStats(&st);
  assert_int_equal(st.mrs, st0.mrs + 2);
  assert_int_equal(net->deregMr(s, a), commSuccess);
  commIbFakeGetStats(&st);
  assert_int_equal(st.mrs, st0.mrs + 2);                                    /* b still holds it */
  assert_int_equal(net->regMr(s, buf, 10, COMM_PTR_HOST, &d), commSuccess); /* still cached */
  commIbFakeGetStats(&st);
  assert_int_equal(st.mrs, st0.mrs + 2);
  assert_int_equal(net->deregMr(s, b), commSuccess);
  assert_int_equal(net->deregMr(s, d), commSuccess);
  assert_int_equal(net->deregMr(r, c), commSuccess);
  commIbFakeGetStats(&st);
  assert_int_equal(st.mrs, st0.mrs);
  free(buf);
  closePair(s, r);
}

/* A receive smaller than the message it gets: the size actually sent is reported. */
static void testShortMessage(void** state) {
  (void)state;
  void *s, *r;
  makePair(DEV_IB, &s, &r);
  static uint8_t sbuf[1000], rbuf[4000];
  memset(sbuf, 0x5a, sizeof(sbuf));
  void *smh, *rmh;
  assert_int_equal(net->regMr(s, sbuf, sizeof(sbuf), COMM_PTR_HOST, &smh), commSuccess);
  assert_int_equal(net->regMr(r, rbuf, sizeof(rbuf), COMM_PTR_HOST, &rmh), commSuccess);
  void *sreq = NULL, *rreq = NULL;
  void* data = rbuf;
  size_t cap = sizeof(rbuf);
  int tag = 3;
  assert_int_equal(net->irecv(r, 1, &data, &cap, &tag, &rmh, &rreq), commSuccess);
  assert_int_equal(net->isend(s, sbuf, sizeof(sbuf), 3, smh, &sreq), commSuccess);
  assert_non_null(rreq);
  assert_non_null(sreq);
  int sd = 0, rd = 0;
  size_t sz = 0;
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  while (!sd || !rd) {
    if (!sd) assert_int_equal(net->test(sreq, &sd, NULL), commSuccess);
    if (!rd) assert_int_equal(net->test(rreq, &rd, &sz), commSuccess);
    assert_true(commTimeNs() < deadline);
  }
  assert_int_equal(sz, sizeof(sbuf));
  assert_int_equal(rbuf[999], 0x5a);
  assert_int_equal(rbuf[1000], 0);
  assert_int_equal(net->deregMr(s, smh), commSuccess);
  assert_int_equal(net->deregMr(r, rmh), commSuccess);
  closePair(s, r);
}

/* More messages than credits, back to back, varied sizes and tags. */
static void testManyMessages(void** state) {
  (void)state;
  void *s, *r;
  makePair(DEV_IB, &s, &r);
  enum { N = 100 };
  size_t sizes[N];
  int tags[N];
  for (int i = 0; i < N; i++) {
    sizes[i] = (size_t)((i * 7919) % 20000);
    tags[i] = i * 3 + 1;
  }
  transfer(s, r, sizes, tags, N, 42);
  transfer(s, r, sizes, tags, N, 43); /* the connection keeps going */
  closePair(s, r);
}

static void stripedLarge(int nQps, int dev) {
  char v[8];
  snprintf(v, sizeof(v), "%d", nQps);
  setenv("COMM_IB_QPS_PER_CONNECTION", v, 1);
  void *s, *r;
  makePair(dev, &s, &r);
  assert_int_equal(commNetIbCommNumQps(s), nQps);
  assert_int_equal(commNetIbCommNumQps(r), nQps);
  size_t sizes[12] = {6u << 20, 3, (4u << 20) + 17, 128, 129, 0, 1u << 20, 5, 8u << 20, 100, (1u << 20) - 1, 64};
  commIbFakeStats before, after;
  commIbFakeGetStats(&before);
  transfer(s, r, sizes, NULL, 12, 7 + (uint64_t)nQps);
  commIbFakeGetStats(&after);
  /* Every message is one write per QP (plus the receiver's credit write). */
  assert_int_equal(after.wrsExecuted - before.wrsExecuted, 12u * (unsigned)nQps + 12u);
  closePair(s, r);
}

static void testStriped2(void** state) {
  (void)state;
  stripedLarge(2, DEV_IB);
}

static void testStriped4(void** state) {
  (void)state;
  stripedLarge(4, DEV_IB);
  stripedLarge(4, DEV_ROCE);
}

/* The fake's out-of-order mode: completions of different QPs interleave at random. */
static void testReorder(void** state) {
  (void)state;
  commIbFakeOptions o;
  commIbFakeGetOptions(&o);
  o.reorder = 1;
  o.seed = 12345;
  o.maxPerStep = 3;
  assert_int_equal(commIbFakeSetOptions(&o), 0);
  setenv("COMM_IB_QPS_PER_CONNECTION", "4", 1);
  void *s, *r;
  makePair(DEV_IB, &s, &r);
  enum { N = 40 };
  size_t sizes[N];
  int tags[N];
  for (int i = 0; i < N; i++) {
    sizes[i] = (size_t)((i * 104729) % (300 * 1024));
    tags[i] = 1000 - i;
  }
  transfer(s, r, sizes, tags, N, 99);
  closePair(s, r);
}

/* The fake's wire thread: the data moves without the test polling. */
static void testWireThread(void** state) {
  (void)state;
  commIbFakeOptions o;
  commIbFakeGetOptions(&o);
  o.wireThread = 1;
  o.wireThreadUs = 5;
  assert_int_equal(commIbFakeSetOptions(&o), 0);
  setenv("COMM_IB_QPS_PER_CONNECTION", "2", 1);
  void *s, *r;
  makePair(DEV_IB, &s, &r);
  size_t sizes[20];
  for (int i = 0; i < 20; i++) sizes[i] = (size_t)(i * 5000 + 1);
  transfer(s, r, sizes, NULL, 20, 5);
  closePair(s, r);
}

/* A completion error on the sender: commRemoteError with a WARN naming device, QP, peer and status. */
static void testCompletionError(void** state) {
  (void)state;
  void *s, *r;
  makePair(DEV_IB, &s, &r);
  static uint8_t sbuf[8192], rbuf[8192];
  void *smh, *rmh;
  assert_int_equal(net->regMr(s, sbuf, sizeof(sbuf), COMM_PTR_HOST, &smh), commSuccess);
  assert_int_equal(net->regMr(r, rbuf, sizeof(rbuf), COMM_PTR_HOST, &rmh), commSuccess);
  struct ibv_qp* qp = commNetIbCommQp(s, 0);
  assert_non_null(qp);
  assert_int_equal(commIbFakeInjectError(qp, 1, IBV_WC_RETRY_EXC_ERR), 0);
  void *sreq = NULL, *rreq = NULL;
  void* data = rbuf;
  size_t cap = sizeof(rbuf);
  int tag = 0;
  assert_int_equal(net->irecv(r, 1, &data, &cap, &tag, &rmh, &rreq), commSuccess);
  assert_int_equal(net->isend(s, sbuf, sizeof(sbuf), 0, smh, &sreq), commSuccess);
  commLogClearLastWarn();
  commResult_t res = commSuccess;
  int done = 0;
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  while (res == commSuccess) {
    res = net->test(sreq, &done, NULL);
    assert_false(done);
    int rd = 0;
    assert_int_equal(net->test(rreq, &rd, NULL), commSuccess); /* the receiver just waits */
    assert_false(rd);
    assert_true(commTimeNs() < deadline);
  }
  assert_int_equal(res, commRemoteError);
  const char* w = commLogLastWarn();
  char qpn[32];
  snprintf(qpn, sizeof(qpn), "QP %u", qp->qp_num);
  assert_non_null(strstr(w, "fakeib0"));
  assert_non_null(strstr(w, qpn));
  assert_non_null(strstr(w, commIbFakeVerbs()->wcStatusStr(IBV_WC_RETRY_EXC_ERR)));
  assert_non_null(strstr(w, "127.0.0.1") ? strstr(w, "127.0.0.1") : strstr(w, "peer"));
  /* Sticky: the comm stays failed. */
  void* again = NULL;
  assert_int_equal(net->isend(s, sbuf, 1, 0, smh, &again), commRemoteError);
  assert_null(again);
  assert_int_equal(net->deregMr(s, smh), commSuccess);
  assert_int_equal(net->deregMr(r, rmh), commSuccess);
  closePair(s, r);
}

/* A completion error on the receiver (its credit write fails): commRemoteError there too. */
static void testReceiverError(void** state) {
  (void)state;
  void *s, *r;
  makePair(DEV_ROCE, &s, &r);
  size_t zero = 0;
  transfer(s, r, &zero, NULL, 1, 0); /* both sides up */
  static uint8_t rbuf[4096];
  void* rmh;
  assert_int_equal(net->regMr(r, rbuf, sizeof(rbuf), COMM_PTR_HOST, &rmh), commSuccess);
  struct ibv_qp* qp = commNetIbCommQp(r, 0);
  assert_int_equal(commIbFakeInjectError(qp, 1, IBV_WC_REM_ACCESS_ERR), 0);
  void* rreq = NULL;
  void* data = rbuf;
  size_t cap = sizeof(rbuf);
  int tag = 0;
  assert_int_equal(net->irecv(r, 1, &data, &cap, &tag, &rmh, &rreq), commSuccess);
  assert_non_null(rreq);
  commResult_t res = commSuccess;
  int done = 0;
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  while (res == commSuccess) {
    res = net->test(rreq, &done, NULL);
    assert_false(done);
    assert_true(commTimeNs() < deadline);
  }
  assert_int_equal(res, commRemoteError);
  char qpn[32];
  snprintf(qpn, sizeof(qpn), "QP %u", qp->qp_num);
  assert_non_null(strstr(commLogLastWarn(), "fakeroce0"));
  assert_non_null(strstr(commLogLastWarn(), qpn));
  assert_non_null(strstr(commLogLastWarn(), commIbFakeVerbs()->wcStatusStr(IBV_WC_REM_ACCESS_ERR)));
  assert_int_equal(net->deregMr(r, rmh), commSuccess);
  closePair(s, r);
}

/* A message bigger than the posted receive, or with another tag: an error on the sender, not a hang. */
static void testMismatch(void** state) {
  (void)state;
  for (int kind = 0; kind < 2; kind++) {
    void *s, *r;
    makePair(DEV_IB, &s, &r);
    static uint8_t sbuf[4096], rbuf[4096];
    void *smh, *rmh;
    assert_int_equal(net->regMr(s, sbuf, sizeof(sbuf), COMM_PTR_HOST, &smh), commSuccess);
    assert_int_equal(net->regMr(r, rbuf, sizeof(rbuf), COMM_PTR_HOST, &rmh), commSuccess);
    void *sreq = NULL, *rreq = NULL;
    void* data = rbuf;
    size_t cap = kind == 0 ? 100 : sizeof(rbuf);
    int tag = 1;
    assert_int_equal(net->irecv(r, 1, &data, &cap, &tag, &rmh, &rreq), commSuccess);
    assert_int_equal(net->isend(s, sbuf, 200, kind == 0 ? 1 : 2, smh, &sreq), commSuccess);
    commResult_t res = commSuccess;
    int done = 0;
    int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
    while (res == commSuccess && sreq) {
      int rd = 0;
      assert_int_equal(net->test(rreq, &rd, NULL), commSuccess);
      res = net->test(sreq, &done, NULL);
      assert_false(done);
      assert_true(commTimeNs() < deadline);
    }
    if (!sreq) res = commInternalError; /* failed at post (already checked above: commSuccess) */
    assert_int_equal(res, commInternalError);
    assert_non_null(strstr(commLogLastWarn(), kind == 0 ? "larger than the posted receive" : "tag"));
    assert_int_equal(net->deregMr(s, smh), commSuccess);
    assert_int_equal(net->deregMr(r, rmh), commSuccess);
    closePair(s, r);
  }
}

/* Connect to an address where nobody listens: commTimeout at COMM_TIMEOUT_MS, nothing leaked. */
static void testConnectDead(void** state) {
  (void)state;
  char handle[COMM_NET_HANDLE_MAXSIZE];
  void* l = NULL;
  assert_int_equal(net->listen(DEV_IB, handle, &l), commSuccess);
  assert_int_equal(net->closeListen(l), commSuccess); /* the port is closed again */
  setenv("COMM_TIMEOUT_MS", "300", 1);
  void* s = NULL;
  commResult_t res = commSuccess;
  int64_t start = commTimeNs();
  while (res == commSuccess && !s) {
    res = net->connect(DEV_IB, handle, &s);
    assert_true(commTimeNs() - start < 10ll * 1000000000);
  }
  assert_null(s);
  assert_int_equal(res, commTimeout);
  assert_true(commTimeNs() - start >= 250ll * 1000000);
  assert_non_null(strstr(commLogLastWarn(), "timed out"));
}

/* A listener that never accepts: connect returns (it does not wait for the peer), and the send that needs
 * the peer's answer fails with commTimeout at COMM_TIMEOUT_MS instead of hanging. */
static void testConnectNoAnswer(void** state) {
  (void)state;
  char handle[COMM_NET_HANDLE_MAXSIZE];
  void* l = NULL;
  assert_int_equal(net->listen(DEV_IB, handle, &l), commSuccess);
  setenv("COMM_TIMEOUT_MS", "300", 1);
  void* s = NULL;
  int64_t start = commTimeNs();
  while (!s) {
    assert_int_equal(net->connect(DEV_IB, handle, &s), commSuccess);
    assert_true(commTimeNs() - start < 10ll * 1000000000);
  }
  static uint8_t buf[64];
  void* mh = NULL;
  assert_int_equal(net->regMr(s, buf, sizeof(buf), COMM_PTR_HOST, &mh), commSuccess);
  void* req = NULL;
  commResult_t res = net->isend(s, buf, sizeof(buf), 0, mh, &req);
  int done = 0;
  while (res == commSuccess) {
    assert_non_null(req);
    res = net->test(req, &done, NULL);
    assert_false(done);
    assert_true(commTimeNs() - start < 10ll * 1000000000);
  }
  assert_int_equal(res, commTimeout);
  assert_true(commTimeNs() - start >= 250ll * 1000000);
  assert_non_null(strstr(commLogLastWarn(), "no answer"));
  assert_int_equal(net->deregMr(s, mh), commSuccess);
  assert_int_equal(net->closeSend(s), commSuccess);
  assert_int_equal(net->closeListen(l), commSuccess);
}

/* Stray connections to the listener (one closing at once, one sending garbage) are dropped; the real
 * connection is accepted after them. */
static void testStrayConnection(void** state) {
  (void)state;
  char handle[COMM_NET_HANDLE_MAXSIZE];
  void* l = NULL;
  assert_int_equal(net->listen(DEV_IB, handle, &l), commSuccess);
  commSockAddr addr; /* the handle starts with the listener's address */
  memcpy(&addr, handle, sizeof(addr));
  int fd1 = -1, fd2 = -1;
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  assert_int_equal(commSocketConnect(&addr, &fd1, deadline, NULL), commSuccess);
  close(fd1);
  assert_int_equal(commSocketConnect(&addr, &fd2, deadline, NULL), commSuccess);
  char junk[256];
  memset(junk, 0x42, sizeof(junk));
  assert_int_equal(commSocketSendAll(fd2, junk, sizeof(junk), deadline, NULL), commSuccess);
  void* r = NULL;
  for (int i = 0; i < 50; i++) assert_int_equal(net->accept(l, &r), commSuccess); /* drops both */
  assert_null(r);
  void* s = NULL;
  while (!s) {
    assert_int_equal(net->connect(DEV_IB, handle, &s), commSuccess);
    assert_true(commTimeNs() < deadline);
  }
  while (!r) {
    assert_int_equal(net->accept(l, &r), commSuccess);
    assert_true(commTimeNs() < deadline);
  }
  close(fd2);
  assert_int_equal(net->closeListen(l), commSuccess);
  size_t sizes[1] = {12345};
  transfer(s, r, sizes, NULL, 1, 11);
  closePair(s, r);
}

/* Verbs failures during setup are errors with nothing leaked. */
static void testSetupFailure(void** state) {
  (void)state;
  char handle[COMM_NET_HANDLE_MAXSIZE];
  void* l = NULL;
  assert_int_equal(net->listen(DEV_IB, handle, &l), commSuccess);
  assert_int_equal(commIbFakeFailCall(COMM_IB_FAKE_CALL_CREATE_QP, 0, ENOMEM), 0);
  void* s = NULL;
  assert_int_equal(net->connect(DEV_IB, handle, &s), commSystemError);
  assert_null(s);
  assert_int_equal(commIbFakeFailCall(COMM_IB_FAKE_CALL_MODIFY_QP, 0, EINVAL), 0);
  assert_int_equal(net->connect(DEV_IB, handle, &s), commSystemError);
  assert_null(s);
  /* The receiver's QP fails to reach RTR: accept fails, and the sender learns it (the setup socket
   * closes) at its first send instead of hanging. */
  int64_t start = commTimeNs();
  while (!s) {
    assert_int_equal(net->connect(DEV_IB, handle, &s), commSuccess);
    assert_true(commTimeNs() - start < 10ll * 1000000000);
  }
  assert_int_equal(commIbFakeFailCall(COMM_IB_FAKE_CALL_MODIFY_QP, 1, EINVAL), 0); /* INIT passes, RTR fails */
  void* r = NULL;
  commResult_t rres = commSuccess;
  while (rres == commSuccess) {
    rres = net->accept(l, &r);
    assert_null(r);
    assert_true(commTimeNs() - start < 10ll * 1000000000);
  }
  assert_int_equal(rres, commSystemError);
  static uint8_t buf[64];
  void* mh = NULL;
  assert_int_equal(net->regMr(s, buf, sizeof(buf), COMM_PTR_HOST, &mh), commSuccess);
  void* req = NULL;
  commResult_t sres = net->isend(s, buf, sizeof(buf), 0, mh, &req);
  int done = 0;
  while (sres == commSuccess) {
    sres = net->test(req, &done, NULL);
    assert_false(done);
    assert_true(commTimeNs() - start < 10ll * 1000000000);
  }
  assert_int_equal(sres, commRemoteError);
  assert_int_equal(net->deregMr(s, mh), commSuccess);
  assert_int_equal(net->closeSend(s), commSuccess);
  assert_int_equal(net->closeListen(l), commSuccess);
  uint8_t small[16];
  assert_int_equal(net->regMr(NULL, small, sizeof(small), COMM_PTR_HOST, &mh), commInvalidArgument);
}

int main(void) {
  net = commNetIbPlugin(commIbFakeVerbs());
  if (net->init(NULL) != commSuccess) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(testProperties, setup, teardown),
      cmocka_unit_test_setup_teardown(testOneMessage, setup, teardown),
      cmocka_unit_test_setup_teardown(testCrossConnect, setup, teardown),
      cmocka_unit_test_setup_teardown(testQpAttributes, setup, teardown),
      cmocka_unit_test_setup_teardown(testRegCache, setup, teardown),
      cmocka_unit_test_setup_teardown(testShortMessage, setup, teardown),
      cmocka_unit_test_setup_teardown(testManyMessages, setup, teardown),
      cmocka_unit_test_setup_teardown(testStriped2, setup, teardown),
      cmocka_unit_test_setup_teardown(testStriped4, setup, teardown),
      cmocka_unit_test_setup_teardown(testReorder, setup, teardown),
      cmocka_unit_test_setup_teardown(testWireThread, setup, teardown),
      cmocka_unit_test_setup_teardown(testCompletionError, setup, teardown),
      cmocka_unit_test_setup_teardown(testReceiverError, setup, teardown),
      cmocka_unit_test_setup_teardown(testMismatch, setup, teardown),
      cmocka_unit_test_setup_teardown(testConnectDead, setup, teardown),
      cmocka_unit_test_setup_teardown(testConnectNoAnswer, setup, teardown),
      cmocka_unit_test_setup_teardown(testStrayConnection, setup, teardown),
      cmocka_unit_test_setup_teardown(testSetupFailure, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif /* COMM_HAVE_IBVERBS */
