"""Planted low-precision numerics bugs, each in one hand-written layer of a small model (factories
for tests/test_numerics_zoo.py and the CLI). Each layer's file:line is the op the tool must name.

- NaiveRMSNorm: `x.pow(2)` overflows float16, rsqrt(inf) = 0: finite output, ~100 % wrong.
- NaiveSoftmax: exp without subtracting the max; very negative scores underflow float16's
  subnormals, so the output is finite and wrong.
- Residual: `x + self.ff(x)` exceeds 65504; the LayerNorm after it makes NaN.
- CumulativeMean: a float16 cumsum exceeds 65504; dividing by its last value makes NaN.
"""

from __future__ import annotations

import torch
from torch import nn

D = 64


class NaiveRMSNorm(nn.Module):
    def __init__(self, d: int = D, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)  # planted: x.pow(2)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class NaiveSoftmax(nn.Module):
    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        e = scores.exp()  # planted: scores.exp()
        return e / e.sum(-1, keepdim=True)


class Residual(nn.Module):
    def __init__(self, d: int = D) -> None:
        super().__init__()
        self.ff = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.ff(x)  # planted: x + self.ff(x)
        return self.norm(h)


class CumulativeMean(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = x.cumsum(-1)  # planted: x.cumsum(-1)
        return total / total[..., -1:]


class _Net(nn.Module):
    """in_proj → the planted layer → out_proj; `scale` sets how large the planted layer's input is."""

    def __init__(self, layer: nn.Module, scale: float, shift: float = 0.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.in_proj = nn.Linear(D, D)
        self.layer = layer
        self.out_proj = nn.Linear(D, D)
        self.scale = scale
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.layer(self.in_proj(x) * self.scale + self.shift))


def make_rmsnorm() -> nn.Module:
    return _Net(NaiveRMSNorm(), scale=600.0)


def make_softmax() -> nn.Module:
    return _Net(NaiveSoftmax(), scale=1.0, shift=-18.0)


def make_residual() -> nn.Module:
    net = _Net(Residual(), scale=1000.0)
    with torch.no_grad():
        net.layer.ff.bias.fill_(65000.0)
        net.layer.ff.weight.mul_(0.0)
    return net


def make_cumsum() -> nn.Module:
    return _Net(CumulativeMean(), scale=1.0, shift=1200.0)


PLANTED = {
    "rmsnorm": (make_rmsnorm, "layer", "x.pow(2)", "finite-but-wrong"),
    "softmax": (make_softmax, "layer", "scores.exp()", "finite-but-wrong"),
    "residual": (make_residual, "layer", "x + self.ff(x)", "fp16-overflow"),
    "cumsum": (make_cumsum, "layer", "x.cumsum(-1)", "fp16-overflow"),
}


class _NormBlock(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.proj = nn.Linear(D, D)
        self.norm = NaiveRMSNorm()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.norm(self.proj(x) * self.scale)


class NormStack(nn.Module):
    """Four blocks, each with a hand-written RMSNorm whose input overflows x.pow(2) in float16:
    keeping the three worst modules in fp32 leaves the fourth wrong; keeping the norms fixes it."""

    def __init__(self, blocks: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(_NormBlock(600.0) for _ in range(blocks))
        self.head = nn.Linear(D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make_norm_stack() -> nn.Module:
    return NormStack()
