"""run_plan(): trains a chain with a madpipe plan on torch.distributed.pipelining.

Every rank calls ``run_plan`` with the whole chain and the same export. It builds a
``PipelineStage`` for each stage of its rank (slices of the chain: a rank may hold several stages,
neighbours or not), a ``_PipelineScheduleRuntime`` for them, and loads the export's compute-only
schedule into it, so that each rank runs its forwards and backwards in the plan's order; torch
adds the sends and receives.

Importing this module checks that the installed torch has the private pipelining API it uses
(``madpipe.torch.TESTED_TORCH_VERSIONS`` lists the releases the tests ran on).
"""

import os
import tempfile

import torch
import torch.distributed as dist

from ._pipelining_api import load_pipelining_api
from .checking import check_export, pipeline_rows
from .export import ExportError, read_export
from .profiling import chain_layers

_api = load_pipelining_api()


class PipelineRunner:
    """This rank's part of a pipelined chain: its stages and the schedule that runs them.

    Attributes:
        stages: this rank's ``PipelineStage`` objects, in chain order (empty on an idle rank).
        stage_indices: their indices in the export.
        modules: their submodules (``nn.Sequential`` slices sharing the chain's layers).
        schedule: torch's ``_PipelineScheduleRuntime`` (None on an idle rank).
        holds_first, holds_last: whether this rank holds the first (last) stage.
        micro_batches: micro-batches per step.
        notes: where torch runs the plan differently from madpipe (the export's notes).
    """

    def __init__(self, stages, schedule, micro_batches, num_stages, notes):
        self.stages = stages
        self.schedule = schedule
        self.micro_batches = micro_batches
        self.notes = notes
        self.stage_indices = [stage.stage_index for stage in stages]
        self.modules = [stage.submod for stage in stages]
        self.holds_first = 0 in self.stage_indices
        self.holds_last = num_stages - 1 in self.stage_indices

    def parameters(self):
        """The parameters of this rank's stages, for its optimizer."""
        for module in self.modules:
            yield from module.parameters()

    def step(self, inputs=None, target=None):
        """Runs the forwards and backwards of one step: ``micro_batches`` micro-batches.

        ``inputs`` (the whole batch, split along dimension 0) is needed on the rank holding the
        first stage, ``target`` on the rank holding the last one; other ranks may pass them too
        (they are ignored) or nothing. Gradients accumulate into the parameters' ``.grad`` and are
        divided by ``micro_batches`` at the end of the step (torch's ``scale_grads``), as if the
        batch ran at once with a loss that averages over the micro-batches: call the optimizer's
        ``zero_grad()`` before and its ``step()`` after, on every rank.

        Returns the loss of every micro-batch (in micro-batch order) on the rank holding the last
        stage, None elsewhere.
        """
        if self.schedule is None:
            return None
        args = ()
        if self.holds_first:
            args = (self._checked(inputs, "inputs", "first"),)
        if self.holds_last:
            target = self._checked(target, "target", "last")
        else:
            target = None
        losses = []
        self.schedule.step(*args, target=target, losses=losses, return_outputs=False)
        return [loss.detach() for loss in losses] if self.holds_last else None

    def _checked(self, batch, what, which):
        if batch is None:
            raise ValueError(f"this rank holds the {which} stage: step() needs {what}")
        if not isinstance(batch, torch.Tensor) or batch.dim() == 0:
            raise TypeError(f"{what} must be a tensor whose first dimension is the batch")
        if batch.shape[0] % self.micro_batches:
            raise ValueError(f"{what} has a batch of {batch.shape[0]}, which does not split into "
                             f"{self.micro_batches} equal micro-batches")
        return batch


def _pipeline_group(group, active_ranks, ranks):
    """The process group of the ranks that hold stages: ``group`` unless some of its ranks are
    idle, else a new group of the others, which all of them (and only they) create."""
    if len(active_ranks) == ranks:
        return group
    global_ranks = [dist.get_global_rank(group, rank) for rank in active_ranks]
    return dist.new_group(ranks=global_ranks, use_local_synchronization=True)


