/* Topology files (src/topo/xml.c): round trips, the sample machines, and parse errors with their lines. */
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
#include "topo.h"

/* The source tree: COMM_SOURCE_DIR when the build defines it, else derived from this file's path. */
static const char* sourceDir(void) {
  static char dir[4096];
#ifdef COMM_SOURCE_DIR
  snprintf(dir, sizeof(dir), "%s", COMM_SOURCE_DIR);
#else
  snprintf(dir, sizeof(dir), "%s", __FILE__);
  char* cut = strstr(dir, "tests/unit/test_topo_xml.c");
  if (cut) *cut = '\0';
  else snprintf(dir, sizeof(dir), ".");
  size_t n = strlen(dir);
  if (n > 1 && dir[n - 1] == '/') dir[n - 1] = '\0';
  if (dir[0] == '\0') snprintf(dir, sizeof(dir), ".");
#endif
  return dir;
}

static char* samplePath(const char* name) {
  static char path[4200];
  snprintf(path, sizeof(path), "%s/tests/topo/%s", sourceDir(), name);
  return path;
}

static char* readAll(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  assert_non_null(f);
  char* buf = NULL;
  size_t cap = 0;
  *len = 0;
  for (;;) {
    if (*len == cap) {
      cap = cap ? cap * 2 : 4096;
      buf = realloc(buf, cap + 1);
      assert_non_null(buf);
    }
    size_t got = fread(buf + *len, 1, cap - *len, f);
    *len += got;
    if (got == 0) break;
  }
  fclose(f);
  buf[*len] = '\0';
  return buf;
}

/* The canonical text of a topology (malloc'd). */
static char* writeToString(const commTopo* topo, size_t* len) {
  char* buf = NULL;
  FILE* f = open_memstream(&buf, len);
  assert_non_null(f);
  assert_int_equal(commTopoWriteXml(topo, f), commSuccess);
  fclose(f);
  return buf;
}

static commTopo* parseOk(const char* text) {
  commTopo* topo = NULL;
  commLogClearLastWarn();
  commResult_t res = commTopoParseXml(text, strlen(text), "test.xml", &topo);
  if (res != commSuccess) fprintf(stderr, "unexpected parse error: %s\n", commLogLastWarn());
  assert_int_equal(res, commSuccess);
  assert_non_null(topo);
  return topo;
}

static int countLinks(const commTopo* topo, int type) {
  int n = 0;
  for (int l = 0; l < topo->nLinks; l++) n += topo->links[l].type == type;
  return n;
}

/* ---- Round trips ---- */

static void roundTrip(const char* name) {
  size_t fileLen, outLen;
  char* file = readAll(samplePath(name), &fileLen);
  commTopo* topo = NULL;
  assert_int_equal(commTopoLoadXml(samplePath(name), &topo), commSuccess);
  char* out = writeToString(topo, &outLen);
  if (outLen != fileLen || memcmp(out, file, fileLen) != 0)
    fprintf(stderr, "%s: writer output differs:\n%s", name, out);
  assert_int_equal(outLen, fileLen);
  assert_memory_equal(out, file, fileLen);
  /* And through a file: dump -> load -> write. */
  char tmp[] = "/tmp/test_topo_xml_XXXXXX";
  int fd = mkstemp(tmp);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(commTopoDumpXml(topo, tmp), commSuccess);
  commTopo* again = NULL;
  assert_int_equal(commTopoLoadXml(tmp, &again), commSuccess);
  size_t againLen;
  char* out2 = writeToString(again, &againLen);
  assert_int_equal(againLen, fileLen);
  assert_memory_equal(out2, file, fileLen);
  unlink(tmp);
  free(out2);
  free(out);
  free(file);
  commTopoFree(again);
  commTopoFree(topo);
}

