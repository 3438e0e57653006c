#!/usr/bin/env bash
# Install libcomm into a scratch prefix, then build a program against it twice, with find_package(comm) and
# with pkg-config, and run both: the installed headers, library, CMake package and .pc file all work.
set -euo pipefail
build_dir=$1
src_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d /tmp/comm_install.XXXXXX)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$src_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/build" > "$work/build.log"
libdir=$(dirname "$(find "$work/prefix" -name 'libcomm.so' | head -n 1)")
LD_LIBRARY_PATH="$libdir" "$work/build/consumer_cmake"
pcdir=$(dirname "$(find "$work/prefix" -name comm.pc | head -n 1)")
# shellcheck disable=SC2046
cc "$src_dir/consumer.c" -o "$work/consumer_pc" $(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs comm)
LD_LIBRARY_PATH="$libdir" "$work/consumer_pc"
echo "install_test: find_package(comm) and pkg-config consumers built and ran"
