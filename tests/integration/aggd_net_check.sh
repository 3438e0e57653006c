#!/usr/bin/env bash
# aggd_net_check.sh MP_COLLS COMM_AGGD LIBCOMM_COLLNET_AGGD
# libcomm-collnet-aggd.so as NVIDIA's NCCL would load it (NCCL_NET_PLUGIN: a network and a CollNet from one
# library), through libcomm's NCCL adapters instead:
#  1. the library exports exactly ncclNetPlugin_v10, _v9, _v8 and ncclCollNetPlugin_v11, _v10, _v9, _v8 (nm -D);
#  2. mp_colls (every collective, checked against a host reference), 3 forked ranks each its own host (-rph 1),
#     COMM_NET_PLUGIN=the library: the adapter loads AggdTcp as ncclNetPlugin_v10, the plugin's own INFO line
#     comes through, every connection goes via NET(AggdTcp), no fallback; NCCL_SOCKET_IFNAME==lo makes lo its
#     one device;
#  3. the network and the CollNet of the library together (COMM_AGGD: one comm_aggd on 127.0.0.1,
#     COMM_COLLNET_ENABLE=1, COMM_ALGO=allreduce:collnet), 4 hosts of one rank: every connection via
#     NET(AggdTcp), collnet on, allreduces over CollNet, all passing;
#  4. NCCL_SOCKET_IFNAME naming no interface: the plugin WARNs, libcomm falls back to its Socket network (WARN;
#     COMM_SOCKET_IFNAME=lo keeps libcomm's own interface, as libcomm reads NCCL_SOCKET_IFNAME too).
# KEEP_LOGS=1 keeps the logs. SPDX-License-Identifier: Apache-2.0
set -uo pipefail
MP=${1:?usage: aggd_net_check.sh MP_COLLS COMM_AGGD LIBCOMM_COLLNET_AGGD}
AGGD=${2:?comm_aggd}
LIB=${3:?libcomm-collnet-aggd.so}
LIB=$(realpath "$LIB") # a path, not a name for the loader to look up
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/aggd_net_check.XXXXXX")
DPID=""
cleanup() {
  if [[ -n $DPID ]] && kill "$DPID" 2>/dev/null; then wait "$DPID" 2>/dev/null; fi
  if [[ -n "${KEEP_LOGS:-}" ]]; then echo "aggd_net_check: logs kept in $LOGS"; else rm -rf "$LOGS"; fi
}
trap cleanup EXIT

fails=0
fail() { echo "aggd_net_check: FAIL: $*"; fails=$((fails + 1)); }

# 1. The exported symbols.
want="ncclCollNetPlugin_v10 ncclCollNetPlugin_v11 ncclCollNetPlugin_v8 ncclCollNetPlugin_v9 ncclNetPlugin_v10 \
ncclNetPlugin_v8 ncclNetPlugin_v9"
if command -v nm >/dev/null; then
  got=$(nm -D --defined-only "$LIB" | awk '$2 ~ /^[A-Za-z]$/ && $3 !~ /^_/ {print $3}' | sort | tr '\n' ' ')
  [[ "${got% }" == "$want" ]] || fail "exported symbols: '${got% }', expected '$want'"
  echo "aggd_net_check: exports $want"
else
  echo "aggd_net_check: nm not found: the exported symbols are checked by test_aggd_net only"
fi

TAG=aggd_net_check
. "$(dirname "$0")/mp_log_lib.sh"
# run NAME [VAR=VALUE...] -- MP_COLLS ARGS: mp_colls with the library as the network plugin.
run() {
  local name=$1
  shift
  mp_run "$name" "$LIB" "$@"
}
check_adapter() {
  local name=$1
  has "$name" -F "loaded NCCL net plugin AggdTcp (ncclNetPlugin_v10)" ||
    fail "$name: no INFO line of the adapter loading AggdTcp as ncclNetPlugin_v10"
  has "$name" -F "NET/AggdTcp : TCP network (ncclNetPlugin_v10)" ||
    fail "$name: the plugin's own INFO line did not come through the adapter's logger"
  if has "$name" "falling back"; then
    fail "$name: a fallback was logged:"
    logs "$name" | grep "falling back" | head -n 2
  fi
}

