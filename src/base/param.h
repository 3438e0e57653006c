/* Every environment variable is read through this module; docs/ENV.md lists them all. */
#ifndef COMM_PARAM_H_
#define COMM_PARAM_H_

#include <stdint.h>

/* NCCL's names: a COMM_ variable that NCCL also has is read from its NCCL_ name (NCCL_DEBUG for COMM_DEBUG,
 * NCCL_MAX_NCHANNELS for COMM_NCHANNELS, ...) when the COMM_ one is unset or empty; the COMM_ name wins when
 * both are set, and an INFO line (subsystem ENV) says which gave the value. docs/ENV.md has the table. */

/* Integer variable `name` (full name, e.g. "COMM_TIMEOUT_MS"); `def` when unset. A value that is not an
 * integer is a WARN and gives `def`; one outside [min, max] too, unless it came from the NCCL_ name: that is
 * clamped into the range (with the INFO line). Read at the time of the call. */
int64_t commParamInt(const char* name, int64_t def, int64_t min, int64_t max);
/* String variable; `def` when unset or empty. The pointer stays valid until the variable changes. */
const char* commParamStr(const char* name, const char* def);
/* Size in bytes with optional K/M/G suffix (powers of 1024). */
int64_t commParamSize(const char* name, int64_t def, int64_t min, int64_t max);

/* The value of `name` or of its NCCL_ name, as commParamStr reads it, without any log line (the logger
 * itself reads its variables with it); *source (if not NULL) is the variable that gave it, or NULL. */
const char* commParamLookup(const char* name, const char** source);
/* The variable that gives `name`'s value: `name` itself, its NCCL_ name, or NULL when neither is set. */
const char* commParamSource(const char* name);
/* 1 when `name`'s value comes from its NCCL_ name (parsers that accept NCCL's syntax where it differs). */
int commParamFromNccl(const char* name);
/* The INFO line saying that `name`'s value came from its NCCL_ name, or that both were set and the COMM_
 * one won; nothing when the NCCL_ name is unset. Once per value. `shown`: the value as used (NULL: as set). */
void commParamLogSource(const char* name, const char* shown);
/* NCCL variables libcomm does not provide (docs/ENV.md): one WARN for each that is set, once per process
 * (a value that asks for what libcomm does anyway, e.g. NCCL_NVLS_ENABLE=0, is an INFO instead); and, the
 * first time, one INFO for each NCCL_ variable libcomm does not know. Called at every communicator init.
 * Returns how many WARNs this call printed. */
int commParamWarnNccl(void);
/* Tests: forget which values were logged and which variables WARNed. */
void commParamLogReset(void);

#endif
