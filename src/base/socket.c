/* TCP helpers shared by the bootstrap and the socket transport: interface choice, addresses, and
 * listen/connect/accept/send/recv that never block past a deadline or an abort request. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "param.h"
#include "utils.h"

/* Longest single wait, so that the abort flag is looked at often enough. */
#define SOCKET_POLL_SLICE_MS 100
#define SOCKET_IFNAME_LIST_MAX 256
#define SOCKET_IFNAME_TOKENS 32

static int isAborted(const int* abortFlag) {
  return abortFlag != NULL && __atomic_load_n(abortFlag, __ATOMIC_ACQUIRE) != 0;
}

/* Milliseconds to wait in one poll(): at most one slice, never past the deadline (rounded up, so that a
 * deadline less than 1 ms away does not turn into a busy loop). Returns -1 once the deadline passed. */
static int sliceMs(int64_t deadlineNs) {
  if (deadlineNs == COMM_NO_DEADLINE) return SOCKET_POLL_SLICE_MS;
  int64_t left = deadlineNs - commTimeNs();
  if (left <= 0) return -1;
  int64_t ms = (left + 999999) / 1000000;
  return ms > SOCKET_POLL_SLICE_MS ? SOCKET_POLL_SLICE_MS : (int)ms;
}

/* Wait until fd is ready for `events`. commSuccess when ready (or in error/hang-up state, which the next
 * send/recv reports), commTimeout at the deadline, commInternalError when aborted. */
static commResult_t waitFd(int fd, short events, int64_t deadlineNs, const int* abortFlag, const char* what) {
  for (;;) {
    if (isAborted(abortFlag)) {
      WARN("socket %s: aborted", what);
      return commInternalError;
    }
    int ms = sliceMs(deadlineNs);
    if (ms < 0) return commTimeout;
    struct pollfd p = {.fd = fd, .events = events, .revents = 0};
    int r = poll(&p, 1, ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      WARN("socket %s: poll failed: %s", what, strerror(errno));
      return commSystemError;
    }
    if (r > 0) return commSuccess;
  }
}

static const char* peerStr(int fd, char* buf, size_t n) {
  commSockAddr a;
  socklen_t len = sizeof(a);
  memset(&a, 0, sizeof(a));
  if (getpeername(fd, &a.sa, &len) != 0) {
    snprintf(buf, n, "<unknown peer>");
    return buf;
  }
  return commSocketAddrStr(&a, buf, n);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Interfaces */

typedef struct {
  int exclude;
  int exact;
  int n;
  char tokens[SOCKET_IFNAME_TOKENS][COMM_IFNAME_MAX];
} ifFilter;

static void parseFilter(const char* spec, ifFilter* f) {
  memset(f, 0, sizeof(*f));
  if (spec == NULL) return;
  if (*spec == '^') {
    f->exclude = 1;
    spec++;
  }
  if (*spec == '=') {
    f->exact = 1;
    spec++;
  }
  while (*spec != '\0' && f->n < SOCKET_IFNAME_TOKENS) {
    const char* end = strchr(spec, ',');
    size_t len = end ? (size_t)(end - spec) : strlen(spec);
    if (len > 0) {
      if (len >= COMM_IFNAME_MAX) len = COMM_IFNAME_MAX - 1;
      memcpy(f->tokens[f->n], spec, len);
      f->tokens[f->n][len] = '\0';
      f->n++;
    }
    if (end == NULL) break;
    spec = end + 1;
  }
}

static int filterMatches(const ifFilter* f, const char* name) {
  int hit = 0;
  for (int i = 0; i < f->n && !hit; i++) {
    hit = f->exact ? strcmp(name, f->tokens[i]) == 0 : strncmp(name, f->tokens[i], strlen(f->tokens[i])) == 0;
  }
  return f->exclude ? !hit : hit;
}

/* Preference classes, tried in order: global IPv4, global IPv6, link-local IPv6, loopback v4, loopback v6. */
static int addrClass(const struct ifaddrs* ifa) {
  int loop = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
  if (ifa->ifa_addr->sa_family == AF_INET) return loop ? 3 : 0;
  const struct sockaddr_in6* s6 = (const struct sockaddr_in6*)ifa->ifa_addr;
  if (loop || IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr)) return 4;
  if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr)) return 2;
  return 1;
}

