/* The tuner: COMM_ALGO / COMM_PROTO parsing, the cost model's shape, the choice per call on a
 * communicator's shape, and the tuner plugin. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core.h"
#include "debug.h"
#include "tune.h"

#define BIT(a) (1u << (a))
static const uint32_t ALL_PROTOS = BIT(commProtoLL) | BIT(commProtoSimple);

static uint32_t supported(commFunc_t f) {
  uint32_t m = 0;
  for (int a = 0; a < commNumAlgos; a++)
    if (commAlgoBuilder(a, f)) m |= BIT(a);
  return m;
}

static void testParseDefaults(void** state) {
  (void)state;
  uint32_t allow[commNumFuncs];
  commTuneParseAlgo(NULL, allow);
  assert_int_equal(allow[commFuncAllReduce], BIT(commAlgoRing) | BIT(commAlgoTree) | BIT(commAlgoCollTree) |
                                                 BIT(commAlgoOneShot) | BIT(commAlgoCollNet));
  assert_int_equal(allow[commFuncAllGather], BIT(commAlgoRing) | BIT(commAlgoPat) | BIT(commAlgoCollNet));
  assert_int_equal(allow[commFuncAllToAll], BIT(commAlgoPairwise));
  commTuneParseAlgo("", allow);
  assert_int_equal(allow[commFuncBroadcast], supported(commFuncBroadcast));
  commTuneParseProto(NULL, allow);
  assert_int_equal(allow[commFuncAllReduce], ALL_PROTOS);
}

static void testParseChoices(void** state) {
  (void)state;
  uint32_t allow[commNumFuncs];
  commTuneParseAlgo("allreduce:tree,ring;allgather:pat", allow);
  assert_int_equal(allow[commFuncAllReduce], BIT(commAlgoTree) | BIT(commAlgoRing));
  assert_int_equal(allow[commFuncAllGather], BIT(commAlgoPat));
  assert_int_equal(allow[commFuncReduceScatter], supported(commFuncReduceScatter));
  /* Without a collective: every collective that has one of the algorithms; the others keep theirs. */
  commTuneParseAlgo(" Ring ", allow);
  assert_int_equal(allow[commFuncAllReduce], BIT(commAlgoRing));
  assert_int_equal(allow[commFuncReduceScatter], BIT(commAlgoRing));
  assert_int_equal(allow[commFuncAllToAll], BIT(commAlgoPairwise));
  /* Exclusion. */
  commTuneParseAlgo("^tree", allow);
  assert_int_equal(allow[commFuncAllReduce], supported(commFuncAllReduce) & ~BIT(commAlgoTree));
  assert_int_equal(allow[commFuncAllGather], supported(commFuncAllGather));
  commTuneParseAlgo("AllReduce:^OneShot ; reduce : tree", allow);
  assert_int_equal(allow[commFuncAllReduce], supported(commFuncAllReduce) & ~BIT(commAlgoOneShot));
  assert_int_equal(allow[commFuncReduce], BIT(commAlgoTree));
  commTuneParseProto("allreduce:ll;^simple", allow);
  assert_int_equal(allow[commFuncAllReduce], BIT(commProtoLL));
  assert_int_equal(allow[commFuncBroadcast], BIT(commProtoLL));
}

static void testParseMistakes(void** state) {
  (void)state;
  uint32_t allow[commNumFuncs];
  commTuneParseAlgo("allgather:tree", allow);
  assert_non_null(strstr(commLogLastWarn(), "does not implement AllGather"));
  assert_int_equal(allow[commFuncAllGather], supported(commFuncAllGather));
  commTuneParseAlgo("bogus", allow);
  assert_non_null(strstr(commLogLastWarn(), "unknown algorithm 'bogus'"));
  assert_int_equal(allow[commFuncAllReduce], supported(commFuncAllReduce));
  commTuneParseAlgo("gather:ring", allow);
  assert_non_null(strstr(commLogLastWarn(), "unknown collective 'gather'"));
  commTuneParseAlgo("allreduce:^ring,tree,colltree,oneshot,collnet", allow);
  assert_non_null(strstr(commLogLastWarn(), "leaves AllReduce nothing"));
  assert_int_equal(allow[commFuncAllReduce], supported(commFuncAllReduce));
  commTuneParseAlgo(";;,:;allreduce:,", allow); /* empty pieces: nothing changes, nothing crashes */
  assert_int_equal(allow[commFuncAllReduce], supported(commFuncAllReduce));
  commTuneParseProto("fast", allow);
  assert_non_null(strstr(commLogLastWarn(), "unknown protocol 'fast'"));
  assert_int_equal(allow[commFuncAllReduce], ALL_PROTOS);
}

