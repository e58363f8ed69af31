#!/usr/bin/env bash
# pipetrain as a CMake package: `cmake --install` into a prefix, then examples/installed
# (find_package(pipetrain), one executable, pipetrain::pipetrain) configured and built
# against that prefix alone, as a user's own project would be, and run at two layouts.
# Usage: install_test.sh PATH/TO/pipetrain SOURCE_DIR BUILD_DIR TORCH_PREFIX
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source_dir=$2
build_dir=$3
torch_prefix=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

check "cmake --install puts pipetrain into a prefix" \
  cmake --install "$build_dir" --prefix "$prefix" >"$work/install.log"
check "the prefix holds the package, the headers, the libraries and the command" \
  test -f "$prefix/lib/cmake/pipetrain/pipetrainConfig.cmake" -a \
  -f "$prefix/include/pipetrain/engine/pipeline_engine.h" -a \
  -f "$prefix/include/pipetrain/version.h" -a -f "$prefix/lib/libpipetrain_engine.a" -a \
  -x "$prefix/bin/pipetrain"
# The launcher finds the library it loads into mpirun in the prefix's library folder.
check "the prefix holds the launcher's mpirun library" \
  test -f "$prefix/lib/libpipetrain-mpirun-signals.so"

# Only the prefix and torch's own CMake folder: nothing of the source or build tree.
configure() {
  cmake -S "$source_dir/examples/installed" -B "$work/user" -G Ninja \
    -DCMAKE_PREFIX_PATH="$prefix;$torch_prefix" >"$work/configure.log" 2>&1
}
check "an outside project finds the package" configure || cat "$work/configure.log"
check "and builds against pipetrain::pipetrain" \
  cmake --build "$work/user" -j 2 >"$work/build.log" 2>&1 || tail -20 "$work/build.log"
check "the program built outside links nothing from the build tree" \
  bash -c "! grep -q '$build_dir' '$work/user/build.ninja'"

# Trained at pipe 2 x model 2 and in one process, the model ends at the same loss.
program=$work/user/tensor_parallel_model
export OMP_NUM_THREADS=1
"$prefix/bin/pipetrain" launch -n 1 -- "$program" 1 1 >"$work/one.out" 2>&1
check "the installed program trains in one process" grep -q "loss .* at step 40" "$work/one.out"
"$prefix/bin/pipetrain" launch -n 4 -- "$program" 2 2 >"$work/four.out" 2>&1
check "and at pipe 2 x model 2" grep -q "^pipe 2 x data 1 x model 2: loss" "$work/four.out"
same_loss() {
  python3 - "$work/one.out" "$work/four.out" <<'PY'
import re, sys
def losses(path):
    text = open(path).read()
    m = re.search(r"loss ([0-9.]+) at step 1, ([0-9.]+) at step 40", text)
    return tuple(map(float, m.groups())) if m else None
one, four = losses(sys.argv[1]), losses(sys.argv[2])
print("one process:", one, "pipe 2 x model 2:", four)
ok = one and four and all(abs(a - b) <= 1e-5 * max(1.0, abs(a)) for a, b in zip(one, four))
sys.exit(0 if ok and one[1] < one[0] else 1)
PY
}
check "both layouts print the same losses (1e-5), and the loss fell" same_loss
cat "$work/one.out" "$work/four.out" | grep "loss" | head -4

# A model family the program registers (examples/registered_model.cpp), trained by
# pipetrain's own train command: at pipe 2 and in one process, the same per-step losses.
registered=$work/user/registered_model
config_for() { # stages, metrics file
  python3 - "$source_dir/examples/registered_model.json" "$1" "$2" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["pipeline"]["stages"] = int(sys.argv[2])
config["train_iters"], config["eval_interval"] = 12, 12
config["log"] = {"metrics": sys.argv[3]}
print(json.dumps(config))
PY
}
config_for 1 "$work/registered-1.jsonl" >"$work/registered-1.json"
config_for 2 "$work/registered-2.jsonl" >"$work/registered-2.json"
"$prefix/bin/pipetrain" launch -n 1 -- "$registered" train --config "$work/registered-1.json" \
  >"$work/registered-1.out" 2>&1
check "a registered family trains through pipetrain train in one process" \
  grep -q "model shift_lm, 6 layers" "$work/registered-1.out" || tail -5 "$work/registered-1.out"
"$prefix/bin/pipetrain" launch -n 2 -- "$registered" train --config "$work/registered-2.json" \
  >"$work/registered-2.out" 2>&1
check "and at pipe 2" grep -q "pipe 2 x data 1 x model 1; model shift_lm" "$work/registered-2.out" ||
  tail -5 "$work/registered-2.out"
same_steps() {
  python3 - "$work/registered-1.jsonl" "$work/registered-2.jsonl" <<'PY'
import json, sys
def losses(path):
    rows = [json.loads(line) for line in open(path)]
    return [r["loss"] for r in rows if "loss" in r and "step" in r]
one, two = losses(sys.argv[1]), losses(sys.argv[2])
print("registered family, per-step losses: one process", one[:3], "... pipe 2", two[:3], "...")
ok = len(one) == 12 and len(one) == len(two) and all(
    abs(a - b) <= 1e-5 * max(1.0, abs(a)) for a, b in zip(one, two))
sys.exit(0 if ok and one[-1] < one[0] else 1)
PY
}
check "both give the same 12 per-step losses (1e-5), and the loss fell" same_steps
bad_params() {
  python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['model']['params']['width']=0; print(json.dumps(c))" \
    "$work/registered-1.json" >"$work/bad.json"
  "$registered" train --config "$work/bad.json" >"$work/bad.out" 2>&1
  [ $? -eq 2 ] && grep -q "model.params.width must be in" "$work/bad.out"
}
check "a bad model.params key of the family: one line, exit 2" bad_params
finish
