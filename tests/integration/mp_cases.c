/* mp_colls: the test cases and the host reference. Inputs are generated per rank and element, and
 * every element of every result is computed here the way the library must compute it.
 * SPDX-License-Identifier: Apache-2.0 */
#include <stdint.h>
#include <stdlib.h>

#include "mp_colls.h"

const char* collName[] = {"allreduce",     "broadcast", "reduce",        "allgather",
                          "reducescatter", "alltoall",  "sendrecv-ring", "sendrecv-allpairs"};
const char* opName[] = {"sum", "prod", "max", "min", "avg", "premulsum", "-"};

/* ---------------------------------------------------------------------------------------------- */
/* Inputs: integers chosen so that every partial and final result is exact in the type. */
static uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static double copyRange(commDataType_t t, int* centered) {
  *centered = 1;
  switch (t) {
    case commInt8:
    case commUint8: *centered = 0; return 256;
    case commInt32:
    case commUint32: *centered = 0; return 4294967296.0;
    case commInt64:
    case commUint64: *centered = 0; return 2199023255552.0; /* 2^41 */
    case commFloat16: return 4096;                          /* integers -2048..2047 */
    case commBfloat16: return 512;                          /* -256..255 */
    case commFloat8e4m3: return 33;                         /* -16..16 */
    case commFloat8e5m2: return 17;                         /* -8..8 */
    case commFloat32: return 33554432.0;                    /* -2^24..2^24-1 */
    default: return 2199023255552.0;
  }
}

double genRaw(const tcase* c, int q, size_t j) {
  commDataType_t t = c->type;
  int sgn = itTypeIsSigned(t);
  uint64_t h = mix(((uint64_t)q << 40) ^ (uint64_t)j ^ ((uint64_t)c->coll << 56) ^ ((uint64_t)t << 50) ^
                   ((uint64_t)c->op << 60) ^ mix((uint64_t)c->salt + 1));
  switch (c->op) {
    case OP_COPY: {
      int centered;
      double range = copyRange(t, &centered);
      double v = (double)(h % (uint64_t)range);
      return centered ? v - floor(range / 2) : v;
    }
    case OP_SUM:
    case OP_PREMUL: return sgn ? (double)(h % 3) - 1 : (double)(h % 3);
    case OP_PROD: {
      int two = (N <= 16) ? ((j + (size_t)q) % 4 == 0) : ((j + (size_t)q) % (size_t)N == 0);
      double v = two ? 2 : 1;
      if (sgn && (h >> 8) % 5 == 0) v = -v;
      return v;
    }
    case OP_MAX:
    case OP_MIN: return (double)(h % 11) - (sgn ? 5 : 0);
    case OP_AVG: {
      double w;
      if (t == commFloat8e4m3 || t == commFloat8e5m2) {
        /* one contributing rank per element keeps the partial sums exact in 2-3 mantissa bits */
        w = ((j + (size_t)q) % (size_t)N == 0) ? (double)(1 + h % 2) : 0;
        if ((h >> 8) % 3 == 0) w = -w;
      } else {
        w = sgn ? (double)(h % 3) - 1 : (double)(h % 2);
      }
      return (double)N * w;
    }
  }
  return 0;
}

double inVal(const tcase* c, int q, size_t j) { return itCanon(c->type, genRaw(c, q, j)); }

static double reduceRef(const tcase* c, size_t j, int (*idx)(const tcase*, int, size_t, size_t*), int rank) {
  double acc = 0;
  for (int q = 0; q < N; q++) {
    size_t k;
    idx(c, rank, j, &k);
    double v = inVal(c, q, k);
    switch (c->op) {
      case OP_SUM:
      case OP_AVG: acc = (q == 0) ? v : acc + v; break;
      case OP_PREMUL: acc = (q == 0) ? v * c->scalar : acc + v * c->scalar; break;
      case OP_PROD: acc = (q == 0) ? v : acc * v; break;
      case OP_MAX: acc = (q == 0 || v > acc) ? v : acc; break;
      case OP_MIN: acc = (q == 0 || v < acc) ? v : acc; break;
    }
  }
  if (c->op == OP_AVG) acc /= N;
  return itCanon(c->type, acc);
}
static int idxSame(const tcase* c, int rank, size_t j, size_t* k) {
  (void)c;
  (void)rank;
  *k = j;
  return 1;
}
static int idxScatter(const tcase* c, int rank, size_t j, size_t* k) {
  *k = (size_t)rank * c->count + j;
  return 1;
}

