/* Files a user names to the topology layer (COMM_TOPO_FILE, COMM_TOPO_DUMP_FILE, comm_topo's -f/-x/-d):
 * opened without blocking and checked before anything is read or written (see src/topo/topo.h).
 *
 * open() of a FIFO for reading blocks until a writer comes (forever, in an init no timeout covers), and
 * for writing until a reader comes; /dev/zero never ends; a directory is not text. So every path is
 * opened with O_NONBLOCK (a FIFO open returns at once), then fstat decides: anything but a regular file
 * is refused with its type in the message. A regular file's size is known before reading, so an
 * oversized one is refused without reading it, and the read loop stops at a deadline. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "topo.h"
#include "utils.h"

#define READ_CHUNK ((size_t)1 << 20)

const char* commTopoFileTypeName(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFDIR: return "a directory";
    case S_IFLNK: return "a symbolic link";
    default: return "not a regular file";
  }
}

static commResult_t notRegular(const char* what, const char* path, unsigned mode) {
  WARN("%s %s is %s, not a regular file: refused (reading or writing it could block or never end)", what, path,
       commTopoFileTypeName(mode));
  return commInvalidArgument;
}

commResult_t commTopoCheckPath(const char* what, const char* path) {
  struct stat st;
  if (stat(path, &st) != 0) return commSuccess; /* absent (or unreachable): opening it will say */
  if (!S_ISREG(st.st_mode)) return notRegular(what, path, st.st_mode);
  return commSuccess;
}

commResult_t commTopoReadFile(const char* what, const char* path, size_t maxBytes, int timeoutMs, char** text,
                              size_t* len) {
  commResult_t res = commSuccess;
  char* buf = NULL;
  struct stat st;
  *text = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    int err = errno;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return notRegular(what, path, st.st_mode); /* a socket */
    WARN("cannot open %s %s: %s", what, path, strerror(err));
    return commSystemError;
  }
  if (fstat(fd, &st) != 0) {
    WARN("cannot stat %s %s: %s", what, path, strerror(errno));
    res = commSystemError;
    goto exit;
  }
  if (!S_ISREG(st.st_mode)) {
    res = notRegular(what, path, st.st_mode);
    goto exit;
  }
  if ((unsigned long long)st.st_size > maxBytes) {
    char mib[32] = "";
    if (maxBytes >= ((size_t)1 << 20)) snprintf(mib, sizeof(mib), " (%zu MiB)", maxBytes >> 20);
    WARN("%s %s is %lld bytes, larger than the limit of %zu bytes%s: refused", what, path, (long long)st.st_size,
         maxBytes, mib);
    res = commInvalidArgument;
    goto exit;
  }
  /* One byte more than stat said, to see a file that grows while it is read. */
  size_t cap = (size_t)st.st_size + 1, n = 0;
  COMMCHECKGOTO(commCalloc(&buf, cap + 1, 1), res, exit);
  int64_t deadline = commTimeNs() + (int64_t)timeoutMs * 1000000;
  for (;;) {
    if (n == cap) {
      if (cap > maxBytes) {
        WARN("%s %s grew beyond the limit of %zu bytes while it was read: refused", what, path, maxBytes);
        res = commInvalidArgument;
        goto exit;
      }
      size_t newCap = COMM_MIN(cap * 2, maxBytes + 1);
      COMMCHECKGOTO(commRealloc(&buf, cap + 1, newCap + 1, 1), res, exit);
      cap = newCap;
    }
    ssize_t got = read(fd, buf + n, COMM_MIN(cap - n, READ_CHUNK));
    if (got == 0) break;
    if (got < 0 && errno != EINTR && errno != EAGAIN) {
      WARN("cannot read %s %s: %s", what, path, strerror(errno));
      res = commSystemError;
      goto exit;
    }
    if (got > 0) n += (size_t)got;
    if (commTimeNs() > deadline) {
      WARN("%s %s: reading took longer than %d ms (%zu of %lld bytes read): refused", what, path, timeoutMs, n,
           (long long)st.st_size);
      res = commSystemError;
      goto exit;
    }
  }
  buf[n] = '\0';
  *text = buf;
  *len = n;
  buf = NULL;
exit:
  free(buf);
  close(fd);
  return res;
}

commResult_t commTopoCreateFile(const char* what, const char* path, FILE** out) {
  struct stat st;
  *out = NULL;
  /* Refused before opening when it exists: a FIFO opened for writing without a reader fails with ENXIO,
   * which would name the wrong cause. */
  COMMCHECK(commTopoCheckPath(what, path));
  int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0644);
  if (fd < 0) {
    int err = errno;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return notRegular(what, path, st.st_mode);
    WARN("cannot create %s %s: %s", what, path, strerror(err));
    return commSystemError;
  }
  if (fstat(fd, &st) != 0) {
    WARN("cannot stat %s %s: %s", what, path, strerror(errno));
    close(fd);
    return commSystemError;
  }
  if (!S_ISREG(st.st_mode)) { /* replaced since the check */
    close(fd);
    return notRegular(what, path, st.st_mode);
  }
  FILE* f = NULL;
  if (ftruncate(fd, 0) != 0 || (f = fdopen(fd, "w")) == NULL) {
    WARN("cannot create %s %s: %s", what, path, strerror(errno));
    close(fd);
    return commSystemError;
  }
  *out = f;
  return commSuccess;
}
