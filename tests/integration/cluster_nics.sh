#!/usr/bin/env bash
# cluster_nics.sh MP_COLLS: NIC choice from the discovered topology, across real (namespace) hosts.
# 2 hosts x 2 ranks, 2 NICs (veths on two rails) per host, and no COMM_SOCKET_IFNAME (netns_cluster.sh -a):
# each rank discovers its host, finds both NICs, and the library must
#  - place local rank i on NIC i (ranks sharing the CPU are spread over the equally near NICs),
#  - have the socket transport listen on that NIC for every connection it receives,
#  - enter each node on channel 1 through the second rank (ring "1 0 3 2"),
#  - tell the tuner 2 NICs per node,
# and mp_colls must pass (every collective checked against a host reference).
# Exit 0: pass; 1: fail (also a cluster that cannot be made on a machine that can make namespaces); 77: skipped
# for a named absence (netns_preflight.sh: not root, no iproute2, no ip netns).
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
MP=${1:?usage: cluster_nics.sh path/to/mp_colls}
HERE=$(cd "$(dirname "$0")" && pwd)
CLUSTER=$HERE/../../scripts/netns_cluster.sh
skip() { echo "cluster_nics: SKIP: $*"; exit 77; }
fail() { echo "cluster_nics: FAIL: $*"; exit 1; }
. "$HERE/netns_preflight.sh"
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/cluster_nics.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT

COMM_NCHANNELS=2 COMM_DEBUG=INFO COMM_DEBUG_SUBSYS=TOPO,INIT,NET,TUNE COMM_DEBUG_FILE="$LOGS/info.%p.log" \
  COMM_TIMEOUT_MS=60000 "$CLUSTER" -q -a -H 2 -R 2 -n 2 -l "$LOGS/out" -- "$MP" -q -w 150 > /dev/null 2> "$LOGS/cluster.err"
status=$?
# The capability is here (netns_preflight.sh): a cluster netns_cluster.sh could not make is a failure.
[[ $status -eq 77 ]] && { cat "$LOGS/cluster.err"; fail "netns_cluster.sh could not make the cluster on a machine that can make namespaces"; }
[[ $status -eq 0 ]] || { tail -n 5 "$LOGS"/out/rank*.log; fail "some rank failed"; }

# Logs of the first communicator (all 4 ranks) of each process: its pid's file, lines of "[rank]".
for r in 0 1 2 3; do
  li=$((r % 2))
  log=$(grep -l "topology: rank $r on host 0 .*node $((r / 2)), local rank $li of 2," "$LOGS"/info.*.log | head -n 1)
  [[ -n $log ]] || fail "no placement line for rank $r"
  grep -q "topology: rank $r on host 0 (.* 2 NIC(s)), node .* NIC NIC$li lh$((r / 2))n$li-" "$log" ||
    { grep "topology: rank $r on" "$log"; fail "rank $r is not on NIC$li of its 2 NICs"; }
  # Every receive of this rank's first communicator (its log up to the first "Init COMPLETE": the
  # communicator of all 4 ranks, made before any split) listens on its NIC.
  first=$(awk '{print} /Init COMPLETE/ {exit}' "$log")
  got=$(grep "COMM INFO NET : channel .* : rank $r receives from" <<< "$first" | grep -v "lh$((r / 2))n$li-" | head -n 1)
  [[ -z $got ]] || fail "rank $r received on another NIC: $got"
  grep -q "COMM INFO NET : channel .* : rank $r receives from .*(lh$((r / 2))n$li-" <<< "$first" ||
    fail "rank $r logged no receive on its NIC"
done
cat "$LOGS"/info.*.log > "$LOGS/all.log"
grep -q "Ring 01 : 1 0 3 2$" "$LOGS/all.log" || fail "channel 1 does not enter the nodes through their second rank"
grep -q "TUNER : 4 ranks, 2 nodes, at most 2 per node, 2 NIC(s)" "$LOGS/all.log" ||
  { grep "TUNER : 4 ranks" "$LOGS/all.log" | head -n 2; fail "the tuner does not count 2 NICs per node"; }
echo "cluster_nics: PASS (local rank i on NIC i, receives on it, rings enter by NIC, tuner sees 2 NICs)"
