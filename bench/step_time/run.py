#!/usr/bin/env python3
"""The synchronous step of every algorithm against the schedules' formulas and the step's lower bound.

    bench/step_time/run.py [--madpipe build/madpipe] [--gpus 4,8,16] [--profiles]

Part 1, uniform chains: 2P layers of F = 1, B = 2 (split into I = 1 and W = 1) ms, so that a GPU
holding two layers has the zero-bubble paper's F = B = W = 2 ms. Each layer stores 1000 bytes of
which W keeps 100, or nothing ("nothing stored"). For m = P, 2P, 4P micro-batches per step it
plans with each algorithm and `--micro-batches m` and prints the plan's predicted step (the
runtime's order, `madpipe plan`'s `step` line) next to the formulas: 1F1B (p - 1 + m)(F + B + W),
ZB-H1 (p - 1)(F + B - W) + m(F + B + W) (here the isolated step's lower bound with one stage per
GPU), interleaved 1F1B with two chunks per GPU m(F + B + W) + (p - 1)(F + B + W) / 2, and ZB-V
from m = 2p - 1 on (p - 1) F / 2 + m(F + B + W), the lower bound of any step of these chains.
`1f1b` and `interleaved` plan whole backwards (the profile without its split), the others the
split.

Part 2 (--profiles), the shipped profiles with an estimated split
(bench/split_backward/split_profile.py) at a loose and a tight memory: step of every algorithm,
of madpipe with --scheduler ilp (the step ILP within the 30 s limit), and the step's lower bound
(m times the busiest GPU's load after the unavoidable fill).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ALGORITHMS = ["1f1b", "interleaved", "zb-h1", "zb-v", "madpipe"]
WHOLE_BACKWARD = {"1f1b", "interleaved"}
STEP_LINE = re.compile(r"^step\s+([0-9.]+) ms .*; lower bound ([0-9.]+) ms", re.M)


def uniform_profile(path, gpus, stored, split):
    layers = []
    for index in range(2 * gpus):
        layer = {"name": "l%d" % index, "forward_ms": 1.0, "backward_ms": 2.0,
                 "weight_bytes": 1000, "output_bytes": 1, "saved_bytes": stored}
        if split:
            layer.update({"backward_input_ms": 1.0, "backward_weight_ms": 1.0,
                          "backward_weight_kept_bytes": stored // 10})
        layers.append(layer)
    profile = {"format": "madpipe.profile/1", "name": "uniform%d" % gpus, "device": "model",
               "dtype": "float32", "batch": 1, "input_bytes": 1, "layers": layers}
    with open(path, "w") as out:
        json.dump(profile, out)


def planned_step(madpipe, profile, gpus, memory, bandwidth, algorithm, micro_batches, work,
                 extra=()):
    """(step ms, lower bound ms) of the plan, or None where the algorithm has no plan."""
    command = [madpipe, "plan", "--profile", profile, "--gpus", str(gpus), "--memory", memory,
               "--bandwidth", bandwidth, "--algorithm", algorithm,
               "--micro-batches", str(micro_batches), "--time-limit", "30",
               "--output", os.path.join(work, "plan.json")] + list(extra)
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        return None
    found = STEP_LINE.search(run.stdout)
    if not found:
        sys.exit("no step line in the output of: " + " ".join(command) + "\n" + run.stdout)
    return float(found.group(1)), float(found.group(2))


def text(result):
    return "-" if result is None else "%.0f" % result[0]


def uniform_tables(madpipe, gpu_counts, work):
    for stored, label in ((1000, "1000 B stored, W keeps 100"), (0, "nothing stored")):
        print("\n### Uniform chains, %s (ms)\n" % label)
        print("| P, m | 1F1B formula | interleaved formula | ZB-H1 formula | ZB-V formula "
              "(m >= 2P - 1) = lower bound | " + " | ".join("`%s`" % a for a in ALGORITHMS) + " |")
        print("|---" * (5 + len(ALGORITHMS)) + "|")
        for gpus in gpu_counts:
            whole = os.path.join(work, "whole%d_%d.json" % (gpus, stored))
            split = os.path.join(work, "split%d_%d.json" % (gpus, stored))
            uniform_profile(whole, gpus, stored, False)
            uniform_profile(split, gpus, stored, True)
            for m in (gpus, 2 * gpus, 4 * gpus):
                cells = []
                for algorithm in ALGORITHMS:
                    profile = whole if algorithm in WHOLE_BACKWARD else split
                    cells.append(text(planned_step(madpipe, profile, gpus, "1GiB", "1000GB/s",
                                                   algorithm, m, work)))
                zb_v = "%d" % (6 * m + gpus - 1) if m >= 2 * gpus - 1 else "-"
                print("| %d, %d | %d | %d | %d | %s | %s |" % (
                    gpus, m, 6 * (gpus - 1 + m), 6 * m + 3 * (gpus - 1), 2 * (gpus - 1) + 6 * m,
                    zb_v, " | ".join(cells)))


def profile_tables(madpipe, work):
    settings = [("gpt2_xl16", 4, ["12GiB", "6GiB"], "12GB/s"),
                ("resnet50", 4, ["32GiB", "12GiB"], "12GB/s")]
    print("\n### Shipped profiles with an estimated split (ms; lower bound of the step)\n")
    print("| profile, P, memory, m | " + " | ".join("`%s`" % a for a in ALGORITHMS)
          + " | `madpipe --scheduler ilp` | lower bound |")
    print("|---" * (3 + len(ALGORITHMS)) + "|")
    for name, gpus, memories, bandwidth in settings:
        source = os.path.join(ROOT, "configs", "profiles", name + ".json")
        split = os.path.join(work, name + "-split.json")
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "split_backward",
                                                     "split_profile.py"), source, split],
                       check=True, capture_output=True)
        for memory in memories:
            for m in (gpus, 2 * gpus):
                cells, bound = [], None
                for algorithm in ALGORITHMS:
                    profile = source if algorithm in WHOLE_BACKWARD else split
                    result = planned_step(madpipe, profile, gpus, memory, bandwidth, algorithm,
                                          m, work)
                    cells.append(text(result))
                    if result is not None and algorithm == "madpipe":
                        bound = result[1]
                cells.append(text(planned_step(madpipe, split, gpus, memory, bandwidth, "madpipe",
                                               m, work, ["--scheduler", "ilp"])))
                print("| %s, %d, %s, %d | %s | %s |" % (
                    name, gpus, memory, m, " | ".join(cells),
                    "-" if bound is None else "%.0f" % bound))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--madpipe", default=os.path.join(ROOT, "build", "madpipe"))
    parser.add_argument("--gpus", default="4,8,16",
                        help="comma-separated GPU counts of the uniform chains")
    parser.add_argument("--profiles", action="store_true",
                        help="also the shipped profiles (slower: real planning)")
    args = parser.parse_args()
    if not os.access(args.madpipe, os.X_OK):
        sys.exit("no madpipe binary at %s (build it, or give --madpipe)" % args.madpipe)
    gpu_counts = [int(g) for g in args.gpus.split(",")]
    with tempfile.TemporaryDirectory() as work:
        uniform_tables(args.madpipe, gpu_counts, work)
        if args.profiles:
            profile_tables(args.madpipe, work)


if __name__ == "__main__":
    main()
