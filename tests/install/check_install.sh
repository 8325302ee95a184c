#!/usr/bin/env bash
# Installs the planner (install component "planner") of a madpipe build into WORK_DIR/prefix,
# then builds examples/embed_planner against that prefix twice, with find_package(madpipe) and
# with pkg-config (madpipe-planner.pc), runs both on configs/profiles/resnet50.json and checks
# that they print a period and the same plan. Arguments (tests/install/CMakeLists.txt):
#   --build-dir= --source-dir= --work-dir= --config= --cmake= --generator= --cxx= --launcher=
#   --cxx-flags= --linker-flags= --pkg-config=
set -euo pipefail

build_dir='' source_dir='' work_dir='' config='' cmake=cmake generator='' cxx=c++ launcher=''
cxx_flags='' linker_flags='' pkg_config=''
for arg in "$@"; do
  case $arg in
    --build-dir=*) build_dir=${arg#*=} ;;
    --source-dir=*) source_dir=${arg#*=} ;;
    --work-dir=*) work_dir=${arg#*=} ;;
    --config=*) config=${arg#*=} ;;
    --cmake=*) cmake=${arg#*=} ;;
    --generator=*) generator=${arg#*=} ;;
    --cxx=*) cxx=${arg#*=} ;;
    --launcher=*) launcher=${arg#*=} ;;
    --cxx-flags=*) cxx_flags=${arg#*=} ;;
    --linker-flags=*) linker_flags=${arg#*=} ;;
    --pkg-config=*) pkg_config=${arg#*=} ;;
    *) echo "check_install.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
for name in build_dir source_dir work_dir; do
  [[ -n ${!name} ]] || { echo "check_install.sh: --${name//_/-}= is required" >&2; exit 2; }
done

fail() { echo "check_install.sh: FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

profile=$source_dir/configs/profiles/resnet50.json
prefix=$work_dir/prefix
rm -rf "$work_dir"
mkdir -p "$work_dir"

step "install the planner component into $prefix"
config_args=()
[[ -n $config ]] && config_args=(--config "$config")
"$cmake" --install "$build_dir" --prefix "$prefix" --component planner \
  ${config_args[@]+"${config_args[@]}"} > "$work_dir/install.log" ||
  { cat "$work_dir/install.log"; fail "cmake --install failed"; }
config_file=$(find "$prefix" -name madpipeConfig.cmake -print -quit)
pc_file=$(find "$prefix" -name madpipe-planner.pc -print -quit)
[[ -n $config_file ]] || fail "no madpipeConfig.cmake under $prefix"
[[ -n $pc_file ]] || fail "no madpipe-planner.pc under $prefix"
for header in madpipe.hpp core/profile.hpp solver/solve.hpp schedule/pattern.hpp remat/rotor.hpp \
  arena/address_plan.hpp plan/plan.hpp \
  partition/planner.hpp; do
  [[ -f $prefix/include/madpipe/$header ]] || fail "include/madpipe/$header not installed"
done
[[ ! -e $prefix/include/madpipe/solver/backends ]] || fail "private solver/backends/ installed"

# The compiler cache of the build, when it works in this environment (it needs a writable
# cache directory).
launcher_args=()
if [[ -n $launcher ]] &&
  ${launcher//;/ } "$cxx" -x c++ -c /dev/null -o "$work_dir/probe.o" 2> /dev/null; then
  launcher_args=("-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher")
fi
generator_args=()
[[ -n $generator ]] && generator_args=(-G "$generator")

step "build examples/embed_planner with find_package(madpipe)"
example_build=$work_dir/cmake-build
if ! "$cmake" -S "$source_dir/examples/embed_planner" -B "$example_build" \
  ${generator_args[@]+"${generator_args[@]}"} ${launcher_args[@]+"${launcher_args[@]}"} \
  "-DCMAKE_PREFIX_PATH=$prefix" "-DCMAKE_CXX_COMPILER=$cxx" "-DCMAKE_BUILD_TYPE=$config" \
  "-DCMAKE_CXX_FLAGS=$cxx_flags" "-DCMAKE_EXE_LINKER_FLAGS=$linker_flags" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF > "$work_dir/configure.log" 2>&1; then
  cat "$work_dir/configure.log"
  fail "configuring the example against $prefix failed"
fi
found_dir=$(sed -n 's/^madpipe_DIR:PATH=//p' "$example_build/CMakeCache.txt")
[[ $found_dir -ef $(dirname "$config_file") ]] ||
  fail "find_package(madpipe) found $found_dir, not the package installed in $prefix"
"$cmake" --build "$example_build" ${config_args[@]+"${config_args[@]}"} \
  > "$work_dir/build.log" 2>&1 ||
  { cat "$work_dir/build.log"; fail "building the example against $prefix failed"; }
exe=$(find "$example_build" -type f -name embed_planner -perm -u+x -print -quit)
[[ -n $exe ]] || fail "no embed_planner executable in $example_build"

check_output() {  # LABEL FILE
  cat "$2"
  grep -Eq '^resnet50: period [0-9.]+ ms per micro-batch, [0-9]+ stages$' "$2" ||
    fail "$1: the output does not give the period and the stages"
  grep -Eq '^stage 0: layers 0-[0-9]+ on GPU [0-9]+$' "$2" || fail "$1: no stage listed"
}

step "run $exe"
"$exe" "$profile" > "$work_dir/cmake-run.txt" || fail "embed_planner (CMake build) failed"
check_output "CMake build" "$work_dir/cmake-run.txt"

if [[ -z $pkg_config ]] || ! command -v "$pkg_config" > /dev/null 2>&1; then
  step "pkg-config not found: the pkg-config build is skipped"
  exit 0
fi

step "build examples/embed_planner/main.cpp with pkg-config madpipe-planner"
PKG_CONFIG_PATH=$(dirname "$pc_file")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export PKG_CONFIG_PATH
pc_flags=$("$pkg_config" --cflags --libs madpipe-planner) ||
  fail "pkg-config --cflags --libs madpipe-planner failed"
echo "pkg-config: $pc_flags"
[[ $("$pkg_config" --variable=includedir madpipe-planner)/madpipe -ef $prefix/include/madpipe ]] ||
  fail "madpipe-planner.pc does not point into $prefix"
# shellcheck disable=SC2086  # flags are lists of words
"$cxx" -std=c++17 $cxx_flags "$source_dir/examples/embed_planner/main.cpp" -o "$work_dir/embed_pc" \
  $pc_flags $linker_flags || fail "building the example with pkg-config failed"
# No run path in this build: shared madpipe libraries (BUILD_SHARED_LIBS) come from the prefix.
LD_LIBRARY_PATH=$(dirname "$(dirname "$pc_file")")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
  "$work_dir/embed_pc" "$profile" > "$work_dir/pc-run.txt" ||
  fail "embed_planner (pkg-config) failed"
check_output "pkg-config build" "$work_dir/pc-run.txt"
cmp -s "$work_dir/cmake-run.txt" "$work_dir/pc-run.txt" ||
  fail "the CMake and pkg-config builds print different plans"
step "ok"
