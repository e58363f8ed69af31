"""PipelineModule, LayerSpec and TiedLayerSpec with DeepSpeed's names and meanings: the
layers split over stages as DeepSpeed splits them, each built (and seeded) only on the stage
that owns it, in DeepSpeed's order, so a script builds the same initial weights under both."""
import functools
import random

import torch
import torch.distributed as dist
from torch import nn

from .. import distributed
from .._extension import _C
from .topology import ProcessTopology


class LayerSpec:
    """A layer built later, on its stage: typename(*module_args, **module_kwargs)."""

    def __init__(self, typename, *module_args, **module_kwargs):
        if not issubclass(typename, nn.Module):
            raise RuntimeError("LayerSpec only supports torch.nn.Module types.")
        self.typename = typename
        self.module_args = module_args
        self.module_kwargs = module_kwargs

    def build(self, log=False):
        return self.typename(*self.module_args, **self.module_kwargs)

    def __repr__(self):
        return f"LayerSpec({self.typename.__name__})"


class TiedLayerSpec(LayerSpec):
    """A layer whose `tied_weight_attr` tensors every spec with the same `key` shares; a later
    occurrence computes forward_fn(module, x) when given (e.g. a head through the embedding)."""

    def __init__(self, key, typename, *module_args, forward_fn=None, tied_weight_attr=("weight",),
                 **module_kwargs):
        super().__init__(typename, *module_args, **module_kwargs)
        self.key = key
        self.forward_fn = forward_fn
        self.tied_weight_attr = ([tied_weight_attr] if isinstance(tied_weight_attr, str)
                                 else list(tied_weight_attr))


def _set_random_seed(seed):
    """DeepSpeed's default seed_fn (ds_utils.set_random_seed)."""
    random.seed(seed)
    try:
        import numpy
        numpy.random.seed(seed)
    except ImportError:
        pass
    torch.manual_seed(seed)


def _type_name(layer):
    if isinstance(layer, LayerSpec):
        return layer.typename.__name__
    if isinstance(layer, nn.Module):
        return layer.__class__.__name__
    return getattr(layer, "__name__", type(layer).__name__)


def _trained_count(module):
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def _owned_virtual_stages(stage, stages, chunks, placement):
    if placement == "v":
        return [stage if c % 2 == 0 else 2 * stages - 1 - stage for c in range(chunks)]
    return [stage + c * stages for c in range(chunks)]


