#!/usr/bin/env bash
# Break a running 4-rank job (pipe 2 x data 2) at every kind of instruction: a rank that
# exits, aborts, is killed, hangs or sends a mis-shaped tensor must end every rank with a
# non-zero status within the deadline + 10 s, and the first error printed must say which
# rank (and its coordinates) failed where.
# Usage: fault_test.sh PATH/TO/pipetrain
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$(realpath "$1")
config=$(cd "$(dirname "$0")/../trainer" && pwd)/tiny.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
deadline=5
export PIPETRAIN_COMM_TIMEOUT=$deadline

coordinates() { echo "rank $1 (pipe=$(($1 / 2)) data=$(($1 % 2)))"; }
train_args=() # more arguments for pipetrain train

fault() { # rank, instruction, action, pattern the first error line must match
  local rank=$1 instruction=$2 action=$3 pattern=$4 start end rc
  start=$(date +%s%N)
  PIPETRAIN_FAULT="rank=$rank,step=2,instruction=$instruction,action=$action" timeout 60 \
    "$pipetrain" launch -n 4 -- "$pipetrain" train --config "$config" --train-iters 3 "${train_args[@]}" >out 2>&1
  rc=$?
  end=$(date +%s%N)
  local ms=$(((end - start) / 1000000)) first
  first=$(grep -m1 '^pipetrain:' out)
  local what="$action at $instruction on rank $rank"
  check "$what: every rank ends, non-zero (exit $rc)" test "$rc" -ne 0 -a "$rc" -ne 124
  check "$what: within deadline + 10 s (${ms} ms)" test "$ms" -lt $(((deadline + 10) * 1000))
  check "$what: first error '$first' matches '$pattern'" grep -qE -- "$pattern" <<<"$first"
}

crash() { # rank, instruction, action
  fault "$1" "$2" "$3" "^pipetrain: $(coordinates "$1" | sed 's/[()]/\\&/g'): injected fault \($3\) at stage $(($1 / 2)), step [0-9]+, $2"
}
crash 2 ForwardPass exit
crash 0 BackwardPass abort
crash 3 SendGrad kill
crash 1 RecvGrad exit
crash 2 RecvActivation kill
crash 0 SendActivation abort
crash 3 LoadMicroBatch exit
crash 1 ReduceTiedGrads kill
crash 2 ReduceGrads exit
crash 0 OptimizerStep abort

# A hang: the first word comes from a rank whose deadline fired, naming whom it waited for.
fault 2 ForwardPass hang "waited [0-9.]+ s for .*rank 2|injected fault \(hang\)"
check "hang: the deadline diagnostic names the waiting rank, the peer and the instruction" \
  grep -qE "^pipetrain: rank [0-9] \(pipe=[01] data=[01]\): waited [0-9.]+ s for (recv from|send to|all_reduce|barrier|broadcast).*\[stage [01], step [0-9]+, [A-Za-z]+" out

# A mis-shaped transfer: a clear error at the receiving stage, not garbage or a hang.
fault 0 SendActivation reshape "^pipetrain: rank 2 \(pipe=1 data=0\): stage 1, step [0-9]+, ForwardPass buffer [0-9], micro-batch [0-9]: "

# A wrong dtype: the same.
fault 0 SendActivation retype "^pipetrain: rank 2 \(pipe=1 data=0\): stage 1, step [0-9]+, ForwardPass buffer [0-9], micro-batch [0-9]: "
check "wrong dtype: the error is about the data type" grep -qiE "dtype|datatype|double" out

# Under tensor parallelism (pipe 2 x model 2) a mis-shaped share is caught by the receiving
# group before an all-gather mixes it, and a rank killed mid-step still ends the job.
train_args=(--model 2)
fault 0 SendActivation reshape "^pipetrain: rank [23] \(pipe=1 data=0 model=[01]\): stage 1, step [0-9]+, RecvActivation buffer [0-9], micro-batch [0-9]: partitioned transfer: the ranks of the tensor-parallel group received different tensors"
fault 3 SendGrad kill "^pipetrain: rank 3 \(pipe=1 data=0 model=1\): injected fault \(kill\) at stage 1, step [0-9]+, SendGrad"
train_args=()

# Every executed schedule ends the job the same way, at its own instructions: ZB-H1's split
# backward, interleaved chunks (here stage 1's chunk 0 sends to stage 0's chunk 1), GPipe.
train_args=(--schedule zb-h1)
crash 1 BackwardWeight kill
crash 2 BackwardInput exit
train_args=(--schedule interleaved --chunks 2)
crash 2 SendActivation kill
train_args=(--schedule gpipe)
crash 0 BackwardPass abort
# A V: stage 1's first SendActivation is the turn, chunk 0's output handed to its own
# chunk 1 (no message); DualPipeV's first BackwardPass on stage 0 is the backward of the F&B
# pair (0F3;3B1), which runs after its forward.
train_args=(--schedule zbv --chunks 2)
crash 2 SendActivation kill
train_args=(--schedule dualpipev --chunks 2 --micro-batches 4)
crash 0 BackwardPass kill
train_args=()

