#!/usr/bin/env bash
# nccl_plugin_check.sh MP_COLLS PLUGIN_V8 PLUGIN_V9 PLUGIN_V10 PLUGIN_V11 PLUGIN_V7 PLUGIN_V6 PLUGIN_V5
# NCCL network plugins in libcomm (transports/net/nccl/): runs mp_colls with COMM_NET_PLUGIN (or NCCL_NET_PLUGIN)
# naming the example plugins (transports/collnet/aggd/aggd_net.c built as ExampleTcp) and checks, from every
# rank's INFO log, that
#  - the adapter loaded the expected NCCL plugin version (its INFO line "loaded NCCL net plugin NAME
#    (ncclNetPlugin_vN)"), and the plugin's own log lines came through the adapter's logger;
#  - every connection went "via NET(ExampleTcp)" (each forked rank is its own host with -rph 1; ranks that
#    are threads of one process use COMM_SHM_DISABLE=1), none through SHM or the built-in socket network;
#  - all collectives passed (mp_colls checks every result against a host reference);
#  - a library exporting both ncclNetPlugin_v10 and _v8 is used as v10, one exporting v11 and v10 as v11
#    (newest first); v11 gets a context per communicator (init with its commId, listen/connect in it,
#    finalize at the end), three communicators of one process three contexts;
#  - a comma-separated list is tried in order (a missing library, then the v9 one);
#  - COMM_NET_PLUGIN=example finds libnccl-net-example.so on the library path; unset, NCCL's default
#    libnccl-net.so is found there; NCCL_NET_PLUGIN=none loads none (the built-in Socket network);
#  - a library exporting only ncclNetPlugin_v5 is refused with a WARN naming the version and libcomm falls
#    back to the built-in Socket network (with a WARN), collectives still passing.
# The runs after the first few take the allreduce cases only (-q -A): enough to carry every connection.
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
MP=${1:?usage: nccl_plugin_check.sh MP_COLLS PLUGIN_V8 PLUGIN_V9 PLUGIN_V10 PLUGIN_V11 PLUGIN_V7 PLUGIN_V6 PLUGIN_V5}
V8=${2:?plugin v8}
V9=${3:?plugin v9}
V10=${4:?plugin v10}
V11=${5:?plugin v11}
V7=${6:?plugin v7}
V6=${7:?plugin v6}
V5=${8:?plugin v5}
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/nccl_plugin_check.XXXXXX")
trap 'if [[ -n "${KEEP_LOGS:-}" ]]; then echo "nccl_plugin_check: logs kept in $LOGS"; else rm -rf "$LOGS"; fi' EXIT

fails=0
fail() { echo "nccl_plugin_check: FAIL: $*"; fails=$((fails + 1)); }

TAG=nccl_plugin_check
. "$(dirname "$0")/mp_log_lib.sh"
run() { mp_run "$@"; }

# check_adapter NAME VERSION: the adapter loaded ExampleTcp as ncclNetPlugin_vVERSION, and the plugin's
# own INFO line (through the adapter's logger) is there.
check_adapter() {
  local name=$1 ver=$2
  has "$name" -F "loaded NCCL net plugin ExampleTcp (ncclNetPlugin_v$ver)" ||
    fail "$name: no INFO line of the adapter loading ExampleTcp as ncclNetPlugin_v$ver"
  has "$name" -F "NET/ExampleTcp : example NCCL v$ver network plugin" ||
    fail "$name: the plugin's own INFO line did not come through the adapter's logger"
  if has "$name" "falling back"; then
    fail "$name: a fallback was logged:"
    logs "$name" | grep "falling back" | head -n 2
  fi
}

# 1. Version 8 (the plugin's reference shape): 3 processes, each its own host: every connection is NET.
if run v8.np3 "$V8" -- -np 3 -rph 1; then
  check_net v8.np3 ExampleTcp
  check_adapter v8.np3 8
fi

# 2. Version 8, 3 ranks as threads of one process (one plugin instance shared by three communicators).
if run v8.threads3 "$V8" COMM_SHM_DISABLE=1 -- -np 3 -t -q; then
  check_net v8.threads3 ExampleTcp
  check_adapter v8.threads3 8
fi

# 3. Version 9, the second of a list whose first library does not exist.
if run v9.np2 "$LOGS/missing/libnccl-net-missing.so,$V9" -- -np 2 -rph 1 -q; then
  check_net v9.np2 ExampleTcp
  check_adapter v9.np2 9
  has v9.np2 "COMM WARN NET : cannot load COMM_NET_PLUGIN=$LOGS/missing/libnccl-net-missing.so" ||
    fail "v9.np2: no WARN about the list's missing first library"
fi

# 4. Version 10, in a library that also exports a v8 table (named ExampleTcpV8): v10 must be the one used.
if run v10.np3 "$V10" -- -np 3 -rph 1 -q; then
  check_net v10.np3 ExampleTcp
  check_adapter v10.np3 10
fi

