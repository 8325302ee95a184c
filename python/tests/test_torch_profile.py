"""madpipe.torch.profile: madpipe.profile/1 documents of PyTorch chains, measured on the CPU."""

import json
import subprocess

import pytest
import torch

import madpipe
import madpipe.torch as mt
from torch_chains import gpt, gpt_loss

BATCH = 32
FIELDS = ("name", "forward_ms", "backward_ms", "weight_bytes", "output_bytes", "saved_bytes",
          "forward_workspace_bytes", "backward_workspace_bytes")


def parameter_and_buffer_bytes(module):
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


@pytest.fixture
def mlp_chain():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16),
        torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16)),
        torch.nn.BatchNorm1d(16),
        torch.nn.Linear(16, 4))


@pytest.fixture
def mlp_profile(mlp_chain):
    return mt.profile(mlp_chain, torch.randn(BATCH, 8), name="mlp", repeats=3,
                      loss_fn=torch.nn.functional.mse_loss, target=torch.randn(BATCH, 4))


def test_mlp_profile_has_every_field_with_exact_sizes(mlp_chain, mlp_profile):
    assert mlp_profile["format"] == "madpipe.profile/1"
    assert (mlp_profile["name"], mlp_profile["device"], mlp_profile["dtype"]) == ("mlp", "cpu", "float32")
    assert mlp_profile["batch"] == BATCH and mlp_profile["input_bytes"] == BATCH * 8 * 4
    layers = mlp_profile["layers"]
    assert [layer["name"] for layer in layers] == ["linear0", "sequential1", "batchnorm1d2", "linear3"]
    for layer, module in zip(layers, mlp_chain):
        assert set(FIELDS) <= set(layer)
        assert layer["forward_ms"] > 0 and layer["backward_ms"] > 0
        assert layer["weight_bytes"] == parameter_and_buffer_bytes(module)
        assert layer["forward_workspace_bytes"] == layer["backward_workspace_bytes"] == 0  # CPU
    assert layers[2]["weight_bytes"] == (4 * 16) * 4 + 8  # weight, bias, running mean and var, count
    # a_l: B x 16 floats, and the loss (one float) for the last layer, which computes it
    assert [layer["output_bytes"] for layer in layers] == [BATCH * 16 * 4] * 3 + [4]


def test_split_backward_as_run_plan_runs_i_and_w(mlp_chain, mlp_profile):
    """Layers with parameters whose input needs a gradient get the split of their backward; the
    first layer (its input is the batch) gets none."""
    layers = mlp_profile["layers"]
    assert "backward_weight_ms" not in layers[0]
    for layer in layers[1:]:
        assert layer["backward_weight_ms"] > 0 and layer["backward_input_ms"] >= 0
        assert layer["backward_input_ms"] + layer["backward_weight_ms"] == pytest.approx(
            layer["backward_ms"], rel=1e-9)
    # Between I and W torch keeps the graph: the Linear's input at least (B x 16 floats) and the
    # gradient of its output it captured for W.
    assert layers[3]["backward_weight_kept_bytes"] >= BATCH * 16 * 4
    assert all(p.grad is None for p in mlp_chain.parameters())  # gradients left unset
    madpipe.Profile(mlp_profile)  # a valid profile, split included
    plan = madpipe.plan(mlp_profile, gpus=2, memory="1GiB", bandwidth="12GB/s", algorithm="zb-h1")
    assert any(op["kind"] == "W" for op in plan.to_dict()["pattern"]["ops"])


def test_saved_bytes_count_what_autograd_keeps_besides_input_and_weights(mlp_profile):
    saved = [layer["saved_bytes"] for layer in mlp_profile["layers"]]
    assert saved[0] == 0  # Linear keeps its input and weight only
    assert saved[1] == BATCH * 16 * 4  # the ReLU's output, inside the layer
    assert saved[2] == 2 * 16 * 4  # batch norm's mean and inverse deviation
    assert saved[3] == BATCH * 4 * 4  # the loss keeps the logits (not the target)


def test_profiling_leaves_the_chain_as_it_was(mlp_chain, mlp_profile):
    assert all(parameter.grad is None for parameter in mlp_chain.parameters())
    assert torch.equal(mlp_chain[2].running_mean, torch.zeros(16))
    assert int(mlp_chain[2].num_batches_tracked) == 0


def test_gpt_chain_profile(tmp_path):
    chain = gpt(layers=2, vocab=32, context=8, width=16)
    ids = torch.randint(32, (4, 9))
    profile = mt.profile(chain, ids[:, :-1], name="gpt", repeats=2, loss_fn=gpt_loss, target=ids[:, 1:])
    layers = profile["layers"]
    assert [layer["name"] for layer in layers] == ["embed", "block0", "block1", "norm", "head"]
    assert profile["input_bytes"] == 4 * 8 * 8 and profile["batch"] == 4
    for layer, module in zip(layers, chain):
        assert layer["forward_ms"] > 0 and layer["backward_ms"] > 0
        assert layer["weight_bytes"] == parameter_and_buffer_bytes(module)
    assert [layer["output_bytes"] for layer in layers] == [4 * 8 * 16 * 4] * 4 + [4]
    assert all(layer["saved_bytes"] > 0 for layer in layers[1:])  # attention, GELU, norms, softmax
    path = mt.write_profile(profile, tmp_path / "gpt.json")
    assert madpipe.read_profile(path).to_dict()["layers"][4]["output_bytes"] == 4
    assert json.loads((tmp_path / "gpt.json").read_text()) == profile


def test_the_planner_accepts_a_measured_profile(mlp_profile, madpipe_bin, tmp_path):
    path = mt.write_profile(mlp_profile, tmp_path / "mlp.json")
    result = subprocess.run([madpipe_bin, "plan", "--profile", path, "--gpus", "2", "--memory", "1GiB",
                             "--bandwidth", "10GB/s", "--quiet"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "mlp (4 layers" in result.stdout
    assert madpipe.plan(mlp_profile, gpus=2, memory="1GiB", bandwidth="10GB/s").stages


def test_float64_and_no_loss(mlp_chain):
    profile = mt.profile(mlp_chain, torch.randn(BATCH, 8), dtype=torch.float64, warmup=0, repeats=1)
    assert profile["dtype"] == "float64" and profile["input_bytes"] == BATCH * 8 * 8
    assert profile["layers"][-1]["output_bytes"] == BATCH * 4 * 8  # without a loss: the output


class TwoOutputs(torch.nn.Module):
    def forward(self, x):
        return x, x


@pytest.mark.parametrize("chain, options, error, message", [
    (torch.nn.Sequential(torch.nn.Linear(8, 8), TwoOutputs()), {}, TypeError,
     r"layer 1 \(twooutputs1\) returned a tuple"),
    (torch.nn.Sequential(), {}, ValueError, "no layers"),
    (torch.nn.Sequential(torch.nn.Linear(8, 8)), {"repeats": 0}, ValueError, "repeats >= 1"),
    (torch.nn.Sequential(torch.nn.Linear(8, 8)), {"loss_fn": torch.nn.functional.mse_loss},
     ValueError, "both loss_fn and target"),
])
def test_bad_chains_and_options_are_refused(chain, options, error, message):
    with pytest.raises(error, match=message):
        mt.profile(chain, torch.randn(4, 8), **options)
