/* Topology: the machine (or machines) as a graph of CPUs, PCI switches, GPUs, NICs and NVSwitches, with a
 * bandwidth and latency on every link and the best path between any two devices.
 *
 * Where it comes from (one of):
 *  - discovery (src/topo/discover.c): hwloc for CPUs, NUMA nodes, caches and the PCI tree; sysfs / verbs for
 *    NIC link speeds; the CUDA driver and NVML (loaded with dlopen when present) for GPUs and NVLinks;
 *  - a file (src/topo/xml.c; NCCL's format in src/topo/nccl_xml*.c): COMM_TOPO_FILE, which may describe many
 *    hosts.
 * Both fill the graph through the builder below (commTopoAddHost / commTopoAddNode / commTopoAddNvlink),
 * then commTopoFinish makes the links and computes the paths. Everything above (rank ordering, transport
 * rules, comm_topo, the tuner) reads the finished graph only.
 *
 * Structure. A topology holds hosts; every node belongs to one host. Within a host the nodes form a tree:
 * the CPUs (one per NUMA node) are the roots; a PCI bridge/switch, GPU or NIC hangs below a CPU or a PCI
 * node (`parent`). NVSwitches have no parent. commTopoFinish makes the links:
 *  - PCI: every node with a parent is linked to it (type PCI, bandwidth `bw` of the child: its upstream
 *    link; a NIC without a PCI address (veth, virtual functions hwloc cannot place) hangs below a CPU with
 *    a PCI-class link of its own speed);
 *  - SYS: between every two CPUs of a host (bandwidth: the host's cpuLinkBw);
 *  - NVL: from commTopoAddNvlink (GPU to GPU, or GPU to the host's NVSwitch node), `count` links of
 *    `bw` GB/s in total.
 * Links are symmetric (one entry per direction in the adjacency lists).
 *
 * Paths. commTopoFinish computes, for every ordered pair of devices (GPU, NIC, CPU) of the same host, the
 * best path: the lowest class, then the highest bottleneck bandwidth, then the fewest hops. Classes, from
 * best to worst (NCCL's names in brackets):
 *   LOC  same device
 *   NVL  NVLink only: direct or through NVSwitches
 *   PIX  through at most one PCI switch
 *   PXB  through several PCI switches, not through a CPU
 *   PHB  through a CPU (its PCI host bridge)
 *   SYS  through the link between two CPUs
 *   NET  different hosts: out through a NIC, over the network, in through a NIC
 * Paths never pass through a GPU or a NIC. Across hosts commTopoPathOf answers NET with the bottleneck of
 * (best path to the nearest NIC, the two NIC speeds, the best path from the far NIC), or DIS when either
 * host has no NIC.
 */
#ifndef COMM_TOPO_H_
#define COMM_TOPO_H_

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "comm.h"

/* ---- Legacy summary (logged at init) ---- */
typedef struct {
  int nPackages, nNumaNodes, nCores, nPUs;
} commMachineSummary;
commResult_t commTopoSummary(commMachineSummary* out);

/* ---- Graph ---- */

typedef enum {
  COMM_TOPO_CPU = 0, /* one per NUMA node (a package without NUMA information counts as one) */
  COMM_TOPO_PCI = 1, /* PCI bridge or switch */
  COMM_TOPO_GPU = 2,
  COMM_TOPO_NIC = 3,
  COMM_TOPO_NVS = 4, /* NVSwitch (all of a host's NVSwitch chips as one node) */
  COMM_TOPO_NODE_TYPES
} commTopoNodeType;

typedef enum { COMM_LINK_NVL = 0, COMM_LINK_PCI = 1, COMM_LINK_SYS = 2, COMM_LINK_TYPES } commTopoLinkType;

typedef enum {
  COMM_PATH_LOC = 0,
  COMM_PATH_NVL = 1,
  COMM_PATH_PIX = 2,
  COMM_PATH_PXB = 3,
  COMM_PATH_PHB = 4,
  COMM_PATH_SYS = 5,
  COMM_PATH_NET = 6,
  COMM_PATH_DIS = 7, /* no path (disconnected graph, or a node that is not a device) */
  COMM_PATH_TYPES
} commTopoPathType;

