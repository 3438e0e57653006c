/* libFuzzer target for the topology XML readers and writers (src/topo/xml.c for libcomm's format,
 * src/topo/nccl_xml*.c for NCCL's; the root element picks the reader): any input either fails to parse (one
 * WARN, nothing leaked) or parses into a topology whose canonical text, in either format, parses again and
 * writes the same bytes. Run through scripts/fuzz_topo.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "topo.h"

/* graph.c's commTopoGet calls discovery, which the fuzzer does not link; the real one wins when linked. */
__attribute__((weak)) commResult_t commTopoDiscover(commTopo** out) {
  *out = NULL;
  return commInternalError;
}

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  setenv("COMM_DEBUG", "NONE", 1); /* WARN still records the last error; it just is not printed */
  commLogReset();
  return 0;
}

static char* writeCanonical(const commTopo* topo, size_t* len) {
  char* buf = NULL;
  FILE* f = open_memstream(&buf, len);
  if (f == NULL) abort();
  if (commTopoWriteXml(topo, f) != commSuccess) {
    fprintf(stderr, "fuzz_topo_xml: writing a parsed topology failed: %s\n", commLogLastWarn());
    abort();
  }
  if (fclose(f) != 0) abort();
  return buf;
}

static char* writeNccl(const commTopo* topo, size_t* len) {
  char* buf = NULL;
  FILE* f = open_memstream(&buf, len);
  if (f == NULL) abort();
  if (commTopoWriteNcclXml(topo, f) != commSuccess) {
    fprintf(stderr, "fuzz_topo_xml: writing a parsed topology in NCCL's format failed: %s\n", commLogLastWarn());
    abort();
  }
  if (fclose(f) != 0) abort();
  return buf;
}

/* NCCL's format: what the writer makes is read by the reader, and written again it is the same text. */
static void checkNccl(const commTopo* topo) {
  size_t len1 = 0, len2 = 0;
  char* text1 = writeNccl(topo, &len1);
  commTopo* again = NULL;
  if (commTopoParseNcclXml(text1, len1, "fuzz-nccl", &again) != commSuccess) {
    fprintf(stderr, "fuzz_topo_xml: the NCCL writer's output does not parse: %s\n--- text ---\n%s", commLogLastWarn(),
            text1);
    abort();
  }
  char* text2 = writeNccl(again, &len2);
  commTopoFree(again);
  if (len1 != len2 || memcmp(text1, text2, len1) != 0) {
    fprintf(stderr, "fuzz_topo_xml: NCCL write -> parse -> write differs\n--- first ---\n%s--- second ---\n%s", text1,
            text2);
    abort();
  }
  free(text1);
  free(text2);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  commTopo* topo = NULL;
  if (commTopoParseXml((const char*)data, size, "fuzz", &topo) != commSuccess) {
    if (topo != NULL) abort(); /* nothing is returned on error */
    return 0;
  }
  size_t len1 = 0, len2 = 0;
  checkNccl(topo);
  char* text1 = writeCanonical(topo, &len1);
  commTopoFree(topo);
  commTopo* again = NULL;
  if (commTopoParseXml(text1, len1, "fuzz-rewritten", &again) != commSuccess) {
    fprintf(stderr, "fuzz_topo_xml: the writer's output does not parse: %s\n--- text ---\n%s", commLogLastWarn(),
            text1);
    abort();
  }
  char* text2 = writeCanonical(again, &len2);
  commTopoFree(again);
  if (len1 != len2 || memcmp(text1, text2, len1) != 0) {
    fprintf(stderr, "fuzz_topo_xml: write -> parse -> write differs\n--- first ---\n%s--- second ---\n%s", text1,
            text2);
    abort();
  }
  free(text1);
  free(text2);
  return 0;
}
