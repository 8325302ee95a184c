#!/usr/bin/env python3
"""Converts a PipeDream profiler graph.txt (a DAG of torch modules) into a madpipe.profile/1 chain,
for planning held-out models whose per-layer profiles PipeDream published.

graph.txt format (PipeDream, profiler/image_classification/profiles/<model>/graph.txt):
  nodeN -- <module repr> -- forward_compute_time=<ms>, backward_compute_time=<ms>,
           activation_size=<bytes>, parameter_size=<bytes>
  \tnodeA -- nodeB          (edge: A's output is consumed by B)

The DAG is cut into a chain only where a single tensor is live (so each residual block becomes
one layer).  A layer's forward/backward times are the sums of its nodes', weight_bytes the sum
of parameter sizes, output_bytes the activation_size of its last (output) node, saved_bytes the
sum of the activation sizes of its other (inner) nodes.  The Input node is not a layer: its
activation_size is input_bytes and its forward_compute_time (data loading) is dropped.

usage: make_pipedream_profile.py graph.txt out.json [--name resnet101] [--batch 64] [--merge-relu]
"""
import argparse
import heapq
import json
import re
from collections import defaultdict

NODE_RE = re.compile(
    r"^(node\d+) -- (.*) -- forward_compute_time=([\d.eE+-]+), backward_compute_time=([\d.eE+-]+),"
    r" activation_size=([\d.eE+-]+), parameter_size=([\d.eE+-]+)\s*$")
EDGE_RE = re.compile(r"^\s+(node\d+) -- (node\d+)\s*$")


def parse(path):
    nodes, edges = {}, []
    for line in open(path):
        if not line.strip():
            continue
        m = EDGE_RE.match(line)
        if m:
            edges.append((m.group(1), m.group(2)))
            continue
        m = NODE_RE.match(line)
        if not m:
            raise SystemExit(f"unparsed line: {line!r}")
        nid, desc, f, b, a, p = m.groups()
        nodes[nid] = dict(id=nid, desc=desc, fwd=float(f), bwd=float(b), act=float(a), param=float(p))
    return nodes, edges


def topo(nodes, edges):
    succ, indeg = defaultdict(list), {n: 0 for n in nodes}
    for a, b in edges:
        succ[a].append(b)
        indeg[b] += 1
    key = lambda n: int(n[4:])
    heap = [(key(n), n) for n in nodes if indeg[n] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, n = heapq.heappop(heap)
        order.append(n)
        for s in succ[n]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (key(s), s))
    if len(order) != len(nodes):
        raise SystemExit("graph has a cycle")
    return order, succ


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("graph")
    ap.add_argument("out")
    ap.add_argument("--name", default="resnet101")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--merge-relu", action="store_true",
                    help="attach the ReLU that follows a residual Add to its block (torchvision's "
                         "Bottleneck ends with it)")
    args = ap.parse_args()

    nodes, edges = parse(args.graph)
    order, succ = topo(nodes, edges)
    pos = {n: i for i, n in enumerate(order)}
    last_use = {n: max((pos[s] for s in succ[n]), default=-1) for n in order}

    inputs = [n for n in order if nodes[n]["desc"] == "Input"]
    assert len(inputs) == 1 and order[0] == inputs[0], "expected one Input node first"
    input_bytes = int(nodes[inputs[0]]["act"])

    # cut after position i iff exactly one tensor produced at <= i is consumed after i
    groups, cur = [], []
    for i, n in enumerate(order[1:], start=1):
        cur.append(n)
        live = [m for m in order[: i + 1] if last_use[m] > i]
        if not live or (len(live) == 1 and live[0] == n):
            groups.append(cur)
            cur = []
    assert not cur
    if args.merge_relu:
        merged = []
        for g in groups:
            if (merged and len(g) == 1 and nodes[g[0]]["desc"].startswith("ReLU")
                    and nodes[merged[-1][-1]]["desc"].startswith("Add")):
                merged[-1] = merged[-1] + g
            else:
                merged.append(g)
        groups = merged

    layers = []
    for g in groups:
        out = g[-1]
        kinds = [nodes[n]["desc"].split("(")[0] for n in g]
        if len(g) == 1:
            name = f"{kinds[0]}.{out}"
        elif "Add" in kinds:
            name = f"block.{g[0]}-{out}"
        else:
            name = f"{'+'.join(kinds)}.{g[0]}-{out}"
        layers.append({
            "name": name,
            "forward_ms": round(sum(nodes[n]["fwd"] for n in g), 6),
            "backward_ms": round(sum(nodes[n]["bwd"] for n in g), 6),
            "weight_bytes": int(sum(nodes[n]["param"] for n in g)),
            "output_bytes": int(nodes[out]["act"]),
            "saved_bytes": int(sum(nodes[n]["act"] for n in g[:-1])),
        })

    prof = {
        "format": "madpipe.profile/1",
        "name": args.name,
        "device": "(PipeDream's published profile; GPU not stated)",
        "dtype": "float32",
        "source": f"PipeDream profiler graph {args.graph}, cut where a single tensor is live "
                  "(bench/make_pipedream_profile.py); the Input node's time dropped",
        "batch": args.batch,
        "input_bytes": input_bytes,
        "layers": layers,
    }
    with open(args.out, "w") as f:
        json.dump(prof, f, indent=1)
        f.write("\n")
    tf = sum(l["forward_ms"] for l in layers)
    tb = sum(l["backward_ms"] for l in layers)
    tw = sum(l["weight_bytes"] for l in layers)
    print(f"{len(nodes)} nodes, {len(edges)} edges -> {len(layers)} layers; "
          f"sum F={tf:.3f} ms, sum B={tb:.3f} ms, (F+B)/4={(tf + tb) / 4:.3f} ms, "
          f"weights={tw / 2**20:.1f} MiB, input_bytes={input_bytes}")


if __name__ == "__main__":
    main()
