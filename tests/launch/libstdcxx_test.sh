#!/usr/bin/env bash
# The libstdc++ clash: torch's libtorch_cpu exports its own std::filesystem, and where
# libstdc++'s own references bind to it, an older system libstdc++ than torch's crashes
# (torch 2.11 on Debian 12: `pipetrain launch` ended with rc 139 after every job). pipetrain
# links libstdc++ ahead of torch; here the dynamic linker's bindings show whose definitions
# libstdc++'s references reach, for the command and for a rank it launches.
# Usage: libstdcxx_test.sh PATH/TO/pipetrain
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

needed=$(readelf -d "$pipetrain" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p' | tr '\n' ' ')
stdcxx=$(echo "$needed" | tr ' ' '\n' | grep -n '^libstdc++' | cut -d: -f1)
torch=$(echo "$needed" | tr ' ' '\n' | grep -n '^libtorch' | head -n 1 | cut -d: -f1)
check "libstdc++ is needed before torch's libraries ($needed)" test -n "$stdcxx" -a -n "$torch" -a "${stdcxx:-99}" -lt "${torch:-0}"

LD_DEBUG=bindings LD_DEBUG_OUTPUT="$work/bindings" "$pipetrain" launch -n 1 -- "$pipetrain" keys \
  >"$work/out" 2>&1
rc=$?
check "pipetrain launch -n 1 -- pipetrain keys exits 0 (got $rc)" test "$rc" -eq 0
cat "$work"/bindings.* >"$work/all" 2>/dev/null
check "the bindings were recorded ($(wc -l <"$work/all") lines)" test -s "$work/all"
# libstdc++'s references to std::filesystem reach libstdc++, never torch's copy.
binding='binding file [^ ]*libstdc\+\+\.so[^ ]* \[[0-9]+\] to [^ ]*'
wrong=$(grep -E "${binding}libtorch[^ ]* \[[0-9]+\]: normal symbol .[^ ]*filesystem" "$work/all" | head -n 2)
check "no libstdc++ reference binds to torch's std::filesystem ($wrong)" test -z "$wrong"
mine=$(grep -cE "${binding}libstdc\+\+\.so[^ ]* \[[0-9]+\]: normal symbol .[^ ]*filesystem" "$work/all")
check "libstdc++'s std::filesystem references bind to libstdc++ ($mine bindings)" test "$mine" -gt 0
finish
