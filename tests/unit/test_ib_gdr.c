/* GPUDirect RDMA in the IB network plugin (transports/net/ib/ib_gdr.c) over the fake RDMA device, with a stand-in
 * for the CUDA driver (ibGdrSetOps): "device memory" is a host buffer the stand-in calls GPU 3's. Checked:
 * registration through dma-buf (page-aligned range, the fd closed, the registration cache), the fall back to
 * nvidia-peermem when the verbs library refuses dma-buf, COMM_IB_GDR, no path at all (commInvalidUsage and
 * one WARN saying why), a driver that gives no dma-buf, data written by the "NIC" into device memory, and the
 * flush after it only where the device needs one. */
#include <errno.h>
#include <fcntl.h>
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
  printf("test_ib_gdr: built without <infiniband/verbs.h>: skipped\n");
  return 77;
}
#else
#include "comm_net.h"
#include "debug.h"
#include "ib_gdr.h"
#include "ib_verbs_fake.h"
#include "net_ib.h"
#include "utils.h"

#define GPU 3
#define DEV_BYTES (1 << 20)
#define DEADLINE_MS 30000

static const commNet_t* net;

/* ---------------------------------------------------------------- the CUDA stand-in */

static struct {
  uint8_t* mem; /* the "device memory" */
  int dmabuf, peermem, flushSupported, fdFails;
  int fdCalls, flushCalls, openFds;
  uintptr_t lastStart;
  size_t lastSize;
} cuda;

static int tDeviceOf(const void* p) {
  const uint8_t* b = (const uint8_t*)p;
  return b >= cuda.mem && b < cuda.mem + DEV_BYTES ? GPU : -1;
}
static int tDmabufSupported(int dev) { return dev == GPU && cuda.dmabuf; }
static int tDmabufFd(uintptr_t start, size_t size, int* fd) {
  cuda.fdCalls++;
  cuda.lastStart = start;
  cuda.lastSize = size;
  if (cuda.fdFails) return 1;
  *fd = open("/dev/null", O_RDONLY);
  return *fd < 0;
}
static int tPeermemLoaded(void) { return cuda.peermem; }
static int tFlushSupported(int dev) { return dev == GPU && cuda.flushSupported; }
static int tFlush(void) {
  cuda.flushCalls++;
  return 0;
}
static const ibGdrOps testOps = {tDeviceOf, tDmabufSupported, tDmabufFd, tPeermemLoaded, tFlushSupported, tFlush};

static int openFdCount(void) {
  int n = 0;
  for (int fd = 0; fd < 1024; fd++) n += fcntl(fd, F_GETFD) != -1;
  return n;
}

static int setup(void** state) {
  (void)state;
  commIbFakeResetOptions();
  unsetenv("COMM_IB_GDR");
  uint8_t* mem = cuda.mem;
  memset(&cuda, 0, sizeof(cuda));
  cuda.mem = mem;
  ibGdrSetOps(&testOps);
  cuda.openFds = openFdCount();
  return 0;
}

static int teardown(void** state) {
  (void)state;
  commIbFakeResetOptions();
  unsetenv("COMM_IB_GDR");
  ibGdrSetOps(NULL);
  commIbFakeStats s;
  commIbFakeGetStats(&s);
  if (openFdCount() != cuda.openFds) return -1; /* every dma-buf fd closed */
  return s.contexts || s.pds || s.mrs || s.cqs || s.qps ? -1 : 0;
}

static void fakeDmabuf(int on) {
  commIbFakeOptions o;
  commIbFakeGetOptions(&o);
  o.dmabuf = on;
  assert_int_equal(commIbFakeSetOptions(&o), 0);
}

/* ---------------------------------------------------------------- a pair of comms */

static void makePair(void** s, void** r) {
  char handle[COMM_NET_HANDLE_MAXSIZE];
  void* l = NULL;
  assert_int_equal(net->listen(0, handle, &l), commSuccess);
  *s = *r = NULL;
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  while (!*s) {
    assert_int_equal(net->connect(0, handle, s), commSuccess);
    assert_true(commTimeNs() < deadline);
  }
  while (!*r) {
    assert_int_equal(net->accept(l, r), commSuccess);
    assert_true(commTimeNs() < deadline);
  }
  assert_int_equal(net->closeListen(l), commSuccess);
}
static void closePair(void* s, void* r) {
  assert_int_equal(net->closeSend(s), commSuccess);
  assert_int_equal(net->closeRecv(r), commSuccess);
}

