"""A small vision transformer written as an nn.Sequential, as a PyTorch user writes one: its
patch embedding returns ``x.flatten(2).transpose(1, 2)`` (a non-contiguous tensor) and each block
a tensor of its own; the head pools the tokens and classifies. 32x32 images, 10 classes."""

import torch
from torch import nn


class PatchEmbedding(nn.Module):
    def __init__(self, width, patch):
        super().__init__()
        self.projection = nn.Conv2d(3, width, patch, patch)

    def forward(self, images):
        return self.projection(images).flatten(2).transpose(1, 2)  # [B, patches, width]


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Head(nn.Module):
    def __init__(self, width, classes):
        super().__init__()
        self.norm, self.out = nn.LayerNorm(width), nn.Linear(width, classes)

    def forward(self, x):
        return self.out(self.norm(x).mean(1))


def vit(width=64, heads=4, blocks=4, patch=4, classes=10, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(PatchEmbedding(width, patch), *[Block(width, heads) for _ in range(blocks)],
                         Head(width, classes))
