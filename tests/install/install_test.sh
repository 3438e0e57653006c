#!/usr/bin/env bash
# ctest install.consumer: install_test.sh BUILD_DIR
# Install libcomm into a scratch prefix and use it from outside the tree, as the README says:
#   1. the README's example (cut out of README.md, so the README's code is what is tested) built with
#      find_package(comm) against comm::comm and comm::comm_static, and with pkg-config: `pkg-config --libs comm`
#      and `pkg-config --static --libs comm` with libcomm.a; each run (4 forked ranks, every rank's sum checked);
#      the static ones must not need libcomm.so;
#   2. the prefix as an NCCL_HOME: include/nccl.h, lib/libnccl.so{,.2}, lib/pkgconfig/nccl.pc; an NCCL program on
#      host buffers built with comm::nccl and with `pkg-config nccl`, run on the drop-in;
#   3. where a CUDA toolkit is (CUDA_HOME, nvcc on the PATH, or /usr/local/cuda): a program that includes nccl.h
#      and calls cudaMalloc compiled and linked (nccl.h must bring in cuda_runtime.h), with CMake and with cc; run
#      where nvidia-smi lists a GPU (with a device-buffer allreduce when libcomm has its CUDA parts), else not run.
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
build_dir=$(cd "$1" && pwd)
src_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readme="$src_dir/../../README.md"
work=$(mktemp -d /tmp/comm_install.XXXXXX)
[[ "${INSTALL_TEST_KEEP:-0}" == 1 ]] || trap 'rm -rf "$work"' EXIT # INSTALL_TEST_KEEP=1 keeps it
prefix="$work/prefix"
t0=$SECONDS
step() { echo "install_test: [$((SECONDS - t0)) s] $*"; }
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }
# run LOG CMD...: run quietly, show the log when it fails.
run() {
  local log=$1
  shift
  "$@" > "$work/$log" 2>&1 || { cat "$work/$log" >&2; fail "$* (log above)"; }
}

run install.log cmake --install "$build_dir" --prefix "$prefix"
libdir=$(dirname "$(find "$prefix" -name libcomm.so -print -quit)")
for f in include/comm.h include/nccl.h "${libdir#"$prefix"/}/libnccl.so" "${libdir#"$prefix"/}/libnccl.so.2" \
  "${libdir#"$prefix"/}/libcomm.a" "${libdir#"$prefix"/}/pkgconfig/comm.pc" "${libdir#"$prefix"/}/pkgconfig/nccl.pc"; do
  [[ -e "$prefix/$f" ]] || fail "the install has no $f"
done
with_cuda=0
grep -q 'set(comm_WITH_CUDA ON)' "$libdir/cmake/comm/commConfig.cmake" && with_cuda=1
step "installed in $prefix (libcomm built with its CUDA parts: $with_cuda)"

# The README's example: the first C block after "## Example".
awk '/^## Example/ { on = 1 } on && /^```c$/ { code = 1; next } code && /^```$/ { exit } code { print }' "$readme" \
  > "$work/example.c"
grep -q commAllReduce "$work/example.c" || fail "no example program found in README.md's Example section"
# check_example NAME: run it; each of its 4 ranks prints "rank R: SUM (expected SUM)".
check_example() {
  local out
  out=$(LD_LIBRARY_PATH="$libdir" "$work/$1" 2> "$work/$1.err") || fail "$1 exited with $?: $out $(cat "$work/$1.err")"
  [[ $(grep -cE '^rank [0-3]: 10 \(expected 10\)$' <<< "$out") == 4 ]] || fail "$1: wrong output: $out $(cat "$work/$1.err")"
}
# static_only NAME: linked with libcomm.a: it must not need libcomm.so.
static_only() {
  ! readelf -d "$work/$1" | grep 'libcomm\.so' > /dev/null || fail "$1 needs libcomm.so: not linked statically"
}
# check_nccl_h DEPFILE NAME yes|no: NAME (its compiler's dependency file) was compiled against the installed
# nccl.h, which included cuda_runtime.h (yes) or did not (no).
check_nccl_h() {
  local used
  # shellcheck disable=SC1003
  used=$(tr -s ' \\' '\n' < "$1" | grep '/nccl\.h$' | head -n 1)
  [[ -n "$used" && "$(realpath "$used")" == "$(realpath "$prefix/include/nccl.h")" ]] ||
    fail "$2 was compiled against ${used:-no nccl.h}, not the installed $prefix/include/nccl.h"
  if grep -q 'cuda_runtime\.h' "$1"; then
    [[ $3 == yes ]] || fail "$2: nccl.h included cuda_runtime.h, with no CUDA include folder given"
  else
    [[ $3 == no ]] || fail "$2: the installed nccl.h did not include cuda_runtime.h"
  fi
}
# Whether the compiler finds CUDA's headers with no include folder given (some machines install them in
# /usr/local/include): then a host-only program's nccl.h includes them too, as NVIDIA's would.
default_cuda=no
printf '#include <cuda_runtime.h>\n' | cc -E -x c - > /dev/null 2>&1 && default_cuda=yes
# depfile TARGET: the dependency file CMake's compiler wrote for the consumer project's TARGET.
depfile() { find "$work/build" -path "*/$1.dir/*" -name '*.o.d' -print -quit; }

