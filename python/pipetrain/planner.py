"""pipetrain.plan: `pipetrain plan`'s ranked layouts as Python objects."""
import json
import os

from ._extension import _C


def plan(config, cluster, global_batch, top=5, **limits):
    """The `top` fastest predicted layouts of `config`'s model (a dict or a JSON file's path: a
    pipetrain train config) on `cluster` (a cluster file, as clusters/ holds them) for steps of
    `global_batch` samples, fastest first, as `pipetrain plan --format json` gives them: each a
    dict of the layout (model_parallel, pipe, data, micro_batch, schedule, zero, ...), its
    predicted step_seconds, mfu, per-stage memory (stages) and terms, plus "config": the input
    config with the layout's keys set, ready for `pipetrain train` or initialize().

    `limits` fix choices as plan's options do: nodes, devices, model_parallel,
    context_parallel, sequence_parallel, pipe, data, expert_parallel, micro_batch,
    max_micro_batch, chunks, zero, schedule (a name), checkpointing (bool), recompute ("auto",
    "none" or parts joined by commas). ValueError, in plan's words, for what plan refuses
    (no layout fits, a bad key)."""
    if isinstance(config, (str, os.PathLike)):
        with open(config) as f:
            config = json.load(f)
    return _C.plan(json.loads(json.dumps(config)), os.fspath(cluster), int(global_batch),
                   dict(limits, top=int(top)))
