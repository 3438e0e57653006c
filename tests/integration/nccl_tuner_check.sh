#!/usr/bin/env bash
# nccl_tuner_check.sh MP_COLLS TUNER_V2 TUNER_V3 TUNER_V4 TUNER_V5 NET_TUNED
# NCCL tuner plugins in libcomm (src/tune/tuner_nccl.c): runs mp_colls (2 ranks, the allreduce cases, -q -A; one
# run with allgather and reducescatter too, -C) under the example NCCL tuner (tests/plugins/nccl_tuner_example.c,
# ExampleTuner) of each version and checks, from every rank's INFO log, that
#  - the adapter loaded it as ncclTunerPlugin_vN, and the plugin's own lines came through the logger NCCL's
#    ABI gives it (its init, what it was asked, its count of decisions at the end);
#  - every allreduce of 32 KiB or more ran what the plugin forces (Ring, Simple, 3 channels: NCCL's Ring row and
#    Simple column are libcomm's ring and Simple), every smaller one NCCL's Tree with LL (libcomm's tree or
#    colltree, LL), beating the one-shot algorithm libcomm's model would take;
#  - what the plugin gives NVLS and LL128 (allgather) is ignored with one INFO per communicator;
#  - v5's per-communicator init sees the communicator (commId, NVLink domains), its changed constants are
#    ignored with an INFO;
#  - it is found as NCCL finds it: by path, through NCCL_TUNER_PLUGIN, by name (libnccl-tuner-NAME.so), and in
#    the network plugin's library (NET_TUNED: a net plugin library with a tuner); NCCL_TUNER_PLUGIN=none
#    loads none even then;
#  - every run passes (mp_colls checks results against a host reference).
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
MP=${1:?usage: nccl_tuner_check.sh MP_COLLS TUNER_V2 TUNER_V3 TUNER_V4 TUNER_V5 NET_TUNED}
T2=${2:?tuner v2}
T3=${3:?tuner v3}
T4=${4:?tuner v4}
T5=${5:?tuner v5}
NT=${6:?net plugin library with a tuner}
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/nccl_tuner_check.XXXXXX")
trap 'if [[ -n "${KEEP_LOGS:-}" ]]; then echo "nccl_tuner_check: logs kept in $LOGS"; else rm -rf "$LOGS"; fi' EXIT

fails=0
fail() { echo "nccl_tuner_check: FAIL: $*"; fails=$((fails + 1)); }

TAG=nccl_tuner_check
. "$(dirname "$0")/mp_log_lib.sh"

