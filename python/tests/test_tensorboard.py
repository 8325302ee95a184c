"""madpipe.tensorboard mirrors metrics.jsonl into TensorBoard scalars: every number at its step,
the lines appended later (a partial line once completed), a truncated file read again; clear
errors for a missing file, a malformed line and the command line."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

import madpipe
from madpipe.tensorboard import follow


class FakeWriter:
    """Records add_scalar calls as (tag, value, step) and counts flushes."""

    def __init__(self):
        self.scalars = []
        self.flushes = 0

    def add_scalar(self, tag, value, global_step):
        self.scalars.append((tag, value, global_step))

    def flush(self):
        self.flushes += 1

    def series(self, tag):
        return [(step, value) for t, value, step in self.scalars if t == tag]


def line(**record):
    return json.dumps(record) + "\n"


def write(run, text, mode="w"):
    with open(run / "metrics.jsonl", mode) as file:
        file.write(text)


def test_every_number_at_its_step(tmp_path):
    write(tmp_path, line(step=1, loss=4.5, lr=0.001, grad_norm=1.25, step_s=0.12, samples_per_s=527.0,
                         peak_memory_bytes=123456789, seconds=0.12)
              + line(step=2, loss=3.9, val_loss=4.1, lr=0.002, grad_norm=None, step_s=0.11,
                     samples_per_s=552.5, tokens_per_s=70720.0, peak_memory_bytes=123456789, seconds=0.23,
                     loss_scale=65536.0, skipped_steps=1, skipped=True, note="text"))
    writer = FakeWriter()
    assert follow(tmp_path, writer=writer, once=True) == 2
    assert writer.series("madpipe/loss") == [(1, 4.5), (2, 3.9)]
    assert writer.series("madpipe/val_loss") == [(2, 4.1)]
    assert writer.series("madpipe/grad_norm") == [(1, 1.25)]  # the null is left out
    assert writer.series("madpipe/peak_memory_bytes") == [(1, 123456789), (2, 123456789)]
    assert writer.series("madpipe/skipped") == [(2, 1.0)]
    assert writer.series("madpipe/skipped_steps") == [(2, 1)]
    assert {tag for tag, _, _ in writer.scalars} == {f"madpipe/{key}" for key in (
        "loss", "val_loss", "lr", "grad_norm", "step_s", "samples_per_s", "tokens_per_s",
        "peak_memory_bytes", "seconds", "loss_scale", "skipped_steps", "skipped")}
    assert all(type(value) is float for _, value, _ in writer.scalars)
    assert writer.flushes >= 1


def test_booleans_as_zero_and_one(tmp_path):
    write(tmp_path, line(step=1, loss=2.0, skipped=False) + line(step=2, loss=2.0, skipped=True))
    writer = FakeWriter()
    follow(tmp_path, writer=writer, once=True)
    assert writer.series("madpipe/skipped") == [(1, 0.0), (2, 1.0)]


def test_a_partial_last_line_waits_for_its_newline(tmp_path):
    first, second = line(step=1, loss=3.0), line(step=2, loss=2.5)
    write(tmp_path, first + second[:9])
    writer = FakeWriter()
    assert follow(tmp_path, writer=writer, once=True) == 1
    write(tmp_path, second[9:], mode="a")
    writer = FakeWriter()
    assert follow(tmp_path, writer=writer, once=True) == 2
    assert writer.series("madpipe/loss") == [(1, 3.0), (2, 2.5)]


def polls(*appends):
    """A stop callable for follow(poll_s=0): at its n-th call it runs appends[n] (if any), and
    stops after the last."""
    calls = []

    def stop():
        calls.append(None)
        if len(calls) > len(appends):
            return True
        appends[len(calls) - 1]()
        return False
    return stop


def test_following_lines_appended_in_pieces(tmp_path):
    text = line(step=1, loss=3.0) + line(step=2, loss=2.5, lr=0.01) + line(step=3, loss=2.0)
    cut1, cut2 = text.index("\n") + 5, text.index("lr")
    write(tmp_path, text[:cut1])
    writer = FakeWriter()
    seen = []

    def piece(start, end):
        def append():
            seen.append(list(writer.scalars))
            write(tmp_path, text[start:end], mode="a")
        return append
    stop = polls(piece(cut1, cut2), piece(cut2, len(text)), lambda: None)
    assert follow(tmp_path, writer=writer, poll_s=0, stop=stop) == 3
    assert seen[0] == [("madpipe/loss", 3.0, 1)]   # the partial second line waits
    assert seen[1] == [("madpipe/loss", 3.0, 1)]   # still without its newline
    assert writer.series("madpipe/loss") == [(1, 3.0), (2, 2.5), (3, 2.0)]
    assert writer.series("madpipe/lr") == [(2, 0.01)]


def test_waits_for_the_file_to_appear(tmp_path):
    writer = FakeWriter()
    stop = polls(lambda: None, lambda: write(tmp_path, line(step=1, loss=1.0)), lambda: None)
    assert follow(tmp_path, writer=writer, poll_s=0, stop=stop) == 1
    assert writer.series("madpipe/loss") == [(1, 1.0)]


def test_a_truncated_file_is_read_again(tmp_path):
    write(tmp_path, "".join(line(step=s, loss=10.0 - s) for s in (1, 2, 3, 4)))
    writer = FakeWriter()

    def resume():  # back to the checkpoint of step 2, then new steps 3 (shorter than before)
        write(tmp_path, line(step=1, loss=9.0) + line(step=2, loss=8.0) + line(step=3, loss=0.5))

    def replace():  # as the runtime's resume does: a new file in its place, now longer
        (tmp_path / "new.jsonl").write_text(line(step=1, loss=9.0) + line(step=2, loss=8.0)
                                            + line(step=3, loss=0.25) + line(step=4, loss=0.125)
                                            + line(step=5, loss=0.0625))
        os.replace(tmp_path / "new.jsonl", tmp_path / "metrics.jsonl")
    assert follow(tmp_path, writer=writer, poll_s=0, stop=polls(resume, replace, lambda: None)) == 12
    assert writer.series("madpipe/loss") == [
        (1, 9.0), (2, 8.0), (3, 7.0), (4, 6.0),
        (1, 9.0), (2, 8.0), (3, 0.5),
        (1, 9.0), (2, 8.0), (3, 0.25), (4, 0.125), (5, 0.0625)]


@pytest.mark.parametrize("bad, problem", [
    ('{"step": 3, "loss": 1.0', "not a JSON object"),
    ("[1, 2]", "expected a JSON object, got [1, 2]"),
    ('{"loss": 1.0}', '"step" must be an integer, got null'),
    ('{"step": 2.5, "loss": 1.0}', '"step" must be an integer, got 2.5'),
])
def test_a_malformed_line_is_named_by_its_number(tmp_path, bad, problem):
    write(tmp_path, line(step=1, loss=1.0) + "\n" + bad + "\n" + line(step=4, loss=1.0))
    with pytest.raises(madpipe.Error) as error:
        follow(tmp_path, writer=FakeWriter(), once=True)
    path = tmp_path / "metrics.jsonl"
    assert str(error.value).startswith(f"{path}:3: {problem}")
    assert error.value.file == str(path) and error.value.field == "line 3"


def test_a_missing_file_is_an_error_with_once(tmp_path):
    with pytest.raises(madpipe.Error, match="metrics.jsonl: no such file") as error:
        follow(tmp_path, writer=FakeWriter(), once=True)
    assert error.value.file == str(tmp_path / "metrics.jsonl") and error.value.kind == "io"
    with pytest.raises(madpipe.Error, match="no such run directory"):
        follow(tmp_path / "absent", writer=FakeWriter(), poll_s=0, stop=lambda: True)


def test_no_tensorboard_says_how_to_install_it(tmp_path, monkeypatch):
    write(tmp_path, line(step=1, loss=1.0))
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # its import fails
    with pytest.raises(madpipe.Error, match="pip install .*tensorboard"):
        follow(tmp_path, once=True)


def run_command(*arguments):
    package_root = str(pathlib.Path(madpipe.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "madpipe.tensorboard", *arguments],
                          env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True,
                          timeout=120)


def test_the_command_exits_2_on_a_missing_run_dir(tmp_path):
    result = run_command(str(tmp_path / "absent"), "--once")
    assert result.returncode == 2
    assert result.stderr.startswith("madpipe: error: ") and "no such run directory" in result.stderr
    result = run_command(str(tmp_path / "absent"))  # following, too: not waiting on a typo
    assert result.returncode == 2


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None,
                    reason="the tensorboard package is not installed (pip install tensorboard)")
def test_real_event_files(tmp_path):
    pytest.importorskip("torch")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def loss_of(logdir):
        accumulator = EventAccumulator(str(logdir))
        accumulator.Reload()
        return [(event.step, event.value) for event in accumulator.Scalars("madpipe/loss")]
    write(tmp_path, "".join(line(step=s, loss=1.0 / s, skipped=False) for s in (1, 2, 3, 4)))
    result = run_command(str(tmp_path), "--once")
    assert result.returncode == 0, result.stderr
    logdir = tmp_path / "tensorboard"
    assert result.stdout == f"mirroring {tmp_path / 'metrics.jsonl'} into {logdir}; tensorboard --logdir {logdir}\n"
    assert loss_of(logdir) == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3)), (4, 0.25)]

    # A resumed run, truncated to step 2 and on to step 3: the old steps 3 and 4 are gone. (Its
    # own logdir: event files are read in the order of their names, which hold the second they
    # were made in and the process id.)
    def resume():
        write(tmp_path, line(step=1, loss=1.0) + line(step=2, loss=0.5) + line(step=3, loss=0.125))
    logdir = tmp_path / "followed"
    assert follow(tmp_path, logdir, poll_s=0, stop=polls(resume, lambda: None)) == 7
    assert loss_of(logdir) == [(1, 1.0), (2, 0.5), (3, 0.125)]
    assert follow(tmp_path, logdir, once=True) == 3  # again: the steps written once, not twice
    assert loss_of(logdir) == [(1, 1.0), (2, 0.5), (3, 0.125)]
