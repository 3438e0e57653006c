/* Discovery of this machine (src/topo/discover.c): a valid, finished, deterministic topology on any
 * machine (CPU-only, VM, container, GPU server), quickly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#include "topo.h"
#include "utils.h"

static void printTopo(const commTopo* t) {
  char lab[96];
  for (int i = 0; i < t->nNodes; i++) {
    const commTopoNode* n = &t->nodes[i];
    printf("  [%2d] %-16s parent %2d busid %-12s bw %6.2f", i, commTopoNodeLabel(t, i, lab, sizeof(lab)), n->parent,
           n->busId[0] ? n->busId : "-", n->bw);
    switch (n->type) {
      case COMM_TOPO_CPU:
        printf(" numa %d %s %s cpus %s cores %d \"%s\"", n->u.cpu.numa, n->u.cpu.arch, n->u.cpu.vendor, n->u.cpu.cpus,
               n->u.cpu.nCores, n->name);
        break;
      case COMM_TOPO_PCI: printf(" kind %d gen %d x%d", n->u.pci.kind, n->u.pci.gen, n->u.pci.width); break;
      case COMM_TOPO_GPU:
        printf(" dev %d sm %d mem %d MB \"%s\"", n->u.gpu.dev, n->u.gpu.sm, n->u.gpu.memMB, n->name);
        break;
      case COMM_TOPO_NIC:
        printf(" link %d port %d %d Mb/s netdev %s guid 0x%016llx gdr %d", n->u.nic.link, n->u.nic.port,
               n->u.nic.speedMbps, n->u.nic.netdev, (unsigned long long)n->u.nic.guid, n->u.nic.gdr);
        break;
      default: break;
    }
    printf("\n");
  }
  for (int l = 0; l < t->nLinks; l++)
    if (t->links[l].type == COMM_LINK_NVL)
      printf("  NVL %d-%d: %d link(s), %.1f GB/s\n", t->links[l].a, t->links[l].b, t->links[l].count, t->links[l].bw);
}

static void testDiscover(void** state) {
  (void)state;
  commTopo* t = NULL;
  int64_t t0 = commTimeNs();
  assert_int_equal(commTopoDiscover(&t), commSuccess);
  printf("  first discovery (CUDA / NVML loaded and initialised): %.2f ms\n", (commTimeNs() - t0) / 1e6);
  assert_non_null(t);
  printTopo(t);
  assert_true(t->finished);
  assert_int_equal(t->nHosts, 1);
  const commTopoHost* h = &t->hosts[0];
  char name[256] = "";
  gethostname(name, sizeof(name));
  name[COMM_TOPO_NAME_MAX - 1] = '\0';
  assert_string_equal(h->name, name);
  assert_true(h->nCpus >= 1);
  assert_int_equal(h->firstNode, 0);
  assert_int_equal(h->nNodes, t->nNodes);
  int cpu0 = commTopoFind(t, 0, COMM_TOPO_CPU, 0);
  assert_true(cpu0 >= 0);
  int counts[COMM_TOPO_NODE_TYPES] = {0};
  for (int i = 0; i < t->nNodes; i++) {
    const commTopoNode* n = &t->nodes[i];
    assert_int_equal(n->host, 0);
    assert_int_equal(n->index, counts[n->type]++);
    if (n->type == COMM_TOPO_CPU) {
      assert_int_equal(n->parent, -1);
      assert_true(n->u.cpu.cpus[0] != '\0');
      assert_true(n->u.cpu.nCores >= 1);
      assert_true(n->u.cpu.arch[0] != '\0');
      continue;
    }
    if (n->type == COMM_TOPO_NVS) {
      assert_int_equal(n->parent, -1);
      continue;
    }
    /* Below a CPU or PCI node of the same host, with a bandwidth and a path to the CPUs. */
    assert_true(n->parent >= 0 && n->parent < t->nNodes);
    const commTopoNode* p = &t->nodes[n->parent];
    assert_int_equal(p->host, n->host);
    assert_true(p->type == COMM_TOPO_CPU || p->type == COMM_TOPO_PCI);
    assert_true(n->bw > 0);
    assert_true(commTopoCpuOf(t, i) >= 0);
    assert_int_not_equal(commTopoPathOf(t, i, cpu0).type, COMM_PATH_DIS);
    if (n->busId[0]) assert_int_equal(commTopoFindBusId(t, 0, n->busId) >= 0, 1);
    if (n->type == COMM_TOPO_PCI) {
      assert_true(n->busId[0] != '\0');
      assert_true(n->u.pci.kind == COMM_PCI_SWITCH || n->u.pci.kind == COMM_PCI_BRIDGE);
    }
    if (n->type == COMM_TOPO_NIC) {
      assert_true(n->name[0] != '\0');
      assert_true(n->u.nic.speedMbps > 0);
      if (n->u.nic.link == COMM_NIC_ETH) {
        assert_string_equal(n->u.nic.netdev, n->name);
        assert_int_equal(n->u.nic.gdr, 0);
      } else {
        assert_true(n->u.nic.port >= 1);
      }
    }
    if (n->type == COMM_TOPO_GPU) assert_true(n->busId[0] != '\0');
  }
  assert_int_equal(counts[COMM_TOPO_GPU], h->nGpus);
  assert_int_equal(counts[COMM_TOPO_NIC], h->nNics);
  assert_int_equal(counts[COMM_TOPO_CPU], h->nCpus);
  assert_true(counts[COMM_TOPO_NVS] <= 1);
  commTopoFree(t);
}

