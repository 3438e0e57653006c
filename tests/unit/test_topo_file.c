/* Topology files that are not regular files, or too large (src/topo/topo_file.c): a FIFO, /dev/zero, a
 * directory or a socket as COMM_TOPO_FILE, as a dump file or as comm_topo's input fail at once with a WARN
 * naming the file and its type; an oversized file is refused before it is read. Every case must return at
 * once: an alarm ends the program if one blocks (the old reader waited forever on a FIFO's writer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "comm.h"
#include "debug.h"
#include "topo.h"
#include "topo_test_util.h"

#define WATCHDOG_S 60 /* the whole program; each case takes milliseconds */

static char dir[256];

static const char* tmpPath(const char* name) {
  static char path[512];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  return path;
}

static int setup(void** state) {
  (void)state;
  const char* t = getenv("TMPDIR");
  snprintf(dir, sizeof(dir), "%s/test_topo_file.XXXXXX", t && t[0] ? t : "/tmp");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void** state) {
  (void)state;
  const char* names[] = {"fifo", "sock", "big.xml", "out.xml", "sub"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    unlink(tmpPath(names[i]));
    rmdir(tmpPath(names[i]));
  }
  rmdir(dir);
  return 0;
}

/* The last WARN names the file and contains `want`. */
static void expectWarn(const char* path, const char* want) {
  const char* w = commLogLastWarn();
  if (strstr(w, path) == NULL || strstr(w, want) == NULL) fail_msg("WARN \"%s\" lacks \"%s\" or \"%s\"", w, path, want);
}

static const char* makeFifo(void) {
  const char* p = tmpPath("fifo");
  unlink(p);
  assert_int_equal(mkfifo(p, 0600), 0);
  return p;
}

static void test_load_fifo(void** state) {
  (void)state;
  const char* p = makeFifo();
  commTopo* topo = (commTopo*)(uintptr_t)1;
  commLogClearLastWarn();
  assert_int_equal(commTopoLoadXml(p, &topo), commInvalidArgument);
  assert_null(topo);
  expectWarn(p, "is a FIFO (named pipe), not a regular file");
}

static void test_load_devices_and_dirs(void** state) {
  (void)state;
  commTopo* topo = NULL;
  commLogClearLastWarn();
  assert_int_equal(commTopoLoadXml("/dev/zero", &topo), commInvalidArgument);
  expectWarn("/dev/zero", "is a character device");
  commLogClearLastWarn();
  assert_int_equal(commTopoLoadXml("/dev/null", &topo), commInvalidArgument);
  expectWarn("/dev/null", "is a character device");
  assert_int_equal(mkdir(tmpPath("sub"), 0700), 0);
  commLogClearLastWarn();
  assert_int_equal(commTopoLoadXml(tmpPath("sub"), &topo), commInvalidArgument);
  expectWarn(tmpPath("sub"), "is a directory");
  rmdir(tmpPath("sub"));
  /* A listening Unix socket: open() itself fails (ENXIO); the message still says what it is. */
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_true(s >= 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  const char* sp = tmpPath("sock");
  size_t sl = strlen(sp);
  if (sl < sizeof(a.sun_path)) memcpy(a.sun_path, sp, sl + 1);
  if (sl < sizeof(a.sun_path) && bind(s, (struct sockaddr*)&a, sizeof(a)) == 0) {
    commLogClearLastWarn();
    assert_int_not_equal(commTopoLoadXml(tmpPath("sock"), &topo), commSuccess);
    expectWarn(tmpPath("sock"), "is a socket");
  }
  close(s);
  unlink(tmpPath("sock"));
}

static void test_load_oversized(void** state) {
  (void)state;
  const char* p = tmpPath("big.xml");
  /* A sparse file one byte over the limit: refused from its size, before a byte is read. */
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, (off_t)COMM_TOPO_FILE_MAX_BYTES + 1), 0);
  close(fd);
  commTopo* topo = NULL;
  commLogClearLastWarn();
  assert_int_equal(commTopoLoadXml(p, &topo), commInvalidArgument);
  assert_null(topo);
  expectWarn(p, "larger than the limit of 67108864 bytes (64 MiB)");
  /* commTopoReadFile with a small limit: the same, and a file within it reads whole. */
  char* text = NULL;
  size_t len = 0;
  fd = open(p, O_WRONLY | O_TRUNC);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "0123456789", 10), 10);
  close(fd);
  commLogClearLastWarn();
  assert_int_equal(commTopoReadFile("test file", p, 9, 1000, &text, &len), commInvalidArgument);
  assert_null(text);
  expectWarn(p, "is 10 bytes, larger than the limit of 9 bytes");
  assert_int_equal(commTopoReadFile("test file", p, 10, 1000, &text, &len), commSuccess);
  assert_int_equal(len, 10);
  assert_string_equal(text, "0123456789");
  free(text);
  unlink(p);
}

