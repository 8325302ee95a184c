#!/usr/bin/env python3
"""Runs the planner examples of the documentation and checks that they still print what the
documents say they print.

An example is a fenced code block whose lines start with `$ madpipe ...` or `$ build/madpipe ...`
followed by the output shown. Every shown output line (normalized: runs of blanks are one blank,
durations in seconds are masked) must appear, in order, in what the command prints now; the
documents may leave lines out (`...`, or a `sed`/`grep`/`head` in the command). Commands run in
document order in a scratch directory, so a later example reads the plan an earlier one wrote.
An image an example draws into docs/img/ must equal the committed one.

Only planner commands are run (plan, compare, sweep, simulate, remat, memplan, scale, show,
export, --help, and profile --analytic, which models instead of measuring): they need no MPI and
are deterministic. A block preceded by the comment
`<!-- doc-check: skip (why) -->` is not run. Commands that read a file no earlier example of
their document wrote (a training run's trace, a measured profile) are skipped and listed, unless
the document shows them failing.

usage: check_doc_examples.py --madpipe BUILD/madpipe --root REPO [--list] [FILE.md ...]
"""

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

PLANNER_COMMANDS = {"plan", "compare", "sweep", "simulate", "remat", "memplan", "scale", "show",
                    "export", "--help"}
SKIP_MARK = re.compile(r"<!--\s*doc-check:\s*skip\b")
SECONDS = re.compile(r"\b\d+(\.\d+)?\s?s\b")
NUMBER = re.compile(r"\d+(\.\d+)?")
CUT_MARKS = ("...", "\u2026")
PROGRESS = re.compile(r"^(plan|compare|sweep|scale|remat|memplan): ")
FILE_OPTIONS = ("--profile", "--plan", "--trace", "--config")


class Example:
    def __init__(self, path, line, command, expected, skipped_by_mark):
        self.path = path
        self.line = line
        self.command = command
        self.expected = expected
        self.skipped_by_mark = skipped_by_mark

    def where(self):
        return f"{self.path}:{self.line}"


