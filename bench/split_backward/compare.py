#!/usr/bin/env python3
"""madpipe with and without split backwards against today's schedules, on one platform each.

For each profile (the shipped ones with an estimated split, see split_profile.py, and random
chains), 4 and 8 GPUs, loose memory (80 GB), tight memory (10% above the least 1F1B needs) and
the least 1F1B needs, prints one table row per algorithm: period per micro-batch, ratio to the lower bound, largest GPU
memory, planning time. "madpipe" may split backwards (--split-backward auto), "madpipe, whole"
may not. Needs the madpipe Python package (PYTHONPATH=build/python).

    compare.py [--profiles DIR] [--random N] [--time-limit S]
"""
import argparse
import glob
import os
import random
import sys

import madpipe

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from split_profile import split_profile  # noqa: E402

BASELINES = ("1f1b", "interleaved", "zb-h1", "zb-v")
BANDWIDTH = "12GB/s"
LOOSE = 80 * 10**9


def random_chain(rng, index, layers=24):
    """A heterogeneous chain: times 0.5-5 ms (B about twice F), 1-100 MB tensors."""
    out = []
    for l in range(layers):
        forward = rng.uniform(0.5, 5.0)
        out.append({
            "name": f"layer{l}", "forward_ms": forward,
            "backward_ms": forward * rng.uniform(1.5, 2.5),
            "weight_bytes": rng.randint(10**6, 10**8) if rng.random() < 0.8 else 0,
            "output_bytes": rng.randint(10**6, 10**8),
            "saved_bytes": rng.randint(0, 10**8),
        })
    profile = {"format": "madpipe.profile/1", "name": f"random{index}", "device": "synthetic",
               "dtype": "float32", "batch": 1, "input_bytes": rng.randint(10**6, 10**8),
               "layers": out}
    return split_profile(profile, rng.uniform(0.3, 0.7))


def gib(size):
    return f"{size / 2**30:.1f} GiB"


def row(name, period, bound, memory, seconds):
    if period is None:
        return f"| {name} | does not fit | | | {seconds:.2f} |"
    return f"| {name} | {period:.2f} | {period / bound:.3f} | {gib(memory)} | {seconds:.2f} |"


def compare_one(profile, gpus, memory, time_limit):
    bound = madpipe.lower_bound(profile, gpus=gpus, bandwidth=BANDWIDTH)
    lines = []
    results = madpipe.compare(profile, gpus=gpus, memory=memory, bandwidth=BANDWIDTH,
                              algorithms=("madpipe",) + BASELINES, time_limit=time_limit)
    whole = madpipe.compare(profile, gpus=gpus, memory=memory, bandwidth=BANDWIDTH,
                            algorithms=("madpipe",), time_limit=time_limit,
                            split_backward="off")[0]
    periods = {}
    for result in results[:1] + [whole] + results[1:]:
        name = result.algorithm
        if result is whole:
            name = "madpipe, whole"
        elif name == "madpipe" and result.plan is not None:
            split = any(op.get("kind") == "W" for op in result.plan.to_dict()["pattern"]["ops"])
            partial = any("partial split is kept" in note for note in result.plan.notes)
            name = ("madpipe, partial split" if partial else
                    "madpipe, split" if split else "madpipe (no split kept)")
        periods[result.algorithm if result is not whole else "whole"] = result.period_ms
        lines.append(row(name, result.period_ms, bound, result.max_memory_bytes,
                         result.planning_seconds))
    return lines, periods


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--profiles", default=os.path.join(here, "..", "..", "configs", "profiles"))
    parser.add_argument("--random", type=int, default=4, help="random chains (default 4)")
    parser.add_argument("--time-limit", type=float, default=10.0)
    args = parser.parse_args()
    profiles = []
    for path in sorted(glob.glob(os.path.join(args.profiles, "*.json"))):
        profile = madpipe.read_profile(path).to_dict()
        profiles.append(madpipe.Profile(split_profile(profile, 0.5)))
    rng = random.Random(20261127)
    profiles += [madpipe.Profile(random_chain(rng, i)) for i in range(args.random)]
    wins = never_worse = cases = 0
    for profile in profiles:
        for gpus in (4, 8):
            floor = madpipe.smallest_feasible_memory(profile, gpus=gpus, bandwidth=BANDWIDTH,
                                                     algorithm="1f1b", split_backward="off")
            for label, memory in (("loose", LOOSE),
                                  ("tight", None if floor is None else int(floor * 1.1)),
                                  ("1f1b's least", floor)):
                if memory is None:
                    continue
                name = profile.to_dict()["name"]
                print(f"\n### {name}, {gpus} GPUs, {label} memory ({gib(memory)})\n")
                print("| algorithm | period (ms) | vs bound | max GPU memory | planning (s) |")
                print("|---|---:|---:|---:|---:|")
                lines, periods = compare_one(profile, gpus, memory, args.time_limit)
                print("\n".join(lines))
                cases += 1
                best = periods.get("madpipe")
                if best is not None and periods.get("whole") is not None and \
                        best < periods["whole"] * (1 - 1e-6):
                    wins += 1
                baseline = [periods[b] for b in BASELINES if periods.get(b) is not None]
                if best is not None and all(best <= p * (1 + 1e-9) for p in baseline):
                    never_worse += 1
    print(f"\n{cases} cases: the split shortened madpipe's period in {wins}; madpipe at or "
          f"below every baseline in {never_worse}")


if __name__ == "__main__":
    main()
