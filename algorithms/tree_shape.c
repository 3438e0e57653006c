/* Tree shapes shared by the tree algorithms (tree.c, colltree.c), the tuner and the tools.
 *
 * The bit tree over positions 0..m-1 is rooted at 0. A position p > 0 with lowest set bit b has children
 * p - b/2 and p + c, where c is the largest power of two below b with p + c < m (none when b == 1: every
 * odd position is a leaf, every even one is interior). Its parent is p + b or p - b, whichever has lowest
 * set bit 2b, or p - b when p + b is out of range. Position 0 has one child, the largest power of two
 * below m. Depth: floor(log2(m - 1)) + 1 edges from the root to the deepest leaf.
 *
 * The double binary tree puts half of the data on each of two bit trees so that every rank is interior
 * in at most one of them (it receives from children and sends to a parent in one tree, and is a leaf
 * that only sends and receives its own data in the other):
 *  - n even: tree 0 is the bit tree on ranks (position = rank: interior ranks are the even ones); tree 1
 *    is its mirror (position = n-1-rank: interior ranks are the odd ones);
 *  - n odd: the same two trees over ranks 1..n-1 (an even count), and rank 0 a leaf in both, hung below
 *    each root (a bit-tree root has one child, so there is room).
 * A rank's data flows up tree t to its root and back down, so every rank is in both trees. */
#include "algorithms.h"

static int lowBit(int p) { return p & -p; }

void commBitTree(int m, int p, int* parent, int* child0, int* child1) {
  *parent = *child0 = *child1 = -1;
  if (m <= 1 || p < 0 || p >= m) return;
  if (p == 0) {
    int c = 1;
    while (c * 2 < m) c *= 2;
    *child1 = c;
    return;
  }
  int b = lowBit(p);
  if (b > 1) {
    *child0 = p - b / 2;
    for (int c = b / 2; c >= 1; c /= 2) {
      if (p + c < m) {
        *child1 = p + c;
        break;
      }
    }
  }
  int up = (p & (2 * b)) ? p - b : p + b;
  if (up >= m) up = p - b;
  *parent = up;
}

int commBitTreeDepth(int m) {
  int d = 0;
  for (int span = 1; span < m; span *= 2) d++;
  return d;
}

/* Position of rank r in tree t over the m = n or n-1 ranks that the bit trees cover. */
static int dbtPos(int n, int t, int r) {
  if (n % 2 == 0) return t == 0 ? r : n - 1 - r;
  int m = n - 1, q = r - 1; /* ranks 1..n-1 */
  return t == 0 ? q : m - 1 - q;
}
static int dbtRank(int n, int t, int p) {
  if (p < 0) return -1;
  if (n % 2 == 0) return t == 0 ? p : n - 1 - p;
  int m = n - 1;
  return (t == 0 ? p : m - 1 - p) + 1;
}

void commDoubleTree(int n, int t, int rank, int* parent, int* child0, int* child1) {
  *parent = *child0 = *child1 = -1;
  if (n <= 1 || rank < 0 || rank >= n || t < 0 || t > 1) return;
  if (n % 2 == 1 && rank == 0) { /* the extra leaf, below the root of both trees */
    *parent = dbtRank(n, t, 0);
    return;
  }
  int m = n % 2 == 0 ? n : n - 1;
  int p, c0, c1;
  commBitTree(m, dbtPos(n, t, rank), &p, &c0, &c1);
  *parent = dbtRank(n, t, p);
  *child0 = dbtRank(n, t, c0);
  *child1 = dbtRank(n, t, c1);
  if (n % 2 == 1 && *parent < 0) *child0 = 0; /* the root's free child slot (a bit-tree root has no child0) */
}

int commDoubleTreeRoot(int n, int t) {
  if (n <= 1) return 0;
  return dbtRank(n, t, 0);
}
