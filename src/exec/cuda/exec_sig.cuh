/* Operation signatures on the device path (exec_kernel.cu includes this inside its namespace, after the
 * shared state of the Simple protocol's waits): the report of a mismatch, the comparison, and the 32-byte
 * header of each Simple slot (exec_dev.h says what a device message carries). SPDX-License-Identifier:
 * Apache-2.0 */

/* A message from peer carried another operation's signature (got): both go to the host, which names both
 * calls. */
__device__ void reportSigMismatch(const commDevPlanHdr* h, int channel, int peer, const uint64_t* got) {
  commDevError* e = h->error;
  if (*(volatile int32_t*)&e->code != COMM_DEV_OK) return;
  for (int i = 0; i < COMM_DEV_SIG_WORDS; i++) {
    e->gotSig[i] = got[i];
    e->mySig[i] = h->sig[i];
  }
  reportError(h, COMM_DEV_SIG_MISMATCH, channel, peer, 0, 0, 0);
}

/* Does sig differ from the plan's own? */
__device__ __forceinline__ bool sigDiffers(const commDevPlanHdr* h, const uint64_t* sig) {
  uint64_t x = 0;
#pragma unroll
  for (int i = 0; i < COMM_DEV_SIG_WORDS; i++) x |= sig[i] ^ h->sig[i];
  return x != 0;
}

/* Thread 0, once head showed the slot at pos filled (and a fence ordered what the sender stored before
 * head): its size and signature into sRecvSize and sRecvSig. */
__device__ void readSlotHeader(const commDevPlanHdr* h, const commDevConn* c, uint64_t pos) {
  const uint4* hdr = (const uint4*)(c->slots + (pos % h->nSlots) * h->slotBytes);
  const uint4 a = __ldcg(hdr), b = __ldcg(hdr + 1); /* issued before the size's volatile load: one round */
  sRecvSize = loadVolatile(&c->sizes[pos % h->nSlots]);
  sRecvSig[0] = (uint64_t)a.x | (uint64_t)a.y << 32, sRecvSig[1] = (uint64_t)a.z | (uint64_t)a.w << 32;
  sRecvSig[2] = (uint64_t)b.x | (uint64_t)b.y << 32, sRecvSig[3] = (uint64_t)b.z | (uint64_t)b.w << 32;
}

/* Block-wide, after the barrier that published the received slot's header: does it carry this plan's
 * signature and `bytes` of payload? false (the failure recorded) when not: no byte of it is used. */
__device__ bool slotMatches(const commDevPlanHdr* h, int ch, int peer, uint64_t bytes) {
  if (sigDiffers(h, sRecvSig)) {
    if (threadIdx.x == 0) reportSigMismatch(h, ch, peer, sRecvSig);
    return false;
  }
  if (sRecvSize != bytes + COMM_DEV_SIG_BYTES) {
    if (threadIdx.x == 0)
      reportError(h, COMM_DEV_SIZE_MISMATCH, ch, peer, 0,
                  sRecvSize >= COMM_DEV_SIG_BYTES ? sRecvSize - COMM_DEV_SIG_BYTES : sRecvSize, bytes);
    return false;
  }
  return true;
}

/* Thread 0, once the slot at pos is free: the plan's signature at its start, stored while the block fills
 * the payload (so that the fence of postSend does not wait for it alone). */
__device__ void putSlotHeader(const commDevPlanHdr* h, const commDevConn* c, uint64_t pos) {
  uint4* hdr = (uint4*)(c->slots + (pos % h->nSlots) * h->slotBytes);
  const uint64_t* sig = h->sig;
  hdr[0] = make_uint4((uint32_t)sig[0], (uint32_t)(sig[0] >> 32), (uint32_t)sig[1], (uint32_t)(sig[1] >> 32));
  hdr[1] = make_uint4((uint32_t)sig[2], (uint32_t)(sig[2] >> 32), (uint32_t)sig[3], (uint32_t)(sig[3] >> 32));
}
