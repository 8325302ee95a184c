#!/usr/bin/env python3
"""Writes a copy of a madpipe.profile/1 whose layers with weights split their backward.

The split is an estimate, not a measurement: a layer with weights defers `--weight-share` of its
backward to W (the weight gradient of linear and convolution layers costs about as much as the
input gradient) and keeps its input and its output gradient from B until W (what a linear layer's
weight gradient reads). Layers without weights run their backward whole.

    split_profile.py IN.json OUT.json [--weight-share 0.5]
"""
import argparse
import json
import os
import sys
import tempfile


def split_profile(profile, weight_share):
    layers = profile["layers"]
    previous_output = profile["input_bytes"]
    for layer in layers:
        if layer.get("weight_bytes", 0) > 0 and layer["backward_ms"] > 0:
            weight_ms = layer["backward_ms"] * weight_share
            layer["backward_input_ms"] = layer["backward_ms"] - weight_ms
            layer["backward_weight_ms"] = weight_ms
            layer["backward_weight_kept_bytes"] = previous_output + layer["output_bytes"]
        previous_output = layer["output_bytes"]
    profile["name"] = profile["name"] + "-split"
    return profile


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--weight-share", type=float, default=0.5,
                        help="share of a layer's backward that W computes (default 0.5)")
    args = parser.parse_args()
    if not 0 < args.weight_share < 1:
        sys.exit(f"split_profile.py: --weight-share: must be in (0, 1), got {args.weight_share}")
    with open(args.input) as f:
        profile = json.load(f)
    profile = split_profile(profile, args.weight_share)
    folder = os.path.dirname(os.path.abspath(args.output))
    with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as f:
        json.dump(profile, f, indent=2)
        f.write("\n")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(f.name, 0o666 & ~umask)  # as open() would create it
    os.replace(f.name, args.output)


if __name__ == "__main__":
    main()
