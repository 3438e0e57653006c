/* COMM_IB_FAKE: the IB network over the verbs fake, a module built for the tests only
 * (tests/fakes/ib_verbs/, libcomm-verbs-fake.so; libcomm contains no fake). This file loads it
 * (COMM_IB_FAKE_LIB, else COMM_IB_FAKE_LIB_DEFAULT on the library search path), hands it libcomm's device
 * memory calls, and installs the fake dma-buf GPUDirect RDMA ops that the spec's :gdr / :gdrfail ask for.
 * The module ABI is ib_verbs_fake_abi.h.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "ib_verbs_fake_abi.h"

#ifdef COMM_HAVE_IBVERBS
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "debug.h"
#include "devmem.h" /* commIsDevicePointer, commDevCopy */
#include "ib_gdr.h"
#include "net_ib.h"
#include "param.h"

/* :gdr: the fake takes device memory as a dma-buf registration (the CUDA side claims a dma-buf for any device
 * pointer; the fake registers its address and moves data with CUDA copies), so the GPUDirect RDMA data path
 * runs end to end on a machine with a GPU and no NIC. :gdrfail claims the same support but every export of a
 * dma-buf fails, so registrations of device memory are refused: the path that falls back to host memory
 * with a WARN. */
static int fakeGdrDmabufSupported(int dev) { return dev >= 0; }
static int fakeGdrDmabufFd(uintptr_t start, size_t size, int* fd) {
  (void)start, (void)size;
  *fd = open("/dev/null", O_RDONLY | O_CLOEXEC); /* the fake checks only fd >= 0; the caller closes it */
  return *fd >= 0 ? 0 : -1;
}
static int fakeGdrDmabufFdRefused(uintptr_t start, size_t size, int* fd) {
  (void)start, (void)size;
  *fd = -1;
  return -1;
}
static ibGdrOps fakeGdrOps;

const commIbVerbs* commIbVerbsLoadFake(const char* spec, char* why, size_t whyLen) {
  const char* lib = commParamStr("COMM_IB_FAKE_LIB", NULL);
  if (!lib || !*lib) lib = COMM_IB_FAKE_LIB_DEFAULT;
  void* handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL); /* never closed: the table lives in it */
  if (!handle) {
    const char* err = dlerror();
    snprintf(why, whyLen, "COMM_IB_FAKE=%s but the verbs fake module %s cannot be loaded (%s)", spec, lib,
             err ? err : "unknown error");
    WARN("NET/IB : %s; set COMM_IB_FAKE_LIB to the path of libcomm-verbs-fake.so (built with the tests)", why);
    return NULL;
  }
  commIbFakeOpenFn openFn = NULL;
  *(void**)&openFn = dlsym(handle, COMM_IB_FAKE_OPEN_SYM);
  if (!openFn) {
    snprintf(why, whyLen, "COMM_IB_FAKE=%s but %s has no %s: not the verbs fake module", spec, lib,
             COMM_IB_FAKE_OPEN_SYM);
    WARN("NET/IB : %s", why);
    dlclose(handle);
    return NULL;
  }
  const commIbFakeHost host = {.abiVersion = COMM_IB_FAKE_ABI_VERSION,
                               .isDevicePointer = commIsDevicePointer,
                               .devCopy = commDevCopy};
  commIbFakeGdr gdr = COMM_IB_FAKE_GDR_NONE;
  const commIbVerbs* verbs = openFn(spec, &host, &gdr, why, whyLen);
  if (!verbs) return NULL; /* a bad spec: the network choice's log line says why */
  if (gdr != COMM_IB_FAKE_GDR_NONE) {
    fakeGdrOps = *ibGdrDriverOps();
    fakeGdrOps.dmabufSupported = fakeGdrDmabufSupported;
    fakeGdrOps.dmabufFd = gdr == COMM_IB_FAKE_GDR_FAIL ? fakeGdrDmabufFdRefused : fakeGdrDmabufFd;
    ibGdrSetOps(&fakeGdrOps);
  }
  INFO(COMM_NET, "NET/IB : COMM_IB_FAKE=%s: verbs fake loaded from %s", spec, lib);
  return verbs;
}

#else
typedef int commIbNoVerbs_t; /* without <infiniband/verbs.h>: nothing (ISO C wants a declaration) */
#endif /* COMM_HAVE_IBVERBS */