# Killing the launcher, even with SIGKILL, takes mpirun and every rank with it.
"$pipetrain" launch -n 2 -- "$pipetrain" train --config "$config" --train-iters 100000 \
  --eval-interval 0 --save "$work/orphans-marker" >orphans.out 2>&1 &
launcher=$!
for _ in $(seq 100); do
  [ "$(pgrep -fc "orphans-marker")" -ge 3 ] && break
  sleep 0.2
done
sleep 2
seen=$(pgrep -fc "orphans-marker")
check "launcher test: the launcher, mpirun and both ranks were running ($seen processes)" test "$seen" -ge 4
kill -9 "$launcher"
left=1
for _ in $(seq 50); do
  left=$(pgrep -fc "orphans-marker")
  [ "$left" -eq 0 ] && break
  sleep 0.2
done
check "launcher killed with SIGKILL: no rank or mpirun left within 10 s ($left left)" test "$left" -eq 0
pkill -9 -f "orphans-marker"

# A job ends with a line saying why, also when no rank could say it: the launcher reads the
# ranks' accounts. Starts a 2-rank job, signals `target` (launcher or rank 1), waits.
signal_job() { # name, signal, target, train arguments...
  local name=$1 signal=$2 target=$3 pid
  shift 3
  # setsid: the launcher leads a process group of its own, as a terminal's job would.
  setsid "$pipetrain" launch -n 2 -- "$pipetrain" train --config "$work/at-end.json" \
    --train-iters 100000 --eval-interval 0 "$@" >"$name.out" 2>&1 &
  local launcher=$!
  for _ in $(seq 150); do
    grep -q "^step " "$name.out" && break
    sleep 0.2
  done
  pid=$launcher
  [ "$target" = group ] && pid=-$launcher # the whole group, as a terminal's Ctrl-C
  if [ "$target" = all ]; then # every process of the job, mpirun's included, as pkill does
    pkill "-$signal" -f -- "train --config $work/at-end.json .*$name"
    wait "$launcher"
    return
  fi
  if [ "$target" = rank ]; then
    for pid in $(pgrep -f "train --config $work/at-end.json"); do
      grep -qz "^OMPI_COMM_WORLD_RANK=1$" "/proc/$pid/environ" 2>/dev/null && break
    done
  fi
  kill "-$signal" -- "$pid"
  wait "$launcher"
}
errors() { grep '^pipetrain:' "$1" | tr '\n' ' '; }
sed 's|"save_interval": 6|"save_interval": 0|' "$config" >"$work/at-end.json" # saves only at the end

signal_job killed KILL rank
rc=$?
check "SIGKILL from outside: exit 137 (got $rc)" test "$rc" -eq 137
check "SIGKILL from outside: one line names the rank ($(errors killed.out))" \
  test "$(grep -c '^pipetrain:' killed.out)" -eq 1 -a -n "$(grep -E '^pipetrain: launch: rank 1 \(pipe=1 data=0\), pid [0-9]+ on .*, was killed by SIGKILL from outside the job' killed.out)"
signal_job crashed SEGV rank
rc=$?
check "SIGSEGV: exit 139 (got $rc)" test "$rc" -eq 139
check "SIGSEGV: one line names the rank ($(errors crashed.out))" \
  test "$(grep -c '^pipetrain:' crashed.out)" -eq 1 -a -n "$(grep -E '^pipetrain: launch: rank 1 \(pipe=1 data=0\), pid [0-9]+ on .*, died of SIGSEGV$' crashed.out)"

# SIGTERM without a save folder stops the job with one line, leaving no temporary file.
signal_job stopped TERM launcher
rc=$?
check "SIGTERM: exit 143 (got $rc)" test "$rc" -eq 143
check "SIGTERM: one line says why, one what was kept ($(errors stopped.out))" \
  test "$(errors stopped.out)" = "pipetrain: launch: passing SIGTERM to the job pipetrain: launch: the job stopped on SIGTERM without saving its last step "
# Ctrl-C without a save folder stops the job: exit 130, one line.
signal_job interrupted INT launcher
rc=$?
check "SIGINT: exit 130 (got $rc)" test "$rc" -eq 130
check "SIGINT: one line says why, one what was kept ($(errors interrupted.out))" \
  test "$(errors interrupted.out)" = "pipetrain: launch: passing SIGINT to the job (SIGINT again stops it at once) pipetrain: launch: the job stopped on SIGINT without saving its last step "
