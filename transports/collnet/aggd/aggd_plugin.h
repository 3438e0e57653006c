/* comm_aggd's CollNet plugin (libcomm-collnet-aggd.so), internals shared by its control part (aggd_plugin.c:
 * the NCCL tables, init, listen, connect / registration, close) and its data path (aggd_client.c:
 * iallreduce, iallgather, ireducescatter, test, the non-blocking progress of the daemon connections). Its own library: it uses only system
 * headers, NCCL's ABI declarations and the protocol (aggd_proto.h), never libcomm.
 * SPDX-License-Identifier: Apache-2.0 */
#ifndef COMM_AGGD_PLUGIN_H_
#define COMM_AGGD_PLUGIN_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#define NET_NCCL_ABI_ONLY
#include "../nccl/collnet_nccl.h"
#include "aggd_proto.h"

#define AGGD_MAX_REQS 64    /* requests in flight per collComm */
#define AGGD_INLINE_PARTS 4 /* SGE parts kept in the request (more: allocated) */

typedef struct aggdReq aggdReq;
typedef struct aggdColl aggdColl;

/* One request's shard on one daemon, in rounds (one contribution and one result each). Allreduce: bytes at off
 * of send / recv, in chunks of chunkBytes (the last one shorter). Allgather / reducescatter: the window's layout
 * on this daemon (aggd_proto.h, WINDOWS). */
typedef struct {
  aggdReq* req;
  size_t off, bytes, chunkBytes;
  aggdWin w;
  uint64_t nrounds, sent, recvd;
} aggdEnt;

typedef struct {
  uint8_t* addr;
  size_t size;
} aggdPart;

/* The connection to daemon i (shard i). Entries are in posting order; head is the oldest not yet received;
 * sendPos (from head) the one being sent. */
typedef struct {
  int fd;
  char name[160];
  uint32_t window, chunk;
  uint64_t sendSeq, recvSeq; /* contributions sent, results received */
  aggdEnt ents[AGGD_MAX_REQS];
  int head, count, sendPos;
  size_t sendOff;                                /* bytes of the message being written (0: none started) */
  size_t sendPre, sendLen;                       /* its OP (0 or all of opMsg) and its payload's bytes */
  uint8_t opMsg[AGGD_HDR_BYTES + AGGD_OP_BYTES]; /* the OP before an allgather's / reducescatter's first round */
  uint8_t sendHdr[AGGD_HDR_BYTES];
  uint8_t recvHdr[AGGD_HDR_BYTES];
  size_t recvHdrGot, bodyGot;
  int inBody;
  aggdHdr rh;
  uint64_t rcMember, rcBase; /* allgather result: the member whose bytes body byte rcBase begins */
  uint8_t ctrl[AGGD_MAX_CTRL + 1];
} aggdDaemon;

struct aggdReq {
  aggdColl* cc;
  int used, done, pending; /* pending: shards not yet received */
  int kind;                /* AGGD_K_* */
  size_t bytes;            /* what test() reports */
  int dtype, op;
  uint8_t* send;   /* allreduce; allgather: sendData (the member's first byte in the window) */
  uint8_t* recv;   /* allreduce; reducescatter: recvData (where its first byte in the window goes) */
  aggdPart* parts; /* allgather: recvParts; reducescatter: sendParts (the window, in order) */
  int nparts;
  aggdPart inl[AGGD_INLINE_PARTS];
};

struct aggdColl {
  pthread_mutex_t mu;
  int rank, nranks, nd;
  uint64_t commId;
  aggdDaemon* d;
  aggdReq reqs[AGGD_MAX_REQS];
  int nused;
  ncclResult_t err; /* first failure; every later call returns it */
  int64_t lastProgress, timeoutMs;
};

void aggdPlugLog(ncclDebugLogLevel level, int line, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
#define AGGD_WARN(...) aggdPlugLog(NCCL_LOG_WARN, __LINE__, __VA_ARGS__)
#define AGGD_INFO(...) aggdPlugLog(NCCL_LOG_INFO, __LINE__, __VA_ARGS__)
int64_t aggdPlugNowMs(void);

/* aggd_client.c */
ncclResult_t aggdIallreduce(void* collComm, void* sendData, void* recvData, size_t count, ncclDataType_t dataType,
                            ncclRedOp_t redOp, void* sendMhandle, void* recvMhandle, void** request);
/* Allgather (kind AGGD_K_ALLGATHER: buf = sendData, the window received into parts) and reducescatter
 * (AGGD_K_REDUCESCATTER: buf = recvData, the window sent from parts). parts: nparts of NCCL's SGE, v8's (uint32_t
 * sizes) when sgeV8. */
ncclResult_t aggdPostWindow(void* collComm, int kind, void* buf, int nparts, const void* parts, int sgeV8,
                            size_t bytesPerRank, size_t windowOffset, size_t windowBytes, ncclDataType_t dataType,
                            ncclRedOp_t redOp, void** request);
ncclResult_t aggdTest(void* request, int* done, int* size);
/* Best-effort BYE on every daemon connection (closeColl). */
void aggdSayBye(aggdColl* cc);
/* Frees what requests hold (closeColl). */
void aggdFreeReqs(aggdColl* cc);
/* The plugin's maxCollBytes (aggd_plugin.c): the most bytes of one operation (allgather / reducescatter: of
 * its window). */
#define AGGD_MAX_COLL_BYTES ((size_t)64 << 20)

#endif /* COMM_AGGD_PLUGIN_H_ */
