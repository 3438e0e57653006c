/* NCCL's topology format (src/topo/nccl_xml*.c): the sample files of tests/topo/ (a DGX H100-class host, a
 * cloud VM) load into the model they describe (GPUs, NICs, NUMA affinity, NVLinks, the NIC nearest each GPU,
 * GPUDirect flags), the DGX one into the same paths as libcomm's own description of that machine; every
 * sample, in either format, written in NCCL's format and read back is the same model, and written again the
 * same text; what NCCL's format has and libcomm does not use is skipped; malformed files are refused with
 * one WARN naming the line; COMM_TOPO_DUMP_FILE writes NCCL's format when asked to; NCCL_TOPO_FILE loads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "debug.h"
#include "graph_internal.h"
#include "param.h"
#include "topo.h"
#include "topo_test_util.h"

/* ---- Helpers ---- */

static char* readAll(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  assert_non_null(f);
  char* buf = NULL;
  size_t cap = 0, n = 0, got;
  do {
    if (n + 4096 + 1 > cap) {
      cap = (n + 4096 + 1) * 2;
      buf = realloc(buf, cap);
      assert_non_null(buf);
    }
    got = fread(buf + n, 1, 4096, f);
    n += got;
  } while (got > 0);
  fclose(f);
  buf[n] = '\0';
  *len = n;
  return buf;
}

static char* writeText(const commTopo* topo, int nccl, size_t* len) {
  char* buf = NULL;
  FILE* f = open_memstream(&buf, len);
  assert_non_null(f);
  assert_int_equal(nccl ? commTopoWriteNcclXml(topo, f) : commTopoWriteXml(topo, f), commSuccess);
  assert_int_equal(fclose(f), 0);
  return buf;
}

static commTopo* parseNccl(const char* text, const char* source) {
  commTopo* topo = NULL;
  commResult_t res = commTopoParseXml(text, strlen(text), source, &topo);
  if (res != commSuccess) fprintf(stderr, "%s: %s\n", source, commLogLastWarn());
  assert_int_equal(res, commSuccess);
  assert_non_null(topo);
  return topo;
}

/* The link between nodes a and b of type `type` (-1: none). */
static int linkOf(const commTopo* topo, int a, int b, int type) {
  const commTopoNode* n = &topo->nodes[a];
  for (int k = 0; k < n->nLinks; k++) {
    const commTopoLink* l = &topo->links[topo->adj[n->firstLink + k]];
    if (l->type == type && ((l->a == a && l->b == b) || (l->a == b && l->b == a))) return topo->adj[n->firstLink + k];
  }
  return -1;
}

static int nvsOf(const commTopo* topo, int host) {
  const commTopoHost* h = &topo->hosts[host];
  for (int i = h->firstNode; i < h->firstNode + h->nNodes; i++)
    if (topo->nodes[i].type == COMM_TOPO_NVS) return i;
  return -1;
}

static void expectNvs(const commTopo* topo, int g, int count, double bw) {
  int l = linkOf(topo, g, nvsOf(topo, topo->nodes[g].host), COMM_LINK_NVL);
  assert_true(l >= 0);
  assert_int_equal(topo->links[l].count, count);
  assertNear(topo->links[l].bw, bw);
}

/* The nearest NIC of a GPU and the class of the path to it. */
static void expectNearestNic(const commTopo* topo, int g, const char* name, int pathType) {
  int nics[64];
  int n = commTopoNicsByDistance(topo, g, nics, 64);
  assert_true(n > 0);
  if (strcmp(topo->nodes[nics[0]].name, name) != 0)
    fprintf(stderr, "GPU %d: nearest NIC %s, expected %s\n", topo->nodes[g].index, topo->nodes[nics[0]].name, name);
  assert_string_equal(topo->nodes[nics[0]].name, name);
  expectPath(topo, g, nics[0], pathType);
}

/* Same devices, tree, NVLinks and paths for what NCCL's format can say (not names, memory, netdevs, cores,
 * the CPU link, host names). Nodes are compared by type and index. */
