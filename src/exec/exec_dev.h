/* The CUDA executor: collectives and send/recv on device buffers, run by one kernel launch per plan on
 * the communicator's own stream (src/exec/cuda/). Built when the CUDA toolkit is found (COMM_HAVE_CUDA);
 * without it, device buffers are refused with a WARN at the API.
 *
 * A launch carries a device plan: the connections its steps use and the steps of every channel, with
 * buffer references already turned into device addresses. Small plans travel inside the kernel's
 * parameters (nothing to copy, and a CUDA graph captures them by value); larger ones in pinned, mapped
 * host memory the kernel reads directly. One thread block runs each channel's steps in order. */
#ifndef COMM_EXEC_DEV_H_
#define COMM_EXEC_DEV_H_

#include <stddef.h>
#include <stdint.h>

#include "datatype.h"
#include "dev_conn.h"
#include "schedule.h"

typedef struct {
  uint8_t prim;  /* commPrim_t */
  uint8_t flags; /* COMM_STEP_* */
  uint16_t pad;
  int32_t sendConn; /* index into the plan's connections, -1: none */
  int32_t recvConn;
  int32_t sendPeer; /* ranks, for error reports */
  int32_t recvPeer;
  uint32_t pad2;
  uint64_t src, dst;         /* device addresses */
  uint64_t count, recvCount; /* elements */
} commDevStep;

/* What a kernel reports when it gives up (pinned host memory, read by commGetAsyncError). */
enum {
  COMM_DEV_OK = 0,
  COMM_DEV_ABORTED = 1,
  COMM_DEV_TIMEOUT = 2,
  COMM_DEV_SIZE_MISMATCH = 3,
  COMM_DEV_NET_FAILED = 4,
  COMM_DEV_SIG_MISMATCH = 5 /* a message carried another operation's signature (got: its words, mine: ours) */
};

/* Every device message carries the signature of its operation, the host executor's commOpSig (exec.h),
 * seen here as COMM_DEV_SIG_WORDS 64-bit words, the last one the collective sequence number. Simple: the
 * first COMM_DEV_SIG_BYTES of each slot (the payload after it, and the slot's size counts both); LL: its
 * digest (commDevSigDigest) in every data line's flags, and the words at a fixed place of the slot
 * (dev_conn.h).
 * The receiver compares it with its own before it writes a byte of what came to a user buffer. */
#define COMM_DEV_SIG_WORDS 4
#define COMM_DEV_SIG_BYTES (8 * COMM_DEV_SIG_WORDS)
#define COMM_DEV_SIG_SEQ_WORD 3
/* A 64-bit digest of a signature (multiply-xorshift rounds); LL lines carry its low half. */
static inline uint64_t commDevSigDigest(const uint64_t* sig) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < COMM_DEV_SIG_WORDS; i++) {
    h ^= sig[i];
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h == 0 ? 1 : h; /* never 0: a zeroed line never passes for a digest */
}
typedef struct {
  int32_t code; /* COMM_DEV_* of the first failure */
  int32_t channel, peer, isSend;
  uint64_t opCount;
  uint64_t got, expected;                                         /* bytes (size mismatch) */
  uint64_t gotSig[COMM_DEV_SIG_WORDS], mySig[COMM_DEV_SIG_WORDS]; /* signature mismatch */
} commDevError;

/* COMM_DEV_TRACE: end times of channel 0's first phases (a step, or steps run as a batch, chain or fold) */
#define COMM_DEV_TRACE_STEPS 32
#define COMM_DEV_INLINE_BYTES 2048 /* most plan bytes carried in the kernel's parameters */
#define COMM_DEV_INLINE_SMALL 512  /* a kernel variant with less to copy per launch, for small plans */
#define COMM_DEV_THREADS 512       /* threads per channel (block) */
#define COMM_DEV_THREADS_SMALL 128 /* for plans whose steps move little: fewer threads to synchronise */
#define COMM_DEV_SMALL_STEP_BYTES (64 << 10)
#define COMM_DEV_SMEM_PLAN_MAX (32 << 10) /* most shared memory a block's copy of its plan takes */

