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
