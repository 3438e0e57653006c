#!/usr/bin/env bash
# nccl_tests_check.sh BINDIR [EXTRA_ARGS...]: the perf tools under nccl-tests' names (BINDIR: the build's
# perf/nccl-tests/), driven the way wrapper scripts written for NVIDIA's nccl-tests drive them: nccl-tests'
# flags, then the output parsed as those scripts parse it (the data rows' columns, "# Avg bus bandwidth",
# "# Out of bounds values : 0 OK") and the -J file read with python3's json.load. Host buffers, 2 local
# ranks: threads (-t 2 -g 1, and -g 2) and two processes started as mpirun would (COMM_ROOT/COMM_RANK).
# EXTRA_ARGS go to every run (the test passes --buffers host, so a GPU on the machine changes nothing).
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail

BIN=${1:?usage: nccl_tests_check.sh BINDIR [EXTRA_ARGS...]}
shift
EXTRA=("$@")
fail() { echo "nccl_tests_check: FAIL: $*" >&2; exit 1; }
[[ -x "$BIN/all_reduce_perf" ]] || fail "$BIN/all_reduce_perf is not an executable"
command -v python3 >/dev/null || fail "python3 is needed to read the JSON output"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nccl_tests_check.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
unset COMM_RANK COMM_NRANKS COMM_ROOT NCCL_TESTS_MIN_BW NCCL_TESTS_DEVICE

NRANKS=2
FLAGS=(-b 8 -e 1M -f 2 -c 1 -n 5 -w 1)

# The size column nccl-tests prints for -b S: S, or for the collectives whose size is the whole buffer
# (every rank's part) NRANKS parts of (S / 4 / NRANKS) floats rounded down to 16 bytes.
expected_size() { # TOOL S
  case $1 in
    all_gather | reduce_scatter | alltoall | gather | scatter | hypercube)
      echo $((NRANKS * (($2 / 4 / NRANKS) & ~3) * 4)) ;;
    *) echo "$2" ;;
  esac
}

# Checks one run's output (file $2) of tool $1 as a wrapper script would; prints the average bus bandwidth.
check_output() { # TOOL LOG NTHREAD NGPUS
  local tool=$1 log=$2 nt=$3 ng=$4
  grep -q "^# nThread $nt nGpus $ng minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 1 iters: 5 agg iters: 1 validation: 1 graph: 0 unalign: 0$" "$log" ||
    fail "$tool: no '# nThread $nt nGpus $ng minBytes 8 ...' line"
  grep -q "^# Using devices$" "$log" || fail "$tool: no '# Using devices'"
  [[ $(grep -c "^#  Rank  [0-9] Group  0 Pid " "$log") -eq $NRANKS ]] || fail "$tool: not $NRANKS '#  Rank' lines"
  grep -q "^#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong $" "$log" ||
    fail "$tool: no column header"
  grep -q "^# Collective test concluded: ${tool}_perf$" "$log" || fail "$tool: no '# Collective test concluded'"
  local oob avg
  oob=$(grep "^# Out of bounds values" "$log" | awk '{print $7, $8}')
  [[ $oob == "0 OK" ]] || fail "$tool: '# Out of bounds values : $oob'"
  avg=$(grep "^# Avg bus bandwidth" "$log" | awk '{print $NF}')
  # The data rows: size count type redop root, then time algbw busbw #wrong out of place and in place.
  # hypercube prints an empty redop (as nccl-tests does), one column less when split on blanks.
  local cols=13 root=-1
  [[ $tool == hypercube ]] && cols=12
  case $tool in broadcast | reduce | gather | scatter) root=0 ;; esac
  grep -v '^#' "$log" | awk -v cols=$cols -v root=$root -v tool="$tool" -v avg="$avg" '
    NF == 0 { next }
    NF != cols { printf "%s: a row of %d columns: %s\n", tool, NF, $0 > "/dev/stderr"; bad = 1; next }
    {
      o = NF - 8  # the root column; the out-of-place group follows it
      if ($o != root) { printf "%s: root %s, not %s\n", tool, $o, root > "/dev/stderr"; bad = 1 }
      if ($3 != "float") { printf "%s: type %s\n", tool, $3 > "/dev/stderr"; bad = 1 }
      for (k = 0; k < 2; k++) {
        t = $(o + 1 + 4 * k); bus = $(o + 3 + 4 * k); w = $(o + 4 + 4 * k)
        if (t !~ /^[0-9.e+]+$/ || t + 0 <= 0) { printf "%s: time %s\n", tool, t > "/dev/stderr"; bad = 1 }
        if (bus !~ /^[0-9.e+]+$/) { printf "%s: busbw %s\n", tool, bus > "/dev/stderr"; bad = 1 }
        unchecked = k == 1 && (tool == "alltoall" || tool == "sendrecv")  # nccl-tests checks no in-place there
        if (unchecked ? w != "N/A" : w != "0") { printf "%s: #wrong %s\n", tool, w > "/dev/stderr"; bad = 1 }
        sum += bus; n++
      }
      print $1 > "'"$WORK/sizes"'"
    }
    END {
      if (n == 0) { printf "%s: no data rows\n", tool > "/dev/stderr"; exit 1 }
      # the average of the busbw columns (printed to 2 decimals) is the footer line
      d = sum / n - avg; if (d < 0) d = -d
      if (d > 0.006 + 0.02 * avg) { printf "%s: Avg bus bandwidth %s, the rows say %f\n", tool, avg, sum / n > "/dev/stderr"; bad = 1 }
      exit bad
    }' || fail "$tool: the data rows (above)"
  local want=() s
  for ((s = 8; s <= 1048576; s *= 2)); do want+=("$(expected_size "$tool" $s)"); done
  [[ "$(tr '\n' ' ' <"$WORK/sizes")" == "${want[*]} " ]] ||
    fail "$tool: sizes $(tr '\n' ' ' <"$WORK/sizes"), nccl-tests' would be ${want[*]}"
  echo "$avg"
}

