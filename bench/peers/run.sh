#!/usr/bin/env bash
# madpipe beside torch.distributed.pipelining, on this machine's CPU ranks: the GPT of
# examples/gpt_from_pytorch (same sizes, data, initial weights, micro-batches, one thread per
# rank) trained by torch's ScheduleGPipe, Schedule1F1B and ScheduleInterleaved1F1B, by
# `madpipe train` with its own plan, and by torch running that plan (`madpipe export --format
# torch` + madpipe.torch.run_plan); a table of steady-state samples/s and the ratio to the best
# torch schedule at each rank count. See bench/peers/README.md.
#   bench/peers/run.sh [WORK_DIR]
# Environment (defaults in brackets):
#   RANKS ["2 4"]         rank counts
#   SYSTEMS ["madpipe madpipe-torch gpipe 1f1b interleaved"]
#   WARMUP [5] STEPS [20] steps left out, then steps measured (the same for every system)
#   REPEATS [3]           runs of each system, round robin (the table shows the best and the median)
#   LAYERS [6] WIDTH [128] HEADS [4] CONTEXT [64]   the model (model.py's options)
#   MICRO_BATCH_SIZE [8] MICRO_BATCHES [8]           samples per micro-batch, micro-batches a step
#   MEMORY [1GiB] BANDWIDTH [10GB/s] TIME_LIMIT [10] what madpipe plans for
#   MADPIPE [build/madpipe] PYTHON [.venv/bin/python]
#   MADPIPE_PYTHONPATH [the python/ folder beside MADPIPE]: where `import madpipe` finds the
#     package with its compiled part (the build assembles it in <build>/python)
#   LEG_TIMEOUT [300]     seconds one run may take before it counts as failed
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${1:-$(mktemp -d /tmp/madpipe-peers.XXXXXX)}
madpipe=$(realpath "${MADPIPE:-$repo/build/madpipe}")
python=${PYTHON:-$repo/.venv/bin/python}
pypath=${MADPIPE_PYTHONPATH:-$(dirname "$madpipe")/python}
ranks_list=${RANKS:-2 4}
systems=${SYSTEMS:-madpipe madpipe-torch gpipe 1f1b interleaved}
warmup=${WARMUP:-5}
steps=${STEPS:-20}
repeats=${REPEATS:-3}
layers=${LAYERS:-6} width=${WIDTH:-128} heads=${HEADS:-4} context=${CONTEXT:-64}
mbs=${MICRO_BATCH_SIZE:-8} mbn=${MICRO_BATCHES:-8}
memory=${MEMORY:-1GiB} bandwidth=${BANDWIDTH:-10GB/s} time_limit=${TIME_LIMIT:-10}
leg_timeout=${LEG_TIMEOUT:-300}
[[ -x $madpipe ]] || { echo "run.sh: no madpipe at $madpipe (set MADPIPE)" >&2; exit 2; }
((warmup >= 2)) || { echo "run.sh: WARMUP must be at least 2" >&2; exit 2; }