/* Whether the PCI function busId is an NVIDIA display controller according to sysfs. */
static int sysfsNvidiaGpu(const char* busId) {
  char path[512], buf[32];
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", busId);
  FILE* f = fopen(path, "r");
  if (f == NULL) return 0;
  int ok = fgets(buf, sizeof(buf), f) != NULL && strtol(buf, NULL, 16) == 0x10de;
  fclose(f);
  return ok;
}

static int sysfsNvidiaGpuCount(void) {
  int n = 0;
  DIR* d = opendir("/sys/bus/pci/devices");
  if (d == NULL) return 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || !sysfsNvidiaGpu(e->d_name)) continue;
    char path[300], buf[32];
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/class", e->d_name);
    FILE* f = fopen(path, "r");
    if (f == NULL) continue;
    if (fgets(buf, sizeof(buf), f) && (strtol(buf, NULL, 16) >> 16) == 0x03) n++;
    fclose(f);
  }
  closedir(d);
  return n;
}

/* GPUs come from NVIDIA PCI functions or the CUDA driver; a GPU without a CUDA device (dev -1) is one hwloc
 * saw on PCI. On a machine without either there is none. */
static void testGpus(void** state) {
  (void)state;
  commTopo* t = NULL;
  assert_int_equal(commTopoDiscover(&t), commSuccess);
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (cuda == NULL) cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  int nvPci = sysfsNvidiaGpuCount();
  printf("  NVIDIA display functions in sysfs: %d, libcuda.so.1 %s, GPUs found: %d\n", nvPci,
         cuda ? "present" : "absent", t->hosts[0].nGpus);
  if (cuda == NULL && nvPci == 0) assert_int_equal(t->hosts[0].nGpus, 0);
  if (cuda == NULL) assert_true(t->hosts[0].nGpus <= nvPci);
  const char* prev = "";
  for (int i = 0; i < t->nNodes; i++) {
    const commTopoNode* n = &t->nodes[i];
    if (n->type != COMM_TOPO_GPU) continue;
    assert_true(strcmp(prev, n->busId) < 0); /* ordered by bus id */
    prev = n->busId;
    if (n->u.gpu.dev < 0) assert_true(sysfsNvidiaGpu(n->busId));
    for (int j = 0; j < t->nNodes; j++)
      if (j != i && t->nodes[j].type == COMM_TOPO_GPU && n->u.gpu.dev >= 0)
        assert_int_not_equal(t->nodes[j].u.gpu.dev, n->u.gpu.dev);
  }
  /* NVLinks join GPUs to GPUs or to the host's NVSwitch. */
  for (int l = 0; l < t->nLinks; l++) {
    const commTopoLink* k = &t->links[l];
    if (k->type != COMM_LINK_NVL) continue;
    assert_true(k->count >= 1 && k->bw > 0);
    assert_true(t->nodes[k->a].type == COMM_TOPO_GPU || t->nodes[k->b].type == COMM_TOPO_GPU);
  }
  if (cuda) dlclose(cuda);
  commTopoFree(t);
}

