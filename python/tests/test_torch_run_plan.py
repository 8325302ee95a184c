"""madpipe.torch.run_plan: madpipe plans trained by torch.distributed.pipelining on gloo CPU ranks
give the weights of unsplit training with gradient accumulation (float64, 3 SGD steps)."""

import datetime
import re
import subprocess

import pytest
import torch
import torch.distributed as dist

import madpipe
import madpipe.torch as mt
from conftest import chain_profile
from torch_chains import batch, mlp, mse_loss, relative_difference, run_ranks, _train_reference

TOLERANCE = 1e-5  # relative; float64 training agrees to ~1e-15


def assert_equal_to_unsplit_training(results, layers):
    """Every layer trained on exactly one rank, like the unsplit chain, and the losses agree."""
    trained = sorted(layer for result in results for layer in result["layers"])
    assert trained == list(range(layers))
    for result in results:
        print(f"rank {result['rank']}: stages {result['stages']}, layers {result['layers']}: "
              f"weights within {result['weight_difference']:.1e} of unsplit training, "
              f"losses within {result['loss_difference']:.1e}")
        assert result["weight_difference"] < TOLERANCE
        assert result["loss_difference"] < TOLERANCE
        assert not result["layers"] or result["moved"] > 1e-3  # training changed the weights
    assert sum(result["holds_last"] for result in results) == 1


def stage_ranks(export):
    return [stage.rank for stage in mt.read_export(export).stages]


def test_two_ranks_run_a_non_contiguous_plan_exported_by_the_command(madpipe_bin, tmp_path):
    """The thesis's 3-layer chain: stages 0 and 2 on rank 0, stage 1 on rank 1."""
    profile = tmp_path / "profile.json"
    profile.write_text(madpipe.Profile(chain_profile([0.5, 1, 0.5], [0.5, 1, 0.5])).to_json())
    subprocess.run([madpipe_bin, "plan", "--profile", str(profile), "--gpus", "2", "--memory", "1GiB",
                    "--bandwidth", "12GB/s", "--quiet", "--output", str(tmp_path / "plan.json")],
                   check=True, capture_output=True)
    subprocess.run([madpipe_bin, "export", "--plan", str(tmp_path / "plan.json"), "--format", "torch",
                    "--micro-batches", "4", "--output", str(tmp_path / "export")],
                   check=True, capture_output=True)
    export = str(tmp_path / "export")
    assert stage_ranks(export) == [0, 1, 0]
    results = run_ranks(2, tmp_path, {"chain": "mlp", "options": {"layers": 3}, "export": export,
                                      "steps": 3, "batch": 8, "lr": 0.1,
                                      "plan": str(tmp_path / "plan.json")})
    assert_equal_to_unsplit_training(results, 3)
    report = results[1]["report"]  # the same on every rank
    print(report)
    assert report == results[0]["report"]
    assert re.match(r"measured step [0-9.]+ ms \(median of 2 steps after the first\), "
                    r"predicted [0-9.]+ ms \(ratio [0-9.]+\)\n", report), report
    assert re.search(r"rank 0: peak not measured on the CPU, predicted [0-9.]+ [KMG]?i?B", report)


def test_four_ranks_run_a_non_contiguous_madpipe_plan(tmp_path):
    """An 8-layer chain whose madpipe plan puts the first and the last stage on rank 0."""
    profile = chain_profile([4, 0.5, 2, 2, 4, 1, 1, 1], [4, 1, 8, 8, 2, 2, 1, 4])
    plan = madpipe.plan(profile, gpus=4, memory="1GiB", bandwidth="12GB/s", time_limit=None)
    assert not plan.is_contiguous
    export = madpipe.export_torch(plan, 6)
    ranks = stage_ranks(export)
    assert len(set(ranks)) == 4 and len(ranks) > 4
    results = run_ranks(4, tmp_path, {"chain": "mlp", "options": {"layers": 8}, "export": export,
                                      "steps": 3, "batch": 12, "lr": 0.1})
    assert_equal_to_unsplit_training(results, 8)


