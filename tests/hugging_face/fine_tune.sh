# Shared by the fine-tuning tests (sourced after tests/lib.sh, with $pipetrain set and a
# base.json whose NAME stands for each run's name).
# train NAME RANKS SED: base.json with NAME replaced and the sed script applied, trained on
# RANKS ranks into NAME/ (output in NAME.out, metrics where the config logs them).
train() {
  sed "s/NAME/$1/g; $3" base.json >"$1.json"
  "$pipetrain" launch -n "$2" -- "$pipetrain" train --config "$1.json" >"$1.out" 2>&1
  local rc=$?
  check "train $1: exits 0 ($(tail -1 "$1.out"))" test "$rc" -eq 0
}
