#!/usr/bin/env bash
# GPU acceptance in one command, for any machine with an NVIDIA GPU (docs/testing.md):
#   launch/gpu-check.sh
# Builds madpipe in build-gpu/ against the PyTorch of `python3` when it has CUDA (else the one that
# launch/install-deps.sh installs in .venv/), runs the test suite, then the GPU checks, and prints
# one summary table:
#   (a) NCCL: a send/receive to self and an all-reduce on one GPU;
#   (b) 1-rank CUDA training equals 1-rank CPU training after 5 steps;
#   (c) 2 and 4 ranks sharing the GPU over MPI equal unsplit training;
#   (d) the executor against a plain LibTorch loop: samples/s and overhead (target <= 3%, at a
#       GPT of width 1024 and context 256; width 512 and context 64 reported beside it);
#   (e) plans with remat and with offload: step time and CUDA peak memory against the plan's
#       prediction (target within 10%);
#   (f) profiles of the GPT and ResNet-style models, twice: the run-to-run spread;
#   (g) split backwards: zb-h1 against 1f1b on 2 ranks sharing the GPU over MPI: the same losses,
#       the step time ratio, each rank's CUDA peak within the program's memory bound;
#   (h) a Llama-style model of about 1B parameters in bf16 (bench/llama_gpu/run.sh): tokens/s and
#       MFU of madpipe on 1 rank and on 2 ranks over MPI against the plain loop and an eager
#       PyTorch loop (target: 1 rank >= 0.97x the plain loop), peak memory against the plan
#       (target within 10%).
# About 20-30 minutes on one GPU (MADPIPE_GPU_CHECK_ONLY runs a part). Exit status: 0 when every
# check passed.
#
# Environment:
#   MADPIPE_PYTHON       the Python whose torch to build against (default: python3, then .venv)
#   MADPIPE_CMAKE_ARGS   more configure flags (e.g. -DCMAKE_PREFIX_PATH=/opt/deps/usr for Boost)
#   MADPIPE_GPU_BUILD    build directory (default: build-gpu)
#   MADPIPE_GPU_CHECK_DEVICE  cuda (default); cpu runs (b)-(f) on the CPU, to try the script
#   MADPIPE_GPU_CHECK_SKIP_TESTS=1  skips the test suite
#   MADPIPE_GPU_CHECK_ONLY=d,e  runs only these checks (of a-h)
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
build=${MADPIPE_GPU_BUILD:-build-gpu}
device=${MADPIPE_GPU_CHECK_DEVICE:-cuda}
out=$build/gpu-check
started=$SECONDS
mpi_flags=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && mpi_flags+=(--allow-run-as-root)

declare -a rows
# record NAME STATUS DETAIL
record() {
  rows+=("$1|$2|$3")
  echo "gpu-check: ($1) $2: $3"
}

# --- Build --------------------------------------------------------------------------------------
python=${MADPIPE_PYTHON:-python3}
torch_dir=""
if "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  torch_dir=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "share", "cmake", "Torch"))')
  echo "gpu-check: building against $("$python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)') ($torch_dir)"
else
  [[ -x .venv/bin/python ]] || ./launch/install-deps.sh
  python=.venv/bin/python
  echo "gpu-check: building against the PyTorch in .venv/"
fi
configure=(-S . -B "$build" -DMADPIPE_WERROR=ON -DCMAKE_BUILD_TYPE=Release)
[[ -f $build/CMakeCache.txt ]] || configure+=(-G Ninja)
[[ -n $torch_dir ]] && configure+=("-DTorch_DIR=$torch_dir")
command -v ccache >/dev/null 2>&1 && configure+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# shellcheck disable=SC2206
[[ -n ${MADPIPE_CMAKE_ARGS:-} ]] && configure+=(${MADPIPE_CMAKE_ARGS})
if ! cmake "${configure[@]}" | grep -E 'madpipe:|error' || ! cmake --build "$build" -j "$(nproc)"; then
  echo "gpu-check: the build failed" >&2
  exit 1
