"""madpipe.torch: madpipe for PyTorch chains (docs/torch.md).

* ``profile(chain, sample, ...)`` measures an nn.Sequential-style chain layer by layer into a
  ``madpipe.profile/1`` document, which ``madpipe.plan`` plans and ``write_profile`` saves;
* ``run_plan(chain, export, loss_fn=...)`` trains the chain on torch.distributed.pipelining with
  a madpipe plan exported by ``madpipe export --format torch`` or ``madpipe.export_torch``;
* ``read_export`` and ``check_export`` read an export and check it as torch's schedule runtime
  will.

``run_plan`` and ``check_export`` use private parts of torch.distributed.pipelining; they are
imported on first use, and an ImportError names the torch version when they are missing
(``TESTED_TORCH_VERSIONS``: the releases the tests ran on).
"""

from ._pipelining_api import TESTED_TORCH_VERSIONS
from .export import ExportError, ExportStage, TorchExport, read_export
from .profiling import profile, write_profile

_LAZY = {"run_plan": "pipeline", "PipelineRunner": "pipeline", "gather_state_dict": "pipeline",
         "check_export": "checking"}

__all__ = ["ExportError", "ExportStage", "PipelineRunner", "TESTED_TORCH_VERSIONS", "TorchExport",
           "check_export", "gather_state_dict", "profile", "read_export", "run_plan", "write_profile"]


def __getattr__(name):
    """Imports run_plan, PipelineRunner and check_export when first asked for."""
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
