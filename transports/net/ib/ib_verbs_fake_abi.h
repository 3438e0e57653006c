/* The interface between libcomm and the loadable verbs fake (libcomm-verbs-fake.so, built from
 * tests/fakes/ib_verbs/ for the tests only; libcomm itself contains no fake).
 *
 * With COMM_IB_FAKE=<spec> set, libcomm (ib_verbs_fake_load.c) dlopens the module named by COMM_IB_FAKE_LIB
 * (default COMM_IB_FAKE_LIB_DEFAULT, found on the normal library search path), looks up
 * COMM_IB_FAKE_OPEN_SYM and calls it once per probe. The module links nothing of libcomm: what it needs from
 * the library (moving device memory) comes in `host`. Only types and the entry point's name here.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef COMM_IB_VERBS_FAKE_ABI_H_
#define COMM_IB_VERBS_FAKE_ABI_H_

#include <stddef.h>

#include "ib_verbs.h"

#ifdef COMM_HAVE_IBVERBS
#ifdef __cplusplus
extern "C" {
#endif

#define COMM_IB_FAKE_ABI_VERSION 1
#define COMM_IB_FAKE_LIB_DEFAULT "libcomm-verbs-fake.so"
#define COMM_IB_FAKE_OPEN_SYM "commIbFakeOpen"

/* What the fake's wire calls to move data that may be in device memory (libcomm: commIsDevicePointer and
 * commDevCopy). A NULL callback: every pointer is host memory. */
typedef struct {
  int abiVersion; /* COMM_IB_FAKE_ABI_VERSION */
  int (*isDevicePointer)(const void* ptr);
  int (*devCopy)(void* dst, const void* src, size_t bytes); /* 0 on success */
} commIbFakeHost;

/* What the spec asks of GPUDirect RDMA (the library installs its fake dma-buf ops accordingly). */
typedef enum {
  COMM_IB_FAKE_GDR_NONE = 0, /* no :gdr word: the driver's own GDR ops */
  COMM_IB_FAKE_GDR_ON = 1,   /* :gdr: the fake registers device memory as a dma-buf */
  COMM_IB_FAKE_GDR_FAIL = 2  /* :gdrfail: dma-buf claimed, every export of one fails */
} commIbFakeGdr;

/* Parse `spec` (COMM_IB_FAKE's value: <n>[:ib|:roce][:gdr|:gdrfail], n in 1..8), configure the fake's
 * devices (n active one-port devices "fakeib<i>" or "fakeroce<i>") and return its verbs table; *gdr says
 * what the spec asks of GPUDirect RDMA. NULL with the reason in `why` for a bad spec, a host of another ABI
 * version, or devices that cannot be configured (some are open). */
typedef const commIbVerbs* (*commIbFakeOpenFn)(const char* spec, const commIbFakeHost* host, commIbFakeGdr* gdr,
                                               char* why, size_t whyLen);

#ifdef __cplusplus
}
#endif
#endif /* COMM_HAVE_IBVERBS */
#endif /* COMM_IB_VERBS_FAKE_ABI_H_ */
