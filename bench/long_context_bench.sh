#!/usr/bin/env bash
# Long sequences: peak tensor memory per rank and step time of a LLaMA at context 4096 with
# sequence parallelism against plain tensor parallelism, and context parallelism 2 and 4
# against one rank, beside what `pipetrain plan` predicts for each layout on
# clusters/this-machine.json. Layouts run interleaved, REPEATS times each (default 3).
# MODEL gpt-dropout: the GPT of the same width (4 heads) with dropout 0.1, whose attention
# weights are computed unfused and whose context ranks each draw the whole sequence's mask.
# Usage: bench/long_context_bench.sh PATH/TO/pipetrain [REPEATS] [CONTEXT] [MODEL]
set -euo pipefail
pipetrain=$(realpath "$1")
cluster=$(cd "$(dirname "$0")/.." && pwd)/clusters/this-machine.json
repeats=${2:-3}
context=${3:-4096}
model_kind=${4:-llama}
model='"type": "llama", "vocab_size": 256, "context": '$context', "d_model": 128, "heads": 4,
            "num_key_value_heads": 2, "intermediate_size": 256, "layers": 2'
[ "$model_kind" = gpt-dropout ] &&
  model='"type": "gpt", "vocab_size": 256, "context": '$context', "d_model": 128, "heads": 4,
            "layers": 2, "dropout": 0.1'
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
cat >config.json <<JSON
{
  "train_micro_batch_size_per_gpu": 1,
  "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
  "model": {$model},
  "data": {"type": "text", "paths": ["/usr/share/common-licenses"]},
  "train_iters": 6, "eval_interval": 0, "eval_iters": 1, "steps_per_print": 1,
  "memory_breakdown": true,
  "log": {"metrics": "m.jsonl"},
  "sample": {"tokens": 0}
}
JSON
# ranks|name|train options|plan options
layouts=("1|none||--model 1 --context 1 --sequence-parallel false"
         "2|model 2|--model 2|--model 2 --context 1 --sequence-parallel false"
         "2|model 2, sequence parallel|--model 2 --sequence-parallel|--model 2 --context 1 --sequence-parallel true"
         "2|context 2|--context-parallel 2|--model 1 --context 2 --sequence-parallel false"
         "4|context 4|--context-parallel 4|--model 1 --context 4 --sequence-parallel false")
# The planner's prediction of each layout: activations (with the backward's workspace) and
# the whole peak per rank, MiB.
for layout in "${layouts[@]}"; do
  IFS='|' read -r ranks name args plan_args <<<"$layout"
  # shellcheck disable=SC2086 # plan_args holds several options
  "$pipetrain" plan --config config.json --cluster "$cluster" --nodes 2 --devices "$ranks" \
    --global-batch 1 --pipe 1 --data 1 --micro-batch 1 --checkpointing off $plan_args \
    --format json | python3 -c "
import json, sys
top = json.load(sys.stdin)[0]['stages'][0]
print('$name|%.1f|%.1f' % (top['activations'] / 2**20, top['total'] / 2**20))" >>predicted.txt
done
for ((r = 0; r < repeats; ++r)); do
  for layout in "${layouts[@]}"; do
    IFS='|' read -r ranks name args _ <<<"$layout"
    rm -f m.jsonl
    # shellcheck disable=SC2086 # args holds several options
    "$pipetrain" launch -n "$ranks" -- "$pipetrain" train --config config.json $args >run.out 2>&1 ||
      { cat run.out; exit 1; }
    python3 - "$name" m.jsonl >>results.txt <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[2])]
last = rows[-1]
# The step's transient peak over the memory held between steps (weights, gradients,
# optimizer state), the largest over ranks: what a step's activations take.
transient = max(p - n for p, n in zip(last["cpu_peak_memory_bytes"], last["cpu_memory_bytes"]))
peak = max(last["cpu_peak_memory_bytes"])
step_s = sorted(1 / r["samples_per_s"] for r in rows[1:])  # batch 1; the first step warms up
print(f"{sys.argv[1]}|{transient / 2**20:.1f}|{step_s[len(step_s) // 2]:.3f}|{peak / 2**20:.1f}")
PY
  done
done
python3 - results.txt predicted.txt "$context" "$model_kind" <<'PY'
import statistics, sys
runs, predicted = {}, {}
for line in open(sys.argv[1]):
    name, mib, seconds, peak = line.strip().split("|")
    runs.setdefault(name, []).append((float(mib), float(seconds), float(peak)))
for line in open(sys.argv[2]):
    name, activations, total = line.strip().split("|")
    predicted[name] = (float(activations), float(total))
model = "GPT d 128 with dropout 0.1" if sys.argv[4] == "gpt-dropout" else "LLaMA d 128"
print(f"{model}, 2 layers, context {sys.argv[3]}, micro-batch 1, fp32, CPU; medians of {len(next(iter(runs.values())))}")
print("| layout | step transient peak per rank (MiB) | predicted activations | error | peak per rank (MiB) | predicted peak | error | step (s) |")
print("|---|---|---|---|---|---|---|---|")
for name, values in runs.items():
    mib = statistics.median(v[0] for v in values)
    sec = statistics.median(v[1] for v in values)
    peak = statistics.median(v[2] for v in values)
    act, total = predicted[name]
    print(f"| {name} | {mib:.1f} | {act:.1f} | {100 * (act / mib - 1):+.0f}% | {peak:.1f} | {total:.1f} | {100 * (total / peak - 1):+.0f}% | {sec:.3f} |")
PY
