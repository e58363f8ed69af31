#!/usr/bin/env bash
# `pipetrain train`, `eval` and `generate` as a user runs them, through pipetrain launch.
# Usage: trainer_test.sh PATH/TO/pipetrain PATH/TO/python
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$1
python=$2
config=$(cd "$(dirname "$0")" && pwd)/tiny.json
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
export PIPETRAIN_COMM_TIMEOUT=60
train() { # ranks, output file, arguments...
  local ranks=$1 out=$2
  shift 2
  "$pipetrain" launch -n "$ranks" -- "$pipetrain" train --config "$config" "$@" >"$out" 2>&1
}

# 1. A whole run: progress, metrics (JSON lines, CSV), TensorBoard, checkpoints.
train 4 full.out --save full/ckpt
check "train exits 0" test $? -eq 0
check "train prints the effective config once" test "$(grep -c '^effective config: ' full.out)" -eq 1
check "train prints plain progress lines when not on a terminal" grep -q '^step 12/12 loss [0-9.]* lr ' full.out
check "the progress line shows the gradient norm ($(grep -m1 '^step ' full.out))" \
  grep -qE '^step 4/12 loss [0-9.]+ lr [0-9.e-]+ [0-9.]+ samples/s [0-9]+ tokens/s grad norm [0-9.e+-]+' full.out
check "validation loss falls" awk '/^validation loss: /{ exit !($5 < $3) }' full.out
check "config saved beside the checkpoints" test -s full/ckpt/config.json
check "with save, the terminal names that file instead of every key" \
  grep -q '^effective config: full/ckpt/config.json$' full.out
check "the job line names the schedule and the batch arithmetic ($(grep '^job:' full.out | cut -c1-120))" \
  grep -qE '^job: 4 ranks = pipe 2 x data 2 x model 1; model gpt, [0-9]+ layers; schedule 1f1b; batch 16 = micro 4 x 2 micro-batches x data 2; ' full.out
check "checkpoints at steps 6 and 12" test -d full/ckpt/step_6 -a -d full/ckpt/step_12

# Two stages started as one process: one line that says how to start the job.
"$pipetrain" train --config "$config" >alone.out 2>&1
rc=$?
check "train alone with 2 stages: exit 2 and the launch to use ($(head -c 160 alone.out))" \
  test "$rc" -eq 2 -a -n "$(grep -F "does not divide the job's 1 ranks (one process: start the job with pipetrain launch -n 2 -- ...)" alone.out)"
check "the trace's Gantt chart of 1F1B is titled as configs spell it" \
  bash -c "'$pipetrain' simulate --kind train -m 4 -p 2 --svg chart.svg >/dev/null && grep -q '>1f1b' chart.svg"

# 2. Resume: 6 steps, then --load to 12, continue the step count and the loss curve.
"$pipetrain" launch -n 4 -- "$pipetrain" train --config "$config" --train-iters 6 --save half/ckpt \
  >half1.out 2>&1
train 4 half2.out --load half/ckpt --save half/ckpt
check "resume says where it starts" grep -q '^resumed from half/ckpt at step 6' half2.out
check "weight decay groups kept in the manifest" "$python" - half/ckpt/step_6/manifest.json <<'PY'
import json, sys
layers = json.load(open(sys.argv[1]))["layers"]
assert set(layers[0]["weight_decay_exempt"]) == {"tokens.weight", "positions.weight"}
block = set(layers[1]["weight_decay_exempt"])
assert "attention_norm.weight" in block and "qkv.bias" in block and "qkv.weight" not in block
PY
check "the same groups resume without a word" test "$(grep -c 'weight decay group' half2.out)" -eq 0
"$python" -c 'import json, sys; c = json.load(open(sys.argv[1])); c["weight_decay_exempt"] = []; json.dump(c, open("decay-all.json", "w"))' "$config"
"$pipetrain" launch -n 4 -- "$pipetrain" train --config decay-all.json --load half/ckpt \
  --train-iters 7 >regrouped.out 2>&1
check "other groups on resume: a warning naming a tensor ($(grep -m1 'weight decay group' regrouped.out))" \
  grep -q "tensor(s) of stage 0 in another weight decay group than when saved (layer 0.tokens.weight was exempt, is decayed now)" regrouped.out

# 3. Logs hold the right steps; the resumed run's losses equal the uninterrupted run's.
# Variants of the config, as files (ranks cannot read the launcher's pipes).
variant() { # name, sed program
  sed "$2" "$config" >"$1.json"
  echo "$work/$1.json"
}
mkdir -p logs
"$pipetrain" launch -n 4 -- "$pipetrain" train \
  --config "$(variant logged 's|"sample"|"log": {"metrics": "logs/m.jsonl", "csv": "logs/m.csv", "tensorboard": "logs/tb"}, "sample"|')" \
  >logged.out 2>&1
