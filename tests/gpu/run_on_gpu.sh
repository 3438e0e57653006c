#!/usr/bin/env bash
# run_on_gpu.sh: the GPU suite in one go, for the GPU machine.
#
#   tests/gpu/run_on_gpu.sh build   [BUILD_DIR]   (here, with nvcc) configure and build the GPU parts in
#                                                 BUILD_DIR (default build-gpu/, RelWithDebInfo, sm_90) and
#                                                 copy the shared libraries they need into BUILD_DIR/lib;
#                                                 the binaries and libraries alone go to BUILD_DIR-carry,
#                                                 small enough to carry to a machine without them
#   tests/gpu/run_on_gpu.sh run     [BUILD_DIR]   (on the GPU machine) run every GPU test, each once plainly
#                                                 and a representative subset under compute-sanitizer
#                                                 memcheck and racecheck, then the GPU benchmarks and perf
#                                                 on device buffers; logs and a summary in BUILD_DIR/gpu-logs
#                                                 (and, when $OUT is set, summary.txt and gpu-logs.tgz there);
#                                                 prints PASS / FAIL / SKIP per case
#                                                 with its seconds. GPU_CASES=regex runs only the cases
#                                                 (tests, sanitized tests, benchmarks) whose command matches;
#                                                 GPU_CASE_LIMIT=seconds caps each case (default 900, 600)
#
# Cases with -g G put rank r on GPU r % G: one rank per GPU on 2, 4 and 8 GPUs, as threads of one process and
# as one process per GPU (-p), P2P over NVLink where the GPUs have it; they skip where fewer GPUs exist.
# bench/nccl_compare.sh runs NCCL (from the machine's PyTorch install) and libcomm side by side on all GPUs.
#
# With the device tool: `tests/gpu/run_on_gpu.sh build` here, then run `tests/gpu/run_on_gpu.sh run
# build-gpu-carry` there with carry ["build-gpu-carry"]. Exit: 0 when nothing failed (skips included), 1 otherwise.
# A case that exits 77 counts as a skip only for an absence its log names: where nvidia-smi lists GPUs, only
# "N CUDA devices, M asked for" (fewer GPUs than the case needs) or no torch (torch_dropin.sh); a case that
# skips for "no CUDA device" there is a FAIL (a broken driver, or GPUs the CUDA runtime cannot see).
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
MODE=${1:-run}
BUILD=${2:-build-gpu}
# The GPU tests and benchmarks, as commands inside BUILD (the name of a case: the command with its arguments).
# A case may start with VAR=value settings for its environment.
TESTS=("tests/test_gpu_reduce" "tests/test_gpu_comm_device" "tests/test_gpu_coll -n 1,2,4,8"
       "tests/test_gpu_coll -q -p 2" "COMM_DEV_LL_MAX=1048576 tests/test_gpu_coll -n 2,8"
       "tests/test_gpu_coll -g 2 -n 2" "tests/test_gpu_coll -g 4 -n 4" "tests/test_gpu_coll -g 8 -n 8"
       "tests/test_gpu_coll -g 2 -p 2" "tests/test_gpu_coll -q -g 4 -p 4" "tests/test_gpu_coll -q -g 8 -p 8"
       "COMM_DEV_LL_MAX=1048576 tests/test_gpu_coll -q -g 8 -n 8"
       "COMM_DEV_LL_MAX=1048576 tests/test_gpu_coll -g 4 -n 4" "COMM_DEV_LL_MAX=4096 tests/test_gpu_comm_device"
       "COMM_DEV_LL_MAX=4096 COMM_DEV_LL_BATCH=0 tests/test_gpu_coll -q -g 4 -n 4"
       "tests/gpu/torch_dropin.sh 2" "CUDA_VISIBLE_DEVICES=0 tests/gpu/torch_dropin.sh 2"
       "tests/test_gpu_coll -q -p 2 -H" "tests/test_gpu_coll -p 4 -H" "COMM_P2P_DISABLE=1 tests/test_gpu_coll -q -p 2"
       "COMM_P2P_DISABLE=1 tests/test_gpu_coll -q -n 2,4" "tests/test_gpu_coll -q -g 2 -p 2 -H"
       "tests/gpu/net_gdr_fake.sh" "COMM_DEV_LL_BATCH=1 tests/test_gpu_coll -q -n 2,4"
       "COMM_P2P_DISABLE=1 COMM_DEV_LL_MAX=1048576 tests/test_gpu_coll -q -n 2,8" "tests/test_gpu_mismatch"
       "tests/gpu/collnet_gpu.sh" "tests/gpu/aggd_nccl.sh")