static void test_roundtrip_dgx(void** state) {
  (void)state;
  roundTrip("dgx_h100.xml");
}
static void test_roundtrip_pcie(void** state) {
  (void)state;
  roundTrip("pcie_4gpu.xml");
}
static void test_roundtrip_cluster(void** state) {
  (void)state;
  roundTrip("cluster_4x_dgx.xml");
}

/* ---- The sample machines ---- */

static void test_dgx_contents(void** state) {
  (void)state;
  commTopo* topo = NULL;
  assert_int_equal(commTopoLoadXml(samplePath("dgx_h100.xml"), &topo), commSuccess);
  assert_int_equal(topo->nHosts, 1);
  assert_string_equal(topo->hosts[0].name, "dgx-h100");
  assert_int_equal(topo->hosts[0].nCpus, 2);
  assert_int_equal(topo->hosts[0].nGpus, 8);
  assert_int_equal(topo->hosts[0].nNics, 8);
  assert_true(topo->hosts[0].cpuLinkBw == 40.0);
  int nvs = 0;
  for (int i = 0; i < topo->nNodes; i++) nvs += topo->nodes[i].type == COMM_TOPO_NVS;
  assert_int_equal(nvs, 1);
  assert_int_equal(countLinks(topo, COMM_LINK_NVL), 8);
  int cpu1 = commTopoFind(topo, 0, COMM_TOPO_CPU, 1);
  assert_true(cpu1 >= 0);
  assert_int_equal(topo->nodes[cpu1].u.cpu.numa, 1);
  assert_string_equal(topo->nodes[cpu1].u.cpu.cpus, "56-111,168-223");
  assert_string_equal(topo->nodes[cpu1].u.cpu.arch, "x86_64");
  assert_string_equal(topo->nodes[cpu1].u.cpu.vendor, "GenuineIntel");
  assert_int_equal(topo->nodes[cpu1].u.cpu.nCores, 56);
  int gpu[8], nic[8];
  for (int i = 0; i < 8; i++) {
    gpu[i] = commTopoFind(topo, 0, COMM_TOPO_GPU, i);
    nic[i] = commTopoFind(topo, 0, COMM_TOPO_NIC, i);
    assert_true(gpu[i] >= 0 && nic[i] >= 0);
    const commTopoNode* g = &topo->nodes[gpu[i]];
    const commTopoNode* n = &topo->nodes[nic[i]];
    assert_int_equal(g->u.gpu.dev, i);
    assert_int_equal(g->u.gpu.sm, 90);
    assert_int_equal(g->u.gpu.memMB, 81559);
    assert_string_equal(g->name, "NVIDIA H100 80GB HBM3");
    char want[32];
    snprintf(want, sizeof(want), "mlx5_%d", i);
    assert_string_equal(n->name, want);
    assert_int_equal(n->u.nic.link, COMM_NIC_IB);
    assert_int_equal(n->u.nic.port, 1);
    assert_int_equal(n->u.nic.speedMbps, 400000);
    assert_int_equal(n->u.nic.gdr, 1);
    assert_true(n->u.nic.guid != 0);
    assert_int_equal(strncmp(n->u.nic.netdev, "ibp", 3), 0);
    assert_int_equal(commTopoCpuOf(topo, gpu[i]), commTopoFind(topo, 0, COMM_TOPO_CPU, i / 4));
  }
  assert_string_equal(topo->nodes[gpu[0]].busId, "0000:18:00.0");
  assert_int_equal(commTopoFindBusId(topo, 0, "18:00.0"), gpu[0]);
  assert_string_equal(topo->nodes[nic[0]].u.nic.netdev, "ibp23s0");
  /* GPU i and NIC i share a switch; pairs of them a top switch; fours a CPU. */
  assert_int_equal(commTopoPathOf(topo, gpu[0], nic[0]).type, COMM_PATH_PIX);
  assert_int_equal(commTopoPathOf(topo, gpu[0], nic[1]).type, COMM_PATH_PXB);
  assert_int_equal(commTopoPathOf(topo, gpu[0], nic[2]).type, COMM_PATH_PHB);
  assert_int_equal(commTopoPathOf(topo, gpu[0], nic[4]).type, COMM_PATH_SYS);
  assert_int_equal(commTopoPathOf(topo, gpu[0], gpu[7]).type, COMM_PATH_NVL);
  commTopoFree(topo);
}

