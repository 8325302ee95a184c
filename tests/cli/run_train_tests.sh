#!/usr/bin/env bash
# End-to-end tests of `madpipe train` under mpirun (CPU ranks). Usage:
#   run_train_tests.sh MADPIPE_BINARY MPIRUN CASE
set -uo pipefail

madpipe=$1
mpirun_bin=$2
case_name=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

# With MADPIPE_NCCL_EMULATION=1 (the train.nccl.* tests), every run moves its tensors over the
# NCCL transport, emulated over MPI on the CPU ranks.
transport=()
[[ ${MADPIPE_NCCL_EMULATION:-} == 1 ]] && transport=(--transport nccl)

fail() {
  echo "FAIL [$case_name]: $*" >&2
  echo "--- stdout" >&2; cat out >&2 2>/dev/null
  echo "--- stderr" >&2; cat err >&2 2>/dev/null
  exit 1
}

# wait_for_lines FILE N: until FILE has N lines, at most 120 s (the run is in the background).
wait_for_lines() {
  local tries=0
  until [[ -f $1 && $(wc -l <"$1") -ge $2 ]]; do
    tries=$((tries + 1))
    [[ $tries -le 1200 ]] || fail "$1 never reached $2 lines"
    sleep 0.1
  done
}

# rank_pid MPIRUN_PID: the process of one rank (a child of mpirun named madpipe).
rank_pid() {
  pgrep -P "$1" -x "madpipe|madpipe-runtime" | head -1
}

# signal_mid_run RANKS SIGNAL DIR [OPTION...]: starts a long run of the small model on RANKS ranks,
# sends SIGNAL to one rank once DIR/metrics.jsonl has 2 lines, waits for mpirun; $status is its
# exit.
signal_mid_run() {
  "$mpirun_bin" --oversubscribe --allow-run-as-root -np "$1" "$madpipe" train "${small[@]}" \
    "${transport[@]}" --gpus "$1" --steps 100000 --trace-steps 0 --output-dir "$3" "${@:4}" \
    >out 2>err &
  launcher=$!
  wait_for_lines "$3/metrics.jsonl" 2
  kill "-$2" "$(rank_pid $launcher)" || fail "no rank process to signal"
  wait $launcher
  status=$?
}

loss_of() {  # loss_of METRICS STEP
  grep "\"step\":$2," "$1" | tail -1 | sed 's/.*"loss":\([^,]*\),.*/\1/'
}

mpi() {
  local ranks=$1
  shift
  "$mpirun_bin" --oversubscribe --allow-run-as-root -np "$ranks" "$madpipe" train "$@" \
    "${transport[@]}" >out 2>err
  status=$?
}

# python_with_torch: sets $python to a Python that imports torch (.venv's, else python3 when it
# holds torch, as on a GPU machine), or fails the case.
python_with_torch() {
  python=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv/bin/python
  [[ -x $python ]] || python=python3
  "$python" -c "import torch" 2>/dev/null ||
    fail "no Python with torch (.venv/bin/python, made by launch/install-deps.sh, or python3)"
}

# same_losses A B [KEY]: the metrics files agree on KEY (default: loss) at every step, up to
# rounding (relative 1e-5).
same_losses() {
  python3 - "$1" "$2" "${3:-loss}" <<'PY'
import json, sys
key = sys.argv[3]
a, b = ([json.loads(l)[key] for l in open(f)] for f in sys.argv[1:3])
sys.exit(0 if a and len(a) == len(b) and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(a, b)) else 1)
PY
}

# clipped_everywhere FILE BOUND: every step's gradient norm exceeds BOUND (so clipping acted).
clipped_everywhere() {
  python3 - "$1" "$2" <<'PY'
import json, sys
norms = [json.loads(l)["grad_norm"] for l in open(sys.argv[1])]
sys.exit(0 if norms and all(n > float(sys.argv[2]) for n in norms) else 1)
PY
}

small=(--model mlp --layers 3 --width 8 --inputs 4 --outputs 2 --micro-batches 4
  --micro-batch-size 2 --eval-every 2)

case "$case_name" in
  mlp_two_ranks)
    mpi 2 "${small[@]}" --gpus 2 --steps 4 --output-dir run
    [[ $status -eq 0 ]] || fail "exit status $status"
    [[ $(wc -l <run/metrics.jsonl) -eq 4 ]] || fail "metrics.jsonl should have 4 lines"
    grep -q '"step":4,"loss":' run/metrics.jsonl || fail "no step 4 in metrics.jsonl"
    grep -q '"val_loss"' run/metrics.jsonl || fail "no validation loss in metrics.jsonl"
    grep -q '"format": "madpipe.plan/1"' run/plan.json || fail "plan.json missing"
    grep -q '"format": "madpipe.profile/1"' run/profile.json || fail "profile.json missing"
    grep -q "step 4/4" out || fail "no progress line for step 4"
    # Every rank profiled, at once; a stage time is never zero on the CPU clock.
    grep -q "^profiled 4 layers on cpu, all 2 ranks at once (mean times)" out ||
      fail "the profile should come from both ranks at once"
    grep -q '"forward_ms": 0,' run/profile.json && fail "a layer timed at 0 ms"
    ;;
  gpt_config_file)
    printf 'abcdefghij klmnop\nqrstuvwxyz\n%.0s' {1..50} >corpus.txt
    cat >run.ini <<'INI'
[model]
model = gpt
layers = 2
width = 16
heads = 2
context = 8
[training]
data = corpus.txt
steps = 3
micro-batches = 3
micro-batch-size = 2
[platform]
gpus = 3
[output]
output-dir = gpt-run
INI
    # The command line wins over the file.
    mpi 3 --config run.ini --steps 2
    [[ $status -eq 0 ]] || fail "exit status $status"
    [[ $(wc -l <gpt-run/metrics.jsonl) -eq 2 ]] || fail "--steps 2 should win over steps = 3"
    # A misspelled section is refused, not dropped with its keys. Every rank refuses it, but mpirun
    # may stop the others before they print once the first has exited, so one message is enough.
    sed 's/^\[training\]/[trainig]/' run.ini >typo.ini
    mpi 3 --config typo.ini --steps 2
    [[ $status -eq 2 ]] || fail "a misspelled section should exit 2, got $status"
    [[ $(grep -c "typo.ini: line 7 \[trainig\]: unknown section: its keys would be ignored (this command reads \[model\], \[training\], \[platform\], \[planner\], \[output\]; other commands read \[profile\], \[sweep\], \[scale\]; names are lower case)" err) -ge 1 ]] ||
      fail "the refusal should name the file, line and section: $(cat err)"
    ;;
  wrong_rank_count)
    mpi 2 "${small[@]}" --gpus 3 --steps 1 --output-dir run
    [[ $status -ne 0 ]] || fail "a --gpus that differs from the MPI world size must fail"
    grep -q "gpus is 3 but 2 MPI processes run" err || fail "message should name both counts"
    ;;
  plan_for_other_gpu_count)
    mpi 2 "${small[@]}" --gpus 2 --steps 1 --output-dir first
    [[ $status -eq 0 ]] || fail "first run failed"
    mpi 1 "${small[@]}" --gpus 1 --steps 1 --plan first/plan.json --output-dir second
    [[ $status -ne 0 ]] || fail "a plan for 2 GPUs must be refused on 1"
    grep -q "the plan is for 2 GPUs but --gpus is 1" err || fail "message should say why"
    ;;
  split_backward)
    # The measured profile splits the backwards of layers with Linear parts (B: input gradient,
    # W: weight gradients); zb-h1 (1f1b's partition and schedule, W in the idle time) trains with
    # split backwards to the losses of 1f1b with whole ones, holds no more memory than its plan
    # predicts, and its trace has the W ops. With 2 data-parallel replicas (gradients all-reduced
    # after each stage's last W) too.
    gpt=(--model gpt --layers 4 --width 32 --heads 2 --context 16 --micro-batches 6
      --micro-batch-size 4 --steps 3 --trace-steps 2 --eval-every 0 --bandwidth 1GB/s)
    mpi 2 "${gpt[@]}" --gpus 2 --algorithm 1f1b --output-dir whole
    [[ $status -eq 0 ]] || fail "1f1b run failed: $(tail -3 err)"
    mpi 2 "${gpt[@]}" --gpus 2 --algorithm zb-h1 --output-dir split
    [[ $status -eq 0 ]] || fail "zb-h1 run failed: $(tail -3 err)"
    grep -q "stage 0: .* on rank 0 (backward split: W apart)" out ||
      fail "the plan summary should say which stages split: $(grep 'stage 0' out)"
    python3 - whole split <<'PY' || fail "split run: $(grep 'rank [0-9]: peak' out)"
import json, sys
whole, split = sys.argv[1], sys.argv[2]
profile = json.load(open(split + "/profile.json"))
assert all("backward_weight_ms" in l for l in profile["layers"][1:]), "blocks and head split"
plan = json.load(open(split + "/plan.json"))
assert any(op["kind"] == "W" for op in plan["pattern"]["ops"]), "the plan has no W op"
trace = json.load(open(split + "/trace.json"))
assert any(op["kind"] == "W" for op in trace["ops"]), "the trace has no W op"
for memory, bound in zip(trace["memory"], trace["predicted"]["memory_bytes"]):
    assert 0 < memory["peak_bytes"] <= bound, (memory, bound)
losses = lambda d: [json.loads(l)["loss"] for l in open(d + "/metrics.jsonl") if '"loss"' in l]
a, b = losses(whole), losses(split)
assert len(a) == len(b) == 3, (a, b)
assert all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)), (a, b)
PY
    for algorithm in 1f1b zb-h1; do
      mpi 4 "${gpt[@]}" --gpus 4 --replicas 2 --algorithm $algorithm --output-dir dp-$algorithm
      [[ $status -eq 0 ]] || fail "2 x 2 $algorithm run failed: $(tail -3 err)"
    done
    grep -q '"kind": "W"' dp-zb-h1/plan.json || fail "the 2 x 2 zb-h1 plan has no W op"
    python3 - dp-1f1b dp-zb-h1 <<'PY' || fail "2 x 2: the split changes the losses"
import json, sys
losses = lambda d: [json.loads(l)["loss"] for l in open(d + "/metrics.jsonl") if '"loss"' in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) == 3 and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)), (a, b)
PY
    ;;
  published_orders)
    # interleaved and zb-v plans given the step's micro-batches carry their papers' step orders
    # (Megatron's interleaved 1F1B, ZB-V); the runtime runs them to the losses of 1f1b, within
    # the predicted memory. A plan whose order is for another number of micro-batches runs the
    # pattern's order, and the run says so.
    gpt=(--model gpt --layers 4 --width 32 --heads 2 --context 16 --micro-batch-size 4 --steps 3
      --eval-every 0 --bandwidth 1GB/s)
    mpi 2 "${gpt[@]}" --micro-batches 6 --gpus 2 --algorithm 1f1b --output-dir whole
    [[ $status -eq 0 ]] || fail "1f1b run failed: $(tail -3 err)"
    for algorithm in interleaved zb-v; do
      mpi 2 "${gpt[@]}" --micro-batches 6 --gpus 2 --algorithm $algorithm --output-dir $algorithm
      [[ $status -eq 0 ]] || fail "$algorithm run failed: $(tail -3 err)"
      python3 - whole $algorithm <<'PY' || fail "$algorithm: $(grep 'rank [0-9]: peak' out)"
import json, sys
whole, ordered = sys.argv[1], sys.argv[2]
plan = json.load(open(ordered + "/plan.json"))
assert plan["step_order"]["micro_batches"] == 6, plan.get("step_order")
trace = json.load(open(ordered + "/trace.json"))
for memory, bound in zip(trace["memory"], trace["predicted"]["memory_bytes"]):
    assert 0 < memory["peak_bytes"] <= bound, (memory, bound)