# compute-sanitizer runs on a representative subset: memcheck on these, racecheck (shared memory) too. It
# runs the kernels of one process one at a time, so ranks that wait on each other are processes here.
SANITIZED=("tests/test_gpu_coll -q -n 1" "tests/test_gpu_coll -q -p 2")
BENCHES=("bench/gpu_launch_bench -n 10000 -r 9" "bench/gpu_reduce_bench -s 268435456 -r 9 -i 20"
         "bench/gpu_coll_bench -r 7 -n 2000"
         "perf/allreduce_perf -M device -t 2 -b 8 -e 256M -f 4 -w 5 -n 20"
         "perf/allreduce_perf -M device -t 2 -b 8 -e 64K -f 8 -w 5 -n 200 -G 10"
         "perf/allreduce_perf -M device -t 8 -b 1M -e 1G -f 8 -w 2 -n 5"
         "bench/nccl_compare.sh -r 3" "bench/net_device_compare.sh 2"
         "TC_NP=@NGPUS@ TC_MAX=1G bench/tuner_check.sh 3 -- -M device"
         "TC_NP=@NGPUS@ TC_MAX=1G TC_COLL=allgather bench/tuner_check.sh 3 -- -M device")
# A case whose command is a script of the source tree (bench/*.sh) runs from here with BUILD as its first
# argument; every other command is a binary under BUILD. @NGPUS@ stands for the number of GPUs there.
SCRIPT_BINS=("bench/nccl_compare" "perf/allreduce_perf" "perf/allgather_perf" "tools/aggd/comm_aggd") # what those scripts run
# target:file, for tests/gpu/torch_dropin.sh and tests/gpu/net_gdr_fake.sh
SCRIPT_LIBS=("nccl_compat:compat/nccl/libnccl.so.2" "nccl_net_example:tests/libnccl-net-example.so"
             "comm_verbs_fake:tests/libcomm-verbs-fake.so" "nccl_collnet_example:tests/libnccl-collnet-example.so"
             "comm_collnet_aggd:libcomm-collnet-aggd.so")

