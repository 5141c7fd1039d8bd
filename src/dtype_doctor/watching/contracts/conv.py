"""Convolutions: input, weight and bias in the weight's dtype; a bias that disagrees with the input
is its own family, checked first as PyTorch does."""

from __future__ import annotations

import torch.nn.functional as F

from ...catalog.family_codes import CONV_BIAS_DTYPE_MISMATCH, CONV_WEIGHT_DTYPE_MISMATCH
from .core import register

for name in ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"):
    register(
        getattr(F, name),
        code=CONV_WEIGHT_DTYPE_MISMATCH,
        bias_code=CONV_BIAS_DTYPE_MISMATCH,
        roles={"input": "input", "weight": "weight", "bias": "bias"},
        ref="weight",
        module_op=True,
    )