/* NCCL_ALGO / NCCL_PROTO: NCCL's names and syntax (^ exclusion, per-collective lists), any case. */
static void testParseNccl(void** state) {
  (void)state;
  uint32_t allow[commNumFuncs];
  const uint32_t trees = BIT(commAlgoTree) | BIT(commAlgoCollTree);
  /* NCCL's Tree is libcomm's tree and colltree; in COMM_ALGO "tree" stays libcomm's tree. */
  commTuneParseVar("NCCL_ALGO", 1, "Tree", allow);
  assert_int_equal(allow[commFuncAllReduce], trees);
  assert_int_equal(allow[commFuncBroadcast], supported(commFuncBroadcast) & trees);
  assert_int_equal(allow[commFuncAllGather], supported(commFuncAllGather));
  commTuneParseVar("COMM_ALGO", 1, "tree", allow);
  assert_int_equal(allow[commFuncAllReduce], BIT(commAlgoTree));
  commTuneParseVar("NCCL_ALGO", 1, "allreduce:tree,ring;broadcast:RING", allow);
  assert_int_equal(allow[commFuncAllReduce], trees | BIT(commAlgoRing));
  assert_int_equal(allow[commFuncBroadcast], BIT(commAlgoRing));
  assert_int_equal(allow[commFuncReduce], supported(commFuncReduce));
  commTuneParseVar("NCCL_ALGO", 1, "allreduce:^tree", allow);
  assert_int_equal(allow[commFuncAllReduce], supported(commFuncAllReduce) & ~trees);
  commTuneParseVar("NCCL_ALGO", 1, "allreduce:CollnetDirect,collnetchain;allgather:PAT", allow);
  assert_int_equal(allow[commFuncAllReduce], BIT(commAlgoCollNet));
  assert_int_equal(allow[commFuncAllGather], BIT(commAlgoPat));
  /* Excluding what libcomm does not have changes nothing and is no WARN; asking for it is one. */
  commLogClearLastWarn();
  commTuneParseVar("NCCL_ALGO", 1, "^NVLS,NVLSTree", allow);
  assert_string_equal(commLogLastWarn(), "");
  assert_int_equal(allow[commFuncAllReduce], supported(commFuncAllReduce));
  commTuneParseVar("NCCL_ALGO", 1, "nvls,Ring", allow);
  assert_non_null(strstr(commLogLastWarn(), "NCCL_ALGO: nvls is not provided (libcomm has no NVLink SHARP)"));
  assert_int_equal(allow[commFuncAllReduce], BIT(commAlgoRing));
  commTuneParseVar("NCCL_ALGO", 1, "allgather:tree", allow);
  assert_non_null(strstr(commLogLastWarn(), "NCCL_ALGO: Tree does not implement AllGather"));
  commLogClearLastWarn();
  commTuneParseVar("NCCL_PROTO", 0, "^LL128", allow);
  assert_string_equal(commLogLastWarn(), "");
  assert_int_equal(allow[commFuncAllReduce], ALL_PROTOS);
  commTuneParseVar("NCCL_PROTO", 0, "^LL128;allreduce:simple;broadcast:^ll", allow);
  assert_int_equal(allow[commFuncAllReduce], BIT(commProtoSimple));
  assert_int_equal(allow[commFuncBroadcast], BIT(commProtoSimple));
  assert_int_equal(allow[commFuncReduce], ALL_PROTOS);
  commTuneParseVar("NCCL_PROTO", 0, "LL128", allow);
  assert_non_null(strstr(commLogLastWarn(), "NCCL_PROTO: LL128 is not provided (libcomm has no LL128 protocol)"));
  assert_int_equal(allow[commFuncAllReduce], ALL_PROTOS);
  commTuneParseVar("NCCL_PROTO", 0, "LL,LL128", allow);
  assert_int_equal(allow[commFuncAllGather], BIT(commProtoLL));
}

