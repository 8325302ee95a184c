"""A GPT-2-style language model as a chain of layers, scripted and saved for madpipe.

    python model.py --output model.pt [--layers 4 --width 128 --heads 4 --context 64]

The network is an nn.Sequential: token and position embedding, transformer blocks (pre-norm
causal self-attention and MLP), final norm and head. Each child takes one tensor and returns one,
which is what `madpipe train --model script` needs. build() is also what check.py uses to load
the weights madpipe trained.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Embedding(nn.Module):
    """Token ids [B, T] -> token plus position embeddings [B, T, C]."""

    def __init__(self, vocab: int, context: int, width: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.size(1), device=ids.device)
        return self.tokens(ids) + self.positions(positions)


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a GELU MLP, each residual."""

    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


def build(vocab=256, context=64, width=128, heads=4, layers=4, dropout=0.0, seed=0):
    """The chain: embed, block0 .. blockN-1, norm, head (logits over the vocabulary)."""
    torch.manual_seed(seed)
    chain = nn.Sequential()
    chain.add_module("embed", Embedding(vocab, context, width))
    for i in range(layers):
        chain.add_module(f"block{i}", Block(width, heads, dropout))
    chain.add_module("norm", nn.LayerNorm(width))
    chain.add_module("head", nn.Linear(width, vocab))
    return chain


def add_arguments(parser):
    parser.add_argument("--vocab", type=int, default=256, help="token ids (256: bytes)")
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dropout", type=float, default=0.0,
                        help="dropout draws from each rank's generator: with it, losses depend "
                             "on the split")
    parser.add_argument("--seed", type=int, default=0)


def from_arguments(args):
    return build(args.vocab, args.context, args.width, args.heads, args.layers, args.dropout,
                 args.seed)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--output", default="model.pt")
    args = parser.parse_args()
    model = from_arguments(args)
    torch.jit.save(torch.jit.script(model), args.output)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.output}: {len(model)} layers, {parameters} parameters")
