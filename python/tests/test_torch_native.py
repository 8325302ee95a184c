"""madpipe.torch.plan (profile and plan in one call) and madpipe.torch.train (the native runtime
from Python: mpirun ... madpipe train on CPU ranks)."""

import shutil

import pytest
import torch

import madpipe
import madpipe.torch as mt


def mlp(width=8, layers=3, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh())
                                 for _ in range(layers)])


def samples(rows=80, width=8, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, width, generator=generator),
            torch.randn(rows, width, generator=generator))


def test_plan_profiles_and_plans_in_one_call():
    plan = mt.plan(mlp(), torch.randn(4, 8), gpus=2, memory="1GiB", bandwidth="12GB/s",
                   repeats=1, warmup=0, time_limit=None)
    assert isinstance(plan, madpipe.Plan)
    assert isinstance(plan.profile, madpipe.Profile)
    assert len(plan.profile) == 3 and plan.profile.to_dict()["batch"] == 4
    assert plan.stages[0]["first_layer"] == 0 and plan.stages[-1]["last_layer"] == 2


needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun")


@needs_mpirun
def test_train_runs_the_native_runtime_and_returns_the_trained_state_dict(madpipe_bin, tmp_path):
    chain = mlp()
    initial = {key: value.clone() for key, value in chain.state_dict().items()}
    inputs, targets = samples()
    lines = []
    run = mt.train(chain, inputs, targets, gpus=2, output_dir=tmp_path / "run", loss="mse",
                   steps=4, micro_batches=2, micro_batch_size=4, memory="1GiB",
                   optimizer="sgd", learning_rate=0.1, eval_every=0, trace_steps=0,
                   progress=lines.append, madpipe=madpipe_bin)
    assert run.exit_status == 0 and not run.stopped
    assert lines[0].startswith("$ ") and " -np 2 " in lines[0] and " train --model script " in lines[0]
    assert lines[0] == "$ " + run.command  # the printed command is the one that ran
    assert any(line.startswith("done in ") for line in lines), lines[-5:]
    assert [line["step"] for line in run.metrics] == [1, 2, 3, 4]
    assert all(line["step_s"] > 0 and line["samples_per_s"] > 0 for line in run.metrics)
    assert list(run.state_dict) == list(chain.state_dict())
    assert any(not torch.equal(run.state_dict[key], initial[key]) for key in initial)
    assert isinstance(run.plan, madpipe.Plan) and run.plan.platform["gpus"] == 2
    assert "4 steps" in repr(run)


@needs_mpirun
def test_a_failed_run_raises_with_its_exit_status(madpipe_bin, tmp_path):
    """No plan fits 1 KiB: the run exits 3 (no plan fits) and the error carries it."""
    inputs, targets = samples()
    with pytest.raises(madpipe.Error) as caught:
        mt.train(mlp(), inputs, targets, gpus=2, output_dir=tmp_path / "run", loss="mse", steps=2,
                 micro_batches=2, micro_batch_size=4, memory="1KiB", progress=None,
                 madpipe=madpipe_bin)
    assert caught.value.exit_status == 3, str(caught.value)
    assert caught.value.kind == "runtime"
    assert "memory" in str(caught.value)


@needs_mpirun
def test_a_failed_run_says_what_madpipe_said_not_the_launchers_lines(madpipe_bin, tmp_path):
    """Float targets with a cross-entropy loss: every rank refuses the data; the error is that
    refusal, once, not mpirun's epilogue."""
    inputs, targets = samples()
    with pytest.raises(madpipe.Error) as caught:
        mt.train(mlp(), inputs, targets, gpus=2, output_dir=tmp_path / "run", loss="cross-entropy",
                 steps=2, micro_batches=2, micro_batch_size=4, progress=None, madpipe=madpipe_bin)
    lines = str(caught.value).splitlines()
    assert caught.value.exit_status == 2
    assert lines[0] == "madpipe train failed (exit status 2):"
    assert len(lines) == 2, lines
    assert lines[1].endswith("data.pt: targets: are Float, but --loss cross-entropy takes Long "
                             "class ids"), lines


def test_bad_arguments_are_refused_before_anything_runs(tmp_path):
    inputs, targets = samples()
    with pytest.raises(madpipe.Error, match="loss: expected one of mse, cross-entropy"):
        mt.train(mlp(), inputs, targets, gpus=2, output_dir=tmp_path, loss="l1")
    with pytest.raises(madpipe.Error, match="targets: 79 rows, but inputs has 80"):
        mt.train(mlp(), inputs, targets[:79], gpus=2, output_dir=tmp_path, loss="mse")