/* Predictions exist exactly where a generator does, are positive and grow with the size. */
static void testModelShape(void** state) {
  (void)state;
  commTuneModel m;
  int shapes[][3] = {{1, 1, 1}, {2, 1, 2}, {8, 1, 8}, {8, 4, 2}, {64, 8, 8}, {1024, 128, 8}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    commTuneModelInit(&m, shapes[s][0], shapes[s][1], shapes[s][2], COMM_LINK_SHM, COMM_LINK_NET, 2 << 20, 4);
    m.collnetChannels = 2; /* priced where the ranks span nodes */
    m.collnetFuncs = BIT(commFuncAllReduce) | BIT(commFuncAllGather) | BIT(commFuncReduceScatter);
    m.collnetOpBytes = 512 << 10;
    for (int f = 0; f < commFuncSendRecv; f++) {
      for (int a = 0; a < commNumAlgos; a++) {
        for (int p = 0; p < commNumProtos; p++) {
          double prev = 0;
          for (size_t bytes = 8; bytes <= ((size_t)1 << 30); bytes *= 16) {
            int ch = commTuneChannels(&m, (commFunc_t)f, a, bytes);
            double steps = 0;
            double t = commTunePredict(&m, (commFunc_t)f, a, p, bytes, ch, commTuneChunkBytes(&m, p), &steps);
            int exists = commAlgoBuilder(a, (commFunc_t)f) != NULL &&
                         !(a == commAlgoOneShot && shapes[s][0] > COMM_ONESHOT_MAX_RANKS) &&
                         !(a == commAlgoCollNet && shapes[s][1] < 2);
            if (!exists) {
              assert_true(t < 0);
              continue;
            }
            assert_true(t > 0);
            assert_true(t >= prev * 0.999);
            prev = t;
          }
        }
      }
    }
  }
}

/* The best prediction over every algorithm and protocol the collective may use. */
static double bestPrediction(const commTuneModel* m, commFunc_t f, size_t bytes, int* algoOut) {
  double best = -1;
  for (int a = 0; a < commNumAlgos; a++) {
    for (int p = 0; p < commNumProtos; p++) {
      int ch = commTuneChannels(m, f, a, bytes);
      double t = commTunePredict(m, f, a, p, bytes, ch, commTuneChunkBytes(m, p), NULL);
      if (t >= 0 && (best < 0 || t < best)) {
        best = t;
        *algoOut = a;
      }
    }
  }
  return best;
}

/* The predicted targets at 1,024 ranks (128 nodes x 8): logarithmic latency at 8 bytes, within
 * 10% of the bandwidth bound at 1 GiB. */
static void testScalePredictions(void** state) {
  (void)state;
  commTuneModel m;
  commTuneModelInit(&m, 1024, 128, 8, COMM_LINK_SHM, COMM_LINK_NET, 2 << 20, 4);
  int algo = -1;
  double small = bestPrediction(&m, commFuncAllReduce, 8, &algo);
  const commTuneConsts* k = &m.k;
  /* A hop costs its link's latency and the executor's step. */
  double intraPart = 2.0 * commBitTreeDepth(8) * (k->link[COMM_LINK_SHM].latUs + k->stepUs);
  double logPart = 7 * (k->link[COMM_LINK_NET].latUs + k->stepUs); /* ceil(log2 128) inter-node hops */
  print_message("1024 ranks, 8 B allreduce: %s %.1f us (limit %.1f us)\n", commAlgoName(algo), small,
                2 * (logPart + intraPart) + k->callUs);
  assert_true(small <= 2 * (logPart + intraPart) + k->callUs);
  assert_true(algo == commAlgoTree || algo == commAlgoCollTree);
  size_t gib = (size_t)1 << 30;
  double big = bestPrediction(&m, commFuncAllReduce, gib, &algo);
  double bound = 2.0 * 1023 / 1024 * (double)gib / (k->link[COMM_LINK_NET].bwGBs * 1e3);
  print_message("1024 ranks, 1 GiB allreduce: %s %.0f us (bound %.0f us, %.3fx)\n", commAlgoName(algo), big, bound,
                big / bound);
  assert_true(big <= 1.10 * bound);
}

/* Collnet: where the network reduces, a node's link carries the buffer once each way instead of the ring's
 * 2(n-1)/n: the model prices it below the ring for large allreduces across nodes (4 and 8 hosts, 1 or 2 ranks
 * each) and leaves small ones to the latency algorithms; without groups it is not priced. */
