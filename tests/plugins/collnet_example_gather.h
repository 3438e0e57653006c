/* The example CollNet plugin's windowed allgather and reduce-scatter (tests/plugins/nccl_collnet_example.c), and
 * what every operation shares: the wire header of a request, queueing it, a member's side of the exchange.
 * Included once, by the plugin, after its types and cxIo().
 *
 * NCCL's contract (docs/COLLNET_ABI.md section 4): the logical buffer is nranks x bytesPerRank, member r's slice
 * at [r * bytesPerRank, (r + 1) * bytesPerRank); one call handles its window [windowOffset, windowOffset +
 * windowBytes), held by an SGE list (any number of parts, in order, whose sizes add up to windowBytes). Member r's
 * piece of a window is the part of its slice inside it, [max(windowOffset, r * bytesPerRank), min(windowOffset +
 * windowBytes, (r + 1) * bytesPerRank)), possibly empty. As NCCL core passes them:
 *  - iallgather: recvParts receive the whole window; sendData points at the first byte of this member's piece
 *    (its contribution + max(windowOffset, r * bytesPerRank) - r * bytesPerRank: when the window begins inside
 *    the member's slice, contribution + windowOffset % bytesPerRank, else the contribution itself), and only
 *    the piece's bytes are read from it. test() reports windowBytes.
 *  - ireducescatter: sendParts hold this member's input for the whole window; recvData receives the reduction
 *    of this member's piece, its first byte at recvData (the same offset rule as sendData above). test() reports
 *    the piece's bytes (0 when the window misses the member's slice: recvData is not written). The type's size
 *    must divide bytesPerRank, windowOffset and windowBytes.
 * windowBytes above maxCollBytes (v8: the 512 MiB NCCL assumes) is refused. Member 0 gathers the pieces (or
 * reduces the windows, in member order 0, 1, ..., n-1, with iallreduce's arithmetic, so the bits are the same as an
 * allreduce's) and sends each member its result. SPDX-License-Identifier: Apache-2.0 */
#ifndef COLLNET_EXAMPLE_GATHER_H_
#define COLLNET_EXAMPLE_GATHER_H_

static int cxIsColl(const cxColl* c) { return c && c->magic == CX_MAGIC; }

static int cxCovers(const cxColl* c, const void* mhandle, const char* p, size_t bytes) {
  const cxMr* mr = (const cxMr*)mhandle;
  return mr && mr->magic == CX_MAGIC && mr->coll == c && p >= mr->data && (size_t)(p - mr->data) <= mr->size &&
         bytes <= mr->size - (size_t)(p - mr->data);
}

static const char* cxKindName(int kind) {
  return kind == CX_ALLREDUCE ? "iallreduce" : kind == CX_ALLGATHER ? "iallgather" : "ireducescatter";
}

/* Member m's piece of r's window: its first byte's logical offset in *lo, and its length. */
static size_t cxPiece(const cxReq* r, int m, size_t* lo) {
  size_t s = (size_t)m * r->bytesPerRank, e = s + r->bytesPerRank, ws = r->windowOffset, we = ws + r->bytes;
  size_t b = s > ws ? s : ws, f = e < we ? e : we;
  *lo = b;
  return f > b ? f - b : 0;
}

/* The data bytes member m sends with its header, and those member 0 answers it with. */
static size_t cxSendBytes(const cxReq* r, int m) {
  size_t lo;
  return r->kind == CX_ALLGATHER ? cxPiece(r, m, &lo) : r->bytes;
}
static size_t cxAnswerBytes(const cxReq* r, int m) {
  size_t lo;
  return r->kind == CX_REDUCESCATTER ? cxPiece(r, m, &lo) : r->bytes;
}

static cxWire cxHeaderOf(const cxReq* r, int m) {
  return (cxWire){.magic = CX_MAGIC,
                  .seq = r->seq,
                  .bytes = r->bytes,
                  .type = r->type,
                  .op = r->op,
                  .kind = r->kind,
                  .bytesPerRank = r->bytesPerRank,
                  .windowOffset = r->windowOffset,
                  .data = cxSendBytes(r, m)};
}

