/* Topology graph and placement (src/topo/graph.c, src/topo/order.c): path classes and bottlenecks, NIC
 * distance order, NIC choice per rank and channel, ring order and builder validation (the transport rules
 * are in test_topo_transport.c).
 *
 * Some cases build their topology through the builder API only (no XML); the others load the sample files
 * of tests/topo/ (topo_test_util.h finds them). */

#include "topo_test_util.h"

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
      cmocka_unit_test(testSyntheticPaths), cmocka_unit_test(testDgxPaths),
      cmocka_unit_test(testPcieNodePaths),  cmocka_unit_test(testNicsBySpeedTie),
      cmocka_unit_test(testClusterPaths),   cmocka_unit_test(testRankNicDgx),
      cmocka_unit_test(testRankNicSpread),  cmocka_unit_test(testRingsDgxSingleNode),
      cmocka_unit_test(testRingsCluster),   cmocka_unit_test(testRingsPcie),
      cmocka_unit_test(testRingsHostRanks), cmocka_unit_test(testBuilderValidation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
