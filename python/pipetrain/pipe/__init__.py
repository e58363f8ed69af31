"""DeepSpeed's pipe module names: PipelineModule, LayerSpec, TiedLayerSpec and topologies."""
from .module import LayerSpec, PipelineModule, TiedLayerSpec
from .topology import PipeDataParallelTopology, PipeModelDataParallelTopology, ProcessTopology

__all__ = ["PipelineModule", "LayerSpec", "TiedLayerSpec", "ProcessTopology",
           "PipeDataParallelTopology", "PipeModelDataParallelTopology"]