# check_contexts NAME SAME: v11's per-communicator contexts: the adapter asked for one per communicator (the
# plugin's first init, for the process, has commId 0), every context made was finalized, the first
# communicator's commId (the same on every rank) got SAME contexts, one per rank, and every listen and connect
# happened in a communicator's context (none in the process's).
check_contexts() {
  local name=$1 same=$2 asked made made0 ended first got
  asked=$(count "$name" -F "a context for communicator 0x")
  made=$(logs "$name" | grep -F "NET/ExampleTcp : v11 context for comm 0x" | grep -vc "finalized")
  ended=$(count "$name" -F " finalized (")
  made0=$(count "$name" -F "NET/ExampleTcp : v11 context for comm 0x0 (")
  first=$(logs "$name" | sed -n 's/.*a context for communicator \(0x[0-9a-f]*\) .*/\1/p' | head -n 1)
  got=$(count "$name" -F "NET/ExampleTcp : v11 context for comm $first (")
  echo "$TAG: $name: $asked communicator contexts asked for, $((made - made0)) made, $made0 process contexts," \
    "$ended finalized in all; communicator $first: $got contexts"
  [[ $asked -gt 0 && $((made - made0)) -eq $asked && $ended -eq $made ]] ||
    fail "$name: v11 contexts: $asked asked for, $((made - made0)) made (+ $made0), $ended finalized"
  [[ $got -eq $same ]] || fail "$name: communicator $first had $got v11 contexts, not $same"
  has "$name" -E "v11 context for comm 0x[1-9a-f][0-9a-f]* finalized .*: [1-9][0-9]* listen, [1-9][0-9]* connect calls" ||
    fail "$name: no communicator's context saw listen and connect calls"
  if has "$name" -E "v11 context for comm 0x0 finalized .*: ([1-9][0-9]* listen|[0-9]+ listen, [1-9])"; then
    fail "$name: listen or connect calls in the process's context, not a communicator's"
  fi
}

# 5. Version 11 (with a v10 table named ExampleTcpV10 beside it), named by NCCL_NET_PLUGIN: 3 ranks as threads of
# one process, each communicator with a context of its own.
if run v11.threads3 "" NCCL_NET_PLUGIN="$V11" COMM_SHM_DISABLE=1 -- -np 3 -t -q -A; then
  check_net v11.threads3 ExampleTcp
  check_adapter v11.threads3 11
  check_contexts v11.threads3 3
fi

# 6, 7. Versions 7 and 6 (int sizes; v6 without device handles nor offload properties).
for v in 7 6; do
  lib=V$v
  if run v$v.np2 "${!lib}" -- -np 2 -rph 1 -q -A; then
    check_net v$v.np2 ExampleTcp
    check_adapter v$v.np2 $v
  fi
done

# 8. Found by name: COMM_NET_PLUGIN=example -> libnccl-net-example.so on LD_LIBRARY_PATH.
if [[ $(basename "$V8") == libnccl-net-example.so ]]; then
  if run byname.np2 example LD_LIBRARY_PATH="$(dirname "$V8")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" -- -np 2 -rph 1 -q -A; then
    check_net byname.np2 ExampleTcp
    check_adapter byname.np2 8
  fi
else
  fail "the v8 plugin is not named libnccl-net-example.so: $V8"
fi

# 9. Neither variable set: NCCL's default libnccl-net.so, found on LD_LIBRARY_PATH (here the v11 library).
mkdir -p "$LOGS/lib"
ln -s "$V11" "$LOGS/lib/libnccl-net.so"
DEFLIB=LD_LIBRARY_PATH="$LOGS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if run default.np2 "" "$DEFLIB" -- -np 2 -rph 1 -q -A; then
  check_net default.np2 ExampleTcp
  check_adapter default.np2 11
  has default.np2 -F "(ncclNetPlugin_v11) from libnccl-net.so through the adapter" ||
    fail "default.np2: the adapter did not load libnccl-net.so"
  check_contexts default.np2 2
fi

# 10. NCCL_NET_PLUGIN=none: no library (not even the default one on the path), the built-in Socket network.
if run none.np2 "" NCCL_NET_PLUGIN=none "$DEFLIB" -- -np 2 -rph 1 -q -A; then
  check_net none.np2 Socket
  if has none.np2 "loaded NCCL net plugin"; then fail "none.np2: a plugin was loaded with NCCL_NET_PLUGIN=none"; fi
  if has none.np2 "COMM WARN NET"; then fail "none.np2: a NET WARN was logged"; fi
fi

# 11. Only ncclNetPlugin_v5: refused with a WARN, the built-in Socket network is used, collectives pass.
if run v5.np2 "$V5" -- -np 2 -rph 1 -q -A; then
  check_net v5.np2 Socket
  has v5.np2 "COMM WARN NET : .* unsupported version (it exports ncclNetPlugin_v5" ||
    fail "v5.np2: no WARN about the unsupported NCCL plugin version"
  has v5.np2 "COMM WARN NET : falling back to the built-in Socket network" ||
    fail "v5.np2: no WARN about the fallback to the Socket network"
  if has v5.np2 "loaded NCCL net plugin"; then fail "v5.np2: the adapter loaded a v5 plugin"; fi
fi

if [[ $fails -eq 0 ]]; then
  echo "nccl_plugin_check: PASS"
  exit 0
fi
echo "nccl_plugin_check: $fails failure(s) (KEEP_LOGS=1 keeps the logs)"
exit 1
