#!/usr/bin/env bash
# Checkpoints across process restarts: bitwise resume, resharding, a rank killed during a
# save, and every kind of damaged checkpoint.
# Usage: checkpoint_test.sh PATH/TO/pipetrain PATH/TO/checkpoint_program PATH/TO/python
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$1
program=$2
python=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PIPETRAIN_COMM_TIMEOUT=60
run() { # ranks, output file, program arguments...
  local ranks=$1 out=$2
  shift 2
  "$pipetrain" launch -n "$ranks" -- "$program" "$@" >"$out" 2>&1
}

losses() { grep '^loss ' "$1"; }
digests() { grep '^digest ' "$1" | sort; }

# 1. Bitwise resume: 3 + 3 steps across a restart equal 6 uninterrupted (pipe 2 x data 2,
#    dropout on, so random states must carry over too).
run 4 "$work/full.out" --pipe 2 --micro-batches 2 --steps 6 --dropout 0.1
run 4 "$work/first.out" --pipe 2 --micro-batches 2 --steps 3 --dropout 0.1 --save "$work/bitwise"
run 4 "$work/second.out" --pipe 2 --micro-batches 2 --steps 3 --dropout 0.1 --load "$work/bitwise"
check "resume: the second half reports steps 4-6" test "$(losses "$work/second.out" | wc -l)" -eq 3
check "resume: losses equal the uninterrupted run bit for bit" \
  test "$(losses "$work/full.out" | tail -3)" = "$(losses "$work/second.out")"
check "resume: every rank's weights and optimizer state equal bit for bit" \
  test "$(digests "$work/full.out")" = "$(digests "$work/second.out")"
check "resume: the client state comes back" grep -q '^loaded step 3 ({"note":"checkpoint_program"})' "$work/second.out"
check "save writes latest" test "$(cat "$work/bitwise/latest")" = "step_3"

# 2. Resharding 4x1 -> 2x2 -> 1x1 keeps the loss curve (same global batch each step).
run 4 "$work/reference.out" --pipe 4 --micro-batches 4 --steps 6
run 4 "$work/r1.out" --pipe 4 --micro-batches 4 --steps 2 --save "$work/reshard"
run 4 "$work/r2.out" --pipe 2 --micro-batches 2 --steps 2 --load "$work/reshard" --save "$work/reshard"
run 1 "$work/r3.out" --pipe 1 --micro-batches 4 --steps 2 --load "$work/reshard"
cat "$work/r1.out" "$work/r2.out" "$work/r3.out" | losses /dev/stdin >"$work/resharded.losses"
check "reshard: six steps ran" test "$(wc -l <"$work/resharded.losses")" -eq 6
paste "$work/resharded.losses" <(losses "$work/reference.out") >"$work/pairs"
check "reshard: each loss within 1e-5 relative of the unsharded run ($(cut -f1,2 -d' ' "$work/pairs" | tr '\n' ' '))" \
  awk '{ d = $3 - $6; if (d < 0) d = -d; if (d > 1e-5 * $6) bad = 1 } END { exit bad }' "$work/pairs"

# 2b. Tensor parallelism: a checkpoint saved at pipe 2 x data 1 x model 2 holds whole
#     layers and loads at (2,2,1) and (1,1,1) (two steps there, so the AdamW state cut from
#     the whole tensors counts too); one saved without tensor parallelism loads at (1,2,2).
#     Every loss matches the unsharded run.
run 4 "$work/t1.out" --pipe 2 --model 2 --micro-batches 4 --steps 2 --save "$work/tp"
run 4 "$work/t2.out" --pipe 2 --micro-batches 2 --steps 1 --load "$work/tp"
run 1 "$work/t3.out" --pipe 1 --micro-batches 4 --steps 2 --load "$work/tp"
run 4 "$work/t4.out" --pipe 1 --model 2 --micro-batches 2 --steps 1 --load "$work/reshard"
tr -d '\n ' <"$work/tp/step_2/manifest.json" >"$work/tp.manifest"
check "tensor parallel: the checkpoint stores whole layers (qkv.weight 48 x 16)" \
  grep -q '"qkv.weight":{"dtype":"Float","shape":\[48,16\]}' "$work/tp.manifest"
