"""profile(): measures a PyTorch chain layer by layer into a madpipe.profile/1 document.

The chain is an ``nn.Sequential`` (or a list of modules) whose children each take one tensor and
return one; layer i of the profile is child i. For each layer, on one micro-batch (``sample``):

* ``forward_ms``, ``backward_ms``: the median over ``repeats`` timed runs, after ``warmup`` runs,
  of the layer's forward and of its backward (the gradients of its parameters and of its input;
  the first layer's input gets none, as in a pipeline). On CUDA the device times them (CUDA
  events), on the CPU ``time.perf_counter`` does.
* ``weight_bytes``: the layer's parameters and buffers.
* ``output_bytes``: the layer's output, a_l. A layer may return a view or a non-contiguous
  tensor: it is measured as a stage that ends with it sends it, contiguous (a copy where it is
  not, timed in the layer's forward) and not a view.
* ``saved_bytes``: what autograd keeps from the forward until the backward besides the layer's
  input, parameters and buffers (and the loss's target): the distinct storages saved during the
  forward (``torch.autograd.graph.saved_tensors_hooks``). The output counts where the backward
  keeps it (a ReLU or Tanh saves its result): a stage then holds it until its backward, after
  it has been sent.
* ``forward_workspace_bytes``, ``backward_workspace_bytes``: on CUDA, the allocator's peak during
  the forward (backward) above what it leaves allocated (above the input's gradient), plus the
  workspace cuBLAS keeps from its first product on; 0 on the CPU, which has no such counter.
* ``backward_input_ms``, ``backward_weight_ms``, ``backward_weight_kept_bytes``: for a layer with
  parameters whose input needs a gradient, its backward split as ``run_plan`` runs the I and W
  actions of a plan that splits it (torch.distributed.pipelining's ``stage_backward_input`` and
  ``stage_backward_weight``): the medians of both, scaled to add up to ``backward_ms``, and what
  torch keeps from I until W (the graph's saved tensors, the layer's input and output included,
  and the gradients I captured for W). Absent where torch.distributed is not available.

The last layer computes the loss, as everywhere in madpipe: with ``loss_fn`` and ``target``, the
last layer's forward is ``loss_fn(layer(x), target)``, its backward starts from the loss, and its
``output_bytes`` is the loss's size. This is what ``madpipe.torch.run_plan`` runs on the last
stage (torch's schedule applies ``loss_fn`` to the last stage's output). Without ``loss_fn`` the
last layer is measured like the others, its backward from a gradient of ones: right when the last
child computes the loss itself.
"""

import json
import os
import tempfile

import torch

from ._stage_output import layer_output
from ._measurement import (CudaMemoryMeter, SavedTensorCounter, Stopwatch, library_workspace_bytes,
                           median, tensor_bytes)

PROFILE_FORMAT = "madpipe.profile/1"

_DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
                torch.bfloat16: "bfloat16"}


def chain_layers(chain):
    """[(name, module)] of an nn.Sequential or a list of modules, in chain order."""
    if isinstance(chain, torch.nn.Sequential):
        named = list(chain.named_children())
    else:
        named = [(str(index), module) for index, module in enumerate(chain)]
    layers = []
    for index, (name, module) in enumerate(named):
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"layer {index} of the chain is a {type(module).__name__}, not an "
                            f"nn.Module")
        layers.append((f"{type(module).__name__.lower()}{index}" if name.isdigit() else name,
                       module))
    if not layers:
        raise ValueError("the chain has no layers")
    return layers


def _dtype_name(dtype):
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def _floating_dtype(modules, default):
    for module in modules:
        for parameter in module.parameters():
            if parameter.is_floating_point():
                return parameter.dtype
    return default


def _check_single_tensor(value, index, name, what="returned"):
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"layer {index} ({name}) {what} a {type(value).__name__}: madpipe.torch "
                        f"needs every layer to take one tensor and return one")


class _LayerProbe:
    """One layer under measurement: its forward (and loss, on the last layer) on a fresh leaf of
    its input, and the backward of the result."""

    def __init__(self, module, index, name, x, loss_fn=None, target=None):
        self.module, self.index, self.name, self.x = module, index, name, x
        self.loss_fn, self.target = loss_fn, target

    def leaf(self):
        """The input as the stage would receive it: needing a gradient unless it is the chain's
        input or not floating-point."""
        if self.index == 0 or not self.x.is_floating_point():
            return self.x
        return self.x.detach().requires_grad_(True)

    def forward(self, leaf):
        y = layer_output(self.module(leaf), self.index, self.name)  # as a stage would send it
        return self.loss_fn(y, self.target) if self.loss_fn is not None else y

    @staticmethod
    def output_gradient(y):
        """The gradient the backward starts from (None when nothing needs one)."""
        return torch.ones_like(y) if y.requires_grad else None

    @staticmethod
    def backward(y, gradient):
        if gradient is not None:
            y.backward(gradient)

    def clear_gradients(self):
        for parameter in self.module.parameters():
            parameter.grad = None


