/* The built-in socket network plugin in one process, and the shm / net transports' FIFOs over fake
 * communicators. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm_net.h"
#include "core.h"
#include "transport.h"
#include "utils.h"

#define DEADLINE_MS 30000

static const commNet_t* net = &commNetSocket;

static uint8_t patternByte(uint64_t seed, size_t i) { return (uint8_t)((i * 131u + seed * 7u + (i >> 12)) & 0xff); }

static void fillPattern(uint8_t* buf, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) buf[i] = patternByte(seed, i);
}

static int checkPattern(const uint8_t* buf, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++)
    if (buf[i] != patternByte(seed, i)) return 0;
  return 1;
}

static int setupPlugin(void** state) {
  (void)state;
  if (net->init(NULL) != commSuccess) return -1;
  int ndev = 0;
  if (net->devices(&ndev) != commSuccess || ndev < 1) return -1;
  return 0;
}

static void makePair(void** sendComm, void** recvComm) {
  char handle[COMM_NET_HANDLE_MAXSIZE];
  void* listenComm = NULL;
  assert_int_equal(net->listen(0, handle, &listenComm), commSuccess);
  assert_non_null(listenComm);
  *sendComm = NULL;
  *recvComm = NULL;
  assert_int_equal(net->connect(0, handle, sendComm), commSuccess);
  assert_non_null(*sendComm);
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  while (!*recvComm) {
    assert_int_equal(net->accept(listenComm, recvComm), commSuccess);
    assert_true(commTimeNs() < deadline);
  }
  assert_int_equal(net->closeListen(listenComm), commSuccess);
}

/* Post all messages at once (sizes[i] bytes, pattern seed i + seedBase), drive them, check data. */
static void transfer(void* s, void* r, const size_t* sizes, int n, uint64_t seedBase) {
  uint8_t** sbuf = calloc((size_t)n, sizeof(*sbuf));
  uint8_t** rbuf = calloc((size_t)n, sizeof(*rbuf));
  void** sreq = calloc((size_t)n, sizeof(void*));
  void** rreq = calloc((size_t)n, sizeof(void*));
  int* sdone = calloc((size_t)n, sizeof(int));
  int* rdone = calloc((size_t)n, sizeof(int));
  size_t* rsize = calloc((size_t)n, sizeof(size_t));
  assert_true(sbuf && rbuf && sreq && rreq && sdone && rdone && rsize);
  for (int i = 0; i < n; i++) {
    sbuf[i] = malloc(sizes[i] + 1);
    rbuf[i] = malloc(sizes[i] + 1);
    assert_true(sbuf[i] && rbuf[i]);
    fillPattern(sbuf[i], sizes[i], seedBase + (uint64_t)i);
    memset(rbuf[i], 0, sizes[i] + 1);
  }
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  int left = 2 * n, sPosted = 0, rPosted = 0;
  while (left > 0) {
    assert_true(commTimeNs() < deadline);
    while (rPosted < n) {
      void* data = rbuf[rPosted];
      size_t cap = sizes[rPosted] + 1; /* posted capacity may exceed the message */
      int tag = 0;
      void* mh = NULL;
      assert_int_equal(net->irecv(r, 1, &data, &cap, &tag, &mh, &rreq[rPosted]), commSuccess);
      if (!rreq[rPosted]) break;
      rPosted++;
    }
    while (sPosted < n) {
      assert_int_equal(net->isend(s, sbuf[sPosted], sizes[sPosted], 0, NULL, &sreq[sPosted]), commSuccess);
      if (!sreq[sPosted]) break;
      sPosted++;
    }
    for (int i = 0; i < sPosted; i++) {
      if (sdone[i]) continue;
      size_t sz = 0;
      assert_int_equal(net->test(sreq[i], &sdone[i], &sz), commSuccess);
      if (sdone[i]) left--;
    }
    for (int i = 0; i < rPosted; i++) {
      if (rdone[i]) continue;
      assert_int_equal(net->test(rreq[i], &rdone[i], &rsize[i]), commSuccess);
      if (rdone[i]) left--;
    }
  }
  for (int i = 0; i < n; i++) {
    assert_int_equal(rsize[i], sizes[i]);
    assert_true(checkPattern(rbuf[i], sizes[i], seedBase + (uint64_t)i));
    assert_int_equal(rbuf[i][sizes[i]], 0); /* nothing written past the message */
    free(sbuf[i]);
    free(rbuf[i]);
  }
  free(sbuf);
  free(rbuf);
  free(sreq);
  free(rreq);
  free(sdone);
  free(rdone);
  free(rsize);
}

