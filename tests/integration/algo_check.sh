#!/usr/bin/env bash
# algo_check.sh MP_COLLS ALGO COLLECTIVES [MP_COLLS ARGS...]
# Runs mp_colls with COMM_ALGO=ALGO and checks, from the INFO log of every rank, that each collective
# named in COLLECTIVES (comma list as logged: AllReduce,Broadcast,Reduce,AllGather,ReduceScatter) ran
# with algorithm ALGO every time (the log's "algo NAME"), and that mp_colls passed (its results are
# checked against a host reference). COMM_PROTO, COMM_ALLREDUCE_ONESHOT_MAX etc. pass through.
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
MP=${1:?usage: algo_check.sh MP_COLLS ALGO COLLECTIVES [args]}
ALGO=${2:?algorithm}
COLLS=${3:?collectives}
shift 3
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/algo_check.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT

COMM_ALGO=$ALGO COMM_DEBUG=INFO COMM_DEBUG_SUBSYS=TUNE COMM_DEBUG_FILE="$LOGS/rank.%p.log" "$MP" "$@"
status=$?
[[ $status -eq 0 ]] || { echo "algo_check: FAIL: mp_colls exited with $status (COMM_ALGO=$ALGO)"; exit 1; }

# INFO lines of collectives: "<Coll>: opCount ... - algo <Name> proto <P> ...". Split children and
# every communicator count alike.
case ${ALGO,,} in
  ring) want=Ring ;; tree) want=Tree ;; colltree) want=CollTree ;; pat) want=PAT ;; oneshot) want=OneShot ;;
  *) want=$ALGO ;;
esac
fail=0
IFS=, read -r -a colls <<< "$COLLS"
for c in "${colls[@]}"; do
  total=$(cat "$LOGS"/rank.*.log 2>/dev/null | grep -c " $c: opCount .* - algo ")
  good=$(cat "$LOGS"/rank.*.log 2>/dev/null | grep -c " $c: opCount .* - algo $want proto ")
  echo "algo_check: $c: $good of $total calls ran $want"
  if [[ $total -eq 0 ]]; then echo "algo_check: FAIL: no $c call logged"; fail=1; fi
  if [[ $good -ne $total ]]; then
    echo "algo_check: FAIL: $c ran other algorithms:"
    cat "$LOGS"/rank.*.log | grep " $c: opCount .* - algo " | grep -v " algo $want proto " | head -n 3
    fail=1
  fi
done
[[ $fail -eq 0 ]] && echo "algo_check: PASS (COMM_ALGO=$ALGO)"
exit $fail
