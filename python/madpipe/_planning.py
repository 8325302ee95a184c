"""Planning from Python: ``plan``, ``compare``, ``lower_bound`` and ``smallest_feasible_memory``."""

from __future__ import annotations

import dataclasses
import json
import numbers
import typing

from . import _madpipe
from ._documents import Plan, Profile, ProfileLike, as_profile
from ._errors import Error, NoPlanFits, checks_keywords, speak_python
from ._progress import Progress, progress_sink

if typing.TYPE_CHECKING:
    from typing_extensions import Unpack

_DEFAULTS = _madpipe.planning_defaults()  # the planner's, as the madpipe command has them
DEFAULT_TIME_LIMIT_S: float = _DEFAULTS["time_limit"]  # the madpipe command's default --time-limit
COMPARED_ALGORITHMS: tuple[str, ...] = tuple(_DEFAULTS["compared_algorithms"])  # madpipe compare's default
_UNLIMITED_MEMORY = 1 << 60  # for what does not depend on memory

Bytes = typing.Union[int, float, str]  # 8 << 30, or text such as "8GiB"
Bandwidth = typing.Union[float, str]  # bytes per second, or text such as "12GB/s"


class PlanningOptions(typing.TypedDict, total=False):
    """The keywords of ``madpipe.plan`` beside the platform's ``gpus``, ``memory`` and
    ``bandwidth``, which ``compare``, ``lower_bound`` and ``smallest_feasible_memory`` take too."""
    algorithm: str
    remat: str
    offload: str
    host_bandwidth: Bandwidth | None
    weight_copies: int
    gpus_per_node: int
    inter_node_bandwidth: Bandwidth | None
    scheduler: str
    micro_batches: int
    max_k: int
    milp_backend: str
    remat_slots: int
    time_limit: float | None
    verbose: bool
    split_backward: str
    progress: Progress


OPTION_KEYWORDS = tuple(PlanningOptions.__annotations__)


def _bytes(value: Bytes, keyword: str) -> int:
    """Bytes from an int or from text such as "8GiB" (as the command line reads it)."""
    if isinstance(value, str):
        return int(_madpipe.parse_bytes(value, keyword))
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return int(value)
    raise Error(f"{keyword}: expected bytes as an integer or text such as '8GiB', got {value!r}",
                field=keyword, problem=f"expected bytes as an integer or text such as '8GiB', got {value!r}")


def _bytes_per_ms(value: Bandwidth | None, keyword: str) -> float:
    """Bytes per millisecond from bytes per second (a number) or text such as "12GB/s"."""
    if value is None:
        return 0.0
    if isinstance(value, str):
        return float(_madpipe.parse_bandwidth(value, keyword))
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value) / 1000.0
    raise Error(f"{keyword}: expected bytes per second or text such as '12GB/s', got {value!r}",
                field=keyword, problem=f"expected bytes per second or text such as '12GB/s', got {value!r}")


def _request(gpus: int, memory: Bytes, bandwidth: Bandwidth | None, *, algorithm: str = "madpipe",
             remat: str = "none", offload: str = "none", host_bandwidth: Bandwidth | None = None,
             weight_copies: int = _DEFAULTS["weight_copies"], gpus_per_node: int = 0,
             inter_node_bandwidth: Bandwidth | None = None, scheduler: str = "auto",
             micro_batches: int = 0, max_k: int = 0, milp_backend: str = "",
             remat_slots: int = _DEFAULTS["remat_slots"], time_limit: float | None = DEFAULT_TIME_LIMIT_S,
             verbose: bool = False, split_backward: str = "auto") -> str:
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


def _planned(result: dict[str, typing.Any], profile: Profile) -> Plan:
    """The Plan of a feasible result of the compiled planner."""
    return Plan(json.loads(result["plan"]), notes=[speak_python(note) for note in result["notes"]],
                planning_seconds=result["planning_seconds"], profile=profile)


def _smallest_memory(profile: Profile, request: str) -> int | None:
    bytes_needed = int(_madpipe.smallest_feasible_memory(profile._text(), profile.file, request))
    return None if bytes_needed < 0 else bytes_needed


@checks_keywords()
def plan(profile: ProfileLike, *, gpus: int, memory: Bytes, bandwidth: Bandwidth,
         algorithm: str = "madpipe", remat: str = "none", offload: str = "none",
         host_bandwidth: Bandwidth | None = None, weight_copies: int = _DEFAULTS["weight_copies"],
         gpus_per_node: int = 0, inter_node_bandwidth: Bandwidth | None = None,
         scheduler: str = "auto", micro_batches: int = 0, max_k: int = 0, milp_backend: str = "",
         remat_slots: int = _DEFAULTS["remat_slots"], time_limit: float | None = DEFAULT_TIME_LIMIT_S,
         progress: Progress = None, verbose: bool = False, split_backward: str = "auto") -> Plan:
    """Plans a profiled chain on ``gpus`` GPUs of ``memory`` each, linked at ``bandwidth``.

    The keywords are those of ``madpipe plan`` (docs/cli.md). Sizes are bytes or text such as
    ``"8GiB"``; bandwidths are bytes per second or text such as ``"12GB/s"``.

    Args:
        profile: a ``madpipe.Profile``, a dict in ``madpipe.profile/1`` form or a path.
        algorithm: ``madpipe`` (default) or another of ``madpipe.ALGORITHMS``
            (``ilp`` needs a MILP backend).
        split_backward: ``"auto"`` (default) splits backwards into B and W where the profile
            measured the split and that shortens the period; ``"off"`` runs them whole.
        remat: ``"rotor"`` lets stages recompute activations where memory is short.
        offload: ``"host"`` lets them copy activations to host memory (needs ``host_bandwidth``).
        time_limit: seconds for the whole request (default 10, as the command); ``None``: no
            limit, and the same plan on every machine.
        progress: where the planner's status lines go: a callable receiving each line (e.g.
            ``print``), a ``logging.Logger`` (at INFO), or None (default): the ``"madpipe"``
            logger at INFO, silent unless logging is configured to show it.

    Returns:
        a ``madpipe.Plan`` that passes the validator, with ``notes``, ``planning_seconds`` and
        ``profile``.

    Raises:
        madpipe.NoPlanFits: no plan fits; the message is the command's, with the smallest memory
            per GPU that would fit, and ``smallest_memory_bytes`` gives it in bytes.
        madpipe.Error: bad input (an unknown keyword too).
    """
    profile = as_profile(profile)
    options: dict[str, typing.Any] = dict(
        algorithm=algorithm, remat=remat, offload=offload, host_bandwidth=host_bandwidth,
        weight_copies=weight_copies, gpus_per_node=gpus_per_node,
        inter_node_bandwidth=inter_node_bandwidth, scheduler=scheduler, micro_batches=micro_batches,
        max_k=max_k, milp_backend=milp_backend, remat_slots=remat_slots, time_limit=time_limit,
        verbose=verbose, split_backward=split_backward)
    request = _request(gpus, memory, bandwidth, **options)
    try:
        result = _madpipe.plan_or_explain(profile._text(), profile.file, request, progress_sink(progress))
    except NoPlanFits as error:
        error.smallest_memory_bytes = _smallest_memory(
            profile, _request(gpus, _UNLIMITED_MEMORY, bandwidth, **options))
        raise
    return _planned(result, profile)


