#!/usr/bin/env bash
# The schedule commands as a user meets them: output, exit codes, one-line errors.
# Usage: schedule_cli_test.sh PATH/TO/pipetrain
set -u
pipetrain=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

check() { # description, condition...
  local what=$1
  shift
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $what"
  fi
}

# Runs pipetrain; leaves exit code in $rc, stdout in $work/out, stderr in $work/err.
run() {
  "$pipetrain" "$@" >"$work/out" 2>"$work/err"
  rc=$?
}

expect_input_error() { # pattern, args...
  local pattern=$1
  shift
  run "$@"
  check "'$*' exits 2 (got $rc)" test "$rc" -eq 2
  check "'$*' prints one line" test "$(wc -l <"$work/err")" -eq 1
  check "'$*' names '$pattern': $(cat "$work/err")" grep -q -- "$pattern" "$work/err"
  check "'$*' prints nothing on stdout" test ! -s "$work/out"
}

run --version
check "--version exits 0" test "$rc" -eq 0
check "--version prints the version" grep -qE '^pipetrain [0-9]+\.[0-9]+\.[0-9]+$' "$work/out"

run --help
check "--help lists schedule and simulate" grep -q simulate "$work/out"

run schedule --kind train --micro-batches 4 --stages 3 --stage 1 --format json
check "schedule json exits 0" test "$rc" -eq 0
check "schedule json is the spec's worked example" grep -qF \
  '{"num_pipe_buffers":2,"steps":[[],[["RecvActivation",0],["ForwardPass",0]],[["SendActivation",0]]' \
  "$work/out"
check "schedule json is one line" test "$(wc -l <"$work/out")" -eq 1

run schedule --kind zb-h1 -m 4 -p 2
check "schedule table exits 0" test "$rc" -eq 0
check "schedule table shows every stage" grep -q "stage 0 .*stage 1" "$work/out"
check "schedule table shows weight gradients" grep -q "W[0-9]" "$work/out"

run simulate --kind zb-h1 -m 8 -p 4 --svg "$work/zb.svg"
check "simulate exits 0" test "$rc" -eq 0
check "simulate reports the bubble" grep -q "^bubble: 11.11% of stage time" "$work/out"
check "simulate writes an SVG" grep -q "</svg>" "$work/zb.svg"
check "simulate leaves no temporary file" test "$(ls "$work" | grep -c tmp)" -eq 0

expect_input_error "stages must be at least 1" schedule --kind train -m 4 -p 0 --stage 0
expect_input_error "stage 3 is out of range" schedule --kind train -m 4 -p 3 --stage 3
expect_input_error "unknown schedule kind 'pipedream'" schedule --kind pipedream -m 4 -p 3
expect_input_error "micro-batches must be at least 1" simulate --kind gpipe -m 0 -p 2
expect_input_error "give --stage" schedule --kind train -m 4 -p 2 --format json
expect_input_error "format" schedule --kind train -m 4 -p 2 --format xml
expect_input_error "micro-batches" schedule --kind train --micro-batches four -p 2
expect_input_error "forward cost needs 1 or 2 values" simulate --kind train -m 4 -p 2 --forward 1,2,3
expect_input_error "divisible" simulate --kind interleaved -m 7 -p 5 -v 2
expect_input_error "subcommand" frobnicate
expect_input_error "no-such-dir" simulate --kind train -m 2 -p 2 --svg "$work/no-such-dir/x.svg"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
