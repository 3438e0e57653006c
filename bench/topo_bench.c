/* topo_bench: the cost of the topology layer (src/topo): discovery of this machine, loading a topology file,
 * loading a generated cluster of many copies of one host, and building rings (and the double binary trees
 * over the nodes) for every GPU of such a cluster; then the same for a cluster of a few wide hosts (up to
 * the reader's 1,024 nodes per host). Each figure is the median of -r runs.
 *
 *   topo_bench [-n nodes] [-r runs] [-f host.xml] [-w hosts] [-W nodes-per-host]
 *
 * -f names the file whose first <host> element is copied -n times (names node0000, node0001, ...) into a
 * temporary file; default: tests/topo/dgx_h100.xml of the source tree. -w wide hosts (default 8, 0: none)
 * of -W nodes each (default 1,022): 2 CPUs, PCI switches each with 2 NVLinked GPUs and a NIC, PCI bridges
 * to make up the count, and the NVSwitch. "init: node order" is what commInitRank adds per rank once the
 * file is loaded (src/core/placement.c: its node's order on every channel). Targets (docs): discovery plus
 * ring and tree construction under 50 ms on one machine, and under 1 s for a 1,024-node file. */
#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "algorithms.h"
#include "comm_limits.h"
#include "topo.h"

#ifndef COMM_SOURCE_DIR
#define COMM_SOURCE_DIR "."
#endif

#define MAX_RUNS 101

static double clockMs(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Wall and process CPU time of each run (CPU time is the steadier figure on a busy machine). */
static double tWall[MAX_RUNS], tCpu[MAX_RUNS], startWall, startCpu;
static void tick(void) {
  startWall = clockMs(CLOCK_MONOTONIC);
  startCpu = clockMs(CLOCK_PROCESS_CPUTIME_ID);
}
static void tock(int i) {
  tWall[i] = clockMs(CLOCK_MONOTONIC) - startWall;
  tCpu[i] = clockMs(CLOCK_PROCESS_CPUTIME_ID) - startCpu;
}

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmpDouble);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void row(const char* what, const char* detail, int n) {
  double lo = tWall[0], hi = tWall[0];
  for (int i = 1; i < n; i++) {
    if (tWall[i] < lo) lo = tWall[i];
    if (tWall[i] > hi) hi = tWall[i];
  }
  double med = median(tWall, n), cpu = median(tCpu, n);
  printf("%-32s %-36s %10.3f %10.3f %10.3f %10.3f\n", what, detail, med, lo, hi, cpu);
}

static void skipRow(const char* what, const char* why) { printf("%-32s skipped: %s\n", what, why); }

static char* readFile(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "topo_bench: cannot open %s: %s\n", path, strerror(errno));
    return NULL;
  }
  char* text = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)n + 1)) != NULL) {
    if (fread(text, 1, (size_t)n, f) != (size_t)n) {
      free(text);
      text = NULL;
    } else {
      text[n] = '\0';
      *len = (size_t)n;
    }
  }
  fclose(f);
  if (text == NULL) fprintf(stderr, "topo_bench: cannot read %s\n", path);
  return text;
}

/* The first <host> element of `text` written `nodes` times (host names node0000, ...) into a temporary file;
 * its path into `path`. Returns 0 on success. */
static int writeCluster(const char* text, int nodes, char* path, size_t pathLen) {
  const char* hs = strstr(text, "<host");
  const char* he = hs ? strstr(hs, "</host>") : NULL;
  const char* tagEnd = hs ? strchr(hs, '>') : NULL;
  if (hs == NULL || he == NULL || tagEnd == NULL) {
    fprintf(stderr, "topo_bench: no <host>...</host> element in the host file\n");
    return -1;
  }
  while (hs > text && hs[-1] == ' ') hs--;
  he += strlen("</host>");
  if (*he == '\n') he++;
  /* The host's name attribute, if any, is replaced; else one is added. */
  const char* nameAttr = strstr(hs, " name=\"");
  const char *cut0, *cut1;
  if (nameAttr != NULL && nameAttr < tagEnd) {
    cut0 = nameAttr;
    cut1 = strchr(nameAttr + strlen(" name=\""), '"') + 1;
  } else {
    cut0 = cut1 = strstr(hs, "<host") + strlen("<host");
  }
  const char* tmp = getenv("TMPDIR");
  snprintf(path, pathLen, "%s/topo_bench_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0) {
    fprintf(stderr, "topo_bench: mkstemp %s: %s\n", path, strerror(errno));
    return -1;
  }
  FILE* f = fdopen(fd, "w");
  if (f == NULL) {
    close(fd);
    unlink(path);
    return -1;
  }
  fwrite(text, 1, (size_t)(hs - text), f);
  for (int i = 0; i < nodes; i++) {
    fwrite(hs, 1, (size_t)(cut0 - hs), f);
    fprintf(f, " name=\"node%04d\"", i);
    fwrite(cut1, 1, (size_t)(he - cut1), f);
  }
  fputs(he, f);
  if (fclose(f) != 0) {
    unlink(path);
    return -1;
  }
  return 0;
}

