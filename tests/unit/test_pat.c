/* PAT (Bruck-style) allgather and reducescatter: every rank count 1..64 and spot checks up to 1024 ranks must
 * verify; steps stay logarithmic, scratch stays within its documented bound whatever the count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "debug.h"
#include "algorithms.h"

#define PIECE 64
#define FIFO (8 * PIECE)
#define CHUNK (FIFO / 2)
#define MAXR 64
/* The scratch budget of algorithms/pat.c is capped at 4 MiB. */
#define SCRATCH_MAX_BYTES ((size_t)4 << 20)

static void setArgs(commCollArgs* a, commFunc_t f, int n, size_t count) {
  memset(a, 0, sizeof(*a));
  a->func = f;
  a->nRanks = n;
  a->count = count;
  a->eltSize = 4;
  a->isReduction = f == commFuncReduceScatter;
  a->nChannels = 1;
  a->chunkElems = CHUNK;
}

static int ceilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) k++;
  return k;
}

/* The scratch bound of algorithms/pat.c: min(4 * chunkElems, 4 MiB / eltSize) elements. */
static size_t scratchBound(const commCollArgs* a) {
  size_t b = 4 * a->chunkElems;
  return b < SCRATCH_MAX_BYTES / a->eltSize ? b : SCRATCH_MAX_BYTES / a->eltSize;
}

/* One channel; every step does something; sends and receives carry at most chunkElems; no flags without a
 * reduction; scratch within the bound (none for the allgather). */
static void checkShape(const commCollArgs* a, const commSchedule* s) {
  assert_int_equal(s->nChannels, 1);
  if (a->func == commFuncAllGather) assert_int_equal(s->scratchElems, 0);
  if (s->scratchElems > scratchBound(a))
    fail_msg("PAT %s n=%d count=%zu: scratch %zu > %zu", commFuncName(a->func), a->nRanks, a->count, s->scratchElems,
             scratchBound(a));
  for (int k = 0; k < s->channels[0].nSteps; k++) {
    const commStep* st = &s->channels[0].steps[k];
    assert_true(st->count > 0 || st->recvCount > 0);
    if (st->prim != COMM_PRIM_COPY) assert_true(st->count <= a->chunkElems && st->recvCount <= a->chunkElems);
    if (!a->isReduction) assert_int_equal(st->flags, 0);
  }
}

/* commPatBuild, checking the shape of every rank's schedule as the verifier builds them. */
static commResult_t checkedBuild(const commCollArgs* a, commSchedule* s) {
  commResult_t res = commPatBuild(a, s);
  if (res == commSuccess) checkShape(a, s);
  return res;
}

static void verifyGeom(const commCollArgs* a, size_t fifo, size_t piece, commVerifyStats* st) {
  commResult_t res = commVerifyColl(a, checkedBuild, fifo, piece, st);
  if (res != commSuccess)
    fail_msg("PAT %s n=%d count=%zu chunk=%zu red=%d: %s", commFuncName(a->func), a->nRanks, a->count, a->chunkElems,
             a->isReduction, commLogLastWarn());
}

static void verify(const commCollArgs* a, commVerifyStats* st) { verifyGeom(a, FIFO, PIECE, st); }

/* n = 1..64 with counts 0, 1, 7, an odd count that is no multiple of anything nice, and a large one. The
 * reducescatter runs in one phase while S * count <= 4 * CHUNK (S <= n/2 scratch slots), else in windows of
 * at most 4 * CHUNK elements of the n * count block space: 2053 takes many (129 at n = 64). */
static void sweep(commFunc_t f) {
  for (int n = 1; n <= MAXR; n++) {
    size_t counts[5] = {0, 1, 7, (size_t)(97 + 2 * n), 2053};
    for (int ci = 0; ci < 5; ci++) {
      commCollArgs a;
      setArgs(&a, f, n, counts[ci]);
      verify(&a, NULL);
    }
  }
}

static void test_allgather(void** state) {
  (void)state;
  sweep(commFuncAllGather);
}
static void test_reducescatter(void** state) {
  (void)state;
  sweep(commFuncReduceScatter);
}

/* Large communicators, small counts (count 3 at n >= 1000 runs the reducescatter in 3 windows); one case with
 * many windows cutting blocks at odd places. */
