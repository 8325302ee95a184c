"""Checks an export the way torch.distributed.pipelining checks and lowers a schedule.

torch's schedule runtime needs every rank of its process group to hold a stage, so the ranks a
plan leaves idle are dropped and the others renumbered in order (their ranks in the pipeline's
process group); ``pipeline_rows`` gives these rows. ``check_export`` then runs, without any
process group, what ``_PipelineScheduleRuntime._load_csv`` runs at start-up and a dry run of the
result:

* ``_validate_schedule``: every stage runs a forward and a backward of every micro-batch, a
  backward after its forward, each stage on one rank; it infers the rank of every stage, which
  must be the export's;
* ``_add_send_recv`` and ``_add_wait_send`` (where the release has it): the sends and receives of
  the lowered schedule;
* ``_simulate_comms_compute``: the lowered schedule runs to the end without a deadlock.

It also checks what the runtime assumes without checking: the last stage runs its forwards in
micro-batch order (the runtime pairs each backward with the loss of the forward of the same rank
in the order they ran).
"""

import contextlib
import io

from ._pipelining_api import pipelining_api
from .export import ExportError, parse_action, read_export


def pipeline_rows(export):
    """(rows, stage_to_group_rank): the actions of the ranks that run some, in rank order, and
    the rank of every stage among them."""
    active = export.active_ranks
    group_rank = {rank: index for index, rank in enumerate(active)}
    stage_to_group_rank = []
    for stage in export.stages:
        if stage.rank not in group_rank:
            raise ExportError(f"stage {stage.stage} is on rank {stage.rank}, which runs no action")
        stage_to_group_rank.append(group_rank[stage.rank])
    return [list(export.actions[rank]) for rank in active], stage_to_group_rank


def torch_actions(rows):
    """{rank: [torch _Action]} of CSV rows."""
    api = pipelining_api()
    return {rank: [api._Action.from_str(action) for action in row] for rank, row in enumerate(rows)}


def check_export(source):
    """Raises ExportError when torch.distributed.pipelining would refuse or deadlock on the export.

    ``source`` is anything ``read_export`` takes. Returns the lowered schedule (per pipeline
    rank, torch's actions with sends, receives and waits) for inspection.
    """
    export = read_export(source)
    api = pipelining_api()
    rows, stage_to_group_rank = pipeline_rows(export)
    _check_last_stage_order(export)
    try:
        inferred = api._validate_schedule(torch_actions(rows), len(rows), export.num_stages,
                                          export.micro_batches)
    except (AssertionError, ValueError, RuntimeError) as error:
        raise ExportError(f"torch.distributed.pipelining refuses the schedule: {error}") from error
    inferred = [inferred.get(stage) for stage in range(export.num_stages)]
    if inferred != stage_to_group_rank:
        raise ExportError(f"torch places the stages on pipeline ranks {inferred}, the export on "
                          f"{stage_to_group_rank}")
    stage_rank = stage_to_group_rank.__getitem__
    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output):
            lowered = api._add_send_recv(torch_actions(rows), stage_rank, export.num_stages)
            lowered = api._add_wait_send(lowered)
            api._simulate_comms_compute({rank: list(actions) for rank, actions in lowered.items()},
                                        stage_rank, export.num_stages)
    except (AssertionError, ValueError, RuntimeError) as error:
        details = output.getvalue().strip()
        raise ExportError(f"torch.distributed.pipelining cannot run the schedule: {error}"
                          + (f"\n{details}" if details else "")) from error
    return lowered


def _check_last_stage_order(export):
    last = export.num_stages - 1
    order = [micro_batch for action in export.actions[export.stages[last].rank]
             for stage, kind, micro_batch in [parse_action(action)] if stage == last and kind == "F"]
    if order != sorted(order):
        raise ExportError(f"the last stage runs its forwards in the order {order}: torch's schedule "
                          f"runtime pairs losses with backwards by that order, so it needs "
                          f"micro-batch order")
