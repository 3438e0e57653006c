#!/usr/bin/env bash
# nccl_tests_gpu.sh NCCL_HOME NCCL_TESTS_SRC [LOG_DIR]: NVIDIA's nccl-tests, built against libcomm's NCCL_HOME
# (`cmake --install` of a CUDA build: include/nccl.h, lib/libnccl.so -> the drop-in; the libraries libcomm needs
# that the machine lacks, such as hwloc, copied into its lib/), run on the GPU machine (issue 21).
#
# Builds nccl-tests (its own Makefile, MPI=1 where mpicc is found, sm_90 unless NVCC_GENCODE says otherwise)
# without changing a line of it, then runs
#   all_reduce_perf -b 8 -e 128M -f 2 -g 1                      (one process, one GPU)
#   mpirun -np 2 ... all_reduce_perf -b 8 -e 128M -f 2 -g 1     (two processes on GPU 0: NCCL_TESTS_DEVICE=0;
#                                                                libcomm lets ranks share a GPU)
#   mpirun -np 2 ... each other *_perf, -b 8 -e 8M -f 4 -g 1
# and checks every run's "# Out of bounds values : 0 OK" line and exit status. Logs and a summary in LOG_DIR
# (default $OUT/nccl_tests when $OUT is set, else ./nccl_tests-DATE). Exit 0: every run passed; 1: a build or
# run failed; 77: no GPU or no nvcc. SPDX-License-Identifier: Apache-2.0
set -uo pipefail
HOME_DIR=$(realpath "${1:?usage: nccl_tests_gpu.sh NCCL_HOME NCCL_TESTS_SRC [LOG_DIR]}")
SRC=$(realpath "${2:?nccl-tests source}")
if [[ $# -ge 3 ]]; then LOGS=$3; elif [[ -n ${OUT:-} ]]; then LOGS=$OUT/nccl_tests; else LOGS=$PWD/nccl_tests-$(date +%Y%m%d-%H%M%S); fi
mkdir -p "$LOGS" && LOGS=$(realpath "$LOGS")
SUM=$LOGS/summary.txt
: >"$SUM"
say() { echo "nccl_tests_gpu: $*" | tee -a "$SUM"; }
nvidia-smi -L >/dev/null 2>&1 || { say "SKIP: no GPU"; exit 77; }
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[[ -x $NVCC ]] || { say "SKIP: no nvcc"; exit 77; }
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
export LD_LIBRARY_PATH="$HOME_DIR/lib:${LD_LIBRARY_PATH:-}" NCCL_NVLS_ENABLE=0

mpi=0
mpiflags=()
if command -v mpicc >/dev/null 2>&1; then
  mpiInc=$(mpicc --showme:incdirs 2>/dev/null | awk '{print $1}')
  mpiLib=$(mpicc --showme:libdirs 2>/dev/null | awk '{print $1}')
  if [[ -n $mpiInc && -n $mpiLib ]]; then
    mpi=1
    # nccl-tests' Makefile takes MPI_HOME/include and MPI_HOME/lib: a folder with links to both
    mkdir -p "$LOGS/mpi_home"
    ln -sfn "$mpiInc" "$LOGS/mpi_home/include"
    ln -sfn "$mpiLib" "$LOGS/mpi_home/lib"
    mpiflags=(MPI=1 MPI_HOME="$LOGS/mpi_home")
  fi
fi
say "NCCL_HOME $HOME_DIR ($(ls "$HOME_DIR/lib" | grep -c nccl) libnccl files), nccl-tests $(grep -ho 'NCCL_TESTS_VERSION[^"]*"[^"]*"' "$SRC"/src/*.h 2>/dev/null | head -n 1), MPI $mpi, $($NVCC --version | tail -n 1)"

