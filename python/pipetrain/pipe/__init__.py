"""DeepSpeed's pipe module names: PipelineModule, LayerSpec, TiedLayerSpec and topologies;
and pipetrain's native families: BuiltinModel, from_pretrained."""
from .builtin import BuiltinModel, from_pretrained
from .module import LayerSpec, PipelineModule, TiedLayerSpec
from .topology import PipeDataParallelTopology, PipeModelDataParallelTopology, ProcessTopology

__all__ = ["PipelineModule", "LayerSpec", "TiedLayerSpec", "ProcessTopology",
           "PipeDataParallelTopology", "PipeModelDataParallelTopology", "BuiltinModel",
           "from_pretrained"]
