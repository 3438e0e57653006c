#!/usr/bin/env bash
# Fault campaign: kill, stop or skip a random rank at a random phase (init, a collective, finalize) of
# random collectives, again and again, and check that every survivor returns within the limit naming the
# culprit (tests/integration/fault_driver.c says what is checked).
#   scripts/fault_campaign.sh BUILD_DIR [SECONDS (default 600)] [RANKS_MAX (default 6)]
# Prints a line per failure and, at the end, the counts per mode, phase and transport. Exit 1 if any
# scenario failed. Timeouts: COMM_TIMEOUT_MS=3000 (stop and skip are found by the timeout).
set -u
if [ $# -lt 1 ] || [ ! -x "$1/tests/fault_driver" ]; then
  echo "usage: $0 BUILD_DIR [SECONDS] [RANKS_MAX]  (BUILD_DIR/tests/fault_driver must exist)" >&2
  exit 2
fi
driver="$1/tests/fault_driver"
seconds=${2:-600}
maxRanks=${3:-6}
modes=(kill kill kill stop skip)
phases=(coll coll coll init finalize)
declare -A runs fails
log=$(mktemp /tmp/fault_campaign.XXXXXX)
end=$(( $(date +%s) + seconds ))
n=0
while [ "$(date +%s)" -lt "$end" ]; do
  n=$((n + 1))
  seed=$RANDOM$RANDOM
  np=$(( 2 + RANDOM % (maxRanks - 1) ))
  mode=${modes[RANDOM % ${#modes[@]}]}
  phase=${phases[RANDOM % ${#phases[@]}]}
  transport=shm
  envs=(COMM_TIMEOUT_MS=3000)
  if (( RANDOM % 2 )); then transport=sockets; envs+=(COMM_SHM_DISABLE=1); fi
  key="$mode/$phase/$transport"
  runs[$key]=$(( ${runs[$key]:-0} + 1 ))
  if ! line=$(env "${envs[@]}" timeout 120 "$driver" -np "$np" -mode "$mode" -phase "$phase" -seed "$seed" \
      2>>"$log.err"); then
    fails[$key]=$(( ${fails[$key]:-0} + 1 ))
    echo "$line" | tail -5
    echo "$line" >> "$log"
  fi
  : > "$log.err" # keep the WARN output of the last run only
done
echo "# fault campaign: $n scenarios in $seconds s (failures' output in $log)"
printf "%-28s %8s %8s\n" "mode/phase/transport" runs failed
total=0
for key in $(printf "%s\n" "${!runs[@]}" | sort); do
  printf "%-28s %8d %8d\n" "$key" "${runs[$key]}" "${fails[$key]:-0}"
  total=$(( total + ${fails[$key]:-0} ))
done
[ "$total" -eq 0 ]
