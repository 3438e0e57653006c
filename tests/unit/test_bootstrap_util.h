/* What the bootstrap tests share to impersonate peers and strangers: raw connections, the handshake of
 * src/bootstrap/bootstrap_auth.h done by hand (with the right or a wrong key), and a check that the other side
 * hung up. Included by test_bootstrap*.c after cmocka.h. */
#ifndef TEST_BOOTSTRAP_UTIL_H_
#define TEST_BOOTSTRAP_UTIL_H_

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap_auth.h"
#include "socket.h"
#include "utils.h"

static inline int tbRawConnect(const commSockAddr* addr) {
  int fd = -1;
  assert_int_equal(commSocketConnect(addr, &fd, commDeadlineNs(5000), NULL), commSuccess);
  return fd;
}

static inline void tbRawSend(int fd, const void* buf, size_t n) {
  assert_int_equal(commSocketSendAll(fd, buf, n, commDeadlineNs(5000), NULL), commSuccess);
}

/* The handshake as a client: read the challenge, send a claim MAC'd with key. Returns the proof's status
 * (BOOT_PROOF_OK/REFUSED), or -1 when the listener hung up without one. */
static inline int tbHandshake(int fd, const uint64_t key[2], uint32_t type, int rank, int nranks, uint64_t size) {
  bootChallenge ch;
  assert_int_equal(commSocketRecvAll(fd, &ch, sizeof(ch), commDeadlineNs(5000), NULL), commSuccess);
  assert_true(ch.magic == BOOT_CHAL_MAGIC);
  bootAuthMsg m;
  memset(&m, 0, sizeof(m));
  m.magic = BOOT_AUTH_MAGIC;
  memset(m.nonce, 0x42, sizeof(m.nonce));
  m.type = type;
  m.rank = rank;
  m.nranks = nranks;
  m.size = size;
  m.addr.sin.sin_family = AF_INET;
  m.remainingMs = 10000;
  m.mac = bootMacAuth(key, ch.nonce, &m);
  tbRawSend(fd, &m, sizeof(m));
  bootProof p;
  if (commSocketRecvAll(fd, &p, sizeof(p), commDeadlineNs(5000), NULL) != commSuccess) return -1;
  return (int)p.status;
}

/* The other side closed the connection (reading whatever it sent before). */
static inline void tbAssertClosedByPeer(int fd) {
  int64_t deadline = commDeadlineNs(10000);
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
    assert_int_equal(poll(&p, 1, 10000), 1);
    char buf[256];
    ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno == ECONNRESET)) break;
    assert_true(commTimeNs() < deadline);
  }
  close(fd);
}

/* A free port below the ephemeral range, as launchers choose for COMM_ROOT: inside that range, the
 * connections of the ranks that start before the root could take the port as their local port. */
static inline int tbFreeRootPort(void) {
  int lo = 32768, hi = 60999;
  FILE* f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (f != NULL) {
    if (fscanf(f, "%d %d", &lo, &hi) != 2) lo = 32768;
    fclose(f);
  }
  int base = lo > 12000 ? lo - 10000 : 2000;
  int start = (int)(commTimeNs() / 1000 % 9000);
  for (int i = 0; i < 9000; i++) {
    commSockAddr a;
    assert_int_equal(commSocketParseAddr("127.0.0.1:0", &a), commSuccess);
    a.sin.sin_port = htons((uint16_t)(base + (start + i) % 9000));
    int s = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s >= 0);
    int rc = bind(s, &a.sa, sizeof(a.sin));
    close(s);
    if (rc == 0) return ntohs(a.sin.sin_port);
  }
  fail_msg("no free port below the ephemeral range");
  return -1;
}

#endif
