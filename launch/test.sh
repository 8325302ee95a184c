#!/usr/bin/env bash
# Builds everything in build/ (Ninja, ccache, warnings as errors) and runs the whole test suite.
# This is the README's test command; .ci/run runs it too.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

# Layering: the planner layers build without LibTorch, MPI, NCCL or CUDA (docs/architecture.md), and
# CBC/GLPK headers appear only in src/solver/backends/.
planner_dirs=()
for dir in src/core src/solver src/schedule src/remat src/arena src/plan src/partition; do
  [[ -d $dir ]] && planner_dirs+=("$dir")
done
if [[ ${#planner_dirs[@]} -gt 0 ]] &&
  grep -rnE '#include\s*[<"](torch/|ATen/|c10/|mpi\.h|nccl|cuda)' "${planner_dirs[@]}"; then
  echo "test.sh: error: the planner layers (${planner_dirs[*]}) include LibTorch, MPI, NCCL" \
    "or CUDA headers (listed above)" >&2
  exit 1
fi
if grep -rnE '#include\s*[<"](coin/|coin-or/|Cbc[A-Z]|Clp[A-Z]|Osi[A-Z]|Coin[A-Z]|glpk\.h)' \
  --exclude-dir=backends src; then
  echo "test.sh: error: CBC/GLPK headers are included outside src/solver/backends/" \
    "(listed above)" >&2
  exit 1
fi

# Rooms: each library includes only the libraries it links (docs/architecture.md, CMakeLists.txt),
# the runtime's rooms included.
planner="core solver schedule remat arena plan partition"
declare -A may_include=(
  [core]="core"
  [solver]="core solver"
  [schedule]="core solver schedule"
  [remat]="core solver remat"
  [arena]="core solver schedule remat arena"
  [plan]="core solver schedule remat arena plan"
  [partition]="$planner"
  [runtime/config]="$planner runtime/config"
  [runtime/device]="$planner runtime/config runtime/device"
  [runtime/comm]="$planner runtime/config runtime/device runtime/comm"
  [runtime/model]="$planner runtime/config runtime/device runtime/model"
  [runtime/data]="$planner runtime/config runtime/device runtime/model runtime/data"
  [runtime/exec]="$planner runtime/config runtime/device runtime/comm runtime/model runtime/data
    runtime/exec"
  [runtime/profile]="$planner runtime/config runtime/device runtime/model runtime/data
    runtime/profile"
  [runtime/train]="$planner runtime/config runtime/device runtime/comm runtime/model runtime/data
    runtime/exec runtime/profile runtime/train"
)
rooms="runtime/config runtime/device runtime/comm runtime/model runtime/data runtime/exec"
rooms+=" runtime/profile runtime/train"
all_layers="$planner $rooms cli"
for layer in "${!may_include[@]}"; do
  [[ -d src/$layer ]] || continue
  allowed=" $(echo ${may_include[$layer]}) "
  forbidden=()
  for other in $all_layers; do
    [[ $allowed == *" $other "* ]] || forbidden+=("$other")
  done
  pattern="#include\s*\"($(IFS='|'; echo "${forbidden[*]}"))/"
  if grep -rnE "$pattern" "src/$layer"; then
    echo "test.sh: error: src/$layer includes a library it does not link (listed above); it" \
      "may include: $(echo ${may_include[$layer]})" >&2
    exit 1
  fi
done
if [[ -d src/runtime ]] && find src/runtime -maxdepth 1 -type f | grep .; then
  echo "test.sh: error: every file of src/runtime belongs to one of its rooms ($rooms)" >&2
  exit 1
fi

export CCACHE_DIR=${CCACHE_DIR:-$repo/.ccache}
# The packaging test (python/tests/test_packaging.py) builds the planner again in build-python/;
# with the build directory left out of the hash, ccache serves it this build's objects.
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
generator=()
# An existing build/ keeps the generator it was configured with.
[[ -f build/CMakeCache.txt ]] || generator=(-G Ninja)

cmake -S . -B build ${generator[@]+"${generator[@]}"} ${launcher[@]+"${launcher[@]}"} \
  -DMADPIPE_WERROR=ON
cmake --build build
ctest --test-dir build --output-on-failure -j2
