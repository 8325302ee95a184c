#!/usr/bin/env bash
# Trains examples/llama_from_pytorch in fp32 and in bf16 on RANKS CPU ranks for STEPS steps with
# the same plan settings, then report.py tabulates each rank's measured peak memory and the plan's
# prediction, the activation share of both, and writes the two loss curves (CSV and SVG).
#   bench/precision/run.sh [RANKS [STEPS [OUT_DIR]]]
# Environment: MADPIPE (default build/madpipe), PYTHON (default .venv/bin/python), SIZE=small.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
ranks=${1:-4}
steps=${2:-300}
out=${3:-$(mktemp -d /tmp/precision.XXXXXX)}
python=${PYTHON:-$repo/.venv/bin/python}
mkdir -p "$out"
for precision in fp32 bf16; do
  STEPS=$steps PRECISION=$precision MADPIPE=${MADPIPE:-$repo/build/madpipe} PYTHON=$python \
    "$repo/examples/llama_from_pytorch/run.sh" "$ranks" "$out/$precision" >"$out/$precision.out" 2>&1 ||
    { echo "the $precision run failed:"; tail -5 "$out/$precision.out"; exit 1; }
done
"$python" "$here/report.py" "$out/fp32/run" "$out/bf16/run" --output "$out"
