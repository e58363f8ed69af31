#!/usr/bin/env bash
# Policy-gradient steps (objective.type "policy_gradient") on fixed rollouts against TRL 1.16's
# GRPOTrainer loss (grpo_check.py: its _compute_loss on the same completions, advantages, old
# and reference log-probabilities, and its backward): each loss type's loss and every
# weight's update after one SGD step equal TRL's, at pipe 1, at pipe 2 x data 2, at model 2
# and under ZeRO 2; rollouts that do not match their examples are refused in one line, exit 2.
# Usage: grpo_test.sh PATH/TO/pipetrain PYTHON (with torch, transformers, trl)
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$(realpath "$1")
python=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
export PIPETRAIN_COMM_TIMEOUT=60 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error OMP_NUM_THREADS=1
export TQDM_DISABLE=1 PYTHONWARNINGS=ignore
grpo=("$python" "$here/grpo_check.py")

"$python" "$here/chat_fixture.py" model chat.jsonl >/dev/null 2>&1
"${grpo[@]}" make model data/roll roll.safetensors
"$pipetrain" import --hf model --out imported >/dev/null 2>&1

# run NAME RANKS LOSS_TYPE [config updates]: one step on the 8 training rollouts, exported.
run() {
  local name=$1 ranks=$2 loss=$3
  "$python" - "$name" "$loss" "${4:-}" <<'PY'
import json, sys
name, loss, updates = sys.argv[1], sys.argv[2], sys.argv[3]
c = {"load": "imported", "data": {"type": "indexed", "paths": ["data/roll"],
                                  "validation_fraction": 0.1},
     "objective": {"type": "policy_gradient", "loss_type": loss, "beta": 0.04,
                   "epsilon": 0.2, "epsilon_high": 0.28, "max_completion_length": 16,
                   "rollouts": "roll.safetensors"},
     "train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
     "optimizer": {"type": "SGD", "params": {"lr": 0.5}}, "gradient_clipping": 0,
     "train_iters": 1, "eval_interval": 0, "eval_iters": 1, "save": name,
     "log": {"metrics": name + ".jsonl"}, "sample": {"tokens": 0}}
for key, value in (json.loads(updates) if updates else {}).items():
    if isinstance(value, dict) and isinstance(c.get(key), dict):
        c[key].update(value)
    else:
        c[key] = value
json.dump(c, open(name + ".json", "w"))
PY
  "$pipetrain" launch -n "$ranks" -- "$pipetrain" train --config "$name.json" >"$name.log" 2>&1 &&
    "$pipetrain" export --checkpoint "$name" --format hf --out "$name.out" >/dev/null 2>&1
}
compare() { # what, loss type, run
  check "$1: $("${grpo[@]}" compare "trl_$2" model "$3.jsonl" "$3.out" 2>&1 | tail -1)" \
    "${grpo[@]}" compare "trl_$2" model "$3.jsonl" "$3.out"
}

wide='{"pipeline": {"stages": 2}, "data_parallel": 2, "train_micro_batch_size_per_gpu": 1}'
for loss in grpo dr_grpo dapo; do
  check "TRL's $loss loss" "${grpo[@]}" trl model data/roll roll.safetensors "trl_$loss" "$loss"
  run "$loss" 1 "$loss"
  compare "$loss at pipe 1" "$loss" "$loss"
  "$pipetrain" eval --checkpoint "$loss" >eval.out 2>&1
  check "pipetrain eval of a $loss checkpoint gives its last validation loss ($(tail -1 eval.out))" \
    "$python" -c "
import json
trained = json.loads(open('$loss.jsonl').readline())['val_loss']
printed = float(open('eval.out').read().split('validation loss ')[-1].split()[0])
assert abs(printed - trained) < 1e-4, (printed, trained)
"
  run "${loss}_wide" 4 "$loss" "$wide"
  compare "$loss at pipe 2 x data 2" "$loss" "${loss}_wide"
done
run model2 2 grpo '{"model_parallel": 2}'
compare "grpo at model 2 (tensor parallel, the vocabulary split)" grpo model2
run zero2 4 dapo '{"pipeline": {"stages": 2}, "data_parallel": 2, "train_micro_batch_size_per_gpu": 1,
  "zero_optimization": {"stage": 2}}'
compare "dapo under ZeRO 2 (pipe 2 x data 2)" dapo zero2

# Rollouts that do not match their examples: one line, exit 2, before any step.
refused() { # what, words, python that rewrites bad.safetensors from roll.safetensors
  local what=$1 words=$2
  "$python" -c "
from safetensors.torch import load_file, save_file
f = load_file('roll.safetensors')
$3
save_file(f, 'bad.safetensors')"
  run bad 1 dapo '{"objective": {"rollouts": "bad.safetensors"}}'
  local rc=$?
  check "$what: exit 2, one line ($(head -1 bad.log))" test "$rc" -eq 2 \
    -a "$(wc -l <bad.log)" -eq 1 -a ! -e bad/latest -a -n "$(grep -F "$words" bad.log)"
}
refused "advantages of other examples" "rollouts of other examples" \
  "f['advantages'] = f['advantages'][:5]"
refused "log-probabilities of other examples" "rollouts of other examples" \
  "f['old_logprobs'] = f['old_logprobs'][:-3]"
refused "offsets of other examples" "rollouts of other examples" \
  "f['offsets'] = f['offsets'].clone(); f['offsets'][2] += 1"
refused "a KL without reference log-probabilities" "has no ref_logprobs" "del f['ref_logprobs']"
finish
