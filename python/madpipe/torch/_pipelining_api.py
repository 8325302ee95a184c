"""The parts of torch.distributed.pipelining that madpipe.torch relies on, checked once.

Running an arbitrary per-rank order of forwards and backwards (a madpipe plan) needs the private
schedule runtime of torch.distributed.pipelining: ``_PipelineScheduleRuntime`` loads a
compute-only CSV (``_load_csv``), infers which rank holds each stage from it
(``_validate_schedule``) and adds the sends and receives (``_add_send_recv``). Private APIs move
between releases, so this module imports them in one place and names the torch version when one
is missing.
"""

import importlib
import types
import warnings

import torch

# torch releases (major.minor) whose pipelining runtime the test suite ran madpipe plans on.
TESTED_TORCH_VERSIONS = ("2.11", "2.15")

_REQUIRED = {
    "torch.distributed.pipelining": ("PipelineStage",),
    "torch.distributed.pipelining.schedules": (
        "_Action", "_PipelineScheduleRuntime", "_add_send_recv", "_simulate_comms_compute",
        "_validate_schedule",
    ),
}
# Names later releases added, and what stands in for them before: torch 2.11's runtime waits for
# every send at the end of a step, so its lowered schedules have no explicit waits to add.
_OPTIONAL = {
    "torch.distributed.pipelining.schedules": {"_add_wait_send": lambda actions: actions},
}
_REQUIRED_METHODS = (("_PipelineScheduleRuntime", "_load_csv"), ("_Action", "from_str"))


def torch_release(version=None):
    """'2.15' for torch '2.15.0+cu132'."""
    version = torch.__version__ if version is None else version
    return ".".join(version.split("+")[0].split(".")[:2])


def _unsupported(what):
    tested = ", ".join(TESTED_TORCH_VERSIONS)
    return (f"madpipe.torch needs {what} of torch.distributed.pipelining, which torch "
            f"{torch.__version__} does not have (madpipe.torch is tested with torch {tested})")


def load_pipelining_api():
    """Returns a namespace of the pipelining names madpipe.torch uses.

    Raises ImportError naming the torch version and the tested ones when torch.distributed is
    unavailable or a private name is missing; warns (once per process) when the torch release is
    not one the tests ran on.
    """
    if not torch.distributed.is_available():
        raise ImportError(_unsupported("torch.distributed (this build of torch has none)"))
    names = {}
    for module_name, attributes in _REQUIRED.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ImportError(_unsupported(f"the module {module_name}")) from error
        for attribute in attributes:
            if not hasattr(module, attribute):
                raise ImportError(_unsupported(f"{module_name}.{attribute}"))
            names[attribute] = getattr(module, attribute)
        for attribute, stand_in in _OPTIONAL.get(module_name, {}).items():
            names[attribute] = getattr(module, attribute, stand_in)
    for owner, method in _REQUIRED_METHODS:
        if not callable(getattr(names[owner], method, None)):
            raise ImportError(_unsupported(f"{owner}.{method}"))
    if torch_release() not in TESTED_TORCH_VERSIONS:
        warnings.warn(f"madpipe.torch is tested with torch {', '.join(TESTED_TORCH_VERSIONS)}; "
                      f"torch {torch.__version__} may run madpipe plans differently",
                      RuntimeWarning, stacklevel=3)
    return types.SimpleNamespace(**names)


_api = None


def pipelining_api():
    """The checked namespace, loaded on first use."""
    global _api
    if _api is None:
        _api = load_pipelining_api()
    return _api