/* PCI node kinds */
typedef enum { COMM_PCI_BRIDGE = 0, COMM_PCI_SWITCH = 1, COMM_PCI_HOSTBRIDGE = 2 } commTopoPciKind;
/* NIC link layers */
typedef enum { COMM_NIC_ETH = 0, COMM_NIC_IB = 1, COMM_NIC_ROCE = 2 } commTopoNicLink;

#define COMM_TOPO_NAME_MAX 64
#define COMM_TOPO_BUSID_MAX 16     /* "0000:17:00.0" */
#define COMM_TOPO_CPUSET_MAX 256   /* cpu list "0-55,112-167" */
#define COMM_TOPO_MAX_NVLINKS 4096 /* per pair of ends, summed over declarations */

typedef struct {
  int type;   /* commTopoNodeType */
  int host;   /* index in topo->hosts */
  int parent; /* node index, -1: none (CPUs, NVSwitches) */
  int index;  /* the n-th node of its type in its host (GPU: local GPU index; NIC: local NIC index) */
  char busId[COMM_TOPO_BUSID_MAX]; /* PCI address, lower case, "" when none */
  char name[COMM_TOPO_NAME_MAX];   /* NIC: device name (mlx5_0, eth0); GPU: model; CPU: model; PCI: "" */
  double bw;                       /* GB/s of the link to the parent (PCI class); 0 for nodes without parent */
  union {
    struct {
      int numa;                        /* NUMA node id (os index), -1 unknown */
      char arch[16];                   /* x86_64, aarch64, ppc64le */
      char vendor[32];                 /* GenuineIntel, AuthenticAMD, ... */
      char cpus[COMM_TOPO_CPUSET_MAX]; /* the PUs of this NUMA node, as a Linux cpu list */
      int nCores;
      int family, model; /* CPUID family and model numbers (x86), 0 unknown; NCCL's familyid/modelid */
    } cpu;
    struct {
      int kind; /* commTopoPciKind */
      int gen;  /* PCIe generation of the upstream link, 0 unknown */
      int width;
    } pci;
    struct {
      int dev;   /* CUDA device index, -1 when not matched to a CUDA device */
      int sm;    /* compute capability x 10 (90 for Hopper), 0 unknown */
      int memMB; /* device memory, 0 unknown */
    } gpu;
    struct {
      int link;                        /* commTopoNicLink */
      int port;                        /* IB port, 1-based; 0 for netdevs */
      int speedMbps;                   /* link speed */
      char netdev[COMM_TOPO_NAME_MAX]; /* the netdev behind an RDMA device, or the NIC's own name */
      uint64_t guid;
      int gdr; /* the NIC can read/write GPU memory (GPUDirect RDMA capable), 0 unknown/no */
    } nic;
  } u;
  /* Filled by commTopoFinish */
  int firstLink, nLinks; /* adjacency: topo->adj[firstLink .. firstLink + nLinks) are link indices */
} commTopoNode;

typedef struct {
  int a, b;  /* node indices */
  int type;  /* commTopoLinkType */
  int count; /* NVLink: number of links in the bundle; otherwise 1 */
  double bw; /* GB/s, each direction */
  double latUs;
} commTopoLink;

typedef struct {
  char name[COMM_TOPO_NAME_MAX]; /* hostname, "" unknown */
  double cpuLinkBw;              /* GB/s between two CPUs of this host (0: default for the arch) */
  int firstNode, nNodes;         /* nodes of a host are contiguous once finished (commTopoFinish sorts) */
  int nGpus, nNics, nCpus;
  /* Filled by commTopoFinish: topo->typeNodes[typeFirst[t] .. typeFirst[t + 1]) are the host's nodes of type
   * t, in index order. */
  int typeFirst[COMM_TOPO_NODE_TYPES + 1];
} commTopoHost;

typedef struct {
  uint8_t type; /* commTopoPathType */
  uint8_t hops;
  float bw;    /* bottleneck GB/s */
  float latUs; /* sum of link latencies */
} commTopoPath;

typedef struct commTopo {
  commTopoHost* hosts;
  int nHosts, hostsCap;
  commTopoNode* nodes;
  int nNodes, nodesCap;
  commTopoLink* links;
  int nLinks, linksCap;
  int* adj; /* 2 * nLinks entries once finished */
  /* NVLinks given to the builder, made into links by commTopoFinish */
  struct commTopoNvlinkReq {
    int gpu, peer, count;
    double bw;
  } * nvreq;
  int nNvreq, nvreqCap;
  int finished;
  /* Paths, per host: paths[h][i * n + j] for the i-th and j-th node of host h (n = hosts[h].nNodes); a host
   * with the same nodes and links as the host before it shares that host's table */
  commTopoPath** paths;
  int* typeNodes; /* nNodes entries: see commTopoHost.typeFirst */
} commTopo;

