# Shared by the shell tests: `check DESCRIPTION COMMAND...` counts a pass when the command
# succeeds and prints FAIL otherwise; `finish` prints the tally and sets the exit status.
passed=0
failed=0

check() {
  local what=$1
  shift
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $what"
  fi
}

finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}

# For tests of the pipetrain command ($pipetrain, scratch folder $work): `run ARGS...` leaves
# the exit code in $rc, stdout in $work/out and stderr in $work/err; `expect_input_error
# PATTERN ARGS...` checks a bad input's ending: exit 2, one line naming PATTERN, no stdout.
run() {
  "$pipetrain" "$@" >"$work/out" 2>"$work/err"
  rc=$?
}

expect_input_error() {
  local pattern=$1
  shift
  run "$@"
  check "'$*' exits 2 (got $rc)" test "$rc" -eq 2
  check "'$*' prints one line" test "$(wc -l <"$work/err")" -eq 1
  check "'$*' names '$pattern': $(cat "$work/err")" grep -q -- "$pattern" "$work/err"
  check "'$*' prints nothing on stdout" test ! -s "$work/out"
}

# For fault tests: `expect_job_fault RANKS DEADLINE MODE PATTERN` runs `$program MODE` as a
# job of RANKS ranks through `$pipetrain launch` (killed after 90 s) and checks that it
# fails on its own within DEADLINE + 10 s with a line matching the extended regex PATTERN.
expect_job_fault() {
  local ranks=$1 deadline=$2 mode=$3 pattern=$4
  local log start end rc seconds
  log=$(mktemp)
  start=$(date +%s.%N)
  timeout 90 "$pipetrain" launch -n "$ranks" -- "$program" "$mode" >"$log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  seconds=$(echo "$end - $start" | bc)
  echo "$mode: exit $rc after ${seconds}s"
  check "$mode: job exits non-zero" test "$rc" -ne 0
  check "$mode: job is not killed by the test's own timeout" test "$rc" -ne 124
  check "$mode: ends within deadline + 10 s ($seconds s)" test "$(echo "$seconds < $deadline + 10" | bc)" -eq 1
  check "$mode: message '$pattern'" grep -qE "$pattern" "$log"
  grep "pipetrain:" "$log" | head -3
  rm -f "$log"
}