check "metrics: 12 JSON lines with steps 1..12" \
  "$python" -c "import json,sys; r=[json.loads(l) for l in open('logs/m.jsonl')]; sys.exit(not ([x['step'] for x in r]==list(range(1,13)) and all('loss' in x and 'lr' in x and 'grad_norm' in x and 'samples_per_s' in x and x['timings_ms']['ForwardPass'] > 0 for x in r) and [x['step'] for x in r if 'val_loss' in x]==[4,8,12]))"
check "metrics: CSV header and 12 rows" test "$(head -1 logs/m.csv)" = "step,loss,val_loss,lr,grad_norm,loss_scale,skipped_steps,samples_per_s,tokens_per_s" -a "$(wc -l <logs/m.csv)" -eq 13
# A run stopped after its last save logged steps the resumed run repeats: the files are cut
# back to the resumed step first, so every step appears once. (No mkdir: train makes the
# folders of its log files.)
cut_config=$(variant cut 's|"save_interval": 6|"save_interval": 2|; s|"sample"|"log": {"metrics": "cut/m.jsonl", "csv": "cut/m.csv"}, "sample"|')
"$pipetrain" launch -n 2 -- "$pipetrain" train --config "$cut_config" --train-iters 3 --save cut/ckpt >cut1.out 2>&1
echo step_2 >cut/ckpt/latest # as if step 3 had not been saved
"$pipetrain" launch -n 2 -- "$pipetrain" train --config "$cut_config" --train-iters 4 --load cut/ckpt --save cut/ckpt >cut2.out 2>&1
check "resume: the metrics hold steps 1..4 once each ($(grep -o '"step":[0-9]*' cut/m.jsonl | tr '\n' ' '))" \
  "$python" -c "import json,sys; sys.exit([json.loads(l)['step'] for l in open('cut/m.jsonl')] != [1,2,3,4])"
check "resume: the CSV too, under one header" \
  test "$(cut -d, -f1 cut/m.csv | tr '\n' ' ')" = "step 1 2 3 4 "
check "plot-metrics: a chart, with the uniform line only when given a vocabulary" bash -c \
  "'$source_dir/scripts/plot-metrics' cut/m.jsonl plain.svg && '$source_dir/scripts/plot-metrics' cut/m.jsonl bytes.svg 256 && grep -q '<polyline' plain.svg && ! grep -q uniform plain.svg && grep -q 'uniform over 256 tokens, ln 256' bytes.svg"
check "tensorboard: TensorBoard's own reader finds the curves" "$python" - <<'PY'
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator("logs/tb"); acc.Reload()
ok = [e.step for e in acc.Scalars("train/loss")] == list(range(1, 13)) and [e.step for e in acc.Scalars("val/loss")] == [4, 8, 12]
sys.exit(not ok)
PY
losses_of() { grep -oE '^step (8|12)/12 loss [0-9.]+' "$1"; }
check "resume: the losses of steps 8 and 12 equal the uninterrupted run's ($(losses_of half2.out | tr '\n' ' '))" \
  test "$(losses_of full.out)" = "$(losses_of half2.out)" -a -n "$(losses_of half2.out)"

# 3b. GPipe from the command line: the same math as 1F1B, so the same losses (dropout draws
# one stream per stage and replica, in micro-batch order under both schedules).
train 4 gpipe.out --schedule gpipe
check "gpipe: train exits 0" test $? -eq 0
check "gpipe: the effective config names the schedule" grep -q '"schedule":"gpipe"' gpipe.out
check "gpipe: the losses of steps 8 and 12 equal 1F1B's ($(losses_of gpipe.out | tr '\n' ' '))" \
  test "$(losses_of full.out)" = "$(losses_of gpipe.out)" -a -n "$(losses_of gpipe.out)"