cat "$work/t1.out" "$work/t2.out" "$work/t3.out" "$work/t4.out" | losses /dev/stdin >"$work/tp.losses"
losses "$work/reference.out" | sed -n '1p;2p;3p;3p;4p;5p' >"$work/tp.expected"
check "tensor parallel: six steps ran" test "$(wc -l <"$work/tp.losses")" -eq 6
paste "$work/tp.losses" "$work/tp.expected" >"$work/tp.pairs"
check "tensor parallel: (2,1,2) steps 1-2, then step 3 at (2,2,1), steps 3-4 at (1,1,1), step 5 at (1,2,2) within 1e-5 ($(cut -f1,2 -d' ' "$work/tp.pairs" | tr '\n' ' '))" \
  awk '{ if ($2 != $5) bad = 1; d = $3 - $6; if (d < 0) d = -d; if (d > 1e-5 * $6) bad = 1 } END { exit bad }' "$work/tp.pairs"

# 2b'. ZeRO: a checkpoint saved at pipe 2 x data 2 with stage 1 holds whole layers and
#      optimizer state: it resumes at pipe 1 x data 4 with stage 2, that one at pipe 2 x
#      data 1 without ZeRO; every loss within 1e-5 of the unsharded run. At one layout a
#      ZeRO resume is bitwise (losses, masters and joined optimizer state).
run 4 "$work/z1.out" --pipe 2 --micro-batches 2 --steps 2 --zero 1 --save "$work/zero"
run 4 "$work/z2.out" --pipe 1 --micro-batches 1 --steps 2 --zero 2 --load "$work/zero" --save "$work/zero"
run 2 "$work/z3.out" --pipe 2 --micro-batches 4 --steps 2 --zero 0 --load "$work/zero"
cat "$work/z1.out" "$work/z2.out" "$work/z3.out" | losses /dev/stdin >"$work/zero.losses"
# Tensor parallelism under ZeRO saves and loads (shards joined over both groups), and a
# checkpoint saved without ZeRO (step 4 of the resharding run) loads into ZeRO.
run 4 "$work/zt.out" --pipe 1 --model 2 --micro-batches 2 --steps 2 --zero 1 --save "$work/ztp"
run 4 "$work/zt2.out" --pipe 1 --model 2 --micro-batches 2 --steps 1 --zero 2 --load "$work/ztp"
run 4 "$work/zl.out" --pipe 2 --micro-batches 2 --steps 1 --zero 1 --load "$work/reshard"
cat "$work/zt.out" "$work/zt2.out" "$work/zl.out" | losses /dev/stdin >"$work/zt.losses"
losses "$work/reference.out" | sed -n '1p;2p;3p;5p' >"$work/zt.expected"
paste "$work/zt.losses" "$work/zt.expected" >"$work/zt.pairs"
check "zero with tensor parallelism: (1,2,2) stage 1 steps 1-2, stage 2 step 3; a stage-0 checkpoint into stage 1, step 5; within 1e-5 ($(cut -f1,2 -d' ' "$work/zt.pairs" | tr '\n' ' '))" \
  awk '{ if ($2 != $5) bad = 1; d = $3 - $6; if (d < 0) d = -d; if (d > 1e-5 * $6) bad = 1 } END { exit (bad || NR != 4) }' "$work/zt.pairs"
check "zero: six steps ran" test "$(wc -l <"$work/zero.losses")" -eq 6
paste "$work/zero.losses" <(losses "$work/reference.out") >"$work/zero.pairs"
check "zero: (2,2) stage 1, then (1,4) stage 2, then (2,1) stage 0 within 1e-5 ($(cut -f1,2 -d' ' "$work/zero.pairs" | tr '\n' ' '))" \
  awk '{ if ($2 != $5) bad = 1; d = $3 - $6; if (d < 0) d = -d; if (d > 1e-5 * $6) bad = 1 } END { exit bad }' "$work/zero.pairs"
