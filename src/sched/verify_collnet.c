/* The verifier's collnet: the virtual peer COMM_PEER_COLLNET (schedule.h), run symbolically.
 *
 * On each channel the ranks whose schedule names COMM_PEER_COLLNET (the peer of a step's send or receive
 * side) form the channel's group. Every member has:
 *  - an inbound queue of nSlots pieces: its sends to collnet push pieces there (cut as any send is, at most
 *    pieceElems each) and block while it is full;
 *  - a posting window: the queue's head is posted to the network while the member has fewer than nSlots
 *    pieces posted and not yet received (the executor's receive FIFO: one slot per operation in flight).
 * So a member can send at most 2 nSlots pieces ahead of its receives. Posting the member's k-th piece
 * reduces it into the group's piece k (the union of the contributions, disjoint, PRE/POST checked as any
 * reduction; the network applies neither); all members' k-th pieces must have the same size. Piece k
 * completes when every member posted it; then each member's k-th receive from collnet takes it (in order),
 * and it is dropped once every member received it. Posting is tried whenever a member pushes or receives
 * (the only events that change its window), inside that member's advance, so the simulation's progress
 * accounting and deadlock detection stay as they are. After the run, every member must have received every
 * piece it sent. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "debug.h"
#include "schedule.h"
#include "utils.h"
#include "verify_internal.h"

static int stepNamesNet(const commStep* st) {
  int p = st->prim;
  if (p <= COMM_PRIM_NOP || p >= COMM_NUM_PRIMS) return 0;
  return (primHasSend(p) && st->sendPeer == COMM_PEER_COLLNET) || (primHasRecv(p) && st->recvPeer == COMM_PEER_COLLNET);
}

static vchan* chanOf(const vctx* v, int r, int ch) { return &v->chans[(size_t)r * COMM_MAX_CHANNELS + ch]; }

/* Ordering key of rank r: its node, then r. */
static long long nodeKey(const vctx* v, int r) { return (long long)(v->nodeOf ? v->nodeOf[r] : r) * v->nRanks + r; }

commResult_t vcnSetup(vctx* v) {
  int counts[COMM_MAX_CHANNELS] = {0};
  int any = 0;
  for (size_t i = 0; i < (size_t)v->nRanks * COMM_MAX_CHANNELS; i++) v->chans[i].cnMember = -1;
  for (int r = 0; r < v->nRanks; r++) {
    for (int ch = 0; ch < v->sched[r].nChannels; ch++) {
      const commChannelSched* cs = &v->sched[r].channels[ch];
      for (int k = 0; k < cs->nSteps; k++) {
        const commStep* st = &cs->steps[k];
        if ((st->sendPeer != COMM_PEER_COLLNET && st->recvPeer != COMM_PEER_COLLNET) || !stepNamesNet(st)) continue;
        chanOf(v, r, ch)->cnMember = counts[ch]++;
        any = 1;
        break;
      }
    }
  }
  if (!any) return commSuccess;
  COMMCHECK(commCalloc(&v->cn, COMM_MAX_CHANNELS, sizeof(vcollnet)));
  for (int ch = 0; ch < COMM_MAX_CHANNELS; ch++) {
    if (counts[ch] == 0) continue;
    vcollnet* g = &v->cn[ch];
    COMMCHECK(commCalloc(&g->m, (size_t)counts[ch], sizeof(vcnMember)));
    g->nMembers = counts[ch];
    for (int i = 0; i < g->nMembers; i++) {
      COMMCHECK(commCalloc(&g->m[i].in, (size_t)v->nSlots, sizeof(vlist)));
      COMMCHECK(commCalloc(&g->m[i].inSizes, (size_t)v->nSlots, sizeof(size_t)));
    }
  }
  for (int r = 0; r < v->nRanks; r++)
    for (int ch = 0; ch < v->sched[r].nChannels; ch++)
      if (chanOf(v, r, ch)->cnMember >= 0) v->cn[ch].m[chanOf(v, r, ch)->cnMember].rank = r;
  /* Members in the order of their nodes (the plugin's member index: where allgather puts a member's piece,
   * which part of a reducescatter it receives), ranks of one node in rank order. */
  for (int ch = 0; ch < COMM_MAX_CHANNELS; ch++) {
    vcollnet* g = &v->cn[ch];
    for (int i = 1; i < g->nMembers; i++)
      for (int j = i; j > 0 && nodeKey(v, g->m[j].rank) < nodeKey(v, g->m[j - 1].rank); j--) {
        vcnMember t = g->m[j];
        g->m[j] = g->m[j - 1];
        g->m[j - 1] = t;
      }
    for (int i = 0; i < g->nMembers; i++) chanOf(v, g->m[i].rank, ch)->cnMember = i;
  }
  return commSuccess;
}

