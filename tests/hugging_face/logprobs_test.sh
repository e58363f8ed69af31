#!/usr/bin/env bash
# pipetrain logprobs: each completion token's log-probability under an imported checkpoint
# equals transformers' (1e-5 relative, fp32) at pipe 1, pipe 2 and model 2, for a tiny LLaMA
# with its tokenizer's chat data (prepare-data --chat) and a tiny Qwen3 with random examples,
# and for a tiny Qwen3-MoE with its experts over 2 ranks;
# pipetrain.logprobs from Python writes the same file; bad input: one line, exit 2.
# Usage: logprobs_test.sh PATH/TO/pipetrain PYTHON (with torch, transformers, safetensors)
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

"$python" "$here/chat_fixture.py" llama chat.jsonl 2>/dev/null
"$source_dir/scripts/prepare-data" --chat --tokenizer llama --out data/chat --context 64 \
  chat.jsonl >prepare.out 2>&1
"$python" "$here/logprobs_check.py" make qwen3 qwen3 data/qwen3 2>/dev/null
"$python" "$here/logprobs_check.py" make qwen3-moe moe 2>/dev/null
for model in llama qwen3 moe; do
  "$pipetrain" import --hf $model --out $model-imported >import-$model.out 2>&1
done
check "a tiny LLaMA with chat data, a tiny Qwen3 with random examples and a Qwen3-MoE imported" \
  grep -q "into moe-imported/step_0" import-moe.out

for model in llama qwen3 moe; do
  data=data/chat layouts=("1" "2" "2 --model 2")
  [ $model = qwen3 ] && data=data/qwen3
  # A mixture: its experts over two replicas (one example at a time).
  [ $model = moe ] && data=data/qwen3 layouts=("2 --expert-parallel 2")
  for layout in "${layouts[@]}"; do
    read -r ranks extra <<<"$layout"
    name="$model-$ranks${extra// /}"
    # shellcheck disable=SC2086
    "$pipetrain" launch -n "$ranks" -- "$pipetrain" logprobs --checkpoint $model-imported \
      --data $data --micro-batch 3 --out "$name.safetensors" $extra >"$name.out" 2>&1
    check "$model on $ranks ranks ${extra:-(pipe $ranks)}: $(grep -o 'wrote.*' "$name.out")" \
      grep -q "completions" "$name.out"
    check "$model on $ranks ranks ${extra:-(pipe $ranks)} equals transformers ($("$python" \
      "$here/logprobs_check.py" compare $model $data "$name.safetensors" 2>&1 | tail -1))" \
      "$python" "$here/logprobs_check.py" compare $model $data "$name.safetensors" 2>/dev/null
  done
done

build=$(dirname "$(dirname "$pipetrain")")
PYTHONPATH="$source_dir/python:$build/python" "$pipetrain" launch -n 2 -- "$python" -c "
import sys, torch, pipetrain
from safetensors.torch import load_file
got = pipetrain.logprobs('qwen3-imported', 'data/qwen3', 'python.safetensors')
want = load_file('qwen3-2.safetensors')
assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got), 'differs'
" >python.out 2>&1
check "pipetrain.logprobs from Python at pipe 2 writes the same file ($(tail -1 python.out))" \
  test $? -eq 0

run logprobs --checkpoint qwen3-imported --data data/none --out x.safetensors
check "missing data: exit 2, one line ($(head -1 err))" \
  test "$rc" -eq 2 -a "$(wc -l <err)" -eq 1 -a ! -e x.safetensors -a -n "$(grep data/none err)"
"$python" "$here/logprobs_check.py" long data/long 2>/dev/null
run logprobs --checkpoint qwen3-imported --data data/long --out x.safetensors
check "an example past the model's context + 1: exit 2, one line ($(head -1 err))" \
  test "$rc" -eq 2 -a "$(wc -l <err)" -eq 1 -a ! -e x.safetensors \
  -a -n "$(grep "example 0 has 40 tokens, more than the model's context + 1 (33)" err)"
run logprobs --checkpoint qwen3-imported --data data/chat --out x.safetensors
check "another model's data (ids past its vocabulary): exit 2, one line ($(head -1 err))" \
  test "$rc" -eq 2 -a "$(wc -l <err)" -eq 1 -a ! -e x.safetensors -a -n "$(grep "not in \[0, model.vocab_size 260)" err)"
finish
