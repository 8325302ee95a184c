"""The two profilers agree: `madpipe profile --model script` (C++, src/runtime/profile/profiler.cpp) and
madpipe.torch.profile (python/madpipe/torch/profiling.py) measure one small TorchScript chain on
the same micro-batch and write the same madpipe.profile/1 document, times aside: the same
top-level fields, layers, names and sizes. Times are only checked to be positive and finite (the
two run on different engines and clocks)."""

import collections
import inspect
import json
import math
import re
import subprocess
import warnings

import pytest
import torch

import madpipe.torch as mt
from conftest import find_madpipe

BATCH, INPUTS, WIDTH, OUTPUTS = 8, 8, 16, 4
WARMUP, REPEATS = 1, 3  # both profilers take them; few runs keep the test fast
TOP_LEVEL = {"format", "name", "device", "dtype", "batch", "input_bytes", "layers"}
LAYER_FIELDS = {"name", "forward_ms", "backward_ms", "weight_bytes", "output_bytes", "saved_bytes",
                "forward_workspace_bytes", "backward_workspace_bytes"}
SPLIT_FIELDS = {"backward_input_ms", "backward_weight_ms", "backward_weight_kept_bytes"}
# Fields whose value depends on neither profiler's clock nor its way of metering memory.
EXACT_FIELDS = ("name", "weight_bytes", "output_bytes")