# nccl-tests compiles NCCL's device API code (nccl_device.h, C++ templates libcomm does not provide: its host
# calls return ncclInvalidUsage) when nccl.h says 2.28 or later. NVIDIA's headers of the same version as our
# nccl.h (PyTorch's NCCL wheel, else the toolkit's) are put on the include path alone, without their nccl.h,
# so that nccl.h is ours. NCCL_DEVICE_INCLUDE names another folder holding nccl_device.h.
ver=$(awk '/define NCCL_MAJOR/{a=$3}/define NCCL_MINOR/{b=$3}/define NCCL_PATCH/{c=$3}END{print a"."b"."c}' "$HOME_DIR/include/nccl.h")
devinc=${NCCL_DEVICE_INCLUDE:-}
if [[ -z $devinc ]]; then
  for d in $(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "include"))' 2>/dev/null) \
    "$CUDA_HOME/include"; do
    [[ -f $d/nccl_device.h && -f $d/nccl.h ]] || continue
    v=$(awk '/define NCCL_MAJOR/{a=$3}/define NCCL_MINOR/{b=$3}/define NCCL_PATCH/{c=$3}END{print a"."b"."c}' "$d/nccl.h")
    say "nccl_device.h of NCCL $v in $d (our nccl.h: $ver)"
    [[ $v == "$ver" ]] && { devinc=$d; break; }
  done
fi
extra=()
if [[ -n $devinc ]]; then
  mkdir -p "$LOGS/devinc"
  ln -sfn "$devinc/nccl_device.h" "$LOGS/devinc/nccl_device.h"
  ln -sfn "$devinc/nccl_device" "$LOGS/devinc/nccl_device"
  extra=(-I"$LOGS/devinc")
else
  say "no nccl_device.h of NCCL $ver found: the files that use NCCL's device API may not compile"
fi
BUILD=$LOGS/build
# Through NVCC_GENCODE, which nccl-tests puts in every compile and link line (its Makefile sets NVCUFLAGS and
# NVLDFLAGS itself): the device headers, and -rpath-link because libnccl.so (the drop-in) needs libcomm.so and
# what it needs (hwloc), all in NCCL_HOME/lib.
gencode="${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90} ${extra[*]} -Xlinker -rpath-link=$HOME_DIR/lib"
make -C "$SRC" -j"$(nproc)" NCCL_HOME="$HOME_DIR" CUDA_HOME="$CUDA_HOME" BUILDDIR="$BUILD" NVCC_GENCODE="$gencode" \
  "${mpiflags[@]}" >"$LOGS/build.log" 2>&1
rc=$?
if [[ $rc -ne 0 ]]; then
  say "FAIL: the nccl-tests build failed ($rc):"
  tail -n 20 "$LOGS/build.log" | tee -a "$SUM"
  exit 1
fi
say "built: $(ls "$BUILD"/*_perf | xargs -n 1 basename | tr '\n' ' ')"
ldd "$BUILD/all_reduce_perf" | grep -E "nccl|comm" | sed 's/^/    /' | tee -a "$SUM"

fails=0
# runone NAME CMD...: one run, its log, its verdict (exit status and the out-of-bounds line).
runone() {
  local name=$1
  shift
  timeout 300 "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  local oob avg
  oob=$(grep -h "Out of bounds values" "$LOGS/$name.log" | head -n 1)
  avg=$(grep -h "Avg bus bandwidth" "$LOGS/$name.log" | head -n 1)
  if [[ $rc -eq 0 && $oob == *"0 OK"* ]]; then
    say "PASS $name: ${avg:-no average line}"
  else
    say "FAIL $name: exit $rc, ${oob:-no out-of-bounds line}; the end of its log:"
    tail -n 12 "$LOGS/$name.log" | tee -a "$SUM"
    fails=$((fails + 1))
  fi
  grep -E "^ +[0-9]+ +[0-9]+ " "$LOGS/$name.log" | tail -n 3 | sed 's/^/    /' | tee -a "$SUM"
}

runone all_reduce.g1 "$BUILD/all_reduce_perf" -b 8 -e 128M -f 2 -g 1
if [[ $mpi -eq 1 ]]; then
  MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE
    -x NCCL_TESTS_DEVICE=0)
  runone all_reduce.np2 "${MPIRUN[@]}" "$BUILD/all_reduce_perf" -b 8 -e 128M -f 2 -g 1
  for t in all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter hypercube; do
    [[ -x $BUILD/${t}_perf ]] || continue
    runone "$t.np2" "${MPIRUN[@]}" "$BUILD/${t}_perf" -b 8 -e 8M -f 4 -g 1
  done
else
  say "no MPI: the multi-process forms were not run"
fi
[[ $fails -eq 0 ]] && say "PASS" || say "$fails run(s) failed"
[[ $fails -eq 0 ]]
