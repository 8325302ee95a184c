"""Start-up time and resident memory of the planning commands: `madpipe` (the planner alone)
against `madpipe-runtime` (the same commands with LibTorch, CUDA and MPI linked in), in one run.

    .venv/bin/python bench/startup/run.py [BUILD_DIR] [REPEATS]

Each command runs REPEATS times (default 10), the two programs alternating; the table gives the
median wall time and the peak resident set (the kernel's ru_maxrss of each run, median) and their
ratios. The numbers depend on the machine and its page cache: compare within one run.
"""

import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def measure(argv):
    """(seconds, peak resident bytes) of one run of argv, its output discarded."""
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execv(argv[0], argv)
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(argv)}")
    return seconds, usage.ru_maxrss * 1024


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "build")
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    programs = {"madpipe": os.path.join(build, "madpipe"),
                "madpipe-runtime": os.path.join(build, "madpipe-runtime")}
    profile = os.path.join(REPO, "configs", "profiles", "gpt2_small.json")
    commands = {"--version": ["--version"],
                "plan gpt2_small 4 GPUs": ["plan", "--profile", profile, "--gpus", "4",
                                           "--memory", "16GiB", "--bandwidth", "12GB/s",
                                           "--quiet"]}
    print(f"{'command':<24}{'program':<17}{'wall ms':>10}{'peak RSS MiB':>14}")
    for label, args in commands.items():
        runs = {name: [] for name in programs}
        for _ in range(repeats):
            for name, path in programs.items():
                runs[name].append(measure([path, *args]))
        medians = {name: (statistics.median(s for s, _ in r), statistics.median(m for _, m in r))
                   for name, r in runs.items()}
        for name, (seconds, rss) in medians.items():
            print(f"{label:<24}{name:<17}{seconds * 1e3:>10.1f}{rss / 2**20:>14.1f}")
        light, full = medians["madpipe"], medians["madpipe-runtime"]
        print(f"{label:<24}{'ratio':<17}{light[0] / full[0]:>10.3f}{light[1] / full[1]:>14.3f}")


if __name__ == "__main__":
    main()
