#!/usr/bin/env bash
# DPO (objective.type "dpo") against TRL 1.16's DPOTrainer on the same pairs, model,
# reference and one SGD step, fp32 on the CPU (dpo_check.py): loss, TRL's metrics and every
# weight's update equal at pipe 1, at pipe 2 x data 2, at model 2, for hinge and ipo, and with LoRA (the
# base under the adapters as reference, TRL with peft). A precomputed reference (pipetrain
# logprobs) trains as the frozen one; a resumed run goes on against the same reference;
# bad input is refused in one line, exit 2, before any step.
# Usage: dpo_test.sh PATH/TO/pipetrain PYTHON (with torch, transformers, peft, trl)
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$(realpath "$1")
python=$2
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
export PIPETRAIN_COMM_TIMEOUT=60 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error OMP_NUM_THREADS=1
export TQDM_DISABLE=1 PYTHONWARNINGS=ignore
dpo=("$python" "$here/dpo_check.py")

"$python" "$here/chat_fixture.py" model chat.jsonl >/dev/null 2>&1
"$python" "$here/dpo_fixture.py" model pairs.jsonl reference >/dev/null 2>&1
"$source_dir/scripts/prepare-data" --preference --tokenizer model --context 64 --out data/pairs \
  pairs.jsonl >prepare.out 2>&1
check "prepare-data --preference ($(tail -1 prepare.out))" grep -q "9 preference examples" prepare.out
"$pipetrain" import --hf model --out imported >/dev/null 2>&1
"$pipetrain" import --hf reference --out ref >/dev/null 2>&1

# config NAME [python dict updates]: dpo's first step from the imported model, 8 pairs.
config() {
  "$python" - "$@" <<'PY'
import json, sys
name, updates = sys.argv[1], json.loads(sys.argv[2]) if sys.argv[2:] and sys.argv[2] else {}
c = {"load": "imported", "data": {"type": "indexed", "paths": ["data/pairs"],
                                  "validation_fraction": 0.1},
     "objective": {"type": "dpo", "beta": 0.1, "reference_checkpoint": "ref"},
     "train_batch_size": 16, "train_micro_batch_size_per_gpu": 4,
     "optimizer": {"type": "SGD", "params": {"lr": 0.5}}, "gradient_clipping": 0,
     "train_iters": 1, "eval_interval": 0, "eval_iters": 1, "save": name,
     "log": {"metrics": name + ".jsonl"}, "sample": {"tokens": 0}}
for key, value in updates.items():
    if isinstance(value, dict) and isinstance(c.get(key), dict):
        c[key].update(value)
    elif value is None:
        c.pop(key, None)
    else:
        c[key] = value
json.dump(c, open(name + ".json", "w"))
PY
}
# train NAME RANKS FORMAT [updates]: trains NAME, exports it (hf or peft) to NAME.out.
train() {
  local name=$1 ranks=$2 format=$3
  config "$name" "${4:-}"
  "$pipetrain" launch -n "$ranks" -- "$pipetrain" train --config "$name.json" >"$name.log" 2>&1 &&
    "$pipetrain" export --checkpoint "$name" --format "$format" --out "$name.out" >/dev/null 2>&1
}
compare() { # what, TRL's folder, run, [--lora]
  local what=$1 theirs=$2 name=$3
  shift 3
  check "$what: $("${dpo[@]}" compare "$theirs" model "$name.jsonl" "$name.out" "$@" 2>&1 |
    tail -1)" "${dpo[@]}" compare "$theirs" model "$name.jsonl" "$name.out" "$@"
}

check "TRL's step (frozen reference)" "${dpo[@]}" trl model pairs.jsonl data/pairs trl_full \
  --reference reference
train pipe1 1 hf
compare "pipe 1" trl_full pipe1
"$pipetrain" eval --checkpoint pipe1 >eval.out 2>&1
check "pipetrain eval of a DPO checkpoint gives its last validation loss ($(tail -1 eval.out))" \
  "$python" -c "
