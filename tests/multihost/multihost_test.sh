#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces joined by a veth pair, each with its own
# address; mpirun starts the remote daemons through an agent that enters the other
# namespace instead of ssh, and ranks talk over TCP across the link. Checks that ranks
# land on both hosts, that training across them matches a single-host run, and that a rank
# killed on the second host ends the job with its message. Ranks use TCP even beside each
# other: the "hosts" share one /dev/shm, where shared-memory transports would collide.
# Usage: multihost_test.sh PATH/TO/pipetrain   (needs root for `ip netns`; else exit 77: skipped)
set -u
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
pipetrain=$(realpath "$1")
config=$(cd "$(dirname "$0")/../trainer" && pwd)/tiny.json
work=$(mktemp -d)
prefix="pt$$"  # namespace and link names unique to this run
hosts=("${prefix}a" "${prefix}b")
addresses=(10.231.0.1 10.231.0.2)

cleanup() {
  for h in "${hosts[@]}"; do ip netns del "$h" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

if [ "$(id -u)" -ne 0 ] || ! ip netns add "${hosts[0]}" 2>/dev/null; then
  echo "SKIP: creating network namespaces needs root and iproute2"
  exit 77
fi
ip netns add "${hosts[1]}"
ip link add "${prefix}0" type veth peer name "${prefix}1"
for i in 0 1; do
  ip link set "${prefix}$i" netns "${hosts[$i]}"
  ip -n "${hosts[$i]}" addr add "${addresses[$i]}/24" dev "${prefix}$i"
  ip -n "${hosts[$i]}" link set "${prefix}$i" up
  ip -n "${hosts[$i]}" link set lo up
done

# mpirun's remote-shell agent: "agent HOST COMMAND..." runs COMMAND in HOST's namespace.
cat >"$work/agent" <<AGENT
#!/bin/sh
host=\$1
shift
case "\$host" in
  ${addresses[0]}) ns=${hosts[0]} ;;
  ${addresses[1]}) ns=${hosts[1]} ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
AGENT
chmod +x "$work/agent"
printf '%s slots=2\n%s slots=2\n' "${addresses[@]}" >"$work/hostfile"
cd "$work" || exit 1
export PIPETRAIN_COMM_TIMEOUT=10
export PIPETRAIN_MPIRUN_ARGS="--mca plm_rsh_agent $work/agent --mca btl self,tcp --mca btl_tcp_if_include 10.231.0.0/24 --mca oob_tcp_if_include 10.231.0.0/24"

on_two_hosts() { timeout 120 ip netns exec "${hosts[0]}" "$pipetrain" launch -n 4 --hostfile hostfile -- "$@"; }

# 1. Placement: two ranks in each namespace.
on_two_hosts sh -c 'echo "$OMPI_COMM_WORLD_RANK $(readlink /proc/self/ns/net)"' >placement.out 2>&1
check "placement: 4 ranks reported" test "$(wc -l <placement.out)" -eq 4
check "placement: two network namespaces, two ranks each" \
  test "$(awk '{ print $2 }' placement.out | sort | uniq -c | awk '{ print $1 }' | tr '\n' ' ')" = "2 2 "

# 2. Training across the link equals training on one host.
on_two_hosts "$pipetrain" train --config "$config" --train-iters 4 --eval-interval 0 >two-hosts.out 2>&1
check "train across hosts: exit 0" test $? -eq 0
PIPETRAIN_MPIRUN_ARGS="" "$pipetrain" launch -n 4 -- "$pipetrain" train --config "$config" --train-iters 4 \
  --eval-interval 0 >one-host.out 2>&1
loss() { grep -oE '^step 4/4 loss [0-9.]+' "$1"; }
check "train across hosts: step 4 loss equals one host's ($(loss two-hosts.out))" \
  test -n "$(loss one-host.out)" -a "$(loss one-host.out)" = "$(loss two-hosts.out)"

# 3. A rank killed on the second host ends the whole job, and says so first.
start=$(date +%s)
PIPETRAIN_FAULT="rank=3,step=2,instruction=ForwardPass,action=kill" on_two_hosts "$pipetrain" train \
  --config "$config" --train-iters 3 >killed.out 2>&1
rc=$?
seconds=$(($(date +%s) - start))
check "kill on host 2: the job ends non-zero (exit $rc)" test "$rc" -ne 0 -a "$rc" -ne 124
check "kill on host 2: within the deadline + 10 s (${seconds} s)" test "$seconds" -lt 20
check "kill on host 2: the first error names rank 3 (pipe=1 data=1) and the instruction" \
  grep -m1 -qE '^pipetrain: rank 3 \(pipe=1 data=1\): injected fault \(kill\) at stage 1, step [0-9]+, ForwardPass' killed.out

finish
