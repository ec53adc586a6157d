#!/usr/bin/env bash
# Proves that headroom installs as a CMake package: installs the build in BUILD_DIR
# into a fresh prefix under WORK_DIR, configures and builds examples/consumer (its
# own project, find_package(headroom)) against that prefix alone, and runs it.
#
#   scripts/check_install.sh [--headers] [BUILD_DIR [WORK_DIR]]
#
# BUILD_DIR defaults to build, WORK_DIR to BUILD_DIR/install-check. --headers also
# compiles every installed header on its own (a few minutes on 2 cores).
#
# CTest runs it as the test install_consumer (tests/CMakeLists.txt).
set -euo pipefail
headers=OFF
if [ "${1:-}" = "--headers" ]; then
  headers=ON
  shift
fi
source_dir="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="$(cd "${1:-$source_dir/build}" && pwd)"
work_dir="${2:-$build_dir/install-check}"

# The consumer is built with the compiler, generator and build type of the build.
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build_dir/CMakeCache.txt"; }
compiler="$(cache_value CMAKE_CXX_COMPILER)"
generator="$(cache_value CMAKE_GENERATOR)"
build_type="$(cache_value CMAKE_BUILD_TYPE)"
launcher="$(cache_value CMAKE_CXX_COMPILER_LAUNCHER)"

rm -rf "$work_dir"
mkdir -p "$work_dir"
prefix="$work_dir/prefix"
echo "check_install: installing $build_dir into $prefix"
cmake --install "$build_dir" --prefix "$prefix" >"$work_dir/install.log" || { cat "$work_dir/install.log"; exit 1; }

# Only the prefix: the consumer must not find headroom's source or build tree.
cmake -S "$source_dir/examples/consumer" -B "$work_dir/consumer" -G "$generator" \
  -DCMAKE_CXX_COMPILER="$compiler" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" -DCMAKE_BUILD_TYPE="${build_type:-Release}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON -DCONSUMER_CHECK_HEADERS=$headers
cmake --build "$work_dir/consumer" -j2
"$work_dir/consumer/consumer" "$work_dir/run"
echo "check_install: the installed package builds and runs examples/consumer"
