/* Tree shapes (algorithms/tree_shape.c): the bit tree and the double binary tree are trees over all ranks
 * (parent and child links agree, every rank reachable from the root, no cycle), of logarithmic depth, and
 * in the double binary tree every rank is interior in at most one of the two trees. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "algorithms.h"

#define MAXN 1100

typedef void (*shapeFn)(int n, int t, int r, int* parent, int* c0, int* c1);

static void bitShape(int n, int t, int r, int* parent, int* c0, int* c1) {
  (void)t;
  commBitTree(n, r, parent, c0, c1);
}

static int ceilLog2(int n) {
  int d = 0;
  while ((1 << d) < n) d++;
  return d;
}

/* Checks one tree; returns its depth and marks interior ranks in interior[]. */
static int checkTree(shapeFn shape, int n, int t, int* interior) {
  static int parent[MAXN], c0[MAXN], c1[MAXN], depth[MAXN], stack[MAXN];
  int root = -1;
  for (int r = 0; r < n; r++) {
    shape(n, t, r, &parent[r], &c0[r], &c1[r]);
    if (parent[r] < 0) {
      assert_int_equal(root, -1); /* one root */
      root = r;
    }
    assert_true(parent[r] >= -1 && parent[r] < n && parent[r] != r);
    assert_true(c0[r] >= -1 && c0[r] < n && c1[r] >= -1 && c1[r] < n);
    assert_true(c0[r] != r && c1[r] != r);
    assert_true(c0[r] < 0 || c0[r] != c1[r]);
    interior[r] = c0[r] >= 0 || c1[r] >= 0;
  }
  if (n == 1) return 0;
  assert_true(root >= 0);
  /* Links agree: r's children name r as parent; r is a child of its parent. */
  for (int r = 0; r < n; r++) {
    if (c0[r] >= 0) assert_int_equal(parent[c0[r]], r);
    if (c1[r] >= 0) assert_int_equal(parent[c1[r]], r);
    if (parent[r] >= 0) assert_true(c0[parent[r]] == r || c1[parent[r]] == r);
  }
  /* Everyone reachable from the root exactly once. */
  for (int r = 0; r < n; r++) depth[r] = -1;
  int sp = 0, seen = 0, maxDepth = 0;
  stack[sp++] = root;
  depth[root] = 0;
  while (sp > 0) {
    int r = stack[--sp];
    seen++;
    if (depth[r] > maxDepth) maxDepth = depth[r];
    int kids[2] = {c0[r], c1[r]};
    for (int k = 0; k < 2; k++) {
      if (kids[k] < 0) continue;
      assert_int_equal(depth[kids[k]], -1);
      depth[kids[k]] = depth[r] + 1;
      stack[sp++] = kids[k];
    }
  }
  assert_int_equal(seen, n);
  return maxDepth;
}

static void testBitTree(void** state) {
  (void)state;
  static int interior[MAXN];
  for (int n = 1; n <= MAXN; n++) {
    int d = checkTree(bitShape, n, 0, interior);
    assert_int_equal(d, commBitTreeDepth(n));
    assert_true(d <= ceilLog2(n));
    for (int r = 1; r < n; r += 2) assert_false(interior[r]); /* odd positions are leaves */
  }
}

static void testDoubleTree(void** state) {
  (void)state;
  static int in0[MAXN], in1[MAXN];
  for (int n = 1; n <= MAXN; n++) {
    int d0 = checkTree(commDoubleTree, n, 0, in0);
    int d1 = checkTree(commDoubleTree, n, 1, in1);
    assert_true(d0 <= ceilLog2(n) + 1);
    assert_true(d1 <= ceilLog2(n) + 1);
    for (int r = 0; r < n; r++) assert_false(in0[r] && in1[r]);
    if (n > 1) {
      int p, a, b;
      commDoubleTree(n, 0, commDoubleTreeRoot(n, 0), &p, &a, &b);
      assert_int_equal(p, -1);
      commDoubleTree(n, 1, commDoubleTreeRoot(n, 1), &p, &a, &b);
      assert_int_equal(p, -1);
      assert_int_not_equal(commDoubleTreeRoot(n, 0), commDoubleTreeRoot(n, 1));
    }
  }
}

static void testOutOfRange(void** state) {
  (void)state;
  int p, a, b;
  commBitTree(8, 8, &p, &a, &b);
  assert_true(p == -1 && a == -1 && b == -1);
  commBitTree(8, -1, &p, &a, &b);
  assert_true(p == -1 && a == -1 && b == -1);
  commDoubleTree(8, 2, 0, &p, &a, &b);
  assert_true(p == -1 && a == -1 && b == -1);
  commDoubleTree(1, 0, 0, &p, &a, &b);
  assert_true(p == -1 && a == -1 && b == -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(testBitTree),
      cmocka_unit_test(testDoubleTree),
      cmocka_unit_test(testOutOfRange),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
