#!/usr/bin/env bash
# docs/user/fine-tuning.md as a reader follows it: every command of the page runs, in order
# (run_walk.sh), and what it says they print and write is there.
# Usage: fine_tuning_doc_test.sh PATH/TO/pipetrain PYTHON (with torch, transformers, peft)
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PIPETRAIN_COMM_TIMEOUT=60 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error OMP_NUM_THREADS=1

bash "$here/run_walk.sh" "$here/../../docs/user/fine-tuning.md" "$1" "$2" "$work" >"$work/run.out" 2>&1
rc=$?
check "every command of the page runs ($(grep -c '^== block' "$work/run.out") blocks; $(tail -1 "$work/run.out"))" \
  test "$rc" -eq 0
cd "$work" || exit 1
check "the import says what it carried" \
  grep -q "^imported hf-model (llama, 39 tensors, tokenizer.json) into imported/step_0" walk.out
check "the chat data as the page shows it" \
  grep -q "^data/chat: 48 examples of 48 (1 truncated, 0 dropped), 1621 tokens, 811 trained on (50.0%)" walk.out
check "the job line of the adapters" \
  grep -q "^lora: rank 8, alpha 16 on q_proj, k_proj, v_proj, o_proj: 16 linears; 0.00717 M of 0.0635 M parameters trained" walk.out
check "the first run stops at step 10, saved" grep -q "^saved adapted/step_10" walk.out
check "the same command resumes from its own folder" \
  grep -q "^resuming from the newest checkpoint in adapted (step_10), not imported (where the run started)" walk.out
check "and ends at step 20" grep -qE "^step 20/20 loss" walk.out
check "peft's adapter and the merged weights are written" \
  test -s adapter/adapter_config.json -a -s adapter/adapter_model.safetensors -a -s merged/model.safetensors
check "peft and the merged model generate alike" grep -q "^peft and merged: " walk.out
check "plain text: fine-tuned, sampled and exported" \
  test -s finetuned/latest -a -s exported/model.safetensors -a -s exported/tokenizer.json
finish
