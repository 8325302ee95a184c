#!/usr/bin/env bash
# Trains the same GPT on CPU ranks with 1f1b (whole backwards) and zb-h1 (the same partition and
# schedule, backwards split into B and W, each W where its rank idles), in alternating order, and
# prints each run's measured period, step time and last loss. Usage:
#   bench/split_backward/train.sh [MADPIPE_BINARY] [RANKS] [ROUNDS]
set -euo pipefail
madpipe=${1:-build/madpipe}
ranks=${2:-2}
rounds=${3:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gpt=(--model gpt --layers 6 --width 128 --heads 4 --context 64 --micro-batches 8
  --micro-batch-size 8 --steps 8 --trace-steps 3 --eval-every 0 --bandwidth 1GB/s)
for round in $(seq "$rounds"); do
  order=(1f1b zb-h1)
  [[ $((round % 2)) -eq 0 ]] && order=(zb-h1 1f1b)
  for algorithm in "${order[@]}"; do
    dir=$work/$algorithm-$round
    mpirun --oversubscribe --allow-run-as-root -np "$ranks" "$madpipe" train "${gpt[@]}" \
      --gpus "$ranks" --algorithm "$algorithm" --output-dir "$dir" >"$dir.out" 2>&1 ||
      { echo "$algorithm failed:"; tail -5 "$dir.out"; exit 1; }
    echo "round $round, $algorithm: $(grep 'measured period' "$dir.out"); last loss $(
      tail -1 "$dir/metrics.jsonl" | sed 's/.*"loss":\([^,]*\),.*/\1/')"
  done
done
