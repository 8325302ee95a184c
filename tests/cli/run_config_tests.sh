#!/usr/bin/env bash
# Every config in configs/ works as its header says. Usage:
#   run_config_tests.sh MADPIPE_BINARY MPIRUN SOURCE_DIR CASE
# planner_configs: each planning-only config (no [model] section) runs the commands of its header
#   comment ("#   build/madpipe ...") from a directory where configs/ is the repository's.
# train_configs: each training config for GPUs is parsed, profiled (on the CPU, at reduced depth
#   and micro-batch size) and planned for its platform with --dry-run.
# cpu_quickstart: configs/cpu-quickstart.ini trains for a few steps on 4 ranks.
# cpu_large_gpt: configs/cpu-large-gpt.ini plans on its 4 ranks and does not fit on one.
# launcher: launch/madpipe-run builds the right mpirun command and runs a CPU job.
set -uo pipefail

madpipe=$1
mpirun_bin=$2
source_dir=$3
case_name=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
ln -s "$source_dir/configs" configs

fail() {
  echo "FAIL [$case_name]: $*" >&2
  echo "--- stdout" >&2; cat out >&2 2>/dev/null
  echo "--- stderr" >&2; cat err >&2 2>/dev/null
  exit 1
}

has_section() { grep -q "^\[$2\]" "$1"; }
value_of() { sed -n "s/^[[:space:]]*$2[[:space:]]*=[[:space:]]*\([^[:space:]#]*\).*/\1/p" "$1" | tail -1; }

configs=(configs/*.ini)
[[ ${#configs[@]} -ge 5 ]] || fail "expected the shipped configs in configs/, found ${#configs[@]}"

case "$case_name" in
  planner_configs)
    checked=0
    for config in "${configs[@]}"; do
      has_section "$config" model && continue
      mapfile -t commands < <(sed -n 's|^#   build/madpipe \(.*\)$|\1|p' "$config")
      [[ ${#commands[@]} -gt 0 ]] || fail "$config: no '#   build/madpipe ...' command in its header"
      for command in "${commands[@]}"; do
        read -r -a args <<<"$command"
        "$madpipe" "${args[@]}" >out 2>err || fail "$config: 'madpipe $command' exited with $?"
      done
      checked=$((checked + 1))
    done
    [[ $checked -ge 3 ]] || fail "only $checked planning configs checked"
    ;;
  train_configs)
    checked=0
    for config in "${configs[@]}"; do
      has_section "$config" model || continue
      [[ $(value_of "$config" device) == cuda* ]] || continue
      gpus=$(value_of "$config" gpus)
      replicas=$(value_of "$config" replicas)
      name=$(basename "$config" .ini)
      "$mpirun_bin" --oversubscribe --allow-run-as-root -np 1 "$madpipe" train --config "$config" \
        --dry-run --layers 2 --context 16 --image 32 --micro-batch-size 1 --output-dir "dry-$name" \
        >out 2>err || fail "$config: dry run exited with $?"
      if ! nvidia-smi -L >/dev/null 2>&1; then
        grep -q "profiling on the CPU instead" out || fail "$config: should fall back to the CPU"
      fi
      if [[ -n $replicas && $replicas -gt 1 ]]; then
        pipeline=$((gpus / replicas))
        grep -qE "^plan: madpipe, [0-9]+ stages on $pipeline ranks x $replicas data-parallel replicas" out ||
          fail "$config: no plan for $replicas replicas of $pipeline ranks"
        grep -q "\"replicas\": $replicas," "dry-$name/plan.json" || fail "$config: plan.json without its replicas"
      else
        grep -qE "^plan: madpipe, [0-9]+ stages on $gpus ranks" out || fail "$config: no plan for $gpus ranks"
      fi
      grep -q '"format": "madpipe.plan/1"' "dry-$name/plan.json" || fail "$config: no plan.json"
      [[ ! -e dry-$name/metrics.jsonl ]] || fail "$config: a dry run must not train"
      checked=$((checked + 1))
    done
    [[ $checked -ge 2 ]] || fail "only $checked GPU training configs checked"
    ;;
  cpu_quickstart)
    "$mpirun_bin" --oversubscribe --allow-run-as-root -np 4 "$madpipe" train \
      --config configs/cpu-quickstart.ini --steps 3 --eval-every 3 --trace-steps 2 --output-dir q \
      >out 2>err || fail "exit status $?"
    grep -qE "^step 3/3  loss [0-9.]+  val [0-9.]+" out || fail "no validation loss at step 3"
    [[ $(wc -l <q/metrics.jsonl) -eq 3 ]] || fail "metrics.jsonl should have 3 lines"
    ;;
  cpu_large_gpt)
    # Planned as shipped (a dry run of one process): split over its 4 ranks, and on one rank
    # within its memory it does not fit.
    config=configs/cpu-large-gpt.ini
    "$mpirun_bin" --oversubscribe --allow-run-as-root -np 1 "$madpipe" train --config "$config" \
      --dry-run --output-dir large4 >out 2>err || fail "$config: dry run exited with $?"
    grep -qE "^plan: madpipe, [0-9]+ stages on 4 ranks" out || fail "$config: no plan for 4 ranks"
    "$mpirun_bin" --oversubscribe --allow-run-as-root -np 1 "$madpipe" train --config "$config" \
      --dry-run --gpus 1 --profile large4/profile.json --output-dir large1 >out 2>err &&
      fail "$config: the whole model should not fit one rank's memory"
    grep -q "no madpipe plan fits in 160.0 MiB per GPU" out err || fail "$config: no memory message"
    ;;
  launcher)
    run=$source_dir/launch/madpipe-run
    export MADPIPE=$madpipe MPIRUN=$mpirun_bin
    "$run" -np 8 --print --config configs/gpt-1node-8gpu.ini >out 2>err || fail "--print failed"
    grep -q -- "-np 8 " out || fail "GPU run: -np missing"
    grep -q -- "train --gpus 8 --config configs/gpt-1node-8gpu.ini" out || fail "GPU run: --gpus missing"
    grep -q -- "-x NCCL_DEBUG" out || fail "GPU run: NCCL environment not exported"
    ! grep -q -- "--oversubscribe" out || fail "GPU runs must not oversubscribe"
    "$run" -np 2 --print --config configs/gpt-1node-8gpu.ini --device cpu >out 2>err || fail "--print failed"
    grep -q -- "--oversubscribe" out || fail "--device cpu on the command line should win over the file"
    "$run" --print --steps 1 >out 2>err && fail "-np is required"
    grep -q "madpipe-run: error: -np N" err || fail "message should name -np"
    "$run" -np 2 --hostfile missing-hosts >out 2>err && fail "a missing host file must fail"
    grep -q "missing-hosts" err || fail "message should name the host file"
    # A real CPU run through the launcher.
    "$run" -np 2 --model mlp --layers 3 --width 8 --inputs 4 --outputs 2 --steps 2 \
      --micro-batches 4 --micro-batch-size 2 --output-dir launched >out 2>err || fail "launched run failed"
    [[ $(wc -l <launched/metrics.jsonl) -eq 2 ]] || fail "the launched run should train 2 steps"
    ;;
  *)
    fail "unknown case"
    ;;
esac
echo "ok [$case_name]"
