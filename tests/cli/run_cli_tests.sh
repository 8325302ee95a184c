#!/usr/bin/env bash
# End-to-end tests of the `madpipe` command. CTest runs one case per test:
#   run_cli_tests.sh CASE MADPIPE_BINARY SOURCE_DIR WORK_DIR
# Each case runs the real binary on the shipped profiles and checks exit status, stdout, stderr
# and written files. Run all cases by hand with CASE = all.
set -euo pipefail

if [[ $# -ne 4 ]]; then
  echo "usage: $0 CASE MADPIPE_BINARY SOURCE_DIR WORK_DIR" >&2
  exit 2
fi
case_name=$1
madpipe=$2
source_dir=$3
work_root=$4

resnet=$source_dir/configs/profiles/resnet50.json
gpt2=$source_dir/configs/profiles/gpt2_small.json
densenet=$source_dir/configs/profiles/densenet121.json
minimal=$source_dir/tests/data/profiles/minimal.json
resnet5=$source_dir/tests/data/profiles/resnet50_first5.json
platform=(--gpus 4 --memory 8GiB --bandwidth 12GB/s)

# --- helpers --------------------------------------------------------------------------------

fail() {
  echo "FAIL [$case_name]: $*" >&2
  if [[ -f out ]]; then echo "--- stdout ---" >&2; cat out >&2; fi
  if [[ -f err ]]; then echo "--- stderr ---" >&2; cat err >&2; fi
  exit 1
}

# run ARGS...: runs madpipe, stdout to ./out, stderr to ./err, status to $status.
run() {
  set +e
  "$madpipe" "$@" >out 2>err
  status=$?
  set -e
}

expect_status() {
  [[ $status -eq $1 ]] || fail "expected exit status $1, got $status (madpipe ${*:2})"
}

# expect_in FILE TEXT: FILE contains the fixed string TEXT.
expect_in() {
  grep -qF -- "$2" "$1" || fail "$1 does not contain: $2"
}

# expect_match FILE REGEX: some line of FILE matches the extended regex.
expect_match() {
  grep -qE -- "$2" "$1" || fail "$1 has no line matching: $2"
}

# run_in DIR ARGS...: run, from the directory DIR (./out, ./err stay here).
run_in() {
  local dir=$1
  shift
  set +e
  (cd "$dir" && "$madpipe" "$@") >out 2>err
  status=$?
  set -e
}

expect_not_in() {
  if grep -qF -- "$2" "$1"; then fail "$1 unexpectedly contains: $2"; fi
}

expect_empty() {
  [[ ! -s $1 ]] || fail "$1 is not empty"
}

expect_line_count() {
  local n
  n=$(wc -l <"$1")
  [[ $n -eq $2 ]] || fail "$1 has $n lines, expected $2"
}

# Checks that FILE is well-formed JSON when python3 is available (simulate checks it anyway).
expect_json() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$1" || fail "$1 is not valid JSON"
  fi
}

# Checks that FILE is well-formed XML when python3 is available.
expect_xml() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import sys, xml.etree.ElementTree as e; e.parse(sys.argv[1])' "$1" ||
      fail "$1 is not well-formed XML"
  fi
}

# expect_count FILE TEXT N: the fixed string TEXT occurs N times in FILE.
expect_count() {
  local n
  n=$(grep -oF -- "$2" "$1" | wc -l)
  [[ $n -eq $3 ]] || fail "$1 contains '$2' $n times, expected $3"
}

# --- cases ----------------------------------------------------------------------------------

case_help() {
  run --help
  expect_status 0
  for command in plan simulate compare sweep scale export show; do expect_match out "^  $command  "; done
  expect_empty err
  run help plan
  expect_status 0
  expect_in out "usage: madpipe plan --profile FILE --gpus N --memory SIZE --bandwidth RATE"
  for option in --memory --bandwidth --algorithm --weight-copies --output --quiet --config; do
    expect_in out "$option"
  done
  cp out help_plan
  run plan --help
  expect_status 0
  cmp -s out help_plan || fail "'madpipe plan --help' differs from 'madpipe help plan'"
  run simulate --help
  expect_status 0
  expect_in out "--policy"
  run compare --help
  expect_status 0
  expect_in out "--algorithms"
  expect_in out "--csv"
  run sweep --help
  expect_status 0
  expect_in out "usage: madpipe sweep --profile FILE --bandwidth RATE --set KEY=V1,V2,..."
  for option in --set --csv --svg --algorithms --memory --config; do expect_in out "$option"; done
}

case_version() {
  run --version
  expect_status 0
  [[ $(cat out) == "madpipe 0.1.0" ]] || fail "unexpected version line"
}

case_unknown_command() {
  run frobnicate
  expect_status 2
  expect_in err "madpipe: error: unknown command 'frobnicate' (valid: plan, simulate, compare, sweep, scale, remat, memplan, profile, train, export, export-weights, show)"
  expect_empty out
  run
  expect_status 2
  expect_in err "madpipe: error: no command given"
  run help frobnicate
  expect_status 2
  expect_in err "unknown command 'frobnicate'"
}

case_plan_and_simulate() {
  run plan --profile "$resnet" "${platform[@]}" --output plan.json --verbose
  expect_status 0
  expect_in out "algorithm    madpipe"
  expect_match out "^ +0  0\.\.[0-9]+ +conv1\.\."
  expect_match out "^period +[0-9.]+ ms per micro-batch"
  expect_match out "^throughput +[0-9.]+ micro-batches/s"
  expect_match out "^lower bound +[0-9.]+ ms per micro-batch; period / lower bound = [0-9.]+"
  expect_match out "^  3  .*GiB +[0-9]+%"
  expect_in out "memory limit 8.0 GiB per GPU"
  expect_in out "plan written to plan.json"
  expect_match err "^plan: scheduled allocation 1/[0-9]+ \([0-9]+ stages\): "  # --verbose
  [[ -s plan.json ]] || fail "plan.json was not written"
  expect_json plan.json
  expect_in plan.json '"format": "madpipe.plan/1"'
  expect_in plan.json '"profile": "resnet50"'
  expect_in plan.json '"memory_bytes": 8589934592'
  run simulate --plan plan.json --profile "$resnet"
  expect_status 0
  expect_match out "^step time +[0-9.]+ ms"
  # The timetable replay must reach the planned period exactly.
  expect_match out "^steady period .* ratio 1\.000$"
  expect_match out "^  0 +[0-9.]+ [KMG]iB +[0-9.]+ [KMG]iB +[0-9]+%$"
  expect_not_in err "warning"
  run simulate --plan plan.json --profile "$resnet" --policy asap --micro-batches 12
  expect_status 0
  expect_in out "simulated      12 micro-batches, asap policy"
}

case_plan_weight_memory() {
  # --precision and --optimizer set C to what training holds per parameter, in copies of the
  # profile's weights (measured in that precision), and plan prints the count.
  run plan --profile "$gpt2" "${platform[@]}" --precision bf16 --optimizer adamw --output bf16.json
  expect_status 0
  expect_in out "weights      20 bytes per parameter (bf16 weights 2 + gradients 2 + fp32 master weights 4 + their gradients 4 + AdamW moments 8; bf16 adamw): C = 10 copies of the bfloat16 weights"
  expect_in out ", C = 10"
  expect_in bf16.json '"weight_copies": 10'
  run plan --profile "$resnet" "${platform[@]}" --optimizer sgd
  expect_status 0
  expect_in out "weights      12 bytes per parameter (fp32 weights 4 + gradients 4 + SGD momentum 4; fp32 sgd): C = 3 copies of the float32 weights"
  run plan --profile "$resnet" "${platform[@]}" --precision fp32
  expect_status 0
  expect_in out "weights      16 bytes per parameter (fp32 weights 4 + gradients 4 + AdamW moments 8; fp32 adamw): C = 4 copies of the float32 weights"
  run plan --profile "$resnet" "${platform[@]}"
  expect_status 0
  expect_not_in out "bytes per parameter"
  run plan --profile "$resnet" "${platform[@]}" --precision bf16
  expect_status 2
  expect_in err "resnet50.json: /dtype: the profile was measured in float32 but --precision bf16 trains in bfloat16: profile with madpipe profile --precision bf16"
  run plan --profile "$gpt2" "${platform[@]}" --precision fp16
  expect_status 2
  expect_in err "/dtype: the profile was measured in bfloat16 but --precision fp16 trains in float16"
  run plan --profile "$resnet" "${platform[@]}" --precision fp32 --weight-copies 4
  expect_status 2
  expect_in err "madpipe: error: --weight-copies: give either --weight-copies or --precision and --optimizer (which count the copies training holds), not both"
  run plan --profile "$resnet" "${platform[@]}" --precision fp8
  expect_status 2
  expect_in err "--precision: unknown precision 'fp8' (valid: fp32, bf16, fp16)"
}

case_plan_every_algorithm() {
  for algorithm in madpipe contiguous pipedream 1f1b gpipe; do
    run plan --profile "$gpt2" --gpus 4 --memory 16GiB --bandwidth 12GB/s --quiet \
      --algorithm "$algorithm" --output "plan-$algorithm.json"
    expect_status 0
    expect_empty err
    expect_in "plan-$algorithm.json" "\"algorithm\": \"$algorithm\""
    run simulate --plan "plan-$algorithm.json" --profile "$gpt2"
    expect_status 0
    expect_match out "ratio 1\.000$"
  done
}

