#!/usr/bin/env bash
# prepare-data --preference: TRL's preference forms (text, messages with a prompt, an implicit
# prompt) rendered with the model's chat template, chosen and rejected as documents 2i and
# 2i + 1 whose ids and masks are transformers' (chat_masks.py on the same pairs as
# supervised examples); both sides scored by pipetrain logprobs at pipe 2; bad pairs
# refused in one line naming the line, exit 2, nothing written.
# Usage: preference_test.sh PATH/TO/pipetrain PYTHON (with torch, transformers, safetensors)
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
"$python" "$here/preference_fixture.py" pref.jsonl expanded.jsonl
"$prepare" --preference --tokenizer model --out data/pref --context 64 pref.jsonl >prepare.out 2>&1
check "prepare --preference: $(cat prepare.out)" \
  grep -q "^data/pref: 12 preference examples of 12 (0 truncated, 0 dropped)" prepare.out
check "each side's ids and mask are transformers' ($("$python" "$here/chat_masks.py" model \
  expanded.jsonl data/pref 2>&1 | tail -1))" \
  "$python" "$here/chat_masks.py" model expanded.jsonl data/pref

"$pipetrain" import --hf model --out imported >import.out 2>&1
"$pipetrain" launch -n 2 -- "$pipetrain" logprobs --checkpoint imported --data data/pref \
  --out pref.safetensors >logprobs.out 2>&1
check "both sides scored at pipe 2 ($(grep -o 'wrote.*' logprobs.out))" "$python" -c "
from safetensors.torch import load_file
sums = load_file('pref.safetensors')['sequence_logprobs']
assert len(sums) == 24 and bool((sums < 0).all()), sums
"

# Bad pairs: one line naming the line, exit 2, nothing written.
refused() {
  local what=$1 line=$2 words=$3
  printf '%s\n' "$line" >bad.jsonl
  "$prepare" --preference --tokenizer model --out data/bad bad.jsonl >bad.out 2>&1
  local rc=$?
  check "$what: exit 2, one line ($(head -1 bad.out))" \
    test "$rc" -eq 2 -a "$(wc -l <bad.out)" -eq 1 -a ! -e data/bad.bin \
    -a -n "$(grep -F "bad.jsonl:1" bad.out | grep -F "$words")"
}
refused "no rejected" '{"prompt": "a", "chosen": "b"}' 'needs "chosen" and "rejected" (no rejected)'
refused "an implicit prompt they do not share" \
  '{"chosen": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "rejected": [{"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]}' \
  "chosen and rejected share no prompt"
refused "text against messages" \
  '{"prompt": "a", "chosen": [{"role": "assistant", "content": "b"}], "rejected": "c"}' \
  "prompt and chosen must both be text or both lists of messages"
finish
