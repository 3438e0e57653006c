/* The text of each result code (the public commGetErrorString). */
#include "comm.h"
#include "check.h"

COMM_API const char* commGetErrorString(commResult_t r) {
  switch (r) {
    case commSuccess: return "no error";
    case commUnhandledCudaError: return "unhandled cuda error (run with COMM_DEBUG=INFO for details)";
    case commSystemError: return "unhandled system error (run with COMM_DEBUG=INFO for details)";
    case commInternalError: return "internal error - please report this issue to the libcomm developers";
    case commInvalidArgument: return "invalid argument (run with COMM_DEBUG=WARN for details)";
    case commInvalidUsage: return "invalid usage (run with COMM_DEBUG=WARN for details)";
    case commRemoteError: return "remote process exited or there was a network error";
    case commInProgress: return "operation in progress";
    case commTimeout: return "operation timed out (COMM_TIMEOUT_MS)";
    default: return "unknown result code";
  }
}
