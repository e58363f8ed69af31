#!/usr/bin/env bash
# transformers interop: tiny GPT-2, LLaMA (plain and with each rope scaling), Qwen2, Qwen3,
# Mistral, Gemma 3, Mixtral and Qwen3-MoE models made by transformers (families.py) are imported, give
# transformers' logits at pipe 1, pipe 2 and model 2, and come back out loadable
# (hf_roundtrip.py); generate greedily as transformers does (hf_generate.py); train at pipe 2
# x data 2 as in one process (hf_train_step.py); damaged model folders and bad arguments end
# with exit 2 and one line naming the file and field or tensor, writing nothing.
# Usage: hf_test.sh PATH/TO/pipetrain PYTHON (with torch and transformers)
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$(realpath "$1")
python=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PIPETRAIN_COMM_TIMEOUT=60 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error

for arch in gpt2 gpt2-untied llama llama-tied llama3 llama-linear llama-yarn llama-dynamic \
  qwen2 qwen3 mistral gemma3 mixtral qwen3-moe; do
  check "$arch: logits and round trip" "$python" "$here/hf_roundtrip.py" "$pipetrain" "$work" "$arch"
done
for arch in gpt2 llama llama3 qwen2 qwen3 mistral gemma3 qwen3-moe; do
  check "$arch: greedy generation equals transformers' (64 tokens, pipe 1 and 2, cache or not)" \
    "$python" "$here/hf_generate.py" "$pipetrain" "$work" "$arch"
done
for arch in llama qwen2 qwen3 mistral gemma3 qwen3-moe; do
  check "two steps from the imported $arch at pipe 2 x data 2 equal one process" \
    "$python" "$here/hf_train_step.py" "$pipetrain" "$work" "$arch"
done
check "the imported LLaMA 3.1-style model fine-tunes at context 16 (imported at 24)" \
  "$python" "$here/hf_train_step.py" "$pipetrain" "$work" llama3 16

# scripts/prepare-data: a tokenizer.json made here, three licence texts as documents; the
# tokens read back equal the tokenizer's, and a LLaMA trains on them at pipe 2 x data 2.
"$python" - "$work/tokenizer.json" <<'PY'
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel()
tokenizer.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "</s>"])
tokenizer.train(["/usr/share/common-licenses/GPL-3"], trainer)
tokenizer.save(sys.argv[1])
PY
texts=(/usr/share/common-licenses/{Apache-2.0,GPL-3,MPL-2.0})
check "prepare-data runs" "$here/../../scripts/prepare-data" --tokenizer "$work/tokenizer.json" \
  --eod "</s>" --out "$work/corpus" "${texts[@]}"
check "prepare-data: tokens read back" "$python" - "$work" "${texts[@]}" <<'PY'
import struct, sys
import numpy as np
from tokenizers import Tokenizer
work, files = sys.argv[1], sys.argv[2:]
tokenizer = Tokenizer.from_file(f"{work}/tokenizer.json")
eod = tokenizer.token_to_id("</s>")
docs = [tokenizer.encode(open(f).read(), add_special_tokens=False).ids + [eod] for f in files]
idx = open(f"{work}/corpus.idx", "rb").read()
assert idx[:9] == b"MMIDIDX\x00\x00" and struct.unpack("<QBQQ", idx[9:34]) == (1, 8, 3, 4)
lengths = np.frombuffer(idx, np.int32, 3, 34)
tokens = np.fromfile(f"{work}/corpus.bin", np.uint16)
assert list(lengths) == [len(d) for d in docs], (lengths, [len(d) for d in docs])
assert tokens.tolist() == [t for d in docs for t in d]
PY
# A SentencePiece model: the corpus prepared with it, a LLaMA trained on it that ends with
# a sample it decodes (sample.tokenizer), and generate reading the tokenizer from the
# checkpoint, at model 2.
"$python" - "$work/spm" <<'PY'
import sys, sentencepiece
sentencepiece.SentencePieceTrainer.train(
    input="/usr/share/common-licenses/GPL-3", model_prefix=sys.argv[1], vocab_size=300,
    model_type="unigram", eos_id=1, bos_id=-1, unk_id=0, pad_id=-1, minloglevel=2)
