/* The verbs calls of the IB transport, as one table of function pointers (commIbVerbs).
 *
 * Every verbs call the transport makes goes through a commIbVerbs table, never to libibverbs directly, so
 * the same transport code runs over:
 *  - the real libibverbs, loaded with dlopen("libibverbs.so.1") at run time (ib_verbs_real.c): libcomm has
 *    no link-time dependency on it, and a host without it simply has no IB transport;
 *  - an in-process software RDMA device with reliable-connected semantics, built for the tests only
 *    (tests/fakes/ib_verbs/): the unit tests link it and drive it on machines without any RDMA hardware;
 *    with COMM_IB_FAKE set, libcomm loads it as a module (ib_verbs_fake_load.c, ib_verbs_fake_abi.h).
 *
 * The types are libibverbs' own (<infiniband/verbs.h>: struct ibv_context, ibv_qp, ibv_wc, ...), so the
 * table needs that header at build time; without it the IB transport is not built (COMM_HAVE_IBVERBS stays
 * undefined and transports/net/ib/ compiles to nothing; -DCOMM_NO_IBVERBS forces that). libibverbs' shared
 * library is not needed to build.
 *
 * Conventions: exactly libibverbs' own. Functions returning int return 0 on success or an errno value
 * (pollCq: the number of completions, or a negative value on a CQ error); functions returning a pointer
 * return NULL on failure with errno set. Calls on one table may come from any thread, as with libibverbs.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_IB_VERBS_H_
#define COMM_IB_VERBS_H_

#if !defined(COMM_HAVE_IBVERBS) && !defined(COMM_NO_IBVERBS) && defined(__has_include)
#if __has_include(<infiniband/verbs.h>)
#define COMM_HAVE_IBVERBS 1
#endif
#endif

#ifdef COMM_HAVE_IBVERBS
#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The type of a GID table entry (a RoCE port lists each address once per RoCE version). */
typedef enum {
  COMM_IB_GID_TYPE_IB = 0,      /* InfiniBand port GID (also what a RoCE v1 entry is reported as) */
  COMM_IB_GID_TYPE_ROCE_V1 = 1, /* RoCE v1: Ethernet frames, not routable */
  COMM_IB_GID_TYPE_ROCE_V2 = 2  /* RoCE v2: UDP/IP, routable */
} commIbGidType_t;

typedef struct commIbVerbs {
  const char* name; /* "libibverbs" or "fake": for log lines */

  /* Devices. */
  struct ibv_device** (*getDeviceList)(int* numDevices);
  void (*freeDeviceList)(struct ibv_device** list);
  const char* (*getDeviceName)(struct ibv_device* device);
  struct ibv_context* (*openDevice)(struct ibv_device* device);
  int (*closeDevice)(struct ibv_context* context);
  int (*queryDevice)(struct ibv_context* context, struct ibv_device_attr* attr);
  /* Port numbers start at 1. Fills the whole struct ibv_port_attr (what the header's inline
   * ibv_query_port does). */
  int (*queryPort)(struct ibv_context* context, uint8_t port, struct ibv_port_attr* attr);
  int (*queryGid)(struct ibv_context* context, uint8_t port, int index, union ibv_gid* gid);
  /* The type of GID table entry `index` (libibverbs: sysfs gid_attrs/types; an InfiniBand port, which
   * has no such file, gives COMM_IB_GID_TYPE_IB). An unused entry gives ENODATA. */
  int (*queryGidType)(struct ibv_context* context, uint8_t port, int index, commIbGidType_t* type);

  /* Protection domains and memory regions. regMr takes any IBV_ACCESS_* flags: the optional ones
   * (IBV_ACCESS_RELAXED_ORDERING) are dropped where the library cannot pass them. regDmabufMr gives NULL
   * with errno EOPNOTSUPP where the library or the device does not support dma-buf. */
  struct ibv_pd* (*allocPd)(struct ibv_context* context);
  int (*deallocPd)(struct ibv_pd* pd);
  struct ibv_mr* (*regMr)(struct ibv_pd* pd, void* addr, size_t length, int access);
  struct ibv_mr* (*regDmabufMr)(struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access);
  int (*deregMr)(struct ibv_mr* mr);

  /* Completion queues and queue pairs. */
  struct ibv_cq* (*createCq)(struct ibv_context* context, int cqe, void* cqContext, struct ibv_comp_channel* channel,
                             int compVector);
  int (*destroyCq)(struct ibv_cq* cq);
  struct ibv_qp* (*createQp)(struct ibv_pd* pd, struct ibv_qp_init_attr* initAttr);
  int (*modifyQp)(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attrMask);
  int (*queryQp)(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attrMask, struct ibv_qp_init_attr* initAttr);
  int (*destroyQp)(struct ibv_qp* qp);

  /* Data path (static inline in verbs.h: the real table wraps them). */
  int (*postSend)(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** badWr);
  int (*postRecv)(struct ibv_qp* qp, struct ibv_recv_wr* wr, struct ibv_recv_wr** badWr);
  int (*pollCq)(struct ibv_cq* cq, int numEntries, struct ibv_wc* wc);

  /* Misc. wcStatusStr never returns NULL. forkInit: 0, or an errno value (call before any registration). */
  const char* (*wcStatusStr)(enum ibv_wc_status status);
  int (*forkInit)(void);
} commIbVerbs;

/* Load libibverbs (dlopen "libibverbs.so.1") and return its table; loaded once per process, later calls
 * return the same table (or the same failure). On failure *verbs is NULL, `why` (if not NULL) holds the
 * reason (dlerror's text, or the missing symbol) and the result is commSystemError: the caller WARNs (or
 * logs INFO when IB is merely optional). Never WARNs itself. */
commResult_t commIbVerbsLoad(const commIbVerbs** verbs, char* why, size_t whyLen);
/* The same from another library file, into caller storage, not cached (tests: a name that does not exist,
 * or the real library's file by another name). The library is never unloaded. */
commResult_t commIbVerbsLoadFrom(const char* libName, commIbVerbs* table, char* why, size_t whyLen);

/* Names for log lines. */
const char* commIbGidTypeStr(commIbGidType_t type);
const char* commIbPortStateStr(enum ibv_port_state state);
const char* commIbLinkLayerStr(uint8_t linkLayer);

#ifdef __cplusplus
}
#endif
#endif /* COMM_HAVE_IBVERBS */
#endif /* COMM_IB_VERBS_H_ */