fi
madpipe=$build/madpipe
mkdir -p "$out"

# --- The test suite -----------------------------------------------------------------------------
if [[ ${MADPIPE_GPU_CHECK_SKIP_TESTS:-0} != 1 ]]; then
  if ctest --test-dir "$build" -j "$(nproc)" --output-on-failure >"$out/ctest.log" 2>&1; then
    record tests pass "$(grep -E 'tests passed' "$out/ctest.log")"
  else
    record tests FAIL "$(grep -E 'tests passed|tests failed' "$out/ctest.log") (see $out/ctest.log)"
  fi
else
  record tests skipped "MADPIPE_GPU_CHECK_SKIP_TESTS=1"
fi

# --- Helpers ------------------------------------------------------------------------------------
gpt=(--model gpt --layers 4 --width 256 --heads 4 --context 128 --micro-batch-size 8
  --micro-batches 4 --seed 3 --learning-rate 0.001 --eval-every 0 --quiet
  --memory 64GiB --bandwidth 100GB/s)
untraced=("${gpt[@]}" --trace-steps 0)  # (g) traces its runs; the others need no trace
# train DIR RANKS ARGS...: madpipe train under mpirun, its output in DIR/log.
train() {
  local dir=$1 ranks=$2
  shift 2
  mkdir -p "$dir"
  mpirun "${mpi_flags[@]}" -np "$ranks" "$madpipe" train --gpus "$ranks" --output-dir "$dir" "$@" \
    >"$dir/log" 2>&1
}
# same_losses A B TOLERANCE: the per-step losses of two runs agree (relative); prints the largest
# difference.
same_losses() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
tol = float(sys.argv[3])
worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print(f"{len(a)} steps, last loss {a[-1] if a else float('nan'):.6f} vs {b[-1] if b else float('nan'):.6f}, largest relative difference {worst:.2e} (tolerance {tol:g})")
sys.exit(0 if worst <= tol else 1)
PY
}
gpu=$device
[[ $device == cuda ]] && gpu=cuda:0
# wants CHECK: MADPIPE_GPU_CHECK_ONLY is unset or lists CHECK.
wants() { [[ -z ${MADPIPE_GPU_CHECK_ONLY:-} || ,${MADPIPE_GPU_CHECK_ONLY}, == *,$1,* ]]; }

# --- (a) NCCL on one GPU ------------------------------------------------------------------------
if wants a; then
  if [[ $device == cuda ]]; then
    log=$out/a.log
    mpirun "${mpi_flags[@]}" -np 1 "$build/tests/runtime_mpi_tests" --gtest_filter='NcclOnOneGpu.*' --gtest_color=no \
      >"$log" 2>&1
    if grep -q '\[  PASSED  \] 1 test' "$log" && ! grep -q SKIPPED "$log"; then
      record a pass "NCCL send/receive to self and all-reduce on $gpu"
    else
      record a FAIL "see $log"
    fi
  else
    record a skipped "no GPU ($device)"
  fi
fi

# --- (b) CUDA equals CPU ------------------------------------------------------------------------
if wants b; then
  if train "$out/b-device" 1 "${untraced[@]}" --steps 5 --device "$gpu" &&
    train "$out/b-cpu" 1 "${untraced[@]}" --steps 5 --device cpu; then
    if detail=$(same_losses "$out/b-device" "$out/b-cpu" 1e-3); then
      record b pass "$gpu vs cpu: $detail"
    else
      record b FAIL "$gpu vs cpu: $detail"
    fi
  else
    record b FAIL "a run failed: $out/b-*/log"
  fi
fi

