"""Tests of check_doc_examples.py: what it reads from Markdown, how it compares, and that a
document whose output drifted fails the check."""

import os
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_doc_examples as checker  # noqa: E402

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_doc_examples.py")
FENCE = "```"


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def test_reads_commands_their_continuations_and_outputs(tmp_path):
    doc = tmp_path / "doc.md"
    write(str(doc), f"Intro\n\n{FENCE}\n$ madpipe plan --profile a.json \\\n    --gpus 2\nperiod 1 ms\n"
                    f"$ madpipe show --plan p.json\nshown\n{FENCE}\n\n"
                    f"<!-- doc-check: skip (slow) -->\n{FENCE}\n$ madpipe compare\nx\n{FENCE}\n")
    examples = checker.parse_examples(str(doc))
    assert [e.command for e in examples] == ["madpipe plan --profile a.json  --gpus 2",
                                              "madpipe show --plan p.json", "madpipe compare"]
    assert examples[0].expected == ["period 1 ms"]
    assert examples[1].expected == ["shown"]
    assert [e.skipped_by_mark for e in examples] == [False, False, True]


def test_only_planner_commands_are_run():
    assert checker.planner_subcommand("build/madpipe plan --gpus 2 | head -3") == "plan"
    assert checker.planner_subcommand("madpipe --help") == "--help"
    assert checker.planner_subcommand("mpirun -np 2 build/madpipe train") is None
    assert checker.planner_subcommand("madpipe train --config c.ini") is None
    assert checker.planner_subcommand("madpipe profile --config c.ini") is None
    assert checker.planner_subcommand("madpipe profile --analytic c.json --seq 8") == "profile"


def test_durations_blanks_cuts_and_progress_lines_do_not_count():
    shown = ["plan: 1.3 s: madpipe-dp, best none yet, 8.7 s left", "period   64.00 ms", "...",
             "planned in   1.00 s", "",
             "algorithm  period (ms)  planning (s)", "madpipe         64.00          0.20"]
    printed = ["plan: 0.4 s: schedule, best none yet, 9.6 s left", "period 64.00 ms",
               "throughput 15.62", "planned in  12.31 s", "",
               "algorithm  period (ms)  planning (s)", "madpipe         64.00          3.75"]
    assert checker.first_mismatch(shown, printed) is None


def test_a_changed_number_or_order_is_a_mismatch():
    shown = ["period   64.00 ms", "memory 3.8 GiB"]
    assert checker.first_mismatch(shown, ["period 64.00 ms", "memory 3.9 GiB"]) == "memory 3.8 GiB"
    assert checker.first_mismatch(shown, ["memory 3.8 GiB", "period 64.00 ms"]) == "memory 3.8 GiB"
    # Outside a table whose header ends in "(s)", a last number is not a duration.
    assert checker.first_mismatch(["madpipe 64.00 0.20"], ["madpipe 64.00 0.30"]) is not None


def check_fake_repository(tmp_path, guide, fake_madpipe, files=None):
    """Runs the checker on a repository whose docs/guide.md is `guide`, with a `madpipe` that is
    the bash script `fake_madpipe`; `files` maps more repository paths to their text."""
    root = tmp_path / "repo"
    for name in ("configs", "tests", "docs"):
        os.makedirs(str(root / name), exist_ok=True)
    write(str(root / "README.md"), "# Fake\n")
    write(str(root / "docs" / "guide.md"), guide)
    for path, text in (files or {}).items():
        write(str(root / path), text)
    fake = tmp_path / "madpipe"
    write(str(fake), "#!/bin/bash\n" + fake_madpipe)
    os.chmod(str(fake), os.stat(str(fake)).st_mode | stat.S_IEXEC)
    return subprocess.run([sys.executable, CHECKER, "--madpipe", str(fake), "--root", str(root)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)


def run_checker(tmp_path, output_line):
    return check_fake_repository(
        tmp_path,
        f"{FENCE}\n$ build/madpipe plan --output p.json\nperiod 2.00 ms\n"
        f"$ madpipe show --plan p.json\nplan p.json\n{FENCE}\n"
        f"{FENCE}\n$ madpipe simulate --plan missing.json\nsimulated\n{FENCE}\n",
        "if [ \"$1\" = plan ]; then echo x > \"$3\"; echo '" + output_line + "'; fi\n"
        "if [ \"$1\" = show ]; then cat \"$3\" > /dev/null && echo \"plan $3\"; fi\n")


def test_a_document_that_matches_passes_and_a_later_example_reads_an_earlier_output(tmp_path):
    result = run_checker(tmp_path, "period  2.00 ms")
    assert result.returncode == 0, result.stdout
    assert "ok    docs/guide.md:2" in result.stdout
    assert "ok    docs/guide.md:4" in result.stdout
    assert "skip  docs/guide.md:8: needs missing.json" in result.stdout
    assert "2 examples run, 0 failed, 1 skipped" in result.stdout


def test_a_document_whose_output_drifted_fails(tmp_path):
    result = run_checker(tmp_path, "period 2.50 ms")
    assert result.returncode == 1, result.stdout
    assert "FAIL  docs/guide.md:2: shown line not printed: 'period 2.00 ms'" in result.stdout
    assert "| period 2.50 ms" in result.stdout


def test_an_image_that_differs_from_the_committed_one_fails(tmp_path):
    result = check_fake_repository(
        tmp_path, f"{FENCE}\n$ madpipe show --svg docs/img/plan.svg\nSVG written\n{FENCE}\n",
        "echo '<svg>new</svg>' > \"$3\"; echo 'SVG written'\n",
        {"docs/img/plan.svg": "<svg>old</svg>\n"})
    assert result.returncode == 1, result.stdout
    assert "docs/img/plan.svg differs from what the command draws now" in result.stdout


def test_an_example_that_reads_a_missing_repository_file_fails(tmp_path):
    result = check_fake_repository(
        tmp_path,
        f"{FENCE}\n$ madpipe plan --profile configs/profiles/typo.json\nperiod 1 ms\n{FENCE}\n",
        "echo 'period 1 ms'\n")
    assert result.returncode == 1, result.stdout
    assert "reads configs/profiles/typo.json, which the repository does not have" in result.stdout
