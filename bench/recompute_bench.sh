#!/usr/bin/env bash
# Selective recompute on the CPU: each stage's peak memory and the step time at pipe 2 under
# 1F1B (4 micro-batches: stage 0 holds 2 in flight, stage 1 one), for no recompute, each
# part alone, attention + mlp + norms, and whole layers (activation_checkpoint_interval 1),
# for a GPT and a LLaMA of d 512 x 8 layers at context 1024; beside the planner's predicted
# peak of each stage for the same setting (`plan --recompute`). Then the planner's own
# choice under a memory limit halfway between the stages' peaks without recompute
# (`plan --out` with a cluster file of that memory), run, and its measured peaks against
# the limit. Settings run interleaved, REPEATS times each (default 1), steps after the first
# timed.
# Usage: bench/recompute_bench.sh PATH/TO/pipetrain [REPEATS] [STEPS]
set -euo pipefail
pipetrain=$(realpath "$1")
repeats=${2:-1}
steps=${3:-3}
cluster=$(cd "$(dirname "$0")/.." && pwd)/clusters/this-machine.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMP_NUM_THREADS=1
models=('gpt|"type": "gpt", "vocab_size": 256, "context": 1024, "d_model": 512, "heads": 8, "layers": 8'
        'llama|"type": "llama", "vocab_size": 256, "context": 1024, "d_model": 512, "heads": 8, "num_key_value_heads": 4, "intermediate_size": 1408, "layers": 8')
# name | pipeline.recompute | activation_checkpoint_interval | plan's --recompute and --checkpointing
settings=('none|[]|0|none off' 'attention|["attention"]|0|attention off' 'mlp|["mlp"]|0|mlp off'
          'mlp_activation|["mlp_activation"]|0|mlp_activation off' 'norms|["norms"]|0|norms off'
          'attention+mlp+norms|["attention", "mlp", "norms"]|0|attention,mlp,norms off'
          'whole layers|[]|1|none on')
config() {  # MODEL_KEYS RECOMPUTE INTERVAL
  cat <<JSON
{
  "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.0001}},
  "pipeline": {"stages": 2, "recompute": $2, "activation_checkpoint_interval": $3},
  "model": {$1},
  "data": {"type": "text", "paths": ["/usr/share/common-licenses"]},
  "train_iters": $steps, "eval_interval": 0, "eval_iters": 1, "steps_per_print": 1,
  "memory_breakdown": true, "log": {"metrics": "m.jsonl"}, "sample": {"tokens": 0}
}
JSON
}
plan() {  # CONFIG CLUSTER RECOMPUTE CHECKPOINTING [--out FILE]
  "$pipetrain" plan --config "$1" --cluster "$2" --nodes 1 --devices 2 --global-batch 4 --pipe 2 \
    --data 1 --model 1 --micro-batch 1 --schedule 1f1b --recompute "$3" --checkpointing "$4" \
    --format json "${@:5}"
}
stage_totals='import json, sys
print("|".join("%.1f" % (s["total"] / 2**20) for s in json.load(sys.stdin)[0]["stages"]))'
peaks='import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("|".join("%.1f" % (max(r["cpu_peak_memory_bytes"][k] for r in rows) / 2**20) for k in range(2)))'
for entry in "${models[@]}"; do
  IFS='|' read -r model keys <<<"$entry"
  config "$keys" '[]' 0 >plan.json
  for setting in "${settings[@]}"; do
    IFS='|' read -r name _ _ plan_args <<<"$setting"
    read -r recompute checkpointing <<<"$plan_args"
    echo "$model|$name|$(plan plan.json "$cluster" "$recompute" "$checkpointing" | python3 -c "$stage_totals")"
  done >>predicted.txt
done
for ((r = 0; r < repeats; ++r)); do
  for entry in "${models[@]}"; do
    IFS='|' read -r model keys <<<"$entry"
    for setting in "${settings[@]}"; do
      IFS='|' read -r name recompute interval _ <<<"$setting"
      config "$keys" "$recompute" "$interval" >config.json
      rm -f m.jsonl
      "$pipetrain" launch -n 2 -- "$pipetrain" train --config config.json >run.out 2>&1 ||
        { cat run.out; exit 1; }
      python3 - "$model" "$name" m.jsonl >>results.txt <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[3])][1:]  # the first step warms up
