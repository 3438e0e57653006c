/* Topology transport rules (src/topo/graph.c): which transport each pair of ranks gets (P2P, shm, network,
 * GPUDirect RDMA) under COMM_P2P_LEVEL and COMM_NET_GDR_LEVEL, and the level names. */
#include "topo_test_util.h"

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(testTransportDgx),  cmocka_unit_test(testTransportP2pLevelLocNvl),
      cmocka_unit_test(testTransportPcie), cmocka_unit_test(testTransportHostRanks),
      cmocka_unit_test(testLevels),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