static const size_t kSizes[] = {0, 1, 1000, 65535, 65536, (1 << 20) + 3, 16 << 20};
#define NSIZES ((int)(sizeof(kSizes) / sizeof(kSizes[0])))

static void testSizesOneByOne(void** state) {
  (void)state;
  void *s, *r;
  makePair(&s, &r);
  for (int i = 0; i < NSIZES; i++) transfer(s, r, &kSizes[i], 1, (uint64_t)i * 11);
  assert_int_equal(net->closeSend(s), commSuccess);
  assert_int_equal(net->closeRecv(r), commSuccess);
}

/* Below 8 cores the default moves every message on the calling thread; this runs the sizes that way. (The
 * other tests pin COMM_SOCKET_INLINE to 64K, so that the helper threads are exercised on any machine.) */
static void testSizesAllInline(void** state) {
  setenv("COMM_SOCKET_INLINE", "1G", 1);
  testSizesOneByOne(state);
  setenv("COMM_SOCKET_INLINE", "64K", 1);
}

static void testSizesOutstanding(void** state) {
  (void)state;
  void *s, *r;
  makePair(&s, &r);
  transfer(s, r, kSizes, NSIZES, 100);
  /* Interleaved small and large, more than the plugin's request limit, so posting must retry. */
  size_t mixed[40];
  for (int i = 0; i < 40; i++) mixed[i] = (i % 3 == 0) ? (size_t)(300000 + 4099 * i) : (size_t)(i * 37);
  transfer(s, r, mixed, 40, 500);
  assert_int_equal(net->closeSend(s), commSuccess);
  assert_int_equal(net->closeRecv(r), commSuccess);
}

/* Two "ranks" A and B, each with a send connection to the other and a receive connection from it, made as
 * a paired round: listen on both sides, then connectPaired from both (either order), then accept. */
static void makePaired(int bFirst, void** sA, void** rA, void** sB, void** rB) {
  char hA[COMM_NET_HANDLE_MAXSIZE], hB[COMM_NET_HANDLE_MAXSIZE];
  void *lA = NULL, *lB = NULL;
  assert_int_equal(net->listen(0, hA, &lA), commSuccess);
  assert_int_equal(net->listen(0, hB, &lB), commSuccess);
  *sA = *rA = *sB = *rB = NULL;
  if (bFirst) assert_int_equal(net->connectPaired(0, hA, lB, sB), commSuccess);
  assert_int_equal(net->connectPaired(0, hB, lA, sA), commSuccess);
  if (!bFirst) assert_int_equal(net->connectPaired(0, hA, lB, sB), commSuccess);
  assert_non_null(*sA); /* never waits for the peer's half */
  assert_non_null(*sB);
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  while (!*rA || !*rB) {
    if (!*rA) assert_int_equal(net->accept(lA, rA), commSuccess);
    if (!*rB) assert_int_equal(net->accept(lB, rB), commSuccess);
    assert_true(commTimeNs() < deadline);
  }
  assert_int_equal(net->closeListen(lA), commSuccess);
  assert_int_equal(net->closeListen(lB), commSuccess);
}

/* Paired connections carry both directions (headers and small payloads on the shared socket, bigger
 * inline payloads on the private ones, large ones on data sockets), in both role orders, and close in any
 * order: the surviving direction keeps working until its own close. */