# Reads a -J file: nccl-tests' keys, and the same rows and average as the text output.
check_json() { # TOOL JSON LOG NTHREAD NGPUS
  python3 - "$@" "$NRANKS" <<'EOF' || fail "$1: the JSON file $2"
import json, sys
tool, path, log, nt, ng, nranks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
d = json.load(open(path))
def need(obj, keys, where):
    missing = [k for k in keys if k not in obj]
    assert not missing, f"{where}: no {missing}"
need(d, ["version", "start_time", "args", "env", "nccl_version", "config", "results", "out_of_bounds",
         "average_bus_bandwidth", "errors", "end_time"], "top level")
c = d["config"]
need(c, ["nthreads", "ngpus", "minimum_bytes", "maximum_bytes", "step_factor", "warmup_iters", "iterations",
         "aggregated_iterations", "validation", "graph", "blocking_collectives", "parallel_init", "devices"], "config")
assert (c["nthreads"], c["ngpus"], c["minimum_bytes"], c["maximum_bytes"], c["step_factor"]) == (nt, ng, 8, 1 << 20, 2), c
assert (c["warmup_iters"], c["iterations"], c["validation"], c["graph"]) == (1, 5, 1, 0), c
assert len(c["devices"]) == nranks, c["devices"]
for dev in c["devices"]:
    need(dev, ["rank", "group", "pid", "hostname", "device", "device_hex", "device_info"], "device")
rows = [l.split() for l in open(log) if l.strip() and not l.startswith("#")]
assert len(d["results"]) == len(rows), (len(d["results"]), len(rows))
for r, row in zip(d["results"], rows):
    need(r, ["size", "count", "type", "redop", "root", "out_of_place", "in_place", "actual_iterations"], "result")
    assert r["size"] == int(row[0]) and r["count"] == int(row[1]) and r["actual_iterations"] == 5, (r, row)
    for v in ("out_of_place", "in_place"):
        need(r[v], ["time", "alg_bw", "bus_bw", "nwrong"], v)
        assert r[v]["time"] > 0 and r[v]["bus_bw"] >= 0, r
    assert r["out_of_place"]["nwrong"] == 0, r
oob, avg = d["out_of_bounds"], d["average_bus_bandwidth"]
assert oob["count"] == 0 and oob["okay"] == "true", oob
footer = float([l for l in open(log) if l.startswith("# Avg bus bandwidth")][0].split()[-1])
assert abs(avg["bandwidth"] - footer) <= 1e-6 + 1e-5 * footer and avg["okay"] == "unchecked", (avg, footer)
assert isinstance(d["errors"], list) and d["args"][0].endswith(tool + "_perf"), (d["errors"], d["args"])
EOF
}