static commResult_t piecesGrow(vcollnet* g) {
  size_t nc = g->cap ? g->cap * 2 : 16;
  vcnPiece* np = NULL;
  COMMCHECK(commCalloc(&np, nc, sizeof(vcnPiece)));
  for (size_t k = g->base; k < g->end; k++) {
    vcnPiece* old = &g->pieces[k % g->cap];
    np[k % nc] = *old;
    memset(old, 0, sizeof(*old));
  }
  for (size_t i = 0; i < g->cap; i++) vlFree(&g->pieces[i].val);
  free(g->pieces);
  g->pieces = np;
  g->cap = nc;
  return commSuccess;
}

/* Posts member mi's queued pieces while its window allows. */
static commResult_t post(vctx* v, int ch, vcollnet* g, int mi) {
  vcnMember* m = &g->m[mi];
  while (m->inLen > 0 && m->posted - m->recvd < (size_t)v->nSlots) {
    size_t k = m->posted;
    const vlist* val = &m->in[m->inHead];
    size_t size = m->inSizes[m->inHead];
    int gather = v->cnFunc == commFuncAllGather;
    if (k == g->end) {
      if (g->end - g->base == g->cap) COMMCHECK(piecesGrow(g));
      vcnPiece* p = &g->pieces[k % g->cap];
      p->val.n = 0;
      if (gather) COMMCHECK(vlWrite(v, &p->val, (size_t)mi * size, size, val));
      else COMMCHECK(vlCopy(v, &p->val, val));
      p->size = size;
      p->nPosted = 1;
      p->nRecv = 0;
      p->firstRank = m->rank;
      g->end++;
    } else {
      vcnPiece* p = &g->pieces[k % g->cap];
      if (p->size != size)
        return verr(v,
                    "collnet piece %zu on channel %d: rank %d contributes %zu elements, rank %d contributed %zu (piece "
                    "sizes differ between members)",
                    k, ch, m->rank, size, p->firstRank, p->size);
      if (gather) {
        COMMCHECK(vlWrite(v, &p->val, (size_t)mi * size, size, val));
      } else {
        snprintf(v->note, sizeof(v->note),
                 "collnet reducing piece %zu of channel %d: rank %d's piece with %d posted before, first by rank %d", k,
                 ch, m->rank, p->nPosted, p->firstRank);
        commResult_t res = vlReduce(v, &p->val, val, &v->tNet);
        v->note[0] = '\0';
        COMMCHECK(res);
        vlist t = p->val;
        p->val = v->tNet;
        v->tNet = t;
      }
      p->nPosted++;
    }
    m->posted++;
    m->inHead = (m->inHead + 1) % v->nSlots;
    m->inLen--;
  }
  return commSuccess;
}

int vcnCanSend(const vctx* v, int ch, const vchan* c) { return v->cn[ch].m[c->cnMember].inLen < v->nSlots; }

commResult_t vcnPush(vctx* v, int ch, const vchan* c, const vlist* val, size_t size) {
  vcollnet* g = &v->cn[ch];
  vcnMember* m = &g->m[c->cnMember];
  int slot = (m->inHead + m->inLen) % v->nSlots;
  COMMCHECK(vlCopy(v, &m->in[slot], val));
  m->inSizes[slot] = size;
  m->inLen++;
  m->sent++;
  return post(v, ch, g, c->cnMember);
}

int vcnCanRecv(const vctx* v, int ch, const vchan* c) {
  const vcollnet* g = &v->cn[ch];
  size_t k = g->m[c->cnMember].recvd;
  return k < g->end && g->pieces[k % g->cap].nPosted == g->nMembers;
}

