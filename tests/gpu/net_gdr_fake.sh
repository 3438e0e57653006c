#!/usr/bin/env bash
# net_gdr_fake.sh BUILD_DIR: device buffers over the network transport, ranks as threads of one process (for the
# GPU machine; it has no NIC). COMM_P2P_DISABLE=1 with COMM_SHM_DISABLE=1 sends device connections through the
# net transport's FIFOs and its device proxy thread, as between hosts. Runs of
# `tests/test_gpu_coll -q -n 2,4`, each of which must pass:
#  1. IB over the verbs fake with GPUDirect RDMA (COMM_IB_FAKE=2:ib:gdr): the slots must be in GPU memory,
#     registered as CUDA memory ("GPUDirect RDMA, ... of slots in GPU"), and no "GPUDirect RDMA is off" WARN;
#  2. IB over the fake without GPUDirect RDMA: whatever the driver offers, the data path must work (slots in
#     host memory, with the WARN when registration of GPU memory was tried and refused);
#  2b. IB over the fake claiming GPUDirect RDMA but refusing every registration of GPU memory
#     (COMM_IB_FAKE=2:ib:gdrfail): the "GPUDirect RDMA is off" WARN, slots in host memory, and a pass;
#  3. Socket: slots in pinned host memory ("the network plugin cannot reach GPU memory");
#  4. an NCCL network plugin through the adapter (transports/collnet/aggd/aggd_net.c, TCP, host memory only), when
#     BUILD_DIR/tests/libnccl-net-example.so exists: slots in pinned host memory, the plugin loaded.
# The verbs fake is the module BUILD_DIR/tests/libcomm-verbs-fake.so (tests/fakes/ib_verbs/), given to libcomm
# as COMM_IB_FAKE_LIB; without it the IB runs fail.
# Logs under $TMPDIR (default /tmp) as net_gdr_fake.*.txt. Exit 0 when all pass; 77 when the first run skips
# (test_gpu_coll found no CUDA device: its SKIP line is printed); 1 when any run fails, and also when a later run
# skips (a GPU that the runs before it used cannot be absent: that is a failure, and it never hides one).
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
[[ $# -ge 1 && -x "$1/tests/test_gpu_coll" ]] || { echo "usage: $0 BUILD_DIR (BUILD_DIR/tests/test_gpu_coll)" >&2; exit 2; }
bin=$1/tests/test_gpu_coll
fake=$(cd "$1/tests" && pwd)/libcomm-verbs-fake.so
[[ -f $fake ]] || echo "net_gdr_fake: no $fake (target comm_verbs_fake): the IB runs will fail" >&2
dir=${TMPDIR:-/tmp} # run_on_gpu.sh points it at its log folder
fails=0 runs=0
# run NAME EXPECT_REGEX REJECT_REGEX VAR=value...
run() {
  local name=$1 expect=$2 reject=$3
  shift 3
  local log=$dir/net_gdr_fake.$name.txt
  env COMM_IB_FAKE_LIB="$fake" "$@" COMM_P2P_DISABLE=1 COMM_SHM_DISABLE=1 COMM_DEBUG=INFO COMM_DEBUG_SUBSYS=NET,IB \
    timeout 900 "$bin" -q -n 2,4 > "$log" 2>&1
  local rc=$?
  runs=$((runs + 1))
  if [[ $rc == 77 && $runs == 1 ]]; then # no GPU: nothing ran yet, so there is nothing a skip could hide
    echo "net_gdr_fake: SKIP: $(grep -m 1 'SKIP' "$log" || echo "test_gpu_coll exited 77")"
    exit 77
  fi
  local why=""
  [[ $rc == 77 ]] && why="skipped ($(grep -m 1 'SKIP' "$log")) after $((runs - 1)) run(s) that did not"
  [[ -z $why && $rc != 0 ]] && why="exit $rc"
  [[ -z $why && -n $expect ]] && ! grep -Eq "$expect" "$log" && why="no line matching '$expect'"
  [[ -z $why && -n $reject ]] && grep -Eq "$reject" "$log" && why="a line matching '$reject'"
  if [[ -n $why ]]; then
    echo "net_gdr_fake: $name: FAIL ($why; log $log)"
    fails=$((fails + 1))
  else
    echo "net_gdr_fake: $name: pass ($(grep -Ec 'GPUDirect RDMA, ' "$log") connections with GPUDirect RDMA)"
  fi
}
# With GPUDirect RDMA the fake moves the data with CUDA copies, which a NIC does not. Its copy stream may share
# one of CUDA's hardware queues with a stream that waits for a kernel (a call on another stream than the one
# before it waits for that one's kernels), and that kernel waits for the copy: with the default 8 queues the
# stream-order case of test_gpu_coll hung here (2 ranks, 60 s), with 32 it passes. Real NICs are not affected.
run ib-gdr "GPUDirect RDMA, [0-9]+ bytes of slots in GPU" "GPUDirect RDMA is off" COMM_NET=IB COMM_IB_FAKE=2:ib:gdr \
  CUDA_DEVICE_MAX_CONNECTIONS=32
run ib-nogdr "" "" COMM_NET=IB COMM_IB_FAKE=2:ib
# The plugin claims GPU memory but refuses every registration of it (:gdrfail): each side WARNs that
# GPUDirect RDMA is off and keeps its slots in pinned host memory, and everything still passes.
run ib-gdr-refused "GPUDirect RDMA is off: IB could not register GPU" "GPUDirect RDMA, [0-9]+ bytes of slots in GPU" \
  COMM_NET=IB COMM_IB_FAKE=2:ib:gdrfail
run socket "slots in pinned host memory \(the network plugin cannot reach GPU memory\)" "GPUDirect RDMA, " COMM_NET=Socket
plugin=$1/tests/libnccl-net-example.so
if [[ -f $plugin ]]; then
  run nccl-plugin "loaded NCCL net plugin" "GPUDirect RDMA, " COMM_NET_PLUGIN="$(cd "$(dirname "$plugin")" && pwd)/$(basename "$plugin")"
else
  echo "net_gdr_fake: nccl-plugin: SKIP (no $plugin)"
fi
exit $((fails > 0))
