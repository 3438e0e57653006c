/*
 * libcomm perf harness: the JSON file of -J, in nccl-tests' layout (report.c says what goes in it). One
 * writer per process, used by rank 0 only. Public API (comm.h) only.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_PERF_JSON_H_
#define COMM_PERF_JSON_H_

#include <stddef.h>

/* Opens path for writing as nccl-tests does: only a name ending in ".json" (otherwise returns 1 and writes
 * nothing), never over an existing file (then path.0, path.1, ...); prints "# Writing JSON output to F"
 * and starts the top-level object. Returns 0 when writing, 1 when skipped, -1 when it could not. */
int perfJsonOpen(const char* path);
int perfJsonActive(void);
/* Closes what is still open and the file. */
void perfJsonClose(void);

void perfJsonKey(const char* key);
void perfJsonObjectStart(void);
void perfJsonObjectEnd(void);
void perfJsonListStart(void);
void perfJsonListEnd(void);
void perfJsonStr(const char* s); /* NULL writes null */
void perfJsonInt(long long v);
void perfJsonSize(size_t v);
void perfJsonDouble(double v); /* NaN and infinities as strings */
void perfJsonNull(void);
void perfJsonBoolStr(int v); /* nccl-tests writes its booleans as the strings "true" and "false" */

#endif /* COMM_PERF_JSON_H_ */
