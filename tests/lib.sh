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
