"""Data-parallel gradient buckets all-reduced during the last backward passes against after them
(overlap_grad_reduce on / off).

Usage: python3 bench/overlap_bench.py BUILD_DIR [REPETITIONS]

Runs bench/peers' pipetrain_steps (the peers benchmark's tied GPTs, 8 micro-batches, AdamW,
fp32, one intra-op thread per rank) at each layout and bucket size with the overlap on
and off, alternating within each repetition (waiting for idle cores first), and prints each
case's median step time per setting and the ratio off / on per repetition (> 1: the overlap
is faster).
"""
import json
import os
import pathlib
import statistics
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "peers"))
from peers_bench import wait_for_idle  # noqa: E402 (after the path it lives on)

CASES = {  # d, heads, layers, context, micro-batch, stages, ranks, timed steps, bucket elements
    "d 384, pipe 1 x data 2, 1 M-element buckets": (384, 6, 8, 128, 4, 1, 2, 3, 1_000_000),
    "d 384, pipe 2 x data 2, 1 M-element buckets": (384, 6, 8, 128, 4, 2, 4, 3, 1_000_000),
}


def median_step(build, case, overlap):
    d, heads, layers, context, micro_batch, stages, ranks, steps, bucket = case
    args = (d, heads, layers, context, micro_batch, 8, stages, steps, 2, 0, int(overlap), bucket)
    command = [f"{build}/src/pipetrain", "launch", "-n", str(ranks), "--",
               f"{build}/bench/pipetrain_steps", *map(str, args)]
    env = dict(os.environ, PIPETRAIN_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout
    line = next(l for l in out.splitlines() if l.startswith("STEPS "))
    return statistics.median(json.loads(line[len("STEPS "):]))


def main():
    build = sys.argv[1]
    repetitions = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    results = {name: {True: [], False: []} for name in CASES}
    for rep in range(repetitions):
        wait_for_idle()
        for name, case in CASES.items():
            for overlap in ((True, False) if rep % 2 == 0 else (False, True)):
                results[name][overlap].append(median_step(build, case, overlap))
        print(f"repetition {rep + 1} done", file=sys.stderr, flush=True)
    print("| GPT, layout | overlapped | after backward | off / on (per repetition) |")
    print("|---|---|---|---|")
    for name, by in results.items():
        ratios = [off / on for on, off in zip(by[True], by[False])]
        print(f"| {name} | {statistics.median(by[True]):.4f} s | "
              f"{statistics.median(by[False]):.4f} s | {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f}) |")


if __name__ == "__main__":
    main()
