#!/usr/bin/env bash
# Checkpoints of the default job (examples/default.json: a GPT of d 96, 4 ranks = pipe 2 x
# data 2): how long a synchronous save holds training (`save_s`) against how long a save
# written in the background does (`save_stall_s`: staging the host copies), side by side in
# one run of this script: the two settings alternate, REPEATS times each (default 3), each
# training STEPS steps (default 40) and saving every 10.
# Usage: bench/async_save_bench.sh PATH/TO/pipetrain [REPEATS] [STEPS]
set -euo pipefail
pipetrain=$(realpath "$1")
repeats=${2:-3}
steps=${3:-40}
default=$(cd "$(dirname "$0")/.." && pwd)/examples/default.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMP_NUM_THREADS=1
for async in false true; do
  python3 - "$default" "$async" "$steps" >"$async.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update({"train_iters": int(sys.argv[3]), "eval_interval": 0, "eval_iters": 1, "save_interval": 10,
          "checkpoint": {"async": sys.argv[2] == "true"}, "log": {"metrics": "m.jsonl"},
          "sample": {"tokens": 0}})
c.pop("trace", None)
json.dump(c, sys.stdout)
PY
done
for ((r = 0; r < repeats; ++r)); do
  for async in false true; do
    rm -rf m.jsonl saves
    "$pipetrain" launch -n 4 -- "$pipetrain" train --config "$async.json" --save saves \
      >run.out 2>&1 || { cat run.out; exit 1; }
    python3 - "$async" m.jsonl >>results.txt <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[2])]
key = "save_stall_s" if sys.argv[1] == "true" else "save_s"
# The saves inside the run (the last step's is synchronous in both).
held = [r[key] for r in rows if key in r and r["step"] < rows[-1]["step"]]
step = sorted(r["timings_ms"].get("ForwardPass", 0) for r in rows)
print(sys.argv[1], " ".join(f"{h:.4f}" for h in held))
PY
  done
done
python3 - results.txt "$repeats" "$steps" <<'PY'
import statistics, sys
held = {"false": [], "true": []}
for line in open(sys.argv[1]):
    mode, *values = line.split()
    held[mode] += [float(v) for v in values]
sync, stall = statistics.median(held["false"]), statistics.median(held["true"])
print(f"default job (GPT d 96, 4 layers, pipe 2 x data 2, 4 ranks on this machine's cores), "
      f"{sys.argv[3]} steps saving every 10, {sys.argv[2]} runs of each, alternating")
print("| save | held training (median ms) | min | max | saves |")
print("|---|---|---|---|---|")
for name, key in (("synchronous (save_s)", "false"), ("in the background (save_stall_s)", "true")):
    v = held[key]
    print(f"| {name} | {1e3 * statistics.median(v):.1f} | {1e3 * min(v):.1f} | {1e3 * max(v):.1f} | {len(v)} |")
print(f"stall / synchronous: {stall / sync:.3f}")
PY
