"""initialize() and the engine, with DeepSpeed's names: train_batch, eval_batch,
save_checkpoint, load_checkpoint and the rest of its PipelineEngine's surface, running on
pipetrain's C++ engine."""
import json
import os
import resource
import time

import torch

from . import distributed
from ._extension import _C
from .data import TokenWindows
from .optimizers import optimizer_config
from .pipe.builtin import BuiltinModel
from .pipe.module import PipelineModule


def _read_config(config, args):
    if config is None and args is not None:
        config = getattr(args, "deepspeed_config", None) or getattr(args, "deepscale_config", None)
    if config is None:
        raise ValueError("pipetrain: initialize() needs a config (a dict or a JSON file's path)")
    if isinstance(config, (str, os.PathLike)):
        with open(config) as f:
            return json.load(f)
    return json.loads(json.dumps(config))  # a copy, checked to be JSON


def _stages_in_config(config, module):
    pipeline = config.setdefault("pipeline", {})
    stages = pipeline.get("stages", module.num_stages)
    if stages != module.num_stages:
        raise ValueError(f"pipetrain: pipeline.stages {stages} in the config, but the "
                         f"PipelineModule has {module.num_stages}")
    pipeline["stages"] = module.num_stages
    for key in ("partition_method", "activation_checkpoint_interval"):
        if key in pipeline:
            raise ValueError(f"pipetrain: pipeline.{key} in the config: with a PipelineModule it "
                             "is the module's argument, as in DeepSpeed")


def initialize(args=None, model=None, optimizer=None, model_parameters=None, training_data=None,
               lr_scheduler=None, config=None, config_params=None, dist_init_required=None,
               collate_fn=None, mpu=None, mesh_param=None):
    """DeepSpeed's initialize for a pipeline: (engine, optimizer, training dataloader,
    lr_scheduler). `optimizer`, if given, is a torch.optim Adam, AdamW or SGD whose
    hyper-parameters and groups the engine's optimizer takes; else the config's optimizer and
    scheduler sections are used."""
    distributed.init_distributed()
    if not isinstance(model, (PipelineModule, BuiltinModel)):
        raise TypeError("pipetrain: initialize() runs a pipetrain.pipe.PipelineModule or "
                        f"BuiltinModel (got {type(model).__name__})")
    if lr_scheduler is not None:
        raise ValueError("pipetrain: give the learning-rate schedule as the config's scheduler "
                         "section (the engine schedules the rate itself)")
    if mpu is not None:
        raise ValueError("pipetrain: mpu: tensor parallelism needs the native families")
    config = _read_config(config if config is not None else config_params, args)
    if isinstance(model, BuiltinModel):
        return _initialize_builtin(model, config, optimizer, training_data)
    _stages_in_config(config, model)
    # DeepSpeed's defaults where pipetrain train's differ, so that the same script trains the
    # same: gradients clipped to norm 1.0, and (below) every parameter decayed.
    config.setdefault("gradient_clipping", 1.0)
    if optimizer is not None:
        section, exempt = optimizer_config(optimizer, model._parameter_names())
        config["optimizer"] = section
        config["weight_decay_exempt"] = exempt
    else:
        # DeepSpeed's optimizer from the config decays every parameter it is given.
        config.setdefault("weight_decay_exempt", ["^$"])
    chunks, placement = _C.schedule_shape(config)
    if (chunks, placement) != (model.chunks, model.placement):
        model._rebuild(chunks, placement)
    engine = PipelineEngine(model, config, optimizer)
    loader = None
    if training_data is not None:
        loader = engine.deepspeed_io(training_data, collate_fn=collate_fn)
        engine.set_dataiterator(loader if isinstance(loader, TokenWindows) else iter(loader))
    return engine, engine.optimizer, loader, engine.lr_scheduler


def _initialize_builtin(model, config, optimizer, training_data):
    """A built-in family: the job `pipetrain train` builds from the same config, with its
    defaults (its optimizer from the config, its data from the config's data section)."""
    if optimizer is not None:
        raise ValueError("pipetrain: a BuiltinModel's parameters are C++ tensors the engine "
                         "builds: give its optimizer as the config's optimizer section")
    if training_data is not None:
        raise ValueError("pipetrain: a BuiltinModel reads the config's data section, or "
                         "train_batch(data_iter) of (tokens, labels)")
    engine = PipelineEngine(model, model.config_with(config))
    return engine, None, None, engine.lr_scheduler


class _LearningRate:
    """The engine's schedule, read back (DeepSpeed returns its scheduler object)."""

    def __init__(self, engine):
        self._engine = engine

    def get_last_lr(self):
        return [self._engine._engine.learning_rate]

    def get_lr(self):
        return self.get_last_lr()

    def step(self, *args, **kwargs):
        pass  # the engine steps the schedule with each batch