static void test_pcie_contents(void** state) {
  (void)state;
  commTopo* topo = NULL;
  assert_int_equal(commTopoLoadXml(samplePath("pcie_4gpu.xml"), &topo), commSuccess);
  assert_int_equal(topo->nHosts, 1);
  assert_string_equal(topo->hosts[0].name, "pcie4");
  assert_int_equal(topo->hosts[0].nCpus, 2);
  assert_int_equal(topo->hosts[0].nGpus, 4);
  assert_int_equal(topo->hosts[0].nNics, 2);
  assert_int_equal(countLinks(topo, COMM_LINK_NVL), 0);
  int mlx = commTopoFind(topo, 0, COMM_TOPO_NIC, 0), eth = commTopoFind(topo, 0, COMM_TOPO_NIC, 1);
  assert_string_equal(topo->nodes[mlx].name, "mlx5_0");
  assert_int_equal(topo->nodes[mlx].u.nic.link, COMM_NIC_ROCE);
  assert_string_equal(topo->nodes[mlx].u.nic.netdev, "enp23s0f0np0");
  assert_int_equal(topo->nodes[mlx].u.nic.speedMbps, 100000);
  assert_string_equal(topo->nodes[eth].name, "eth0");
  assert_string_equal(topo->nodes[eth].busId, "");
  assert_string_equal(topo->nodes[eth].u.nic.netdev, "eth0"); /* a netdev is its own netdev */
  assert_int_equal(topo->nodes[eth].u.nic.link, COMM_NIC_ETH);
  assert_int_equal(topo->nodes[eth].u.nic.gdr, 0);
  assert_int_equal(topo->nodes[topo->nodes[eth].parent].type, COMM_TOPO_CPU);
  int g0 = commTopoFind(topo, 0, COMM_TOPO_GPU, 0), g1 = commTopoFind(topo, 0, COMM_TOPO_GPU, 1);
  int g2 = commTopoFind(topo, 0, COMM_TOPO_GPU, 2);
  assert_int_equal(topo->nodes[g2].u.gpu.sm, 89);
  assert_int_equal(commTopoPathOf(topo, g0, g1).type, COMM_PATH_PIX);
  assert_int_equal(commTopoPathOf(topo, g0, g2).type, COMM_PATH_SYS);
  assert_int_equal(commTopoPathOf(topo, g0, mlx).type, COMM_PATH_PIX);
  assert_int_equal(commTopoPathOf(topo, g2, mlx).type, COMM_PATH_SYS);
  commTopoFree(topo);
}

static void test_cluster_contents(void** state) {
  (void)state;
  commTopo* topo = NULL;
  assert_int_equal(commTopoLoadXml(samplePath("cluster_4x_dgx.xml"), &topo), commSuccess);
  assert_int_equal(topo->nHosts, 4);
  for (int h = 0; h < 4; h++) {
    char want[32];
    snprintf(want, sizeof(want), "node%d", h);
    assert_string_equal(topo->hosts[h].name, want);
    assert_int_equal(topo->hosts[h].nCpus, 2);
    assert_int_equal(topo->hosts[h].nGpus, 8);
    assert_int_equal(topo->hosts[h].nNics, 8);
    /* The same bus ids on every host: each resolves within its own host. */
    int g = commTopoFindBusId(topo, h, "0000:18:00.0");
    assert_true(g >= 0);
    assert_int_equal(topo->nodes[g].host, h);
  }
  assert_int_equal(countLinks(topo, COMM_LINK_NVL), 32);
  int a = commTopoFind(topo, 0, COMM_TOPO_GPU, 0), b = commTopoFind(topo, 3, COMM_TOPO_GPU, 0);
  assert_int_equal(commTopoPathOf(topo, a, b).type, COMM_PATH_NET);
  commTopoFree(topo);
}

