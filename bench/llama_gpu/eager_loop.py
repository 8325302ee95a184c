#!/usr/bin/env python3
"""An eager PyTorch training loop of examples/llama_from_pytorch/model.py, as a PyTorch user
writes it: fp32 weights under torch.autocast(bfloat16), the loss in fp32, gradients accumulated
over the micro-batches, clipped to norm 1, fused AdamW. Writes each step's seconds (the device
synchronised at its end) and the peak of allocated device memory to --output (JSON).
"""

import argparse
import json
import pathlib
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

repo = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(repo / "examples" / "llama_from_pytorch"))
import model as llama  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    llama.add_arguments(parser)
    parser.add_argument("--micro-batch-size", type=int, default=1)
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--data", required=True, help="uint16 token file")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    device = torch.device(args.device)
    net = llama.from_arguments(args).to(device)
    optimizer = torch.optim.AdamW(net.parameters(), lr=3e-4, weight_decay=0.1,
                                  fused=device.type == "cuda")
    tokens = np.fromfile(args.data, dtype=np.uint16).astype(np.int64)
    rng = np.random.default_rng(0)
    size, context = args.micro_batch_size, args.context

    def batch():
        starts = rng.integers(0, len(tokens) - context - 1, size=size)
        x = np.stack([tokens[s:s + context] for s in starts])
        y = np.stack([tokens[s + 1:s + 1 + context] for s in starts])
        return (torch.from_numpy(x).to(device, non_blocking=True),
                torch.from_numpy(y).to(device, non_blocking=True))

    seconds = []
    for _ in range(args.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        for _ in range(args.micro_batches):
            x, y = batch()
            with torch.autocast(device.type, dtype=torch.bfloat16):
                logits = net(x)
            loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten()) / args.micro_batches
            loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    json.dump({"step_seconds": seconds, "peak_bytes": peak, "last_loss": loss.item() * args.micro_batches},
              open(args.output, "w"))


if __name__ == "__main__":
    main()