# --- (c) ranks sharing the GPU over MPI equal unsplit training -----------------------------------
if wants c; then
  train "$out/c-1" 1 "${untraced[@]}" --steps 5 --device "$gpu" || record c FAIL "unsplit run: $out/c-1/log"
  for ranks in 2 4; do
    if train "$out/c-$ranks" "$ranks" "${untraced[@]}" --steps 5 --device "$gpu" --transport mpi; then
      if detail=$(same_losses "$out/c-$ranks" "$out/c-1" 1e-4); then
        record "c$ranks" pass "$ranks ranks on $gpu (mpi) vs 1: $detail"
      else
        record "c$ranks" FAIL "$ranks ranks on $gpu (mpi) vs 1: $detail"
      fi
    else
      record "c$ranks" FAIL "see $out/c-$ranks/log"
    fi
  done
fi

# --- (d) executor overhead against a plain LibTorch loop ----------------------------------------
if wants d; then
  # At a GPT of useful size (width 1024, context 256), which the target applies to; a small one
  # (width 512, context 64), where the host's work per op shows most, is reported beside it.
  if [[ -x $build/bench/runtime_bench ]]; then
    sizes=("1024 256" "512 64")
    [[ $device == cpu ]] && sizes=("64 64" "32 16")
    : >"$out/d.log"
    for size in "${sizes[@]}"; do
      # shellcheck disable=SC2086
      mpirun "${mpi_flags[@]}" -np 1 "$build/bench/runtime_bench" "$gpu" $size >>"$out/d.log" 2>&1
    done
    line=$(grep 'overhead' "$out/d.log" | head -1)
    small=$(grep 'overhead' "$out/d.log" | sed -n 2p | sed -E 's/.*overhead: ([-+0-9.]+%).*/\1/')
    overhead=$(sed -E 's/.*overhead: ([-+0-9.]+)%.*/\1/' <<<"$line")
    small_size=$(grep -o 'width [0-9]*, context [0-9]*' "$out/d.log" | sed -n 2p)
    [[ -n $small ]] && line="$line ($small_size: $small)"
    if [[ -n $overhead ]] && python3 -c "import sys; sys.exit(0 if float('$overhead') <= 3 else 1)"; then
      record d pass "$line"
    else
      record d FAIL "${line:-see $out/d.log} (target <= 3%)"
    fi
  else
    record d skipped "no bench/runtime_bench in $build"
  fi
fi

