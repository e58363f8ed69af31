#!/usr/bin/env bash
# Generation speed with the KV cache against without (the whole window run for every
# token), side by side and interleaved:
#   bench/generate_bench.sh build/src/pipetrain [REPETITIONS] [flight]
# (flight: the prompts-in-flight case alone)
# The model is the default job's GPT (examples/default.json: d 96, 4 blocks, bytes) with
# its context raised to 320 so that 256 new tokens after a 16-byte prompt fit without the
# window sliding, trained 40 steps (speed does not depend on the weights). Each repetition
# generates 256 tokens greedily at pipe 1 and pipe 2 (2 ranks, one thread each), with and
# without the cache in turn, eight times one after another in one job, and prints tokens
# per second (`seconds` of --format jsonl: the generation alone, not the start-up); then
# the median of each and the ratios.
# Also the default job's own context of 64, where the window slides after 64 tokens and
# every later step starts afresh with or without a cache. Last, 8 prompts of 256 new tokens
# at pipe 2 (context 320, with the cache): all in flight against one after another
# (--one-at-a-time), the wall time of the generation (the sum of the prompts' seconds one
# at a time, the batch's in flight).
set -euo pipefail
pipetrain=$(realpath "$1")
repetitions=${2:-3}
only=${3:-}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
make_model() { # CONTEXT FOLDER
  python3 - "$root/examples/default.json" "$1" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["model"]["context"] = int(sys.argv[2])
c.update({"train_iters": 40, "eval_interval": 0, "save": sys.argv[3], "save_interval": 40,
          "log": {}, "trace": "", "sample": {"tokens": 0}})
c["scheduler"]["params"]["total_num_steps"] = 40
json.dump(c, open(sys.argv[3] + ".json", "w"))
PY
  PIPETRAIN_THREADS=1 "$pipetrain" launch -n 2 -- "$pipetrain" train --config "$2.json" >/dev/null
}
make_model 320 long
[ "$only" = flight ] || make_model 64 short
prompt="The licence says"  # 16 bytes
for i in 1 2 3 4 5 6 7 8; do echo "$prompt"; done >same-eight.txt
rate() { # CHECKPOINT RANKS [--no-kv-cache]: tokens per second of 256 new tokens
  # Eight times over, one after another, in one job: one generation lasts about 0.1 s.
  local checkpoint=$1 ranks=$2
  shift 2
  PIPETRAIN_THREADS=1 "$pipetrain" launch -n "$ranks" -- "$pipetrain" generate --checkpoint "$checkpoint" \
    --prompts same-eight.txt --one-at-a-time --tokens 256 --temperature 0 --format jsonl "$@" |
    python3 -c 'import json, sys; r = [json.loads(l) for l in sys.stdin]; print("%.1f" % (sum(len(x["tokens"]) for x in r) / sum(x["seconds"] for x in r)))'
}
declare -A runs
cases=(long:1 long:2 short:2)
[ "$only" = flight ] && cases=()
for ((i = 1; i <= repetitions; i++)); do
  for case in "${cases[@]}"; do
    checkpoint=${case%:*} ranks=${case#*:}
    cached=$(rate "$checkpoint" "$ranks")
    whole=$(rate "$checkpoint" "$ranks" --no-kv-cache)
    echo "repetition $i, $checkpoint context, pipe $ranks: cache $cached tokens/s, without $whole tokens/s"
    runs[$case:cache]+="$cached "
    runs[$case:whole]+="$whole "
  done
done
for i in 1 2 3 4 5 6 7 8; do echo "Prompt number $i of eight:"; done >eight.txt
batch() { # [--one-at-a-time]: seconds for 8 prompts of 256 new tokens at pipe 2
  PIPETRAIN_THREADS=1 "$pipetrain" launch -n 2 -- "$pipetrain" generate --checkpoint long \
    --prompts eight.txt --tokens 256 --temperature 0 --format jsonl "$@" |
    python3 -c 'import json, sys; s = [json.loads(l)["seconds"] for l in sys.stdin]; print("%.4f" % (max(s) if len(sys.argv) == 1 else sum(s)))' "$@"
}
for ((i = 1; i <= repetitions; i++)); do
  together=$(batch)
  apart=$(batch --one-at-a-time)
  echo "repetition $i, 8 prompts at pipe 2: in flight $together s, one at a time $apart s"
  runs[flight]+="$together "
  runs[apart]+="$apart "
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
for case in "${cases[@]}"; do
  cached=$(echo "${runs[$case:cache]}" | median)
  whole=$(echo "${runs[$case:whole]}" | median)
  ratio=$(echo "$cached / $whole" | bc -l)
  printf 'median, %s context (%s), pipe %s: cache %s, without %s tokens/s: %.2fx\n' \
    "${case%:*}" "$([ "${case%:*}" = long ] && echo 320 || echo 64)" "${case#*:}" "$cached" "$whole" "$ratio"
done
together=$(echo "${runs[flight]}" | median)
apart=$(echo "${runs[apart]}" | median)
printf 'median, 8 prompts at pipe 2: in flight %s s, one at a time %s s: %.2fx\n' "$together" "$apart" \
  "$(echo "$apart / $together" | bc -l)"
