#!/usr/bin/env bash
# tuner_check.sh BUILD_DIR [REPS] [-- extra perf args]: is the tuner's choice as fast as the best forced
# algorithm? For one collective (TC_COLL, default allreduce) on TC_NP local ranks (default 4), runs the
# perf tool with each algorithm forced (COMM_ALGO=<coll>:<algo>) and with the tuner free, REPS times each
# (default 3), interleaved, from TC_MIN to TC_MAX bytes (8 .. 256M) by factors of TC_FACTOR (4). Prints per
# size the median out-of-place time (us) of each, the tuner's choice (from its INFO log), and
# tuner / best forced. TC_ALGOS lists the allreduce algorithms to force (default: ring tree colltree
# oneshot; bench/collnet_bench.sh adds collnet). Environment passes through (COMM_SHM_DISABLE=1 for sockets, launch with
# TC_LAUNCH="scripts/netns_cluster.sh -H 4 -R 2 -n 2 -r 1gbit --" for namespace hosts).
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
[[ $# -ge 1 && -d "$1" ]] || { echo "usage: $0 BUILD_DIR [REPS] [-- perf args]" >&2; exit 2; }
build=$(cd "$1" && pwd)
reps=${2:-3}
shift $(($# >= 2 ? 2 : 1))
[[ ${1:-} == "--" ]] && shift
coll=${TC_COLL:-allreduce}
np=${TC_NP:-4}
perf="$build/perf/${coll}_perf"
[[ -x "$perf" ]] || { echo "$perf not found" >&2; exit 2; }
case $coll in
  allreduce) algos=${TC_ALGOS:-"ring tree colltree oneshot"} ;;
  broadcast | reduce) algos="ring tree colltree" ;;
  allgather | reducescatter) algos="ring pat" ;;
  *) echo "tuner_check: no algorithm choice for $coll" >&2; exit 2 ;;
esac
launch=(${TC_LAUNCH:-})
if [[ ${#launch[@]} -eq 0 ]]; then np_args=(-np "$np"); else np_args=(); fi
args=(-b "${TC_MIN:-8}" -e "${TC_MAX:-256M}" -f "${TC_FACTOR:-4}" -n "${TC_ITERS:-10}" -w 3 "$@")
out=$(mktemp -d "${TMPDIR:-/tmp}/tuner_check.XXXXXX")

for ((r = 1; r <= reps; r++)); do
  for a in $algos auto; do
    echo "# rep $r/$reps: $a" >&2
    if [[ $a == auto ]]; then env_algo=(); else env_algo=(COMM_ALGO="$coll:$a"); fi
    env "${env_algo[@]}" COMM_DEBUG=INFO COMM_DEBUG_SUBSYS=TUNE COMM_DEBUG_FILE="$out/$a.$r.info.%p" \
      timeout "${TC_TIMEOUT:-900}" "${launch[@]}" "$perf" "${np_args[@]}" "${args[@]}" > "$out/$a.$r.txt" 2> "$out/$a.$r.err" ||
      echo "# $a rep $r failed: see $out/$a.$r.err" >&2
  done
done

# "algo size time" per data line (out-of-place time, column 6)
for a in $algos auto; do
  for ((r = 1; r <= reps; r++)); do
    awk -v a="$a" '!/^#/ && NF >= 8 && $1 ~ /^[0-9]+$/ { print a, $1, $6 }' "$out/$a.$r.txt"
  done
done > "$out/all.txt"
# What ran per size, from rank 0's log of each first run: "size algo/proto" (forced runs fall back to the
# tuner's choice where the algorithm cannot run that size, e.g. one-shot above its cap: shown as '-').
for a in $algos auto; do
  cat "$out"/$a.1.info.* 2>/dev/null | grep -E "\[0\].* opCount .* - algo " |
    sed -E 's/.* count ([0-9]+) datatype ([a-z0-9]+) .* algo ([A-Za-z]+) proto ([A-Za-z]+).*/\1 \2 \3\/\4/' | sort -u > "$out/ran.$a.txt"
done

python3 - "$out" "$algos" "$coll" <<'EOF'
import sys, statistics, collections
out, algos, coll = sys.argv[1], sys.argv[2].split() + ["auto"], sys.argv[3]
t = collections.defaultdict(list)
for line in open(f"{out}/all.txt"):
    a, size, us = line.split()
    t[(a, int(size))].append(float(us))
sizes_of = {"int8": 1, "uint8": 1, "float16": 2, "bfloat16": 2, "float32": 4, "float": 4, "int32": 4, "float64": 8}
ran = {}
for a in algos:
    ran[a] = {}
    for line in open(f"{out}/ran.{a}.txt"):
        parts = line.split()
        if len(parts) == 3:
            ran[a][int(parts[0]) * sizes_of.get(parts[1], 4)] = parts[2]
choice = ran["auto"]
names = {"ring": "Ring", "tree": "Tree", "colltree": "CollTree", "pat": "PAT", "oneshot": "OneShot", "collnet": "CollNet"}
# A forced column counts only where the forced algorithm really ran.
for a in algos:
    if a == "auto": continue
    for key in [k for k in t if k[0] == a]:
        got = ran[a].get(key[1], "")
        if got and not got.startswith(names[a] + "/"): del t[key]
sizes = sorted({s for (_, s) in t})
print(f"# {coll}: median out-of-place time (us) per algorithm forced, and the tuner's own choice")
print("| size | " + " | ".join(algos) + " | tuner chose | tuner / best forced |")
print("| ---: " * (len(algos) + 1) + "| --- | ---: |")
worst = 0
for s in sizes:
    med = {a: statistics.median(t[(a, s)]) for a in algos if t[(a, s)]}
    forced = [v for a, v in med.items() if a != "auto"]
    if not forced or "auto" not in med: continue
    ratio = med["auto"] / min(forced)
    worst = max(worst, ratio)
    cells = [f"{med[a]:.1f}" if a in med else "-" for a in algos]
    print(f"| {s} | " + " | ".join(cells) + f" | {choice.get(s, '?')} | {ratio:.2f} |")
print(f"# worst tuner / best forced: {worst:.2f}")
EOF
echo "# raw outputs: $out" >&2
