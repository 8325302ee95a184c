#!/usr/bin/env python3
"""Fingerprints and periods of every plan the `madpipe plan` command makes, to catch plans that got slower.

Runs `madpipe plan` for every shipped profile and for --random seeded random chains (6 to 30
layers), P in 2/4/8, three memories per P (1, 2 and 4 times the profile's stored bytes per GPU,
so that some requests are refused and some are tight), every algorithm, and remat none and rotor
(DenseNet-121: none only, its ROTOR tables are slow), and records the period of each plan and the
SHA-256 of the written plan (or of the error message when nothing fits) and of the summary
printed on stdout. What depends on the machine's speed is left out: the solver's seconds and the
"planned in" line. Requests cut by the time limit, with an ILP stopped at its wall-clock limit, or
refused with a with-remat hint whose few seconds of search were cut short (on a loaded machine
one run cuts it and another does not), are recorded as `cut` and never compared.

  plan_fingerprints.py --madpipe build/madpipe --write before.tsv
  plan_fingerprints.py --madpipe build/madpipe --compare before.tsv
  plan_fingerprints.py --profiles resnet50,gpt2_small --random 0 ...   (some profiles only)
  plan_fingerprints.py --algorithms madpipe,contiguous ...             (some algorithms only)

--compare lists the plans that got slower (a longer period, or refused where a plan was made:
exit status 1), those that got faster, and those that changed at the same period (a
refactoring changes none).
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import pathlib
import random
import re
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
PROFILES = sorted((REPO / "configs" / "profiles").glob("*.json"))
GPUS = (2, 4, 8)
MEMORY_FACTORS = (1.0, 2.0, 4.0)
ALGORITHMS = ("madpipe", "contiguous", "pipedream", "1f1b", "gpipe", "interleaved", "zb-h1", "zb-v",
              "ilp")
REMATS = ("none", "rotor")
TIME_LIMIT_S = 120


def stored_bytes(profile):
    layers = json.loads(profile.read_text())["layers"]
    return sum(3 * l["weight_bytes"] + l["saved_bytes"] + l["output_bytes"] for l in layers)


def random_profile(index, directory):
    """A seeded random chain: times in [0.5, 5] ms, weights and activations in [1, 100] MB."""
    rng = random.Random(1000 + index)
    mb = 1_000_000
    layers = [{"name": f"layer{l}", "forward_ms": round(rng.uniform(0.5, 5), 4),
               "backward_ms": round(rng.uniform(1, 10), 4),
               "weight_bytes": rng.randint(1, 100) * mb, "output_bytes": rng.randint(1, 100) * mb,
               "saved_bytes": rng.randint(0, 100) * mb}
              for l in range(rng.randint(6, 30))]
    name = f"random{index:02d}"
    path = pathlib.Path(directory) / f"{name}.json"
    path.write_text(json.dumps({"format": "madpipe.profile/1", "name": name, "device": "random",
                                "dtype": "float32", "batch": 1, "input_bytes": 10 * mb,
                                "layers": layers}))
    return path


def cases(profiles, algorithms=ALGORITHMS):
    for profile in profiles:
        total = stored_bytes(profile)
        for gpus in GPUS:
            for factor in MEMORY_FACTORS:
                memory = int(total / gpus * factor)
                for algorithm in algorithms:
                    # The full ILP is only practical on short chains and few GPUs.
                    if algorithm == "ilp" and (gpus > 4 or profile.stem == "densenet121"):
                        continue
                    for remat in REMATS:
                        if remat != "none" and profile.stem == "densenet121":
                            continue
                        yield profile, gpus, memory, algorithm, remat


def digest(data):
    return hashlib.sha256(data).hexdigest()[:16]


def case_key(profile, gpus, memory, algorithm, remat):
    return f"{profile.stem}\tP{gpus}\t{memory}\t{algorithm}\t{remat}"


def run_case(madpipe, case):
    profile, gpus, memory, algorithm, remat = case
    key = case_key(*case)
    with tempfile.TemporaryDirectory() as tmp:
        plan = pathlib.Path(tmp) / "plan.json"
        command = [madpipe, "plan", "--profile", str(profile), "--gpus", str(gpus), "--memory",
                   str(memory), "--bandwidth", "12GB/s", "--algorithm", algorithm, "--remat", remat,
                   "--time-limit", str(TIME_LIMIT_S), "-q", "-o", str(plan)]
        done = subprocess.run(command, capture_output=True)
        # A request or one of its ILPs stopped by the clock: what it kept depends on the machine.
        output = done.stdout + done.stderr
        if any(mark in output for mark in (b"cut planning short", b"stopped at its wall-clock limit",
                                           b"the time limit stopped the solver",
                                           b"(the search was cut short)")):
            return key, "cut", "-", "-"
        stdout = b"\n".join(
            re.sub(rb" in [0-9.]+ s,", b",", line) for line in done.stdout.splitlines()
            if not line.startswith((b"planned in", b"plan written to")))
        if done.returncode == 0 and plan.exists():
            written = json.loads(plan.read_text())
            written.get("solver", {}).pop("seconds", None)
            period = repr(written["predicted"]["period_ms"])
            return (key, "plan:" + digest(json.dumps(written, sort_keys=True).encode()),
                    digest(stdout), period)
        return key, f"exit{done.returncode}:" + digest(done.stderr), digest(stdout), "-"


def compare(before, results):
    """Prints the cases that got slower, faster or changed; returns how many got slower."""
    slower, faster, changed, compared, skipped = [], [], [], 0, 0
    for key, (plan, summary, period) in results.items():
        then = before.get(key)
        if then is None or "cut" in (then[0], plan):
            skipped += 1
            continue
        compared += 1
        then_plan, then_summary, then_period = then
        if (then_plan, then_summary) == (plan, summary):
            continue
        line = f"  {key}: {then_period} -> {period} ms"
        if then_period == "-" and period == "-":
            changed.append(line + " (refused both times, another message)")
        elif period == "-":
            slower.append(line + " (refused now)")
        elif then_period == "-":
            faster.append(line + " (refused before)")
        elif float(period) > float(then_period) * (1 + 1e-9):
            slower.append(line + f" ({float(period) / float(then_period):.4f}x)")
        elif float(period) < float(then_period) * (1 - 1e-9):
            faster.append(line + f" ({float(period) / float(then_period):.4f}x)")
        else:
            changed.append(line)
    skipped += len(before) - len(results)
    print(f"{compared} cases compared: {len(slower)} slower, {len(faster)} faster, "
          f"{len(changed)} changed at the same period; {skipped} not compared "
          f"(cut by the time limit, or new)")
    for title, lines in (("slower (a failure)", slower), ("faster", faster),
                         ("changed at the same period", changed)):
        if lines:
            print(f"{title}:")
            print("\n".join(lines))
    return len(slower)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--madpipe", default=str(REPO / "build" / "madpipe"))
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="FILE")
    mode.add_argument("--compare", metavar="FILE")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--profiles", help="comma-separated names of shipped profiles (default: all)")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS),
                        help="comma-separated algorithms to plan with (default: all)")
    parser.add_argument("--random", type=int, default=6, metavar="N",
                        help="seeded random profiles to plan as well (default: 6)")
    args = parser.parse_args()

    profiles = PROFILES
    if args.profiles:
        names = args.profiles.split(",")
        unknown = sorted(set(names) - {p.stem for p in PROFILES})
        if unknown:
            parser.error(f"--profiles: no shipped profile {', '.join(unknown)} "
                         f"(shipped: {', '.join(p.stem for p in PROFILES)})")
        profiles = [p for p in PROFILES if p.stem in names]
    with tempfile.TemporaryDirectory() as random_dir:
        profiles = profiles + [random_profile(i, random_dir) for i in range(args.random)]
        algorithms = args.algorithms.split(",")
        unknown = sorted(set(algorithms) - set(ALGORITHMS))
        if unknown:
            parser.error(f"--algorithms: no algorithm {', '.join(unknown)} "
                         f"(known: {', '.join(ALGORITHMS)})")
        all_cases = list(cases(profiles, algorithms))
        before = {}
        if args.compare:
            for number, line in enumerate(pathlib.Path(args.compare).read_text().splitlines(), 1):
                fields = line.split("\t")
                if len(fields) != 8:
                    sys.exit(f"{args.compare}:{number}: expected 8 tab-separated fields (a file "
                             f"written by --write), found {len(fields)}")
                before["\t".join(fields[:5])] = tuple(fields[5:])
            # Cases the time limit cut before cannot be compared: not run again.
            all_cases = [c for c in all_cases if before.get(case_key(*c), ("cut",))[0] != "cut"]
        results = {}
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for i, (key, plan, summary, period) in enumerate(
                    pool.map(lambda c: run_case(args.madpipe, c), all_cases), 1):
                results[key] = (plan, summary, period)
                if i % 25 == 0 or i == len(all_cases):
                    print(f"plan_fingerprints: {i}/{len(all_cases)} cases", file=sys.stderr)

    if args.write:
        lines = [f"{key}\t{plan}\t{summary}\t{period}"
                 for key, (plan, summary, period) in results.items()]
        pathlib.Path(args.write).write_text("\n".join(lines) + "\n")
        outcomes = [plan.split(":")[0] for plan, _, _ in results.values()]
        print(f"{len(lines)} cases: {outcomes.count('plan')} plans, "
              f"{sum(o.startswith('exit') for o in outcomes)} refusals, "
              f"{outcomes.count('cut')} cut by the time limit")
        return 0
    return 1 if compare(before, results) else 0


if __name__ == "__main__":
    sys.exit(main())