/* Copy bytes [off, off + len) of the window between the parts and buf (either way; they may overlap). */
static void cxCopyParts(const cxReq* r, size_t off, char* buf, size_t len, int toParts) {
  for (int i = 0; i < r->nParts && len > 0; i++) {
    size_t sz = r->parts[i].size;
    if (off >= sz) {
      off -= sz;
      continue;
    }
    size_t n = sz - off < len ? sz - off : len;
    if (toParts) memmove(r->parts[i].p + off, buf, n);
    else memmove(buf, r->parts[i].p + off, n);
    buf += n;
    len -= n;
    off = 0;
  }
}

/* Send or receive bytes [off, off + len) of the window held by the parts; 0, or what cxIo says. */
static int cxIoParts(cxColl* c, int peer, const cxReq* r, size_t off, size_t len, int isSend, const char* what) {
  for (int i = 0; i < r->nParts && len > 0; i++) {
    size_t sz = r->parts[i].size;
    if (off >= sz) {
      off -= sz;
      continue;
    }
    size_t n = sz - off < len ? sz - off : len;
    int rc = cxIo(c, peer, r->parts[i].p + off, n, isSend, r->seq, what);
    if (rc) return rc;
    len -= n;
    off = 0;
  }
  return 0;
}

/* Member 0: member m's header for r; *bad is set when it is not the one member 0 expects. */
static ncclResult_t cxRootHeader(cxColl* c, const cxReq* r, int m, cxWire* h, int* bad) {
  if (cxIo(c, m, h, sizeof(*h), 0, r->seq, "a header from")) return ncclSystemError;
  if (h->magic != CX_MAGIC)
    CX_FAIL(ncclSystemError, "member 0, operation %llu: a corrupt header from member %d", (unsigned long long)r->seq,
            m);
  cxWire w = cxHeaderOf(r, m);
  if (h->seq != w.seq || h->bytes != w.bytes || h->type != w.type || h->op != w.op || h->kind != w.kind ||
      h->bytesPerRank != w.bytesPerRank || h->windowOffset != w.windowOffset || h->data != w.data) {
    CX_WARN("operation %llu fails: member %d posted %s seq %llu, %llu bytes (window at %llu, %llu per member), "
            "type %d, op %d; member 0 %s, %zu bytes (window at %zu, %zu per member), type %d, op %d",
            (unsigned long long)r->seq, m, cxKindName(h->kind), (unsigned long long)h->seq,
            (unsigned long long)h->bytes, (unsigned long long)h->windowOffset, (unsigned long long)h->bytesPerRank,
            h->type, h->op, cxKindName(r->kind), r->bytes, r->windowOffset, r->bytesPerRank, r->type, r->op);
    *bad = 1;
  }
  return ncclSuccess;
}

/* Member 0: read and drop len bytes from member m. */
static int cxDrain(cxColl* c, int m, uint64_t seq, uint64_t len) {
  for (uint64_t off = 0; off < len;) {
    size_t n = len - off < CX_CHUNK ? (size_t)(len - off) : CX_CHUNK;
    if (cxIo(c, m, c->scratch, n, 0, seq, "data from")) return -1;
    off += n;
  }
  return 0;
}

/* Member 0: answer every other member (the result, unless bad), then take its own reduce-scatter piece. */
static ncclResult_t cxRootAnswer(cxColl* c, const cxReq* r, int bad) {
  size_t lo;
  for (int m = 1; m < c->nranks; m++) {
    cxWire out = cxHeaderOf(r, 0);
    out.status = bad ? ncclInvalidUsage : 0;
    out.data = bad ? 0 : cxAnswerBytes(r, m);
    if (cxIo(c, m, &out, sizeof(out), 1, r->seq, "the answer to")) return ncclSystemError;
    if (!out.data) continue;
    char* p = r->recv; /* allreduce */
    if (r->kind == CX_REDUCESCATTER && cxPiece(r, m, &lo)) p = c->acc + (lo - r->windowOffset);
    int rc = r->kind == CX_ALLGATHER ? cxIoParts(c, m, r, 0, out.data, 1, "the result to")
                                     : cxIo(c, m, p, out.data, 1, r->seq, "the result to");
    if (rc) return ncclSystemError;
  }
  size_t own = r->kind == CX_REDUCESCATTER && !bad ? cxPiece(r, 0, &lo) : 0;
  if (own) memmove(r->recv, c->acc + (lo - r->windowOffset), own);
  return bad ? ncclInvalidUsage : ncclSuccess;
}