PY
check "prepare-data with a SentencePiece model" "$here/../../scripts/prepare-data" \
  --tokenizer "$work/spm.model" --eod "</s>" --out "$work/spm-corpus" "${texts[@]}"
cat >"$work/llama.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "steps_per_print": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
 "pipeline": {"stages": 2}, "train_iters": 6, "eval_interval": 6, "eval_iters": 2,
 "save": "$work/trained",
 "sample": {"tokens": 8, "prompt": "The licence", "tokenizer": "$work/spm.model"},
 "model": {"type": "llama", "vocab_size": 320, "context": 32, "d_model": 32, "heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 64, "layers": 2},
 "data": {"type": "indexed", "paths": ["$work/spm-corpus"]}}
JSON
"$pipetrain" launch -n 4 -- "$pipetrain" train --config "$work/llama.json" >"$work/train.out" 2>&1
check "LLaMA on prepared data trains at pipe 2 x data 2 ($(grep '^validation loss:' "$work/train.out"))" \
  grep -qE "^validation loss: .* after 6 steps" "$work/train.out"
check "LLaMA validation loss falls" awk '/^validation loss:/ {exit !($3 > $5)}' "$work/train.out"
check "the sample is decoded text ($(grep '^sample:' "$work/train.out"))" \
  grep -q "^sample: The licence" "$work/train.out"
# The same in bf16 (RMSNorm computes in float32 inside), at pipe 2 x model 2, no checkpoints.
"$python" -c 'import json, sys; c = json.load(open(sys.argv[1])); c["bf16"] = {"enabled": True}; c["save"] = ""; c["model_parallel"] = 2; json.dump(c, open(sys.argv[2], "w"))' \
  "$work/llama.json" "$work/llama-bf16.json"
"$pipetrain" launch -n 4 -- "$pipetrain" train --config "$work/llama-bf16.json" >"$work/bf16.out" 2>&1
check "LLaMA in bf16 at pipe 2 x model 2 trains ($(grep '^validation loss:' "$work/bf16.out"))" \
  awk '/^validation loss:/ {found = 1; bad = !($3 > $5)} END {exit !found || bad}' "$work/bf16.out"
"$pipetrain" launch -n 2 -- "$pipetrain" generate --checkpoint "$work/trained" --model 2 \
  --tokens 8 --prompt "The licence" >"$work/generated.out" 2>&1
check "generate at model 2 decodes with the checkpoint's tokenizer ($(head -c 200 "$work/generated.out"))" \
  grep -q "^The licence" "$work/generated.out"
# Which tokenizer ran shows in a character the corpus lacks: SentencePiece's unknown piece
# decodes as " ⁇ ", bytes would show "??" for the two bytes of "ü" (--tokens 1: the prompt
# encoded and decoded, and one token more).
"$pipetrain" generate --checkpoint "$work/trained" --tokens 1 --prompt "The ü" >"$work/unknown.out" 2>&1
check "generate takes the tokenizer from the checkpoint ($(cat "$work/unknown.out"))" \
  grep -q "^The .*⁇" "$work/unknown.out"
# --tokenizer with a tokenizer.json: its byte-level BPE learnt no "ü", whose two bytes are
# unknown tokens each (bytes would give "??", SentencePiece " ⁇ ").
"$pipetrain" generate --checkpoint "$work/trained" --tokens 1 --prompt "The ü" \
  --tokenizer "$work/tokenizer.json" >"$work/hf-unknown.out" 2>&1
check "generate encodes and decodes with a tokenizer.json ($(cat "$work/hf-unknown.out"))" \
  grep -q "^ The <unk><unk>" "$work/hf-unknown.out"