/* `hosts` hosts of `perHost` nodes each into a temporary file (path into `path`): per host 2 CPUs, g PCI
 * switches (alternating CPUs) each with 2 GPUs (NVLinks to the NVSwitch) and a NIC, bridges below CPU0 for
 * the remainder (their bandwidth differs from host to host, so that no host shares the paths of the one
 * before: the worst case), and the NVSwitch node. Returns 0 on success. */
static int writeWide(int hosts, int perHost, char* path, size_t pathLen) {
  int groups = (perHost - 3) / 4, bridges = perHost - 3 - 4 * groups;
  if (groups < 1 || groups > 0xffff) {
    fprintf(stderr, "topo_bench: -W %d: at least 7 nodes per host\n", perHost);
    return -1;
  }
  const char* tmp = getenv("TMPDIR");
  snprintf(path, pathLen, "%s/topo_bench_wide_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  int fd = mkstemp(path);
  FILE* f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (f == NULL) {
    fprintf(stderr, "topo_bench: cannot create %s: %s\n", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  fprintf(f, "<?xml version=\"1.0\"?>\n<topology version=\"1\">\n");
  for (int h = 0; h < hosts; h++) {
    fprintf(f, "  <host name=\"wide%04d\" cpulinkbw=\"40.0\">\n", h);
    for (int c = 0; c < 2; c++) {
      fprintf(f, "    <cpu numa=\"%d\" arch=\"x86_64\" vendor=\"GenuineIntel\" cpus=\"%d-%d\" cores=\"56\">\n", c,
              56 * c, 56 * c + 55);
      for (int b = 0; c == 0 && b < bridges; b++)
        fprintf(f, "      <pci busid=\"%04x:f0:00.0\" kind=\"bridge\" bw=\"%d.0\"/>\n", b, 16 + h);
      for (int g = c; g < groups; g += 2) {
        fprintf(f, "      <pci busid=\"%04x:10:00.0\" kind=\"switch\" gen=\"5\" width=\"16\" bw=\"63.0\">\n", g);
        for (int k = 0; k < 2; k++)
          fprintf(f,
                  "        <gpu busid=\"%04x:1%d:00.0\" dev=\"%d\" sm=\"90\" bw=\"63.0\">"
                  "<nvlink target=\"nvswitch\" count=\"18\" bw=\"450.0\"/></gpu>\n",
                  g, k + 1, 2 * g + k);
        fprintf(f,
                "        <nic busid=\"%04x:13:00.0\" name=\"mlx5_%d\" link=\"ib\" port=\"1\" speed=\"400000\" "
                "gdr=\"1\" bw=\"63.0\"/>\n      </pci>\n",
                g, g);
      }
      fprintf(f, "    </cpu>\n");
    }
    fprintf(f, "  </host>\n");
  }
  fprintf(f, "</topology>\n");
  if (fclose(f) != 0) {
    unlink(path);
    return -1;
  }
  return 0;
}

/* One rank per GPU of every host (hosts without GPUs: 8 host ranks on their first CPU); node = host. */
static commTopoRank* makeRanks(const commTopo* topo, int* nRanks) {
  int n = 0;
  for (int h = 0; h < topo->nHosts; h++) n += topo->hosts[h].nGpus > 0 ? topo->hosts[h].nGpus : 8;
  commTopoRank* ranks = calloc((size_t)n, sizeof(commTopoRank));
  if (ranks == NULL) return NULL;
  int r = 0;
  for (int h = 0; h < topo->nHosts; h++) {
    int g = topo->hosts[h].nGpus;
    for (int i = 0; i < (g > 0 ? g : 8); i++)
      ranks[r++] = (commTopoRank){h, commTopoFind(topo, h, g > 0 ? COMM_TOPO_GPU : COMM_TOPO_CPU, g > 0 ? i : 0), h};
  }
  *nRanks = n;
  return ranks;
}

/* Rings for nChannels channels, then both double binary trees over the nodes. */
static int buildRingsTrees(const commTopo* topo, const commTopoRank* ranks, int nRanks, int nChannels, int* rings) {
  if (commTopoRings(topo, ranks, nRanks, topo->nHosts, nChannels, rings) != commSuccess) return -1;
  volatile int sink = 0;
  for (int t = 0; t < 2; t++)
    for (int v = 0; v < topo->nHosts; v++) {
      int p, c0, c1;
      commDoubleTree(topo->nHosts, t, v, &p, &c0, &c1);
      sink += p + c0 + c1;
    }
  (void)sink;
  return 0;
}

/* Loads the file at `path` (`what`: the row's name), then rings and trees over one rank per GPU for 32 and 2
 * channels, and what init adds per rank (one node's order on every channel). Returns 0 when all went well. */
static int benchCluster(const char* path, const char* what, int runs) {
  int rc = 0;
  commTopo* topo = NULL;
  if (commTopoLoadXml(path, &topo) != commSuccess) {
    skipRow(what, "commTopoLoadXml of the generated file failed");
    return 1;
  }
  char detail[96];
  snprintf(detail, sizeof(detail), "%d hosts, %d nodes, %d links", topo->nHosts, topo->nNodes, topo->nLinks);
  commTopoFree(topo);
  for (int i = 0; i < runs; i++) {
    tick();
    if (commTopoLoadXml(path, &topo) != commSuccess) rc = 1;
    tock(i);
    if (i + 1 < runs) commTopoFree(topo);
  }
  row(what, detail, runs);

  int nRanks = 0;
  commTopoRank* ranks = makeRanks(topo, &nRanks);
  int* rings = ranks ? malloc(sizeof(int) * (size_t)nRanks * COMM_MAX_CHANNELS) : NULL;
  if (rings == NULL) {
    fprintf(stderr, "topo_bench: out of memory\n");
    free(ranks);
    commTopoFree(topo);
    return 1;
  }
  const int channels[2] = {32, 2};
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < runs; i++) {
      tick();
      if (buildRingsTrees(topo, ranks, nRanks, channels[k], rings) != 0) rc = 1;
      tock(i);
    }
    char name[64];
    snprintf(name, sizeof(name), "rings + trees, %d channels", channels[k]);
    snprintf(detail, sizeof(detail), "%d ranks on %d nodes", nRanks, topo->nHosts);
    row(name, detail, runs);
  }
  for (int i = 0; i < runs; i++) {
    tick();
#ifdef TOPO_BENCH_PER_CHANNEL /* what init did before commTopoNodeOrders (to measure an older tree) */
    for (int c = 0; c < COMM_MAX_CHANNELS; c++)
      if (commTopoNodeOrder(topo, ranks, nRanks, 0, c, rings) <= 0) rc = 1;
#else
    if (commTopoNodeOrders(topo, ranks, nRanks, 0, 0, COMM_MAX_CHANNELS, rings) <= 0) rc = 1;
#endif
    tock(i);
  }
  snprintf(detail, sizeof(detail), "node 0 of %d ranks, %d channels", nRanks, COMM_MAX_CHANNELS);
  row("init: node order (one rank)", detail, runs);
  free(rings);
  free(ranks);
  commTopoFree(topo);
  return rc;
}

static void usage(void) {
  fprintf(stderr, "usage: topo_bench [-n nodes] [-r runs] [-f host.xml] [-w hosts] [-W nodes-per-host]\n");
}

int main(int argc, char** argv) {
  int nodes = 1024, runs = 7, wide = 8, perWide = 1022, opt;
  char hostFile[4096];
  snprintf(hostFile, sizeof(hostFile), "%s/tests/topo/dgx_h100.xml", COMM_SOURCE_DIR);
  while ((opt = getopt(argc, argv, "n:r:f:w:W:h")) != -1) {
    switch (opt) {
      case 'n': nodes = atoi(optarg); break;
      case 'r': runs = atoi(optarg); break;
      case 'f': snprintf(hostFile, sizeof(hostFile), "%s", optarg); break;
      case 'w': wide = atoi(optarg); break;
      case 'W': perWide = atoi(optarg); break;
      default: usage(); return opt == 'h' ? 0 : 2;
    }
  }
  if (nodes < 1 || runs < 1 || runs > MAX_RUNS || wide < 0 || perWide < 7 || optind != argc) {
    usage();
    return 2;
  }
  int rc = 0;
  printf("topo_bench: %d run(s) each, milliseconds (wall clock: median, min, max; process CPU time: median)\n", runs);
  printf("%-32s %-36s %10s %10s %10s %10s\n", "measure", "input", "median", "min", "max", "cpu med");

  /* (a) this machine: discovery; then discovery plus rings and trees over its devices */
  {
    commTopo* topo = NULL;
    commResult_t res = commTopoDiscover(&topo);
    if (res != commSuccess || topo == NULL) {
      skipRow("discover (this machine)", "commTopoDiscover failed");
    } else {
      char detail[96];
      snprintf(detail, sizeof(detail), "%d CPU, %d GPU, %d NIC, %d nodes", topo->hosts[0].nCpus, topo->hosts[0].nGpus,
               topo->hosts[0].nNics, topo->nNodes);
      commTopoFree(topo);
      int ok = 1;
      for (int i = 0; i < runs && ok; i++) {
        tick();
        ok = commTopoDiscover(&topo) == commSuccess;
        commTopoFree(topo);
        tock(i);
      }
      if (ok) row("discover + free (this machine)", detail, runs);
      for (int i = 0; i < runs && ok; i++) {
        tick();
        int nRanks = 0;
        commTopoRank* ranks = NULL;
        int* rings = NULL;
        ok = commTopoDiscover(&topo) == commSuccess && (ranks = makeRanks(topo, &nRanks)) != NULL &&
             (rings = malloc(sizeof(int) * (size_t)nRanks * 32)) != NULL &&
             buildRingsTrees(topo, ranks, nRanks, 32, rings) == 0;
        free(rings);
        free(ranks);
        commTopoFree(topo);
        tock(i);
      }
      if (ok) row("discover + rings/trees (32 ch)", detail, runs);
      else skipRow("discover + rings/trees (32 ch)", "failed");
      /* The peer: hwloc alone, loading the same machine with its I/O tree (what lstopo does), no caches. */
      for (int i = 0; i < runs && ok; i++) {
        tick();
        hwloc_topology_t hw;
        ok = hwloc_topology_init(&hw) == 0;
        if (ok) {
          hwloc_topology_set_io_types_filter(hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
          hwloc_topology_set_cache_types_filter(hw, HWLOC_TYPE_FILTER_KEEP_NONE);
          ok = hwloc_topology_load(hw) == 0;
          hwloc_topology_destroy(hw);
        }
        tock(i);
      }
      if (ok) row("peer: hwloc load with I/O", "same machine, caches off", runs);
    }
  }

  /* (b) the host file as it is */
  {
    commTopo* topo = NULL;
    if (commTopoLoadXml(hostFile, &topo) != commSuccess) {
      skipRow("load host file", "commTopoLoadXml failed");
      rc = 1;
    } else {
      char detail[96];
      const char* base = strrchr(hostFile, '/');
      snprintf(detail, sizeof(detail), "%.60s (%d nodes)", base ? base + 1 : hostFile, topo->nNodes);
      commTopoFree(topo);
      for (int i = 0; i < runs; i++) {
        tick();
        if (commTopoLoadXml(hostFile, &topo) != commSuccess) rc = 1;
        commTopoFree(topo);
        tock(i);
      }
      row("load host file", detail, runs);
    }
  }

  /* (c) a cluster of `nodes` copies of the host */
  size_t len = 0;
  char* text = readFile(hostFile, &len);
  char path[4096];
  if (text == NULL || writeCluster(text, nodes, path, sizeof(path)) != 0) {
    skipRow("cluster", "cannot write the cluster file");
    free(text);
    return 1;
  }
  free(text);
  rc |= benchCluster(path, "load cluster (parse+finish)", runs);
  unlink(path);

  /* (d) a few wide hosts */
  if (wide > 0) {
    if (writeWide(wide, perWide, path, sizeof(path)) != 0) {
      skipRow("wide hosts", "cannot write the file");
      return 1;
    }
    rc |= benchCluster(path, "load wide hosts (parse+finish)", runs);
    unlink(path);
  }
  if (rc) fprintf(stderr, "topo_bench: some runs failed\n");
  return rc;
}