losses = lambda d: [json.loads(l)["loss"] for l in open(d + "/metrics.jsonl") if '"loss"' in l]
a, b = losses(whole), losses(ordered)
assert len(a) == len(b) == 3, (a, b)
assert all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)), (a, b)
PY
    done
    mpi 2 "${gpt[@]}" --micro-batches 4 --gpus 2 --plan zb-v/plan.json --output-dir other-m
    [[ $status -eq 0 ]] || fail "zb-v plan with 4 micro-batches failed: $(tail -3 err)"
    grep -q "its step order is for 6 micro-batches, this run's steps have 4" out ||
      fail "the run should say that the plan's order is for another step: $(grep -i note out)"
    ;;
  resume_equals_uninterrupted)
    mpi 3 "${small[@]}" --gpus 3 --steps 4 --output-dir straight
    [[ $status -eq 0 ]] || fail "uninterrupted run failed"
    mpi 3 "${small[@]}" --gpus 3 --steps 2 --output-dir resumed
    [[ $status -eq 0 ]] || fail "first half failed"
    [[ $(cat resumed/checkpoints/latest) == 2 ]] || fail "latest should name step 2"
    ls resumed/checkpoints/step-2/layers/layer-*.pt >/dev/null || fail "no layer files"
    # A resumed run is the same run: another optimizer is refused on every rank, naming what
    # differs, before anything is loaded; another plan is not (the checkpoint is keyed by the
    # model's layers).
    mpi 3 "${small[@]}" --gpus 3 --steps 4 --output-dir resumed --resume --optimizer sgd
    [[ $status -eq 2 ]] || fail "a resume with another optimizer should exit 2, got $status"
    [[ $(grep -c 'resumed/checkpoints/step-2/run.json: training.optimizer: the checkpoint.s run has "adamw", this run "sgd"; --resume continues the same run' err) -eq 3 ]] ||
      fail "every rank should name the setting: $(cat err)"
    "$madpipe" plan --profile resumed/profile.json --gpus 3 --memory 16GiB --bandwidth 12GB/s \
      --precision fp32 --optimizer adamw --algorithm 1f1b --output other.json >/dev/null 2>&1 ||
      fail "could not write the other plan"
    cp -r resumed replaced
    mpi 3 "${small[@]}" --gpus 3 --steps 4 --output-dir replaced --resume --plan other.json
    [[ $status -eq 0 ]] || fail "a resume with another plan failed: $(tail -3 err)"
    grep -q "resuming the checkpoint of step 2 on other.json: each rank loads the layers its plan gives it" out ||
      fail "the resume should say that it loads into another plan: $(head -5 out)"
    same_losses replaced/metrics.jsonl straight/metrics.jsonl || fail "the resume on another plan differs"
    mpi 3 "${small[@]}" --gpus 3 --steps 4 --output-dir resumed --resume
    [[ $status -eq 0 ]] || fail "resumed run failed"
    grep -q "resumed from the checkpoint of step 2" out || fail "no resume message"
    [[ $(wc -l <resumed/metrics.jsonl) -eq 4 ]] || fail "metrics should hold steps 1..4"
    for step in 3 4; do
      a=$(grep "\"step\":$step," straight/metrics.jsonl | sed 's/.*"loss":\([^,]*\),.*/\1/')
      b=$(grep "\"step\":$step," resumed/metrics.jsonl | sed 's/.*"loss":\([^,]*\),.*/\1/')
      [[ -n $a && $a == "$b" ]] || fail "step $step: loss $b after resume, $a without"
    done
    ;;
  gpt_2bw_learns)
    printf 'the quick brown fox jumps over the lazy dog\n%.0s' {1..80} >corpus.txt
    mpi 3 --mode 2bw --model gpt --layers 2 --width 16 --heads 2 --context 16 --data corpus.txt \
      --gpus 3 --steps 30 --micro-batches 6 --micro-batch-size 4 --learning-rate 0.01 --output-dir run
    [[ $status -eq 0 ]] || fail "exit status $status"
    [[ $(wc -l <run/metrics.jsonl) -eq 30 ]] || fail "one metrics line per update expected"
    first=$(head -1 run/metrics.jsonl | sed 's/.*"loss":\([^,]*\),.*/\1/')
    last=$(tail -1 run/metrics.jsonl | sed 's/.*"loss":\([^,]*\),.*/\1/')
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }' ||
      fail "2bw loss should fall by 20%: first $first, last $last"
    grep -q "two weight versions per stage" out || fail "no 2bw announcement"
    # Planned with the default 4 weight copies plus 2BW's three.
    grep -q '"weight_copies": 7' run/plan.json || fail "2bw should plan 7 weight copies"
    grep -q '"mode": "2bw"' run/trace.json || fail "no 2bw trace written"
    ;;
  two_bw_validation)
    # Validation in 2BW runs on the newest weights in evaluation mode, for any number of
    # validation micro-batches, between windows of updates.
    mlp=(--model mlp --layers 3 --width 8 --inputs 4 --outputs 2 --micro-batch-size 2 --mode 2bw
      --gpus 2 --steps 12 --algorithm 1f1b)
    mpi 2 "${mlp[@]}" --micro-batches 2 --eval-micro-batches 8 --eval-every 2 --output-dir eight
    [[ $status -eq 0 ]] || fail "2bw with 8 validation micro-batches failed: $(tail -3 err)"
    [[ $(wc -l <eight/metrics.jsonl) -eq 12 ]] || fail "12 updates expected"
    [[ $(grep -c '"val_loss"' eight/metrics.jsonl) -eq 6 ]] || fail "a validation every 2 steps expected"
    mpi 2 "${mlp[@]}" --micro-batches 3 --output-dir three
    [[ $status -eq 0 ]] || fail "2bw with 3 micro-batches past its first validation failed: $(tail -3 err)"
    [[ $(wc -l <three/metrics.jsonl) -eq 12 ]] || fail "12 updates expected"
    ;;
  two_bw_resume_equals_uninterrupted)
    # 2BW checkpoints at the end of a window (the pipeline drained) and resumes exactly.
    # 1f1b: 2bw needs a plan with at most --micro-batches in flight per stage, which the madpipe
    # planner does not bound (on a loaded machine it can pick one with more).
    mpi 2 "${small[@]}" --mode 2bw --gpus 2 --steps 8 --checkpoint-every 4 --algorithm 1f1b \
      --output-dir straight
    [[ $status -eq 0 ]] || fail "uninterrupted run failed"
    [[ $(wc -l <straight/metrics.jsonl) -eq 8 ]] || fail "one metrics line per update expected"
    grep -q '"step":8,.*"val_loss"' straight/metrics.jsonl || fail "no validation at step 8"
    # Its plan keeps 2 micro-batches in flight on stage 0: one per update is refused, with what
    # to change.
    mpi 2 --model mlp --layers 3 --width 8 --inputs 4 --outputs 2 --micro-batch-size 2 \
      --micro-batches 1 --mode 2bw --gpus 2 --steps 1 --plan straight/plan.json --output-dir one
    [[ $status -eq 2 ]] || fail "2bw with fewer micro-batches than in flight must exit 2"
    grep -q "micro-batches: 2bw needs at least as many micro-batches per update as the plan keeps in flight on a stage (2), got 1: raise --micro-batches to 2, plan with --algorithm 1f1b" err ||
      fail "the refusal should say what to change: $(cat err)"
    mpi 2 "${small[@]}" --mode 2bw --gpus 2 --steps 4 --plan straight/plan.json --output-dir resumed
    [[ $status -eq 0 ]] || fail "first half failed"
    [[ $(cat resumed/checkpoints/latest) == 4 ]] || fail "latest should name step 4"
    mpi 2 "${small[@]}" --mode 2bw --gpus 2 --steps 8 --checkpoint-every 4 --output-dir resumed \
      --resume
    [[ $status -eq 0 ]] || fail "resumed run failed"
    grep -q "resumed from the checkpoint of step 4" out || fail "no resume message"
    [[ $(wc -l <resumed/metrics.jsonl) -eq 8 ]] || fail "metrics should hold steps 1..8"
    for step in 5 6 7 8; do
      a=$(loss_of straight/metrics.jsonl $step)
      b=$(loss_of resumed/metrics.jsonl $step)
      [[ -n $a && $a == "$b" ]] || fail "step $step: loss $b after resume, $a without"
    done
    ;;
  memory_within_prediction)
    # The bytes each rank's tensors hold stay within the plan's prediction (plan.json:
    # predicted.memory_bytes, what the planner held within --memory) and within what the run's
    # program holds by the memory model, instruction by instruction (trace.json:
    # predicted.memory_bytes), in sync training, with rematerialization, with two weight versions
    # and with split backwards, on 2 and 4 ranks; and for the CNN, whose stem and residual blocks
    # end with a ReLU that keeps its output for the backward after the stage has sent it.
    within_plan() {
      python3 - $1 <<'PY' || fail "$1: $(grep 'rank [0-9]: peak' out)"
import json, sys
trace = json.load(open(sys.argv[1] + "/trace.json"))
planned = json.load(open(sys.argv[1] + "/plan.json"))["predicted"]["memory_bytes"]
bounds = trace["predicted"]["memory_bytes"]
assert len(trace["memory"]) == len(bounds) == len(planned) == trace["ranks"]
for memory, bound, plan in zip(trace["memory"], bounds, planned):
    assert memory["peak_at"], memory
    assert 0 < memory["peak_bytes"] <= bound, ("program bound", memory, bound)
    assert memory["peak_bytes"] <= plan, ("plan", memory, plan)
PY
    }
    gpt=(--model gpt --layers 6 --width 64 --heads 4 --context 64 --micro-batches 8
      --micro-batch-size 8 --steps 3 --trace-steps 2 --eval-every 0 --bandwidth 1GB/s)
    for ranks in 2 4; do
      for variant in sync remat 2bw split; do
        case $variant in
          sync) extra=() ;;
          remat) extra=(--memory $((ranks == 2 ? 9 : 8))MiB --remat rotor) ;;  # tight: recompute
          2bw) extra=(--mode 2bw --algorithm 1f1b) ;;  # in flight: at most the stages
          split) extra=(--algorithm zb-h1) ;;            # B, then W where the GPU idles
        esac
        run=$variant$ranks
        mpi $ranks "${gpt[@]}" --gpus $ranks "${extra[@]}" --output-dir $run
        [[ $status -eq 0 ]] || fail "$run failed: $(tail -3 err)"
        if [[ $variant == remat ]]; then
          grep -q '"strategy": "rotor"' $run/plan.json || fail "$run: the plan should recompute"
        fi
        within_plan $run
      done
    done
    # Split backwards: a residual block's B holds its W's kept bytes before its stored ones are
    # freed, which the step's program, and hence the plan's prediction, counts.
    mpi 3 --model cnn --micro-batches 6 --steps 3 --trace-steps 2 --eval-every 0 \
      --bandwidth 1GB/s --gpus 3 --output-dir cnn3
    grep -q backward_weight_ms cnn3/plan.json || fail "cnn3: the plan should split backwards"
    [[ $status -eq 0 ]] || fail "cnn3 failed: $(tail -3 err)"
    within_plan cnn3
    # A TorchScript chain whose ReLU and Tanh layers keep their outputs, at a size where the
    # data file and the module's code (host memory, not counted), the optimizer's temporaries
    # and the gradient check would show; rank 1 runs two stages that both send to rank 2, whose
    # receives follow rank 1's sending order without taking more arena than the plan's buffers.
    # Its messages are whole 256-byte units of the arena, which the plan does not round up to.
    python_with_torch
    "$python" - <<'PY' 2>/dev/null || fail "could not write the TorchScript MLP"
import torch, torch.nn as nn
torch.manual_seed(0)
mlp = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))
torch.jit.save(torch.jit.script(mlp), "mlp.pt")
x = torch.randn(200, 8)
torch.save({"inputs": x, "targets": torch.tanh(x[:, :2])}, "mlp_data.pt")
PY
    mpi 4 --model script --script mlp.pt --loss mse --data mlp_data.pt --data-format tensors \
      --micro-batches 4 --micro-batch-size 4 --steps 4 --trace-steps 2 --eval-every 0 --gpus 4 \
      --output-dir script4
    [[ $status -eq 0 ]] || fail "script4 failed: $(tail -3 err)"
    within_plan script4
    # A plan made by `madpipe plan` counts 3 weight copies by default; AdamW holds 4: the run
    # says so and bounds its memory with what it holds.
    "$madpipe" plan --profile sync2/profile.json --gpus 2 --memory 1GiB --bandwidth 1GB/s \
      --output plan3.json >/dev/null 2>&1 || fail "plan from the profile failed"
    mpi 2 "${gpt[@]}" --gpus 2 --plan plan3.json --output-dir three
    [[ $status -eq 0 ]] || fail "training with plan3.json failed: $(tail -3 err)"
    grep -q "note: the plan counts 3 weight-sized copies per weight, this run holds 4 (16 bytes per parameter: fp32 weights 4 + gradients 4 + AdamW moments 8); plan with --precision fp32 --optimizer adamw to count them" out ||
      fail "no note on the weight copies: $(head -5 out)"
    python3 - three/trace.json <<'PY' || fail "plan3: $(grep 'rank [0-9]: peak' out)"
import json, sys
trace = json.load(open(sys.argv[1]))
for memory, bound in zip(trace["memory"], trace["predicted"]["memory_bytes"]):
    assert 0 < memory["peak_bytes"] <= bound, (memory, bound)
PY
    ;;
  gpt_token_file)
    # A GPT trains on a nanoGPT-style file of 16-bit token ids (here the bytes of a text, with
    # a separate validation file); an id outside --vocab stops every rank before training.
    python3 - <<'PY' || fail "could not write the token files"