run 4 "$work/zfull.out" --pipe 2 --micro-batches 2 --steps 4 --dropout 0.1 --zero 1
run 4 "$work/za.out" --pipe 2 --micro-batches 2 --steps 2 --dropout 0.1 --zero 1 --save "$work/zbit"
run 4 "$work/zb.out" --pipe 2 --micro-batches 2 --steps 2 --dropout 0.1 --zero 1 --load "$work/zbit"
check "zero resume: losses equal the uninterrupted run bit for bit" \
  test "$(losses "$work/zfull.out" | tail -2)" = "$(losses "$work/zb.out")" -a -n "$(losses "$work/zb.out")"
check "zero resume: every rank's masters and optimizer state equal bit for bit" \
  test "$(digests "$work/zfull.out")" = "$(digests "$work/zb.out")" -a "$(digests "$work/zb.out" | wc -l)" -eq 4

# 2b''. ZeRO stage 3 (parameters sharded): saved at (1,4), resumed without ZeRO at (1,1),
#      then at stage 3 again at (2,2); every loss within 1e-5 of the unsharded run. The
#      state itself survives 3 -> 0 -> 3 bit for bit, and at one layout a stage-3 resume is
#      bitwise (losses, masters and joined optimizer state).
run 4 "$work/z31.out" --pipe 1 --micro-batches 1 --steps 2 --zero 3 --save "$work/zero3"
# The state survives 3 -> 0 -> 3 across data sizes bit for bit: loaded at (1,1) stage 0 and
# saved again without a step, then loaded at (1,4) stage 3, its masters and optimizer state
# are those the stage-3 run saved, and two more steps there equal two from the original.
run 1 "$work/z3r0.out" --pipe 1 --micro-batches 4 --steps 0 --zero 0 --load "$work/zero3" --save "$work/zero3-round"
run 4 "$work/z3r1.out" --pipe 1 --micro-batches 1 --steps 0 --zero 3 --load "$work/zero3-round"
check "zero 3 -> 0 -> 3: the state comes back bit for bit" \
  test "$(digests "$work/z31.out" | cut -d' ' -f3 | sort -u)" = "$(digests "$work/z3r1.out" | cut -d' ' -f3 | sort -u)" -a \
  "$(digests "$work/z3r0.out" | cut -d' ' -f3)" = "$(digests "$work/z31.out" | cut -d' ' -f3 | sort -u)" -a \
  "$(digests "$work/z3r1.out" | wc -l)" -eq 4
run 4 "$work/z3r2.out" --pipe 1 --micro-batches 1 --steps 2 --zero 3 --load "$work/zero3-round"
run 4 "$work/z3r3.out" --pipe 1 --micro-batches 1 --steps 2 --zero 3 --load "$work/zero3"
check "zero 3 -> 0 -> 3: two more steps equal two from the original checkpoint bit for bit" \
  test -n "$(losses "$work/z3r2.out")" -a "$(losses "$work/z3r2.out")" = "$(losses "$work/z3r3.out")"
run 1 "$work/z32.out" --pipe 1 --micro-batches 4 --steps 2 --zero 0 --load "$work/zero3" --save "$work/zero3"
run 4 "$work/z33.out" --pipe 2 --micro-batches 2 --steps 2 --zero 3 --load "$work/zero3"
cat "$work/z31.out" "$work/z32.out" "$work/z33.out" | losses /dev/stdin >"$work/zero3.losses"
check "zero 3: six steps ran" test "$(wc -l <"$work/zero3.losses")" -eq 6
paste "$work/zero3.losses" <(losses "$work/reference.out") >"$work/zero3.pairs"
check "zero 3: (1,4) stage 3, then (1,1) stage 0, then (2,2) stage 3 within 1e-5 ($(cut -f1,2 -d' ' "$work/zero3.pairs" | tr '\n' ' '))" \
  awk '{ if ($2 != $5) bad = 1; d = $3 - $6; if (d < 0) d = -d; if (d > 1e-5 * $6) bad = 1 } END { exit bad }' "$work/zero3.pairs"
