#!/usr/bin/env bash
# A rank that never sends, or that throws, must end every rank of the job with a
# non-zero status within the deadline + 10 s, and say who failed and why.
# Usage: comm_fault_test.sh PATH/TO/pipetrain PATH/TO/comm_fault_program
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$1
program=$2
deadline=3
export PIPETRAIN_COMM_TIMEOUT=$deadline
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run_fault() { # mode, expected message pattern
  local start end rc
  start=$(date +%s.%N)
  timeout 60 "$pipetrain" launch -n 4 -- "$program" "$1" >"$log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  local seconds
  seconds=$(echo "$end - $start" | bc)
  echo "$1: exit $rc after ${seconds}s"
  check "$1: job exits non-zero" test "$rc" -ne 0
  check "$1: job is not killed by the test's own timeout" test "$rc" -ne 124
  check "$1: ends within deadline + 10 s ($seconds s)" test "$(echo "$seconds < $deadline + 10" | bc)" -eq 1
  check "$1: message '$2'" grep -qE "$2" "$log"
  grep "pipetrain:" "$log" | head -3
}

run_fault silent '^pipetrain: rank 0 \(pipe=0 data=0\): waited 3\.[0-9] s for recv from rank 2 \(tag 1\) \[stage 0, step 1, RecvActivation buffer 0, micro-batch 0\]: deadline exceeded$'
run_fault throw '^pipetrain: rank 2 \(pipe=1 data=0\): injected failure in the forward pass$'

finish