# 3c. Resume across schedules, without dropout (each schedule draws a stage's masks in its own
#     order): 6 steps under 1f1b, then 6 more under zb-h1 and under interleaved over 2 chunks.
#     The losses continue as the uninterrupted 1f1b run's (within 1e-5), and the interleaved
#     run's checkpoint (whole layers) evaluates as the 1f1b run's.
schedule_run() { # name, arguments... (SCHEDULE_SED: more of the config to change)
  local name=$1
  shift
  "$pipetrain" launch -n 4 -- "$pipetrain" train --eval-interval 0 "$@" --config "$(variant "$name" \
    "s|\"dropout\": 0.1|\"dropout\": 0.0|; s|\"sample\"|\"log\": {\"metrics\": \"$name.jsonl\"}, \"sample\"|${SCHEDULE_SED:+; $SCHEDULE_SED}")" \
    >"$name.out" 2>&1
}
schedule_run s_full --save s_full/ckpt
schedule_run s_half --train-iters 6 --save s_half/ckpt
schedule_run s_zb --load s_half/ckpt --schedule zb-h1
schedule_run s_il --load s_half/ckpt --schedule interleaved --chunks 2 --save s_il/ckpt
for run in s_zb s_il; do
  check "schedules: $run resumed a 1f1b checkpoint at step 6" grep -q '^resumed from s_half/ckpt at step 6' "$run.out"
  check "schedules: $run's losses of steps 7-12 equal the uninterrupted 1f1b run's within 1e-5" \
    "$python" - "$run" <<'PY'
import json, sys
def losses(name):
    return {r["step"]: r["loss"] for r in map(json.loads, open(name + ".jsonl"))}
full, resumed = losses("s_full"), losses(sys.argv[1])
steps = list(range(7, 13))
sys.exit(not (sorted(resumed) == steps and all(abs(resumed[s] - full[s]) <= 1e-5 * abs(full[s]) for s in steps)))
PY
done
for run in s_full s_il; do
  "$pipetrain" launch -n 2 -- "$pipetrain" eval --checkpoint "$run/ckpt" --eval-iters 2 >"${run}_eval.out" 2>&1
done
check "schedules: the interleaved checkpoint evaluates as the 1f1b one ($(awk '/^validation loss /{ print $3 }' s_full_eval.out s_il_eval.out | tr '\n' ' '))" \
  test -n "$(awk '/^validation loss /{ print $3 }' s_il_eval.out)" -a \
  "$(awk '/^validation loss /{ print $3 }' s_full_eval.out)" = "$(awk '/^validation loss /{ print $3 }' s_il_eval.out)"

# 3c'. Context parallelism, resumed across context sizes (nothing about it is on disk): 6
#      steps at pipe 2 x data 2 x context 2, 2 more at context 1, 2 at context 2 again, 2 at
#      pipe 1 x context 4; every step's loss equals the uninterrupted run's within 1e-5.
context_run() { # ranks, name, arguments...
  local ranks=$1 name=$2
  shift 2
  "$pipetrain" launch -n "$ranks" -- "$pipetrain" train --eval-interval 0 "$@" --config "$(variant "$name" \
    "s|\"dropout\": 0.1|\"dropout\": 0.0|; s|\"sample\"|\"log\": {\"metrics\": \"$name.jsonl\"}, \"sample\"|")" \
    >"$name.out" 2>&1
}
context_run 8 c_two --context-parallel 2 --train-iters 6 --save c_two/ckpt
context_run 4 c_one --load c_two/ckpt --train-iters 8 --save c_one/ckpt
context_run 8 c_again --load c_one/ckpt --context-parallel 2 --train-iters 10 --save c_again/ckpt
context_run 8 c_four --load c_again/ckpt --pipe 1 --context-parallel 4
check "context parallel: the job line names the context axis" \
  grep -q '^job: 8 ranks = pipe 2 x data 2 x context 2 x model 1;' c_two.out
check "context parallel: context 1 resumed context 2 at step 6, context 2 it at step 8, context 4 that at step 10" \
  bash -c "grep -q '^resumed from c_two/ckpt at step 6' c_one.out && grep -q '^resumed from c_one/ckpt at step 8' c_again.out && grep -q '^resumed from c_again/ckpt at step 10' c_four.out"
check "context parallel: steps 1-6 (context 2), 7-8 (context 1), 9-10 (context 2), 11-12 (context 4) equal the uninterrupted run's within 1e-5" \
  "$python" - <<'PY'
import json
def losses(*names):
    return {r["step"]: r["loss"] for n in names for r in map(json.loads, open(n + ".jsonl"))}
full, split = losses("s_full"), losses("c_two", "c_one", "c_again", "c_four")
steps = list(range(1, 13))
ok = sorted(split) == steps and all(abs(split[s] - full[s]) <= 1e-5 * abs(full[s]) for s in steps)
print(sorted(split), [(s, full.get(s), split.get(s)) for s in steps] if not ok else "")
raise SystemExit(not ok)
PY