static void test_large_n(void** state) {
  (void)state;
  int ns[4] = {128, 256, 1000, 1024};
  commFunc_t fs[2] = {commFuncAllGather, commFuncReduceScatter};
  for (int i = 0; i < 4; i++)
    for (int fi = 0; fi < 2; fi++) {
      commCollArgs a;
      setArgs(&a, fs[fi], ns[i], 3);
      verify(&a, NULL);
    }
  commCollArgs a;
  setArgs(&a, commFuncReduceScatter, 200, 301); /* 59 windows of about 1020 elements */
  verify(&a, NULL);
}

/* Without PRE/POST (a non-reduction op): no flags anywhere (checked by checkedBuild). */
static void test_shapes(void** state) {
  (void)state;
  int ns[4] = {2, 5, 16, 37};
  for (int i = 0; i < 4; i++) {
    commCollArgs a;
    setArgs(&a, commFuncReduceScatter, ns[i], 1500);
    a.isReduction = 0;
    verify(&a, NULL);
  }
  /* count 0: nothing to do. */
  commCollArgs a;
  commSchedule s;
  setArgs(&a, commFuncReduceScatter, 8, 0);
  a.rank = 3;
  assert_int_equal(commPatBuild(&a, &s), commSuccess);
  for (int c = 0; c < s.nChannels; c++) assert_int_equal(s.channels[c].nSteps, 0);
  commSchedFree(&s);
  /* n = 1: one local copy, PRE and POST for the reduction. */
  setArgs(&a, commFuncReduceScatter, 1, 10);
  assert_int_equal(commPatBuild(&a, &s), commSuccess);
  assert_int_equal(s.channels[0].nSteps, 1);
  assert_int_equal(s.channels[0].steps[0].prim, COMM_PRIM_COPY);
  assert_int_equal(s.channels[0].steps[0].flags, COMM_STEP_PRE | COMM_STEP_POST);
  commSchedFree(&s);
  assert_ptr_equal(commAlgoBuilder(commAlgoPat, commFuncAllGather), commPatBuild);
  assert_ptr_equal(commAlgoBuilder(commAlgoPat, commFuncReduceScatter), commPatBuild);
}

/* Other FIFO geometries: pieces that do not divide the chunk, single-element pieces, two slots. */
static void test_geometries(void** state) {
  (void)state;
  struct {
    size_t fifo, piece, chunk;
  } g[3] = {{350, 100, 150}, {8, 1, 4}, {96, 48, 48}};
  commFunc_t fs[2] = {commFuncAllGather, commFuncReduceScatter};
  for (int gi = 0; gi < 3; gi++)
    for (int fi = 0; fi < 2; fi++)
      for (int n = 2; n <= 23; n += 7) {
        commCollArgs a;
        setArgs(&a, fs[fi], n, 237);
        a.chunkElems = g[gi].chunk;
        verifyGeom(&a, g[gi].fifo, g[gi].piece, NULL);
      }
}

/* Count 1: at most 4 * ceil(log2 n) steps per rank (the ring takes n). */
static void test_log_steps(void** state) {
  (void)state;
  int ns[6] = {2, 3, 17, 64, 1000, 1024};
  commFunc_t fs[2] = {commFuncAllGather, commFuncReduceScatter};
  for (int i = 0; i < 6; i++)
    for (int fi = 0; fi < 2; fi++) {
      commCollArgs a;
      commVerifyStats st;
      setArgs(&a, fs[fi], ns[i], 1);
      verify(&a, &st);
      size_t bound = 4 * (size_t)ceilLog2(ns[i]);
      if (st.maxStepsPerChannel > bound)
        fail_msg("PAT %s n=%d: %zu steps per channel, more than %zu", commFuncName(fs[fi]), ns[i],
                 st.maxStepsPerChannel, bound);
    }
}

/* Scratch of one rank's reducescatter schedule at n = 1024 and its bound. */
static size_t scratchOf(size_t count, size_t chunk, int rank) {
  commCollArgs a;
  commSchedule s;
  setArgs(&a, commFuncReduceScatter, 1024, count);
  a.chunkElems = chunk;
  a.rank = rank;
  assert_int_equal(commPatBuild(&a, &s), commSuccess);
  size_t scratch = s.scratchElems;
  commSchedFree(&s);
  return scratch;
}

