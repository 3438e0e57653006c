#!/usr/bin/env bash
# knob_check.sh MP_COLLS [CHECK...] -- [MP_COLLS ARGS...]
# Runs mp_colls (which must pass: every result checked against a host reference) with the INFO log of the
# INIT, NET, SHM and ENV subsystems, one file per process, and checks that the settings the variant is about
# (COMM_SHM_DISABLE, COMM_SOCKET_INLINE, COMM_BUFFSIZE, COMM_NCHANNELS, ranks as threads...) took effect: a
# variant whose variable were misspelt, ignored or out of range (a WARN and the default) would otherwise pass
# as the plain run. The checks, on the logs and mp_colls' output together (extended regular expressions):
#   -e REGEX        some line matches REGEX
#   -x REGEX        no line matches REGEX
#   -a SEL=REGEX    there are lines matching SEL, and every one of them matches REGEX too
#   -p N            exactly N processes wrote a log (-p 1: the ranks are threads of one process)
# Exit 0: pass; 1: fail.
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
MP=${1:?usage: knob_check.sh MP_COLLS [-e REGEX] [-x REGEX] [-a SEL=REGEX] [-p N] -- [mp_colls args]}
shift
checks=()
while [[ $# -gt 0 && $1 != -- ]]; do
  [[ $# -ge 2 ]] || { echo "knob_check: $1 needs an argument" >&2; exit 2; }
  case $1 in -e | -x | -a | -p) checks+=("$1" "$2") ;; *) echo "knob_check: unknown check $1" >&2; exit 2 ;; esac
  shift 2
done
[[ $# -gt 0 ]] && shift # the --
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/knob_check.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT

COMM_DEBUG=INFO COMM_DEBUG_SUBSYS=INIT,NET,SHM,ENV COMM_DEBUG_FILE="$LOGS/rank.%p.log" "$MP" "$@" > "$LOGS/out.txt" 2>&1
status=$?
cat "$LOGS/out.txt"
[[ $status -eq 0 ]] || { echo "knob_check: FAIL: mp_colls exited with $status"; exit 1; }
grep -q '^mp_colls: PASS' "$LOGS/out.txt" || { echo "knob_check: FAIL: mp_colls did not report PASS"; exit 1; }

cat "$LOGS"/rank.*.log "$LOGS/out.txt" > "$LOGS/all.txt" 2>/dev/null
nlogs=$(find "$LOGS" -name 'rank.*.log' | wc -l)
fail=0
bad() { echo "knob_check: FAIL: $*"; fail=1; }
for ((i = 0; i < ${#checks[@]}; i += 2)); do
  c=${checks[i]} arg=${checks[i + 1]}
  case $c in
    -e) grep -qE -- "$arg" "$LOGS/all.txt" && echo "knob_check: found: $(grep -m 1 -E -- "$arg" "$LOGS/all.txt")" ||
      bad "no line matches '$arg'" ;;
    -x) if grep -qE -- "$arg" "$LOGS/all.txt"; then bad "a line matches '$arg': $(grep -m 1 -E -- "$arg" "$LOGS/all.txt")"; fi ;;
    -a)
      sel=${arg%%=*} want=${arg#*=}
      n=$(grep -cE -- "$sel" "$LOGS/all.txt")
      other=$(grep -E -- "$sel" "$LOGS/all.txt" | grep -vE -- "$want" | head -n 1)
      if [[ $n -eq 0 ]]; then bad "no line matches '$sel'"
      elif [[ -n $other ]]; then bad "a line matching '$sel' does not match '$want': $other"
      else echo "knob_check: all $n lines matching '$sel' match '$want'"; fi ;;
    -p) [[ $nlogs -eq $arg ]] || bad "$nlogs processes wrote a log, expected $arg" ;;
  esac
done
[[ $fail -eq 0 ]] && echo "knob_check: PASS"
exit $fail
