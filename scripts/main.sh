#!/usr/bin/env bash
# Install the dependencies, build libcomm (Release, in build/) and run allreduce_perf on 2 host-buffer
# ranks of this machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./scripts/install_deps.sh --build # the tests are not built here: no cmocka needed
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCOMM_BUILD_TESTS=OFF
cmake --build build -j"$jobs"

# Device buffers arrive with the CUDA executor; until then the library refuses them (commInvalidUsage), so
# the main job runs on host buffers everywhere. COMM_MAIN_DEVICE=1 tries device buffers anyway.
ngpus=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  ngpus=$(nvidia-smi -L | grep -c '^GPU' || true)
fi
if [[ "$ngpus" -gt 0 && "${COMM_MAIN_DEVICE:-0}" == 1 ]]; then
  echo "main.sh: $ngpus GPU(s) found: device buffers, one rank per GPU"
  exec build/perf/allreduce_perf -m device -np "$ngpus" -b 8 -e 64M -f 4
fi
echo "main.sh: host buffers, 2 local ranks ($ngpus GPU(s) seen; device buffers need the CUDA executor)"
exec build/perf/allreduce_perf -np 2 -b 8 -e 64M -f 4
