#!/usr/bin/env bash
# Install what building and testing libcomm needs (Debian/Ubuntu). Idempotent: a dependency that is already
# usable (found as a command, a pkg-config module or a header, whether apt installed it or not) is left
# alone, and apt is not run at all when nothing is missing.
#   (no option)  build + tests: build-essential cmake pkg-config libhwloc-dev libcmocka-dev iproute2 clang
#                libclang-rt-dev (libFuzzer for the topology parser's fuzz run) libibverbs-dev (the IB
#                transport's header: it and its tests, which run over an in-process fake device, build with it)
#                python3 ca-certificates (scripts/fetch_nccl_header.py: NVIDIA's nccl.h for the drop-in's ABI
#                test where no CUDA toolkit has it) clang-format (scripts/check_format.sh: the tree follows
#                .clang-format)
#   --build      only what the library and the perf tools need (no cmocka, no iproute2)
#   --bench      also the peers the benchmarks compare against (openmpi-bin libopenmpi-dev libgloo-dev)
set -euo pipefail

build=(build-essential cmake pkg-config libhwloc-dev)
tests=(libcmocka-dev iproute2 clang libclang-rt-dev libibverbs-dev python3 ca-certificates clang-format)
bench=()
for arg in "$@"; do
  case "$arg" in
    --build) tests=() ;;
    --bench) bench=(openmpi-bin libopenmpi-dev libgloo-dev) ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "install_deps.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
want=("${build[@]}" "${tests[@]}" "${bench[@]}")

# Is the dependency usable? (A pip-installed cmake or a hand-built hwloc counts.)
usable() {
  case "$1" in
    build-essential) command -v cc && command -v c++ && command -v make ;;
    cmake) command -v cmake ;;
    pkg-config) command -v pkg-config ;;
    libhwloc-dev) command -v pkg-config && pkg-config --exists hwloc ;;
    libcmocka-dev)
      command -v cc && printf '#include <stdarg.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <setjmp.h>\n#include <cmocka.h>\n' |
        cc -E -x c - ;;
    iproute2) command -v ip ;;
    clang) command -v clang ;;
    clang-format) command -v clang-format ;;
    libclang-rt-dev)  # libFuzzer, for scripts/fuzz_topo.sh
      command -v clang && printf 'int LLVMFuzzerTestOneInput(const char*d,unsigned long n){(void)d;(void)n;return 0;}\n' |
        clang -fsanitize=fuzzer -x c - -o /dev/null ;;
    libibverbs-dev)  # only the header: libcomm loads libibverbs.so.1 at run time
      command -v cc && printf '#include <infiniband/verbs.h>\n' | cc -E -x c - ;;
    python3) command -v python3 ;;
    ca-certificates) [[ -s /etc/ssl/certs/ca-certificates.crt ]] ;;
    openmpi-bin) command -v mpirun ;;
    libopenmpi-dev) command -v mpicc ;;
    libgloo-dev) command -v c++ && printf '#include <gloo/allreduce.h>\n' | c++ -std=c++17 -E -x c++ - ;;
    *) [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]] ;;
  esac
}

missing=()
for p in "${want[@]}"; do
  usable "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps.sh: all dependencies present (${want[*]})"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_deps.sh: missing ${missing[*]} and apt-get is not available; install them by hand" >&2
  exit 1
fi
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install_deps.sh: missing ${missing[*]}; run as root (or install sudo)" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
echo "install_deps.sh: installing ${missing[*]}"
# Refresh the package lists once, only when they are absent or the install cannot resolve a package.
if ! compgen -G "/var/lib/apt/lists/*_Packages" >/dev/null; then
  "${SUDO[@]}" apt-get update -q
fi
if ! "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"; then
  "${SUDO[@]}" apt-get update -q
  "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
