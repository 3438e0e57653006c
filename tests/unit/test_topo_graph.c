/* Topology graph and placement (src/topo/graph.c, src/topo/order.c): path classes and bottlenecks, NIC
 * distance order, NIC choice per rank and channel, ring order, transport rules and builder validation.
 *
 * Some cases build their topology through the builder API only (no XML); the others load the sample files
 * of tests/topo/. The source tree is found through (first that is set): the COMM_SOURCE_DIR compile
 * definition, the COMM_SOURCE_DIR environment variable, or this file's own path (__FILE__, absolute in a
 * CMake build). */
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
static const char* topoFilePath(const char* name, char* buf, size_t len) {
#ifdef COMM_SOURCE_DIR
  snprintf(buf, len, "%s/tests/topo/%s", COMM_SOURCE_DIR, name);
#else
  const char* src = getenv("COMM_SOURCE_DIR");
  if (src != NULL && src[0] != '\0') {
    snprintf(buf, len, "%s/tests/topo/%s", src, name);
  } else {
    /* .../tests/unit/test_topo_graph.c -> .../tests/topo/<name> */
    const char* file = __FILE__;
    const char* unit = strstr(file, "unit/test_topo_graph.c");
    int prefix = unit != NULL ? (int)(unit - file) : 0;
    snprintf(buf, len, "%.*s%stopo/%s", prefix, file, unit != NULL ? "" : "tests/", name);
  }
#endif
  return buf;
}

static commTopo* loadTopo(const char* name) {
  char path[4096];
  commTopo* topo = NULL;
  commResult_t res = commTopoLoadXml(topoFilePath(name, path, sizeof(path)), &topo);
  if (res != commSuccess) fprintf(stderr, "cannot load %s (error %d)\n", path, (int)res);
  assert_int_equal(res, commSuccess);
  assert_non_null(topo);
  assert_true(topo->finished);
  return topo;
}

