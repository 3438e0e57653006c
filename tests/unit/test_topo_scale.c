/* Large topology files (functional checks; the timings are bench/topo_bench's): a generated 1,024-host
 * cluster of the DGX H100 of tests/topo loads, its hosts share one path table, and its rings over 8,192
 * ranks are right; 8 hosts of 1,022 nodes each (the reader's per-host limit is 1,024) load with the paths
 * their shape implies, and ring order works on a node of 508 GPUs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "topo.h"
#include "topo_test_util.h"

#define CLUSTER_HOSTS 1024
#define WIDE_HOSTS 8
#define WIDE_GROUPS 254 /* per host: 2 CPUs, 254 x (switch, 2 GPUs, NIC), 3 bridges, NVSwitch: 1,022 nodes */

static char* readWhole(const char* path) {
  FILE* f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  assert_true(n > 0);
  rewind(f);
  char* t = malloc((size_t)n + 1);
  assert_non_null(t);
  assert_int_equal(fread(t, 1, (size_t)n, f), (size_t)n);
  t[n] = '\0';
  fclose(f);
  return t;
}

static FILE* tmpFile(char* path, size_t len) {
  const char* t = getenv("TMPDIR");
  snprintf(path, len, "%s/test_topo_scale_XXXXXX", t && t[0] ? t : "/tmp");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE* f = fdopen(fd, "w");
  assert_non_null(f);
  return f;
}

/* The DGX host element repeated, renamed node0000 ...; loaded. */
static commTopo* loadCluster(void) {
  char src[4096], path[512];
  char* text = readWhole(topoFilePath("dgx_h100.xml", src, sizeof(src)));
  char* hs = strstr(text, "  <host name=\"dgx-h100\"");
  char* he = hs ? strstr(hs, "</host>\n") : NULL;
  assert_non_null(he);
  he += strlen("</host>\n");
  const char* rest = hs + strlen("  <host name=\"dgx-h100\"");
  FILE* f = tmpFile(path, sizeof(path));
  fwrite(text, 1, (size_t)(hs - text), f);
  for (int h = 0; h < CLUSTER_HOSTS; h++) {
    fprintf(f, "  <host name=\"node%04d\"", h);
    fwrite(rest, 1, (size_t)(he - rest), f);
  }
  fputs(he, f);
  assert_int_equal(fclose(f), 0);
  free(text);
  commTopo* topo = NULL;
  assert_int_equal(commTopoLoadXml(path, &topo), commSuccess);
  unlink(path);
  return topo;
}