static void expectSameModel(const commTopo* a, const commTopo* b) {
  assert_int_equal(a->nHosts, b->nHosts);
  for (int h = 0; h < a->nHosts; h++) {
    const commTopoHost *ha = &a->hosts[h], *hb = &b->hosts[h];
    for (int t = 0; t < COMM_TOPO_NODE_TYPES; t++)
      assert_int_equal(ha->typeFirst[t + 1] - ha->typeFirst[t], hb->typeFirst[t + 1] - hb->typeFirst[t]);
    for (int t = 0; t < COMM_TOPO_NODE_TYPES; t++)
      for (int i = 0; i < ha->typeFirst[t + 1] - ha->typeFirst[t]; i++) {
        int x = a->typeNodes[ha->typeFirst[t] + i], y = b->typeNodes[hb->typeFirst[t] + i];
        const commTopoNode *nx = &a->nodes[x], *ny = &b->nodes[y];
        assert_string_equal(nx->busId, ny->busId);
        int px = nx->parent, py = ny->parent;
        assert_int_equal(px < 0, py < 0);
        if (px >= 0) {
          assert_int_equal(a->nodes[px].type, b->nodes[py].type);
          assert_int_equal(a->nodes[px].index, b->nodes[py].index);
        }
        if (nx->busId[0] && t != COMM_TOPO_CPU) assert_true(nx->bw - ny->bw < 0.05 && ny->bw - nx->bw < 0.05);
        if (t == COMM_TOPO_CPU) {
          assert_int_equal(nx->u.cpu.numa, ny->u.cpu.numa);
          assert_string_equal(nx->u.cpu.cpus, ny->u.cpu.cpus);
          assert_string_equal(nx->u.cpu.arch, ny->u.cpu.arch);
          assert_string_equal(nx->u.cpu.vendor, ny->u.cpu.vendor);
          if (nx->u.cpu.family && ny->u.cpu.family) assert_int_equal(nx->u.cpu.family, ny->u.cpu.family);
        } else if (t == COMM_TOPO_GPU) {
          assert_int_equal(nx->u.gpu.dev, ny->u.gpu.dev);
          assert_int_equal(nx->u.gpu.sm, ny->u.gpu.sm);
        } else if (t == COMM_TOPO_NIC) {
          assert_string_equal(nx->name, ny->name);
          assert_int_equal(nx->u.nic.speedMbps, ny->u.nic.speedMbps);
          assert_int_equal(nx->u.nic.port, ny->u.nic.port);
          assert_true(nx->u.nic.guid == ny->u.nic.guid);
          assert_int_equal(nx->u.nic.gdr, ny->u.nic.gdr);
        } else if (t == COMM_TOPO_PCI && nx->u.pci.gen) {
          assert_int_equal(nx->u.pci.gen, ny->u.pci.gen);
          assert_int_equal(nx->u.pci.width, ny->u.pci.width);
        }
      }
    for (int i = 0; i < ha->nNodes; i++)
      for (int j = 0; j < ha->nNodes; j++) {
        const commTopoNode *ni = &a->nodes[ha->firstNode + i], *nj = &a->nodes[ha->firstNode + j];
        if (ni->type == COMM_TOPO_PCI || nj->type == COMM_TOPO_PCI || ni->type == COMM_TOPO_NVS ||
            nj->type == COMM_TOPO_NVS)
          continue;
        int x = commTopoFind(b, h, ni->type, ni->index), y = commTopoFind(b, h, nj->type, nj->index);
        commTopoPath pa = commTopoPathOf(a, ha->firstNode + i, ha->firstNode + j), pb = commTopoPathOf(b, x, y);
        assert_int_equal(pa.type, pb.type);
        if (ni->type == COMM_TOPO_GPU && nj->type == COMM_TOPO_GPU)
          assert_true(pa.bw - pb.bw < 0.05 && pb.bw - pa.bw < 0.05);
      }
  }
}

/* ---- The samples ---- */