/* Builder. Indices stay valid until commTopoFinish, which may renumber nodes (hosts contiguous, in host
 * order, preserving order within a host) and fixes parents accordingly. */
commResult_t commTopoCreate(commTopo** out);
void commTopoFree(commTopo* topo);
/* Returns the new host's index in *host. */
commResult_t commTopoAddHost(commTopo* topo, const char* name, int* host);
/* A zeroed node of `type` in `host` below `parent` (-1: none); its index in *node. Fill the fields through
 * commTopoNodeAt(topo, *node) before commTopoFinish. */
commResult_t commTopoAddNode(commTopo* topo, int host, int type, int parent, int* node);
/* `count` NVLinks between GPU node `gpu` and node `peer` (a GPU or the host's NVSwitch), `bw` GB/s in total
 * per direction. Adding the same pair twice (from either end) adds the counts and bandwidths. */
commResult_t commTopoAddNvlink(commTopo* topo, int gpu, int peer, int count, double bw);
/* Validates (types, parents within the host, GPUs/NICs below a CPU or PCI node, ...), makes the links and
 * computes all paths. After it, the topology is read-only. Errors: commInvalidArgument with a WARN. */
commResult_t commTopoFinish(commTopo* topo);
static inline commTopoNode* commTopoNodeAt(commTopo* topo, int n) { return &topo->nodes[n]; }

/* Queries (finished topology). */
/* The node of `type` with local index `index` in `host`, -1 if none. */
int commTopoFind(const commTopo* topo, int host, int type, int index);
/* The node with PCI bus id `busId` (case-insensitive, domain optional) in `host`, -1 if none. */
int commTopoFindBusId(const commTopo* topo, int host, const char* busId);
/* The CPU node above node n (its root), -1 for an NVSwitch. */
int commTopoCpuOf(const commTopo* topo, int n);
/* Best path from node a to node b (any hosts). */
commTopoPath commTopoPathOf(const commTopo* topo, int a, int b);
const char* commTopoPathName(int type);     /* "LOC", "NVL", ... */
int commTopoPathFromName(const char* name); /* -1 if unknown; accepts NCCL's names too (NVB -> NVL) */
const char* commTopoNodeTypeName(int type); /* "CPU", "PCI", "GPU", "NIC", "NVS" */
/* Short label: "GPU0", "NIC2 mlx5_2", "CPU1", "PCI 0000:15:00.0", "NVS" (buffer of at least 96 bytes). */
const char* commTopoNodeLabel(const commTopo* topo, int n, char* buf, size_t len);

/* The NICs of a host, nearest first, as seen from node `from` (a GPU or CPU): ordered by path class, then
 * bottleneck bandwidth (higher first), then NIC speed, then NIC index. Returns the count written (at most
 * max). */
int commTopoNicsByDistance(const commTopo* topo, int from, int* nics, int max);

/* ---- Discovery and files ---- */

/* Discovers this machine as one host. Parts that cannot be read (no PCI info in a container, no sysfs
 * speed, no CUDA) are a WARN and a default, never an error; the error cases are allocation failures. */
commResult_t commTopoDiscover(commTopo** out);

/* XML. The format (docs/ARCHITECTURE.md, "Topology files"):
 *   <topology version="1">
 *     <host name="dgx0" cpulinkbw="40.0">
 *       <cpu numa="0" arch="x86_64" vendor="GenuineIntel" cpus="0-55" cores="56" name="..." family="6" model="143">
 *         <pci busid="0000:15:00.0" kind="switch" gen="5" width="16" bw="63.0">
 *           <gpu busid="0000:18:00.0" dev="0" sm="90" mem="81559" name="NVIDIA H100 80GB HBM3" bw="63.0">
 *             <nvlink target="nvswitch" count="18" bw="450.0"/>   (or target="<busid of a GPU>")
 *           </gpu>
 *           <nic busid="0000:17:00.0" name="mlx5_0" link="ib" port="1" speed="400000" netdev="ibp23s0"
 *                guid="0x..." gdr="1" bw="63.0"/>
 *         </pci>
 *       </cpu>
 *     </host>
 *   </topology>
 * Parse errors: commInvalidArgument and a WARN "<source>:<line>: <what is wrong>"; nothing is returned.
 * A text whose root element is NCCL's <system> is read as NCCL's format (commTopoParseNcclXml). */
