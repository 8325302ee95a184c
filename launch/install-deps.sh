#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages that madpipe (planner, runtime, CLI, tests) builds against,
# clang for launch/sanitize.sh and launch/fuzz.sh, and clang-format for launch/format.sh.
# Skips apt entirely when every package is already installed. Used by launch/quickstart.sh and
# .ci/run.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache
  nlohmann-json3-dev libboost-program-options-dev
  libgtest-dev libbenchmark-dev
  coinor-libcbc-dev libglpk-dev
  libtorch-dev libopenmpi-dev openmpi-bin
  clang libclang-rt-14-dev clang-format
)

is_installed() {
  dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed$'
}

missing=()
for package in "${packages[@]}"; do
  is_installed "$package" || missing+=("$package")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

# Run as root directly, otherwise through sudo when there is one.
as_root() {
  if [[ $(id -u) -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "install-deps: error: not root and no sudo; install as root: ${missing[*]}" >&2
    exit 1
  fi
}

echo "install-deps: installing ${missing[*]}"
as_root apt-get update
as_root env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${packages[@]}"
