#!/usr/bin/env bash
# Checkpoints written in the background (checkpoint.async) hold exactly what a synchronous
# save holds at the same steps, with ZeRO and dropout at pipe 2 x data 2; a rank killed in
# the middle of a background write leaves the previous `latest` loadable, and the same
# command resumes from it to the unstopped run's losses; SIGTERM waits for the write in
# flight, then saves and exits 75.
# Usage: async_save_test.sh PATH/TO/pipetrain PYTHON (with safetensors)
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$(realpath "$1")
python=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
export PIPETRAIN_COMM_TIMEOUT=60 OMP_NUM_THREADS=1

config() {  # NAME ASYNC [EXTRA KEYS]
  sed "s|\"train_iters\": 12|\"train_iters\": 8|; s|\"save_interval\": 6|\"save_interval\": 2, \"checkpoint\": {\"async\": $2}, \"zero_optimization\": {\"stage\": 1}, \"log\": {\"metrics\": \"$1.jsonl\"}${3:-}|" \
    "$here/../trainer/tiny.json" >"$1.json"
}
train() {  # NAME [ENV...]
  local name=$1
  shift
  env "$@" "$pipetrain" launch -n 4 -- "$pipetrain" train --config "$name.json" --save "$name" >"$name.out" 2>&1
}

config sync false
train sync
check "sync run: exits 0 ($(tail -1 sync.out))" test $? -eq 0
config background true
train background
check "background run: exits 0 ($(tail -1 background.out))" test $? -eq 0
check "background run: says each staged save and its publication" \
  test "$(grep -c 'checkpoint staged in [0-9.]* s, writing in the background' background.out)" -eq 3 -a \
  "$(grep -c 'saved background/step_[246] (written in the background)' background.out)" -eq 3
check "background run: the metrics hold the save's stall" grep -q '"save_stall_s":' background.jsonl
check "background run: latest is the last step's" test "$(cat background/latest)" = step_8
check "background saves hold what synchronous ones hold, file by file" "$python" - <<'PY'
import glob, os, safetensors.torch as st
for step in ("step_2", "step_4", "step_6", "step_8"):
    names = sorted(os.path.basename(f) for f in glob.glob(f"sync/{step}/*.safetensors"))
    assert names and names == sorted(os.path.basename(f) for f in glob.glob(f"background/{step}/*.safetensors")), step
    for name in names:
        a, b = st.load_file(f"sync/{step}/{name}"), st.load_file(f"background/{step}/{name}")
        assert a.keys() == b.keys(), (step, name)
        for key in a:
            assert a[key].equal(b[key]), (step, name, key)
PY

# A rank killed while its thread writes step_4: latest stays step_2, which resumes.
config killed true
set_iters() {  # FILE STEPS
  "$python" -c "import json,sys; c=json.load(open(sys.argv[1])); c['train_iters']=int(sys.argv[2]); json.dump(c, open(sys.argv[1], 'w'))" "$@"
}
set_iters killed.json 2
train killed
check "killed: the first 2 steps saved" test "$(cat killed/latest 2>/dev/null)" = step_2
set_iters killed.json 8
train killed PIPETRAIN_FAULT_KILL_IN_SAVE=2  # pipe 1, data 0: a writing rank
rc=$?
check "killed: rank 2 dies writing step_4 in the background (exit $rc)" test "$rc" -ne 0 -a "$rc" -ne 75
check "killed: latest still names step_2 ($(cat killed/latest))" test "$(cat killed/latest)" = step_2
train killed
check "killed: the same command resumes from step_2 and finishes ($(tail -1 killed.out))" \
  grep -q "resuming from the newest checkpoint in killed (step_2)" killed.out
check "killed: the losses of the unstopped run" "$python" - <<'PY'
import json
rows = lambda name: {r["step"]: r["loss"] for r in map(json.loads, open(f"{name}.jsonl"))}
a, b = rows("sync"), rows("killed")
assert sorted(b) == list(range(1, 9)), sorted(b)
assert all(abs(a[s] - b[s]) <= 1e-6 * abs(a[s]) for s in a), (a, b)
PY

# SIGTERM while a save may be in flight: it is finished, then the stop's own save.
config stopped true
sed -i 's|"train_iters": 8|"train_iters": 400|' stopped.json
"$pipetrain" launch -n 4 -- "$pipetrain" train --config stopped.json --save stopped >stopped.out 2>&1 &
job=$!
for _ in $(seq 1 300); do
  grep -q "saved stopped/step_4 (written in the background)" stopped.out 2>/dev/null && break
  sleep 0.1
done
kill -TERM "$job"
wait "$job"
rc=$?
check "SIGTERM: exit 75 after saving (got $rc: $(grep 'stopped on' stopped.out))" test "$rc" -eq 75
step=$(sed -n 's/.*saved stopped\/\(step_[0-9]*\); run the same command.*/\1/p' stopped.out)
check "SIGTERM: latest is the stop's save ($step)" test -n "$step" -a "$(cat stopped/latest)" = "$step"
check "SIGTERM: no unpublished save is left" test -z "$(find stopped -maxdepth 1 -name '.*.saving')"
finish