run 4 "$work/z3full.out" --pipe 2 --micro-batches 2 --steps 4 --dropout 0.1 --zero 3
run 4 "$work/z3a.out" --pipe 2 --micro-batches 2 --steps 2 --dropout 0.1 --zero 3 --save "$work/z3bit"
run 4 "$work/z3b.out" --pipe 2 --micro-batches 2 --steps 2 --dropout 0.1 --zero 3 --load "$work/z3bit"
check "zero 3 resume: losses equal the uninterrupted run bit for bit" \
  test "$(losses "$work/z3full.out" | tail -2)" = "$(losses "$work/z3b.out")" -a -n "$(losses "$work/z3b.out")"
check "zero 3 resume: every rank's masters and optimizer state equal bit for bit" \
  test "$(digests "$work/z3full.out")" = "$(digests "$work/z3b.out")" -a "$(digests "$work/z3b.out" | wc -l)" -eq 4

# 2c. Bitwise resume at pipe 2 x model 2 with dropout: 2 + 2 steps equal 4 uninterrupted.
run 4 "$work/tpfull.out" --pipe 2 --model 2 --micro-batches 2 --steps 4 --dropout 0.1
run 4 "$work/tpa.out" --pipe 2 --model 2 --micro-batches 2 --steps 2 --dropout 0.1 --save "$work/tpbit"
run 4 "$work/tpb.out" --pipe 2 --model 2 --micro-batches 2 --steps 2 --dropout 0.1 --load "$work/tpbit"
check "tensor parallel resume: losses equal the uninterrupted run bit for bit" \
  test "$(losses "$work/tpfull.out" | tail -2)" = "$(losses "$work/tpb.out")" -a -n "$(losses "$work/tpb.out")"
check "tensor parallel resume: every rank's shards and optimizer state equal bit for bit" \
  test "$(digests "$work/tpfull.out")" = "$(digests "$work/tpb.out")"

# 3. A rank killed (SIGKILL) while saving leaves the previous checkpoint loadable.
run 2 "$work/k1.out" --pipe 2 --micro-batches 4 --steps 1 --save "$work/killed"
PIPETRAIN_FAULT_KILL_IN_SAVE=1 run 2 "$work/k2.out" --pipe 2 --micro-batches 4 --steps 1 --load "$work/killed" --save "$work/killed"
check "kill: the job with the killed rank failed" test $? -ne 0
check "kill: latest still names the first save" test "$(cat "$work/killed/latest")" = "step_1"
run 2 "$work/k3.out" --pipe 2 --micro-batches 4 --steps 1 --load "$work/killed"
check "kill: the previous checkpoint loads and trains" grep -q '^loss 2 ' "$work/k3.out"
# The same tag saved again (a rerun into the same folder) and killed mid-save: the tag that
# `latest` names is never touched before the new one is complete.
run 2 "$work/rt1.out" --pipe 2 --micro-batches 4 --steps 1 --save "$work/again"
cp "$work/again/step_1/manifest.json" "$work/again.manifest"
PIPETRAIN_FAULT_KILL_IN_SAVE=1 run 2 "$work/rt2.out" --pipe 2 --micro-batches 4 --steps 1 --dropout 0.1 --save "$work/again"
check "kill in a repeated tag: the job failed" test $? -ne 0
check "kill in a repeated tag: step_1 is the first save, unchanged" cmp -s "$work/again.manifest" "$work/again/step_1/manifest.json"
run 2 "$work/rt3.out" --pipe 2 --micro-batches 4 --steps 1 --load "$work/again"
check "kill in a repeated tag: it loads and trains" grep -q '^loss 2 ' "$work/rt3.out"
run 2 "$work/rt4.out" --pipe 2 --micro-batches 4 --steps 1 --dropout 0.1 --save "$work/again"
check "a repeated tag saved whole replaces the old one, no staging folder left" \
  test "$(ls -A "$work/again")" = "$(printf 'latest\nstep_1')" -a -n "$(cmp "$work/again.manifest" "$work/again/step_1/manifest.json")"