static void testPaired(void** state) {
  (void)state;
  static const size_t sizes[] = {0, 8, 8192, 8193, 65536, (1 << 20) + 3};
  const int n = (int)(sizeof(sizes) / sizeof(sizes[0]));
  for (int inl = 0; inl < 2; inl++) {
    setenv("COMM_SOCKET_INLINE", inl ? "1G" : "64K", 1);
    for (int bFirst = 0; bFirst < 2; bFirst++) {
      void *sA, *rA, *sB, *rB;
      makePaired(bFirst, &sA, &rA, &sB, &rB);
      transfer(sA, rB, sizes, n, 700);
      transfer(sB, rA, sizes, n, 800);
      for (int i = 0; i < n; i++) {
        transfer(sA, rB, &sizes[i], 1, 900 + (uint64_t)i);
        transfer(sB, rA, &sizes[n - 1 - i], 1, 950 + (uint64_t)i);
      }
      /* A stops sending: B's receive side sees it end, B -> A still works. */
      assert_int_equal(net->closeSend(sA), commSuccess);
      transfer(sB, rA, sizes, n, 990);
      assert_int_equal(net->closeRecv(rB), commSuccess);
      assert_int_equal(net->closeSend(sB), commSuccess);
      assert_int_equal(net->closeRecv(rA), commSuccess);
    }
  }
  setenv("COMM_SOCKET_INLINE", "64K", 1);
}

/* The sender decides what goes inline: peers with different COMM_SOCKET_INLINE still agree. */
static void testInlineMismatch(void** state) {
  (void)state;
  size_t sizes[] = {100, 70000, 300000, 5};
  setenv("COMM_SOCKET_INLINE", "1M", 1);
  char handle[COMM_NET_HANDLE_MAXSIZE];
  void *l = NULL, *s = NULL, *r = NULL;
  assert_int_equal(net->listen(0, handle, &l), commSuccess);
  assert_int_equal(net->connect(0, handle, &s), commSuccess); /* sender: inline below 1 MiB */
  setenv("COMM_SOCKET_INLINE", "16", 1);
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  while (!r) {
    assert_int_equal(net->accept(l, &r), commSuccess); /* receiver: inline below 16 B */
    assert_true(commTimeNs() < deadline);
  }
  transfer(s, r, sizes, 4, 900);
  setenv("COMM_SOCKET_INLINE", "64K", 1);
  assert_int_equal(net->closeListen(l), commSuccess);
  assert_int_equal(net->closeSend(s), commSuccess);
  assert_int_equal(net->closeRecv(r), commSuccess);
}

static void testTooLarge(void** state) {
  (void)state;
  void *s, *r;
  makePair(&s, &r);
  char sbuf[100] = {0}, rbuf[10];
  void *sreq = NULL, *rreq = NULL;
  assert_int_equal(net->isend(s, sbuf, sizeof(sbuf), 0, NULL, &sreq), commSuccess);
  void* data = rbuf;
  size_t cap = sizeof(rbuf);
  int tag = 0;
  void* mh = NULL;
  /* The error shows in irecv (if the header has arrived) or in a later test. */
  commResult_t res = net->irecv(r, 1, &data, &cap, &tag, &mh, &rreq);
  assert_non_null(rreq);
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  int done = 0;
  while (res == commSuccess && !done) {
    assert_true(commTimeNs() < deadline);
    size_t sz;
    res = net->test(rreq, &done, &sz);
  }
  assert_int_equal(res, commInternalError);
  assert_int_equal(net->closeSend(s), commSuccess);
  assert_int_equal(net->closeRecv(r), commSuccess);
}

static void testPeerCloseRecvSide(void** state) {
  (void)state;
  void *s, *r;
  makePair(&s, &r);
  static char rbuf[1 << 20];
  void* rreq = NULL;
  void* data = rbuf;
  size_t cap = sizeof(rbuf);
  int tag = 0;
  void* mh = NULL;
  assert_int_equal(net->irecv(r, 1, &data, &cap, &tag, &mh, &rreq), commSuccess);
  assert_int_equal(net->closeSend(s), commSuccess);
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  commResult_t res = commSuccess;
  int done = 0;
  while (res == commSuccess) {
    assert_true(commTimeNs() < deadline);
    size_t sz;
    res = net->test(rreq, &done, &sz);
    assert_int_equal(done, 0);
  }
  assert_int_equal(res, commRemoteError);
  assert_int_equal(net->closeRecv(r), commSuccess);
}

