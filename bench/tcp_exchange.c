/* tcp_exchange: what TCP over loopback can do on this host, with no library in the way.
 *
 * Two processes exchange a buffer of N bytes: each sends N and receives N at the same time, with
 * non-blocking send()/recv() in one spinning thread (as libcomm's calling thread does). A 2-rank allreduce
 * of S bytes moves S bytes each way (ring: S/2 twice; one-shot: S once), so the exchange time of S/2 bytes,
 * twice, bounds how fast any TCP allreduce can run here: busbw <= S / (2 x t(S/2)), which is the rate
 * per direction of an exchange of S/2 bytes.
 *
 *   tcp_exchange [-b MIN] [-e MAX] [-n ITERS] [-r REPS] [-s 1|2]
 * -s 1: one socket carries both directions (ACKs ride on data); -s 2: one socket per direction (as
 * libcomm's send and receive connections). Prints per size the median over REPS of the mean exchange
 * time of ITERS exchanges and the rate per direction (= the busbw bound of a 2-rank allreduce of twice
 * that size).
 * SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t parseSize(const char* s) {
  char* end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'K':
    case 'k': v *= 1024; break;
    case 'M':
    case 'm': v *= 1024 * 1024; break;
    case 'G':
    case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return (size_t)v;
}

static void tune(int fd) {
  int one = 1, bytes = 4 << 20;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* One exchange of n bytes each way; 0 on success. */
static int exchange(int sendFd, int recvFd, const char* sbuf, char* rbuf, size_t n) {
  size_t sent = 0, got = 0;
  while (sent < n || got < n) {
    if (sent < n) {
      ssize_t k = send(sendFd, sbuf + sent, n - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k > 0) sent += (size_t)k;
      else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    }
    if (got < n) {
      ssize_t k = recv(recvFd, rbuf + got, n - got, MSG_DONTWAIT);
      if (k > 0) got += (size_t)k;
      else if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return -1;
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  size_t minBytes = 8, maxBytes = 32 << 20;
  int iters = 20, reps = 5, nSock = 2;
  int opt;
  while ((opt = getopt(argc, argv, "b:e:n:r:s:")) != -1) {
    switch (opt) {
      case 'b': minBytes = parseSize(optarg); break;
      case 'e': maxBytes = parseSize(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'r': reps = atoi(optarg); break;
      case 's': nSock = atoi(optarg); break;
      default: fprintf(stderr, "usage: %s [-b MIN] [-e MAX] [-n ITERS] [-r REPS] [-s 1|2]\n", argv[0]); return 2;
    }
  }
  if (minBytes < 1 || maxBytes < minBytes || iters < 1 || reps < 1 || reps > 1000 || (nSock != 1 && nSock != 2)) {
    fprintf(stderr, "tcp_exchange: invalid arguments\n");
    return 2;
  }
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof(addr);
  if (lfd < 0 || bind(lfd, (struct sockaddr*)&addr, sizeof(addr)) != 0 || listen(lfd, 4) != 0 ||
      getsockname(lfd, (struct sockaddr*)&addr, &alen) != 0) {
    perror("tcp_exchange: listen");
    return 1;
  }
  fflush(NULL);
  pid_t child = fork();
  if (child < 0) {
    perror("fork");
    return 1;
  }
  int isChild = child == 0, sendFd, recvFd;
  if (isChild) {
    sendFd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(sendFd, (struct sockaddr*)&addr, sizeof(addr)) != 0) _exit(1);
    recvFd = sendFd;
    if (nSock == 2) {
      recvFd = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(recvFd, (struct sockaddr*)&addr, sizeof(addr)) != 0) _exit(1);
    }
  } else {
    recvFd = accept(lfd, NULL, NULL);
    sendFd = nSock == 2 ? accept(lfd, NULL, NULL) : recvFd;
    if (recvFd < 0 || sendFd < 0) {
      perror("accept");
      return 1;
    }
  }
  tune(sendFd);
  if (recvFd != sendFd) tune(recvFd);
  char* sbuf = malloc(maxBytes);
  char* rbuf = malloc(maxBytes);
  double* times = malloc(sizeof(double) * (size_t)reps);
  if (!sbuf || !rbuf || !times) return 1;
  memset(sbuf, 1, maxBytes);
  memset(rbuf, 0, maxBytes);
  if (!isChild) {
    printf("# tcp_exchange: 2 processes, loopback, %d socket%s, %d exchanges x %d repetitions per size\n", nSock,
           nSock == 2 ? "s (one per direction)" : " (both directions)", iters, reps);
    printf("# %12s %14s %14s\n", "bytes", "time(us)", "GB/s each way");
    printf("# %12s %14s %14s\n", "(each way)", "(median)", "(= busbw bound, 2x bytes)");
  }
  int failed = 0;
  for (size_t n = minBytes; n <= maxBytes && !failed; n *= 2) {
    for (int w = 0; w < 2 && !failed; w++) failed = exchange(sendFd, recvFd, sbuf, rbuf, n) != 0;
    for (int r = 0; r < reps && !failed; r++) {
      double t0 = nowSec();
      for (int i = 0; i < iters && !failed; i++) failed = exchange(sendFd, recvFd, sbuf, rbuf, n) != 0;
      times[r] = (nowSec() - t0) / iters;
    }
    if (failed) break;
    qsort(times, (size_t)reps, sizeof(double), cmpDouble);
    double t = times[reps / 2];
    if (!isChild) printf("  %12zu %14.2f %14.3f\n", n, t * 1e6, (double)n / t / 1e9);
  }
  if (failed) fprintf(stderr, "tcp_exchange: %s: exchange failed: %s\n", isChild ? "child" : "parent", strerror(errno));
  if (isChild) _exit(failed);
  int status = 0;
  waitpid(child, &status, 0);
  return failed || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}
