#!/usr/bin/env bash
# Faults over NCCL (label gpu; run by scripts/device-check): ranks sharing one GPU as emulated
# hosts, one rank never joins an all-reduce, or raises on a mis-shaped tensor; the job must
# end within the deadline + 10 s with one line saying who and why, and nothing may hang in
# NCCL's teardown. Without a GPU: "skipped: no GPU".
# Usage: nccl_fault_test.sh PATH/TO/pipetrain PATH/TO/comm_fault_program
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$1
program=$2
if ! "$pipetrain" devices | grep -qE '^visible GPUs: [1-9]'; then
  echo "skipped: no GPU"
  exit 0
fi
deadline=5
export PIPETRAIN_COMM_TIMEOUT=$deadline PIPETRAIN_EMULATED_HOSTS=1 NCCL_DEBUG=WARN

expect_job_fault 4 "$deadline" nccl-silent '^pipetrain: rank [013] \(pipe=[01] data=[01]\): waited [5-9]\.[0-9] s for NCCL all_reduce over 4 ranks \(0, 1, 2, 3\) \[stage 0, step 2, ReduceGrads\]: deadline exceeded$'
expect_job_fault 4 "$deadline" nccl-misshaped '^pipetrain: rank 2 \(pipe=1 data=0\): a mis-shaped gradient bucket \(512 of 1024 elements\)$'

finish