case $MODE in
  build)
    command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]] || { echo "run_on_gpu: no nvcc"; exit 1; }
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOMM_WERROR=ON -DCOMM_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" >/dev/null || exit 1
    targets=()
    binOf() { local w; for w in $1; do [[ $w == *=* ]] || { echo "$w"; return; }; done; }
    bins=()
    for t in "${TESTS[@]}" "${BENCHES[@]}"; do
      t=$(binOf "$t")
      [[ $t == *.sh ]] || bins+=("$t")
    done
    known=$(cmake --build "$BUILD" --target help | awk '{print $2}')
    for t in "${SCRIPT_BINS[@]}"; do # built where their CMake target exists
      grep -qx "$(basename "$t")" <<< "$known" && bins+=("$t") || echo "run_on_gpu: no target for $t: not built"
    done
    for t in "${bins[@]}"; do targets+=(--target "$(basename "$t")"); done
    for t in "${SCRIPT_LIBS[@]}"; do
      grep -qx "${t%%:*}" <<< "$known" && targets+=(--target "${t%%:*}") && bins+=("${t#*:}")
    done
    cmake --build "$BUILD" -j"$(nproc)" "${targets[@]}" || exit 1
    mkdir -p "$BUILD/lib"
    for t in "${bins[@]}"; do
      ldd "$BUILD/$t" | awk '/=> \// {print $3}' | grep -E 'libcomm|hwloc|cmocka|udev' | xargs -r -I{} cp -L {} "$BUILD/lib/"
    done
    # What the GPU machine needs, without the objects: the binaries and libraries under $BUILD-carry.
    rm -rf "$BUILD-carry" && mkdir -p "$BUILD-carry" && cp -r "$BUILD/lib" "$BUILD-carry/"
    for t in "${bins[@]}"; do
      mkdir -p "$BUILD-carry/$(dirname "$t")" && cp "$BUILD/$t" "$BUILD-carry/$t"
    done
    echo "run_on_gpu: built in $BUILD; carry $BUILD-carry and run: tests/gpu/run_on_gpu.sh run $BUILD-carry"
    ;;
  run)
    [[ -d $BUILD ]] || { echo "run_on_gpu: no $BUILD (build it first: tests/gpu/run_on_gpu.sh build)"; exit 1; }
    LOGS=$BUILD/gpu-logs
    rm -rf "$LOGS" && mkdir -p "$LOGS" && LOGS=$(cd "$LOGS" && pwd)
    export LD_LIBRARY_PATH="$PWD/$BUILD/lib:${LD_LIBRARY_PATH:-}" NCCL_NVLS_ENABLE=0
    cd "$LOGS" || exit 1 # tests write their own logs in the current directory
    BUILD=$OLDPWD/$BUILD
    SRC=$OLDPWD
    { nvidia-smi; nvidia-smi topo -m; } > "$LOGS/nvidia-smi.txt" 2>&1
    SMI_GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU') # 0 without nvidia-smi
    NGPUS=$SMI_GPUS && [[ $NGPUS -ge 1 ]] || NGPUS=1
    fail=0
    # skipStands: after a case exited 77, set why to its SKIP line; true when the skip is for a named absence
    # this machine really has (see the header), false when it must count as a failure.
    skipStands() {
      why=$(grep -m 1 -E 'SKIP|no CUDA device' "$LOGS/$name.txt")
      [[ -n $why ]] || why="exit 77 without a SKIP line"
      [[ $SMI_GPUS -eq 0 ]] && return 0
      grep -qE 'SKIP \([1-9][0-9]* CUDA devices, [0-9]+ asked for\)' <<< "$why" && return 0
      grep -qE 'SKIP \(torch is (not installed|built without CUDA)\)' <<< "$why" && return 0
      why="$why; but nvidia-smi lists $SMI_GPUS GPU(s)"
      return 1
    }
    summary() { echo "$1" | tee -a "$LOGS/summary.txt" ${OUT:+"$OUT/summary.txt"}; } # $OUT's copy survives a kill
    : > "$LOGS/summary.txt"
    if [[ -n ${OUT:-} ]]; then : > "$OUT/summary.txt"; fi
    caseName() { echo "$1" | sed 's|[^ ]*/||g' | tr ' ,=' '_.-' | tr -s '_'; }
    # runCase LIMIT_S PREFIX CASE: run one case (VAR=value words first, then the command and its arguments),
    # PREFIX (a sanitizer command line, or nothing) in front of the command; its output to $LOGS/<name>.txt.
    # Sets rc and secs.
    runCase() {
      local limit=$1 prefix=$2 cmd=${3//@NGPUS@/$NGPUS} envs=() t0
      while [[ ${cmd%% *} == *=* ]]; do envs+=("${cmd%% *}") && cmd=${cmd#* }; done
      local bin=${cmd%% *} args=
      [[ $cmd == *" "* ]] && args=${cmd#* }
      if [[ $bin == *.sh ]]; then bin="$SRC/$bin $BUILD"; else bin="$BUILD/$bin"; fi
      t0=$(date +%s)
      # shellcheck disable=SC2086
      env "${envs[@]}" TMPDIR="$LOGS" timeout "$limit" $prefix $bin $args > "$LOGS/$name.txt" 2>&1
      rc=$?
      secs=$(($(date +%s) - t0))
    }
    selected() { [[ -z ${GPU_CASES:-} ]] || [[ $1 =~ $GPU_CASES ]]; }
    for t in "${TESTS[@]}"; do
      selected "$t" || continue
      name=$(caseName "$t")
      runCase "${GPU_CASE_LIMIT:-900}" "" "$t"
      case $rc in
        0) summary "PASS $t (${secs} s)" ;;
        77) if skipStands; then summary "SKIP $t ($why)"; else summary "FAIL $t (skipped: $why)"; fail=1; fi ;;
        *) summary "FAIL $t (exit $rc, ${secs} s)"; fail=1 ;;
      esac
    done
    if command -v compute-sanitizer >/dev/null 2>&1; then
      for t in "${SANITIZED[@]}"; do
        for tool in memcheck racecheck; do
          selected "$t $tool" || continue
          name=$(caseName "$t").$tool
          runCase 900 "compute-sanitizer --tool $tool --target-processes all --error-exitcode 3" "$t"
          if [[ $rc -eq 0 ]]; then summary "PASS $t under $tool (${secs} s)"; else summary "FAIL $t under $tool (exit $rc)"; fail=1; fi
        done
      done
    else
      summary "SKIP compute-sanitizer (not installed)"
    fi
    for b in "${BENCHES[@]}"; do
      selected "$b" || continue
      name=$(caseName "$b")
      runCase "${GPU_CASE_LIMIT:-600}" "" "$b"
      case $rc in
        0) summary "RAN  $b (${secs} s)" ;;
        77) if skipStands; then summary "SKIP $b ($why)"; else summary "FAIL $b (skipped: $why)"; fail=1; fi ;;
        *) summary "FAIL $b (exit $rc)"; fail=1 ;;
      esac
    done
    if [[ -n ${OUT:-} ]]; then # the device tool brings back few files: the summary and one archive
      tar czf "$OUT/gpu-logs.tgz" -C "$LOGS" .
      echo "run_on_gpu: logs in $LOGS and \$OUT/gpu-logs.tgz"
    else
      echo "run_on_gpu: logs in $LOGS"
    fi
    exit $fail
    ;;
  *)
    sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
