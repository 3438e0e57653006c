/* collnet_cluster: one rank of a collnet job (issue 20), started by a launcher (COMM_RANK, COMM_NRANKS,
 * COMM_ROOT: scripts/netns_cluster.sh). Public API only.
 *
 *   collnet_cluster check      every allreduce type and op over collnet (the environment forces it: COMM_ALGO)
 *                              against CollTree and a float64 reference; allgather and reducescatter of every
 *                              type over collnet against the ring; two collnet communicators at once
 *   collnet_cluster loop [R]   allreduces until one fails (a test kills a server or rank R meanwhile); exit 0 when
 *                              the failure came as an error, within the communicator's timeout
 *
 * check: a second communicator (a split, COMM_ALGO=allreduce:colltree) runs the same calls; per case, integer
 * results must equal CollTree's bit for bit, floating ones a float64 reference within the type's rounding, and
 * every result must be the same on every rank (a hash of it, allgathered). Then a third communicator (collnet
 * again) and the first run allreduces inside one group, both over the servers at once.
 * Prints "collnet_cluster: rank R: PASS ..." and exits 0, or names what failed and exits 1.
 * SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"

static int rank, nranks;
static long fails;

#define CHECK(call)                                                                                          \
  do {                                                                                                       \
    commResult_t r_ = (call);                                                                                \
    if (r_ != commSuccess) {                                                                                 \
      fprintf(stderr, "collnet_cluster: rank %d: %s failed: %s (%s)\n", rank, #call, commGetErrorString(r_), \
              commGetLastError(NULL));                                                                       \
      exit(1);                                                                                               \
    }                                                                                                        \
  } while (0)

static double nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Deterministic inputs: element i of rank r for case k, in [-8, 8) (products of a few stay finite). */
static double inputOf(int k, int r, size_t i) {
  uint64_t x = (uint64_t)k * 0x9e3779b97f4a7c15ull ^ (uint64_t)r * 0xbf58476d1ce4e5b9ull ^
               (uint64_t)i * 0x94d049bb133111ebull;
  x ^= x >> 31;
  x *= 0xd6e8feac8a1c2d57ull;
  x ^= x >> 29;
  return (double)(x % 1024) / 64.0 - 8.0;
}