static void test_dgx(void** state) {
  (void)state;
  commTopo* topo = loadTopo("nccl_dgx_h100.xml");
  assert_int_equal(topo->nHosts, 1);
  const commTopoHost* h = &topo->hosts[0];
  assert_int_equal(h->nCpus, 2);
  assert_int_equal(h->nGpus, 8);
  assert_int_equal(h->nNics, 8);
  const char* cpus[2] = {"0-55,112-167", "56-111,168-223"};
  for (int c = 0; c < 2; c++) {
    const commTopoNode* n = &topo->nodes[cpu(topo, 0, c)];
    assert_int_equal(n->u.cpu.numa, c);
    assert_string_equal(n->u.cpu.cpus, cpus[c]);
    assert_string_equal(n->u.cpu.arch, "x86_64");
    assert_string_equal(n->u.cpu.vendor, "GenuineIntel");
    assert_int_equal(n->u.cpu.family, 6);
    assert_int_equal(n->u.cpu.model, 143);
  }
  for (int i = 0; i < 8; i++) {
    int g = gpu(topo, 0, i), n = nic(topo, 0, i);
    char name[16];
    snprintf(name, sizeof(name), "mlx5_%d", i);
    assert_int_equal(topo->nodes[g].u.gpu.dev, i);
    assert_int_equal(topo->nodes[g].u.gpu.sm, 90);
    assert_int_equal(topo->nodes[commTopoCpuOf(topo, g)].u.cpu.numa, i / 4);
    assertNear(topo->nodes[g].bw, commTopoPciBw(32.0, 16));
    assert_string_equal(topo->nodes[n].name, name);
    assert_int_equal(topo->nodes[n].u.nic.speedMbps, 400000);
    assert_int_equal(topo->nodes[n].u.nic.link, COMM_NIC_IB);
    assert_int_equal(topo->nodes[n].u.nic.port, 1);
    assert_int_equal(topo->nodes[n].u.nic.gdr, 1);
    expectNvs(topo, g, 18, 450.0);
    expectNearestNic(topo, g, name, COMM_PATH_PIX);
  }
  assert_true(topo->nodes[nic(topo, 0, 0)].u.nic.guid == 0x946dae0300f1c310ull);
  expectPath(topo, gpu(topo, 0, 0), gpu(topo, 0, 7), COMM_PATH_NVL);
  expectPath(topo, gpu(topo, 0, 0), nic(topo, 0, 1), COMM_PATH_PXB);
  expectPath(topo, gpu(topo, 0, 0), nic(topo, 0, 2), COMM_PATH_PHB);
  expectPath(topo, gpu(topo, 0, 0), nic(topo, 0, 4), COMM_PATH_SYS);
  /* libcomm's own description of the same machine has the same paths. */
  commTopo* own = loadTopo("dgx_h100.xml");
  expectSameModel(own, topo);
  commTopoFree(own);
  commTopoFree(topo);
}

static void test_cloud_vm(void** state) {
  (void)state;
  commTopo* topo = loadTopo("nccl_cloud_vm.xml");
  assert_int_equal(topo->nHosts, 1);
  const commTopoHost* h = &topo->hosts[0];
  assert_int_equal(h->nCpus, 2);
  assert_int_equal(h->nGpus, 8);
  assert_int_equal(h->nNics, 9); /* eight InfiniBand NICs and the VM's Ethernet, once */
  assert_string_equal(topo->nodes[cpu(topo, 0, 0)].u.cpu.cpus, "0-47");
  assert_string_equal(topo->nodes[cpu(topo, 0, 1)].u.cpu.cpus, "48-95");
  int eth = -1;
  for (int i = 0; i < h->nNics; i++) {
    const commTopoNode* n = &topo->nodes[nic(topo, 0, i)];
    if (strcmp(n->name, "eth0") == 0) {
      assert_int_equal(eth, -1);
      eth = nic(topo, 0, i);
      continue;
    }
    assert_int_equal(n->u.nic.link, COMM_NIC_IB);
    assert_int_equal(n->u.nic.gdr, 1);
    assert_int_equal(n->u.nic.speedMbps, 400000);
  }
  assert_true(eth >= 0);
  assert_string_equal(topo->nodes[eth].busId, "");
  assert_int_equal(topo->nodes[eth].u.nic.link, COMM_NIC_ETH);
  assert_int_equal(topo->nodes[eth].u.nic.gdr, 0);
  assert_int_equal(topo->nodes[eth].u.nic.speedMbps, 40000);
  assert_int_equal(topo->nodes[eth].parent, cpu(topo, 0, 0));
  for (int i = 0; i < 8; i++) {
    int g = gpu(topo, 0, i);
    char name[16], bus[16];
    snprintf(name, sizeof(name), "mlx5_ib%d", i);
    snprintf(bus, sizeof(bus), "%04x:00:00.0", i + 1);
    assert_string_equal(topo->nodes[g].busId, bus);
    assert_int_equal(topo->nodes[commTopoCpuOf(topo, g)].u.cpu.numa, i / 4);
    expectNvs(topo, g, 18, 450.0);
    expectNearestNic(topo, g, name, COMM_PATH_PIX);
  }
  expectPath(topo, gpu(topo, 0, 0), gpu(topo, 0, 4), COMM_PATH_NVL);
  expectPath(topo, gpu(topo, 0, 0), nic(topo, 0, 1), COMM_PATH_PHB);
  expectPath(topo, gpu(topo, 0, 4), eth, COMM_PATH_SYS);
  /* NVLink between GPUs of different NUMA nodes: P2P. */
  commTopoRank ranks[2] = {{0, gpu(topo, 0, 0), 0}, {0, gpu(topo, 0, 4), 0}};
  commTopoTransportChoice ch;
  clearEnv();
  assert_int_equal(commTopoChooseTransport(topo, ranks, 2, 0, 1, &ch), commSuccess);
  assert_int_equal(ch.transport, COMM_TOPO_USE_P2P);
  commTopoFree(topo);
}