import array
text = open("/usr/share/common-licenses/GPL-3", "rb").read()
array.array("H", list(text[:30000])).tofile(open("train.bin", "wb"))  # one token per byte
array.array("H", list(text[30000:34000])).tofile(open("val.bin", "wb"))
PY
    tokens=(--model gpt --layers 2 --width 32 --heads 2 --context 16 --micro-batches 4
      --micro-batch-size 4 --eval-every 2 --data train.bin --data-format tokens-u16
      --validation-data val.bin)
    mpi 2 "${tokens[@]}" --gpus 2 --steps 4 --output-dir run
    [[ $status -eq 0 ]] || fail "token-file training failed: $(tail -3 err)"
    grep -q "data: tokens from train.bin and val.bin (30000 training and 4000 validation tokens of 16 bits, mapped)" out ||
      fail "no data line in: $(head -3 out)"
    grep -q '"step":4,.*"val_loss"' run/metrics.jsonl || fail "no validation loss at step 4"
    mpi 2 "${tokens[@]}" --gpus 2 --steps 1 --vocab 100 --output-dir bad
    [[ $status -eq 2 ]] || fail "an id outside --vocab should exit 2, got $status"
    [[ $(grep -c "train.bin: vocab: token [0-9]* is id [0-9]*, outside the embedding of 100 ids" err) -eq 2 ]] ||
      fail "every rank should name the file and the id: $(cat err)"
    # A file read with the wrong token width is refused on every rank, naming the likely format;
    # llm.c's header is read and checked.
    python3 - <<'PY' || fail "could not write the token files"
import array, struct
text = open("/usr/share/common-licenses/GPL-3", "rb").read()
array.array("I", list(text[:30000])).tofile(open("wide.bin", "wb"))  # 32-bit ids
ids = list(text[:30000])
open("llmc.bin", "wb").write(struct.pack("<256i", *([20240520, 1, len(ids)] + [0] * 253)) +
                             array.array("H", ids).tobytes())
open("llmc2.bin", "wb").write(struct.pack("<256i", *([20240520, 2, len(ids) // 2] + [0] * 253)) +
                              array.array("H", ids).tobytes())
open("short.bin", "wb").write(struct.pack("<256i", *([20240520, 1, len(ids) + 5] + [0] * 253)) +
                              array.array("H", ids).tobytes())
PY
    plain=(--model gpt --layers 2 --width 32 --heads 2 --context 16 --micro-batches 4
      --micro-batch-size 4 --eval-every 0 --steps 1)
    # refused FILE FORMAT PATTERN: 2 ranks exit 2 before training, each printing PATTERN.
    refused() {
      mpi 2 "${plain[@]}" --gpus 2 --data "$1" --data-format "$2" --output-dir bad
      [[ $status -eq 2 ]] || fail "$1 read as $2 should exit 2, got $status"
      [[ $(grep -c "$3" err) -eq 2 ]] || fail "every rank should say: $3; got: $(cat err)"
      [[ ! -e bad/metrics.jsonl ]] || fail "$1 read as $2 trained all the same"
    }
    refused wide.bin tokens-u16 "wide.bin: data-format: every second 16-bit token is 0, as when 32-bit tokens are read as tokens-u16: is the file --data-format tokens-u32?"
    refused train.bin tokens-u32 "train.bin: vocab: token [0-9]* is id [0-9]*, beyond any tokenizer's vocabulary of fewer than 2^20 ids (give --vocab if the ids are meant) (16-bit tokens read as tokens-u32 pair up into such ids: is the file --data-format tokens-u16?)"
    refused llmc2.bin tokens-u16 "llmc2.bin: data-format: an llm.c token file of version 2 holds 32-bit tokens, but it is read as tokens-u16: use --data-format tokens-u32"
    refused short.bin tokens-u16 "short.bin: data: its llm.c header says 30005 tokens of 2 bytes, but 60000 bytes follow the header"
    mpi 2 "${plain[@]}" --gpus 2 --data llmc.bin --data-format tokens-u16 --output-dir llmc
    [[ $status -eq 0 ]] || fail "an llm.c token file should train: $(tail -3 err)"
    grep -q "data: tokens from llmc.bin (27000 training and 3000 validation tokens of 16 bits, mapped)" out ||
      fail "the llm.c header should not count as tokens: $(head -3 out)"
    ;;
  script_model)
    # TorchScript chains written by PyTorch train as --model script: an MLP (mse, tensors file)
    # and a small language model (cross-entropy, token files); pipelined over 2 and 4 ranks they
    # give the losses of 1 rank, and the language model's loss falls. Bad modules and data stop
    # every rank before training with exit 2, naming the file and the problem.
    python_with_torch
    cat >make.py <<'PY'
import numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
mlp = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 2))
torch.jit.save(torch.jit.script(mlp), "mlp.pt")
x = torch.randn(200, 8)
torch.save({"inputs": x, "targets": torch.tanh(x[:, :2])}, "mlp_data.pt")
torch.save({"inputs": x, "targets": (x[:, 0] > 0).long()}, "class_ids.pt")
lm = nn.Sequential(nn.Embedding(32, 24), nn.Linear(24, 24), nn.GELU(), nn.LayerNorm(24),
                   nn.Linear(24, 32))
torch.jit.save(torch.jit.script(lm), "lm.pt")
text = np.tile(np.arange(32, dtype=np.uint16), 400)  # a sequence the model can learn
text.tofile("train.bin")
text[:2000].tofile("val.bin")
np.array([1, 2, 40] + [3] * 100, dtype=np.uint16).tofile("bad.bin")  # 40: past the embedding
class Pair(nn.Module):
    def forward(self, x):
        return x, x
torch.jit.save(torch.jit.script(nn.Sequential(nn.Linear(8, 8), Pair())), "pair.pt")
torch.jit.save(torch.jit.script(nn.Sequential(nn.Linear(8, 16), nn.Linear(32, 2))), "gap.pt")
PY
    "$python" make.py 2>/dev/null || fail "could not write the TorchScript modules"
    mlp=(--model script --script mlp.pt --loss mse --data mlp_data.pt --data-format tensors
      --micro-batches 4 --micro-batch-size 5 --eval-every 0 --steps 4)
    lm=(--model script --script lm.pt --data train.bin --validation-data val.bin
      --data-format tokens-u16 --context 16 --micro-batches 4 --micro-batch-size 4
      --learning-rate 0.01 --eval-every 10 --steps 20)
    mpi 1 "${mlp[@]}" --gpus 1 --plain-loop --output-dir mlp-plain
    [[ $status -eq 0 ]] || fail "the MLP's plain loop failed: $(tail -3 err)"
    mpi 1 "${lm[@]}" --gpus 1 --plain-loop --output-dir lm-plain
    [[ $status -eq 0 ]] || fail "the language model's plain loop failed: $(tail -3 err)"
    for ranks in 1 2 4; do
      mpi "$ranks" "${mlp[@]}" --gpus "$ranks" --output-dir "mlp-$ranks"
      [[ $status -eq 0 ]] || fail "the MLP on $ranks ranks failed: $(tail -3 err)"
      mpi "$ranks" "${lm[@]}" --gpus "$ranks" --output-dir "lm-$ranks"
      [[ $status -eq 0 ]] || fail "the language model on $ranks ranks failed: $(tail -3 err)"
      same_losses "mlp-$ranks/metrics.jsonl" mlp-plain/metrics.jsonl ||
        fail "the MLP's losses on $ranks ranks differ from the plain loop's"
      same_losses "lm-$ranks/metrics.jsonl" lm-plain/metrics.jsonl ||
        fail "the language model's losses on $ranks ranks differ from the plain loop's"
    done
    first=$(loss_of lm-4/metrics.jsonl 1)
    last=$(loss_of lm-4/metrics.jsonl 20)
    python3 -c "import sys; sys.exit(0 if $last < 0.8 * $first else 1)" ||
      fail "the language model's loss did not fall: $first -> $last"
    grep -q '"step":20,.*"val_loss"' lm-4/metrics.jsonl || fail "no validation loss at step 20"
    # The trained weights go back to PyTorch under the module's own keys, the same from 1 and 4
    # ranks, and not the initial ones.
    for ranks in 1 4; do
      "$madpipe" export-weights --run "lm-$ranks" --output "state-$ranks.pt" >out 2>err ||
        fail "export-weights of lm-$ranks failed"
      grep -q "wrote state-$ranks.pt: 7 tensors .* of step 20 of lm-$ranks" out ||
        fail "no export line in: $(cat out)"
    done
    "$python" - <<'PY' 2>/dev/null || fail "the exported weights do not load into the module, or differ"
import torch, torch.nn as nn
lm = nn.Sequential(nn.Embedding(32, 24), nn.Linear(24, 24), nn.GELU(), nn.LayerNorm(24),
                   nn.Linear(24, 32))
one, four = torch.load("state-1.pt"), torch.load("state-4.pt")
lm.load_state_dict(one)  # strict: every key of the module, no other
initial = torch.jit.load("lm.pt").state_dict()
assert all(torch.allclose(one[k], four[k], rtol=1e-5, atol=1e-6) for k in one)
assert any(not torch.equal(one[k], initial[k]) for k in one)
PY
    # The same weights as a safetensors file, which Hugging Face's package reads.
    "$madpipe" export-weights --run lm-4 --format safetensors >out 2>err ||
      fail "export-weights --format safetensors failed: $(cat err)"
    grep -q "wrote model.safetensors: 7 tensors .* of step 20 of lm-4" out || fail "no export line in: $(cat out)"
    "$python" - <<'PY' || fail "the safetensors file does not hold the torch export's tensors"
import torch
from safetensors import safe_open
from safetensors.torch import load_file
weights, four = load_file("model.safetensors"), torch.load("state-4.pt")
assert list(weights) == list(four), (list(weights), list(four))
assert all(torch.equal(weights[k], four[k]) for k in four)
with safe_open("model.safetensors", "pt") as file:
    assert file.metadata() == {"format": "pt", "step": "20"}, file.metadata()
PY
    "$madpipe" export-weights --run lm-4 --format onnx >out 2>err
    [[ $? -eq 2 ]] && grep -qF -- "--format: unknown format 'onnx' (valid: torch, safetensors)" err ||
      fail "an unknown format should exit 2: $(cat err)"
    "$madpipe" export-weights --run . --output none.pt >out 2>err
    [[ $? -eq 2 ]] && grep -q "checkpoints: no complete checkpoint" err ||
      fail "export-weights without a checkpoint should exit 2 naming the folder: $(cat err)"
    # expect_refusal MESSAGE ARGS...: 2 ranks exit 2 before training, each printing MESSAGE.
    expect_refusal() {
      local message=$1
      shift
      mpi 2 "$@" --gpus 2 --output-dir bad
      [[ $status -eq 2 ]] || fail "expected exit 2 ($message), got $status"
      [[ $(grep -cF "$message" err) -eq 2 ]] || fail "every rank should say: $message"
      [[ ! -e bad/metrics.jsonl ]] || fail "trained despite: $message"
    }
    head -c 500 mlp.pt >truncated.pt
    expect_refusal "pair.pt: layer 1: forward is (Tensor) -> (Tensor, Tensor); each child of the chain must take one tensor and return one tensor" \
      "${mlp[@]/mlp.pt/pair.pt}"
    expect_refusal "gap.pt: layer 1: fails on its input of shape [5, 16] Float (what layer 0 gives)" \
      "${mlp[@]/mlp.pt/gap.pt}"
    expect_refusal "truncated.pt: cannot load a TorchScript module" "${mlp[@]/mlp.pt/truncated.pt}"
    expect_refusal "class_ids.pt: targets: are Long, but --loss mse takes Float values" \
      "${mlp[@]/mlp_data.pt/class_ids.pt}"
    expect_refusal "train.bin: vocab: token 16 is id 16, outside the embedding of 16 ids" \
      "${lm[@]}" --vocab 16
    expect_refusal "bad.bin: vocab: token 2 is id 40, outside the embedding of 32 ids" \
      "${lm[@]/train.bin/bad.bin}"
    ;;
  gpt_from_pytorch_example)
    # examples/gpt_from_pytorch at small size on 1 and 4 ranks: the same losses, a falling loss,
    # and the exported weights give madpipe's last validation loss in PyTorch (check.py).
    python_with_torch
    example=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/examples/gpt_from_pytorch/run.sh
    for ranks in 1 4; do
      MADPIPE=$madpipe PYTHON=$python SIZE=small STEPS=24 "$example" "$ranks" "run-$ranks" \
        >"out-$ranks" 2>&1 || { cp "out-$ranks" out; fail "the example on $ranks ranks failed"; }
      grep -q "validation loss: PyTorch .* (relative difference" "out-$ranks" ||
        { cp "out-$ranks" out; fail "no check line on $ranks ranks"; }
    done
    same_losses run-4/run/metrics.jsonl run-1/run/metrics.jsonl ||
      fail "the losses on 4 ranks differ from 1 rank's"
    first=$(loss_of run-4/run/metrics.jsonl 1)
    last=$(loss_of run-4/run/metrics.jsonl 24)
    python3 -c "import sys; sys.exit(0 if $last < 0.8 * $first else 1)" ||
      fail "the loss did not fall: $first -> $last"
    ;;
  llama_from_pytorch_example)
    # examples/llama_from_pytorch at small size on 1 and 4 ranks: the same losses, a falling loss,
    # and the exported weights give madpipe's last validation loss in PyTorch (check.py).
    python_with_torch
    # In bf16 on 4 ranks, the losses stay within 3% of fp32's over the 24 steps.
    example=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/examples/llama_from_pytorch/run.sh
    for run in 1 4 bf16-4; do
      ranks=${run#bf16-}
      precision=fp32
      [[ $run == bf16-* ]] && precision=bf16
      MADPIPE=$madpipe PYTHON=$python SIZE=small STEPS=24 PRECISION=$precision "$example" "$ranks" \
        "run-$run" >"out-$run" 2>&1 || { cp "out-$run" out; fail "the example ($run) failed"; }
      grep -q "validation loss: PyTorch .* (relative difference" "out-$run" ||
        { cp "out-$run" out; fail "no check line ($run)"; }
    done
    same_losses run-4/run/metrics.jsonl run-1/run/metrics.jsonl ||
      fail "the losses on 4 ranks differ from 1 rank's"
    first=$(loss_of run-4/run/metrics.jsonl 1)
    last=$(loss_of run-4/run/metrics.jsonl 24)
    python3 -c "import sys; sys.exit(0 if $last < 0.8 * $first else 1)" ||
      fail "the loss did not fall: $first -> $last"
    python3 - <<'PY' || fail "bf16 losses should stay within 3% of fp32's"
import json
loss = lambda d: [json.loads(l)["loss"] for l in open(f"{d}/run/metrics.jsonl")]
assert all(abs(x - y) <= 0.03 * y for x, y in zip(loss("run-bf16-4"), loss("run-4"))), (loss("run-bf16-4"), loss("run-4"))
PY
    ;;
  mlp_tensor_file)
    # An MLP trains on the tensors of a file written by torch.save in Python; a file whose rows
    # the model does not take, or a truncated one, stops every rank before training.
    python_with_torch
    "$python" - <<'PY' || fail "could not write the tensor files"