static size_t typeSize(commDataType_t t) {
  static const size_t s[commNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return s[t];
}
static int isFloat(commDataType_t t) { return t >= commFloat16; }

/* Float encodings of the narrow types, round to nearest even (saturating fp8 e4m3 at 448). */
static uint16_t toHalf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u, e = (u >> 23) & 0xff, m = u & 0x7fffff;
  if (e == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
  int ne = (int)e - 127 + 15;
  if (ne >= 31) return (uint16_t)(sign | 0x7c00u);
  if (ne <= 0) {
    if (ne < -10) return (uint16_t)sign;
    m |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - ne), half = 1u << (shift - 1), v = m >> shift, rest = m & ((1u << shift) - 1);
    if (rest > half || (rest == half && (v & 1))) v++;
    return (uint16_t)(sign | v);
  }
  uint32_t v = ((uint32_t)ne << 10) | (m >> 13), rest = m & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (v & 1))) v++;
  return (uint16_t)(sign | v);
}
static uint16_t toBf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
/* fp8: the inputs are multiples of 1/64 in [-8, 8); store them scaled to ones fp8 holds exactly: x -> round(x) */
static void store(void* buf, commDataType_t t, size_t i, double v) {
  char* p = (char*)buf + i * typeSize(t);
  switch (t) {
    case commInt8: *(int8_t*)p = (int8_t)lrint(v); break;
    case commUint8: *(uint8_t*)p = (uint8_t)(lrint(v) & 7); break;
    case commInt32: *(int32_t*)p = (int32_t)lrint(v * 64); break;
    case commUint32: *(uint32_t*)p = (uint32_t)(lrint(v * 64) & 0xffff); break;
    case commInt64: *(int64_t*)p = (int64_t)lrint(v * 64) << 20; break;
    case commUint64: *(uint64_t*)p = (uint64_t)(lrint(v * 64) & 0xffff) << 20; break;
    case commFloat16: *(uint16_t*)p = toHalf((float)v); break;
    case commFloat32: *(float*)p = (float)v; break;
    case commFloat64: *(double*)p = v; break;
    case commBfloat16: *(uint16_t*)p = toBf16((float)v); break;
    case commFloat8e4m3: {
      /* small integers in [-8, 8): sign, exponent, mantissa of e4m3 (bias 7) */
      long n = lrint(v);
      uint8_t s = n < 0 ? 0x80 : 0;
      unsigned a = (unsigned)labs(n);
      uint8_t code = 0;
      if (a) {
        int e = 0;
        while ((a >> (e + 1)) != 0) e++;
        code = (uint8_t)(((e + 7) << 3) | ((a << 3 >> e) & 7));
      }
      *(uint8_t*)p = s | code;
      break;
    }
    case commFloat8e5m2: {
      long n = lrint(v) / 2 * 2; /* even integers: 2 mantissa bits hold them up to 8 */
      uint8_t s = n < 0 ? 0x80 : 0;
      unsigned a = (unsigned)labs(n);
      uint8_t code = 0;
      if (a) {
        int e = 0;
        while ((a >> (e + 1)) != 0) e++;
        code = (uint8_t)(((e + 15) << 2) | ((a << 2 >> e) & 3));
      }
      *(uint8_t*)p = s | code;
      break;
    }
    default: break;
  }
}
static double loadAs(const void* buf, commDataType_t t, size_t i) {
  const char* p = (const char*)buf + i * typeSize(t);
  switch (t) {
    case commFloat32: return *(const float*)p;
    case commFloat64: return *(const double*)p;
    case commFloat16: {
      uint16_t h = *(const uint16_t*)p;
      int e = (h >> 10) & 31, m = h & 1023;
      double v = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(m + 1024, e - 25);
      return h & 0x8000 ? -v : v;
    }
    case commBfloat16: {
      uint32_t u = (uint32_t) * (const uint16_t*)p << 16;
      float f;
      memcpy(&f, &u, 4);
      return f;
    }
    case commFloat8e4m3: {
      uint8_t c = *(const uint8_t*)p;
      int e = (c >> 3) & 15, m = c & 7;
      double v = e == 0 ? ldexp(m, -9) : ldexp(m + 8, e - 10);
      return c & 0x80 ? -v : v;
    }
    case commFloat8e5m2: {
      uint8_t c = *(const uint8_t*)p;
      int e = (c >> 2) & 31, m = c & 3;
      double v = e == 0 ? ldexp(m, -16) : e == 31 ? INFINITY : ldexp(m + 4, e - 17);
      return c & 0x80 ? -v : v;
    }
    default: return 0;
  }
}

static uint64_t hashBytes(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char*)p)[i]) * 1099511628211ull;
  return h;
}

/* The same result on every rank: its hash allgathered over `comm`. */
static int sameEverywhere(comm_t comm, const void* buf, size_t bytes) {
  uint64_t mine = hashBytes(buf, bytes);
  uint64_t* all = calloc((size_t)nranks, sizeof(uint64_t));
  CHECK(commAllGather(&mine, all, 1, commUint64, comm, NULL));
  int same = 1;
  for (int r = 0; r < nranks; r++) same &= all[r] == mine;
  free(all);
  return same;
}

