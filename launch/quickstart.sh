#!/usr/bin/env bash
# Quick start: installs the packages, builds the `madpipe` command in build/, compares the
# planning algorithms on ResNet-50 (4 GPUs, 8 GiB each, 12 GB/s links), writes a plan and replays
# it in the simulator, then trains a character-level GPT on 4 CPU ranks under mpirun with a
# MadPipe plan (configs/cpu-quickstart.ini; a few minutes).
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

mpi_flags=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && mpi_flags+=(--allow-run-as-root)
run_dir=runs/cpu-quickstart
echo
echo "== mpirun -np 4 build/madpipe train --config configs/cpu-quickstart.ini"
mpirun "${mpi_flags[@]}" -np 4 build/madpipe train --config configs/cpu-quickstart.ini \
  --output-dir "$run_dir"

echo
echo "The ResNet-50 plan is in $repo/$plan (format: docs/formats.md)."
echo "The training run is in $repo/$run_dir:"
echo "  plan.json        the MadPipe plan it ran (stages, ranks, periodic pattern)"
echo "  profile.json     the model's layers as measured on this machine"
echo "  trace.json       what ran in the first steps, against the plan's predictions"
echo "  metrics.jsonl    one line per step: loss, validation loss, samples/s"
echo "  checkpoints/     weights and optimizer state (--resume continues from the newest)"
echo "See both: build/madpipe show --plan $run_dir/plan.json --trace $run_dir/trace.json --svg run.svg"
echo "Next: docs/guide.md, build/madpipe --help, configs/. Tests: ./launch/test.sh"