static void test_cluster_1024_hosts(void** state) {
  (void)state;
  commTopo* topo = loadCluster();
  assert_int_equal(topo->nHosts, CLUSTER_HOSTS);
  for (int h = 0; h < CLUSTER_HOSTS; h++) {
    assert_int_equal(topo->hosts[h].nGpus, 8);
    assert_int_equal(topo->hosts[h].nNics, 8);
    assert_true(topo->paths[h] == topo->paths[0]); /* identical hosts share one table */
  }
  /* Paths as in the single DGX: GPU0-GPU1 over NVLink, GPU0-NIC0 through one switch, across hosts NET. */
  int g0 = commTopoFind(topo, 700, COMM_TOPO_GPU, 0), g1 = commTopoFind(topo, 700, COMM_TOPO_GPU, 1);
  int n0 = commTopoFind(topo, 700, COMM_TOPO_NIC, 0), far = commTopoFind(topo, 3, COMM_TOPO_GPU, 5);
  assert_int_equal(commTopoPathOf(topo, g0, g1).type, COMM_PATH_NVL);
  assert_int_equal(commTopoPathOf(topo, g0, n0).type, COMM_PATH_PIX);
  assert_int_equal(commTopoPathOf(topo, g0, far).type, COMM_PATH_NET);
  int nics[8];
  assert_int_equal(commTopoNicsByDistance(topo, g1, nics, 8), 8);
  assert_int_equal(nics[0], commTopoFind(topo, 700, COMM_TOPO_NIC, 1));

  /* One rank per GPU, node = host: every ring is a permutation with the nodes in order, each node's
   * segment on NVLink, entering node v on channel c at the GPU of NIC c (as for one DGX). */
  int nRanks = CLUSTER_HOSTS * 8, nCh = 2;
  commTopoRank* ranks = calloc((size_t)nRanks, sizeof(*ranks));
  int* rings = calloc((size_t)nRanks * nCh, sizeof(int));
  char* seen = calloc((size_t)nRanks, 1);
  assert_true(ranks && rings && seen);
  for (int r = 0; r < nRanks; r++)
    ranks[r] = (commTopoRank){r / 8, commTopoFind(topo, r / 8, COMM_TOPO_GPU, r % 8), r / 8};
  assert_int_equal(commTopoRings(topo, ranks, nRanks, CLUSTER_HOSTS, nCh, rings), commSuccess);
  for (int c = 0; c < nCh; c++) {
    const int* ring = rings + (size_t)c * nRanks;
    memset(seen, 0, (size_t)nRanks);
    for (int i = 0; i < nRanks; i++) {
      assert_true(ring[i] >= 0 && ring[i] < nRanks && !seen[ring[i]]);
      seen[ring[i]] = 1;
      assert_int_equal(ranks[ring[i]].node, i / 8);
      assert_int_equal(ring[i] % 8, ring[i % 8] % 8); /* every node ordered like node 0 */
      if (i % 8 < 7)
        assert_int_equal(commTopoPathOf(topo, ranks[ring[i]].dev, ranks[ring[i + 1]].dev).type, COMM_PATH_NVL);
    }
    assert_int_equal(ring[0] % 8, c);
  }
  free(seen);
  free(rings);
  free(ranks);
  commTopoFree(topo);
}

/* WIDE_HOSTS hosts of 1,022 nodes; host h's bridges have bandwidth 16 + h, so no two share paths. */
static commTopo* loadWide(void) {
  char path[512];
  FILE* f = tmpFile(path, sizeof(path));
  fprintf(f, "<topology version=\"1\">\n");
  for (int h = 0; h < WIDE_HOSTS; h++) {
    fprintf(f, "<host name=\"wide%d\">\n", h);
    for (int c = 0; c < 2; c++) {
      fprintf(f, "<cpu numa=\"%d\" arch=\"x86_64\">\n", c);
      for (int b = 0; c == 0 && b < 3; b++) fprintf(f, "<pci busid=\"%04x:f0:00.0\" bw=\"%d\"/>\n", b, 16 + h);
      for (int g = c; g < WIDE_GROUPS; g += 2) {
        fprintf(f, "<pci busid=\"%04x:10:00.0\" kind=\"switch\" bw=\"63\">\n", g);
        for (int k = 0; k < 2; k++)
          fprintf(
              f, "<gpu busid=\"%04x:1%d:00.0\" bw=\"63\"><nvlink target=\"nvswitch\" count=\"18\" bw=\"450\"/></gpu>\n",
              g, k + 1);
        fprintf(f, "<nic busid=\"%04x:13:00.0\" name=\"mlx5_%d\" speed=\"400000\" bw=\"63\"/></pci>\n", g, g);
      }
      fprintf(f, "</cpu>\n");
    }
    fprintf(f, "</host>\n");
  }
  fprintf(f, "</topology>\n");
  assert_int_equal(fclose(f), 0);
  commTopo* topo = NULL;
  assert_int_equal(commTopoLoadXml(path, &topo), commSuccess);
  unlink(path);
  return topo;
}

