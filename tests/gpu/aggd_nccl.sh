#!/usr/bin/env bash
# aggd_nccl.sh COMM_AGGD LIBCOMM_COLLNET_AGGD [LOG_DIR]   (or aggd_nccl.sh BUILD_DIR, as run_on_gpu.sh calls it)
#
# NVIDIA's NCCL (the one PyTorch bundles) running allreduce over libcomm's software SHARP: NCCL loads
# libcomm-collnet-aggd.so as its network plugin (NCCL_NET_PLUGIN), takes the AggdTcp network and the aggd CollNet
# from it (NCCL uses a library's CollNet only with that library's network), and reduces through one comm_aggd on
# 127.0.0.1. Needs one GPU, torch with CUDA, nothing outside the host; builds nothing.
#
# Two python processes (torch.distributed, backend nccl, a file:// store), both on cuda:0. NCCL refuses two ranks
# of one host on one GPU ("Duplicate GPU detected", init.cc), and ranks of one host hash are one node: a different
# NCCL_HOSTID per process (misc/utils.cc getHostHash) makes them two nodes of one GPU each, so every byte between
# them goes through the network plugin. CollNet is used when (init.cc, plugin/net.cc, graph/search.cc):
# NCCL_COLLNET_ENABLE=1; the library's net is the one chosen (its init succeeds, >= 1 device) and its CollNet's
# init succeeds with >= 1 device (COMM_AGGD names the daemon); nNodes >= NCCL_COLLNET_NODE_THRESHOLD (2); the
# CollNet chain graph finds a coll NET node (the aggd device, 10 Gb/s, within NCCL's search speeds); the
# collnet group connects on every rank; the type and op are supported (float32 sum). CollNetDirect needs an
# NVSwitch system: with one GPU per node CollNetChain is the algorithm (NCCL_ALGO=CollNetChain, NCCL's
# spelling in ncclAlgoStr, matched case-insensitively).
#
# Phases (each: both processes under timeout 120, allreduce float32 sum of several sizes, 3 times each, values
# checked exactly; logs in LOG_DIR/PHASE/):
#   collnet  NCCL_ALGO=CollNetChain: the point of the run;
#   tuned    no NCCL_ALGO (what NCCL's tuner picks with CollNet on);
#   netonly  NCCL_COLLNET_ENABLE=0 (the AggdTcp network alone), only when collnet failed.
# For each it reports what the NCCL logs show: the NCCL version, the network plugin loaded and used, the CollNet
# plugin loaded and connected, the algorithm of each allreduce, every NCCL WARN; and what comm_aggd logged. It
# reports what it finds even when the rest is missing (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET,COLL,TUNING and
# GRAPH,ENV: AGGD_NCCL_SUBSYS replaces the list). AGGD_NCCL_PHASES="collnet tuned netonly" picks phases (netonly
# runs when collnet did not pass or did not run), AGGD_NCCL_SIZES=1,1024,... the element counts.
# Exit: 0 when the collnet phase passed with CollNet as the algorithm; 1 otherwise; 77 without torch or a GPU.
# Run: bash -x tests/gpu/aggd_nccl.sh build/tools/aggd/comm_aggd build/libcomm-collnet-aggd.so [LOG_DIR]
# (LOG_DIR default: $OUT/aggd_nccl when $OUT is set, else ./aggd_nccl-DATE). SPDX-License-Identifier: Apache-2.0
set -uo pipefail
# run_on_gpu.sh calls scripts with the build folder alone: its comm_aggd and library.
if [[ $# -eq 1 && -d $1 ]]; then set -- "$1/tools/aggd/comm_aggd" "$1/libcomm-collnet-aggd.so"; fi
if [[ $# -lt 2 || ! -x $1 || ! -f $2 ]]; then
  echo "usage: $0 PATH/comm_aggd PATH/libcomm-collnet-aggd.so [LOG_DIR], or $0 BUILD_DIR" >&2
  exit 2
fi
AGGD=$(realpath "$1")
LIB=$(realpath "$2")
if [[ $# -ge 3 ]]; then LOGS=$3; elif [[ -n ${OUT:-} ]]; then LOGS=$OUT/aggd_nccl; else LOGS=$PWD/aggd_nccl-$(date +%Y%m%d-%H%M%S); fi
mkdir -p "$LOGS" || exit 2
LOGS=$(realpath "$LOGS")
SUMMARY=$LOGS/summary.txt
: >"$SUMMARY"
PHASES=${AGGD_NCCL_PHASES:-collnet tuned netonly}
SIZES=${AGGD_NCCL_SIZES:-1,1000,65536,262144,1048576,4194304}
PY=${PYTHON:-python3}
DPID=""
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  if [[ -n $DPID ]] && kill "$DPID" 2>/dev/null; then wait "$DPID" 2>/dev/null; fi
}
trap cleanup EXIT
say() { echo "aggd_nccl: $*" | tee -a "$SUMMARY"; }
# show FILE...: the lines given on stdin, indented, into the summary too.
show() { sed 's/^/    /' | tee -a "$SUMMARY"; }

# ---------------------------------------------------------------- the machine, torch, NCCL, the library
say "logs in $LOGS"
say "host $(hostname), $(uname -srm), $(date -u +%FT%TZ)"
{ nvidia-smi --query-gpu=index,name,driver_version,compute_mode,memory.total --format=csv,noheader 2>&1 || true; } |
  sed 's/^/nvidia-smi: /' | show
unset LD_PRELOAD # NVIDIA's NCCL as torch loads it, not a drop-in
timeout 120 "$PY" - >"$LOGS/torch.txt" 2>&1 <<'EOF'
import glob, os, sys
import torch
v = torch.cuda.nccl.version() if torch.version.cuda else None
v = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", v)
print("cuda available", torch.cuda.is_available(), "devices", torch.cuda.device_count(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
here = os.path.dirname(torch.__file__)
for d in (os.path.join(here, "lib"), os.path.join(here, "..", "nvidia", "nccl", "lib")):
    for f in sorted(glob.glob(os.path.join(d, "libnccl*.so*"))):
        print("libnccl candidate", os.path.realpath(f))
sys.exit(0 if torch.version.cuda and torch.cuda.is_available() else 3)
EOF
rc=$?
show <"$LOGS/torch.txt"
if [[ $rc -ne 0 ]]; then
  smi=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if [[ $rc -eq 3 && $smi -ge 1 ]]; then
    say "FAIL: torch sees no CUDA device (or has no CUDA) where nvidia-smi lists $smi GPU(s)"
    exit 1
  fi
  say "SKIP: $([[ $rc -eq 3 ]] && echo "torch has no CUDA or no GPU" || echo "torch cannot be imported (exit $rc)")"
  exit 77
fi
NCCL_VERSION=$(sed -n 's/^torch .* nccl \(.*\)$/\1/p' "$LOGS/torch.txt")
say "NCCL version (torch.cuda.nccl.version()): ${NCCL_VERSION:-unknown}"
if command -v nm >/dev/null; then
  say "$LIB exports: $(nm -D --defined-only "$LIB" | awk '$3 ~ /^nccl/ {print $3}' | sort | tr '\n' ' ')"
fi
"$PY" -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$LIB" 2>&1 | show
[[ ${PIPESTATUS[0]} -eq 0 ]] && say "the library loads (dlopen)" || say "WARNING: the library does not load here"

# ---------------------------------------------------------------- comm_aggd on 127.0.0.1
"$AGGD" --listen 127.0.0.1:0 --timeout-ms 60000 >"$LOGS/comm_aggd.out" 2>"$LOGS/comm_aggd.err" &
DPID=$!
ADDR=""
for ((t = 0; t < 200; t++)); do
  ADDR=$(sed -n 's/^comm_aggd listening on \(.*\)$/\1/p' "$LOGS/comm_aggd.out")
  [[ -n $ADDR ]] || ! kill -0 "$DPID" 2>/dev/null && break
  sleep 0.05
done
if [[ -z $ADDR ]]; then
  say "FAIL: comm_aggd did not start:"
  show <"$LOGS/comm_aggd.err"
  exit 1
fi
say "comm_aggd (pid $DPID) listening on $ADDR"

# ---------------------------------------------------------------- the worker
WORKER=$LOGS/aggd_nccl_worker.py
cat >"$WORKER" <<'EOF'
# aggd_nccl_worker.py RANK WORLD INIT_METHOD SIZES: allreduce float32 sum of each size, checked exactly.
import datetime, os, sys, time, traceback
rank, world, init, sizes = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], [int(s) for s in sys.argv[4].split(",")]
def log(*a): print(f"[rank {rank}]", *a, flush=True)
ok = True
try:
    import torch, torch.distributed as dist
    torch.cuda.set_device(0)
    dev = torch.device("cuda:0")
    log("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "NCCL_HOSTID", os.environ.get("NCCL_HOSTID"))
    kw = dict(backend="nccl", init_method=init, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=100))
    try:
        dist.init_process_group(device_id=dev, **kw)  # NCCL's init now, where torch supports it
    except TypeError:
        dist.init_process_group(**kw)
    log("process group up")
    total = sum(r + 1 for r in range(world))
    for n in sizes:
        base = (torch.arange(n, device=dev, dtype=torch.int64) % 251 + 1).to(torch.float32)
        want = base * total
        for it in range(3):
            y = base * (rank + 1)
            t0 = time.time()
            dist.all_reduce(y, op=dist.ReduceOp.SUM)
            torch.cuda.synchronize()
            dt = time.time() - t0
            good = torch.equal(y, want)
            if not good:
                bad = (y != want).nonzero()
                i = int(bad[0])
                log(f"allreduce float32 sum count {n}: FAIL at {bad.numel()} elements, first [{i}] = "
                    f"{float(y[i])}, expected {float(want[i])}")
                ok = False
                break
        if good:
            log(f"allreduce float32 sum count {n} ({4 * n} B) x3: PASS, last {dt * 1e3:.2f} ms")
    maps = open("/proc/self/maps").read().splitlines()
    libs = sorted({l.split()[-1] for l in maps if "libnccl" in l or "collnet-aggd" in l})
    log("loaded:", " ".join(libs) if libs else "(no libnccl / aggd library mapped)")
    dist.destroy_process_group()
except Exception:
    log("exception:\n" + traceback.format_exc())
    ok = False
log("RESULT", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
EOF

# ---------------------------------------------------------------- one phase
# run_phase NAME [VAR=VALUE...]: both processes, then what their logs show (report sets RESULT, NETP, COLLP,
# ALGO, COLLALGO [NAME]).
declare -A RESULT ALGO COLLALGO NETP COLLP
run_phase() {
  local name=$1
  shift
  local dir=$LOGS/$name r rc
  mkdir -p "$dir"
  rm -f "$dir/store"
  local rcs=()
  PIDS=()
  for r in 0 1; do
    env NCCL_NET_PLUGIN="$LIB" NCCL_COLLNET_ENABLE=1 NCCL_NVLS_ENABLE=0 NCCL_MNNVL_ENABLE=0 NCCL_IB_DISABLE=1 \
      NCCL_SOCKET_IFNAME=lo NCCL_HOSTID="aggd-node-$r" COMM_AGGD="$ADDR" COMM_AGGD_TIMEOUT_MS=60000 \
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS="${AGGD_NCCL_SUBSYS:-INIT,NET,COLL,TUNING,GRAPH,ENV}" \
      NCCL_DEBUG_FILE="$dir/nccl.rank$r.%p.log" NCCL_TOPO_DUMP_FILE="$dir/topo.rank$r.xml" \
      NCCL_GRAPH_DUMP_FILE="$dir/graphs.rank$r.xml" PYTHONUNBUFFERED=1 "$@" \
      timeout 120 "$PY" "$WORKER" "$r" 2 "file://$dir/store" "$SIZES" >"$dir/rank$r.out" 2>&1 &
    PIDS+=($!)
  done
  for r in 0 1; do
    wait "${PIDS[$r]}"
    rcs+=($?)
  done
  PIDS=()
  report "$name" "${rcs[@]}"
}

# grepl DIR PATTERN: matching lines of the phase's NCCL logs (extended regex), prefixed by their file.
grepl() { grep -HE "$2" "$1"/nccl.rank*.log 2>/dev/null | sed "s|^$1/||"; }
# found DIR PATTERN [MAX]: says how many lines match and shows the first MAX (default 4).
found() {
  local n
  n=$(grepl "$1" "$2" | wc -l)
  echo "$n"
  grepl "$1" "$2" | head -n "${3:-4}" | cut -c1-300 >"$1/.found"
}

report() {
  local name=$1 rc0=$2 rc1=$3 n
  local dir=$LOGS/$name
  say "---- phase $name: exit codes $rc0 $rc1 (124: timeout)"
  for r in 0 1; do
    grep -v "^$" "$dir/rank$r.out" 2>/dev/null | cut -c1-300 | tail -n 30 | show
  done
  n=$(found "$dir" "NCCL version" 1)
  say "NCCL version line: $n"
  show <"$dir/.found"
  n=$(found "$dir" "NET/Plugin|NET_PLUGIN|net plugin|NET plugin|network plugin" 10)
  say "network plugin lines: $n"
  show <"$dir/.found"
  n=$(found "$dir" "NET/AggdTcp" 4)
  say "AggdTcp's own lines (through NCCL's logger): $n"
  show <"$dir/.found"
  n=$(found "$dir" "Using network " 4)
  say "network used: $n"
  show <"$dir/.found"
  NETP[$name]=no
  [[ $(grepl "$dir" "Using network AggdTcp" | cut -d: -f1 | sort -u | wc -l) -ge 2 ]] && NETP[$name]=yes
  n=$(found "$dir" "collnet plugin|coll plugin|CollNet plugin|CollNetPlugin|aggd: |aggd plugin" 6)
  say "CollNet plugin lines: $n"
  show <"$dir/.found"
  n=$(found "$dir" "via COLLNET|Connected CollNet|Connected collnet|CollNet devices|collnet channels|CollNet node threshold|[Cc]oll[Nn]et.*(disabl|fail)" 8)
  say "CollNet setup lines: $n"
  show <"$dir/.found"
  COLLP[$name]=no
  [[ $(grepl "$dir" "via COLLNET/|Connected CollNet" | cut -d: -f1 | sort -u | wc -l) -ge 2 ]] && COLLP[$name]=yes
  n=$(found "$dir" "Pattern [0-9]+, crossNic" 8)
  say "graph search results (pattern 4 ring, 3 tree; the CollNet graphs search as trees with one GPU): $n"
  show <"$dir/.found"
  # "AllReduce: 4 Bytes -> Algo COLLNET_CHAIN proto SIMPLE ..." (2.26+: the name from ncclAlgoToString; 2.23+: the
  # function first; before 2.26 the algorithm as a number: CollNetDirect 2, CollNetChain 3); only rank 0 logs it.
  n=$(found "$dir" "[0-9]+ Bytes -> Algo " 12)
  say "algorithm choices: $n"
  show <"$dir/.found"
  ALGO[$name]=$(grepl "$dir" "[0-9]+ Bytes -> Algo " | sed -nE 's/.*-> Algo ([A-Za-z0-9_]+) .*/\1/p' | sort | uniq -c |
    awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1}')
  COLLALGO[$name]=$(grepl "$dir" "[0-9]+ Bytes -> Algo ([Cc]oll[Nn]et(Chain|Direct)|COLLNET_(CHAIN|DIRECT)|2|3) " | wc -l)
  say "algorithms: ${ALGO[$name]:-none logged}; over CollNet: ${COLLALGO[$name]}"
  n=$(found "$dir" "NCCL WARN| WARN " 10)
  say "NCCL WARN lines: $n"
  show <"$dir/.found"
  RESULT[$name]=FAIL
  if [[ $rc0 -eq 0 && $rc1 -eq 0 ]] && [[ $(grep -l "RESULT PASS" "$dir"/rank*.out 2>/dev/null | wc -l) -eq 2 ]]; then
    RESULT[$name]=PASS
  fi
  local values="not all right"
  [[ ${RESULT[$name]} == PASS ]] && values=right
  say "phase $name: ${RESULT[$name]}: values $values, network AggdTcp used by both ranks: ${NETP[$name]}," \
    "CollNet connected on both: ${COLLP[$name]}, allreduces over CollNet: ${COLLALGO[$name]}"
}

for phase in $PHASES; do
  case $phase in
    collnet) run_phase collnet NCCL_ALGO=CollNetChain ;;
    tuned) run_phase tuned ;;
    netonly)
      if [[ ${RESULT[collnet]:-} == PASS && ${COLLP[collnet]:-} == yes ]]; then
        say "phase netonly: not needed (collnet passed)"
      else
        run_phase netonly NCCL_COLLNET_ENABLE=0
      fi
      ;;
    *) say "unknown phase $phase" ;;
  esac
done

# ---------------------------------------------------------------- comm_aggd's side, and the verdict
say "---- comm_aggd: $(wc -l <"$LOGS/comm_aggd.err") line(s) on stderr (group events, errors):"
head -n 20 "$LOGS/comm_aggd.err" | cut -c1-300 | show
ok=0
if [[ ${RESULT[collnet]:-} == PASS && ${COLLP[collnet]:-} == yes && ${COLLALGO[collnet]:-0} -gt 0 ]]; then
  ok=1
fi
tar -czf "$LOGS.tgz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")" 2>/dev/null && say "all logs also in $LOGS.tgz"
say "==== NCCL ${NCCL_VERSION:-?}:"
for phase in collnet tuned netonly; do
  [[ -n ${RESULT[$phase]:-} ]] || continue
  say "  $phase: ${RESULT[$phase]}, net AggdTcp ${NETP[$phase]}, CollNet ${COLLP[$phase]}, algorithms ${ALGO[$phase]:-none}"
done
if [[ $ok -eq 1 ]]; then
  say "PASS: NCCL ran allreduce over CollNet (aggd) and the AggdTcp network of $LIB"
  exit 0
fi
say "FAIL: see the lines above and $LOGS"
exit 1
