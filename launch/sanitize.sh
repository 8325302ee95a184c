#!/usr/bin/env bash
# Builds the planner, the `madpipe` command and the unit tests with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in build-asan/ (Ninja, ccache when present; no runtime, no
# benchmarks) and runs the tests of the planner layers and of the CLI. Any ASan or UBSan report
# fails its test. docs/testing.md says more.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

build=build-asan
sanitize="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"

export CCACHE_DIR=${CCACHE_DIR:-$repo/.ccache}
generator=()
[[ -f $build/CMakeCache.txt ]] || generator=(-G Ninja)
CC=clang CXX=clang++ cmake -S . -B "$build" ${generator[@]+"${generator[@]}"} \
  -DMADPIPE_BUILD_RUNTIME=OFF -DMADPIPE_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="$sanitize" >/dev/null
cmake --build "$build"

# Leaks fail a test too; UBSan prints the stack of what it reports.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
ctest --test-dir "$build" --output-on-failure -j2 -L 'core|solver|schedule|remat|arena|plan|partition|cli'
