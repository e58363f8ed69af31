"""pipetrain side by side with DeepSpeed's PipelineEngine, torch.distributed.pipelining's
Schedule1F1B and a plain one-process PyTorch loop, on the same tied GPT (bench/peers/gpt.py,
pipetrain's layers in PyTorch), the same split ("type:GptBlock"), 8 micro-batches, AdamW
(lr 1e-4, no weight decay), fp32, one intra-op thread per rank, random tokens in memory.

  bench/peers/run [--repetitions R] [--models small,medium,large] [--systems A,B,...]

"pipetrain Python pipe 2" is DeepSpeed's script itself with `import pipetrain as deepspeed`:
the Python layers called by pipetrain's C++ engine (the Python door, docs/user/python.md).

Every repetition runs each system once, in turn (interleaved), after waiting up to a
minute for the machine to be idle (cores under 10% busy); a run's figure is the median
of its timed steps after warm-up. Prints a table of medians over repetitions and the ratio
pipetrain / peer for each repetition (> 1: pipetrain is faster).
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MODELS = {  # d, heads, layers, context, micro-batch, timed steps
    "small": (32, 4, 4, 16, 1, 20),
    "medium": (96, 4, 4, 64, 8, 10),
    "large": (384, 6, 8, 128, 4, 4),
}
MICRO_BATCHES = 8
WARMUP = 2
VOCAB = 256
SYSTEMS = ["pipetrain pipe 2", "pipetrain Python pipe 2", "DeepSpeed pipe 2",
           "torch.pipelining pipe 2", "plain loop", "pipetrain 1 stage"]


# ---------------------------------------------------------------- one rank of a peer
def rank_main(system, sizes):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    d, heads, layers, context, micro_batch, steps = sizes
    torch.manual_seed(7)
    samples = micro_batch * MICRO_BATCHES
    ids = torch.randint(VOCAB, (samples, context))
    labels = torch.randint(VOCAB, (samples, context))
    run = {"plain": plain_steps, "deepspeed": deepspeed_steps, "pipelining": pipelining_steps,
           "pipetrain-python": pipetrain_python_steps}
    seconds = run[system](torch, dist, d, heads, layers, context, micro_batch, ids, labels,
                          steps)
    if seconds is not None:
        print("STEPS " + json.dumps(seconds), flush=True)


def timed(step, steps, barrier=lambda: None):
    seconds = []
    for i in range(WARMUP + steps):
        barrier()
        start = time.perf_counter()
        step()
        barrier()
        if i >= WARMUP:
            seconds.append(time.perf_counter() - start)
    return seconds


def plain_steps(torch, dist, d, heads, layers, context, micro_batch, ids, labels, steps):
    import gpt
    model = gpt.Gpt(VOCAB, context, d, heads, layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)

    def step():
        for x, y in zip(ids.split(micro_batch), labels.split(micro_batch)):
            (gpt.loss_fn(model(x), y) / MICRO_BATCHES).backward()
        optimizer.step()
        optimizer.zero_grad()
    return timed(step, steps)


def deepspeed_steps(torch, dist, d, heads, layers, context, micro_batch, ids, labels, steps):
    import deepspeed
    import deepspeed.pipe
    return script_steps(deepspeed, deepspeed.pipe, torch, dist, d, heads, layers, context,
                        micro_batch, ids, labels, steps)


def pipetrain_python_steps(torch, dist, d, heads, layers, context, micro_batch, ids, labels,
                           steps):
    import pipetrain
    import pipetrain.pipe
    return script_steps(pipetrain, pipetrain.pipe, torch, dist, d, heads, layers, context,
                        micro_batch, ids, labels, steps)


def script_steps(deepspeed, pipe, torch, dist, d, heads, layers, context, micro_batch, ids,
                 labels, steps):
    """The same DeepSpeed pipeline script under `deepspeed` (DeepSpeed, or pipetrain imported
    as deepspeed: the Python door)."""
    LayerSpec, PipelineModule, TiedLayerSpec = pipe.LayerSpec, pipe.PipelineModule, \
        pipe.TiedLayerSpec
    import gpt
    deepspeed.init_distributed(dist_backend="gloo")
    specs = [TiedLayerSpec("embed", gpt.GptEmbedding, VOCAB, context, d,
                           tied_weight_attr="tokens.weight")]
    specs += [LayerSpec(gpt.GptBlock, d, heads) for _ in range(layers)]
    specs += [LayerSpec(torch.nn.LayerNorm, d),
              TiedLayerSpec("embed", gpt.GptEmbedding, VOCAB, context, d, forward_fn=gpt.head,
                            tied_weight_attr="tokens.weight")]
    # DeepSpeed seeds Python's random with the layer's seed, which must be an int.
    module = PipelineModule(specs, num_stages=2, loss_fn=gpt.loss_fn,
                            partition_method="type:GptBlock", seed_fn=lambda s: None)
    config = {"train_micro_batch_size_per_gpu": micro_batch,
              "gradient_accumulation_steps": MICRO_BATCHES, "steps_per_print": 10**9,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.0,
                                                        "torch_adam": True}},
              # Off, as the C++ runs have it (DeepSpeed's default, 1.0, adds a norm).
              "gradient_clipping": 0.0,
              "wall_clock_breakdown": False}
    if deepspeed.__name__ == "pipetrain":
        del config["optimizer"]["params"]["torch_adam"]  # DeepSpeed's choice of kernel
    engine, _, _, _ = deepspeed.initialize(model=module, model_parameters=module.parameters(),
                                           config=config)
    batches = list(zip(ids.split(micro_batch), labels.split(micro_batch)))

    def step():
        engine.train_batch(iter(batches))
    seconds = timed(step, steps, dist.barrier)
    return seconds if dist.get_rank() == 0 else None


def pipelining_steps(torch, dist, d, heads, layers, context, micro_batch, ids, labels, steps):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B
    import gpt
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = gpt.Gpt(VOCAB, context, d, heads, layers)  # the same seed: equal weights
    half = layers // 2

    class First(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = model.embedding
            self.blocks = torch.nn.Sequential(*list(model.blocks)[:half])

        def forward(self, x):
            return self.blocks(self.embedding(x))

    class Last(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.Sequential(*list(model.blocks)[half:])
            self.norm = model.norm
            self.tied = torch.nn.Parameter(model.embedding.tokens.weight.detach().clone())

        def forward(self, x):
            return self.norm(self.blocks(x)) @ self.tied.t()

    part = First() if rank == 0 else Last()
    stage = PipelineStage(part, rank, 2, torch.device("cpu"))
    schedule = Schedule1F1B(stage, n_microbatches=MICRO_BATCHES, loss_fn=gpt.loss_fn)
    optimizer = torch.optim.AdamW(part.parameters(), lr=1e-4, weight_decay=0.0)
    tied = part.embedding.tokens.weight if rank == 0 else part.tied

    def step():
        if rank == 0:
            schedule.step(ids)
        else:
            schedule.step(target=labels)
        dist.all_reduce(tied.grad)  # the tied embedding's two halves, as DeepSpeed does
        optimizer.step()
        optimizer.zero_grad()
    seconds = timed(step, steps, dist.barrier)
    return seconds if rank == 0 else None


# ---------------------------------------------------------------- the driver
def launch(command, env, timeout=1800):
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    for line in done.stdout.splitlines():
        if line.startswith("STEPS "):
            return statistics.median(json.loads(line[6:]))
    sys.exit(f"{' '.join(map(str, command))} failed ({done.returncode}):\n"
             f"{done.stdout[-3000:]}{done.stderr[-3000:]}")


def python_ranks(python, system, sizes, ranks, port):
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               WORLD_SIZE=str(ranks), PYTHONPATH=str(HERE), DS_ACCELERATOR="cpu")
    processes = []
    for rank in range(ranks):
        env_rank = dict(env, RANK=str(rank), LOCAL_RANK=str(rank), LOCAL_SIZE=str(ranks))
        processes.append(subprocess.Popen(
            [python, __file__, "--rank", system, ",".join(map(str, sizes))], env=env_rank,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=1800) for p in processes]
    for line in outputs[0][0].splitlines():
        if line.startswith("STEPS "):
            return statistics.median(json.loads(line[6:]))
    sys.exit(f"{system} failed:\n" + "\n".join(o[0][-2000:] + o[1][-3000:] for o in outputs))


def busy_fraction(interval=0.5):
    """The share of all cores busy over `interval` seconds (/proc/stat)."""
    def sample():
        fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait
    total0, idle0 = sample()
    time.sleep(interval)
    total1, idle1 = sample()
    return 1 - (idle1 - idle0) / max(1, total1 - total0)


def wait_for_idle(limit=60):
    """Until the cores are idle (under 10% busy over half a second), at most `limit` s."""
    start = time.time()
    while time.time() - start < limit and busy_fraction() >= 0.10:
        time.sleep(1)


def run_system(system, sizes, python, pipetrain, steps_program, port):
    env = dict(os.environ, PIPETRAIN_THREADS="1", OMP_NUM_THREADS="1")
    if system == "pipetrain Python pipe 2":  # the DeepSpeed script on pipetrain's Python door
        return launch([pipetrain, "launch", "-n", "2", "--", python, __file__, "--rank",
                       "pipetrain-python", ",".join(map(str, sizes))],
                      dict(env, PYTHONPATH=str(HERE)))
    if system.startswith("pipetrain"):
        stages = 2 if "pipe 2" in system else 1
        args = [*sizes[:5], MICRO_BATCHES, stages, sizes[5], WARMUP]
        if "(" in system:  # "pipetrain pipe 2 (zbv)": that schedule
            env["PIPETRAIN_BENCH_SCHEDULE"] = system[system.index("(") + 1:-1]
        return launch([pipetrain, "launch", "-n", str(stages), "--", steps_program,
                       *map(str, args)], env)
    if system == "plain loop":
        return python_ranks(python, "plain", sizes, 1, port)
    kind = "deepspeed" if system.startswith("DeepSpeed") else "pipelining"
    return python_ranks(python, kind, sizes, 2, port)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--models", default="small,medium,large")
    parser.add_argument("--pipetrain", default=str(ROOT / "build/src/pipetrain"))
    parser.add_argument("--steps-program", default=str(ROOT / "build/bench/pipetrain_steps"))
    parser.add_argument("--schedules", default="",
                        help="more pipetrain pipe 2 runs, comma separated (e.g. zbv,dualpipev)")
    parser.add_argument("--systems", default="",
                        help="only these of the systems, comma separated (default: all)")
    args = parser.parse_args()
    if args.systems:
        wanted = args.systems.split(",")
        unknown = [w for w in wanted if w not in SYSTEMS]
        if unknown:
            sys.exit(f"--systems: {', '.join(unknown)} not among {', '.join(SYSTEMS)}")
        SYSTEMS[:] = [s for s in SYSTEMS if s in wanted]
    for schedule in filter(None, args.schedules.split(",")):
        SYSTEMS.insert(1, f"pipetrain pipe 2 ({schedule})")
    import deepspeed
    import torch
    print(f"torch {torch.__version__}, DeepSpeed {deepspeed.__version__}, "
          f"{os.cpu_count()} cores; seconds per step are medians over timed steps")
    port = 29500
    for name in args.models.split(","):
        sizes = MODELS[name]
        d, heads, layers, context, micro_batch, steps = sizes
        print(f"\n{name}: GPT d {d}, {heads} heads, {layers} layers, context {context}, "
              f"vocabulary {VOCAB}, micro-batch {micro_batch}, {MICRO_BATCHES} micro-batches; "
              f"{steps} timed steps after {WARMUP}", flush=True)
        seconds = {s: [] for s in SYSTEMS}
        for rep in range(args.repetitions):
            for system in SYSTEMS:
                wait_for_idle()
                port += 1
                seconds[system].append(run_system(system, sizes, sys.executable, args.pipetrain,
                                                  args.steps_program, port))
            print(f"  repetition {rep + 1}: " + ", ".join(
                f"{s} {seconds[s][-1]:.4f} s" for s in SYSTEMS), flush=True)
        report(seconds)


def ratio(seconds, slower, faster):
    """How many times faster `faster` ran than `slower`: median and per repetition."""
    values = [o / own for o, own in zip(seconds[slower], seconds[faster])]
    return f"{statistics.median(values):.2f}x ({', '.join(f'{r:.2f}' for r in values)})"


def report(seconds):
    """The medians, and each ratio whose two systems ran."""
    print("  | system | s/step (median) | pipetrain's speed / its (median, per repetition) |")
    print("  |---|---|---|")
    for system in SYSTEMS:
        # The loop and the 1-stage run against pipetrain's 1 stage, the pipes against its pipe 2.
        label = "pipetrain 1 stage" if system in ("plain loop", "pipetrain 1 stage") \
            else "pipetrain pipe 2"
        against = f"{label}: {ratio(seconds, system, label)}" if label in seconds else "-"
        print(f"  | {system} | {statistics.median(seconds[system]):.4f} | {against} |")
    def both(a, b):
        return a in seconds and b in seconds
    if both("pipetrain 1 stage", "pipetrain pipe 2"):
        print(f"  pipetrain pipe-2 speed-up over its 1 stage: "
              f"{ratio(seconds, 'pipetrain 1 stage', 'pipetrain pipe 2')}; 1F1B's ideal at m 8, "
              f"p 2: {2 * MICRO_BATCHES / (MICRO_BATCHES + 1):.2f}x", flush=True)
    python = "pipetrain Python pipe 2"
    if both(python, "DeepSpeed pipe 2"):
        print(f"  {python} over DeepSpeed pipe 2 (the same script): "
              f"{ratio(seconds, 'DeepSpeed pipe 2', python)}", flush=True)
    if both(python, "pipetrain pipe 2"):
        print(f"  {python} / pipetrain pipe 2 (Python layers against the C++ GPT): "
              f"{ratio(seconds, python, 'pipetrain pipe 2')}", flush=True)
    for system in SYSTEMS:
        if not system.startswith("pipetrain pipe 2 ("):
            continue
        over = [f"over {name} {ratio(seconds, other, system)}" for name, other in
                (("its 1 stage", "pipetrain 1 stage"), ("DeepSpeed", "DeepSpeed pipe 2"),
                 ("torch.pipelining", "torch.pipelining pipe 2")) if other in seconds]
        print(f"  {system}: {'; '.join(over) or 'no other system ran'}", flush=True)

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        sys.path.insert(0, str(HERE))
        rank_main(sys.argv[2], tuple(int(v) for v in sys.argv[3].split(",")))
    else:
        main()
