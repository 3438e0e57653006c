/* The "IB" network plugin (commNet_t over RDMA verbs, reliable-connected QPs), built over a commIbVerbs table:
 * the real libibverbs in production, the tests' in-process verbs fake (tests/fakes/ib_verbs/) in the tests.
 *
 * Connection setup: listen() opens a TCP socket (COMM_SOCKET_IFNAME's interface) whose address the handle
 * carries; connect()/accept() exchange the QP numbers, LID/GID, PSNs, MTU and the sender's credit FIFO
 * (address, rkey) over it without blocking (a NULL comm means "call again"), and give up after
 * COMM_TIMEOUT_MS with commTimeout.
 *
 * Data path: irecv() posts one receive per QP and RDMA-writes a "clear to send" entry (buffer address,
 * rkey, capacity, tag, sequence number) into the sender's credit FIFO (COMM_NET_IB_FIFO_DEPTH slots);
 * the sender's isend()/test() waits for the matching entry and RDMA_WRITE_WITH_IMMs the data into the
 * receive buffer, striped over COMM_IB_QPS_PER_CONNECTION QPs (one write per QP, the immediate carrying
 * that piece's size); the receiver's test() polls its CQ until every QP's piece arrived.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_NET_IB_H_
#define COMM_NET_IB_H_

#include "comm_net.h"
#include "ib_verbs.h"

#ifdef COMM_HAVE_IBVERBS
#ifdef __cplusplus
extern "C" {
#endif

#define COMM_NET_IB_FIFO_DEPTH 8 /* outstanding requests per comm (credits) */
#define COMM_NET_IB_MAX_QPS 8

/* The plugin table, running over `verbs` (the process keeps one: a later call switches the table, which
 * is only allowed while no comm is open). */
const commNet_t* commNetIbPlugin(const commIbVerbs* verbs);

/* transports/net/net_plugin.c: the verbs table the built-in IB network uses (the verbs fake module with
 * COMM_IB_FAKE, else libibverbs) and what it is in `how`; NULL with the reason in `why` when there is none. */
const commIbVerbs* commNetIbVerbs(char* how, size_t howLen, char* why, size_t whyLen);

/* ib_verbs_fake_load.c: COMM_IB_FAKE=spec (tests only): load the verbs fake module (COMM_IB_FAKE_LIB, else
 * libcomm-verbs-fake.so on the library search path), configure its devices from `spec` and install the fake
 * GPUDirect RDMA ops :gdr / :gdrfail ask for. NULL with the reason in `why` (and a WARN when the module
 * cannot be loaded). */
const commIbVerbs* commIbVerbsLoadFake(const char* spec, char* why, size_t whyLen);

/* Tests: QP `i` of a send or receive comm (NULL when out of range), and its number of QPs. */
struct ibv_qp* commNetIbCommQp(void* comm, int i);
int commNetIbCommNumQps(void* comm);

#ifdef __cplusplus
}
#endif
#endif /* COMM_HAVE_IBVERBS */
#endif /* COMM_NET_IB_H_ */
