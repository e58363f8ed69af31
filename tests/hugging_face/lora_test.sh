#!/usr/bin/env bash
# LoRA fine-tuning of an imported transformers LLaMA on chat data: adapters on every
# projection, the rest frozen; pipe 2 x data 2 with ZeRO 2, model 2 x data 2 and data 2 with
# ZeRO 3 equal one process (losses, gradient norms, validation losses, adapters, 1e-5); the base bitwise
# unchanged; optimizer state only for the adapters; the job run again resumes exactly; the peft export loaded by peft and the merged export by transformers give
# pipetrain's logits (1e-5).
# Usage: lora_test.sh PATH/TO/pipetrain PYTHON (with torch, transformers, peft, safetensors)
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

"$python" "$here/chat_fixture.py" model chat.jsonl 2>/dev/null
"$source_dir/scripts/prepare-data" --chat --tokenizer model --out data/chat --context 64 \
  chat.jsonl >prepare.out 2>&1
"$pipetrain" import --hf model --out imported >import.out 2>&1
check "a tiny LLaMA imported, chat data prepared" grep -q "into imported/step_0" import.out

cat >base.json <<JSON
{
  "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
  "optimizer": {"type": "SGD", "params": {"lr": 0.5}},
  "data": {"type": "indexed", "paths": ["$work/data/chat"], "validation_fraction": 0.2},
  "model": {"context": 64},
  "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]},
  "train_iters": 4, "eval_interval": 2, "eval_iters": 1,
  "sample": {"tokens": 0},
  "log": {"metrics": "NAME.jsonl"},
  "load": "imported", "save": "NAME"
}
JSON
# shellcheck source=tests/hugging_face/fine_tune.sh
source "$here/fine_tune.sh"
train one 1 's/^//'
check "the job line says what trains ($(grep '^lora:' one.out))" \
  grep -qE '^lora: rank 4, alpha 8 on q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj: 28 linears; [0-9.]+ M of [0-9.]+ M parameters trained' one.out
check "the adapters start fresh on the imported base" grep -q "^lora: imported/step_0 holds no adapters" one.out
half='s/"gradient_accumulation_steps": 4/"gradient_accumulation_steps": 2/'
train pipe-data 4 "$half; s/\"train_iters\"/\"pipeline\": {\"stages\": 2}, \"zero_optimization\": {\"stage\": 2}, \"train_iters\"/"
train model-data 4 "$half; s/\"train_iters\"/\"model_parallel\": 2, \"train_iters\"/"
# ZeRO 3: the adapters start from their masters (the parameters hold nothing between steps).
train zero3 2 "$half; s/\"train_iters\"/\"zero_optimization\": {\"stage\": 3}, \"train_iters\"/"
for layout in pipe-data model-data zero3; do
  check "$layout equals one process: losses, gradient norms, validation losses, every tensor" \
    "$python" "$here/same_run.py" one "$layout" 4
done
check "the base is bitwise the imported one, the adapters trained" "$python" - <<'PY'
import glob, os, sys
import safetensors.torch as st
moved = 0
for path in sorted(glob.glob("one/step_4/layer_*.safetensors")):
    after = st.load_file(path)
    before = st.load_file("imported/step_0/" + os.path.basename(path))
    for name, tensor in after.items():
        if name.endswith(("lora_A", "lora_B")):
            moved += name.endswith("lora_B") and tensor.abs().max().item() > 0
        elif not __import__("torch").equal(tensor, before[name]):
            sys.exit(f"{path}: {name} changed")
    if set(before) - set(after):
        sys.exit(f"{path}: lost {set(before) - set(after)}")
sys.exit(0 if moved == 28 else f"{moved} of 28 lora_B moved")
PY
check "optimizer state only for the adapters: no optimizer file holds a base tensor" "$python" - <<'PY'
import glob, sys
import safetensors.torch as st
for path in glob.glob("one/step_4/optimizer_*.safetensors"):
    for name in st.load_file(path):
        if name.split("/")[0].rsplit(".", 1)[-1] not in ("lora_A", "lora_B"):
            sys.exit(f"{path}: {name}")
PY

# At pipe 2: two steps (saved), then the same job again: it resumes from its own newest checkpoint,
# not from the base it started on (adapters, their optimizer state, the frozen base), and
# ends as the unbroken run.
sed 's/NAME/resumed/g; s/"train_iters"/"pipeline": {"stages": 2}, "save_interval": 2, "train_iters"/' base.json >resumed.json
PIPETRAIN_FAULT="rank=0,step=3,instruction=ForwardPass,action=exit" "$pipetrain" launch -n 2 -- \
  "$pipetrain" train --config resumed.json >resumed-1.out 2>&1