static char* readText(const char* name, size_t* lenOut) {
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
static commTopo* replicateHosts(const char* name, int n, const char* fmt) {
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

static int hostByName(const commTopo* topo, const char* name) {
  for (int h = 0; h < topo->nHosts; h++)
    if (strcmp(topo->hosts[h].name, name) == 0) return h;
  return -1;
}

static int gpu(const commTopo* topo, int host, int i) {
  int n = commTopoFind(topo, host, COMM_TOPO_GPU, i);
  assert_true(n >= 0);
  return n;
}
static int nic(const commTopo* topo, int host, int i) {
  int n = commTopoFind(topo, host, COMM_TOPO_NIC, i);
  assert_true(n >= 0);
  return n;
}
static int cpu(const commTopo* topo, int host, int i) {
  int n = commTopoFind(topo, host, COMM_TOPO_CPU, i);
  assert_true(n >= 0);
  return n;
}

static void expectPath(const commTopo* topo, int a, int b, int type) {
  commTopoPath p = commTopoPathOf(topo, a, b);
  if (p.type != type) {
    char la[96], lb[96];
    fprintf(stderr, "path %s -> %s: expected %s, got %s\n", commTopoNodeLabel(topo, a, la, sizeof(la)),
            commTopoNodeLabel(topo, b, lb, sizeof(lb)), commTopoPathName(type), commTopoPathName(p.type));
  }
  assert_int_equal(p.type, type);
}

static void assertNear(double x, double want) {
  if (!(x > want - 1e-3 && x < want + 1e-3)) fprintf(stderr, "got %g, expected %g\n", x, want);
  assert_true(x > want - 1e-3 && x < want + 1e-3);
}

/* Each ring of rings[nChannels][n] holds every rank once. */
static void assertPermutations(const int* rings, int n, int nChannels) {
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

static void clearEnv(void) {
  unsetenv("COMM_P2P_LEVEL");
  unsetenv("COMM_NET_GDR_LEVEL");
}

/* ---- Synthetic topologies (builder only) ---- */

static int addNode(commTopo* topo, int host, int type, int parent, double bw) {
  int n;
  assert_int_equal(commTopoAddNode(topo, host, type, parent, &n), commSuccess);
  commTopoNode* nd = commTopoNodeAt(topo, n);
  nd->bw = bw;
  if (type == COMM_TOPO_CPU) snprintf(nd->u.cpu.arch, sizeof(nd->u.cpu.arch), "x86_64");
  return n;
}

static int addNic(commTopo* topo, int host, int parent, double bw, const char* name, int speedMbps, int gdr) {
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
static commTopo* buildSynthetic(void) {
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
static commTopo* buildOneGpuTwoNics(int speed0, int speed1) {
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
static commTopo* buildHostOnly(int nHosts) {
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

/* ---- Paths ---- */

static void testSyntheticPaths(void** state) {
  (void)state;
  commTopo* topo = buildSynthetic();
  int g0 = gpu(topo, 0, 0), g1 = gpu(topo, 0, 1), g2 = gpu(topo, 0, 2);
  expectPath(topo, g0, g0, COMM_PATH_LOC);
  expectPath(topo, g0, g1, COMM_PATH_NVL);
  /* Through the NVSwitch (450) rather than the direct bundle (100): the higher bottleneck wins. */
  assertNear(commTopoPathOf(topo, g0, g1).bw, 450);
  expectPath(topo, g0, g2, COMM_PATH_NVL);
  expectPath(topo, g0, nic(topo, 0, 0), COMM_PATH_PIX);
  expectPath(topo, g0, nic(topo, 0, 1), COMM_PATH_PXB);
  expectPath(topo, g0, nic(topo, 0, 2), COMM_PATH_PHB);
  expectPath(topo, g0, nic(topo, 0, 3), COMM_PATH_SYS);
  assertNear(commTopoPathOf(topo, g0, nic(topo, 0, 3)).bw, 20); /* the cpu link */
  assertNear(commTopoPathOf(topo, g0, nic(topo, 0, 0)).bw, 24);
  expectPath(topo, cpu(topo, 0, 0), nic(topo, 0, 2), COMM_PATH_PHB);
  expectPath(topo, cpu(topo, 0, 0), nic(topo, 0, 0), COMM_PATH_PHB);
  expectPath(topo, cpu(topo, 0, 0), cpu(topo, 0, 1), COMM_PATH_SYS);
  /* Symmetric classes and bottlenecks. */
  for (int a = 0; a < topo->nNodes; a++)
    for (int b = 0; b < topo->nNodes; b++) {
      commTopoPath x = commTopoPathOf(topo, a, b), y = commTopoPathOf(topo, b, a);
      assert_int_equal(x.type, y.type);
      assertNear(x.bw, y.bw);
    }
  /* The direct GPU0-GPU1 bundle is a link of its own (4 links), though no best path uses it. */
  int nvlBundles = 0;
  for (int l = 0; l < topo->nLinks; l++)
    if (topo->links[l].type == COMM_LINK_NVL && topo->links[l].count == 4) nvlBundles++;
  assert_int_equal(nvlBundles, 1);
  int nics[8];
  assert_int_equal(commTopoNicsByDistance(topo, g0, nics, 8), 4);
  for (int i = 0; i < 4; i++) assert_int_equal(nics[i], nic(topo, 0, i));
  commTopoFree(topo);
}

static void testDgxPaths(void** state) {
  (void)state;
  commTopo* topo = loadTopo("dgx_h100.xml");
  assert_int_equal(topo->nHosts, 1);
  assert_int_equal(topo->hosts[0].nGpus, 8);
  assert_int_equal(topo->hosts[0].nNics, 8);
  assert_int_equal(topo->hosts[0].nCpus, 2);
  int g0 = gpu(topo, 0, 0);
  for (int i = 0; i < 8; i++) {
    char want[16];
    snprintf(want, sizeof(want), "mlx5_%d", i);
    assert_string_equal(topo->nodes[nic(topo, 0, i)].name, want);
  }
  expectPath(topo, g0, g0, COMM_PATH_LOC);
  expectPath(topo, g0, gpu(topo, 0, 1), COMM_PATH_NVL);
  assertNear(commTopoPathOf(topo, g0, gpu(topo, 0, 1)).bw, 450);
  for (int j = 1; j < 8; j++) expectPath(topo, g0, gpu(topo, 0, j), COMM_PATH_NVL);
  expectPath(topo, g0, nic(topo, 0, 0), COMM_PATH_PIX);
  assertNear(commTopoPathOf(topo, g0, nic(topo, 0, 0)).bw, 63);
  expectPath(topo, g0, nic(topo, 0, 1), COMM_PATH_PXB);
  expectPath(topo, g0, nic(topo, 0, 2), COMM_PATH_PHB);
  expectPath(topo, g0, nic(topo, 0, 3), COMM_PATH_PHB);
  for (int j = 4; j < 8; j++) expectPath(topo, g0, nic(topo, 0, j), COMM_PATH_SYS);
  /* Bottleneck: min(PCI 63, cpu link 40). */
  assertNear(commTopoPathOf(topo, g0, nic(topo, 0, 4)).bw, 40);
  expectPath(topo, cpu(topo, 0, 0), nic(topo, 0, 0), COMM_PATH_PHB);
  expectPath(topo, cpu(topo, 0, 0), gpu(topo, 0, 4), COMM_PATH_SYS);
  /* Every GPU's nearest NIC is the one on its switch. */
  for (int i = 0; i < 8; i++) {
    int nics[8];
    assert_int_equal(commTopoNicsByDistance(topo, gpu(topo, 0, i), nics, 8), 8);
    assert_int_equal(nics[0], nic(topo, 0, i));
    expectPath(topo, gpu(topo, 0, i), nics[0], COMM_PATH_PIX);
  }
  /* Distance order from GPU0: PIX, PXB, PHB x2 (by index), SYS x4 (by index). */
  int nics[8];
  assert_int_equal(commTopoNicsByDistance(topo, g0, nics, 8), 8);
  for (int i = 0; i < 8; i++) assert_int_equal(nics[i], nic(topo, 0, i));
  /* A shorter buffer keeps the nearest ones. */
  assert_int_equal(commTopoNicsByDistance(topo, g0, nics, 3), 3);
  for (int i = 0; i < 3; i++) assert_int_equal(nics[i], nic(topo, 0, i));
  commTopoFree(topo);
}

static void testPcieNodePaths(void** state) {
  (void)state;
  commTopo* topo = loadTopo("pcie_4gpu.xml");
  assert_int_equal(topo->hosts[0].nGpus, 4);
  assert_int_equal(topo->hosts[0].nNics, 2);
  int g0 = gpu(topo, 0, 0), g2 = gpu(topo, 0, 2);
  int mlx = nic(topo, 0, 0), eth = nic(topo, 0, 1);
  assert_string_equal(topo->nodes[mlx].name, "mlx5_0");
  assert_string_equal(topo->nodes[eth].name, "eth0");
  expectPath(topo, g0, gpu(topo, 0, 1), COMM_PATH_PIX);
  expectPath(topo, g0, g2, COMM_PATH_SYS);
  expectPath(topo, gpu(topo, 0, 3), g2, COMM_PATH_PIX);
  expectPath(topo, g0, mlx, COMM_PATH_PIX);
  expectPath(topo, g0, eth, COMM_PATH_PHB);
  /* eth0 (no PCI address) hangs below CPU0 with a link of its own speed: 10 Gb/s = 1.25 GB/s. */
  assertNear(commTopoPathOf(topo, g0, eth).bw, 1.25);
  /* GPU2: both NICs are SYS; mlx5_0 wins by bandwidth. */
  expectPath(topo, g2, mlx, COMM_PATH_SYS);
  expectPath(topo, g2, eth, COMM_PATH_SYS);
  int nics[4];
  assert_int_equal(commTopoNicsByDistance(topo, g2, nics, 4), 2);
  assert_int_equal(nics[0], mlx);
  assert_int_equal(nics[1], eth);
  assert_int_equal(commTopoNicsByDistance(topo, g2, nics, 1), 1);
  assert_int_equal(nics[0], mlx);
  assert_int_equal(commTopoNicsByDistance(topo, g0, nics, 4), 2);
  assert_int_equal(nics[0], mlx);
  assert_int_equal(nics[1], eth);
  commTopoFree(topo);
}

/* Same class and bottleneck, different NIC speeds: the faster NIC is nearer (topo.h: "then NIC speed"),
 * whatever the size of the output buffer (max=1 once kept the first NIC of a tie on class and bandwidth,
 * mlx5_0, whatever the speeds; commTopoPathOf across hosts asks for one NIC). */
static void testNicsBySpeedTie(void** state) {
  (void)state;
  commTopo* topo = buildOneGpuTwoNics(100000, 200000);
  int g = gpu(topo, 0, 0), nics[2];
  assert_int_equal(commTopoNicsByDistance(topo, g, nics, 2), 2);
  assert_int_equal(nics[0], nic(topo, 0, 1));
  assert_int_equal(nics[1], nic(topo, 0, 0));
  assert_int_equal(commTopoNicsByDistance(topo, g, nics, 1), 1);
  assert_int_equal(nics[0], nic(topo, 0, 1));
  commTopoFree(topo);
}

static void testClusterPaths(void** state) {
  (void)state;
  commTopo* topo = loadTopo("cluster_4x_dgx.xml");
  assert_int_equal(topo->nHosts, 4);
  for (int h = 0; h < 4; h++) {
    char name[16];
    snprintf(name, sizeof(name), "node%d", h);
    assert_int_equal(hostByName(topo, name), h);
    assert_int_equal(topo->hosts[h].nGpus, 8);
    assert_int_equal(topo->hosts[h].nNics, 8);
  }
  commTopoPath p = commTopoPathOf(topo, gpu(topo, 0, 0), gpu(topo, 1, 0));
  assert_int_equal(p.type, COMM_PATH_NET);
  assertNear(p.bw, 50); /* 400 Gb/s NICs; PCI 63 */
  expectPath(topo, gpu(topo, 2, 3), gpu(topo, 2, 5), COMM_PATH_NVL);
  commTopoFree(topo);
}

/* ---- NIC choice ---- */

static void testRankNicDgx(void** state) {
  (void)state;
  commTopo* topo = loadTopo("dgx_h100.xml");
  commTopoRank ranks[8];
  for (int r = 0; r < 8; r++) ranks[r] = (commTopoRank){0, gpu(topo, 0, r), 0};
  for (int c = 0; c < 4; c++)
    for (int r = 0; r < 8; r++) assert_int_equal(commTopoRankNic(topo, ranks, 8, r, c), nic(topo, 0, r));
  commTopoFree(topo);
}

static void testRankNicSpread(void** state) {
  (void)state;
  commTopo* topo = buildOneGpuTwoNics(200000, 200000);
  int g = gpu(topo, 0, 0), n0 = nic(topo, 0, 0), n1 = nic(topo, 0, 1);
  /* Two ranks on the one GPU: one NIC each, on every channel. */
  commTopoRank two[2] = {{0, g, 0}, {0, g, 0}};
  for (int c = 0; c < 4; c++) {
    int a = commTopoRankNic(topo, two, 2, 0, c), b = commTopoRankNic(topo, two, 2, 1, c);
    assert_true(a == n0 || a == n1);
    assert_true(b == n0 || b == n1);
    assert_int_not_equal(a, b);
  }
  /* A rank alone turns through both, channel by channel. */
  commTopoRank one[1] = {{0, g, 0}};
  int first = commTopoRankNic(topo, one, 1, 0, 0);
  assert_true(first == n0 || first == n1);
  for (int c = 1; c < 6; c++) {
    int x = commTopoRankNic(topo, one, 1, 0, c);
    assert_int_equal(x, c % 2 == 0 ? first : (first == n0 ? n1 : n0));
  }
  /* Bad arguments. */
  assert_int_equal(commTopoRankNic(topo, one, 1, 1, 0), -1);
  assert_int_equal(commTopoRankNic(topo, one, 1, -1, 0), -1);
  commTopoFree(topo);
}

/* ---- Rings ---- */

static void testRingsDgxSingleNode(void** state) {
  (void)state;
  commTopo* topo = loadTopo("dgx_h100.xml");
  enum { N = 8, C = 16 };
  commTopoRank ranks[N];
  for (int r = 0; r < N; r++) ranks[r] = (commTopoRank){0, gpu(topo, 0, r), 0};
  int rings[C * N];
  assert_int_equal(commTopoRings(topo, ranks, N, 1, C, rings), commSuccess);
  assertPermutations(rings, N, C);
  for (int c = 0; c < C; c++) {
    /* One node: the ring closes inside it, every edge (the closing one too) is NVLink. */
    for (int i = 0; i < N; i++)
      expectPath(topo, ranks[rings[c * N + i]].dev, ranks[rings[c * N + (i + 1) % N]].dev, COMM_PATH_NVL);
    assert_int_equal(rings[c * N], c % N);
    int order[N];
    assert_int_equal(commTopoNodeOrder(topo, ranks, N, 0, c, order), N);
    assert_memory_equal(order, rings + c * N, sizeof(order));
  }
  /* Two ranks per GPU: still permutations, with the ranks of a GPU next to each other. */
  enum { M = 16 };
  commTopoRank two[M];
  for (int r = 0; r < M; r++) two[r] = (commTopoRank){0, gpu(topo, 0, r / 2), 0};
  int rings2[C * M];
  assert_int_equal(commTopoRings(topo, two, M, 1, C, rings2), commSuccess);
  assertPermutations(rings2, M, C);
  for (int c = 0; c < C; c++) {
    for (int i = 0; i < M; i++) {
      commTopoPath p = commTopoPathOf(topo, two[rings2[c * M + i]].dev, two[rings2[c * M + (i + 1) % M]].dev);
      assert_true(p.type == COMM_PATH_LOC || p.type == COMM_PATH_NVL);
    }
    for (int i = 0; i < M; i += 2) assert_int_equal(two[rings2[c * M + i]].dev, two[rings2[c * M + i + 1]].dev);
  }
  commTopoFree(topo);
}

static void testRingsCluster(void** state) {
  (void)state;
  commTopo* topo = loadTopo("cluster_4x_dgx.xml");
  enum { H = 4, G = 8, N = H * G, C = 16 };
  commTopoRank ranks[N];
  for (int r = 0; r < N; r++) ranks[r] = (commTopoRank){r / G, gpu(topo, r / G, r % G), r / G};
  int rings[C * N];
  assert_int_equal(commTopoRings(topo, ranks, N, H, C, rings), commSuccess);
  assertPermutations(rings, N, C);
  for (int c = 0; c < C; c++) {
    for (int v = 0; v < H; v++) {
      const int* seg = rings + c * N + v * G;
      /* Node v's segment: its ranks, entering at the GPU of NIC c % 8. */
      for (int i = 0; i < G; i++) assert_int_equal(ranks[seg[i]].node, v);
      assert_int_equal(seg[0], v * G + c % G);
      assert_int_equal(commTopoRankNic(topo, ranks, N, seg[0], c), nic(topo, v, c % G));
      for (int i = 0; i + 1 < G; i++) expectPath(topo, ranks[seg[i]].dev, ranks[seg[i + 1]].dev, COMM_PATH_NVL);
    }
  }
  /* Ranks numbered across nodes (rank r on node r % 4): the segments still come in node order. */
  for (int r = 0; r < N; r++) ranks[r] = (commTopoRank){r % H, gpu(topo, r % H, r / H), r % H};
  assert_int_equal(commTopoRings(topo, ranks, N, H, C, rings), commSuccess);
  assertPermutations(rings, N, C);
  for (int c = 0; c < C; c++)
    for (int i = 0; i < N; i++) assert_int_equal(ranks[rings[c * N + i]].node, i / G);
  /* A rank on a node out of range is an error. */
  ranks[5].node = H;
  assert_int_equal(commTopoRings(topo, ranks, N, H, 1, rings), commInvalidArgument);
  commTopoFree(topo);
}

static void testRingsPcie(void** state) {
  (void)state;
  commTopo* topo = loadTopo("pcie_4gpu.xml");
  enum { N = 4, C = 8 };
  commTopoRank ranks[N];
  for (int r = 0; r < N; r++) ranks[r] = (commTopoRank){0, gpu(topo, 0, r), 0};
  int rings[C * N];
  assert_int_equal(commTopoRings(topo, ranks, N, 1, C, rings), commSuccess);
  assertPermutations(rings, N, C);
  for (int c = 0; c < C; c++) {
    int pos[N], sys = 0;
    for (int i = 0; i < N; i++) pos[rings[c * N + i]] = i;
    for (int i = 0; i < N; i++) {
      commTopoPath p = commTopoPathOf(topo, ranks[rings[c * N + i]].dev, ranks[rings[c * N + (i + 1) % N]].dev);
      sys += p.type == COMM_PATH_SYS;
    }
    assert_int_equal(sys, 2);
    assert_int_equal((pos[0] - pos[1] + N) % N == 1 || (pos[1] - pos[0] + N) % N == 1, 1);
    assert_int_equal((pos[2] - pos[3] + N) % N == 1 || (pos[3] - pos[2] + N) % N == 1, 1);
    /* The only GDR NIC sits by GPU0 and GPU1: the ring starts at one of them. */
    assert_true(rings[c * N] == 0 || rings[c * N] == 1);
  }
  commTopoFree(topo);

  /* Two such hosts: each node's segment is an open chain entering at GPU0 or GPU1 and crossing the CPU link
   * once. */
  topo = replicateHosts("pcie_4gpu.xml", 2, "pcie%d");
  commTopoRank two[2 * N];
  for (int r = 0; r < 2 * N; r++) two[r] = (commTopoRank){r / N, gpu(topo, r / N, r % N), r / N};
  int rings2[C * 2 * N];
  assert_int_equal(commTopoRings(topo, two, 2 * N, 2, C, rings2), commSuccess);
  assertPermutations(rings2, 2 * N, C);
  for (int c = 0; c < C; c++)
    for (int v = 0; v < 2; v++) {
      const int* seg = rings2 + c * 2 * N + v * N;
      assert_true(seg[0] == v * N || seg[0] == v * N + 1);
      int sys = 0;
      for (int i = 0; i + 1 < N; i++) {
        assert_int_equal(two[seg[i]].node, v);
        sys += commTopoPathOf(topo, two[seg[i]].dev, two[seg[i + 1]].dev).type == COMM_PATH_SYS;
      }
      assert_int_equal(sys, 1);
    }
  commTopoFree(topo);
}

static void testRingsHostRanks(void** state) {
  (void)state;
  commTopo* topo = buildHostOnly(2);
  enum { M = 5, N = 2 * M, C = 7 };
  commTopoRank ranks[N];
  for (int r = 0; r < N; r++) ranks[r] = (commTopoRank){r / M, cpu(topo, r / M, 0), r / M};
  /* One node: channel c is the rotation starting at rank c % m. */
  int rings1[C * M];
  assert_int_equal(commTopoRings(topo, ranks, M, 1, C, rings1), commSuccess);
  for (int c = 0; c < C; c++)
    for (int i = 0; i < M; i++) assert_int_equal(rings1[c * M + i], (c + i) % M);
  /* Two nodes: the same rotation inside each segment. */
  int rings[C * N];
  assert_int_equal(commTopoRings(topo, ranks, N, 2, C, rings), commSuccess);
  assertPermutations(rings, N, C);
  for (int c = 0; c < C; c++)
    for (int v = 0; v < 2; v++)
      for (int i = 0; i < M; i++) assert_int_equal(rings[c * N + v * M + i], v * M + (c + i) % M);
  /* Every host rank uses the host's one NIC. */
  for (int r = 0; r < N; r++) assert_int_equal(commTopoRankNic(topo, ranks, N, r, r), nic(topo, r / M, 0));
  commTopoFree(topo);
}

/* ---- Transport rules ---- */

static void testTransportDgx(void** state) {
  (void)state;
  clearEnv();
  commTopo* topo = loadTopo("cluster_4x_dgx.xml");
  enum { N = 16 };
  commTopoRank ranks[N];
  for (int r = 0; r < N; r++) ranks[r] = (commTopoRank){r / 8, gpu(topo, r / 8, r % 8), r / 8};
  commTopoTransportChoice ch;
  assert_int_equal(commTopoChooseTransport(topo, ranks, N, 0, 5, &ch), commSuccess);
  assert_int_equal(ch.transport, COMM_TOPO_USE_P2P);
  assert_int_equal(ch.pathType, COMM_PATH_NVL);
  assert_int_equal(ch.fallback, 0);
  assert_true(ch.why[0] != '\0');
  /* Across hosts: the network, with GDR (GPU-NIC path PIX <= PXB, gdr=1 NICs). */
  assert_int_equal(commTopoChooseTransport(topo, ranks, N, 0, 8, &ch), commSuccess);
  assert_int_equal(ch.transport, COMM_TOPO_USE_NET);
  assert_int_equal(ch.pathType, COMM_PATH_NET);
  assert_int_equal(ch.gdr, 1);
  assert_int_equal(ch.fallback, 0);
  setenv("COMM_NET_GDR_LEVEL", "LOC", 1);
  assert_int_equal(commTopoGdrLevel(), COMM_PATH_LOC);
  assert_int_equal(commTopoChooseTransport(topo, ranks, N, 0, 8, &ch), commSuccess);
  assert_int_equal(ch.transport, COMM_TOPO_USE_NET);
  assert_int_equal(ch.gdr, 0);
  assert_int_equal(ch.fallback, 1);
  setenv("COMM_NET_GDR_LEVEL", "PIX", 1);
  assert_int_equal(commTopoChooseTransport(topo, ranks, N, 3, 12, &ch), commSuccess);
  assert_int_equal(ch.gdr, 1);
  clearEnv();
  /* Bad ranks. */
  assert_int_equal(commTopoChooseTransport(topo, ranks, N, 0, N, &ch), commInvalidArgument);
  commTopoFree(topo);
}

/* COMM_P2P_LEVEL=LOC on an NVLink pair: the level is a plain limit on the path class, as NCCL's
 * NCCL_P2P_LEVEL=LOC, so it turns P2P off even over NVLink (SHM, flagged as a fallback); NVL allows it. */
static void testTransportP2pLevelLocNvl(void** state) {
  (void)state;
  clearEnv();
  commTopo* topo = loadTopo("dgx_h100.xml");
  commTopoRank ranks[2] = {{0, gpu(topo, 0, 0), 0}, {0, gpu(topo, 0, 1), 0}};
  commTopoTransportChoice ch;
  setenv("COMM_P2P_LEVEL", "LOC", 1);
  assert_int_equal(commTopoP2pLevel(), COMM_PATH_LOC);
  assert_int_equal(commTopoChooseTransport(topo, ranks, 2, 0, 1, &ch), commSuccess);
  assert_int_equal(ch.pathType, COMM_PATH_NVL);
  assert_int_equal(ch.transport, COMM_TOPO_USE_SHM);
  assert_int_equal(ch.fallback, 1);
  setenv("COMM_P2P_LEVEL", "NVL", 1);
  assert_int_equal(commTopoChooseTransport(topo, ranks, 2, 0, 1, &ch), commSuccess);
  assert_int_equal(ch.transport, COMM_TOPO_USE_P2P);
  assert_int_equal(ch.fallback, 0);
  clearEnv();
  commTopoFree(topo);
}

static void testTransportPcie(void** state) {
  (void)state;
  clearEnv();
  commTopo* topo = loadTopo("pcie_4gpu.xml");
  commTopoRank ranks[4];
  for (int r = 0; r < 4; r++) ranks[r] = (commTopoRank){0, gpu(topo, 0, r), 0};
  commTopoTransportChoice ch;
  assert_int_equal(commTopoChooseTransport(topo, ranks, 4, 0, 1, &ch), commSuccess);
  assert_int_equal(ch.transport, COMM_TOPO_USE_P2P);
  assert_int_equal(ch.pathType, COMM_PATH_PIX);
  assert_int_equal(commTopoChooseTransport(topo, ranks, 4, 0, 2, &ch), commSuccess);
  assert_int_equal(ch.pathType, COMM_PATH_SYS);
  assert_int_equal(ch.transport, COMM_TOPO_USE_SHM);
  assert_int_equal(ch.fallback, 1);
  setenv("COMM_P2P_LEVEL", "SYS", 1);
  assert_int_equal(commTopoChooseTransport(topo, ranks, 4, 0, 2, &ch), commSuccess);
  assert_int_equal(ch.transport, COMM_TOPO_USE_P2P);
  assert_int_equal(ch.fallback, 0);
  /* NCCL's integers: 2 is PIX. */
  setenv("COMM_P2P_LEVEL", "2", 1);
  assert_int_equal(commTopoP2pLevel(), COMM_PATH_PIX);
  assert_int_equal(commTopoChooseTransport(topo, ranks, 4, 0, 1, &ch), commSuccess);
  assert_int_equal(ch.transport, COMM_TOPO_USE_P2P);
  setenv("COMM_P2P_LEVEL", "NVL", 1);
  assert_int_equal(commTopoChooseTransport(topo, ranks, 4, 0, 1, &ch), commSuccess);
  assert_int_equal(ch.transport, COMM_TOPO_USE_SHM);
  assert_int_equal(ch.fallback, 1);
  clearEnv();
  commTopoFree(topo);

  /* Two such hosts: GPU2's NIC (mlx5_0) is SYS away, beyond the default GDR level: network without GDR. */
  topo = replicateHosts("pcie_4gpu.xml", 2, "pcie%d");
  commTopoRank x[2] = {{0, gpu(topo, 0, 2), 0}, {1, gpu(topo, 1, 2), 1}};
  assert_int_equal(commTopoChooseTransport(topo, x, 2, 0, 1, &ch), commSuccess);
  assert_int_equal(ch.transport, COMM_TOPO_USE_NET);
  assert_int_equal(ch.gdr, 0);
  assert_int_equal(ch.fallback, 1);
  /* GPU0's (PIX) is within it. */
  x[0].dev = gpu(topo, 0, 0);
  x[1].dev = gpu(topo, 1, 1);
  assert_int_equal(commTopoChooseTransport(topo, x, 2, 0, 1, &ch), commSuccess);
  assert_int_equal(ch.gdr, 1);
  assert_int_equal(ch.fallback, 0);
  /* ... and SYS allows GPU2 too. */
  setenv("COMM_NET_GDR_LEVEL", "SYS", 1);
  x[0].dev = gpu(topo, 0, 2);
  assert_int_equal(commTopoChooseTransport(topo, x, 2, 0, 1, &ch), commSuccess);
  assert_int_equal(ch.gdr, 1);
  clearEnv();
  commTopoFree(topo);
}

static void testTransportHostRanks(void** state) {
  (void)state;
  clearEnv();
  commTopo* topo = buildHostOnly(2);
  commTopoRank ranks[4] = {
      {0, cpu(topo, 0, 0), 0}, {0, cpu(topo, 0, 0), 0}, {1, cpu(topo, 1, 0), 1}, {1, cpu(topo, 1, 0), 1}};
  commTopoTransportChoice ch;
  assert_int_equal(commTopoChooseTransport(topo, ranks, 4, 0, 1, &ch), commSuccess);
  assert_int_equal(ch.transport, COMM_TOPO_USE_SHM);
  assert_int_equal(ch.fallback, 0);
  assert_int_equal(commTopoChooseTransport(topo, ranks, 4, 1, 2, &ch), commSuccess);
  assert_int_equal(ch.transport, COMM_TOPO_USE_NET);
  assert_int_equal(ch.gdr, 0);
  assert_int_equal(ch.fallback, 0);
  commTopoFree(topo);
}

static void testLevels(void** state) {
  (void)state;
  clearEnv();
  assert_int_equal(commTopoPathFromName("NVB"), COMM_PATH_NVL);
  assert_int_equal(commTopoPathFromName("nvl"), COMM_PATH_NVL);
  assert_int_equal(commTopoPathFromName("SYS"), COMM_PATH_SYS);
  assert_int_equal(commTopoPathFromName("bogus"), -1);
  assert_int_equal(commTopoPathFromName(NULL), -1);
  assert_string_equal(commTopoPathName(COMM_PATH_PXB), "PXB");
  assert_int_equal(commTopoP2pLevel(), COMM_PATH_PXB);
  assert_int_equal(commTopoGdrLevel(), COMM_PATH_PXB);
  setenv("COMM_P2P_LEVEL", "2", 1);
  assert_int_equal(commTopoP2pLevel(), COMM_PATH_PIX);
  setenv("COMM_P2P_LEVEL", "0", 1);
  assert_int_equal(commTopoP2pLevel(), COMM_PATH_LOC);
  setenv("COMM_P2P_LEVEL", "NVB", 1);
  assert_int_equal(commTopoP2pLevel(), COMM_PATH_NVL);
  setenv("COMM_P2P_LEVEL", "junk", 1); /* a WARN and the default */
  assert_int_equal(commTopoP2pLevel(), COMM_PATH_PXB);
  setenv("COMM_NET_GDR_LEVEL", "5", 1);
  assert_int_equal(commTopoGdrLevel(), COMM_PATH_SYS);
  clearEnv();
}

/* ---- Builder validation ---- */

static void testBuilderValidation(void** state) {
  (void)state;
  commTopo* topo;
  int h, c, s, g, n;

  /* A GPU without parent. */
  assert_int_equal(commTopoCreate(&topo), commSuccess);
  assert_int_equal(commTopoAddHost(topo, "a", &h), commSuccess);
  addNode(topo, h, COMM_TOPO_CPU, -1, 0);
  assert_int_equal(commTopoAddNode(topo, h, COMM_TOPO_GPU, -1, &g), commSuccess);
  assert_int_equal(commTopoFinish(topo), commInvalidArgument);
  commTopoFree(topo);

  /* An NVLink from a NIC (refused by commTopoAddNvlink or by commTopoFinish). */
  assert_int_equal(commTopoCreate(&topo), commSuccess);
  assert_int_equal(commTopoAddHost(topo, "b", &h), commSuccess);
  c = addNode(topo, h, COMM_TOPO_CPU, -1, 0);
  g = addNode(topo, h, COMM_TOPO_GPU, c, 0);
  n = addNic(topo, h, c, 0, "mlx5_0", 100000, 1);
  commResult_t res = commTopoAddNvlink(topo, n, g, 2, 50);
  if (res == commSuccess) res = commTopoFinish(topo);
  assert_int_equal(res, commInvalidArgument);
  commTopoFree(topo);

  /* A host without CPU. */
  assert_int_equal(commTopoCreate(&topo), commSuccess);
  assert_int_equal(commTopoAddHost(topo, "c", &h), commSuccess);
  addNode(topo, h, COMM_TOPO_CPU, -1, 0);
  assert_int_equal(commTopoAddHost(topo, "d", &h), commSuccess);
  addNode(topo, h, COMM_TOPO_NVS, -1, 0);
  assert_int_equal(commTopoFinish(topo), commInvalidArgument);
  commTopoFree(topo);

  /* A PCI cycle (made by editing a parent after the fact): refused, no hang. */
  assert_int_equal(commTopoCreate(&topo), commSuccess);
  assert_int_equal(commTopoAddHost(topo, "e", &h), commSuccess);
  c = addNode(topo, h, COMM_TOPO_CPU, -1, 0);
  int p1 = addNode(topo, h, COMM_TOPO_PCI, c, 0);
  s = addNode(topo, h, COMM_TOPO_PCI, p1, 0);
  addNode(topo, h, COMM_TOPO_GPU, s, 0);
  commTopoNodeAt(topo, p1)->parent = s;
  assert_int_equal(commTopoFinish(topo), commInvalidArgument);
  commTopoFree(topo);

  /* A PCI node that is its own parent. */
  assert_int_equal(commTopoCreate(&topo), commSuccess);
  assert_int_equal(commTopoAddHost(topo, "f", &h), commSuccess);
  addNode(topo, h, COMM_TOPO_CPU, -1, 0);
  s = addNode(topo, h, COMM_TOPO_PCI, -1, 0);
  commTopoNodeAt(topo, s)->parent = s;
  assert_int_equal(commTopoFinish(topo), commInvalidArgument);
  commTopoFree(topo);

  /* A GPU below a CPU of another host. */
  assert_int_equal(commTopoCreate(&topo), commSuccess);
  int h0, h1;
  assert_int_equal(commTopoAddHost(topo, "g", &h0), commSuccess);
  assert_int_equal(commTopoAddHost(topo, "h", &h1), commSuccess);
  c = addNode(topo, h0, COMM_TOPO_CPU, -1, 0);
  addNode(topo, h1, COMM_TOPO_CPU, -1, 0);
  assert_int_equal(commTopoAddNode(topo, h1, COMM_TOPO_GPU, c, &g), commSuccess);
  assert_int_equal(commTopoFinish(topo), commInvalidArgument);
  commTopoFree(topo);

  /* Bad builder arguments. */
  assert_int_equal(commTopoCreate(&topo), commSuccess);
  assert_int_equal(commTopoAddNode(topo, 0, COMM_TOPO_CPU, -1, &n), commInvalidArgument); /* no host yet */
  assert_int_equal(commTopoAddHost(topo, "i", &h), commSuccess);
  assert_int_equal(commTopoAddNode(topo, h, COMM_TOPO_NODE_TYPES, -1, &n), commInvalidArgument);
  assert_int_equal(commTopoAddNode(topo, h, COMM_TOPO_GPU, 5, &n), commInvalidArgument);
  c = addNode(topo, h, COMM_TOPO_CPU, -1, 0);
  g = addNode(topo, h, COMM_TOPO_GPU, c, 0);
  assert_int_equal(commTopoAddNvlink(topo, g, g + 1, 1, 25), commInvalidArgument);
  assert_int_equal(commTopoAddNvlink(topo, g, c, 0, 25), commInvalidArgument);
  assert_int_equal(commTopoFinish(topo), commSuccess);
  assert_int_equal(commTopoAddNode(topo, h, COMM_TOPO_GPU, c, &n), commInternalError); /* finished */
  commTopoFree(topo);

  /* No host at all. */
  assert_int_equal(commTopoCreate(&topo), commSuccess);
  assert_int_equal(commTopoFinish(topo), commInvalidArgument);
  commTopoFree(topo);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(testSyntheticPaths),
      cmocka_unit_test(testDgxPaths),
      cmocka_unit_test(testPcieNodePaths),
      cmocka_unit_test(testNicsBySpeedTie),
      cmocka_unit_test(testClusterPaths),
      cmocka_unit_test(testRankNicDgx),
      cmocka_unit_test(testRankNicSpread),
      cmocka_unit_test(testRingsDgxSingleNode),
      cmocka_unit_test(testRingsCluster),
      cmocka_unit_test(testRingsPcie),
      cmocka_unit_test(testRingsHostRanks),
      cmocka_unit_test(testTransportDgx),
      cmocka_unit_test(testTransportP2pLevelLocNvl),
      cmocka_unit_test(testTransportPcie),
      cmocka_unit_test(testTransportHostRanks),
      cmocka_unit_test(testLevels),
      cmocka_unit_test(testBuilderValidation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
