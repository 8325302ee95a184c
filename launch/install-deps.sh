#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages that madpipe (planner, runtime, CLI, tests) builds against,
# clang for launch/sanitize.sh and launch/fuzz.sh, and clang-format for launch/format.sh; then
# from PyPI into .venv/ at the repository root: PyTorch (whose LibTorch the runtime builds
# against), numpy, and what the Python package builds and tests with (nanobind,
# scikit-build-core, pytest, mypy; safetensors, to read exported weights back). Skips apt when every package is already installed, and pip
# when .venv/ has the wanted versions. Used by launch/quickstart.sh and .ci/run.
#
#   MADPIPE_TORCH=torch==2.15.0   the pip requirement for PyTorch (the default wheel is
#                                 CUDA-enabled; it runs on machines without a GPU too)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
torch_requirement=${MADPIPE_TORCH:-torch==2.15.0}
# The Python package's build and tests (python/, pyproject.toml).
python_requirements=(nanobind==3.1.0 scikit-build-core==1.1.2 pytest==9.2.0 mypy==2.4.1 safetensors==0.8.0)

packages=(
  build-essential cmake ninja-build ccache
  nlohmann-json3-dev libboost-program-options-dev
  libgtest-dev libbenchmark-dev
  coinor-libcbc-dev libglpk-dev
  libopenmpi-dev openmpi-bin
  python3-dev python3-venv
  clang libclang-rt-14-dev clang-format
)

is_installed() {
  dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed$'
}

# PyTorch and the Python package's tools in .venv/: CMake finds LibTorch and nanobind there
# (CMakeLists.txt, python/CMakeLists.txt).
install_python_packages() {
  local venv=$repo/.venv
  if [[ -x $venv/bin/python ]] &&
    "$venv/bin/python" - "$torch_requirement" "${python_requirements[@]}" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
for requirement in sys.argv[1:]:
    name, _, wanted = requirement.partition("==")
    if wanted and version(name) != wanted:
        sys.exit(1)
PY
    echo "install-deps: $torch_requirement ${python_requirements[*]} are installed in .venv/"
    return
  fi
  echo "install-deps: installing $torch_requirement, numpy and ${python_requirements[*]} into .venv/ (a few GB)"
  [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$torch_requirement" numpy \
    "${python_requirements[@]}"
  echo "install-deps: $("$venv/bin/python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)')"
}

missing=()
for package in "${packages[@]}"; do
  is_installed "$package" || missing+=("$package")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
  install_python_packages
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
install_python_packages
