"""Checking plans: ``validate`` (the rules of docs/formats.md) and ``simulate`` (a replay)."""

from __future__ import annotations

import dataclasses
import typing

from . import _madpipe
from ._documents import PlanLike, ProfileLike, as_plan, as_profile
from ._errors import checks_keywords


class Violation(typing.NamedTuple):
    """A broken rule: ``field`` is a JSON pointer into the plan (``/pattern/ops/3/start_ms``)."""
    field: str
    problem: str


def validate(plan: PlanLike, profile: ProfileLike | None = None) -> list[Violation]:
    """Every violation of the plan's rules (an empty list: valid).

    With ``profile``, also checks that the stages' costs are the profile's.
    """
    plan = as_plan(plan)
    if profile is None:
        return [Violation(*v) for v in _madpipe.validate(plan._text(), plan.file, None, "")]
    profile = as_profile(profile)
    return [Violation(*v) for v in _madpipe.validate(plan._text(), plan.file, profile._text(), profile.file)]


@dataclasses.dataclass(repr=False)
class Simulation:
    """One training step of a plan replayed (``madpipe simulate``)."""
    micro_batches: int
    step_ms: float  # first start to last end, warm-up and drain included
    period_ms: float  # steady-state time per micro-batch
    pattern_period_ms: float  # steady-state time per k micro-batches
    peak_memory_bytes: list[int]  # per GPU
    ops: list[dict[str, typing.Any]]  # kind, stage, micro_batch, resource, start_ms, end_ms; in start order

    def __repr__(self) -> str:
        peak = max(self.peak_memory_bytes, default=0)
        fullest = self.peak_memory_bytes.index(peak) if self.peak_memory_bytes else 0
        return (f"Simulation({self.micro_batches} micro-batches, step {self.step_ms:.3f} ms, period "
                f"{self.period_ms:.3f} ms/micro-batch, peak {_madpipe.format_bytes(peak)} on GPU {fullest}, "
                f"{len(self.ops)} ops)")


@checks_keywords()
def simulate(plan: PlanLike, *, micro_batches: int = 0, policy: str = "timetable") -> Simulation:
    """Replays one training step of ``micro_batches`` (0: enough to reach the steady state).

    ``policy``: ``"timetable"`` (each op at its planned time or later) or ``"asap"`` (as soon as
    its inputs and resource are free). Raises ``madpipe.Error`` for an invalid plan.
    """
    plan = as_plan(plan)
    result = _madpipe.simulate(plan._text(), plan.file, int(micro_batches), str(policy))
    return Simulation(micro_batches=result["micro_batches"], step_ms=result["step_ms"],
                      period_ms=result["steady_normalized_ms"],
                      pattern_period_ms=result["steady_period_ms"],
                      peak_memory_bytes=list(result["peak_memory_bytes"]), ops=result["ops"])
