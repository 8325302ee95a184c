"""madpipe: plans pipelined model-parallel training of a chain of layers on P GPUs.

The planner of the ``madpipe`` command, from Python::

    import madpipe
    plan = madpipe.plan("configs/profiles/resnet50.json", gpus=4, memory="8GiB", bandwidth="12GB/s")
    print(plan.period_ms, [(s["first_layer"], s["last_layer"], s["gpu"]) for s in plan.stages])
    plan.save("plan.json")

``madpipe.torch`` measures PyTorch chains (``profile``) and runs madpipe plans with
torch.distributed.pipelining (``run_plan``). See docs/python.md.
"""

from ._checking import Simulation, Violation, simulate, validate
from ._documents import Plan, Profile, read_plan, read_profile
from ._errors import Error, NoPlanFits
from ._export import TorchSchedule, export_torch, read_torch_schedule
from ._planning import Comparison, PlanningOptions, compare, lower_bound, plan, smallest_feasible_memory

from . import _madpipe

__version__: str = _madpipe.version()
ALGORITHMS: tuple[str, ...] = tuple(_madpipe.algorithm_names())

__all__ = [
    "ALGORITHMS", "Comparison", "Error", "NoPlanFits", "Plan", "PlanningOptions", "Profile",
    "Simulation", "TorchSchedule", "Violation", "compare", "export_torch", "lower_bound", "plan",
    "read_plan", "read_profile", "read_torch_schedule", "simulate", "smallest_feasible_memory",
    "validate",
]