# The full ILP beats MadPipe's heuristics on the first 5 layers of ResNet-50 at 4 GiB (35.69 ms
# against 47.94 ms with a non-contiguous allocation) and proves it optimal.
case_plan_ilp() {
  run plan --profile "$resnet5" --gpus 2 --memory 4GiB --bandwidth 12GB/s --algorithm ilp \
    --time-limit 100 --output ilp.json --verbose
  if [[ $status -ne 0 ]] && grep -q "this build has none" err; then
    echo "SKIP [$case_name]: no MILP backend built"
    exit 77
  fi
  expect_status 0
  expect_in out "algorithm    ilp: "
  expect_in out "non-contiguous allocation, 1-periodic pattern"
  expect_match out "^period +35\.69 ms per micro-batch"
  expect_match out "^solver +cbc, optimal in [0-9.]+ s, objective 35\.69 ms, bound 35\.69 ms"
  expect_in err "plan: full ILP over 5 layers, warm start at 47.94 ms"
  expect_in ilp.json '"solver": {'
  expect_in ilp.json '"status": "optimal"'
  run simulate --plan ilp.json --profile "$resnet5"
  expect_status 0
  expect_match out "ratio 1\.000$"
  run plan --profile "$resnet5" --gpus 2 --memory 4GiB --bandwidth 12GB/s --scheduler heuristic \
    --quiet
  expect_status 0
  expect_not_in out "solver "
  run plan --profile "$resnet5" --gpus 2 --memory 4GiB --bandwidth 12GB/s --scheduler ilp \
    --write-mps model --quiet
  expect_status 0
  [[ -s model-schedule-1.mps ]] || fail "--write-mps wrote no model-schedule-1.mps"
  expect_in model-schedule-1.mps "ENDATA"
  run plan --profile "$resnet5" --gpus 2 --memory 4GiB --bandwidth 12GB/s --scheduler ilp \
    --write-mps no/such/dir/model --quiet
  expect_status 2
  expect_in err "no/such/dir/model-schedule-1.mps"
  run plan --profile "$resnet5" --gpus 2 --memory 4GiB --bandwidth 12GB/s --scheduler greedy
  expect_status 2
  expect_in err "madpipe: error: --scheduler: unknown scheduler 'greedy' (valid: auto, ilp, heuristic)"
  run plan --profile "$resnet5" --gpus 2 --memory 4GiB --bandwidth 12GB/s --algorithm ilp \
    --solver cplex
  expect_status 2
  expect_in err "cplex"
  run plan --profile "$resnet5" --gpus 2 --memory 4GiB --bandwidth 12GB/s --time-limit 0
  expect_status 2
  expect_in err "madpipe: error: --time-limit: must be > 0 seconds"
}

case_plan_is_deterministic() {
  run plan --profile "$resnet" "${platform[@]}" --quiet --output a.json
  expect_status 0
  run plan --profile "$resnet" "${platform[@]}" --quiet --output b.json
  expect_status 0
  cmp -s a.json b.json || fail "two runs wrote different plans"
}

case_bad_memory() {
  run plan --profile "$resnet" --gpus 4 --memory abc --bandwidth 12GB/s
  expect_status 2
  local expected="madpipe: error: --memory: cannot parse 'abc' as a size (examples: 16GiB, 500MB)"
  [[ $(cat err) == "$expected" ]] || fail "unexpected message"
  expect_empty out
  run plan --profile "$resnet" --gpus 4 --memory 8GiB --bandwidth fast
  expect_status 2
  expect_in err "madpipe: error: --bandwidth: cannot parse 'fast' as a bandwidth"
  run compare --profile "$resnet" --gpus 4 --memory -3GB --bandwidth 12GB/s
  expect_status 2
  expect_in err "madpipe: error: --memory: must be >= 0"
}

case_bad_options() {
  run plan --profile "$resnet" --gpus 0 --memory 8GiB --bandwidth 12GB/s
  expect_status 2
  expect_in err "madpipe: error: --gpus: must be >= 1, got 0"
  run plan --profile "$resnet" --gpus 5000 --memory 8GiB --bandwidth 12GB/s
  expect_status 2
  expect_in err "madpipe: error: --gpus: must be at most 4096, got 5000"
  run compare --profile "$resnet" --gpus 2 --memory 8GiB --bandwidth 12GB/s --weight-copies 0
  expect_status 2
  expect_in err "madpipe: error: --weight-copies: must be >= 1, got 0"
  run plan --profile "$resnet" --memory 8GiB --bandwidth 12GB/s
  expect_status 2
  expect_in err "madpipe: error: the option '--gpus' is required but missing"
  run plan --profile "$resnet" "${platform[@]}" --algorithm nosuch
  expect_status 2
  expect_in err "madpipe: error: --algorithm: unknown algorithm 'nosuch'"
  expect_in err "(valid: madpipe, contiguous, pipedream, 1f1b, gpipe, interleaved, zb-h1, zb-v, ilp)"
  run plan --profile "$resnet" "${platform[@]}" --mem 4GiB
  expect_status 2
  expect_in err "madpipe: error: unrecognised option '--mem'"
  run plan --profile "$resnet" "${platform[@]}" stray
  expect_status 2
  expect_in err "madpipe: error: unexpected argument 'stray'"
  run simulate --plan x.json --profile "$resnet" --policy eager
  expect_status 2
  expect_in err "madpipe: error: --policy: unknown policy 'eager' (valid: timetable, asap)"
  run compare --profile "$resnet" "${platform[@]}" --algorithms madpipe,nope
  expect_status 2
  expect_in err "madpipe: error: --algorithms: unknown algorithm 'nope'"
}

case_missing_profile() {
  run plan --profile does/not/exist.json "${platform[@]}"
  expect_status 2
  expect_match err "^madpipe: error: does/not/exist\.json: "
  expect_empty out
  run compare --profile does/not/exist.json "${platform[@]}"
  expect_status 2
  expect_in err "does/not/exist.json"
  run simulate --plan missing-plan.json --profile "$resnet"
  expect_status 2
  expect_match err "^madpipe: error: missing-plan\.json: "
}

case_remat() {
  run remat --profile "$resnet" --memory 6GiB
  expect_status 0
  expect_in out "stage          layers 0..20 of resnet50 (21 layers)"
  expect_match out "^time           [0-9.]+ ms \(\+[0-9.]+% over no remat; [0-9]+ forwards recomputed\)$"
  expect_match out "^sequence       F0(all|ck) .*Loss dLoss .*B0$"
  run remat --profile "$resnet" --memory 6GiB --first-layer 0 --last-layer 5 --nca 3
  expect_status 0
  expect_match out "with 3 in flight [0-9.]+ [KMG]iB$"
  run remat --profile "$resnet" --memory 10MB
  expect_status 2
  expect_in err "madpipe: error: --memory: no rematerialization sequence of layers 0..20 fits in"
  run remat --profile "$resnet" --memory 6GiB --last-layer 21
  expect_status 2
  expect_in err "madpipe: error: --last-layer: must be < 21"
  run remat --profile "$resnet" --memory 6.5GiB --offload host --host-bandwidth 12GB/s
  expect_status 0
  expect_match out "^offloaded      [0-9.]+ [KMG]iB out and back$"
  expect_match out "^sequence       .* O[0-9]+ .*Loss .*P[0-9]+ .*dLoss .*B0$"
  run remat --profile "$resnet" --memory 6.5GiB --offload host
  expect_status 2
  expect_in err "madpipe: error: --offload: host needs the host link's speed: give --host-bandwidth"
}

case_plan_remat() {
  # 5 GiB per GPU: ResNet-50 fits on 4 GPUs only when stages recompute activations.
  run plan --profile "$resnet" --gpus 4 --memory 5GiB --bandwidth 12GB/s --quiet --output none.json
  expect_status 3  # no plan fits
  run plan --profile "$resnet" --gpus 4 --memory 5GiB --bandwidth 12GB/s --remat rotor \
    --scheduler heuristic --output remat.json
  expect_status 0
  expect_match out "in flight  saves memory by$"
  expect_match out "^ +0 +0\\.\\.[0-9]+ .* recomputing$"
  grep -q '"strategy": "rotor"' remat.json || fail "no stage of the plan rematerializes"
  grep -q '"sequence": "F' remat.json || fail "the plan has no sequence"
  run simulate --plan remat.json --profile "$resnet"
  expect_status 0
  expect_match out "ratio 1.000$"
  run compare --profile "$resnet" --gpus 4 --memory 6GiB --bandwidth 12GB/s --remat rotor \
    --scheduler heuristic --algorithms contiguous,1f1b --quiet
  expect_status 0
  expect_match out "with remat \(ms\) +remat / plain +remat stages$"
  expect_match out "^1f1b +does not fit .* [0-9.]+ +- +[1-9]$"
  run plan --profile "$resnet" --gpus 4 --memory 5GiB --bandwidth 12GB/s --offload host
  expect_status 2
  expect_in err "madpipe: error: --offload: host needs the host link's speed: give --host-bandwidth"
  run plan --profile "$resnet" --gpus 4 --memory 5GiB --bandwidth 12GB/s --remat everything
  expect_status 2
  expect_in err "--remat: unknown strategy 'everything' (valid: none, rotor)"
}