def test_gpt_chain_with_a_hand_written_export(tmp_path):
    """examples/gpt_from_pytorch's chain (embed, 2 blocks, norm, head) in float64: stages 0 and 2
    on rank 0, the loss (cross-entropy) on stage 2."""
    export = {
        "format": "madpipe.torch-stages/1", "micro_batches": 3, "ranks": 2, "num_stages": 3,
        "stages": [{"stage": 0, "rank": 0, "first_layer": 0, "last_layer": 1},
                   {"stage": 1, "rank": 1, "first_layer": 2, "last_layer": 3},
                   {"stage": 2, "rank": 0, "first_layer": 4, "last_layer": 4}],
        "actions": [["0F0", "0F1", "2F0", "2B0", "0F2", "2F1", "2B1", "0B0", "2F2", "2B2", "0B1", "0B2"],
                    ["1F0", "1F1", "1B0", "1F2", "1B1", "1B2"]],
    }
    results = run_ranks(2, tmp_path, {"chain": "gpt", "options": {"dtype": torch.float64},
                                      "export": export, "steps": 2, "batch": 6, "lr": 0.5})
    assert_equal_to_unsplit_training(results, 5)


def test_a_rank_the_plan_leaves_idle_sits_out(tmp_path):
    """Two stages on ranks 0 and 2 of 3: rank 1 holds nothing and its step does nothing."""
    export = {
        "format": "madpipe.torch-stages/1", "micro_batches": 2, "ranks": 3,
        "stages": [{"stage": 0, "rank": 0, "first_layer": 0, "last_layer": 1},
                   {"stage": 1, "rank": 2, "first_layer": 2, "last_layer": 3}],
        "actions": [["0F0", "0F1", "0B0", "0B1"], [], ["1F0", "1B0", "1F1", "1B1"]],
    }
    results = run_ranks(3, tmp_path, {"chain": "mlp", "options": {"layers": 4}, "export": export,
                                      "steps": 2, "batch": 4, "lr": 0.1})
    assert results[1]["stages"] == [] and results[1]["layers"] == []
    assert_equal_to_unsplit_training(results, 4)