import torch
g = torch.Generator().manual_seed(0)
x = torch.randn(200, 8, generator=g)
torch.save({"inputs": x, "targets": torch.tanh(x[:, :2])}, "data.pt")
torch.save({"inputs": x.double(), "targets": x[:, :2]}, "doubles.pt")
PY
    head -c 300 data.pt >truncated.pt
    tensors=(--model mlp --layers 2 --width 16 --inputs 8 --outputs 2 --micro-batches 4
      --micro-batch-size 5 --eval-every 2 --data-format tensors)
    mpi 2 "${tensors[@]}" --data data.pt --gpus 2 --steps 4 --output-dir run
    [[ $status -eq 0 ]] || fail "tensor-file training failed: $(tail -3 err)"
    grep -q "data: tensors from data.pt (180 training and 20 validation rows; inputs \[8\] Float, targets \[2\] Float)" out ||
      fail "no data line in: $(head -3 out)"
    grep -q '"step":4,.*"val_loss"' run/metrics.jsonl || fail "no validation loss at step 4"
    mpi 2 "${tensors[@]}" --data doubles.pt --gpus 2 --steps 1 --output-dir bad
    [[ $status -eq 2 ]] || fail "rows of another type should exit 2, got $status"
    [[ $(grep -c "doubles.pt: inputs: rows are \[8\] Double, but --model mlp (--inputs) takes \[8\] Float" err) -eq 2 ]] ||
      fail "every rank should name the file and the rows: $(cat err)"
    mpi 2 "${tensors[@]}" --data truncated.pt --gpus 2 --steps 1 --output-dir bad
    [[ $status -eq 2 ]] || fail "a truncated file should exit 2, got $status"
    [[ $(grep -c "truncated.pt: data: not a file that torch.save wrote, or a truncated one" err) -eq 2 ]] ||
      fail "every rank should name the truncated file: $(cat err)"
    ;;
  two_bw_memory_flat)
    # The tensors a rank holds in 2BW do not grow with the run: 400 steps (windows of 50 steps,
    # no validation) peak where 20 do (one window of 20). 1f1b: 2bw needs a plan with at most
    # --micro-batches in flight per stage, which the madpipe planner does not bound.
    quiet=(--model mlp --layers 3 --width 8 --inputs 4 --outputs 2 --micro-batches 4
      --micro-batch-size 2 --mode 2bw --gpus 2 --trace-steps 0 --algorithm 1f1b)
    mpi 2 "${quiet[@]}" --steps 2 --output-dir first
    [[ $status -eq 0 ]] || fail "first run failed"
    for steps in 20 400; do
      mpi 2 "${quiet[@]}" --steps $steps --plan first/plan.json --output-dir run$steps
      [[ $status -eq 0 ]] || fail "$steps steps failed"
      grep -A2 "tensor memory at most over the run" out >peak$steps
      [[ $(grep -c "bytes)" peak$steps) -eq 2 ]] || fail "no per-rank peak after $steps steps"
    done
    cmp -s peak20 peak400 || fail "peak after 400 steps ($(cat peak400)) differs from 20 ($(cat peak20))"
    ;;
  profile_then_plan)
    "$madpipe" profile --model mlp --layers 3 --width 8 --inputs 4 --outputs 2 \
      --micro-batch-size 2 --repeats 3 --output prof.json >out 2>err
    [[ $? -eq 0 ]] || fail "profile failed"
    grep -q '"format": "madpipe.profile/1"' prof.json || fail "no profile written"
    grep -q "wrote prof.json (4 layers)" out || fail "no summary line"
    grep -qE "^dense0 +[0-9.]+ +[0-9.]+ +[0-9.]+%" out || fail "no per-layer row with its spread"
    # An 8-wide hidden layer of 2 samples outputs 2 x 8 floats.
    grep -A6 '"name": "dense1"' prof.json | grep -q '"output_bytes": 64' || fail "dense1 output should be 64 bytes"
    "$madpipe" plan --profile prof.json --gpus 2 --memory 1GiB --bandwidth 1GB/s --output plan.json >out 2>err
    [[ $? -eq 0 ]] || fail "planning the measured profile failed"
    mpi 2 "${small[@]}" --gpus 2 --steps 2 --plan plan.json --output-dir run
    [[ $status -eq 0 ]] || fail "training with the plan of the measured profile failed"
    "$madpipe" profile --model mlp --device cuda:7 --output x.json >out 2>err
    [[ $? -ne 0 ]] || fail "an unusable device must fail"
    grep -q "device" err || fail "the message should name the device option"
    "$madpipe" profile --torchscript missing.pt --input-shape 2,4 --output x.json >out 2>err
    [[ $? -ne 0 ]] || fail "a missing TorchScript file must fail"
    grep -q "missing.pt" err || fail "the message should name the file"
    "$madpipe" profile --torchscript missing.pt --output x.json >out 2>err
    [[ $? -ne 0 ]] || fail "a TorchScript model without --input-shape must fail"
    grep -q "input-shape" err || fail "the message should name --input-shape"
    [[ ! -e x.json ]] || fail "no profile may be written after an error"
    ;;
  trace_and_show)
    mpi 3 "${small[@]}" --gpus 3 --steps 3 --trace-steps 2 --output-dir run
    [[ $status -eq 0 ]] || fail "exit status $status"
    grep -q '"format": "madpipe.trace/1"' run/trace.json || fail "no trace written"
    grep -q "trace of 2 steps" out || fail "no trace announcement"
    grep -qE "measured period [0-9.]+ ms" out || fail "no measured period"
    grep -qE "rank 2: peak .*ratio" out || fail "no per-rank memory against the prediction"
    "$madpipe" show --plan run/plan.json --trace run/trace.json --svg g.svg --chrome g.json >out 2>err
    [[ $? -eq 0 ]] || fail "show failed"
    grep -q "<svg" g.svg || fail "no SVG written"
    grep -q '"traceEvents"' g.json || fail "no Chrome trace written"
    mpi 2 "${small[@]}" --gpus 2 --steps 1 --trace-steps 0 --output-dir untraced
    [[ $status -eq 0 ]] || fail "untraced run failed"
    [[ ! -e untraced/trace.json ]] || fail "--trace-steps 0 must not write a trace"
    ;;
  replan_moves_layers)
    # The profile claims the output layer is slow, so the first plan gives it a rank of its own;
    # the measured stage times say otherwise and the run switches plans after step 3, moving
    # layers (weights and AdamW state) between ranks. Losses must match unsplit training. The
    # output layer is tiny next to the three wide ones, so that whatever the noise of the measured
    # times, the running plan is about twice as slow as the new one.
    wide=(--model mlp --layers 3 --width 512 --inputs 256 --outputs 8 --micro-batch-size 16)
    "$madpipe" profile "${wide[@]}" --repeats 3 --output prof.json >out 2>err ||
      fail "profile failed"
    python3 - prof.json skewed.json <<'PY' || fail "skewing the profile failed"
import json, sys
profile = json.load(open(sys.argv[1]))
out = [layer for layer in profile["layers"] if layer["name"] == "out"][0]
out["forward_ms"], out["backward_ms"] = 50, 100
if "backward_weight_ms" in out:  # the measured split, in its proportions
    share = out["backward_weight_ms"] / (out["backward_input_ms"] + out["backward_weight_ms"])
    out["backward_weight_ms"] = 100 * share
    out["backward_input_ms"] = 100 - out["backward_weight_ms"]