static void testPeerCloseSendSide(void** state) {
  (void)state;
  void *s, *r;
  makePair(&s, &r);
  assert_int_equal(net->closeRecv(r), commSuccess);
  size_t big = 4 << 20;
  uint8_t* buf = calloc(1, big);
  assert_non_null(buf);
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  commResult_t res = commSuccess;
  while (res == commSuccess) {
    assert_true(commTimeNs() < deadline);
    void* req = NULL;
    res = net->isend(s, buf, big, 0, NULL, &req);
    int done = 0;
    while (res == commSuccess && req && !done) {
      assert_true(commTimeNs() < deadline);
      size_t sz;
      res = net->test(req, &done, &sz);
    }
  }
  assert_int_equal(res, commRemoteError);
  assert_int_equal(net->closeSend(s), commSuccess);
  free(buf);
}

/* Closing with pieces still queued (receiver not reading) must not hang. */
static void testCloseWithPending(void** state) {
  (void)state;
  void *s, *r;
  makePair(&s, &r);
  size_t big = 32 << 20;
  uint8_t* buf = calloc(1, big);
  assert_non_null(buf);
  void* req = NULL;
  assert_int_equal(net->isend(s, buf, big, 0, NULL, &req), commSuccess);
  assert_non_null(req);
  assert_int_equal(net->closeSend(s), commSuccess);
  assert_int_equal(net->closeRecv(r), commSuccess);
  free(buf);
}

/* ------------------------------------------------------------------ transports over fake comms */

static struct commComm* fakeComm(int rank, int peerPid, size_t slotBytes) {
  struct commComm* comm = calloc(1, sizeof(*comm));
  assert_non_null(comm);
  comm->rank = rank;
  comm->nRanks = 2;
  comm->peers = calloc(2, sizeof(commPeerInfo));
  assert_non_null(comm->peers);
  for (int i = 0; i < 2; i++) {
    comm->peers[i].rank = i;
    comm->peers[i].hostHash = 42;
    comm->peers[i].pid = i == rank ? (int)getpid() : peerPid;
  }
  comm->slotBytes = slotBytes;
  comm->nSlots = COMM_NSLOTS;
  comm->timeoutMs = DEADLINE_MS;
  return comm;
}

static void freeFakeComm(struct commComm* comm) {
  free(comm->netConns);
  free(comm->peers);
  free(comm);
}

static int countShmNames(void) {
  char prefix[64];
  snprintf(prefix, sizeof(prefix), "comm-%d-", (int)getpid());
  DIR* d = opendir("/dev/shm");
  if (!d) return 0;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)))
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
  closedir(d);
  return n;
}

/* Executor-like driver: moves nSteps messages through (sconn -> rconn), progressing both comms. */
static void runFifo(struct commComm* scomm, commConn* sconn, struct commComm* rcomm, commConn* rconn, int nSteps) {
  size_t slotBytes = sconn->slotBytes;
  int nSlots = sconn->nSlots;
  uint64_t sstep = 0, rstep = 0;
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  while (rstep < (uint64_t)nSteps) {
    assert_true(commTimeNs() < deadline);
    if (sstep < (uint64_t)nSteps && sstep - COMM_LOAD_ACQ(&sconn->ctrl->tail) < (uint64_t)nSlots) {
      int i = (int)(sstep % (uint64_t)nSlots);
      size_t size = (size_t)((sstep * 7919) % (slotBytes + 1));
      fillPattern((uint8_t*)sconn->slots + (size_t)i * slotBytes, size, sstep);
      sconn->ctrl->sizes[i] = size;
      sstep++;
      COMM_STORE_REL(&sconn->ctrl->head, sstep);
    }
    if (COMM_LOAD_ACQ(&rconn->ctrl->head) > rstep) {
      int i = (int)(rstep % (uint64_t)nSlots);
      size_t size = (size_t)rconn->ctrl->sizes[i];
      assert_int_equal(size, (size_t)((rstep * 7919) % (slotBytes + 1)));
      assert_true(checkPattern((uint8_t*)rconn->slots + (size_t)i * slotBytes, size, rstep));
      rstep++;
      COMM_STORE_REL(&rconn->ctrl->tail, rstep);
    }
    assert_int_equal(commTransportProgress(scomm), commSuccess);
    assert_int_equal(commTransportProgress(rcomm), commSuccess);
  }
}

