#!/usr/bin/env bash
# Fuzz the topology XML readers and writers, libcomm's format and NCCL's (tests/fuzz/fuzz_topo_xml.c), with
# libFuzzer + ASan + UBSan. Builds build-fuzz/fuzz_topo_xml straight with clang (no CMake), seeds a corpus
# from tests/topo/*.xml (both formats) and runs for FUZZ_SECONDS (default 60). Exits non-zero when the fuzzer finds a crash, a leak, a timeout or a
# round-trip difference (the reproducer is left in build-fuzz/, named crash-*, leak-*, timeout-*).
#   FUZZ_SECONDS  run time (default 60)          FUZZ_JOBS   parallel fuzzing processes (default 1)
#   FUZZ_CC       compiler (default clang)       FUZZ_DIR    build and corpus folder (default build-fuzz)
#   FUZZ_MAX_LEN  largest input in bytes (default 8192)
# Re-run one input: build-fuzz/fuzz_topo_xml build-fuzz/crash-<sha1>
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cc=${FUZZ_CC:-clang}
dir=${FUZZ_DIR:-build-fuzz}
seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
maxlen=${FUZZ_MAX_LEN:-8192}

if ! command -v "$cc" >/dev/null 2>&1; then
  echo "fuzz_topo.sh: $cc not found; install clang (apt-get install clang)" >&2
  exit 1
fi
mkdir -p "$dir/corpus"
if ! printf 'int LLVMFuzzerTestOneInput(const char* d, unsigned long n) { (void)d; (void)n; return 0; }\n' |
  "$cc" -fsanitize=fuzzer -x c - -o "$dir/probe" >/dev/null 2>&1; then
  echo "fuzz_topo.sh: $cc cannot link -fsanitize=fuzzer (libFuzzer missing: apt-get install libclang-rt-dev" \
    "or the libclang-common-N-dev of your clang)" >&2
  exit 1
fi
rm -f "$dir/probe"

# The reader, the graph it builds and the core files those need.
srcs=(tests/fuzz/fuzz_topo_xml.c src/topo/xml.c src/topo/xml_attr.c src/topo/xml_lex.c src/topo/xml_write.c
  src/topo/nccl_xml.c src/topo/nccl_xml_map.c src/topo/nccl_xml_write.c src/topo/topo_file.c src/topo/graph.c
  src/topo/paths.c src/base/debug.c src/base/utils.c src/base/param.c)
echo "fuzz_topo.sh: building $dir/fuzz_topo_xml"
"$cc" -g -O1 -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Werror -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Iinclude -Isrc/base -Isrc/topo \
  "${srcs[@]}" -o "$dir/fuzz_topo_xml" -lm -lpthread

cp tests/topo/*.xml "$dir/corpus/"
export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
echo "fuzz_topo.sh: fuzzing for ${seconds}s (${jobs} job(s), inputs up to ${maxlen} bytes)"
args=(-max_total_time="$seconds" -max_len="$maxlen" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
  -dict=tests/fuzz/topo_xml.dict -artifact_prefix="$dir/" "$dir/corpus")
status=0
if [[ "$jobs" -gt 1 ]]; then
  "$dir/fuzz_topo_xml" -fork="$jobs" "${args[@]}" || status=$?
else
  "$dir/fuzz_topo_xml" "${args[@]}" || status=$?
fi
if [[ $status -ne 0 ]]; then
  echo "fuzz_topo.sh: FAILED (exit $status); reproducers:" >&2
  ls -1 "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-* >&2 2>/dev/null || true
  exit 1
fi
echo "fuzz_topo.sh: no crash in ${seconds}s"