json.dump(profile, open(sys.argv[2], "w"), indent=1)
PY
    wide+=(--micro-batches 4 --eval-every 0)
    mpi 1 "${wide[@]}" --gpus 1 --steps 5 --plain-loop --output-dir unsplit
    [[ $status -eq 0 ]] || fail "unsplit run failed"
    for optimizer in adamw sgd; do
      mpi 2 "${wide[@]}" --optimizer "$optimizer" --gpus 2 --steps 5 --profile skewed.json \
        --replan-after 3 --replan-min-gain 0 --output-dir "re-$optimizer"
      [[ $status -eq 0 ]] || fail "$optimizer: exit status $status"
      grep -q "profile of 4 layers read from skewed.json" out || fail "--profile not used"
      grep -q "stage 1: layers out..out on rank 1" out || fail "the first plan should isolate the output layer"
      grep -q "re-planning after step 3 on the stage times measured in steps 2..3" out || fail "no re-planning"
      grep -q "switching to the new plan" out || fail "$optimizer: no switch"
      grep -qE "^moved [1-9][0-9]* layers? between ranks" out || fail "$optimizer: no layer moved"
      [[ -f re-$optimizer/checkpoints/step-3/plan.json ]] || fail "no checkpoint with the new plan"
      cmp -s "re-$optimizer/plan.json" "re-$optimizer/checkpoints/step-3/plan.json" ||
        fail "plan.json should be the new plan"
    done
    mpi 1 "${wide[@]}" --optimizer sgd --gpus 1 --steps 5 --output-dir unsplit-sgd
    for pair in "unsplit re-adamw" "unsplit-sgd re-sgd"; do
      read -r a b <<<"$pair"
      for step in 4 5; do
        x=$(grep "\"step\":$step," "$a/metrics.jsonl" | sed 's/.*"loss":\([^,]*\),.*/\1/')
        y=$(grep "\"step\":$step," "$b/metrics.jsonl" | sed 's/.*"loss":\([^,]*\),.*/\1/')
        [[ -n $x && $x == "$y" ]] || fail "$b step $step: loss $y, unsplit $x"
      done
    done
    # Resuming from the checkpoint written at the switch runs the new plan from step 4.
    rm -rf re-adamw/checkpoints/step-5
    echo 3 >re-adamw/checkpoints/latest
    mpi 2 "${wide[@]}" --gpus 2 --steps 5 --profile skewed.json --output-dir re-adamw --resume
    [[ $status -eq 0 ]] || fail "resume after the switch failed"
    grep -q "resumed from the checkpoint of step 3" out || fail "no resume message"
    y=$(grep '"step":5,' re-adamw/metrics.jsonl | tail -1 | sed 's/.*"loss":\([^,]*\),.*/\1/')
    x=$(grep '"step":5,' unsplit/metrics.jsonl | sed 's/.*"loss":\([^,]*\),.*/\1/')
    [[ $x == "$y" ]] || fail "resumed step 5: loss $y, unsplit $x"
    mpi 2 "${wide[@]}" --gpus 2 --steps 3 --replan-after 3 --output-dir bad
    [[ $status -ne 0 ]] || fail "--replan-after at the last step must fail"
    grep -q "replan-after 3 leaves no step to run with a new plan (--steps 3)" err || fail "message should say why"
    mpi 2 "${wide[@]}" --mode 2bw --gpus 2 --steps 4 --replan-after 2 --output-dir bad
    [[ $status -ne 0 ]] || fail "--replan-after in 2bw must fail"
    grep -q "re-planning needs --mode sync" err || fail "message should name the mode"
    ;;
  nan_stops_or_skips)
    diverging=("${small[@]}" --optimizer sgd --learning-rate 1e30 --momentum 0 --gpus 2 --steps 4)
    mpi 2 "${diverging[@]}" --output-dir stop
    [[ $status -ne 0 ]] || fail "a non-finite loss must stop the run"
    grep -qE "step [0-9]+: (the loss of micro-batch [0-9]+ \(stage [0-9]+ on rank [01]\)|a gradient of stage [0-9]+ \(rank [01]\)) is not finite; stopping" err ||
      fail "the message should name the step, micro-batch or stage, and rank"
    mpi 2 "${diverging[@]}" --on-nan skip --output-dir skip
    [[ $status -eq 0 ]] || fail "--on-nan skip: exit status $status"
    grep -q "update skipped (--on-nan skip)" out || fail "no skip announcement"
    grep -q '"skipped":true' skip/metrics.jsonl || fail "metrics should mark skipped steps"
    mpi 2 "${small[@]}" --gpus 2 --steps 1 --on-nan ignore --output-dir bad
    [[ $status -ne 0 ]] && grep -q "unknown action 'ignore' (valid: stop, skip)" err || fail "bad --on-nan accepted"
    ;;
  sigterm_checkpoints_and_resumes)
    signal_mid_run 2 TERM sig
    [[ $status -eq 75 ]] || fail "a stopped run should exit 75 (stopped, resumable), got $status"
    grep -qE "^stopped by SIGTERM after step [0-9]+; checkpoint written, continue with --resume" out ||
      fail "no stop message"
    k=$(sed -n 's/^stopped by SIGTERM after step \([0-9]*\);.*/\1/p' out)
    [[ $(cat sig/checkpoints/latest) == "$k" ]] || fail "latest should name step $k"
    [[ -f sig/checkpoints/step-$k/complete && -f sig/checkpoints/step-$k/run.json ]] || fail "incomplete checkpoint"
    grep -q '"next_step": '$((k + 1)) sig/checkpoints/step-$k/run.json || fail "run.json should say where the data continues"
    [[ $(wc -l <sig/metrics.jsonl) -eq $k ]] || fail "metrics should hold steps 1..$k"
    mpi 2 "${small[@]}" --gpus 2 --steps $((k + 2)) --output-dir sig --resume
    [[ $status -eq 0 ]] || fail "resume failed"
    mpi 2 "${small[@]}" --gpus 2 --steps $((k + 2)) --output-dir straight
    for step in $((k + 1)) $((k + 2)); do
      a=$(loss_of straight/metrics.jsonl $step); b=$(loss_of sig/metrics.jsonl $step)
      [[ -n $a && $a == "$b" ]] || fail "step $step: loss $b after the stop and resume, $a straight"
    done
    ;;
  cluster_launches)
    # Slurm's pre-emption warning (SIGUSR1) stops a run as SIGTERM does: checkpoint, exit 75.
    signal_mid_run 2 USR1 usr1
    [[ $status -eq 75 ]] || fail "SIGUSR1: expected exit status 75, got $status"
    grep -qE "^stopped by SIGUSR1 after step [0-9]+; checkpoint written, continue with --resume" out ||
      fail "no SIGUSR1 stop message"
    k=$(cat usr1/checkpoints/latest)
    [[ -f usr1/checkpoints/step-$k/complete ]] || fail "no complete checkpoint after SIGUSR1"
    # torchrun starts no MPI job: refused before anything runs, exit 2 (bad input).
    TORCHELASTIC_RUN_ID=job WORLD_SIZE=2 "$madpipe" train "${small[@]}" --gpus 2 \
      --output-dir never >out 2>err
    status=$?
    [[ $status -eq 2 ]] || fail "torchrun: expected exit status 2, got $status"
    grep -qF "madpipe train was started by torchrun, which starts no MPI job" err &&
      grep -qF "mpirun -np 2 madpipe train" err || fail "torchrun: $(cat err)"
    [[ ! -e never ]] || fail "torchrun: the run started"
    # No plan fits: exit 3 on every rank, the message naming the memory that would.
    mpi 2 "${small[@]}" --gpus 2 --steps 1 --memory 1KiB --output-dir tiny
    [[ $status -eq 3 ]] || fail "no plan fits: expected exit status 3, got $status: $(tail -2 err)"
    grep -q "memory" err || fail "no plan fits: $(tail -2 err)"
    # A profile measured at another micro-batch size plans another model: refused, exit 2.
    mpi 1 "${small[@]}" --gpus 1 --steps 1 --dry-run --output-dir measured
    [[ -f measured/profile.json ]] || fail "dry run wrote no profile: $(tail -2 err)"
    grep -q '"batch": 2,' measured/profile.json || fail "the profile should be for micro-batches of 2"
    sed 's/"batch": 2,/"batch": 3,/' measured/profile.json >other.json
    mpi 2 "${small[@]}" --gpus 2 --steps 1 --profile other.json --output-dir other_size
    [[ $status -eq 2 ]] || fail "another micro-batch size: expected exit status 2, got $status"
    grep -qF "other.json: /batch: the profile was measured with micro-batches of 3 samples but this run trains with --micro-batch-size 2" err ||
      fail "another micro-batch size: $(grep -v '^ ' err | head -3)"
    # metrics.jsonl: each step's time, rates and the ranks' peak memory so far.
    mpi 2 "${small[@]}" --gpus 2 --steps 2 --tf32 off --output-dir metrics
    [[ $status -eq 0 ]] || fail "--tf32 off run failed: $(tail -2 err)"
    for key in step_s samples_per_s peak_memory_bytes; do
      [[ $(grep -c "\"$key\":" metrics/metrics.jsonl) -eq 2 ]] || fail "metrics.jsonl lacks $key"
    done
    ;;
  damaged_checkpoint_falls_back)
    mpi 2 "${small[@]}" --gpus 2 --steps 4 --checkpoint-every 2 --output-dir run
    [[ $status -eq 0 ]] || fail "first run failed"
    printf 'x' >>run/checkpoints/step-4/layers/layer-1.pt
    mpi 2 "${small[@]}" --gpus 2 --steps 6 --output-dir run --resume
    [[ $status -eq 0 ]] || fail "resume with a damaged newest checkpoint failed"
    grep -q "checkpoint of step 4 is not usable: .*layer-1.pt: checksum" err || fail "the damaged file should be named"
    grep -q "checkpoints of step 4 are damaged; resuming from step 2" out || fail "no fallback message"
    [[ $(wc -l <run/metrics.jsonl) -eq 6 ]] || fail "metrics should hold steps 1..6 once each"
    mpi 2 "${small[@]}" --gpus 2 --steps 6 --output-dir straight
    a=$(loss_of straight/metrics.jsonl 6); b=$(loss_of run/metrics.jsonl 6)
    [[ -n $a && $a == "$b" ]] || fail "step 6: loss $b after the fallback, $a straight"
    rm run/checkpoints/step-2/layers/layer-0.pt.sum
    printf 'x' >>run/checkpoints/step-6/layers/layer-0.pt
    mpi 2 "${small[@]}" --gpus 2 --steps 8 --output-dir run --resume
    [[ $status -ne 0 ]] || fail "no whole checkpoint must fail"
    grep -q "no whole checkpoint to resume from (damaged: step 6, 4, 2)" err || fail "message should list the damaged steps"
    ;;
  stalled_peer_stops_all)
    # A rank that stops (SIGSTOP: alive but silent) ends every rank within --transfer-timeout,
    # with a message naming a waiting rank and what it waited for.
    signal_mid_run 3 STOP stalled --transfer-timeout 3
    [[ $status -ne 0 ]] || fail "a stalled rank must make the run fail"
    grep -qE "rank [0-9]+ waited more than 3 s for (the (activation|gradient) of stage [0-9]+, micro-batch [0-9]+ from rank [0-9]+|rank [0-9]+ to receive|the other ranks)" err ||
      fail "the message should name the waiting rank and what it waited for"
    pgrep -P $launcher -x "madpipe|madpipe-runtime" >/dev/null && fail "ranks left running"
    ;;
  killed_rank_stops_all)
    signal_mid_run 3 KILL killed
    [[ $status -ne 0 ]] || fail "a killed rank must make the run fail"
    grep -qE "rank [0-9]+ .*(signal 9|Killed)" err out || fail "the message should name the rank and the signal"
    pgrep -P $launcher -x "madpipe|madpipe-runtime" >/dev/null && fail "ranks left running"
    ;;
  data_parallel_equals_unsplit)
    # 2 replicas x 2 pipeline ranks, 2 micro-batches each, train like one process on the 4
    # micro-batches of every step (up to rounding: gradients are summed in another order).
    dp=(--model mlp --layers 3 --width 16 --inputs 6 --outputs 3 --micro-batch-size 2
      --eval-every 0 --optimizer adamw --steps 4)
    mpi 1 "${dp[@]}" --gpus 1 --micro-batches 4 --plain-loop --output-dir unsplit
    [[ $status -eq 0 ]] || fail "unsplit run failed"
    mpi 4 "${dp[@]}" --gpus 4 --replicas 2 --micro-batches 2 --checkpoint-every 2 --output-dir dp
    [[ $status -eq 0 ]] || fail "2 x 2 run: exit status $status"
    grep -q "stages on 2 ranks x 2 data-parallel replicas" out || fail "the plan line should name the replicas"
    grep -q '"gpus": 2' dp/plan.json || fail "the plan should be for one pipeline of 2 GPUs"
    grep -q '"replicas": 2' dp/plan.json || fail "the plan should record its 2 replicas"
    mpi 2 "${dp[@]}" --gpus 2 --plan dp/plan.json --output-dir bad
    [[ $status -ne 0 ]] || fail "a plan for 2 replicas must be refused with --replicas 1"
    grep -q "the plan is for 2 data-parallel replicas but --replicas is 1 (run it with --replicas 2 --gpus 4)" err ||
      fail "message should name the replicas"
    for step in 1 2 3 4; do
      x=$(loss_of unsplit/metrics.jsonl $step)
      y=$(loss_of dp/metrics.jsonl $step)
      awk -v x="$x" -v y="$y" 'BEGIN { d = x - y; if (d < 0) d = -d; exit !(x != "" && d <= 1e-5 * (x < 0 ? -x : x)) }' ||
        fail "step $step: loss $y with replicas, $x unsplit"
    done
    # Replicas hold the same weights: one writes the checkpoint, all resume from it.
    rm -rf dp/checkpoints/step-4
    echo 2 >dp/checkpoints/latest
    cp dp/metrics.jsonl straight.jsonl
    mpi 4 "${dp[@]}" --gpus 4 --replicas 2 --micro-batches 2 --output-dir dp --resume
    [[ $status -eq 0 ]] || fail "resume with replicas failed"
    [[ $(loss_of dp/metrics.jsonl 4) == "$(loss_of straight.jsonl 4)" ]] ||
      fail "resumed step 4: loss $(loss_of dp/metrics.jsonl 4), uninterrupted $(loss_of straight.jsonl 4)"
    mpi 4 "${dp[@]}" --gpus 4 --replicas 3 --output-dir bad
    [[ $status -ne 0 ]] || fail "3 replicas of 4 ranks must fail"
    grep -q "replicas 3 does not divide --gpus 4 into equal pipelines" err || fail "message should name both counts"
    mpi 2 "${dp[@]}" --gpus 2 --replicas 2 --mode 2bw --output-dir bad
    [[ $status -ne 0 ]] || fail "2bw with replicas must fail"
    grep -q "data-parallel replicas need --mode sync" err || fail "message should name the mode"
    ;;
  clipping_equals_plain_loop)
    # Global gradient clipping, a warm-up and cosine schedule and weight decay of the matrices:
    # on 2 and 4 pipeline ranks and on 2 replicas x 2 ranks, the losses and gradient norms of
    # the plain loop over the unsplit model, the clipping acting at every step.
    clip=(--model mlp --layers 4 --width 16 --inputs 6 --outputs 3 --micro-batch-size 2
      --eval-every 0 --trace-steps 0 --optimizer adamw --steps 5 --learning-rate 0.01
      --lr-schedule cosine --warmup-steps 2 --min-lr 0.001 --weight-decay 0.1
      --clip-grad-norm 0.05)
    mpi 1 "${clip[@]}" --gpus 1 --micro-batches 4 --plain-loop --output-dir plain
    [[ $status -eq 0 ]] || fail "the plain loop failed: $(tail -3 err)"
    clipped_everywhere plain/metrics.jsonl 0.05 || fail "the bound should clip every step"
    grep -qE "^step 1/5  loss [0-9.]+  lr 0.00333  grad_norm [0-9.e+-]+  " out ||
      fail "the progress line should show the learning rate and gradient norm: $(grep '^step 1/' out)"
    python3 - plain/metrics.jsonl <<'PY' || fail "the learning rates should follow the schedule"