# 3c'''. Context parallelism with the GPT's dropout: its ranks draw the whole sequence's
#        masks and keep their own positions', so pipe 2 x data 2 x context 2 trains as the
#        logged pipe 2 x data 2 run (dropout 0.1) within 1e-5.
"$pipetrain" launch -n 8 -- "$pipetrain" train --eval-interval 0 --train-iters 4 --context-parallel 2 \
  --config "$(variant c_dropout 's|"sample"|"log": {"metrics": "c_dropout.jsonl"}, "sample"|')" >c_dropout.out 2>&1
check "context parallel with dropout: steps 1-4 equal the logged run's within 1e-5" \
  "$python" - <<'PY'
import json
def losses(name):
    return {r["step"]: r["loss"] for r in map(json.loads, open(name))}
whole, split = losses("logs/m.jsonl"), losses("c_dropout.jsonl")
ok = sorted(split) == [1, 2, 3, 4] and all(abs(split[s] - whole[s]) <= 1e-5 * abs(whole[s]) for s in split)
print("" if ok else [(s, whole.get(s), split.get(s)) for s in range(1, 5)])
raise SystemExit(not ok)
PY

# 3c''. Packed documents (newlines end them): pipe 2 alone, and pipe 1 x context 2 x model 2
#       with sequence parallelism, train to the same losses, unlike the unpacked run.
pack='s|"paths": \["/usr/share/common-licenses"\]|"paths": ["/usr/share/common-licenses"], "pack": true, "document_end": 10|'
packed_run() { # ranks, name, arguments...
  local ranks=$1 name=$2
  shift 2
  "$pipetrain" launch -n "$ranks" -- "$pipetrain" train --eval-interval 0 --train-iters 4 "$@" \
    --config "$(variant "$name" "s|\"dropout\": 0.1|\"dropout\": 0.0|; s|\"sample\"|\"log\": {\"metrics\": \"$name.jsonl\"}, \"sample\"|; $pack")" >"$name.out" 2>&1
}
packed_run 2 p_pipe
packed_run 4 p_split --pipe 1 --context-parallel 2 --model 2 --sequence-parallel
"$pipetrain" launch -n 2 -- "$pipetrain" train --eval-interval 0 --train-iters 4 --config "$(variant p_unpacked \
  "s|\"dropout\": 0.1|\"dropout\": 0.0|; s|\"sample\"|\"log\": {\"metrics\": \"p_unpacked.jsonl\"}, \"sample\"|")" >p_unpacked.out 2>&1
check "packed documents: pipe 1 x context 2 x model 2 (sequence parallel) trains as pipe 2, and not as unpacked" \
  "$python" - <<'PY'
import json
def losses(name):
    return {r["step"]: r["loss"] for r in map(json.loads, open(name + ".jsonl"))}
pipe, split, unpacked = losses("p_pipe"), losses("p_split"), losses("p_unpacked")
ok = sorted(split) == [1, 2, 3, 4] and all(abs(split[s] - pipe[s]) <= 1e-5 * abs(pipe[s]) for s in split)
ok = ok and any(abs(pipe[s] - unpacked[s]) > 1e-4 for s in pipe)  # packing changes training
raise SystemExit(not ok)
PY

# 3d. Resume across V schedules (4 micro-batches: dualpipev needs 2 x stages): 6 steps under
#     1f1b, 3 under zbv (its V puts stage 0's layers at both ends), 3 under dualpipev; steps
#     7-12 equal the uninterrupted 1f1b run's within 1e-5.
v_run() { SCHEDULE_SED='s|"gradient_accumulation_steps": 2|"gradient_accumulation_steps": 4|' schedule_run "$@"; }
v_run v_full
v_run v_half --train-iters 6 --save v_half/ckpt
v_run v_zbv --load v_half/ckpt --schedule zbv --chunks 2 --train-iters 9 --save v_zbv/ckpt
v_run v_dpv --load v_zbv/ckpt --schedule dualpipev --chunks 2
check "V schedules: dualpipev resumed zbv at step 9" grep -q '^resumed from v_zbv/ckpt at step 9' v_dpv.out
check "V schedules: zbv resumed 1f1b at step 6" grep -q '^resumed from v_half/ckpt at step 6' v_zbv.out
check "V schedules: steps 7-9 (zbv) and 10-12 (dualpipev) equal the 1f1b run's within 1e-5" \
  "$python" - <<'PY'
import json
def losses(*names):
    return {r["step"]: r["loss"] for n in names for r in map(json.loads, open(n + ".jsonl"))}
full, resumed = losses("v_full"), losses("v_zbv", "v_dpv")
steps = list(range(7, 13))
ok = sorted(resumed) == steps and all(abs(resumed[s] - full[s]) <= 1e-5 * abs(full[s]) for s in steps)
print(sorted(resumed), [(s, full.get(s), resumed.get(s)) for s in steps] if not ok else "")
raise SystemExit(not ok)
PY

