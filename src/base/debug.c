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
};

static unsigned long parseSubsys(const char* s) {
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
  }
  return invert ? ~mask : mask;
}

/* Expand %h (host) and %p (pid) in COMM_DEBUG_FILE. */
static void openLogFile(const char* pattern) {
  char path[1024];
  size_t o = 0;
  for (const char* p = pattern; *p && o + 64 < sizeof(path); p++) {
    if (p[0] == '%' && p[1] == 'h') {
      o += snprintf(path + o, sizeof(path) - o, "%s", logHost);
      p++;
    } else if (p[0] == '%' && p[1] == 'p') {
      o += snprintf(path + o, sizeof(path) - o, "%d", (int)getpid());
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
    fprintf(stderr, "COMM WARN could not open COMM_DEBUG_FILE %s, logging to stderr\n", path);
  }
}

static void logInitLocked(void) {
  const char* level = getenv("COMM_DEBUG");
  int lvl = COMM_LOG_WARN;
  if (level != NULL && *level) {
    if (strcasecmp(level, "NONE") == 0) lvl = COMM_LOG_NONE;
    else if (strcasecmp(level, "WARN") == 0 || strcasecmp(level, "VERSION") == 0) lvl = COMM_LOG_WARN;
    else if (strcasecmp(level, "INFO") == 0) lvl = COMM_LOG_INFO;
    else if (strcasecmp(level, "TRACE") == 0) lvl = COMM_LOG_TRACE;
    else fprintf(stderr, "COMM WARN COMM_DEBUG=%s is not one of NONE, WARN, INFO, TRACE; using WARN\n", level);
  }
  logSubsys = parseSubsys(getenv("COMM_DEBUG_SUBSYS"));
  if (gethostname(logHost, sizeof(logHost)) != 0) snprintf(logHost, sizeof(logHost), "unknown");
  logHost[sizeof(logHost) - 1] = '\0';
  char* dot = strchr(logHost, '.');
  if (dot) *dot = '\0';
  if (logFile != NULL && logFile != stderr) fclose(logFile);
  logFile = stderr;
  const char* file = getenv("COMM_DEBUG_FILE");
  if (file != NULL && *file) openLogFile(file);
  __atomic_store_n(&commLogLevel, lvl, __ATOMIC_RELEASE);
}

void commLogInit(void) {
  pthread_mutex_lock(&logLock);
  if (commLogLevel < 0) logInitLocked();
  pthread_mutex_unlock(&logLock);
}

void commLogReset(void) {
  pthread_mutex_lock(&logLock);
  logInitLocked();
  pthread_mutex_unlock(&logLock);
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