def _time_layer(probe, stopwatch, warmup, repeats):
    """Median forward and backward milliseconds over ``repeats`` runs after ``warmup`` runs."""
    forward_ms, backward_ms = [], []
    for run in range(warmup + repeats):
        leaf = probe.leaf()
        forward, backward = [], []
        stopwatch.synchronize()
        with stopwatch.measure(forward):
            y = probe.forward(leaf)
        gradient = probe.output_gradient(y)
        with stopwatch.measure(backward):
            probe.backward(y, gradient)
        probe.clear_gradients()
        if run >= warmup:
            forward_ms += forward
            backward_ms += backward
    return median(forward_ms), median(backward_ms)


def _saved_bytes(probe):
    """What autograd saves during the forward besides input, target and weights."""
    leaf = probe.leaf()
    with SavedTensorCounter() as counter:
        probe.forward(leaf)
    kept = [leaf, probe.target, *probe.module.parameters(), *probe.module.buffers()]
    return counter.saved_bytes(kept)


def _workspaces(probe, meter):
    """Peaks above what is kept during one forward and one backward, weight gradients present
    (as from a step's second micro-batch on: the backward adds into them)."""
    y = probe.forward(probe.leaf())
    probe.backward(y, probe.output_gradient(y))
    leaf = probe.leaf()
    meter.reset_peak()
    y = probe.forward(leaf)
    forward = max(0, meter.peak() - meter.current())
    gradient = probe.output_gradient(y)
    before_backward = meter.current()
    meter.reset_peak()
    probe.backward(y, gradient)
    input_gradient = tensor_bytes(leaf.grad) if leaf.requires_grad else 0
    backward = max(0, meter.peak() - before_backward - input_gradient)
    probe.clear_gradients()
    return forward, backward


def _pipelining_backward():
    """torch.distributed.pipelining's (stage_backward_input, stage_backward_weight), or None."""
    try:
        from torch.distributed.pipelining import _backward
        return _backward.stage_backward_input, _backward.stage_backward_weight
    except (ImportError, AttributeError):
        return None


def _split_backward(probe, stopwatch, warmup, repeats, backward_ms):
    """The profile's split fields for the layer (empty when it has none: see the module's
    documentation)."""
    weights = [parameter for parameter in probe.module.parameters() if parameter.requires_grad]
    functions = _pipelining_backward()
    if not weights or not probe.leaf().requires_grad or functions is None:
        return {}
    backward_input, backward_weight = functions
    input_ms, weight_ms, kept = [], [], 0
    for run in range(warmup + repeats):
        leaf = probe.leaf()
        with SavedTensorCounter() as counter:
            y = probe.forward(leaf)
        gradient = probe.output_gradient(y)
        timed_input, timed_weight = [], []
        stopwatch.synchronize()
        with stopwatch.measure(timed_input):
            _, groups = backward_input([y], None if gradient is None else [gradient], [leaf],
                                       iter(weights))
        captured = [grad for group in groups for grads in group.get("grads") or ()
                    for grad in grads or () if grad is not None]
        kept = counter.saved_bytes([probe.target, *probe.module.parameters(),
                                    *probe.module.buffers()])
        kept += sum(tensor_bytes(grad) for grad in {id(g): g for g in captured}.values())
        with stopwatch.measure(timed_weight):
            backward_weight(iter(weights), groups)
        probe.clear_gradients()
        if run >= warmup:
            input_ms += timed_input
            weight_ms += timed_weight
    i, w = median(input_ms), median(weight_ms)
    weight = backward_ms * w / (i + w) if i + w > 0 else 0.0
    return {"backward_input_ms": backward_ms - weight, "backward_weight_ms": weight,
            "backward_weight_kept_bytes": kept}