# check_tuner NAME VERSION: the adapter loaded ExampleTuner as ncclTunerPlugin_vVERSION; the plugin's init and
# summary lines came through; the allreduce calls ran what it forces.
check_tuner() {
  local name=$1 ver=$2 decided
  has "$name" -F "TUNER : using NCCL tuner plugin ExampleTuner (ncclTunerPlugin_v$ver) from" ||
    fail "$name: no INFO line of the adapter loading ExampleTuner as ncclTunerPlugin_v$ver"
  has "$name" -F "TUNER/ExampleTuner v$ver : init: 2 ranks" || fail "$name: the plugin's init line is missing"
  has "$name" -F "TUNER/ExampleTuner v$ver : asked AllReduce of " || fail "$name: the plugin's first-call line is missing"
  decided=$(logs "$name" | sed -n 's/.*TUNER\/ExampleTuner v[0-9] : asked .*; decided \([0-9]*\) allreduce$/\1/p' |
    awk '{ s += $1 } END { print s + 0 }')
  [[ $decided -gt 0 ]] || fail "$name: the plugin decided no allreduce (or its summary is missing)"
  if has "$name" "COMM WARN TUNER"; then
    fail "$name: a TUNER WARN was logged:"
    logs "$name" | grep "COMM WARN TUNER" | head -n 3
  fi
  # Every allreduce: its bytes (count x type size) decide what the plugin forced.
  local verdict
  verdict=$(logs "$name" | awk '
    / AllReduce: opCount .* - algo / {
      c = $0; sub(/.* count /, "", c); split(c, w, " "); n = w[1]; t = w[3]
      size = 8
      if (t ~ /^(int8|uint8|float8e4m3|float8e5m2)$/) size = 1
      if (t ~ /^(float16|bfloat16)$/) size = 2
      if (t ~ /^(int32|uint32|float32)$/) size = 4
      a = $0; sub(/.* - algo /, "", a); split(a, x, " ")
      algo = x[1]; proto = x[3]; ch = x[5]
      if (n * size >= 32768) { big++; if (algo != "Ring" || proto != "Simple" || ch != 3) { bad++; if (!ex) ex = $0 } }
      else if (n > 0) { small++; if ((algo != "Tree" && algo != "CollTree") || proto != "LL") { bad++; if (!ex) ex = $0 } }
    }
    END { printf "%d %d %d %s\n", big, small, bad, ex }')
  read -r big small bad example <<<"$verdict"
  echo "$TAG: $name: $big allreduce calls of 32 KiB or more, $small smaller, $bad not as the plugin chose"
  [[ $big -gt 0 && $small -gt 0 ]] || fail "$name: too few allreduce calls logged ($big large, $small small)"
  [[ $bad -eq 0 ]] || fail "$name: $bad allreduce calls did not run the plugin's choice, e.g. $example"
}

# check_ignored NAME: the plugin's NVLS / LL128 entries were ignored with one INFO per communicator (2 here).
check_ignored() {
  local n
  n=$(count "$1" -F "chose or priced NVLS, NVLSTree or LL128, which libcomm does not have: ignored")
  [[ $n -eq 2 ]] || fail "$1: $n INFO lines about ignored NVLS / LL128 entries (want 1 per communicator, 2)"
}

# 1. v2 (a choice per call), by path, with allgather and reducescatter.
if mp_run v2 "" COMM_TUNER_PLUGIN="$T2" -- -np 2 -q -C; then
  check_tuner v2 2
  check_ignored v2
  has v2 -F "collNetSupport 0 nvlsSupport 0" || fail "v2: its support flags are not logged"
fi

# 2. v3 (the cost table), through NCCL_TUNER_PLUGIN.
if mp_run v3 "" NCCL_TUNER_PLUGIN="$T3" -- -np 2 -q -A; then
  check_tuner v3 3
  has v3 -F "table of 7 algorithms x 3 protocols" || fail "v3: the plugin did not get NCCL's table shape"
fi

# 3. v4 (regBuff).
if mp_run v4 "" COMM_TUNER_PLUGIN="$T4" -- -np 2 -q -A; then
  check_tuner v4 4
  has v4 -F "regBuff 0" || fail "v4: regBuff is not logged as 0"
fi

# 4. v5 (per-communicator init), by name: NCCL_TUNER_PLUGIN=exv5 -> libnccl-tuner-exv5.so on the library path.
mkdir -p "$LOGS/lib"
ln -s "$T5" "$LOGS/lib/libnccl-tuner-exv5.so"
if mp_run v5 "" NCCL_TUNER_PLUGIN=exv5 LD_LIBRARY_PATH="$LOGS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" -- -np 2 -q -A; then
  check_tuner v5 5
  has v5 -F "from libnccl-tuner-exv5.so through the adapter" || fail "v5: not found by name as libnccl-tuner-exv5.so"
  has v5 -E "TUNER/ExampleTuner v5 : init: comm 0x[0-9a-f]+, 1 NVLink domains of 2 to 2 ranks" ||
    fail "v5: the plugin's init did not see the communicator (commId, NVLink domains)"
  has v5 -F "set NCCL's tuning constants: not used" || fail "v5: no INFO about the plugin's changed constants"
fi

# 5. No tuner variable: the network plugin's library carries one (each rank its own host, so the net is loaded).
if mp_run fromnet "$NT" -- -np 2 -rph 1 -q -A; then
  check_tuner fromnet 5
  has fromnet -F "TUNER : the network plugin's library $NT carries a tuner plugin: using it" ||
    fail "fromnet: no INFO about the tuner of the network plugin's library"
fi

# 6. NCCL_TUNER_PLUGIN=none: no tuner, although the network plugin's library has one.
if mp_run none "$NT" NCCL_TUNER_PLUGIN=none -- -np 2 -rph 1 -q -A; then
  has none -F "TUNER : NCCL_TUNER_PLUGIN=none: no tuner plugin" || fail "none: no INFO about NCCL_TUNER_PLUGIN=none"
  if has none -F "using NCCL tuner plugin"; then fail "none: a tuner was loaded"; fi
fi

if [[ $fails -eq 0 ]]; then
  echo "nccl_tuner_check: PASS"
  exit 0
fi
echo "nccl_tuner_check: $fails failure(s) (KEEP_LOGS=1 keeps the logs)"
exit 1
