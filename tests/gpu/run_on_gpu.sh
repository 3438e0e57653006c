#!/usr/bin/env bash
# run_on_gpu.sh: the GPU suite in one go, for the GPU machine.
#
#   tests/gpu/run_on_gpu.sh build   [BUILD_DIR]   (here, with nvcc) configure and build the GPU parts in
#                                                 BUILD_DIR (default build-gpu/, RelWithDebInfo, sm_90) and
#                                                 copy the shared libraries they need into BUILD_DIR/lib,
#                                                 so the directory can be carried to a machine without them
#   tests/gpu/run_on_gpu.sh run     [BUILD_DIR]   (on the GPU machine) run every GPU test, each once plainly
#                                                 and once under compute-sanitizer memcheck, then the GPU
#                                                 benchmarks; logs and a summary under $OUT (or
#                                                 BUILD_DIR/gpu-logs); prints PASS / FAIL / SKIP per case
#
# With the device tool: `tests/gpu/run_on_gpu.sh build` here, then run `tests/gpu/run_on_gpu.sh run` there
# with carry ["build-gpu"]. Exit: 0 when nothing failed (skips included), 1 otherwise.
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
MODE=${1:-run}
BUILD=${2:-build-gpu}
# The GPU tests and benchmarks, as paths inside BUILD.
TESTS=(tests/test_gpu_reduce tests/test_gpu_comm_device)
BENCHES=("bench/gpu_launch_bench -n 10000 -r 9" "bench/gpu_reduce_bench -s 268435456 -r 9 -i 20")

case $MODE in
  build)
    command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]] || { echo "run_on_gpu: no nvcc"; exit 1; }
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOMM_WERROR=ON -DCOMM_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" >/dev/null || exit 1
    targets=()
    for t in "${TESTS[@]}" "${BENCHES[@]%% *}"; do targets+=(--target "$(basename "$t")"); done
    cmake --build "$BUILD" -j"$(nproc)" "${targets[@]}" || exit 1
    mkdir -p "$BUILD/lib"
    for t in "${TESTS[@]}" "${BENCHES[@]%% *}"; do
      ldd "$BUILD/$t" | awk '/=> \// {print $3}' | grep -E 'libcomm|hwloc|cmocka|udev' | xargs -r -I{} cp -L {} "$BUILD/lib/"
    done
    echo "run_on_gpu: built in $BUILD; carry it and run: tests/gpu/run_on_gpu.sh run $BUILD"
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
    for t in "${TESTS[@]}"; do
      name=$(basename "$t")
      "$BUILD/$t" > "$LOGS/$name.txt" 2>&1
      rc=$?
      case $rc in
        0) summary "PASS $name" ;;
        77) summary "SKIP $name (no GPU)" ;;
        *) summary "FAIL $name (exit $rc)"; fail=1 ;;
      esac
      if [[ $rc -eq 0 ]] && command -v compute-sanitizer >/dev/null 2>&1; then
        compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/$t" > "$LOGS/$name.memcheck.txt" 2>&1
        rc=$?
        if [[ $rc -eq 0 ]]; then summary "PASS $name under memcheck"; else summary "FAIL $name under memcheck (exit $rc)"; fail=1; fi
      fi
    done
    for b in "${BENCHES[@]}"; do
      name=$(basename "${b%% *}")
      # shellcheck disable=SC2086
      if "$BUILD/"$b > "$LOGS/$name.txt" 2>&1; then summary "RAN  $name"; else summary "FAIL $name"; fail=1; fi
    done
    echo "run_on_gpu: logs in $LOGS"
    exit $fail
    ;;
  *)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