static void copyAddr(const struct ifaddrs* ifa, commSockAddr* addr) {
  memset(addr, 0, sizeof(*addr));
  if (ifa->ifa_addr->sa_family == AF_INET) memcpy(&addr->sin, ifa->ifa_addr, sizeof(addr->sin));
  else memcpy(&addr->sin6, ifa->ifa_addr, sizeof(addr->sin6));
}

/* Without COMM_SOCKET_IFNAME, local bridges for containers and VMs are never candidates: they are up with
 * an address even when nothing is attached, and the same address on every host (as NCCL's default
 * "^docker,lo"). */
static int localBridge(const char* name) { return strncmp(name, "docker", 6) == 0 || strncmp(name, "virbr", 5) == 0; }

/* The address class of an interface address that may be used (see addrClass), -1 if it may not: not an
 * IP address, interface down, filtered out, or (without a user filter) a local bridge, or loopback other
 * than "lo" itself (without a user choice loopback is only the last resort). */
static int candidateClass(const struct ifaddrs* ifa, const ifFilter* filter, int userFilter) {
  if (ifa->ifa_addr == NULL) return -1;
  int fam = ifa->ifa_addr->sa_family;
  if (fam != AF_INET && fam != AF_INET6) return -1;
  if (!(ifa->ifa_flags & IFF_UP)) return -1;
  if (userFilter && !filterMatches(filter, ifa->ifa_name)) return -1;
  if (!userFilter && localBridge(ifa->ifa_name)) return -1;
  int c = addrClass(ifa);
  if (!userFilter && c >= 3 && strcmp(ifa->ifa_name, "lo") != 0) return -1;
  return c;
}

commResult_t commSocketFindInterfaces(char names[][COMM_IFNAME_MAX], commSockAddr* addrs, int max, int* count) {
  *count = 0;
  char spec[SOCKET_IFNAME_LIST_MAX];
  const char* env = commParamStr("COMM_SOCKET_IFNAME", NULL);
  spec[0] = '\0';
  if (env != NULL) snprintf(spec, sizeof(spec), "%s", env);
  ifFilter filter;
  parseFilter(env ? spec : NULL, &filter);
  int userFilter = env != NULL && filter.n > 0;

  struct ifaddrs* list = NULL;
  if (getifaddrs(&list) != 0) {
    WARN("getifaddrs failed: %s", strerror(errno));
    return commSystemError;
  }
  /* The best address class over all candidates; then every interface that has an address of that class
   * (its first such address), in the order getifaddrs lists them. */
  int bestClass = 5;
  for (const struct ifaddrs* ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
    int c = candidateClass(ifa, &filter, userFilter);
    if (c >= 0 && c < bestClass) bestClass = c;
  }
  for (const struct ifaddrs* ifa = list; ifa != NULL && *count < max; ifa = ifa->ifa_next) {
    if (candidateClass(ifa, &filter, userFilter) != bestClass) continue;
    int dup = 0;
    for (int i = 0; i < *count && !dup; i++) dup = strcmp(names[i], ifa->ifa_name) == 0;
    if (dup) continue;
    snprintf(names[*count], COMM_IFNAME_MAX, "%s", ifa->ifa_name);
    copyAddr(ifa, &addrs[*count]);
    (*count)++;
  }
  freeifaddrs(list);
  if (*count == 0) {
    if (userFilter) WARN("no interface that is up matches COMM_SOCKET_IFNAME=%s", spec);
    else WARN("no usable network interface found (not even loopback \"lo\")");
    return commSystemError;
  }
  if (!userFilter && bestClass >= 3)
    WARN("no non-loopback network interface is up: using loopback \"%s\" (ranks on other hosts cannot connect)",
         names[0]);
  char buf[128];
  TRACE(COMM_BOOTSTRAP, "socket interface %s address %s%s%s%s (%d usable)", names[0],
        commSocketAddrStr(&addrs[0], buf, sizeof(buf)), userFilter ? " (COMM_SOCKET_IFNAME=" : "",
        userFilter ? spec : "", userFilter ? ")" : "", *count);
  return commSuccess;
}