/* "mlx5_2" < "mlx5_10" */
static int natLess(const char* a, const char* b) {
  while (*a && *b) {
    if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
      long x = strtol(a, (char**)&a, 10), y = strtol(b, (char**)&b, 10);
      if (x != y) return x < y;
      continue;
    }
    if (*a != *b) return (unsigned char)*a < (unsigned char)*b;
    a++;
    b++;
  }
  return *a == '\0' && *b != '\0';
}

static void testNicOrder(void** state) {
  (void)state;
  commTopo* t = NULL;
  assert_int_equal(commTopoDiscover(&t), commSuccess);
  const commTopoNode* prev = NULL;
  for (int k = 0; k < t->hosts[0].nNics; k++) {
    int i = commTopoFind(t, 0, COMM_TOPO_NIC, k);
    assert_true(i >= 0);
    const commTopoNode* n = &t->nodes[i];
    assert_string_not_equal(n->name, "lo");
    if (prev) {
      int prevRdma = prev->u.nic.link != COMM_NIC_ETH, rdma = n->u.nic.link != COMM_NIC_ETH;
      assert_true(prevRdma >= rdma); /* RDMA devices first */
      if (prevRdma == rdma) assert_true(natLess(prev->name, n->name));
    }
    /* A netdev is not listed twice (once as the netdev of an RDMA device). */
    for (int j = 0; j < t->nNodes; j++)
      if (j != i && t->nodes[j].type == COMM_TOPO_NIC && n->u.nic.link == COMM_NIC_ETH)
        assert_string_not_equal(t->nodes[j].u.nic.netdev, n->name);
    prev = n;
  }
  commTopoFree(t);
}

/* Two discoveries give the same topology (processes of one host compare them). */
static void testDeterministic(void** state) {
  (void)state;
  commTopo *a = NULL, *b = NULL;
  assert_int_equal(commTopoDiscover(&a), commSuccess);
  assert_int_equal(commTopoDiscover(&b), commSuccess);
  assert_int_equal(a->nHosts, b->nHosts);
  assert_string_equal(a->hosts[0].name, b->hosts[0].name);
  assert_int_equal(a->nNodes, b->nNodes);
  assert_int_equal(a->nLinks, b->nLinks);
  for (int i = 0; i < a->nNodes; i++) {
    const commTopoNode *x = &a->nodes[i], *y = &b->nodes[i];
    assert_int_equal(x->type, y->type);
    assert_int_equal(x->parent, y->parent);
    assert_int_equal(x->index, y->index);
    assert_string_equal(x->name, y->name);
    assert_string_equal(x->busId, y->busId);
    assert_true(x->bw == y->bw);
    assert_memory_equal(&x->u, &y->u, sizeof(x->u));
  }
  for (int l = 0; l < a->nLinks; l++) {
    assert_int_equal(a->links[l].a, b->links[l].a);
    assert_int_equal(a->links[l].b, b->links[l].b);
    assert_int_equal(a->links[l].type, b->links[l].type);
    assert_int_equal(a->links[l].count, b->links[l].count);
    assert_true(a->links[l].bw == b->links[l].bw);
  }
  commTopoFree(a);
  commTopoFree(b);
}

