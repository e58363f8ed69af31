#!/usr/bin/env bash
# Supervised fine-tuning on chat data: a tiny transformers LLaMA whose tokenizer has a chat
# template; chat JSONL prepared with it (ids and loss masks equal to transformers' own
# assistant masks); the loss per token over each global batch, the same at pipe 2 x data 2,
# model 2 x data 2 and context 2 x data 2 (with selective recompute) as in one process
# (losses, gradient norms, validation losses and weights, 1e-5), with unequal answer
# lengths per micro-batch; MFU against a given peak; bad chat data refused in one line,
# exit 2, nothing written.
# Usage: sft_test.sh PATH/TO/pipetrain PYTHON (with torch, transformers, safetensors)
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$(realpath "$1")
python=$2
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
prepare=$source_dir/scripts/prepare-data
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
export PIPETRAIN_COMM_TIMEOUT=60 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error OMP_NUM_THREADS=1

"$python" "$here/chat_fixture.py" model chat.jsonl 2>/dev/null
check "a model whose tokenizer has a chat template" test -s model/tokenizer.json -a -s chat.jsonl

# 1. Preparation: ids and masks as transformers renders and marks them.
"$prepare" --chat --tokenizer model --out data/chat --context 64 chat.jsonl >prepare.out 2>&1
check "prepare: writes the examples and their masks ($(cat prepare.out))" \
  test -s data/chat.bin -a -s data/chat.idx -a -s data/chat.mask
check "prepare: the summary counts examples and trained tokens" \
  grep -qE '^data/chat: 48 examples of 48 \([0-9]+ truncated, 0 dropped\), [0-9]+ tokens, [0-9]+ trained on' prepare.out
"$prepare" --chat --tokenizer model --out data/whole chat.jsonl >/dev/null 2>&1
check "prepare: masks equal apply_chat_template's assistant masks ($("$python" "$here/chat_masks.py" model chat.jsonl data/whole 2>&1 | tail -1))" \
  "$python" "$here/chat_masks.py" model chat.jsonl data/whole
"$prepare" --chat --tokenizer model --out data/short --context 16 --overlong drop chat.jsonl >short.out 2>&1
check "prepare: --overlong drop leaves out and counts what does not fit ($(cat short.out))" \
  grep -qE '^data/short: [0-9]+ examples of 48 \(0 truncated, [1-9][0-9]* dropped\)' short.out

# 2. Bad chat data: one line naming the file and line, exit 2, nothing written.
bad_chat() {
  local name=$1 pattern=$2 line=$3
  printf '%s\n' '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}]}' "$line" >"$name.jsonl"
  "$prepare" --chat --tokenizer "${4:-model}" --out "bad/$name" "$name.jsonl" >"$name.out" 2>"$name.err"
  local rc=$?
  check "bad chat data ($name): exit 2 (got $rc)" test "$rc" -eq 2
  check "bad chat data ($name): one line naming '$pattern': $(cat "$name.err")" \
    test "$(wc -l <"$name.err")" -eq 1 -a -n "$(grep -- "$pattern" "$name.err")"
  check "bad chat data ($name): nothing written" test ! -e "bad/$name.bin" -a ! -e "bad/$name.mask"
}
bad_chat not-json "not-json.jsonl:2: not JSON" '{"messages": ['
bad_chat no-role "no-role.jsonl:2: message 2 has no role" \
  '{"messages": [{"role": "user", "content": "a"}, {"content": "b"}]}'
bad_chat empty-answer "empty-answer.jsonl:2: message 2 (assistant) is empty" \
  '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": " "}]}'
bad_chat no-answer "no-answer.jsonl:2: no assistant message to train on" \
  '{"messages": [{"role": "user", "content": "a"}]}'
bad_chat image-part "image-part.jsonl:2: message 1 (user): content part 2 is 'image_url', not text" \
  '{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]}, {"role": "assistant", "content": "b"}]}'
bad_chat null-user "null-user.jsonl:2: message 1 (user): content is null" \
  '{"messages": [{"role": "user", "content": null}, {"role": "assistant", "content": "b"}]}'
# --out problems are found before any tokenizing: one line, exit 2, nothing written.
mkdir -p out-folder.bin && touch a-file
for out in out-folder a-file/prefix out-dir/; do
  "$prepare" --chat --tokenizer model --out "$out" chat.jsonl >out.out 2>out.err
  rc=$?
  check "prepare --out $out: exit 2, one line ($(cat out.err))" \
    test "$rc" -eq 2 -a "$(wc -l <out.err)" -eq 1 -a -n "$(grep -- "--out $out" out.err)"