/* All-pairs: elements that rank s sends to rank d. Different for every pair, zero for some. */
size_t pairCount(const tcase* c, int s, int d) { return (c->count * (size_t)((s * 3 + d * 5) % 4)) / 3; }

/* ---------------------------------------------------------------------------------------------- */
/* Expected results: what each element of a rank's output must hold. */
double tolerance(const tcase* c, double expect) {
  if (c->op != OP_AVG || !itTypeIsFloat(c->type)) return 0;
  double eps;
  switch (c->type) {
    case commFloat16: eps = 0x1p-10; break;
    case commBfloat16: eps = 0x1p-7; break;
    case commFloat8e4m3: eps = 0x1p-3; break;
    case commFloat8e5m2: eps = 0x1p-2; break;
    case commFloat32: eps = 0x1p-23; break;
    default: eps = 0x1p-52; break;
  }
  return fabs(expect) * eps; /* avg may be computed as a sum of x/N: allow one rounding */
}

int expectAt(rankst* rk, caseState* cs, const tcase* c, size_t i, double* out) {
  int r = rk->rank;
  size_t n = c->count;
  switch (c->coll) {
    case C_ALLREDUCE: *out = reduceRef(c, i, idxSame, r); return 1;
    case C_REDUCE:
      if (r != c->root) return 0;
      *out = reduceRef(c, i, idxSame, r);
      return 1;
    case C_BROADCAST: *out = inVal(c, c->root, i); return 1;
    case C_ALLGATHER: *out = inVal(c, (int)(i / n), i % n); return 1;
    case C_REDUCESCATTER: *out = reduceRef(c, i, idxScatter, r); return 1;
    case C_ALLTOALL: *out = inVal(c, (int)(i / n), (size_t)r * n + i % n); return 1;
    case C_SENDRECV: *out = inVal(c, (r + N - 1) % N, i); return 1;
    case C_ALLPAIRS: {
      int q = 0;
      while (q + 1 < N && cs->rdispl[q + 1] <= i) q++;
      size_t off = 0; /* where q's data for r starts in q's send buffer */
      for (int p = 0; p < r; p++) off += pairCount(c, q, p);
      *out = inVal(c, q, off + (i - cs->rdispl[q]));
      return 1;
    }
  }
  return 0;
}

void describe(const tcase* c, char* buf, size_t len) {
  snprintf(buf, len, "%s %s %s%s count=%zu root=%d %s", collName[c->coll], itTypeName(c->type), opName[c->op],
           c->op == OP_PREMUL ? (c->scalar == 2.0 ? "(x2)" : "(x0.5)") : "", c->count, c->root,
           c->inplace ? "in-place" : "out-of-place");
}

/* ---------------------------------------------------------------------------------------------- */
/* The list of cases: identical on every rank. */
tcase* cases;
size_t ncases;
static size_t capcases;
int allReduceOnly, collnetOnly;
static void add(int coll, commDataType_t t, int op, double scalar, int root, size_t count, int inplace) {
  if (allReduceOnly && coll != C_ALLREDUCE) return;
  if (collnetOnly && coll != C_ALLREDUCE && coll != C_ALLGATHER && coll != C_REDUCESCATTER) return;
  if (ncases == capcases) {
    capcases = capcases ? 2 * capcases : 1024;
    cases = realloc(cases, capcases * sizeof(*cases));
    if (!cases) exit(2);
  }
  cases[ncases++] = (tcase){coll, t, op, scalar, root, count, inplace, 0};
}

