"""Receives posted ahead against receives posted when the stage asks (pipeline.receive_ahead).

Usage: python3 bench/receive_ahead_bench.py BUILD_DIR [REPETITIONS]

Runs bench/peers' pipetrain_steps (the peers benchmark's tied GPTs, pipe 2 x data 1, 8
micro-batches, AdamW, fp32, one intra-op thread per rank) with receive_ahead on and off,
alternating within each repetition (waiting for idle cores first), and prints each model's
median step time per setting and the ratio off / on per repetition (> 1: ahead is faster).
"""
import sys

from on_off import compare, median_step

MODELS = {  # d, heads, layers, context, micro-batch, timed steps
    "d 32": (32, 4, 4, 16, 1, 40),
    "d 96": (96, 4, 4, 64, 8, 12),
    "d 384": (384, 6, 8, 128, 4, 3),
}


def main():
    build = sys.argv[1]
    repetitions = int(sys.argv[2]) if len(sys.argv) > 2 else 5

    def measure(sizes, ahead):
        d, heads, layers, context, micro_batch, steps = sizes
        return median_step(build, 2, (d, heads, layers, context, micro_batch, 8, 2, steps, 2,
                                      int(ahead)))

    compare(MODELS, measure, repetitions,
            ("GPT", "receive ahead", "receive when asked", "off / on (per repetition)"))


if __name__ == "__main__":
    main()
