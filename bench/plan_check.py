"""pipetrain plan's predictions against measured runs on this machine.

Usage: python3 bench/plan_check.py [--repeats N] [--models small,medium,large]
                                   [--layouts 1x1,2x1,4x1,1x2,2x2] [--cluster FILE]
                                   [--save-cluster FILE]

Calibrates the machine (pipetrain calibrate, 2 ranks) unless --cluster names a file, then
for each GPT size of the peers benchmark (vocabulary 1024, Megatron indexed data) and each
pipe x data layout trains with memory_breakdown on and compares, per layout:
  - step time: the median over the timed steps of all repetitions (runs interleaved);
  - peak memory per stage: the most any rank of the stage held (CPU tensor bytes).
Four ranks on this 2-core machine share cores: those runs are predicted on a cluster of 4
devices with shared_cores 2 (a rank computes slower while more ranks than cores compute).
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PIPETRAIN = ROOT / "build" / "src" / "pipetrain"
MODELS = {  # d, heads, layers, context, micro-batch: the peers benchmark's GPTs
    "small": (32, 4, 4, 16, 1),
    "medium": (96, 4, 4, 64, 8),
    "large": (384, 6, 8, 128, 4),
}
MICRO_BATCHES = 8
STEPS, WARMUP = 8, 3


def run(*args, env=None):
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, args))}\n{result.stderr[-2000:]}")
    return result.stdout


def job_config(work, model, pipe, data):
    d, heads, layers, context, micro = MODELS[model]
    return {
        "model": {"type": "gpt", "vocab_size": 1024, "context": context, "d_model": d,
                  "heads": heads, "layers": layers},
        "pipeline": {"stages": pipe},
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": MICRO_BATCHES,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
        "data": {"type": "indexed", "paths": [str(work / "corpus")]},
        "train_iters": STEPS, "eval_interval": 0, "eval_iters": 1, "sample": {"tokens": 0},
        "memory_breakdown": True,
    }


def measure(work, model, pipe, data, tag):
    config = job_config(work, model, pipe, data)
    metrics = work / f"{tag}.jsonl"
    config["log"] = {"metrics": str(metrics)}
    path = work / f"{tag}.json"
    path.write_text(json.dumps(config))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run(PIPETRAIN, "launch", "-n", pipe * data, "--", PIPETRAIN, "train", "--config", path,
        env=env)
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    batch = MODELS[model][4] * MICRO_BATCHES * data
    steps = [batch / r["samples_per_s"] for r in records[WARMUP:]]
    peaks = records[-1]["cpu_peak_memory_bytes"]  # per rank; pipe is the outer axis
    stage_peaks = [max(peaks[s * data:(s + 1) * data]) for s in range(pipe)]
    return steps, stage_peaks


def predict(work, cluster, model, pipe, data):
    config = job_config(work, model, pipe, data)
    path = work / "predict.json"
    path.write_text(json.dumps(config))
    micro = MODELS[model][4]
    out = run(PIPETRAIN, "plan", "--config", path, "--cluster", cluster, "--global-batch",
              micro * MICRO_BATCHES * data, "--devices", pipe * data, "--pipe", pipe, "--data",
              data, "--model", 1, "--micro-batch", micro, "--schedule", "1f1b", "--zero", 0,
              "--checkpointing", "off", "--format", "json", "--top", 1)
    row = json.loads(out)[0]
    return row["step_seconds"], [s["total"] for s in row["stages"]]


def shared_cores(cluster_file, work, ranks):
    """The calibrated machine as `ranks` devices sharing its cores (shared_cores)."""
    cluster = json.loads(pathlib.Path(cluster_file).read_text())
    cores = cluster["devices_per_node"]
    if ranks <= cores:
        return cluster_file
    cluster["devices_per_node"] = ranks
    cluster["shared_cores"] = cores
    cluster["memory_gib"] *= cores / ranks
    path = work / f"cluster-{ranks}.json"
    path.write_text(json.dumps(cluster))
    return path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="small,medium,large")
    parser.add_argument("--layouts", default="1x1,2x1,4x1,1x2,2x2")
    parser.add_argument("--cluster")
    parser.add_argument("--save-cluster", help="keep the calibrated cluster file here")
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="plan-check-"))
    cluster = args.cluster
    if not cluster:
        cluster = work / "this-machine.json"
        run(PIPETRAIN, "launch", "-n", 2, "--", PIPETRAIN, "calibrate", "--out", cluster)
        if args.save_cluster:
            pathlib.Path(args.save_cluster).write_text(cluster.read_text())
    run(sys.executable, ROOT / "tests" / "data" / "write_indexed.py", work / "corpus", "uint16",
        20000)
    layouts = [tuple(int(x) for x in l.split("x")) for l in args.layouts.split(",")]
    cases = [(m, p, d) for m in args.models.split(",") for p, d in layouts]
    measured = {case: ([], []) for case in cases}
    for repeat in range(args.repeats):  # interleaved: every case once per round
        for case in cases:
            steps, peaks = measure(work, *case, f"r{repeat}")
            measured[case][0].extend(steps)
            measured[case][1].append(peaks)
    print(f"cluster: {cluster}; {args.repeats} repetitions x {STEPS - WARMUP} timed steps")
    print("| model | pipe x data | ranks/cores | step ms predicted | measured | error |"
          " peak MiB per stage predicted | measured | largest error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        model, pipe, data = case
        ranks = pipe * data
        step, stages = predict(work, shared_cores(cluster, work, ranks), model, pipe, data)
        step_measured = statistics.median(measured[case][0])
        peaks = [max(run_peaks[s] for run_peaks in measured[case][1]) for s in range(pipe)]
        memory_error = max(abs(p / m - 1) for p, m in zip(stages, peaks))
        mib = lambda xs: " / ".join(f"{x / 2**20:.1f}" for x in xs)
        print(f"| {model} | {pipe} x {data} | {ranks}/2 | {1e3 * step:.1f} |"
              f" {1e3 * step_measured:.1f} | {100 * (step / step_measured - 1):+.0f}% |"
              f" {mib(stages)} | {mib(peaks)} | {100 * memory_error:.0f}% |")


if __name__ == "__main__":
    main()