case_too_little_memory() {
  run plan --profile "$resnet" --gpus 4 --memory 1MB --bandwidth 12GB/s --output never.json
  expect_status 3  # no plan fits
  local holds="the fullest GPU then holds layers? [0-9.]+ \\(.*\\) with 1 micro-batch in flight"
  local smallest="the smallest memory per GPU for which madpipe finds a plan is [0-9.]+ [KMGT]iB \\($holds; exact for allocations whose GPUs each hold one range of layers, and no allocation fits in less than [0-9.]+ [KMGT]iB\\)"
  local remat="with --remat rotor \\(recompute activations in the backward\\) it is [0-9.]+ [KMGT]iB"
  local layer="layer [0-9]+ \\([a-z0-9.]+\\) alone keeps [0-9.]+ [KMGT]iB: its weights 3 times, one micro-batch's activations and its workspace"
  expect_match err "^madpipe: error: no madpipe plan fits in .*; $smallest; $remat; $layer$"
  [[ ! -e never.json ]] || fail "a plan was written although none fits"
  # The size it names must indeed be enough (sizes print with one decimal: round up 0.1 GiB).
  local size unit
  read -r size unit < <(sed -nE 's/.* finds a plan is ([0-9.]+) ([KMGT]iB) .*/\1 \2/p' err)
  local enough
  enough=$(awk -v s="$size" 'BEGIN { printf "%.1f", s + 0.1 }')
  run plan --profile "$resnet" --gpus 4 --memory "${enough}${unit}" --bandwidth 12GB/s --quiet
  expect_status 0
}

# Where memory, not compute, sets the period of a plan that keeps every activation, a note says
# so and names the options that may shorten it; none where compute sets it.
case_plan_memory_binds() {
  local gpt2_xl16=$source_dir/configs/profiles/gpt2_xl16.json
  run plan --profile "$gpt2_xl16" --gpus 4 --memory 4GiB --bandwidth 50GB/s --scheduler heuristic \
    --quiet
  expect_status 0
  expect_match out "^note +memory sets this period: no plan that keeps every activation beats [0-9.]+ ms per micro-batch, where compute alone allows 18\\.09 ms; --remat rotor \\(recompute activations in the backward\\) or --offload host may plan a shorter one$"
  run plan --profile "$gpt2_xl16" --gpus 4 --memory 6GiB --bandwidth 50GB/s --scheduler heuristic \
    --quiet
  expect_status 0
  ! grep -q "memory sets this period" out || fail "a note that memory binds where it does not"
  # Offloading asked for but no stage offloads: the note names what was not asked.
  run plan --profile "$gpt2_xl16" --gpus 4 --memory 4GiB --bandwidth 50GB/s --scheduler heuristic \
    --offload host --host-bandwidth 12GB/s --time-limit 1 --quiet
  expect_status 0
  if grep -q "offload" <(sed -n '/^stage /,/^$/p' out); then return 0; fi
  expect_match out "^note +memory sets this period: .*; --remat rotor \\(recompute activations in the backward\\) may plan a shorter one$"
}

# --time-limit bounds the whole request: cut short, the plan found by then comes with a note
# saying what was cut, and it is a valid plan.
case_time_limit() {
  run plan --profile "$densenet" --gpus 8 --memory 6GiB --bandwidth 12GB/s --time-limit 0.001 \
    --output cut.json
  expect_status 0
  expect_match out "^note +the time limit of 0\.001 s cut planning short: .+; a longer --time-limit may find a shorter period$"
  run simulate --plan cut.json --profile "$densenet"
  expect_status 0
  expect_match out "ratio 1\.000$"
  # A request with nothing to fit answers within its limit too, naming the floor.
  run plan --profile "$densenet" --gpus 2 --memory 8GiB --bandwidth 64GB/s --scheduler heuristic \
    --time-limit 5
  expect_status 3  # no plan fits
  expect_match err "finds a plan is [0-9.]+ GiB \\(the fullest GPU then holds layers [0-9]+\\.\\.[0-9]+ "
  expect_in err "with --remat rotor (recompute activations in the backward) it is "
}

case_compare() {
  run compare --profile "$resnet" "${platform[@]}"
  expect_status 0
  local header="^algorithm +period \(ms\) +vs best +vs bound +throughput \(/s\)"
  expect_match out "$header +max GPU memory +planning \(s\)$"
  expect_match out "^lower bound +[0-9.]+ ms per micro-batch$"
  for algorithm in madpipe contiguous pipedream 1f1b gpipe; do
    local numbers="[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ [KMGT]?i?B"
    expect_match out "^$algorithm +($numbers|does not fit +- +- +- +-) +[0-9.]+$"
  done
  # The best feasible row has ratio 1.000 to the best.
  expect_match out "^[a-z0-9]+ +[0-9.]+ +1\.000 "
  expect_match err "^compare: madpipe: "
}

case_compare_csv() {
  run compare --profile "$gpt2" --gpus 4 --memory 16GiB --bandwidth 12GB/s --csv --quiet \
    --algorithms gpipe,madpipe
  expect_status 0
  expect_empty err
  expect_line_count out 3
  local header="algorithm,status,period_ms,ratio_to_best,ratio_to_lower_bound,throughput_per_s"
  header+=",max_memory_bytes,planning_s"
  [[ $(head -n1 out) == "$header" ]] || fail "unexpected CSV header"
  [[ $(sed -n 2p out | cut -d, -f1) == gpipe ]] || fail "rows not in --algorithms order"
  [[ $(sed -n 3p out | cut -d, -f1) == madpipe ]] || fail "rows not in --algorithms order"
  awk -F, 'NR > 1 && NF != 8 { exit 1 }' out || fail "a CSV row does not have 8 fields"
  expect_match out "^madpipe,ok,[0-9.]+,[0-9.]+,[0-9.]+,[0-9.]+,[0-9]+,[0-9.]+$"
}

case_config_file() {
  cat >madpipe.ini <<'EOF'
# a shared experiment config
[platform]
gpus = 2
memory = 16GiB
bandwidth = 12GB/s

[planner]
algorithm = 1f1b
algorithms = madpipe,gpipe
iterations = 4

[model]
model = gpt
EOF
  run plan --profile "$minimal" --config madpipe.ini --quiet
  expect_status 0
  expect_in out "platform     2 GPUs with 16.0 GiB each, links at 12.0 GB/s, C = 3"
  expect_in out "algorithm    1f1b"
  # The command line wins over the file.
  run plan --profile "$minimal" --config madpipe.ini --quiet --gpus 3 --algorithm gpipe
  expect_status 0
  expect_in out "platform     3 GPUs with 16.0 GiB each"
  expect_in out "algorithm    gpipe"
  run compare --profile "$minimal" --config madpipe.ini --quiet
  expect_status 0
  expect_match out "^madpipe "
  expect_match out "^gpipe "
  expect_not_in out "1f1b"
  printf '[platform]\ngpu = 2\n' >typo.ini
  run plan --profile "$minimal" --config typo.ini
  expect_status 2
  expect_in err "madpipe: error: typo.ini: [platform] gpu: unknown key"
  # A misspelled or capitalised section is refused, not skipped with all its keys.
  printf '[platform]\ngpus = 2\n\n[platfrom]\nbandwidth = 12GB/s\n' >typo.ini
  run plan --profile "$minimal" --config typo.ini --memory 16GiB
  expect_status 2
  expect_in err "madpipe: error: typo.ini: line 4 [platfrom]: unknown section: its keys would be ignored (this command reads [platform], [planner]; other commands read [model], [training], [output], [profile], [sweep], [scale]; names are lower case)"
  printf '[Platform]\ngpus = 2\n' >typo.ini
  run compare --profile "$minimal" --config typo.ini
  expect_status 2
  expect_in err "typo.ini: line 1 [Platform]: unknown section"
  run plan --profile "$minimal" --config absent.ini
  expect_status 2
  expect_in err "madpipe: error: absent.ini: cannot open config file"
  # A bad value names the file, the section and the key where the file gave it, the option
  # where the command line did.
  printf '[platform]\ngpus = two\n' >values.ini
  run plan --profile "$minimal" --config values.ini --memory 16GiB --bandwidth 12GB/s
  expect_status 2
  expect_in err "madpipe: error: values.ini: [platform] gpus: the argument ('two') for option 'gpus' is invalid"
  printf '[platform]\ngpus = 2\nmemory = 16XB\n\n[planner]\nmicro-batches = many\n' >values.ini
  run plan --profile "$minimal" --config values.ini --bandwidth 12GB/s
  expect_status 2
  expect_in err "madpipe: error: values.ini: [platform] memory: cannot parse '16XB' as a size"
  run plan --profile "$minimal" --config values.ini --bandwidth 12GB/s --memory 16GiB
  expect_status 2
  expect_in err "madpipe: error: values.ini: [planner] micro-batches: expected an integer, got 'many'"
  run plan --profile "$minimal" --config values.ini --bandwidth 12GB/s --memory 16GiB \
    --micro-batches few
  expect_status 2
  expect_in err "madpipe: error: --micro-batches: expected an integer, got 'few'"
  # A value holding one of boost's placeholders is reported, not substituted into itself forever.
  printf '[platform]\ngpus = %%value%%s\n' >values.ini
  run plan --profile "$minimal" --config values.ini --bandwidth 12GB/s --memory 16GiB
  expect_status 2
  expect_in err "madpipe: error: values.ini: [platform] gpus: invalid value for 'gpus': '%value%s'"
  run plan --profile "$minimal" --gpus '%value%s' --bandwidth 12GB/s --memory 16GiB
  expect_status 2
  expect_in err "madpipe: error: invalid value for '--gpus'"
  # The same when the key repeats and the placeholder is in an earlier value (found by the
  # config fuzzer).
  printf '[platform]\ngpus = %%value%%s\ngpus = 4\n' >values.ini
  run plan --profile "$minimal" --config values.ini --bandwidth 12GB/s --memory 16GiB
  expect_status 2
  expect_in err "madpipe: error: values.ini: [platform] gpus: invalid value for 'gpus'"
}

