#!/usr/bin/env bash
# A small Mixtral (d 64, 4 blocks, 8 experts, top 2, context 64) on the bytes of the
# licence texts:
#   bench/moe_bench.sh build/src/pipetrain [REPETITIONS]
# 1. Step time, interleaved with the dense LLaMA of the same sizes (its one MLP as wide as
#    one expert, so both compute the same attention and each token passes through 2 against
#    1 MLPs of that width): pipe 1 and pipe 2 (2 ranks, one thread each), the mean step time
#    of steps 6-20 from metrics.jsonl, REPETITIONS (default 3) times in turn, then medians.
# 2. The load-balance figure over 200 steps with and without the load-balancing loss
#    (router_aux_loss_coef 0.01 against 0): `max_load` (the busiest expert's share against
#    an even share, mean over layers and micro-batches; 1.0 is even) and the
#    load-balancing loss (1.0 is even) at steps 1, 50, 100, 150 and 200.
set -euo pipefail
pipetrain=$(realpath "$1")
repetitions=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
cat /usr/share/common-licenses/{Apache-2.0,GPL-3,MPL-2.0} >corpus.txt
config() { # NAME TYPE STAGES STEPS COEF
  python3 - "$@" <<'PY'
import json, sys
name, kind, stages, steps, coef = sys.argv[1:]
model = {"type": kind, "vocab_size": 256, "context": 64, "d_model": 64, "heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 128, "layers": 4}
if kind == "mixtral":
    model.update({"experts": 8, "experts_per_token": 2, "router_aux_loss_coef": float(coef)})
json.dump({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4,
           "steps_per_print": 1000, "seed": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
           "pipeline": {"stages": int(stages)}, "train_iters": int(steps), "eval_interval": 0,
           "sample": {"tokens": 0}, "log": {"metrics": name + ".jsonl"},
           "model": model, "data": {"type": "text", "paths": ["corpus.txt"]}},
          open(name + ".json", "w"))
PY
}
train() { # NAME RANKS
  rm -f "$1.jsonl"
  PIPETRAIN_THREADS=1 "$pipetrain" launch -n "$2" -- "$pipetrain" train --config "$1.json" >/dev/null
}
step_ms() { # NAME: mean seconds of steps 6-20, in ms
  python3 -c 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
s = [x["tokens_per_s"] for x in r if 6 <= x["step"] <= 20]
print("%.1f" % (1000 * 16 * 64 * sum(1 / t for t in s) / len(s)))' "$1.jsonl"
}
declare -A times
for ((i = 1; i <= repetitions; i++)); do
  for stages in 1 2; do
    for kind in mixtral llama; do
      name=$kind-$stages
      config "$name" "$kind" "$stages" 20 0.01
      train "$name" "$stages"
      ms=$(step_ms "$name")
      echo "repetition $i, $kind, pipe $stages: $ms ms per step"
      times[$name]+="$ms "
    done
  done
done
median() { python3 -c 'import statistics, sys; print("%.1f" % statistics.median(map(float, sys.argv[1:])))' $1; }
for stages in 1 2; do
  m=$(median "${times[mixtral-$stages]}") l=$(median "${times[llama-$stages]}")
  echo "pipe $stages: mixtral $m ms, llama $l ms per step (median), mixtral / llama $(python3 -c "print('%.2f' % ($m / $l))")"
done
for coef in 0.01 0; do
  config "balance-$coef" mixtral 1 200 "$coef"
  train "balance-$coef" 1
  python3 - "balance-$coef.jsonl" "$coef" <<'PY'
import json, sys
r = {x["step"]: x for x in map(json.loads, open(sys.argv[1]))}
cells = ["step %d: load %.2f, balance loss %.3f, loss %.3f" % (s, r[s]["moe"]["max_load"],
         r[s]["moe"]["load_balancing_loss"], r[s]["loss"]) for s in (1, 50, 100, 150, 200)]
print("router_aux_loss_coef %s: %s" % (sys.argv[2], "; ".join(cells)))
PY
done