/* One message of n bytes from host memory into the device memory at offset off, through registration rmh. */
static void sendToDevice(void* s, void* r, void* rmh, size_t off, size_t n, uint8_t seed) {
  uint8_t* src = malloc(n);
  assert_non_null(src);
  for (size_t i = 0; i < n; i++) src[i] = (uint8_t)(i * 7 + seed);
  memset(cuda.mem + off, 0, n);
  void* smh = NULL;
  assert_int_equal(net->regMr(s, src, n, COMM_PTR_HOST, &smh), commSuccess);
  void *sreq = NULL, *rreq = NULL;
  void* data = cuda.mem + off;
  size_t cap = n;
  int tag = 0;
  int64_t deadline = commTimeNs() + (int64_t)DEADLINE_MS * 1000000;
  while (!rreq) {
    assert_int_equal(net->irecv(r, 1, &data, &cap, &tag, &rmh, &rreq), commSuccess);
    assert_true(commTimeNs() < deadline);
  }
  while (!sreq) {
    assert_int_equal(net->isend(s, src, n, 0, smh, &sreq), commSuccess);
    assert_true(commTimeNs() < deadline);
  }
  int sdone = 0, rdone = 0;
  while (!sdone || !rdone) {
    size_t sz = 0;
    if (!sdone) assert_int_equal(net->test(sreq, &sdone, &sz), commSuccess);
    if (!rdone) {
      assert_int_equal(net->test(rreq, &rdone, &sz), commSuccess);
      if (rdone) assert_int_equal(sz, n);
    }
    assert_true(commTimeNs() < deadline);
  }
  assert_memory_equal(cuda.mem + off, src, n);
  assert_int_equal(net->deregMr(s, smh), commSuccess);
  free(src);
}

/* ---------------------------------------------------------------- tests */

/* dma-buf: a page-aligned range goes to the driver, its fd to ibv_reg_dmabuf_mr (and is closed); the NIC's
 * data lands in device memory; a second registration inside the range is the cached one; the flush runs
 * only where the device supports (needs) it. */
static void testDmabuf(void** state) {
  (void)state;
  cuda.dmabuf = 1;
  fakeDmabuf(1);
  char why[160];
  assert_int_equal(ibGdrPathFor(GPU, why, sizeof(why)), IB_GDR_DMABUF);
  commNetProperties_t p;
  assert_int_equal(net->getProperties(0, &p), commSuccess);
  void *s, *r;
  makePair(&s, &r);
  void *mh = NULL, *mh2 = NULL;
  assert_int_equal(net->regMr(r, cuda.mem + 100, 10000, COMM_PTR_CUDA, &mh), commSuccess);
  assert_int_equal(cuda.fdCalls, 1);
  long page = sysconf(_SC_PAGESIZE);
  assert_int_equal(cuda.lastStart % (uintptr_t)page, 0);
  assert_int_equal(cuda.lastSize % (size_t)page, 0);
  assert_true(cuda.lastStart <= (uintptr_t)(cuda.mem + 100));
  assert_true(cuda.lastStart + cuda.lastSize >= (uintptr_t)(cuda.mem + 10100));
  assert_int_equal(net->regMr(r, cuda.mem + 200, 500, COMM_PTR_CUDA, &mh2), commSuccess);
  assert_ptr_equal(mh2, mh);
  assert_int_equal(cuda.fdCalls, 1);
  sendToDevice(s, r, mh, 100, 10000, 5);

  void* req = (void*)1;
  void* data = cuda.mem + 100;
  int size = 10000;
  assert_int_equal(net->iflush(r, 1, &data, &size, &mh, &req), commSuccess);
  assert_null(req);
  assert_int_equal(cuda.flushCalls, 0); /* this device needs none */
  ibGdrSetOps(&testOps);                /* forget what was probed */
  cuda.flushSupported = 1;
  assert_int_equal(net->iflush(r, 1, &data, &size, &mh, &req), commSuccess);
  assert_int_equal(cuda.flushCalls, 1);
  size = 0; /* nothing arrived: nothing to flush */
  assert_int_equal(net->iflush(r, 1, &data, &size, &mh, &req), commSuccess);
  assert_int_equal(cuda.flushCalls, 1);
  assert_int_equal(net->deregMr(r, mh2), commSuccess);
  assert_int_equal(net->deregMr(r, mh), commSuccess);
  closePair(s, r);
}

/* The verbs library refuses dma-buf (EOPNOTSUPP): nvidia-peermem takes over, for good. */
static void testPeermemFallback(void** state) {
  (void)state;
  cuda.dmabuf = 1;
  cuda.peermem = 1;
  fakeDmabuf(0);
  void *s, *r;
  makePair(&s, &r);
  void* mh = NULL;
  assert_int_equal(net->regMr(r, cuda.mem, 4096, COMM_PTR_CUDA, &mh), commSuccess);
  assert_int_equal(cuda.fdCalls, 1); /* tried once */
  assert_int_equal(ibGdrPathFor(GPU, NULL, 0), IB_GDR_PEERMEM);
  sendToDevice(s, r, mh, 0, 4096, 9);
  void* mh2 = NULL;
  assert_int_equal(net->regMr(r, cuda.mem + 65536, 4096, COMM_PTR_CUDA, &mh2), commSuccess);
  assert_int_equal(cuda.fdCalls, 1); /* not again */
  assert_int_equal(net->deregMr(r, mh2), commSuccess);
  assert_int_equal(net->deregMr(r, mh), commSuccess);
  closePair(s, r);
}