case_simulate_rejects_invalid_plan() {
  run plan --profile "$resnet" "${platform[@]}" --quiet --output plan.json
  expect_status 0
  # A plan checked against another model's profile violates the stage costs.
  run simulate --plan plan.json --profile "$gpt2"
  expect_status 2
  expect_match err "^simulate: plan\.json: /stages/"
  expect_match err "^madpipe: error: plan\.json: invalid plan: [0-9]+ violations? \(listed above\)$"
  # A plan whose ops overlap on a GPU is rejected too.
  sed -E 's/"period_ms": [0-9.e+-]+/"period_ms": 0.5/' plan.json >squeezed.json
  run simulate --plan squeezed.json --profile "$resnet"
  expect_status 2
  expect_in err "invalid plan"
}

# The sweep of configs/sweep-resnet50.ini: 3 memories x 2 GPU counts, madpipe and pipedream.
# It runs from the source tree, where the profile path of the file leads.
case_sweep() {
  local config=configs/sweep-resnet50.ini
  run_in "$source_dir" sweep --config "$config" --csv "$PWD/sweep.csv" --svg "$PWD/sweep.svg"
  expect_status 0
  expect_in out "profile      resnet50"
  expect_match out "^sweep        memory \(3\) x gpus \(2\), 2 algorithms: 12 plans in [0-9.]+ s$"
  local header="^ *memory +gpus +algorithm +period \(ms\) +throughput \(/s\) +max GPU memory"
  expect_match out "$header +stages +k +planning \(s\)$"
  expect_match out "^ +8GiB +2 +madpipe +does not fit +- +- +- +- +[0-9.]+$"
  expect_match out "^ +24GiB +4 +pipedream +[0-9.]+ +[0-9.]+ +[0-9.]+ [KMG]iB +[0-9]+ +[0-9]+ +[0-9.]+$"
  expect_in out "CSV written to $PWD/sweep.csv"
  expect_in out "SVG written to $PWD/sweep.svg"
  # One progress line per plan, in the order of the rows.
  expect_line_count err 12
  [[ $(head -n1 err) == "sweep: [1/12] memory=8GiB gpus=2 madpipe: does not fit "* ]] ||
    fail "unexpected first progress line"
  expect_match err "^sweep: \[12/12\] memory=24GiB gpus=4 pipedream: [0-9.]+ ms per micro-batch \([0-9.]+ s\)$"

  # The CSV: a row per point and algorithm, the first --set key varying slowest.
  local csv_header="memory,gpus,algorithm,feasible,period_ms,throughput_per_s,max_memory_bytes"
  csv_header+=",planning_s,stages,k"
  [[ $(head -n1 sweep.csv) == "$csv_header" ]] || fail "unexpected CSV header"
  expect_line_count sweep.csv $((1 + 3 * 2 * 2))
  awk -F, 'NR > 1 && NF != 10 { exit 1 }' sweep.csv || fail "a CSV row does not have 10 fields"
  [[ $(tail -n +2 sweep.csv | cut -d, -f1-3 | sort -u | wc -l) -eq 12 ]] ||
    fail "the CSV repeats a (memory, gpus, algorithm)"
  [[ $(sed -n 2p sweep.csv) == 8GiB,2,madpipe,false,,,,*,, ]] || fail "unexpected first CSV row"
  [[ $(sed -n 3p sweep.csv | cut -d, -f1-3) == 8GiB,2,pipedream ]] || fail "rows out of order"
  [[ $(sed -n 4p sweep.csv | cut -d, -f1-3) == 8GiB,4,madpipe ]] || fail "rows out of order"
  expect_match sweep.csv "^24GiB,4,madpipe,true,[0-9.]+,[0-9.]+,[0-9]+,[0-9.]+,[0-9]+,[0-9]+$"
  # MadPipe is never worse than PipeDream's partition, and fits wherever it does.
  awk -F, 'NR > 1 { key = $1 "," $2; if ($3 == "madpipe") { fits[key] = $4; p[key] = $5 }
                    else { q[key] = $5; qfits[key] = $4 } }
           END { for (k in p) if (qfits[k] == "true" && (fits[k] != "true" || p[k] + 0 > q[k] + 1e-6))
                   exit 1 }' sweep.csv || fail "madpipe is worse than pipedream at some point"

  # The plot: a panel per GPU count, a line per algorithm in each, a legend, axes with units.
  [[ $(head -c 4 sweep.svg) == "<svg" ]] || fail "sweep.svg does not start with <svg"
  [[ $(tail -n 1 sweep.svg) == "</svg>" ]] || fail "sweep.svg does not end with </svg>"
  expect_xml sweep.svg
  expect_count sweep.svg '<g class="panel">' 2
  expect_count sweep.svg '<path class="series"' 4
  expect_count sweep.svg '<path class="series" data-series="madpipe"' 2
  expect_count sweep.svg '<path class="series" data-series="pipedream"' 2
  expect_count sweep.svg '<g class="legend"' 1
  for text in ">resnet50: period per micro-batch against memory per GPU<" ">gpus = 2<" \
    ">gpus = 4<" ">madpipe<" ">pipedream<" ">does not fit<" ">memory per GPU (log2 scale)<" \
    ">period per micro-batch (ms)<" ">8 GiB<" ">16 GiB<" ">24 GiB<" ">links at 12.0 GB/s, C = 3<"; do
    expect_in sweep.svg "$text"
  done
  # A cross per point that does not fit, and one in the legend.
  expect_count sweep.svg 'class="missing"' $(($(grep -c ',false,' sweep.csv) + 1))

  # The command line wins over the file: --gpus drops its list, --set memory replaces it.
  run sweep --config "$source_dir/$config" --profile "$resnet" --gpus 4 --set memory=8GiB,16GiB \
    --quiet
  expect_status 0
  expect_empty err
  expect_match out "^sweep        memory \(2\), 2 algorithms: 4 plans in [0-9.]+ s$"
  expect_match out "^ *memory +algorithm +period"
  expect_match out "^ +16GiB +pipedream +[0-9.]+ "
  expect_not_in out "written to"
}

# sweep_fails MESSAGE ARGS...: `madpipe sweep ARGS --csv e.csv --svg e.svg` fails with the one
# line MESSAGE (its beginning) on stderr, before planning, and writes nothing.
sweep_fails() {
  local message=$1
  shift
  run sweep "$@" --csv e.csv --svg e.svg
  expect_status 2
  expect_line_count err 1
  [[ $(cat err) == "$message"* ]] || fail "expected: $message"
  expect_empty out
  [[ ! -e e.csv && ! -e e.svg ]] || fail "a file was written although the sweep failed"
}

case_sweep_errors() {
  local base=(--profile "$resnet" --bandwidth 12GB/s)
  sweep_fails "madpipe: error: --set memory=abc: cannot parse 'abc' as a size (examples: 16GiB, 500MB)" \
    "${base[@]}" --set memory=8GiB,abc --set gpus=2,4
  sweep_fails "madpipe: error: --set gpus=x: the argument ('x') for option '--gpus' is invalid" \
    "${base[@]}" --memory 8GiB --set gpus=2,x
  sweep_fails "madpipe: error: --set gpus=0: must be >= 1, got 0" \
    "${base[@]}" --memory 8GiB --set gpus=0,2
  sweep_fails "madpipe: error: --set scheduler=greedy: unknown scheduler 'greedy'" \
    "${base[@]}" --memory 8GiB --gpus 2 --set scheduler=heuristic,greedy
  sweep_fails "madpipe: error: --set: unknown key 'speed' (valid: profile, gpus, memory, bandwidth, " \
    "${base[@]}" --memory 8GiB --set speed=1,2
  sweep_fails "madpipe: error: --set memory: no values (expected e.g. memory=V1,V2)" \
    "${base[@]}" --gpus 2 --set memory=
  sweep_fails "madpipe: error: --set memory: empty value in '4GiB,,8GiB'" \
    "${base[@]}" --gpus 2 --set memory=4GiB,,8GiB
  sweep_fails "madpipe: error: --set: expected KEY=V1,V2,..., got 'memory'" \
    "${base[@]}" --gpus 2 --set memory
  sweep_fails "madpipe: error: --set memory: value '8GiB' given twice" \
    "${base[@]}" --gpus 2 --set memory=8GiB,16GiB,8GiB
  sweep_fails "madpipe: error: --set gpus: given twice (one list per key)" \
    "${base[@]}" --memory 8GiB --set gpus=2 --set gpus=4
  sweep_fails "madpipe: error: --set memory: --memory is given too; give one or the other" \
    "${base[@]}" --gpus 2 --memory 8GiB --set memory=4GiB,8GiB
  sweep_fails "madpipe: error: the option '--gpus' is required but missing" \
    "${base[@]}" --set memory=4GiB,8GiB
  printf '[sweep]\nset = memory=8GiB,lots\n\n[platform]\ngpus = 2\n' >bad.ini
  sweep_fails "madpipe: error: bad.ini: [sweep] set memory=lots: cannot parse 'lots' as a size" \
    "${base[@]}" --config bad.ini
  printf '[sweep]\nsets = memory=8GiB\n' >typo.ini
  sweep_fails "madpipe: error: typo.ini: [sweep] sets: unknown key (known: profile, set)" \
    "${base[@]}" --gpus 2 --memory 8GiB --config typo.ini
  run sweep "${base[@]}" --gpus 2 --set memory=8GiB,16GiB --csv no/such/s.csv
  expect_status 2
  expect_in err "madpipe: error: --csv: no directory 'no/such' for no/such/s.csv"
  expect_line_count err 1
  [[ ! -e no ]] || fail "sweep created a directory for its output"
}

