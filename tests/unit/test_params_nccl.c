/* NCCL's variables as aliases of libcomm's (src/base/param.c): the NCCL_ name is read when the COMM_ one is
 * unset or empty, the COMM_ one wins, the INFO line says which; NCCL values outside libcomm's range are
 * clamped; the logger reads NCCL_DEBUG, NCCL_DEBUG_SUBSYS (NCCL's names) and NCCL_DEBUG_FILE; NCCL
 * variables libcomm does not provide WARN once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "debug.h"
#include "param.h"

static char logPath[512];

static char* readLog(void) {
  static char buf[1 << 16];
  FILE* f = fopen(logPath, "r");
  if (f == NULL) return NULL;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* How many times `what` occurs in the log. */
static int countLog(const char* what) {
  int n = 0;
  for (const char* p = readLog(); p && (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
  return n;
}

static int setup(void** state) {
  (void)state;
  snprintf(logPath, sizeof(logPath), "/tmp/comm_nccl_log_XXXXXX");
  int fd = mkstemp(logPath);
  if (fd < 0) return -1;
  close(fd);
  static const char* const vars[] = {"COMM_DEBUG",         "COMM_DEBUG_SUBSYS",  "COMM_DEBUG_FILE",
                                     "NCCL_DEBUG",         "NCCL_DEBUG_SUBSYS",  "NCCL_DEBUG_FILE",
                                     "COMM_BUFFSIZE",      "NCCL_BUFFSIZE",      "COMM_NCHANNELS",
                                     "NCCL_MAX_NCHANNELS", "COMM_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
  setenv("COMM_DEBUG", "INFO", 1);
  setenv("COMM_DEBUG_FILE", logPath, 1);
  commLogReset();
  commParamLogReset();
  return 0;
}

static int teardown(void** state) {
  (void)state;
  unlink(logPath);
  return 0;
}

static void test_alias_lookup(void** state) {
  (void)state;
  assert_int_equal(commParamSize("COMM_BUFFSIZE", 4096, 1024, 1 << 30), 4096);
  assert_null(commParamSource("COMM_BUFFSIZE"));
  /* Only the NCCL name: it gives the value, and the INFO line says so. */
  setenv("NCCL_BUFFSIZE", "1M", 1);
  assert_int_equal(commParamSize("COMM_BUFFSIZE", 4096, 1024, 1 << 30), 1 << 20);
  assert_string_equal(commParamSource("COMM_BUFFSIZE"), "NCCL_BUFFSIZE");
  assert_int_equal(commParamFromNccl("COMM_BUFFSIZE"), 1);
  assert_int_equal(countLog("NCCL_BUFFSIZE (for COMM_BUFFSIZE) set by environment to 1048576"), 1);
  /* Read again with the same value: no second line. An empty COMM_ name counts as unset. */
  setenv("COMM_BUFFSIZE", "", 1);
  assert_int_equal(commParamSize("COMM_BUFFSIZE", 4096, 1024, 1 << 30), 1 << 20);
  assert_int_equal(countLog("NCCL_BUFFSIZE (for COMM_BUFFSIZE)"), 1);
  /* Both: the COMM name wins, and the line says that it did. */
  setenv("COMM_BUFFSIZE", "2M", 1);
  assert_int_equal(commParamSize("COMM_BUFFSIZE", 4096, 1024, 1 << 30), 2 << 20);
  assert_string_equal(commParamSource("COMM_BUFFSIZE"), "COMM_BUFFSIZE");
  assert_int_equal(commParamFromNccl("COMM_BUFFSIZE"), 0);
  assert_int_equal(
      countLog("COMM_BUFFSIZE set by environment to 2097152 (NCCL_BUFFSIZE=1M is also set: COMM_BUFFSIZE wins)"), 1);
  /* An NCCL value outside libcomm's range is clamped into it; a COMM one is refused with a WARN. */
  setenv("NCCL_MAX_NCHANNELS", "64", 1);
  assert_int_equal(commParamInt("COMM_NCHANNELS", 1, 1, 32), 32);
  assert_int_equal(countLog("NCCL_MAX_NCHANNELS (for COMM_NCHANNELS) set by environment to 64, clamped to 32"), 1);
  setenv("COMM_NCHANNELS", "64", 1);
  commLogClearLastWarn();
  assert_int_equal(commParamInt("COMM_NCHANNELS", 1, 1, 32), 1);
  assert_non_null(strstr(commLogLastWarn(), "COMM_NCHANNELS=64 is outside [1, 32]"));
  /* A bad NCCL value: the WARN names the NCCL variable. */
  unsetenv("COMM_NCHANNELS");
  setenv("NCCL_MAX_NCHANNELS", "many", 1);
  assert_int_equal(commParamInt("COMM_NCHANNELS", 1, 1, 32), 1);
  assert_non_null(strstr(commLogLastWarn(), "NCCL_MAX_NCHANNELS=many (for COMM_NCHANNELS) is not an integer"));
  /* Strings, with the alias's note of how values differ. */
  setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
  assert_string_equal(commParamStr("COMM_SOCKET_IFNAME", NULL), "=lo");
  assert_int_equal(countLog("NCCL_SOCKET_IFNAME (for COMM_SOCKET_IFNAME) set by environment to =lo"), 1);
  setenv("NCCL_P2P_LEVEL", "NVL", 1);
  assert_string_equal(commParamStr("COMM_P2P_LEVEL", NULL), "NVL");
  assert_int_equal(countLog("NCCL_P2P_LEVEL (for COMM_P2P_LEVEL) set by environment to NVL (numbers are libcomm's"), 1);
  /* A name with no alias is read as before. */
  setenv("NCCL_TIMEOUT_MS", "5", 1);
  assert_int_equal(commParamInt("COMM_TIMEOUT_MS", 7, 0, 100), 7);
  const char* vars[] = {"NCCL_BUFFSIZE",      "COMM_BUFFSIZE",  "NCCL_MAX_NCHANNELS",
                        "NCCL_SOCKET_IFNAME", "NCCL_P2P_LEVEL", "NCCL_TIMEOUT_MS"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
}

static void test_not_provided_warn_once(void** state) {
  (void)state;
  setenv("NCCL_IB_SL", "3", 1);            /* not provided: WARN */
  setenv("NCCL_CUMEM_ENABLE", "1", 1);     /* asks for what libcomm lacks: WARN */
  setenv("NCCL_NVLS_ENABLE", "0", 1);      /* asks for what libcomm does anyway: INFO */
  setenv("NCCL_SOME_PLUGIN_KNOB", "1", 1); /* unknown to libcomm: INFO */
  setenv("NCCL_ALGO", "ring", 1);          /* an alias: nothing here */
  assert_int_equal(commParamWarnNccl(), 2);
  assert_int_equal(countLog("COMM WARN NCCL_IB_SL=3 is set, but libcomm does not provide it"), 1);
  assert_int_equal(countLog("COMM WARN NCCL_CUMEM_ENABLE=1 is set, but libcomm does not provide it (libcomm allocates"),
                   1);
  assert_int_equal(countLog("NCCL_NVLS_ENABLE=0 accepted, no effect (libcomm has no NVLink SHARP, NVLS)"), 1);
  assert_int_equal(countLog("NCCL_SOME_PLUGIN_KNOB is set; libcomm does not know it"), 1);
  assert_int_equal(countLog("NCCL_ALGO"), 0);
  assert_int_equal(countLog("NCCL_NVLS_ENABLE=0 is set"), 0);
  /* Once per process: the next init says nothing again, but a variable set since then gets its WARN. */
  assert_int_equal(commParamWarnNccl(), 0);
  setenv("NCCL_SOCKET_FAMILY", "AF_INET6", 1);
  assert_int_equal(commParamWarnNccl(), 1);
  assert_int_equal(countLog("COMM WARN NCCL_IB_SL=3"), 1);
  assert_int_equal(countLog("COMM WARN NCCL_SOCKET_FAMILY=AF_INET6 is set"), 1);
  const char* vars[] = {"NCCL_IB_SL", "NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_SOME_PLUGIN_KNOB",
                        "NCCL_ALGO",  "NCCL_SOCKET_FAMILY"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
}

static void test_nccl_debug(void** state) {
  (void)state;
  /* NCCL_DEBUG alone: the level, and NCCL's default subsystems INIT, BOOTSTRAP and ENV. */
  char pattern[512];
  snprintf(pattern, sizeof(pattern), "%.200s.%%h.%%p.%%%%", logPath);
  char path[512], host[64];
  gethostname(host, sizeof(host));
  host[sizeof(host) - 1] = '\0';
  char* dot = strchr(host, '.');
  if (dot) *dot = '\0';
  snprintf(path, sizeof(path), "%.200s.%.64s.%d.%%", logPath, host, (int)getpid());
  unsetenv("COMM_DEBUG");
  unsetenv("COMM_DEBUG_FILE");
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_FILE", pattern, 1);
  commLogReset();
  assert_int_equal(commLogLevel, COMM_LOG_INFO);
  INFO(COMM_INIT, "nccl init line");
  INFO(COMM_COLL, "nccl coll line");
  char saved[512];
  snprintf(saved, sizeof(saved), "%s", logPath);
  snprintf(logPath, sizeof(logPath), "%s", path); /* the file NCCL_DEBUG_FILE's pattern names */
  assert_int_equal(countLog("NCCL_DEBUG (for COMM_DEBUG) set by environment to INFO"), 1);
  assert_int_equal(countLog("NCCL_DEBUG_FILE (for COMM_DEBUG_FILE) set by environment to"), 1);
  assert_int_equal(countLog("nccl init line"), 1);
  assert_int_equal(countLog("nccl coll line"), 0);
  /* NCCL's subsystem names; its NET covers IB and COLLNET too. */
  setenv("NCCL_DEBUG_SUBSYS", "GRAPH,TUNING,NET", 1);
  commLogReset();
  INFO(COMM_TOPO, "nccl graph line");
  INFO(COMM_TUNE, "nccl tuning line");
  INFO(COMM_IB, "nccl ib line");
  INFO(COMM_INIT, "nccl second init line");
  assert_int_equal(countLog("nccl graph line"), 1);
  assert_int_equal(countLog("nccl tuning line"), 1);
  assert_int_equal(countLog("nccl ib line"), 1);
  assert_int_equal(countLog("nccl second init line"), 0);
  /* COMM_DEBUG_SUBSYS wins, with libcomm's meaning of NET; ABORT is INFO. */
  setenv("COMM_DEBUG_SUBSYS", "NET", 1);
  setenv("NCCL_DEBUG", "ABORT", 1);
  commLogReset();
  assert_int_equal(commLogLevel, COMM_LOG_INFO);
  INFO(COMM_IB, "comm ib line");
  INFO(COMM_NET, "comm net line");
  assert_int_equal(countLog("comm ib line"), 0);
  assert_int_equal(countLog("comm net line"), 1);
  /* COMM_DEBUG wins over NCCL_DEBUG. */
  setenv("COMM_DEBUG", "WARN", 1);
  commLogReset();
  assert_int_equal(commLogLevel, COMM_LOG_WARN);
  unlink(logPath);
  snprintf(logPath, sizeof(logPath), "%s", saved);
  unsetenv("NCCL_DEBUG");
  unsetenv("NCCL_DEBUG_SUBSYS");
  unsetenv("NCCL_DEBUG_FILE");
  unsetenv("COMM_DEBUG_SUBSYS");
  unsetenv("COMM_DEBUG");
  commLogReset();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_alias_lookup, setup, teardown),
      cmocka_unit_test_setup_teardown(test_not_provided_warn_once, setup, teardown),
      cmocka_unit_test_setup_teardown(test_nccl_debug, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
