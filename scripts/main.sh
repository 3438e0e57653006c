#!/usr/bin/env bash
# Install the dependencies, build libcomm (Release, in build/) and run allreduce_perf on local ranks: device
# buffers where there are GPUs, host buffers otherwise.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./scripts/install_deps.sh --build # the tests are not built here: no cmocka needed
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCOMM_BUILD_TESTS=OFF
cmake --build build -j"$jobs"

# Where GPUs are seen and the library was built with its CUDA executor (the CUDA toolkit was found),
# the main job runs on device buffers: ranks as threads of one process, one per GPU, and two sharing the
# GPU on a one-GPU machine (ranks sharing a GPU from separate processes take turns on it). Otherwise, or
# with COMM_MAIN_HOST=1, on host buffers of 2 local processes.
ngpus=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  ngpus=$(nvidia-smi -L | grep -c '^GPU' || true)
fi
if [[ "$ngpus" -gt 0 && "${COMM_MAIN_HOST:-0}" != 1 && -d build/CMakeFiles/comm_cuda_objs.dir ]]; then
  ranks=$((ngpus > 1 ? ngpus : 2))
  echo "main.sh: $ngpus GPU(s) found: device buffers, $ranks ranks as threads"
  exec env NCCL_NVLS_ENABLE=0 build/perf/allreduce_perf -M device -t "$ranks" -b 8 -e 64M -f 4
fi
echo "main.sh: host buffers, 2 local ranks ($ngpus GPU(s) seen)"
exec build/perf/allreduce_perf -M host -np 2 -b 8 -e 64M -f 4
