/* The "shm" transport: the FIFO lives where both sides reach it.
 * - Ranks in different processes of one host: POSIX shared memory created by the receiver. The name is
 *   unlinked as soon as the sender has mapped it (recvConnect), so nothing is left in /dev/shm even if a
 *   process dies later.
 * - Ranks in one process: plain page-aligned memory owned by the receiver; info carries the pointer and
 *   a per-process cookie that the sender checks.
 * Device connections (device buffers with COMM_P2P_DISABLE=1): the same FIFO, registered with CUDA as
 * mapped memory on each side (in one process, allocated pinned and mapped by the receiver), so the two
 * ranks' kernels fill and drain it in host memory directly, as they would a P2P FIFO; no thread moves it.
 * Their FIFO also holds a region of LL slots after the Simple ones (zeroed, as every FIFO starts), so small
 * device messages use LL lines here as over P2P. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "check.h"
#include "communicator.h"
#include "debug.h"
#include "dev_conn.h"
#include "devmem.h"
#include "transport.h"
#include "utils.h"

#define SHM_PAGE 4096
#define SHM_NAME_MAX 64

enum { SHM_KIND_SHARED = 1, SHM_KIND_LOCAL = 2 };

typedef struct {
  int32_t kind;
  int32_t pid;             /* the receiver's pid */
  uint64_t size;           /* bytes of the mapping */
  uint64_t cookie;         /* local: this process's cookie */
  uint64_t ptr;            /* local: address of the FIFO */
  uint64_t devPtr;         /* local, device connection: the FIFO as kernels address it */
  char name[SHM_NAME_MAX]; /* shared: shm_open name */
} shmInfo;

typedef struct {
  int kind;
  int owner; /* receiver side: frees / unlinks */
  int peerPid;
  void* base;
  size_t size;
  int unlinked;
  char name[SHM_NAME_MAX];
  void* baseDev;  /* device connection: the FIFO as this side's kernels address it */
  int registered; /* base is registered with CUDA by this side (commDevHostRegister) */
  int pinned;     /* base came from commDevHostAlloc (one process, receiver) */
  int cudaDev;
} shmPriv;

static uint64_t shmCookie;

