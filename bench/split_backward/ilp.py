#!/usr/bin/env python3
"""The full ILP (ilp) with and without split backwards, beside madpipe, on small random chains.

For each random chain (8 layers, split as in compare.py), 2 and 4 GPUs at 12 GB/s, memory at 1.0
and 1.1 times the least that 1f1b needs with whole backwards, prints one table row per plan:
madpipe and ilp, each with --split-backward auto and off: period per micro-batch, whether the plan
kept W ops, planning time. Needs the madpipe Python package (PYTHONPATH=build/python) and a MILP
backend.

    ilp.py [--chains N] [--layers L] [--time-limit S]
"""
import argparse
import os
import random
import sys

import madpipe

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import BANDWIDTH, gib, random_chain  # noqa: E402


def has_weight_ops(plan):
    return plan is not None and any(op.get("kind") == "W" for op in plan.to_dict()["pattern"]["ops"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=2, help="random chains (default 2)")
    parser.add_argument("--layers", type=int, default=8, help="layers per chain (default 8)")
    parser.add_argument("--time-limit", type=float, default=30.0)
    args = parser.parse_args()
    rng = random.Random(7)
    split_wins = cases = 0
    for index in range(args.chains):
        profile = madpipe.Profile(random_chain(rng, index, layers=args.layers))
        for gpus in (2, 4):
            floor = madpipe.smallest_feasible_memory(profile, gpus=gpus, bandwidth=BANDWIDTH,
                                                     algorithm="1f1b", split_backward="off")
            if floor is None:
                continue
            for share in (1.0, 1.1):
                memory = int(floor * share)
                print(f"\n### random{index} ({args.layers} layers), {gpus} GPUs, "
                      f"{share:.1f} x the least memory of 1f1b ({gib(memory)})\n")
                print("| algorithm | split-backward | period (ms) | W ops | planning (s) |")
                print("|---|---|---:|---|---:|")
                periods = {}
                for algorithm in ("madpipe", "ilp"):
                    for split in ("auto", "off"):
                        result = madpipe.compare(profile, gpus=gpus, memory=memory,
                                                 bandwidth=BANDWIDTH, algorithms=(algorithm,),
                                                 time_limit=args.time_limit,
                                                 split_backward=split)[0]
                        periods[algorithm, split] = result.period_ms
                        period = ("does not fit" if result.period_ms is None
                                  else f"{result.period_ms:.2f}")
                        kept = "yes" if has_weight_ops(result.plan) else "no"
                        print(f"| {algorithm} | {split} | {period} | {kept} | "
                              f"{result.planning_seconds:.2f} |", flush=True)
                cases += 1
                auto, off = periods["ilp", "auto"], periods["ilp", "off"]
                if auto is not None and (off is None or auto < off * (1 - 1e-6)):
                    split_wins += 1
    print(f"\n{cases} cases: the split shortened ilp's period in {split_wins}")


if __name__ == "__main__":
    main()