commResult_t commTopoParseXml(const char* text, size_t len, const char* source, commTopo** out);
/* Reads `path` with commTopoReadFile (regular files only, at most COMM_TOPO_FILE_MAX_BYTES, within
 * COMM_TOPO_FILE_READ_MS), then parses it. */
commResult_t commTopoLoadXml(const char* path, commTopo** out);
/* Canonical text of a finished topology: dump -> load -> dump is byte-identical. */
commResult_t commTopoWriteXml(const commTopo* topo, FILE* f);

/* NCCL's topology format (NCCL_TOPO_FILE, NCCL_TOPO_DUMP_FILE; src/topo/nccl_xml*.c, docs/ARCHITECTURE.md
 * "NCCL's topology files"): <system version="1"><cpu numaid affinity arch vendor familyid modelid><pci busid
 * class link_speed link_width><gpu dev sm><nvlink target count tclass/></gpu></pci> ... <nic><net name speed
 * port guid gdr/></nic> ...</cpu></system>. What NCCL's format has and libcomm does not use is skipped (one
 * INFO line lists it); errors as commTopoParseXml's. */
commResult_t commTopoParseNcclXml(const char* text, size_t len, const char* source, commTopo** out);
/* A finished topology in NCCL's format, canonical too (write -> read -> write is byte-identical); what the
 * format cannot say (names, memory, netdevs, bandwidths NCCL derives otherwise) is left out. */
commResult_t commTopoWriteNcclXml(const commTopo* topo, FILE* f);

typedef enum { COMM_TOPO_FORMAT_COMM = 0, COMM_TOPO_FORMAT_NCCL = 1 } commTopoFormat;
/* Writes `path` in `format` through commTopoCreateFile (never blocks on a FIFO or a device). */
commResult_t commTopoDumpFile(const commTopo* topo, const char* path, int format);
/* The format COMM_TOPO_DUMP_FILE is written in: COMM_TOPO_DUMP_FORMAT (comm or nccl) when set, else NCCL's
 * when the file's name came from NCCL_TOPO_DUMP_FILE, else libcomm's. */
int commTopoDumpFormat(void);
/* COMM_TOPO_DUMP_FILE's writer: commTopoDumpFile in commTopoDumpFormat()'s format. */
commResult_t commTopoDumpXml(const commTopo* topo, const char* path);

/* Files a user names (src/topo/topo_file.c). Each is opened with O_NONBLOCK | O_CLOEXEC and fstat'ed:
 * anything but a regular file (FIFO, device, socket, directory) is refused at once with commInvalidArgument
 * and a WARN naming the file and its type, so nothing waits on a FIFO's other end or reads /dev/zero
 * forever. `what` names the file in messages ("topology file"). */
#define COMM_TOPO_FILE_MAX_BYTES ((size_t)64 << 20) /* a 1,024-host cluster of DGX-like hosts is ~6 MB */
#define COMM_TOPO_FILE_READ_MS 10000                /* reading a topology file, whatever the file system */
/* The whole file into *text (NUL-terminated, malloc'ed) and its length into *len. A file larger than
 * maxBytes is refused before reading (commInvalidArgument), one still unread at timeoutMs is an error
 * (commSystemError); each read() is of a regular file, so only a stuck file system can hold one. */
commResult_t commTopoReadFile(const char* what, const char* path, size_t maxBytes, int timeoutMs, char** text,
                              size_t* len);
/* Creates or truncates `path` for writing (mode 0644), refusing anything that exists and is not a regular
 * file. */
commResult_t commTopoCreateFile(const char* what, const char* path, FILE** out);
/* commSuccess when `path` does not exist or is a regular file; else the refusal above. */
commResult_t commTopoCheckPath(const char* what, const char* path);
/* "a FIFO (named pipe)", "a directory", ... for a st_mode. */
const char* commTopoFileTypeName(unsigned mode);

/* COMM_TOPO_FILE when set (load), else discovery; shared by the process's communicators (cached per
 * source), so release it with commTopoRelease, never commTopoFree. (COMM_TOPO_DUMP_FILE is written by the
 * communicator's rank COMM_TOPO_DUMP_FILE_RANK, see src/core/comm.c.) */
