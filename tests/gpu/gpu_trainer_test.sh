#!/usr/bin/env bash
# pipetrain train on the GPU (label gpu; run by scripts/device-check): the job line names
# each rank's device and transports, metrics carry GPU memory per rank, a checkpoint
# saved on the GPU resumes on the CPU (and the reverse) with the losses of a run that
# never moved, and a rank killed mid-step ends the job within the deadline.
# Without a GPU this build can use, it says "skipped: no GPU" (ctest counts it skipped).
#   gpu_trainer_test.sh PIPETRAIN PYTHON
set -u
pipetrain=$1
python=$2
source "$(dirname "$0")/../lib.sh"

if ! "$pipetrain" devices | grep -qE '^visible GPUs: [1-9]'; then
  echo "skipped: no GPU"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

# fp32 without dropout: the CPU and the GPU draw different dropout masks.
cat >gpu.json <<'JSON'
{
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 4,
  "steps_per_print": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
  "pipeline": {"stages": 2},
  "model": {"type": "gpt", "vocab_size": 256, "context": 32, "d_model": 64, "heads": 4, "layers": 2, "dropout": 0.0},
  "data": {"type": "text", "paths": ["/usr/share/common-licenses"]},
  "train_iters": 4,
  "eval_interval": 0,
  "eval_iters": 1,
  "save_interval": 2,
  "sample": {"tokens": 0},
  "log": {"metrics": "metrics.jsonl"}
}
JSON
train() { # OUT DEVICE [more arguments]
  local out=$1 device=$2
  shift 2
  "$pipetrain" launch -n 2 -- "$pipetrain" train --config gpu.json --device "$device" "$@" >"$out" 2>&1
}

train cuda.out cuda --save on-gpu --train-iters 2
check "cuda: trains 2 steps" grep -q '^step 2/2 loss' cuda.out
grep -m1 '^job:' cuda.out
# The pipe takes NCCL between GPUs of their own, or as emulated hosts; MPI on one shared GPU.
gpus=$("$pipetrain" devices | sed -nE 's/^visible GPUs: ([0-9]+).*/\1/p')
if [ "${PIPETRAIN_EMULATED_HOSTS:-0}" = 1 ]; then
  pipe='nccl \(emulated hosts\)'
elif [ "${gpus:-0}" -ge 2 ]; then
  pipe=nccl
else
  pipe=mpi
fi
check "cuda: the job line names the GPU and the transports (pipe $pipe)" \
  grep -qE "^job: 2 ranks = pipe 2 x data 1 x model 1; .*cuda:[0-9]+ \(.+\), pipe $pipe, data-parallel mpi" cuda.out
check "cuda: the progress line shows GPU memory" grep -qE '^step 2/2 .* mem [0-9.]+/[0-9.]+ GiB' cuda.out
check "cuda: metrics hold GPU memory per rank" "$python" -c '
import json, sys
r = [json.loads(l) for l in open("metrics.jsonl")][-1]
sys.exit(not (len(r["gpu_memory_bytes"]) == 2 and min(r["gpu_peak_memory_bytes"]) > 0))'

# Across devices: 2 steps on one, 2 more on the other, against 4 on the CPU alone.
rm -f metrics.jsonl
train cpu.out cpu --train-iters 4
mv metrics.jsonl whole-cpu.jsonl
train gpu-to-cpu.out cpu --load on-gpu --train-iters 4
mv metrics.jsonl gpu-to-cpu.jsonl
train cpu-first.out cpu --save on-cpu --train-iters 2
rm -f metrics.jsonl
train cpu-to-gpu.out cuda --load on-cpu --train-iters 4
mv metrics.jsonl cpu-to-gpu.jsonl
same_losses() { # A B: steps 3 and 4 within 1e-5 relative
  "$python" - "$1" "$2" <<'PY'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r["step"] > 2}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print(sys.argv[2], a, b)
sys.exit(not (sorted(a) == [3, 4] == sorted(b) and all(abs(a[s] - b[s]) <= 1e-5 * abs(a[s]) for s in a)))
PY
}
check "saved on the GPU, resumed on the CPU: the CPU run's losses" same_losses whole-cpu.jsonl gpu-to-cpu.jsonl
check "saved on the CPU, resumed on the GPU: the CPU run's losses" same_losses whole-cpu.jsonl cpu-to-gpu.jsonl

# A rank killed mid-step on the GPU: the job ends within the deadline (20 s) + 10 s.
start=$(date +%s)
PIPETRAIN_FAULT="rank=1,step=2,instruction=BackwardPass,action=kill" PIPETRAIN_COMM_TIMEOUT=20 \
  timeout 120 "$pipetrain" launch -n 2 -- "$pipetrain" train --config gpu.json --device cuda >killed.out 2>&1
status=$?
elapsed=$(($(date +%s) - start))
check "killed rank: the job failed (status $status)" test "$status" -ne 0 -a "$status" -ne 124
check "killed rank: ended in $elapsed s, within 30 s" test "$elapsed" -le 30

finish