# --- (e) remat and offload plans: measured against predicted ------------------------------------
if wants e; then
  # One rank, so that the comparison is of the stage's own plan: two ranks sharing one GPU over MPI
  # add transfer latencies that no --bandwidth describes. A dry run measures the model; its plan's
  # memory at a loose limit sets a tight one (70%) at which the planner must recompute or offload.
  # The host link's speed is measured (pinned copies both ways, the slower), 20 GB/s without torch.
  host_bandwidth=20GB/s
  if [[ $device == cuda ]]; then
    host_bandwidth=$("$python" - <<'PY' 2>"$out/e-host-link.log" || echo failed
import torch
n = 256 << 20
host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
dev = torch.empty(n, dtype=torch.uint8, device="cuda")
rates = []
for copy in (lambda: dev.copy_(host, non_blocking=True), lambda: host.copy_(dev, non_blocking=True)):
    copy()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        copy()
    end.record()
    end.synchronize()
    rates.append(5 * n / (start.elapsed_time(end) * 1e-3) / 1e9)
print(f"{min(rates):.1f}GB/s")
PY
    )
  fi
  if [[ $host_bandwidth == failed ]]; then
    echo "gpu-check: could not measure the host link with $python (see $out/e-host-link.log): assuming 20GB/s"
    host_bandwidth=20GB/s
  fi
  echo "gpu-check: host link $host_bandwidth"
  big=(--model gpt --layers 8 --width 1024 --heads 16 --context 256 --micro-batch-size 8
    --micro-batches 4 --seed 3 --eval-every 0 --quiet --bandwidth 100GB/s
    --host-bandwidth "$host_bandwidth")
  [[ $device == cpu ]] && big=("${big[@]/1024/128}")
  mkdir -p "$out/e-dry"
  "$madpipe" train "${big[@]}" --gpus 1 --memory 64GiB --device "$gpu" --dry-run \
    --output-dir "$out/e-dry" >"$out/e-dry/log" 2>&1
  # offload_limit: the smallest of 70%, 75%, ... 95% of the loose plan's memory at which the
  # dry run's profile plans with offloads alone (the planner's plan is written to e-offload.plan.json,
  # counting the 4 weight-sized copies the run holds with its default optimizer, AdamW):
  # where the host link is slower than the layers produce activations, offloading alone cannot
  # reach the limit at which recomputing can.
  offload_limit() {
    local percent limit
    for percent in 70 75 80 85 90 95; do
      limit=$((loose * percent / 100))
      if "$madpipe" plan --profile "$out/e-dry/profile.json" --gpus 1 --memory "$limit" \
        --weight-copies 4 --bandwidth 100GB/s --host-bandwidth "$host_bandwidth" --micro-batches 4 --offload host \
        --quiet --output "$out/e-offload.plan.json" >/dev/null 2>&1 &&
        grep -Eq '"sequence": "[^"]*\bO[0-9]' "$out/e-offload.plan.json"; then
        echo "$limit"
        return 0
      fi
    done
    return 1
  }
  loose=$(python3 -c "import json, sys; print(max(json.load(open(sys.argv[1]))['predicted']['memory_bytes']))" \
    "$out/e-dry/plan.json" 2>/dev/null)
  for kind in remat offload; do
    if [[ -z $loose ]]; then
      record "e-$kind" FAIL "the dry run failed: $out/e-dry/log"
      continue
    fi
    # Recomputation at 70% of the loose plan's memory, planned by the run; offloading alone at the
    # limit offload_limit found, with that plan.
    limit=$((loose * 70 / 100))
    flags=(--remat rotor)
    if [[ $kind == offload ]]; then
      if ! limit=$(offload_limit); then
        record e-offload FAIL "no plan offloads at 70-95% of the loose plan's memory ($loose bytes)"
        continue
      fi
      flags=(--offload host --plan "$out/e-offload.plan.json")
    fi
    if train "$out/e-$kind" 1 "${big[@]}" --memory "$limit" \
      --steps 8 --trace-steps 4 --device "$gpu" "${flags[@]}"; then
      detail=$(python3 - "$out/e-$kind" "$kind" <<'PY'
import json, sys
d, kind = sys.argv[1:3]
plan = json.load(open(f"{d}/plan.json"))
trace = json.load(open(f"{d}/trace.json"))
s = trace["summary"]
sequences = [st["sequence"].split() for st in plan.get("stages", []) if st.get("sequence")]
offloads = sum(1 for seq in sequences for op in seq if op.startswith("O"))
# The CUDA peak against the plan's memory; the lowered program's bound (what the runtime's own
# accounting checks, with every buffer at its largest) beside it.
planned = plan["predicted"]["memory_bytes"]
memory = [peak / p for peak, p in zip(s["peak_bytes"], planned)]
bound = [peak / p for peak, p in zip(s["peak_bytes"], trace["predicted"]["memory_bytes"])]
worst = max(memory, key=lambda r: abs(r - 1))
print(f"{len(sequences)} stage(s) with a sequence ({offloads} offloads); period x{s['period_ratio']:.2f}, "
      + "peak " + ", ".join(f"x{r:.2f}" for r in memory) + " of the plan's memory ("
      + ", ".join(f"x{r:.2f}" for r in bound) + " of the program's bound)")
ok = (sequences and (kind != "offload" or offloads > 0) and abs(s["period_ratio"] - 1) <= 0.10
      and abs(worst - 1) <= 0.10)
sys.exit(0 if ok else 1)
PY
      ) && record "e-$kind" pass "$detail" || record "e-$kind" FAIL "$detail (target: within 10%)"
    else
      record "e-$kind" FAIL "see $out/e-$kind/log"
    fi
  done
fi

