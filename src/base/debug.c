/* Logging: levels, subsystems, output file, and the per-thread last WARN. */
#include "debug.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "param.h"

int commLogLevel = -1;
static unsigned long logSubsys = COMM_ALLSUBSYS;
static FILE* logFile = NULL;
static char logHost[64];
static pthread_mutex_t logLock = PTHREAD_MUTEX_INITIALIZER;
static __thread int logRank = -1;
static __thread char lastWarn[512];
static __thread char firstWarn[512]; /* since the last commLogClearLastWarn */

/* libcomm's names, then NCCL's (NCCL_DEBUG_SUBSYS; accepted in COMM_DEBUG_SUBSYS too): GRAPH and the rest;
 * a bit of 0: libcomm has no such lines. */
static const struct {
  const char* name;
  unsigned long bit;
} subsysNames[] = {
    {"INIT", COMM_INIT},   {"BOOTSTRAP", COMM_BOOTSTRAP},
    {"TOPO", COMM_TOPO},   {"TUNE", COMM_TUNE},
    {"COLL", COMM_COLL},   {"P2P", COMM_P2P},
    {"SHM", COMM_SHM},     {"NET", COMM_NET},
    {"IB", COMM_IB},       {"COLLNET", COMM_COLLNET},
    {"PROXY", COMM_PROXY}, {"EXEC", COMM_EXEC},
    {"ENV", COMM_ENV},     {"ALL", COMM_ALLSUBSYS},
    {"GRAPH", COMM_TOPO},  {"TUNING", COMM_TUNE},
    {"CALL", COMM_COLL},   {"DESTROY", COMM_INIT},
    {"ALLOC", 0},          {"ALLOC_HOST", 0},
    {"NVLS", 0},           {"REG", 0},
    {"PROFILE", 0},        {"RAS", 0},
};

/* NCCL_DEBUG_SUBSYS's NET covers all of NCCL's networks: libcomm's NET, IB and COLLNET. */
#define NCCL_NET_BITS (COMM_NET | COMM_IB | COMM_COLLNET)
/* NCCL_DEBUG without NCCL_DEBUG_SUBSYS logs NCCL's default subsystems. */
#define NCCL_DEFAULT_SUBSYS (COMM_INIT | COMM_BOOTSTRAP | COMM_ENV)

static unsigned long parseSubsys(const char* s, int nccl) {
  if (s == NULL || *s == '\0') return COMM_ALLSUBSYS;
  int invert = 0;
  if (*s == '^') {
    invert = 1;
    s++;
  }
  unsigned long mask = 0;
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", s);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    for (size_t i = 0; i < sizeof(subsysNames) / sizeof(subsysNames[0]); i++) {
      if (strcasecmp(tok, subsysNames[i].name) == 0) mask |= subsysNames[i].bit;
    }
    if (nccl && strcasecmp(tok, "NET") == 0) mask |= NCCL_NET_BITS;
  }
  return invert ? ~mask : mask;
}

/* Expand %h (host), %p (process id) and %% in COMM_DEBUG_FILE; any other %X stays as it is (as NCCL does). */
static void openLogFile(const char* pattern, const char* var) {
  char path[1024];
  size_t o = 0;
  for (const char* p = pattern; *p && o + 64 < sizeof(path); p++) {
    if (p[0] == '%' && p[1] == 'h') {
      o += snprintf(path + o, sizeof(path) - o, "%s", logHost);
      p++;
    } else if (p[0] == '%' && p[1] == 'p') {
      o += snprintf(path + o, sizeof(path) - o, "%d", (int)getpid());
      p++;
    } else if (p[0] == '%' && p[1] == '%') {
      path[o++] = '%';
      p++;
    } else {
      path[o++] = *p;
    }
  }
  path[o] = '\0';
  FILE* f = fopen(path, "a");
  if (f != NULL) {
    setvbuf(f, NULL, _IOLBF, 0);
    logFile = f;
  } else {
    fprintf(stderr, "COMM WARN could not open %s %s, logging to stderr\n", var, path);
  }
}

static int logSourcesPending; /* the INFO lines saying which variables set up logging, once it is set up */

