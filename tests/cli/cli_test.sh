#!/usr/bin/env bash
# The pipetrain command as a user meets it: output, exit codes, one-line errors.
# Usage: cli_test.sh PATH/TO/pipetrain SOURCE_DIR
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$1
examples=$2/examples
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The key table in docs/user/config.md is what `pipetrain keys` prints from the one key table.
run keys
check "keys exits 0" test "$rc" -eq 0
check "keys lists pipeline.stages" grep -qF '| `pipeline.stages` | int | `1` |' "$work/out"
sed -n '/^<!-- keys: generated/,/^<!-- end of keys -->/p' "$2/docs/user/config.md" | sed '1d;$d' >"$work/readme-keys"
check "docs/user/config.md's key table is the output of 'pipetrain keys'" diff "$work/out" "$work/readme-keys"

run --version
check "--version exits 0" test "$rc" -eq 0
check "--version prints the version" grep -qE '^pipetrain [0-9]+\.[0-9]+\.[0-9]+$' "$work/out"

run --help
check "--help lists schedule and simulate" grep -q simulate "$work/out"

run schedule --kind train --micro-batches 4 --stages 3 --stage 1 --format json
check "schedule json exits 0" test "$rc" -eq 0
check "schedule json is the spec's worked example" grep -qF \
  '{"num_pipe_buffers":2,"steps":[[],[["RecvActivation",0],["ForwardPass",0]],[["SendActivation",0]]' \
  "$work/out"
check "schedule json is one line" test "$(wc -l <"$work/out")" -eq 1

run schedule --kind zb-h1 -m 4 -p 2
check "schedule table exits 0" test "$rc" -eq 0
check "schedule table shows every stage" grep -q "stage 0 .*stage 1" "$work/out"
check "schedule table shows weight gradients" grep -q "W[0-9]" "$work/out"

run simulate --kind zb-h1 -m 8 -p 4 --svg "$work/zb.svg"
check "simulate exits 0" test "$rc" -eq 0
check "simulate reports the bubble" grep -q "^bubble: 11.11% of stage time" "$work/out"
check "simulate writes an SVG" grep -q "</svg>" "$work/zb.svg"
check "simulate leaves no temporary file" test "$(ls "$work" | grep -c tmp)" -eq 0

expect_input_error "stages must be at least 1" schedule --kind train -m 4 -p 0 --stage 0
expect_input_error "stage 3 is out of range" schedule --kind train -m 4 -p 3 --stage 3
expect_input_error "unknown schedule kind 'pipedream'" schedule --kind pipedream -m 4 -p 3
expect_input_error "micro-batches must be at least 1" simulate --kind gpipe -m 0 -p 2
# The whole plan as JSON reads back as a schedule file: the same plan.
for kind in zb-h1 zbv dualpipev; do
  "$pipetrain" schedule --kind "$kind" -m 4 -p 2 --format json >"$work/$kind.json"
  check "schedule --format json of $kind reads back with --kind file as the same plan" \
    test "$("$pipetrain" schedule --kind "$kind" -m 4 -p 2 --format csv)" = \
    "$("$pipetrain" schedule --kind file --file "$work/$kind.json" --format csv)"
done
sed 's/"stages":2/"stages":"two"/' "$work/zbv.json" >"$work/bad.json"
expect_input_error '"stages" must be an integer' schedule --kind file --file "$work/bad.json"
expect_input_error "format" schedule --kind train -m 4 -p 2 --format xml
expect_input_error "micro-batches" schedule --kind train --micro-batches four -p 2
expect_input_error "forward cost needs 1 or 2 values" simulate --kind train -m 4 -p 2 --forward 1,2,3
expect_input_error "divisible" simulate --kind interleaved -m 7 -p 5 -v 2
expect_input_error "unknown command 'frobnicate'" frobnicate
expect_input_error "no-such-dir" simulate --kind train -m 2 -p 2 --svg "$work/no-such-dir/x.svg"

run partition --config "$examples/gpt-small.json" --stages 2
check "partition exits 0" test "$rc" -eq 0
check "partition shows stage 1's layers" grep -q "^stage 1: layers 3-6, 120576 parameters" "$work/out"
check "partition marks tied layers" grep -q "GptHead .* tied 'embed'" "$work/out"

run partition --config "$examples/gpt-small.json" --stages 2 --method profile
check "partition by profile exits 0" test "$rc" -eq 0
check "partition by profile shows times" grep -q " ms$" "$work/out"

printf '{"model": {"type": "gpt", "d_model": "wide"}}' >"$work/bad-type.json"
printf '{"model": {"type": "gpt"' >"$work/broken.json"
printf '{"model": {"type": "rnn"}}' >"$work/bad-model.json"
expect_input_error 'model.d_model must be an integer, got "wide"' partition --config "$work/bad-type.json" --stages 2
expect_input_error "is not valid JSON" partition --config "$work/broken.json" --stages 2
expect_input_error 'model.type must be "gemma3", "gpt", "llama", "mistral", "mixtral", "mlp", "qwen2", "qwen3" or "qwen3_moe"' partition --config "$work/bad-model.json" --stages 2
expect_input_error "cannot be read" partition --config "$work/missing.json" --stages 2
expect_input_error "cannot split 7 layers over 9 stages" partition --config "$examples/gpt-small.json" --stages 9
expect_input_error "unknown partition method 'random'" partition --config "$examples/gpt-small.json" --stages 2 --method random

run launch -n 2 --dry-run -- true --flag
check "launch --dry-run prints mpirun" grep -q "^mpirun --quiet -np 2 .* true --flag$" "$work/out"
run launch -n 2 -- sh -c 'exit 3'
check "launch returns the job's exit status (got $rc)" test "$rc" -eq 3
expect_input_error "must be at least 1" launch -n 0 -- prog
expect_input_error "needs a program" launch -n 2
expect_input_error "does not exist" launch -n 2 --hostfile "$work/no-hosts" -- true
expect_input_error "program no-such-program not found" launch -n 2 -- no-such-program
expect_input_error "only for 'launch'" schedule -m 2 -p 2 -- extra

# The Quick start's first command, shortened to 2 steps. It writes runs/default in the
# source tree, so it runs only where there is none (a fresh checkout, as in CI) and
# removes it after.
source_dir=$2
if [ -e "$source_dir/runs/default" ]; then
  echo "skipped: scripts/train (runs/default exists in $source_dir; not overwritten)"
else
  PIPETRAIN_BUILD_DIR=$(cd "$(dirname "$pipetrain")/.." && pwd) \
    "$source_dir/scripts/train" --train-iters 2 --eval-interval 0 >"$work/train.out" 2>&1
  check "scripts/train runs the default job ($(tail -1 "$work/train.out" | head -c 200))" \
    grep -q "^validation loss: .* after 2 steps" "$work/train.out"
  check "scripts/train leaves its outputs in runs/default" \
    test -s "$source_dir/runs/default/metrics.jsonl" -a -d "$source_dir/runs/default/checkpoints/step_2"
  rm -rf "$source_dir/runs/default"
  rmdir "$source_dir/runs" 2>/dev/null
fi

finish