# Ctrl-C with a save folder keeps the work, as SIGTERM does: the step ends, is saved, exit 75.
# Sent to the launcher's process group, as a terminal sends it.
signal_job interrupted-saving INT group --save "$work/interrupted"
rc=$?
check "SIGINT with save: exit 75 (got $rc)" test "$rc" -eq 75
saved=$(cat "$work/interrupted/latest" 2>/dev/null)
check "SIGINT with save: saved, and the line names the step ($(errors interrupted-saving.out))" \
  grep -qE "^pipetrain: stopped on SIGINT after step ${saved#step_}: saved $work/interrupted/$saved" interrupted-saving.out
check "SIGINT with save: no temporary file" \
  test -z "$(find "$work/interrupted" -name '*.tmp.*' 2>/dev/null)"

# A second Ctrl-C stops the job at once, also while its step cannot end (a rank hangs in it),
# and saves nothing.
setsid env PIPETRAIN_FAULT="rank=1,step=3,instruction=ForwardPass,action=hang" PIPETRAIN_COMM_TIMEOUT=120 \
  "$pipetrain" launch -n 2 -- "$pipetrain" train --config "$work/at-end.json" --train-iters 100000 \
  --eval-interval 0 --save "$work/twice" >twice.out 2>&1 &
launcher=$!
for _ in $(seq 150); do
  grep -q "injected fault (hang)" twice.out && break
  sleep 0.2
done
kill -INT -- "-$launcher"
sleep 1
started=$SECONDS
kill -INT -- "-$launcher"
wait "$launcher"
rc=$?
check "a second SIGINT stops a job whose step hangs at once (exit $rc after $((SECONDS - started)) s)" \
  test "$rc" -ne 0 -a "$rc" -ne 75 -a $((SECONDS - started)) -lt 30
check "a second SIGINT: nothing saved" test ! -e "$work/twice/latest"

# Preemption: SIGTERM with a save folder finishes the step, saves it, and exits 75; the run
# resumed from it ends where a run that was never stopped does.
signal_job preempted TERM launcher --save "$work/preempted"
rc=$?
check "preempted: exit 75 (got $rc)" test "$rc" -eq 75
saved=$(cat "$work/preempted/latest" 2>/dev/null)
check "preempted: the line names the saved step ($(errors preempted.out))" \
  grep -qE "^pipetrain: stopped on SIGTERM after step ${saved#step_}: saved $work/preempted/$saved; run the same command to resume \(exit 75\)$" preempted.out
