"""Tabulates bench/llm/run.sh: one row per (model, P, memory, remat, algorithm), and the split
torchtitan makes by default (equal blocks per stage, the embedding and the head counted as one
block each) as a row per (model, P): the busiest of its stages, which its 1F1B period cannot beat.
Writes OUT/table.md, OUT/planning-time.svg (planning time of the whole comparison against P) and
OUT/planning-time-length.svg (planning time of one `madpipe plan` on 64 GPUs against the chain's
length).

    python bench/llm/report.py OUT_DIR
"""
import csv
import glob
import json
import os
import re
import sys


def torchtitan_busiest_ms(profile, gpus):
    """Busiest stage (forward + backward) of an even split of the profile's layers into stages."""
    layers = profile["layers"]
    costs = [layer["forward_ms"] + layer["backward_ms"] for layer in layers]
    base, extra = divmod(len(costs), gpus)
    busiest, first = 0.0, 0
    for stage in range(gpus):
        size = base + (1 if stage < extra else 0)
        busiest = max(busiest, sum(costs[first:first + size]))
        first += size
    return busiest


def gib(text):
    return f"{int(text) / 2**30:.1f}" if text else "-"


def main(out):
    cases = sorted(glob.glob(os.path.join(out, "*.csv")))
    pattern = re.compile(r"(?P<model>.+)-p(?P<gpus>\d+)-(?P<memory>\d+GiB)-(?P<remat>\w+)\.csv$")
    rows, walls = [], {}
    for path in cases:
        m = pattern.match(os.path.basename(path))
        if not m:
            continue
        with open(path[:-4] + ".wall") as f:
            start, end = map(float, f.read().split())
        key = (m["model"], int(m["gpus"]), m["memory"], m["remat"])
        walls[key] = end - start
        with open(path) as f:
            for r in csv.DictReader(f):
                rows.append((key, r))
    # With --remat rotor, `compare` plans each algorithm without and with it: the plain plan's
    # columns, then the period with rematerialization.
    lines = ["| model | P | memory | remat | algorithm | period (ms) | vs bound | max GPU memory (GiB) "
             "| planning (s) | with remat (ms) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for key, r in sorted(rows, key=lambda kr: (kr[0][0], kr[0][1], kr[0][2], kr[0][3])):
        model, gpus, memory, remat = key
        ok = r["status"] == "ok"
        with_remat = r.get("remat_period_ms") or ""
        with_remat = f"{float(with_remat):.2f}" if with_remat else "-"
        lines.append(f"| {model} | {gpus} | {memory} | {remat} | {r['algorithm']} | "
                     f"{float(r['period_ms']):.2f} | {float(r['ratio_to_lower_bound']):.3f} | "
                     f"{gib(r['max_memory_bytes'])} | {r['planning_s']} | {with_remat} |" if ok else
                     f"| {model} | {gpus} | {memory} | {remat} | {r['algorithm']} | {r['status']} "
                     f"| - | - | {r['planning_s']} | {with_remat} |")
    lines += ["", "Planning time of each whole comparison (every algorithm), in seconds:", "",
              "| model | P | memory | remat | seconds |", "|---|---|---|---|---|"]
    for key in sorted(walls):
        lines.append("| " + " | ".join(map(str, key)) + f" | {walls[key]:.1f} |")
    lines += ["", "torchtitan's default split (even stages, embedding and head one block each): "
              "busiest stage, which its 1F1B period cannot beat:", "",
              "| model | P | busiest stage (ms) |", "|---|---|---|"]
    for profile_path in sorted(glob.glob(os.path.join(out, "*.json"))):
        with open(profile_path) as f:
            profile = json.load(f)
        model = os.path.basename(profile_path)[:-5]
        for gpus in sorted({k[1] for k in walls if k[0] == model}):
            lines.append(f"| {model} | {gpus} | {torchtitan_busiest_ms(profile, gpus):.2f} |")
    for scale in sorted(glob.glob(os.path.join(out, "*-scale.txt"))):
        with open(scale) as f:
            lines += ["", f"`madpipe scale` on 64 GPUs, {os.path.basename(scale)[:-10]}:", "",
                      "```", f.read().rstrip(), "```"]
    lengths = {}
    for wall in glob.glob(os.path.join(out, "blocks*", "wall")):
        directory = os.path.dirname(wall)
        with open(wall) as f:
            start, end = map(float, f.read().split())
        with open(os.path.join(directory, "profile.json")) as f:
            layers = len(json.load(f)["layers"])
        with open(os.path.join(directory, "plan.txt")) as f:
            text = f.read()
        period = re.search(r"^period +([0-9.]+) ms", text, re.M)
        cut = re.search(r"cut planning short: (.*?); a longer", text)
        lengths[layers] = (end - start, period[1] if period else "no plan",
                           cut[1] if cut else "nothing cut")
    if lengths:
        lines += ["", "One `madpipe plan` on 64 GPUs of 80 GiB against the chain's length "
                  "(Llama-3-70B-shaped blocks, the embedding and the head):", "",
                  "| layers | seconds | period (ms) | cut by the time limit |", "|---|---|---|---|"]
        for layers in sorted(lengths):
            seconds, period, cut = lengths[layers]
            lines.append(f"| {layers} | {seconds:.1f} | {period} | {cut} |")
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    write_plot(walls, os.path.join(out, "planning-time.svg"))
    if lengths:
        write_series_plot({"llama3-70b, P = 64": sorted((l, s) for l, (s, _, _) in lengths.items())},
                          "layers (L)", "planning time of a plan (s)",
                          os.path.join(out, "planning-time-length.svg"))
    print("\n".join(lines))


def write_plot(walls, path):
    """Planning time against P, one line per model (80 GiB, no remat)."""
    series = {}
    for (model, gpus, memory, remat), seconds in walls.items():
        if memory == "80GiB" and remat == "none":
            series.setdefault(model, []).append((gpus, seconds))
    if series:
        write_series_plot(series, "GPUs (P)", "planning time of a comparison (s)", path)


def write_series_plot(series, x_label, y_label, path):
    """One polyline per series of (x, seconds) points, x values evenly spaced."""
    width, height, margin = 480, 300, 50
    top = max(s for points in series.values() for _, s in points) * 1.1 or 1
    ps = sorted({p for points in series.values() for p, _ in points})
    x = lambda p: margin + (width - 2 * margin) * ps.index(p) / max(1, len(ps) - 1)
    y = lambda s: height - margin - (height - 2 * margin) * s / top
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">',
             f'<line x1="{margin}" y1="{height - margin}" x2="{width - margin}" '
             f'y2="{height - margin}" stroke="black"/>',
             f'<line x1="{margin}" y1="{margin}" x2="{margin}" y2="{height - margin}" '
             f'stroke="black"/>',
             f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle">{x_label}</text>',
             f'<text x="12" y="{margin - 15}">{y_label}</text>']
    for p in ps:
        parts.append(f'<text x="{x(p)}" y="{height - margin + 15}" text-anchor="middle">{p}</text>')
    for tick in range(5):
        s = top * tick / 4
        parts.append(f'<text x="{margin - 5}" y="{y(s) + 4}" text-anchor="end">{s:.0f}</text>')
    for i, (model, points) in enumerate(sorted(series.items())):
        points.sort()
        color = colors[i % len(colors)]
        path_d = " ".join(f"{x(p):.1f},{y(s):.1f}" for p, s in points)
        parts.append(f'<polyline points="{path_d}" fill="none" stroke="{color}" stroke-width="2"/>')
        parts.append(f'<text x="{width - margin + 5}" y="{y(points[-1][1]):.1f}" '
                     f'fill="{color}">{model}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
