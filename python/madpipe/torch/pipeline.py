"""run_plan(): trains a chain with a madpipe plan on torch.distributed.pipelining.

Every rank calls ``run_plan`` with the whole chain and the same export. It builds a
``PipelineStage`` for each stage of its rank (slices of the chain: a rank may hold several stages,
neighbours or not), a ``_PipelineScheduleRuntime`` for them, and loads the export's compute-only
schedule into it, so that each rank runs its forwards and backwards in the plan's order; torch
adds the sends and receives.

Importing this module checks that the installed torch has the private pipelining API it uses
(``madpipe.torch.TESTED_TORCH_VERSIONS`` lists the releases the tests ran on).
"""

import collections
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

from .._checking import simulate
from .._documents import as_plan, as_profile
from .._madpipe import format_bytes
from ._pipelining_api import load_pipelining_api
from ._stage_output import StageOutput
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
        layer_keys: this rank's layers as (index in the chain, the chain's name of the layer: the
            prefix of its keys in the chain's ``state_dict``, the layer's module).
        step_seconds: the wall time of every step run so far.
    """

    def __init__(self, stages, schedule, export, *, layer_keys=(), group=None, device=None,
                 micro_batch_size=None, plan=None):
        self.stages = stages
        self.schedule = schedule
        self.micro_batches = export.micro_batches
        self.notes = export.notes
        self.stage_indices = [stage.stage_index for stage in stages]
        self.modules = [stage.submod for stage in stages]
        self.holds_first = 0 in self.stage_indices
        self.holds_last = export.num_stages - 1 in self.stage_indices
        self.layer_keys = list(layer_keys)
        self.group = group
        self.device = device
        self.micro_batch_size = micro_batch_size
        self.plan = plan
        self.step_seconds = []

    def state_dict(self):
        """This rank's layers' parameters and buffers under the chain's own keys (on the CPU);
        ``gather_state_dict`` puts every rank's together."""
        state = {}
        for _, _, layer_state in _per_layer_state(self):
            state.update(layer_state)
        return state

    def report(self):
        """The measured step time and per-rank peak memory against the plan's predictions, as
        ``madpipe train`` prints them. Collective over the runner's group; every rank gets the
        text::

            measured step 41.2 ms (median of 9 steps after the first), predicted 38.0 ms (ratio 1.08)
            rank 0: peak 1.21 GiB, predicted 1.10 GiB (ratio 1.10)

        The step is the slowest rank's; the prediction replays the plan's step as the ranks run it
        (each operation once its inputs are there), and its memory peaks (``run_plan``'s
        ``plan``). Peak memory is measured on CUDA devices (the allocator's peak since the
        process started or ``torch.cuda.reset_peak_memory_stats``), not on the CPU.
        """
        group = self.group if self.group is not None else dist.group.WORLD
        timed = self.step_seconds[1:] or self.step_seconds  # the first step warms up
        own_step = statistics.median(timed) * 1e3 if timed else None
        own_peak = (torch.cuda.max_memory_allocated(self.device)
                    if self.device is not None and self.device.type == "cuda" else None)
        everyone = [None] * dist.get_world_size(group)
        dist.all_gather_object(everyone, (own_step, own_peak, len(timed)), group=group)
        steps = [step for step, _, _ in everyone if step is not None]
        predicted = (simulate(self.plan, micro_batches=self.micro_batches, policy="asap")
                     if self.plan is not None else None)
        if steps:
            counted = max(n for *_, n in everyone)
            text = (f"measured step {max(steps):.1f} ms (median of {counted} "
                    f"step{'s' if counted != 1 else ''}"
                    f"{' after the first' if len(self.step_seconds) > 1 else ''})")
        else:
            text = "measured step: no step run yet"
        if predicted is not None:
            text += f", predicted {predicted.step_ms:.1f} ms"
            if steps and predicted.step_ms > 0:
                text += f" (ratio {max(steps) / predicted.step_ms:.2f})"
        for rank, (_, peak, _) in enumerate(everyone):
            text += f"\nrank {rank}: peak " + (format_bytes(peak) if peak is not None
                                                else "not measured on the CPU")
            if predicted is not None and rank < len(predicted.peak_memory_bytes):
                bound = predicted.peak_memory_bytes[rank]
                text += f", predicted {format_bytes(bound)}"
                if peak is not None and bound > 0:
                    text += f" (ratio {peak / bound:.2f})"
        return text

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

        The micro-batches must have the size of the profile's (``run_plan``'s ``profile``):
        a ValueError says so. Pass the batch on every rank so that every rank checks it and all
        refuse alike (a rank without it would wait for its neighbours).

        Returns the loss of every micro-batch (in micro-batch order) on the rank holding the last
        stage, None elsewhere.
        """
        if self.schedule is None:
            return None
        for what, batch in (("inputs", inputs), ("target", target)):
            if batch is not None:  # every rank given the batch checks it: all refuse alike
                self._check_size(batch, what)
        args = ()
        if self.holds_first:
            args = (self._checked(inputs, "inputs", "first"),)
        if self.holds_last:
            target = self._checked(target, "target", "last")
        else:
            target = None
        losses = []
        started = time.perf_counter()
        self.schedule.step(*args, target=target, losses=losses, return_outputs=False)
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.step_seconds.append(time.perf_counter() - started)
        return [loss.detach() for loss in losses] if self.holds_last else None

    def _checked(self, batch, what, which):
        if batch is None:
            raise ValueError(f"this rank holds the {which} stage: step() needs {what}")
        return batch

    def _check_size(self, batch, what):
        if not isinstance(batch, torch.Tensor) or batch.dim() == 0:
            raise TypeError(f"{what} must be a tensor whose first dimension is the batch")
        if batch.shape[0] % self.micro_batches:
            raise ValueError(f"{what} has a batch of {batch.shape[0]}, which does not split into "
                             f"{self.micro_batches} equal micro-batches")
        size = batch.shape[0] // self.micro_batches
        if self.micro_batch_size is not None and size != self.micro_batch_size:
            raise ValueError(f"{what} has a batch of {batch.shape[0]}: micro-batches of {size} "
                             f"samples, but the profile was measured with micro-batches of "
                             f"{self.micro_batch_size} (its 'batch'), so the plan is for that size: "
                             f"step with batches of {self.micro_batch_size * self.micro_batches}, "
                             f"or profile and plan again at {size}")
        return batch


def _pipeline_group(group, active_ranks, ranks):
    """The process group of the ranks that hold stages: ``group`` unless some of its ranks are
    idle, else a new group of the others, which all of them (and only they) create."""
    if len(active_ranks) == ranks:
        return group
    global_ranks = [dist.get_global_rank(group, rank) for rank in active_ranks]
    return dist.new_group(ranks=global_ranks, use_local_synchronization=True)


def _first_floating_dtype(modules):
    for module in modules:
        for tensor in (*module.parameters(), *module.buffers()):
            if tensor.is_floating_point():
                return tensor.dtype
    return None


def _build_stages(named_layers, export, rank, device, pipeline_group):
    """A PipelineStage for each stage of ``rank``: an nn.Sequential of its layers on device,
    ending with the StageOutput that makes what it sends contiguous and checks its dtype."""
    layers = [module for _, module in named_layers]
    stages = []
    for spec in export.stages_on(rank):
        last = spec.last_layer
        following = layers[last + 1:export.stages[spec.stage + 1].last_layer + 1] \
            if spec.stage + 1 < export.num_stages else []
        ending = StageOutput(spec.stage, last, named_layers[last][0], _first_floating_dtype(following))
        submodule = torch.nn.Sequential(*layers[spec.first_layer:last + 1], ending).to(device)
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


def _plan_of(export, plan):
    """``plan`` as a madpipe.Plan, refused when the export holds other stages than it."""
    plan = as_plan(plan)
    planned = [(s["first_layer"], s["last_layer"], s["gpu"]) for s in plan.stages]
    exported = [(s.first_layer, s.last_layer, s.rank) for s in export.stages]
    if planned != exported:
        raise ExportError(f"plan: its stages (first layer, last layer, GPU) are {planned}, the "
                          f"export's {exported}: give the plan the export was made from")
    return plan


def _profiled_micro_batch_size(profile):
    """The profile's micro-batch size (its ``batch``), None when not given or not recorded."""
    if profile is None:
        return None
    batch = as_profile(profile).to_dict().get("batch")
    return int(batch) if batch else None