# 2. The network alone, on its default interfaces (every collective), then on lo only (-A: the allreduce cases:
# what they check is the interface, not the collectives; also below, to keep the test short).
if run net.np3 -- -np 3 -rph 1 -q; then
  check_net net.np3 AggdTcp
  check_adapter net.np3
fi
if run net.lo.np2 NCCL_SOCKET_IFNAME==lo -- -np 2 -rph 1 -q -A; then
  check_net net.lo.np2 AggdTcp
  check_adapter net.lo.np2
  has net.lo.np2 -E "NET/AggdTcp : TCP network \(ncclNetPlugin_v10\), 1 device\(s\): 0 lo 127\." ||
    fail "net.lo.np2: NCCL_SOCKET_IFNAME==lo did not make lo the one device"
fi

# 3. Network and CollNet of the library together, over one comm_aggd.
"$AGGD" --listen 127.0.0.1:0 >"$LOGS/aggd.out" 2>"$LOGS/aggd.err" &
DPID=$!
addr=""
for ((t = 0; t < 200; t++)); do # up to 10 s for its "listening" line
  addr=$(sed -n 's/^comm_aggd listening on \(.*\)$/\1/p' "$LOGS/aggd.out")
  [[ -n $addr ]] || ! kill -0 "$DPID" 2>/dev/null && break
  sleep 0.05
done
if [[ -z $addr ]]; then
  fail "comm_aggd did not say where it listens:"
  cat "$LOGS/aggd.err"
elif run collnet.np4 COMM_AGGD="$addr" COMM_AGGD_PLUGIN="$LIB" COMM_COLLNET_ENABLE=1 COMM_ALGO=allreduce:collnet \
  NCCL_SOCKET_IFNAME==lo -- -np 4 -rph 1 -q -A; then
  check_net collnet.np4 AggdTcp
  check_adapter collnet.np4
  on=$(count collnet.np4 -F "COLLNET : on:")
  algo=$(count collnet.np4 -E "AllReduce: .* algo CollNet ")
  echo "aggd_net_check: collnet.np4: collnet on in $on rank communicators, $algo allreduce plans over CollNet"
  [[ $on -ge 4 ]] || fail "collnet.np4: collnet on in $on rank communicators, fewer than the 4 ranks"
  [[ $algo -gt 0 ]] || fail "collnet.np4: no allreduce ran over CollNet"
  if has collnet.np4 -F "COLLNET : off on every rank"; then fail "collnet.np4: collnet went off"; fi
fi

# 4. No interface matches: the plugin says so and libcomm runs on its Socket network. (libcomm reads
# NCCL_SOCKET_IFNAME too, for COMM_SOCKET_IFNAME: COMM_SOCKET_IFNAME=lo, which wins, keeps it an interface.)
if run noif.np2 NCCL_SOCKET_IFNAME=nosuchif0 COMM_SOCKET_IFNAME=lo -- -np 2 -rph 1 -q -A; then
  check_net noif.np2 Socket
  has noif.np2 -F "NCCL_SOCKET_IFNAME=nosuchif0: no IPv4 interface that is up matches" ||
    fail "noif.np2: no WARN of the plugin about NCCL_SOCKET_IFNAME"
  has noif.np2 "COMM WARN NET : falling back to the built-in Socket network" || fail "noif.np2: no fallback WARN"
fi

if [[ $fails -eq 0 ]]; then
  echo "aggd_net_check: PASS"
  exit 0
fi
echo "aggd_net_check: $fails failure(s) (KEEP_LOGS=1 keeps the logs)"
exit 1
