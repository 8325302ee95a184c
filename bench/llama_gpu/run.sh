#!/usr/bin/env bash
# The Llama-style example at 0.8B parameters (16 blocks of width 2048, 16 heads, 8 key-value
# heads, vocabulary 32000, context 2048) in bf16 on one GPU: tokens/s and model FLOPs utilisation
# of `madpipe train` on 1 rank and on 2 ranks sharing the GPU over MPI, against madpipe's plain
# loop over the unsplit model (the same LibTorch arithmetic: bf16 layers, fp32 masters) and an
# eager PyTorch loop of model.py (torch.autocast bf16, fused AdamW), with the same micro-batching;
# and each madpipe run's peak memory against its plan.
#   bench/llama_gpu/run.sh [OUT_DIR]
# Environment: MADPIPE (default build/madpipe), PYTHON (default python3 with torch, else .venv),
# DEVICE (default cuda:0), SIZE (1b, or tiny to try the script on a CPU), STEPS (default 8; the
# first 2 are warm-up, left out of the rates), PEAK_TFLOPS (default 989: dense bf16 of an H100 or
# H200), MEMORY (what each rank plans with; default 60GiB).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$(mktemp -d /tmp/llama_gpu.XXXXXX)}
madpipe=$(realpath "${MADPIPE:-$repo/build/madpipe}")
python=${PYTHON:-}
if [[ -z $python ]]; then
  python=python3
  python3 -c "import torch" 2>/dev/null || python=$repo/.venv/bin/python
fi
device=${DEVICE:-cuda:0}
steps=${STEPS:-8}
memory=${MEMORY:-60GiB}
model=(--vocab 32000 --context 2048 --width 2048 --layers 16 --heads 16 --kv-heads 8)
if [[ ${SIZE:-1b} == tiny ]]; then
  model=(--vocab 512 --context 64 --width 64 --layers 2 --heads 4 --kv-heads 2)
  memory=${MEMORY:-1GiB}
fi
context=${model[3]}
vocab=${model[1]}
mpi_flags=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && mpi_flags+=(--allow-run-as-root)
mkdir -p "$out"
cd "$out"
"$python" "$repo/examples/gpt_from_pytorch/prepare.py" --output-dir . >/dev/null
"$python" "$repo/examples/llama_from_pytorch/model.py" "${model[@]}" --output model.pt
shared=(--model script --script model.pt --data train.bin --data-format tokens-u16
  --vocab "$vocab" --context "$context" --micro-batch-size 1 --precision bf16 --device "$device")
echo "profiling on $device"
"$madpipe" profile "${shared[@]}" --output profile.json >profile.log 2>&1 ||
  { tail -5 profile.log; exit 1; }
training=("${shared[@]}" --micro-batches 4 --profile profile.json --steps "$steps" --optimizer adamw
  --learning-rate 0.0003 --clip-grad-norm 1 --eval-every 0 --trace-steps 2 --memory "$memory"
  --bandwidth 100GB/s --quiet)
run() {  # run NAME RANKS ARGS...
  local name=$1 ranks=$2
  shift 2
  echo "training: $name"
  mpirun "${mpi_flags[@]}" -np "$ranks" "$madpipe" train "${training[@]}" --gpus "$ranks" \
    --output-dir "$name" "$@" >"$name.log" 2>&1 || { tail -5 "$name.log"; exit 1; }
}
run plain 1 --plain-loop
run madpipe-1 1
run madpipe-2 2 --transport mpi
echo "training: eager PyTorch"
"$python" "$here/eager_loop.py" "${model[@]}" --micro-batch-size 1 --micro-batches 4 --steps "$steps" --device "$device" \
  --data train.bin --output eager.json
"$python" "$here/report.py" --out "$out" --tokens-per-step "$((4 * context))" \
  --peak-tflops "${PEAK_TFLOPS:-989}" "${model[@]}"
