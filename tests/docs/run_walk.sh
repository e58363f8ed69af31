#!/usr/bin/env bash
# Runs a docs page's walk as a reader would: in an empty folder, every ```sh block of the
# page in order (each one a bash script, stopping at the first failing command), after
# writing each block tagged with a file name (```python make_tiny.py, ```json lora.json) to
# that file. Nothing is put on the PATH here: the page's own first step does it
# (scripts/env, with PIPETRAIN_HOME the source tree, as the page tells a reader to set it),
# and the blocks after it run in the shell it set up. Each block's output goes to
# WORK/walk-N.out (and all of it to WORK/walk.out). Exits with the failing block's status.
# PIPETRAIN is the built binary, whose build folder scripts/env then uses.
# Usage: run_walk.sh PAGE.md PATH/TO/pipetrain PYTHON WORK
set -u
page=$(realpath "$1")
pipetrain=$(realpath "$2")
python=$3
work=$4
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$work" && cd "$work" || exit 1
export PIPETRAIN_HOME=$source_dir
PIPETRAIN_BUILD_DIR=$(dirname "$(dirname "$pipetrain")")
export PIPETRAIN_BUILD_DIR
: "$python"  # the page's scripts/env step finds the same virtual environment
# The blocks, in order: files written, scripts numbered.
/usr/bin/python3 - "$page" <<'PY' || exit 1
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
run = 0
for info, body in re.findall(r"^```([^\n]*)\n(.*?)^```$", text, re.S | re.M):
    words = info.split()
    if len(words) == 2:
        open(words[1], "w", encoding="utf-8").write(body)
    elif words == ["sh"]:
        run += 1
        open(f".walk-{run:02d}.sh", "w", encoding="utf-8").write("set -e\n" + body)
PY
# Each block runs after the ones before it in one environment: what a block exports (the
# PATH step) holds for the later ones, as in the reader's shell.
: >.walk-env
for block in .walk-*.sh; do
  n=${block#.walk-}
  n=${n%.sh}
  echo "== block $n: $(sed -n 2p "$block")" | tee -a walk.out
  bash -c 'source .walk-env; source "$1"; rc=$?; export -p >.walk-env; exit $rc' _ "$block" \
    >"walk-$n.out" 2>&1
  rc=$?
  cat "walk-$n.out" >>walk.out
  if [ "$rc" -ne 0 ]; then
    echo "block $n failed (exit $rc):" && tail -20 "walk-$n.out"
    exit "$rc"
  fi
done