@dataclasses.dataclass(repr=False)
class Comparison:
    """One algorithm's outcome in ``compare``; ``plan`` is None when nothing fits."""
    algorithm: str
    plan: Plan | None
    planning_seconds: float
    reason: str = ""  # why nothing fits
    ratio_to_best: float | None = None
    ratio_to_lower_bound: float | None = None

    @property
    def feasible(self) -> bool:
        return self.plan is not None

    @property
    def period_ms(self) -> float | None:
        return self.plan.period_ms if self.plan else None

    @property
    def max_memory_bytes(self) -> int | None:
        return max(self.plan.memory_bytes) if self.plan else None

    def __repr__(self) -> str:
        if self.plan is None:
            return f"Comparison({self.algorithm}: {self.reason or 'no plan'})"
        return (f"Comparison({self.algorithm}: {self.plan.period_ms:.3f} ms per micro-batch, "
                f"{self.ratio_to_best:.3f} x best, {self.ratio_to_lower_bound:.3f} x lower bound)")


@checks_keywords(*(keyword for keyword in OPTION_KEYWORDS if keyword != "algorithm"))
def compare(profile: ProfileLike, *, gpus: int, memory: Bytes, bandwidth: Bandwidth,
            algorithms: typing.Iterable[str] | str = COMPARED_ALGORITHMS,
            **options: Unpack[PlanningOptions]) -> list[Comparison]:
    """Plans with each algorithm on the same platform (``madpipe compare``).

    Takes ``plan``'s keywords except ``algorithm``; ``algorithms`` lists the names (default
    ``COMPARED_ALGORITHMS``, those of ``madpipe compare``; ``"all"``: every one of
    ``madpipe.ALGORITHMS``). Each algorithm gets the whole ``time_limit``; the ratios are
    computed by the planner, as ``madpipe compare`` computes them. Returns one ``Comparison`` per
    algorithm, in order; an algorithm that finds no plan in memory has ``plan=None`` and a
    ``reason``.
    """
    profile = as_profile(profile)
    if algorithms == "all":
        algorithms = _madpipe.algorithm_names()
    elif isinstance(algorithms, str):
        algorithms = [algorithms]
    progress = progress_sink(options.pop("progress", None))
    names = list(dict.fromkeys(algorithms))
    request = _request(gpus, memory, bandwidth, **options)  # type: ignore[misc]  # progress popped
    rows = []
    for algorithm, result in zip(names, _madpipe.compare(profile._text(), profile.file, request,
                                                         names, progress)):
        planned = _planned(result, profile) if result["feasible"] else None
        rows.append(Comparison(algorithm, planned, result["planning_seconds"],
                               speak_python(result["reason"]), result["ratio_to_best"],
                               result["ratio_to_lower_bound"]))
    return rows


@checks_keywords("memory", *(keyword for keyword in OPTION_KEYWORDS if keyword != "progress"))
def lower_bound(profile: ProfileLike, *, gpus: int, bandwidth: Bandwidth,
                **platform: typing.Any) -> float:
    """The smallest period per micro-batch any plan can have on the platform, in ms.

    Takes ``plan``'s keywords; only the platform's matter (the bound does not depend on
    ``memory``)."""
    profile = as_profile(profile)
    platform.setdefault("memory", _UNLIMITED_MEMORY)
    return float(_madpipe.lower_bound(profile._text(), profile.file,
                                      _request(gpus, bandwidth=bandwidth, **platform)))


@checks_keywords(*(keyword for keyword in OPTION_KEYWORDS if keyword != "progress"))
def smallest_feasible_memory(profile: ProfileLike, *, gpus: int, bandwidth: Bandwidth,
                             **options: Unpack[PlanningOptions]) -> int | None:
    """The smallest memory per GPU for which ``algorithm`` finds a plan, in bytes (``None``: none).

    Takes ``plan``'s keywords except ``memory`` and ``progress``; runs in a fraction of a second,
    without planning.
    """
    profile = as_profile(profile)
    request = _request(gpus, _UNLIMITED_MEMORY, bandwidth, **options)  # type: ignore[misc]
    return _smallest_memory(profile, request)
