/* comm_aggd's CollNet plugin (libcomm-collnet-aggd.so), internals shared by its control part (aggd_plugin.c:
 * the NCCL tables, init, listen, connect / registration, close) and its data path (aggd_client.c:
 * iallreduce, test, the non-blocking progress of the daemon connections). Its own library: it uses only system
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

#define AGGD_MAX_REQS 64 /* requests in flight per collComm */

typedef struct aggdReq aggdReq;
typedef struct aggdColl aggdColl;

/* One request's shard on one daemon, cut into chunks of chunkBytes (the last one shorter). */
typedef struct {
  aggdReq* req;
  size_t off, bytes, chunkBytes;
  uint64_t nchunks, sent, recvd;
} aggdEnt;

/* The connection to daemon i (shard i). Entries are in posting order; head is the oldest not yet received;
 * sendPos (from head) the one being sent. */
typedef struct {
  int fd;
  char name[160];
  uint32_t window, chunk;
  uint64_t sendSeq, recvSeq; /* contributions sent, results received */
  aggdEnt ents[AGGD_MAX_REQS];
  int head, count, sendPos;
  size_t sendOff; /* bytes of the CONTRIB message being written (0: none started) */
  uint8_t sendHdr[AGGD_HDR_BYTES];
  uint8_t recvHdr[AGGD_HDR_BYTES];
  size_t recvHdrGot, bodyGot;
  int inBody;
  aggdHdr rh;
  uint8_t* bodyDst;
  uint8_t ctrl[AGGD_MAX_CTRL + 1];
} aggdDaemon;

struct aggdReq {
  aggdColl* cc;
  int used, done, pending; /* pending: shards not yet received */
  size_t bytes;
  int dtype, op;
  uint8_t* send;
  uint8_t* recv;
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
ncclResult_t aggdTest(void* request, int* done, int* size);
/* Best-effort BYE on every daemon connection (closeColl). */
void aggdSayBye(aggdColl* cc);

#endif /* COMM_AGGD_PLUGIN_H_ */
