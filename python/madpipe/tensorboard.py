"""Mirrors a training run's ``metrics.jsonl`` into TensorBoard, as ``madpipe train`` appends to it.

``python -m madpipe.tensorboard RUN_DIR`` (or ``follow(run_dir)``) writes every number of each
line as a scalar ``madpipe/<key>`` at the line's ``step`` (``madpipe/loss``, ``madpipe/lr``, ...;
booleans as 0 and 1, nulls left out) into ``RUN_DIR/tensorboard``, then keeps reading the lines
the run appends. Writing event files needs the ``tensorboard`` package (``pip install
tensorboard``) and torch; reading the file needs neither.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time
import typing

from ._errors import Error

METRICS_FILE = "metrics.jsonl"
TAG_PREFIX = "madpipe/"


class ScalarWriter(typing.Protocol):
    """What ``follow`` writes to: ``torch.utils.tensorboard.SummaryWriter``, or any object with
    these two methods."""

    def add_scalar(self, tag: str, value: float, global_step: int, /) -> object: ...

    def flush(self) -> object: ...


def _summary_writer(logdir: pathlib.Path) -> typing.Any:
    """A SummaryWriter on ``logdir`` that first hides what earlier writers wrote there (a
    SessionLog START at step 0): the follower writes the file's steps from the first again."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        missing = "torch" if e.name == "torch" else "tensorboard"
        raise Error(f"writing TensorBoard files needs the {missing} package ({e}): "
                    f"pip install {'torch ' if missing == 'torch' else ''}tensorboard",
                    kind="unsupported") from e
    return SummaryWriter(str(logdir), purge_step=0)


def _scalars(record: dict[str, typing.Any]) -> typing.Iterator[tuple[str, float]]:
    """The numbers of one line, but its step: booleans as 0 and 1; nulls, strings and the like
    left out."""
    for key, value in record.items():
        if key != "step" and isinstance(value, (int, float)):  # bool is an int
            yield key, float(value)


def _parse(line: bytes, path: pathlib.Path, number: int) -> tuple[int, dict[str, typing.Any]]:
    """The step and the object of line ``number`` of ``path``, or the Error naming what is wrong."""
    def bad(problem: str) -> Error:
        return Error(f"{path}:{number}: {problem}", file=str(path), field=f"line {number}",
                     problem=problem)
    try:
        record = json.loads(line)
    except (ValueError, UnicodeDecodeError) as e:
        raise bad(f"not a JSON object ({e})") from None
    if not isinstance(record, dict):
        raise bad(f"expected a JSON object, got {json.dumps(record)[:60]}")
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        raise bad(f'"step" must be an integer, got {json.dumps(step)}')
    return step, record