# 4. generate: the same text through 1 and 2 stages; eval prints a loss.
"$pipetrain" launch -n 1 -- "$pipetrain" generate --checkpoint full/ckpt --prompt "The " --tokens 40 --seed 7 >gen1.out 2>&1
"$pipetrain" launch -n 2 -- "$pipetrain" generate --checkpoint full/ckpt --prompt "The " --tokens 40 --seed 7 >gen2.out 2>&1
check "generate: 44 characters from the prompt on" test "$(head -c 4 gen1.out)" = "The " -a "$(wc -c <gen1.out)" -ge 45
check "generate: pipe 1 and pipe 2 give the same text" cmp -s gen1.out gen2.out
"$pipetrain" launch -n 2 -- "$pipetrain" generate --checkpoint full/ckpt --prompt "Café " --tokens 8 >gen_utf8.out 2>&1
check "generate: a prompt with bytes >= 0x80 samples (exit $?; $(head -c 40 gen_utf8.out))" \
  test "$(head -c 6 gen_utf8.out)" = "Caf?? " -a "$(wc -c <gen_utf8.out)" -ge 15
"$pipetrain" launch -n 2 -- "$pipetrain" eval --checkpoint full/ckpt --eval-iters 2 >eval.out 2>&1
check "eval prints the validation loss of step 12" grep -q '^validation loss [0-9.]* over 2 batches (step 12)$' eval.out
# The validation set is fixed: eval on 2 ranks (pipe 2, data 1, the training's eval_iters by
# default) reads the samples training at pipe 2 x data 2 read last, to the printed digits.
"$pipetrain" launch -n 2 -- "$pipetrain" eval --checkpoint full/ckpt >eval_default.out 2>&1
trained_last=$(awk '/^validation loss: /{ print $5 }' full.out)
check "eval: the training's eval_iters by default ($(cat eval_default.out))" \
  grep -q '^validation loss [0-9.]* over 2 batches (step 12)$' eval_default.out
check "eval: the same validation loss as training's last ($trained_last vs $(awk '/^validation loss /{ print $3 }' eval_default.out))" \
  test -n "$trained_last" -a "$trained_last" = "$(awk '/^validation loss /{ print $3 }' eval_default.out)"

# The same command again resumes from the newest checkpoint in its save folder (a requeued
# job): it says so in one line and goes on from there; a first run says it starts fresh, also
# with --load naming the empty save folder; --overwrite starts over there.
cp -r full/ckpt requeued
latest_before=$(cat requeued/latest)
train 2 again.out --pipe 2 --train-iters 14 --save requeued
rc=$?
check "the same save folder again: resumes (exit $rc; $(grep -m1 '^resuming' again.out))" \
  grep -qx "resuming from the newest checkpoint in requeued ($latest_before)" again.out
check "... from its step (12) to 14" test "$rc" -eq 0 -a "$(cat requeued/latest)" = step_14
train 2 fresh.out --pipe 2 --train-iters 1 --save fresh-folder
check "a first run says it starts fresh ($(grep -m1 '^starting' fresh.out))" \
  grep -qx "starting fresh: no checkpoint in fresh-folder yet" fresh.out
train 2 fresh-load.out --pipe 2 --train-iters 1 --save fresh-load --load fresh-load
check "--load of the empty save folder starts fresh (exit $?; $(grep -m1 'fresh' fresh-load.out))" \
  grep -qx "no checkpoint in fresh-load yet: starting fresh" fresh-load.out
# Resumed at another data-parallel size, the checkpoint's global batch is kept (the
# accumulation steps follow) and said; one that cannot divide is refused in one line.
train 2 batch1.out --pipe 2 --train-iters 2 --save batch1
train 4 batch2.out --pipe 2 --train-iters 3 --load batch1 --save batch2
check "data 1 -> 2 keeps the global batch 8 ($(grep -m1 '^global batch' batch2.out))" \
  grep -qx "global batch 8 kept from the checkpoint at data-parallel size 2 (it was trained at 1): the accumulation steps follow (gradient_accumulation_steps 1)" batch2.out
check "... and the job line says it" grep -q "^job: 4 ranks = pipe 2 x data 2 .* batch 8 = micro 4 x 1 micro-batches x data 2;" batch2.out
train 8 batch3.out --pipe 1 --train-iters 3 --load batch2
rc=$?
check "a global batch that cannot divide is refused (exit $rc; $(grep -m1 '^pipetrain:' batch3.out))" \
  test "$rc" -eq 2 -a "$(grep -c 'train_batch_size 8' batch3.out)" -ge 1
