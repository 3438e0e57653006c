/* What src/bootstrap/bootstrap.c (the ranks' side) and src/bootstrap/root.c (the root's rendezvous) share:
 * the rendezvous wire format and a few helpers. Not part of the bootstrap's interface (see bootstrap.h). */
#ifndef COMM_BOOTSTRAP_INTERNAL_H_
#define COMM_BOOTSTRAP_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>
#include "bootstrap.h"
#include "socket.h"

#define BOOT_HELLO_MAGIC 0x636f6d6d68656c31ull /* "commhel1" */
#define BOOT_REPLY_MAGIC 0x636f6d6d72706c31ull /* "commrpl1" */
/* How long one connection may take to deliver its header (hello or message header). */
#define BOOT_HEADER_TIMEOUT_MS 2000
#define BOOT_ADDR_STR 96

enum { BOOT_REPLY_OK = 0, BOOT_REPLY_TIMEOUT = 1, BOOT_REPLY_REJECTED = 2 };

typedef struct {
  uint64_t magic;
  uint64_t secret;
  int32_t rank;
  int32_t nranks;
  int64_t remainingMs; /* time left before this rank gives up; <0: it never does */
  commSockAddr addr;   /* the rank's listener */
  uint32_t pad;
} bootHello;

typedef struct {
  uint64_t magic;
  uint64_t secret;
  int32_t status;
  int32_t nranks;
  int32_t arrived;
  int32_t pad;
  char reason[128];
  /* OK: nranks x commSockAddr follow. TIMEOUT: nranks bytes, 1 for each rank that arrived. */
} bootReply;

static inline int64_t minDeadline(int64_t a, int64_t b) { return a < b ? a : b; }

/* The address of the peer of a connected socket, "<unknown>" if there is none. */
const char* bootFdPeerStr(int fd, char* buf, size_t n);
/* "3, 5, 9" for the ranks whose flag is 0; at most 16 listed. */
void bootFormatMissing(const unsigned char* arrived, int nranks, char* buf, size_t n);

#endif
