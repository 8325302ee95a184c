#!/usr/bin/env bash
# Plans LLM-shaped analytic profiles at cluster scale and tabulates what each algorithm gives:
# Llama 3 8B and 70B and a large-vocabulary (Gemma-7B-shaped) model, bf16, 4096 tokens per
# micro-batch, H100-class GPUs (8 per node at 200 GB/s, 25 GB/s between nodes, 10 copies of the
# weights: bf16 with AdamW), P = 8, 16, 32, 64, loose (80 GiB) and tight memory, with and without
# --remat rotor, through `madpipe compare`; then `madpipe scale` (D x P on 64 GPUs) per model.
# report.py writes one table (period, gap to the lower bound, largest GPU memory, planning time
# per algorithm, and the split torchtitan makes by default) and plots of planning time against P
# and against the chain's length (Llama-3-70B-shaped chains of 30 to 254 blocks on 64 GPUs).
#   bench/llm/run.sh [OUT_DIR]
# Environment: MADPIPE (default build/madpipe), PYTHON (default python3), TIME_LIMIT (10),
# GPUS ("8 16 32 64"), MODELS ("llama3-8b llama3-70b gemma-7b"), BLOCKS ("30 62 126 254").
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
# Planning time against the chain's length: Llama-3-70B-shaped chains of BLOCKS blocks (plus the
# embedding and the head), one `madpipe plan` on 64 GPUs of 80 GiB each.
for blocks in ${BLOCKS:-30 62 126 254}; do
  mkdir -p "$out/blocks$blocks"
  "$python" - "$repo/configs/models/llama3-70b.json" "$out/blocks$blocks/config.json" "$blocks" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["num_hidden_layers"] = int(sys.argv[3])
json.dump(config, open(sys.argv[2], "w"))
PY
  "$madpipe" profile --analytic "$out/blocks$blocks/config.json" --seq 4096 --micro-batch-size 1 \
    --precision bf16 --device-spec h100 -o "$out/blocks$blocks/profile.json" >/dev/null
  start=$(date +%s.%N)
  "$madpipe" plan --profile "$out/blocks$blocks/profile.json" --gpus 64 --memory 80GiB \
    "${platform[@]}" >"$out/blocks$blocks/plan.txt" 2>&1 || echo "plan failed for $blocks blocks"
  end=$(date +%s.%N)
  echo "$start $end" >"$out/blocks$blocks/wall"
  echo "llama3-70b shape, $blocks blocks, P=64: $(awk -v s="$start" -v e="$end" 'BEGIN{printf "%.1f", e-s}') s"
done
"$python" "$here/report.py" "$out"