def run_plan(chain, export, *, loss_fn, group=None, device=None, scale_grads=True, profile=None,
             plan=None):
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
        profile: the profile the plan was made from (a ``madpipe.Profile``, dict or path):
            ``step`` then refuses micro-batches of another size than the profile's ``batch``,
            whose costs the plan divides.
        plan: the plan itself (a ``madpipe.Plan``, dict or path): ``report()`` then sets the
            measured step time and memory against its predictions.

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
    named_layers = state_dict_names(chain)
    layers = [module for _, module in named_layers]
    if export.layers != len(layers):
        raise ExportError(f"the export's stages cover layers 0..{export.layers - 1}, but the chain "
                          f"has {len(layers)} layers")
    if export.ranks != dist.get_world_size(group):
        raise ExportError(f"the export is for {export.ranks} ranks, but the process group has "
                          f"{dist.get_world_size(group)}")
    check_export(export)
    micro_batch_size = _profiled_micro_batch_size(profile)
    plan = None if plan is None else _plan_of(export, plan)
    rank = dist.get_rank(group)
    if rank not in export.active_ranks:
        return PipelineRunner([], None, export, group=group, micro_batch_size=micro_batch_size,
                              plan=plan)
    pipeline_group = _pipeline_group(group, export.active_ranks, export.ranks)
    device = torch.device(device) if device is not None else _default_device(group)
    stages = _build_stages(named_layers, export, rank, device, pipeline_group)
    schedule = _api._PipelineScheduleRuntime(stages, export.micro_batches, loss_fn=loss_fn,
                                             scale_grads=scale_grads)
    rows, stage_to_group_rank = pipeline_rows(export)
    _load_schedule(schedule, rows)
    placed = [schedule.stage_index_to_group_rank[s] for s in range(export.num_stages)]
    if placed != stage_to_group_rank:
        raise RuntimeError(f"torch placed the stages on pipeline ranks {placed}, the export on "
                           f"{stage_to_group_rank}")
    layer_keys = [(index, named_layers[index][0], layers[index])
                  for spec in export.stages_on(rank)
                  for index in range(spec.first_layer, spec.last_layer + 1)]
    return PipelineRunner(stages, schedule, export, layer_keys=layer_keys, group=group,
                          device=device, micro_batch_size=micro_batch_size, plan=plan)