# A small trace by hand: 2 ranks, 4 micro-batches, F of micro-batch i at 10 * i on rank 0 and
# 10 * i + 5 on rank 1, so the measured period is 10 ms (the plan it ran predicted 8 ms).
write_small_trace() {
  cat >trace.json <<'EOF'
{
  "format": "madpipe.trace/1",
  "profile": "hand", "algorithm": "1f1b", "device": "cpu", "mode": "sync",
  "ranks": 2, "micro_batches": 4, "steps": 1,
  "predicted": {"period_ms": 8.0, "memory_bytes": [1048576, 2097152]},
  "memory": [
    {"rank": 0, "peak_bytes": 1258291, "peak_rss_bytes": 0},
    {"rank": 1, "peak_bytes": 2097152, "peak_rss_bytes": 0}
  ],
  "ops": [
    {"rank": 0, "kind": "F", "stage": 0, "step": 1, "micro_batch": 0, "start_ms": 0, "end_ms": 4},
    {"rank": 0, "kind": "F", "stage": 0, "step": 1, "micro_batch": 1, "start_ms": 10, "end_ms": 14},
    {"rank": 0, "kind": "F", "stage": 0, "step": 1, "micro_batch": 2, "start_ms": 20, "end_ms": 24},
    {"rank": 0, "kind": "F", "stage": 0, "step": 1, "micro_batch": 3, "start_ms": 30, "end_ms": 34},
    {"rank": 1, "kind": "F", "stage": 1, "step": 1, "micro_batch": 0, "start_ms": 5, "end_ms": 9},
    {"rank": 1, "kind": "F", "stage": 1, "step": 1, "micro_batch": 1, "start_ms": 15, "end_ms": 19},
    {"rank": 1, "kind": "F", "stage": 1, "step": 1, "micro_batch": 2, "start_ms": 25, "end_ms": 29},
    {"rank": 1, "kind": "F", "stage": 1, "step": 1, "micro_batch": 3, "start_ms": 35, "end_ms": 39},
    {"rank": 1, "kind": "B", "stage": 1, "step": 1, "micro_batch": 0, "start_ms": 50, "end_ms": 54},
    {"rank": 1, "kind": "B", "stage": 1, "step": 1, "micro_batch": 1, "start_ms": 60, "end_ms": 64},
    {"rank": 1, "kind": "B", "stage": 1, "step": 1, "micro_batch": 2, "start_ms": 70, "end_ms": 74},
    {"rank": 1, "kind": "B", "stage": 1, "step": 1, "micro_batch": 3, "start_ms": 80, "end_ms": 84},
    {"rank": 0, "kind": "B", "stage": 0, "step": 1, "micro_batch": 0, "start_ms": 55, "end_ms": 59},
    {"rank": 0, "kind": "B", "stage": 0, "step": 1, "micro_batch": 1, "start_ms": 65, "end_ms": 69},
    {"rank": 0, "kind": "B", "stage": 0, "step": 1, "micro_batch": 2, "start_ms": 75, "end_ms": 79},
    {"rank": 0, "kind": "B", "stage": 0, "step": 1, "micro_batch": 3, "start_ms": 85, "end_ms": 89}
  ],
  "transfers": [
    {"kind": "activation", "stage": 0, "step": 1, "micro_batch": 0, "from": 0, "to": 1, "bytes": 4096, "start_ms": 4, "end_ms": 5},
    {"kind": "activation", "stage": 0, "step": 1, "micro_batch": 1, "from": 0, "to": 1, "bytes": 4096, "start_ms": 14, "end_ms": 15},
    {"kind": "gradient", "stage": 0, "step": 1, "micro_batch": 0, "from": 1, "to": 0, "bytes": 4096, "start_ms": 54, "end_ms": 55},
    {"kind": "gradient", "stage": 0, "step": 1, "micro_batch": 1, "from": 1, "to": 0, "bytes": 4096, "start_ms": 64, "end_ms": 65}
  ]
}
EOF
}

case_show() {
  run plan --profile "$resnet" "${platform[@]}" --quiet --output plan.json
  expect_status 0
  run show --plan plan.json --svg g.svg --chrome g.json
  expect_status 0
  expect_empty err
  expect_in out "SVG written to g.svg"
  expect_in out "Chrome trace written to g.json"
  [[ $(head -c 4 g.svg) == "<svg" ]] || fail "g.svg does not start with <svg"
  [[ $(tail -n 1 g.svg) == "</svg>" ]] || fail "g.svg does not end with </svg>"
  for text in ">GPU 0<" ">GPU 3<" ">link 0↔1<" ">predicted: resnet50, madpipe, "; do
    expect_in g.svg "$text"
  done
  expect_json g.json
  expect_in g.json '"ph":"X"'
  expect_in g.json '"name":"thread_name"'
  # Without --svg or --chrome: a text timeline and a hint.
  run show --plan plan.json --micro-batches 12
  expect_status 0
  expect_match out "^predicted  12 micro-batches in [0-9.]+ ms"
  expect_match out "^  GPU 0 +busy +[0-9]+%: F0\.0 "
  expect_in out "draw it with --svg FILE"

  write_small_trace
  run show --trace trace.json
  expect_status 0
  expect_in out "measured period 10.00 ms per micro-batch, predicted 8.00 ms (ratio 1.25); step 89.00 ms"
  expect_in out "rank 0: peak 1.2 MiB, predicted 1.0 MiB (ratio 1.20), busy 36%"
  expect_match out "^  link 1→0 +busy +[0-9]+%: SEND_GRAD0\.0 SEND_GRAD0\.1$"
  run show --plan plan.json --trace trace.json --svg both.svg --chrome both.json
  expect_status 0
  expect_in out "measured period 10.00 ms per micro-batch"
  expect_in both.svg ">predicted: resnet50"
  expect_in both.svg ">measured: hand, 1f1b on cpu (sync)"
  expect_json both.json
  expect_in both.json '"pid":1'

  # Errors.
  run show
  expect_status 2
  expect_in err "madpipe: error: nothing to show: give --plan FILE, --trace FILE or both"
  run show --trace missing.json
  expect_status 2
  expect_match err "^madpipe: error: missing\.json: cannot open file"
  sed 's|"madpipe.trace/1"|"madpipe.plan/1"|' trace.json >wrong.json
  run show --trace wrong.json
  expect_status 2
  expect_in err 'madpipe: error: wrong.json: /format: must be "madpipe.trace/1", got "madpipe.plan/1"'
  run show --trace plan.json
  expect_status 2
  expect_in err 'madpipe: error: plan.json: /format: must be "madpipe.trace/1", got "madpipe.plan/1"'
  sed 's|"rank": 1, "kind": "B", "stage": 1, "step": 1, "micro_batch": 3|"rank": 2, "kind": "B", "stage": 1, "step": 1, "micro_batch": 3|' \
    trace.json >bad-rank.json
  run show --trace bad-rank.json
  expect_status 2
  expect_in err "madpipe: error: bad-rank.json: /ops/11/rank: must be a rank in [0, 2), got 2"
  run show --plan plan.json --svg no/such/dir/g.svg
  expect_status 2
  expect_match err "^madpipe: error: no/such/dir/g\.svg: cannot open"
  [[ ! -e no ]] || fail "show created a directory for its output"
  run show --plan plan.json --micro-batches -1
  expect_status 2
  expect_in err "madpipe: error: --micro-batches: must be >= 0, got -1"
  run show --trace trace.json --steps x
  expect_status 2
  expect_in err "--steps"
}

