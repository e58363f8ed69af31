#!/usr/bin/env bash
# What a user of a LLaMA-3-style transformers 5 folder meets: the tokenizer's BOS (added by
# its post-processor) in every prompt, generation stopping at the model's end-of-sequence
# ids (a list in generation_config.json) by default, and every tokenizer and generation file
# (chat_template.jinja, tokenizer_config.json, generation_config.json) carried byte for byte
# through import, a LoRA fine-tune's checkpoints and both exports, which transformers loads.
# Usage: model_files_test.sh PATH/TO/pipetrain PYTHON (with torch, transformers, peft)
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

"$python" "$here/llama3_fixture.py" model >fixture.json 2>fixture.err
check "a transformers 5 folder with chat_template.jinja and generation_config.json ($(cat fixture.json))" \
  test -s model/chat_template.jinja -a -s model/generation_config.json -a -s model/tokenizer_config.json
files="tokenizer.json tokenizer_config.json chat_template.jinja generation_config.json"
same_files() { # folder
  for f in $files; do cmp -s "model/$f" "$1/$f" || { echo "$1/$f differs or is missing"; return 1; }; done
}

# 1. Import keeps every file.
"$pipetrain" import --hf model --out imported >import.out 2>&1
check "import: every tokenizer and generation file beside the checkpoint, byte for byte" same_files imported

# 2. The prompt's ids begin with BOS, as transformers' tokenizer gives them.
export PIPETRAIN="$pipetrain"
check "tokenize: the ids transformers gives 'This License' (BOS first)" "$python" - <<'PY'
import os, subprocess, sys, transformers
tokenizer = transformers.AutoTokenizer.from_pretrained("model")
want = tokenizer("This License").input_ids
out = subprocess.run([os.environ["PIPETRAIN"], "tokenize", "--tokenizer", "imported/tokenizer.json",
                      "This License"], capture_output=True, text=True, check=True).stdout
have = [int(i) for i in out.strip().split(",")]
print("transformers", want, "pipetrain", have)
sys.exit(want != have or want[0] != tokenizer.bos_token_id)
PY

# 3. Greedy generation stops at the model's end-of-sequence ids by default, where
#    transformers' generate stops; --no-stop runs on to --tokens.
for ranks in 1 2; do
  "$pipetrain" launch -n "$ranks" -- "$pipetrain" generate --checkpoint imported \
    --prompt "This License" --tokens 24 --temperature 0 --format jsonl >"generate-$ranks.out" 2>&1
done
"$pipetrain" generate --checkpoint imported --prompt "This License" --tokens 24 --temperature 0 \
  --format jsonl --no-stop >run-on.out 2>&1
check "generate stops where transformers' generate stops (pipe 1 and 2), --no-stop runs on" \
  "$python" - <<'PY'
import json, sys, torch, transformers
fixture = json.load(open("fixture.json"))
tokenizer = transformers.AutoTokenizer.from_pretrained("model")
model = transformers.AutoModelForCausalLM.from_pretrained("model").eval()
prompt = tokenizer("This License", return_tensors="pt").input_ids
with torch.no_grad():  # the model's own generation config: its eos list
    want = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                          max_new_tokens=24)[0, prompt.shape[1]:].tolist()
ok = len(want) == fixture["stops_after"] < 24
for name in ("generate-1.out", "generate-2.out"):
    have = json.loads(open(name).readline())["tokens"]
    print(name, have, "transformers", want)
    ok = ok and have == want
run_on = json.loads(open("run-on.out").readline())["tokens"]
print("--no-stop", run_on)
sys.exit(not (ok and run_on == fixture["run_on"]))
PY

# 3b. From chat messages: prepare-data --prompts renders them with the model's template
#     (add_generation_prompt) into generate's prompts, which continue as transformers does.
printf '%s\n' '{"messages": [{"role": "user", "content": "What may I copy?"}]}' \
  '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "This License"}]}], "max_new_tokens": 6}' >ask.jsonl
"$source_dir/scripts/prepare-data" --prompts --tokenizer imported --out prompts.jsonl ask.jsonl >prompts.out 2>&1
"$pipetrain" launch -n 2 -- "$pipetrain" generate --checkpoint imported --prompts prompts.jsonl \
  --tokens 10 --temperature 0 --format jsonl >chat-generate.out 2>&1
check "generate from chat messages: transformers' ids and continuations ($(cat prompts.out))" \
  "$python" - <<'PY'
