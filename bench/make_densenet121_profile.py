#!/usr/bin/env python3
"""Writes configs/profiles/densenet121.json: an analytic profile of torchvision's DenseNet-121.

DenseNet-121 at 1000x1000 with batch 8 in float32, linearized into a chain of 67 layers: the
stem (conv0, norm0, relu0, pool0, exactly the shapes of ResNet-50's stem, so their measured times
are reused), 58 dense layers (each one's output is the concatenation of its input and its 32 new
channels), 3 transitions, norm5 and the classifier with the loss.

The numbers are not measured. Times come from a roofline calibrated on the H100 measurements of
configs/profiles/resnet50.json (convolutions at 20 TFLOP/s, batch norm at 0.85 TB/s, ReLU and
concatenation at 2.7 TB/s; backward 2x for convolutions, about 2.9x for the others). Memory is
exact for the tensors autograd keeps in torchvision's implementation (ReLU in place, no
memory-efficient checkpointing). It exists to make the planner's cost on a long, memory-hungry
chain reproducible (bench/planner_bench, tests); plan real runs with a measured profile
(madpipe profile).

  python3 bench/make_densenet121_profile.py > configs/profiles/densenet121.json
"""

import json
import sys

BATCH, IMAGE, FLOAT = 8, 1000, 4
CONV_FLOPS, BN_BYTES, ELEMENTWISE_BYTES = 20e12, 0.85e12, 2.7e12  # per second
GROWTH, BOTTLENECK = 32, 4 * 32
BLOCKS = (6, 12, 24, 16)


def ms(seconds):
    return round(seconds * 1e3, 4)


def feature_bytes(channels, side):
    return channels * side * side * BATCH * FLOAT


def dense_layer(name, c_in, side):
    pixels = side * side * BATCH
    conv_flops = 2 * pixels * (c_in * BOTTLENECK + BOTTLENECK * GROWTH * 9)
    bn_traffic = 2 * (feature_bytes(c_in, side) + feature_bytes(BOTTLENECK, side))
    relu_traffic = bn_traffic
    concat_traffic = 2 * feature_bytes(c_in + GROWTH, side)
    forward = conv_flops / CONV_FLOPS + bn_traffic / BN_BYTES + (relu_traffic + concat_traffic) / ELEMENTWISE_BYTES
    backward = (2 * conv_flops / CONV_FLOPS + 2.9 * bn_traffic / BN_BYTES
                + 2.7 * (relu_traffic + concat_traffic) / ELEMENTWISE_BYTES)
    weights = FLOAT * (4 * c_in + c_in * BOTTLENECK + 4 * BOTTLENECK + BOTTLENECK * GROWTH * 9)
    return {
        "name": name,
        "forward_ms": ms(forward),
        "backward_ms": ms(backward),
        "weight_bytes": weights,
        "output_bytes": feature_bytes(c_in + GROWTH, side),
        # norm1/relu1 output, conv1 output, norm2/relu2 output
        "saved_bytes": feature_bytes(c_in + 2 * BOTTLENECK, side),
        "forward_workspace_bytes": feature_bytes(BOTTLENECK, side),
        "backward_workspace_bytes": 2 * feature_bytes(BOTTLENECK, side),
    }


def transition(name, c_in, side):
    pixels = side * side * BATCH
    conv_flops = 2 * pixels * c_in * (c_in // 2)
    bn_traffic = 2 * feature_bytes(c_in, side)
    pool_traffic = feature_bytes(c_in // 2, side) + feature_bytes(c_in // 2, side // 2)
    forward = conv_flops / CONV_FLOPS + bn_traffic / BN_BYTES + (bn_traffic + pool_traffic) / ELEMENTWISE_BYTES
    backward = (2 * conv_flops / CONV_FLOPS + 2.9 * bn_traffic / BN_BYTES
                + 2.7 * (bn_traffic + pool_traffic) / ELEMENTWISE_BYTES)
    return {
        "name": name,
        "forward_ms": ms(forward),
        "backward_ms": ms(backward),
        "weight_bytes": FLOAT * (4 * c_in + c_in * (c_in // 2)),
        "output_bytes": feature_bytes(c_in // 2, side // 2),
        "saved_bytes": feature_bytes(c_in + c_in // 2, side),  # norm/relu output, conv output
        "forward_workspace_bytes": 0,
        "backward_workspace_bytes": 0,
    }


def main():
    with open(sys.path[0] + "/../configs/profiles/resnet50.json") as f:
        stem = json.load(f)["layers"][:4]  # conv 7x7/2 3->64, bn, relu, maxpool: the same shapes
    for layer, name in zip(stem, ("conv0", "norm0", "relu0", "pool0")):
        layer["name"] = name
    layers = list(stem)
    channels, side = 64, IMAGE // 4
    for b, count in enumerate(BLOCKS, start=1):
        for i in range(1, count + 1):
            layers.append(dense_layer(f"denseblock{b}.denselayer{i}", channels, side))
            channels += GROWTH
        if b < len(BLOCKS):
            layers.append(transition(f"transition{b}", channels, side))
            channels //= 2
            side //= 2
    norm5_bytes = 2 * feature_bytes(channels, side)
    layers.append({
        "name": "norm5", "forward_ms": ms(norm5_bytes / BN_BYTES),
        "backward_ms": ms(2.9 * norm5_bytes / BN_BYTES), "weight_bytes": FLOAT * 4 * channels,
        "output_bytes": feature_bytes(channels, side), "saved_bytes": 0,
        "forward_workspace_bytes": 0, "backward_workspace_bytes": 0})
    layers.append({
        "name": "classifier", "forward_ms": ms(norm5_bytes / ELEMENTWISE_BYTES + 2e-5),
        "backward_ms": ms(2.7 * norm5_bytes / ELEMENTWISE_BYTES + 4e-5),
        "weight_bytes": FLOAT * (channels * 1000 + 1000), "output_bytes": 4,
        "saved_bytes": feature_bytes(channels, side) + BATCH * FLOAT * (channels + 1000),
        "forward_workspace_bytes": 0, "backward_workspace_bytes": 0})
    profile = {
        "format": "madpipe.profile/1",
        "name": "densenet121",
        "device": "NVIDIA H100 80GB HBM3 (analytic model, not measured)",
        "dtype": "float32",
        "source": "bench/make_densenet121_profile.py: torchvision DenseNet-121 shapes, roofline "
                  "times calibrated on resnet50.json, stem copied from resnet50.json",
        "batch": BATCH,
        "image": IMAGE,
        "input_bytes": 3 * IMAGE * IMAGE * BATCH * FLOAT,
        "layers": layers,
    }
    json.dump(profile, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