# Two nodes of 4 GPUs: the plan keeps the logits (lm_head -> loss) inside a node, names the
# boundaries that cross nodes, and simulates at its period; bad node options fail clearly.
case_multi_node() {
  local nodes=(--gpus 8 --gpus-per-node 4 --memory 16GiB --bandwidth 100GB/s
    --inter-node-bandwidth 12GB/s)
  run plan --profile "$gpt2" "${nodes[@]}" --output multi.json
  expect_status 0
  expect_in out "platform     8 GPUs with 16.0 GiB each in 2 nodes of 4, links at 100.0 GB/s within a node and 12.0 GB/s between nodes, C = 3"
  expect_match out "^across nodes stages [0-9]+ -> [0-9]+: gpu [0-3] \(node 0\) -> gpu [4-7] \(node 1\), "
  expect_match out "^period +16\.47 ms per micro-batch"
  expect_json multi.json
  expect_in multi.json '"gpus_per_node": 4, "inter_node_bandwidth_bytes_per_ms": 12000000.0}'
  run simulate --plan multi.json --profile "$gpt2"
  expect_status 0
  expect_in out "in 2 nodes of 4"
  expect_match out "^steady period .* ratio 1\.000$"
  expect_not_in err "warning"
  # The same platform in a --config file.
  printf '[platform]\ngpus = 8\ngpus-per-node = 4\nmemory = 16GiB\nbandwidth = 100GB/s\ninter-node-bandwidth = 12GB/s\n' >nodes.ini
  run plan --profile "$gpt2" --config nodes.ini --quiet --output from-config.json
  expect_status 0
  cmp -s multi.json from-config.json || fail "the --config plan differs from the command line's"
  # One node: no crossing is reported and the plan has no node fields.
  run plan --profile "$gpt2" --gpus 4 --memory 16GiB --bandwidth 100GB/s --quiet --output one.json
  expect_status 0
  expect_not_in out "across nodes"
  expect_not_in one.json "gpus_per_node"
  run plan --profile "$gpt2" --gpus 8 --gpus-per-node -1 --memory 16GiB --bandwidth 100GB/s
  expect_status 2
  expect_in err "madpipe: error: --gpus-per-node: must be >= 0, got -1"
  run plan --profile "$gpt2" --gpus 8 --gpus-per-node 4 --memory 16GiB --bandwidth 100GB/s \
    --inter-node-bandwidth slow
  expect_status 2
  expect_in err "madpipe: error: --inter-node-bandwidth: cannot parse 'slow' as a bandwidth"
  run compare --profile "$gpt2" "${nodes[@]}" --algorithms madpipe,contiguous --quiet
  expect_status 0
  expect_in out "in 2 nodes of 4"
}

case_memplan() {
  run memplan --profile "$gpt2" --first 1 --last 4 --in-flight 3
  expect_status 0
  expect_in out "stage      layers 1..4 of gpt2_small, 3 micro-batches in flight, no remat"
  expect_match out "^  abar2@m1 +[0-9.]+ [KMG]iB +F2all@m1 +B2@m1 +[0-9.]+ [KMG]?i?B$"
  expect_match out "^  lower bound +[0-9.]+ [KMG]iB +[0-9]+ +\+0\.00%$"
  expect_match out "^  caching allocator +[0-9.]+ [KMG]iB +[0-9]+ +\+[0-9.]+%$"
  expect_match out "^used       (ilp|greedy-by-start|greedy-largest-first): "
  sequence='F1ck F2all F3all F4ck Loss dLoss F4all B4 B3 B2 F1all B1'
  run memplan --profile "$gpt2" --first 1 --last 4 --remat-sequence "$sequence" --time-limit 2
  expect_status 0
  expect_in out "1 micro-batch in flight, sequence $sequence"
  run plan --profile "$gpt2" "${platform[@]}" --quiet --output plan.json
  expect_status 0
  run memplan --profile "$gpt2" --plan plan.json --stage 1 --time-limit 2
  expect_status 0
  expect_match out "^stage      layers [0-9]+\.\.[0-9]+ of gpt2_small, [0-9]+ micro-batch"
  run memplan --profile "$gpt2" --plan plan.json --stage 1 --steady-state --time-limit 2
  expect_status 0
  expect_match out "^steady     pattern of plan.json \(k = [0-9]+\), stage 1: its F and B in start order$"
  expect_match out "^circle     [0-9]+ periods?, [0-9]+ ops, [0-9]+ slot sets?, [0-9]+ buffers"
  run memplan --profile "$gpt2" --first 1 --last 4 --in-flight 3 --steady-state --pyramid \
    --time-limit 2
  expect_status 0
  expect_in out "steady     1F1B: in period j, forward of micro-batch j+2, then backward of micro-batch j"
  expect_match out "^circle     3 periods, 36 ops, 3 slot sets, 48 buffers \([0-9]+ wrap around\)$"
  expect_match out "^  a0@s0 +[0-9.]+ [KMG]iB +recv@s0 +B1@s0 \(next turn\) +[0-9.]+ [KMG]?i?B$"
  expect_match out "^  pyramid \+ ilp +"
  run memplan --profile "$gpt2" --first 1 --last 4 --in-flight 2 --remat-sequence "$sequence" \
    --order ilp --time-limit 2
  expect_status 0
  expect_match out "^order      resident peak [0-9.]+ [KMG]iB given, [0-9.]+ [KMG]iB reordered \(-?[0-9.]+%\); "
  run memplan --profile "$gpt2" --first 1 --last 4 --steady-state --order ilp
  expect_status 2
  expect_in err "madpipe: error: --order: ilp reorders one window of the stage; not with --steady-state"
  run memplan --profile "$gpt2" --first 1 --last 4 --order best
  expect_status 2
  expect_in err "madpipe: error: --order: unknown order 'best' (valid: given, ilp)"
  run memplan --profile "$gpt2" --first 1 --last 4 --periods 2
  expect_status 2
  expect_in err "madpipe: error: --periods: needs --steady-state"
  run memplan --profile "$gpt2" --plan plan.json --stage 1 --steady-state --in-flight 2
  expect_status 2
  expect_in err "madpipe: error: --in-flight: the plan's pattern fixes"
  run memplan --profile "$gpt2" --plan plan.json --stage 99
  expect_status 2
  expect_in err "madpipe: error: --stage: must be a stage of plan.json"
  run memplan --profile "$gpt2" --first 1
  expect_status 2
  expect_in err "madpipe: error: --first: give the stage's layers (--first and --last) or --plan"
  run memplan --profile "$gpt2" --first 1 --last 2 --remat-sequence "B1"
  expect_status 2
  expect_in err "madpipe: error: sequence: "
}

# madpipe scale: 32 GPUs in 4 nodes of 8 as D replicas of a P-GPU pipeline; GPT-2 small has 15
# layers, so P = 16 and 32 are rejected.
case_scale() {
  local scale=(--profile "$gpt2" --gpus 32 --gpus-per-node 8 --memory 80GiB --bandwidth 300GB/s
    --inter-node-bandwidth 25GB/s)
  run scale "${scale[@]}" --global-batch 1024 --csv scale.csv -o best.json
  expect_status 0
  expect_in out "global batch 1024 samples per step = D x m x 8"
  expect_match out "^ D +P +m +period \(ms\) +bubble +all-reduce \(ms\) +exposed \(ms\) +step \(ms\) +samples/s +peak memory +status$"
  local numbers="[0-9.]+ +[0-9.]+% +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ [KMG]iB"
  for row in "32 +1 +4" "16 +2 +8" " 8 +4 +16" " 4 +8 +32"; do
    expect_match out "^$row +$numbers +(chosen|ok)$"
  done
  expect_count out "  chosen" 1
  expect_match out "^ 2 +16 +64 +- .* rejected: P = 16 GPUs exceed the 15 layers$"
  expect_match out "^ 1 +32 +128 +- .* rejected: P = 32 GPUs exceed the 15 layers$"
  expect_match out "^chosen       D = [0-9]+ replicas? of a [0-9]+-GPU pipeline \([0-9]+ stages?, madpipe\), m = [0-9]+ micro-batch"
  expect_in out "plan written to best.json"
  expect_match err "^scale: \[1/6\] D=32 x P=1, m=4: [0-9.]+ ms per micro-batch, step [0-9.]+ ms"
  expect_line_count scale.csv 7
  expect_match scale.csv "^replicas,pipeline_gpus,micro_batches,status,period_ms,"
  expect_match scale.csv "^2,16,64,rejected,,,,,,,,,,[0-9.]+,P = 16 GPUs exceed the 15 layers$"
  expect_json best.json
  local replicas
  replicas=$(grep -oE '^ *[0-9]+ +[0-9]+ +[0-9]+ .*chosen$' out | awk '{print $1}')
  if [[ $replicas -eq 1 ]]; then
    expect_not_in best.json '"replicas"'
  else
    expect_in best.json "\"replicas\": $replicas,"
  fi
  run simulate --plan best.json --profile "$gpt2"
  expect_status 0
  # Too small a global batch for 32 replicas: that row is rejected, m < P is flagged.
  run scale "${scale[@]}" --global-batch 128 --quiet
  expect_status 0
  expect_empty err
  expect_match out "^32 +1 +- +- .* rejected: the global batch does not split: 128 is not a multiple of D x batch = 256$"
  expect_in out "(m = 1 < P = 2: mostly fill and drain)"
  # Bad input: exit status 2 and a message naming the option.
  run scale "${scale[@]}" --global-batch 12
  expect_status 2
  expect_in err "madpipe: error: --global-batch: must be a multiple of the profile's batch (8), got 12"
  expect_empty out
  run scale "${scale[@]}" --global-batch 0
  expect_status 2
  expect_in err "madpipe: error: --global-batch: must be >= 1, got 0"
  run scale --profile "$gpt2" --gpus 32 --memory 80GiB --bandwidth 300GB/s
  expect_status 2
  expect_in err "madpipe: error: the option '--global-batch' is required but missing"
  # Nothing fits: the table says why, then an error.
  run scale --profile "$gpt2" --gpus 4 --memory 2GiB --bandwidth 300GB/s --global-batch 64 -q
  expect_status 2
  expect_in out "rejected: no madpipe plan fits in 2.0 GiB per GPU"
  expect_in err "madpipe: error: no split of the 4 GPUs into D replicas of a pipeline works"
}

