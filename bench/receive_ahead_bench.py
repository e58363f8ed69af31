"""Receives posted ahead against receives posted when the stage asks (pipeline.receive_ahead).

Usage: python3 bench/receive_ahead_bench.py BUILD_DIR [REPETITIONS]

Runs bench/peers' pipetrain_steps (the peers benchmark's tied GPTs, pipe 2 x data 1, 8
micro-batches, AdamW, fp32, one intra-op thread per rank) with receive_ahead on and off,
alternating within each repetition (waiting for idle cores first), and prints each model's
median step time per setting and the ratio off / on per repetition (> 1: ahead is faster).
"""
import json
import os
import pathlib
import statistics
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "peers"))
from peers_bench import wait_for_idle  # noqa: E402 (after the path it lives on)

MODELS = {  # d, heads, layers, context, micro-batch, timed steps
    "d 32": (32, 4, 4, 16, 1, 40),
    "d 96": (96, 4, 4, 64, 8, 12),
    "d 384": (384, 6, 8, 128, 4, 3),
}


def median_step(build, sizes, ahead):
    d, heads, layers, context, micro_batch, steps = sizes
    command = [f"{build}/src/pipetrain", "launch", "-n", "2", "--", f"{build}/bench/pipetrain_steps",
               *map(str, (d, heads, layers, context, micro_batch, 8, 2, steps, 2, int(ahead)))]
    env = dict(os.environ, PIPETRAIN_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout
    line = next(l for l in out.splitlines() if l.startswith("STEPS "))
    return statistics.median(json.loads(line[len("STEPS "):]))


def main():
    build = sys.argv[1]
    repetitions = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    results = {name: {True: [], False: []} for name in MODELS}
    for rep in range(repetitions):
        wait_for_idle()
        for name, sizes in MODELS.items():
            for ahead in ((True, False) if rep % 2 == 0 else (False, True)):
                results[name][ahead].append(median_step(build, sizes, ahead))
        print(f"repetition {rep + 1} done", file=sys.stderr, flush=True)
    print("| GPT | receive ahead | receive when asked | off / on (per repetition) |")
    print("|---|---|---|---|")
    for name, by in results.items():
        ratios = [off / on for on, off in zip(by[True], by[False])]
        print(f"| {name} | {statistics.median(by[True]):.4f} s | "
              f"{statistics.median(by[False]):.4f} s | {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}–{max(ratios):.3f}) |")


if __name__ == "__main__":
    main()
