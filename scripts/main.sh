#!/usr/bin/env bash
# Install the dependencies, build libcomm (Release, in build/; its CUDA parts only where there are GPUs) and run
# allreduce_perf on local ranks: device buffers where there are GPUs, host buffers otherwise.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./scripts/install_deps.sh --build # the tests are not built here: no cmocka needed
jobs=$(nproc 2>/dev/null || echo 2)

# The CUDA parts (the device executor's kernels: most of the build's time) are built only where nvidia-smi
# sees GPUs, and there only when the CUDA toolkit is found; COMM_MAIN_CUDA=1 builds them anyway (where the
# toolkit is), COMM_MAIN_CUDA=0 never. scripts/test.sh always builds them where the toolkit is.
ngpus=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  ngpus=$(nvidia-smi -L | grep -c '^GPU' || true)
fi
cuda=OFF
[[ "$ngpus" -gt 0 ]] && cuda=ON
case "${COMM_MAIN_CUDA:-}" in
  1) cuda=ON ;;
  0) cuda=OFF ;;
esac
echo "main.sh: $ngpus GPU(s) seen: CUDA parts $cuda (COMM_MAIN_CUDA=1 builds them, =0 leaves them out)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCOMM_BUILD_TESTS=OFF -DCOMM_CUDA="$cuda"
cmake --build build -j"$jobs"

# Where GPUs are seen and the library was built with its CUDA executor (the CUDA toolkit was found),
# the main job runs on device buffers: ranks as threads of one process, one per GPU, and two sharing the
# GPU on a one-GPU machine (ranks sharing a GPU from separate processes take turns on it). Otherwise, or
# with COMM_MAIN_HOST=1, on host buffers of 2 local processes.
built_cuda=0 # (the build has a target comm_cuda_objs only where it builds the CUDA parts)
cmake --build build --target help 2>/dev/null | grep comm_cuda_objs >/dev/null && built_cuda=1
if [[ "$ngpus" -gt 0 && "${COMM_MAIN_HOST:-0}" != 1 && "$built_cuda" == 1 ]]; then
  ranks=$((ngpus > 1 ? ngpus : 2))
  echo "main.sh: $ngpus GPU(s) found: device buffers, $ranks ranks as threads"
  exec env NCCL_NVLS_ENABLE=0 build/perf/allreduce_perf -M device -t "$ranks" -b 8 -e 64M -f 4
fi
echo "main.sh: host buffers, 2 local ranks ($ngpus GPU(s) seen)"
exec build/perf/allreduce_perf -M host -np 2 -b 8 -e 64M -f 4