# torch_accepts DIR...: when a Python with torch.distributed.pipelining is at hand (.venv's, else
# python3), its own checks take each DIR/schedule.csv: _validate_schedule (every stage's F and B
# of each micro-batch once, on one rank), the insertion of sends and receives, and the simulation
# of compute and communication, which fails on a deadlock. Without torch, nothing is checked.
torch_accepts() {
  local python=$source_dir/.venv/bin/python
  [[ -x $python ]] || python=python3
  if ! "$python" -c "import torch.distributed.pipelining.schedules" 2>/dev/null; then
    echo "($case_name: no Python with torch.distributed.pipelining: torch's checks skipped)" >&2
    return 0
  fi
  "$python" - "$@" <<'PY' || fail "torch.distributed.pipelining rejects a schedule of: $*"
import json, sys
from torch.distributed.pipelining.schedules import (
    _Action, _add_send_recv, _simulate_comms_compute, _validate_schedule)
for folder in sys.argv[1:]:
    stages = json.load(open(f"{folder}/stages.json"))
    S, N = stages["num_stages"], stages["micro_batches"]
    lines = open(f"{folder}/schedule.csv").read().splitlines()
    actions = {r: [_Action.from_str(a) for a in line.split(",")] for r, line in enumerate(lines)}
    mapping = _validate_schedule(actions, pp_group_size=len(lines), num_stages=S,
                                 num_microbatches=N)
    assert mapping == {s["stage"]: s["rank"] for s in stages["stages"]}, (folder, mapping)
    comms = _add_send_recv(actions, stage_to_rank=lambda s: mapping[s], num_stages=S)
    _simulate_comms_compute(comms, lambda s: mapping[s], S)
PY
}

# A plan as torch.distributed.pipelining's compute-only CSV and its stages: one line per GPU,
# each stage's forwards on its GPU's line; torch takes it, with several stages on one GPU too.
case_export_torch() {
  run plan --profile "$resnet" "${platform[@]}" --quiet --output plan.json
  expect_status 0
  run export --plan plan.json --format torch --micro-batches 8 --output torch
  expect_status 0
  expect_empty err
  expect_in out "schedule  torch.distributed.pipelining: 4 ranks, 4 stages, 8 micro-batches"
  expect_match out "^   0  0 +16  0F0 0F1 "
  expect_in out "schedule written to torch/schedule.csv"
  expect_in out "stages written to torch/stages.json"
  [[ -f torch/schedule.csv && -f torch/stages.json ]] || fail "torch/ lacks its two files"
  expect_line_count torch/schedule.csv 4
  expect_count torch/schedule.csv "F" 32
  expect_count torch/schedule.csv "B" 32
  local rank
  for rank in 0 1 2 3; do
    [[ $(sed -n "$((rank + 1))p" torch/schedule.csv) =~ ^(${rank}[FB][0-7],){15}${rank}[FB][0-7]$ ]] ||
      fail "line $((rank + 1)) of schedule.csv is not 16 actions of stage $rank"
  done
  expect_json torch/stages.json
  expect_in torch/stages.json '"format": "madpipe.torch-stages/1",'
  expect_in torch/stages.json '"micro_batches": 8,'
  expect_in torch/stages.json '"ranks": 4,'
  expect_in torch/stages.json '"num_stages": 4,'
  expect_match torch/stages.json '^    \{"stage": 3, "rank": 3, "first_layer": [0-9]+, "last_layer": 20, "remat": "none", "offload": "none"\}$'
  expect_in torch/stages.json '"notes": []'

  # Nine stages on four GPUs, six of them on GPU 0.
  run plan --profile "$source_dir/configs/profiles/gpt2_xl16.json" --gpus 4 --memory 16GiB \
    --bandwidth 50GB/s --quiet --output xl.json
  expect_status 0
  run export --plan xl.json --format torch --micro-batches 5 -o xl
  expect_status 0
  local stages
  stages=$(grep -o '"num_stages": [0-9]*' xl/stages.json | grep -o '[0-9]*$')
  [[ $stages -gt 4 ]] || fail "the gpt2_xl16 plan has $stages stages, expected more than the 4 GPUs"
  expect_line_count xl/schedule.csv 4
  expect_count xl/schedule.csv "F" $((stages * 5))
  torch_accepts torch xl

  # A GPU without a stage: an empty line and a note.
  run plan --profile "$gpt2" --gpus 4 --memory 16GiB --bandwidth 12GB/s --algorithm 1f1b --quiet \
    --output idle.json
  expect_status 0
  run export --plan idle.json --format torch --micro-batches 4 -o idle
  expect_status 0
  expect_line_count idle/schedule.csv 4
  [[ -z $(sed -n 4p idle/schedule.csv) ]] || fail "rank 3 of idle/schedule.csv is not empty"
  expect_in out "note: rank 3 runs no stage, and torch.distributed.pipelining needs one on every rank"
  expect_in idle/stages.json '"rank 3 runs no stage'

  # Errors: status 2, a message naming the option or the file, nothing written.
  run export --plan plan.json --format onnx --micro-batches 8 --output bad
  expect_status 2
  expect_in err "madpipe: error: --format: unknown format 'onnx' (valid: torch, torchtitan)"
  run export --plan plan.json --format torch --micro-batches 0 --output bad
  expect_status 2
  expect_in err "madpipe: error: --micro-batches: must be >= 1, got 0"
  run export --plan plan.json --format torch --output bad
  expect_status 2
  expect_in err "madpipe: error: the option '--micro-batches' is required but missing"
  run export --plan missing.json --format torch --micro-batches 8 --output bad
  expect_status 2
  expect_match err "^madpipe: error: missing\.json: cannot open file"
  expect_empty out
  sed 's|"gpu": 3|"gpu": 9|' plan.json >wrong-gpu.json
  run export --plan wrong-gpu.json --format torch --micro-batches 8 --output bad
  expect_status 2
  expect_in err "madpipe: error: wrong-gpu.json: /stages/3/gpu: invalid plan: 1 violation"
  [[ ! -e bad ]] || fail "a failed export created its output folder"
  touch file
  run export --plan plan.json --format torch --micro-batches 8 --output file
  expect_status 2
  expect_in err "madpipe: error: file: cannot create the output folder"
}

case_export_torchtitan() {
  # Llama 3 8B (an analytic decoder profile) interleaved on 4 GPUs: 8 stages, stage s on rank
  # s % 4 as torchtitan places them, its module names from the profile's layers.
  run profile --analytic "$source_dir/configs/models/llama3-8b.json" --seq 4096 \
    --micro-batch-size 1 --precision bf16 --device-spec h100 -o llama.json
  expect_status 0
  run plan --profile llama.json --gpus 4 --memory 80GB --bandwidth 300GB/s \
    --algorithm interleaved --micro-batches 8 --quiet --output plan.json
  expect_status 0
  run export --plan plan.json --format torchtitan --micro-batches 8 --profile llama.json -o titan
  expect_status 0
  expect_in out "8 stages on 4 ranks (GPU 0 -> rank 0, GPU 1 -> rank 1, GPU 2 -> rank 2, GPU 3 -> rank 3)"
  expect_match out "^stage 0  rank 0  tok_embeddings layers.0 "
  expect_match out "^stage 7  rank 3  layers.* layers.31 norm output$"
  expect_in titan/torchtitan.toml "pipeline_parallel_degree = 4"
  expect_in titan/torchtitan.toml 'pipeline_parallel_schedule = "PipelineScheduleMulti"'
  expect_in titan/torchtitan.toml "pipeline_parallel_schedule_csv = \"$PWD/titan/schedule.csv\""
  expect_in titan/torchtitan.toml '  ["tok_embeddings","layers.0",'
  expect_in titan/torchtitan.toml "local_batch_size = 8"
  # The CSV holds the torch export's rows (the GPUs are the ranks here).
  run export --plan plan.json --format torch --micro-batches 8 -o torch
  expect_status 0
  cmp -s titan/schedule.csv torch/schedule.csv || fail "the torchtitan CSV differs from the torch one"
  # Module names from a file; placements torchtitan cannot run are refused, naming the stages.
  python3 -c "import json; print(json.dumps(['embed'] + [['blocks.%d' % i] for i in range(32)] + [['norm', 'out']]))" >names.json
  run export --plan plan.json --format torchtitan --micro-batches 8 --module-names names.json -o named
  expect_status 0
  expect_match out "^stage 7  rank 3  .*blocks.31 norm out$"
  run plan --profile llama.json --gpus 4 --memory 80GB --bandwidth 300GB/s --algorithm zb-v \
    --quiet --output v.json
  run export --plan v.json --format torchtitan --micro-batches 8 --profile llama.json -o v
  expect_status 2
  expect_in err "holds stages 3, 4, but torchtitan places stage s on rank s % 4"
  run export --plan plan.json --format torchtitan --micro-batches 8 -o bad
  expect_status 2
  expect_in err "--format torchtitan: needs the module names of the layers"
  echo '["a"]' >short.json
  run export --plan plan.json --format torchtitan --micro-batches 8 --module-names short.json -o bad
  expect_status 2
  expect_in err "module-names: 1 entries, but the plan's chain has 34 layers"
}