/* ---- Round trips ---- */

static void roundTrip(const char* name) {
  commTopo* a = loadTopo(name);
  size_t len1, len2;
  char* text1 = writeText(a, 1, &len1);
  assert_non_null(strstr(text1, "<system version=\"1\">"));
  commTopo* b = parseNccl(text1, name);
  expectSameModel(a, b);
  char* text2 = writeText(b, 1, &len2);
  if (len1 != len2 || memcmp(text1, text2, len1) != 0) fprintf(stderr, "%s\n---\n%s", text1, text2);
  assert_true(len1 == len2 && memcmp(text1, text2, len1) == 0);
  free(text1);
  free(text2);
  commTopoFree(a);
  commTopoFree(b);
}

static void test_round_trips(void** state) {
  (void)state;
  const char* files[] = {"nccl_dgx_h100.xml", "nccl_cloud_vm.xml", "dgx_h100.xml", "pcie_4gpu.xml",
                         "cluster_4x_dgx.xml"};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) roundTrip(files[i]);
  /* An NCCL sample in libcomm's format and back: the same model too. */
  commTopo* a = loadTopo("nccl_cloud_vm.xml");
  size_t len;
  char* text = writeText(a, 0, &len);
  commTopo* b = parseNccl(text, "libcomm's format");
  expectSameModel(a, b);
  free(text);
  commTopoFree(a);
  commTopoFree(b);
}

/* ---- What is tolerated ---- */

static const char tolerated[] =
    "<?xml version=\"1.0\"?>\n"
    "<!-- comment -->\n"
    "<system version=\"1\" name=\"vendor\">\n"
    "  <future><gpu dev=\"9\"/></future>\n"
    "  <cpu numaid=\"0\" affinity=\"f\" arch=\"arm64\" vendor=\"\" weird=\"1\">\n"
    "    <pci busid=\"0000:01:00.0\" link_speed=\"\" link_width=\"\">\n"
    "      <pci busid=\"0000:02:00.0\" class=\"0x030200\" link_speed=\"32 GT/s PCIe/s\" link_width=\"0\">\n"
    "        <gpu dev=\"0\" sm=\"80\" mlopart=\"0\"><c2c bw=\"1\" count=\"2\"/>\n"
    "          <nvlink target=\"0000:03:00.0\" count=\"12\"/><nvlink target=\"0000:00:00.0\" count=\"1\" "
    "tclass=\"0x068001\"/></gpu>\n"
    "      </pci>\n"
    "      <pci busid=\"03:00.0\" class=\"0x0302\" link_speed=\"16.0 GT/s PCIe\" link_width=\"8\">\n"
    "        <gpu dev=\"1\" sm=\"80\"><nvlink target=\"0000:02:00.0\" count=\"8\" tclass=\"0x030200\"/></gpu>\n"
    "      </pci>\n"
    "      <pci busid=\"0000:04:00.0\" class=\"0x020000\"><nic><net name=\"mlx5_0\" port=\"1\" speed=\"-1\"/>"
    "<net name=\"mlx5_0\" port=\"2\"/></nic></pci>\n"
    "      <pci busid=\"0000:05:00.0\" class=\"0x068000\"/>\n"
    "    </pci>\n"
    "    <nic><net name=\"eth0\" dev=\"2\"/></nic>\n"
    "  </cpu>\n"
    "</system>\n";

