"""Data-parallel gradient buckets reduced during the last backward passes against after them
(overlap_grad_reduce on / off).

Usage: python3 bench/overlap_bench.py BUILD_DIR [REPETITIONS]

Runs bench/peers' pipetrain_steps (the peers benchmark's tied GPTs, 8 micro-batches, AdamW,
fp32, one intra-op thread per rank) at each layout and bucket size with the overlap on
and off, alternating within each repetition (waiting for idle cores first), and prints each
case's median step time per setting and the ratio off / on per repetition (> 1: the overlap
is faster).
"""
import sys

from on_off import compare, median_step

CASES = {  # d, heads, layers, context, micro-batch, stages, ranks, timed steps, bucket elements
    "d 384, pipe 1 x data 2, 1 M-element buckets": (384, 6, 8, 128, 4, 1, 2, 3, 1_000_000),
    "d 384, pipe 2 x data 2, 1 M-element buckets": (384, 6, 8, 128, 4, 2, 4, 3, 1_000_000),
}


def main():
    build = sys.argv[1]
    repetitions = int(sys.argv[2]) if len(sys.argv) > 2 else 5

    def measure(case, overlap):
        d, heads, layers, context, micro_batch, stages, ranks, steps, bucket = case
        return median_step(build, ranks, (d, heads, layers, context, micro_batch, 8, stages, steps,
                                          2, 0, int(overlap), bucket))

    compare(CASES, measure, repetitions,
            ("GPT, layout", "overlapped", "after backward", "off / on (per repetition)"))


if __name__ == "__main__":
    main()
