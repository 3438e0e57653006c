/* Error propagation. Every internal function returns commResult_t. */
#ifndef COMM_CHECK_H_
#define COMM_CHECK_H_

#include <errno.h>
#include <string.h>
#include "debug.h"

#define COMMCHECK(call)                                                                \
  do {                                                                                 \
    commResult_t res_ = (call);                                                        \
    if (res_ != commSuccess && res_ != commInProgress) {                               \
      TRACE(COMM_ALLSUBSYS, "%s:%d -> %d (%s)", __FILE__, __LINE__, (int)res_, #call); \
      return res_;                                                                     \
    }                                                                                  \
  } while (0)

/* Stores the result in `res` and jumps to `label` on error. */
#define COMMCHECKGOTO(call, res, label)                                                 \
  do {                                                                                  \
    (res) = (call);                                                                     \
    if ((res) != commSuccess && (res) != commInProgress) {                              \
      TRACE(COMM_ALLSUBSYS, "%s:%d -> %d (%s)", __FILE__, __LINE__, (int)(res), #call); \
      goto label;                                                                       \
    }                                                                                   \
  } while (0)

/* For libc calls returning -1 and setting errno. */
#define SYSCHECK(call, name)                          \
  do {                                                \
    int ret_;                                         \
    do {                                              \
      ret_ = (call);                                  \
    } while (ret_ == -1 && errno == EINTR);           \
    if (ret_ == -1) {                                 \
      WARN("%s failed: %s", (name), strerror(errno)); \
      return commSystemError;                         \
    }                                                 \
  } while (0)

/* Marks a function of the public API (the library builds with hidden visibility). */
#define COMM_API __attribute__((visibility("default")))

#define COMM_ALIGN_UP(x, a) (((x) + (a)-1) / (a) * (a))
#define COMM_DIV_UP(x, y) (((x) + (y)-1) / (y))
#define COMM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define COMM_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
