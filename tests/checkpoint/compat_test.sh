#!/usr/bin/env bash
# Checkpoints written by an older pipetrain load: a GPT at pipe 2 and a LLaMA at data 2
# under ZeRO 1, saved at step 2 by 218ae14 (before the middle floors were rebuilt), resume
# here and train steps 3 and 4 to the losses that build reached when it resumed them (within
# 1e-5 relative; compat/make_fixture.sh made the fixture and the expected losses).
# Usage: compat_test.sh PATH/TO/pipetrain
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)/compat
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
export PIPETRAIN_COMM_TIMEOUT=60
for model in gpt llama; do
  cp -r "$here/$model" "$model"
  "$here/run_config.sh" "$model" "$work/$model.jsonl" "$model.json"
  "$pipetrain" launch -n 2 -- "$pipetrain" train --config "$model.json" --load "$model" >"$model.out" 2>&1
  rc=$?
  check "$model: resuming the old checkpoint exits 0 (got $rc: $(tail -n 2 "$model.out"))" test "$rc" -eq 0
  check "$model: it resumes at step 2" grep -q "^resumed from $model at step 2" "$model.out"
  report=$(python3 - "$work/$model.jsonl" "$here/$model.expected" <<'PY'
import json, os, sys
got = {}
for line in open(sys.argv[1]) if os.path.exists(sys.argv[1]) else []:
    r = json.loads(line)
    got[r["step"]] = (r["loss"], r.get("val_loss"))
problems, pairs = [], []
for line in open(sys.argv[2]):
    step, loss, val = line.split()
    step, loss, val = int(step), float(loss), None if val == "None" else float(val)
    if step not in got:
        problems.append(f"no step {step}")
        continue
    for what, want, have in (("loss", loss, got[step][0]), ("val_loss", val, got[step][1])):
        if want is None and have is None:
            continue
        if want is None or have is None or abs(have - want) > 1e-5 * abs(want):
            problems.append(f"step {step} {what} {have} against {want}")
        else:
            pairs.append(f"{step}:{have:.6f}")
if sorted(got) != [3, 4]:
    problems.append(f"steps logged {sorted(got)}")
print("; ".join(problems) if problems else "ok " + " ".join(pairs))
PY
  )
  check "$model: steps 3-4 as the old build trained them ($report)" grep -q "^ok" <<<"$report"
done
finish
