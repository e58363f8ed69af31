"""pipetrain.export: a checkpoint out as `pipetrain export` writes it."""
import os

from . import distributed
from ._extension import _C

FORMATS = ("safetensors", "hf", "peft")


def export(checkpoint, out, format="hf", tag="latest"):
    """Collective (rank 0 writes): checkpoint folder `checkpoint`'s `tag` written to `out` (a
    new or empty folder) as `pipetrain export --format FORMAT` writes it: "hf", a transformers
    model folder (LoRA adapters merged) with the tokenizer and generation files it came with;
    "peft", a LoRA fine-tune's adapters as peft loads them; "safetensors", every tensor by its
    pipetrain name. A refusal ends the job in one line, as the CLI's."""
    if format not in FORMATS:
        raise ValueError(f"pipetrain: export format {format!r} is not one of {', '.join(FORMATS)}")
    distributed.init_distributed()
    _C.export(os.fspath(checkpoint), str(tag), os.fspath(out), format)
    return out
