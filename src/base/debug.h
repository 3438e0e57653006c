/* Logging: WARN / INFO / TRACE with subsystems. Lines read "host:pid:tid [rank] COMM INFO ...". */
#ifndef COMM_DEBUG_H_
#define COMM_DEBUG_H_

#include <stdint.h>
#include "comm.h"

/* COMM_LOG_NOTICE is not a verbosity: a WARN line that is not recorded as an error (WARN_NOTICE). */
typedef enum {
  COMM_LOG_NONE = 0,
  COMM_LOG_WARN = 1,
  COMM_LOG_INFO = 2,
  COMM_LOG_TRACE = 3,
  COMM_LOG_NOTICE = 4
} commLogLevel_t;

typedef enum {
  COMM_INIT = 1 << 0,
  COMM_BOOTSTRAP = 1 << 1,
  COMM_TOPO = 1 << 2,
  COMM_TUNE = 1 << 3,
  COMM_COLL = 1 << 4,
  COMM_P2P = 1 << 5,
  COMM_SHM = 1 << 6,
  COMM_NET = 1 << 7,
  COMM_IB = 1 << 8,
  COMM_COLLNET = 1 << 9,
  COMM_PROXY = 1 << 10,
  COMM_EXEC = 1 << 11,
  COMM_ENV = 1 << 12,
  COMM_ALLSUBSYS = ~0
} commLogSubsys_t;

/* Current level, read from COMM_DEBUG on first use (-1 until then). */
extern int commLogLevel;
void commLogInit(void);
/* Re-read COMM_DEBUG, COMM_DEBUG_SUBSYS and COMM_DEBUG_FILE (tests use it after setenv). */
void commLogReset(void);
void commLog(commLogLevel_t level, unsigned long subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The rank printed in log lines of this thread (-1: none). The API layer sets it on entry. */
void commLogSetRank(int rank);
/* The text of the last WARN issued by this thread ("" if none), and of the first since the last clear: the
 * API clears at entry, so the first is a failed call's cause and the last its outermost wrapper. */
const char* commLogLastWarn(void);
const char* commLogFirstWarn(void);
/* Replace the thread's first WARN (the cause its failed call reports) with a better-informed one. */
void commLogSetCause(const char* text);
void commLogClearLastWarn(void);

#define COMM_LOG_ENABLED(level) \
  (__builtin_expect(commLogLevel < 0, 0) ? (commLogInit(), commLogLevel >= (level)) : commLogLevel >= (level))

/* WARN always records the message as the thread's last error, even when not printed. */
#define WARN(...) commLog(COMM_LOG_WARN, COMM_ALLSUBSYS, __FILE__, __LINE__, __VA_ARGS__)
/* A WARN line about something that is not an error (the call goes on: a fallback, an unsafe setting): printed
 * as WARN and the thread's last WARN, never its first (the cause a failed call reports). */
#define WARN_NOTICE(...) commLog(COMM_LOG_NOTICE, COMM_ALLSUBSYS, __FILE__, __LINE__, __VA_ARGS__)
#define INFO(subsys, ...)                                                                                   \
  do {                                                                                                      \
    if (COMM_LOG_ENABLED(COMM_LOG_INFO)) commLog(COMM_LOG_INFO, (subsys), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define TRACE(subsys, ...)                                                                                    \
  do {                                                                                                        \
    if (COMM_LOG_ENABLED(COMM_LOG_TRACE)) commLog(COMM_LOG_TRACE, (subsys), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

#endif
