"""pipetrain.logprobs: each token's log-probability under a checkpoint, as `pipetrain logprobs`
writes it."""
import os

from . import distributed
from ._extension import _C


def logprobs(checkpoint, data, out, model_parallel=1, expert_parallel=1, micro_batch=4):
    """Collective: every example of `data` (prepared examples: an indexed dataset prefix, or a
    list of them, each with its loss masks) scored by `checkpoint`'s latest model through the
    pipeline (the job's ranks / (model_parallel x expert_parallel) stages), written to `out`
    (safetensors) by one rank, and read back on every rank as a dict of tensors: "logprobs"
    float32 [tokens] (0 at each example's first token), "mask" uint8 [tokens] (the
    completions' tokens), "offsets" int64 [examples + 1], "sequence_logprobs" float64
    [examples] (each example's sum over its mask). See docs/user/post-training.md."""
    distributed.init_distributed()
    paths = [os.fspath(data)] if isinstance(data, (str, os.PathLike)) else list(map(os.fspath, data))
    _C.logprobs(os.fspath(checkpoint), paths, int(model_parallel), int(expert_parallel),
                int(micro_batch), os.fspath(out))
    import torch.distributed as dist
    dist.barrier()  # written by the last stage's first rank
    from safetensors.torch import load_file
    return load_file(os.fspath(out))