@pytest.fixture
def one_rank_group(tmp_path):
    """torch.distributed with this process as its only rank."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=60))
    yield
    dist.destroy_process_group()


def test_one_rank_runs_neighbouring_stages_without_communication(one_rank_group):
    """Stages 0 and 1 on one rank hand activations and gradients over locally."""
    export = {"format": "madpipe.torch-stages/1", "micro_batches": 2, "ranks": 1,
              "stages": [{"stage": 0, "rank": 0, "first_layer": 0, "last_layer": 0},
                         {"stage": 1, "rank": 0, "first_layer": 1, "last_layer": 2}],
              "actions": [["0F0", "1F0", "0F1", "1F1", "1B0", "0B0", "1B1", "0B1"]]}
    chain, reference = mlp(3), mlp(3)
    runner = mt.run_plan(chain, export, loss_fn=mse_loss)
    assert runner.holds_first and runner.holds_last and runner.stage_indices == [0, 1]
    optimizer = torch.optim.SGD(runner.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(2):
        inputs, target = batch("mlp", {}, step, 4)
        optimizer.zero_grad()
        losses = runner.step(inputs, target)
        optimizer.step()
        expected = _train_reference(reference, mse_loss, inputs, target, 2, reference_optimizer)
        assert max(relative_difference(a, b) for a, b in zip(losses, expected)) < TOLERANCE
    for trained, unsplit in zip(chain.parameters(), reference.parameters()):
        assert relative_difference(trained.detach(), unsplit.detach()) < TOLERANCE
    with pytest.raises(ValueError, match="first stage: step\\(\\) needs inputs"):
        runner.step(None, target)
    with pytest.raises(ValueError, match="does not split into 2"):
        runner.step(inputs[:3], target[:3])


def test_run_plan_refuses_a_chain_or_group_that_does_not_match(one_rank_group):
    export = {"format": "madpipe.torch-stages/1", "micro_batches": 1, "ranks": 1,
              "stages": [{"stage": 0, "rank": 0, "first_layer": 0, "last_layer": 2}],
              "actions": [["0F0", "0B0"]]}
    with pytest.raises(mt.ExportError, match="cover layers 0..2, but the chain has 4 layers"):
        mt.run_plan(mlp(4), export, loss_fn=mse_loss)
    two_ranks = dict(export, ranks=2, actions=[["0F0", "0B0"], []])
    with pytest.raises(mt.ExportError, match="for 2 ranks, but the process group has 1"):
        mt.run_plan(mlp(3), two_ranks, loss_fn=mse_loss)
    with pytest.raises(ValueError, match="loss_fn"):
        mt.run_plan(mlp(3), export, loss_fn=None)


def test_run_plan_needs_an_initialized_process_group():
    export = {"format": "madpipe.torch-stages/1", "micro_batches": 1, "ranks": 1,
              "stages": [{"stage": 0, "rank": 0, "first_layer": 0, "last_layer": 0}],
              "actions": [["0F0", "0B0"]]}
    with pytest.raises(RuntimeError, match="init_process_group"):
        mt.run_plan(mlp(1), export, loss_fn=mse_loss)


def test_split_backwards_run_as_i_and_w_actions(tmp_path):
    """A zb-h1 plan of a profile that splits its backwards: the export's I and W actions train the
    chain on torch.distributed.pipelining to the weights of unsplit training."""
    profile = chain_profile([1, 1, 1, 1], [2, 2, 2, 2])
    for layer in profile["layers"]:
        layer["backward_input_ms"] = layer["backward_weight_ms"] = layer["backward_ms"] / 2
    plan = madpipe.plan(profile, gpus=2, memory="1GiB", bandwidth="12GB/s", algorithm="zb-h1")
    export = madpipe.export_torch(plan, 4)
    actions = [action for rank in mt.read_export(export).actions for action in rank]
    assert any("I" in action for action in actions) and any("W" in action for action in actions)
    results = run_ranks(2, tmp_path, {"chain": "mlp", "options": {"layers": 4}, "export": export,
                                      "steps": 3, "batch": 8, "lr": 0.1})
    assert_equal_to_unsplit_training(results, 4)


VIT_EXPORT = {  # stage boundaries after a non-contiguous output (layer 0) and a view (layer 2)
    "format": "madpipe.torch-stages/1", "micro_batches": 2, "ranks": 2, "num_stages": 3,
    "stages": [{"stage": 0, "rank": 0, "first_layer": 0, "last_layer": 0},
               {"stage": 1, "rank": 1, "first_layer": 1, "last_layer": 2},
               {"stage": 2, "rank": 0, "first_layer": 3, "last_layer": 3}],
    "actions": [["0F0", "0F1", "2F0", "2I0", "2W0", "2F1", "2I1", "2W1", "0B0", "0B1"],
                ["1F0", "1F1", "1I0", "1W0", "1I1", "1W1"]],
}


def test_layers_returning_views_and_non_contiguous_tensors_train_exactly(tmp_path):
    """A vision-transformer-like chain: its patch embedding returns x.flatten(2).transpose(1, 2),
    its blocks views; stages end on both, and split backwards (I, W) detach their outputs. Rank 0
    gets the trained chain's state_dict under its own keys; a wrong micro-batch size is refused on
    both ranks."""
    from torch_chains import vit
    profile = mt.profile(vit(), torch.randn(4, 3, 8, 8, dtype=torch.float64), repeats=1, warmup=0)
    results = run_ranks(2, tmp_path, {"chain": "vit", "export": VIT_EXPORT, "steps": 3, "batch": 8,
                                      "lr": 0.1, "profile": profile, "wrong_batch": 16})
    assert_equal_to_unsplit_training(results, 4)
    assert results[0]["gathered_keys"] is True
    assert results[0]["gathered_difference"] < TOLERANCE
    for result in results:
        error = result["wrong_batch_error"]
        assert error is not None and "micro-batches of 8 samples" in error and "of 4" in error, error
    report = results[0]["report"]
    assert report.startswith("measured step ") and "predicted" not in report  # no plan given
    assert "rank 1: peak not measured on the CPU" in report


def test_profile_measures_layers_that_return_views():
    """Each layer's output is measured as a stage would send it: contiguous, not a view."""
    from torch_chains import vit
    profile = mt.profile(vit(), torch.randn(4, 3, 8, 8, dtype=torch.float64), repeats=1, warmup=0)
    layers = profile["layers"]
    assert [layer["name"] for layer in layers] == ["patchembedding0", "viewblock1", "viewblock2",
                                                  "poolhead3"]
    assert layers[0]["output_bytes"] == 4 * 4 * 8 * 8  # 4 images, 4 patches of width 8, float64
    assert all("backward_weight_ms" in layer for layer in layers[1:3])  # split backward measured