static void test_scratch_bound(void** state) {
  (void)state;
  /* Test geometry: budget 4 * CHUNK = 1024 elements. Counts up to 2 fit one phase (512 slots of count
   * elements); larger ones run in windows of at most the budget. */
  size_t counts[5] = {1, 2, 3, 700, 4096};
  for (int i = 0; i < 5; i++) {
    size_t sc = scratchOf(counts[i], CHUNK, 1023);
    assert_true(sc <= 4 * CHUNK);
    assert_true(sc <= 512 * counts[i]);
    if (counts[i] >= 3) assert_true(sc >= 4 * CHUNK - 8); /* the windows are balanced, near the budget */
  }
  /* The executor's geometry (4 MiB connection buffers, float): chunk = 512 Ki elements, budget capped at
   * 4 MiB whatever the count; a small count takes just what it needs. */
  size_t chunk = (size_t)512 << 10;
  size_t big[3] = {(size_t)1 << 12, (size_t)1 << 16, ((size_t)1 << 18) + 3};
  for (int i = 0; i < 3; i++) assert_true(scratchOf(big[i], chunk, 5) * 4 <= SCRATCH_MAX_BYTES);
  assert_int_equal(scratchOf(16, chunk, 0), 512 * 16);
  assert_int_equal(scratchOf(2048, chunk, 0), 512 * 2048); /* exactly the budget: still one phase */
}

/* Other collectives and bad arguments are refused. */
static void test_bad_args(void** state) {
  (void)state;
  commFunc_t bad[5] = {commFuncAllReduce, commFuncBroadcast, commFuncReduce, commFuncAllToAll, commFuncSendRecv};
  for (int i = 0; i < 5; i++) {
    commCollArgs a;
    commSchedule s;
    setArgs(&a, bad[i], 4, 100);
    commLogClearLastWarn();
    assert_int_equal(commPatBuild(&a, &s), commInvalidArgument);
    assert_non_null(strstr(commLogLastWarn(), "PAT"));
  }
  commCollArgs a;
  commSchedule s;
  setArgs(&a, commFuncAllGather, 4, 100);
  a.rank = 4;
  assert_int_equal(commPatBuild(&a, &s), commInvalidArgument);
  setArgs(&a, commFuncReduceScatter, 4, 100);
  a.chunkElems = 0;
  assert_int_equal(commPatBuild(&a, &s), commInvalidArgument);
  assert_int_equal(commPatBuild(NULL, &s), commInvalidArgument);
}

/* The verifier catches a broken PAT schedule (a step dropped on one rank, a PRE flag lost). */
static int corruptKind;

static commResult_t corruptBuild(const commCollArgs* a, commSchedule* s) {
  commResult_t res = commPatBuild(a, s);
  if (res != commSuccess || a->rank != 2) return res;
  commChannelSched* c = &s->channels[0];
  if (corruptKind == 0) {
    c->nSteps--;
  } else {
    for (int k = 0; k < c->nSteps; k++)
      if (c->steps[k].flags & COMM_STEP_PRE) {
        c->steps[k].flags &= (uint8_t)~COMM_STEP_PRE;
        break;
      }
  }
  return res;
}

static void test_corrupted(void** state) {
  (void)state;
  commFunc_t fs[2] = {commFuncAllGather, commFuncReduceScatter};
  for (int kind = 0; kind < 2; kind++)
    for (int fi = 0; fi < 2; fi++) {
      if (kind == 1 && fs[fi] == commFuncAllGather) continue;
      commCollArgs a;
      setArgs(&a, fs[fi], 6, 100);
      corruptKind = kind;
      assert_int_not_equal(commVerifyColl(&a, corruptBuild, FIFO, PIECE, NULL), commSuccess);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_allgather),     cmocka_unit_test(test_reducescatter), cmocka_unit_test(test_large_n),
      cmocka_unit_test(test_shapes),        cmocka_unit_test(test_geometries),    cmocka_unit_test(test_log_steps),
      cmocka_unit_test(test_scratch_bound), cmocka_unit_test(test_bad_args),      cmocka_unit_test(test_corrupted),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
