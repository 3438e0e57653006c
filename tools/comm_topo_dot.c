/* comm_topo's Graphviz output: the topology as DOT (-d) and rendered to PNG by dot (-p). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm_topo.h"
#include "debug.h"
#include "topo.h"
#include "utils.h"

/* ---------------------------------------------------------------------------------------------------- */
/* DOT */

/* A DOT string's text (line breaks as \\n). */
static void dotEscape(FILE* f, const char* s) {
  for (; *s; s++) {
    if (*s == '\n') {
      fputs("\\n", f);
      continue;
    }
    if (*s == '"' || *s == '\\') fputc('\\', f);
    fputc(*s, f);
  }
}

static int writeDot(const commTopo* topo, FILE* f, int nShown) {
  static const char* const shapes[COMM_TOPO_NODE_TYPES] = {"box", "ellipse", "box3d", "hexagon", "octagon"};
  static const char* const colors[COMM_TOPO_NODE_TYPES] = {"lightyellow", "white", "palegreen", "lightblue",
                                                           "lightpink"};
  char lab[96], det[512];
  fprintf(f, "graph topology {\n  graph [rankdir=TB, fontname=\"Helvetica\"];\n");
  fprintf(f, "  node [style=filled, fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", "
             "fontsize=9];\n");
  if (nShown < topo->nHosts)
    fprintf(f, "  // hosts %d-%d left out (comm_topo -a includes them)\n", nShown, topo->nHosts - 1);
  for (int h = 0; h < nShown; h++) {
    const commTopoHost* host = &topo->hosts[h];
    fprintf(f, "  subgraph cluster_host%d {\n    label=\"host %d ", h, h);
    dotEscape(f, host->name);
    fprintf(f, "\";\n");
    for (int i = host->firstNode; i < host->firstNode + host->nNodes; i++) {
      const commTopoNode* nd = &topo->nodes[i];
      commTopoNodeLabel(topo, i, lab, sizeof(lab));
      nodeDetails(topo, i, 1, det, sizeof(det));
      fprintf(f, "    n%d [shape=%s, fillcolor=%s, label=\"", i, shapes[nd->type], colors[nd->type]);
      dotEscape(f, lab);
      if (det[0]) {
        fprintf(f, "\\n");
        dotEscape(f, det);
      }
      fprintf(f, "\"];\n");
    }
    for (int l = 0; l < topo->nLinks; l++) {
      const commTopoLink* lk = &topo->links[l];
      if (topo->nodes[lk->a].host != h) continue;
      char bw[32];
      fmtBw(lk->bw, bw, sizeof(bw));
      if (lk->type == COMM_LINK_NVL)
        fprintf(f, "    n%d -- n%d [label=\"NVL x%d %s GB/s\", style=bold, penwidth=2, color=green4];\n", lk->a, lk->b,
                lk->count, bw);
      else if (lk->type == COMM_LINK_SYS)
        fprintf(f, "    n%d -- n%d [label=\"SYS %s GB/s\", style=dashed, color=red];\n", lk->a, lk->b, bw);
      else fprintf(f, "    n%d -- n%d [label=\"PCI %s GB/s\"];\n", lk->a, lk->b, bw);
    }
    fprintf(f, "  }\n");
  }
  if (nShown > 1) { /* the network between the hosts shown */
    fprintf(f, "  network [shape=doublecircle, fillcolor=gray90, label=\"network\"];\n");
    for (int i = 0; i < topo->nNodes; i++) {
      const commTopoNode* nd = &topo->nodes[i];
      if (nd->type != COMM_TOPO_NIC || nd->host >= nShown) continue;
      char sp[32];
      fprintf(f, "  n%d -- network [label=\"NET %s\", style=dotted];\n", i,
              fmtSpeed(nd->u.nic.speedMbps, sp, sizeof(sp)));
    }
  }
  fprintf(f, "}\n");
  return ferror(f) ? -1 : 0;
}

int writeDotFile(const commTopo* topo, const char* path, int nShown) {
  FILE* f = NULL;
  if (commTopoCreateFile("DOT file", path, &f) != commSuccess) { /* not a FIFO or device: never blocks */
    fprintf(stderr, "comm_topo: cannot write %s: %s\n", path, commLogLastWarn());
    return -1;
  }
  int bad = writeDot(topo, f, nShown);
  if (fclose(f) != 0) bad = -1;
  if (bad) fprintf(stderr, "comm_topo: error writing %s\n", path);
  return bad;
}

/* The dot program on PATH into buf; 0 when found. */
static int findDot(char* buf, size_t len) {
  const char* path = getenv("PATH");
  if (path == NULL || *path == '\0') path = "/usr/local/bin:/usr/bin:/bin";
  while (*path) {
    const char* colon = strchr(path, ':');
    size_t dl = colon ? (size_t)(colon - path) : strlen(path);
    if (dl == 0) snprintf(buf, len, "./dot");
    else snprintf(buf, len, "%.*s/dot", (int)dl, path);
    if (access(buf, X_OK) == 0) return 0;
    path += dl + (colon ? 1 : 0);
  }
  return -1;
}

/* Renders the DOT as PNG. 0 done, 1 failed, 3 no dot. */
int renderPng(const commTopo* topo, const char* dotPath, const char* pngPath, int nShown) {
  char dot[PATH_MAX];
  if (findDot(dot, sizeof(dot)) != 0) {
    fprintf(stderr, "comm_topo: dot (graphviz) not installed; wrote no PNG\n");
    return 3;
  }
  char tmp[PATH_MAX];
  const char* src = dotPath;
  if (src == NULL) { /* no -d: a temporary file */
    const char* dir = getenv("TMPDIR");
    snprintf(tmp, sizeof(tmp), "%s/comm_topo_XXXXXX.dot", dir && dir[0] ? dir : "/tmp");
    int fd = mkstemps(tmp, 4);
    if (fd < 0) {
      fprintf(stderr, "comm_topo: cannot create a temporary file %s: %s\n", tmp, strerror(errno));
      return 1;
    }
    close(fd);
    if (writeDotFile(topo, tmp, nShown) != 0) {
      unlink(tmp);
      return 1;
    }
    src = tmp;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execl(dot, "dot", "-Tpng", "-o", pngPath, src, (char*)NULL);
    _exit(127);
  }
  int status = 0, ok = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid) ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (src == tmp) unlink(tmp);
  if (!ok) {
    fprintf(stderr, "comm_topo: %s -Tpng -o %s failed\n", dot, pngPath);
    return 1;
  }
  return 0;
}
