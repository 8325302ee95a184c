"""Results of bench/peers: madpipe's metrics as a result file, and the table of all results.

    python report.py madpipe --run DIR --ranks R --warmup W --steps S --output r.json
    python report.py unavailable|failed --system NAME --ranks R --reason TEXT --output r.json
    python report.py table RESULT.json ...
    python report.py line RESULT.json         (one result in one line)
    python report.py trace DIR/trace.json     (madpipe train's trace: each rank's busy time per
                                               step, each stage's forward and backward times)

A result file is a JSON object with at least "system", "ranks" and "samples_per_s" (or
"unavailable" / "failed" and a reason). The table has one row per rank count and system: the
best and the median samples/s over its runs, and their ratios to the best
torch.distributed.pipelining schedule at that rank count (best to best, median to median); for
madpipe, the samples/s its plan predicted (from the trace: one step of the plan simulated on the
profile it measured).
"""
import argparse
import json
import statistics
import sys

TORCH_ORDER = ["torch gpipe", "torch 1f1b", "torch interleaved"]
ORDER = TORCH_ORDER + ["madpipe train", "madpipe plan in torch"]


def madpipe_result(args):
    """samples/s of `madpipe train` over steps W+1..W+S from its metrics.jsonl, whose "seconds"
    are the time since training began, read on rank 0 after each step; and what the trace and the
    plan predicted."""
    lines = [json.loads(line) for line in open(f"{args.run}/metrics.jsonl")]
    seconds = {line["step"]: line["seconds"] for line in lines}
    last = args.warmup + args.steps
    if last not in seconds:
        raise SystemExit(f"{args.run}/metrics.jsonl has no step {last}")
    elapsed = seconds[last] - seconds.get(args.warmup, 0.0)
    plan = json.load(open(f"{args.run}/plan.json"))
    samples = args.micro_batches * args.micro_batch_size
    result = {
        "system": "madpipe train", "ranks": args.ranks, "steps": args.steps,
        "warmup": args.warmup, "samples_per_step": samples, "seconds": elapsed,
        "samples_per_s": args.steps * samples / elapsed, "threads": 1,
        "stages": len(plan["stages"]),
        "split": [[s["first_layer"], s["last_layer"], s["gpu"]] for s in plan["stages"]],
        "first_loss": lines[0]["loss"], "last_loss": lines[-1]["loss"],
        "step_seconds_rank0": [b["seconds"] - a["seconds"] for a, b in zip([{"seconds": 0}] + lines,
                                                                           lines)],
    }
    try:
        trace = json.load(open(f"{args.run}/trace.json"))
        result["predicted_step_ms"] = trace["predicted"]["step_ms"]
        result["predicted_period_ms"] = trace["predicted"]["period_ms"]
        result["traced_step_ms"] = trace["summary"]["step_ms"]
        result["traced_period_ms"] = trace["summary"]["measured_period_ms"]
        result["predicted_samples_per_s"] = samples / trace["predicted"]["step_ms"] * 1e3
    except (OSError, KeyError):
        pass
    write(result, args.output)


def missing(args):
    """A leg that could not run (unavailable) or did not finish (failed)."""
    write({"system": args.system, "ranks": args.ranks, args.command: args.reason}, args.output)


def write(result, path):
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


def table(args):
    rows = {}
    for path in args.results:
        try:
            r = json.load(open(path))
        except (OSError, ValueError) as e:
            print(f"report: skipping {path}: {e}", file=sys.stderr)
            continue
        rows.setdefault((r["ranks"], r["system"]), []).append(r)
    print(f"{'ranks':>5}  {'system':<22} {'runs':>4} {'best':>7} {'median':>7}  {'best/torch':>10}"
          f" {'median/torch':>12}  {'predicted':>9}  {'loss':>12}")
    for ranks in sorted({k[0] for k in rows}):
        speeds = {s: [r["samples_per_s"] for r in results if "samples_per_s" in r]
                  for (n, s), results in rows.items() if n == ranks}
        torch = {s: v for s, v in speeds.items() if s in TORCH_ORDER and v}
        best_torch = max((max(v) for v in torch.values()), default=None)
        median_torch = max((statistics.median(v) for v in torch.values()), default=None)
        for system in sorted(speeds, key=lambda s: (ORDER.index(s) if s in ORDER else len(ORDER),
                                                    s)):
            results, ok = rows[(ranks, system)], speeds[system]
            if not ok:
                why = next((r.get("unavailable") or r.get("failed") for r in results), "")
                word = "not available" if any("unavailable" in r for r in results) else "failed"
                print(f"{ranks:>5}  {system:<22} {word}: {why}")
                continue
            best, median = max(ok), statistics.median(ok)
            vs_best = f"{best / best_torch:.2f}x" if best_torch else "-"
            vs_median = f"{median / median_torch:.2f}x" if median_torch else "-"
            predicted = [r["predicted_samples_per_s"] for r in results
                         if "predicted_samples_per_s" in r]
            predicted = f"{statistics.median(predicted):.1f}" if predicted else ""
            first = next(r for r in results if "samples_per_s" in r)
            losses = f"{first['first_loss']:.2f}->{first['last_loss']:.2f}"
            print(f"{ranks:>5}  {system:<22} {len(ok):>4} {best:>7.1f} {median:>7.1f}  "
                  f"{vs_best:>10} {vs_median:>12}  {predicted:>9}  {losses:>12}")