done
check "... and nothing written" test -z "$(ls -A out-folder.bin)" -a ! -e out-dir -a ! -e out-folder.idx
# Text parts (the OpenAI form) are joined: the same ids and masks as the plain text.
printf '%s\n' '{"messages": [{"role": "user", "content": [{"type": "text", "text": "which "}, {"type": "text", "text": "licence?"}]}, {"role": "assistant", "content": [{"type": "text", "text": "the GPL"}]}]}' >parts.jsonl
printf '%s\n' '{"messages": [{"role": "user", "content": "which licence?"}, {"role": "assistant", "content": "the GPL"}]}' >joined.jsonl
"$prepare" --chat --tokenizer model --out data/parts parts.jsonl >/dev/null 2>&1
"$prepare" --chat --tokenizer model --out data/joined joined.jsonl >/dev/null 2>&1
check "prepare: content as text parts trains as the joined text" \
  bash -c 'cmp -s data/parts.bin data/joined.bin && cmp -s data/parts.mask data/joined.mask'
# One long example costs what the context holds, not its size: 20 MB in under 1 GiB.
"$python" -c 'import json; print(json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "the licence " * 1700000}]}))' >long.jsonl
"$python" -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=open("long.out", "w"), stderr=subprocess.STDOUT)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' \
  "$prepare" --chat --tokenizer model --out data/long --context 32 long.jsonl >long.kb
check "prepare: a 20 MB example with --context 32 ($(cat long.out); $(tail -1 long.kb) KiB at most)" \
  test "$(tail -1 long.kb)" -lt 1048576 -a -n "$(grep '1 truncated' long.out)"
mkdir -p plain && cp model/tokenizer.json plain/
bad_chat no-template "no-template.jsonl:1: the tokenizer has no chat template" '{"prompt": "a", "completion": "b"}' plain

# Prompt/completion text needs no template; a raw U+2028 inside a string ends no line.
printf '{"prompt": "a b", "completion": " c\xe2\x80\xa8d"}\n{"prompt": "e", "completion": " f"}\n' >plain.jsonl
"$prepare" --chat --tokenizer plain --out data/plain plain.jsonl >plain.out 2>&1
check "prepare: prompt/completion text with a tokenizer without a template ($(cat plain.out))" \
  grep -q '^data/plain: 2 examples of 2 (0 truncated, 0 dropped)' plain.out

# 3. Training: every layout equals one process.
"$pipetrain" import --hf model --out imported >import.out 2>&1
check "import: the model and its tokenizer" grep -q "into imported/step_0" import.out
cat >base.json <<JSON
{
  "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
  "optimizer": {"type": "SGD", "params": {"lr": 0.5}},
  "data": {"type": "indexed", "paths": ["$work/data/chat"], "validation_fraction": 0.2},
  "model": {"context": 64},
  "train_iters": 4, "eval_interval": 2, "eval_iters": 1,
  "sample": {"tokens": 0},
  "log": {"metrics": "NAME.jsonl", "peak_tflops": 0.05},
  "load": "imported", "save": "NAME"
}
JSON
# shellcheck source=tests/hugging_face/fine_tune.sh
source "$here/fine_tune.sh"
train one 1 's/^//'
check "train: the job line says the loss counts tokens of examples ($(grep '^data:' one.out))" \
  grep -qE '^data: 48 examples with loss masks, 38 rows for training and 10 for validation \(one example each\); .*the loss counts [0-9.]+% of [0-9]+ tokens, per token over each global batch' one.out
check "train: MFU against log.peak_tflops on the progress line and in the metrics ($(grep -o 'MFU [0-9.]*%' one.out | tail -1))" \
  "$python" -c "import json,sys; r=[json.loads(l) for l in open('one.jsonl')]; sys.exit(not all(0 < x['mfu'] < 1 for x in r))"
check "train: the progress line shows MFU" grep -qE 'grad norm [0-9.]+ MFU [0-9.]+%' one.out
half='s/"gradient_accumulation_steps": 4/"gradient_accumulation_steps": 2/'
# Selective recompute changes no number: per stage at pipe 2, everywhere at model and context 2.
train pipe-data 4 "$half; s/\"train_iters\"/\"pipeline\": {\"stages\": 2, \"recompute\": [[\"attention\"], [\"mlp_activation\", \"norms\"]]}, \"train_iters\"/"
train model-data 4 "$half; s/\"train_iters\"/\"model_parallel\": 2, \"pipeline\": {\"recompute\": [\"attention\", \"mlp\", \"norms\"]}, \"train_iters\"/"
train context-data 4 "$half; s/\"train_iters\"/\"context_parallel\": 2, \"pipeline\": {\"recompute\": [\"attention\", \"mlp\", \"norms\"]}, \"train_iters\"/"
for layout in pipe-data model-data context-data; do
  check "$layout equals one process: losses, gradient norms, validation losses, weights" \
    "$python" "$here/same_run.py" one "$layout" 4
done
check "the masked data trains: the validation loss falls" \
  awk '/^validation loss: /{ exit !($5 < $3) }' one.out

# Packed: consecutive examples share a row, each attending only to itself.
train packed 2 "s/\"validation_fraction\"/\"pack\": true, \"validation_fraction\"/; s/\"train_iters\"/\"pipeline\": {\"stages\": 2}, \"train_iters\"/"
check "packed: the job line says so ($(grep '^data:' packed.out))" \
  grep -qE '^data: 48 examples with loss masks, [0-9]+ rows for training .*\(packed\)' packed.out
finish