static commResult_t shmProcessCookie(uint64_t* out) {
  uint64_t c = __atomic_load_n(&shmCookie, __ATOMIC_ACQUIRE);
  if (c == 0) {
    uint64_t r = 0;
    COMMCHECK(commRandom64(&r));
    r |= 1;
    uint64_t expected = 0;
    __atomic_compare_exchange_n(&shmCookie, &expected, r, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    c = __atomic_load_n(&shmCookie, __ATOMIC_ACQUIRE);
  }
  *out = c;
  return commSuccess;
}

static size_t shmCtrlBytes(void) { return COMM_ALIGN_UP(sizeof(commFifoCtrl), (size_t)SHM_PAGE); }
/* The ctrl page, the slots, and for device connections the LL slots after them. */
static size_t shmFifoBytes(int nSlots, size_t slotBytes, int onDevice) {
  return shmCtrlBytes() + (size_t)nSlots * (slotBytes + (onDevice ? COMM_DEV_LL_SLOT_BYTES : 0));
}

/* Point conn at the FIFO; a device connection's shared mapping is registered for this side's kernels. */
static commResult_t shmAttach(struct commComm* comm, commConn* conn, shmPriv* p) {
  conn->ctrl = (commFifoCtrl*)p->base;
  conn->slots = (char*)p->base + shmCtrlBytes();
  conn->slotBytes = comm->slotBytes;
  conn->nSlots = comm->nSlots;
  conn->step = 0;
  p->cudaDev = comm->cudaDev;
  if (conn->onDevice && p->kind == SHM_KIND_SHARED) {
    COMMCHECK(commDevHostRegister(comm->cudaDev, p->base, p->size, &p->baseDev));
    p->registered = 1;
  }
  return commSuccess;
}

static int shmSameProcess(struct commComm* comm, int peer) {
  return comm->peers[peer].pid == (int)getpid() && comm->peers[peer].hostHash == comm->peers[comm->rank].hostHash;
}

static commResult_t shmRecvSetup(struct commComm* comm, commConn* conn, void* info) {
  if (comm->nSlots < 1 || comm->nSlots > COMM_NSLOTS || comm->slotBytes == 0) {
    WARN("SHM : invalid FIFO geometry (%d slots of %zu bytes)", comm->nSlots, comm->slotBytes);
    return commInternalError;
  }
  shmPriv* p;
  COMMCHECK(commCalloc(&p, 1, sizeof(*p)));
  conn->priv = p;
  p->owner = 1;
  p->peerPid = comm->peers[conn->peer].pid;
  p->size = shmFifoBytes(comm->nSlots, comm->slotBytes, conn->onDevice);
  shmInfo* si = (shmInfo*)info;
  memset(si, 0, sizeof(*si));
  si->pid = (int32_t)getpid();
  si->size = p->size;

  if (shmSameProcess(comm, conn->peer)) {
    p->kind = SHM_KIND_LOCAL;
    if (conn->onDevice) {
      COMMCHECK(commDevHostAlloc(comm->cudaDev, p->size, &p->base, &p->baseDev));
      p->pinned = 1;
    } else {
      int err = posix_memalign(&p->base, SHM_PAGE, p->size);
      if (err) {
        p->base = NULL;
        WARN("SHM : cannot allocate a FIFO of %zu bytes: %s", p->size, strerror(err));
        return commSystemError;
      }
      memset(p->base, 0, p->size);
    }
    ((commFifoCtrl*)p->base)->localRefs = 1; /* the receiver's; the sender adds its own when it attaches */
    si->kind = SHM_KIND_LOCAL;
    COMMCHECK(shmProcessCookie(&si->cookie));
    si->ptr = (uint64_t)(uintptr_t)p->base;
    si->devPtr = (uint64_t)(uintptr_t)p->baseDev;
    return shmAttach(comm, conn, p);
  }

  p->kind = SHM_KIND_SHARED;
  uint64_t rnd;
  COMMCHECK(commRandom64(&rnd));
  snprintf(p->name, sizeof(p->name), "/comm-%d-%016llx", (int)getpid(), (unsigned long long)rnd);
  int fd = shm_open(p->name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    WARN("SHM : shm_open(%s) failed: %s", p->name, strerror(errno));
    p->unlinked = 1;
    return commSystemError;
  }
  commResult_t res = commSuccess;
  if (ftruncate(fd, (off_t)p->size) != 0) {
    WARN("SHM : ftruncate(%s, %zu) failed: %s", p->name, p->size, strerror(errno));
    res = commSystemError;
    goto fail;
  }
  /* Reserve the pages now: a /dev/shm that is too small fails here with a clear message, not later
   * with SIGBUS in the middle of a collective. */
  int err;
  do {
    err = posix_fallocate(fd, 0, (off_t)p->size);
  } while (err == EINTR);
  if (err != 0) {
    WARN("SHM : cannot reserve %zu bytes in /dev/shm for %s: %s (is /dev/shm too small? e.g. docker "
         "--shm-size; COMM_SHM_DISABLE=1 uses the network instead)",
         p->size, p->name, strerror(err));
    res = commSystemError;
    goto fail;
  }
  p->base = mmap(NULL, p->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p->base == MAP_FAILED) {
    p->base = NULL;
    WARN("SHM : mmap(%s, %zu) failed: %s", p->name, p->size, strerror(errno));
    res = commSystemError;
    goto fail;
  }
  close(fd);
  si->kind = SHM_KIND_SHARED;
  snprintf(si->name, sizeof(si->name), "%s", p->name);
  TRACE(COMM_SHM, "SHM : created %s (%zu bytes) for rank %d -> rank %d", p->name, p->size, conn->peer, comm->rank);
  return shmAttach(comm, conn, p);
fail:
  close(fd);
  shm_unlink(p->name);
  p->unlinked = 1;
  return res;
}

static commResult_t shmSendConnect(struct commComm* comm, commConn* conn, const void* info, void* ack) {
  (void)ack;
  shmInfo si;
  memcpy(&si, info, sizeof(si));
  si.name[SHM_NAME_MAX - 1] = '\0';
  size_t expect = shmFifoBytes(comm->nSlots, comm->slotBytes, conn->onDevice);
  if (si.size != expect) {
    WARN("SHM : rank %d offers a FIFO of %llu bytes, expected %zu (different COMM_BUFFSIZE?)", conn->peer,
         (unsigned long long)si.size, expect);
    return commInvalidUsage;
  }
  shmPriv* p;
  COMMCHECK(commCalloc(&p, 1, sizeof(*p)));
  conn->priv = p;
  p->peerPid = si.pid;
  p->size = (size_t)si.size;
  p->unlinked = 1; /* the receiver owns the name */

  if (si.kind == SHM_KIND_LOCAL) {
    uint64_t cookie;
    COMMCHECK(shmProcessCookie(&cookie));
    if (si.cookie != cookie || si.pid != (int32_t)getpid()) {
      WARN("SHM : rank %d offered in-process memory but is not in this process", conn->peer);
      return commInternalError;
    }
    p->kind = SHM_KIND_LOCAL;
    p->base = (void*)(uintptr_t)si.ptr;
    p->baseDev = (void*)(uintptr_t)si.devPtr;
    if (conn->onDevice && p->baseDev == NULL) {
      WARN("SHM : rank %d offered a host FIFO for a device connection", conn->peer);
      return commInternalError;
    }
    /* Whichever side closes last frees the FIFO: a receiver that destroyed first leaves it to a sender still
     * looking at it (its close marker, in check). */
    __atomic_fetch_add(&((commFifoCtrl*)p->base)->localRefs, 1u, __ATOMIC_ACQ_REL);
    p->pinned = conn->onDevice; /* the receiver made it with commDevHostAlloc (portable: any device frees it) */
    return shmAttach(comm, conn, p);
  }
  if (si.kind != SHM_KIND_SHARED) {
    WARN("SHM : bad connection info from rank %d", conn->peer);
    return commInternalError;
  }
  p->kind = SHM_KIND_SHARED;
  snprintf(p->name, sizeof(p->name), "%s", si.name);
  int fd = shm_open(si.name, O_RDWR, 0600);
  if (fd < 0 && errno == ENOENT) {
    /* The peer made it and has removed it since: it closed its side (it failed, aborted or left). The peer
     * is the culprit unless a notice of an earlier failure arrives in the grace the core gives it. */
    commNotePeerFailure(comm, conn->peer);
    WARN("SHM : rank %d on channel %d removed its FIFO (%s) before this rank attached: the peer closed its side",
         conn->peer, conn->channel, si.name);
    return commRemoteError;
  }
  if (fd < 0) {
    WARN("SHM : shm_open(%s) of rank %d failed: %s", si.name, conn->peer, strerror(errno));
    return commSystemError;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || (size_t)st.st_size < p->size) {
    WARN("SHM : %s of rank %d is smaller than expected", si.name, conn->peer);
    close(fd);
    return commSystemError;
  }
  p->base = mmap(NULL, p->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int mmapErr = errno;
  close(fd);
  if (p->base == MAP_FAILED) {
    p->base = NULL;
    WARN("SHM : mmap(%s) of rank %d failed: %s", si.name, conn->peer, strerror(mmapErr));
    return commSystemError;
  }
  return shmAttach(comm, conn, p);
}

static commResult_t shmRecvConnect(struct commComm* comm, commConn* conn, const void* ack) {
  (void)comm;
  (void)ack;
  shmPriv* p = (shmPriv*)conn->priv;
  if (p->kind == SHM_KIND_SHARED && !p->unlinked) {
    if (shm_unlink(p->name) != 0 && errno != ENOENT) WARN("SHM : shm_unlink(%s) failed: %s", p->name, strerror(errno));
    p->unlinked = 1;
  }
  return commSuccess;
}

/* A process that has exited but is not reaped yet (a zombie) is gone too. */
static int shmPidGone(int pid) {
  if (kill((pid_t)pid, 0) != 0) return errno == ESRCH;
  char path[64], buf[256];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char* end = strrchr(buf, ')'); /* "pid (comm) S ..." */
  return end && end[1] == ' ' && (end[2] == 'Z' || end[2] == 'X');
}

/* Called while a wait stalls on this connection. The peer closed its end (commDestroy: its close marker), or
 * its process is gone: an error only if the FIFO cannot give this side what it waits for any more. A receiver
 * still has data to read after the sender left (the mapping outlives the sender's), so it reads that first:
 * the sender's last head comes before its marker, and a process's last stores before its death. */
static commResult_t shmCheck(struct commComm* comm, commConn* conn) {
  shmPriv* p = (shmPriv*)conn->priv;
  commFifoCtrl* ctrl = conn->ctrl;
  if (!p || !ctrl) return commSuccess;
  int other = p->peerPid > 0 && p->peerPid != (int)getpid();
  int closed = COMM_LOAD_ACQ(conn->isSend ? &ctrl->receiverClosed : &ctrl->senderClosed) != 0;
  int gone = !closed && other && shmPidGone(p->peerPid);
  if (!closed && !gone) return commSuccess;
  if (conn->isSend ? conn->step - COMM_LOAD_ACQ(&ctrl->tail) < (uint64_t)conn->nSlots
                   : COMM_LOAD_ACQ(&ctrl->head) > conn->step)
    return commSuccess; /* what this side waits for is there: the executor takes it */
  const char* how = closed ? "destroyed its communicator" : "is gone (its process exited or was killed)";
  if (conn->isSend)
    WARN("rank %d %s while this rank still had data for it: shm connection to rank %d on channel %d (pid %d), %llu "
         "slots sent, %llu taken",
         conn->peer, how, conn->peer, conn->channel, p->peerPid, (unsigned long long)conn->step,
         (unsigned long long)COMM_LOAD_ACQ(&ctrl->tail));
  else
    WARN("rank %d %s while this rank still expected data from it: shm connection from rank %d on channel %d (pid "
         "%d) ended after %llu slots",
         conn->peer, how, conn->peer, conn->channel, p->peerPid, (unsigned long long)conn->step);
  commNotePeerFailure(comm, conn->peer);
  return commRemoteError;
}

/* This side's end closes: its marker first (the peer's check reads it), then the mapping (the peer's stays
 * valid: a receiver reads the sender's last slots after the sender left). In one process the FIFO is freed by
 * the last side to close. */
static commResult_t shmClose(struct commComm* comm, commConn* conn) {
  (void)comm;
  shmPriv* p = (shmPriv*)conn->priv;
  if (!p) return commSuccess;
  commFifoCtrl* ctrl = (commFifoCtrl*)p->base;
  if (ctrl && conn->ctrl) COMM_STORE_REL(conn->isSend ? &ctrl->senderClosed : &ctrl->receiverClosed, 1u);
  if (p->registered) commDevHostUnregister(p->cudaDev, p->base);
  if (p->kind == SHM_KIND_SHARED) {
    if (p->base) munmap(p->base, p->size);
    if (!p->unlinked) shm_unlink(p->name);
  } else if (p->kind == SHM_KIND_LOCAL && p->base && (p->owner || conn->ctrl)) {
    /* The receiver's reference from recvSetup, the sender's once attached (conn->ctrl set). */
    if (__atomic_sub_fetch(&ctrl->localRefs, 1u, __ATOMIC_ACQ_REL) == 0) {
      if (p->pinned) commDevHostFree(p->cudaDev, p->base);
      else free(p->base);
    }
  }
  free(p);
  conn->priv = NULL;
  conn->ctrl = NULL;
  conn->slots = NULL;
  return commSuccess;
}

/* The kernel's view: everything in the shared FIFO, each side's position in its own line of the ctrl page. */
static commResult_t shmDevConn(const commConn* conn, commDevConn* out) {
  const shmPriv* p = (const shmPriv*)conn->priv;
  if (p == NULL || p->baseDev == NULL) {
    WARN("SHM : connection %s rank %d on channel %d is not a device connection", conn->isSend ? "to" : "from",
         conn->peer, conn->channel);
    return commInternalError;
  }
  char* host = (char*)p->base;
  char* dev = (char*)p->baseDev;
  commFifoCtrl* ctrl = conn->ctrl;
  memset(out, 0, sizeof(*out));
  out->slots = dev + (conn->slots - host);
  out->head = (uint64_t*)(dev + ((char*)&ctrl->head - host));
  out->sizes = (uint64_t*)(dev + ((char*)ctrl->sizes - host));
  out->tail = (uint64_t*)(dev + ((char*)&ctrl->tail - host));
  out->pos = (uint64_t*)(dev + ((char*)(conn->isSend ? &ctrl->devSendPos : &ctrl->devRecvPos) - host));
  if (p->size < shmFifoBytes(conn->nSlots, conn->slotBytes, 1)) {
    WARN("SHM : the FIFO %s rank %d on channel %d has no LL slots (%zu bytes)", conn->isSend ? "to" : "from",
         conn->peer, conn->channel, p->size);
    return commInternalError;
  }
  out->llSlots = out->slots + (size_t)conn->nSlots * conn->slotBytes;
  out->failed = NULL; /* a dead peer: the kernel's timeout */
  out->sysScope = 1;
  return commSuccess;
}

const commTransport commTransportShm = {
    .name = "SHM",
    .recvSetup = shmRecvSetup,
    .sendConnect = shmSendConnect,
    .recvConnect = shmRecvConnect,
    .progress = NULL,
    .check = shmCheck,
    .close = shmClose,
    .devConn = shmDevConn,
};
