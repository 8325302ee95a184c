#!/usr/bin/env bash
# The example end to end, in WORK_DIR (default: a new folder under /tmp): byte tokens from text,
# the PyTorch model scripted, then madpipe profiles, plans and trains it on RANKS CPU ranks,
# exports the weights, and check.py recomputes the last validation loss in PyTorch.
#   examples/llama_from_pytorch/run.sh [RANKS [WORK_DIR]]
# Environment: MADPIPE (default build/madpipe), PYTHON (default .venv/bin/python), STEPS (200),
# SIZE=small (2 blocks of width 64, context 32: what the tests run), PRECISION (fp32, bf16 or
# fp16; in bf16 and fp16, check.py recomputes the loss in fp32 from the fp32 master weights and
# allows 2%).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
ranks=${1:-4}
work=${2:-$(mktemp -d /tmp/llama_from_pytorch.XXXXXX)}
madpipe=$(realpath "${MADPIPE:-$repo/build/madpipe}")
python=${PYTHON:-$repo/.venv/bin/python}
steps=${STEPS:-200}
precision=${PRECISION:-fp32}
tolerance=1e-5
[[ $precision == fp32 ]] || tolerance=2e-2
model=(--layers 4 --width 128 --heads 4 --kv-heads 2 --context 64)
[[ ${SIZE:-} == small ]] && model=(--layers 2 --width 64 --heads 4 --kv-heads 2 --context 32)
context=${model[9]}
mpi_flags=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && mpi_flags+=(--allow-run-as-root)

mkdir -p "$work"
cd "$work"
"$python" "$here/../gpt_from_pytorch/prepare.py" --output-dir .  # the same byte tokens
"$python" "$here/model.py" "${model[@]}" --output model.pt 2>/dev/null
# 1. Profile the model as it will train (the same data and micro-batch size).
"$madpipe" profile --model script --script model.pt --data train.bin --data-format tokens-u16 \
  --context "$context" --micro-batch-size 8 --precision "$precision" --output profile.json
# 2. Plan it for RANKS GPUs, counting the weight memory the run's precision and optimizer hold.
"$madpipe" plan --profile profile.json --gpus "$ranks" --memory 1GiB --bandwidth 10GB/s \
  --precision "$precision" --optimizer adamw --output plan.json
# 3. Train it with that plan, one process per rank: AdamW, a warm-up over the first tenth of the
#    steps, then a cosine decay to a tenth of the peak, gradients clipped to norm 1.
mpirun "${mpi_flags[@]}" -np "$ranks" "$madpipe" train --model script --script model.pt \
  --data train.bin --validation-data val.bin --data-format tokens-u16 --vocab 256 \
  --context "$context" --micro-batch-size 8 --micro-batches 4 --plan plan.json --gpus "$ranks" \
  --steps "$steps" --precision "$precision" --optimizer adamw --learning-rate 0.003 --lr-schedule cosine \
  --warmup-steps "$((steps / 10))" --min-lr 0.0003 --weight-decay 0.1 --clip-grad-norm 1.0 \
  --eval-every "$((steps / 4))" --output-dir run
# The weights back to PyTorch, and the last validation loss recomputed there.
"$madpipe" export-weights --run run --output model_state.pt
"$python" "$here/check.py" "${model[@]}" --run run --weights model_state.pt --tolerance "$tolerance"