cp -r full/ckpt overwritten
train 2 overwrite.out --pipe 2 --train-iters 1 --save overwritten --overwrite
check "--overwrite starts over (exit $?)" test "$(cat overwritten/latest)" = step_1
check "--overwrite says so" grep -q "^starting over in overwritten (overwrite)" overwrite.out

# 5. The trace of one step holds exactly the instructions each rank's schedule plans, in order.
#    A schedule file (ZB-H1's compute orders as CSV) runs as planned too.
"$pipetrain" schedule --kind zb-h1 -m 2 -p 2 --format csv >zb-h1.csv
for kind in train gpipe interleaved zb-h1 zb-h2 interleaved-zb looped-bfs zbv dualpipev file; do
  chunks=1 micro=2
  case $kind in interleaved | interleaved-zb | looped-bfs | zbv | dualpipev) chunks=2 ;; esac
  [ "$kind" = dualpipev ] && micro=4 # DualPipeV needs 2 x stages micro-batches
  shape=(-m $micro -p 2 -v $chunks)
  kind_config=$config
  if [ "$kind" = file ]; then
    shape=(--file zb-h1.csv)
    kind_config=$(variant file-schedule 's|"stages": 2|"stages": 2, "schedule_file": "zb-h1.csv"|')
  fi
  "$pipetrain" launch -n 4 -- "$pipetrain" train --config "$kind_config" --train-iters 3 \
    --trace "trace_$kind.json" --schedule "$kind" --chunks $chunks --micro-batches $micro >"trace_$kind.out" 2>&1
  for stage in 0 1; do
    "$pipetrain" schedule --kind "$kind" "${shape[@]}" --stage $stage --format json >"stage${stage}_$kind.json"
  done
  check "trace ($kind): every rank ran its stage's planned instructions in order" "$python" - "$kind" <<'PY'
import json, re, sys
kind = sys.argv[1]
trace = json.load(open(f"trace_{kind}.json"))["traceEvents"]
stage_of = {e["tid"]: int(re.search(r"stage (\d+)", e["args"]["name"]).group(1)) for e in trace if e["ph"] == "M"}
planned = []
for s in (0, 1):
    steps = json.load(open(f"stage{s}_{kind}.json"))["steps"]
    planned.append([(i[0], i[1] if len(i) > 1 else -1) for step in steps for i in step])
def ran(tid):
    events = sorted((e for e in trace if e["ph"] == "X" and e["tid"] == tid), key=lambda e: e["ts"])
    return [(e["cat"], e["args"]["buffer"]) for e in events]
sys.exit(not (len(stage_of) == 4 and all(ran(t) == planned[stage_of[t]] for t in stage_of)))
PY
  check "trace ($kind): Gantt charts as run and as simulated" \
    test "$(cat "trace_$kind.json.svg" "trace_$kind.json.predicted.svg" | grep -c "</svg>")" -eq 2
done
check "trace (interleaved): the Gantt chart labels the chunks" grep -q '>0\.1</text>' trace_interleaved.json.svg

# 6. bf16 follows the fp32 loss curve (measured gap at step 30: about 2e-4).
train 4 fp32.out --train-iters 30 --eval-interval 0
"$pipetrain" launch -n 4 -- "$pipetrain" train --config "$(variant bf16 's|"sample"|"bf16": {"enabled": true}, "sample"|')" \
  --train-iters 30 --eval-interval 0 >bf16.out 2>&1
final_loss() { awk '/^validation loss: /{ print $5 }' "$1"; }
check "bf16: final validation loss within 0.05 of fp32 ($(final_loss fp32.out) vs $(final_loss bf16.out))" \
  awk -v a="$(final_loss fp32.out)" -v b="$(final_loss bf16.out)" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d < 0.05) }'

# 7. Tensor parallelism from the command line: pipe 2 x model 2 follows pipe 2 alone, dropout
#    included (same data: one replica in both; attention dropout masks are drawn for all
#    heads and sliced), and its checkpoint, holding whole layers, evaluates on one rank as
#    the other run's does.
for model in 1 2; do
  train $((2 * model)) "tp$model.out" --model $model --train-iters 6 --eval-interval 0 --save "tp$model/ckpt"
  "$pipetrain" launch -n 1 -- "$pipetrain" eval --checkpoint "tp$model/ckpt" --eval-iters 2 >"tp${model}_eval.out" 2>&1
