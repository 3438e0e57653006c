#!/usr/bin/env bash
# collnet_check.sh main|versions MP_COLLS COLLNET_V11 COLLNET_V8 COLLNET_V9 COLLNET_V10
# ("main": every allreduce, allgather and reducescatter case over v11, a plugin without gather/scatter, a failing
# connect, collnet off; "versions": the v8, v9 and v10 tables, two ranks per host, nodes of different sizes,
# operations cut below a slot, and the CollNet found in NCCL's default libnccl-net.so)
# Collnet through NCCL's CollNet ABI (transports/collnet/, the adapter transports/collnet/nccl/collnet_nccl.c),
# end to end with the example plugin of tests/plugins/nccl_collnet_example.c (a TCP star that reduces at member
# 0, in member order), which also carries the example NCCL net plugin. mp_colls checks every collective against
# a host reference (exact values); each forked rank group is a host of its own (-rph). From every rank's INFO
# log it checks that:
#  - collnet is on (COLLNET : on) with the version of the plugin's table the library exports, newest first;
#  - allreduces, allgathers and reducescatters ran the CollNet algorithm (COMM_ALGO=collnet forces it) and
#    passed, with 1 and 2 ranks per host, also with operations cut below a slot (NCCL_EXAMPLE_COLLNET_MAX_BYTES);
#  - without the plugin's gather/scatter (NCCL_EXAMPLE_COLLNET_NO_GATHER), or with nodes of different sizes,
#    allgather and reducescatter run another algorithm, with a WARN that says why; allreduce still collnet;
#  - types the plugin refuses (float8) ran CollTree with a WARN that says why;
#  - a member whose connect fails turns collnet off on every rank with a WARN naming it; collectives pass;
#  - without COMM_COLLNET_ENABLE collnet is off and says so; COMM_ALGO=collnet then WARNs.
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
PART=${1:?usage: collnet_check.sh main|versions MP_COLLS COLLNET_V11 COLLNET_V8 COLLNET_V9 COLLNET_V10}
MP=${2:?mp_colls}
V11=${3:?plugin v11}
V8=${4:?plugin v8}
V9=${5:?plugin v9}
V10=${6:?plugin v10}
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/collnet_check.XXXXXX")
trap 'if [[ -n "${KEEP_LOGS:-}" ]]; then echo "collnet_check: logs kept in $LOGS"; else rm -rf "$LOGS"; fi' EXIT

fails=0
fail() { echo "collnet_check: FAIL: $*"; fails=$((fails + 1)); }

TAG=collnet_check
. "$(dirname "$0")/mp_log_lib.sh"
run() { mp_run "$@"; }

# check_on NAME VERSION RANKS [FUNCS]: collnet on at every rank of every communicator spanning nodes (mp_colls
# makes several: the world and its splits), never off; the plugin's table version; plans of each of FUNCS
# (default AllReduce) over CollNet.
check_on() {
  local name=$1 ver=$2 ranks=$3 funcs=${4:-AllReduce}
  local on
  on=$(count "$name" -F "COLLNET : on:")
  [[ $on -ge $ranks ]] || fail "$name: collnet on at $on rank communicators, fewer than the $ranks ranks"
  if has "$name" -F "COLLNET : off on every rank"; then
    fail "$name: collnet went off:"
    logs "$name" | grep -F "COLLNET : off on every rank" | head -n 2
  fi
  has "$name" -F "(ncclCollNetPlugin_v$ver)" || fail "$name: the adapter did not load ncclCollNetPlugin_v$ver"
  local algo f
  for f in $funcs; do
    algo=$(count "$name" -E "$f: .* algo CollNet ")
    echo "collnet_check: $name: collnet on in $on rank communicators, $algo $f plans over CollNet"
    [[ $algo -gt 0 ]] || fail "$name: no $f ran the CollNet algorithm"
  done
}