import json
trained = json.loads(open('pipe1.jsonl').readline())['val_loss']
printed = float(open('eval.out').read().split('validation loss ')[-1].split()[0])
assert abs(printed - trained) < 1e-4, (printed, trained)
"
train pipe2x2 4 hf '{"pipeline": {"stages": 2}, "data_parallel": 2, "train_micro_batch_size_per_gpu": 2}'
compare "pipe 2 x data 2" trl_full pipe2x2
train model2 2 hf '{"model_parallel": 2}'
compare "model 2 (tensor parallel, the vocabulary split)" trl_full model2
for loss in hinge ipo; do
  check "TRL's step ($loss)" "${dpo[@]}" trl model pairs.jsonl data/pairs "trl_$loss" \
    --reference reference --loss "$loss"
  train "$loss" 1 hf "{\"objective\": {\"loss_type\": \"$loss\"}}"
  compare "$loss at pipe 1" "trl_$loss" "$loss"
done

# LoRA: the reference is the base under the adapters; TRL starts from pipetrain's first A.
train lora 4 peft '{"pipeline": {"stages": 2}, "data_parallel": 2, "train_micro_batch_size_per_gpu": 2,
  "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
  "objective": {"reference": "adapters_off", "reference_checkpoint": ""}}'
check "TRL's step (peft, adapters disabled as reference)" \
  "${dpo[@]}" trl model pairs.jsonl data/pairs trl_lora --lora lora.out
compare "LoRA at pipe 2 x data 2" trl_lora lora --lora

# A precomputed reference: pipetrain logprobs of the same data trains as the frozen one.
"$pipetrain" logprobs --checkpoint ref --data data/pairs --out ref.safetensors >/dev/null 2>&1
train file 1 hf '{"objective": {"reference": "precomputed", "reference_checkpoint": "",
  "reference_logprobs": "ref.safetensors"}}'
check "a precomputed reference trains as the frozen one" "$python" -c "
import json
a, b = (json.loads(open(f + '.jsonl').readline()) for f in ('file', 'pipe1'))
assert abs(a['loss'] - b['loss']) < 1e-5 * b['loss'], (a['loss'], b['loss'])
"

# Resumed: step 2 of a run stopped after step 1 is step 2 of one that ran on.
train whole 1 hf '{"train_iters": 2, "save_interval": 1}'
train part 1 hf '{"train_iters": 1}'
config part '{"train_iters": 2}'
"$pipetrain" train --config part.json >resume.log 2>&1
check "a resumed run goes on against the same reference ($(grep -o 'resumed.*' resume.log))" \
  "$python" -c "
import json
a, b = ([json.loads(l) for l in open(f + '.jsonl')][-1] for f in ('whole', 'part'))
assert a['step'] == b['step'] == 2 and abs(a['loss'] - b['loss']) <= 1e-6 * a['loss'], (a, b)
"

# Bad input: one line naming what is wrong, exit 2, before any step.
refused() { # what, words, config updates, [data prefix]
  local what=$1 words=$2
  config bad "$3"
  rm -rf bad
  "$pipetrain" train --config bad.json >bad.out 2>&1
  local rc=$?
  check "$what: exit 2, one line ($(head -1 bad.out))" test "$rc" -eq 2 \
    -a "$(wc -l <bad.out)" -eq 1 -a ! -e bad/latest -a -n "$(grep -F "$words" bad.out)"
}
"$source_dir/scripts/prepare-data" --chat --tokenizer model --context 64 --out data/chat \
  chat.jsonl >/dev/null 2>&1
refused "pairs that share no prompt" "share no prompt" \
  '{"data": {"paths": ["data/chat"], "validation_fraction": 0.1}}'
"$python" -c "
import torch, transformers
c = transformers.AutoConfig.from_pretrained('model'); c.hidden_size = 48
transformers.LlamaForCausalLM(c).save_pretrained('wide')
transformers.AutoTokenizer.from_pretrained('model').save_pretrained('wide')
" >/dev/null 2>&1
"$pipetrain" import --hf wide --out wide_ref >/dev/null 2>&1
refused "a reference of another architecture" "the reference must be the policy's architecture" \
  '{"objective": {"reference_checkpoint": "wide_ref"}}'
refused "adapters_off without adapters" '"adapters_off" needs LoRA' \
  '{"objective": {"reference": "adapters_off"}}'
refused "an odd micro-batch" "is odd" '{"train_micro_batch_size_per_gpu": 3, "train_batch_size": 24}'
"$pipetrain" logprobs --checkpoint ref --data data/chat --out chat.safetensors >/dev/null 2>&1
refused "log-probabilities of other data" "the training data holds" \
  '{"objective": {"reference": "precomputed", "reference_checkpoint": "",
    "reference_logprobs": "chat.safetensors"}}'
finish