def parse_examples(path):
    """Yields the examples of one Markdown file: each `$ ` command with the lines shown after it."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    examples = []
    in_block = False
    marked = False
    previous_text = ""
    current = None
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("```"):
            if in_block:
                in_block = False
                current = None
            else:
                in_block = True
                marked = bool(SKIP_MARK.search(previous_text))
            index += 1
            continue
        if not in_block:
            if line.strip():
                previous_text = line
            index += 1
            continue
        if line.startswith("$ "):
            start = index + 1
            command = line[2:]
            while command.endswith("\\") and index + 1 < len(lines):
                index += 1
                command = command[:-1] + " " + lines[index].strip()
            current = Example(path, start, command, [], marked)
            examples.append(current)
        elif current is not None:
            current.expected.append(line)
        index += 1
    return examples


def planner_subcommand(command):
    """The madpipe subcommand of a planner example, or None for anything else."""
    try:
        words = shlex.split(command.split("|")[0])
    except ValueError:
        return None
    if not words or words[0] not in ("madpipe", "build/madpipe"):
        return None
    if len(words) < 2:
        return None
    if words[1] == "profile" and "--analytic" in words:
        return "profile"
    return words[1] if words[1] in PLANNER_COMMANDS else None


def missing_inputs(command, workdir, unwritten):
    """Files the command reads that no earlier example of its document wrote. An absolute path
    is outside the scratch directory: whatever is there depends on the machine."""
    words = shlex.split(command.split("|")[0])
    missing = []
    for option, value in zip(words, words[1:]):
        if option in FILE_OPTIONS and (os.path.isabs(value) or value in unwritten
                                       or not os.path.exists(os.path.join(workdir, value))):
            missing.append(value)
    return missing


def outputs(command):
    """Files the command writes."""
    words = shlex.split(command.split("|")[0])
    return {value for option, value in zip(words, words[1:])
            if option in ("--output", "-o", "--svg", "--csv", "--chrome")}


def stale_images(command, workdir, root):
    """The images of docs/img/ that the command writes and that differ from the committed ones."""
    stale = []
    for path in sorted(outputs(command)):
        if not path.startswith("docs/img/"):
            continue
        written, committed = os.path.join(workdir, path), os.path.join(root, path)
        if not os.path.exists(written):
            continue  # the example failed before drawing it: its output says why
        if not os.path.exists(committed):
            stale.append(path + " (not committed)")
            continue
        with open(written, "rb") as new, open(committed, "rb") as old:
            if new.read() != old.read():
                stale.append(path)
    return stale


def normalize(lines):
    """Lines as compared: blanks collapsed, durations masked, progress lines dropped.

    A duration is a number of seconds ("0.12 s") or a number in the last column of a table whose
    header ends with "(s)" (the planning time of `compare` and `sweep`). Progress lines ("plan:
    2.6 s: ...") are printed as time passes, so how many there are depends on the machine.
    """
    normalized = []
    timed_table = False
    for line in lines:
        words = line.split()
        if not words:
            timed_table = False
            continue
        if words[0] in CUT_MARKS or PROGRESS.match(line):
            continue
        if line.rstrip().endswith("(s)"):
            timed_table = True
        elif timed_table and NUMBER.fullmatch(words[-1]):
            words[-1] = "<seconds>"
        normalized.append(SECONDS.sub("<seconds>", " ".join(words)))
    return normalized


def first_mismatch(expected, actual):
    """The first shown line (after cuts) not found in order in the actual output, or None."""
    wanted = normalize(expected)
    got = normalize(actual)
    position = 0
    for shown in wanted:
        while position < len(got) and got[position] != shown:
            position += 1
        if position == len(got):
            return shown
        position += 1
    return None


def make_workdir(root, madpipe):
    workdir = tempfile.mkdtemp(prefix="madpipe-doc-check.")
    for name in ("configs", "tests"):
        os.symlink(os.path.join(root, name), os.path.join(workdir, name))
    os.makedirs(os.path.join(workdir, "build"))
    os.makedirs(os.path.join(workdir, "docs", "img"))
    os.symlink(madpipe, os.path.join(workdir, "build", "madpipe"))
    bindir = os.path.join(workdir, ".bin")
    os.makedirs(bindir)
    os.symlink(madpipe, os.path.join(bindir, "madpipe"))
    return workdir, bindir


def run_example(example, workdir, bindir):
    env = dict(os.environ)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["COLUMNS"] = "100"
    # Without pipefail: `| head -5` may stop madpipe with SIGPIPE; the shown lines are the test.
    result = subprocess.run(["bash", "-c", example.command], cwd=workdir,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=600)
    return result.returncode, result.stdout.splitlines()


def expects_failure(example):
    return any(line.startswith("madpipe: error") for line in example.expected)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--madpipe", required=True, help="the madpipe binary to run")
    parser.add_argument("--root", required=True, help="the repository root")
    parser.add_argument("--list", action="store_true", help="list the examples, run nothing")
    parser.add_argument("files", nargs="*", help="Markdown files (default: README.md, docs/*.md)")
    args = parser.parse_args()

    root = os.path.abspath(args.root)
    madpipe = os.path.abspath(args.madpipe)
    files = args.files or ["README.md"] + sorted(
        os.path.join("docs", name) for name in os.listdir(os.path.join(root, "docs"))
        if name.endswith(".md"))

    checked, skipped, failures = 0, [], []
    for name in files:
        # Each document runs in a directory of its own: its examples build on each other only.
        workdir, bindir = make_workdir(root, madpipe)
        unwritten = set()
        try:
            for example in parse_examples(os.path.join(root, name)):
                example.path = name
                if planner_subcommand(example.command) is None:
                    continue
                if example.skipped_by_mark:
                    skipped.append(f"{example.where()}: marked skip")
                    unwritten |= outputs(example.command)
                    continue
                missing = missing_inputs(example.command, workdir, unwritten)
                lost = [m for m in missing if m.startswith(("configs/", "tests/"))
                        and not expects_failure(example)]
                if lost:
                    failures.append((example, f"reads {', '.join(lost)}, which the repository "
                                              "does not have", []))
                    continue
                # An example shown failing on a missing file runs (the failure is the point).
                if missing and not (expects_failure(example)
                                    and not any(os.path.isabs(m) for m in missing)):
                    skipped.append(f"{example.where()}: needs {', '.join(missing)}")
                    unwritten |= outputs(example.command)
                    continue
                if args.list:
                    print(f"{example.where()}: {example.command}")
                    continue
                rc, output = run_example(example, workdir, bindir)
                checked += 1
                mismatch = first_mismatch(example.expected, output)
                if rc != 0 and not expects_failure(example):
                    failures.append((example, f"exit status {rc}", output))
                elif mismatch is not None:
                    failures.append((example, f"shown line not printed: {mismatch!r}", output))
                elif stale_images(example.command, workdir, root):
                    stale = ", ".join(stale_images(example.command, workdir, root))
                    failures.append((example, f"{stale} differs from what the command draws now "
                                              "(run it from the repository root)", output))
                else:
                    print(f"ok    {example.where()}", flush=True)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    for line in skipped:
        print(f"skip  {line}")
    for example, why, output in failures:
        print(f"FAIL  {example.where()}: {why}\n      $ {example.command}")
        for line in output[:60]:
            print(f"      | {line}")
    print(f"{checked} examples run, {len(failures)} failed, {len(skipped)} skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