check "the first run stops after saving step 2 ($(tail -1 resumed-1.out))" \
  test "$(cat resumed/latest 2>/dev/null)" = step_2
"$pipetrain" launch -n 2 -- "$pipetrain" train --config resumed.json >resumed-2.out 2>&1
check "the same command resumes from its own checkpoint ($(grep -m1 '^resuming' resumed-2.out))" \
  grep -q "^resuming from the newest checkpoint in resumed (step_2), not imported" resumed-2.out
check "and ends as the unbroken run" "$python" "$here/same_run.py" one resumed 4
sed 's/NAME/resumed/g; s/"load": "imported"/"load": "one"/' base.json >elsewhere.json
"$pipetrain" launch -n 1 -- "$pipetrain" train --config elsewhere.json >elsewhere.out 2>&1
rc=$?
check "a job from another base is refused in a folder that run started elsewhere (exit $rc: $(tail -1 elsewhere.out))" \
  test "$rc" -eq 2 -a -n "$(grep "save resumed holds another run's checkpoints" elsewhere.out)"

# The same run with another alpha: its adapters were trained at the saved scale, refused.
sed 's/"alpha": 8/"alpha": 16/' resumed.json >other-alpha.json
"$pipetrain" launch -n 2 -- "$pipetrain" train --config other-alpha.json >other-alpha.out 2>&1
rc=$?
check "resuming with another lora.alpha: exit 2, one line ($(grep '^pipetrain' other-alpha.out | head -1))" \
  test "$rc" -eq 2 -a -n "$(grep 'lora.alpha 16.0 contradicts the checkpoint in resumed (8.0)' other-alpha.out)"

# Out to peft and transformers.
"$pipetrain" export --format peft --checkpoint one --out adapter >export-peft.out 2>&1
check "export --format peft" test -s adapter/adapter_config.json -a -s adapter/adapter_model.safetensors
"$pipetrain" export --format hf --checkpoint one --out merged >export-hf.out 2>&1
check "export --format hf merges the adapters" test -s merged/model.safetensors
check "peft's and transformers' logits are pipetrain's ($("$python" "$here/lora_check.py" "$pipetrain" model one adapter merged "$work" 2>&1 | tr '\n' ';'))" \
  "$python" "$here/lora_check.py" "$pipetrain" model one adapter merged "$work"
"$pipetrain" export --format peft --checkpoint imported --out not-adapted >not-adapted.out 2>&1
rc=$?
check "export --format peft of a model without adapters: exit 2, one line ($(cat not-adapted.out))" \
  test "$rc" -eq 2 -a "$(wc -l <not-adapted.out)" -eq 1
# An adapter of the wrong shape (resealed, as a damaged or hostile checkpoint): both exports
# refuse it in one line, exit 2, writing no folder.
cp -r one reshaped
"$python" - "$source_dir/tests/checkpoint" <<'PY'
import glob, json, os, sys, zlib, torch, safetensors.torch as st
sys.path.insert(0, sys.argv[1])
from reseal_manifest import reseal
folder = "reshaped/" + open("reshaped/latest").read().strip()
manifest = json.load(open(f"{folder}/manifest.json"))
for layer in manifest["layers"]:
    names = [n for n in layer.get("tensors", {}) if n.endswith("q_proj.lora_A")]
    if not names:
        continue
    path = f"{folder}/{layer['file']}"
    tensors = st.load_file(path)
    tensors[names[0]] = torch.zeros(3, tensors[names[0]].shape[1])
    st.save_file(tensors, path)
    layer["tensors"][names[0]]["shape"] = [3, tensors[names[0]].shape[1]]
    data = open(path, "rb").read()
    manifest["files"][layer["file"]] = {"bytes": len(data), "crc32": zlib.crc32(data)}
    break
json.dump(manifest, open(f"{folder}/manifest.json", "w"))
reseal(folder)
PY
for format in peft hf; do
  "$pipetrain" export --format "$format" --checkpoint reshaped --out "reshaped-$format" >reshaped.out 2>&1
  rc=$?
  check "export --format $format of a misshapen adapter: exit 2, one line, no folder ($(cat reshaped.out))" \
    test "$rc" -eq 2 -a "$(wc -l <reshaped.out)" -eq 1 -a ! -e "reshaped-$format" -a \
    -n "$(grep 'lora_A is \[3, ' reshaped.out)"
done
finish