import json, math, sys
lrs = [json.loads(l)["lr"] for l in open(sys.argv[1])]
expected = [0.01 / 3, 0.02 / 3, 0.01, 0.001 + 0.009 * 0.5 * (1 + math.cos(math.pi / 2)), 0.001]
assert all(abs(a - b) <= 1e-12 for a, b in zip(lrs, expected)) and len(lrs) == 5, lrs
PY
    for variant in pipeline2 pipeline4 replicas; do
      case $variant in
        pipeline2) args=(--gpus 2 --micro-batches 4) ranks=2 ;;
        pipeline4) args=(--gpus 4 --micro-batches 4) ranks=4 ;;
        replicas) args=(--gpus 4 --replicas 2 --micro-batches 2) ranks=4 ;;
      esac
      mpi $ranks "${clip[@]}" "${args[@]}" --output-dir $variant
      [[ $status -eq 0 ]] || fail "$variant failed: $(tail -3 err)"
      same_losses $variant/metrics.jsonl plain/metrics.jsonl || fail "$variant: losses differ"
      same_losses $variant/metrics.jsonl plain/metrics.jsonl grad_norm ||
        fail "$variant: gradient norms differ from the plain loop's"
    done
    ;;
  bf16_equals_plain_loop)
    # --precision bf16: bf16 layers and activations, fp32 masters. On 2 and 3 ranks the losses
    # and gradient norms are the bf16 plain loop's; the messages between ranks are bf16 (the
    # profile's outputs are half the fp32 ones); a resumed run continues exactly (the checkpoint
    # holds the masters); the exported weights are fp32; and the losses stay near fp32's.
    # Whole backwards: a split one rounds its bf16 weight gradients apart from the plain loop's
    # (losses within 5e-5, not 1e-5).
    lm=(--model gpt --layers 2 --width 32 --heads 2 --context 16 --micro-batches 4
      --micro-batch-size 4 --steps 6 --eval-every 3 --trace-steps 0 --learning-rate 0.003
      --lr-schedule cosine --warmup-steps 1 --clip-grad-norm 1 --weight-decay 0.1
      --split-backward off)
    mpi 1 "${lm[@]}" --precision bf16 --gpus 1 --plain-loop --output-dir plain
    [[ $status -eq 0 ]] || fail "the bf16 plain loop failed: $(tail -3 err)"
    grep -q "^precision: bf16 weights and activations, fp32 master weights, gradients accumulated, reduced and clipped in fp32; 20 bytes per parameter: bf16 weights 2 + gradients 2 + fp32 master weights 4 + their gradients 4 + AdamW moments 8" out ||
      fail "no precision line: $(head -12 out)"
    grep -q '"dtype": "bfloat16"' plain/profile.json || fail "the profile should be measured in bf16"
    for ranks in 2 3; do
      mpi $ranks "${lm[@]}" --precision bf16 --gpus $ranks --checkpoint-every 3 --output-dir bf16-$ranks
      [[ $status -eq 0 ]] || fail "bf16 on $ranks ranks failed: $(tail -3 err)"
      same_losses bf16-$ranks/metrics.jsonl plain/metrics.jsonl ||
        fail "bf16 on $ranks ranks: losses differ from the bf16 plain loop's"
      same_losses bf16-$ranks/metrics.jsonl plain/metrics.jsonl grad_norm ||
        fail "bf16 on $ranks ranks: gradient norms differ from the bf16 plain loop's"
    done
    # Rematerialization recomputes in bf16 as the first forward computed (a plan of this memory
    # must recompute); the plan may cut the chain elsewhere, and a cut moves bf16 roundings of
    # the weights: within 1e-4.
    mpi 2 "${lm[@]}" --precision bf16 --gpus 2 --memory 430KiB --remat rotor --output-dir remat
    [[ $status -eq 0 ]] || fail "bf16 with rematerialization failed: $(tail -3 err)"
    grep -q '"strategy": "rotor"' remat/plan.json || fail "the plan should recompute"
    python3 - remat/metrics.jsonl plain/metrics.jsonl <<'PY' || fail "bf16 with rematerialization: losses differ from the plain loop's"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f)] for f in sys.argv[1:3])
assert len(a) == len(b) == 6 and all(abs(x - y) <= 1e-4 * y for x, y in zip(a, b)), (a, b)
PY
    mpi 2 "${lm[@]}" --gpus 2 --output-dir fp32
    [[ $status -eq 0 ]] || fail "fp32 failed: $(tail -3 err)"
    python3 - <<'PY' || fail "bf16 activations should be half of fp32's, and bf16 losses near fp32's"
import json
bf16, fp32 = (json.load(open(f"{d}/profile.json")) for d in ("bf16-2", "fp32"))
for a, b in zip(bf16["layers"][:-1], fp32["layers"][:-1]):  # the last layer's output is the loss
    assert 2 * a["output_bytes"] == b["output_bytes"], (a["output_bytes"], b["output_bytes"])
loss = lambda d: [json.loads(l)["loss"] for l in open(f"{d}/metrics.jsonl")]
for x, y in zip(loss("bf16-2"), loss("fp32")):
    assert abs(x - y) <= 0.03 * y, (x, y)
PY
    cp -r bf16-2 resumed
    rm -rf resumed/checkpoints/step-6
    echo 3 >resumed/checkpoints/latest
    mpi 2 "${lm[@]}" --precision bf16 --gpus 2 --output-dir resumed --resume
    [[ $status -eq 0 ]] || fail "bf16 resume failed: $(tail -3 err)"
    for step in 4 5 6; do
      [[ $(loss_of resumed/metrics.jsonl $step) == "$(loss_of bf16-2/metrics.jsonl $step)" ]] ||
        fail "step $step: loss $(loss_of resumed/metrics.jsonl $step) after resume, $(loss_of bf16-2/metrics.jsonl $step) without"
    done
    mpi 2 "${lm[@]}" --gpus 2 --output-dir resumed --resume
    [[ $status -eq 2 ]] || fail "a resume in fp32 of a bf16 run should exit 2"
    grep -q 'training.precision: the checkpoint.s run has "bf16", this run "fp32"' err ||
      fail "the refusal should name the precision: $(cat err)"
    "$madpipe" export-weights --run bf16-2 --output w.pt >/dev/null 2>err || fail "export failed: $(cat err)"
    python_with_torch
    "$python" -c "import torch; s = torch.load('w.pt'); assert all(t.dtype == torch.float32 for t in s.values()), {k: t.dtype for k, t in s.items()}" ||
      fail "the exported weights should be the fp32 masters"
    mpi 2 "${lm[@]}" --precision bf16 --gpus 2 --profile fp32/profile.json --output-dir bad
    [[ $status -eq 2 ]] || fail "an fp32 profile for a bf16 run should exit 2"
    grep -q "fp32/profile.json: /dtype: the profile was measured in float32 but this run trains in bfloat16" err ||
      fail "the refusal should name the profile's dtype: $(cat err)"
    ;;
  resume_on_other_gpus)
    # Checkpoints are keyed by the model's layers: a run checkpointed on 2 ranks resumes on 3 and
    # on 1 (planned anew from the run's profile), and a 2 x 2 data-parallel run on 1 x 3 (the same
    # micro-batches per step); the losses and the final weights are the uninterrupted run's.
    base=(--model gpt --layers 3 --width 32 --heads 2 --context 16 --micro-batch-size 4
      --steps 6 --eval-every 0 --trace-steps 0 --learning-rate 0.003 --weight-decay 0.1)
    mpi 2 "${base[@]}" --micro-batches 4 --gpus 2 --checkpoint-every 3 --output-dir straight
    [[ $status -eq 0 ]] || fail "the uninterrupted run failed: $(tail -3 err)"
    python_with_torch
    "$madpipe" export-weights --run straight --output straight.pt >/dev/null 2>err ||
      fail "export failed: $(cat err)"
    # from_step_3 DIR: a copy of the uninterrupted run as its checkpoint of step 3 left it.
    from_step_3() {
      cp -r straight "$1"
      rm -rf "$1/checkpoints/step-6"
      echo 3 >"$1/checkpoints/latest"
    }
    same_weights() {  # same_weights RUN [REFERENCE.pt]
      "$madpipe" export-weights --run "$1" --output "$1.pt" >/dev/null 2>err || fail "export failed: $(cat err)"
      "$python" - "$1.pt" "${2:-straight.pt}" <<'PY'
import sys, torch
a, b = (torch.load(f) for f in sys.argv[1:3])
assert a.keys() == b.keys(), (a.keys(), b.keys())
for key in a:  # relative to the tensor's norm (Adam magnifies the order of a sum where g ~ 0)
    assert (a[key] - b[key]).norm() <= 1e-5 * b[key].norm(), (key, (a[key] - b[key]).norm() / b[key].norm())
PY
    }
    for ranks in 3 1; do
      from_step_3 on-$ranks
      mpi $ranks "${base[@]}" --micro-batches 4 --gpus $ranks --resume --output-dir on-$ranks
      [[ $status -eq 0 ]] || fail "the resume on $ranks ranks failed: $(tail -3 err)"
      grep -q "resuming the checkpoint of step 3 on a new plan from on-$ranks/profile.json (gpus 2 -> $ranks): each rank loads the layers its plan gives it" out ||
        fail "the resume should say what changed: $(head -8 out)"
      same_losses on-$ranks/metrics.jsonl straight/metrics.jsonl || fail "$ranks ranks: losses differ"
      same_weights on-$ranks || fail "$ranks ranks: the final weights differ"
    done
    # Replicas sum gradients in another order, which Adam magnifies where a gradient is about 0
    # (the attention's key bias): an MLP, whose gradients are not, shows the weights equal.
    wide=(--model mlp --layers 4 --width 16 --inputs 6 --outputs 3 --micro-batch-size 2 --steps 6
      --eval-every 0 --trace-steps 0)
    mpi 2 "${wide[@]}" --micro-batches 4 --gpus 2 --output-dir mlp
    "$madpipe" export-weights --run mlp --output mlp.pt >/dev/null 2>err || fail "export failed: $(cat err)"
    mpi 4 "${wide[@]}" --micro-batches 2 --gpus 4 --replicas 2 --checkpoint-every 3 --output-dir dp
    [[ $status -eq 0 ]] || fail "the 2 x 2 run failed: $(tail -3 err)"
    rm -rf dp/checkpoints/step-6
    echo 3 >dp/checkpoints/latest
    mpi 3 "${wide[@]}" --micro-batches 2 --gpus 3 --resume --output-dir dp
    [[ $status -eq 2 ]] || fail "fewer micro-batches per step must be refused"
    grep -q "training.micro_batches: the checkpoint's run has 2 micro-batches per replica x 2 replicas = 4 per step, this run 2 x 1 = 2" err ||
      fail "the refusal should count the micro-batches of a step: $(cat err)"
    mpi 3 "${wide[@]}" --micro-batches 4 --gpus 3 --resume --output-dir dp
    [[ $status -eq 0 ]] || fail "the resume of 2 x 2 on 1 x 3 failed: $(tail -3 err)"
    same_losses dp/metrics.jsonl mlp/metrics.jsonl || fail "2 x 2 then 1 x 3: losses differ"
    same_weights dp mlp.pt || fail "2 x 2 then 1 x 3: the final weights differ"
    # Dropout masks are a function of (seed, step, micro-batch, layer): they continue too.
    cat >make.py <<'PY'
import torch, torch.nn as nn
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 32), nn.Dropout(0.3), nn.ReLU(), nn.Linear(32, 32),
                    nn.Dropout(0.3), nn.Tanh(), nn.Linear(32, 2))
