/* The CUDA executor's entry points in a build without it (no CUDA toolkit, or a sanitizer build): device
 * buffers never reach them, because the API refuses them first (commDevAvailable() == 0); each still
 * fails cleanly with a WARN. */
#ifndef COMM_HAVE_CUDA
#include "check.h"
#include "communicator.h"
#include "debug.h"
#include "exec.h"
#include "exec_dev.h"

static commResult_t noExecutor(const char* what) {
  WARN("%s: this libcomm was built without the CUDA executor", what);
  return commInvalidUsage;
}

int commDevAvailable(void) { return 0; }
commResult_t commDevEnsure(struct commComm* comm) {
  (void)comm;
  return noExecutor("commDevEnsure");
}
commResult_t commDevRunPlans(struct commComm* comm, struct commPlan** plans, int nPlans) {
  (void)comm, (void)plans, (void)nPlans;
  return noExecutor("commDevRunPlans");
}
commResult_t commDevScratch(struct commComm* comm, size_t bytes, void** scratch) {
  (void)comm, (void)bytes, (void)scratch;
  return noExecutor("commDevScratch");
}
commResult_t commDevRunCached(struct commComm* comm, const commDevCall* t, int* launched) {
  (void)comm, (void)t;
  *launched = 0;
  return commSuccess;
}
commResult_t commDevPollError(struct commComm* comm) {
  (void)comm;
  return commSuccess;
}
commResult_t commDevSync(struct commComm* comm) {
  (void)comm;
  return commSuccess;
}
void commDevAbort(struct commComm* comm) { (void)comm; }
void commDevFree(struct commComm* comm) { (void)comm; }
#else
typedef int commExecDevNoneUnused; /* ISO C wants something in a translation unit */
#endif
