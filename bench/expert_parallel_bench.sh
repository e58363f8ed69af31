#!/usr/bin/env bash
# Expert parallelism on this machine: the small Mixtral of moe_bench.sh (d 64, 4 blocks, 8
# experts, top 2, context 64) at data 4 (4 ranks, one thread each), its experts split over
# expert groups of 1, 2 and 4:
#   bench/expert_parallel_bench.sh build/src/pipetrain [REPETITIONS]
# For each expert size, REPETITIONS (default 3) times in turn: the mean step time of steps
# 6-20 and the all-to-all's bytes per step (every rank's rows sent to another, from
# metrics.jsonl's "moe.all_to_all_bytes", mean of steps 1-20); then medians, and the bytes
# `pipetrain plan` predicts for the same layout (tokens spread evenly over the experts).
set -euo pipefail
pipetrain=$(realpath "$1")
repetitions=${2:-3}
clusters=$(cd "$(dirname "$0")/../clusters" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
cat /usr/share/common-licenses/{Apache-2.0,GPL-3,MPL-2.0} >corpus.txt
for e in 1 2 4; do
  python3 - "$e" <<'PY'
import json, sys
e = int(sys.argv[1])
json.dump({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4,
           "steps_per_print": 1000, "seed": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
           "pipeline": {"stages": 1}, "train_iters": 20, "eval_interval": 0,
           "sample": {"tokens": 0}, "log": {"metrics": f"e{e}.jsonl"}, "expert_parallel": e,
           "model": {"type": "mixtral", "vocab_size": 256, "context": 64, "d_model": 64,
                     "heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
                     "layers": 4, "experts": 8, "experts_per_token": 2},
           "data": {"type": "text", "paths": ["corpus.txt"]}}, open(f"e{e}.json", "w"))
PY
done
measure() { # E: "ms bytes"
  rm -f "e$1.jsonl"
  PIPETRAIN_THREADS=1 "$pipetrain" launch -n 4 -- "$pipetrain" train --config "e$1.json" >/dev/null
  python3 -c 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
s = [x["tokens_per_s"] for x in r if 6 <= x["step"] <= 20]
b = [x["moe"]["all_to_all_bytes"] for x in r]
print("%.1f %.0f" % (1000 * 64 * 64 * sum(1 / t for t in s) / len(s), sum(b) / len(b)))' "e$1.jsonl"
}
declare -A times bytes
for ((i = 1; i <= repetitions; i++)); do
  for e in 1 2 4; do
    read -r ms sent < <(measure "$e")
    echo "repetition $i, expert $e: $ms ms per step, $sent all-to-all bytes per step"
    times[$e]+="$ms "
    bytes[$e]+="$sent "
  done
done
median() { python3 -c 'import statistics, sys; print("%.1f" % statistics.median(map(float, sys.argv[1:])))' $1; }
for e in 1 2 4; do
  predicted=$("$pipetrain" plan --config "e$e.json" --cluster "$clusters/dgx-h100.json" --devices 4 \
    --global-batch 64 -t 1 -p 1 -d 4 -e "$e" -b 4 --zero 0 --checkpointing off --schedule 1f1b \
    --format json --top 1 | python3 -c 'import json, sys; print("%.0f" % json.load(sys.stdin)[0]["all_to_all_bytes"])')
  measured=$(median "${bytes[$e]}")
  echo "expert $e: $(median "${times[$e]}") ms per step (median), all-to-all $measured bytes per step measured, $predicted predicted$(python3 -c "import sys; p, m = map(float, sys.argv[1:]); print(' (measured / predicted %.3f)' % (m / p) if p else '')" "$predicted" "$measured")"
done