/* ---- Reader details ---- */

#define HEAD "<topology version=\"1\">\n<host name=\"h\">\n<cpu numa=\"0\">\n" /* lines 1-3 */
#define TAIL "</cpu>\n</host>\n</topology>\n"

static void test_nvlink_forward_reference(void** state) {
  (void)state;
  /* GPU0 names GPU1 (short, upper-case bus id) before GPU1 appears; GPU1 names GPU0 back: one bundle. */
  const char* text = "<topology version='1'>\n"
                     " <host name='h'>\n"
                     "  <cpu numa='0'>\n"
                     "   <gpu busid='0000:01:00.0' dev='0'>\n"
                     "    <nvlink target='0A:00.0' count='4' bw='100'/>\n"
                     "   </gpu>\n"
                     "   <gpu busid='0000:0a:00.0' dev='1'><nvlink target='0000:01:00.0' count='2' bw='50.0'/></gpu>\n"
                     "   <gpu busid='0000:0b:00.0' dev='2'><nvlink target='nvswitch' count='1'/></gpu>\n"
                     "  </cpu>\n"
                     " </host>\n"
                     "</topology>\n";
  commTopo* topo = parseOk(text);
  int g0 = commTopoFind(topo, 0, COMM_TOPO_GPU, 0), g1 = commTopoFind(topo, 0, COMM_TOPO_GPU, 1);
  assert_string_equal(topo->nodes[g1].busId, "0000:0a:00.0");
  assert_int_equal(countLinks(topo, COMM_LINK_NVL), 2);
  int found = 0;
  for (int l = 0; l < topo->nLinks; l++) {
    const commTopoLink* k = &topo->links[l];
    if (k->type != COMM_LINK_NVL || topo->nodes[k->b].type == COMM_TOPO_NVS) continue;
    assert_true((k->a == g0 && k->b == g1) || (k->a == g1 && k->b == g0));
    assert_int_equal(k->count, 6);
    assert_true(k->bw == 150.0);
    found = 1;
  }
  assert_true(found);
  assert_int_equal(commTopoPathOf(topo, g0, g1).type, COMM_PATH_NVL);
  /* The writer gives the bundle once, below the GPU that declared it first. */
  size_t len;
  char* out = writeToString(topo, &len);
  assert_non_null(strstr(out, "<gpu busid=\"0000:01:00.0\" dev=\"0\">\n"
                              "        <nvlink target=\"0000:0a:00.0\" count=\"6\" bw=\"150.0\"/>\n"));
  assert_non_null(strstr(out, "<gpu busid=\"0000:0a:00.0\" dev=\"1\"/>\n"));
  assert_non_null(strstr(out, "<nvlink target=\"nvswitch\" count=\"1\"/>"));
  commTopo* again = parseOk(out);
  size_t len2;
  char* out2 = writeToString(again, &len2);
  assert_int_equal(len, len2);
  assert_memory_equal(out, out2, len);
  free(out2);
  free(out);
  commTopoFree(again);
  commTopoFree(topo);
}