typedef struct {
  uint64_t planAddr; /* device-visible address of conns then steps; 0: in the parameters' inline area */
  int32_t nChannels, nConns;
  int32_t stepBegin[COMM_MAX_CHANNELS + 1]; /* channel c runs steps [stepBegin[c], stepBegin[c+1]) */
  int32_t dtype, redopKind;
  uint64_t scalarBits, divisor;
  uint64_t scalarAddr; /* device address of a PREMULSUM scalar read at run time (0: scalarBits) */
  uint64_t slotBytes;
  uint32_t nSlots, eltSize;
  volatile int32_t* abortFlag; /* mapped host memory, set by commAbort */
  commDevError* error;         /* mapped host memory */
  uint64_t timeoutNs;          /* without progress (0: never) */
  uint64_t* trace;             /* COMM_DEV_TRACE=1: channel 0 writes its timeline here (mapped host memory) */
  int32_t proto;               /* commProtoLL or commProtoSimple */
  int32_t llBatch;             /* LL (COMM_DEV_LL_BATCH, default 2): 1: consecutive one-piece sends (or receives)
                                * to distinct peers run at once, one warp each; 2: and a one-shot allreduce's
                                * steps run as one pass per line (exec_ll.cuh, the one-shot fold) */
  char* llStaging;             /* LL: 2 * COMM_DEV_LL_PIECE bytes per channel of device memory */
  uint32_t* proxyBusy;         /* plans with net connections: block c sets word c (mapped host memory) while
                                * it runs, so the proxy thread moves their FIFOs (NULL: no net connection) */
  uint64_t opCount;
  uint64_t sig[COMM_DEV_SIG_WORDS]; /* what every message of this plan carries and every one it receives must */
  uint64_t sigDigest;               /* commDevSigDigest(sig) */
  uint32_t smemPlanBytes;           /* each block copies the connections and its channel's steps into this much
                                * dynamic shared memory first (0: it reads them in place; COMM_DEV_SMEM_PLAN) */
  uint32_t earlyLaunch;             /* programmatic dependent launch (COMM_DEV_PDL): a one-channel kernel lets the
                                * next kernel of its stream launch once it runs; every kernel waits for the
                                * one before it to complete before its first global memory access */
  uint32_t* doneBlocks;             /* device memory: every block adds 1 once all its stores are done (NULL when
                                * captured in a graph); a call on another stream waits for the sum the host
                                * expects (cuStreamWaitValue32), so no call records an event (exec_dev_stream.c) */
} commDevPlanHdr;

typedef struct {
  commDevPlanHdr hdr;
  union {
    uint64_t align;
    char bytes[COMM_DEV_INLINE_BYTES];
  } inl;
} commDevArgs;

#ifdef __cplusplus
extern "C" {
#endif

/* src/exec/cuda/exec_kernel.cu: launch the executor's kernel, one block of `threads` per channel, with the
 * first inlineBytes of args->inl (the variant with the smallest parameters that holds them). cudaError_t. */
int commDevLaunch(const commDevArgs* args, size_t inlineBytes, int threads, void* stream);
/* src/exec/cuda/exec_kernel.cu: load the kernel's variants into the current context and say what bounds
 * the blocks resident at once on its GPU (cudaError_t). */
typedef struct {
  int smCount;             /* SMs of the current GPU */
  int blocksPerSm;         /* blocks of COMM_DEV_THREADS threads one SM holds at once */
  int blocksPerSmSmall;    /* the same with COMM_DEV_THREADS_SMALL threads */
  int numRegs, localBytes; /* per thread */
} commDevKernelInfo;
int commDevLoadKernels(commDevKernelInfo* info);

#ifdef __cplusplus
}
#endif

#ifndef __CUDACC__
struct commComm;
struct commPlan;
struct commConn;

/* src/exec/cuda/exec_dev*.c: the state in exec_dev.c, plan layout in exec_dev_plan.c, the plan cache in
 * exec_dev_cache.c, stream order in exec_dev_stream.c, errors in exec_dev_error.c. Every function returns
 * commInvalidUsage with a WARN in a build without CUDA. */
/* Enqueue plans (all of one communicator, on device buffers) on its stream, joined to the callers'
 * streams (streams[i] of plans[i]) in both directions. Returns without waiting for the GPU. */
commResult_t commDevRunPlans(struct commComm* comm, struct commPlan** plans, int nPlans);
/* A collective on device buffers identical to an earlier call of comm (function, count, datatype, op, root,
 * buffers): its device plan launched again on the task's stream, without building it (*launched = 1);
 * *launched = 0 when there is none (the caller builds the plan). */
typedef struct {
  commFunc_t func;
  size_t count;
  commDataType_t dtype;
  const commRedOpArgs* redop;
  const void* devScalar; /* a PREMULSUM scalar in device memory, else NULL */
  int root;
  uint64_t collSeq; /* the call's collective sequence number (its signature's, which a cached plan takes) */
  const void* sendbuff;
  void* recvbuff;
  commStream_t stream;
} commDevCall;
commResult_t commDevRunCached(struct commComm* comm, const commDevCall* t, int* launched);
/* The executor's state of comm (stream, events, abort and error words), made on first use. */
commResult_t commDevEnsure(struct commComm* comm);
/* Scratch space in device memory for plans that need it (kept until the communicator goes). */
commResult_t commDevScratch(struct commComm* comm, size_t bytes, void** scratch);
/* A failure a kernel of comm reported, or a CUDA error of its stream (commSuccess if none), with a WARN the
 * first time; the caller records it as the communicator's async error. */
commResult_t commDevPollError(struct commComm* comm);
/* Wait until every operation enqueued on comm has finished (finalize); kernels end on abort or timeout. */
commResult_t commDevSync(struct commComm* comm);
/* Tell running kernels to stop (commAbort). */
void commDevAbort(struct commComm* comm);
/* Release the executor's state (after commDevSync or commDevAbort). */
void commDevFree(struct commComm* comm);
/* Is the CUDA executor in this build? */
int commDevAvailable(void);
#endif

#endif