static void test_tolerated(void** state) {
  (void)state;
  commTopo* topo = parseNccl(tolerated, "tolerated");
  const commTopoHost* h = &topo->hosts[0];
  assert_int_equal(h->nGpus, 2);
  assert_int_equal(h->nNics, 3);
  assert_int_equal(h->nCpus, 1);
  const commTopoNode* c = &topo->nodes[cpu(topo, 0, 0)];
  assert_string_equal(c->u.cpu.cpus, "0-3");
  assert_string_equal(c->u.cpu.arch, "aarch64");
  int g0 = gpu(topo, 0, 0), g1 = gpu(topo, 0, 1);
  assertNear(topo->nodes[g0].bw, commTopoPciBw(32.0, 16)); /* width 0 is 16, as in NCCL */
  assertNear(topo->nodes[g1].bw, commTopoPciBw(16.0, 8));
  assertNear(topo->nodes[topo->nodes[g0].parent].bw, 0); /* unknown: the default link */
  int l = linkOf(topo, g0, g1, COMM_LINK_NVL);           /* no tclass: the target is a GPU */
  assert_true(l >= 0);
  assert_int_equal(topo->links[l].count, 8); /* the smaller count of the two ends */
  assertNear(topo->links[l].bw, 8 * 25.0);
  assert_int_equal(nvsOf(topo, 0), -1); /* the NVLink to the CPU is skipped */
  const commTopoNode* n0 = &topo->nodes[nic(topo, 0, 0)];
  const commTopoNode* n1 = &topo->nodes[nic(topo, 0, 1)];
  assert_string_equal(n0->busId, "0000:04:00.0");
  assert_string_equal(n1->busId, "0000:04:00.0"); /* two ports of one PCI function */
  assert_int_equal(n0->u.nic.speedMbps, 10000);   /* NCCL's speed for -1 */
  assert_int_equal(n1->u.nic.speedMbps, 0);       /* not said */
  assert_int_equal(n0->u.nic.link, COMM_NIC_ROCE);
  assert_int_equal(topo->nodes[nic(topo, 0, 2)].u.nic.link, COMM_NIC_ETH);
  commTopoFree(topo);
  /* The root decides the reader: libcomm's format still loads, a near miss is libcomm's error. */
  commTopoFree(loadTopo("pcie_4gpu.xml"));
  commTopo* t = NULL;
  const char* other = "<systems version=\"1\"/>";
  commLogClearLastWarn();
  assert_int_equal(commTopoParseXml(other, strlen(other), "other", &t), commInvalidArgument);
  assert_non_null(strstr(commLogLastWarn(), "unknown element <systems>"));
}

/* ---- Malformed files ---- */

typedef struct {
  const char* text;
  int line;
  const char* what;
} badCase;

#define SYS "<system version=\"1\">\n<cpu numaid=\"0\">\n" /* lines 1-2 */
#define END "</cpu>\n</system>\n"
#define GPUPCI(bus) "<pci busid=\"" bus "\" class=\"0x030200\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">"

