#!/usr/bin/env bash
# Device buffers between hosts, libcomm against NCCL, on the GPU machine:
#   bench/net_device_compare.sh BUILD_DIR [NPROC (2)] [MAX_BYTES (256M)]
# NPROC processes, each "a host of its own": libcomm's perf/allreduce_perf -M device -np NPROC -H 1 (each
# process sets COMM_HOSTID, so device buffers go through pinned host memory and the device proxy thread over
# the Socket plugin), and PyTorch's NCCL with P2P and shared memory off (NCCL_P2P_DISABLE=1
# NCCL_SHM_DISABLE=1: its socket network transport) on the same GPUs (rank r on GPU r % GPUs), allreduce of
# float32 from 8 B to MAX_BYTES by 8x. Prints both times and the ratio per size (median of each side's
# repetitions); with OUT set, also $OUT/net_device_compare.txt. NVLink multicast stays off.
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
[[ $# -ge 1 && -x "$1/perf/allreduce_perf" ]] || { echo "usage: $0 BUILD_DIR [NPROC] [MAX_BYTES]" >&2; exit 2; }
build=$1
np=${2:-2}
max=${3:-268435456}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for rep in 1 2 3; do # libcomm: nccl-tests style, out-of-place time
  timeout 300 "$build/perf/allreduce_perf" -M device -np "$np" -H 1 -b 8 -e "$max" -f 8 -w 3 -n 20 -c 1 \
    > "$tmp/comm$rep.txt" 2>&1 || { echo "$0: libcomm run $rep failed:"; tail -n 20 "$tmp/comm$rep.txt"; exit 1; }
done
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 timeout 300 python3 -m torch.distributed.run --standalone \
  --nproc_per_node="$np" "$here/torch_nccl_net.py" 8 "$max" 8 20 3 > "$tmp/nccl.txt" 2> "$tmp/nccl.err" ||
  { echo "$0: NCCL run failed:"; tail -n 20 "$tmp/nccl.err"; exit 1; }
{
  echo "## allreduce, device buffers, $np processes as separate hosts (libcomm: net staging + proxy; NCCL: socket)"
  echo
  echo "| bytes | NCCL us | libcomm us (median of 3) | libcomm/NCCL time | libcomm busbw GB/s |"
  echo "|------:|--------:|-------------------------:|------------------:|-------------------:|"
  awk 'FNR == 1 { f++ } f <= 3 && /^ +[0-9]+ +[0-9]+ +float/ { t[$1] = t[$1] " " $6; bw[$1] = $8 }
       f == 4 && NF == 3 { n[$1] = $2; order[++k] = $1 }
       END {
         for (i = 1; i <= k; i++) {
           b = order[i]; m = split(t[b], v, " "); # median of the libcomm repetitions
           for (x = 1; x <= m; x++) for (y = x + 1; y <= m; y++) if (v[y] + 0 < v[x] + 0) { s = v[x]; v[x] = v[y]; v[y] = s }
           med = m ? v[int((m + 1) / 2)] : "nan";
           printf "| %d | %.2f | %s | %s | %s |\n", b, n[b], med, m ? sprintf("%.3f", med / n[b]) : "nan", bw[b]
         }
       }' "$tmp/comm1.txt" "$tmp/comm2.txt" "$tmp/comm3.txt" "$tmp/nccl.txt"
} | tee ${OUT:+"$OUT/net_device_compare.txt"}