/* COMM_TOPO_FILE naming a FIFO: commTopoGet (what init calls) and a whole 1-rank init fail, not hang. */
static void test_env_fifo_init(void** state) {
  (void)state;
  const char* p = makeFifo();
  setenv("COMM_TOPO_FILE", p, 1);
  commTopo* topo = NULL;
  commLogClearLastWarn();
  assert_int_equal(commTopoGet(&topo), commInvalidArgument);
  assert_null(topo);
  expectWarn(p, "FIFO");
  /* The init thread logs the same WARN (its own last-warning slot); here it is enough that it fails. */
  comm_t c = NULL;
  assert_int_not_equal(commInitAll(&c, 1, NULL), commSuccess);
  if (c != NULL) commDestroy(c);
  setenv("COMM_TOPO_FILE", "/dev/zero", 1);
  c = NULL;
  assert_int_not_equal(commInitAll(&c, 1, NULL), commSuccess);
  if (c != NULL) commDestroy(c);
  unsetenv("COMM_TOPO_FILE");
}

static void test_dump_not_regular(void** state) {
  (void)state;
  commTopo* topo = loadTopo("pcie_4gpu.xml");
  const char* p = makeFifo();
  commLogClearLastWarn();
  assert_int_equal(commTopoDumpXml(topo, p), commInvalidArgument);
  expectWarn(p, "is a FIFO (named pipe), not a regular file");
  struct stat st;
  assert_int_equal(stat(p, &st), 0);
  assert_true(S_ISFIFO(st.st_mode)); /* left as it was */
  commLogClearLastWarn();
  assert_int_equal(commTopoDumpXml(topo, "/dev/null"), commInvalidArgument);
  expectWarn("/dev/null", "character device");
  assert_int_equal(commTopoDumpXml(topo, dir), commInvalidArgument);
  /* A regular file is written, truncating what was there, and loads back. */
  const char* out = tmpPath("out.xml");
  FILE* f = fopen(out, "w");
  assert_non_null(f);
  for (int i = 0; i < 10000; i++) fputs("junk junk junk\n", f);
  fclose(f);
  assert_int_equal(commTopoDumpXml(topo, out), commSuccess);
  commTopo* again = NULL;
  assert_int_equal(commTopoLoadXml(out, &again), commSuccess);
  assert_int_equal(again->nNodes, topo->nNodes);
  commTopoFree(again);
  commTopoFree(topo);
}

/* COMM_TOPO_DUMP_FILE naming a FIFO: the dump is refused (a WARN), init goes on, the FIFO stays. */
static void test_env_dump_fifo(void** state) {
  (void)state;
  const char* p = makeFifo();
  char topoPath[4096];
  setenv("COMM_TOPO_FILE", topoFilePath("pcie_4gpu.xml", topoPath, sizeof(topoPath)), 1);
  setenv("COMM_TOPO_DUMP_FILE", p, 1);
  comm_t c = NULL;
  assert_int_equal(commInitAll(&c, 1, NULL), commSuccess);
  assert_non_null(c);
  assert_int_equal(commDestroy(c), commSuccess);
  struct stat st;
  assert_int_equal(stat(p, &st), 0);
  assert_true(S_ISFIFO(st.st_mode));
  unsetenv("COMM_TOPO_DUMP_FILE");
  unsetenv("COMM_TOPO_FILE");
}

int main(void) {
  alarm(WATCHDOG_S); /* SIGALRM ends the program: a blocked open or read fails the test instead of hanging */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_load_fifo),        cmocka_unit_test(test_load_devices_and_dirs),
      cmocka_unit_test(test_load_oversized),   cmocka_unit_test(test_env_fifo_init),
      cmocka_unit_test(test_dump_not_regular), cmocka_unit_test(test_env_dump_fifo),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
