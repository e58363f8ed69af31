#!/usr/bin/env bash
# Selective recompute on the CPU: each stage's transient peak (what a step's activations
# take above the weights, gradients and optimizer state held between steps) and the step
# time, at pipe 2 under 1F1B (4 micro-batches: stage 0 holds 2 in flight, stage 1 one), for
# no recompute, each part alone, attention + mlp + norms, and whole layers
# (activation_checkpoint_interval 1), for a GPT and a LLaMA of d 512 x 8 layers at context
# 1024; beside the planner's predicted activations per stage without and with whole-layer
# checkpointing (it does not model selective recompute yet). Settings run interleaved,
# REPEATS times each (default 1), steps after the first timed.
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
settings=('none|[]|0' 'attention|["attention"]|0' 'mlp|["mlp"]|0' 'mlp_activation|["mlp_activation"]|0'
          'norms|["norms"]|0' 'attention+mlp+norms|["attention", "mlp", "norms"]|0' 'whole layers|[]|1')
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
for entry in "${models[@]}"; do
  IFS='|' read -r model keys <<<"$entry"
  for checkpointing in off on; do
    config "$keys" '[]' 0 >plan.json
    "$pipetrain" plan --config plan.json --cluster "$cluster" --nodes 1 --devices 2 --global-batch 4 \
      --pipe 2 --data 1 --model 1 --micro-batch 1 --schedule 1f1b --checkpointing "$checkpointing" \
      --format json | python3 -c "
import json, sys
stages = json.load(sys.stdin)[0]['stages']
print('$model|$checkpointing|' + '|'.join('%.1f' % (s['activations'] / 2**20) for s in stages))" >>predicted.txt
  done
done
for ((r = 0; r < repeats; ++r)); do
  for entry in "${models[@]}"; do
    IFS='|' read -r model keys <<<"$entry"
    for setting in "${settings[@]}"; do
      IFS='|' read -r name recompute interval <<<"$setting"
      config "$keys" "$recompute" "$interval" >config.json
      rm -f m.jsonl
      "$pipetrain" launch -n 2 -- "$pipetrain" train --config config.json >run.out 2>&1 ||
        { cat run.out; exit 1; }
      python3 - "$model" "$name" m.jsonl >>results.txt <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[3])][1:]  # the first step warms up
# Per rank (= stage): the step's peak over what it holds between steps, the largest seen.
transient = [max(r["cpu_peak_memory_bytes"][k] - r["cpu_memory_bytes"][k] for r in rows)
             for k in range(2)]
seconds = sorted(4 / r["samples_per_s"] for r in rows)  # 4 samples a step
print(f"{sys.argv[1]}|{sys.argv[2]}|{transient[0] / 2**20:.1f}|{transient[1] / 2**20:.1f}|"
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
    model, checkpointing, *stages = line.strip().split("|")
    predicted[(model, checkpointing)] = stages
for model, table in runs.items():
    print(f"\n{model}: d 512, 8 layers, context 1024, micro-batch 1 x 4, pipe 2, 1F1B, fp32, "
          f"CPU; medians of {sys.argv[3]} run(s)")
    print("| recomputed | stage 0 transient peak (MiB) | stage 1 (MiB) | step (s) | vs none |")
    print("|---|---|---|---|---|")
    base = statistics.median(v[2] for v in table["none"])
    for name, values in table.items():
        s0 = statistics.median(v[0] for v in values)
        s1 = statistics.median(v[1] for v in values)
        sec = statistics.median(v[2] for v in values)
        print(f"| {name} | {s0:.1f} | {s1:.1f} | {sec:.2f} | {100 * (sec / base - 1):+.0f}% |")
    off, on = predicted[(model, "off")], predicted[(model, "on")]
    print(f"planner's predicted activations per stage: none {off[0]} / {off[1]} MiB, "
          f"whole layers {on[0]} / {on[1]} MiB")
PY
