#!/usr/bin/env bash
# nccl_plugin_check.sh MP_COLLS PLUGIN_V8 PLUGIN_V9 PLUGIN_V10 PLUGIN_V7
# NCCL network plugins in libcomm (transports/net/nccl/net_nccl.c): runs mp_colls with COMM_NET_PLUGIN naming the
# example plugins (transports/collnet/aggd/aggd_net.c built as ExampleTcp) and checks, from every rank's INFO log,
# that
#  - the adapter loaded the expected NCCL plugin version (its INFO line "loaded NCCL net plugin NAME
#    (ncclNetPlugin_vN)"), and the plugin's own log lines came through the adapter's logger;
#  - every connection went "via NET(ExampleTcp)" (each forked rank is its own host with -rph 1; ranks that
#    are threads of one process use COMM_SHM_DISABLE=1), none through SHM or the built-in socket network;
#  - all collectives passed (mp_colls checks every result against a host reference);
#  - a library exporting both ncclNetPlugin_v10 and _v8 is used as v10 (newest first);
#  - COMM_NET_PLUGIN=example finds libnccl-net-example.so on the library path;
#  - a library exporting only ncclNetPlugin_v7 is refused with a WARN naming the version and libcomm falls
#    back to the built-in Socket network (with a WARN), collectives still passing.
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
MP=${1:?usage: nccl_plugin_check.sh MP_COLLS PLUGIN_V8 PLUGIN_V9 PLUGIN_V10 PLUGIN_V7}
V8=${2:?plugin v8}
V9=${3:?plugin v9}
V10=${4:?plugin v10}
V7=${5:?plugin v7}
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

# 3. Version 9.
if run v9.np2 "$V9" -- -np 2 -rph 1 -q; then
  check_net v9.np2 ExampleTcp
  check_adapter v9.np2 9
fi

# 4. Version 10, in a library that also exports a v8 table (named ExampleTcpV8): v10 must be the one used.
if run v10.np3 "$V10" -- -np 3 -rph 1 -q; then
  check_net v10.np3 ExampleTcp
  check_adapter v10.np3 10
fi

# 5. Found by name: COMM_NET_PLUGIN=example -> libnccl-net-example.so on LD_LIBRARY_PATH.
if [[ $(basename "$V8") == libnccl-net-example.so ]]; then
  if run byname.np2 example LD_LIBRARY_PATH="$(dirname "$V8")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" -- -np 2 -rph 1 -q; then
    check_net byname.np2 ExampleTcp
    check_adapter byname.np2 8
  fi
else
  fail "the v8 plugin is not named libnccl-net-example.so: $V8"
fi

# 6. Only ncclNetPlugin_v7: refused with a WARN, the built-in Socket network is used, collectives pass.
if run v7.np2 "$V7" -- -np 2 -rph 1 -q; then
  check_net v7.np2 Socket
  has v7.np2 "COMM WARN NET : .* unsupported version (it exports ncclNetPlugin_v7" ||
    fail "v7.np2: no WARN about the unsupported NCCL plugin version"
  has v7.np2 "COMM WARN NET : falling back to the built-in Socket network" ||
    fail "v7.np2: no WARN about the fallback to the Socket network"
  if has v7.np2 "loaded NCCL net plugin"; then fail "v7.np2: the adapter loaded a v7 plugin"; fi
fi

if [[ $fails -eq 0 ]]; then
  echo "nccl_plugin_check: PASS"
  exit 0
fi
echo "nccl_plugin_check: $fails failure(s) (KEEP_LOGS=1 keeps the logs)"
exit 1
