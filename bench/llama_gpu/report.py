#!/usr/bin/env python3
"""Tabulates bench/llama_gpu/run.sh: tokens/s and model FLOPs utilisation of each run (the first
two steps, warm-up, left out), madpipe's against the plain loop's and the eager loop's, and each
madpipe rank's peak memory against its plan.

Model FLOPs per token are nanoGPT's estimate: 6 N + 12 L d T, N the parameters that multiply (the
blocks and the head, not the embedding's lookup), L blocks of width d, context T.
"""

import argparse
import json
import pathlib
import sys

WARMUP = 2


def rate_from_metrics(path, tokens_per_step):
    steps = [json.loads(line) for line in open(path)]
    if len(steps) <= WARMUP:
        sys.exit(f"{path}: {len(steps)} steps, more than {WARMUP} needed")
    seconds = steps[-1]["seconds"] - steps[WARMUP - 1]["seconds"]
    return (len(steps) - WARMUP) * tokens_per_step / seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokens-per-step", type=int, required=True)
    parser.add_argument("--peak-tflops", type=float, default=989)
    for name in ("vocab", "context", "width", "layers", "heads", "kv-heads"):
        parser.add_argument(f"--{name}", type=int, required=True)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    d, L, T = args.width, args.layers, args.context
    hidden = (int(2 * 4 * d / 3) + 31) // 32 * 32  # model.py's default_hidden
    kv = d * args.kv_heads // args.heads
    per_block = 2 * d * d + 2 * d * kv + 3 * d * hidden
    multiplying = L * per_block + args.vocab * d
    flops_per_token = 6 * multiplying + 12 * L * d * T
    rates = {name: rate_from_metrics(out / name / "metrics.jsonl", args.tokens_per_step)
             for name in ("plain", "madpipe-1", "madpipe-2")}
    eager = json.load(open(out / "eager.json"))
    kept = eager["step_seconds"][WARMUP:]
    rates["eager"] = len(kept) * args.tokens_per_step / sum(kept)
    print(f"model: {L} blocks of width {d}, vocabulary {args.vocab}, context {T}: "
          f"{multiplying / 1e9:.3f} B multiplying parameters, {flops_per_token / 1e9:.2f} GFLOP "
          f"per token; peak {args.peak_tflops:g} TFLOP/s")
    print("| run | tokens/s | MFU | vs plain loop | vs eager PyTorch |")
    print("|---|---|---|---|---|")
    for name, rate in rates.items():
        mfu = rate * flops_per_token / (args.peak_tflops * 1e12)
        print(f"| {name} | {rate:.0f} | {100 * mfu:.1f}% | {rate / rates['plain']:.3f}x | "
              f"{rate / rates['eager']:.3f}x |")
    print()
    print("| run | rank | peak | plan | peak / plan |")
    print("|---|---|---|---|---|")
    worst = 0.0
    for name in ("madpipe-1", "madpipe-2"):
        trace = json.load(open(out / name / "trace.json"))
        for rank, (memory, bound) in enumerate(zip(trace["memory"],
                                                   trace["predicted"]["memory_bytes"])):
            ratio = memory["peak_bytes"] / bound
            worst = max(worst, abs(1 - ratio))
            print(f"| {name} | {rank} | {memory['peak_bytes'] / 2**30:.2f} GiB | "
                  f"{bound / 2**30:.2f} GiB | {ratio:.3f} |")
    if eager["peak_bytes"]:
        print(f"\neager PyTorch peak: {eager['peak_bytes'] / 2**30:.2f} GiB")
    single = rates["madpipe-1"] / rates["plain"]
    print(f"\nmadpipe 1 rank / plain loop: {single:.3f}x (target >= 0.97); "
          f"largest |1 - peak/plan|: {worst:.3f} (target <= 0.10)")
    sys.exit(0 if single >= 0.97 and worst <= 0.10 else 1)


if __name__ == "__main__":
    main()
