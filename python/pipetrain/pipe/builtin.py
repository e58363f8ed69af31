"""The native families from Python: a model of pipetrain's C++ layers (GPT, LLaMA 3, Qwen2.5/3,
Qwen3-MoE, Mistral, Gemma 3, Mixtral, ...), built as `pipetrain train` builds it from the same
config, with every parallel axis the CLI has (tensor, sequence, context, expert, ZeRO)."""
import os
import socket
import tempfile

import torch.distributed

from .. import distributed
from .._extension import _C


# pipetrain train's loop: its length, evaluation, saves, logs, trace and final sample.
LOOP_KEYS = {"train_iters", "eval_interval", "eval_iters", "save", "save_interval",
             "save_on_signal", "overwrite", "checkpoint", "trace", "trace_step",
             "memory_breakdown"}


class BuiltinModel:
    """A built-in family for initialize(): its `model` section (a fresh model), or `load`, a
    checkpoint folder (an import or a run's save folder) whose model and weights it starts from.
    The layers are C++: no module is built in Python; the engine builds this rank's stage."""

    def __init__(self, model=None, load=None):
        if (model is None) == (load is None):
            raise ValueError("pipetrain: BuiltinModel takes a model section or a checkpoint to "
                             "load, one of them")
        self.model = dict(model) if model is not None else None
        self.load = os.fspath(load) if load is not None else None

    def config_with(self, config):
        """`config` (a pipetrain train config's training keys) with this model in it. The keys
        of `pipetrain train`'s own loop are refused: the script runs the steps."""
        for key in sorted(LOOP_KEYS & set(config)) + [
                f"{section}.{key}" for section, kept in (("log", {"peak_tflops"}),
                                                         ("sample", {"tokenizer"}))
                for key in sorted(set(config.get(section, {})) - kept)]:
            raise ValueError(f"pipetrain: {key} in the config belongs to pipetrain train's loop: "
                             "from Python the script runs the steps (train_batch), evaluates "
                             "(eval_batch), saves (save_checkpoint) and logs "
                             "(add_step_callback)")
        for key in ("model", "load"):
            if key in config:
                raise ValueError(f"pipetrain: the config has a {key} section: with a "
                                 "BuiltinModel the model comes from it")
        config = dict(config)
        if self.model is not None:
            config["model"] = self.model
        else:
            config["load"] = self.load
        return config

    def __repr__(self):
        return (f"BuiltinModel(model={self.model!r})" if self.model is not None
                else f"BuiltinModel(load={self.load!r})")


def from_pretrained(folder, out=None):
    """A transformers model folder (config.json, model.safetensors, tokenizer files), imported
    as `pipetrain import --hf FOLDER --out OUT` does (by rank 0; collective), as a BuiltinModel
    that fine-tunes from it. `out`: where the import goes (a new or empty folder, which the
    run's checkpoints name for the tokenizer); by default a new folder in this host's temporary
    folder, kept (a job over several hosts must give one that every host reads)."""
    rank, size = distributed.world()
    if out is None:  # an empty folder, which the import fills
        hosts = [None] * size
        torch.distributed.all_gather_object(hosts, socket.gethostname())
        if len(set(hosts)) > 1:
            raise ValueError("pipetrain: from_pretrained on several hosts needs out=, a folder "
                             "on a file system every host reads (the default is this host's "
                             "temporary folder)")
        out = _C.broadcast_text(tempfile.mkdtemp(prefix="pipetrain-import-") if rank == 0 else "")
    _C.import_hugging_face(os.fspath(folder), os.fspath(out))
    return BuiltinModel(load=out)