def _build_stages(layers, export, rank, device, pipeline_group):
    """A PipelineStage for each stage of ``rank``: an nn.Sequential of its layers on device."""
    stages = []
    for spec in export.stages_on(rank):
        submodule = torch.nn.Sequential(*layers[spec.first_layer:spec.last_layer + 1]).to(device)
        stage = _api.PipelineStage(submodule, spec.stage, export.num_stages, device,
                                   group=pipeline_group)
        _skip_greetings_to_itself(stage)
        stages.append(stage)
    return stages


def _skip_greetings_to_itself(stage):
    """torch 2.11 opens each neighbour's link with a message, even to a neighbouring stage on the
    same rank, which gloo cannot deliver; those messages are dropped (later releases have no
    greetings)."""
    greetings = getattr(stage, "_get_init_p2p_neighbors_ops", None)
    if greetings is None:
        return
    own_rank = stage.group_rank
    stage._get_init_p2p_neighbors_ops = lambda: [
        op for op in greetings() if getattr(op, "group_peer", None) != own_rank]


def _load_schedule(schedule, rows):
    """Loads rows through the runtime's CSV reader (which validates and lowers them)."""
    handle, path = tempfile.mkstemp(prefix="madpipe-schedule-", suffix=".csv")
    try:
        with os.fdopen(handle, "w", newline="") as file:
            file.write("".join(",".join(row) + "\n" for row in rows))
        schedule._load_csv(path)
    finally:
        os.remove(path)


def run_plan(chain, export, *, loss_fn, group=None, device=None, scale_grads=True):
    """Builds this rank's stages of ``chain`` and the schedule of ``export``; returns a runner.

    Args:
        chain: the whole chain (an nn.Sequential or a list of modules, layer i = child i), the
            same on every rank; only this rank's layers are moved to ``device`` and used.
        export: the plan's export: a directory written by ``madpipe export --format torch``, the
            result of ``madpipe.export_torch(plan, micro_batches)``, or a dict in
            ``stages.json`` form with an ``actions`` member (the rows of ``schedule.csv``).
        loss_fn: ``loss_fn(output, target)``, applied to the last stage's output of each
            micro-batch (the loss the profile's last layer includes).
        group: the process group of the pipeline, one rank per GPU of the plan (default: the
            world group of an initialized torch.distributed).
        device: where this rank's stages run (default: the CPU with gloo, else the current CUDA
            device).
        scale_grads: divide the accumulated gradients by the number of micro-batches at the end
            of each step (torch's default).

    Every rank of ``group`` calls it. A rank that the plan leaves idle gets a runner whose
    ``step`` does nothing; the others then run in a new group of the ranks that hold stages.
    """
    if loss_fn is None:
        raise ValueError("run_plan trains the chain: give loss_fn(output, target)")
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("run_plan needs an initialized torch.distributed process group: call "
                           "torch.distributed.init_process_group first")
    group = dist.group.WORLD if group is None else group
    export = read_export(export)
    layers = [module for _, module in chain_layers(chain)]
    if export.layers != len(layers):
        raise ExportError(f"the export's stages cover layers 0..{export.layers - 1}, but the chain "
                          f"has {len(layers)} layers")
    if export.ranks != dist.get_world_size(group):
        raise ExportError(f"the export is for {export.ranks} ranks, but the process group has "
                          f"{dist.get_world_size(group)}")
    check_export(export)
    rank = dist.get_rank(group)
    if rank not in export.active_ranks:
        return PipelineRunner([], None, export.micro_batches, export.num_stages, export.notes)
    pipeline_group = _pipeline_group(group, export.active_ranks, export.ranks)
    device = torch.device(device) if device is not None else _default_device(group)
    stages = _build_stages(layers, export, rank, device, pipeline_group)
    schedule = _api._PipelineScheduleRuntime(stages, export.micro_batches, loss_fn=loss_fn,
                                             scale_grads=scale_grads)
    rows, stage_to_group_rank = pipeline_rows(export)
    _load_schedule(schedule, rows)
    placed = [schedule.stage_index_to_group_rank[s] for s in range(export.num_stages)]
    if placed != stage_to_group_rank:
        raise RuntimeError(f"torch placed the stages on pipeline ranks {placed}, the export on "
                           f"{stage_to_group_rank}")
    return PipelineRunner(stages, schedule, export.micro_batches, export.num_stages, export.notes)


def _default_device(group):
    """The CPU for gloo, else the current CUDA device."""
    if dist.get_backend(group) == "gloo" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())
