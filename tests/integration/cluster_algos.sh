#!/usr/bin/env bash
# cluster_algos.sh MP_COLLS: the algorithms across real (namespace) hosts. For each algorithm, a cluster
# of 2 hosts x 2 ranks with 2 NICs per host (scripts/netns_cluster.sh) runs mp_colls -q with COMM_ALGO
# forcing it; every rank must pass (results checked against a host reference) and its INFO log must show
# the algorithm ran for the collectives it implements.
# Exit 0: pass; 1: fail (any algorithm's; also a cluster that cannot be made on a machine that can make
# namespaces); 77: skipped, before anything ran, for a named absence (netns_preflight.sh: not root, no iproute2,
# no ip netns).
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
MP=${1:?usage: cluster_algos.sh path/to/mp_colls}
HERE=$(cd "$(dirname "$0")" && pwd)
CLUSTER=$HERE/../../scripts/netns_cluster.sh
skip() { echo "cluster_algos: SKIP: $*"; exit 77; }
. "$HERE/netns_preflight.sh"
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/cluster_algos.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT

declare -A colls=([colltree]="AllReduce Broadcast Reduce" [tree]="AllReduce Broadcast Reduce"
                  [pat]="AllGather ReduceScatter" [ring]="AllReduce AllGather ReduceScatter")
declare -A names=([colltree]=CollTree [tree]=Tree [pat]=PAT [ring]=Ring)
fail=0
for algo in colltree tree pat ring; do
  mkdir -p "$LOGS/$algo"
  COMM_ALGO=$algo COMM_DEBUG=INFO COMM_DEBUG_SUBSYS=TUNE COMM_DEBUG_FILE="$LOGS/$algo/info.%p.log" \
    COMM_TIMEOUT_MS=60000 "$CLUSTER" -q -H 2 -R 2 -n 2 -l "$LOGS/$algo/out" -- "$MP" -q > /dev/null 2> "$LOGS/$algo/cluster.err"
  status=$?
  # The capability is here (netns_preflight.sh): a cluster netns_cluster.sh could not make is a failure of this
  # algorithm's run, never a skip of the whole test (which would also hide the failures before it).
  if [[ $status -eq 77 ]]; then
    echo "cluster_algos: FAIL: $algo: netns_cluster.sh could not make the cluster on a machine that can make namespaces:"
    cat "$LOGS/$algo/cluster.err"
    fail=1
    continue
  fi
  if [[ $status -ne 0 ]]; then
    echo "cluster_algos: FAIL: $algo: some rank failed:"
    tail -n 5 "$LOGS/$algo"/out/rank*.log
    fail=1
    continue
  fi
  for r in 0 1 2 3; do
    grep -q "mp_colls: rank $r: PASS" "$LOGS/$algo/out/rank$r.log" || { echo "cluster_algos: FAIL: $algo: rank $r did not pass"; fail=1; }
  done
  for c in ${colls[$algo]}; do
    total=$(cat "$LOGS/$algo"/info.*.log | grep -c " $c: opCount .* - algo ")
    good=$(cat "$LOGS/$algo"/info.*.log | grep -c " $c: opCount .* - algo ${names[$algo]} proto ")
    if [[ $total -eq 0 || $good -ne $total ]]; then
      echo "cluster_algos: FAIL: $algo: $c ran ${names[$algo]} in $good of $total calls"
      fail=1
    fi
  done
  echo "cluster_algos: $algo: 2 hosts x 2 ranks passed"
done
if [[ $fail -eq 0 ]]; then echo "cluster_algos: PASS"; else echo "cluster_algos: FAIL"; fi
exit $fail
