"""Reads the export of a madpipe plan for torch.distributed.pipelining.

``madpipe export --plan plan.json --format torch --micro-batches N --output DIR`` writes two
files, and ``madpipe.export_torch(plan, N)`` returns the same content:

* ``DIR/schedule.csv``: torch's compute-only CSV, one line per rank (an idle rank has an empty
  line), its actions in the order the plan runs them: ``0F3`` is the forward of micro-batch 3 on
  stage 0, ``2B1`` the full backward of micro-batch 1 on stage 2.
* ``DIR/stages.json`` (``madpipe.torch-stages/1``): for every stage its rank and its layers
  ``first_layer..last_layer`` (inclusive) of the chain, and ``notes``.

``read_export`` turns any of the three forms (a directory, an object with ``.actions`` and
``.stages`` such as ``madpipe.TorchSchedule``, or a dict in ``stages.json`` form with an
``actions`` member holding the rows) into a ``TorchExport``.
"""

import collections.abc
import dataclasses
import os
import re

from .._errors import Error
from .._export import SCHEDULE_FILE, STAGES_FILE, read_export_files

STAGES_FORMAT = "madpipe.torch-stages/1"

# A compute action of a compute-only schedule: stage, F (forward) or B (full backward), micro-batch.
_ACTION = re.compile(r"^(\d+)([FBIW])(\d+)$")


class ExportError(ValueError):
    """An export that is malformed or that torch.distributed.pipelining cannot run."""


@dataclasses.dataclass(frozen=True)
class ExportStage:
    """One stage of the export: it runs layers first_layer..last_layer (inclusive) on rank."""
    stage: int
    rank: int
    first_layer: int
    last_layer: int
    remat: str = "none"
    offload: str = "none"


@dataclasses.dataclass
class TorchExport:
    """A plan unrolled for ``micro_batches`` micro-batches, as torch's schedule runtime runs it.

    Attributes:
        micro_batches: micro-batches per training step.
        ranks: ranks of the pipeline (the plan's GPUs), idle ones included.
        stages: the stages in chain order.
        actions: per rank, its actions (``"0F3"``, ``"2B1"``) in the order it runs them.
        notes: where torch runs the plan differently from madpipe (recomputation, offloading).
        profile: the name of the profile the plan was made for.
    """
    micro_batches: int
    ranks: int
    stages: list
    actions: list
    notes: list = dataclasses.field(default_factory=list)
    profile: str = ""

    @property
    def num_stages(self):
        return len(self.stages)

    @property
    def stage_to_rank(self):
        """The rank of every stage, in stage order."""
        return [stage.rank for stage in self.stages]

    @property
    def active_ranks(self):
        """The ranks that run at least one action, in increasing order."""
        return [rank for rank, row in enumerate(self.actions) if row]

    @property
    def layers(self):
        """Number of layers of the chain the stages cover."""
        return self.stages[-1].last_layer + 1

    def stages_on(self, rank):
        """The stages of ``rank``, in chain order."""
        return [stage for stage in self.stages if stage.rank == rank]

    def csv_text(self, rows=None):
        """The compute-only CSV of ``rows`` (default: every rank's actions)."""
        rows = self.actions if rows is None else rows
        return "".join(",".join(row) + "\n" for row in rows)


def read_export(source):
    """Reads an export from a directory, a ``TorchSchedule``-like object or a dict.

    Raises ExportError naming what is wrong (a missing file or field, a malformed action, a
    stage on no rank), and TypeError for a source of another kind.
    """
    if isinstance(source, TorchExport):
        export = source
    elif isinstance(source, (str, os.PathLike)):
        export = _from_directory(os.fspath(source))
    elif hasattr(source, "actions") and hasattr(source, "stages"):
        export = _from_document(dict(source.stages), source.actions, "the export object")
    elif isinstance(source, collections.abc.Mapping):
        if "actions" not in source:
            raise ExportError("the export dict has no 'actions' member: give each rank's actions "
                              "(the rows of schedule.csv) with the stages.json members")
        export = _from_document(dict(source), source["actions"], "the export dict")
    else:
        raise TypeError(f"an export is a directory written by 'madpipe export', an object with "
                        f".actions and .stages (madpipe.export_torch) or a dict; got "
                        f"{type(source).__name__}")
    _check_consistency(export)
    return export


def _from_directory(directory):
    """The directory's files, read as ``madpipe.read_torch_schedule`` reads them."""
    stages_path = os.path.join(directory, STAGES_FILE)
    for path in (stages_path, os.path.join(directory, SCHEDULE_FILE)):
        if not os.path.isfile(path):
            raise ExportError(f"{path}: no such file (write the export with 'madpipe export "
                              f"--format torch --output {directory}')")
    try:
        document, _, _, rows = read_export_files(directory)
    except Error as error:
        raise ExportError(str(error)) from error
    return _from_document(document, rows, stages_path)


