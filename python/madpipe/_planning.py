"""Planning from Python: ``plan``, ``compare``, ``lower_bound`` and ``smallest_feasible_memory``."""

from __future__ import annotations

import dataclasses
import json
import numbers

from . import _madpipe
from ._documents import Plan, as_profile
from ._errors import Error

_DEFAULTS = _madpipe.planning_defaults()  # the planner's, as the madpipe command has them
DEFAULT_TIME_LIMIT_S = _DEFAULTS["time_limit"]  # the madpipe command's default --time-limit
COMPARED_ALGORITHMS = tuple(_DEFAULTS["compared_algorithms"])  # madpipe compare's default


def _bytes(value, keyword):
    """Bytes from an int or from text such as "8GiB" (as the command line reads it)."""
    if isinstance(value, str):
        return _madpipe.parse_bytes(value, keyword)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return int(value)
    raise Error(f"{keyword}: expected bytes as an integer or text such as '8GiB', got {value!r}",
                field=keyword, problem=f"expected bytes as an integer or text such as '8GiB', got {value!r}")


def _bytes_per_ms(value, keyword):
    """Bytes per millisecond from bytes per second (a number) or text such as "12GB/s"."""
    if value is None:
        return 0.0
    if isinstance(value, str):
        return _madpipe.parse_bandwidth(value, keyword)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value) / 1000.0
    raise Error(f"{keyword}: expected bytes per second or text such as '12GB/s', got {value!r}",
                field=keyword, problem=f"expected bytes per second or text such as '12GB/s', got {value!r}")


def _request(gpus, memory, bandwidth, *, algorithm="madpipe", remat="none", offload="none",
             host_bandwidth=None, weight_copies=_DEFAULTS["weight_copies"], gpus_per_node=0, inter_node_bandwidth=None,
             scheduler="auto", micro_batches=0, max_k=0, milp_backend="", remat_slots=_DEFAULTS["remat_slots"],
             time_limit=DEFAULT_TIME_LIMIT_S, verbose=False, split_backward="auto"):
    """The JSON request the compiled planner reads (python/src/planning_request.hpp)."""
    if time_limit is not None and not (isinstance(time_limit, numbers.Real) and time_limit > 0):
        raise Error(f"time_limit: must be > 0 seconds (or None: no limit), got {time_limit!r}",
                    field="time_limit", problem="must be > 0 seconds (or None: no limit)")
    if not isinstance(gpus, numbers.Integral) or isinstance(gpus, bool):
        raise Error(f"gpus: expected an integer, got {gpus!r}", field="gpus",
                    problem=f"expected an integer, got {gpus!r}")
    return json.dumps({
        "platform": {
            "gpus": int(gpus),
            "memory_bytes": _bytes(memory, "memory"),
            "bandwidth_bytes_per_ms": _bytes_per_ms(bandwidth, "bandwidth"),
            "weight_copies": int(weight_copies),
            "host_bandwidth_bytes_per_ms": _bytes_per_ms(host_bandwidth, "host_bandwidth"),
            "gpus_per_node": int(gpus_per_node),
            "inter_node_bandwidth_bytes_per_ms": _bytes_per_ms(inter_node_bandwidth, "inter_node_bandwidth"),
        },
        "algorithm": str(algorithm), "scheduler": str(scheduler), "remat": str(remat),
        "offload": str(offload), "remat_slots": int(remat_slots), "time_limit": time_limit,
        "micro_batches": int(micro_batches), "max_k": int(max_k), "milp_backend": str(milp_backend),
        "verbose": bool(verbose), "split_backward": str(split_backward),
    })


