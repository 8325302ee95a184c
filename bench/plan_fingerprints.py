#!/usr/bin/env python3
"""Fingerprints of every plan the `madpipe plan` command makes on the shipped profiles.

Runs `madpipe plan` for every shipped profile, P in 2/4/8, three memories per P (1, 2 and 4 times
the profile's stored bytes per GPU, so that some requests are refused and some are tight), every
algorithm, and remat none and rotor (DenseNet-121: none only, its ROTOR tables are slow), and
records the SHA-256 of the written plan (or of the error message when nothing fits) and of the
summary printed on stdout. What depends on the machine's speed is left out: the solver's seconds
and the "planned in" line. Requests cut by the time limit, with an ILP stopped at its wall-clock
limit, or refused with a with-remat hint whose few seconds of search were cut short (on a loaded
machine one run cuts it and another does not), are recorded as `cut` and never compared.

  plan_fingerprints.py --madpipe build/madpipe --write before.tsv
  plan_fingerprints.py --madpipe build/madpipe --compare before.tsv
  plan_fingerprints.py --profiles resnet50,gpt2_small ...   (those shipped profiles only)

--compare exits with status 1 and lists the cases whose fingerprints differ.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import pathlib
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


def cases(profiles):
    for profile in profiles:
        total = stored_bytes(profile)
        for gpus in GPUS:
            for factor in MEMORY_FACTORS:
                memory = int(total / gpus * factor)
                for algorithm in ALGORITHMS:
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
            return key, "cut", "-"
        stdout = b"\n".join(
            re.sub(rb" in [0-9.]+ s,", b",", line) for line in done.stdout.splitlines()
            if not line.startswith((b"planned in", b"plan written to")))
        if done.returncode == 0 and plan.exists():
            written = json.loads(plan.read_text())
            written.get("solver", {}).pop("seconds", None)
            return key, "plan:" + digest(json.dumps(written, sort_keys=True).encode()), digest(stdout)
        return key, f"exit{done.returncode}:" + digest(done.stderr), digest(stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--madpipe", default=str(REPO / "build" / "madpipe"))
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="FILE")
    mode.add_argument("--compare", metavar="FILE")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--profiles", help="comma-separated names of shipped profiles (default: all)")
    args = parser.parse_args()

    profiles = PROFILES
    if args.profiles:
        names = args.profiles.split(",")
        unknown = sorted(set(names) - {p.stem for p in PROFILES})
        if unknown:
            parser.error(f"--profiles: no shipped profile {', '.join(unknown)} "
                         f"(shipped: {', '.join(p.stem for p in PROFILES)})")
        profiles = [p for p in PROFILES if p.stem in names]
    all_cases = list(cases(profiles))
    before = {}
    if args.compare:
        for line in pathlib.Path(args.compare).read_text().splitlines():
            *key, plan, summary = line.split("\t")
            before["\t".join(key)] = (plan, summary)
        # Cases the time limit cut before cannot be compared: not run again.
        all_cases = [c for c in all_cases if before.get(case_key(*c), ("cut",))[0] != "cut"]
    results = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for i, (key, plan, summary) in enumerate(
                pool.map(lambda c: run_case(args.madpipe, c), all_cases), 1):
            results[key] = (plan, summary)
            if i % 25 == 0 or i == len(all_cases):
                print(f"plan_fingerprints: {i}/{len(all_cases)} cases", file=sys.stderr)

    lines = [f"{key}\t{plan}\t{summary}" for key, (plan, summary) in results.items()]
    if args.write:
        pathlib.Path(args.write).write_text("\n".join(lines) + "\n")
        outcomes = [plan.split(":")[0] for plan, _ in results.values()]
        print(f"{len(lines)} cases: {outcomes.count('plan')} plans, "
              f"{sum(o.startswith('exit') for o in outcomes)} refusals, "
              f"{outcomes.count('cut')} cut by the time limit")
        return 0

    differ, compared, skipped = [], 0, 0
    for key, now in results.items():
        then = before.get(key)
        if then is None or "cut" in (then[0], now[0]):
            skipped += 1
            continue
        compared += 1
        if then != now:
            differ.append(f"  {key}: {then[0]} {then[1]} -> {now[0]} {now[1]}")
    skipped += len(before) - len(results)
    print(f"{compared} cases compared, {len(differ)} differ, {skipped} not compared "
          f"(cut by the time limit, or new)")
    if differ:
        print("\n".join(differ))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