# 4. Python reads the layer files and the exported model.
"$pipetrain" export --checkpoint "$work/bitwise" --out "$work/model.safetensors" >/dev/null
check "export writes one file" test -s "$work/model.safetensors"
"$python" - "$work/bitwise/step_3" "$work/model.safetensors" >"$work/python.out" 2>&1 <<'PY'
import sys
from safetensors.torch import load_file
layer = load_file(sys.argv[1] + "/layer_001.safetensors")
model = load_file(sys.argv[2])
assert layer["qkv.weight"].shape == (48, 16), layer["qkv.weight"].shape
assert (model["layers.1.qkv.weight"] == layer["qkv.weight"]).all()
assert "layers.0.tokens.weight" in model and not any(k.startswith("layers.5.") for k in model)
print("python ok", len(model), "tensors")
PY
check "python: safetensors reads the checkpoint ($(tail -1 "$work/python.out"))" grep -q "^python ok" "$work/python.out"

# 5. Damaged checkpoints: exit 2, one message naming the file, weights untouched.
damaged() { # description, expected message pattern, command to damage a fresh copy
  rm -rf "$work/damaged" && cp -r "$work/bitwise" "$work/damaged"
  (cd "$work/damaged" && eval "$3")
  run 4 "$work/damaged.out" --pipe 2 --micro-batches 2 --steps 1 --load "$work/damaged"
  local rc=$?
  check "$1: exit 2 (got $rc)" test "$rc" -eq 2
  check "$1: says '$2'" grep -qE "$2" "$work/damaged.out"
  check "$1: no step ran" test "$(losses "$work/damaged.out" | wc -l)" -eq 0
}
damaged "truncated file" "layer_002.safetensors: [0-9]+ bytes, the manifest says [0-9]+ \(truncated" \
  'truncate -s 100 step_3/layer_002.safetensors'
damaged "flipped byte" "layer_001.safetensors: checksum mismatch \(manifest [0-9a-f]+, file [0-9a-f]+\)" \
  'printf "\x01" | dd of=step_3/layer_001.safetensors bs=1 seek=300 conv=notrunc 2>/dev/null'
damaged "missing file" "optimizer_003.safetensors: cannot be read" 'rm step_3/optimizer_003.safetensors'
damaged "missing manifest" "manifest.json is missing \(not a checkpoint, or its save was interrupted\)" 'rm step_3/manifest.json'
damaged "manifest edited, not resealed" "manifest.json: checksum mismatch \(manifest.crc32 says '[0-9a-f]{8}', the file's is [0-9a-f]{8}\): damaged, or edited by hand" \
  'sed -i "s|\"global_steps\": 3|\"global_steps\": 2|" step_3/manifest.json'
damaged "missing manifest checksum" "manifest.crc32 is missing" 'rm step_3/manifest.crc32'
damaged "no latest" "no checkpoint to load in .*latest is missing" 'rm latest'
damaged "another model" "the checkpoint holds 7 layers, this model has 6" \
  'python3 -c "import json;m=json.load(open(\"step_3/manifest.json\"));m[\"layers\"].append(dict(m[\"layers\"][-1], index=len(m[\"layers\"])));json.dump(m,open(\"step_3/manifest.json\",\"w\"))" && python3 "$here/reseal_manifest.py" step_3'
damaged "other shapes" "layer_001.safetensors: tensor 'qkv.weight' is Float \[48, 8\], the model expects Float \[48, 16\]" \
  '"$python" "$here/replace_layer.py" step_3 layer_001.safetensors'
damaged "optimizer state of another shape" "optimizer_001.safetensors: tensor 'qkv.weight/exp_avg' is \[48, 8\], which does not fit parameter 'qkv.weight' \[48, 16\]" \
  '"$python" "$here/replace_layer.py" step_3 optimizer_001.safetensors qkv.weight/exp_avg'

finish