def plan(profile, *, gpus, memory, bandwidth, algorithm="madpipe", remat="none", offload="none",
         host_bandwidth=None, weight_copies=_DEFAULTS["weight_copies"], gpus_per_node=0, inter_node_bandwidth=None,
         scheduler="auto", micro_batches=0, max_k=0, milp_backend="", remat_slots=_DEFAULTS["remat_slots"],
         time_limit=DEFAULT_TIME_LIMIT_S, progress=None, verbose=False, split_backward="auto"):
    """Plans a profiled chain on ``gpus`` GPUs of ``memory`` each, linked at ``bandwidth``.

    The keywords are those of ``madpipe plan`` (docs/cli.md). Sizes are bytes or text such as
    ``"8GiB"``; bandwidths are bytes per second or text such as ``"12GB/s"``.

    Args:
        profile: a ``madpipe.Profile``, a dict in ``madpipe.profile/1`` form or a path.
        algorithm: ``madpipe`` (default) or another of ``madpipe.algorithm_names()``
            (``ilp`` needs a MILP backend).
        split_backward: ``"auto"`` (default) splits backwards into B and W where the profile
            measured the split and that shortens the period; ``"off"`` runs them whole.
        remat: ``"rotor"`` lets stages recompute activations where memory is short.
        offload: ``"host"`` lets them copy activations to host memory (needs ``host_bandwidth``).
        time_limit: seconds for the whole request (default 10, as the command); ``None``: no
            limit, and the same plan on every machine.
        progress: a callable receiving the planner's progress lines (e.g. ``print``); silent
            by default.

    Returns:
        a ``madpipe.Plan`` that passes the validator, with ``notes`` and ``planning_seconds``.

    Raises:
        madpipe.Error: bad input, or no plan fits; the message is the command's, with the
            smallest memory per GPU that would fit.
    """
    profile = as_profile(profile)
    request = _request(gpus, memory, bandwidth, algorithm=algorithm, remat=remat, offload=offload,
                       host_bandwidth=host_bandwidth, weight_copies=weight_copies,
                       gpus_per_node=gpus_per_node, inter_node_bandwidth=inter_node_bandwidth,
                       scheduler=scheduler, micro_batches=micro_batches, max_k=max_k,
                       milp_backend=milp_backend, remat_slots=remat_slots, time_limit=time_limit,
                       verbose=verbose, split_backward=split_backward)
    result = _madpipe.plan_or_explain(profile._text(), profile.file, request, progress)
    return Plan(json.loads(result["plan"]), notes=result["notes"],
                planning_seconds=result["planning_seconds"])


@dataclasses.dataclass
class Comparison:
    """One algorithm's outcome in ``compare``; ``plan`` is None when nothing fits."""
    algorithm: str
    plan: Plan | None
    planning_seconds: float
    reason: str = ""  # why nothing fits
    ratio_to_best: float | None = None
    ratio_to_lower_bound: float | None = None

    @property
    def feasible(self):
        return self.plan is not None

    @property
    def period_ms(self):
        return self.plan.period_ms if self.plan else None

    @property
    def max_memory_bytes(self):
        return max(self.plan.memory_bytes) if self.plan else None


def compare(profile, *, gpus, memory, bandwidth, algorithms=COMPARED_ALGORITHMS, **options):
    """Plans with each algorithm on the same platform (``madpipe compare``).

    Takes ``plan``'s keywords except ``algorithm``; ``algorithms`` lists the names (default
    ``COMPARED_ALGORITHMS``, those of ``madpipe compare``; ``"all"``: every one of
    ``madpipe.algorithm_names()``). Each algorithm gets the whole ``time_limit``; the ratios are
    computed by the planner, as ``madpipe compare`` computes them. Returns one ``Comparison`` per
    algorithm, in order; an algorithm that finds no plan in memory has ``plan=None`` and a
    ``reason``.
    """
    profile = as_profile(profile)
    if algorithms == "all":
        algorithms = _madpipe.algorithm_names()
    progress = options.pop("progress", None)
    algorithms = list(dict.fromkeys(algorithms))
    request = _request(gpus, memory, bandwidth, **options)
    rows = []
    for algorithm, result in zip(algorithms, _madpipe.compare(profile._text(), profile.file, request,
                                                              algorithms, progress)):
        planned = (Plan(json.loads(result["plan"]), notes=result["notes"],
                        planning_seconds=result["planning_seconds"])
                   if result["feasible"] else None)
        rows.append(Comparison(algorithm, planned, result["planning_seconds"], result["reason"],
                               result["ratio_to_best"], result["ratio_to_lower_bound"]))
    return rows


def lower_bound(profile, *, gpus, bandwidth, **platform):
    """The smallest period per micro-batch any plan can have on the platform, in ms."""
    profile = as_profile(profile)
    platform.setdefault("memory", 1 << 60)  # the bound does not depend on memory
    return _madpipe.lower_bound(profile._text(), profile.file, _request(gpus, bandwidth=bandwidth, **platform))


def smallest_feasible_memory(profile, *, gpus, bandwidth, **options):
    """The smallest memory per GPU for which ``algorithm`` finds a plan, in bytes (``None``: none).

    Takes ``plan``'s keywords except ``memory``; runs in a fraction of a second, without planning.
    """
    profile = as_profile(profile)
    bytes_needed = _madpipe.smallest_feasible_memory(
        profile._text(), profile.file, _request(gpus, 1 << 60, bandwidth, **options))
    return None if bytes_needed < 0 else bytes_needed