commResult_t commSocketFindInterface(char ifName[COMM_IFNAME_MAX], commSockAddr* addr) {
  char names[1][COMM_IFNAME_MAX];
  int count = 0;
  COMMCHECK(commSocketFindInterfaces(names, addr, 1, &count));
  snprintf(ifName, COMM_IFNAME_MAX, "%s", names[0]);
  return commSuccess;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Addresses */

commResult_t commSocketParseAddr(const char* hostport, commSockAddr* out) {
  if (hostport == NULL || out == NULL) {
    WARN("commSocketParseAddr: NULL argument");
    return commInvalidArgument;
  }
  char host[256];
  const char* portStr = NULL;
  size_t hlen;
  if (hostport[0] == '[') {
    const char* close = strchr(hostport, ']');
    if (close == NULL || close[1] != ':') {
      WARN("address \"%s\": expected \"[v6addr]:port\"", hostport);
      return commInvalidArgument;
    }
    hlen = (size_t)(close - hostport - 1);
    if (hlen >= sizeof(host)) {
      WARN("address \"%s\": host part too long", hostport);
      return commInvalidArgument;
    }
    memcpy(host, hostport + 1, hlen);
    portStr = close + 2;
  } else {
    const char* colon = strrchr(hostport, ':');
    if (colon == NULL) {
      WARN("address \"%s\": expected \"host:port\"", hostport);
      return commInvalidArgument;
    }
    hlen = (size_t)(colon - hostport);
    if (hlen >= sizeof(host)) {
      WARN("address \"%s\": host part too long", hostport);
      return commInvalidArgument;
    }
    memcpy(host, hostport, hlen);
    portStr = colon + 1;
  }
  host[hlen] = '\0';
  char* end = NULL;
  errno = 0;
  long port = strtol(portStr, &end, 10);
  if (hlen == 0 || *portStr == '\0' || *end != '\0' || errno != 0 || port < 0 || port > 65535) {
    WARN("address \"%s\": expected \"host:port\" with a port in [0, 65535]", hostport);
    return commInvalidArgument;
  }
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || res == NULL) {
    WARN("address \"%s\": cannot resolve \"%s\": %s", hostport, host, gai_strerror(rc));
    return commInvalidArgument;
  }
  /* Prefer an IPv4 result when a name resolves to both. */
  const struct addrinfo* pick = res;
  for (const struct addrinfo* ai = res; ai != NULL; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      pick = ai;
      break;
    }
  }
  memset(out, 0, sizeof(*out));
  commResult_t ret = commSuccess;
  if (pick->ai_family == AF_INET && pick->ai_addrlen <= sizeof(out->sin)) {
    memcpy(&out->sin, pick->ai_addr, pick->ai_addrlen);
    out->sin.sin_port = htons((uint16_t)port);
  } else if (pick->ai_family == AF_INET6 && pick->ai_addrlen <= sizeof(out->sin6)) {
    memcpy(&out->sin6, pick->ai_addr, pick->ai_addrlen);
    out->sin6.sin6_port = htons((uint16_t)port);
  } else {
    WARN("address \"%s\": unsupported address family %d", hostport, pick->ai_family);
    ret = commInvalidArgument;
  }
  freeaddrinfo(res);
  return ret;
}

const char* commSocketAddrStr(const commSockAddr* addr, char* buf, size_t n) {
  if (buf == NULL || n == 0) return "";
  char ip[INET6_ADDRSTRLEN];
  if (addr == NULL) {
    snprintf(buf, n, "<null>");
  } else if (addr->sa.sa_family == AF_INET) {
    if (inet_ntop(AF_INET, &addr->sin.sin_addr, ip, sizeof(ip)) == NULL) snprintf(ip, sizeof(ip), "?");
    snprintf(buf, n, "%s:%u", ip, (unsigned)ntohs(addr->sin.sin_port));
  } else if (addr->sa.sa_family == AF_INET6) {
    if (inet_ntop(AF_INET6, &addr->sin6.sin6_addr, ip, sizeof(ip)) == NULL) snprintf(ip, sizeof(ip), "?");
    char scope[IF_NAMESIZE + 1] = "";
    char ifn[IF_NAMESIZE];
    if (addr->sin6.sin6_scope_id != 0 && if_indextoname(addr->sin6.sin6_scope_id, ifn) != NULL) {
      snprintf(scope, sizeof(scope), "%%%s", ifn);
    }
    snprintf(buf, n, "[%s%s]:%u", ip, scope, (unsigned)ntohs(addr->sin6.sin6_port));
  } else {
    snprintf(buf, n, "<family %d>", (int)addr->sa.sa_family);
  }
  return buf;
}

