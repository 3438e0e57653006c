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
#                                                 on device buffers; logs and a summary under $OUT (or
#                                                 BUILD_DIR/gpu-logs); prints PASS / FAIL / SKIP per case
#
# With the device tool: `tests/gpu/run_on_gpu.sh build` here, then run `tests/gpu/run_on_gpu.sh run
# build-gpu-carry` there with carry ["build-gpu-carry"]. Exit: 0 when nothing failed (skips included), 1 otherwise.
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
MODE=${1:-run}
BUILD=${2:-build-gpu}
# The GPU tests and benchmarks, as commands inside BUILD (the name of a case: the command with its arguments).
# A case may start with VAR=value settings for its environment.
TESTS=("tests/test_gpu_reduce" "tests/test_gpu_comm_device" "tests/test_gpu_coll -n 1,2,4,8"
       "tests/test_gpu_coll -p" "COMM_DEV_LL_MAX=1048576 tests/test_gpu_coll -n 2,8")
# compute-sanitizer runs on a representative subset: memcheck on these, racecheck (shared memory) too. It
# runs the kernels of one process one at a time, so ranks that wait on each other are processes here.
SANITIZED=("tests/test_gpu_coll -q -n 1" "tests/test_gpu_coll -q -p")
BENCHES=("bench/gpu_launch_bench -n 10000 -r 9" "bench/gpu_reduce_bench -s 268435456 -r 9 -i 20"
         "bench/gpu_coll_bench -r 7 -n 2000"
         "perf/allreduce_perf -M device -t 2 -b 8 -e 256M -f 4 -w 5 -n 20"
         "perf/allreduce_perf -M device -t 2 -b 8 -e 64K -f 8 -w 5 -n 200 -G 10"
         "perf/allreduce_perf -M device -t 8 -b 1M -e 1G -f 8 -w 2 -n 5")

case $MODE in
  build)
    command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]] || { echo "run_on_gpu: no nvcc"; exit 1; }
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOMM_WERROR=ON -DCOMM_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" >/dev/null || exit 1
    targets=()
    binOf() { local w; for w in $1; do [[ $w == *=* ]] || { echo "$w"; return; }; done; }
    for t in "${TESTS[@]}" "${BENCHES[@]}"; do targets+=(--target "$(basename "$(binOf "$t")")"); done
    cmake --build "$BUILD" -j"$(nproc)" "${targets[@]}" || exit 1
    mkdir -p "$BUILD/lib"
    for t in "${TESTS[@]}" "${BENCHES[@]}"; do
      t=$(binOf "$t")
      ldd "$BUILD/$t" | awk '/=> \// {print $3}' | grep -E 'libcomm|hwloc|cmocka|udev' | xargs -r -I{} cp -L {} "$BUILD/lib/"
    done
    # What the GPU machine needs, without the objects: the binaries and libraries under $BUILD-carry.
    rm -rf "$BUILD-carry" && mkdir -p "$BUILD-carry" && cp -r "$BUILD/lib" "$BUILD-carry/"
    for t in "${TESTS[@]}" "${BENCHES[@]}"; do
      t=$(binOf "$t")
      mkdir -p "$BUILD-carry/$(dirname "$t")" && cp "$BUILD/$t" "$BUILD-carry/$t"
    done
    echo "run_on_gpu: built in $BUILD; carry $BUILD-carry and run: tests/gpu/run_on_gpu.sh run $BUILD-carry"
    ;;
  run)
    [[ -d $BUILD ]] || { echo "run_on_gpu: no $BUILD (build it first: tests/gpu/run_on_gpu.sh build)"; exit 1; }
    LOGS=${OUT:-$BUILD/gpu-logs}
    mkdir -p "$LOGS" && LOGS=$(cd "$LOGS" && pwd)
    export LD_LIBRARY_PATH="$PWD/$BUILD/lib:${LD_LIBRARY_PATH:-}" NCCL_NVLS_ENABLE=0
    cd "$LOGS" || exit 1 # tests write their own logs in the current directory
    BUILD=$OLDPWD/$BUILD
    nvidia-smi > "$LOGS/nvidia-smi.txt" 2>&1
    fail=0
    summary() { echo "$1" | tee -a "$LOGS/summary.txt"; }
    : > "$LOGS/summary.txt"
    caseName() { echo "$1" | sed 's|[^ ]*/||g' | tr ' ,=' '_.-' | tr -s '_'; }
    for t in "${TESTS[@]}"; do
      name=$(caseName "$t")
      envs=() && cmd=$t
      while [[ ${cmd%% *} == *=* ]]; do envs+=("${cmd%% *}") && cmd=${cmd#* }; done
      # shellcheck disable=SC2086
      env "${envs[@]}" timeout 900 "$BUILD/"$cmd > "$LOGS/$name.txt" 2>&1
      rc=$?
      case $rc in
        0) summary "PASS $t" ;;
        77) summary "SKIP $t (no GPU)" ;;
        *) summary "FAIL $t (exit $rc)"; fail=1 ;;
      esac
    done
    if command -v compute-sanitizer >/dev/null 2>&1; then
      for t in "${SANITIZED[@]}"; do
        for tool in memcheck racecheck; do
          name=$(caseName "$t").$tool
          # shellcheck disable=SC2086
          timeout 900 compute-sanitizer --tool $tool --target-processes all --error-exitcode 3 "$BUILD/"$t > "$LOGS/$name.txt" 2>&1
          rc=$?
          if [[ $rc -eq 0 ]]; then summary "PASS $t under $tool"; else summary "FAIL $t under $tool (exit $rc)"; fail=1; fi
        done
      done
    else
      summary "SKIP compute-sanitizer (not installed)"
    fi
    for b in "${BENCHES[@]}"; do
      name=$(caseName "$b")
      # shellcheck disable=SC2086
      timeout 600 "$BUILD/"$b > "$LOGS/$name.txt" 2>&1
      case $? in
        0) summary "RAN  $b" ;;
        77) summary "SKIP $b (no GPU)" ;;
        *) summary "FAIL $b"; fail=1 ;;
      esac
    done
    echo "run_on_gpu: logs in $LOGS"
    exit $fail
    ;;
  *)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