/* Member 0 of an allgather: its piece, then everyone else's, into the window; the window back to all. */
static ncclResult_t cxRunGatherRoot(cxColl* c, const cxReq* r) {
  size_t lo, own = cxPiece(r, 0, &lo);
  if (own) cxCopyParts(r, lo - r->windowOffset, r->send, own, 1);
  int bad = 0;
  for (int m = 1; m < c->nranks; m++) {
    cxWire h;
    int badM = 0;
    if (cxRootHeader(c, r, m, &h, &badM) != ncclSuccess) return ncclSystemError;
    bad |= badM;
    own = cxPiece(r, m, &lo);
    if (badM ? cxDrain(c, m, r->seq, h.data) : cxIoParts(c, m, r, lo - r->windowOffset, own, 0, "data from"))
      return ncclSystemError;
  }
  return cxRootAnswer(c, r, bad);
}

/* Member 0 of a reduce-scatter: its window, reduced with everyone else's in member order; the pieces to all. */
static ncclResult_t cxRunScatterRoot(cxColl* c, const cxReq* r) {
  if (r->bytes > c->accSize) {
    free(c->acc);
    c->accSize = 0;
    if (!(c->acc = malloc(r->bytes)))
      CX_FAIL(ncclSystemError, "member 0, operation %llu: no memory for a window of %zu bytes",
              (unsigned long long)r->seq, r->bytes);
    c->accSize = r->bytes;
  }
  if (r->bytes) cxCopyParts(r, 0, c->acc, r->bytes, 0);
  size_t esz = (size_t)cxTypeSize(r->type);
  int bad = 0;
  for (int m = 1; m < c->nranks; m++) {
    cxWire h;
    if (cxRootHeader(c, r, m, &h, &bad) != ncclSuccess) return ncclSystemError;
    for (uint64_t off = 0; off < h.data;) { /* (CX_CHUNK is a multiple of every element size) */
      size_t len = h.data - off < CX_CHUNK ? (size_t)(h.data - off) : CX_CHUNK;
      if (cxIo(c, m, c->scratch, len, 0, r->seq, "data from")) return ncclSystemError;
      if (!bad) cxReduce(c->acc + off, c->scratch, len / esz, r->type, r->op);
      off += len;
    }
  }
  return cxRootAnswer(c, r, bad);
}

/* Any other member, every operation: the header and data to member 0, then its answer and the result. */
static ncclResult_t cxRunMember(cxColl* c, const cxReq* r) {
  cxWire h = cxHeaderOf(r, c->rank);
  if (cxIo(c, 0, &h, sizeof(h), 1, r->seq, "the header to")) return ncclSystemError;
  int rc = !h.data                       ? 0
           : r->kind == CX_REDUCESCATTER ? cxIoParts(c, 0, r, 0, h.data, 1, "data to")
                                         : cxIo(c, 0, r->send, h.data, 1, r->seq, "data to");
  if (rc) return ncclSystemError;
  size_t want = cxAnswerBytes(r, c->rank);
  if (cxIo(c, 0, &h, sizeof(h), 0, r->seq, "the answer from")) return ncclSystemError;
  if (h.magic != CX_MAGIC || h.seq != r->seq || (h.status == 0 && (h.kind != r->kind || h.data != want)))
    CX_FAIL(ncclSystemError, "member %d, operation %llu: a corrupt answer from member 0", c->rank,
            (unsigned long long)r->seq);
  if (h.status != 0)
    CX_FAIL(ncclInvalidUsage, "member %d, operation %llu: failed at member 0 (the members' calls disagree)", c->rank,
            (unsigned long long)r->seq);
  rc = !want                     ? 0
       : r->kind == CX_ALLGATHER ? cxIoParts(c, 0, r, 0, want, 0, "the result from")
                                 : cxIo(c, 0, r->recv, want, 0, r->seq, "the result from");
  return rc ? ncclSystemError : ncclSuccess;
}

/* A group of one: the result at once. */
static void cxRunLocal(const cxReq* r) {
  size_t lo, own = r->kind == CX_ALLREDUCE ? 0 : cxPiece(r, 0, &lo);
  if (r->kind == CX_ALLREDUCE && r->recv != r->send && r->bytes) memmove(r->recv, r->send, r->bytes);
  if (own)
    cxCopyParts(r, lo - r->windowOffset, r->kind == CX_ALLGATHER ? r->send : r->recv, own, r->kind == CX_ALLGATHER);
}

