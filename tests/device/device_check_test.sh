#!/usr/bin/env bash
# scripts/device-check where no GPU is: a run cut off in tier 1 leaves tier 0's summary
# lines under $OUT (each written the moment its check ended), and bad options end at once.
# Usage: device_check_test.sh BUILD_DIR (configured, with pipetrain built)
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
build=$(realpath "$1")
script=$(cd "$(dirname "$0")/../.." && pwd)/scripts/device-check
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
summary=$work/out/summary.txt

# A real run on this machine's build folder, killed (its whole process group, as a device
# call's time limit does) once tier 1 has started.
setsid env OUT="$work/out" PIPETRAIN_BUILD_DIR="$build" bash "$script" --budget 480 \
  >"$work/run.out" 2>&1 &
leader=$!
for _ in $(seq 1 600); do
  grep -q '^tier 1 .*: started' "$summary" 2>/dev/null && break
  sleep 0.1
done
kill -KILL -- "-$leader" 2>/dev/null
wait "$leader" 2>/dev/null
check "tier 1 had started before the kill ($(tail -n 1 "$summary" 2>/dev/null))" \
  grep -q '^tier 1 .*: started' "$summary"
check "tier 0's machine line is there ($(grep -m1 '^tier 0  machine' "$summary" | grep -v started))" \
  grep -qE '^tier 0  machine.*: passed at [0-9]+ s: ' "$summary"
check "tier 0's libstdc++ line is there ($(grep '^tier 0  libstdc' "$summary" | grep -v started))" \
  grep -qE '^tier 0  libstdc\+\+.*: passed at [0-9]+ s: ' "$summary"
check "no total line: the run was cut off" test -z "$(grep '^total:' "$summary")"
check "each finished check left its log" test -s "$work/out/machine.log" -a -s "$work/out/libstdcxx.log"

# A budget too small for any check: every row skipped for time, said so, exit 0.
OUT="$work/tight" PIPETRAIN_BUILD_DIR="$build" bash "$script" --budget 5 >"$work/tight.out" 2>&1
rc=$?
check "--budget 5: exit 0 (got $rc)" test "$rc" -eq 0
check "--budget 5: the build is skipped for time" \
  grep -q '^tier 1  build: .*: skipped for time (needs 240 s' "$work/tight/summary.txt"
check "--budget 5: the total says what ran ($(tail -n 1 "$work/tight/summary.txt"))" \
  grep -qE '^total: [0-9]+ s; [0-9]+ checks ran, [0-9]+ passed, 0 failed, [0-9]+ skipped for time' \
  "$work/tight/summary.txt"

bash "$script" --budget soon >"$work/bad.out" 2>&1
rc=$?
check "--budget soon: exit 2 (got $rc)" test "$rc" -eq 2
check "--budget soon: named ($(cat "$work/bad.out"))" grep -q -- '--budget soon is not a number' "$work/bad.out"
check "--print-call carries .devdeps" bash -c "bash '$script' --print-call | grep -q 'carry=\[\".devdeps\"\]'"
finish