static const char* const opNames[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
static const char* const typeNames[commNumTypes] = {"int8",    "uint8",    "int32",      "uint32",
                                                    "int64",   "uint64",   "float16",    "float32",
                                                    "float64", "bfloat16", "float8e4m3", "float8e5m2"};

/* Floating results against a float64 reference: element i of out is the reduction over the ranks of their
 * input element base + i (case k, op opIdx, inputs scaled by scale); NULL when every element is within the
 * type's rounding, else what is wrong. */
static const char* floatCheck(const void* out, commDataType_t t, int k, int opIdx, double scale, size_t count,
                              size_t base) {
  double tol = t == commFloat64    ? 1e-12
               : t == commFloat32  ? 1e-5
               : t == commBfloat16 ? 0.05
               : t == commFloat16  ? 0.01
                                   : 0.3;
  for (size_t i = 0; i < count; i++) {
    double ref = 0;
    for (int r = 0; r < nranks; r++) {
      char tmp[8];
      store(tmp, t, 0, scale * inputOf(k, r, base + i));
      double x = loadAs(tmp, t, 0);
      if (r == 0 && opIdx >= 1 && opIdx <= 3) {
        ref = x;
        continue;
      }
      switch (opIdx) {
        case 1: ref *= x; break;
        case 2: ref = x > ref ? x : ref; break;
        case 3: ref = x < ref ? x : ref; break;
        case 5: ref += 0.5 * x; break;
        default: ref += x; break;
      }
    }
    if (opIdx == 4) ref /= nranks;
    double got = loadAs(out, t, i);
    double mag = fabs(ref) > 1 ? fabs(ref) : 1;
    /* narrow types round every partial: allow their rounding per rank */
    if (fabs(got - ref) > tol * mag * (isFloat(t) && typeSize(t) <= 2 ? nranks : 1)) {
      static char msg[160];
      snprintf(msg, sizeof(msg), "element %zu is %g, the float64 reference %g", i, got, ref);
      return msg;
    }
  }
  return NULL;
}

static void oneCase(comm_t cn, comm_t ct, int k, commDataType_t t, int opIdx, size_t count, int inPlace) {
  size_t bytes = count * typeSize(t);
  char* in = malloc(bytes);
  char* outN = malloc(bytes);
  char* outT = malloc(bytes);
  /* products of n inputs: from [-2, 2) (x / 4), so that 2^8 stays finite in every type */
  const double scale = opIdx == 1 ? 0.25 : 1.0;
  for (size_t i = 0; i < count; i++) store(in, t, i, scale * inputOf(k, rank, i));
  commRedOp_t op = opIdx < 5 ? (commRedOp_t)opIdx : commSum;
  commRedOp_t pmN = commSum, pmT = commSum;
  if (opIdx == 5) { /* premulsum by 0.5 (exact in every float type) */
    double half = 0.5;
    float halfF = 0.5f;
    void* scalar = t == commFloat64 ? (void*)&half : (void*)&halfF;
    commDataType_t st = t == commFloat64 ? commFloat64 : commFloat32;
    if (t != commFloat32 && t != commFloat64) goto done; /* the scalar's type is the data's: floats only here */
    CHECK(commRedOpCreatePreMulSum(&pmN, scalar, st, commScalarHostImmediate, cn));
    CHECK(commRedOpCreatePreMulSum(&pmT, scalar, st, commScalarHostImmediate, ct));
  }
  if (inPlace) memcpy(outN, in, bytes);
  CHECK(commAllReduce(inPlace ? outN : in, outN, count, t, opIdx == 5 ? pmN : op, cn, NULL));
  CHECK(commAllReduce(in, outT, count, t, opIdx == 5 ? pmT : op, ct, NULL));
  const char* what = NULL;
  if (!sameEverywhere(cn, outN, bytes)) what = "the collnet result differs between ranks";
  else if (!isFloat(t) && memcmp(outN, outT, bytes) != 0) what = "the collnet result differs from CollTree's";
  else if (isFloat(t)) what = floatCheck(outN, t, k, opIdx, scale, count, 0);
  if (what) {
    fprintf(stderr, "collnet_cluster: rank %d: FAIL: %s %s count %zu%s: %s\n", rank, typeNames[t], opNames[opIdx],
            count, inPlace ? " in place" : "", what);
    fails++;
  }
  if (opIdx == 5) {
    commRedOpDestroy(pmN, cn);
    commRedOpDestroy(pmT, ct);
  }
done:
  free(in);
  free(outN);
  free(outT);
}

/* Allgather (bit for bit against the ring's, the same on every rank) or reducescatter (integers bit for bit
 * against the ring's, floats against the float64 reference) of count elements per rank, collnet on cn, the ring
 * on ct. */
static void gatherCase(comm_t cn, comm_t ct, int k, commDataType_t t, int opIdx, size_t count, int scatter,
                       int inPlace) {
  size_t esz = typeSize(t), inCount = scatter ? count * (size_t)nranks : count;
  size_t outCount = scatter ? count : count * (size_t)nranks;
  char* in = malloc(inCount * esz);
  char* outN = malloc(outCount * esz);
  char* outT = malloc(outCount * esz);
  const double scale = opIdx == 1 ? 0.25 : 1.0;
  for (size_t i = 0; i < inCount; i++) store(in, t, i, scale * inputOf(k, rank, i));
  commRedOp_t op = (commRedOp_t)opIdx;
  const char* what = NULL;
  if (scatter) {
    CHECK(commReduceScatter(in, outT, count, t, op, ct, NULL));
    char* mine = in + (size_t)rank * count * esz; /* in place: the result lands in this rank's own part */
    CHECK(commReduceScatter(in, inPlace ? mine : outN, count, t, op, cn, NULL));
    if (inPlace) memcpy(outN, mine, count * esz);
    if (!isFloat(t) && memcmp(outN, outT, count * esz) != 0) what = "the collnet result differs from the ring's";
    else if (isFloat(t)) what = floatCheck(outN, t, k, opIdx, scale, count, (size_t)rank * count);
  } else {
    char* src = in;
    if (inPlace) {
      memcpy(outN + (size_t)rank * count * esz, in, count * esz);
      src = outN + (size_t)rank * count * esz;
    }
    CHECK(commAllGather(src, outN, count, t, cn, NULL));
    CHECK(commAllGather(in, outT, count, t, ct, NULL));
    if (memcmp(outN, outT, outCount * esz) != 0) what = "the collnet result differs from the ring's";
    else if (!sameEverywhere(ct, outN, outCount * esz)) what = "the collnet result differs between ranks";
  }
  if (what) {
    fprintf(stderr, "collnet_cluster: rank %d: FAIL: %s %s %s count %zu%s: %s\n", rank,
            scatter ? "reducescatter" : "allgather", typeNames[t], scatter ? opNames[opIdx] : "", count,
            inPlace ? " in place" : "", what);
    fails++;
  }
  free(in);
  free(outN);
  free(outT);
}

static int runCheck(comm_t world) {
  setenv("COMM_ALGO", "allreduce:colltree;allgather:ring;reducescatter:ring", 1);
  comm_t tree = NULL, second = NULL;
  CHECK(commSplit(world, 0, rank, &tree, NULL));
  setenv("COMM_ALGO", "allreduce:collnet", 1);
  CHECK(commSplit(world, 0, rank, &second, NULL));
  const size_t counts[] = {1, 1000, 150001};
  int k = 0, cases = 0;
  for (int t = 0; t < commNumTypes; t++)
    for (int op = 0; op < 6; op++)
      for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++, k++) {
        if (op == 5 && t != commFloat32 && t != commFloat64) continue;
        if (counts[c] > 1000 && t != commFloat32 && t != commInt32 && t != commBfloat16) continue;
        oneCase(world, tree, k, (commDataType_t)t, op, counts[c], (int)(k % 3 == 0));
        cases++;
      }
  /* Allgather of every type; reducescatter of every type with sum, prod, max, min (4 hosts' pieces per slot). */
  const size_t gcounts[] = {1, 777, 40001};
  for (int t = 0; t < commNumTypes; t++)
    for (size_t c = 0; c < sizeof(gcounts) / sizeof(gcounts[0]); c++, k++) {
      if (gcounts[c] > 1000 && t != commFloat32 && t != commInt32 && t != commUint8) continue;
      gatherCase(world, tree, k, (commDataType_t)t, 0, gcounts[c], 0, (int)(k % 2));
      for (int op = 0; op < 4; op++, k++) gatherCase(world, tree, k, (commDataType_t)t, op, gcounts[c], 1, op == 1);
      cases += 5;
    }
  /* Two collnet communicators at once: both allreduces in one group run together over the servers. */
  size_t n = 100003;
  float* a = malloc(n * sizeof(float));
  float* b = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) {
    a[i] = (float)(rank + 1);
    b[i] = (float)(2 * rank + 1) + (float)(i % 7);
  }
  CHECK(commGroupStart());
  CHECK(commAllReduce(a, a, n, commFloat32, commSum, world, NULL));
  CHECK(commAllReduce(b, b, n, commFloat32, commMax, second, NULL));
  CHECK(commGroupEnd());
  for (size_t i = 0; i < n && fails < 10; i++) {
    float wa = (float)nranks * (nranks + 1) / 2, wb = (float)(2 * (nranks - 1) + 1) + (float)(i % 7);
    if (a[i] != wa || b[i] != wb) {
      fprintf(stderr,
              "collnet_cluster: rank %d: FAIL: two communicators at once: element %zu is %g and %g, not %g and %g\n",
              rank, i, a[i], b[i], wa, wb);
      fails++;
    }
  }
  free(a);
  free(b);
  CHECK(commFinalize(second));
  CHECK(commDestroy(second));
  CHECK(commFinalize(tree));
  CHECK(commDestroy(tree));
  printf("collnet_cluster: rank %d: %s: %d cases and two communicators at once, %ld failure(s)\n", rank,
         fails ? "FAIL" : "PASS", cases, fails);
  return fails ? 1 : 0;
}

