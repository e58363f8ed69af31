#!/usr/bin/env bash
# Checkpoints written by an older pipetrain load: a GPT at pipe 2 and a LLaMA at data 2
# under ZeRO 1, saved at step 2 by 218ae14 (before the middle floors were rebuilt), resume
# here and train steps 3 and 4 to the expected losses (within 1e-5 relative).
# compat/make_fixture.sh made the fixture; the expected losses are the old build's own up to
# 2026-12-07, when the data became global (one sequence of samples for every layout): the
# old checkpoints' per-replica positions ({"drawn": N}) are converted to the samples consumed
# (GPT: 2 steps x 8 = 16, LLaMA: 2 x 16 = 32), and steps 3 and 4 read the new order from
# there, so the files were rewritten from this build's resume. What holds the conversion to
# account: the position saved after step 4, and the GPT resumed at pipe 1 x data 2 giving
# the losses it gives at pipe 2.
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
  "$pipetrain" launch -n 2 -- "$pipetrain" train --config "$model.json" --load "$model" \
    --save "$model" >"$model.out" 2>&1
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
  check "$model: steps 3-4 as expected ($report)" grep -q "^ok" <<<"$report"
done
position() { python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["data"]))' "$1"; }
check "gpt: the converted position goes on in global samples ($(position gpt/step_4/manifest.json))" \
  test "$(position gpt/step_4/manifest.json)" = '{"samples": 32}'
check "llama: ... ($(position llama/step_4/manifest.json))" \
  test "$(position llama/step_4/manifest.json)" = '{"samples": 64}'
# The GPT's old checkpoint at another layout: the same global batches, the same losses.
cp -r "$here/gpt" gpt-data2
"$here/run_config.sh" gpt "$work/gpt-data2.jsonl" gpt-data2.json
"$pipetrain" launch -n 2 -- "$pipetrain" train --config gpt-data2.json --pipe 1 --load gpt-data2 \
  >gpt-data2.out 2>&1
check "gpt: resumed at pipe 1 x data 2, the losses of pipe 2 ($(tail -1 gpt-data2.out))" python3 - <<'PY'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path))}
a, b = losses("gpt.jsonl"), losses("gpt-data2.jsonl")
print(a, b)
sys.exit(sorted(a) != [3, 4] or a.keys() != b.keys() or any(abs(a[s] - b[s]) > 1e-5 * a[s] for s in a))
PY
finish
