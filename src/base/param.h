/* Every environment variable is read through this module; docs/ENV.md lists them all. */
#ifndef COMM_PARAM_H_
#define COMM_PARAM_H_

#include <stdint.h>

/* Integer variable `name` (full name, e.g. "COMM_TIMEOUT_MS"); `def` when unset. A value that is not an
 * integer, or lies outside [min, max], is a WARN and gives `def`. Read at the time of the call. */
int64_t commParamInt(const char* name, int64_t def, int64_t min, int64_t max);
/* String variable; `def` when unset or empty. The pointer stays valid until the variable changes. */
const char* commParamStr(const char* name, const char* def);
/* Size in bytes with optional K/M/G suffix (powers of 1024). */
int64_t commParamSize(const char* name, int64_t def, int64_t min, int64_t max);

#endif
