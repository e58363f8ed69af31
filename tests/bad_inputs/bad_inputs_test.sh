#!/usr/bin/env bash
# The bad-input corpus: every malformed config (configs/*.json, each naming the message it
# must give on its first line), data file, checkpoint and command line must end the job
# with exit code 2 and one line naming the problem, writing nothing, before any rank's
# deadline could have ended it: the ranks wait 60 s for a peer, a case must end within 40 s
# (1-2 s each on an idle machine; one took 17 s on a loaded CI machine, so no tighter bound).
# Usage: bad_inputs_test.sh PATH/TO/pipetrain
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$(realpath "$1")
corpus=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PIPETRAIN_COMM_TIMEOUT=60
cases=0
slowest=0

# Runs pipetrain in an empty folder and checks what a user would see.
expect_bad() { # description, expected text, pipetrain arguments...
  local what=$1 expected=$2
  shift 2
  cases=$((cases + 1))
  local here="$work/run" start end rc
  rm -rf "$here" && mkdir -p "$here"
  start=$(date +%s%N)
  # Marked, so that a process the case left behind is found by its environment.
  (cd "$here" && PIPETRAIN_BAD_INPUT_CASE="$$-$cases." timeout 90 "$pipetrain" "$@" >../out 2>&1)
  rc=$?
  end=$(date +%s%N)
  local ms=$(((end - start) / 1000000))
  check "$what: exit 2 (got $rc)" test "$rc" -eq 2
  check "$what: one line (got $(wc -l <"$work/out"))" test "$(wc -l <"$work/out")" -eq 1
  check "$what: names the problem: $(head -c 300 "$work/out")" grep -qF -- "$expected" "$work/out"
  check "$what: before any deadline, under 40 s (${ms} ms)" test "$ms" -lt 40000
  if ((ms > slowest)); then slowest=$ms; fi
  check "$what: writes nothing" test -z "$(ls -A "$here")"
  check "$what: leaves no process behind" test -z "$(left_behind "$$-$cases.")"
}

# The processes whose environment holds PIPETRAIN_BAD_INPUT_CASE=ID (after a moment for
# the ones already ending).
left_behind() { # ID
  local pids="" tries
  for tries in 1 2 3 4 5; do
    pids=$(grep -lsaF "PIPETRAIN_BAD_INPUT_CASE=$1" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | tr '\n' ' ')
    [ -z "$pids" ] && return
    sleep 0.2
  done
  echo "$pids"
}

train() { echo launch -n 2 -- "$pipetrain" train "$@"; }