def trace(args):
    """What a madpipe trace says about where a step's time goes, rank by rank."""
    t = json.load(open(args.trace))
    ops, ranks = t["ops"], t["ranks"]
    steps = sorted({o["step"] for o in ops})
    print(f"predicted step {t['predicted']['step_ms']:.1f} ms, period "
          f"{t['predicted']['period_ms']:.2f} ms per micro-batch; measured step "
          f"{t['summary']['step_ms']:.1f} ms, period {t['summary']['measured_period_ms']:.2f} ms")
    for step in steps[1:] if len(steps) > 1 else steps:
        mine = [o for o in ops if o["step"] == step]
        span = max(o["end_ms"] for o in mine) - min(o["start_ms"] for o in mine)
        busy = [sum(o["end_ms"] - o["start_ms"] for o in mine if o["rank"] == r)
                for r in range(ranks)]
        print(f"step {step}: {span:.1f} ms from its first op to its last; compute per rank (ms): "
              + " ".join(f"{b:.1f}" for b in busy))
    times = {}
    for o in ops:
        if o["step"] > steps[0] or len(steps) == 1:
            times.setdefault((o["stage"], o["rank"], o["kind"]), []).append(o["end_ms"] -
                                                                             o["start_ms"])
    for (stage, rank, kind), v in sorted(times.items()):
        print(f"stage {stage} on rank {rank} {kind}: median {statistics.median(v):.2f} ms "
              f"(min {min(v):.2f}, max {max(v):.2f}, {len(v)} ops)")
    waits = [x["end_ms"] - x["start_ms"] for x in t["transfers"] if x["step"] > steps[0]]
    if waits:
        print(f"transfers: {len(waits)}, from post to in hand: median "
              f"{statistics.median(waits):.2f} ms, max {max(waits):.2f} ms")


def line(args):
    """One result as one line: its samples/s, or why it has none."""
    try:
        r = json.load(open(args.result))
    except (OSError, ValueError) as e:
        print(f"  no result: {e}")
        return
    if "samples_per_s" in r:
        print(f"  {r['samples_per_s']:.1f} samples/s")
    else:
        word = "not available" if "unavailable" in r else "failed"
        print(f"  {word}: {r.get('unavailable') or r.get('failed')}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    m = commands.add_parser("madpipe")
    m.add_argument("--run", required=True)
    m.add_argument("--ranks", type=int, required=True)
    m.add_argument("--warmup", type=int, required=True)
    m.add_argument("--steps", type=int, required=True)
    m.add_argument("--micro-batches", type=int, required=True)
    m.add_argument("--micro-batch-size", type=int, required=True)
    m.add_argument("--output", required=True)
    for name in ("unavailable", "failed"):
        u = commands.add_parser(name)
        u.add_argument("--system", required=True)
        u.add_argument("--ranks", type=int, required=True)
        u.add_argument("--reason", required=True)
        u.add_argument("--output", required=True)
    t = commands.add_parser("table")
    t.add_argument("results", nargs="*")
    r = commands.add_parser("trace")
    r.add_argument("trace")
    o = commands.add_parser("line")
    o.add_argument("result")
    args = parser.parse_args()
    {"madpipe": madpipe_result, "unavailable": missing, "failed": missing, "table": table,
     "trace": trace, "line": line}[args.command](args)


if __name__ == "__main__":
    main()