def _field(document, name, kind, where):
    if name not in document:
        raise ExportError(f"{where}: missing field '{name}'")
    value = document[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ExportError(f"{where}: '{name}' must be an integer, got {value!r}")
    if kind is not int and not isinstance(value, kind):
        raise ExportError(f"{where}: '{name}' must be a {kind.__name__}, got {value!r}")
    return value


def _from_document(document, rows, where):
    if document.get("format") != STAGES_FORMAT:
        raise ExportError(f"{where}: 'format' must be {STAGES_FORMAT!r}, got "
                          f"{document.get('format')!r}")
    micro_batches = _field(document, "micro_batches", int, where)
    ranks = _field(document, "ranks", int, where)
    if micro_batches < 1 or ranks < 1:
        raise ExportError(f"{where}: 'micro_batches' and 'ranks' must be >= 1, got "
                          f"{micro_batches} and {ranks}")
    stages = []
    for index, entry in enumerate(_field(document, "stages", list, where)):
        at = f"{where}: stages[{index}]"
        stages.append(ExportStage(
            stage=_field(entry, "stage", int, at), rank=_field(entry, "rank", int, at),
            first_layer=_field(entry, "first_layer", int, at),
            last_layer=_field(entry, "last_layer", int, at),
            remat=str(entry.get("remat", "none")), offload=str(entry.get("offload", "none"))))
    if "num_stages" in document and document["num_stages"] != len(stages):
        raise ExportError(f"{where}: 'num_stages' is {document['num_stages']} but 'stages' lists "
                          f"{len(stages)}")
    rows = [[str(action).strip() for action in row if str(action).strip()] for row in rows]
    if len(rows) > ranks:
        raise ExportError(f"{where}: the schedule has {len(rows)} rows for {ranks} ranks")
    rows += [[] for _ in range(ranks - len(rows))]  # idle last ranks may have no line
    return TorchExport(micro_batches=micro_batches, ranks=ranks, stages=stages, actions=rows,
                       notes=list(document.get("notes", [])),
                       profile=str(document.get("profile", "")))


def parse_action(text):
    """(stage, kind, micro_batch) of a compute action such as ``'2B1'``: kind is F, B (a whole
    backward), or I and W (a backward split into its input and its weight gradient)."""
    match = _ACTION.match(text)
    if not match:
        raise ExportError(f"schedule action {text!r} is not a compute action such as '0F3' or "
                          f"'2B1' (stage, F, B, I or W, micro-batch)")
    return int(match.group(1)), match.group(2), int(match.group(3))


def _check_consistency(export):
    """Stages cover the chain in order, every action names a stage of its own rank."""
    if not export.stages:
        raise ExportError("the export has no stages")
    next_layer = 0
    for index, stage in enumerate(export.stages):
        if stage.stage != index:
            raise ExportError(f"stages[{index}] is stage {stage.stage}: stages must be listed in "
                              f"chain order from 0")
        if not 0 <= stage.rank < export.ranks:
            raise ExportError(f"stage {index} is on rank {stage.rank}, outside the export's "
                              f"{export.ranks} ranks")
        if stage.first_layer != next_layer or stage.last_layer < stage.first_layer:
            raise ExportError(f"stage {index} holds layers {stage.first_layer}..{stage.last_layer}; "
                              f"it must start at layer {next_layer} and hold at least one layer")
        next_layer = stage.last_layer + 1
    seen = set()
    for rank, row in enumerate(export.actions):
        for action in row:
            stage, kind, micro_batch = parse_action(action)
            if stage >= export.num_stages or export.stages[stage].rank != rank:
                raise ExportError(f"rank {rank} runs {action}, but stage {stage} is not one of its "
                                  f"stages")
            if micro_batch >= export.micro_batches:
                raise ExportError(f"rank {rank} runs {action}, but a step has "
                                  f"{export.micro_batches} micro-batches")
            if (stage, kind, micro_batch) in seen:
                raise ExportError(f"rank {rank} runs {action} twice")
            if kind in "BI" and (stage, "F", micro_batch) not in seen:
                raise ExportError(f"rank {rank} runs {action} before its forward")
            if kind == "W" and (stage, "I", micro_batch) not in seen:
                raise ExportError(f"rank {rank} runs {action} before its input gradient "
                                  f"({stage}I{micro_batch})")
            whole, split = (stage, "B", micro_batch) in seen, (stage, "I", micro_batch) in seen
            if (kind == "B" and split) or (kind == "I" and whole):
                raise ExportError(f"rank {rank} runs both {stage}B{micro_batch} and "
                                  f"{stage}I{micro_batch}: a backward is whole (B) or split (I, W)")
            seen.add((stage, kind, micro_batch))
    # Each micro-batch of each stage: F, then B, or I and W.
    missing, expected = [], 0
    for s in range(export.num_stages):
        for m in range(export.micro_batches):
            needed = "F" + ("IW" if (s, "I", m) in seen else "B")
            expected += len(needed)
            missing += [f"{s}{k}{m}" for k in needed if (s, k, m) not in seen]
    if missing:
        raise ExportError(f"the schedule misses {len(missing)} of its {expected} actions: "
                          f"{', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}")
