/* The entry point of the verbs fake as a loadable module (libcomm-verbs-fake.so): commIbFakeOpen parses
 * COMM_IB_FAKE's value, configures the devices and hands libcomm the table (the ABI is in
 * transports/net/ib/ib_verbs_fake_abi.h). The only symbol the module exports.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "ib_verbs_fake.h"

#ifdef COMM_HAVE_IBVERBS
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

__attribute__((visibility("default"))) const commIbVerbs* commIbFakeOpen(const char* spec, const commIbFakeHost* host,
                                                                         commIbFakeGdr* gdrOut, char* why,
                                                                         size_t whyLen) {
  if (gdrOut) *gdrOut = COMM_IB_FAKE_GDR_NONE;
  if (host && host->abiVersion != COMM_IB_FAKE_ABI_VERSION) {
    snprintf(why, whyLen, "the verbs fake module has ABI version %d, the library %d", COMM_IB_FAKE_ABI_VERSION,
             host->abiVersion);
    return NULL;
  }
  if (!spec) spec = "";
  char* end = NULL;
  long n = strtol(spec, &end, 10);
  uint8_t linkLayer = IBV_LINK_LAYER_INFINIBAND;
  commIbFakeGdr gdr = COMM_IB_FAKE_GDR_NONE;
  int bad = end == spec;
  while (!bad && end && *end == ':') { /* :ib, :roce, :gdr, :gdrfail */
    const char* word = end + 1;
    size_t len = strcspn(word, ":");
    if (len == 2 && strncasecmp(word, "ib", 2) == 0) linkLayer = IBV_LINK_LAYER_INFINIBAND;
    else if (len == 4 && strncasecmp(word, "roce", 4) == 0) linkLayer = IBV_LINK_LAYER_ETHERNET;
    else if (len == 3 && strncasecmp(word, "gdr", 3) == 0) gdr = COMM_IB_FAKE_GDR_ON;
    else if (len == 7 && strncasecmp(word, "gdrfail", 7) == 0) gdr = COMM_IB_FAKE_GDR_FAIL;
    else bad = 1;
    end = (char*)word + len;
  }
  if (bad || end == NULL || *end != '\0' || n < 1 || n > COMM_IB_FAKE_MAX_DEVS) {
    snprintf(why, whyLen, "COMM_IB_FAKE=%s is not <n>[:ib|:roce][:gdr|:gdrfail] with n in 1..%d", spec,
             COMM_IB_FAKE_MAX_DEVS);
    return NULL;
  }
  commIbFakeDevice devs[COMM_IB_FAKE_MAX_DEVS];
  for (int i = 0; i < (int)n; i++) {
    char name[32];
    snprintf(name, sizeof(name), "%s%d", linkLayer == IBV_LINK_LAYER_ETHERNET ? "fakeroce" : "fakeib", i);
    commIbFakeDeviceInit(&devs[i], name, linkLayer, i);
  }
  int err = commIbFakeConfigure((int)n, devs);
  if (err) {
    snprintf(why, whyLen, "COMM_IB_FAKE=%s: cannot configure the fake devices: %s", spec, strerror(err));
    return NULL;
  }
  commIbFakeSetHost(host);
  if (gdr != COMM_IB_FAKE_GDR_NONE) {
    commIbFakeOptions opt;
    commIbFakeGetOptions(&opt);
    opt.dmabuf = 1;
    commIbFakeSetOptions(&opt);
  }
  if (gdrOut) *gdrOut = gdr;
  return commIbFakeVerbs();
}

#else
typedef int commIbNoVerbs_t; /* without <infiniband/verbs.h>: nothing (ISO C wants a declaration) */
#endif /* COMM_HAVE_IBVERBS */