static void testCollNetModel(void** state) {
  (void)state;
  int shapes[][2] = {{4, 1}, {8, 2}, {16, 2}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    commTuneModel m;
    int n = shapes[s][0] * shapes[s][1];
    commTuneModelInit(&m, n, shapes[s][0], shapes[s][1], COMM_LINK_SHM, COMM_LINK_NET, 2 << 20, 2);
    size_t big = (size_t)64 << 20;
    double ring = commTunePredict(&m, commFuncAllReduce, commAlgoRing, commProtoSimple, big,
                                  commTuneChannels(&m, commFuncAllReduce, commAlgoRing, big),
                                  commTuneChunkBytes(&m, commProtoSimple), NULL);
    assert_true(commTunePredict(&m, commFuncAllReduce, commAlgoCollNet, commProtoSimple, big, 2,
                                commTuneChunkBytes(&m, commProtoSimple), NULL) < 0);
    m.collnetChannels = 2;
    int ch = commTuneChannels(&m, commFuncAllReduce, commAlgoCollNet, big);
    assert_true(ch >= 1 && ch <= 2);
    double cn = commTunePredict(&m, commFuncAllReduce, commAlgoCollNet, commProtoSimple, big, ch,
                                commTuneChunkBytes(&m, commProtoSimple), NULL);
    int algo = -1;
    bestPrediction(&m, commFuncAllReduce, big, &algo);
    print_message("%d hosts x %d: 64 MiB allreduce ring %.0f us, collnet %.0f us (%.2fx); best %s\n", shapes[s][0],
                  shapes[s][1], ring, cn, ring / cn, commAlgoName(algo));
    assert_true(cn > 0 && ring / cn > 1.3);
    assert_int_equal(algo, commAlgoCollNet);
    bestPrediction(&m, commFuncAllReduce, 8, &algo);
    assert_true(algo != commAlgoRing);
    /* Allgather and reducescatter: priced only where the groups run them; two network hops instead of the
     * ring's n - 1 win at small sizes, the same bytes per NIC keep them near the ring at large ones. */
    for (int f = commFuncAllGather; f <= commFuncReduceScatter; f++) {
      size_t small = (size_t)n * 256;
      assert_true(commTunePredict(&m, (commFunc_t)f, commAlgoCollNet, commProtoLL, small, 1,
                                  commTuneChunkBytes(&m, commProtoLL), NULL) < 0);
      m.collnetFuncs = BIT(commFuncAllReduce) | BIT(commFuncAllGather) | BIT(commFuncReduceScatter);
      m.collnetOpBytes = 512 << 10;
      double cnSmall = commTunePredict(&m, (commFunc_t)f, commAlgoCollNet, commProtoLL, small, 1,
                                       commTuneChunkBytes(&m, commProtoLL), NULL);
      double ringSmall = commTunePredict(&m, (commFunc_t)f, commAlgoRing, commProtoLL, small, 1,
                                         commTuneChunkBytes(&m, commProtoLL), NULL);
      double cnBig = commTunePredict(&m, (commFunc_t)f, commAlgoCollNet, commProtoSimple, big, 2,
                                     commTuneChunkBytes(&m, commProtoSimple), NULL);
      double ringBig = commTunePredict(&m, (commFunc_t)f, commAlgoRing, commProtoSimple, big,
                                       commTuneChannels(&m, (commFunc_t)f, commAlgoRing, big),
                                       commTuneChunkBytes(&m, commProtoSimple), NULL);
      print_message("%d hosts x %d: %s %zu B ring %.1f us, collnet %.1f us; 64 MiB ring %.0f us, collnet %.0f us\n",
                    shapes[s][0], shapes[s][1], commFuncName((commFunc_t)f), small, ringSmall, cnSmall, ringBig, cnBig);
      assert_true(cnSmall > 0 && cnBig > 0);
      if (shapes[s][0] >= 8) assert_true(cnSmall < ringSmall);
      assert_true(cnBig < 1.5 * ringBig && cnBig > 0.5 * ringBig);
      m.collnetFuncs = 0;
    }
  }
}

/* A communicator's shape, enough for commTunerInit / commTuneChoose. */
static struct commComm* fakeComm(int nRanks, int perNode) {
  struct commComm* c = calloc(1, sizeof(*c));
  assert_non_null(c);
  c->nRanks = nRanks;
  c->rankNode = calloc((size_t)nRanks, sizeof(int));
  assert_non_null(c->rankNode);
  for (int r = 0; r < nRanks; r++) c->rankNode[r] = r / perNode;
  c->nNodes = (nRanks + perNode - 1) / perNode;
  c->nSlots = 8;
  c->slotBytes = 512 * 1024;
  c->nChannels = 1;
  c->oneShotMaxBytes = 256 * 1024;
  return c;
}

