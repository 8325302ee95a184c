#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ in build-fuzz/ (clang, Ninja, ccache when present) and
# runs each for FUZZ_SECONDS seconds (default 20) on a copy of its corpus fuzz/corpus/<target>/,
# so that the inputs it adds never land in the repository. Exits non-zero when a target finds a
# crash (an exception other than madpipe::Error, an ASan or UBSan report), a timeout, an
# out-of-memory or a leak; the input is kept in build-fuzz/artifacts/<target>/ and the log in
# build-fuzz/logs/<target>.log. docs/testing.md says how to reproduce and fix one.
# Usage: launch/fuzz.sh [TARGET...]   (default: all; a target is e.g. plan_fuzzer or plan)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

seconds=${FUZZ_SECONDS:-20}
build=build-fuzz

# Target, longest input (bytes) and dictionary; the longest seed of each corpus fits.
declare -A max_len=(
  [profile_fuzzer]=16384 [plan_fuzzer]=32768 [trace_fuzzer]=32768
  [config_fuzzer]=4096 [units_fuzzer]=256 [decoder_config_fuzzer]=4096
)
declare -A dict=(
  [profile_fuzzer]=fuzz/json.dict [plan_fuzzer]=fuzz/json.dict [trace_fuzzer]=fuzz/json.dict
  [config_fuzzer]=fuzz/ini.dict [units_fuzzer]= [decoder_config_fuzzer]=fuzz/json.dict
)
targets=(profile_fuzzer plan_fuzzer trace_fuzzer config_fuzzer units_fuzzer decoder_config_fuzzer)
if [[ $# -gt 0 ]]; then
  targets=()
  for name in "$@"; do
    name=${name%_fuzzer}_fuzzer
    [[ -n ${max_len[$name]+set} ]] || { echo "fuzz.sh: error: unknown target '$name'" >&2; exit 2; }
    targets+=("$name")
  done
fi

export CCACHE_DIR=${CCACHE_DIR:-$repo/.ccache}
generator=()
[[ -f $build/CMakeCache.txt ]] || generator=(-G Ninja)
CC=clang CXX=clang++ cmake -S fuzz -B "$build" ${generator[@]+"${generator[@]}"} >/dev/null
cmake --build "$build" --target "${targets[@]}"

work=$(mktemp -d "${TMPDIR:-/tmp}/madpipe-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$build/logs"

failed=0
rows=()
for target in "${targets[@]}"; do
  corpus=$work/$target
  cp -r "fuzz/corpus/$target" "$corpus"
  seeds=$(find "$corpus" -type f | wc -l)
  artifacts=$build/artifacts/$target
  rm -rf "$artifacts"
  mkdir -p "$artifacts"
  args=(-max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -max_len="${max_len[$target]}"
        -print_final_stats=1 -artifact_prefix="$artifacts/")
  [[ -n ${dict[$target]} ]] && args+=(-dict="${dict[$target]}")
  log=$build/logs/$target.log
  echo "fuzz.sh: $target for ${seconds}s on $seeds seeds"
  status=0
  TMPDIR=$work "$build/$target" "${args[@]}" "$corpus" >"$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  result=ok
  if [[ $status -ne 0 ]]; then
    failed=1
    found=$(find "$artifacts" -type f | head -n 1)
    result="FAILED (exit $status${found:+, input $found})"
    echo "fuzz.sh: $target failed; the end of $log:" >&2
    tail -n 40 "$log" >&2
  fi
  rows+=("$(printf '%-16s %6s seeds %10s runs  %s' "$target" "$seeds" "${runs:-?}" "$result")")
done

echo "fuzz.sh: ${seconds}s per target"
printf '  %s\n' "${rows[@]}"
if [[ $failed -ne 0 ]]; then
  echo "fuzz.sh: error: a target found a bug (see above; docs/testing.md)" >&2
  exit 1
fi