case_split_backward() {
  # A profile whose layers with weights split their backward (estimated by the bench script).
  python3 "$source_dir/bench/split_backward/split_profile.py" \
    "$source_dir/configs/profiles/gpt2_xl16.json" split.json || fail "split_profile.py failed"
  expect_in split.json '"backward_weight_ms"'
  # Tight memory: the split shortens madpipe's period, and the plan says so.
  run plan --profile split.json --gpus 4 --memory 5.7GiB --bandwidth 12GB/s --output plan.json
  expect_status 0
  expect_in plan.json '"kind": "W"'
  expect_in plan.json '"backward_weight_ms"'
  expect_in out "split backward (B and W)"
  expect_match out "^stage +layers +names +gpu +F ms +B ms +of which W "
  expect_match out "; the (partial )?split is kept"
  run simulate --plan plan.json --profile split.json
  expect_status 0
  # Given the step's micro-batches, the plan predicts the step (W in its bubbles), which
  # simulate's asap policy (what the runtime runs) replays, and whole and split backwards are
  # compared by it.
  run plan --profile split.json --gpus 4 --memory 5.7GiB --bandwidth 12GB/s --micro-batches 8 \
    --output step.json
  expect_status 0
  expect_match out "^step +[0-9.]+ ms for 8 micro-batches \(warm-up and drain included\), [0-9.]+% bubble; lower bound [0-9.]+ ms, step / lower bound = [0-9.]+$"
  expect_match out "split backward \(B and W\).*: a step of [0-9.]+ ms \([0-9.]+ ms per micro-batch\)"
  run simulate --plan step.json --profile split.json --micro-batches 8 --policy asap
  expect_status 0
  python3 - step.json out <<'PY' || fail "the predicted step is not the simulated one: $(grep 'step time' out)"
import json, re, sys
step = json.load(open(sys.argv[1]))["predicted"]["step"]
simulated = float(re.search(r"^step time +([0-9.]+) ms", open(sys.argv[2]).read(), re.M).group(1))
assert step["micro_batches"] == 8 and 0 <= step["bubble"] < 1, step
assert abs(step["time_ms"] - simulated) <= 0.006, (step, simulated)
PY
  run export --plan plan.json --format torch --micro-batches 8 --output torch
  expect_status 0
  expect_match torch/schedule.csv "(^|,)[0-9]+I[0-9]+(,|$)"
  expect_match torch/schedule.csv "(^|,)[0-9]+W[0-9]+(,|$)"
  # Off: whole backwards, the plan of the profile without the split.
  run plan --profile split.json --gpus 4 --memory 5.7GiB --bandwidth 12GB/s --split-backward off \
    --output whole.json
  expect_status 0
  ! grep -qF '"kind": "W"' whole.json || fail "--split-backward off planned W ops"
  ! grep -qF 'backward_weight_ms' whole.json || fail "--split-backward off kept a split stage"
  ! grep -qF 'of which W' out || fail "a plan without split stages shows the W column"
  run plan --profile split.json "${platform[@]}" --split-backward sometimes
  expect_status 2
  expect_in err "madpipe: error: --split-backward: unknown split-backward mode 'sometimes' (valid: auto, off)"
  # Today's schedules are rows of compare.
  run compare --profile split.json --gpus 4 --memory 5.7GiB --bandwidth 12GB/s
  expect_status 0
  expect_match out "^zb-h1 +[0-9.]+ "
  expect_match out "^zb-v +[0-9.]+ "
  expect_match out "^interleaved +[0-9.]+ "
  # Which stages of each plan run W apart: a column where the profile splits.
  expect_match out "^algorithm .* planning \(s\) +split stages$"
  expect_match out "^1f1b .* 0 of [0-9]+$"
  expect_match out "^zb-h1 .* [1-9][0-9]* of [0-9]+$"
  run compare --profile split.json --gpus 4 --memory 5.7GiB --bandwidth 12GB/s --csv \
    --algorithms 1f1b,zb-h1
  expect_status 0
  expect_match out "^algorithm,.*,planning_s,split_stages$"
  expect_match out "^1f1b,ok,.*,0$"
  run compare --profile split.json --gpus 4 --memory 5.7GiB --bandwidth 12GB/s --split-backward off \
    --algorithms 1f1b
  expect_status 0
  ! grep -qF 'split stages' out || fail "--split-backward off shows the split column"
}

# madpipe profile --analytic needs no runtime: a profile from a config file, before any hardware.
case_profile_analytic() {
  local models=$source_dir/configs/models
  run profile --analytic "$models/llama3-8b.json" --seq 1024 --micro-batch-size 2 \
    --precision bf16 --device-spec h100 -o llama.json
  expect_status 0
  expect_match out "^layer +fwd ms +bwd ms +weights +output +saved +fwd ws +bwd ws$"
  expect_match out "^block31 +[0-9.]+ +[0-9.]+ +416.0 MiB +16.0 MiB "
  expect_in out "wrote llama.json (34 layers)"
  expect_json llama.json
  expect_in llama.json '"name": "llama3-8b"'
  expect_in llama.json '"dtype": "bfloat16"'
  expect_in llama.json '"seq": 1024'
  expect_in llama.json '"device": "NVIDIA H100 SXM 80GB (analytic model, not measured)"'
  expect_in llama.json 'times at efficiency 0.5 of 989 TFLOP/s (dense bf16) and 3.35 TB/s'
  # The planner reads it.
  run plan --profile llama.json --gpus 8 --memory 80GB --bandwidth 300GB/s --precision bf16 \
    --optimizer adamw --algorithm 1f1b --quiet -o plan.json
  expect_status 0
  expect_in plan.json '"profile": "llama3-8b"'
  # A custom device; a Hugging Face snapshot's config.json is named after its directory.
  mkdir -p gpt-snapshot
  cp "$models/builtin-gpt.json" gpt-snapshot/config.json
  run profile --analytic gpt-snapshot/config.json --seq 32 --peak-flops 150G \
    --memory-bandwidth 12GB/s --efficiency 1 -o gpt.json
  expect_status 0
  expect_in gpt.json '"name": "gpt-snapshot"'
  expect_in gpt.json '"device": "custom device: 150 GFLOP/s, 12 GB/s (analytic model, not measured)"'
  expect_match out "^block0 +[0-9.]+ +[0-9.]+ +195.2 KiB +64.0 KiB +1.1 MiB +384.0 KiB +256.0 KiB$"
  run plan --profile gpt.json --gpus 2 --memory 1GiB --bandwidth 1GB/s --quiet -o gpt-plan.json
  expect_status 0
  # Contradictions and mistakes, each named.
  local llama=("--analytic" "$models/llama3-8b.json" --seq 128)
  run profile "${llama[@]}" -o x.json
  expect_status 2
  expect_in err "madpipe: error: --device-spec: --analytic needs a device"
  run profile "${llama[@]}" --device-spec h100 --torchscript m.pt -o x.json
  expect_status 2
  expect_in err "madpipe: error: --torchscript: does not apply to --analytic"
  run profile "${llama[@]}" --device-spec h100 --peak-flops 1T -o x.json
  expect_status 2
  expect_in err "give either --device-spec or --peak-flops and --memory-bandwidth, not both"
  run profile "${llama[@]}" --peak-flops 1T -o x.json
  expect_status 2
  expect_in err "madpipe: error: --memory-bandwidth: a custom device needs its memory bandwidth"
  run profile "${llama[@]}" --device-spec v100 -o x.json
  expect_status 2
  expect_in err "unknown device 'v100' (presets: h100, h200, a100, b200, mi300x, l40s"
  run profile --analytic "$models/llama3-8b.json" --device-spec h100 -o x.json
  expect_status 2
  expect_in err "madpipe: error: --seq: --analytic needs the tokens per sample"
  run profile --model gpt --peak-flops 1T -o x.json
  expect_status 2
  expect_in err "madpipe: error: --peak-flops: only applies to --analytic"
  run profile --analytic "$models/builtin-gpt.json" --seq 64 --device-spec h100 -o x.json
  expect_status 2
  expect_in err "madpipe: error: --seq: must be at most the config's n_positions (32)"
  echo '{"model_type": "llama", "vocab_size": 10, "hidden_size": "64"}' >bad.json
  run profile --analytic bad.json --seq 8 --device-spec h100 -o x.json
  expect_status 2
  expect_in err "madpipe: error: bad.json: /hidden_size: must be an integer >= 1, got string"
  [[ ! -e x.json ]] || fail "no profile may be written after an error"
}

all_cases=(help version unknown_command plan_and_simulate plan_every_algorithm
  plan_is_deterministic bad_memory bad_options missing_profile too_little_memory time_limit compare
  compare_csv sweep sweep_errors config_file simulate_rejects_invalid_plan remat plan_remat show
  multi_node memplan scale export_torch export_torchtitan split_backward profile_analytic
  plan_memory_binds)

run_case() {
  case_name=$1
  local dir=$work_root/$case_name
  rm -rf "$dir"
  mkdir -p "$dir"
  cd "$dir"
  "case_$case_name"
  echo "PASS [$case_name]"
}

if [[ $case_name == all ]]; then
  for name in "${all_cases[@]}"; do (run_case "$name"); done
elif declare -F "case_$case_name" >/dev/null; then
  run_case "$case_name"
else
  echo "unknown case '$case_name' (cases: ${all_cases[*]})" >&2
  exit 2
fi