# One launcher for every system: the same placement and binding of the ranks; one thread each
# (madpipe train sets LibTorch's threads to 1 itself; the torch legs call torch.set_num_threads).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
export PYTHONDONTWRITEBYTECODE=1  # madpipe_torch.py imports torch_schedules.py: no __pycache__ here
mpi=(mpirun --oversubscribe -x OMP_NUM_THREADS -x MKL_NUM_THREADS)
[[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
model=(--layers "$layers" --width "$width" --heads "$heads" --context "$context")
shape=(--micro-batch-size "$mbs" --micro-batches "$mbn")
common=("${model[@]}" --data train.bin "${shape[@]}" --warmup "$warmup" --steps "$steps")

mkdir -p "$work/results"
cd "$work"
started=$SECONDS
cpu=$(lscpu | sed -n 's/^Model name: *//p')
echo "bench/peers in $work on $(getconf _NPROCESSORS_ONLN) cores ($cpu), $(date -u '+%F %R UTC')"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: ${model[*]}, micro-batches of $mbs samples, $mbn a step; ranks: $ranks_list;" \
  "steps $((warmup + 1))..$((warmup + steps)) measured after $warmup of warm-up; 1 thread per rank"
"$python" "$repo/examples/gpt_from_pytorch/prepare.py" --output-dir . >/dev/null
"$python" "$repo/examples/gpt_from_pytorch/model.py" "${model[@]}" --output model.pt 2>/dev/null

# A leg that failed gets a result naming its log's last line; one that cannot run, its reason.
failed() {  # SYSTEM RANKS RESULT LOG
  local why
  # The last line before mpirun's own report (its lines of dashes).
  why=$(awk '/^-----+$/ { exit } NF { last = $0 } END { print last }' "$4" 2>/dev/null |
    cut -c1-160) || true
  "$python" "$here/report.py" failed --system "$1" --ranks "$2" --reason "${why:-no output} ($4)" \
    --output "$3"
}
unavailable() {  # SYSTEM RANKS RESULT REASON
  "$python" "$here/report.py" unavailable --system "$1" --ranks "$2" --reason "$4" --output "$3"
}

madpipe_leg() {  # RANKS ROUND RESULT
  local r=$1
  local dir=$r/madpipe-$2 first=$r/madpipe-1 log=$r/madpipe-$2.log given=()
  # Later rounds run the plan (and profile) of the first, so that every round runs one plan.
  [[ $2 -gt 1 && -f $first/plan.json ]] &&
    given=(--plan "$first/plan.json" --profile "$first/profile.json")
  if timeout -k 10 "$leg_timeout" "${mpi[@]}" -np "$r" "$madpipe" train --model script \
    --script model.pt --data train.bin --data-format tokens-u16 --vocab 256 --context "$context" \
    "${shape[@]}" --gpus "$r" --memory "$memory" --bandwidth "$bandwidth" \
    --time-limit "$time_limit" --steps "$((warmup + steps))" --learning-rate 0.003 \
    --eval-every 0 --trace-steps "$((warmup - 1))" "${given[@]}" --output-dir "$dir" >"$log" 2>&1 &&
    "$python" "$here/report.py" madpipe --run "$dir" --ranks "$r" --warmup "$warmup" \
      --steps "$steps" "${shape[@]}" --output "$3"; then
    grep -E "^plan:|^  stage|^measured period" "$log" | sed 's/^/  /'
  else
    failed "madpipe train" "$r" "$3" "$log"
  fi
}

madpipe_torch_leg() {  # RANKS ROUND RESULT
  local r=$1 plan=$1/madpipe-1/plan.json export=$1/export log=$1/madpipe-torch-$2.log
  local system="madpipe plan in torch"
  if ! "$madpipe" export --help >/dev/null 2>&1; then
    unavailable "$system" "$r" "$3" "$madpipe has no 'export' command"
    return
  fi
  if ! PYTHONPATH=$pypath "$python" -c "from madpipe.torch import run_plan" >/dev/null 2>&1; then
    unavailable "$system" "$r" "$3" "no madpipe.torch.run_plan under MADPIPE_PYTHONPATH=$pypath"
    return
  fi
  if [[ ! -f $plan ]]; then
    unavailable "$system" "$r" "$3" "no plan: the madpipe leg did not run"
    return
  fi
  [[ -f $export/schedule.csv ]] ||
    "$madpipe" export --plan "$plan" --format torch --micro-batches "$mbn" --output "$export" \
      >"$r/export.log" 2>&1 || { failed "$system" "$r" "$3" "$r/export.log"; return; }
  rm -f "$3.rendezvous"
  PYTHONPATH=$pypath timeout -k 10 "$leg_timeout" "${mpi[@]}" -np "$r" "$python" \
    "$here/madpipe_torch.py" "${common[@]}" --export "$export" --result "$3" \
    >"$log" 2>&1 || failed "$system" "$r" "$3" "$log"
}

torch_leg() {  # SCHEDULE RANKS ROUND RESULT
  local log=$2/torch-$1-$3.log
  rm -f "$4.rendezvous"
  timeout -k 10 "$leg_timeout" "${mpi[@]}" -np "$2" "$python" "$here/torch_schedules.py" \
    "${common[@]}" --schedule "$1" --result "$4" >"$log" 2>&1 ||
    failed "torch $1" "$2" "$4" "$log"
}

for r in $ranks_list; do
  mkdir -p "$r"
  for ((round = 1; round <= repeats; ++round)); do
    for system in $systems; do
      result=results/$r-$system-$round.json
      echo "$r ranks, $system (run $round of $repeats), load $(cut -d' ' -f1 /proc/loadavg)"
      case $system in
        madpipe) madpipe_leg "$r" "$round" "$result" ;;
        madpipe-torch) madpipe_torch_leg "$r" "$round" "$result" ;;
        gpipe | 1f1b | interleaved) torch_leg "$system" "$r" "$round" "$result" ;;
        *) echo "run.sh: unknown system '$system' in SYSTEMS" >&2; exit 2 ;;
      esac
      "$python" "$here/report.py" line "$result" || true
    done
  done
done

echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg); $((SECONDS - started)) s in all"
"$python" "$here/report.py" table results/*.json | tee table.txt