static void test_entities_and_defaults(void** state) {
  (void)state;
  const char* text = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                     "<!-- a comment -- with dashes -->\n"
                     "<topology>\n"
                     "  <host name=\"a&amp;b\">\n"
                     "    <cpu name='&lt;&#65;&#x42;&gt; &quot;x&apos;'>\n"
                     "      <pci kind=\"hostbridge\"><!-- inside -->\n"
                     "        <nic name=\"ib0\" link=\"ib\" busid=\"0000:3B:00.1\" guid=\"0XAbC\" netdev=\"\"/>\n"
                     "      </pci>\n"
                     "      <gpu busid=\"00:04.0\" bw=\"0.04\"/>\n"
                     "    </cpu>\n"
                     "  </host>\n"
                     "</topology>";
  commTopo* topo = parseOk(text);
  assert_string_equal(topo->hosts[0].name, "a&b");
  int cpu = commTopoFind(topo, 0, COMM_TOPO_CPU, 0);
  assert_string_equal(topo->nodes[cpu].name, "<AB> \"x'");
  assert_int_equal(topo->nodes[cpu].u.cpu.numa, -1);
  int nic = commTopoFind(topo, 0, COMM_TOPO_NIC, 0);
  assert_string_equal(topo->nodes[nic].busId, "0000:3b:00.1");
  assert_true(topo->nodes[nic].u.nic.guid == 0xabc);
  assert_string_equal(topo->nodes[nic].u.nic.netdev, "");
  int gpu = commTopoFind(topo, 0, COMM_TOPO_GPU, 0);
  assert_string_equal(topo->nodes[gpu].busId, "0000:00:04.0");
  assert_int_equal(topo->nodes[gpu].u.gpu.dev, -1);
  size_t len;
  char* out = writeToString(topo, &len);
  const char* want =
      "<?xml version=\"1.0\"?>\n"
      "<topology version=\"1\">\n"
      "  <host name=\"a&amp;b\">\n"
      "    <cpu name=\"&lt;AB&gt; &quot;x&apos;\">\n"
      "      <pci kind=\"hostbridge\">\n"
      "        <nic busid=\"0000:3b:00.1\" name=\"ib0\" link=\"ib\" netdev=\"\" guid=\"0x0000000000000abc\"/>\n"
      "      </pci>\n"
      "      <gpu busid=\"0000:00:04.0\"/>\n"
      "    </cpu>\n"
      "  </host>\n"
      "</topology>\n";
  assert_string_equal(out, want);
  free(out);
  commTopoFree(topo);
}

/* Two ports of one NIC may share a PCI function; a GPU may not share one with a NIC. */
static void test_shared_busid(void** state) {
  (void)state;
  const char* text = HEAD "<nic busid='0000:05:00.0' name='mlx4_0' link='ib' port='1'/>\n"
                          "<nic busid='05:00.0' name='mlx4_0' link='ib' port='2' netdev='ib1'/>\n" TAIL;
  commTopo* topo = parseOk(text);
  assert_int_equal(topo->hosts[0].nNics, 2);
  commTopoFree(topo);
  const char* bad = HEAD "<nic busid='0000:05:00.0' name='mlx4_0' port='1'/>\n"
                         "<nic busid='05:00.0' name='mlx4_0' port='2'/>\n<gpu busid='05:00.0'/>\n" TAIL;
  commLogClearLastWarn();
  assert_int_equal(commTopoParseXml(bad, strlen(bad), "test.xml", &topo), commInvalidArgument);
  assert_non_null(strstr(commLogLastWarn(), "test.xml:6: duplicate bus id 0000:05:00.0"));
}

/* ---- Errors ---- */

typedef struct {
  const char* text;
  int line;
  const char* what; /* a piece of the message */
} badCase;


