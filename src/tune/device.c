/* The CUDA executor's choices for a collective on device buffers: protocol (LL or Simple), channels (one
 * thread block each) and step size. The algorithm is the host tuner's (commTuneChoose); these rules
 * replace its host-executor prices for the rest. Every input is the same on every rank, so every rank
 * chooses the same plan without a message. */
#include "check.h"
#include "communicator.h"
#include "debug.h"
#include "param.h"
#include "tune.h"

/* Channels per collective. Every rank must pick the same count, so it follows from what all ranks know:
 * the most ranks sharing one GPU. One block runs each channel and the blocks of all ranks on a GPU must
 * be resident at once (they wait on each other), so they share a budget of blocks per GPU. */
/* One 512-thread block per SM (128 registers per thread): below the SM count of A100 (108) and H100 PCIe
 * (114), with room for other kernels. */
#define DEV_BLOCKS_PER_GPU 96
#define DEV_BYTES_PER_CHANNEL (512 << 10) /* one more channel per this many bytes (COMM_DEV_BYTES_PER_CHANNEL) */
#define DEV_LL_MAX_DEFAULT 4096           /* device messages up to this many bytes use LL (COMM_DEV_LL_MAX) */

/* Two ranks on one GPU: same host and the same PCI bus id (device ordinals differ between processes with
 * different CUDA_VISIBLE_DEVICES); the ordinal when a bus id is unknown. */
static int sameGpu(const commPeerInfo* a, const commPeerInfo* b) {
  if (a->hostHash != b->hostHash || a->cudaDev < 0 || b->cudaDev < 0) return 0;
  if (a->busId >= 0 && b->busId >= 0) return a->busId == b->busId;
  return a->cudaDev == b->cudaDev;
}

static int devMaxChannels(struct commComm* comm) {
  if (comm->devMaxChannels > 0) return comm->devMaxChannels;
  int most = 1;
  for (int i = 0; i < comm->nRanks; i++) {
    int same = 0;
    for (int j = 0; j < comm->nRanks; j++) same += sameGpu(&comm->peers[i], &comm->peers[j]);
    if (same > most) most = same;
  }
  int cap = (int)commParamInt("COMM_DEV_NCHANNELS", 32, 1, COMM_MAX_CHANNELS);
  int fit = DEV_BLOCKS_PER_GPU / most;
  comm->devMaxChannels = fit < 1 ? 1 : fit < cap ? fit : cap;
  return comm->devMaxChannels;
}

commResult_t commTuneChooseDevice(struct commComm* comm, commFunc_t func, size_t count, size_t eltSize,
                                  commTuneChoice* out) {
  COMMCHECK(commTuneChoose(comm, func, count, eltSize, out));
  size_t bytes = commFuncBytes(func, count, eltSize, comm->nRanks);
  /* Channels follow the size. */
  size_t perChannel = (size_t)commParamSize("COMM_DEV_BYTES_PER_CHANNEL", DEV_BYTES_PER_CHANNEL, 4096, 1 << 30);
  size_t want = bytes / perChannel;
  int maxCh = devMaxChannels(comm);
  out->nChannels = want < 1 ? 1 : want > (size_t)maxCh ? maxCh : (int)want;
  /* LL for small messages, up to COMM_DEV_LL_MAX bytes. On 4 H200s LL's one-store lines beat Simple's
   * fences up to 2-4 KiB and lose from 8 KiB on, where one LL channel's bandwidth shows (docs/PERF.md,
   * entry 10). LL lines go straight into the peer's FIFO: P2P connections and the shm FIFO in host memory
   * (COMM_P2P_DISABLE=1) carry them. A communicator spanning hosts, or with COMM_SHM_DISABLE=1 as well,
   * runs Simple: its network proxy moves whole slots. */
  size_t llMax = (size_t)commParamSize("COMM_DEV_LL_MAX", DEV_LL_MAX_DEFAULT, 0, 1 << 30);
  if (comm->nNodes > 1 || (comm->p2pDisable && comm->shmDisable)) llMax = 0;
  out->proto = bytes <= llMax ? commProtoLL : commProtoSimple;
  /* The FIFO bounds a step (the plan caps it at half the FIFO). */
  out->chunkBytes = (size_t)comm->nSlots * comm->slotBytes;
  TRACE(COMM_TUNE, "TUNER device: %s of %zu bytes: %s, %d of %d channels, LL up to %zu bytes", commFuncName(func),
        bytes, out->proto == commProtoLL ? "LL" : "Simple", out->nChannels, maxCh, llMax);
  return commSuccess;
}