/* Neither path: commInvalidUsage, and one WARN saying that GPUDirect RDMA is off and why. */
static void testNoPath(void** state) {
  (void)state;
  void *s, *r;
  makePair(&s, &r);
  void* mh = (void*)1;
  assert_int_equal(net->regMr(r, cuda.mem, 4096, COMM_PTR_CUDA, &mh), commInvalidUsage);
  assert_null(mh);
  const char* w = commLogLastWarn();
  assert_non_null(strstr(w, "GPUDirect RDMA is off"));
  assert_non_null(strstr(w, "dma-buf: not supported"));
  assert_non_null(strstr(w, "nvidia-peermem: not loaded"));
  char why[160];
  assert_int_equal(ibGdrPathFor(GPU, why, sizeof(why)), IB_GDR_NONE);
  assert_non_null(strstr(why, "not loaded"));
  commNetProperties_t p;
  assert_int_equal(net->getProperties(0, &p), commSuccess);
  assert_int_equal(p.ptrSupport, COMM_PTR_HOST);
  /* CUDA memory that is not device memory; an unknown memory type */
  uint8_t host[64];
  assert_int_equal(net->regMr(r, host, sizeof(host), COMM_PTR_CUDA, &mh), commInvalidArgument);
  assert_int_equal(net->regMr(r, host, sizeof(host), 0x40, &mh), commInvalidArgument);
  closePair(s, r);
}

/* COMM_IB_GDR: 0 turns both off; peermem skips dma-buf; dmabuf alone, refused by the verbs library, is off. */
static void testEnv(void** state) {
  (void)state;
  cuda.dmabuf = 1;
  cuda.peermem = 1;
  fakeDmabuf(1);
  void *s, *r;
  makePair(&s, &r);
  void* mh = NULL;
  setenv("COMM_IB_GDR", "0", 1);
  ibGdrSetOps(&testOps);
  assert_int_equal(net->regMr(r, cuda.mem, 4096, COMM_PTR_CUDA, &mh), commInvalidUsage);
  char why[160];
  assert_int_equal(ibGdrPathFor(GPU, why, sizeof(why)), IB_GDR_NONE);
  assert_non_null(strstr(why, "not allowed by COMM_IB_GDR"));
  setenv("COMM_IB_GDR", "peermem", 1);
  ibGdrSetOps(&testOps);
  assert_int_equal(net->regMr(r, cuda.mem, 4096, COMM_PTR_CUDA, &mh), commSuccess);
  assert_int_equal(cuda.fdCalls, 0);
  assert_int_equal(ibGdrPathFor(GPU, NULL, 0), IB_GDR_PEERMEM);
  assert_int_equal(net->deregMr(r, mh), commSuccess);
  setenv("COMM_IB_GDR", "dmabuf", 1);
  ibGdrSetOps(&testOps);
  fakeDmabuf(0);
  assert_int_equal(net->regMr(r, cuda.mem, 4096, COMM_PTR_CUDA, &mh), commInvalidUsage);
  assert_int_equal(cuda.fdCalls, 1);
  assert_int_equal(ibGdrPathFor(GPU, why, sizeof(why)), IB_GDR_NONE);
  assert_non_null(strstr(why, "refused by the verbs library"));
  closePair(s, r);
}

/* The driver gives no dma-buf for the range: commSystemError with a WARN, nothing registered. */
static void testNoFd(void** state) {
  (void)state;
  cuda.dmabuf = 1;
  cuda.fdFails = 1;
  fakeDmabuf(1);
  void *s, *r;
  makePair(&s, &r);
  void* mh = NULL;
  commIbFakeStats before, after;
  commIbFakeGetStats(&before);
  assert_int_equal(net->regMr(r, cuda.mem, 4096, COMM_PTR_CUDA, &mh), commSystemError);
  assert_non_null(strstr(commLogLastWarn(), "gave no dma-buf"));
  commIbFakeGetStats(&after);
  assert_int_equal(after.mrs, before.mrs);
  closePair(s, r);
}

int main(void) {
  long page = sysconf(_SC_PAGESIZE);
  if (posix_memalign((void**)&cuda.mem, page > 0 ? (size_t)page : 4096, DEV_BYTES) != 0) return 1;
  net = commNetIbPlugin(commIbFakeVerbs());
  if (net->init(NULL) != commSuccess) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(testDmabuf, setup, teardown),
      cmocka_unit_test_setup_teardown(testPeermemFallback, setup, teardown),
      cmocka_unit_test_setup_teardown(testNoPath, setup, teardown),
      cmocka_unit_test_setup_teardown(testEnv, setup, teardown),
      cmocka_unit_test_setup_teardown(testNoFd, setup, teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  free(cuda.mem);
  return rc;
}
#endif /* COMM_HAVE_IBVERBS */
