#!/usr/bin/env bash
# The data is global: for token windows of text, fine-tuning examples with loss masks and
# packed examples, fresh runs at data 1, 2 and 4 with one global batch train on the same
# samples (per-step losses within 1e-5), and a checkpoint saved at pipe 2 x data 1 resumes at
# pipe 1 x data 2 and pipe 2 x data 2, and back at data 1 from data 2, on the global batches
# an unbroken run reads next: every later loss and the final weights equal its own.
# Usage: global_data_test.sh PATH/TO/pipetrain PATH/TO/python
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$(realpath "$1")
python=$2
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
export PIPETRAIN_COMM_TIMEOUT=60

# Examples: write_indexed.py's documents, every third token trained on (its loss mask).
python3 "$source_dir/tests/data/write_indexed.py" examples uint16 120
"$python" - <<'PY'
import os
tokens = os.path.getsize("examples.bin") // 2
open("examples.mask", "wb").write(bytes(int(t % 3 == 0) for t in range(tokens)))
PY
mkdir text && cp /usr/share/common-licenses/Apache-2.0 /usr/share/common-licenses/GPL-2 text/

# KIND-NAME.json: a LLaMA (no dropout, so every layout draws nothing else), global batch 8 of
# micro-batches of 2, a checkpoint every SAVE_INTERVAL steps, metrics in KIND-NAME.jsonl.
write_config() { # kind, name, save_interval
  "$python" - "$@" <<'PY'
import json, sys
kind, name, save_interval = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = {"text": {"type": "text", "paths": ["text"]},
        "examples": {"type": "indexed", "paths": ["examples"]},
        "packed": {"type": "indexed", "paths": ["examples"], "pack": True}}[kind]
json.dump({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
           "model": {"type": "llama", "vocab_size": 1000, "context": 24, "d_model": 16,
                     "heads": 2, "num_key_value_heads": 1, "intermediate_size": 32,
                     "layers": 2},
           "data": data, "train_iters": 4, "save_interval": save_interval, "eval_interval": 0,
           "log": {"metrics": f"{kind}-{name}.jsonl"}, "sample": {"tokens": 0}},
          open(f"{kind}-{name}.json", "w"))
PY
}

train() { # kind, name, ranks, save interval, arguments...
  local kind=$1 name=$2 ranks=$3
  write_config "$kind" "$name" "$4"
  shift 4
  "$pipetrain" launch -n "$ranks" -- "$pipetrain" train --config "$kind-$name.json" "$@" \
    >"$kind-$name.out" 2>&1 ||
    { echo "$kind $name failed:"; tail -5 "$kind-$name.out"; }
}

# "STEP LOSS" per line from a run's metrics.
losses() { "$python" -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r: print(r["step"], repr(r["loss"]))' "$1"; }

# Whether runs' losses (files of "STEP LOSS") agree step by step within 1e-5 relative with
# the first's steps.
same_losses() { # reference, others...
  local reference=$1
  shift
  for other in "$@"; do
    [ -s "$other" ] || return 1
    join "$reference" "$other" | awk 'NF == 3 { n++; d = $2 - $3; if (d < 0) d = -d;
      if (d > 1e-5 * $2) bad = 1 } END { exit bad || n == 0 }' || return 1
  done
}

# Whether two checkpoints hold the same weights within 1e-5 (relative to each tensor's size).
same_weights() { # checkpoint, checkpoint
  "$python" - "$1" "$2" <<'PY'
import glob, os, sys
from safetensors.numpy import load_file
a, b = sys.argv[1:]
files = sorted(os.path.basename(f) for f in glob.glob(f"{a}/layer_*.safetensors"))
assert files and files == sorted(os.path.basename(f) for f in glob.glob(f"{b}/layer_*.safetensors"))
for f in files:
    x, y = load_file(f"{a}/{f}"), load_file(f"{b}/{f}")
    assert x.keys() == y.keys()
    for k in x:
        d = abs(x[k].astype("float64") - y[k].astype("float64")).max()
        assert d <= 1e-5 * max(1.0, abs(x[k]).max()), (f, k, d)
PY
}

for kind in text examples packed; do
  # Unbroken at pipe 2 x data 1; fresh at data 2 and data 4.
  train "$kind" unbroken 2 2 --pipe 2 --save "$kind-unbroken"
  train "$kind" data2 2 2 --pipe 1
  train "$kind" data4 4 2 --pipe 1
  for run in unbroken data2 data4; do losses "$kind-$run.jsonl" >"$kind-$run.losses"; done
  check "$kind: 4 steps unbroken ($(tr '\n' ' ' <"$kind-unbroken.losses"))" \
    test "$(wc -l <"$kind-unbroken.losses")" -eq 4
  check "$kind: fresh at data 1, 2 and 4 give the same losses ($(cut -d' ' -f2 "$kind-data4.losses" | tr '\n' ' '))" \
    same_losses "$kind-unbroken.losses" "$kind-data2.losses" "$kind-data4.losses"

  # Saved at pipe 2 x data 1 (step 2), resumed at pipe 1 x data 2 to step 3 (saved there),
  # at pipe 2 x data 2 to step 4, and from data 2 back at pipe 2 x data 1 to step 4.
  train "$kind" first 2 2 --pipe 2 --train-iters 2 --save "$kind-first"
  train "$kind" to-data2 2 3 --pipe 1 --train-iters 3 --load "$kind-first" \
    --save "$kind-data2-ckpt"
  train "$kind" to-pipe2-data2 4 2 --pipe 2 --load "$kind-first" --save "$kind-pipe2-data2-ckpt"
  train "$kind" back-to-data1 2 2 --pipe 2 --load "$kind-data2-ckpt" --save "$kind-back-ckpt"
  for run in to-data2 to-pipe2-data2 back-to-data1; do losses "$kind-$run.jsonl" >"$kind-$run.losses"; done
  check "$kind: the resumes ran steps 3, 3-4 and 4" test \
    "$(cut -d' ' -f1 "$kind-to-data2.losses" "$kind-to-pipe2-data2.losses" "$kind-back-to-data1.losses" | tr '\n' ' ')" = "3 3 4 4 "
  check "$kind: resumed at pipe 1 x data 2, pipe 2 x data 2 and back at data 1, every loss is the unbroken run's" \
    same_losses "$kind-unbroken.losses" "$kind-to-data2.losses" "$kind-to-pipe2-data2.losses" \
    "$kind-back-to-data1.losses"
  check "$kind: the final weights are the unbroken run's (resumed at pipe 2 x data 2)" \
    same_weights "$kind-unbroken/step_4" "$kind-pipe2-data2-ckpt/step_4"
  check "$kind: ... and back at data 1 from data 2" \
    same_weights "$kind-unbroken/step_4" "$kind-back-ckpt/step_4"
  position=$("$python" -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["data"]))' \
    "$kind-first/step_2/manifest.json")
  check "$kind: the position is kept in global samples ($position)" test "$position" = '{"samples": 16}'

done
finish
