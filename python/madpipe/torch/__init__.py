"""madpipe.torch: madpipe for PyTorch chains (docs/torch.md).

* ``profile(chain, sample, ...)`` measures an nn.Sequential-style chain layer by layer into a
  ``madpipe.profile/1`` document, which ``madpipe.plan`` plans and ``write_profile`` saves;
* ``run_plan(chain, export, loss_fn=...)`` trains the chain on torch.distributed.pipelining with
  a madpipe plan exported by ``madpipe export --format torch`` or ``madpipe.export_torch``;
* ``plan(chain, sample, gpus=, memory=, bandwidth=)`` profiles and plans in one call;
* ``gather_state_dict(runner)`` gives rank 0 the trained chain's state_dict, and
  ``runner.report()`` the measured step and memory against the plan's;
* ``train(chain, inputs, targets, gpus=, output_dir=)`` trains the chain with madpipe's native
  runtime (``mpirun ... madpipe train``) and returns the run, its metrics and state_dict;
* ``read_export`` and ``check_export`` read an export and check it as torch's schedule runtime
  will.

``run_plan`` and ``check_export`` use private parts of torch.distributed.pipelining; they are
imported on first use, and an ImportError names the torch version when they are missing
(``TESTED_TORCH_VERSIONS``: the releases the tests ran on).
"""

from ._pipelining_api import TESTED_TORCH_VERSIONS
from .export import ExportError, ExportStage, TorchExport, read_export
from .planning import plan
from .profiling import profile, write_profile

_LAZY = {"run_plan": "pipeline", "PipelineRunner": "pipeline", "gather_state_dict": "pipeline",
         "check_export": "checking", "train": "native", "TrainingRun": "native"}

__all__ = ["ExportError", "ExportStage", "PipelineRunner", "TESTED_TORCH_VERSIONS", "TorchExport",
           "TrainingRun", "check_export", "gather_state_dict", "plan", "profile", "read_export",
           "run_plan", "train", "write_profile"]


def __getattr__(name):
    """Imports run_plan, PipelineRunner, gather_state_dict, check_export and train when first
    asked for."""
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