# Per rank (= stage): the step's peak over what it holds between steps, the largest seen.
peak = [max(r["cpu_peak_memory_bytes"][k] for r in rows) for k in range(2)]
seconds = sorted(4 / r["samples_per_s"] for r in rows)  # 4 samples a step
print(f"{sys.argv[1]}|{sys.argv[2]}|{peak[0] / 2**20:.1f}|{peak[1] / 2**20:.1f}|"
      f"{seconds[len(seconds) // 2]:.2f}")
PY
    done
  done
done
python3 - results.txt predicted.txt "$repeats" <<'PY'
import statistics, sys
runs, predicted = {}, {}
for line in open(sys.argv[1]):
    model, name, s0, s1, sec = line.strip().split("|")
    runs.setdefault(model, {}).setdefault(name, []).append((float(s0), float(s1), float(sec)))
for line in open(sys.argv[2]):
    model, name, p0, p1 = line.strip().split("|")
    predicted[(model, name)] = (float(p0), float(p1))
for model, table in runs.items():
    print(f"\n{model}: d 512, 8 layers, context 1024, micro-batch 1 x 4, pipe 2, 1F1B, fp32, "
          f"CPU; medians of {sys.argv[3]} run(s); peak memory per stage in MiB, planned / measured")
    print("| recomputed | stage 0 planned | measured | error | stage 1 planned | measured | error "
          "| step (s) | vs none |")
    print("|---|---|---|---|---|---|---|---|---|")
    base = statistics.median(v[2] for v in table["none"])
    for name, values in table.items():
        measured = [statistics.median(v[k] for v in values) for k in range(2)]
        sec = statistics.median(v[2] for v in values)
        cells = []
        for k in range(2):
            plan = predicted[(model, name)][k]
            cells += [f"{plan:.1f}", f"{measured[k]:.1f}", f"{100 * (plan / measured[k] - 1):+.1f}%"]
        print(f"| {name} | {' | '.join(cells)} | {sec:.2f} | {100 * (sec / base - 1):+.0f}% |")
PY
# The planner's choice under a limit halfway between the stages' planned peaks without
# recompute: stage 0 must recompute, stage 1 need not. Its config is run as it is written.
echo
echo "the planner's per-stage choice under a memory limit, run (peak memory per stage in MiB):"
echo "| model | limit | chosen per stage | stage 0 planned | measured | stage 1 planned | measured | fits |"
echo "|---|---|---|---|---|---|---|---|"
for entry in "${models[@]}"; do
  IFS='|' read -r model keys <<<"$entry"
  config "$keys" '[]' 0 >plan.json
  IFS='|' read -r p0 p1 <<<"$(plan plan.json "$cluster" none off | python3 -c "$stage_totals")"
  limit=$(python3 -c "print(($p0 + $p1) / 2)")
  python3 - "$cluster" "$limit" >limited.json <<'PY'
import json, sys
cluster = json.load(open(sys.argv[1]))
cluster["memory_gib"] = float(sys.argv[2]) / 1024
print(json.dumps(cluster))
PY
  rm -f chosen.json m.jsonl
  planned=$(plan plan.json limited.json auto off --out chosen.json | python3 -c "$stage_totals")
  chosen=$(python3 -c "import json; print(json.dumps(json.load(open('chosen.json'))['pipeline']['recompute']))")
  "$pipetrain" launch -n 2 -- "$pipetrain" train --config chosen.json >run.out 2>&1 ||
    { cat run.out; exit 1; }
  IFS='|' read -r m0 m1 <<<"$(python3 -c "$peaks" m.jsonl)"
  IFS='|' read -r q0 q1 <<<"$planned"
  fits=$(python3 -c "print('yes' if max($m0, $m1) <= $limit else 'no')")
  echo "| $model | $(printf %.1f "$limit") | \`$chosen\` | $q0 | $m0 | $q1 | $m1 | $fits |"
done
