/* What the topology unit tests share (test_topo_graph.c, test_topo_transport.c): the sample files of
 * tests/topo/ (found through, first that is set: the COMM_SOURCE_DIR compile definition, the COMM_SOURCE_DIR
 * environment variable, or this header's own path), node lookups and topologies built through the builder
 * API. Everything is static inline, so a test that uses part of it compiles clean. */
#ifndef COMM_TOPO_TEST_UTIL_H_
#define COMM_TOPO_TEST_UTIL_H_

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "topo.h"

/* ---- Helpers ---- */

/* tests/topo/<name> in the source tree, into buf. */
static inline const char* topoFilePath(const char* name, char* buf, size_t len) {
#ifdef COMM_SOURCE_DIR
  snprintf(buf, len, "%s/tests/topo/%s", COMM_SOURCE_DIR, name);
#else
  const char* src = getenv("COMM_SOURCE_DIR");
  if (src != NULL && src[0] != '\0') {
    snprintf(buf, len, "%s/tests/topo/%s", src, name);
  } else {
    /* .../tests/unit/topo_test_util.h -> .../tests/topo/<name> */
    const char* file = __FILE__;
    const char* unit = strstr(file, "unit/topo_test_util.h");
    int prefix = unit != NULL ? (int)(unit - file) : 0;
    snprintf(buf, len, "%.*s%stopo/%s", prefix, file, unit != NULL ? "" : "tests/", name);
  }
#endif
  return buf;
}

static inline commTopo* loadTopo(const char* name) {
  char path[4096];
  commTopo* topo = NULL;
  commResult_t res = commTopoLoadXml(topoFilePath(name, path, sizeof(path)), &topo);
  if (res != commSuccess) fprintf(stderr, "cannot load %s (error %d)\n", path, (int)res);
  assert_int_equal(res, commSuccess);
  assert_non_null(topo);
  assert_true(topo->finished);
  return topo;
}