torch.jit.save(torch.jit.script(net), "drop.pt")
x = torch.randn(200, 8)
torch.save({"inputs": x, "targets": torch.tanh(x[:, :2])}, "data.pt")
PY
    "$python" make.py 2>/dev/null || fail "could not write the TorchScript module"
    drop=(--model script --script drop.pt --loss mse --data data.pt --data-format tensors
      --micro-batches 4 --micro-batch-size 5 --eval-every 0 --trace-steps 0)
    mpi 1 "${drop[@]}" --steps 6 --gpus 1 --output-dir drop-straight
    mpi 3 "${drop[@]}" --steps 3 --gpus 3 --output-dir drop
    [[ $status -eq 0 ]] || fail "the dropout run failed: $(tail -3 err)"
    mpi 2 "${drop[@]}" --steps 6 --gpus 2 --resume --output-dir drop
    [[ $status -eq 0 ]] || fail "the dropout resume failed: $(tail -3 err)"
    same_losses drop/metrics.jsonl drop-straight/metrics.jsonl || fail "with dropout: losses differ"
    # 2BW checkpoints hold each stage's two weight versions: they resume only where they ran.
    # 1f1b: 2bw needs a plan with at most --micro-batches in flight per stage, which the madpipe
    # planner does not bound.
    mpi 2 "${small[@]}" --mode 2bw --gpus 2 --steps 4 --algorithm 1f1b --output-dir twobw
    [[ $status -eq 0 ]] || fail "the 2bw run failed: $(tail -3 err)"
    mpi 3 "${small[@]}" --mode 2bw --gpus 3 --steps 6 --algorithm 1f1b --resume --output-dir twobw
    [[ $status -eq 2 ]] || fail "a 2bw resume on other GPUs must be refused"
    grep -q "this checkpoint holds the stages of its plan (--mode 2bw keeps its two weight versions per stage): it resumes only where it was trained, but gpus 2 -> 3" err ||
      fail "the refusal should say why: $(cat err)"
    ;;
  checkpoints_bounded_and_durable)
    # --keep-checkpoints 2 keeps the newest two complete checkpoints; a checkpoint that fails
    # between a file and its rename (MADPIPE_CHECKPOINT_FAULT) ends the run on every rank with
    # the previous checkpoint whole, and the run resumes from it to the uninterrupted losses.
    mpi 2 "${small[@]}" --gpus 2 --steps 5 --checkpoint-every 1 --keep-checkpoints 2 --output-dir kept
    [[ $status -eq 0 ]] || fail "the run failed: $(tail -3 err)"
    [[ $(cd kept/checkpoints && echo step-*) == "step-4 step-5" ]] ||
      fail "only steps 4 and 5 should be kept: $(ls kept/checkpoints)"
    grep -q "deleted the checkpoint of step 3 (--keep-checkpoints 2)" out || fail "no deletion line"
    mpi 2 "${small[@]}" --gpus 2 --steps 6 --output-dir straight
    export MADPIPE_CHECKPOINT_FAULT=4
    mpi 2 "${small[@]}" --gpus 2 --steps 6 --checkpoint-every 2 --output-dir faulty
    unset MADPIPE_CHECKPOINT_FAULT
    [[ $status -ne 0 ]] || fail "a checkpoint that cannot be written must end the run"
    grep -q "layer-[0-9]*.pt: fault injected before the rename" err || fail "the failing file should be named: $(cat err)"
    [[ $(cat faulty/checkpoints/latest) == 2 ]] || fail "latest should still name step 2"
    [[ ! -e faulty/checkpoints/step-4/complete ]] || fail "the failed checkpoint must not be complete"
    mpi 2 "${small[@]}" --gpus 2 --steps 6 --output-dir faulty --resume
    [[ $status -eq 0 ]] || fail "the resume after the failed checkpoint failed: $(tail -3 err)"
    grep -q "resumed from the checkpoint of step 2" out || fail "the run should resume from step 2"
    same_losses faulty/metrics.jsonl straight/metrics.jsonl || fail "the resumed run differs"
    [[ ! -e faulty/checkpoints/step-4 ]] || [[ -e faulty/checkpoints/step-4/complete ]] ||
      fail "the failed checkpoint's files should be gone or replaced"
    ;;
  elastic_restart)
    # launch/madpipe-run --max-restarts 1: a rank killed (SIGKILL) mid-run; the launcher restarts
    # the run on the 2 ranks left, re-planned from the run's profile, from the newest complete
    # checkpoint, and it finishes with the uninterrupted run's losses.
    long=("${small[@]}" --steps 200 --checkpoint-every 5 --trace-steps 0)
    mpi 2 "${long[@]}" --gpus 2 --output-dir straight
    [[ $status -eq 0 ]] || fail "the uninterrupted run failed: $(tail -3 err)"
    MADPIPE=$madpipe MPIRUN=$mpirun_bin "$(dirname "${BASH_SOURCE[0]}")/../../launch/madpipe-run" \
      -np 3 --max-restarts 1 "${long[@]}" "${transport[@]}" --output-dir "$PWD/elastic" >out 2>err &
    job=$!
    wait_for_lines elastic/metrics.jsonl 12
    # A rank of this run (its output directory is this case's own: other cases run meanwhile).
    victim=$(pgrep -f "^[^ ]*madpipe(-runtime)? train .*--output-dir $PWD/elastic" | sed -n 2p)
    [[ -n $victim ]] || fail "no rank to kill"
    kill -KILL "$victim"
    wait $job
    status=$?
    [[ $status -eq 0 ]] || fail "the elastic run should finish, exit $status: $(tail -5 err)"
    grep "^madpipe-run: " err
    grep -qE "^madpipe-run: 1 rank\(s\) lost during step [0-9]+; the newest complete checkpoint is step [0-9]+ \([0-9]+ step\(s\) to redo\); restart 1 of 1 on 2 rank\(s\) \(was 3\), re-planned from $PWD/elastic/profile.json" err ||
      fail "the launcher should say what it restarts: $(grep madpipe-run err)"
    grep -qE "^madpipe-run: period per micro-batch: [0-9.]+ ms on 3 rank\(s\) before the restart, [0-9.]+ ms on 2 after" err ||
      fail "the launcher should compare the periods"
    same_losses elastic/metrics.jsonl straight/metrics.jsonl || fail "the elastic run's losses differ"
    ;;
  fp16_loss_scaling)
    # --precision fp16: the loss is scaled dynamically. From a scale at which the gradients
    # overflow in fp16, steps are skipped and the scale halves each time; after two good steps in
    # a row (--loss-scale-growth-interval 2) it doubles. On 2 and 3 ranks the run is the fp16
    # plain loop's (losses, gradient norms, scales, skipped steps), and a run resumed from a
    # checkpoint continues exactly: the scaler's state is in the checkpoint's run.json.
    lm=(--model gpt --layers 2 --width 32 --heads 2 --context 16 --micro-batches 4
      --micro-batch-size 4 --steps 10 --eval-every 5 --trace-steps 0 --learning-rate 0.003
      --lr-schedule cosine --warmup-steps 1 --clip-grad-norm 1 --precision fp16
      --loss-scale 1e8 --loss-scale-growth-interval 2)
    mpi 1 "${lm[@]}" --gpus 1 --plain-loop --output-dir plain
    [[ $status -eq 0 ]] || fail "the fp16 plain loop failed: $(tail -3 err)"
    grep -q "^loss scaling: from 100000000, halved on each step whose gradients overflow" out ||
      fail "no loss scaling line: $(head -12 out)"
    grep -q '"dtype": "float16"' plain/profile.json || fail "the profile should be measured in fp16"
    grep -q "^step 1: the gradients overflowed at loss scale 100000000; update skipped, loss scale now 50000000" out ||
      fail "the first step should overflow: $(grep '^step' out | head -3)"
    python3 - plain/metrics.jsonl <<'PY' || fail "the loss scale should halve on overflows and double after 2 good steps"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
skipped = [s["step"] for s in steps if s.get("skipped")]
assert skipped and skipped[0] == 1 and len(skipped) < len(steps), skipped
assert steps[-1]["skipped_steps"] == len(skipped), (steps[-1], skipped)
grown = False
for a, b in zip(steps, steps[1:]):
    if a.get("skipped"):
        assert a["grad_norm"] is None and b["loss_scale"] == a["loss_scale"] / 2, (a, b)
    else:
        assert b["loss_scale"] in (a["loss_scale"], 2 * a["loss_scale"]), (a, b)
        grown = grown or b["loss_scale"] == 2 * a["loss_scale"]
assert grown, [s["loss_scale"] for s in steps]
PY
    same_steps() {  # the same loss, gradient norm (null when skipped), scale and skips per step
      python3 - "$1" "$2" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
close = lambda x, y: x == y or (x is not None and y is not None and abs(x - y) <= 1e-5 * abs(y))
assert len(a) == len(b) == 10, (len(a), len(b))
for x, y in zip(a, b):
    for key in ("loss", "grad_norm", "loss_scale", "skipped_steps"):
        assert close(x[key], y[key]), (key, x, y)
PY
    }
    for ranks in 2 3; do
      mpi $ranks "${lm[@]}" --gpus $ranks --checkpoint-every 4 --output-dir fp16-$ranks
      [[ $status -eq 0 ]] || fail "fp16 on $ranks ranks failed: $(tail -3 err)"
      same_steps fp16-$ranks/metrics.jsonl plain/metrics.jsonl ||
        fail "fp16 on $ranks ranks differs from the fp16 plain loop"
    done
    grep -q '"loss_scale"' fp16-2/checkpoints/step-4/run.json || fail "run.json should keep the scaler's state"
    cp -r fp16-2 resumed
    rm -rf resumed/checkpoints/step-8 resumed/checkpoints/step-10
    echo 4 >resumed/checkpoints/latest
    mpi 2 "${lm[@]}" --gpus 2 --output-dir resumed --resume
    [[ $status -eq 0 ]] || fail "fp16 resume failed: $(tail -3 err)"
    same_steps resumed/metrics.jsonl fp16-2/metrics.jsonl || fail "the resumed fp16 run differs"
    ;;
  schedule_resumes)
    # The schedule is a function of the step: a run resumed at step 3 goes on with the learning
    # rates, gradient norms and losses of the uninterrupted run.
    sched=("${small[@]}" --gpus 2 --steps 6 --lr-schedule linear --clip-grad-norm 0.5
      --learning-rate 0.01 --warmup-steps 2)
    mpi 2 "${sched[@]}" --checkpoint-every 3 --output-dir straight
    [[ $status -eq 0 ]] || fail "uninterrupted run failed: $(tail -3 err)"
    cp -r straight resumed
    rm -rf resumed/checkpoints/step-6
    echo 3 >resumed/checkpoints/latest
    mpi 2 "${sched[@]}" --output-dir resumed --resume
    [[ $status -eq 0 ]] || fail "resumed run failed: $(tail -3 err)"
    grep -q "resumed from the checkpoint of step 3" out || fail "no resume message"
    python3 - <<'PY' || fail "the resumed steps differ from the uninterrupted run's"
import json
def steps(path):
    return {l["step"]: l for l in map(json.loads, open(path))}
a, b = steps("straight/metrics.jsonl"), steps("resumed/metrics.jsonl")
assert sorted(b) == list(range(1, 7)), sorted(b)
for s in (4, 5, 6):
    assert (a[s]["lr"], a[s]["loss"], a[s]["grad_norm"]) == (b[s]["lr"], b[s]["loss"], b[s]["grad_norm"]), (a[s], b[s])
assert b[6]["lr"] == 0.0
PY
    mpi 2 "${sched[@]:0:${#sched[@]}-2}" --warmup-steps 1 --output-dir resumed --resume
    [[ $status -eq 2 ]] || fail "a resume with another warm-up should exit 2, got $status"
    grep -q "training.warmup_steps: the checkpoint.s run has 2, this run 1" err ||
      fail "the refusal should name the warm-up: $(cat err)"
    ;;
  options_checked_before_mpi)
    # Bad options fail in the command line, before MPI starts or anything is written.
    check_refused() {
      local expected=$1
      shift
      "$madpipe" train "${small[@]}" --output-dir never "$@" >out 2>err &&
        fail "'$*' must be refused"
      grep -qF -- "$expected" err || fail "'$*': expected '$expected'"
      [[ ! -e never ]] || fail "'$*': the run started"
    }
    check_refused "--mode: unknown mode 'fast' (valid: sync, 2bw)" --mode fast
    check_refused "--on-nan: unknown action 'ignore' (valid: stop, skip)" --on-nan ignore
    check_refused "--optimizer: unknown optimizer 'adam' (valid: adamw, sgd)" --optimizer adam
    check_refused "--receive-buffers: unknown value 'pinned' (valid: arena, upfront)" \
      --receive-buffers pinned
    check_refused "--remat: unknown strategy 'all' (valid: none, rotor)" --remat all
    check_refused "--offload: host needs the host link's speed" --offload host
    check_refused "--scheduler: unknown scheduler 'fastest'" --scheduler fastest
    check_refused "--time-limit: must be > 0 seconds" --time-limit 0
    check_refused "--replicas 3 does not divide --gpus 4" --gpus 4 --replicas 3
    check_refused "data-parallel replicas need --mode sync" --gpus 2 --replicas 2 --mode 2bw
    check_refused "--replan-after 5 leaves no step" --steps 5 --replan-after 5
    check_refused "--on-nan skip needs --mode sync" --mode 2bw --on-nan skip
    check_refused "--gpus: must be at most 4096" --gpus 5000
    check_refused "--memory: must be > 0" --memory 0
    check_refused "clip-grad-norm: must be > 0 (the largest global gradient norm), got 0" \
      --clip-grad-norm 0
    check_refused "clip-grad-norm: global gradient clipping needs --mode sync" --mode 2bw \
      --clip-grad-norm 1
    check_refused "warmup-steps: a warm-up of 8 steps leaves no step at the peak learning rate (--steps 8)" \
      --steps 8 --warmup-steps 8
    check_refused "--lr-schedule: unknown learning-rate schedule 'step' (valid: constant, cosine, linear)" \
      --lr-schedule step
    check_refused "loss-scale: loss scaling is fp16's (--precision fp16); bf16 and fp32 need none" \
      --precision bf16 --loss-scale 1024
    check_refused "loss-scale: must be a finite number > 0, got 0" --precision fp16 --loss-scale 0
    check_refused "loss-scale-growth-interval: must be >= 1, got 0" --precision fp16 \
      --loss-scale-growth-interval 0
    check_refused "precision: --precision fp16 trains in --mode sync only" --precision fp16 \
      --mode 2bw
    check_refused "precision: --precision bf16 trains in --mode sync only" --precision bf16 \
      --mode 2bw
    check_refused "min-lr: --min-lr is where --lr-schedule cosine or linear ends" --min-lr 0.0001
    ;;
  train_plans_as_plan_does)
    # Without --plan, train's plan is the one `madpipe plan` makes from the same profile and
    # options, rematerialization included.
    deep=(--model mlp --layers 8 --width 64 --inputs 64 --outputs 8 --micro-batch-size 4096)
    "$madpipe" profile "${deep[@]}" --repeats 1 --output prof.json >out 2>err || fail "profile failed"
    shared=(--gpus 2 --bandwidth 12GB/s --weight-copies 4 --scheduler heuristic --time-limit 60
      --micro-batches 4)
    # Between the floor with rematerialization and the one without: only recomputing fits.
    "$madpipe" plan --profile prof.json "${shared[@]}" --memory 1MB >out 2>err &&
      fail "1 MB should not fit"
    plain=$(sed -n 's/.*for which madpipe finds a plan is \([0-9.]*\) MiB.*/\1/p' err)
    remat=$(sed -n 's/.*with --remat rotor (recompute activations in the backward) it is \([0-9.]*\) MiB.*/\1/p' err)
    [[ -n $plain && -n $remat ]] || fail "no floors in: $(cat err)"
    memory=$(python3 -c "print(f'{($plain + $remat) / 2:.2f}MiB')")
    "$madpipe" plan --profile prof.json "${shared[@]}" --memory "$memory" --remat rotor \
      -o plan.json >out 2>err || fail "plan with remat in $memory failed: $(cat err)"
    grep -q '"strategy": "rotor"' plan.json || fail "the plan should recompute"
    mpi 1 "${deep[@]}" --profile prof.json --dry-run "${shared[@]}" --memory "$memory" \
      --remat rotor --output-dir dry
    [[ $status -eq 0 ]] || fail "train --dry-run failed"
    python3 - plan.json dry/plan.json <<'PY' || fail "train planned differently from plan"