def follow(run_dir: str | os.PathLike[str], logdir: str | os.PathLike[str] | None = None, *,
           writer: ScalarWriter | None = None, poll_s: float = 2.0,
           stop: typing.Callable[[], bool] | None = None, once: bool = False) -> int:
    """Mirrors ``run_dir/metrics.jsonl`` into TensorBoard: every number of each line but ``step``
    as the scalar ``madpipe/<key>`` at global step ``step`` (booleans as 0 and 1, nulls left
    out), then the lines appended later, as ``tail -f``.

    Args:
        run_dir: the run's ``--output-dir``.
        logdir: where the event files go; ``run_dir/tensorboard`` when None. The follower owns
            it: a new ``follow`` writes the file's steps from the first again, and hides what
            was written there before.
        writer: an object with ``add_scalar(tag, value, global_step)`` and ``flush()`` to write
            to instead of a ``torch.utils.tensorboard.SummaryWriter`` on ``logdir``.
        poll_s: seconds between two looks at the file's size.
        stop: called after each look; True stops following.
        once: mirror the lines there are, then return.

    A last line without its newline is being written: it is mirrored once completed (with
    ``once``, left out). A file that shrinks or is replaced (a resumed run truncates it to its
    checkpoint's step) is read again from the start, and its steps written again.

    Returns:
        The number of lines mirrored.

    Raises:
        madpipe.Error: no directory ``run_dir``; with ``once``, no ``metrics.jsonl`` in it
            (without, ``follow`` waits for it); a line that is not a JSON object with an integer
            ``step`` (the message names file:line); no tensorboard package to write with.
    """
    run = pathlib.Path(run_dir)
    path = run / METRICS_FILE
    if not poll_s >= 0:
        raise Error(f"poll_s: must be a number of seconds >= 0, got {poll_s}", field="poll_s",
                    problem=f"must be a number of seconds >= 0, got {poll_s}")
    if not run.is_dir():
        raise Error(f"{run}: no such run directory", kind="io", file=str(run),
                    problem="no such run directory")
    if once and not path.is_file():
        raise Error(f"{path}: no such file (is {run} the --output-dir of a madpipe train run?)",
                    kind="io", file=str(path), problem="no such file")
    events_dir = pathlib.Path(logdir) if logdir is not None else run / "tensorboard"
    owned = writer is None
    out: typing.Any = _summary_writer(events_dir) if writer is None else writer

    mirrored = 0
    offset = 0            # bytes of the file read so far
    pending = b""         # the last line read, while it has no newline
    number = 0            # lines of the file read so far
    identity: tuple[int, int] | None = None
    try:
        while True:
            try:
                status = path.stat()
            except FileNotFoundError:
                status = None
            if status is not None:
                if (status.st_dev, status.st_ino) != identity or status.st_size < offset:
                    if identity is not None:  # truncated or replaced: the steps from the first
                        if owned:
                            out.close()
                            out = _summary_writer(events_dir)
                        offset, pending, number = 0, b"", 0
                    identity = (status.st_dev, status.st_ino)
                if status.st_size > offset:
                    with open(path, "rb") as file:
                        file.seek(offset)
                        data = file.read(status.st_size - offset)
                    offset += len(data)
                    *lines, pending = (pending + data).split(b"\n")
                    for line in lines:
                        number += 1
                        if not line.strip():
                            continue
                        step, record = _parse(line, path, number)
                        for key, value in _scalars(record):
                            out.add_scalar(TAG_PREFIX + key, value, step)
                        mirrored += 1
                    out.flush()
            if once or (stop is not None and stop()):
                return mirrored
            time.sleep(poll_s)
    finally:
        if owned:
            out.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m madpipe.tensorboard RUN_DIR [--logdir DIR] [--once] [--poll SECONDS]``: 0 when
    done or stopped with Ctrl-C, 2 on an error (printed as ``madpipe: error: ...``)."""
    parser = argparse.ArgumentParser(
        prog="python -m madpipe.tensorboard",
        description="Mirror a madpipe train run's metrics.jsonl into TensorBoard scalars "
                    "madpipe/<key>, following the lines the run appends.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run's --output-dir")
    parser.add_argument("--logdir", metavar="DIR",
                        help="where the event files go (default: RUN_DIR/tensorboard)")
    parser.add_argument("--once", action="store_true",
                        help="mirror the lines there are and exit, not following the file")
    parser.add_argument("--poll", metavar="SECONDS", type=float, default=2.0,
                        help="seconds between two looks at the file (default: 2)")
    arguments = parser.parse_args(argv)
    if not arguments.poll >= 0:
        print(f"madpipe: error: --poll: must be a number of seconds >= 0, got {arguments.poll}",
              file=sys.stderr)
        return 2
    run = pathlib.Path(arguments.run_dir)
    logdir = pathlib.Path(arguments.logdir) if arguments.logdir else run / "tensorboard"
    print(f"mirroring {run / METRICS_FILE} into {logdir}; tensorboard --logdir {logdir}",
          flush=True)
    try:
        follow(run, logdir, poll_s=arguments.poll, once=arguments.once)
    except KeyboardInterrupt:
        return 0
    except Error as e:
        print(f"madpipe: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
