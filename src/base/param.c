/* The one place environment variables are read. docs/ENV.md lists every name used here and elsewhere. */
#include "param.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"

static int parseInt(const char* s, int64_t* out, int allowSuffix) {
  errno = 0;
  char* end = NULL;
  long long v = strtoll(s, &end, 0);
  if (errno != 0 || end == s) return -1;
  if (allowSuffix && *end) {
    int64_t mult = 1;
    switch (*end) {
      case 'k':
      case 'K': mult = 1LL << 10; break;
      case 'm':
      case 'M': mult = 1LL << 20; break;
      case 'g':
      case 'G': mult = 1LL << 30; break;
      default: return -1;
    }
    end++;
    if (*end == 'i' || *end == 'B' || *end == 'b') end++;
    if (*end == 'B') end++;
    if (v > INT64_MAX / mult || v < INT64_MIN / mult) return -1;
    v *= mult;
  }
  while (*end == ' ' || *end == '\t' || *end == '\n') end++;
  if (*end != '\0') return -1;
  *out = v;
  return 0;
}

static int64_t paramNumber(const char* name, int64_t def, int64_t min, int64_t max, int allowSuffix) {
  const char* s = getenv(name);
  if (s == NULL || *s == '\0') return def;
  int64_t v;
  if (parseInt(s, &v, allowSuffix) != 0) {
    WARN_NOTICE("%s=%s is not %s; using the default %lld", name, s, allowSuffix ? "a size" : "an integer",
                (long long)def);
    return def;
  }
  if (v < min || v > max) {
    WARN_NOTICE("%s=%s is outside [%lld, %lld]; using the default %lld", name, s, (long long)min, (long long)max,
                (long long)def);
    return def;
  }
  INFO(COMM_ENV, "%s set by environment to %lld", name, (long long)v);
  return v;
}

int64_t commParamInt(const char* name, int64_t def, int64_t min, int64_t max) {
  return paramNumber(name, def, min, max, 0);
}

int64_t commParamSize(const char* name, int64_t def, int64_t min, int64_t max) {
  return paramNumber(name, def, min, max, 1);
}

const char* commParamStr(const char* name, const char* def) {
  const char* s = getenv(name);
  if (s == NULL || *s == '\0') return def;
  return s;
}
