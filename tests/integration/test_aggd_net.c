/* integration.aggd_net: the TCP network of libcomm-collnet-aggd.so (transports/collnet/aggd/aggd_net.c), driven
 * through its NCCL tables without libcomm.
 *
 *   test_aggd_net PATH/libcomm-collnet-aggd.so
 *
 *   A  dlopen/dlsym: the library exports ncclNetPlugin_v10, _v9, _v8 (each named AggdTcp) and
 *      ncclCollNetPlugin_v11, _v10, _v9, _v8, as NVIDIA's NCCL needs to load its CollNet with its network.
 *   B  NCCL_SOCKET_IFNAME, each case in a forked process (the devices are chosen once per process): "lo", "=lo",
 *      "lo:4000" (a port suffix is ignored) give lo; "^lo" and "^=lo" never give lo; "=l", "nosuchif" give no
 *      device: init fails with a WARN.
 *   C  connection setup with NCCL_SOCKET_IFNAME==lo: a stranger that closes at once and one that sends a wrong
 *      hello are dropped with a WARN each, and the real connection is accepted after them.
 *   D  data: messages of 0 B, 1 B and 32 MiB (partial transfers) in posting order, sizes and bytes checked; 32
 *      requests in flight per comm and the 33rd refused (request NULL); v8 and v9 tables on the same comms.
 *   E  errors: a message larger than the receive buffer fails the receive comm, and every later call on it, with
 *      one WARN; a closed peer fails the sender (ncclRemoteError) with one WARN.
 *   F  every file descriptor opened is closed again (a listener closed with a connection pending included).
 * SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#define NET_NCCL_ABI_ONLY
#include "net_nccl.h"

static int failures, warns;
#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "test_aggd_net FAILED (%s:%d): ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                          \
      fprintf(stderr, "\n");                                                 \
      failures++;                                                            \
    }                                                                        \
  } while (0)

static void logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags, (void)file, (void)line;
  if (level == NCCL_LOG_WARN) warns++;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "  [%s] %s\n", level == NCCL_LOG_WARN ? "WARN" : "INFO", msg);
}

static int64_t nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int countFds(void) {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  for (struct dirent* e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1; /* opendir's own */
}

static ncclNet_v10_t* v10;
static ncclNet_v9_t* v9;
static ncclNet_v8_t* v8;

/* B: one NCCL_SOCKET_IFNAME value in a child process; returns the child's "devices, has lo" or -1 (init failed). */
static int ifnameCase(const char* value, int* hasLo) {
  int p[2];
  if (pipe(p) != 0) return -2;
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    setenv("NCCL_SOCKET_IFNAME", value, 1);
    int out[2] = {-1, 0}, n = 0;
    if (v10->init(logger, NULL) == ncclSuccess && v10->devices(&n) == ncclSuccess) {
      out[0] = n;
      for (int d = 0; d < n; d++) {
        ncclNetProperties_v10_t props;
        if (v10->getProperties(d, &props) == ncclSuccess && strcmp(props.name, "lo") == 0) out[1] = 1;
      }
    }
    if (write(p[1], out, sizeof(out)) != (ssize_t)sizeof(out)) _exit(2);
    _exit(0);
  }
  close(p[1]);
  int out[2] = {-2, 0};
  if (read(p[0], out, sizeof(out)) != (ssize_t)sizeof(out)) out[0] = -2;
  close(p[0]);
  waitpid(pid, NULL, 0);
  *hasLo = out[1];
  return out[0];
}

/* Drives connect and accept of the handle until both comms exist. */
static void connectPair(void* listen, void* handle, void** send, void** recv) {
  *send = *recv = NULL;
  int64_t end = nowMs() + 10000;
  while ((!*send || !*recv) && nowMs() < end) {
    if (!*send) CHECK(v10->connect(0, NULL, handle, send, NULL) == ncclSuccess, "connect failed");
    if (!*recv) CHECK(v10->accept(listen, recv, NULL) == ncclSuccess, "accept failed");
    if (failures) return;
  }
  CHECK(*send && *recv, "no connection within 10 s");
}

/* Tests every request until all are done or one fails; returns the first failure. */
static ncclResult_t waitAll(void** reqs, int n, int* sizes) {
  int64_t end = nowMs() + 30000, left = 0;
  for (int i = 0; i < n; i++) left += reqs[i] != NULL;
  while (left > 0 && nowMs() < end) {
    for (int i = 0; i < n; i++) {
      if (!reqs[i]) continue;
      int done = 0, size = -1;
      ncclResult_t res = v10->test(reqs[i], &done, &size);
      if (res != ncclSuccess) return res;
      if (done) reqs[i] = NULL, sizes[i] = size, left--;
    }
  }
  for (int i = 0; i < n; i++) CHECK(!reqs[i], "request %d not done within 30 s", i);
  return ncclSuccess;
}

