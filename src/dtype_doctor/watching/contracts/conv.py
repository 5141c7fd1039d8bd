"""Convolutions: input, weight and bias in the weight's dtype; a bias that disagrees with the input
is its own family, checked first as PyTorch does."""

from __future__ import annotations

import torch.nn.functional as F

from ..autocast_table import LOW
from .core import register

for name in ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"):
    register(
        getattr(F, name),
        code="conv-weight-dtype-mismatch",
        bias_code="conv-bias-dtype-mismatch",
        roles={"input": "input", "weight": "weight", "bias": "bias"},
        ref="weight",
        autocast=LOW,
        module_op=True,
    )