static void test_wide_hosts(void** state) {
  (void)state;
  commTopo* topo = loadWide();
  assert_int_equal(topo->nHosts, WIDE_HOSTS);
  for (int h = 0; h < WIDE_HOSTS; h++) {
    const commTopoHost* host = &topo->hosts[h];
    assert_int_equal(host->nNodes, 1022);
    assert_int_equal(host->nGpus, 2 * WIDE_GROUPS);
    assert_int_equal(host->nNics, WIDE_GROUPS);
    if (h > 0) assert_true(topo->paths[h] != topo->paths[h - 1]);
    /* GPUs of one switch: NVLink (through the NVSwitch); a GPU and its switch's NIC: PIX; a GPU and a NIC
     * below the other CPU: SYS; a CPU and a bridge of its own: PHB at the bridge's bandwidth. */
    int g0 = commTopoFind(topo, h, COMM_TOPO_GPU, 0), g1 = commTopoFind(topo, h, COMM_TOPO_GPU, 1);
    int far = commTopoFind(topo, h, COMM_TOPO_GPU, 2 * WIDE_GROUPS - 1);
    int nic0 = commTopoFind(topo, h, COMM_TOPO_NIC, 0), nicFar = commTopoFind(topo, h, COMM_TOPO_NIC, WIDE_GROUPS / 2);
    commTopoPath p = commTopoPathOf(topo, g0, g1);
    assert_int_equal(p.type, COMM_PATH_NVL);
    assert_int_equal(p.hops, 2);
    assert_int_equal(commTopoPathOf(topo, g0, far).type, COMM_PATH_NVL);
    assert_int_equal(commTopoPathOf(topo, g0, nic0).type, COMM_PATH_PIX);
    assert_true(commTopoCpuOf(topo, nicFar) != commTopoCpuOf(topo, g0));
    assert_int_equal(commTopoPathOf(topo, g0, nicFar).type, COMM_PATH_SYS);
    int cpu0 = commTopoFind(topo, h, COMM_TOPO_CPU, 0), br = commTopoFind(topo, h, COMM_TOPO_PCI, 0);
    p = commTopoPathOf(topo, cpu0, br);
    assert_int_equal(p.type, COMM_PATH_PHB);
    assert_true(p.bw == (float)(16 + h));
    int nics[4];
    assert_int_equal(commTopoNicsByDistance(topo, g1, nics, 4), 4);
    assert_int_equal(nics[0], nic0);
  }
  /* Ring order on node 3 (one rank per GPU): a permutation of its ranks, starting at GPU 0 (nearest NIC 0)
   * on channel 0, and agreeing with commTopoRings. */
  int m = 2 * WIDE_GROUPS, nRanks = m * WIDE_HOSTS;
  commTopoRank* ranks = calloc((size_t)nRanks, sizeof(*ranks));
  int* orders = calloc((size_t)nRanks * 4, sizeof(int));
  int* rings = calloc((size_t)nRanks * 4, sizeof(int));
  char* seen = calloc((size_t)m, 1);
  assert_true(ranks && orders && rings && seen);
  for (int r = 0; r < nRanks; r++)
    ranks[r] = (commTopoRank){r / m, commTopoFind(topo, r / m, COMM_TOPO_GPU, r % m), r / m};
  assert_int_equal(commTopoNodeOrders(topo, ranks, nRanks, 3, 0, 4, orders), m);
  assert_int_equal(commTopoRings(topo, ranks, nRanks, WIDE_HOSTS, 4, rings), commSuccess);
  for (int c = 0; c < 4; c++) {
    memset(seen, 0, (size_t)m);
    for (int i = 0; i < m; i++) {
      int r = orders[c * m + i];
      assert_int_equal(ranks[r].node, 3);
      assert_false(seen[r - 3 * m]);
      seen[r - 3 * m] = 1;
      assert_int_equal(r, rings[(size_t)c * nRanks + 3 * m + i]);
    }
    int one[2 * WIDE_GROUPS];
    assert_int_equal(commTopoNodeOrder(topo, ranks, nRanks, 3, c, one), m);
    assert_memory_equal(one, orders + c * m, sizeof(int) * (size_t)m);
  }
  assert_int_equal(orders[0], 3 * m);
  free(seen);
  free(rings);
  free(orders);
  free(ranks);
  commTopoFree(topo);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cluster_1024_hosts),
      cmocka_unit_test(test_wide_hosts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
