#!/usr/bin/env bash
# The fine-tuning walk of docs/user/fine-tuning.md, step by step as a user runs it: a
# transformers LLaMA with its tokenizer imported, a corpus prepared with that tokenizer,
# fine-tuned at pipe 2 from a config without a model section, text generated, exported, and
# loaded back in transformers, whose greedy continuation equals pipetrain's.
# Usage: finetune_walk.sh PATH/TO/pipetrain PYTHON (with torch, transformers, tokenizers)
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$(realpath "$1")
python=$2
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
export PIPETRAIN_COMM_TIMEOUT=60 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error OMP_NUM_THREADS=1

# A model folder as transformers saves one: config.json, weights, tokenizer.json.
"$python" - hf-model <<'PY'
import sys, torch, transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
folder = sys.argv[1]
tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel()
tokenizer.decoder = decoders.ByteLevel()
tokenizer.train(["/usr/share/common-licenses/GPL-3"],
                trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"]))
torch.manual_seed(3)
config = transformers.LlamaConfig(
    vocab_size=tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=88,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=32, bos_token_id=1, eos_token_id=2)
transformers.LlamaForCausalLM(config).save_pretrained(folder)
tokenizer.save(f"{folder}/tokenizer.json")
PY
check "a transformers model folder to start from" test -s hf-model/tokenizer.json

# 1. Import: the weights, the tokenizer and the special tokens go into the checkpoint.
"$pipetrain" import --hf hf-model --out imported >import.out 2>&1
check "import: says it carried the tokenizer ($(cat import.out))" grep -q "tokenizer.json) into imported/step_0" import.out
check "import: the tokenizer is beside the checkpoint" cmp -s hf-model/tokenizer.json imported/tokenizer.json

# 2. Prepare data with the model's tokenizer.
"$source_dir/scripts/prepare-data" --tokenizer imported/tokenizer.json --eod "</s>" \
  --out data/corpus /usr/share/common-licenses/{Apache-2.0,MPL-2.0} >prepare.out 2>&1
check "prepare-data writes the indexed corpus, making its folder" test -s data/corpus.bin -a -s data/corpus.idx

# 3. Fine-tune at pipe 2 from the imported checkpoint: the config has no model section.
cat >finetune.json <<JSON
{
  "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
  "pipeline": {"stages": 2},
  "data": {"type": "indexed", "paths": ["$work/data/corpus"]},
  "train_iters": 30, "eval_interval": 0, "eval_iters": 2,
  "sample": {"tokens": 0},
  "load": "imported", "save": "finetuned"
}
JSON
"$pipetrain" launch -n 2 -- "$pipetrain" train --config finetune.json >finetune.out 2>&1
check "fine-tune: exits 0 ($(tail -1 finetune.out))" test $? -eq 0
check "fine-tune: takes the checkpoint's model and says so" \
  grep -q "^model: the checkpoint's (llama, " finetune.out
check "fine-tune: the validation loss falls" awk '/^validation loss: /{ exit !($5 < $3) }' finetune.out
sed 's|"pipeline"|"model": {"type": "llama", "d_model": 64}, "pipeline"|' finetune.json >contradicts.json
"$pipetrain" launch -n 2 -- "$pipetrain" train --config contradicts.json --save elsewhere >contradicts.out 2>&1
rc=$?
check "fine-tune: a model section that contradicts the checkpoint is one line, exit 2 (got $rc: $(grep '^pipetrain' contradicts.out | head -1))" \
  test "$rc" -eq 2 -a -n "$(grep -E '^pipetrain: (rank 0: )?model.d_model 64 contradicts the checkpoint in imported \(32\)' contradicts.out)"

# 4. Generate: the checkpoint's tokenizer encodes the prompt and decodes text, greedily.
"$pipetrain" launch -n 2 -- "$pipetrain" generate --checkpoint finetuned --prompt "This License" \
  --tokens 12 --temperature 0 >generate.out 2>&1
check "generate: the prompt and a continuation ($(head -c 80 generate.out))" \
  test "$(sed 's/^ *//' generate.out | head -c 12)" = "This License" -a "$(wc -c <generate.out)" -gt 14

# 5. Export to a transformers folder, with the tokenizer and the special tokens.
"$pipetrain" export --checkpoint finetuned --format hf --out exported >export.out 2>&1
check "export: config.json keeps bos_token_id and eos_token_id" "$python" -c \
  "import json,sys; c=json.load(open('exported/config.json')); sys.exit(not (c['bos_token_id']==1 and c['eos_token_id']==2))"
check "export: the tokenizer comes back" cmp -s hf-model/tokenizer.json exported/tokenizer.json

# 6. transformers loads it, and its greedy continuation is pipetrain's.
check "transformers: the same tokens as pipetrain's generate (12, or up to its eos)" "$python" - exported generate.out <<'PY'
import sys, torch, transformers
folder, generated = sys.argv[1], open(sys.argv[2]).read()[:-1]  # the line printf ends
tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=f"{folder}/tokenizer.json")
model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
prompt = tokenizer("This License", add_special_tokens=False, return_tensors="pt").input_ids
with torch.no_grad():  # greedy, 12 tokens, stopping at the model's eos (as pipetrain's generate)
    ids = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                         max_new_tokens=12)[0].tolist()
text = tokenizer.decode(ids, skip_special_tokens=False)
print("transformers:", repr(text)); print("pipetrain:   ", repr(generated))
sys.exit(text != generated)
PY
finish
