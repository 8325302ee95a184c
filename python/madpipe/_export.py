"""A plan as torch.distributed.pipelining runs it (``madpipe export --format torch``)."""

from __future__ import annotations

import dataclasses
import json
import os
import typing

from . import _madpipe
from ._documents import PathLike, PlanLike, as_plan

SCHEDULE_FILE = "schedule.csv"  # torch's compute-only CSV, one row per rank
STAGES_FILE = "stages.json"  # madpipe.torch-stages/1: each stage's rank and layers


@dataclasses.dataclass(repr=False)
class TorchSchedule:
    """The export of a plan for ``micro_batches`` micro-batches per step.

    Attributes:
        actions: per rank, its actions in the plan's order: ``"0F3"`` (stage 0, forward of
            micro-batch 3), ``"2B1"`` (stage 2, full backward of micro-batch 1).
        stage_to_rank: the rank (the plan's GPU) of every stage.
        stages: the ``madpipe.torch-stages/1`` document: ``stages`` (``stage``, ``rank``,
            ``first_layer``, ``last_layer``, ...) and ``notes`` on where torch does not run the
            plan as madpipe would (recomputation, offloading).
        csv: the text of ``schedule.csv``.
        stages_json: the text of ``stages.json``.
    """
    micro_batches: int
    actions: list[list[str]]
    stage_to_rank: list[int]
    stages: dict[str, typing.Any]
    csv: str
    stages_json: str

    @property
    def notes(self) -> list[str]:
        return list(self.stages.get("notes", []))

    def __repr__(self) -> str:
        ranks = len(self.actions)
        return (f"TorchSchedule({self.micro_batches} micro-batches, {len(self.stage_to_rank)} stages on "
                f"{ranks} rank{'' if ranks == 1 else 's'}, {sum(map(len, self.actions))} actions)")

    def write(self, directory: PathLike) -> str:
        """Writes ``schedule.csv`` and ``stages.json`` into ``directory`` (created if missing)."""
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        _madpipe.write_file_atomically(os.path.join(directory, SCHEDULE_FILE), self.csv)
        _madpipe.write_file_atomically(os.path.join(directory, STAGES_FILE), self.stages_json)
        return directory


def export_torch(plan: PlanLike, micro_batches: int) -> TorchSchedule:
    """Exports a plan for torch.distributed.pipelining's ``_PipelineScheduleRuntime``.

    The periodic pattern is unrolled for ``micro_batches`` micro-batches (warm-up, steady state
    and drain) in the order the plan runs them; ``madpipe.torch.run_plan`` runs the result.
    Raises ``madpipe.Error`` for an invalid plan or ``micro_batches`` < 1.
    """
    plan = as_plan(plan)
    result = _madpipe.export_torch(plan._text(), plan.file, int(micro_batches))
    return TorchSchedule(micro_batches=int(micro_batches), actions=[list(row) for row in result["actions"]],
                         stage_to_rank=list(result["stage_to_rank"]), stages=json.loads(result["stages"]),
                         csv=result["csv"], stages_json=result["stages"])


def read_export_files(directory: PathLike) -> tuple[dict[str, typing.Any], str, str, list[list[str]]]:
    """The files ``madpipe export --format torch`` wrote into ``directory``, as read from disk.

    Returns ``(stages, stages_json, csv, actions)``: the parsed ``stages.json``, its text, the
    text of ``schedule.csv`` and its rows (per rank, its actions). The one reader of an export
    directory: ``read_torch_schedule`` and ``madpipe.torch.read_export`` build on it.
    """
    directory = os.fspath(directory)
    stages_path = os.path.join(directory, STAGES_FILE)
    stages = json.loads(_madpipe.read_json_file(stages_path))
    with open(stages_path) as file:
        stages_json = file.read()
    with open(os.path.join(directory, SCHEDULE_FILE), newline="") as file:
        csv = file.read()
    actions = [line.split(",") if line else [] for line in csv.splitlines()]
    return stages, stages_json, csv, actions


def read_torch_schedule(directory: PathLike) -> TorchSchedule:
    """Reads the ``schedule.csv`` and ``stages.json`` that ``madpipe export`` wrote."""
    stages, stages_json, csv, actions = read_export_files(directory)
    stage_to_rank = [stage["rank"] for stage in stages["stages"]]
    return TorchSchedule(micro_batches=stages["micro_batches"], actions=actions,
                         stage_to_rank=stage_to_rank, stages=stages, csv=csv, stages_json=stages_json)