expect_bad() { # description, expected text, pipetrain arguments...
  local what=$1 expected=$2
  shift 2
  local run="$work/run" rc
  rm -rf "$run" && mkdir -p "$run"
  (cd "$run" && timeout 60 "$pipetrain" "$@" >../out 2>&1)
  rc=$?
  check "$what: exit 2 (got $rc)" test "$rc" -eq 2
  check "$what: one line (got $(wc -l <"$work/out"))" test "$(wc -l <"$work/out")" -eq 1
  check "$what: names the problem: $(head -c 300 "$work/out")" grep -qF -- "$expected" "$work/out"
  check "$what: writes nothing" test -z "$(ls -A "$run")"
}

# A copy of a saved model folder with config.json edited by a Python expression on `c`.
damaged() { # source folder, name, python statement
  local copy="$work/$2"
  rm -rf "$copy" && cp -r "$work/$1" "$copy"
  "$python" - "$copy/config.json" "$3" <<'PY'
import json, sys
path, edit = sys.argv[1], sys.argv[2]
c = json.load(open(path))
exec(edit)
json.dump(c, open(path, "w"))
PY
  echo "$copy"
}

expect_bad "unknown architecture" "architectures \"BertForMaskedLM\" is not one pipetrain imports" \
  import --hf "$(damaged llama-hf bert 'c["architectures"] = ["BertForMaskedLM"]')" --out ckpt
expect_bad "rope type not built" "rope_type \"longrope\" is not one pipetrain computes" \
  import --hf "$(damaged llama-hf longrope 'c["rope_parameters"] = {"rope_type": "longrope", "rope_theta": 1e4}')" \
  --out ckpt
expect_bad "soft-capping" "attn_logit_softcapping is not supported" \
  import --hf "$(damaged qwen3-hf capped 'c["attn_logit_softcapping"] = 50.0')" --out ckpt
expect_bad "Qwen3 attention bias" "attention_bias is not supported" \
  import --hf "$(damaged qwen3-hf biased 'c["attention_bias"] = True')" --out ckpt
expect_bad "Mistral activation" "hidden_act must be \"silu\"" \
  import --hf "$(damaged mistral-hf gelu 'c["hidden_act"] = "gelu"')" --out ckpt
expect_bad "Gemma 3 activation" "hidden_activation must be \"gelu_pytorch_tanh\"" \
  import --hf "$(damaged gemma3-hf gelu 'c["hidden_activation"] = "gelu"')" --out ckpt
expect_bad "Gemma 3 attention soft-capping" "attn_logit_softcapping is not supported" \
  import --hf "$(damaged gemma3-hf capped 'c["attn_logit_softcapping"] = 50.0')" --out ckpt
expect_bad "Gemma 3 windows in no pattern" "layer_types must follow one pattern" \
  import --hf "$(damaged gemma3-hf irregular 'c["layer_types"] = ["full_attention", "sliding_attention", "sliding_attention"]')" \
  --out ckpt
expect_bad "windows out of Qwen's order" "must list the full-attention blocks first" \
  import --hf "$(damaged qwen2-hf unordered 'c["layer_types"] = ["sliding_attention", "full_attention", "full_attention"]')" \
  --out ckpt
expect_bad "shape" "has shape [88, 32], the model config.json describes needs [96, 32]" \
  import --hf "$(damaged llama-hf wider 'c["intermediate_size"] = 96')" --out ckpt
expect_bad "missing field" "config.json: n_embd is missing" \
  import --hf "$(damaged gpt2-hf nowidth 'del c["n_embd"]')" --out ckpt
expect_bad "activation" "activation_function \"relu\" is not one pipetrain computes" \
  import --hf "$(damaged gpt2-hf relu 'c["activation_function"] = "relu"')" --out ckpt

