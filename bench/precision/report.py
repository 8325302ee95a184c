"""Compares an fp32 and a bf16 training run of the same model (madpipe train output dirs).

    python report.py FP32_RUN BF16_RUN [--output DIR]

Prints, per rank, the measured peak tensor memory (trace.json), the plan's prediction
(plan.json) and their activation shares: the peak less the rank's weight-sized copies (the
profile's weight bytes of its layers times the plan's weight copies). Writes DIR/losses.csv
(step, fp32 loss, bf16 loss) and DIR/losses.svg (both curves).
"""
import argparse
import json
import os


def load(run):
    plan = json.load(open(os.path.join(run, "plan.json")))
    profile = json.load(open(os.path.join(run, "profile.json")))
    trace = json.load(open(os.path.join(run, "trace.json")))
    losses = {}
    for line in open(os.path.join(run, "metrics.jsonl")):
        record = json.loads(line)
        losses[record["step"]] = record["loss"]
    return plan, profile, trace, losses


def weight_bytes_per_rank(plan, profile):
    per_rank = [0] * plan["platform"]["gpus"]
    for stage in plan["stages"]:
        for layer in range(stage["first_layer"], stage["last_layer"] + 1):
            per_rank[stage["gpu"]] += profile["layers"][layer]["weight_bytes"]
    return [plan["platform"]["weight_copies"] * b for b in per_rank]


def memory_rows(name, plan, profile, trace):
    weights = weight_bytes_per_rank(plan, profile)
    rows = []
    for rank, (measured, predicted) in enumerate(
            zip(trace["memory"], plan["predicted"]["memory_bytes"])):
        peak = measured["peak_bytes"]
        rows.append((name, rank, peak, predicted, peak - weights[rank], predicted - weights[rank]))
    return rows


def svg(curves, path, width=640, height=360, margin=40):
    steps = sorted(set().union(*(c.keys() for _, c in curves)))
    values = [v for _, c in curves for v in c.values()]
    low, high = min(values), max(values)
    x = lambda s: margin + (s - steps[0]) / max(1, steps[-1] - steps[0]) * (width - 2 * margin)
    y = lambda v: height - margin - (v - low) / max(1e-12, high - low) * (height - 2 * margin)
    colors = ["#1f77b4", "#d62728"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{margin}" y="20" font-size="13">training loss per step '
             f'({steps[0]}..{steps[-1]}; {low:.2f} to {high:.2f})</text>']
    for (name, curve), color in zip(curves, colors):
        points = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in sorted(curve.items()))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.2" points="{points}"/>')
        parts.append(f'<text x="{width - margin - 60}" y="{40 + 16 * colors.index(color)}" '
                     f'font-size="12" fill="{color}">{name}</text>')
    parts.append("</svg>")
    with open(path, "w") as out:
        out.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fp32")
    parser.add_argument("bf16")
    parser.add_argument("--output", default=".")
    args = parser.parse_args()
    fp32, bf16 = load(args.fp32), load(args.bf16)
    print("| run | rank | measured peak | plan | activations measured | activations planned |")
    print("|---|---|---|---|---|---|")
    rows = memory_rows("fp32", *fp32[:3]) + memory_rows("bf16", *bf16[:3])
    kib = lambda b: f"{b / 1024:.0f} KiB"
    for name, rank, peak, planned, act, act_planned in rows:
        print(f"| {name} | {rank} | {kib(peak)} | {kib(planned)} | {kib(act)} | {kib(act_planned)} |")
    half = [b[4] / a[4] for a, b in zip(rows[:len(rows) // 2], rows[len(rows) // 2:]) if a[4] > 0]
    print(f"bf16 / fp32 measured activations per rank: " + ", ".join(f"{r:.2f}" for r in half))
    steps = sorted(set(fp32[3]) & set(bf16[3]))
    with open(os.path.join(args.output, "losses.csv"), "w") as out:
        out.write("step,fp32,bf16\n")
        for s in steps:
            out.write(f"{s},{fp32[3][s]:.6f},{bf16[3][s]:.6f}\n")
    svg([("fp32", fp32[3]), ("bf16", bf16[3])], os.path.join(args.output, "losses.svg"))
    last = steps[-1]
    print(f"loss at step {last}: fp32 {fp32[3][last]:.4f}, bf16 {bf16[3][last]:.4f} "
          f"(relative difference {abs(bf16[3][last] - fp32[3][last]) / fp32[3][last]:.1%})")
    print(f"wrote {args.output}/losses.csv and losses.svg")
