"""A pipetrain_steps setting on against off, alternating (bench/overlap_bench.py)."""
import json
import os
import pathlib
import statistics
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "peers"))
from peers_bench import wait_for_idle  # noqa: E402 (after the path it lives on)


def median_step(build, ranks, args):
    """The median step time pipetrain_steps ARGS prints on RANKS ranks, one thread each."""
    command = [f"{build}/src/pipetrain", "launch", "-n", str(ranks), "--",
               f"{build}/bench/pipetrain_steps", *map(str, args)]
    env = dict(os.environ, PIPETRAIN_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout
    line = next(l for l in out.splitlines() if l.startswith("STEPS "))
    return statistics.median(json.loads(line[len("STEPS "):]))


def compare(cases, measure, repetitions, header):
    """Runs measure(case, on) for every case, on and off in alternating order within each
    repetition (after waiting for idle cores), and prints a table: HEADER's four column
    names, then per case the medians and the ratio off / on per repetition."""
    results = {name: {True: [], False: []} for name in cases}
    for rep in range(repetitions):
        wait_for_idle()
        for name, case in cases.items():
            for on in ((True, False) if rep % 2 == 0 else (False, True)):
                results[name][on].append(measure(case, on))
        print(f"repetition {rep + 1} done", file=sys.stderr, flush=True)
    print("| " + " | ".join(header) + " |")
    print("|---|---|---|---|")
    for name, by in results.items():
        ratios = [off / on for on, off in zip(by[True], by[False])]
        print(f"| {name} | {statistics.median(by[True]):.4f} s | "
              f"{statistics.median(by[False]):.4f} s | {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f}) |")
