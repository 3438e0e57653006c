#!/usr/bin/env bash
# cluster_collnet.sh COLLNET_CLUSTER COMM_AGGD: collnet over the software aggregation service on a namespace
# cluster (issue 20): 4 hosts x 2 ranks and 2 comm_aggd servers (scripts/netns_cluster.sh -D 2), every rank
# running tests/integration/collnet_cluster.c with collnet forced for allreduce, allgather and reducescatter.
#  1. check: every type and op through collnet, integers bit for bit against CollTree (allgather, reducescatter:
#     the ring), floats against a float64 reference and identical on every rank, two communicators over the
#     servers at once, while a stranger sends garbage to a server (refused; the job unaffected);
#  2. a server killed during an operation: every rank ends with an error (none hangs), within the timeout;
#  3. a rank killed during an operation (a leader, rank 4: the servers fail its group; a local child, rank 5: its
#     leader finds it gone): every other rank ends with an error, within the timeout;
#  4. the servers unreachable before init: collnet off on every rank with a WARN, the job runs CollTree.
# Exit 0: pass; 1: fail; 77: skipped (netns_preflight.sh: not root, no iproute2 or ip netns).
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
PROG=${1:?usage: cluster_collnet.sh COLLNET_CLUSTER COMM_AGGD}
AGGD=${2:?comm_aggd}
HERE=$(cd "$(dirname "$0")" && pwd)
CLUSTER=$HERE/../../scripts/netns_cluster.sh
skip() { echo "cluster_collnet: SKIP: $*"; exit 77; }
. "$HERE/netns_preflight.sh"
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/cluster_collnet.XXXXXX")
trap 'if [[ -n "${KEEP_LOGS:-}" ]]; then echo "cluster_collnet: logs in $LOGS"; else rm -rf "$LOGS"; fi' EXIT
fails=0
fail() { echo "cluster_collnet: FAIL: $*"; fails=$((fails + 1)); }
export COMM_AGGD_BIN=$AGGD COMM_COLLNET_ENABLE=1 COMM_ALGO="allreduce:collnet;allgather:collnet;reducescatter:collnet" COMM_DEBUG=INFO \
  COMM_DEBUG_SUBSYS=INIT,COLLNET,TUNE COMM_TIMEOUT_MS=20000 COMM_AGGD_TIMEOUT_MS=8000

# cluster NAME [netns_cluster options] -- ARGS: the cluster in the background, logs in $LOGS/NAME.
cluster() {
  local name=$1
  shift
  mkdir -p "$LOGS/$name"
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  COMM_DEBUG_FILE="$LOGS/$name/info.%p.log" "$CLUSTER" -q -H 4 -R 2 "${opts[@]}" -l "$LOGS/$name/out" -- "$PROG" "$@" \
    >/dev/null 2>"$LOGS/$name/cluster.err" &
  CPID=$!
}
# waitFor FILE_GLOB PATTERN COUNT SECONDS: until COUNT files matching the glob hold PATTERN.
waitFor() {
  local glob=$1 pat=$2 want=$3 secs=$4 t
  for ((t = 0; t < secs * 20; t++)); do
    [[ $(grep -l "$pat" $glob 2>/dev/null | wc -l) -ge $want ]] && return 0
    sleep 0.05
  done
  return 1
}
ranksSay() { grep -l "$2" "$LOGS/$1"/out/rank*.log 2>/dev/null | wc -l; }
infoHas() { cat "$LOGS/$1"/info.*.log 2>/dev/null | grep -c "$2"; }

# 1. correctness, two communicators at once, a stranger.
cluster check -D 2 -- check
if waitFor "$LOGS/check/out/aggd0.log" listening 1 20; then
  addr=$(grep -oE "10\.240\.0\.[0-9]+:[0-9]+" "$LOGS/check/out/aggd0.log" | head -n 1)
  ns=$(ip netns list | grep -oE "^lch0-[0-9]+" | head -n 1)
  if [[ -n $addr && -n $ns ]]; then
    ip netns exec "$ns" timeout 5 bash -c "exec 3<>/dev/tcp/${addr%:*}/${addr#*:} && head -c 4096 /dev/urandom >&3" \
      2>/dev/null
  fi
