#!/usr/bin/env bash
# Runs a docs page's walk as a reader would: in an empty folder, every ```sh block of the
# page in order (each one a bash script, stopping at the first failing command), after
# writing each block tagged with a file name (```python make_tiny.py, ```json lora.json) to
# that file. `pipetrain` is the built binary and `python3` the given Python (on the PATH);
# `scripts/` is the source tree's. Each block's output goes to WORK/walk-N.out (and all of
# it to WORK/walk.out). Exits with the failing block's status.
# Usage: run_walk.sh PAGE.md PATH/TO/pipetrain PYTHON WORK
set -u
page=$(realpath "$1")
pipetrain=$(realpath "$2")
python=$3
work=$4
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$work/.bin" && cd "$work" || exit 1
ln -sf "$pipetrain" .bin/pipetrain
# A wrapper, not a link: a virtual environment's Python finds its packages by its own path.
printf '#!/bin/sh\nexec %q "$@"\n' "$(command -v "$python")" >.bin/python3
chmod +x .bin/python3
ln -sfn "$source_dir/scripts" scripts
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
export PATH="$work/.bin:$PATH"
for block in .walk-*.sh; do
  n=${block#.walk-}
  n=${n%.sh}
  echo "== block $n: $(sed -n 2p "$block")" | tee -a walk.out
  bash "$block" >"walk-$n.out" 2>&1
  rc=$?
  cat "walk-$n.out" >>walk.out
  if [ "$rc" -ne 0 ]; then
    echo "block $n failed (exit $rc):" && tail -20 "walk-$n.out"
    exit "$rc"
  fi
done
