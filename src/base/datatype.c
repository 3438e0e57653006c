/* Names and sizes of datatypes and reduction operators (datatype.h). */
#include "datatype.h"

static int typeValid(commDataType_t t) { return (int)t >= 0 && (int)t < (int)commNumTypes; }

size_t commTypeSize(commDataType_t t) {
  static const size_t sizes[commNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return typeValid(t) ? sizes[t] : 0;
}

const char* commTypeName(commDataType_t t) {
  static const char* const names[commNumTypes] = {"int8",    "uint8",    "int32",      "uint32",
                                                  "int64",   "uint64",   "float16",    "float32",
                                                  "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return typeValid(t) ? names[t] : "unknown";
}

const char* commOpName(commRedOp_t op) {
  static const char* const names[commNumOps] = {"sum", "prod", "max", "min", "avg"};
  if ((int)op < 0) return "unknown";
  if ((int)op < (int)commNumOps) return names[op];
  return "premulsum"; /* user-created pre-multiplied sums */
}

int commTypeIsFloat(commDataType_t t) {
  switch (t) {
    case commFloat16:
    case commFloat32:
    case commFloat64:
    case commBfloat16:
    case commFloat8e4m3:
    case commFloat8e5m2: return 1;
    default: return 0;
  }
}
