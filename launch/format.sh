#!/usr/bin/env bash
# Formats every C++ file of the repository with clang-format (.clang-format); with --check, changes
# nothing and fails, listing the files, when one is not formatted. .ci/run runs the check.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h')
if [[ ${1:-} == --check ]]; then
  unformatted=()
  for file in "${files[@]}"; do
    clang-format --dry-run --Werror "$file" >/dev/null 2>&1 || unformatted+=("$file")
  done
  if [[ ${#unformatted[@]} -gt 0 ]]; then
    printf '  %s\n' "${unformatted[@]}" >&2
    echo "format.sh: error: ${#unformatted[@]} files are not formatted (listed above);" \
      "run ./launch/format.sh" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files formatted"
else
  clang-format -i "${files[@]}"
fi
