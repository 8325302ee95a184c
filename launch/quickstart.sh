#!/usr/bin/env bash
# Quick start: installs the packages, builds the `madpipe` command in build/, compares the
# planning algorithms on ResNet-50 (4 GPUs, 8 GiB each, 12 GB/s links), writes a plan and replays
# it in the simulator. The runtime (`madpipe train`) is not part of this release yet.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

./launch/install-deps.sh

export CCACHE_DIR=${CCACHE_DIR:-$repo/.ccache}
generator=()
[[ -f build/CMakeCache.txt ]] || generator=(-G Ninja)
cmake -S . -B build ${generator[@]+"${generator[@]}"}
cmake --build build --target madpipe

profile=configs/profiles/resnet50.json
platform=(--gpus 4 --memory 8GiB --bandwidth 12GB/s)
plan=build/plan-resnet50.json

echo
echo "== madpipe compare --profile $profile ${platform[*]} --quiet"
build/madpipe compare --profile "$profile" "${platform[@]}" --quiet

echo
echo "== madpipe plan --profile $profile ${platform[*]} --quiet --output $plan"
build/madpipe plan --profile "$profile" "${platform[@]}" --quiet --output "$plan"

echo
echo "== madpipe simulate --plan $plan --profile $profile"
build/madpipe simulate --plan "$plan" --profile "$profile"

echo
echo "The plan is in $repo/$plan (format: docs/formats.md)."
echo "Next: build/madpipe --help, docs/cli.md. Tests: ./launch/test.sh"