/* The parts list is needed until the operation ran. */
static void cxDropParts(cxReq* r) {
  if (r->parts != &r->part0) free(r->parts);
  r->parts = NULL;
}

/* Queue an operation (*t: all but coll, state, result, seq; its parts, if allocated, become the request's once
 * taken). *request stays NULL when CX_MAX_REQUESTS are in flight: call again later. */
static ncclResult_t cxQueue(cxColl* c, const cxReq* t, void** request) {
  pthread_mutex_lock(&c->mu);
  if (c->broken != ncclSuccess) {
    pthread_mutex_unlock(&c->mu);
    CX_WARN("%s: member %d: the group failed before", cxKindName(t->kind), c->rank);
    return ncclSystemError;
  }
  cxReq* r = &c->reqs[c->posted % CX_MAX_REQUESTS];
  if (r->state != CX_FREE) {
    pthread_mutex_unlock(&c->mu);
    return ncclSuccess;
  }
  *r = *t;
  r->coll = c;
  r->state = CX_POSTED;
  r->result = ncclSuccess;
  r->seq = c->posted++;
  if (t->parts == &t->part0) r->parts = &r->part0;
  if (c->nranks == 1) {
    cxRunLocal(r);
    cxDropParts(r);
    r->state = CX_DONE;
    c->processed++;
  } else {
    pthread_cond_signal(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  *request = r;
  return ncclSuccess;
}

/* The i-th element of an SGE list of version 8 (uint32_t sizes) or 9 and later (size_t sizes). */
#define CX_SGE(sge, v8, i, field) \
  ((v8) ? ((const ncclNetSGE_v8_t*)(sge))[i].field : ((const ncclNetSGE_v9_t*)(sge))[i].field)

/* iallgather (data: sendData, mhandle its) and ireducescatter (data: recvData), any version. */
static ncclResult_t cxPostWindow(void* collComm, int kind, void* data, int nParts, const void* sge, int v8,
                                 size_t bytesPerRank, size_t windowOffset, size_t windowBytes, int type, int op,
                                 void* mhandle, void** request, size_t limit) {
  const char* what = cxKindName(kind);
  *request = NULL;
  cxColl* c = (cxColl*)collComm;
  if (!cxIsColl(c)) CX_FAIL(ncclInvalidArgument, "%s: not a collComm of this plugin", what);
  if (kind == CX_REDUCESCATTER && !cxSupported(type, op))
    CX_FAIL(ncclInvalidArgument, "%s: type %d, op %d not supported (reduceSupport says 0)", what, type, op);
  if (windowBytes > limit)
    CX_FAIL(ncclInvalidArgument, "%s: a window of %zu bytes exceeds maxCollBytes %zu", what, windowBytes, limit);
  if (nParts < 1 || !sge) CX_FAIL(ncclInvalidArgument, "%s: %d parts", what, nParts);
  if (bytesPerRank > SIZE_MAX / (size_t)c->nranks || windowOffset > bytesPerRank * (size_t)c->nranks ||
      windowBytes > bytesPerRank * (size_t)c->nranks - windowOffset)
    CX_FAIL(ncclInvalidArgument, "%s: the window [%zu, +%zu) is not inside the %d x %zu bytes", what, windowOffset,
            windowBytes, c->nranks, bytesPerRank);
  size_t esz = kind == CX_REDUCESCATTER ? (size_t)cxTypeSize(type) : 1;
  if (bytesPerRank % esz || windowOffset % esz || windowBytes % esz)
    CX_FAIL(ncclInvalidArgument, "%s: %zu bytes per member, a window of %zu at %zu: not whole %zu-byte elements", what,
            bytesPerRank, windowBytes, windowOffset, esz);
  size_t sum = 0;
  for (int i = 0; i < nParts; i++) {
    size_t sz = CX_SGE(sge, v8, i, size);
    if (sz > windowBytes - sum)
      CX_FAIL(ncclInvalidArgument, "%s: the parts hold more than the window's %zu bytes", what, windowBytes);
    if (sz && !cxCovers(c, CX_SGE(sge, v8, i, mhandle), (const char*)CX_SGE(sge, v8, i, address), sz))
      CX_FAIL(ncclInvalidArgument, "%s: part %d is not inside its registration of this collComm", what, i);
    sum += sz;
  }
  if (sum != windowBytes)
    CX_FAIL(ncclInvalidArgument, "%s: the parts hold %zu bytes, the window %zu", what, sum, windowBytes);
  cxReq t = {.type = kind == CX_REDUCESCATTER ? type : 0,
             .op = kind == CX_REDUCESCATTER ? op : 0,
             .kind = kind,
             .send = kind == CX_ALLGATHER ? (char*)data : NULL,
             .recv = kind == CX_REDUCESCATTER ? (char*)data : NULL,
             .bytes = windowBytes,
             .bytesPerRank = bytesPerRank,
             .windowOffset = windowOffset,
             .nParts = nParts};
  size_t lo, piece = cxPiece(&t, c->rank, &lo);
  if (piece && !cxCovers(c, mhandle, (const char*)data, piece))
    CX_FAIL(ncclInvalidArgument, "%s: this member's %zu bytes at %p are not inside their registration", what, piece,
            data);
  t.report = kind == CX_ALLGATHER ? windowBytes : piece;
  t.parts = nParts == 1 ? &t.part0 : malloc(sizeof(cxPart) * (size_t)nParts);
  if (!t.parts) return ncclSystemError;
  for (int i = 0; i < nParts; i++)
    t.parts[i] = (cxPart){(char*)CX_SGE(sge, v8, i, address), (size_t)CX_SGE(sge, v8, i, size)};
  ncclResult_t res = cxQueue(c, &t, request);
  if (!*request && t.parts != &t.part0) free(t.parts);
  return res;
}

#if NCCL_EXAMPLE_COLLNET_VERSION == 8 || NCCL_EXAMPLE_COLLNET_VERSION == 11
static ncclResult_t cxIallgatherV8(void* collComm, void* sendData, int nRecvParts, ncclNetSGE_v8_t* recvParts,
                                   size_t bytesPerRank, size_t windowOffset, size_t windowBytes, void* sendMhandle,
                                   void** request) {
  return cxPostWindow(collComm, CX_ALLGATHER, sendData, nRecvParts, recvParts, 1, bytesPerRank, windowOffset,
                      windowBytes, 0, 0, sendMhandle, request, CX_V8_MAX_BYTES);
}

static ncclResult_t cxIreducescatterV8(void* collComm, int nSendParts, ncclNetSGE_v8_t* sendParts, void* recvData,
                                       size_t bytesPerRank, size_t windowOffset, size_t windowBytes,
                                       ncclDataType_t dataType, ncclRedOp_t redOp, void* recvMhandle, void** request) {
  return cxPostWindow(collComm, CX_REDUCESCATTER, recvData, nSendParts, sendParts, 1, bytesPerRank, windowOffset,
                      windowBytes, (int)dataType, (int)redOp, recvMhandle, request, CX_V8_MAX_BYTES);
}
#endif

#if NCCL_EXAMPLE_COLLNET_VERSION >= 9 /* (v10's and v11's SGE are v9's) */
static ncclResult_t cxIallgather(void* collComm, void* sendData, int nRecvParts, ncclNetSGE_v9_t* recvParts,
                                 size_t bytesPerRank, size_t windowOffset, size_t windowBytes, void* sendMhandle,
                                 void** request) {
  cxColl* c = (cxColl*)collComm;
  return cxPostWindow(collComm, CX_ALLGATHER, sendData, nRecvParts, recvParts, 0, bytesPerRank, windowOffset,
                      windowBytes, 0, 0, sendMhandle, request, cxIsColl(c) ? c->maxBytes : 0);
}

static ncclResult_t cxIreducescatter(void* collComm, int nSendParts, ncclNetSGE_v9_t* sendParts, void* recvData,
                                     size_t bytesPerRank, size_t windowOffset, size_t windowBytes,
                                     ncclDataType_t dataType, ncclRedOp_t redOp, void* recvMhandle, void** request) {
  cxColl* c = (cxColl*)collComm;
  return cxPostWindow(collComm, CX_REDUCESCATTER, recvData, nSendParts, sendParts, 0, bytesPerRank, windowOffset,
                      windowBytes, (int)dataType, (int)redOp, recvMhandle, request, cxIsColl(c) ? c->maxBytes : 0);
}
#endif

#endif
