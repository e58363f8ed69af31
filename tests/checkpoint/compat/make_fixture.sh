#!/usr/bin/env bash
# Writes the checkpoints of tests/checkpoint/compat_test.sh with an older pipetrain, and the
# losses that older build reaches when it resumes them. Run once per fixture, by hand:
#   compat/make_fixture.sh OLD/build/src/pipetrain
# The checked-in fixture was made with 218ae14, before the middle floors were rebuilt
# (data_parallel/, groups/, optim's step, the schedule and model registries,
# ParallelLayout), from the host's /usr/share/common-licenses, which data/ copies. Since
# the data became global (2026-12-07) the .expected files are this build's own resume of
# the fixture (see ../compat_test.sh): rewrite them after running this script.
set -euo pipefail
old=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export PIPETRAIN_COMM_TIMEOUT=60
for model in gpt llama; do
  rm -rf "${here:?}/$model" "$here/$model.expected"
  # Two steps saved, then the same build resumes a copy and runs steps 3 and 4.
  "$here/run_config.sh" "$model" "$work/$model-first.jsonl" "$model-first.json"
  "$old" launch -n 2 -- "$old" train --config "$model-first.json" --train-iters 2 \
    --save "$here/$model" >"$model-first.out" 2>&1
  rm -f "$here/$model/config.json" "$here/$model/.pipetrain.lock"  # the test passes its config
  cp -r "$here/$model" "$model-copy"
  "$here/run_config.sh" "$model" "$work/$model.jsonl" "$model-metrics.json"
  "$old" launch -n 2 -- "$old" train --config "$model-metrics.json" --load "$model-copy" \
    >"$model-second.out" 2>&1
  python3 - "$work/$model.jsonl" >"$here/$model.expected" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["step"], repr(r["loss"]), repr(r.get("val_loss")))
PY
  cat "$here/$model.expected"
done
