"""pipetrain plan on paper against Megatron-LM's published runs.

Usage: python3 bench/plan_megatron.py [--cluster clusters/dgx-a100-80gb.json]

For each GPT of Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on
GPU Clusters Using Megatron-LM", SC'21, Table 1: sequence 2048, vocabulary 51200, mixed
precision, activation recomputation, the interleaved schedule, DGX A100 80GB nodes) the
planner (1) predicts their layout (their t and p, d the rest, checkpointing on, the
planner choosing micro-batch and schedule) and (2) chooses freely. Throughputs are
teraFLOP/s per GPU counted as the paper counts them (eq. 3, recomputation included).
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PIPETRAIN = ROOT / "build" / "src" / "pipetrain"
SEQUENCE, VOCAB = 2048, 51200
# billions, heads, hidden, layers, t, p, GPUs, batch, their teraFLOP/s per GPU
TABLE_1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]


def eq3_flops(batch, layers, hidden):
    """The paper's FLOPs per iteration with recomputation (eq. 3)."""
    s, h, l, V = SEQUENCE, hidden, layers, VOCAB
    return 96 * batch * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def plan(config_path, cluster, nodes, batch, *limits):
    out = subprocess.run(
        [str(PIPETRAIN), "plan", "--config", str(config_path), "--cluster", str(cluster),
         "--nodes", str(nodes), "--global-batch", str(batch), "--format", "json", "--top", "1",
         *map(str, limits)], capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip().splitlines()[-1]
    row = json.loads(out.stdout)[0]
    return row, row["rejected"]


def layout(row):
    schedule = row["schedule"] + (f" x{row['chunks']}" if row["chunks"] > 1 else "")
    return (f"t{row['model_parallel']} p{row['pipe']} d{row['data']} b{row['micro_batch']} "
            f"{schedule}{' ckpt' if row['checkpointing'] else ''}{' zero1' if row['zero'] else ''}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster", default=ROOT / "clusters" / "dgx-a100-80gb.json")
    parser.add_argument("--dropout", type=float, default=0.1,
                        help="the GPT's dropout (Megatron-LM's runs: 0.1, attention and hidden)")
    parser.add_argument("--their-layouts-only", action="store_true",
                        help="skip the free choice (minutes per model for the largest)")
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="plan-megatron-"))
    print("| GPT | GPUs | batch | their layout | their TFLOP/s | predicted at their layout | "
          "difference | planner's pick | predicted at the pick |")
    print("|---|---|---|---|---|---|---|---|---|")
    for billions, heads, hidden, layers, t, p, gpus, batch, theirs in TABLE_1:
        config = {"model": {"type": "gpt", "vocab_size": VOCAB, "context": SEQUENCE,
                            "d_model": hidden, "heads": heads, "layers": layers,
                            "dropout": args.dropout},
                  "fp16": {"enabled": True}, "optimizer": {"type": "Adam"}}
        path = work / f"gpt-{billions}.json"
        path.write_text(json.dumps(config))
        nodes = gpus // 8
        flops = eq3_flops(batch, layers, hidden)
        # Their layout as they ran it: interleaved where there is a pipe, no distributed
        # optimizer (ZeRO 0), every layer recomputed.
        schedule = ["--schedule", "interleaved"] if p > 1 else []
        at_theirs, why = plan(path, args.cluster, nodes, batch, "--model", t, "--pipe", p,
                              "--checkpointing", "on", "--zero", 0, *schedule)
        if at_theirs and not at_theirs["rejected"]:
            mine = flops / at_theirs["step_seconds"] / gpus / 1e12
            predicted = f"{mine:.0f} ({layout(at_theirs)})"
            difference = f"{100 * (mine / theirs - 1):+.0f}%"
        else:
            predicted, difference = f"does not fit: {why}", "-"
        pick, why = (None, "skipped") if args.their_layouts_only else plan(
            path, args.cluster, nodes, batch)
        if pick and not pick["rejected"]:
            chosen = layout(pick)
            speed = f"{flops / pick['step_seconds'] / gpus / 1e12:.0f}"
        else:
            chosen, speed = f"none: {why}", "-"
        print(f"| {billions}B | {gpus} | {batch} | t{t} p{p} d{gpus // (t * p)} | {theirs} |"
              f" {predicted} | {difference} | {chosen} | {speed} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
