/* Parameters and logging. */
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
#include "utils.h"

static void test_param_int(void** state) {
  (void)state;
  unsetenv("COMM_TEST_INT");
  assert_int_equal(commParamInt("COMM_TEST_INT", 7, 0, 100), 7);
  setenv("COMM_TEST_INT", "42", 1);
  assert_int_equal(commParamInt("COMM_TEST_INT", 7, 0, 100), 42);
  setenv("COMM_TEST_INT", "0x10", 1);
  assert_int_equal(commParamInt("COMM_TEST_INT", 7, 0, 100), 16);
  /* Not a number: WARN and the default. */
  commLogClearLastWarn();
  setenv("COMM_TEST_INT", "12abc", 1);
  assert_int_equal(commParamInt("COMM_TEST_INT", 7, 0, 100), 7);
  assert_non_null(strstr(commLogLastWarn(), "COMM_TEST_INT=12abc"));
  /* Out of range: WARN and the default. */
  commLogClearLastWarn();
  setenv("COMM_TEST_INT", "101", 1);
  assert_int_equal(commParamInt("COMM_TEST_INT", 7, 0, 100), 7);
  assert_non_null(strstr(commLogLastWarn(), "outside"));
  setenv("COMM_TEST_INT", "", 1);
  assert_int_equal(commParamInt("COMM_TEST_INT", 7, 0, 100), 7);
  unsetenv("COMM_TEST_INT");
}

static void test_param_size(void** state) {
  (void)state;
  setenv("COMM_TEST_SIZE", "4M", 1);
  assert_int_equal(commParamSize("COMM_TEST_SIZE", 1, 0, INT64_MAX), 4 << 20);
  setenv("COMM_TEST_SIZE", "64KiB", 1);
  assert_int_equal(commParamSize("COMM_TEST_SIZE", 1, 0, INT64_MAX), 64 << 10);
  setenv("COMM_TEST_SIZE", "2g", 1);
  assert_int_equal(commParamSize("COMM_TEST_SIZE", 1, 0, INT64_MAX), 2LL << 30);
  setenv("COMM_TEST_SIZE", "3T", 1);
  assert_int_equal(commParamSize("COMM_TEST_SIZE", 1, 0, INT64_MAX), 1);
  setenv("COMM_TEST_SIZE", "99999999999G", 1);
  assert_int_equal(commParamSize("COMM_TEST_SIZE", 5, 0, INT64_MAX), 5);
  unsetenv("COMM_TEST_SIZE");
}

static void test_param_str(void** state) {
  (void)state;
  unsetenv("COMM_TEST_STR");
  assert_string_equal(commParamStr("COMM_TEST_STR", "dflt"), "dflt");
  assert_null(commParamStr("COMM_TEST_STR", NULL));
  setenv("COMM_TEST_STR", "eth0", 1);
  assert_string_equal(commParamStr("COMM_TEST_STR", "dflt"), "eth0");
  unsetenv("COMM_TEST_STR");
}

static char* readFile(const char* path) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return NULL;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static void test_log_levels_and_file(void** state) {
  (void)state;
  char path[] = "/tmp/comm_log_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  setenv("COMM_DEBUG_FILE", path, 1);
  setenv("COMM_DEBUG", "INFO", 1);
  setenv("COMM_DEBUG_SUBSYS", "INIT,NET", 1);
  commLogReset();
  assert_int_equal(commLogLevel, COMM_LOG_INFO);
  commLogSetRank(3);
  INFO(COMM_INIT, "init line %d", 1);
  INFO(COMM_COLL, "coll line %d", 2); /* filtered by subsystem */
  TRACE(COMM_INIT, "trace line");     /* filtered by level */
  WARN("warn line %s", "x");
  commLogSetRank(-1);
  char* text = readFile(path);
  assert_non_null(text);
  assert_non_null(strstr(text, "[3] COMM INFO init line 1"));
  assert_null(strstr(text, "coll line"));
  assert_null(strstr(text, "trace line"));
  assert_non_null(strstr(text, "COMM WARN warn line x"));
  assert_string_equal(commLogLastWarn(), "warn line x");
  /* Excluding subsystems with ^ */
  setenv("COMM_DEBUG_SUBSYS", "^INIT", 1);
  commLogReset();
  INFO(COMM_INIT, "excluded line");
  INFO(COMM_COLL, "included line");
  text = readFile(path);
  assert_null(strstr(text, "excluded line"));
  assert_non_null(strstr(text, "included line"));
  /* WARN level hides INFO but records the last warning. */
  setenv("COMM_DEBUG", "WARN", 1);
  commLogReset();
  INFO(COMM_ALLSUBSYS, "hidden info");
  commLogClearLastWarn();
  WARN("second warning");
  text = readFile(path);
  assert_null(strstr(text, "hidden info"));
  assert_non_null(strstr(text, "second warning"));
  assert_string_equal(commLogLastWarn(), "second warning");
  unsetenv("COMM_DEBUG_FILE");
  unsetenv("COMM_DEBUG");
  unsetenv("COMM_DEBUG_SUBSYS");
  commLogReset();
  unlink(path);
}

static void test_deadline_and_hash(void** state) {
  (void)state;
  assert_int_equal(commDeadlineNs(-1), COMM_NO_DEADLINE);
  int64_t now = commTimeNs();
  int64_t d = commDeadlineNs(1000);
  assert_true(d >= now + 1000000000LL);
  assert_true(commHashString("a", 0) != commHashString("b", 0));
  assert_true(commHostHash() == commHostHash());
  setenv("COMM_HOSTID", "node-a", 1);
  uint64_t a = commHostHash();
  setenv("COMM_HOSTID", "node-b", 1);
  assert_true(a != commHostHash());
  unsetenv("COMM_HOSTID");
  uint64_t r1, r2;
  assert_int_equal(commRandom64(&r1), commSuccess);
  assert_int_equal(commRandom64(&r2), commSuccess);
  assert_true(r1 != r2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_param_int),         cmocka_unit_test(test_param_size),
      cmocka_unit_test(test_param_str),         cmocka_unit_test(test_log_levels_and_file),
      cmocka_unit_test(test_deadline_and_hash),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