static const badCase badCases[] = {
    {"<system version=\"2\">\n<cpu/>\n</system>\n", 1, "version=\"2\" on <system>"},
    {"<system>\n<cpu/>\n</system>\n", 1, "lacks the required attribute version"},
    {"<system version=\"1\">\n</system>\n", 1, "<system> has no <cpu>"},
    {SYS "<gpu dev=\"0\"/>\n" END, 3, "<gpu> is not allowed inside <cpu>"},
    {"<system version=\"1\">\n<cpu numaid=\"x\"/>\n</system>\n", 2, "numaid=\"x\" on <cpu> is not an integer"},
    {"<system version=\"1\">\n<cpu affinity=\"ffff,zz\"/>\n</system>\n", 2, "is not a cpu mask"},
    {"<system version=\"1\">\n<cpu\n host_hash=\"host1\"/>\n</system>\n", 3, "host_hash=\"host1\""},
    {SYS "<pci class=\"0x060400\"/>\n" END, 3, "<pci> lacks the required attribute busid"},
    {SYS "<pci busid=\"0000:17:00\"/>\n" END, 3, "is not a PCI address"},
    {SYS "<pci busid=\"0000:17:00.0\" link_width=\"x16\"/>\n" END, 3, "link_width=\"x16\" on <pci> is not an integer"},
    {SYS GPUPCI("0000:01:00.0") "<gpu/></pci>\n" GPUPCI("01:00.0") "<gpu/></pci>\n" END, 4,
     "duplicate bus id 0000:01:00.0 (also on line 3)"},
    {SYS GPUPCI("0000:01:00.0") "\n<gpu/><nic/></pci>\n" END, 3, "holds a <gpu> and a <nic>"},
    {SYS GPUPCI(
         "0000:01:00.0") "<gpu>\n<nvlink target=\"0000:02:00.0\" count=\"2\" tclass=\"0x030200\"/>\n</gpu></pci>\n" END,
     4, "is not the bus id of a <gpu> of this host"},
    {SYS GPUPCI(
         "0000:01:00.0") "<gpu>\n<nvlink target=\"0000:01:00.0\" count=\"2\" tclass=\"0x030200\"/>\n</gpu></pci>\n" END,
     4, "is the GPU itself"},
    {SYS GPUPCI("0000:01:00.0") "<gpu>\n<nvlink target=\"x\" tclass=\"0x068000\"/>\n</gpu></pci>\n" END, 4,
     "<nvlink> lacks the required attribute count"},
    {SYS GPUPCI("0000:01:00.0") "<gpu>\n<nvlink target=\"x\" count=\"5000\"/>\n</gpu></pci>\n" END, 4,
     "count=5000 on <nvlink> is outside [0, 4096]"},
    {SYS "<nic>\n<net dev=\"0\"/>\n</nic>\n" END, 4, "<net> lacks the required attribute name"},
    {SYS "<nic>\n<net name=\"mlx5_0\"\n gdr=\"2\"/>\n</nic>\n" END, 5, "gdr=2 on <net> is outside [0, 1]"},
    {SYS "<nic><net name=\"\"/></nic>\n" END, 3, "name on <net> is empty"},
    {"<system version=\"1\">\n<cpu numaid=\"0\">\n", 2, "<cpu> is not closed"},
    {SYS "</pci>\n" END, 3, "</pci> does not match <cpu> opened on line 2"},
    {"<system version=\"1\">\n<cpu numaid=\"0\" numaid=\"1\"/>\n</system>\n", 2, "duplicate attribute numaid"},
    {SYS "hello\n" END, 3, "text \"hello\" inside <cpu>"},
    {"<system version=\"1\"><cpu/></system>\n<system version=\"1\"/>\n", 2, "<system> after the end of <system>"},
    {SYS "<pci busid=\"0000:17:00.0\" class=\"0x0604zz\"/>\n" END, 3, "class=\"0x0604zz\""},
    {SYS "<nic><net name=\"a\" guid=\"0x12345678901234567\"/></nic>\n" END, 3, "guid="},
    {SYS "<pci busid='0000:17:00.0'/>\n<foo a='1' a='2'/>\n" END, 4, "duplicate attribute a"},
};

static void test_malformed(void** state) {
  (void)state;
  for (size_t i = 0; i < sizeof(badCases) / sizeof(badCases[0]); i++) {
    const badCase* c = &badCases[i];
    commTopo* topo = (commTopo*)(uintptr_t)1;
    commLogClearLastWarn();
    commResult_t res = commTopoParseXml(c->text, strlen(c->text), "bad.xml", &topo);
    char want[32];
    snprintf(want, sizeof(want), "bad.xml:%d: ", c->line);
    const char* warn = commLogLastWarn();
    if (res != commInvalidArgument || strstr(warn, want) == NULL || strstr(warn, c->what) == NULL)
      fprintf(stderr, "case %zu: res %d, warn \"%s\", wanted \"%s...%s\"\n", i, (int)res, warn, want, c->what);
    assert_int_equal(res, commInvalidArgument);
    assert_null(topo);
    assert_non_null(strstr(warn, want));
    assert_non_null(strstr(warn, c->what));
  }
}