import json, sys
plans = [json.load(open(path)) for path in sys.argv[1:]]
for plan in plans:
    plan.get("solver", {}).pop("seconds", None)
sys.exit(0 if plans[0] == plans[1] else 1)
PY
    ;;
  script_forward_is_the_contract)
    # A TorchScript module trains as its forward computes: statements between child calls (an
    # activation, a scaling) run in the layer before them, children run in the order forward
    # calls them; the step-1 loss is PyTorch's. A forward that is no chain is refused on every
    # rank, naming the statement.
    python_with_torch
    cat >make.py <<'PY'
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
class Glue(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc2 = nn.Linear(16, 2)  # registered first, called second
        self.fc1 = nn.Linear(8, 16)
    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x * 2.0)) * 0.5)
class Skip(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 2)
    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(h + x)
class Branch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 2)
    def forward(self, x):
        h = self.fc1(x)
        if bool(h.sum() > 0):
            h = h * 2.0
        return self.fc2(h)
class Unused(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 2)
        self.spare = nn.Linear(8, 2)
    def forward(self, x):
        return self.fc1(x)
for name, module in [("glue", Glue()), ("skip", Skip()), ("branch", Branch()),
                     ("unused", Unused())]:
    torch.jit.save(torch.jit.script(module), name + ".pt")
# Every row alike: whichever rows a micro-batch draws, its loss is the one computed here.
x, y = torch.randn(1, 8).repeat(200, 1), torch.randn(1, 2).repeat(200, 1)
torch.save({"inputs": x, "targets": y}, "rows.pt")
glue = torch.jit.load("glue.pt")
print(repr(F.mse_loss(glue(x[:5]), y[:5]).item()))
PY
    "$python" make.py >expected 2>/dev/null || fail "could not write the TorchScript modules"
    run=(--model script --loss mse --data rows.pt --data-format tensors --micro-batches 4
      --micro-batch-size 5 --eval-every 0 --steps 3)
    for ranks in 1 2; do
      mpi "$ranks" "${run[@]}" --script glue.pt --gpus "$ranks" --output-dir "glue-$ranks"
      [[ $status -eq 0 ]] || fail "the glue module on $ranks ranks failed: $(tail -3 err)"
      python3 - "$(loss_of "glue-$ranks/metrics.jsonl" 1)" "$(cat expected)" <<'PY' ||
import sys
got, want = float(sys.argv[1]), float(sys.argv[2])
sys.exit(0 if abs(got - want) <= 1e-6 * abs(want) else 1)
PY
        fail "step-1 loss on $ranks ranks is $(loss_of "glue-$ranks/metrics.jsonl" 1), PyTorch's forward gives $(cat expected)"
    done
    same_losses glue-2/metrics.jsonl glue-1/metrics.jsonl || fail "the glue module's losses differ on 2 ranks"
    refusal() {  # refusal MODULE MESSAGE: 2 ranks exit 2 before training, each printing MESSAGE
      mpi 2 "${run[@]}" --script "$1" --gpus 2 --output-dir bad
      [[ $status -eq 2 ]] || fail "$1: expected exit 2, got $status"
      [[ $(grep -cF "$2" err) -eq 2 ]] || fail "$1: every rank should say: $2; got: $(cat err)"
      [[ ! -e bad/metrics.jsonl ]] || fail "$1: trained all the same"
    }
    refusal skip.pt "skip.pt: forward: 'return self.fc2(h + x)' (make.py:17) uses a value from before the previous layer's output"
    refusal branch.pt "branch.pt: forward: 'if bool(h.sum() > 0):' (make.py:25) is control flow"
    refusal unused.pt "unused.pt: layer spare: forward never calls this child"
    ;;
  script_tied_parameters)
    # An embedding and an output head that share one weight train as one tensor: on 1, 2 and 3
    # ranks the losses agree and the exported weights hold the two keys equal.
    python_with_torch
    cat >make.py <<'PY'
import numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(32, 16)
        self.body = nn.Sequential(nn.Linear(16, 16), nn.Tanh())
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 32, bias=False)
        self.head.weight = self.embed.weight
    def forward(self, x):
        return self.head(self.norm(self.body(self.embed(x))))
torch.jit.save(torch.jit.script(TiedLM()), "tied.pt")
np.tile(np.arange(32, dtype=np.uint16), 200).tofile("train.bin")
PY
    "$python" make.py 2>/dev/null || fail "could not write the TorchScript module"
    lm=(--model script --script tied.pt --data train.bin --data-format tokens-u16 --context 8
      --micro-batches 3 --micro-batch-size 4 --learning-rate 0.01 --weight-decay 0.1
      --eval-every 5 --steps 10)
    clip=(--clip-grad-norm 0.1 --lr-schedule cosine --warmup-steps 2)  # the norm counts the tie once
    for ranks in 1 2 3; do
      mpi "$ranks" "${lm[@]}" "${clip[@]}" --gpus "$ranks" --output-dir "tied-$ranks"
      [[ $status -eq 0 ]] || fail "the tied model on $ranks ranks failed: $(tail -3 err)"
      grep -q "^tied parameters: 1 group(s), e.g. embed.weight and head.weight; trained as one tensor" out ||
        fail "no note of the tie on $ranks ranks: $(head -20 out)"
      "$madpipe" export-weights --run "tied-$ranks" --output "tied-$ranks.pt" >/dev/null 2>err ||
        fail "export-weights of tied-$ranks failed: $(cat err)"
    done
    # The profile names the tie (embed and head share 32 x 16 fp32 values); the plan on 3 ranks
    # lists it on the stages that use it.
    "$python" - <<'PY' || fail "the profile or the plan of the tied model does not name the tie"
import json
profile = json.load(open("tied-3/profile.json"))
names = [layer["name"] for layer in profile["layers"]]
tied = [{"layers": [names.index("embed"), names.index("head")], "bytes": 32 * 16 * 4}]
assert profile.get("tied_weights") == tied, (names, profile.get("tied_weights"))
plan = json.load(open("tied-3/plan.json"))
users = [s for s in plan["stages"] if s["first_layer"] <= tied[0]["layers"][1] <= s["last_layer"]
         or s["first_layer"] <= tied[0]["layers"][0] <= s["last_layer"]]
assert all(s.get("shared_weights") == [{"group": 0, "bytes": 2048}] for s in users), users
PY
    mpi 1 "${lm[@]}" "${clip[@]}" --gpus 1 --plain-loop --output-dir tied-plain
    [[ $status -eq 0 ]] || fail "the tied model's plain loop failed: $(tail -3 err)"
    clipped_everywhere tied-plain/metrics.jsonl 0.1 || fail "the bound should clip every step"
    for ranks in 1 2 3; do
      same_losses "tied-$ranks/metrics.jsonl" tied-plain/metrics.jsonl ||
        fail "the tied model's losses on $ranks ranks differ from the plain loop's"
      same_losses "tied-$ranks/metrics.jsonl" tied-plain/metrics.jsonl grad_norm ||
        fail "the tied model's gradient norms on $ranks ranks differ from the plain loop's"
    done
    "$python" - <<'PY' 2>/dev/null || fail "the tied weights came apart, or differ between 1 and 3 ranks"
import sys, torch
sys.path.insert(0, ".")
states = [torch.load(f"tied-{r}.pt") for r in (1, 2, 3)]
for state in states:
    assert torch.equal(state["embed.weight"], state["head.weight"])
initial = torch.jit.load("tied.pt").state_dict()
assert not torch.equal(states[0]["embed.weight"], initial["embed.weight"])
for state in states[1:]:
    assert all(torch.allclose(state[k], states[0][k], rtol=1e-5, atol=1e-6) for k in state)
PY
    mpi 2 "${lm[@]}" --gpus 2 --mode 2bw --output-dir bad
    [[ $status -eq 2 ]] || fail "2bw with tied parameters should exit 2, got $status"
    grep -q "mode: 2bw does not train tied parameters yet (embed.weight and head.weight are one tensor); use --mode sync" err ||
      fail "no reason for the 2bw refusal: $(cat err)"
    ;;
  dropout_independent_of_split)
    # Random masks are a function of (seed, step, micro-batch, layer): a model with dropout and
    # batch norm trains alike on 1 and 3 ranks.
    python_with_torch
    cat >make.py <<'PY'
import torch, torch.nn as nn
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 32), nn.Dropout(0.3), nn.ReLU(), nn.Linear(32, 32),
                    nn.BatchNorm1d(32), nn.Dropout(0.3), nn.Tanh(), nn.Linear(32, 2))
torch.jit.save(torch.jit.script(net), "drop.pt")
x = torch.randn(200, 8)
torch.save({"inputs": x, "targets": torch.tanh(x[:, :2])}, "data.pt")
PY
    "$python" make.py 2>/dev/null || fail "could not write the TorchScript module"
    run=(--model script --script drop.pt --loss mse --data data.pt --data-format tensors
      --micro-batches 4 --micro-batch-size 5 --eval-every 4 --steps 8)
    mpi 1 "${run[@]}" --gpus 1 --plain-loop --output-dir drop-plain
    [[ $status -eq 0 ]] || fail "the dropout model's plain loop failed: $(tail -3 err)"
    for ranks in 1 3; do
      mpi "$ranks" "${run[@]}" --gpus "$ranks" --output-dir "drop-$ranks"
      [[ $status -eq 0 ]] || fail "the dropout model on $ranks ranks failed: $(tail -3 err)"
      same_losses "drop-$ranks/metrics.jsonl" drop-plain/metrics.jsonl ||
        fail "with dropout, $ranks ranks' losses differ from the plain loop's"
    done
    ;;
  train_equals_plain_loop)
    # madpipe train's loop (AdamW with weight decay) over plans with whole stages, with
    # recomputation (--remat rotor) and with offloading (--offload host) gives the losses of the
    # plain autograd loop over the unsplit model (--plain-loop: no program, no executor).
    gpt=(--model gpt --layers 6 --width 64 --heads 4 --context 64 --micro-batches 8
      --micro-batch-size 8 --steps 3 --trace-steps 0 --eval-every 0 --bandwidth 1GB/s
      --optimizer adamw --weight-decay 0.1 --learning-rate 0.003)
    mpi 1 "${gpt[@]}" --gpus 1 --plain-loop --output-dir plain
    [[ $status -eq 0 ]] || fail "the plain loop failed: $(tail -3 err)"
    grep -q "^plain loop: each step runs the unsplit model in one autograd loop, not the plan" out ||
      fail "the plain loop should say so: $(head -12 out)"
    mpi 2 "${gpt[@]}" --gpus 2 --plain-loop --output-dir bad
    [[ $status -eq 2 ]] || fail "a plain loop on 2 ranks should be refused"
    for variant in sync3 remat offload; do
      case $variant in
        sync3) ranks=3 extra=() ;;
        remat) ranks=2 extra=(--memory 9MiB --remat rotor) ;;
        offload) ranks=2 extra=(--memory 11.3MiB --offload host --host-bandwidth 1GB/s) ;;  # below any plan without offloading
      esac
      mpi $ranks "${gpt[@]}" --gpus $ranks "${extra[@]}" --output-dir $variant
      [[ $status -eq 0 ]] || fail "$variant failed: $(tail -3 err)"
      case $variant in
        remat) grep -q '"strategy": "rotor"' $variant/plan.json || fail "$variant: the plan should recompute" ;;
        offload) grep -q '"strategy": "host"' $variant/plan.json || fail "$variant: the plan should offload" ;;
      esac
      same_losses $variant/metrics.jsonl plain/metrics.jsonl ||
        fail "$variant: losses differ from the plain loop's"
    done
    ;;
  bad_model)
    mpi 1 --model transformer --gpus 1 --steps 1 --output-dir run
    [[ $status -ne 0 ]] || fail "an unknown model must fail"
    grep -q "unknown model 'transformer' (valid: gpt, mlp, cnn, script)" err || fail "message should list models"
    ;;
  *)
    fail "unknown case"
    ;;
esac
echo "ok [$case_name]"