import json, sys, torch, transformers
tokenizer = transformers.AutoTokenizer.from_pretrained("model")
model = transformers.AutoModelForCausalLM.from_pretrained("model").eval()
asks = [json.loads(line) for line in open("ask.jsonl")]
prompts = [json.loads(line) for line in open("prompts.jsonl")]
have = [json.loads(line)["tokens"] for line in open("chat-generate.out")]
ok = len(have) == len(asks) == len(prompts)
for ask, prompt, got in zip(asks, prompts, have):
    messages = [dict(m, content=m["content"] if isinstance(m["content"], str) else
                     "".join(p["text"] for p in m["content"])) for m in ask["messages"]]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                        return_dict=False)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=ask.get("max_new_tokens", 10))
    want = out[0, len(ids):].tolist()
    print(prompt["ids"] == list(ids), got, want)
    ok = ok and prompt["ids"] == list(ids) and got == want
sys.exit(not ok)
PY

# 4. prepare-data takes the imported folder (its chat template), a LoRA fine-tune keeps the
#    files beside its checkpoints, and both exports carry them.
"$python" - <<'PY'
import json
with open("chat.jsonl", "w") as out:
    for i in range(24):
        out.write(json.dumps({"messages": [{"role": "user", "content": f"Say {i} things"},
                                           {"role": "assistant", "content": "the License " * (i % 4 + 1)}]}) + "\n")
PY
"$source_dir/scripts/prepare-data" --chat --tokenizer imported --out data/chat --context 48 \
  chat.jsonl >prepare.out 2>&1
check "prepare-data --chat --tokenizer IMPORTED: exit $? ($(tail -1 prepare.out))" test -s data/chat.mask
cat >lora.json <<JSON
{
  "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
  "data": {"type": "indexed", "paths": ["$work/data/chat"], "validation_fraction": 0.2},
  "model": {"context": 48}, "lora": {"rank": 4, "alpha": 8},
  "train_iters": 2, "eval_interval": 0, "sample": {"tokens": 0},
  "load": "imported", "save": "finetuned"
}
JSON
"$pipetrain" launch -n 2 -- "$pipetrain" train --config lora.json --pipe 2 >train.out 2>&1
check "fine-tune: exit $? ($(tail -1 train.out))" test -d finetuned/step_2
check "fine-tune: says it starts from the import" grep -q "^fine-tuning from imported/step_0$" train.out
check "fine-tune: the files beside its checkpoints" same_files finetuned
"$pipetrain" export --checkpoint finetuned --format hf --out merged >export-hf.out 2>&1
"$pipetrain" export --checkpoint finetuned --format peft --out adapter >export-peft.out 2>&1
check "export --format hf: every file, byte for byte" same_files merged
check "export --format peft: every file, byte for byte" same_files adapter
check "transformers loads the export: apply_chat_template gives the original's ids; config keeps pad and the eos list" \
  "$python" - <<'PY'
import json, sys, transformers
messages = [{"role": "user", "content": "Say 3 things"}]
original = transformers.AutoTokenizer.from_pretrained("model")
want = original.apply_chat_template(messages, add_generation_prompt=True)
ok = True
for folder in ("merged", "adapter"):
    have = transformers.AutoTokenizer.from_pretrained(folder).apply_chat_template(
        messages, add_generation_prompt=True)
    print(folder, have == want)
    ok = ok and have == want
config, source = json.load(open("merged/config.json")), json.load(open("model/config.json"))
model = transformers.AutoModelForCausalLM.from_pretrained("merged")
print("eos", config["eos_token_id"], "pad", config.get("pad_token_id"))
ok = ok and config["eos_token_id"] == source["eos_token_id"] and config["pad_token_id"] == source["pad_token_id"]
ok = ok and model.generation_config.eos_token_id == source["eos_token_id"]
sys.exit(not ok)
PY
"$pipetrain" export --checkpoint imported --format hf --out reexported >reexport.out 2>&1
check "import -> export: transformers' generate on the export stops where the original's does" \
  "$python" - <<'PY'
import sys, torch, transformers
def greedy(folder):
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    prompt = tokenizer("This License", return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=24)[0].tolist()
    return out[prompt.shape[1]:]
a, b = greedy("model"), greedy("reexported")
print(a, b)
sys.exit(a != b or len(a) >= 24)
PY
finish