commResult_t vcnHead(vctx* v, int ch, const vchan* c, size_t expect, const vlist** val) {
  vcollnet* g = &v->cn[ch];
  size_t k = g->m[c->cnMember].recvd;
  vcnPiece* p = &g->pieces[k % g->cap];
  size_t V = (size_t)g->nMembers;
  size_t has = v->cnFunc == commFuncAllGather       ? p->size * V
               : v->cnFunc == commFuncReduceScatter ? (p->size % V == 0 ? p->size / V : 0)
                                                    : p->size;
  if (has != expect)
    return verr(v,
                "expects a piece of %zu elements from collnet, piece %zu of channel %d gives %zu (%s of %zu per member "
                "over %zu members: send/recv mismatch)",
                expect, k, ch, has, commFuncName((commFunc_t)v->cnFunc), p->size, V);
  if (v->cnFunc == commFuncReduceScatter) { /* the member's part of the reduction */
    COMMCHECK(vlRead(v, &p->val, (size_t)c->cnMember * has, (size_t)(c->cnMember + 1) * has, &v->tSlice));
    *val = &v->tSlice;
    return commSuccess;
  }
  *val = &p->val;
  return commSuccess;
}

commResult_t vcnPop(vctx* v, int ch, const vchan* c) {
  vcollnet* g = &v->cn[ch];
  vcnMember* m = &g->m[c->cnMember];
  vcnPiece* p = &g->pieces[m->recvd % g->cap];
  m->recvd++;
  if (++p->nRecv == g->nMembers) {
    /* every member received pieces < k before k: the oldest piece is the one done */
    p->val.n = 0;
    g->base++;
  }
  return post(v, ch, g, c->cnMember);
}

static size_t append(char* out, size_t used, size_t len, const char* fmt, ...) __attribute__((format(printf, 4, 5)));
static size_t append(char* out, size_t used, size_t len, const char* fmt, ...) {
  if (used >= len) return used;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out + used, len - used, fmt, ap);
  va_end(ap);
  return n < 0 ? len : used + (size_t)n;
}

size_t vcnDescribe(const vctx* v, int ch, const vchan* c, char* out, size_t used, size_t len) {
  const vcollnet* g = &v->cn[ch];
  const vcnMember* m = &g->m[c->cnMember];
  if (c->snet && m->inLen == v->nSlots)
    used = append(out, used, len, " (collnet queue full: %zu piece(s) posted, %zu received)", m->posted, m->recvd);
  if (c->rnet && !vcnCanRecv(v, ch, c)) {
    size_t k = m->recvd;
    int posted = k < g->end ? g->pieces[k % g->cap].nPosted : 0;
    used = append(out, used, len, " (waits for collnet piece %zu: posted by %d of %d member(s)", k, posted,
                  g->nMembers);
    int shown = 0;
    for (int i = 0; i < g->nMembers && shown < 4; i++) {
      const vcnMember* o = &g->m[i];
      if (o->posted > k) continue;
      used = append(out, used, len, "%s rank %d sent %zu", shown ? "," : "; not by", o->rank, o->sent);
      shown++;
    }
    used = append(out, used, len, ")");
  }
  return used;
}

commResult_t vcnFinish(vctx* v) {
  if (v->cn == NULL) return commSuccess;
  v->curRank = -1;
  v->curStep = -1;
  for (int ch = 0; ch < COMM_MAX_CHANNELS; ch++) {
    const vcollnet* g = &v->cn[ch];
    for (int i = 0; i < g->nMembers; i++) {
      const vcnMember* m = &g->m[i];
      if (m->recvd == m->sent) continue;
      char grp[160];
      size_t used = 0;
      grp[0] = '\0';
      for (int j = 0; j < g->nMembers && j < 8; j++)
        used = append(grp, used, sizeof(grp), "%s%d", j ? "," : "", g->m[j].rank);
      if (g->nMembers > 8) append(grp, used, sizeof(grp), ",...");
      return verr(v,
                  "rank %d sent %zu piece(s) to collnet on channel %d and received %zu back (group of %d: ranks %s): "
                  "collnet send/recv mismatch",
                  m->rank, m->sent, ch, m->recvd, g->nMembers, grp);
    }
  }
  return commSuccess;
}

void vcnFree(vctx* v) {
  if (v->cn == NULL) return;
  for (int ch = 0; ch < COMM_MAX_CHANNELS; ch++) {
    vcollnet* g = &v->cn[ch];
    for (int i = 0; i < g->nMembers; i++) {
      for (int s = 0; g->m[i].in && s < v->nSlots; s++) vlFree(&g->m[i].in[s]);
      free(g->m[i].in);
      free(g->m[i].inSizes);
    }
    free(g->m);
    for (size_t i = 0; i < g->cap; i++) vlFree(&g->pieces[i].val);
    free(g->pieces);
  }
  free(v->cn);
  v->cn = NULL;
}