check "preempted: no temporary file left" test -z "$(find "$work/preempted" -name '*.tmp.*')"
total=$((${saved#step_} + 3))
"$pipetrain" launch -n 2 -- "$pipetrain" train --config "$config" --train-iters "$total" \
  --eval-interval 0 --load "$work/preempted" --save "$work/preempted" >resumed-preempted.out 2>&1
"$pipetrain" launch -n 2 -- "$pipetrain" train --config "$config" --train-iters "$total" \
  --eval-interval 0 >unstopped.out 2>&1
last() { grep -oE "^step $total/$total loss [0-9.]+" "$1"; }
check "preempted: the resumed run ends as the unstopped one ($(last resumed-preempted.out) vs $(last unstopped.out))" \
  test -n "$(last unstopped.out)" -a "$(last unstopped.out)" = "$(last resumed-preempted.out)"

# Requeued: one command, run to a first SIGTERM (exit 75, saved), run again to a second,
# then run to its end, ends as the unstopped run (the same 400 steps) and says each time
# where it starts.
requeue() { # output; SIGTERM once a step line shows unless "--to-the-end"
  setsid "$pipetrain" launch -n 2 -- "$pipetrain" train --config "$config" --train-iters 400 \
    --eval-interval 0 --save "$work/requeued" >"$1" 2>&1 &
  local launcher=$!
  if [ "${2:-}" != --to-the-end ]; then
    for _ in $(seq 300); do
      grep -q "^step " "$1" && break
      sleep 0.1
    done
    kill -TERM -- "$launcher"
  fi
  wait "$launcher"
}
requeue requeue-1.out
rc=$?
first=$(cat "$work/requeued/latest" 2>/dev/null)
check "requeue: the first run starts fresh and stops with exit 75 (got $rc; $first)" \
  test "$rc" -eq 75 -a -n "$first" -a "$(grep -c '^starting fresh: no checkpoint' requeue-1.out)" -eq 1
requeue requeue-2.out
rc=$?
second=$(cat "$work/requeued/latest" 2>/dev/null)
check "requeue: the same command resumes from $first and stops again with exit 75 (got $rc; $second)" \
  test "$rc" -eq 75 -a "${second#step_}" -gt "${first#step_}" -a \
  "$(grep -c "^resuming from the newest checkpoint in $work/requeued ($first)" requeue-2.out)" -eq 1
requeue requeue-3.out --to-the-end
rc=$?
check "requeue: the third run resumes from $second and ends (exit $rc)" \
  test "$rc" -eq 0 -a "$(grep -c "^resuming from the newest checkpoint in $work/requeued ($second)" requeue-3.out)" -eq 1
"$pipetrain" launch -n 2 -- "$pipetrain" train --config "$config" --train-iters 400 \
  --eval-interval 0 >requeue-unstopped.out 2>&1
final() { grep -oE "^step 400/400 loss [0-9.]+" "$1"; }
check "requeue: twice stopped, it ends as the unstopped run ($(final requeue-3.out) vs $(final requeue-unstopped.out))" \
  test -n "$(final requeue-unstopped.out)" -a "$(final requeue-unstopped.out)" = "$(final requeue-3.out)"

# A signal to every process of the job (launcher, mpirun, ranks: a batch system's "signal
# the job", pkill, a control-group kill) keeps the work as one to the launcher does.
for signal in TERM INT; do
  signal_job "everyone-$signal" "$signal" all --save "$work/everyone-$signal"
  rc=$?
  saved=$(cat "$work/everyone-$signal/latest" 2>/dev/null)
  check "SIG$signal to every process: exit 75 (got $rc)" test "$rc" -eq 75
  check "SIG$signal to every process: saved, the line names the signal ($(errors "everyone-$signal.out"))" \
    grep -qE "^pipetrain: stopped on SIG$signal after step ${saved#step_}: saved $work/everyone-$signal/$saved" "everyone-$signal.out"
done

# A data file that shrinks under a running job (its mapped pages past the new end fault):
# one line names the file, exit 1, no rank left.
mkdir -p "$work/shrinking"
cp /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 "$work/shrinking/"
sed "s|/usr/share/common-licenses|$work/shrinking|" "$work/at-end.json" >"$work/shrinking.json"
"$pipetrain" launch -n 2 -- "$pipetrain" train --config "$work/shrinking.json" \
  --train-iters 100000 --eval-interval 0 >shrinking.out 2>&1 &
launcher=$!
for _ in $(seq 150); do
  grep -q "^step " shrinking.out && break
  sleep 0.2
done
truncate -s 100 "$work/shrinking/GPL-3" "$work/shrinking/Apache-2.0"
wait "$launcher"
rc=$?
check "a data file shrunk under the job: exit 1 (got $rc)" test "$rc" -eq 1
check "a data file shrunk under the job: one line names it ($(errors shrinking.out))" \
  test "$(grep -c '^pipetrain:' shrinking.out)" -eq 1 -a -n "$(grep -E "^pipetrain: $work/shrinking/(GPL-3|Apache-2.0) changed while the job read it" shrinking.out)"

# An allocation that fails says what it was for and how big, on one line, exit 1.
sed 's|"d_model": 32|"d_model": 65536|' "$config" >huge.json
(ulimit -v 4000000 && "$pipetrain" launch -n 1 -- "$pipetrain" train --config huge.json --pipe 1 >huge.out 2>&1)
rc=$?
check "out of memory: exit 1 (got $rc)" test "$rc" -eq 1
check "out of memory: one line names what and how much ($(head -c 300 huge.out))" \
  test "$(wc -l <huge.out)" -eq 1 -a -n "$(grep -E "^pipetrain: rank 0 \(pipe=0 data=0\): out of memory while building the model's layers: tried to allocate [0-9.]+ GiB$" huge.out)"

# Resume after a crash: a rank dies in step 3 after step 2's checkpoint; the rerun from it
# ends with the same losses as a run that never crashed.
"$pipetrain" launch -n 4 -- "$pipetrain" train --config "$config" --train-iters 4 --eval-interval 0 >whole.out 2>&1
sed 's|"save_interval": 6|"save_interval": 1|' "$config" >every-step.json
PIPETRAIN_FAULT="rank=3,step=3,instruction=BackwardPass,action=kill" "$pipetrain" launch -n 4 -- "$pipetrain" train \
  --config every-step.json --train-iters 4 --eval-interval 0 --save crashed >crash.out 2>&1
check "crash: the first run died" test $? -ne 0
check "crash: step 2 was saved before the crash" test "$(cat crashed/latest 2>/dev/null)" = "step_2"
"$pipetrain" launch -n 4 -- "$pipetrain" train --config every-step.json --train-iters 4 --eval-interval 0 \
  --load crashed --save crashed >resumed.out 2>&1
final() { grep -oE '^step 4/4 loss [0-9.]+' "$1"; }
check "crash: the resumed run ends where the whole run did ($(final resumed.out))" \
  test -n "$(final whole.out)" -a "$(final whole.out)" = "$(final resumed.out)"

finish
