"""Loads pipetrain._C after checking that this Python's torch is the one it was built against
(another torch's libraries would not match the extension's)."""
import torch

try:
    from ._build_info import TORCH_VERSION as BUILT_TORCH
except ImportError:
    raise ImportError(
        "pipetrain: the extension is not built here: run scripts/build, or "
        "pip install --no-build-isolation . from the checkout") from None

if torch.__version__ != BUILT_TORCH:
    raise ImportError(
        f"pipetrain was built against torch {BUILT_TORCH}, this Python has torch "
        f"{torch.__version__}: reinstall pipetrain into this Python (pip install "
        "--no-build-isolation . from the checkout) or use the torch it was built against")

from . import _C  # noqa: E402  (after the check)

__all__ = ["_C", "BUILT_TORCH"]
