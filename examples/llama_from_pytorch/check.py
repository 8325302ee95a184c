"""Loads the weights madpipe trained into the PyTorch model and recomputes its last validation
loss on the samples madpipe validated on.

    python check.py --run run --weights model_state.pt [--tolerance 1e-5] [the model.py options]

Exits 1 when the loss differs from the last val_loss of run/metrics.jsonl by more than
--tolerance (relative; default 1e-5, looser for a bf16 run).
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

import model as llama

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    llama.add_arguments(parser)
    parser.add_argument("--run", default="run", help="the --output-dir of madpipe train")
    parser.add_argument("--weights", default="model_state.pt")
    parser.add_argument("--tolerance", type=float, default=1e-5,
                        help="the largest relative difference accepted")
    args = parser.parse_args()
    model = llama.from_arguments(args)
    model.load_state_dict(torch.load(args.weights))  # strict: the keys are the module's own
    model.eval()
    samples = torch.load(os.path.join(args.run, "validation.pt"))
    with torch.no_grad():
        logits = model(samples["inputs"])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                               samples["targets"].reshape(-1)).item()
    lines = [json.loads(line) for line in open(os.path.join(args.run, "metrics.jsonl"))]
    madpipe = [line["val_loss"] for line in lines if "val_loss" in line][-1]
    difference = abs(loss - madpipe) / abs(madpipe)
    print(f"validation loss: PyTorch {loss:.6f}, madpipe {madpipe:.6f} "
          f"(relative difference {difference:.1e})")
    sys.exit(0 if difference <= args.tolerance else 1)