F=COMM_COLLNET_ENABLE=1
A=COMM_ALGO=allreduce:collnet
C="COMM_ALGO=allreduce:collnet;allgather:collnet;reducescatter:collnet"
ALL="AllReduce AllGather ReduceScatter"
if [[ $PART == main ]]; then
  # 1. the v11 table: every allreduce, allgather and reducescatter case (-C: every type, op, count, in place or
  #    not), one rank per host.
  if run v11 "$V11" $F "$C" -- -np 4 -rph 1 -C -q; then
    check_on v11 11 4 "$ALL"
    has v11 -E "WARN.*collnet cannot run AllReduce of float8e4m3 with (sum|prod|max|min): the network does not" ||
      fail "v11: no WARN for float8, which the plugin refuses"
    has v11 -E "WARN.*collnet cannot run ReduceScatter of float8e4m3 with .*: the ring instead" ||
      fail "v11: no WARN for float8 reducescatter, which the plugin refuses"
  fi
  # 1b. the plugin offers no gather/scatter: allgather and reducescatter elsewhere, said in a WARN; allreduce
  #     still over collnet.
  if run nogather "$V11" $F "$C" NCCL_EXAMPLE_COLLNET_NO_GATHER=1 -- -np 2 -rph 1 -C -q; then
    check_on nogather 11 2
    has nogather -E "WARN.*collnet cannot run AllGather \(the collnet plugin offers no network allgather" ||
      fail "nogather: no WARN that allgather cannot run over collnet"
    has nogather -E "(AllGather|ReduceScatter): .* algo CollNet " && fail "nogather: a gather/scatter ran CollNet"
  fi
  # 2. a member that cannot connect: off on every rank, named, collectives still right.
  if run failconnect "$V11" $F $A NCCL_EXAMPLE_COLLNET_FAIL_CONNECT_RANK=1 NCCL_EXAMPLE_COLLNET_TIMEOUT_MS=3000 -- \
    -np 3 -rph 1 -A -q; then
    n=$(count failconnect -E "WARN.*COLLNET : off on every rank .*rank [0-9]+ could not take part")
    [[ $n -ge 3 ]] || fail "failconnect: $n rank communicators said collnet is off and who could not take part"
    has failconnect -F "COLLNET : on:" && fail "failconnect: collnet on somewhere"
  fi
  # 3. not enabled: off, says why; COMM_ALGO=collnet WARNs and runs CollTree.
  if run off "$V11" $A -- -np 2 -rph 1 -A -q; then
    has off -F "COLLNET : off: COMM_COLLNET_ENABLE" || fail "off: no INFO line saying collnet is off and why"
    has off -E "WARN.*COMM_ALGO asks for collnet, but collnet cannot run AllReduce \(COMM_COLLNET_ENABLE" ||
      fail "off: COMM_ALGO=collnet did not WARN"
    has off -E "algo CollNet " && fail "off: an allreduce ran CollNet"
  fi
else
  # 4. two ranks per host; operations cut at 16 KiB (several per slot); the older tables.
  # two ranks per host: the chains inside a node, and the positions of every node paired.
  if run v11_2ph "$V11" $F "$C" -- -np 4 -rph 2 -C -q; then check_on v11_2ph 11 4 "$ALL"; fi
  # nodes of different sizes: allgather and reducescatter elsewhere, said in a WARN; allreduce over collnet.
  if run uneven "$V11" $F "$C" -- -np 3 -rph 2 -C -q; then
    check_on uneven 11 3
    has uneven -E "WARN.*collnet cannot run ReduceScatter \(its allgather and reducescatter need nodes of one" ||
      fail "uneven: no WARN that reducescatter needs nodes of one size"
    has uneven -E "(AllGather|ReduceScatter): .* algo CollNet " && fail "uneven: a gather/scatter ran CollNet"
  fi
  if run v11_cut "$V11" $F "$C" NCCL_EXAMPLE_COLLNET_MAX_BYTES=16384 -- -np 3 -rph 1 -C -q; then
    check_on v11_cut 11 3 "$ALL"
  fi
  # NCCL's default: no COMM_NET_PLUGIN, the CollNet found in libnccl-net.so on the library path (SHARP's home).
  mkdir -p "$LOGS/default-lib" && ln -sf "$V11" "$LOGS/default-lib/libnccl-net.so"
  if run default "" $F $A LD_LIBRARY_PATH="$LOGS/default-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" -- -np 2 -rph 1 -A -q
  then
    check_on default 11 2
    has default -F "the default NCCL network plugin libnccl-net.so" || fail "default: collnet not from libnccl-net.so"
  fi
  for v in 8 9 10; do
    lib=V$v
    if run "v$v" "${!lib}" $F "$C" -- -np 2 -rph 1 -C -q; then check_on "v$v" "$v" 2 "$ALL"; fi
  done
fi

if [[ $fails -ne 0 ]]; then
  echo "collnet_check: $fails failure(s); logs in $LOGS"
  KEEP_LOGS=1
  exit 1
fi
echo "collnet_check: PASS"