def chain():
    """Named children (both profilers then use the names): parameters, none, a layer that saves
    tensors of its own (LayerNorm's mean and inverse deviation), and a last layer under the loss."""
    torch.manual_seed(0)
    return torch.nn.Sequential(collections.OrderedDict([
        ("fc1", torch.nn.Linear(INPUTS, WIDTH)),
        ("act", torch.nn.Tanh()),
        ("norm", torch.nn.LayerNorm(WIDTH)),
        ("fc2", torch.nn.Linear(WIDTH, OUTPUTS)),
    ]))


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    """(C++ profile, Python profile, the chain) of the same chain on the same micro-batch."""
    directory = tmp_path_factory.mktemp("profilers")
    module = chain()
    with warnings.catch_warnings():  # torch deprecates TorchScript; the C++ profiler reads it
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.save(torch.jit.script(module), str(directory / "model.pt"))
    inputs, targets = torch.randn(8 * BATCH, INPUTS), torch.randn(8 * BATCH, OUTPUTS)
    torch.save({"inputs": inputs, "targets": targets}, str(directory / "data.pt"))
    command = [find_madpipe(), "profile", "--model", "script", "--script",
               str(directory / "model.pt"), "--loss", "mse", "--data", str(directory / "data.pt"),
               "--data-format", "tensors", "--micro-batch-size", str(BATCH), "--name", "chain",
               "--warmup", str(WARMUP), "--repeats", str(REPEATS),
               "--output", str(directory / "p.json")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if "built without the runtime" in result.stderr:
        pytest.skip("this madpipe has no runtime (LibTorch), hence no profiler")
    assert result.returncode == 0, result.stdout + result.stderr
    cxx = json.loads((directory / "p.json").read_text())
    # The C++ profiler draws its micro-batch's rows from --seed: other values than inputs[:BATCH],
    # the same shapes and dtypes, which are all that the compared sizes depend on.
    python = mt.profile(module, inputs[:BATCH], name="chain", warmup=WARMUP, repeats=REPEATS,
                        loss_fn=torch.nn.functional.mse_loss, target=targets[:BATCH])
    return cxx, python, module


def test_same_top_level_fields(profiles):
    cxx, python, _ = profiles
    # TOP_LEVEL has no warmup or repeats: neither profiler records them, so the documents have
    # none to compare (test_same_default_runs compares the defaults instead).
    assert set(cxx) == set(python) == TOP_LEVEL
    for key in TOP_LEVEL - {"layers"}:
        assert cxx[key] == python[key], key
    assert (python["device"], python["dtype"], python["batch"]) == ("cpu", "float32", BATCH)
    assert python["input_bytes"] == BATCH * INPUTS * 4


def test_same_layers_names_and_sizes(profiles):
    cxx, python, module = profiles
    assert len(cxx["layers"]) == len(python["layers"]) == len(module)
    assert [layer["name"] for layer in cxx["layers"]] == ["fc1", "act", "norm", "fc2"]
    for a, b in zip(cxx["layers"], python["layers"]):
        for field in EXACT_FIELDS:
            assert a[field] == b[field], (a["name"], field)
    # Against the chain: its parameters and buffers; a_l of B x 16 floats, the loss (4 bytes) last.
    assert [layer["weight_bytes"] for layer in python["layers"]] == [
        sum(p.numel() * p.element_size() for p in (*m.parameters(), *m.buffers())) for m in module]
    assert [layer["output_bytes"] for layer in python["layers"]] == [BATCH * WIDTH * 4] * 3 + [4]


def test_same_saved_bytes_before_the_loss(profiles):
    """What autograd keeps: both measure it (C++: its counting allocator; Python: the saved-tensor
    hooks) and agree on every layer but the last (see the next test)."""
    cxx, python, _ = profiles
    saved = [[layer["saved_bytes"] for layer in profile["layers"][:-1]] for profile in (cxx, python)]
    # Tanh keeps its output for its backward; LayerNorm its mean and inverse deviation.
    assert saved[0] == saved[1] == [0, BATCH * WIDTH * 4, 2 * BATCH * 4]


@pytest.mark.xfail(strict=True, reason=(
    "the last layer's saved_bytes differ: C++ 2*B*out*4 - 4 = 252, Python B*out*4 = 128 (B=8, "
    "out=4). torch's CPU mse_loss returns the scalar loss in the 128-byte storage of the "
    "unreduced loss; profiler.cpp subtracts the loss's numel*element_size (4) from what the "
    "forward left allocated, so the other 124 bytes count as saved, while the Python profiler "
    "leaves the loss's storage out whole"))
def test_same_saved_bytes_of_the_loss_layer(profiles):
    cxx, python, _ = profiles
    assert cxx["layers"][-1]["saved_bytes"] == python["layers"][-1]["saved_bytes"]


def test_fields_only_one_profiler_writes(profiles):
    cxx, python, _ = profiles
    for index, (a, b) in enumerate(zip(cxx["layers"], python["layers"])):
        # The backward's split (I and W) is measured by the C++ profiler for the built-in
        # models' layers only, never a TorchScript layer's (docs/runtime.md, "The profiler");
        # the Python one splits every layer with parameters whose input needs a gradient:
        # norm and fc2 here (fc1's input is the batch, act has no parameters), with
        # torch.distributed (its pipelining's backward functions measure the split).
        split = index in (2, 3) and torch.distributed.is_available()
        assert set(a) == LAYER_FIELDS, a["name"]
        assert set(b) == LAYER_FIELDS | (SPLIT_FIELDS if split else set()), b["name"]
        # Workspaces: the C++ profiler meters the CPU allocator, the Python one has no CPU
        # counter and writes 0 (docs/torch.md), so only their types are compared.
        for field in ("forward_workspace_bytes", "backward_workspace_bytes"):
            assert isinstance(a[field], int) and a[field] >= 0, (a["name"], field)
            assert b[field] == 0, (b["name"], field)


def test_times_are_positive_and_finite(profiles):
    for profile in profiles[:2]:
        for layer in profile["layers"]:
            for field in ("forward_ms", "backward_ms"):
                assert math.isfinite(layer[field]) and layer[field] > 0, (layer["name"], field)
            for field in ("backward_input_ms", "backward_weight_ms"):
                if field in layer:
                    assert math.isfinite(layer[field]) and layer[field] >= 0, (layer["name"], field)


def test_same_default_runs(madpipe_bin):
    """madpipe.torch.profile's default warmup and repeats are those of `madpipe profile`."""
    usage = subprocess.run([madpipe_bin, "profile", "--help"], capture_output=True, text=True,
                           check=True).stdout
    parameters = inspect.signature(mt.profile).parameters
    for option in ("warmup", "repeats"):
        default = re.search(rf"--{option} arg \(=(\d+)\)", usage)
        assert default, f"no --{option} default in `madpipe profile --help`"
        assert parameters[option].default == int(default.group(1)), option