/* Every refusal is one WARN line, and a file that loads prints no WARN (one INFO lists what is skipped). */
static void test_one_warn_per_error(void** state) {
  (void)state;
  char path[] = "/tmp/test_topo_nccl_log_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  setenv("COMM_DEBUG", "INFO", 1);
  setenv("COMM_DEBUG_FILE", path, 1);
  commLogReset();
  size_t nCases = sizeof(badCases) / sizeof(badCases[0]);
  for (size_t i = 0; i < nCases; i++) {
    commTopo* topo = NULL;
    commTopoParseXml(badCases[i].text, strlen(badCases[i].text), "bad.xml", &topo);
  }
  commTopoFree(parseNccl(tolerated, "tolerated"));
  unsetenv("COMM_DEBUG_FILE");
  unsetenv("COMM_DEBUG");
  commLogReset();
  size_t len;
  char* log = readAll(path, &len);
  size_t warns = 0, infos = 0;
  for (const char* p = log; (p = strstr(p, " COMM WARN ")) != NULL; p++) warns++;
  for (const char* p = log; (p = strstr(p, "tolerated: NCCL's topology format")) != NULL; p++) infos++;
  if (warns != nCases || infos != 1) fprintf(stderr, "%s", log);
  assert_int_equal(warns, nCases);
  assert_int_equal(infos, 1);
  const char* skipped[] = {"not used by libcomm: system.name, <future>, cpu.weird",
                           "gpu.mlopart",
                           "<c2c>",
                           "<nvlink> to a CPU",
                           "<pci> of an NVSwitch or CPU",
                           "net.dev"};
  for (size_t i = 0; i < sizeof(skipped) / sizeof(skipped[0]); i++) assert_non_null(strstr(log, skipped[i]));
  free(log);
  unlink(path);
}

/* ---- The environment ---- */

static void clearTopoEnv(void) {
  unsetenv("COMM_TOPO_DUMP_FORMAT");
  unsetenv("COMM_TOPO_DUMP_FILE");
  unsetenv("NCCL_TOPO_DUMP_FILE");
  unsetenv("COMM_TOPO_FILE");
  unsetenv("NCCL_TOPO_FILE");
}

static void test_dump_format(void** state) {
  (void)state;
  clearTopoEnv();
  assert_int_equal(commTopoDumpFormat(), COMM_TOPO_FORMAT_COMM);
  setenv("NCCL_TOPO_DUMP_FILE", "/tmp/x.xml", 1); /* an NCCL user asks for NCCL's format */
  assert_int_equal(commTopoDumpFormat(), COMM_TOPO_FORMAT_NCCL);
  setenv("COMM_TOPO_DUMP_FILE", "/tmp/y.xml", 1); /* libcomm's name wins, and its format */
  assert_int_equal(commTopoDumpFormat(), COMM_TOPO_FORMAT_COMM);
  setenv("COMM_TOPO_DUMP_FORMAT", "nccl", 1);
  assert_int_equal(commTopoDumpFormat(), COMM_TOPO_FORMAT_NCCL);
  unsetenv("COMM_TOPO_DUMP_FILE");
  setenv("COMM_TOPO_DUMP_FORMAT", "comm", 1);
  assert_int_equal(commTopoDumpFormat(), COMM_TOPO_FORMAT_COMM);
  /* commTopoDumpXml, COMM_TOPO_DUMP_FILE's writer, follows it. */
  char path[] = "/tmp/test_topo_nccl_dump_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  commTopo* topo = loadTopo("dgx_h100.xml");
  setenv("COMM_TOPO_DUMP_FORMAT", "nccl", 1);
  assert_int_equal(commTopoDumpXml(topo, path), commSuccess);
  size_t len;
  char* text = readAll(path, &len);
  assert_int_equal(strncmp(text, "<system version=\"1\">\n", 21), 0);
  free(text);
  commTopo* back = NULL;
  assert_int_equal(commTopoLoadXml(path, &back), commSuccess);
  expectSameModel(topo, back);
  commTopoFree(back);
  commTopoFree(topo);
  unlink(path);
  clearTopoEnv();
}

static void test_nccl_topo_file(void** state) {
  (void)state;
  clearTopoEnv();
  char path[4096];
  setenv("NCCL_TOPO_FILE", topoFilePath("nccl_cloud_vm.xml", path, sizeof(path)), 1);
  commTopo* topo = NULL;
  assert_int_equal(commTopoGet(&topo), commSuccess);
  assert_int_equal(topo->nHosts, 1);
  assert_int_equal(topo->hosts[0].nGpus, 8);
  assert_int_equal(topo->hosts[0].nNics, 9);
  commTopoRelease(topo);
  clearTopoEnv();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dgx),         cmocka_unit_test(test_cloud_vm),
      cmocka_unit_test(test_round_trips), cmocka_unit_test(test_tolerated),
      cmocka_unit_test(test_malformed),   cmocka_unit_test(test_one_warn_per_error),
      cmocka_unit_test(test_dump_format), cmocka_unit_test(test_nccl_topo_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