def state_dict_names(chain):
    """[(name, module)] of the chain's layers, named as the chain's ``state_dict`` keys begin:
    an nn.Sequential's child names, a list's indices (as ``nn.Sequential(*list)`` names them)."""
    chain_layers(chain)  # checks the chain
    if isinstance(chain, torch.nn.Sequential):
        return list(chain.named_children())
    return [(str(index), module) for index, module in enumerate(chain)]


def gather_state_dict(runner, *, dst=0):
    """The whole chain's ``state_dict`` on rank ``dst`` of the runner's group (None elsewhere).

    Collective: every rank of the group that ``run_plan`` ran in calls it, idle ones included.
    The keys and their order are those of the chain's own ``state_dict()`` (``chain`` as an
    nn.Sequential; a list of layers as ``nn.Sequential(*layers)``), the tensors on the CPU, so
    that ``chain.load_state_dict(state)`` or ``torch.save(state, path)`` takes it as it is.
    """
    group = runner.group if runner.group is not None else dist.group.WORLD
    parts = [None] * dist.get_world_size(group) if dist.get_rank(group) == dst else None
    dist.gather_object(list(_per_layer_state(runner)), parts, dst=dist.get_global_rank(group, dst), group=group)
    if parts is None:
        return None
    state = {}
    for index, _, layer_state in sorted((entry for part in parts for entry in part),
                                        key=lambda entry: entry[0]):
        state.update(layer_state)
    return collections.OrderedDict(state)


def _per_layer_state(runner):
    for index, name, module in runner.layer_keys:
        yield index, name, {f"{name}.{key}": value.detach().to("cpu", copy=True)
                            for key, value in module.state_dict().items()}


def _default_device(group):
    """The CPU for gloo, else the current CUDA device."""
    if dist.get_backend(group) == "gloo" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())
