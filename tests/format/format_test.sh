#!/usr/bin/env bash
# Every C++ file of the tree is as .clang-format lays it out (clang-format --dry-run -Werror).
set -euo pipefail
cd "$1"
command -v clang-format >/dev/null ||
  { echo "FAIL: clang-format is not installed (scripts/setup installs it)" >&2; exit 1; }
mapfile -t files < <(find src include tests bench examples \( -name '*.h' -o -name '*.cpp' \) | sort)
clang-format --dry-run -Werror "${files[@]}"
echo "format: ${#files[@]} files as .clang-format lays them out"