static const badCase badCases[] = {
    {HEAD "<gpx busid=\"0000:01:00.0\"/>\n" TAIL, 4, "unknown element <gpx>"},
    {HEAD "<gpu busid=\"0000:01:00.0\" sm=\"90\"\n     memory=\"80\"/>\n" TAIL, 5, "unknown attribute memory"},
    {HEAD "<gpu dev=\"0\"/>\n" TAIL, 4, "required attribute busid"},
    {HEAD "<gpu busid=\"0000:01:00.0\" sm=\"9x\"/>\n" TAIL, 4, "not an integer"},
    {HEAD "\n<nic name=\"mlx5_0\" gdr=\"2\"/>\n" TAIL, 5, "outside [0, 1]"},
    {HEAD "<pci>\n<gpu busid=\"0000:01:00.0\"/>\n</cpu>\n" TAIL, 6, "does not match <pci> opened on line 4"},
    {HEAD "<gpu busid=\"0000:01:00.0\"\n", 4, "unterminated tag <gpu>"},
    {HEAD "<!-- never\nclosed\n" TAIL, 4, "unterminated comment"},
    {HEAD "<gpu busid=\"0000:01:00.0\" name=\"H100\n/>\n" TAIL, 4, "unterminated string"},
    {HEAD "<gpu busid=\"0000:01:00.0\"\n sm=\"90\" sm=\"80\"/>\n" TAIL, 5, "duplicate attribute sm"},
    {HEAD "<gpu busid=\"0000:1:00.0\"/>\n" TAIL, 4, "not a PCI address"},
    {HEAD "<gpu busid=\"0000:01:20.0\"/>\n" TAIL, 4, "not a PCI address"},
    {HEAD "<gpu busid=\"0000:01:00.0\">\n<nvlink target=\"0000:02:00.0\" count=\"4\"/>\n</gpu>\n" TAIL, 5,
     "nvlink target 0000:02:00.0 not found"},
    {HEAD "<nic name=\"m\" busid=\"0000:02:00.0\"/>\n<gpu busid=\"0000:01:00.0\">\n"
          "<nvlink target=\"02:00.0\"/>\n</gpu>\n" TAIL,
     6, "is not a <gpu>"},
    {HEAD "<gpu busid=\"0000:01:00.0\"><nvlink target=\"01:00.0\"/></gpu>\n" TAIL, 4, "the GPU itself"},
    {HEAD "  hello\n" TAIL, 4, "text \"hello"},
    {"<?xml version=\"1.0\"?>\n<!DOCTYPE topology>\n<topology/>\n", 2, "DTD"},
    {HEAD "<![CDATA[x]]>\n" TAIL, 4, "CDATA"},
    {HEAD "<gpu busid=\"0000:01:00.0\" name=\"a &nbsp; b\"/>\n" TAIL, 4, "unknown entity &nbsp;"},
    {HEAD "<gpu busid=\"0000:01:00.0\" name=\"a & b\"/>\n" TAIL, 4, "'&'"},
    {HEAD "<gpu busid=\"0000:01:00.0\" name=\"&#200;\"/>\n" TAIL, 4, "ASCII"},
    {HEAD "<gpu busid=\"0000:01:00.0\" name=\"a<b\"/>\n" TAIL, 4, "'<'"},
    {"<topology version=\"1\">\n<host name=\"h\">\n<gpu busid=\"0000:01:00.0\"/>\n</host>\n</topology>\n", 3,
     "<gpu> is not allowed inside <host>"},
    {HEAD "<pci>\n<gpu busid=\"0000:01:00.0\"/>\n", 4, "<pci> is not closed"},
    {HEAD "<gpu busid=\"0000:01:00.0\"/>\n<pci busid=\"01:00.0\"/>\n" TAIL, 5, "duplicate bus id 0000:01:00.0"},
    {HEAD "<gpu busid=\"0000:01:00.0\" bw=\"nan\"/>\n" TAIL, 4, "not a number"},
    {HEAD "<gpu busid=\"0000:01:00.0\" bw=\"-1\"/>\n" TAIL, 4, "outside [0, 1000000]"},
    {HEAD "<gpu busid=\"0000:01:00.0\" bw=\"2e6\"/>\n" TAIL, 4, "outside [0, 1000000]"},
    {"<topology version=\"1\">\n<host name=\"h\">\n</host>\n</topology>\n", 2, "<host> has no <cpu>"},
    {"<topology version=\"2\">\n</topology>\n", 1, "version=2"},
    {"<topology version=\"1\">\n</topology>\n", 1, "has no <host>"},
    {"\n\n  \n", 4, "no <topology>"},
    {"", 1, "no <topology>"},
    {HEAD "<nic busid=\"0000:02:00.0\"/>\n" TAIL, 4, "required attribute name"},
    {"<topology>\n<host>\n<cpu cpus=\"0-3,7-5\"/>\n</host>\n</topology>\n", 3, "not a cpu list"},
    {"<topology>\n<host name='a'><cpu/></host>\n<host name='a'><cpu/></host>\n</topology>\n", 3,
     "duplicate host name a"},
    {HEAD "<pci kind=\"bridge\"/>\n<pci kind=\"tree\"/>\n" TAIL, 5, "not one of bridge|switch|hostbridge"},
    {HEAD "<nic name=\"m\" guid=\"abc\"/>\n" TAIL, 4, "hexadecimal"},
    {HEAD "<gpu busid=\"0000:01:00.0\"dev=\"1\"/>\n" TAIL, 4, "missing whitespace"},
    {HEAD "<gpu busid=\"0000:01:00.0\" dev=\"99999999999999999999\"/>\n" TAIL, 4, "not an integer"},
    {HEAD TAIL "<host/>\n", 7, "after the end of <topology>"},
    {HEAD "</gpu>\n" TAIL, 4, "</gpu> does not match <cpu> opened on line 3"},
    {HEAD "<?php echo ?>\n" TAIL, 4, "processing instructions"},
    {HEAD "<gpu busid=\"0000:01:00.0\" dev = 3/>\n" TAIL, 4, "expected a quoted value"},
    {"<host name=\"h\"/>\n", 1, "expected <topology>"},
};

