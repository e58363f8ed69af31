#!/usr/bin/env bash
# A program's family planned without written costs: examples/registered_model's row says
# `measure_costs`, so `plan` measures its layers on the build; its predicted peak memory per
# stage is checked against the measured peak of real runs (CPU tensor bytes,
# memory_breakdown), within 10% per stage, as plan_cli_test checks the built-in families'.
# Usage: measured_plan_test.sh PATH/TO/pipetrain PATH/TO/registered_model SOURCE_DIR
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$1
program=$2
source_dir=$3
cluster=$source_dir/clusters/this-machine.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1

# Mapped Megatron data: its tokens are no tensors, so the model's are measured.
python3 "$source_dir/tests/data/write_indexed.py" "$work/corpus" uint16 4000
cat >"$work/measured.json" <<JSON
{"model": {"type": "shift_lm",
           "params": {"vocab_size": 1024, "context": 32, "width": 64, "layers": 4}},
 "data": {"type": "indexed", "paths": ["$work/corpus"]},
 "optimizer": {"type": "AdamW"}, "train_micro_batch_size_per_gpu": 8,
 "gradient_accumulation_steps": 8, "train_iters": 3, "eval_iters": 1, "sample": {"tokens": 0},
 "memory_breakdown": true}
JSON
for layout in "1 1" "2 1" "1 2"; do
  read -r pipe data <<<"$layout"
  python3 - "$work/measured.json" "$work/run.json" "$pipe" "$work/metrics.jsonl" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["pipeline"] = {"stages": int(sys.argv[3])}
c["log"] = {"metrics": sys.argv[4]}
json.dump(c, open(sys.argv[2], "w"))
PY
  rm -f "$work/metrics.jsonl"
  "$pipetrain" launch -n $((pipe * data)) -- "$program" train --config "$work/run.json" \
    >"$work/train" 2>&1
  check "run pipe $pipe data $data trains" grep -q "validation loss:" "$work/train"
  "$program" plan --config "$work/run.json" --cluster "$cluster" --devices $((pipe * data)) \
    --global-batch $((64 * data)) --pipe "$pipe" --data "$data" --micro-batch 8 \
    --schedule 1f1b --zero 0 --checkpointing off --format json >"$work/predicted.json" 2>"$work/plan.err"
  check "plan measures pipe $pipe data $data: $(tail -1 "$work/plan.err")" test -s "$work/predicted.json"
  report=$(python3 "$source_dir/tests/planner/compare_peaks.py" "$work/metrics.jsonl" \
    "$work/predicted.json" "$pipe" "$data")
  echo "pipe $pipe data $data: $report"
  check "peak memory within 10% at pipe $pipe data $data: $report" grep -q "ok$" <<<"$report"
done
finish
