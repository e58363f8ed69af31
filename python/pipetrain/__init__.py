"""pipetrain from Python: DeepSpeed's pipeline API on pipetrain's C++ engine.

A DeepSpeed pipeline script runs with its imports changed::

    import pipetrain as deepspeed
    from pipetrain.pipe import PipelineModule, LayerSpec, TiedLayerSpec

The engine (schedules, data parallelism, ZeRO, precision, checkpoints) is C++; each Python
layer's forward is called on the stage that owns it. See docs/user/python.md.
"""
# The compiled extension may sit in another folder of the path (a build tree): one package.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from ._extension import BUILT_TORCH  # noqa: E402  checks torch before anything else loads
from .distributed import init_distributed  # noqa: E402
from .engine import PipelineEngine, initialize  # noqa: E402
from .data import TokenWindows  # noqa: E402
from .planner import plan  # noqa: E402
from .checkpoints import export  # noqa: E402
from .scoring import logprobs  # noqa: E402
from . import pipe  # noqa: E402

__version__ = "0.1.0"
__all__ = ["init_distributed", "initialize", "PipelineEngine", "TokenWindows", "plan", "export",
           "logprobs", "pipe", "BUILT_TORCH", "__version__"]