int commSocketAddrLen(const commSockAddr* addr) {
  return addr->sa.sa_family == AF_INET6 ? (int)sizeof(struct sockaddr_in6) : (int)sizeof(struct sockaddr_in);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Socket options */

void commSocketSetNoDelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    INFO(COMM_BOOTSTRAP, "setsockopt(TCP_NODELAY) on fd %d failed: %s", fd, strerror(errno));
  }
}

void commSocketSetBufferSizes(int fd, int bytes) {
  if (bytes <= 0) return;
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) != 0) {
    INFO(COMM_BOOTSTRAP, "setting socket buffers of fd %d to %d bytes failed: %s", fd, bytes, strerror(errno));
  }
}

commResult_t commSocketSetNonBlocking(int fd, int nonBlocking) {
  int flags = fcntl(fd, F_GETFL);
  if (flags == -1) {
    WARN("fcntl(F_GETFL) on fd %d failed: %s", fd, strerror(errno));
    return commSystemError;
  }
  int want = nonBlocking ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (want != flags) SYSCHECK(fcntl(fd, F_SETFL, want), "fcntl(F_SETFL, O_NONBLOCK)");
  return commSuccess;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Listen / connect / accept */

commResult_t commSocketListen(commSockAddr* addr, int* fd) {
  char buf[INET6_ADDRSTRLEN + 32];
  int fam = addr->sa.sa_family;
  if (fam != AF_INET && fam != AF_INET6) {
    WARN("listen: unsupported address family %d", fam);
    return commInvalidArgument;
  }
  int s = socket(fam, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) {
    WARN("socket() for listening failed: %s", strerror(errno));
    return commSystemError;
  }
  int one = 1;
  if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    INFO(COMM_BOOTSTRAP, "setsockopt(SO_REUSEADDR) failed: %s", strerror(errno));
  }
  if (bind(s, &addr->sa, (socklen_t)commSocketAddrLen(addr)) != 0) {
    int e = errno;
    WARN("bind to %s failed: %s", commSocketAddrStr(addr, buf, sizeof(buf)), strerror(e));
    close(s);
    errno = e;
    return commSystemError;
  }
  if (listen(s, SOMAXCONN) != 0) {
    WARN("listen on %s failed: %s", commSocketAddrStr(addr, buf, sizeof(buf)), strerror(errno));
    close(s);
    return commSystemError;
  }
  socklen_t len = sizeof(*addr);
  if (getsockname(s, &addr->sa, &len) != 0) {
    WARN("getsockname failed: %s", strerror(errno));
    close(s);
    return commSystemError;
  }
  *fd = s;
  TRACE(COMM_BOOTSTRAP, "listening on %s (fd %d)", commSocketAddrStr(addr, buf, sizeof(buf)), s);
  return commSuccess;
}

static int sameAddr(const commSockAddr* a, const commSockAddr* b) {
  if (a->sa.sa_family != b->sa.sa_family) return 0;
  if (a->sa.sa_family == AF_INET) {
    return a->sin.sin_port == b->sin.sin_port && a->sin.sin_addr.s_addr == b->sin.sin_addr.s_addr;
  }
  return a->sin6.sin6_port == b->sin6.sin6_port &&
         memcmp(&a->sin6.sin6_addr, &b->sin6.sin6_addr, sizeof(struct in6_addr)) == 0;
}

static int isSelfConnected(int fd) {
  commSockAddr local, peer;
  socklen_t ll = sizeof(local), pl = sizeof(peer);
  memset(&local, 0, sizeof(local));
  memset(&peer, 0, sizeof(peer));
  if (getsockname(fd, &local.sa, &ll) != 0 || getpeername(fd, &peer.sa, &pl) != 0) return 0;
  return sameAddr(&local, &peer);
}

static int connectRetryable(int e) {
  return e == ECONNREFUSED || e == ETIMEDOUT || e == ECONNRESET || e == EHOSTUNREACH || e == ENETUNREACH ||
         e == EAGAIN || e == EINTR || e == ECONNABORTED;
}