static void test_parse_errors(void** state) {
  (void)state;
  for (size_t i = 0; i < sizeof(badCases) / sizeof(badCases[0]); i++) {
    const badCase* c = &badCases[i];
    commTopo* topo = (commTopo*)(uintptr_t)1;
    commLogClearLastWarn();
    commResult_t res = commTopoParseXml(c->text, strlen(c->text), "test.xml", &topo);
    char want[32];
    snprintf(want, sizeof(want), "test.xml:%d: ", c->line);
    const char* warn = commLogLastWarn();
    if (res != commInvalidArgument || strstr(warn, want) == NULL || strstr(warn, c->what) == NULL)
      fprintf(stderr, "case %zu: res %d, warn \"%s\", wanted \"%s...%s\"\n", i, (int)res, warn, want, c->what);
    assert_int_equal(res, commInvalidArgument);
    assert_null(topo);
    assert_non_null(strstr(warn, want));
    assert_non_null(strstr(warn, c->what));
  }
}

static void test_limits(void** state) {
  (void)state;
  /* 33 nested elements: topology, host, cpu and 30 PCI switches. */
  char text[4096] = HEAD;
  int line = 4;
  for (int i = 0; i < 30; i++, line++) strcat(text, "<pci>\n");
  commTopo* topo = NULL;
  commLogClearLastWarn();
  assert_int_equal(commTopoParseXml(text, strlen(text), "deep.xml", &topo), commInvalidArgument);
  char want[32];
  snprintf(want, sizeof(want), "deep.xml:%d: ", line - 1);
  assert_non_null(strstr(commLogLastWarn(), want));
  assert_non_null(strstr(commLogLastWarn(), "deeper than 32"));
  /* 28 switches and a GPU (32 nested elements) are fine. */
  snprintf(text, sizeof(text), HEAD);
  for (int i = 0; i < 28; i++) strcat(text, "<pci>");
  strcat(text, "<gpu busid='01:00.0'/>");
  for (int i = 0; i < 28; i++) strcat(text, "</pci>");
  strcat(text, TAIL);
  topo = parseOk(text);
  commTopoFree(topo);
  /* An attribute value longer than 1024 characters; a name longer than its field. */
  size_t n = 1200;
  char* big = malloc(n + 256);
  assert_non_null(big);
  snprintf(big, n + 256, HEAD "<gpu busid='01:00.0' name='");
  size_t o = strlen(big);
  memset(big + o, 'x', 1100);
  snprintf(big + o + 1100, n + 256 - o - 1100, "'/>\n" TAIL);
  commLogClearLastWarn();
  assert_int_equal(commTopoParseXml(big, strlen(big), "big.xml", &topo), commInvalidArgument);
  assert_non_null(strstr(commLogLastWarn(), "big.xml:4: value of name is longer than 1024"));
  snprintf(big + o + 64, n + 256 - o - 64, "'/>\n" TAIL);
  commLogClearLastWarn();
  assert_int_equal(commTopoParseXml(big, strlen(big), "big.xml", &topo), commInvalidArgument);
  assert_non_null(strstr(commLogLastWarn(), "big.xml:4: name on <gpu> is longer than 63"));
  free(big);
  /* A NUL byte in the text. */
  const char nul[] = "<topology>\n\0</topology>";
  commLogClearLastWarn();
  assert_int_equal(commTopoParseXml(nul, sizeof(nul) - 1, "nul.xml", &topo), commInvalidArgument);
  assert_non_null(strstr(commLogLastWarn(), "nul.xml:2: invalid character 0x00"));
}

