#!/usr/bin/env bash
# env_launch.sh MP_COLLS: ranks started the way launchers start them, on this host: COMM_ROOT=host:port,
# COMM_RANK, COMM_NRANKS and an all-zero unique id (rank 0 hosts the rendezvous). Then the root's secret:
# a rank whose COMM_ROOT_SECRET differs must be turned away, and both sides must fail (not hang).
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail

MP=${1:?usage: env_launch.sh path/to/mp_colls}
fail() { echo "env_launch: FAIL: $*"; exit 1; }
[[ -x "$MP" ]] || fail "$MP is not an executable"
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/env_launch.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$LOGS"
}
trap cleanup EXIT
unset COMM_RANK COMM_NRANKS COMM_ROOT COMM_ROOT_SECRET
# Below Linux's ephemeral range (32768-60999), where any test's outgoing connection could hold the port.
PORT=$((21000 + $$ % 11000))

# 1. Three ranks from the environment.
NRANKS=3
for rank in $(seq 0 $((NRANKS - 1))); do
  COMM_ROOT="127.0.0.1:$PORT" COMM_RANK=$rank COMM_NRANKS=$NRANKS COMM_TIMEOUT_MS=60000 \
    "$MP" -q -w 200 >"$LOGS/rank$rank.log" 2>&1 &
  PIDS+=($!)
done
status=0
for rank in $(seq 0 $((NRANKS - 1))); do
  if ! wait "${PIDS[$rank]}"; then
    echo "env_launch: rank $rank failed; the end of its log:"
    tail -n 20 "$LOGS/rank$rank.log"
    status=1
  fi
done
PIDS=()
[[ $status -eq 0 ]] || fail "ranks launched from the environment failed"
for rank in $(seq 0 $((NRANKS - 1))); do
  grep -q "mp_colls: rank $rank: PASS" "$LOGS/rank$rank.log" || fail "rank $rank did not report PASS"
done
echo "env_launch: $NRANKS ranks from COMM_ROOT/COMM_RANK/COMM_NRANKS passed"

# 2. Rank 1 presents another secret: the root drops it; both ranks fail within a few timeouts.
PORT2=$((PORT + 1))
start=$SECONDS
COMM_ROOT="127.0.0.1:$PORT2" COMM_ROOT_SECRET=alpha COMM_RANK=0 COMM_NRANKS=2 COMM_TIMEOUT_MS=3000 \
  "$MP" -q -w 60 >"$LOGS/secret0.log" 2>&1 &
PIDS+=($!)
COMM_ROOT="127.0.0.1:$PORT2" COMM_ROOT_SECRET=beta COMM_RANK=1 COMM_NRANKS=2 COMM_TIMEOUT_MS=3000 \
  "$MP" -q -w 60 >"$LOGS/secret1.log" 2>&1 &
PIDS+=($!)
wait "${PIDS[0]}"; rc0=$?
wait "${PIDS[1]}"; rc1=$?
PIDS=()
elapsed=$((SECONDS - start))
echo "env_launch: mismatched secrets: rank 0 exited $rc0, rank 1 exited $rc1 after ${elapsed} s"
grep -h "COMM WARN" "$LOGS"/secret*.log | head -n 4
[[ $rc0 -ne 0 && $rc1 -ne 0 ]] || fail "a rank with the wrong COMM_ROOT_SECRET was let in"
[[ $rc0 -ne 124 && $rc1 -ne 124 ]] || fail "a rank hung until the watchdog instead of failing"
[[ $elapsed -lt 30 ]] || fail "failing took ${elapsed} s with COMM_TIMEOUT_MS=3000"
grep -q "wrong secret" "$LOGS/secret0.log" || fail "the root did not say why it dropped the connection"
echo "env_launch: PASS"
