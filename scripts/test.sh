#!/usr/bin/env bash
# Install the dependencies, then build and run the whole test suite twice:
#   1. build-test/: warnings are errors (-DCOMM_WERROR=ON), every test;
#   2. build-asan/: AddressSanitizer + UndefinedBehaviorSanitizer (-DCOMM_SANITIZE=ON), every test but
#      those labelled "heavy" (8 ranks on one machine, the two-namespace run) to bound the time.
# A failed build stops the script; failing tests are reported and the other pass still runs; the exit
# status is non-zero if anything failed. Set COMM_TEST_SKIP_ASAN=1 to run only the first pass. Last, a
# ThreadSanitizer pass (build-tsan/) runs the watchdog test and the bootstrap's tests; COMM_TEST_TSAN=1 widens
# it to every test labelled "threads" (ranks as threads of one process: TSan does not follow forked runs). Between the two passes, the
# topology XML reader is fuzzed for FUZZ_SECONDS (default 60) with libFuzzer (scripts/fuzz_topo.sh; skip
# with COMM_TEST_SKIP_FUZZ=1). Before the build, scripts/check_layers.py checks that every layer includes only
# the layers below it (and after it that every object file calls only those: docs/ARCHITECTURE.md), and
# scripts/check_format.sh that the sources follow .clang-format.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./scripts/install_deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
# Multi-process tests oversubscribe small machines: run at most two test programs at once.
ctest_jobs=${COMM_TEST_JOBS:-2}

# The NCCL drop-in's ABI test compares compat/nccl/nccl.h with NVIDIA's own header: the CUDA toolkit's, else
# the NCCL release's, read from PyPI (scripts/fetch_nccl_header.py; without the network it is not built).
nccl_ref=()
if [[ ! -f /usr/local/cuda/include/nccl.h ]] && python3 scripts/fetch_nccl_header.py build-test/nccl-ref; then
  nccl_ref=(-DCOMM_NCCL_REF_H="$PWD/build-test/nccl-ref")
fi

failed=()
# The layer rule (docs/ARCHITECTURE.md's folder map): from the #include lines now, from the objects' symbols
# after the build.
echo "=== test.sh: layers ==="
python3 scripts/check_layers.py || failed+=("layers")
./scripts/check_format.sh || failed+=("format")

echo "=== test.sh: build-test (warnings as errors) ==="
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOMM_WERROR=ON ${nccl_ref[@]+"${nccl_ref[@]}"}
cmake --build build-test -j"$jobs"
python3 scripts/check_layers.py --objects build-test/CMakeFiles/comm_objs.dir || failed+=("layers (symbols)")
(cd build-test && ctest --output-on-failure -j"$ctest_jobs") || failed+=("build-test")

if [[ "${COMM_TEST_SKIP_FUZZ:-0}" != "1" ]]; then
  echo "=== test.sh: fuzz (topology XML reader, ${FUZZ_SECONDS:-60} s) ==="
  FUZZ_SECONDS=${FUZZ_SECONDS:-60} ./scripts/fuzz_topo.sh || failed+=("fuzz")
fi

if [[ "${COMM_TEST_SKIP_ASAN:-0}" == "1" ]]; then
  echo "=== test.sh: sanitizer pass skipped (COMM_TEST_SKIP_ASAN=1) ==="
  [[ ${#failed[@]} -eq 0 ]] || { echo "=== test.sh: FAILED in: ${failed[*]} ==="; exit 1; }
  exit 0
fi

echo "=== test.sh: build-asan (ASan + UBSan) ==="
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCOMM_WERROR=ON -DCOMM_SANITIZE=ON -DCOMM_BUILD_BENCH=OFF
cmake --build build-asan -j"$jobs"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
(cd build-asan && ctest --output-on-failure -j"$ctest_jobs" -LE heavy) || failed+=("build-asan")

# ThreadSanitizer: always the watchdog pattern and the bootstrap's threads (host code only, so the kernels
# are not built again); with COMM_TEST_TSAN=1 every test labelled "threads".
tsan_targets=(test_watchdog test_bootstrap test_bootstrap_auth test_bootstrap_fail)
tsan_select=(-R 'test_watchdog|unit.test_bootstrap')
if [[ "${COMM_TEST_TSAN:-0}" == "1" ]]; then
  tsan_targets=(all)
  tsan_select=(-L threads)
fi
echo "=== test.sh: build-tsan (ThreadSanitizer: ${tsan_select[*]}) ==="
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOMM_WERROR=ON -DCOMM_TSAN=ON -DCOMM_BUILD_BENCH=OFF \
  -DCOMM_CUDA=OFF
cmake --build build-tsan -j"$jobs" --target "${tsan_targets[@]}"
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:${TSAN_OPTIONS:-}" \
  ctest --output-on-failure -j"$ctest_jobs" "${tsan_select[@]}") || failed+=("build-tsan")
if [[ ${#failed[@]} -ne 0 ]]; then
  echo "=== test.sh: FAILED in: ${failed[*]} ==="
  exit 1
fi
echo "=== test.sh: all passes succeeded ==="