/* A two-socket machine (made up): CPU0 has a root port -> switch (GPU, RDMA NIC with its netdev, a second
 * switch with a GPU and an NVMe drive) and a root port -> Ethernet NIC; CPU1 has a root port -> GPU and a root
 * port -> plain bridge -> two RDMA functions. */
static const char kSynthXml[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
    "<topology version=\"2.0\">\n"
    "  <object type=\"Machine\" os_index=\"0\" cpuset=\"0x0000000f\" complete_cpuset=\"0x0000000f\" "
    "allowed_cpuset=\"0x0000000f\" nodeset=\"0x00000003\" complete_nodeset=\"0x00000003\" "
    "allowed_nodeset=\"0x00000003\" gp_index=\"1\">\n"
    "    <object type=\"Package\" os_index=\"0\" cpuset=\"0x00000003\" complete_cpuset=\"0x00000003\" "
    "nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" gp_index=\"2\">\n"
    "      <info name=\"CPUVendor\" value=\"GenuineIntel\"/>\n"
    "      <info name=\"CPUModel\" value=\"Test CPU A\"/>\n"
    "      <object type=\"NUMANode\" os_index=\"0\" cpuset=\"0x00000003\" complete_cpuset=\"0x00000003\" "
    "nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" gp_index=\"3\" local_memory=\"1073741824\"/>\n"
    "      <object type=\"Core\" os_index=\"0\" cpuset=\"0x00000001\" complete_cpuset=\"0x00000001\" "
    "nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" gp_index=\"4\">\n"
    "        <object type=\"PU\" os_index=\"0\" cpuset=\"0x00000001\" complete_cpuset=\"0x00000001\" "
    "nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" gp_index=\"5\"/>\n"
    "      </object>\n"
    "      <object type=\"Core\" os_index=\"1\" cpuset=\"0x00000002\" complete_cpuset=\"0x00000002\" "
    "nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" gp_index=\"6\">\n"
    "        <object type=\"PU\" os_index=\"1\" cpuset=\"0x00000002\" complete_cpuset=\"0x00000002\" "
    "nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" gp_index=\"7\"/>\n"
    "      </object>\n"
    "      <object type=\"Bridge\" gp_index=\"10\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[10-1f]\">\n"
    "        <object type=\"Bridge\" gp_index=\"11\" bridge_type=\"1-1\" depth=\"1\" bridge_pci=\"0000:[11-1f]\" "
    "pci_busid=\"0000:10:00.0\" pci_type=\"0604 [8086:2030] [8086:0000] 04\" pci_link_speed=\"31.5\">\n"
    "          <object type=\"Bridge\" gp_index=\"12\" bridge_type=\"1-1\" depth=\"2\" bridge_pci=\"0000:[12-1f]\" "
    "pci_busid=\"0000:11:00.0\" pci_type=\"0604 [10b5:9781] [10b5:9781] b0\" pci_link_speed=\"31.5\">\n"
    "            <object type=\"Bridge\" gp_index=\"13\" bridge_type=\"1-1\" depth=\"3\" "
    "bridge_pci=\"0000:[13-13]\" pci_busid=\"0000:12:00.0\" pci_type=\"0604 [10b5:9781] [10b5:9781] b0\" "
    "pci_link_speed=\"31.5\">\n"
    "              <object type=\"PCIDev\" gp_index=\"14\" pci_busid=\"0000:13:00.0\" pci_type=\"0302 [10de:2330] "
    "[10de:16c1] a1\" pci_link_speed=\"31.5\"/>\n"
    "            </object>\n"
    "            <object type=\"Bridge\" gp_index=\"15\" bridge_type=\"1-1\" depth=\"3\" "
    "bridge_pci=\"0000:[14-14]\" pci_busid=\"0000:12:01.0\" pci_type=\"0604 [10b5:9781] [10b5:9781] b0\" "
    "pci_link_speed=\"31.5\">\n"
    "              <object type=\"PCIDev\" gp_index=\"16\" pci_busid=\"0000:14:00.0\" pci_type=\"0207 [15b3:101b] "
    "[15b3:0007] 00\" pci_link_speed=\"31.5\">\n"
    "                <object type=\"OSDev\" gp_index=\"17\" name=\"ibtest0\" osdev_type=\"2\"/>\n"
    "                <object type=\"OSDev\" gp_index=\"18\" name=\"mlx5_test0\" osdev_type=\"3\"/>\n"
    "              </object>\n"
    "            </object>\n"
    "            <object type=\"Bridge\" gp_index=\"19\" bridge_type=\"1-1\" depth=\"3\" "
    "bridge_pci=\"0000:[15-1f]\" pci_busid=\"0000:12:02.0\" pci_type=\"0604 [10b5:9781] [10b5:9781] b0\" "
    "pci_link_speed=\"15.75\">\n"
    "              <object type=\"Bridge\" gp_index=\"20\" bridge_type=\"1-1\" depth=\"4\" "
    "bridge_pci=\"0000:[16-1f]\" pci_busid=\"0000:15:00.0\" pci_type=\"0604 [10b5:8725] [10b5:8725] ca\" "
    "pci_link_speed=\"15.75\">\n"
    "                <object type=\"Bridge\" gp_index=\"21\" bridge_type=\"1-1\" depth=\"5\" "
    "bridge_pci=\"0000:[17-17]\" pci_busid=\"0000:16:00.0\" pci_type=\"0604 [10b5:8725] [10b5:8725] ca\" "
    "pci_link_speed=\"15.75\">\n"
    "                  <object type=\"PCIDev\" gp_index=\"22\" pci_busid=\"0000:17:00.0\" pci_type=\"0302 "
    "[10de:2330] [10de:16c1] a1\" pci_link_speed=\"15.75\"/>\n"
    "                </object>\n"
    "                <object type=\"Bridge\" gp_index=\"23\" bridge_type=\"1-1\" depth=\"5\" "
    "bridge_pci=\"0000:[18-18]\" pci_busid=\"0000:16:01.0\" pci_type=\"0604 [10b5:8725] [10b5:8725] ca\" "
    "pci_link_speed=\"15.75\">\n"
    "                  <object type=\"PCIDev\" gp_index=\"24\" pci_busid=\"0000:18:00.0\" pci_type=\"0108 "
    "[144d:a80a] [144d:a801] 00\" pci_link_speed=\"7.88\">\n"
    "                    <object type=\"OSDev\" gp_index=\"25\" name=\"nvme0n1\" osdev_type=\"0\"/>\n"
    "                  </object>\n"
    "                </object>\n"
    "              </object>\n"
    "            </object>\n"
    "          </object>\n"
    "        </object>\n"
    "      </object>\n"
    "      <object type=\"Bridge\" gp_index=\"30\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[20-2f]\">\n"
    "        <object type=\"Bridge\" gp_index=\"31\" bridge_type=\"1-1\" depth=\"1\" bridge_pci=\"0000:[21-21]\" "
    "pci_busid=\"0000:20:00.0\" pci_type=\"0604 [8086:2030] [8086:0000] 04\" pci_link_speed=\"15.75\">\n"
    "          <object type=\"PCIDev\" gp_index=\"32\" pci_busid=\"0000:21:00.0\" pci_type=\"0200 [8086:1592] "
    "[8086:0002] 02\" pci_link_speed=\"15.75\">\n"
    "            <object type=\"OSDev\" gp_index=\"33\" name=\"ethtest9\" osdev_type=\"2\"/>\n"
    "          </object>\n"
    "        </object>\n"
    "      </object>\n"
    "    </object>\n"
    "    <object type=\"Package\" os_index=\"1\" cpuset=\"0x0000000c\" complete_cpuset=\"0x0000000c\" "
    "nodeset=\"0x00000002\" complete_nodeset=\"0x00000002\" gp_index=\"40\">\n"
    "      <info name=\"CPUVendor\" value=\"GenuineIntel\"/>\n"
    "      <info name=\"CPUModel\" value=\"Test CPU A\"/>\n"
    "      <object type=\"NUMANode\" os_index=\"1\" cpuset=\"0x0000000c\" complete_cpuset=\"0x0000000c\" "
    "nodeset=\"0x00000002\" complete_nodeset=\"0x00000002\" gp_index=\"41\" local_memory=\"1073741824\"/>\n"
    "      <object type=\"Core\" os_index=\"0\" cpuset=\"0x00000004\" complete_cpuset=\"0x00000004\" "
    "nodeset=\"0x00000002\" complete_nodeset=\"0x00000002\" gp_index=\"42\">\n"
    "        <object type=\"PU\" os_index=\"2\" cpuset=\"0x00000004\" complete_cpuset=\"0x00000004\" "
    "nodeset=\"0x00000002\" complete_nodeset=\"0x00000002\" gp_index=\"43\"/>\n"
    "      </object>\n"
    "      <object type=\"Core\" os_index=\"1\" cpuset=\"0x00000008\" complete_cpuset=\"0x00000008\" "
    "nodeset=\"0x00000002\" complete_nodeset=\"0x00000002\" gp_index=\"44\">\n"
    "        <object type=\"PU\" os_index=\"3\" cpuset=\"0x00000008\" complete_cpuset=\"0x00000008\" "
    "nodeset=\"0x00000002\" complete_nodeset=\"0x00000002\" gp_index=\"45\"/>\n"
    "      </object>\n"
    "      <object type=\"Bridge\" gp_index=\"50\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[80-8f]\">\n"
    "        <object type=\"Bridge\" gp_index=\"51\" bridge_type=\"1-1\" depth=\"1\" bridge_pci=\"0000:[81-81]\" "
    "pci_busid=\"0000:80:00.0\" pci_type=\"0604 [8086:2030] [8086:0000] 04\" pci_link_speed=\"31.5\">\n"
    "          <object type=\"PCIDev\" gp_index=\"52\" pci_busid=\"0000:81:00.0\" pci_type=\"0302 [10de:2330] "
    "[10de:16c1] a1\" pci_link_speed=\"31.5\"/>\n"
    "        </object>\n"
    "        <object type=\"Bridge\" gp_index=\"53\" bridge_type=\"1-1\" depth=\"1\" bridge_pci=\"0000:[82-83]\" "
    "pci_busid=\"0000:80:01.0\" pci_type=\"0604 [8086:2030] [8086:0000] 04\" pci_link_speed=\"15.75\">\n"
    "          <object type=\"Bridge\" gp_index=\"54\" bridge_type=\"1-1\" depth=\"2\" bridge_pci=\"0000:[83-83]\" "
    "pci_busid=\"0000:82:00.0\" pci_type=\"0604 [1234:0001] [1234:0001] 00\" pci_link_speed=\"15.75\">\n"
    "            <object type=\"PCIDev\" gp_index=\"55\" pci_busid=\"0000:83:00.1\" pci_type=\"0207 [15b3:1017] "
    "[15b3:0020] 00\" pci_link_speed=\"15.75\">\n"
    "              <object type=\"OSDev\" gp_index=\"56\" name=\"mlx5_test2\" osdev_type=\"3\"/>\n"
    "            </object>\n"
    "            <object type=\"PCIDev\" gp_index=\"57\" pci_busid=\"0000:83:00.0\" pci_type=\"0207 [15b3:1017] "
    "[15b3:0020] 00\" pci_link_speed=\"15.75\">\n"
    "              <object type=\"OSDev\" gp_index=\"58\" name=\"mlx5_test10\" osdev_type=\"3\"/>\n"
    "            </object>\n"
    "          </object>\n"
    "        </object>\n"
    "      </object>\n"
    "    </object>\n"
    "  </object>\n"
    "</topology>\n";

static int byBusId(const commTopo* t, const char* busId, int type) {
  int n = commTopoFindBusId(t, 0, busId);
  if (n >= 0 && t->nodes[n].type != type) return -1;
  return n;
}

static int byName(const commTopo* t, const char* name) {
  for (int i = 0; i < t->nNodes; i++)
    if (t->nodes[i].type == COMM_TOPO_NIC && strcmp(t->nodes[i].name, name) == 0) return i;
  return -1;
}

/* The PCI tree rules on a machine described to hwloc (HWLOC_XMLFILE): root ports and downstream ports are
 * dropped, a switch is one node, a plain bridge with two functions one node, subtrees without GPU or NIC are
 * left out; the netdev of an RDMA function is not a NIC of its own. The CUDA driver and sysfs still describe
 * the real machine: only what the file describes is checked. */
static void testPciTreeFromXml(void** state) {
  (void)state;
  char path[] = "/tmp/comm_topo_discover_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, kSynthXml, sizeof(kSynthXml) - 1), (ssize_t)(sizeof(kSynthXml) - 1));
  close(fd);
  setenv("HWLOC_XMLFILE", path, 1);
  commTopo* t = NULL;
  commResult_t res = commTopoDiscover(&t);
  unsetenv("HWLOC_XMLFILE");
  unlink(path);
  assert_int_equal(res, commSuccess);
  printTopo(t);

  assert_int_equal(t->hosts[0].nCpus, 2);
  int cpu0 = commTopoFind(t, 0, COMM_TOPO_CPU, 0), cpu1 = commTopoFind(t, 0, COMM_TOPO_CPU, 1);
  assert_int_equal(t->nodes[cpu0].u.cpu.numa, 0);
  assert_int_equal(t->nodes[cpu1].u.cpu.numa, 1);
  assert_string_equal(t->nodes[cpu0].u.cpu.cpus, "0-1");
  assert_string_equal(t->nodes[cpu1].u.cpu.cpus, "2-3");
  assert_int_equal(t->nodes[cpu1].u.cpu.nCores, 2);
  assert_string_equal(t->nodes[cpu1].name, "Test CPU A");
  assert_string_equal(t->nodes[cpu1].u.cpu.vendor, "GenuineIntel");

  /* PCI nodes: the two switches and the plain bridge, nothing else. */
  int sw1 = byBusId(t, "0000:11:00.0", COMM_TOPO_PCI), sw2 = byBusId(t, "0000:15:00.0", COMM_TOPO_PCI);
  int br = byBusId(t, "0000:82:00.0", COMM_TOPO_PCI);
  assert_true(sw1 >= 0 && sw2 >= 0 && br >= 0);
  int nPci = 0;
  for (int i = 0; i < t->nNodes; i++) nPci += t->nodes[i].type == COMM_TOPO_PCI;
  assert_int_equal(nPci, 3);
  assert_int_equal(t->nodes[sw1].u.pci.kind, COMM_PCI_SWITCH);
  assert_int_equal(t->nodes[sw1].parent, cpu0);
  assert_true(t->nodes[sw1].bw == 31.5);
  assert_int_equal(t->nodes[sw2].u.pci.kind, COMM_PCI_SWITCH);
  assert_int_equal(t->nodes[sw2].parent, sw1);
  assert_int_equal(t->nodes[br].u.pci.kind, COMM_PCI_BRIDGE);
  assert_int_equal(t->nodes[br].parent, cpu1);
  assert_int_equal(commTopoFindBusId(t, 0, "0000:18:00.0"), -1); /* the NVMe drive */

  /* GPUs, in bus id order. */
  int g0 = byBusId(t, "0000:13:00.0", COMM_TOPO_GPU), g1 = byBusId(t, "0000:17:00.0", COMM_TOPO_GPU);
  int g2 = byBusId(t, "0000:81:00.0", COMM_TOPO_GPU);
  assert_true(g0 >= 0 && g1 >= 0 && g2 >= 0);
  assert_int_equal(t->nodes[g0].parent, sw1);
  assert_int_equal(t->nodes[g1].parent, sw2);
  assert_int_equal(t->nodes[g2].parent, cpu1);
  assert_true(t->nodes[g0].index < t->nodes[g1].index && t->nodes[g1].index < t->nodes[g2].index);
  assert_true(t->nodes[g1].bw == 15.75);

  /* NICs: the RDMA devices first, in name order; the netdev of mlx5_test0 is its netdev, not a NIC. */
  int n0 = byName(t, "mlx5_test0"), n2 = byName(t, "mlx5_test2"), n10 = byName(t, "mlx5_test10");
  int eth = byName(t, "ethtest9");
  assert_true(n0 >= 0 && n2 >= 0 && n10 >= 0 && eth >= 0);
  assert_int_equal(byName(t, "ibtest0"), -1);
  assert_true(t->nodes[n0].index < t->nodes[n2].index && t->nodes[n2].index < t->nodes[n10].index &&
              t->nodes[n10].index < t->nodes[eth].index);
  assert_string_equal(t->nodes[n0].u.nic.netdev, "ibtest0");
  assert_string_equal(t->nodes[n0].busId, "0000:14:00.0");
  assert_int_equal(t->nodes[n0].parent, sw1);
  assert_true(t->nodes[n0].bw == 31.5);
  assert_int_equal(t->nodes[n2].parent, br);
  assert_int_equal(t->nodes[n10].parent, br);
  assert_int_equal(t->nodes[eth].parent, cpu0);
  assert_int_equal(t->nodes[eth].u.nic.link, COMM_NIC_ETH);

  /* Path classes. */
  assert_int_equal(commTopoPathOf(t, g0, n0).type, COMM_PATH_PIX);
  assert_int_equal(commTopoPathOf(t, g0, g1).type, COMM_PATH_PXB);
  assert_int_equal(commTopoPathOf(t, g0, eth).type, COMM_PATH_PHB);
  assert_int_equal(commTopoPathOf(t, g0, g2).type, COMM_PATH_SYS);
  assert_int_equal(commTopoPathOf(t, n2, n10).type, COMM_PATH_PIX);
  assert_int_equal(commTopoPathOf(t, g2, n2).type, COMM_PATH_PHB);
  commTopoFree(t);
}

static int cmpI64(const void* x, const void* y) {
  int64_t a = *(const int64_t*)x, b = *(const int64_t*)y;
  return (a > b) - (a < b);
}

/* Discovery is part of init: ten runs in a row give the same machine; their time is printed for the log
 * (speed is measured by bench/topo_bench, not asserted here). */
static void testTime(void** state) {
  (void)state;
  int64_t ns[10];
  int nodes = -1;
  for (int r = 0; r < 10; r++) {
    commTopo* t = NULL;
    int64_t t0 = commTimeNs();
    assert_int_equal(commTopoDiscover(&t), commSuccess);
    ns[r] = commTimeNs() - t0;
    if (nodes < 0) nodes = t->nNodes;
    assert_int_equal(t->nNodes, nodes);
    commTopoFree(t);
  }
  qsort(ns, 10, sizeof(ns[0]), cmpI64);
  printf("  discovery: min %.2f ms, median %.2f ms, max %.2f ms (10 runs)\n", ns[0] / 1e6, (ns[4] + ns[5]) / 2e6,
         ns[9] / 1e6);
}

static void testSummary(void** state) {
  (void)state;
  commMachineSummary m;
  assert_int_equal(commTopoSummary(&m), commSuccess);
  assert_true(m.nPUs >= 1);
  assert_true(m.nCores >= 1 && m.nCores <= m.nPUs);
  assert_true(m.nPackages >= 1);
  commTopoLogMachine();
}

int main(void) {
  unsetenv("HWLOC_XMLFILE"); /* this machine, except where a test says otherwise */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(testDiscover),       cmocka_unit_test(testGpus), cmocka_unit_test(testNicOrder),
      cmocka_unit_test(testDeterministic),  cmocka_unit_test(testTime), cmocka_unit_test(testSummary),
      cmocka_unit_test(testPciTreeFromXml),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