def _measure_layer(probe, stopwatch, meter, warmup, repeats):
    """The layer's entry of the profile (workspaces without the libraries'), and its output."""
    buffers = [(buffer, buffer.detach().clone()) for buffer in probe.module.buffers()]
    forward_ms, backward_ms = _time_layer(probe, stopwatch, warmup, repeats)
    saved = _saved_bytes(probe)
    forward_workspace, backward_workspace = _workspaces(probe, meter) if meter else (0, 0)
    split = _split_backward(probe, stopwatch, warmup, repeats, backward_ms)
    with torch.no_grad():
        y = layer_output(probe.module(probe.x), probe.index, probe.name)
        output = probe.loss_fn(y, probe.target) if probe.loss_fn is not None else y
        for buffer, value in buffers:  # running statistics as before the measurement
            buffer.copy_(value)
    weights = (*probe.module.parameters(), *probe.module.buffers())
    layer = {"name": probe.name, "forward_ms": forward_ms, "backward_ms": backward_ms,
             "weight_bytes": sum(tensor_bytes(t) for t in weights),
             "output_bytes": tensor_bytes(output), "saved_bytes": saved,
             "forward_workspace_bytes": forward_workspace,
             "backward_workspace_bytes": backward_workspace}
    layer.update(split)
    return layer, y


def _move(modules, sample, target, device, dtype):
    """Moves the layers, the sample and the target to the device (and dtype); returns the last
    two."""
    for module in modules:
        if dtype is None:
            module.to(device)
        else:
            module.to(device=device, dtype=dtype)
    sample = sample.to(device)
    if dtype is not None and sample.is_floating_point():
        sample = sample.to(dtype)
    return sample, None if target is None else target.to(device)


def profile(chain, sample, device="cpu", *, name=None, warmup=2, repeats=10, dtype=None,
            loss_fn=None, target=None):
    """Measures every layer of ``chain`` on the micro-batch ``sample``; returns a profile dict.

    Args:
        chain: an nn.Sequential or a list of modules, each taking one tensor and returning one.
            It is moved to ``device`` (and cast to ``dtype``) in place, as ``Module.to`` does;
            its buffers (batch-norm statistics) are left as they were and its gradients unset.
        sample: one micro-batch of input; its first dimension is the profile's ``batch``.
        device: where to measure (``"cpu"``, ``"cuda"``, ``"cuda:1"``...).
        name: the profile's name (default: the chain's class name, in lower case).
        warmup, repeats: untimed and timed runs per layer; times are medians of the timed runs.
            The defaults (2 and 10) are those of ``madpipe profile`` (``--warmup``, ``--repeats``).
        dtype: floating-point dtype to cast the chain and a floating-point sample to.
        loss_fn, target: the loss the last layer computes, ``loss_fn(output, target)``
            (see the module's documentation).

    Returns:
        a dict in ``madpipe.profile/1`` form (docs/formats.md): ``write_profile`` saves it, and
        ``madpipe.plan`` takes it as it is.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"profile needs repeats >= 1 and warmup >= 0, got repeats={repeats}, "
                         f"warmup={warmup}")
    if (loss_fn is None) != (target is None):
        raise ValueError("give both loss_fn and target (the loss the last layer computes), or "
                         "neither")
    _check_single_tensor(sample, 0, "sample", "is")
    layers = chain_layers(chain)
    device = torch.device(device)
    modules = [module for _, module in layers]
    x, target = _move(modules, sample, target, device, dtype)
    measured_dtype = _floating_dtype(modules, dtype or torch.get_default_dtype())
    stopwatch = Stopwatch(device)
    meter = CudaMemoryMeter(device) if device.type == "cuda" else None
    library_bytes = library_workspace_bytes(device, measured_dtype)
    result = {
        "format": PROFILE_FORMAT,
        "name": name or type(chain).__name__.lower(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else device.type,
        "dtype": _dtype_name(measured_dtype),
        "batch": int(x.shape[0]) if x.dim() > 0 else 1,
        "input_bytes": tensor_bytes(x),
        "layers": [],
    }
    for index, (layer_name, module) in enumerate(layers):
        last = index == len(layers) - 1
        probe = _LayerProbe(module, index, layer_name, x,
                            *((loss_fn, target) if last else (None, None)))
        layer, x = _measure_layer(probe, stopwatch, meter, warmup, repeats)
        layer["forward_workspace_bytes"] += library_bytes
        layer["backward_workspace_bytes"] += library_bytes
        result["layers"].append(layer)
    return result


def write_profile(profile_document, path):
    """Writes a profile dict to ``path`` as JSON, one layer per line, atomically."""
    path = os.fspath(path)
    members = [f"{json.dumps(key)}: {json.dumps(value)}"
               for key, value in profile_document.items() if key != "layers"]
    layers = ",\n    ".join(json.dumps(layer) for layer in profile_document["layers"])
    members.append(f'"layers": [\n    {layers}\n  ]')
    text = "{\n  " + ",\n  ".join(members) + "\n}\n"
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".profile-", suffix=".json")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    return path
