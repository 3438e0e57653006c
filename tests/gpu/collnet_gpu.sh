#!/usr/bin/env bash
# collnet_gpu.sh BUILD: device buffers through collnet (issue 20), on a GPU machine. test_gpu_coll -q -p 4 -H
# (4 processes on GPU 0, each a host of its own; every collective, type and op checked against the host
# executor, graph replays included) with collnet forced for allreduce, allgather and reducescatter, first over the
# example NCCL CollNet plugin
# (tests/plugins/nccl_collnet_example.c), then over two comm_aggd servers on loopback. Every run must pass, and
# the INFO logs must show collnet on for device buffers and device allreduce, allgather and reducescatter plans
# over CollNet.
# Exit: 0 pass; 1 fail; 77 (skip) without a CUDA device.
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
B=${1:?usage: collnet_gpu.sh BUILD}
B=$(cd "$B" && pwd)
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/collnet_gpu.XXXXXX")
fails=0
fail() { echo "collnet_gpu: FAIL: $*"; fails=$((fails + 1)); }
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done' EXIT

# run NAME VAR=VALUE...: test_gpu_coll with collnet forced, logs in $LOGS/NAME.*.
run() {
  local name=$1
  shift
  env "$@" COMM_COLLNET_ENABLE=1 COMM_ALGO="allreduce:collnet;allgather:collnet;reducescatter:collnet" COMM_DEBUG=INFO COMM_DEBUG_SUBSYS=INIT,COLLNET,TUNE,COLL \
    COMM_DEBUG_FILE="$LOGS/$name.%p.log" COMM_TIMEOUT_MS=60000 "$B/tests/test_gpu_coll" -q -p 4 -H >"$LOGS/$name.out" 2>&1
  local rc=$?
  [[ $rc -eq 77 ]] && { echo "collnet_gpu: SKIP: $(tail -n 1 "$LOGS/$name.out")"; exit 77; }
  if [[ $rc -ne 0 ]]; then
    fail "$name: test_gpu_coll exited with $rc:"
    tail -n 15 "$LOGS/$name.out"
    return
  fi
  local on plans f
  on=$(cat "$LOGS/$name".*.log | grep -c "COLLNET : on: .*device buffers too")
  [[ $on -ge 4 ]] || fail "$name: collnet for device buffers on in $on rank communicators, fewer than 4"
  for f in AllReduce AllGather ReduceScatter; do
    plans=$(cat "$LOGS/$name".*.log | grep -cE "$f: .* algo CollNet .*\(device buffers\)")
    echo "collnet_gpu: $name: passed; collnet on for device buffers in $on rank communicators, $plans device $f plans over CollNet"
    [[ $plans -gt 0 ]] || fail "$name: no device $f ran over CollNet"
  done
}

run example COMM_NET_PLUGIN="$B/tests/libnccl-collnet-example.so"

list=""
for k in 0 1; do
  "$B/tools/aggd/comm_aggd" --listen 127.0.0.1:0 >"$LOGS/aggd$k.out" 2>&1 &
  PIDS+=($!)
  for ((t = 0; t < 100; t++)); do grep -q listening "$LOGS/aggd$k.out" && break; sleep 0.05; done
  a=$(grep -oE "127\.0\.0\.1:[0-9]+" "$LOGS/aggd$k.out" | head -n 1)
  [[ -n $a ]] || { fail "comm_aggd $k did not start: $(cat "$LOGS/aggd$k.out")"; break; }
  list+="${list:+,}$a"
done
[[ -n $list ]] && run aggd COMM_AGGD="$list" COMM_AGGD_PLUGIN="$B/libcomm-collnet-aggd.so"

if [[ $fails -ne 0 ]]; then
  echo "collnet_gpu: $fails failure(s); logs in $LOGS"
  exit 1
fi
rm -rf "$LOGS"
echo "collnet_gpu: PASS"
