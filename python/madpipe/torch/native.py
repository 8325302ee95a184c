"""train(): a PyTorch chain trained by madpipe's native runtime (``madpipe train``) from Python.

``train`` scripts the chain (``torch.jit.script``), writes the samples as a tensors file
(``torch.save({"inputs": X, "targets": Y})``), starts ``mpirun -np GPUS madpipe train --model
script ...`` with them, passes each line the run prints to ``progress``, and returns the run: its
exact command line (to run it again from a shell), metrics, plan and the trained state_dict under
the chain's own keys (``madpipe export-weights``). docs/python.md walks through it.
"""

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import warnings

import torch

from .._documents import Plan
from .._errors import Error

# The exit statuses of madpipe train (docs/cli.md#exit-status).
EXIT_STOPPED_RESUMABLE = 75
_LOSSES = ("mse", "cross-entropy")


@dataclasses.dataclass
class TrainingRun:
    """A finished (or stopped) ``madpipe train`` run.

    Attributes:
        command: the command line that ran, as a shell reads it: the same run from a terminal.
        output_dir: the run's folder (plan.json, profile.json, metrics.jsonl, checkpoints).
        exit_status: 0 (finished) or 75 (stopped by a signal after a checkpoint: ``resume=True``
            goes on).
        metrics: metrics.jsonl's lines, one dict per step (``step``, ``loss``, ``step_s``, ...).
        plan: the plan the run trained with.
        state_dict: the trained weights and buffers under the chain's own keys (on the CPU).
    """
    command: str
    output_dir: str
    exit_status: int
    metrics: list
    plan: Plan
    state_dict: dict

    @property
    def stopped(self):
        """True when a signal stopped the run before its last step (it resumes)."""
        return self.exit_status == EXIT_STOPPED_RESUMABLE

    def __repr__(self):
        last = self.metrics[-1] if self.metrics else {}
        return (f"TrainingRun({len(self.metrics)} steps in {self.output_dir!r}, last loss "
                f"{last.get('loss', float('nan')):.4g}, {'stopped' if self.stopped else 'finished'})")


def _command_path(given, variable, name):
    path = given or os.environ.get(variable) or shutil.which(name)
    if not path:
        raise Error(f"{name}: not found on PATH (set {variable} or pass its path)", kind="io",
                    field=name, problem=f"not found on PATH (set {variable} or pass its path)")
    path = os.fspath(path)
    return os.path.abspath(path) if os.sep in path else path  # the printed command runs anywhere


def _option_flags(options):
    """{"clip_grad_norm": 1.0, "plain_loop": True} -> ["--clip-grad-norm", "1.0", "--plain-loop"]."""
    flags = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is not False and value is not None:
            flags += [flag, str(value)]
    return flags


def train_command(model_file, data_file, *, gpus, output_dir, loss, steps, micro_batches,
                  micro_batch_size, madpipe, launcher, options):
    """The argument list of the run: ``launcher -np GPUS madpipe train --model script ...``."""
    return [*launcher, "-np", str(gpus), madpipe, "train", "--model", "script", "--script",
            model_file, "--loss", loss, "--data", data_file, "--data-format", "tensors",
            "--gpus", str(gpus), "--steps", str(steps), "--micro-batches", str(micro_batches),
            "--micro-batch-size", str(micro_batch_size), "--output-dir", output_dir,
            *_option_flags(options)]