done
check "model 2: the job is pipe 2 x data 1 x model 2" grep -q '^job: 4 ranks = pipe 2 x data 1 x model 2;' tp2.out
within() { awk -v a="$1" -v b="$2" -v tolerance="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= tolerance) }'; }
check "model 2: final validation loss equals model 1's to 1e-4 ($(final_loss tp1.out) vs $(final_loss tp2.out))" \
  within "$(final_loss tp1.out)" "$(final_loss tp2.out)" 1e-4
eval_loss() { awk '/^validation loss /{ print $3 }' "$1"; }
check "model 2: its checkpoint evaluates on one rank as model 1's ($(eval_loss tp1_eval.out) vs $(eval_loss tp2_eval.out))" \
  within "$(eval_loss tp1_eval.out)" "$(eval_loss tp2_eval.out)" 1e-3

# 7b. Sequence parallelism at pipe 2 x model 2: the same run again, dropout included (masks
#     drawn for the whole sequence and sliced), ending with a sample (generation runs whole
#     sequences); its checkpoint evaluates on one rank as the others do.
with_sample=$(variant sample 's|"sample": {"tokens": 0}|"sample": {"tokens": 8}|')
"$pipetrain" launch -n 4 -- "$pipetrain" train --config "$with_sample" --model 2 --sequence-parallel \
  --train-iters 6 --eval-interval 0 --save tp2sp/ckpt >tp2sp.out 2>&1
check "sequence parallel: exits 0 and says so in the job line" \
  grep -q '^job: 4 ranks = pipe 2 x data 1 x model 2 (sequence parallel);' tp2sp.out
check "sequence parallel: final validation loss equals model 1's to 1e-4 ($(final_loss tp1.out) vs $(final_loss tp2sp.out))" \
  within "$(final_loss tp1.out)" "$(final_loss tp2sp.out)" 1e-4
check "sequence parallel: the run ends with its sample" grep -q '^sample: The ' tp2sp.out
"$pipetrain" launch -n 1 -- "$pipetrain" eval --checkpoint tp2sp/ckpt --eval-iters 2 >tp2sp_eval.out 2>&1
check "sequence parallel: its checkpoint evaluates on one rank as model 1's ($(eval_loss tp1_eval.out) vs $(eval_loss tp2sp_eval.out))" \
  within "$(eval_loss tp1_eval.out)" "$(eval_loss tp2sp_eval.out)" 1e-3

# 7c. ZeRO stage 3 at pipe 2 x data 2 (`--zero 3`): the parameters sharded, each layer
#     gathered as it runs, generation included (the run ends with its sample); the same
#     validation loss as without ZeRO, and its checkpoint evaluates on one rank alike.
for zero in 0 3; do
  "$pipetrain" launch -n 4 -- "$pipetrain" train --config "$with_sample" --zero $zero \
    --train-iters 6 --eval-interval 0 --save "z$zero/ckpt" >"z$zero.out" 2>&1
  "$pipetrain" launch -n 1 -- "$pipetrain" eval --checkpoint "z$zero/ckpt" --eval-iters 2 >"z${zero}_eval.out" 2>&1
done
check "zero 3: the job line says so" grep -q '^job: 4 ranks = pipe 2 x data 2 x model 1; .*; ZeRO 3;' z3.out
check "zero 3: final validation loss equals ZeRO 0's to 1e-4 ($(final_loss z0.out) vs $(final_loss z3.out))" \
  within "$(final_loss z0.out)" "$(final_loss z3.out)" 1e-4
check "zero 3: the run ends with its sample" grep -q '^sample: The ' z3.out
check "zero 3: its checkpoint evaluates on one rank as ZeRO 0's ($(eval_loss z0_eval.out) vs $(eval_loss z3_eval.out))" \
  within "$(eval_loss z0_eval.out)" "$(eval_loss z3_eval.out)" 1e-5

# 8. Token files and bad input: exit 2 with a message naming the problem.
"$python" -c "import numpy as np; np.arange(3000, dtype=np.uint16).__mod__(200).astype('<u2').tofile('tokens.bin')"
to_tokens='s|"type": "text", "paths": \["/usr/share/common-licenses"\]|"type": "tokens", "paths": ["tokens.bin"]|'
"$pipetrain" launch -n 2 -- "$pipetrain" train --config "$(variant tokens "$to_tokens")" --train-iters 2 >tokens.out 2>&1
check "tokens: trains on a uint16 token file" grep -q '^step 2/2 loss' tokens.out
# Megatron's indexed datasets, written in its format by a standard-library writer: a job
# trains on them, and resumes from a checkpoint exactly as one that never stopped.
python3 "$(dirname "$config")/../data/write_indexed.py" corpus uint16 400
to_indexed='s|"type": "text", "paths": \["/usr/share/common-licenses"\]|"type": "indexed", "paths": ["corpus"]|; s|"vocab_size": 256|"vocab_size": 1000|'
indexed=$(variant indexed "$to_indexed")
"$pipetrain" launch -n 2 -- "$pipetrain" train --config "$indexed" --train-iters 4 --eval-interval 0 >indexed.out 2>&1
check "indexed: trains on a Megatron .bin/.idx pair" grep -q '^step 4/4 loss' indexed.out
"$pipetrain" launch -n 2 -- "$pipetrain" train --config "$indexed" --train-iters 2 --eval-interval 0 --save indexed-ckpt >indexed-a.out 2>&1
"$pipetrain" launch -n 2 -- "$pipetrain" train --config "$indexed" --train-iters 4 --eval-interval 0 --load indexed-ckpt >indexed-b.out 2>&1
last_step() { grep -oE '^step 4/4 loss [0-9.]+' "$1"; }
last_step_of() { grep -E '^validation loss: ' "$1"; }
check "indexed: 2 + 2 steps resumed end as 4 steps did ($(last_step indexed.out) vs $(last_step indexed-b.out))" \
  test -n "$(last_step indexed.out)" -a "$(last_step indexed.out)" = "$(last_step indexed-b.out)"
# Packed by the document index, and by the end-of-document id 999 each document ends with
# (140 documents: no other token is 999): the same training.
python3 "$(dirname "$config")/../data/write_indexed.py" short uint16 140
for split in index id; do
  ends=$([ $split = id ] && echo ', "document_end": 999')
  "$pipetrain" launch -n 2 -- "$pipetrain" train --config "$(variant "packed-$split" \
    "$to_indexed; s|\"paths\": \[\"corpus\"\]|\"paths\": [\"short\"], \"pack\": true$ends|")" \
    --train-iters 3 --eval-interval 0 >"packed-$split.out" 2>&1
