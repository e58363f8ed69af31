#!/usr/bin/env bash
# LoRA's memory: the optimizer state of a LLaMA (d 1024, 8 blocks, fp32 AdamW, pipe 2 on 2
# CPU ranks) trained whole and with LoRA adapters of rank 16 on every projection, as
# `pipetrain plan` predicts it per stage and as the run measures it per rank (the
# `optimizer_state_bytes` of the metrics), side by side in one run of this script.
# Usage: bench/lora_memory_bench.sh PATH/TO/pipetrain
set -euo pipefail
pipetrain=$(realpath "$1")
clusters=$(cd "$(dirname "$0")/.." && pwd)/clusters
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMP_NUM_THREADS=1
for lora in 0 16; do
  python3 - "$lora" >"lora-$lora.json" <<'PY'
import json, sys
rank = int(sys.argv[1])
c = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
     "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
     "pipeline": {"stages": 2}, "data": {"type": "text"},
     "model": {"type": "llama", "vocab_size": 256, "context": 128, "d_model": 1024, "heads": 16,
               "num_key_value_heads": 4, "intermediate_size": 2816, "layers": 8},
     "train_iters": 2, "eval_interval": 0, "eval_iters": 1, "sample": {"tokens": 0},
     "log": {"metrics": "m.jsonl"}}
if rank:
    c["lora"] = {"rank": rank, "alpha": 2 * rank, "target_modules": [
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
json.dump(c, sys.stdout)
PY
  "$pipetrain" plan --config "lora-$lora.json" --cluster "$clusters/this-machine.json" \
    --global-batch 2 --devices 2 -p 2 -d 1 -t 1 -b 1 --zero 0 --checkpointing off \
    --schedule 1f1b --top 1 --format json >"plan-$lora.json"
  rm -f m.jsonl
  "$pipetrain" launch -n 2 -- "$pipetrain" train --config "lora-$lora.json" >"run-$lora.out" 2>&1 ||
    { cat "run-$lora.out"; exit 1; }
  grep -E '^lora:' "run-$lora.out" || true
  python3 - "$lora" "plan-$lora.json" m.jsonl <<'PY'
import json, sys
lora, plan, metrics = sys.argv[1:]
stages = json.load(open(plan))[0]["stages"]
measured = json.loads(open(metrics).readlines()[-1])["optimizer_state_bytes"]
for s, (st, got) in enumerate(zip(stages, measured)):
    print(f"lora rank {lora:>2}, stage {s}: optimizer state planned {st['optimizer'] / 2**20:8.2f} MiB, "
          f"measured {got / 2**20:8.2f} MiB; weights planned {st['weights'] / 2**20:7.1f} MiB")
PY
done