/* Called with logLock held: reads the variables without any log line (commParamLookup). */
static void logInitLocked(void) {
  const char *lvlVar, *subVar, *fileVar;
  const char* level = commParamLookup("COMM_DEBUG", &lvlVar);
  int lvl = COMM_LOG_WARN;
  if (level != NULL) {
    if (strcasecmp(level, "NONE") == 0) lvl = COMM_LOG_NONE;
    else if (strcasecmp(level, "WARN") == 0 || strcasecmp(level, "VERSION") == 0) lvl = COMM_LOG_WARN;
    else if (strcasecmp(level, "INFO") == 0 || strcasecmp(level, "ABORT") == 0) lvl = COMM_LOG_INFO;
    else if (strcasecmp(level, "TRACE") == 0) lvl = COMM_LOG_TRACE;
    else fprintf(stderr, "COMM WARN %s=%s is not one of NONE, WARN, INFO, TRACE; using WARN\n", lvlVar, level);
  }
  const char* subsys = commParamLookup("COMM_DEBUG_SUBSYS", &subVar);
  int ncclSubsys = subVar != NULL && strncmp(subVar, "NCCL_", 5) == 0;
  int ncclLevel = lvlVar != NULL && strncmp(lvlVar, "NCCL_", 5) == 0;
  logSubsys = subsys      ? parseSubsys(subsys, ncclSubsys)
              : ncclLevel ? (unsigned long)NCCL_DEFAULT_SUBSYS
                          : (unsigned long)COMM_ALLSUBSYS;
  if (gethostname(logHost, sizeof(logHost)) != 0) snprintf(logHost, sizeof(logHost), "unknown");
  logHost[sizeof(logHost) - 1] = '\0';
  char* dot = strchr(logHost, '.');
  if (dot) *dot = '\0';
  if (logFile != NULL && logFile != stderr) fclose(logFile);
  logFile = stderr;
  const char* file = commParamLookup("COMM_DEBUG_FILE", &fileVar);
  if (file != NULL) openLogFile(file, fileVar);
  logSourcesPending = 1;
  __atomic_store_n(&commLogLevel, lvl, __ATOMIC_RELEASE);
}

/* After logInitLocked, without the lock: which of the logging variables came from NCCL's names. */
static void logSources(void) {
  pthread_mutex_lock(&logLock);
  int pending = logSourcesPending;
  logSourcesPending = 0;
  pthread_mutex_unlock(&logLock);
  if (!pending) return;
  commParamLogSource("COMM_DEBUG", NULL);
  commParamLogSource("COMM_DEBUG_SUBSYS", NULL);
  commParamLogSource("COMM_DEBUG_FILE", NULL);
}

void commLogInit(void) {
  pthread_mutex_lock(&logLock);
  if (commLogLevel < 0) logInitLocked();
  pthread_mutex_unlock(&logLock);
  logSources();
}

void commLogReset(void) {
  pthread_mutex_lock(&logLock);
  logInitLocked();
  pthread_mutex_unlock(&logLock);
  logSources();
}

void commLogSetRank(int rank) { logRank = rank; }
const char* commLogLastWarn(void) { return lastWarn; }
const char* commLogFirstWarn(void) { return firstWarn; }
void commLogSetCause(const char* text) {
  size_t n = strnlen(text, sizeof(firstWarn) - 1);
  memmove(firstWarn, text, n);
  firstWarn[n] = '\0';
}
void commLogClearLastWarn(void) {
  lastWarn[0] = '\0';
  firstWarn[0] = '\0';
}

void commLog(commLogLevel_t level, unsigned long subsys, const char* file, int line, const char* fmt, ...) {
  if (commLogLevel < 0) commLogInit();
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (level == COMM_LOG_WARN || level == COMM_LOG_NOTICE) {
    size_t n = strnlen(msg, sizeof(lastWarn) - 1);
    memcpy(lastWarn, msg, n);
    lastWarn[n] = '\0';
    if (level == COMM_LOG_WARN && firstWarn[0] == '\0') memcpy(firstWarn, lastWarn, n + 1);
    level = COMM_LOG_WARN;
  }
  if ((int)level > commLogLevel || !(subsys & logSubsys)) return;
  const char* lname = level == COMM_LOG_WARN ? "WARN" : level == COMM_LOG_INFO ? "INFO" : "TRACE";
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;
  char rankStr[16] = "";
  if (logRank >= 0) snprintf(rankStr, sizeof(rankStr), " [%d]", logRank);
  pthread_mutex_lock(&logLock);
  FILE* out = logFile ? logFile : stderr;
  if (level == COMM_LOG_TRACE) {
    fprintf(out, "%s:%d:%d%s COMM %s %s:%d %s\n", logHost, (int)getpid(), (int)syscall(SYS_gettid), rankStr, lname,
            base, line, msg);
  } else {
    fprintf(out, "%s:%d:%d%s COMM %s %s\n", logHost, (int)getpid(), (int)syscall(SYS_gettid), rankStr, lname, msg);
  }
  fflush(out);
  pthread_mutex_unlock(&logLock);
}