static int rawConnect(const struct sockaddr_in* a) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, (const struct sockaddr*)a, sizeof(*a)) != 0) close(fd), fd = -1;
  return fd;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_aggd_net PATH/libcomm-collnet-aggd.so\n");
    return 2;
  }
  int fds0 = countFds();
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "test_aggd_net FAILED: dlopen %s: %s\n", argv[1], dlerror());
    return 1;
  }
  /* A */
  v10 = (ncclNet_v10_t*)dlsym(lib, "ncclNetPlugin_v10");
  v9 = (ncclNet_v9_t*)dlsym(lib, "ncclNetPlugin_v9");
  v8 = (ncclNet_v8_t*)dlsym(lib, "ncclNetPlugin_v8");
  if (!v10 || !v9 || !v8) {
    fprintf(stderr, "test_aggd_net FAILED: ncclNetPlugin_v10 %p, _v9 %p, _v8 %p\n", (void*)v10, (void*)v9, (void*)v8);
    return 1;
  }
  CHECK(!strcmp(v10->name, "AggdTcp") && !strcmp(v9->name, "AggdTcp") && !strcmp(v8->name, "AggdTcp"),
        "the tables are named %s, %s, %s", v10->name, v9->name, v8->name);
  const char* collnets[] = {"ncclCollNetPlugin_v11", "ncclCollNetPlugin_v10", "ncclCollNetPlugin_v9",
                            "ncclCollNetPlugin_v8"};
  for (int i = 0; i < 4; i++) CHECK(dlsym(lib, collnets[i]), "%s not exported", collnets[i]);

  /* B */
  struct {
    const char* value;
    int devs, lo; /* devs: -1 init fails, 1 at least one; lo: 1 lo is a device, 0 it is not */
  } cases[] = {{"lo", 1, 1},   {"=lo", 1, 1}, {"lo:4000", 1, 1},  {"^lo", 0, 0},
               {"^=lo", 0, 0}, {"=l", -1, 0}, {"nosuchif", -1, 0}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int lo = 0, n = ifnameCase(cases[i].value, &lo);
    fprintf(stderr, "test_aggd_net: NCCL_SOCKET_IFNAME=%s: %d device(s)%s\n", cases[i].value, n, lo ? ", lo" : "");
    if (cases[i].devs == -1) CHECK(n == -1, "NCCL_SOCKET_IFNAME=%s: init should fail, got %d", cases[i].value, n);
    if (cases[i].devs == 1) CHECK(n >= 1, "NCCL_SOCKET_IFNAME=%s: no device", cases[i].value);
    if (cases[i].devs == 0) CHECK(n != -2, "NCCL_SOCKET_IFNAME=%s: the child failed", cases[i].value);
    CHECK(lo == cases[i].lo, "NCCL_SOCKET_IFNAME=%s: lo %s", cases[i].value, lo ? "used" : "not used");
  }

  /* C */
  setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
  int n = 0;
  CHECK(v10->init(logger, NULL) == ncclSuccess && v10->devices(&n) == ncclSuccess && n == 1, "init: %d devices", n);
  CHECK(v8->init(logger) == ncclSuccess && v9->init(logger) == ncclSuccess, "init of v8, v9");
  ncclNetProperties_v10_t props;
  CHECK(v10->getProperties(0, &props) == ncclSuccess && !strcmp(props.name, "lo") &&
            props.ptrSupport == NCCL_PTR_HOST && props.maxRecvs == 1 && props.speed > 0,
        "properties of device 0");
  CHECK(v10->getProperties(1, &props) != ncclSuccess, "device 1 exists");
  if (failures) return 1;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  memset(handle, 0, sizeof(handle));
  void *listen = NULL, *send = NULL, *recv = NULL;
  CHECK(v10->listen(0, handle, &listen) == ncclSuccess && listen, "listen");
  struct sockaddr_in addr;
  memcpy(&addr, handle + 4, sizeof(addr)); /* the handle: magic, then the address (aggd_net.c, tcpHandle) */
  int s1 = rawConnect(&addr), s2 = rawConnect(&addr);
  CHECK(s1 >= 0 && s2 >= 0, "stranger connections");
  if (s1 >= 0) close(s1);
  if (s2 >= 0) CHECK(write(s2, "BAD!", 4) == 4, "stranger's hello");
  int w0 = warns;
  connectPair(listen, handle, &send, &recv);
  CHECK(warns - w0 == 2, "%d WARNs for 2 dropped strangers", warns - w0);
  if (s2 >= 0) close(s2);
  if (failures) return 1;

  /* D: 0 B, 1 B, 32 MiB, in order, through v10, v9 and v8 calls */
  const size_t big = (size_t)32 << 20;
  char* sbuf = malloc(big);
  char* rbuf = malloc(big);
  for (size_t i = 0; i < big; i++) sbuf[i] = (char)(i * 7 + 3);
  void* mh = NULL;
  CHECK(v10->regMr(send, sbuf, big, NCCL_PTR_HOST, &mh) == ncclSuccess && mh, "regMr host");
  void* mh2 = NULL;
  CHECK(v10->regMr(send, sbuf, big, NCCL_PTR_CUDA, &mh2) != ncclSuccess, "regMr CUDA accepted");
  void* reqs[6] = {0};
  int got[6];
  char one = 0;
  void* rdata[3] = {rbuf, &one, rbuf};
  for (int i = 0; i < 3; i++) {
    size_t cap = i == 1 ? 1 : big;
    int tag = 100 + i;
    CHECK(v10->irecv(recv, 1, &rdata[i], &cap, &tag, &mh, NULL, &reqs[3 + i]) == ncclSuccess && reqs[3 + i], "irecv");
    if (i == 0) CHECK(v8->isend(send, sbuf, 0, tag, mh, &reqs[i]) == ncclSuccess && reqs[i], "isend v8");
    if (i == 1) CHECK(v9->isend(send, sbuf, 1, tag, mh, &reqs[i]) == ncclSuccess && reqs[i], "isend v9");
    if (i == 2) CHECK(v10->isend(send, sbuf, big, tag, mh, NULL, &reqs[i]) == ncclSuccess && reqs[i], "isend v10");
    if (i == 1) CHECK(waitAll(&reqs[4], 1, &got[4]) == ncclSuccess && got[4] == 1, "1 B message");
  }
  CHECK(waitAll(reqs, 6, got) == ncclSuccess, "messages failed");
  CHECK(got[3] == 0 && got[5] == (int)big && one == sbuf[0] && !memcmp(rbuf, sbuf, big), "sizes %d %d, data", got[3],
        got[5]);
  /* 32 in flight, the 33rd refused; then all received */
  void* many[NCCL_NET_MAX_REQUESTS + 1];
  for (int i = 0; i <= NCCL_NET_MAX_REQUESTS; i++) {
    many[i] = NULL;
    CHECK(v10->isend(send, sbuf, 1, 7, mh, NULL, &many[i]) == ncclSuccess, "isend %d", i);
    CHECK(i < NCCL_NET_MAX_REQUESTS ? many[i] != NULL : many[i] == NULL, "request %d: %p", i, many[i]);
  }
  int manyGot[NCCL_NET_MAX_REQUESTS];
  CHECK(waitAll(many, NCCL_NET_MAX_REQUESTS, manyGot) == ncclSuccess, "32 sends");
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) {
    void* r = NULL;
    size_t cap = 1;
    int tag = 7, sz = -1;
    CHECK(v10->irecv(recv, 1, rdata + 1, &cap, &tag, &mh, NULL, &r) == ncclSuccess && r, "irecv %d", i);
    CHECK(waitAll(&r, 1, &sz) == ncclSuccess && sz == 1, "receive %d", i);
  }
  CHECK(v10->deregMr(send, mh) == ncclSuccess, "deregMr");

  /* E: a message too large for the buffer fails the receive comm, once WARNed, sticky */
  void* r = NULL;
  size_t cap = 10;
  int tag = 1, sz;
  w0 = warns;
  CHECK(v10->isend(send, sbuf, 100, tag, mh, NULL, &reqs[0]) == ncclSuccess, "isend 100 B");
  CHECK(v10->irecv(recv, 1, rdata, &cap, &tag, &mh, NULL, &r) == ncclSuccess && r, "irecv 10 B");
  CHECK(waitAll(&r, 1, &sz) == ncclInternalError, "a 100 B message into 10 B did not fail");
  CHECK(v10->irecv(recv, 1, rdata, &cap, &tag, &mh, NULL, &r) == ncclInternalError, "the failure is not sticky");
  CHECK(warns - w0 == 1, "%d WARNs for one failure", warns - w0);
  /* a closed peer fails the sender */
  CHECK(v10->closeRecv(recv) == ncclSuccess, "closeRecv");
  w0 = warns;
  ncclResult_t res = ncclSuccess;
  for (int64_t end = nowMs() + 10000; res == ncclSuccess && nowMs() < end;) {
    void* q = NULL;
    res = v10->isend(send, sbuf, 1 << 20, 1, mh, NULL, &q);
    if (res == ncclSuccess && q) res = waitAll(&q, 1, &sz);
  }
  CHECK(res == ncclRemoteError, "sending to a closed peer: %d", res);
  CHECK(warns - w0 == 1, "%d WARNs for one failure", warns - w0);
  CHECK(v10->closeSend(send) == ncclSuccess, "closeSend");

  /* F: a listener closed with a stranger pending */
  int s3 = rawConnect(&addr);
  void* none = NULL;
  CHECK(s3 >= 0 && v10->accept(listen, &none, NULL) == ncclSuccess && !none, "accept of a stranger");
  CHECK(v10->closeListen(listen) == ncclSuccess, "closeListen");
  if (s3 >= 0) close(s3);
  free(sbuf);
  free(rbuf);
  dlclose(lib);
  int fds1 = countFds();
  CHECK(fds1 == fds0, "file descriptors: %d at the start, %d at the end", fds0, fds1);
  if (failures) {
    fprintf(stderr, "test_aggd_net: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_aggd_net: PASS\n");
  return 0;
}