# 1. Configs.
for config in "$corpus"/configs/*.json; do
  expected=$(head -1 "$config" | sed 's|^// expect: ||')
  # shellcheck disable=SC2046 # train prints the argument list
  expect_bad "config $(basename "$config")" "$expected" $(train --config "$config")
done

# 1b. Schedule files (schedules/*.csv, each with its line in schedules/expected.txt): refused
# by `pipetrain schedule` and, for two of them, by a training job before any rank starts.
while IFS='|' read -r file expected; do
  expect_bad "schedule file $file" "$expected" schedule --kind file --file "$corpus/schedules/$file"
done <"$corpus/schedules/expected.txt"
check "every broken schedule file has its expected line" \
  test "$(find "$corpus/schedules" -name '*.csv' | wc -l)" -eq "$(wc -l <"$corpus/schedules/expected.txt")"
# Sizes that would plan past any real pipeline are refused before anything is sized by them.
expect_bad "schedule with 2^31-1 micro-batches" "micro-batches must be at most 65536, got 2147483647" \
  schedule --kind zbv -m 2147483647 -p 2 --format csv
expect_bad "simulate with a million stages" "stages must be at most 4096, got 1000000" \
  simulate --kind train -m 8 -p 1000000
expect_bad "schedule whose passes multiply past the bound" \
  "stages x chunks x (micro-batches + stages) must be at most 16777216, got 301989888" \
  schedule --kind interleaved -m 65536 -p 4096 -v 1
expect_bad "plan with 2^40 nodes" "plan: 1099511627776 nodes of 8 devices: at most 1048576 devices in all" \
  plan --config "$corpus/../../examples/gpt-small.json" --cluster "$corpus/../../clusters/dgx-h100.json" \
  --global-batch 64 --nodes 1099511627776
# plan makes train's LoRA checks: no plan for adapters a model cannot have.
expect_bad "plan of LoRA on a gpt" "lora.target_modules: no linear of this gpt is named q_proj, v_proj" \
  plan --config "$corpus/configs/103-lora-on-gpt.json" --cluster "$corpus/../../clusters/dgx-h100.json" \
  --global-batch 64
expect_bad "plan of ten million layers" "model.layers must be in 1..16384, got 10000000" \
  plan --config "$corpus/configs/82-layers-beyond-bound.json" --cluster "$corpus/../../clusters/dgx-h100.json" \
  --global-batch 64
# Cluster files and tokenizer files: sizes and shapes checked, the file and field named.
cluster_case() { # name, expected, python statement on the cluster `c`
  python3 -c "import json, sys; c = json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(c, open(sys.argv[3], 'w'))" \
    "$corpus/../../clusters/dgx-h100.json" "$3" "$work/$1.json"
  expect_bad "cluster $1" "$2" plan --config "$corpus/../../examples/gpt-small.json" \
    --cluster "$work/$1.json" --global-batch 64
}
cluster_case no-devices "devices_per_node must be at least 1, got 0" "c['devices_per_node'] = 0"
cluster_case too-many-devices "at most 1048576 devices in all" "c['devices_per_node'] = 2**40"
cluster_case negative-memory "memory_gib must be in (0, 1e+06], got -1" "c['memory_gib'] = -1"
echo '{"model": {"type": "BPE", "vocab": 3, "merges": []}}' >"$work/vocab-number.json"
expect_bad "tokenizer.json whose vocabulary is a number" "vocab-number.json: model.vocab is missing or not an object" \
  tokenize --tokenizer "$work/vocab-number.json" a
printf '{"model": %s1%s}' "$(printf '[%.0s' {1..100000})" "$(printf ']%.0s' {1..100000})" >"$work/deep-tokenizer.json"
expect_bad "tokenizer.json nested 100000 deep" "tokenizer file $work/deep-tokenizer.json: nested deeper than 64 levels" \
  tokenize --tokenizer "$work/deep-tokenizer.json" a
printf '{"model": ' >"$work/cut-tokenizer.json"
expect_bad "tokenizer.json cut short" "tokenizer file $work/cut-tokenizer.json" \
  tokenize --tokenizer "$work/cut-tokenizer.json" a
schedule_config() { # name, pipeline section
  printf '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "pipeline": {"stages": 2, %s}, "model": {"type": "gpt", "context": 16, "d_model": 16, "heads": 2, "layers": 2}, "train_iters": 2, "save": "out"}\n' "$2" >"$work/$1.json"
}
schedule_config deadlock "\"schedule\": \"file\", \"schedule_file\": \"$corpus/schedules/deadlock.csv\""
# shellcheck disable=SC2046
expect_bad "train with a deadlocking schedule file" \
  "rank 0 waits at 0B0 for 1B0 (rank 1), rank 1 waits at 1F1 for 0F1 (rank 0)" \
  $(train --config "$work/deadlock.json")
schedule_config file-kind "\"schedule_file\": \"$corpus/schedules/deadlock.csv\""
# shellcheck disable=SC2046
expect_bad "a schedule file without pipeline.schedule file" \
  'pipeline.schedule_file needs pipeline.schedule "file"' $(train --config "$work/file-kind.json")

# 2. Data files.
good='"train_micro_batch_size_per_gpu": 2, "pipeline": {"stages": 2}, "model": {"type": "gpt", "context": 16, "d_model": 16, "heads": 2, "layers": 2}, "train_iters": 2, "save": "out"'
data_case() { # name, expected, data section, file-making command
  eval "$4"
  printf '{%s, "data": %s}\n' "$good" "$3" >"$work/$1.json"
  # shellcheck disable=SC2046
  expect_bad "data $1" "$2" $(train --config "$work/$1.json")
}
data_case empty-token-file "empty.bin: 0 bytes is not a whole, non-zero number of 2-byte tokens" \
  "{\"type\": \"tokens\", \"paths\": [\"$work/empty.bin\"]}" ": >'$work/empty.bin'"
data_case odd-token-file "odd.bin: 5 bytes is not a whole, non-zero number of 2-byte tokens" \
  "{\"type\": \"tokens\", \"paths\": [\"$work/odd.bin\"]}" "printf 'abcde' >'$work/odd.bin'"
data_case out-of-vocabulary "big.bin: token 1 is 65535, not in [0, model.vocab_size 256)" \
  "{\"type\": \"tokens\", \"paths\": [\"$work/big.bin\"]}" "printf '\\001\\000\\377\\377\\002\\000\\003\\000' >'$work/big.bin'"
data_case too-short "too few to split" \
  "{\"type\": \"text\", \"paths\": [\"$work/short.txt\"]}" "printf 'tiny' >'$work/short.txt'"
data_case context-longer-than-data "a sequence of 17 tokens does not fit in" \
  "{\"type\": \"text\", \"paths\": [\"$work/line.txt\"]}" "printf 'one short line of text here' >'$work/line.txt'"
writer="$corpus/../data/write_indexed.py"
data_case indexed-bad-magic "magic.idx: not a Megatron indexed dataset index (no MMIDIDX header)" \
  "{\"type\": \"indexed\", \"paths\": [\"$work/magic\"]}" "python3 '$writer' '$work/magic' uint16 50 magic"
data_case indexed-truncated-bin "cut.idx: sequence 49 (offset 1048, 11 tokens) ends beyond the 1064-byte .bin (truncated or mismatched)" \
  "{\"type\": \"indexed\", \"paths\": [\"$work/cut\"]}" "python3 '$writer' '$work/cut' uint16 50 truncated-bin"
data_case indexed-pointer-outside "pointer.idx: sequence 25 (offset 1000000526, 9 tokens) does not follow the one before it" \
  "{\"type\": \"indexed\", \"paths\": [\"$work/pointer\"]}" "python3 '$writer' '$work/pointer' uint16 50 pointer"
# A 64 GiB .idx (sparse: no disk) is mapped, its counts checked against its size first.
data_case indexed-huge-idx "huge.idx: 68719476736 bytes, its counts call for" \
  "{\"type\": \"indexed\", \"paths\": [\"$work/huge\"]}" "python3 '$writer' '$work/huge' uint16 50 && truncate -s 64G '$work/huge.idx'"
# Fine-tuning examples: masks beside the tokens, one byte (0 or 1) per token, all or none.
data_case mask-size "short.mask holds 10 masks for the 535 tokens of $work/short.bin" \
  "{\"type\": \"indexed\", \"paths\": [\"$work/short\"]}" "python3 '$writer' '$work/short' uint16 50 && head -c 10 /dev/zero >'$work/short.mask'"
data_case mask-value "value.mask: byte 3 is 7, not a loss mask (0 or 1)" \
  "{\"type\": \"indexed\", \"paths\": [\"$work/value\"]}" "python3 '$writer' '$work/value' uint16 50 && head -c 535 /dev/zero >'$work/value.mask' && printf '\\007' | dd of='$work/value.mask' bs=1 seek=3 conv=notrunc status=none"
data_case mask-missing "data.paths: $work/plain has no loss masks ($work/plain.mask) but $work/value has" \
  "{\"type\": \"indexed\", \"paths\": [\"$work/value\", \"$work/plain\"]}" "python3 '$writer' '$work/plain' uint16 50"
# A mask names the .bin it was made with: one beside another run's tokens (as a rerun of
# prepare-data cut short between its renames would leave) is refused, by the .bin's size
# (another dtype) or, at the same size, by its checksum.
for other in size crc; do
  data_case "mask-of-another-run-by-$other" "$other.mask was made with another $work/$other.bin (another prepare-data run)" \
    "{\"type\": \"indexed\", \"paths\": [\"$work/$other\"]}" "python3 '$writer' '$work/$other' uint16 50 && python3 -c \"import os, struct, sys, zlib; b = open(sys.argv[1] + '.bin', 'rb').read(); size = len(b) + (2 if sys.argv[2] == 'size' else 0); open(sys.argv[1] + '.mask', 'wb').write(b'PTMASK01' + struct.pack('<QI', size, zlib.crc32(b) ^ (sys.argv[2] == 'crc')) + bytes(4) + bytes([1]) * (len(b) // 2))\" '$work/$other' $other"
done
# Examples whose masks count no token would "train" at loss 0: refused before any work.
python3 "$writer" "$work/zero" uint16 50 && head -c 535 /dev/zero >"$work/zero.mask"
printf '{%s, "data": {"type": "indexed", "paths": ["%s"]}}\n' \
  "${good/\"context\": 16/\"vocab_size\": 1000, \"context\": 16}" "$work/zero" >"$work/zero.json"
# shellcheck disable=SC2046
expect_bad "data mask-all-zero" "have no token the loss counts (their loss masks are all 0" \
  $(train --config "$work/zero.json")
data_case empty-folder "data.paths: no files found" \
  "{\"type\": \"text\", \"paths\": [\"$work/nothing\"]}" "mkdir -p '$work/nothing'"
data_case not-a-folder "data.paths: /dev/null cannot be read: Not a directory" \
  "{\"type\": \"text\", \"paths\": [\"/dev/null\"]}" ":"

# 3. Checkpoints: one good one, then damaged copies loaded with --load.
tiny='{"train_micro_batch_size_per_gpu": 2, "pipeline": {"stages": 2}, "model": {"type": "gpt", "context": 16, "d_model": 16, "heads": 2, "layers": 2}, "train_iters": 1, "eval_iters": 1, "sample": {"tokens": 0}}'
echo "$tiny" >"$work/tiny.json"
(cd "$work" && "$pipetrain" launch -n 2 -- "$pipetrain" train --config tiny.json --save good >/dev/null 2>&1)
# A manifest edited as a damaged or hostile one would be, its checksum made to match.
sealed() { sed -i "$1" step_1/manifest.json && python3 "$corpus/../checkpoint/reseal_manifest.py" step_1; }
sealed_json() { # a Python statement changing the manifest `m`
  python3 -c "import json, sys; p = 'step_1/manifest.json'; m = json.load(open(p)); exec(sys.argv[1]); json.dump(m, open(p, 'w'))" "$1" &&
    python3 "$corpus/../checkpoint/reseal_manifest.py" step_1
}
damaged_case() { # name, expected, damage (run inside the copy)
  rm -rf "$work/$1" && cp -r "$work/good" "$work/$1" && (cd "$work/$1" && eval "$3")
  # shellcheck disable=SC2046
  expect_bad "checkpoint $1" "$2" $(train --config "$work/tiny.json" --load "$work/$1")
}
damaged_case truncated "layer_001.safetensors: " "truncate -s 64 step_1/layer_001.safetensors"
damaged_case flipped-byte "checksum mismatch" "printf '\\377' | dd of=step_1/layer_002.safetensors bs=1 seek=200 conv=notrunc 2>/dev/null"
damaged_case missing-file "optimizer_001.safetensors: cannot be read" "rm step_1/optimizer_001.safetensors"
damaged_case another-model "this model has 5" \
  "sealed_json \"m['layers'].append({'index': len(m['layers']), 'type': 'GptBlock'})\""
# Every manifest field the loader reads is checked for its type first (a manifest whose
# checksum was rewritten to match is untrusted input, not a crash).
damaged_case manifest-without-index "layers[1].index must be 1, its place in \"layers\"" \
  "sealed_json \"del m['layers'][1]['index']\""
damaged_case manifest-index-text "layers[0].index must be 0, its place in \"layers\"" \
  "sealed_json \"m['layers'][0]['index'] = '0'\""
damaged_case manifest-tied-forward "layers[0].tied_to must be the index of an earlier layer" \
  "sealed_json \"m['layers'][0]['tied_to'] = 3\""
damaged_case manifest-without-topology "manifest.json: \"topology\" is missing" \
  "sealed_json \"del m['topology']\""
damaged_case no-latest "latest is missing" "rm latest"
damaged_case not-a-manifest "is not a pipetrain checkpoint manifest" "sealed 's|.*|{}|;1!d'"
# A data position per replica (before it was global) that records no micro-batch size.
damaged_case old-position-without-layout "its data position is per replica ({\"drawn\": N}) and it does not record" \
  "sealed_json \"m['data'] = {'drawn': 1}; m.pop('data_global'); m['client_state']['config'].pop('train_micro_batch_size_per_gpu')\""
damaged_case unsealed-manifest "manifest.json: checksum mismatch (manifest.crc32 says" \
  "sed -i 's|\"global_steps\": 1|\"global_steps\": 0|' step_1/manifest.json"
damaged_case unsealed-old-checkpoint "step_1/manifest.crc32 is missing" "rm step_1/manifest.crc32"
damaged_case tensors-beyond-their-file "layers[1].tensors take " \
  "sealed_json \"m['layers'][1]['tensors']['qkv.weight']['shape'] = [48000000, 16]\""
damaged_case manifest-without-files "manifest.json: \"files\" must be an object" \
  "sealed 's|\"files\": {|\"filez\": {|'"
damaged_case negative-steps "manifest.json: \"global_steps\" must be a whole number >= 0" \
  "sealed 's|\"global_steps\": 1|\"global_steps\": -20|'"
# Checkpoints stay inside their folder and hold regular files only.
damaged_case manifest-traversal "'../step_1/layer_001.safetensors' is not a plain file name inside the checkpoint folder" \
  "sealed 's|\"file\": \"layer_001.safetensors\"|\"file\": \"../step_1/layer_001.safetensors\"|'"
damaged_case latest-two-lines "latest: must hold one checkpoint tag on one line" \
  "printf 'step_1\\nstep_0\\n' >latest"
damaged_case latest-traversal "latest: '../good/step_1' is not a plain file name inside the checkpoint folder" \
  "echo ../good/step_1 >latest"
damaged_case symlinked-layer "layer_002.safetensors: a symbolic link; checkpoint files must be the folder's own" \
  "cp step_1/layer_002.safetensors ../elsewhere.safetensors && rm step_1/layer_002.safetensors && ln -s \"\$PWD/../elsewhere.safetensors\" step_1/layer_002.safetensors"
damaged_case fifo-layer "layer_002.safetensors: not a regular file (a folder, FIFO or device?)" \
  "rm step_1/layer_002.safetensors && mkfifo step_1/layer_002.safetensors"

# A save folder holding checkpoints but no `latest` is not taken as empty.
rm -rf "$work/orphan" && cp -r "$work/good" "$work/orphan" && rm "$work/orphan/latest"
# shellcheck disable=SC2046
expect_bad "save folder with checkpoints but no latest" \
  "save: $work/orphan holds checkpoints (the newest step_1) but no latest file" \
  $(train --config "$work/tiny.json" --save "$work/orphan")
check "... whose checkpoint is left as it was" test -d "$work/orphan/step_1" -a ! -e "$work/orphan/latest"

# Export reads the same manifest: a missing index is one line, exit 2, no file.
rm -rf "$work/noindex" && cp -r "$work/good" "$work/noindex"
(cd "$work/noindex" && sealed_json "del m['layers'][2]['index']")
expect_bad "checkpoint manifest-without-index (export)" "layers[2].index must be 2" \
  export --checkpoint "$work/noindex" --out model.safetensors

# A checkpoint's own config is trusted by eval only as far as its files reach.
rm -rf "$work/inflated" && cp -r "$work/good" "$work/inflated"
(cd "$work/inflated" && sealed 's|"d_model": 16|"d_model": 800000|')
expect_bad "checkpoint inflated-config (eval)" \
  "layer 0 (GptEmbedding): its model config gives 217600000 parameters, its files hold 4352" \
  launch -n 2 -- "$pipetrain" eval --checkpoint "$work/inflated"

# Logits with experts split over ranks: a size that does not divide the ranks, a dense model.
expect_bad "logits --expert-parallel not dividing the ranks" \
  "--expert-parallel 3 must divide the job's ranks over --model (2)" \
  launch -n 2 -- "$pipetrain" logits --checkpoint "$work/good" --tokens 1,2 --expert-parallel 3 \
  --out "$work/logits.safetensors"
expect_bad "logits --expert-parallel of a dense model" "expert_parallel 2 splits experts: it needs model.type \"mixtral\"" \
  launch -n 2 -- "$pipetrain" logits --checkpoint "$work/good" --tokens 1,2 --expert-parallel 2 \
  --out "$work/logits.safetensors"

# Resuming with a model of the same shapes but another meaning is refused, the key named.
sed 's|"heads": 2|"heads": 4|' "$work/tiny.json" >"$work/tiny-heads.json"
# shellcheck disable=SC2046
expect_bad "checkpoint resumed with other heads" "model.heads 4 contradicts the checkpoint in $work/good (2)" \
  $(train --config "$work/tiny-heads.json" --load "$work/good")
sed 's|"layers": 2|"layers": 2, "activation": "gelu_tanh"|' "$work/tiny.json" >"$work/tiny-tanh.json"
# shellcheck disable=SC2046
expect_bad "checkpoint resumed with another activation" "model.activation \"gelu_tanh\" contradicts the checkpoint" \
  $(train --config "$work/tiny-tanh.json" --load "$work/good")

# 4. Command lines.
expect_bad "cli: no sub-command" "subcommand" 
expect_bad "cli: unknown sub-command" "unknown command 'frobnicate'" frobnicate
expect_bad "cli: train without --config" "--config is required" train
expect_bad "cli: missing config file" "config file missing.json cannot be read" launch -n 2 -- "$pipetrain" train --config missing.json
expect_bad "cli: --pipe not a number" "--pipe" train --config "$work/tiny.json" --pipe two
expect_bad "cli: an unknown option, in every rank" "The following argument was not expected: --bogus" \
  $(train --config "$work/tiny.json" --bogus)
expect_bad "cli: --save not UTF-8" "--save: not valid UTF-8" \
  launch -n 2 -- "$pipetrain" train --config "$work/tiny.json" --save $'caf\xe9'

expect_bad "cli: --micro-batches zero" "gradient_accumulation_steps must be at least 1, got 0" \
  launch -n 2 -- "$pipetrain" train --config "$work/tiny.json" --micro-batches 0
expect_bad "cli: launch zero ranks" "-n must be at least 1, got 0" launch -n 0 -- true
expect_bad "cli: launch a missing program" "program no-such-program not found" launch -n 2 -- no-such-program
expect_bad "cli: schedule zero stages" "stages must be at least 1, got 0" schedule -m 2 -p 0
expect_bad "cli: simulate unknown kind" "unknown schedule kind 'pipedream'" simulate --kind pipedream -m 2 -p 2
mkdir -p "$work/a-folder"
expect_bad "cli: export onto a folder" "--out: $work/a-folder is a folder; name the file to write" \
  export --checkpoint "$work/good" --out "$work/a-folder"
# Places the write checks pass (root may write anywhere) that still refuse a folder.
expect_bad "cli: export --format hf into a folder that cannot be made" "--out /proc/pipetrain-x: cannot be" \
  export --checkpoint "$work/good" --format hf --out /proc/pipetrain-x
expect_bad "cli: train --save into a folder that cannot be made" "/proc/pipetrain-x" \
  launch -n 2 -- "$pipetrain" train --config "$work/tiny.json" --save /proc/pipetrain-x
cores=$(getconf _NPROCESSORS_ONLN)
expect_bad "cli: calibrate with more ranks than cores" "calibrate runs one rank per core: this machine has $cores cores, the job $((cores + 1)) rank(s)" \
  launch -n $((cores + 1)) -- "$pipetrain" calibrate --out cluster.json
if ((cores > 1)); then
  expect_bad "cli: calibrate with one rank" "calibrate runs one rank per core: this machine has $cores cores, the job 1 rank(s)" \
    launch -n 1 -- "$pipetrain" calibrate --out cluster.json
fi
expect_bad "cli: export a missing checkpoint" "no checkpoint to load in /no/such/dir" export --checkpoint /no/such/dir --out model.safetensors
expect_bad "cli: generate from a missing checkpoint" "no checkpoint to load in /no/such/dir" \
  launch -n 1 -- "$pipetrain" generate --checkpoint /no/such/dir
printf '{"pipeline": %s1%s}' "$(printf '[%.0s' {1..100000})" "$(printf ']%.0s' {1..100000})" >"$work/deep.json"
expect_bad "cli: a config nested 100000 deep" "config file $work/deep.json: nested deeper than 64 levels" \
  launch -n 2 -- "$pipetrain" train --config "$work/deep.json"
mkfifo "$work/fifo.json"
expect_bad "cli: a config that is a FIFO" "fifo.json: not a regular file (a folder, FIFO or device?)" \
  launch -n 2 -- "$pipetrain" train --config "$work/fifo.json"
expect_bad "cli: generate with an empty prompt" "--prompt is empty: sampling needs at least one byte to start" \
  launch -n 1 -- "$pipetrain" generate --checkpoint /no/such/dir --prompt ""
expect_bad "cli: generate no new tokens" "--tokens must be in 1..1048576, got 0" \
  launch -n 1 -- "$pipetrain" generate --checkpoint /no/such/dir --tokens 0
expect_bad "cli: generate 2^40 new tokens" "--tokens must be in 1..1048576, got 1099511627776" \
  launch -n 1 -- "$pipetrain" generate --checkpoint /no/such/dir --tokens 1099511627776
expect_bad "cli: generate with 10^6 prompts in flight" "--max-in-flight must be in 1..1024, got 1000000" \
  launch -n 1 -- "$pipetrain" generate --checkpoint /no/such/dir --max-in-flight 1000000
expect_bad "cli: generate with a NaN temperature" \
  "--temperature must be a finite number at least 0 (0: greedy), got nan" \
  launch -n 1 -- "$pipetrain" generate --checkpoint /no/such/dir --temperature nan
printf '{"prompt": "The ", "max_new_tokens": 0}\n' >"$work/zero-tokens.txt"
expect_bad "cli: a prompts file line asking for no new tokens" \
  "$work/zero-tokens.txt:1: \"max_new_tokens\" must be one of prompt (a string), ids (token ids), max_new_tokens (an integer in 1..1048576)" \
  launch -n 1 -- "$pipetrain" generate --checkpoint /no/such/dir --prompts "$work/zero-tokens.txt"
expect_bad "cli: simulate with a NaN latency" "latency, bandwidth and message bytes must be finite numbers >= 0" \
  simulate --kind train -m 4 -p 2 --latency nan
expect_bad "cli: simulate with an infinite forward cost" "forward cost must be a finite number >= 0, got inf" \
  simulate --kind train -m 4 -p 2 --forward inf
: >"$work/no-prompts.txt"
expect_bad "cli: generate from an empty prompts file" "$work/no-prompts.txt: no prompts in it (one per line)" \
  launch -n 1 -- "$pipetrain" generate --checkpoint /no/such/dir --prompts "$work/no-prompts.txt"
expect_bad "cli: generate with a negative temperature" \
  "--temperature must be a finite number at least 0 (0: greedy), got -1" \
  launch -n 1 -- "$pipetrain" generate --checkpoint /no/such/dir --temperature -1
expect_bad "cli: generate with top-k -1" "--top-k must be at least 0 (0: all tokens), got -1" \
  launch -n 1 -- "$pipetrain" generate --checkpoint /no/such/dir --top-k -1
expect_bad "cli: generate with top-p 0" "--top-p must be in (0, 1], got 0" \
  launch -n 1 -- "$pipetrain" generate --checkpoint /no/such/dir --top-p 0
expect_bad "cli: generate with a stop token outside the vocabulary" "--stop 300 is outside the vocabulary of 256" \
  launch -n 1 -- "$pipetrain" generate --checkpoint "$work/good" --stop 300
printf 'A plain prompt\n{"prompt": "The ", "colour": 3}\n' >"$work/bad-prompts.txt"
expect_bad "cli: a prompts file line with an unknown key" \
  "$work/bad-prompts.txt:2: \"colour\" must be one of prompt (a string), ids (token ids), max_new_tokens" \
  launch -n 1 -- "$pipetrain" generate --checkpoint /no/such/dir --prompts "$work/bad-prompts.txt"
expect_bad "cli: a prompt longer than the model's context" \
  "prompt 'twenty bytes, really' is 20 tokens, longer than the model's context of 16" \
  launch -n 1 -- "$pipetrain" generate --checkpoint "$work/good" --prompt "twenty bytes, really"

# A second job saving into the folder a running job saves into; once that job ends (here
# stopped by SIGTERM, which saves its step), its claim is gone and the next job may save
# there (--overwrite: the folder holds the stopped job's checkpoint).
"$pipetrain" launch -n 2 -- "$pipetrain" train --config "$work/tiny.json" --train-iters 100000 \
  --eval-interval 0 --save "$work/held" >"$work/holder.out" 2>&1 &
holder=$!
for _ in $(seq 150); do
  grep -qs pid "$work/held/.pipetrain.lock" && break
  sleep 0.2
done
expect_bad "cli: --save into a folder another job is saving into" \
  "$work/held is in use by another job (host " $(train --config "$work/tiny.json" --save "$work/held")
kill -TERM "$holder"
wait "$holder" 2>/dev/null
(cd "$work" && "$pipetrain" launch -n 2 -- "$pipetrain" train --config tiny.json --train-iters 1 \
  --save held --overwrite >/dev/null 2>&1)
check "cli: after the holder ended, the folder takes a new job (exit $?)" test $? -eq 0

# Asking for a GPU where this build sees none (on a machine with one, the GPU tests run).
if "$pipetrain" devices | grep -q '^visible GPUs: 0'; then
  expect_bad "cli: --device cuda without a GPU" "device \"cuda\": " \
    launch -n 2 -- "$pipetrain" train --config "$work/tiny.json" --device cuda
fi

echo "$cases bad inputs, the slowest ended after $slowest ms"
check "the corpus holds at least 40 bad inputs ($cases)" test "$cases" -ge 40
finish
