"""examples/vit_from_python/walk.py, the walk of docs/python.md, runs end to end and prints what
the document shows: a plan from an nn.Module, training with run_plan (a non-contiguous stage
output handled, the state_dict gathered, a wrong micro-batch size refused) and with the native
runtime from Python."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun")
def test_the_documented_walk_runs(madpipe_bin, tmp_path):
    environment = dict(os.environ, MADPIPE_BIN=madpipe_bin)
    result = subprocess.run([sys.executable, str(REPO / "examples" / "vit_from_python" / "walk.py"),
                             str(tmp_path / "walk")], capture_output=True, text=True, env=environment,
                            timeout=500)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    for expected in ["203850 parameters in 6 layers", "Plan(madpipe, ",
                     "profile      vit (6 layers, measured on cpu)",
                     "measured step ", "gathered 54 tensors; the chain's keys: True",
                     "wrong micro-batch size: inputs has a batch of 32: micro-batches of 8 samples, "
                     "but the profile was measured with micro-batches of 16",
                     " -np 2 ", "15.0 MiB in host memory on each rank, apart from the plan's memory",
                     "TrainingRun(3 steps in ", "loaded the native run's state_dict into the nn.Sequential"]:
        assert expected in out, (expected, out[-3000:])
    assert (tmp_path / "walk" / "vit-plan.svg").read_text().startswith("<svg")
