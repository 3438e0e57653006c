/* TCP helpers shared by the bootstrap and the socket transport. Every blocking call honours a deadline
 * (commTimeNs() based, COMM_NO_DEADLINE for none) and an abort flag (may be NULL): it returns commTimeout
 * when the deadline passes and commRemoteError when aborted... see each function. */
#ifndef COMM_SOCKET_H_
#define COMM_SOCKET_H_

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include "comm.h"

typedef union {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
} commSockAddr;

#define COMM_IFNAME_MAX 64

/* Choose the interface for bootstrap and socket traffic: COMM_SOCKET_IFNAME (prefix list, "^" excludes,
 * "=" exact, as NCCL_SOCKET_IFNAME) or the first non-loopback interface that is up, else loopback. */
commResult_t commSocketFindInterface(char ifName[COMM_IFNAME_MAX], commSockAddr* addr);
/* Every interface that choice would consider equally good (same filter, same address class: all IPv4
 * ones when there is one), up to max, the one commSocketFindInterface picks first. */
commResult_t commSocketFindInterfaces(char names[][COMM_IFNAME_MAX], commSockAddr* addrs, int max, int* count);
/* "host:port", "[v6]:port" or "v4addr:port"; host names resolve. */
commResult_t commSocketParseAddr(const char* hostport, commSockAddr* out);
const char* commSocketAddrStr(const commSockAddr* addr, char* buf, size_t n);
int commSocketAddrLen(const commSockAddr* addr);

/* Bind and listen on addr (port 0: any); addr gets the bound port. Close-on-exec, non-blocking. */
commResult_t commSocketListen(commSockAddr* addr, int* fd);
/* Connect with retries on ECONNREFUSED/ETIMEDOUT until the deadline. Returns a blocking socket with
 * TCP_NODELAY. commTimeout at the deadline; commInternalError(abort) when *abortFlag becomes non-zero. */
commResult_t commSocketConnect(const commSockAddr* addr, int* fd, int64_t deadlineNs, const int* abortFlag);
/* The same to a listener known to exist (its address came from its owner after it listened): a refused
 * connection means the owner is gone, commRemoteError with a WARN at once, not a retry until the deadline. */
commResult_t commSocketConnectListening(const commSockAddr* addr, int* fd, int64_t deadlineNs, const int* abortFlag);
/* Start a non-blocking connect (close-on-exec, TCP_NODELAY); the socket stays non-blocking. commSuccess with
 * *fd when the connect is under way or done (poll for POLLOUT, then commSocketConnectResult); commRemoteError
 * when it failed at once (*err: the errno, ECONNREFUSED for nobody listening). */
commResult_t commSocketConnectStart(const commSockAddr* addr, int* fd, int* err);
/* The state of a connect started by commSocketConnectStart: 0 connected, EINPROGRESS still under way, else
 * the errno it failed with (a socket the kernel connected to itself counts as ECONNREFUSED). */
int commSocketConnectResult(int fd);
/* Wait for one connection; commTimeout at the deadline. */
commResult_t commSocketAccept(int listenFd, int* fd, int64_t deadlineNs, const int* abortFlag);
/* Send/receive exactly n bytes. EOF or reset: commRemoteError. */
commResult_t commSocketSendAll(int fd, const void* buf, size_t n, int64_t deadlineNs, const int* abortFlag);
commResult_t commSocketRecvAll(int fd, void* buf, size_t n, int64_t deadlineNs, const int* abortFlag);
/* Non-blocking progress: moves as many bytes as possible; *offset advances. EOF: commRemoteError. */
commResult_t commSocketProgress(int fd, int isSend, void* buf, size_t n, size_t* offset);
void commSocketSetNoDelay(int fd);
void commSocketSetBufferSizes(int fd, int bytes);
commResult_t commSocketSetNonBlocking(int fd, int nonBlocking);

#endif