def _default_launcher():
    """mpirun, allowed to run as root (containers) and to put more ranks than cores on a machine
    (CPU ranks)."""
    launcher = [_command_path(None, "MADPIPE_MPIRUN", "mpirun"), "--oversubscribe"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        launcher.append("--allow-run-as-root")
    return launcher


def train(chain, inputs, targets, *, gpus, output_dir, loss="cross-entropy", steps=100,
          micro_batches=8, micro_batch_size=None, progress=print, madpipe=None, launcher=None,
          **options):
    """Trains ``chain`` on (inputs, targets) with ``madpipe train`` on ``gpus`` MPI ranks.

    Args:
        chain: a scriptable ``nn.Sequential`` (or any module ``torch.jit.script`` takes whose
            forward is a chain: docs/runtime.md#scriptable-chains).
        inputs, targets: the samples, row r of each is sample r (the last tenth validates).
        gpus: pipeline ranks (MPI processes).
        output_dir: the run's folder; the scripted model and data are written there too.
        loss: ``"cross-entropy"`` (int64 targets) or ``"mse"``.
        steps, micro_batches: training steps, micro-batches per step.
        micro_batch_size: samples per micro-batch (default: ``inputs`` rows // (10 *
            micro_batches), at least 1: ten steps per epoch).
        progress: receives each line the run prints (default ``print``; None: silent).
        madpipe: the madpipe command (default: $MADPIPE_BIN, else ``madpipe`` on PATH).
        launcher: the launcher's argument list before ``-np`` (default: ``mpirun
            --oversubscribe``, with ``--allow-run-as-root`` as root; e.g. ``["srun"]``).
        options: any other ``madpipe train`` option, by its name with underscores:
            ``memory="8GiB"``, ``device="cuda"``, ``optimizer="sgd"``, ``learning_rate=0.01``,
            ``clip_grad_norm=1.0``, ``precision="bf16"``, ``resume=True``...

    Returns:
        a ``TrainingRun``. Raises ``madpipe.Error`` (kind ``"runtime"``, with ``exit_status``)
        when the run fails, its message the run's last lines.
    """
    if loss not in _LOSSES:
        raise Error(f"loss: expected one of {', '.join(_LOSSES)}, got {loss!r}", field="loss",
                    problem=f"expected one of {', '.join(_LOSSES)}, got {loss!r}")
    if len(inputs) != len(targets):
        raise Error(f"targets: {len(targets)} rows, but inputs has {len(inputs)}", field="targets",
                    problem=f"{len(targets)} rows, but inputs has {len(inputs)}")
    micro_batch_size = micro_batch_size or max(1, len(inputs) // (10 * micro_batches))
    output_dir = os.path.abspath(os.fspath(output_dir))
    os.makedirs(output_dir, exist_ok=True)
    model_file = os.path.join(output_dir, "model.pt")
    data_file = os.path.join(output_dir, "data.pt")
    with warnings.catch_warnings():  # TorchScript is what the native runtime loads
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.jit")
        torch.jit.save(torch.jit.script(chain), model_file)
    torch.save({"inputs": inputs, "targets": targets}, data_file)
    madpipe = _command_path(madpipe, "MADPIPE_BIN", "madpipe")
    launcher = list(launcher) if launcher is not None else _default_launcher()
    command = train_command(model_file, data_file, gpus=gpus, output_dir=output_dir, loss=loss,
                            steps=steps, micro_batches=micro_batches,
                            micro_batch_size=micro_batch_size, madpipe=madpipe, launcher=launcher,
                            options=options)
    shell_command = shlex.join(command)
    say = progress or (lambda line: None)
    say(f"$ {shell_command}")
    status, reasons = _run_streaming(command, say)
    if status not in (0, EXIT_STOPPED_RESUMABLE):
        error = Error(f"madpipe train failed (exit status {status}):\n" + "\n".join(reasons),
                      kind="runtime", problem="\n".join(reasons))
        error.exit_status = status
        raise error
    weights = os.path.join(output_dir, "model_state.pt")
    subprocess.run([madpipe, "export-weights", "--run", output_dir, "--output", weights],
                   check=True, capture_output=True, text=True)
    with open(os.path.join(output_dir, "metrics.jsonl")) as file:
        metrics = [json.loads(line) for line in file if line.strip()]
    return TrainingRun(command=shell_command, output_dir=output_dir, exit_status=status,
                       metrics=metrics, plan=Plan.load(os.path.join(output_dir, "plan.json")),
                       state_dict=torch.load(weights, map_location="cpu"))


# What madpipe says when it fails: "madpipe: error: ..." before MPI starts, "rank N: ..." after.
_REASON = re.compile(r"^(madpipe: (internal )?error: |rank \d+: )")


def _run_streaming(command, say, kept=12):
    """Runs ``command``, passing each line of its stdout and stderr to ``say``; returns its exit
    status and why it failed: madpipe's error lines, one per distinct message, else the last
    ``kept`` lines (the launcher's own, when madpipe said nothing)."""
    tail, reasons = [], {}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as process:
        for line in process.stdout:
            line = line.rstrip("\n")
            say(line)
            tail = (tail + [line])[-kept:]
            if _REASON.match(line):  # every rank says it alike: once per message
                reasons.setdefault(re.sub(r"^rank \d+: ", "", line), line)
    return process.returncode, list(reasons.values()) or tail