static void connectPair(const commTransport* t, struct commComm* scomm, commConn* sconn, struct commComm* rcomm,
                        commConn* rconn) {
  char info[COMM_CONN_INFO_BYTES] = {0}, ack[COMM_CONN_INFO_BYTES] = {0};
  rconn->peer = 1;
  rconn->isSend = 0;
  rconn->transport = t;
  sconn->peer = 0;
  sconn->isSend = 1;
  sconn->transport = t;
  assert_int_equal(t->recvSetup(rcomm, rconn, info), commSuccess);
  assert_int_equal(t->sendConnect(scomm, sconn, info, ack), commSuccess);
  assert_int_equal(t->recvConnect(rcomm, rconn, ack), commSuccess);
}

static void testShmFifo(void** state) {
  (void)state;
  pid_t parent = getppid();
  /* Receiver is rank 0 with a peer in "another process" (our parent's pid): real shared memory. */
  struct commComm* rcomm = fakeComm(0, (int)parent, 4096);
  struct commComm* scomm = fakeComm(1, (int)parent, 4096);
  commConn rconn, sconn;
  memset(&rconn, 0, sizeof(rconn));
  memset(&sconn, 0, sizeof(sconn));
  int before = countShmNames();
  connectPair(&commTransportShm, scomm, &sconn, rcomm, &rconn);
  assert_int_equal(countShmNames(), before);      /* unlinked once both sides mapped it */
  assert_ptr_not_equal(rconn.slots, sconn.slots); /* two mappings of the same memory */
  assert_int_equal((uintptr_t)rconn.ctrl % COMM_CACHE_LINE, 0);
  assert_int_equal((uintptr_t)rconn.slots % COMM_CACHE_LINE, 0);
  runFifo(scomm, &sconn, rcomm, &rconn, 1000);
  assert_int_equal(commTransportShm.check(rcomm, &rconn), commSuccess);
  assert_int_equal(commTransportShm.close(scomm, &sconn), commSuccess);
  assert_int_equal(commTransportShm.close(rcomm, &rconn), commSuccess);
  freeFakeComm(rcomm);
  freeFakeComm(scomm);
}

static void testShmLocalAndDeadPeer(void** state) {
  (void)state;
  /* Same process: plain memory, one FIFO seen by both sides. */
  struct commComm* rcomm = fakeComm(0, (int)getpid(), 1024);
  struct commComm* scomm = fakeComm(1, (int)getpid(), 1024);
  commConn rconn, sconn;
  memset(&rconn, 0, sizeof(rconn));
  memset(&sconn, 0, sizeof(sconn));
  connectPair(&commTransportShm, scomm, &sconn, rcomm, &rconn);
  assert_ptr_equal(rconn.ctrl, sconn.ctrl);
  runFifo(scomm, &sconn, rcomm, &rconn, 100);
  assert_int_equal(commTransportShm.check(scomm, &sconn), commSuccess);
  assert_int_equal(commTransportShm.close(scomm, &sconn), commSuccess);
  assert_int_equal(commTransportShm.close(rcomm, &rconn), commSuccess);
  freeFakeComm(rcomm);
  freeFakeComm(scomm);

  /* A peer process that has exited, not yet reaped (zombie), then reaped: check() reports it. */
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) _exit(0);
  siginfo_t si;
  assert_int_equal(waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT), 0);
  rcomm = fakeComm(0, (int)child, 1024);
  memset(&rconn, 0, sizeof(rconn));
  rconn.peer = 1;
  rconn.transport = &commTransportShm;
  char zinfo[COMM_CONN_INFO_BYTES] = {0};
  assert_int_equal(commTransportShm.recvSetup(rcomm, &rconn, zinfo), commSuccess);
  assert_int_equal(commTransportShm.check(rcomm, &rconn), commRemoteError);
  assert_int_equal(commTransportShm.close(rcomm, &rconn), commSuccess);
  freeFakeComm(rcomm);
  assert_int_equal(waitpid(child, NULL, 0), child);
  rcomm = fakeComm(0, (int)child, 1024);
  memset(&rconn, 0, sizeof(rconn));
  rconn.peer = 1;
  rconn.transport = &commTransportShm;
  char info[COMM_CONN_INFO_BYTES] = {0};
  assert_int_equal(commTransportShm.recvSetup(rcomm, &rconn, info), commSuccess);
  assert_int_equal(commTransportShm.check(rcomm, &rconn), commRemoteError);
  assert_int_equal(commTransportShm.close(rcomm, &rconn), commSuccess); /* unlinks the unused name */
  assert_int_equal(countShmNames(), 0);
  freeFakeComm(rcomm);
}