done
check "indexed: packed by its document index as by its end-of-document ids ($(last_step_of packed-index.out) vs $(last_step_of packed-id.out))" \
  test -n "$(last_step_of packed-index.out)" -a "$(last_step_of packed-index.out)" = "$(last_step_of packed-id.out)"
"$pipetrain" launch -n 2 -- "$pipetrain" train --train-iters 40 --config "$(variant mlp \
  's|"model": {[^}]*}|"model": {"type": "mlp", "inputs": 8, "hidden": 32, "outputs": 2, "layers": 3}|; s|"type": "text", "paths": \["/usr/share/common-licenses"\]|"type": "synthetic"|')" >mlp.out 2>&1
check "synthetic: the MLP learns its teacher" awk '/^validation loss: /{ exit !($5 < 0.5 * $3) }' mlp.out
"$python" -c "import numpy as np; np.array([1, 2, 300, 4] * 50, dtype='<u2').tofile('bad.bin')"
bad() { # description, pattern, arguments...
  local what=$1 pattern=$2
  shift 2
  "$pipetrain" launch -n 2 -- "$pipetrain" train "$@" >bad.out 2>&1
  local rc=$?
  check "$what: exit 2 (got $rc)" test "$rc" -eq 2
  check "$what: says '$pattern'" grep -q -- "$pattern" bad.out
}
bad "out-of-vocabulary token" "bad.bin: token 2 is 300, not in \[0, model.vocab_size 256)" \
  --config "$(variant bad-tokens "${to_tokens/tokens.bin/bad.bin}")"
bad "indexed ids beyond the vocabulary" "corpus.bin: token [0-9]* is [0-9]*, not in \[0, model.vocab_size 256)" \
  --config "$(variant indexed-small 's|"type": "text", "paths": \["/usr/share/common-licenses"\]|"type": "indexed", "paths": ["corpus"]|')"
bad "missing data" "data.paths: /no/such/corpus does not exist" \
  --config "$(variant no-data 's|/usr/share/common-licenses|/no/such/corpus|')"
bad "grid not matching the job" "pipeline.stages 3 does not divide the job's 2 ranks" --config "$config" --pipe 3
bad "data-parallel size not matching" "data-parallel size 2 with 2 stages needs 4 ranks, the job has 2" --config "$config" --data 2
bad "context longer than the data" "does not fit in" \
  --config "$(variant short-data 's|"type": "text", "paths": \["/usr/share/common-licenses"\]|"type": "tokens", "paths": ["tokens.bin"], "validation_fraction": 0.999|')"

finish