/* Every error is exactly one WARN line. */
static void test_one_warn_per_error(void** state) {
  (void)state;
  char path[] = "/tmp/test_topo_xml_log_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  setenv("COMM_DEBUG", "WARN", 1);
  setenv("COMM_DEBUG_FILE", path, 1);
  commLogReset();
  size_t nCases = sizeof(badCases) / sizeof(badCases[0]);
  for (size_t i = 0; i < nCases; i++) {
    commTopo* topo = NULL;
    commTopoParseXml(badCases[i].text, strlen(badCases[i].text), "test.xml", &topo);
  }
  unsetenv("COMM_DEBUG_FILE");
  unsetenv("COMM_DEBUG");
  commLogReset();
  size_t len;
  char* log = readAll(path, &len);
  size_t warns = 0;
  for (const char* p = log; (p = strstr(p, " COMM WARN ")) != NULL; p++) warns++;
  if (warns != nCases) fprintf(stderr, "%s", log);
  assert_int_equal(warns, nCases);
  free(log);
  unlink(path);
}

static void test_io_errors(void** state) {
  (void)state;
  commTopo* topo = (commTopo*)(uintptr_t)1;
  commLogClearLastWarn();
  assert_int_equal(commTopoLoadXml("/nonexistent/dir/topo.xml", &topo), commSystemError);
  assert_null(topo);
  assert_non_null(strstr(commLogLastWarn(), "/nonexistent/dir/topo.xml"));
  assert_non_null(strstr(commLogLastWarn(), "No such file"));
  /* Writing an unfinished topology is refused. */
  commTopo* raw = NULL;
  assert_int_equal(commTopoCreate(&raw), commSuccess);
  FILE* f = fopen("/dev/null", "w");
  assert_non_null(f);
  assert_int_equal(commTopoWriteXml(raw, f), commInvalidArgument);
  fclose(f);
  commTopoFree(raw);
  /* Dumping into a directory that does not exist. */
  assert_int_equal(commTopoLoadXml(samplePath("pcie_4gpu.xml"), &topo), commSuccess);
  commLogClearLastWarn();
  assert_int_equal(commTopoDumpXml(topo, "/nonexistent/dir/out.xml"), commSystemError);
  assert_non_null(strstr(commLogLastWarn(), "/nonexistent/dir/out.xml"));
  commTopoFree(topo);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip_dgx),
      cmocka_unit_test(test_roundtrip_pcie),
      cmocka_unit_test(test_roundtrip_cluster),
      cmocka_unit_test(test_dgx_contents),
      cmocka_unit_test(test_pcie_contents),
      cmocka_unit_test(test_cluster_contents),
      cmocka_unit_test(test_nvlink_forward_reference),
      cmocka_unit_test(test_entities_and_defaults),
      cmocka_unit_test(test_shared_busid),
      cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_one_warn_per_error),
      cmocka_unit_test(test_io_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