static int runLoop(comm_t world, int victim) {
  size_t n = 1 << 18;
  float* buf = calloc(n, sizeof(float));
  double last = nowMs(), start = last;
  for (int it = 0;; it++) {
    if (rank == victim && it == 20) raise(SIGKILL);
    commResult_t r = commAllReduce(buf, buf, n, commFloat32, commSum, world, NULL);
    double t = nowMs();
    if (r != commSuccess) {
      printf("collnet_cluster: rank %d: error after %d allreduces, %.0f ms after the last success: %s: %s\n", rank, it,
             t - last, commGetErrorString(r), commGetLastError(world));
      fflush(stdout);
      free(buf);
      commAbort(world);
      return 0;
    }
    if (it == 5) {
      printf("collnet_cluster: rank %d: loop started\n", rank);
      fflush(stdout);
    }
    last = t;
    if (t - start > 120000) break;
  }
  printf("collnet_cluster: rank %d: FAIL: no error in 120 s\n", rank);
  free(buf);
  return 1;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "check";
  const char* r = getenv("COMM_RANK");
  const char* n = getenv("COMM_NRANKS");
  if (!r || !n) {
    fprintf(stderr,
            "collnet_cluster: needs COMM_RANK, COMM_NRANKS and COMM_ROOT (a launcher: scripts/netns_cluster.sh)\n");
    return 2;
  }
  rank = atoi(r);
  nranks = atoi(n);
  commUniqueId id;
  memset(&id, 0, sizeof(id));
  comm_t world = NULL;
  CHECK(commInitRank(&world, nranks, id, rank));
  int status;
  if (strcmp(mode, "loop") == 0) {
    status = runLoop(world, argc > 2 ? atoi(argv[2]) : -1);
    return status;
  }
  status = runCheck(world);
  CHECK(commFinalize(world));
  CHECK(commDestroy(world));
  return status;
}
