#!/usr/bin/env bash
# Time of `pipetrain import` for a random GPT-2 of transformers' default size (124M
# parameters, 498 MB in float32), made and saved by transformers:
#   bench/hf_import_bench.sh build/src/pipetrain [REPETITIONS]
# Prints each repetition's wall time (reading, checking, building the model and writing
# the checkpoint) and the median; the folder lives in a temporary directory.
set -euo pipefail
pipetrain=$(realpath "$1")
repetitions=${2:-3}
python=${PIPETRAIN_VENV_PYTHON:-$("$(dirname "$0")/../scripts/setup" | tail -1 | sed 's|/lib/python.*||')/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
TRANSFORMERS_VERBOSITY=error "$python" - "$work/gpt2" <<'PY'
import sys, torch, transformers
torch.manual_seed(0)
model = transformers.GPT2LMHeadModel(transformers.GPT2Config())
print(f"GPT-2 with {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
model.save_pretrained(sys.argv[1])
PY
times=()
for ((i = 0; i < repetitions; i++)); do
  rm -rf "$work/ckpt"
  start=$(date +%s%N)
  "$pipetrain" import --hf "$work/gpt2" --out "$work/ckpt" >/dev/null
  end=$(date +%s%N)
  times+=("$(((end - start) / 1000000))")
  echo "import $((i + 1)): ${times[-1]} ms"
done
printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR] = $1} END {print "median: " a[int((NR + 1) / 2)] " ms"}'
