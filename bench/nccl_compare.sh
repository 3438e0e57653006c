#!/usr/bin/env bash
# libcomm against NCCL on this host's GPUs (bench/nccl_compare.cu; nccl_compare -h lists its options):
#   bench/nccl_compare.sh BUILD_DIR [nccl_compare args, e.g. -g 8 -e 1G -c allreduce]
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0). NCCL: $NCCL_LIB, else the pip package nvidia-nccl-cu13's
# libnccl.so.2, else the first one under /opt or /usr. With OUT set, the output is also in $OUT/nccl_compare.txt.
set -u
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
  echo "usage: $0 BUILD_DIR [nccl_compare args]" >&2
  exit 2
fi
bin="$1/bench/nccl_compare"
shift
if [ ! -x "$bin" ]; then
  echo "$0: $bin not built (a CUDA build: cmake --build BUILD_DIR --target nccl_compare)" >&2
  exit 2
fi
export NCCL_NVLS_ENABLE=0
if [ -z "${NCCL_LIB:-}" ]; then
  NCCL_LIB=$(python3 -c '
import os, nvidia.nccl as m
dirs = list(getattr(m, "__path__", [])) + [os.path.dirname(getattr(m, "__file__", None) or "")]
print(next((os.path.join(d, "lib", "libnccl.so.2") for d in dirs
            if os.path.exists(os.path.join(d, "lib", "libnccl.so.2"))), ""))' 2> /dev/null)
  [ -n "$NCCL_LIB" ] || NCCL_LIB=$(find /opt /usr -name libnccl.so.2 2> /dev/null | head -n 1)
fi
if [ -n "$NCCL_LIB" ]; then
  export NCCL_LIB
else
  unset NCCL_LIB
  echo "$0: no libnccl.so.2 found: nccl_compare tries the loader's default" >&2
fi
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  "$bin" "$@" 2>&1 | tee "$OUT/nccl_compare.txt"
  exit "${PIPESTATUS[0]}"
fi
exec "$bin" "$@"
