#!/usr/bin/env bash
# Engine failures end the job with a message that says where and why.
# Usage: engine_fault_test.sh PATH/TO/pipetrain PATH/TO/engine_fault_program
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$1
program=$2
export PIPETRAIN_COMM_TIMEOUT=20
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run_fault() { # mode, expected message pattern
  local rc
  timeout 60 "$pipetrain" launch -n 2 -- "$program" "$1" >"$log" 2>&1
  rc=$?
  check "$1: job exits non-zero" test "$rc" -ne 0
  check "$1: job does not hang" test "$rc" -ne 124
  check "$1: message '$2'" grep -qE "$2" "$log"
  grep "^pipetrain:" "$log" | head -2
}

run_fault exhausted '^pipetrain: rank [01] \(pipe=[01] data=0\): stage [01], step [0-9]+, LoadMicroBatch buffer [0-9], micro-batch 2: the data ran out at micro-batch 2 of step 1 \(wrap the loader in a RepeatingLoader'
run_fault mismatch '^pipetrain: rank 1 \(pipe=1 data=0\): stage 1, step 1, ForwardPass buffer 0, micro-batch 0: (addmm: )?mat1 and mat2 shapes cannot be multiplied \(2x5 and 7x1\)$'
run_fault abandoned '^pipetrain: rank [01] \(pipe=[01] data=0\): a step after a failure with NCCL work queued \(a step failed with NCCL work queued\): the job must end instead$'
run_fault grad-disabled '^pipetrain: rank [01] \(pipe=[01] data=0\): train_batch\(\) needs gradients enabled; use eval_batch\(\) to evaluate$'

finish