static commResult_t connectImpl(const commSockAddr* addr, int* fd, int64_t deadlineNs, const int* abortFlag,
                                int retryRefused) {
  char buf[INET6_ADDRSTRLEN + 32];
  int fam = addr->sa.sa_family;
  if (fam != AF_INET && fam != AF_INET6) {
    WARN("connect: unsupported address family %d", fam);
    return commInvalidArgument;
  }
  int64_t backoffMs = 1;
  int attempts = 0;
  for (;;) {
    if (isAborted(abortFlag)) {
      WARN("connect to %s: aborted", commSocketAddrStr(addr, buf, sizeof(buf)));
      return commInternalError;
    }
    if (deadlineNs != COMM_NO_DEADLINE && commTimeNs() >= deadlineNs) {
      TRACE(COMM_BOOTSTRAP, "connect to %s: deadline passed after %d attempts",
            commSocketAddrStr(addr, buf, sizeof(buf)), attempts);
      return commTimeout;
    }
    attempts++;
    int s = socket(fam, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) {
      WARN("socket() for connecting failed: %s", strerror(errno));
      return commSystemError;
    }
    int err = 0;
    if (connect(s, &addr->sa, (socklen_t)commSocketAddrLen(addr)) != 0) {
      err = errno;
      if (err == EINPROGRESS || err == EINTR) {
        commResult_t r = waitFd(s, POLLOUT, deadlineNs, abortFlag, "connect");
        if (r != commSuccess) {
          close(s);
          return r;
        }
        socklen_t len = sizeof(err);
        if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err == 0 && isSelfConnected(s)) {
      /* Nobody listened and the kernel picked the target port as our local port: TCP connected the socket
       * to itself. Retry as if refused. */
      err = ECONNREFUSED;
    }
    if (err == 0) {
      commResult_t r = commSocketSetNonBlocking(s, 0);
      if (r != commSuccess) {
        close(s);
        return r;
      }
      commSocketSetNoDelay(s);
      *fd = s;
      return commSuccess;
    }
    close(s);
    if (!retryRefused && err == ECONNREFUSED) {
      /* No WARN: the caller knows whose address this is and says so (its WARN is the failure's cause). */
      INFO(COMM_INIT | COMM_NET, "connect to %s: connection refused: nobody listens there any more (the peer is gone)",
           commSocketAddrStr(addr, buf, sizeof(buf)));
      return commRemoteError;
    }
    if (!connectRetryable(err)) {
      WARN("connect to %s failed: %s", commSocketAddrStr(addr, buf, sizeof(buf)), strerror(err));
      return commSystemError;
    }
    if (attempts == 1 || attempts % 100 == 0) {
      TRACE(COMM_BOOTSTRAP, "connect to %s: %s, retrying", commSocketAddrStr(addr, buf, sizeof(buf)), strerror(err));
    }
    /* Back off (1, 2, 4 .. 100 ms) without passing the deadline, looking at the abort flag. */
    int64_t until = commTimeNs() + backoffMs * 1000000LL;
    if (deadlineNs != COMM_NO_DEADLINE && until > deadlineNs) until = deadlineNs;
    while (commTimeNs() < until) {
      if (isAborted(abortFlag)) break;
      int64_t left = (until - commTimeNs() + 999999) / 1000000;
      if (left <= 0) break;
      poll(NULL, 0, (int)(left > SOCKET_POLL_SLICE_MS ? SOCKET_POLL_SLICE_MS : left));
    }
    backoffMs = backoffMs * 2 > SOCKET_POLL_SLICE_MS ? SOCKET_POLL_SLICE_MS : backoffMs * 2;
  }
}

commResult_t commSocketConnect(const commSockAddr* addr, int* fd, int64_t deadlineNs, const int* abortFlag) {
  return connectImpl(addr, fd, deadlineNs, abortFlag, 1);
}

commResult_t commSocketConnectListening(const commSockAddr* addr, int* fd, int64_t deadlineNs, const int* abortFlag) {
  return connectImpl(addr, fd, deadlineNs, abortFlag, 0);
}

commResult_t commSocketConnectStart(const commSockAddr* addr, int* fd, int* err) {
  int fam = addr->sa.sa_family;
  *fd = -1;
  *err = 0;
  if (fam != AF_INET && fam != AF_INET6) {
    WARN("connect: unsupported address family %d", fam);
    return commInvalidArgument;
  }
  int s = socket(fam, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) {
    WARN("socket() for connecting failed: %s", strerror(errno));
    return commSystemError;
  }
  commSocketSetNoDelay(s);
  int r;
  do {
    r = connect(s, &addr->sa, (socklen_t)commSocketAddrLen(addr));
  } while (r != 0 && errno == EINTR);
  if (r != 0 && errno != EINPROGRESS) {
    *err = errno;
    close(s);
    return commRemoteError;
  }
  *fd = s;
  return commSuccess;
}

int commSocketConnectResult(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLOUT, .revents = 0};
  int r = poll(&p, 1, 0);
  if (r == 0) return EINPROGRESS;
  if (r < 0) return errno == EINTR ? EINPROGRESS : errno;
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  if (err == 0 && isSelfConnected(fd)) err = ECONNREFUSED;
  return err;
}

