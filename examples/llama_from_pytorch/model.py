"""A Llama-style language model as a chain of layers, scripted and saved for madpipe.

    python model.py --output model.pt [--layers 4 --width 128 --heads 4 --kv-heads 2 --context 64]

The network is an nn.Sequential: token embedding, Llama blocks (RMSNorm, causal self-attention
with rotary positions and grouped-query heads, RMSNorm, SwiGLU MLP, each residual), final RMSNorm
and a head whose weight is the embedding's (--untied: its own). No biases, no buffers: the
state_dict holds the parameters only. Weights start as Llama's, normal with std 0.02. Each child
takes one tensor and returns one, which is what `madpipe train --model script` needs. build() is
also what check.py uses to load the weights madpipe trained.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, computed in float32 and cast back, as Llama's."""

    def __init__(self, width: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] over the last dimension, split in halves."""
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    """Causal self-attention: rotary positions on q and k, kv_heads heads of keys and values, each
    shared by heads / kv_heads query heads (grouped-query attention)."""

    def __init__(self, width: int, heads: int, kv_heads: int, theta: float = 10000.0):
        super().__init__()
        assert width % heads == 0, "heads must divide width"
        assert heads % kv_heads == 0, "kv_heads must divide heads"
        self.heads = heads
        self.kv_heads = kv_heads
        self.head_dim = width // heads
        self.theta = theta
        self.wq = nn.Linear(width, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(width, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(width, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        # Rotary positions, computed here (no buffers): angle p * theta^(-2i/head_dim).
        exponents = torch.arange(0, self.head_dim, 2, device=x.device).float() / self.head_dim
        inv_freq = 1.0 / (self.theta ** exponents)
        angles = torch.outer(torch.arange(t, device=x.device).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)  # [T, head_dim]
        cos = angles.cos().to(q.dtype)
        sin = angles.sin().to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        groups = self.heads // self.kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU: w2(silu(w1(x)) * w3(x))."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(width, hidden, bias=False)
        self.w2 = nn.Linear(hidden, width, bias=False)
        self.w3 = nn.Linear(width, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """Llama block: x + attn(norm1(x)), then + mlp(norm2(x))."""

    def __init__(self, width: int, heads: int, kv_heads: int, hidden: int):
        super().__init__()
        self.norm1 = RMSNorm(width)
        self.attn = Attention(width, heads, kv_heads)
        self.norm2 = RMSNorm(width)
        self.mlp = MLP(width, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def default_hidden(width):
    """Llama's rule: two thirds of 4 * width, rounded up to a multiple of 32 (352 for 128)."""
    return (int(2 * 4 * width / 3) + 31) // 32 * 32


def build(vocab=256, context=64, width=128, heads=4, kv_heads=2, layers=4, hidden=None,
          untied=False, seed=0):
    """The chain: embed, block0 .. blockN-1, norm, head (logits over the vocabulary).

    context is the longest sequence it is trained on; rotary positions need no table of it."""
    torch.manual_seed(seed)
    hidden = hidden or default_hidden(width)
    chain = nn.Sequential()
    chain.add_module("embed", nn.Embedding(vocab, width))
    for i in range(layers):
        chain.add_module(f"block{i}", Block(width, heads, kv_heads, hidden))
    chain.add_module("norm", RMSNorm(width))
    chain.add_module("head", nn.Linear(width, vocab, bias=False))
    for module in chain.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
    if not untied:
        chain.head.weight = chain.embed.weight
    return chain


def add_arguments(parser):
    parser.add_argument("--vocab", type=int, default=256, help="token ids (256: bytes)")
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2,
                        help="key and value heads, each shared by heads / kv-heads query heads")
    parser.add_argument("--hidden", type=int, default=None,
                        help="SwiGLU hidden size (default: 2/3 of 4 * width, rounded up to a "
                             "multiple of 32)")
    parser.add_argument("--untied", action="store_true",
                        help="the head gets its own weight instead of the embedding's")
    parser.add_argument("--seed", type=int, default=0)


def from_arguments(args):
    return build(args.vocab, args.context, args.width, args.heads, args.kv_heads, args.layers,
                 args.hidden, args.untied, args.seed)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--output", default="model.pt")
    args = parser.parse_args()
    model = from_arguments(args)
    torch.jit.save(torch.jit.script(model), args.output)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.output}: {len(model)} layers, {parameters} parameters")