class PipelineEngine:
    """DeepSpeed's PipelineEngine on pipetrain's C++ engine: train_batch runs the config's
    schedule over gradient_accumulation_steps micro-batches, calling this stage's Python layers."""

    def __init__(self, module, config, client_optimizer=None):
        self.module = module
        self.optimizer = client_optimizer
        if isinstance(module, BuiltinModel):
            self._engine = _C.Engine.builtin(config)
        else:
            # Before the engine shards anything (ZeRO 3 leaves the module's tensors empty).
            self._broadcast_from_first_replica()
            self._engine = _C.Engine(module._engine_layers(), module.loss_fn, module.num_stages,
                                     module.chunks, module.parts, module.base_seed,
                                     module.activation_checkpoint_interval,
                                     list(module.checkpointable_layers or []), config)
        self._config = self._engine.config
        self.lr_scheduler = _LearningRate(self) if "scheduler" in config else None
        self._data_iterator = None
        self._batch_fn = None
        self._callbacks = []

    # ------------------------------------------------------------------ set-up
    def _broadcast_from_first_replica(self):
        """As DeepSpeed: every data-parallel replica starts from its first replica's weights."""
        module = self.module
        if module.data_parallel_size < 2:
            return
        for stage in range(module.num_stages):
            ranks = module.grid_ranks[stage]
            group = torch.distributed.new_group(ranks)
            if module.global_rank in ranks:
                with torch.no_grad():
                    for p in list(module.parameters()) + list(module.buffers()):
                        torch.distributed.broadcast(p, src=ranks[0], group=group)

    def deepspeed_io(self, dataset, batch_size=None, route=None, pin_memory=True,
                     data_sampler=None, collate_fn=None, num_local_io_workers=None):
        """The training data: TokenWindows as the CLI reads them, or a torch Dataset read as
        DeepSpeed reads it (this replica's DistributedSampler share, micro-batches, repeating)."""
        if isinstance(dataset, TokenWindows):
            self._engine.use_token_windows(list(map(str, dataset.paths)), dataset.data_type,
                                           dataset.token_bytes, dataset.vocab_size,
                                           dataset.context, dataset.validation_fraction)
            return dataset
        from torch.utils.data import DataLoader
        from torch.utils.data.distributed import DistributedSampler
        sampler = data_sampler or DistributedSampler(
            dataset, num_replicas=self._engine.data_parallel_size,
            rank=self._engine.data_parallel_id, shuffle=False)
        return RepeatingLoader(DataLoader(dataset, batch_size=batch_size or
                                          self.train_micro_batch_size_per_gpu(),
                                          sampler=sampler, collate_fn=collate_fn, drop_last=True))

    # ------------------------------------------------------------------ steps
    def _data(self, data_iter):
        if data_iter is None:
            data_iter = self._data_iterator
        if isinstance(data_iter, TokenWindows):
            return None
        if data_iter is None and self._engine.has_own_data:  # a BuiltinModel's data section
            return None
        if data_iter is None:
            raise ValueError("pipetrain: train_batch() without data: pass a data iterator, "
                             "set_dataiterator(), or initialize(training_data=...)")
        if self._batch_fn is not None:
            return map(self._batch_fn, data_iter)
        return data_iter

    def train_batch(self, data_iter=None):
        """One optimizer step over gradient_accumulation_steps micro-batches; the mean loss
        (over micro-batches and replicas) on every rank, as a tensor."""
        if data_iter is not None:
            self.set_dataiterator(data_iter)
        started = time.perf_counter()
        loss = self._engine.train_batch(self._data(None))
        if self._callbacks and self.global_rank == 0:
            self._report(loss, time.perf_counter() - started)
        return torch.tensor(loss)

    def eval_batch(self, data_iter, return_logits=False, compute_loss=True, reduce_output="avg",
                   bcast_loss=True, num_micro_batches=None):
        """Forward only over gradient_accumulation_steps micro-batches: the mean loss on every
        rank; with return_logits, also the last micro-batch's outputs on the last stage (None
        elsewhere), as DeepSpeed returns them."""
        if reduce_output not in ("avg", None):
            raise ValueError(f"pipetrain: eval_batch reduce_output {reduce_output!r}: avg")
        loss, outputs = self._engine.eval_batch(self._data(data_iter), bool(return_logits or
                                                                             not compute_loss))
        last = outputs[-1] if outputs else None
        if not compute_loss:
            return last
        if return_logits:
            return torch.tensor(loss), last
        return torch.tensor(loss)

    def _tokens_per_sample(self):
        if isinstance(self._data_iterator, TokenWindows):
            return self._data_iterator.context
        if isinstance(self.module, BuiltinModel):
            return self._engine.tokens_per_sample
        return None

    def _report(self, loss, seconds):
        samples = self.train_batch_size()
        tokens = self._tokens_per_sample()
        # Model FLOPs over the devices' peak: the native families on GPUs the planner knows
        # (or log.peak_tflops); the engine counts no FLOPs of Python layers.
        flops, peak = self._engine.flops_per_sample, self._engine.peak_flops
        metrics = {
            "step": self.global_steps, "loss": loss, "grad_norm": self._engine.grad_norm,
            "lr": self._engine.learning_rate, "samples_per_s": samples / seconds,
            "tokens_per_s": samples * tokens / seconds if tokens else None,
            "mfu": (flops * samples / seconds / (self._engine.world_size * peak)
                    if flops > 0 and peak > 0 else None),
            "memory_gib": (torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available()
                           else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20),
        }
        metrics.update(self._engine.objective_metrics)  # an objective's own (DPO's rewards)
        for callback in self._callbacks:
            callback(metrics)

    # ------------------------------------------------------------------ generation
    def generate(self, prompts, max_new_tokens, temperature=1.0, top_k=0, top_p=1.0, seed=1,
                 stop=()):
        """A built-in language model's continuations of `prompts` (lists of token ids) with
        the weights as they are now: every prompt in flight through the pipe with the KV
        cache, each drawing from its own generator seeded with `seed`, or with its own of
        `seed` when it is a list (one per prompt: samples of one prompt that differ). Returns, on every
        rank, each prompt's whole sequence and its new tokens' log-probabilities under the
        model's softmax at `temperature` (before top_k and top_p), as lists. Collective."""
        seeds = [int(s) for s in seed] if isinstance(seed, (list, tuple)) else []
        return self._engine.generate([list(map(int, p)) for p in prompts], int(max_new_tokens),
                                     float(temperature), int(top_k), float(top_p),
                                     0 if seeds else int(seed), seeds, [int(t) for t in stop])

    @property
    def objective_metrics(self):
        """The last training step's metrics of the config's objective: DPO's rewards and
        log-probabilities by TRL's names, a policy-gradient step's `logprobs/largest_gap`
        (trainer against the given old log-probabilities) and `clip_ratio`; {} for a
        language model."""
        return dict(self._engine.objective_metrics)

    def add_step_callback(self, callback):
        """Collective (every rank registers it: the gradient norm is then computed by all):
        callback(metrics) on global rank 0 after every train_batch: step, loss, grad_norm, lr,
        samples_per_s, tokens_per_s (token data), mfu (the native families on known GPUs, else
        None), memory_gib (peak: the GPU's, else this process's resident set)."""
        self._engine.set_grad_norm_reporting(True)
        self._callbacks.append(callback)

    def set_dataiterator(self, iterator):
        self._data_iterator = iterator if isinstance(iterator, TokenWindows) else iter(iterator)

    def set_batch_fn(self, fn):
        self._batch_fn = fn

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, save_dir, tag=None, client_state=None, save_latest=True,
                        exclude_frozen_parameters=False):
        """Collective: the CLI's checkpoint format (pipetrain train, eval and export read it);
        tag step_N by default."""
        tag = tag if tag is not None else f"step_{self.global_steps}"
        self._engine.save_checkpoint(str(save_dir), str(tag), client_state or {})
        return True

    def load_checkpoint(self, load_dir, tag=None, load_module_strict=True,
                        load_optimizer_states=True, load_lr_scheduler_states=True,
                        load_module_only=False, custom_load_fn=None):
        """Collective: weights, optimizer state, step count (and the token windows' position);
        returns (the checkpoint's path, its client_state)."""
        if not (load_module_strict and load_optimizer_states and not load_module_only):
            raise ValueError("pipetrain: load_checkpoint restores the whole state (module, "
                             "optimizer, step) or nothing")
        tag = tag if tag is not None else "latest"
        client_state = self._engine.load_checkpoint(str(load_dir), str(tag))
        return os.path.join(str(load_dir), str(tag)), client_state

    # ------------------------------------------------------------------ DeepSpeed's queries
    @property
    def global_steps(self):
        return self._engine.global_steps

    @property
    def global_rank(self):
        return self._engine.global_rank

    @property
    def micro_batches(self):
        return self._engine.micro_batches

    @property
    def stage_id(self):
        return self._engine.stage_id

    @property
    def num_stages(self):
        return self._engine.stages

    @property
    def device(self):
        return torch.device(self._engine.device)

    def is_first_stage(self):
        return self.stage_id == 0

    def is_last_stage(self):
        return self.stage_id == self.num_stages - 1

    def train_micro_batch_size_per_gpu(self):
        return self._engine.micro_batch_size

    def gradient_accumulation_steps(self):
        return self._engine.micro_batches

    def train_batch_size(self):
        return self._engine.train_batch_size

    def get_global_grad_norm(self):
        return self._engine.grad_norm

    def get_lr(self):
        return [self._engine.learning_rate]

    def named_parameters(self):
        """This stage's trained parameters by their checkpoint names ("<layer>.<name>")."""
        return self._engine.named_parameters()


class RepeatingLoader:
    """DeepSpeed's RepeatingLoader: starts the loader again when it runs out."""

    def __init__(self, loader):
        self.loader = loader
        self.data_iter = iter(loader)

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self.data_iter)
        except StopIteration:
            self.data_iter = iter(self.loader)
            return next(self.data_iter)