static void testNetFifo(void** state) {
  (void)state;
  /* Slots large enough for the threaded path, and small ones for the inline path. */
  size_t slotSizes[2] = {512 * 1024, 4096};
  for (int k = 0; k < 2; k++) {
    struct commComm* rcomm = fakeComm(0, 1, slotSizes[k]);
    struct commComm* scomm = fakeComm(1, 1, slotSizes[k]);
    /* Ranks on different hosts: the transport layer's init makes the net transport's state. */
    rcomm->nNodes = scomm->nNodes = 2;
    assert_int_equal(commTransportInit(rcomm), commSuccess);
    assert_int_equal(commTransportInit(scomm), commSuccess);
    assert_string_equal(commNetName(rcomm), "Socket");
    commConn rconn, sconn;
    memset(&rconn, 0, sizeof(rconn));
    memset(&sconn, 0, sizeof(sconn));
    connectPair(&commTransportNet, scomm, &sconn, rcomm, &rconn);
    assert_int_equal(scomm->nNetConns, 1);
    assert_int_equal(rcomm->nNetConns, 1);
    runFifo(scomm, &sconn, rcomm, &rconn, 300);
    assert_int_equal(commTransportNet.close(scomm, &sconn), commSuccess);
    assert_int_equal(scomm->nNetConns, 0);
    /* The receiver now sees the sender gone: progress stays quiet (nothing more is awaited), check()
     * reports it. */
    int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
    while (commTransportNet.check(rcomm, &rconn) == commSuccess) {
      assert_true(commTimeNs() < deadline);
      assert_int_equal(commTransportProgress(rcomm), commSuccess);
    }
    assert_int_equal(commTransportNet.check(rcomm, &rconn), commRemoteError);
    assert_int_equal(commTransportNet.close(rcomm, &rconn), commSuccess);
    assert_int_equal(rcomm->nNetConns, 0);
    assert_int_equal(commTransportFinalize(rcomm), commSuccess);
    assert_int_equal(commTransportFinalize(scomm), commSuccess);
    freeFakeComm(rcomm);
    freeFakeComm(scomm);
  }
}

int main(void) {
  setenv("COMM_SOCKET_INLINE", "64K", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(testSizesOneByOne),     cmocka_unit_test(testSizesOutstanding),
      cmocka_unit_test(testInlineMismatch),    cmocka_unit_test(testSizesAllInline),
      cmocka_unit_test(testTooLarge),          cmocka_unit_test(testPeerCloseRecvSide),
      cmocka_unit_test(testPeerCloseSendSide), cmocka_unit_test(testCloseWithPending),
      cmocka_unit_test(testShmFifo),           cmocka_unit_test(testShmLocalAndDeadPeer),
      cmocka_unit_test(testNetFifo),           cmocka_unit_test(testPaired),
  };
  return cmocka_run_group_tests(tests, setupPlugin, NULL);
}
