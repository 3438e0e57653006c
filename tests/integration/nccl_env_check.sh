#!/usr/bin/env bash
# nccl_env_check.sh NCCL_ENV_CLIENT [NET_PLUGIN]
# The drop-in honours NCCL's environment variables (src/base/param.c's alias table, docs/ENV.md): runs
# nccl_env_client (an NCCL client of libnccl.so.2: 2 ranks from one thread, an allreduce and a broadcast on
# host buffers) and checks its log:
#  1. NCCL_ALGO=Ring NCCL_PROTO=^LL128 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING NCCL_DEBUG_FILE=...%h.%p:
#     the log file is named with the host and pid, INFO lines say NCCL_ALGO and NCCL_DEBUG gave the values,
#     every allreduce and broadcast ran Ring; NCCL_NVLS_ENABLE=0 is accepted (INFO, no WARN), NCCL_IB_SL=3 (not
#     provided) is one WARN naming it; nothing WARNs about ^LL128;
#  2. COMM_ALGO=tree with NCCL_ALGO=Ring: COMM_ALGO wins (Tree), and the INFO line says so;
#  3. NCCL_SHM_DISABLE=1 NCCL_NET=Socket: every connection via NET(Socket); NCCL_DEBUG=INFO alone logs NCCL's
#     default subsystems (INIT, BOOTSTRAP, ENV: the connections, no per-call lines);
#  4. NCCL_NET=bogus: init fails at once with ncclInvalidUsage and an error naming NCCL_NET, no fallback;
#  5. with NET_PLUGIN (an NCCL net plugin, ExampleTcp) as NCCL_NET_PLUGIN: NCCL_NET=exampletcp runs over it,
#     NCCL_NET=Socket over the built-in Socket network instead, NCCL_NET=IBext fails init naming ExampleTcp.
# Each run takes well under a second. KEEP_LOGS=1 keeps the logs. SPDX-License-Identifier: Apache-2.0
set -uo pipefail
CLIENT=${1:?usage: nccl_env_check.sh NCCL_ENV_CLIENT [NET_PLUGIN]}
PLUGIN=${2:-}
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/nccl_env_check.XXXXXX")
trap 'if [[ -n "${KEEP_LOGS:-}" ]]; then echo "nccl_env_check: logs kept in $LOGS"; else rm -rf "$LOGS"; fi' EXIT
for v in $(env | sed -n 's/^\(\(COMM\|NCCL\)_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done
export COMM_TIMEOUT_MS=30000

fails=0
fail() { echo "nccl_env_check: FAIL: $*"; fails=$((fails + 1)); }

# run NAME WANT_STATUS [VAR=VALUE...]: runs the client, its output in $LOGS/NAME.out, its log in $LOGS/NAME.*.
run() {
  local name=$1 want=$2
  shift 2
  env "$@" timeout 60 "$CLIENT" >"$LOGS/$name.out" 2>&1
  local status=$?
  if [[ $status -ne $want ]]; then
    fail "$name: exit status $status, not $want; the end of its output:"
    tail -n 20 "$LOGS/$name.out"
    return 1
  fi
  echo "nccl_env_check: $name: exit status $status as expected"
}
# count NAME [grep options] PATTERN: matching lines in run NAME's log files and output.
count() {
  local name=$1
  shift
  cat "$LOGS/$name".* 2>/dev/null | grep -c "$@"
}
has() { [[ $(count "$1" -e "$2") -gt 0 ]] || fail "$1: no line matches '$2'"; }
# via NAME NET: every connection of run NAME went via NET(NET).
via() {
  local total good
  total=$(count "$1" -F " via ")
  good=$(count "$1" -F " via NET($2) ")
  echo "nccl_env_check: $1: $good of $total connections via NET($2)"
  [[ $total -gt 0 && $good -eq $total ]] || fail "$1: not every connection went via NET($2)"
}

host=$(hostname | cut -d. -f1)
if run nccl 0 NCCL_ALGO=Ring NCCL_PROTO=^LL128 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING \
  NCCL_DEBUG_FILE="$LOGS/nccl.%h.%p.log" NCCL_NVLS_ENABLE=0 NCCL_IB_SL=3; then
  compgen -G "$LOGS/nccl.$host.[0-9]*.log" >/dev/null || fail "nccl: no log file nccl.$host.<pid>.log (%h, %p)"
  has nccl "NCCL_DEBUG (for COMM_DEBUG) set by environment to INFO"
  has nccl "NCCL_ALGO (for COMM_ALGO) set by environment to Ring"
  has nccl "NCCL_PROTO (for COMM_PROTO) set by environment to ^LL128"
  has nccl "NCCL_NVLS_ENABLE=0 accepted, no effect"
  runs=$(count nccl -E "(AllReduce|Broadcast): opCount .* algo ")
  ring=$(count nccl -E "(AllReduce|Broadcast): opCount .* algo Ring ")
  echo "nccl_env_check: nccl: $ring of $runs allreduce and broadcast plans ran Ring"
  [[ $runs -gt 0 && $ring -eq $runs ]] || fail "nccl: $((runs - ring)) of $runs plans did not run Ring"
  [[ $(count nccl -F "COMM WARN NCCL_IB_SL=3 is set, but libcomm does not provide it") -eq 1 ]] ||
    fail "nccl: not exactly one WARN naming NCCL_IB_SL"
  [[ $(count nccl -E "COMM WARN.*(LL128|NVLS)") -eq 0 ]] || fail "nccl: a WARN about LL128 or NVLS"
fi

if run commwins 0 COMM_ALGO=tree NCCL_ALGO=Ring NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ENV,TUNING \
  NCCL_DEBUG_FILE="$LOGS/commwins.%p.log"; then
  has commwins "COMM_ALGO set by environment to tree (NCCL_ALGO=Ring is also set: COMM_ALGO wins)"
  [[ $(count commwins -E "AllReduce: opCount .* algo Tree ") -gt 0 ]] || fail "commwins: no allreduce ran Tree"
  [[ $(count commwins -E "opCount .* algo Ring ") -eq 0 ]] || fail "commwins: a plan ran Ring"
fi

if run socket 0 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_DEBUG=INFO NCCL_DEBUG_FILE="$LOGS/socket.%p.log"; then
  via socket Socket
  has socket "NET : using the built-in Socket network (NCCL_NET=Socket)"
  [[ $(count socket -F "opCount") -eq 0 ]] || fail "socket: COLL lines without NCCL_DEBUG_SUBSYS (NCCL's default)"
fi

start=$(date +%s)
if run bogus 3 NCCL_NET=bogus; then
  has bogus "init failed: 5 (invalid usage"
  has bogus "COMM WARN NET : NCCL_NET=bogus names no network libcomm has"
  [[ $(count bogus -F "falling back") -eq 0 ]] || fail "bogus: a fallback was logged"
  [[ $(($(date +%s) - start)) -lt 20 ]] || fail "bogus: init took $(($(date +%s) - start)) s to fail"
fi

if [[ -n $PLUGIN ]]; then
  plug=(NCCL_NET_PLUGIN="$PLUGIN" NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO)
  if run plugin 0 "${plug[@]}" NCCL_NET=exampletcp NCCL_DEBUG_FILE="$LOGS/plugin.%p.log"; then
    via plugin ExampleTcp
  fi
  if run plugin.socket 0 "${plug[@]}" NCCL_NET=Socket NCCL_DEBUG_FILE="$LOGS/plugin.socket.%p.log"; then
    via plugin.socket Socket
    has plugin.socket "NET : NCCL_NET=Socket is not the network of plugin .* (ExampleTcp)"
  fi
  if run plugin.bogus 3 "${plug[@]}" NCCL_NET=IBext NCCL_DEBUG_FILE="$LOGS/plugin.bogus.%p.log"; then
    has plugin.bogus "NCCL_NET=IBext names no network libcomm has: the built-in IB and Socket, and the plugin's ExampleTcp"
  fi
fi

if [[ $fails -eq 0 ]]; then
  echo "nccl_env_check: PASS"
  exit 0
fi
echo "nccl_env_check: $fails failure(s) (KEEP_LOGS=1 keeps the logs)"
exit 1
