"""Tiny models for tests/test_compare.py (importable by path for the CLI tests)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Benign(nn.Module):
    """Conv + norm + MLP with activations of order 1: no precision should overflow."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.mlp = nn.Sequential(nn.Linear(8 * 8 * 8, 64), nn.GELU(), nn.Linear(64, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.silu(self.norm(self.conv(x)))
        return self.mlp(h.flatten(1))


class Square(nn.Module):
    """x² scaled: overflows fp16 (max 65504) once |x| passes ~15."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x * 300.0


class Overflowing(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 32)
        self.fragile = Square()
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.fragile(self.proj(x) * 40.0))


class Cancel(nn.Module):
    """(x + 1000) − 1000: exact in fp32, loses most digits in fp16/bf16 (catastrophic cancellation)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + 1000.0) - 1000.0


class Planted(nn.Module):
    """A planted fragile layer deep inside an otherwise benign stack: blocks.1.fragile."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            nn.Sequential(nn.Linear(16, 32), nn.GELU()),
            nn.Sequential(nn.Linear(32, 32), Cancel()),
            nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 8)),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


class MakesFp32(nn.Module):
    """Creates an fp32 tensor in forward: a cast model fails, autocast copes."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mix = torch.ones(8, 8) / 8  # always float32, whatever the model's dtype
        return torch.mm(self.proj(x), mix)


def benign() -> nn.Module:
    return Benign()


def overflowing() -> nn.Module:
    return Overflowing()


def planted() -> nn.Module:
    return Planted()


def makes_fp32() -> nn.Module:
    return MakesFp32()


def broken() -> nn.Module:
    raise RuntimeError("cannot build the model")


def compare_meta(report: Any) -> dict:
    """compare's settings and variants, as one dict, from the report's CompareResult section."""
    from dtype_doctor.sections import CompareResult

    return report.section(CompareResult).as_meta()
