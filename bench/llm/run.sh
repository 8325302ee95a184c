#!/usr/bin/env bash
# Plans LLM-shaped analytic profiles at cluster scale and tabulates what each algorithm gives:
# Llama 3 8B and 70B and a large-vocabulary (Gemma-7B-shaped) model, bf16, 4096 tokens per
# micro-batch, H100-class GPUs (8 per node at 200 GB/s, 25 GB/s between nodes, 10 copies of the
# weights: bf16 with AdamW), P = 8, 16, 32, 64, loose (80 GiB) and tight memory, with and without
# --remat rotor, through `madpipe compare`; then `madpipe scale` (D x P on 64 GPUs) per model.
# report.py writes one table (period, gap to the lower bound, largest GPU memory, planning time
# per algorithm, and the split torchtitan makes by default) and a plot of planning time against P.
#   bench/llm/run.sh [OUT_DIR]
# Environment: MADPIPE (default build/madpipe), PYTHON (default python3), TIME_LIMIT (10),
# GPUS ("8 16 32 64"), MODELS ("llama3-8b llama3-70b gemma-7b").
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$(mktemp -d /tmp/llm-bench.XXXXXX)}
madpipe=${MADPIPE:-$repo/build/madpipe}
python=${PYTHON:-python3}
limit=${TIME_LIMIT:-10}
mkdir -p "$out"
platform=(--gpus-per-node 8 --bandwidth 200GB/s --inter-node-bandwidth 25GB/s
  --weight-copies 10 --time-limit "$limit" --quiet)
for model in ${MODELS:-llama3-8b llama3-70b gemma-7b}; do
  "$madpipe" profile --analytic "$repo/configs/models/$model.json" --seq 4096 \
    --micro-batch-size 1 --precision bf16 --device-spec h100 -o "$out/$model.json" >/dev/null
  for gpus in ${GPUS:-8 16 32 64}; do
    for memory in 80GiB 40GiB; do
      for remat in none rotor; do
        case=$out/$model-p$gpus-$memory-$remat
        extra=()
        [[ $remat == rotor ]] && extra=(--remat rotor)
        start=$(date +%s.%N)
        "$madpipe" compare --profile "$out/$model.json" --gpus "$gpus" --memory "$memory" \
          "${platform[@]}" "${extra[@]}" --csv >"$case.csv" 2>"$case.err" ||
          echo "compare failed for $case: $(tail -1 "$case.err")"
        end=$(date +%s.%N)
        echo "$start $end" >"$case.wall"
        echo "$model P=$gpus $memory remat=$remat: $(awk -v s="$start" -v e="$end" 'BEGIN{printf "%.1f", e-s}') s"
      done
    done
  done
  "$madpipe" scale --profile "$out/$model.json" --gpus 64 --memory 80GiB --global-batch 1024 \
    "${platform[@]}" >"$out/$model-scale.txt" 2>&1 || echo "scale failed for $model"
done
"$python" "$here/report.py" "$out"
