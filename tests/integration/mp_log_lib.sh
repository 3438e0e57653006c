# mp_log_lib.sh: sourced by the scripts that run mp_colls under a network or collnet plugin and judge the
# ranks' INFO logs (nccl_plugin_check.sh, collnet_check.sh, aggd_net_check.sh). The caller sets MP (mp_colls),
# LOGS (a folder), TAG (its name, for messages) and defines fail MESSAGE.
# SPDX-License-Identifier: Apache-2.0

# mp_run NAME PLUGIN [VAR=VALUE...] -- MP_COLLS ARGS: mp_colls with COMM_NET_PLUGIN=PLUGIN, INFO logs in
# $LOGS/NAME/rank.PID.log, its output in $LOGS/NAME/out; the VAR=VALUE settings come last (they win). Returns 0
# when it passed, else says why (fail) with the end of its output.
mp_run() {
  local name=$1 plugin=$2
  shift 2
  local envs=()
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  mkdir -p "$LOGS/$name"
  env COMM_NET_PLUGIN="$plugin" COMM_DEBUG=INFO COMM_DEBUG_FILE="$LOGS/$name/rank.%p.log" COMM_TIMEOUT_MS=60000 \
    ${envs[@]+"${envs[@]}"} "$MP" -w 240 "$@" >"$LOGS/$name/out" 2>&1
  local status=$?
  if [[ $status -ne 0 ]] || ! grep -q "^mp_colls: PASS" "$LOGS/$name/out"; then
    fail "$name: mp_colls exited with $status; the end of its output:"
    tail -n 20 "$LOGS/$name/out"
    return 1
  fi
  return 0
}

logs() { cat "$LOGS/$1"/rank.*.log 2>/dev/null; }
# has NAME [grep options] PATTERN: some rank's log of run NAME has a matching line. (Not `logs | grep -q`:
# grep leaving early would make cat fail, and pipefail the pipeline.)
has() {
  local name=$1
  shift
  grep -q "$@" "$LOGS/$name"/rank.*.log 2>/dev/null
}
# count NAME [grep options] PATTERN: matching lines over every rank's log of run NAME.
count() {
  local name=$1
  shift
  logs "$name" | grep -c "$@"
}

# check_net NAME NETNAME: every connection logged went through NET(NETNAME).
check_net() {
  local name=$1 net=$2 total good
  total=$(count "$name" " via ")
  good=$(count "$name" -F " via NET($net) ")
  echo "$TAG: $name: $good of $total connections via NET($net)"
  [[ $total -gt 0 ]] || fail "$name: no connection logged"
  if [[ $good -ne $total ]]; then
    fail "$name: connections through something else than NET($net):"
    logs "$name" | grep " via " | grep -vF " via NET($net) " | head -n 3
  fi
}