static inline char* readText(const char* name, size_t* lenOut) {
  char path[4096];
  FILE* f = fopen(topoFilePath(name, path, sizeof(path)), "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long len = ftell(f);
  assert_true(len > 0);
  rewind(f);
  char* text = malloc((size_t)len + 1);
  assert_non_null(text);
  assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
  text[len] = '\0';
  fclose(f);
  *lenOut = (size_t)len;
  return text;
}

/* The first <host> element of `name` repeated n times, host names made from fmt ("%d"); parsed. */
static inline commTopo* replicateHosts(const char* name, int n, const char* fmt) {
  size_t len;
  char* text = readText(name, &len);
  char* hs = strstr(text, "<host");
  assert_non_null(hs);
  while (hs > text && hs[-1] == ' ') hs--;
  char* he = strstr(hs, "</host>");
  assert_non_null(he);
  he += strlen("</host>");
  if (*he == '\n') he++;
  char* tagEnd = strchr(hs, '>');
  char* nameAttr = strstr(hs, " name=\"");
  assert_true(nameAttr != NULL && nameAttr < tagEnd);
  char* nameVal = nameAttr + strlen(" name=\"");
  char* nameEnd = strchr(nameVal, '"');
  size_t cap = len + (size_t)n * ((size_t)(he - hs) + 64) + 1, pos = 0;
  char* out = malloc(cap);
  assert_non_null(out);
  pos += (size_t)snprintf(out + pos, cap - pos, "%.*s", (int)(hs - text), text);
  for (int i = 0; i < n; i++) {
    char hn[64];
    snprintf(hn, sizeof(hn), fmt, i);
    pos += (size_t)snprintf(out + pos, cap - pos, "%.*s%s%.*s", (int)(nameVal - hs), hs, hn, (int)(he - nameEnd),
                            nameEnd);
  }
  pos += (size_t)snprintf(out + pos, cap - pos, "%s", he);
  commTopo* topo = NULL;
  assert_int_equal(commTopoParseXml(out, pos, "replicated", &topo), commSuccess);
  assert_int_equal(topo->nHosts, n);
  free(out);
  free(text);
  return topo;
}

static inline int hostByName(const commTopo* topo, const char* name) {
  for (int h = 0; h < topo->nHosts; h++)
    if (strcmp(topo->hosts[h].name, name) == 0) return h;
  return -1;
}

static inline int gpu(const commTopo* topo, int host, int i) {
  int n = commTopoFind(topo, host, COMM_TOPO_GPU, i);
  assert_true(n >= 0);
  return n;
}
static inline int nic(const commTopo* topo, int host, int i) {
  int n = commTopoFind(topo, host, COMM_TOPO_NIC, i);
  assert_true(n >= 0);
  return n;
}
static inline int cpu(const commTopo* topo, int host, int i) {
  int n = commTopoFind(topo, host, COMM_TOPO_CPU, i);
  assert_true(n >= 0);
  return n;
}

static inline void expectPath(const commTopo* topo, int a, int b, int type) {
  commTopoPath p = commTopoPathOf(topo, a, b);
  if (p.type != type) {
    char la[96], lb[96];
    fprintf(stderr, "path %s -> %s: expected %s, got %s\n", commTopoNodeLabel(topo, a, la, sizeof(la)),
            commTopoNodeLabel(topo, b, lb, sizeof(lb)), commTopoPathName(type), commTopoPathName(p.type));
  }
  assert_int_equal(p.type, type);
}

static inline void assertNear(double x, double want) {
  if (!(x > want - 1e-3 && x < want + 1e-3)) fprintf(stderr, "got %g, expected %g\n", x, want);
  assert_true(x > want - 1e-3 && x < want + 1e-3);
}

/* Each ring of rings[nChannels][n] holds every rank once. */
static inline void assertPermutations(const int* rings, int n, int nChannels) {
  char* seen = malloc((size_t)n);
  assert_non_null(seen);
  for (int c = 0; c < nChannels; c++) {
    memset(seen, 0, (size_t)n);
    for (int i = 0; i < n; i++) {
      int r = rings[c * n + i];
      assert_true(r >= 0 && r < n);
      assert_false(seen[r]);
      seen[r] = 1;
    }
  }
  free(seen);
}

static inline void clearEnv(void) {
  unsetenv("COMM_P2P_LEVEL");
  unsetenv("COMM_NET_GDR_LEVEL");
}

/* ---- Synthetic topologies (builder only) ---- */

static inline int addNode(commTopo* topo, int host, int type, int parent, double bw) {
  int n;
  assert_int_equal(commTopoAddNode(topo, host, type, parent, &n), commSuccess);
  commTopoNode* nd = commTopoNodeAt(topo, n);
  nd->bw = bw;
  if (type == COMM_TOPO_CPU) snprintf(nd->u.cpu.arch, sizeof(nd->u.cpu.arch), "x86_64");
  return n;
}

static inline int addNic(commTopo* topo, int host, int parent, double bw, const char* name, int speedMbps, int gdr) {
  int n = addNode(topo, host, COMM_TOPO_NIC, parent, bw);
  commTopoNode* nd = commTopoNodeAt(topo, n);
  snprintf(nd->name, sizeof(nd->name), "%s", name);
  nd->u.nic.link = COMM_NIC_IB;
  nd->u.nic.port = 1;
  nd->u.nic.speedMbps = speedMbps;
  nd->u.nic.gdr = gdr;
  return n;
}

/* One host, no XML:
 *   CPU0 -- T0 (switch) -- S0 -- GPU0, NIC0
 *        |              `- S1 -- GPU1, NIC1
 *        `- NIC2 (directly below the CPU)
 *   CPU1 -- T1 -- S2 -- GPU2, NIC3
 * all PCI links 24 GB/s, cpu link 20 GB/s, NICs 200 Gb/s; GPUs 0-2 on an NVSwitch (450 GB/s), GPU0-GPU1 also
 * a direct 4-link bundle of 100 GB/s. */
static inline commTopo* buildSynthetic(void) {
  commTopo* topo;
  int h;
  assert_int_equal(commTopoCreate(&topo), commSuccess);
  assert_int_equal(commTopoAddHost(topo, "syn", &h), commSuccess);
  topo->hosts[h].cpuLinkBw = 20.0;
  int c0 = addNode(topo, h, COMM_TOPO_CPU, -1, 0), c1 = addNode(topo, h, COMM_TOPO_CPU, -1, 0);
  int t0 = addNode(topo, h, COMM_TOPO_PCI, c0, 24), t1 = addNode(topo, h, COMM_TOPO_PCI, c1, 24);
  int s0 = addNode(topo, h, COMM_TOPO_PCI, t0, 24), s1 = addNode(topo, h, COMM_TOPO_PCI, t0, 24);
  int s2 = addNode(topo, h, COMM_TOPO_PCI, t1, 24);
  int g0 = addNode(topo, h, COMM_TOPO_GPU, s0, 24);
  addNic(topo, h, s0, 24, "nic0", 200000, 1);
  int g1 = addNode(topo, h, COMM_TOPO_GPU, s1, 24);
  addNic(topo, h, s1, 24, "nic1", 200000, 1);
  addNic(topo, h, c0, 24, "nic2", 200000, 1);
  int g2 = addNode(topo, h, COMM_TOPO_GPU, s2, 24);
  addNic(topo, h, s2, 24, "nic3", 200000, 1);
  int nvs = addNode(topo, h, COMM_TOPO_NVS, -1, 0);
  assert_int_equal(commTopoAddNvlink(topo, g0, nvs, 18, 450), commSuccess);
  assert_int_equal(commTopoAddNvlink(topo, g1, nvs, 18, 450), commSuccess);
  assert_int_equal(commTopoAddNvlink(topo, g2, nvs, 18, 450), commSuccess);
  assert_int_equal(commTopoAddNvlink(topo, g0, g1, 4, 100), commSuccess);
  assert_int_equal(commTopoFinish(topo), commSuccess);
  return topo;
}

/* One host: CPU0 -- switch -- GPU0, NIC0, NIC1 (equal links and speeds unless told). */
static inline commTopo* buildOneGpuTwoNics(int speed0, int speed1) {
  commTopo* topo;
  int h;
  assert_int_equal(commTopoCreate(&topo), commSuccess);
  assert_int_equal(commTopoAddHost(topo, "g1n2", &h), commSuccess);
  int c = addNode(topo, h, COMM_TOPO_CPU, -1, 0);
  int s = addNode(topo, h, COMM_TOPO_PCI, c, 24);
  addNode(topo, h, COMM_TOPO_GPU, s, 24);
  addNic(topo, h, s, 24, "mlx5_0", speed0, 1);
  addNic(topo, h, s, 24, "mlx5_1", speed1, 1);
  assert_int_equal(commTopoFinish(topo), commSuccess);
  return topo;
}

/* nHosts hosts, each one CPU with one NIC below it (no PCI address): for host ranks. */
static inline commTopo* buildHostOnly(int nHosts) {
  commTopo* topo;
  assert_int_equal(commTopoCreate(&topo), commSuccess);
  for (int i = 0; i < nHosts; i++) {
    int h;
    char name[32];
    snprintf(name, sizeof(name), "h%d", i);
    assert_int_equal(commTopoAddHost(topo, name, &h), commSuccess);
    int c = addNode(topo, h, COMM_TOPO_CPU, -1, 0);
    int n = addNic(topo, h, c, 0, "eth0", 25000, 0);
    commTopoNodeAt(topo, n)->u.nic.link = COMM_NIC_ETH;
  }
  assert_int_equal(commTopoFinish(topo), commSuccess);
  return topo;
}

#endif