start=$SECONDS
# 1. Every tool, two ranks as threads of one process (-t 2 -g 1).
for tool in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter hypercube; do
  log=$WORK/$tool.log
  timeout 120 "$BIN/${tool}_perf" "${FLAGS[@]}" -t 2 -g 1 -J "$WORK/$tool.json" "${EXTRA[@]}" >"$log" 2>"$WORK/$tool.err"
  rc=$?
  [[ $rc -eq 0 ]] || { tail -n 20 "$log" "$WORK/$tool.err"; fail "$tool: exit status $rc"; }
  avg=$(check_output "$tool" "$log" 2 1) || { echo "$avg"; exit 1; }
  check_json "$tool" "$WORK/$tool.json" "$log" 2 1
  printf 'nccl_tests_check: %-15s -t 2 -g 1: %2d rows, Avg bus bandwidth %s, JSON ok\n' "${tool}_perf" \
    "$(grep -cv '^#\|^$' "$log")" "$avg"
done

# 2. Two GPUs per thread (-g 2): two ranks here too. A second -J to the same name keeps the first file.
log=$WORK/g2.log
timeout 120 "$BIN/all_reduce_perf" "${FLAGS[@]}" -g 2 -J "$WORK/all_reduce.json" "${EXTRA[@]}" >"$log" 2>"$WORK/g2.err"
rc=$?
[[ $rc -eq 0 ]] || { tail -n 20 "$log" "$WORK/g2.err"; fail "all_reduce -g 2: exit status $rc"; }
check_output all_reduce "$log" 1 2 >/dev/null || exit 1
grep -q "^# Writing JSON output to $WORK/all_reduce.json.0$" "$log" || fail "-J over an existing file: no FILE.0"
check_json all_reduce "$WORK/all_reduce.json.0" "$log" 1 2
echo "nccl_tests_check: all_reduce_perf -g 2: ok, JSON written to FILE.0 beside the first"

# 3. Two processes of one rank each, started as mpirun would start them (only rank 0 prints and writes).
PORT=$((21000 + ($$ + 7) % 11000))
for rank in 0 1; do
  COMM_ROOT="127.0.0.1:$PORT" COMM_RANK=$rank COMM_NRANKS=2 COMM_TIMEOUT_MS=60000 timeout 120 \
    "$BIN/all_reduce_perf" "${FLAGS[@]}" -g 1 -J "$WORK/mp$rank.json" "${EXTRA[@]}" >"$WORK/mp$rank.log" \
    2>"$WORK/mp$rank.err" &
  PIDS+=($!)
done
for rank in 0 1; do
  wait "${PIDS[$rank]}" || { tail -n 20 "$WORK/mp$rank.log" "$WORK/mp$rank.err"; fail "2 processes: rank $rank failed"; }
done
PIDS=()
check_output all_reduce "$WORK/mp0.log" 1 1 >/dev/null || exit 1
check_json all_reduce "$WORK/mp0.json" "$WORK/mp0.log" 1 1
[[ ! -e $WORK/mp1.json && ! -s $WORK/mp1.log ]] || fail "2 processes: rank 1 printed or wrote JSON"
echo "nccl_tests_check: all_reduce_perf in 2 processes (COMM_ROOT/COMM_RANK/COMM_NRANKS): ok"
echo "nccl_tests_check: PASS in $((SECONDS - start)) s"