commResult_t commTopoGet(commTopo** out);
void commTopoRelease(commTopo* topo);

/* ---- Placement, rank ordering and transport rules (src/topo/order.c) ---- */

/* Where each rank of a communicator sits in the topology. */
typedef struct commTopoRankT {
  int host; /* topology host of the rank */
  int dev;  /* node of the rank's device: its GPU, or for a host rank its CPU (NUMA node) */
  int node; /* communicator node (ranks with the same host identity), 0..nNodes-1 */
} commTopoRank;

/* The NIC rank r uses on channel c: the c-th (mod count) of the NICs nearest its device, with ranks that
 * share a device (and nearest NIC set) spread over the equally near NICs by their local index. */
int commTopoRankNic(const commTopo* topo, const commTopoRank* ranks, int nRanks, int r, int channel);

/* Rings: rings[c * nRanks + i] is the rank at position i of channel c's ring. Nodes appear in order
 * (node 0 first), each as one contiguous segment; within a node the order follows the fastest paths
 * between the ranks' devices (NVLink before PCI before CPU), starting at the rank nearest the NIC the
 * channel enters the node through, so different channels enter (and leave) through different NICs. */
commResult_t commTopoRings(const commTopo* topo, const commTopoRank* ranks, int nRanks, int nNodes, int nChannels,
                           int* rings);
/* The intra-node order of node `node` on channel c (ranks in ring order), as used by commTopoRings:
 * order[0 .. m) for the m ranks of that node. Returns m. */
int commTopoNodeOrder(const commTopo* topo, const commTopoRank* ranks, int nRanks, int node, int channel, int* order);
/* The same for channels channel .. channel + nChannels - 1 at once (what does not depend on the channel is
 * made once): channel + k's order in orders[k * m .. (k + 1) * m), for orders of nChannels x nRanks. */
int commTopoNodeOrders(const commTopo* topo, const commTopoRank* ranks, int nRanks, int node, int channel,
                       int nChannels, int* orders);

/* Transport between two ranks' devices. */
typedef enum { COMM_TOPO_USE_P2P = 0, COMM_TOPO_USE_SHM = 1, COMM_TOPO_USE_NET = 2 } commTopoTransport;
typedef struct {
  int transport; /* commTopoTransport */
  int pathType;  /* class of the path between the two devices */
  int gdr;       /* NET: GPUDirect RDMA allowed on both ends (GPU ranks only) */
  int fallback;  /* GPUs that get less than the best: shm beyond COMM_P2P_LEVEL, network without GDR */
  char why[512]; /* one line: the rule that decided */
} commTopoTransportChoice;
/* P2P for GPUs whose path class is at most COMM_P2P_LEVEL (default PXB), shm within a host,
 * network across hosts; GDR when the GPU-NIC path class is at most COMM_NET_GDR_LEVEL (default PXB) and
 * the NIC supports it. */
commResult_t commTopoChooseTransport(const commTopo* topo, const commTopoRank* ranks, int nRanks, int a, int b,
                                     commTopoTransportChoice* out);
/* The path-class limits currently in force (parsed from COMM_P2P_LEVEL / COMM_NET_GDR_LEVEL: a class
 * name, or NCCL's integers 0-5). */
int commTopoP2pLevel(void);
int commTopoGdrLevel(void);

/* Binds the calling thread to the PUs of the CPU (NUMA node) nearest `node`, intersected with the
 * process's allowed PUs; no-op with an INFO line when that would leave nothing. */
commResult_t commTopoBindThread(const commTopo* topo, int node, const char* what);
/* Binds `thread` to the cores of a Linux cpu list ("0-3,8"), intersected with the calling thread's allowed
 * cores; 1 when bound, else 0 with an INFO line (unusable list, nothing in common). `near` names what the
 * cores are near, for the log. */
int commBindThreadToCpuList(pthread_t thread, const char* cpus, const char* what, const char* near);

/* The CPU (NUMA node) of `host` the calling thread runs on: the one sharing most PUs with its allowed
 * cores (ties: the lowest index). */
int commTopoCallerCpu(const commTopo* topo, int host);

/* Logs the machine at INFO (rank 0 of a communicator). */
void commTopoLogMachine(void);

#endif