cuda_root=${CUDA_HOME:-${CUDA_PATH:-}}
if [[ -z "$cuda_root" ]] && command -v nvcc > /dev/null; then cuda_root=$(dirname "$(dirname "$(command -v nvcc)")"); fi
[[ -n "$cuda_root" ]] || cuda_root=/usr/local/cuda
[[ -f "$cuda_root/include/cuda_runtime.h" ]] || cuda_root=""
cmake_cuda=()
[[ -n "$cuda_root" ]] && cmake_cuda=(-DCUDAToolkit_ROOT="$cuda_root")

# 1 and 2 with CMake (and 3 where the consumer finds the CUDA toolkit).
run configure.log cmake -S "$src_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" -DEXAMPLE_C="$work/example.c" \
  ${cmake_cuda[@]+"${cmake_cuda[@]}"}
run build.log cmake --build "$work/build"
for p in example_shared example_static nccl_host; do cp "$work/build/$p" "$work/cmake_$p"; done
check_example cmake_example_shared
check_example cmake_example_static
static_only cmake_example_static
check_nccl_h "$(depfile nccl_host)" cmake_nccl_host "$default_cuda"
LD_LIBRARY_PATH="$libdir" "$work/cmake_nccl_host" > "$work/nccl_host.out" 2>&1 || fail "cmake_nccl_host: $(cat "$work/nccl_host.out")"
step "find_package(comm): the README example with comm::comm and comm::comm_static, and nccl_host with comm::nccl, built and ran"

# 1 and 2 with pkg-config.
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046
run cc.log cc -D_DEFAULT_SOURCE "$work/example.c" -o "$work/pc_example_shared" $(pkg-config --cflags --libs comm)
check_example pc_example_shared
# --static: every library libcomm.a needs; -lcomm as libcomm.a (the linker would take libcomm.so beside it).
static_libs=$(pkg-config --static --libs comm)
read -r -a static_flags <<< "$static_libs"
static_flags=("${static_flags[@]/#-lcomm/-l:libcomm.a}")
read -r -a comm_cflags <<< "$(pkg-config --cflags comm)"
run cc.log cc -D_DEFAULT_SOURCE "$work/example.c" -o "$work/pc_example_static" "${comm_cflags[@]}" "${static_flags[@]}"
check_example pc_example_static
static_only pc_example_static
read -r -a nccl_cflags <<< "$(pkg-config --cflags nccl)"
read -r -a nccl_libs <<< "$(pkg-config --libs nccl)"
run cc.log cc -MD -MF "$work/nccl_host.d" "$src_dir/nccl_host.c" -o "$work/pc_nccl_host" "${nccl_cflags[@]}" "${nccl_libs[@]}"
check_nccl_h "$work/nccl_host.d" pc_nccl_host "$default_cuda"
readelf -d "$work/pc_nccl_host" | grep 'libnccl\.so\.2' > /dev/null || fail "pc_nccl_host does not need libnccl.so.2"
[[ "$(LD_LIBRARY_PATH="$libdir" ldd "$work/pc_nccl_host" | awk '/libnccl/ { print $3 }')" == "$libdir/libnccl.so.2" ]] ||
  fail "pc_nccl_host does not load $libdir/libnccl.so.2"
LD_LIBRARY_PATH="$libdir" "$work/pc_nccl_host" > "$work/nccl_host.out" 2>&1 || fail "pc_nccl_host: $(cat "$work/nccl_host.out")"
step "pkg-config: the README example with comm and --static comm ($static_libs), nccl_host with nccl, built and ran"

# 3: nccl.h with the CUDA toolkit.
if [[ -z "$cuda_root" ]]; then
  step "no CUDA toolkit (CUDA_HOME, nvcc, /usr/local/cuda): nccl.h with CUDA's headers not checked"
  exit 0
fi
[[ -x "$work/build/nccl_cuda" ]] || fail "the consumer project found no CUDA toolkit in $cuda_root (configure.log: $(cat "$work/configure.log"))"
cuda_lib="$cuda_root/lib64"
[[ -d "$cuda_lib" ]] || cuda_lib="$cuda_root/targets/$(uname -m)-linux/lib"
# (NCCL_HOME's include folder first: a CUDA toolkit's include folder may hold NVIDIA's nccl.h.)
run cc.log cc -MD -MF "$work/nccl_cuda.d" "$src_dir/nccl_cuda.c" -o "$work/pc_nccl_cuda" "${nccl_cflags[@]}" \
  -I"$cuda_root/include" "${nccl_libs[@]}" -L"$cuda_lib" -lcudart -Wl,-rpath,"$cuda_lib"
check_nccl_h "$work/nccl_cuda.d" pc_nccl_cuda yes
check_nccl_h "$(depfile nccl_cuda)" cmake_nccl_cuda yes
step "nccl.h + cudaMalloc: built with CMake (comm::nccl, CUDA::cudart) and with cc (pkg-config nccl, -lcudart)"
ngpus=0
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then ngpus=$(nvidia-smi -L | grep -c '^GPU' || true); fi
if [[ "$ngpus" -eq 0 ]]; then
  step "nccl_cuda not run: nvidia-smi lists no GPU"
  exit 0
fi
mode=host
[[ "$with_cuda" == 1 ]] && mode=device
for p in "$work/build/nccl_cuda" "$work/pc_nccl_cuda"; do
  rc=0
  LD_LIBRARY_PATH="$libdir" "$p" "$mode" > "$work/nccl_cuda.out" 2>&1 || rc=$?
  [[ $rc == 0 ]] || fail "$p $mode exited with $rc on $ngpus GPU(s): $(cat "$work/nccl_cuda.out")"
done
step "nccl_cuda ran on $ngpus GPU(s): $(cat "$work/nccl_cuda.out")"