class PipelineModule(nn.Module):
    """DeepSpeed's PipelineModule: `layers` (LayerSpec, TiedLayerSpec, nn.Module or callable)
    split over `num_stages` (or `topology`'s pipe axis) by `partition_method` (`parameters`,
    `uniform`, `type:REGEX`); only this stage's layers are built. With `seed_layers`, layer i
    is built after seed_fn(base_seed + i). `activation_checkpoint_interval` layers are
    recomputed in backward as a run (the engine's own recompute stands in for
    `activation_checkpoint_func`); `checkpointable_layers` names the types that may be."""

    def __init__(self, layers, num_stages=None, topology=None, loss_fn=None, seed_layers=False,
                 seed_fn=None, base_seed=1234, partition_method="parameters",
                 activation_checkpoint_interval=0, activation_checkpoint_func=None,
                 checkpointable_layers=None, dynamic_shape=False):
        super().__init__()
        if num_stages is None and topology is None:
            raise RuntimeError("must provide num_stages or topology")
        rank, world_size = distributed.world()
        if topology is not None:
            if not isinstance(topology, ProcessTopology):
                raise TypeError("topology must be a pipetrain.pipe ProcessTopology")
            num_stages = topology.get_dim("pipe")
            if topology.world_size() != world_size:
                raise ValueError(f"pipetrain: a topology of {topology.world_size()} ranks in a "
                                 f"job of {world_size}")
        if num_stages < 1 or world_size % num_stages:
            raise ValueError(f"pipetrain: {num_stages} stages do not divide the job's "
                             f"{world_size} ranks")
        self.num_stages = num_stages
        self.data_parallel_size = world_size // num_stages
        self.global_rank = rank
        self.grid_ranks = _C.grid_ranks(num_stages, self.data_parallel_size)
        self.stage_id, self.data_parallel_id = next(
            (s, d) for s, row in enumerate(self.grid_ranks) for d, r in enumerate(row) if r == rank)
        self._layer_specs = list(layers)
        self._num_layers = len(self._layer_specs)
        self.loss_fn = loss_fn
        self.seed_layers = seed_layers
        self.seed_fn = seed_fn
        self.base_seed = base_seed
        self.partition_method = partition_method
        self.activation_checkpoint_interval = activation_checkpoint_interval
        self.activation_checkpoint_func = activation_checkpoint_func
        self.checkpointable_layers = checkpointable_layers
        # The random state the layers are built from: a rebuild for another number of chunks
        # per stage (initialize, for an interleaved or V schedule) starts from it again.
        self._rng_before_build = (torch.get_rng_state(), random.getstate())
        self._build(chunks=1, placement="loop")

    # ------------------------------------------------------------------ building
    def _build(self, chunks, placement):
        for name in list(self._modules):
            del self._modules[name]
        self.chunks, self.placement = chunks, placement
        self._partition(chunks)
        self._owned_virtual = _owned_virtual_stages(self.stage_id, self.num_stages, chunks,
                                                    placement)
        owned = sorted(i for v in self._owned_virtual
                       for i in range(self.parts[v], self.parts[v + 1]))
        self.tied_modules = nn.ModuleDict()
        self.tied_weight_attrs = {}
        self._built = {}  # layer index -> what forward calls (module, callable or tied module)
        for index in owned:
            layer = self._layer_specs[index]
            if self.seed_layers:
                (self.seed_fn or _set_random_seed)(self.base_seed + index)
            if isinstance(layer, TiedLayerSpec):
                if layer.key not in self.tied_modules:
                    self.tied_modules[layer.key] = layer.build()
                    self.tied_weight_attrs[layer.key] = layer.tied_weight_attr
                self._built[index] = self.tied_modules[layer.key]
            elif isinstance(layer, LayerSpec):
                module = layer.build()
                self.add_module(str(index), module)
                self._built[index] = module
            elif isinstance(layer, nn.Module):
                self.add_module(str(index), layer)
                self._built[index] = layer
            elif callable(layer):
                self._built[index] = layer
            else:
                raise TypeError(f"layer {index} is a {type(layer).__name__}: a PipelineModule "
                                "takes LayerSpecs, nn.Modules and callables")
        self._synchronize_tied_weights()

    def _rebuild(self, chunks, placement):
        """Built again for `chunks` per stage, from the random state of the first build."""
        torch.set_rng_state(self._rng_before_build[0])
        random.setstate(self._rng_before_build[1])
        self._build(chunks, placement)

    def _partition(self, chunks):
        method = self.partition_method.lower() if self.partition_method else "parameters"
        if method.startswith("type:"):
            method = "type:" + self.partition_method[len("type:"):]
        counts = [0] * self._num_layers
        if method == "parameters":
            # As DeepSpeed counts them: every LayerSpec built once, from the ambient random state.
            for i, layer in enumerate(self._layer_specs):
                if isinstance(layer, LayerSpec):
                    counts[i] = _trained_count(layer.build())
                elif isinstance(layer, nn.Module):
                    counts[i] = _trained_count(layer)
        elif method != "uniform" and not method.startswith("type:"):
            raise ValueError(f"pipetrain: partition_method {self.partition_method!r}: one of "
                             "parameters, uniform, type:REGEX")
        self._counts = counts
        types = [_type_name(layer) for layer in self._layer_specs]
        self.parts = list(_C.partition(method, counts, types, self.num_stages * chunks))

    def _stage_of_layer(self, index):
        virtual = next(v for v in range(len(self.parts) - 1)
                       if self.parts[v] <= index < self.parts[v + 1])
        for stage in range(self.num_stages):
            if virtual in _owned_virtual_stages(stage, self.num_stages, self.chunks,
                                                self.placement):
                return stage
        raise AssertionError(f"virtual stage {virtual} has no stage")

    def _tie_groups(self):
        """(key, owner stages) of every tie key, in layer order, as every rank sees them."""
        keys = {}
        for i, layer in enumerate(self._layer_specs):
            if isinstance(layer, TiedLayerSpec):
                keys.setdefault(layer.key, set()).add(self._stage_of_layer(i))
        return [(key, sorted(stages)) for key, stages in keys.items()]

    def _synchronize_tied_weights(self):
        """As DeepSpeed: each tie key's tensors broadcast from its first owner stage."""
        for key, stages in self._tie_groups():
            if len(stages) < 2:
                continue
            for d in range(self.data_parallel_size):
                ranks = [self.grid_ranks[s][d] for s in stages]
                group = dist.new_group(ranks)
                if self.global_rank in ranks:
                    for tensor in self._tied_tensors(key):
                        with torch.no_grad():
                            dist.broadcast(tensor, src=ranks[0], group=group)

    def _tied_tensors(self, key):
        module = self.tied_modules[key]
        return [functools.reduce(getattr, attr.split("."), module)
                for attr in self.tied_weight_attrs[key]]

    def _tied_names(self, layer):
        """A TiedLayerSpec's tied tensors by their names in its module: its tied_weight_attr
        paths, on every stage (the engine reduces the tied gradients by these names)."""
        if layer.key in self.tied_modules:
            names = dict(self.tied_modules[layer.key].named_parameters())
            for attr in layer.tied_weight_attr:
                tensor = functools.reduce(getattr, attr.split("."), self.tied_modules[layer.key])
                if names.get(attr) is not tensor:
                    raise ValueError(f"TiedLayerSpec {layer.key!r}: tied_weight_attr {attr!r} is "
                                     "not a parameter of its module by that name")
        return list(layer.tied_weight_attr)

    # ------------------------------------------------------------------ for the engine
    def _where(self, index):
        return f"layer {index} ({_type_name(self._layer_specs[index])}) on stage " \
               f"{self._stage_of_layer(index)}"

    def _engine_layers(self):
        """Every layer as the engine takes it (pipetrain._C.Engine)."""
        entries = []
        for i, layer in enumerate(self._layer_specs):
            tied = isinstance(layer, TiedLayerSpec)
            built = self._built.get(i)
            entries.append({
                "index": i,
                "type": _type_name(layer),
                "parameters": self._counts[i],
                "built": built,
                "tie_key": layer.key if tied else "",
                "tied_parameters": self._tied_names(layer) if tied else [],
                "forward_fn": layer.forward_fn if tied else None,
                "where": self._where(i),
                "previous": self._where(i - 1) if i > 0 else "",
            })
        return entries

    def _parameter_names(self):
        """Each of this stage's parameters: (layer type, its name in the layer)."""
        names = {}
        first_of_key = {}
        for i, layer in enumerate(self._layer_specs):
            if isinstance(layer, TiedLayerSpec):
                first_of_key.setdefault(layer.key, i)
        for i in sorted(self._built):
            built = self._built[i]
            layer = self._layer_specs[i]
            # A tied module is the type of its key's first layer on every stage, as the engine
            # names it (module::PipelineModule).
            owner = first_of_key[layer.key] if isinstance(layer, TiedLayerSpec) else i
            if isinstance(built, nn.Module):
                for name, p in built.named_parameters():
                    names.setdefault(id(p), (_type_name(self._layer_specs[owner]), name))
        return names

    # ------------------------------------------------------------------ DeepSpeed's surface
    def forward(self, x):
        """This stage's layers in order, in one process (the engine calls them itself)."""
        for i in sorted(self._built):
            layer = self._layer_specs[i]
            built = self._built[i]
            x = functools.partial(layer.forward_fn, built)(x) if (
                isinstance(layer, TiedLayerSpec) and layer.forward_fn) else built(x)
        return x

    def topology(self):
        from .topology import PipeDataParallelTopology
        return PipeDataParallelTopology(self.num_stages, self.data_parallel_size)

    def num_pipeline_stages(self):
        return self.num_stages

    def stage_owner(self, layer_idx):
        return self._stage_of_layer(layer_idx)
