#!/usr/bin/env bash
# The layering check passes on the tree, and fails, naming the file and both layers, once
# a lower layer includes a header from a higher one.
set -euo pipefail
source_dir=$1
check=$source_dir/scripts/check-layers

"$check" "$source_dir"

planted=$(mktemp -d)
trap 'rm -rf "$planted"' EXIT
cp -r "$source_dir/src" "$source_dir/include" "$source_dir/docs" "$planted/"
sed -i '1i #include "trainer/trainer.h"' "$planted/src/comm/deadline.cpp"
if output=$("$check" "$planted" 2>&1); then
  echo "FAIL: an upward include (comm -> trainer) passed the check" >&2
  exit 1
fi
grep -q "src/comm/deadline.cpp: layer 'comm' includes trainer/trainer.h from layer 'trainer'" \
  <<<"$output" || { echo "FAIL: the check did not name the planted include: $output" >&2; exit 1; }

# A peer on the same row is not below either.
cp "$source_dir/src/comm/deadline.cpp" "$planted/src/comm/deadline.cpp"
sed -i '1i #include "data/token_data.h"' "$planted/src/checkpoint/safetensors.cpp"
if "$check" "$planted" 2>/dev/null; then
  echo "FAIL: checkpoint including data (same row) passed the check" >&2
  exit 1
fi
# A public header stands on its own: it includes no internal header (beside the sources).
cp "$source_dir/src/checkpoint/safetensors.cpp" "$planted/src/checkpoint/safetensors.cpp"
sed -i '1i #include "comm/watchdog.h"' "$planted/include/pipetrain/engine/pipeline_engine.h"
if output=$("$check" "$planted" 2>&1); then
  echo "FAIL: a public header including an internal one passed the check" >&2
  exit 1
fi
grep -q "include/pipetrain/engine/pipeline_engine.h: a public header includes the internal comm/watchdog.h" \
  <<<"$output" || { echo "FAIL: the check did not name the public header: $output" >&2; exit 1; }
cp "$source_dir/include/pipetrain/engine/pipeline_engine.h" "$planted/include/pipetrain/engine/pipeline_engine.h"
# The public headers are the ones docs/user/cpp-api.md lists: one more in include/ fails.
echo '#pragma once' >"$planted/include/pipetrain/engine/unlisted.h"
if output=$("$check" "$planted" 2>&1); then
  echo "FAIL: a public header docs/user/cpp-api.md does not list passed the check" >&2
  exit 1
fi
grep -q "include/pipetrain/engine/unlisted.h: a public header docs/user/cpp-api.md does not list" \
  <<<"$output" || { echo "FAIL: the check did not name the unlisted header: $output" >&2; exit 1; }
rm "$planted/include/pipetrain/engine/unlisted.h"
"$check" "$planted" >/dev/null
echo "layering: the check passes on the tree and fails on planted includes and an unlisted header"

# Names are compared only where they are parsed: the tree passes, a planted comparison fails.
names=$source_dir/scripts/check-names
"$names" "$source_dir"
cp "$source_dir/src/checkpoint/safetensors.cpp" "$planted/src/checkpoint/safetensors.cpp"
echo 'inline bool planted(const std::string& t) { return t == "mixtral"; }' \
  >>"$planted/src/trainer/trainer.cpp"
if output=$("$names" "$planted" 2>&1); then
  echo "FAIL: a model name compared in the trainer passed the name check" >&2
  exit 1
fi
grep -q "src/trainer/trainer.cpp:[0-9]*: compares a model family name" <<<"$output" ||
  { echo "FAIL: the name check did not name the planted comparison: $output" >&2; exit 1; }
echo 'inline bool planted_block(const std::string& t) { return t == "LlamaBlock"; }' \
  >>"$planted/src/planner/planner.cpp"
output=$("$names" "$planted" 2>&1) || true
grep -q "src/planner/planner.cpp:[0-9]*: compares a layer type name" <<<"$output" ||
  { echo "FAIL: the name check did not name a layer type compared in the planner: $output" >&2; exit 1; }
echo 'inline bool planted_data(const std::string& t) { return t == "indexed"; }' \
  >>"$planted/src/trainer/job.cpp"
output=$("$names" "$planted" 2>&1) || true
grep -q "src/trainer/job.cpp:[0-9]*: compares a data type name" <<<"$output" ||
  { echo "FAIL: the name check did not name a data type compared in the job: $output" >&2; exit 1; }
echo "names: the check passes on the tree and fails on a planted comparison"