/* Batches: several operations in one group, fused by the library; each must still be exact. */
tcase batches[MAX_BATCHES][MAX_BATCH];
int batchLen[MAX_BATCHES], nbatches;
static void batchAdd(int coll, commDataType_t t, int op, double scalar, int root, size_t count, int inplace) {
  int b = nbatches - 1, j = batchLen[b]++;
  batches[b][j] = (tcase){coll, t, op, scalar, root, count, inplace, 100 * (b + 1) + j};
}

void buildBatches(void) {
  /* every kind of operation, collectives and point-to-point, in one group */
  nbatches++;
  batchAdd(C_ALLREDUCE, commFloat32, OP_SUM, 0, 0, 1023, 0);
  batchAdd(C_BROADCAST, commInt32, OP_COPY, 0, N - 1, 7, 0);
  batchAdd(C_ALLGATHER, commBfloat16, OP_COPY, 0, 0, 100, 0);
  batchAdd(C_REDUCESCATTER, commFloat64, OP_MAX, 0, 0, 33, 0);
  batchAdd(C_REDUCE, commFloat16, OP_PROD, 0, 0, 64, 0);
  batchAdd(C_ALLTOALL, commInt64, OP_COPY, 0, 0, 5, 0);
  batchAdd(C_SENDRECV, commInt8, OP_COPY, 0, 0, 1000, 0);
  batchAdd(C_ALLPAIRS, commUint32, OP_COPY, 0, 0, 77, 0);
  /* in-place reductions of different types and ops, two pre-multiplied sums with different scalars */
  nbatches++;
  batchAdd(C_ALLREDUCE, commInt8, OP_SUM, 0, 0, 7, 1);
  batchAdd(C_ALLREDUCE, commFloat32, OP_PREMUL, 2.0, 0, 1023, 1);
  batchAdd(C_ALLREDUCE, commFloat64, OP_PREMUL, 0.5, 0, 100, 1);
  batchAdd(C_ALLREDUCE, commUint64, OP_MAX, 0, 0, 4097, 1);
  batchAdd(C_ALLREDUCE, commFloat8e4m3, OP_MIN, 0, 0, 1, 1);
  batchAdd(C_ALLREDUCE, commBfloat16, OP_AVG, 0, 0, 300, 1);
  batchAdd(C_REDUCESCATTER, commInt32, OP_PREMUL, 2.0, 0, 50, 1);
  /* the same operation several times: results must not be swapped */
  nbatches++;
  for (int j = 0; j < 3; j++) batchAdd(C_ALLREDUCE, commFloat32, OP_SUM, 0, 0, 1023, 0);
  for (int j = 0; j < 3; j++) batchAdd(C_BROADCAST, commFloat32, OP_COPY, 0, j % N, 1023, 0);
  for (int j = 0; j < 2; j++) batchAdd(C_SENDRECV, commInt32, OP_COPY, 0, 0, 300, 0);
  /* large ones together */
  nbatches++;
  batchAdd(C_ALLREDUCE, commFloat32, OP_SUM, 0, 0, 100003, 0);
  batchAdd(C_REDUCESCATTER, commInt32, OP_SUM, 0, 0, 100003, 1);
  batchAdd(C_ALLGATHER, commFloat16, OP_COPY, 0, 0, 100003, 1);
  batchAdd(C_ALLPAIRS, commInt32, OP_COPY, 0, 0, 100003, 0);
}