# --- (f) profiles and their run-to-run spread --------------------------------------------------
if wants f; then
  for model in gpt cnn; do
    ok=1
    for run in 1 2; do
      "$madpipe" profile --model "$model" --device "$gpu" --output "$out/f-$model-$run.json" \
        >"$out/f-$model-$run.log" 2>&1 || ok=0
    done
    if [[ $ok == 1 ]]; then
      detail=$(python3 - "$out/f-$model-1.json" "$out/f-$model-2.json" <<'PY'
import json, sys
a, b = (json.load(open(f))["layers"] for f in sys.argv[1:3])
ta = sum(l["forward_ms"] + l["backward_ms"] for l in a)
tb = sum(l["forward_ms"] + l["backward_ms"] for l in b)
worst = max(abs((x["forward_ms"] + x["backward_ms"]) - (y["forward_ms"] + y["backward_ms"]))
            / max(y["forward_ms"] + y["backward_ms"], 1e-9) for x, y in zip(a, b))
print(f"{len(a)} layers, {ta:.3f} ms vs {tb:.3f} ms per micro-batch ({abs(ta - tb) / tb:.1%} apart), largest layer spread {worst:.1%}")
PY
      )
      record "f-$model" pass "$detail"
    else
      record "f-$model" FAIL "see $out/f-$model-*.log"
    fi
  done
fi

# --- (g) split backwards: zb-h1 (B, then W where the GPU idles) against 1f1b ----------------------
if wants g; then
  ok=1
  detail=""
  for algorithm in 1f1b zb-h1; do
    train "$out/g-$algorithm" 2 "${gpt[@]}" --steps 8 --trace-steps 4 --device "$gpu" \
      --transport mpi --algorithm "$algorithm" || ok=0
  done
  if [[ $ok == 1 ]] && detail=$(same_losses "$out/g-zb-h1" "$out/g-1f1b" 1e-4); then
    detail+=$(python3 - "$out/g-1f1b" "$out/g-zb-h1" <<'PY'
import json, sys
whole, split = (json.load(open(f"{d}/trace.json")) for d in sys.argv[1:3])
plan = json.load(open(f"{sys.argv[2]}/plan.json"))
assert any(op["kind"] == "W" for op in plan["pattern"]["ops"]), "no W op in the zb-h1 plan"
assert any(op["kind"] == "W" for op in split["ops"]), "no W op in the zb-h1 trace"
within = all(0 < m["peak_bytes"] <= b for m, b in zip(split["memory"], split["predicted"]["memory_bytes"]))
ratio = split["summary"]["step_ms"] / whole["summary"]["step_ms"]
print(f"; step zb-h1/1f1b x{ratio:.3f}; peaks " + ", ".join(
    f"{m['peak_bytes'] / b:.2f}" for m, b in zip(split["memory"], split["predicted"]["memory_bytes"]))
    + " of the bound" + ("" if within else " (OVER)"))
sys.exit(0 if within else 1)
PY
    ) && record g pass "$detail" || record g FAIL "$detail"
  else
    record g FAIL "${detail:-a run failed: $out/g-*/log}"
  fi
fi

# --- (h) a 1B Llama-style model in bf16: throughput against plain loops, memory against the plan --
if wants h; then
  if [[ $device == cuda ]]; then
    if MADPIPE=$madpipe PYTHON=$python DEVICE=$gpu bench/llama_gpu/run.sh "$out/h" >"$out/h.log" 2>&1; then
      record h pass "$(grep 'target' "$out/h.log")"
    else
      record h FAIL "$(grep 'target' "$out/h.log" || echo "see $out/h.log")"
    fi
  else
    record h skipped "no GPU ($device); SIZE=tiny DEVICE=cpu bench/llama_gpu/run.sh tries the script"
  fi
fi

# --- Summary ------------------------------------------------------------------------------------
echo
echo "gpu-check on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo "$device") in $(((SECONDS - started) / 60)) min:"
printf '%-10s %-8s %s\n' check result detail
failed=0
for row in "${rows[@]}"; do
  IFS='|' read -r name status detail <<<"$row"
  printf '%-10s %-8s %s\n' "$name" "$status" "$detail"
  [[ $status == FAIL ]] && failed=1
done
exit $failed