# Tensors: one missing, one extra, a truncated shard.
edited=$(damaged gpt2-hf missing 'pass')
"$python" - "$edited/model.safetensors" <<'PY'
import sys
from safetensors.torch import load_file, save_file
t = load_file(sys.argv[1]); del t["transformer.h.1.mlp.c_fc.bias"]
save_file(t, sys.argv[1], metadata={"format": "pt"})
PY
expect_bad "missing tensor" "tensor transformer.h.1.mlp.c_fc.bias is missing" import --hf "$edited" --out ckpt
edited=$(damaged gpt2-hf extra 'pass')
"$python" - "$edited/model.safetensors" <<'PY'
import sys, torch
from safetensors.torch import load_file, save_file
t = load_file(sys.argv[1]); t["transformer.h.9.attn.c_attn.weight"] = torch.zeros(2, 2)
save_file(t, sys.argv[1], metadata={"format": "pt"})
PY
expect_bad "extra tensor" "tensor transformer.h.9.attn.c_attn.weight is not part of the model" \
  import --hf "$edited" --out ckpt
edited=$(damaged llama-hf truncated 'pass')
shard=$(ls "$edited"/model-*.safetensors | head -1)
truncate -s 100 "$shard"
expect_bad "truncated shard" "$(basename "$shard")" import --hf "$edited" --out ckpt
printf '{"architectures": ' >"$edited/config.json"
expect_bad "config not JSON" "config.json: not valid JSON" import --hf "$edited" --out ckpt

mkdir -p "$work/full" && touch "$work/full/something"
expect_bad "output folder in use" "exists and is not an empty folder" \
  import --hf "$work/gpt2-hf" --out "$work/full"
# An import whose save fails (a 16 KiB limit on file sizes, as a full disk would) says so in
# one line and leaves no --out behind, so the retry runs. (PMIx keeps its data in memory, not
# in shared-memory files the limit would cut short.)
(cd "$work" && PMIX_MCA_gds=hash bash -c 'trap "" XFSZ; ulimit -f 16; exec "$0" import --hf gpt2-hf --out cut-short' \
  "$pipetrain" >import-cut.out 2>&1)
rc=$?
check "an import that cannot write exits 1 (got $rc)" test "$rc" -eq 1
check "... in one line ($(head -c 300 "$work/import-cut.out"))" test "$(wc -l <"$work/import-cut.out")" -eq 1
check "... leaving no --out folder" test ! -e "$work/cut-short"
check "... and the retry imports" "$pipetrain" import --hf "$work/gpt2-hf" --out "$work/cut-short"
expect_bad "token outside the vocabulary" "--tokens: id 999 is outside the vocabulary [0, 260)" \
  logits --checkpoint "$work/gpt2-ckpt" --tokens 1,999 --out logits.safetensors
expect_bad "too many tokens" "--tokens: 30 tokens, the model's context is 24" \
  logits --checkpoint "$work/gpt2-ckpt" --tokens "$(seq -s, 1 30)" --out logits.safetensors

printf 'a b\n' >"$work/vocab.txt"
expect_bad "tokenizer of another kind" \
  "not a tokenizer pipetrain reads (a Hugging Face tokenizer.json or a SentencePiece .model)" \
  generate --checkpoint "$work/trained" --tokenizer "$work/vocab.txt"
expect_bad "tokenizer missing" "no-such.model: no such tokenizer file" \
  generate --checkpoint "$work/trained" --tokenizer "$work/no-such.model"
cp "$work/llama.json" "$work/small-vocab.json"
# (its own save folder: the same one would resume the trained run, whose vocabulary it is not)
sed -i 's/"vocab_size": 320/"vocab_size": 290/; s|"save": "[^"]*"|"save": "'"$work"'/small-vocab"|' \
  "$work/small-vocab.json"
expect_bad "tokenizer larger than the vocabulary" "300 tokens, more than the model's vocab_size 290" \
  launch -n 2 -- "$pipetrain" train --config "$work/small-vocab.json"

finish