void buildCases(void) {
  static const commDataType_t allTypes[] = {commInt8,    commUint8,    commInt32,      commUint32,
                                            commInt64,   commUint64,   commFloat16,    commFloat32,
                                            commFloat64, commBfloat16, commFloat8e4m3, commFloat8e5m2};
  static const commDataType_t quickTypes[] = {commInt8,    commInt32,   commUint64,   commFloat16,
                                              commFloat32, commFloat64, commBfloat16, commFloat8e4m3};
  const commDataType_t* types = quick ? quickTypes : allTypes;
  int ntypes = quick ? 8 : 12;
  static const size_t counts[] = {0, 1, 7, 1023};
  int roots[2] = {0, N - 1};
  int nroots = N > 1 ? 2 : 1;

  for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
    size_t n = counts[ci];
    for (int ti = 0; ti < ntypes; ti++) {
      commDataType_t t = types[ti];
      for (int ip = 0; ip < 2; ip++) {
        for (int op = OP_SUM; op <= OP_PREMUL; op++) {
          add(C_ALLREDUCE, t, op, 2.0, 0, n, ip);
          add(C_REDUCESCATTER, t, op, 2.0, 0, n, ip);
          for (int ri = 0; ri < nroots; ri++)
            if (ri == 0 || op == OP_SUM || op == OP_MAX || op == OP_PREMUL) add(C_REDUCE, t, op, 2.0, roots[ri], n, ip);
        }
        if (t == commFloat32 || t == commFloat64) {
          add(C_ALLREDUCE, t, OP_PREMUL, 0.5, 0, n, ip);
          add(C_REDUCE, t, OP_PREMUL, 0.5, N - 1, n, ip);
          add(C_REDUCESCATTER, t, OP_PREMUL, 0.5, 0, n, ip);
        }
        for (int ri = 0; ri < nroots; ri++) add(C_BROADCAST, t, OP_COPY, 0, roots[ri], n, ip);
        add(C_ALLGATHER, t, OP_COPY, 0, 0, n, ip);
      }
      add(C_ALLTOALL, t, OP_COPY, 0, 0, n, 0);
      add(C_SENDRECV, t, OP_COPY, 0, 0, n, 0);
      add(C_ALLPAIRS, t, OP_COPY, 0, 0, n, 0);
    }
  }

  /* 100003 elements: larger than any slot or chunk, odd, so every pipeline has a ragged tail. */
  const size_t big = 100003;
  for (int ip = 0; ip < 2; ip++) {
    add(C_ALLREDUCE, commFloat32, OP_SUM, 0, 0, big, ip);
    add(C_REDUCESCATTER, commFloat32, OP_SUM, 0, 0, big, ip);
    add(C_ALLGATHER, commFloat32, OP_COPY, 0, 0, big, ip);
    add(C_BROADCAST, commInt8, OP_COPY, 0, N - 1, big, ip);
    add(C_REDUCE, commFloat32, OP_SUM, 0, 0, big, ip);
    if (!quick) {
      add(C_ALLREDUCE, commBfloat16, OP_SUM, 0, 0, big, ip);
      add(C_ALLREDUCE, commInt32, OP_PROD, 0, 0, big, ip);
      add(C_ALLREDUCE, commFloat8e4m3, OP_MAX, 0, 0, big, ip);
      add(C_ALLREDUCE, commFloat64, OP_PREMUL, 2.0, 0, big, ip);
      add(C_ALLREDUCE, commInt8, OP_AVG, 0, 0, big, ip);
      add(C_ALLREDUCE, commUint64, OP_MIN, 0, 0, big, ip);
      add(C_REDUCE, commInt32, OP_MAX, 0, N - 1, big, ip);
      add(C_REDUCESCATTER, commBfloat16, OP_SUM, 0, 0, big, ip);
      add(C_REDUCESCATTER, commInt64, OP_MIN, 0, 0, big, ip);
      add(C_ALLGATHER, commUint8, OP_COPY, 0, 0, big, ip);
      add(C_BROADCAST, commFloat64, OP_COPY, 0, 0, big, ip);
    }
  }
  add(C_ALLTOALL, commInt32, OP_COPY, 0, 0, big, 0);
  add(C_SENDRECV, commFloat64, OP_COPY, 0, 0, big, 0);
  add(C_ALLPAIRS, commInt32, OP_COPY, 0, 0, big, 0);
  /* One large allreduce: 4 Mi float32 elements (16 MiB). */
  add(C_ALLREDUCE, commFloat32, OP_SUM, 0, 0, (size_t)4 << 20, 0);
}