static void freeFake(struct commComm* c) {
  commTunerFree(c);
  free(c->rankNode);
  free(c);
}

static void testChoose(void** state) {
  (void)state;
  unsetenv("COMM_ALGO");
  unsetenv("COMM_PROTO");
  unsetenv("COMM_TUNER_PLUGIN");
  struct commComm* c = fakeComm(2, 2);
  assert_int_equal(commTunerInit(c), commSuccess);
  commTuneChoice ch;
  assert_int_equal(commTuneChoose(c, commFuncAllReduce, 2, 4, &ch), commSuccess);
  assert_int_equal(ch.algo, commAlgoOneShot);
  assert_true(ch.predictedUs > 0);
  assert_int_equal(commTuneChoose(c, commFuncAllReduce, 16 << 20, 4, &ch), commSuccess);
  assert_int_equal(ch.algo, commAlgoRing);
  assert_int_equal(commTuneChoose(c, commFuncAllToAll, 1024, 4, &ch), commSuccess);
  assert_int_equal(ch.algo, commAlgoPairwise);
  assert_int_equal(commTuneChoose(c, commFuncSendRecv, 1, 4, &ch), commInternalError);
  freeFake(c);

  /* Forced. */
  setenv("COMM_ALGO", "allreduce:tree", 1);
  setenv("COMM_PROTO", "LL", 1);
  c = fakeComm(8, 4);
  assert_int_equal(commTunerInit(c), commSuccess);
  assert_int_equal(commTuneChoose(c, commFuncAllReduce, 16 << 20, 4, &ch), commSuccess);
  assert_int_equal(ch.algo, commAlgoTree);
  assert_int_equal(ch.proto, commProtoLL);
  assert_true(ch.nChannels >= 2 && ch.nChannels % 2 == 0);
  assert_true(ch.chunkBytes <= commTuneDefaults.protoChunkBytes[commProtoLL]);
  assert_int_equal(commTuneChoose(c, commFuncAllGather, 1024, 4, &ch), commSuccess);
  assert_true(ch.algo == commAlgoRing || ch.algo == commAlgoPat);
  freeFake(c);
  unsetenv("COMM_ALGO");
  unsetenv("COMM_PROTO");
}

static void testPlugin(void** state) {
  (void)state;
  setenv("COMM_TUNER_PLUGIN", COMM_TEST_TUNER_PLUGIN, 1);
  struct commComm* c = fakeComm(8, 8);
  assert_int_equal(commTunerInit(c), commSuccess);
  assert_non_null(c->tuner->plugin);
  commTuneChoice ch;
  assert_int_equal(commTuneChoose(c, commFuncAllReduce, 8, 4, &ch), commSuccess);
  assert_int_equal(ch.algo, commAlgoTree);
  assert_int_equal(ch.proto, commProtoLL);
  assert_int_equal(ch.nChannels, 4);
  for (size_t n = 1; n <= (1u << 24); n *= 64) {
    assert_int_equal(commTuneChoose(c, commFuncAllGather, n, 4, &ch), commSuccess);
    assert_int_equal(ch.algo, commAlgoRing); /* PAT disabled by the plugin */
  }
  freeFake(c);

  /* A plugin that cannot be loaded: a WARN, and the built-in model. */
  setenv("COMM_TUNER_PLUGIN", "/nonexistent/libcomm-tuner-none.so", 1);
  c = fakeComm(2, 2);
  assert_int_equal(commTunerInit(c), commSuccess);
  assert_null(c->tuner->plugin);
  assert_non_null(strstr(commLogLastWarn(), "cannot load COMM_TUNER_PLUGIN"));
  assert_int_equal(commTuneChoose(c, commFuncAllReduce, 2, 4, &ch), commSuccess);
  assert_int_equal(ch.algo, commAlgoOneShot);
  freeFake(c);
  unsetenv("COMM_TUNER_PLUGIN");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(testParseDefaults), cmocka_unit_test(testParseChoices),     cmocka_unit_test(testParseMistakes),
      cmocka_unit_test(testModelShape),    cmocka_unit_test(testScalePredictions), cmocka_unit_test(testChoose),
      cmocka_unit_test(testPlugin),        cmocka_unit_test(testCollNetModel),     cmocka_unit_test(testParseNccl),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