fi
wait $CPID
status=$?
[[ $status -eq 77 ]] && skip "netns_cluster.sh: $(cat "$LOGS/check/cluster.err")"
if [[ $status -ne 0 || $(ranksSay check "PASS") -ne 8 ]]; then
  fail "check: exit $status, $(ranksSay check PASS) of 8 ranks passed:"
  grep -h "FAIL" "$LOGS/check"/out/rank*.log | head -n 5
  tail -n 5 "$LOGS/check/cluster.err"
fi
on=$(infoHas check "COLLNET : on:")
[[ $on -ge 8 ]] || fail "check: collnet on in $on rank communicators, fewer than 8"
for f in AllReduce AllGather ReduceScatter; do
  [[ $(infoHas check "$f: .* algo CollNet") -gt 0 ]] || fail "check: no $f ran over CollNet"
done
grep -qiE "refus|drop" "$LOGS/check/out/aggd0.log" || fail "check: the server did not log the stranger it refused"

# 2. a server killed during an operation, 3. a rank killed during an operation.
for what in server rank4 rank5; do
  args=(loop)
  [[ $what == rank* ]] && args=(loop "${what#rank}")
  cluster "$what" -D 2 -- "${args[@]}"
  if waitFor "$LOGS/$what/out/rank*.log" "loop started" 7 60; then
    [[ $what == server ]] && kill -KILL "$(cat "$LOGS/$what/out/aggd1.pid")"
  else
    fail "$what: the ranks did not start their loop"
  fi
  t0=$(date +%s)
  wait $CPID
  secs=$(($(date +%s) - t0))
  want=8
  [[ $what == rank* ]] && want=7
  got=$(ranksSay "$what" "error after")
  echo "cluster_collnet: $what killed: $got of $want ranks ended with an error, all within ${secs} s"
  [[ $got -ge $want ]] || { fail "$what: only $got of $want ranks ended with an error"; tail -n 3 "$LOGS/$what"/out/rank*.log; }
  [[ $secs -le 60 ]] || fail "$what: the ranks took $secs s to end (timeouts 20 s)"
  # a leader gone: the servers name it by member index, the lane's WARN maps the indices to ranks
  if [[ $what == rank4 && $(infoHas rank4 "group of channel [0-9]* (members 0, 1, ... are ranks [0-9,]*) failed") -eq 0 ]]; then
    fail "rank4: no WARN of a failed collnet group naming its members' ranks"
  fi
done

# 4. servers unreachable before init: collnet off everywhere, named, the job correct over CollTree.
mkdir -p "$LOGS/unreachable"
COMM_AGGD=10.240.0.250:9 COMM_DEBUG_FILE="$LOGS/unreachable/info.%p.log" COMM_AGGD_TIMEOUT_MS=2000 \
  "$CLUSTER" -q -H 4 -R 2 -l "$LOGS/unreachable/out" -- "$PROG" check >/dev/null 2>"$LOGS/unreachable/cluster.err"
status=$?
[[ $status -eq 0 && $(ranksSay unreachable PASS) -eq 8 ]] || fail "unreachable: exit $status, $(ranksSay unreachable PASS) of 8 passed"
off=$(infoHas unreachable "COLLNET : off on every rank")
[[ $off -ge 8 ]] || fail "unreachable: $off rank communicators said collnet is off, fewer than 8"
[[ $(infoHas unreachable "algo CollNet") -eq 0 ]] || fail "unreachable: an allreduce ran over CollNet"

if [[ $fails -ne 0 ]]; then
  KEEP_LOGS=1
  exit 1
fi
echo "cluster_collnet: PASS"
