/* One-shot allreduce for small messages: every rank sends its (pre-multiplied) input to every other rank
 * and reduces all contributions locally, in rank order, so every rank computes the bit-identical result.
 * n-1 exchange steps of one message each, against the ring's 2(n-1) dependent hops: it wins where
 * latency dominates and loses where bytes do ((n-1) x the data instead of 2(n-1)/n).
 *
 * Rank r's schedule (channel 0, scratch holds n blocks of count elements, block p = rank p's input):
 *   COPY       scratch[r] = pre(input)                    (own contribution, PRE once)
 *   SEND_RECV  k = 1..n-1: scratch[r] -> rank r+k, rank r-k -> scratch[r-k]
 *   (or, when the message fits one step (count <= chunkElems, at most half a FIFO, so no send can block):
 *    SEND k = 1..n-1 to rank r+k, then RECV k = 1..n-1 from rank r-k: the n-1 transfers overlap instead of
 *    taking n-1 round trips one after the other)
 *   COPY       output = scratch[0]
 *   REDUCE     output = output op scratch[p], p = 1..n-1  (POST on the last)
 * Output is written only after the input was last read, so in-place works. */
#include <string.h>

#include "check.h"
#include "debug.h"
#include "algorithms.h"

static commStep step(commPrim_t prim, int flags, uint32_t srcBuf, size_t srcOff, uint32_t dstBuf, size_t dstOff,
                     size_t count) {
  return commStepMake(prim, flags, -1, -1, commBufAt(srcBuf, srcOff), commBufAt(dstBuf, dstOff), count, count);
}

commResult_t commOneShotBuild(const commCollArgs* a, commSchedule* out) {
  if (a == NULL || out == NULL || a->func != commFuncAllReduce || a->nRanks < 1 || a->rank < 0 ||
      a->rank >= a->nRanks) {
    WARN("commOneShotBuild: only allreduce, with 0 <= rank < nRanks");
    return commInvalidArgument;
  }
  const int n = a->nRanks, r = a->rank;
  const size_t c = a->count;
  const int pre = a->isReduction ? COMM_STEP_PRE : 0, post = a->isReduction ? COMM_STEP_POST : 0;
  COMMCHECK(commSchedInit(out, c > 0 ? 1 : 0));
  if (c == 0) return commSuccess;
  if (n == 1) {
    commStep st = step(COMM_PRIM_COPY, pre | post, COMM_BUF_INPUT, 0, COMM_BUF_OUTPUT, 0, c);
    return commSchedAdd(out, 0, &st);
  }
  if (c > SIZE_MAX / (size_t)n) {
    WARN("commOneShotBuild: scratch of %d x %zu elements overflows", n, c);
    return commInvalidArgument;
  }
  out->scratchElems = (size_t)n * c;
  out->nBufs = COMM_BUF_SCRATCH + 1;
  commStep st = step(COMM_PRIM_COPY, pre, COMM_BUF_INPUT, 0, COMM_BUF_SCRATCH, (size_t)r * c, c);
  COMMCHECK(commSchedAdd(out, 0, &st));
  const int sendsFirst = c <= a->chunkElems;
  for (int k = 1; k < n; k++) {
    int from = (r - k + n) % n;
    st = step(sendsFirst ? COMM_PRIM_SEND : COMM_PRIM_SEND_RECV, 0, COMM_BUF_SCRATCH, (size_t)r * c, COMM_BUF_SCRATCH,
              (size_t)from * c, c);
    st.sendPeer = (r + k) % n;
    st.recvPeer = sendsFirst ? -1 : from;
    COMMCHECK(commSchedAdd(out, 0, &st));
  }
  for (int k = 1; sendsFirst && k < n; k++) {
    int from = (r - k + n) % n;
    st = step(COMM_PRIM_RECV, 0, COMM_BUF_SCRATCH, (size_t)r * c, COMM_BUF_SCRATCH, (size_t)from * c, c);
    st.recvPeer = from;
    COMMCHECK(commSchedAdd(out, 0, &st));
  }
  st = step(COMM_PRIM_COPY, 0, COMM_BUF_SCRATCH, 0, COMM_BUF_OUTPUT, 0, c);
  COMMCHECK(commSchedAdd(out, 0, &st));
  for (int p = 1; p < n; p++) {
    st = step(COMM_PRIM_REDUCE, p == n - 1 ? post : 0, COMM_BUF_SCRATCH, (size_t)p * c, COMM_BUF_OUTPUT, 0, c);
    COMMCHECK(commSchedAdd(out, 0, &st));
  }
  return commSuccess;
}
