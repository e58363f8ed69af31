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

expect_job_fault 4 "$deadline" silent '^pipetrain: rank 0 \(pipe=0 data=0\): waited 3\.[0-9] s for recv from rank 2 \(tag 1\) \[stage 0, step 1, RecvActivation buffer 0, micro-batch 0\]: deadline exceeded$'
expect_job_fault 4 "$deadline" throw '^pipetrain: rank 2 \(pipe=1 data=0\): injected failure in the forward pass$'

finish