commResult_t commSocketAccept(int listenFd, int* fd, int64_t deadlineNs, const int* abortFlag) {
  for (;;) {
    int s = accept4(listenFd, NULL, NULL, SOCK_CLOEXEC);
    if (s >= 0) {
      commSocketSetNoDelay(s);
      *fd = s;
      return commSuccess;
    }
    int e = errno;
    if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == ECONNABORTED || e == EPROTO) {
      if (isAborted(abortFlag)) {
        WARN("accept on fd %d: aborted", listenFd);
        return commInternalError;
      }
      if (e == EAGAIN || e == EWOULDBLOCK) {
        commResult_t r = waitFd(listenFd, POLLIN, deadlineNs, abortFlag, "accept");
        if (r != commSuccess) return r;
      }
      continue;
    }
    WARN("accept on fd %d failed: %s", listenFd, strerror(e));
    return commSystemError;
  }
}

/* ---------------------------------------------------------------------------------------------------- */
/* Data */

static int isRemoteErrno(int e) { return e == ECONNRESET || e == EPIPE || e == ENOTCONN || e == ETIMEDOUT; }

commResult_t commSocketProgress(int fd, int isSend, void* buf, size_t n, size_t* offset) {
  char pbuf[INET6_ADDRSTRLEN + 32];
  while (*offset < n) {
    ssize_t r;
    if (isSend) {
      r = send(fd, (const char*)buf + *offset, n - *offset, MSG_NOSIGNAL | MSG_DONTWAIT);
    } else {
      r = recv(fd, (char*)buf + *offset, n - *offset, MSG_DONTWAIT);
    }
    if (r > 0) {
      *offset += (size_t)r;
      continue;
    }
    if (r == 0 && !isSend) {
      WARN("connection closed by %s after %zu of %zu bytes", peerStr(fd, pbuf, sizeof(pbuf)), *offset, n);
      return commRemoteError;
    }
    if (r < 0) {
      int e = errno;
      if (e == EINTR) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) return commSuccess;
      if (isRemoteErrno(e)) {
        WARN("%s %s: %s", isSend ? "send to" : "recv from", peerStr(fd, pbuf, sizeof(pbuf)), strerror(e));
        return commRemoteError;
      }
      WARN("%s on fd %d failed: %s", isSend ? "send" : "recv", fd, strerror(e));
      return commSystemError;
    }
  }
  return commSuccess;
}

static commResult_t transferAll(int fd, int isSend, void* buf, size_t n, int64_t deadlineNs, const int* abortFlag) {
  size_t off = 0;
  while (off < n) {
    if (isAborted(abortFlag)) {
      WARN("socket %s: aborted", isSend ? "send" : "recv");
      return commInternalError;
    }
    size_t before = off;
    COMMCHECK(commSocketProgress(fd, isSend, buf, n, &off));
    if (off == n) break;
    if (off == before) {
      COMMCHECK(waitFd(fd, isSend ? POLLOUT : POLLIN, deadlineNs, abortFlag, isSend ? "send" : "recv"));
    }
  }
  return commSuccess;
}

commResult_t commSocketSendAll(int fd, const void* buf, size_t n, int64_t deadlineNs, const int* abortFlag) {
  return transferAll(fd, 1, (void*)buf, n, deadlineNs, abortFlag);
}

commResult_t commSocketRecvAll(int fd, void* buf, size_t n, int64_t deadlineNs, const int* abortFlag) {
  return transferAll(fd, 0, buf, n, deadlineNs, abortFlag);
}
