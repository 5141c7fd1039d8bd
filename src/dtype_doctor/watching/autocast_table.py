"""What autocast does to each op, per device type: the one table `watch`'s contracts and `check`'s
emulation read.

LOW: the floating operands are cast to the autocast dtype. FP32: cast to float32. PROMOTE: cast to the
widest floating dtype among them. Ops absent run in the dtypes they are given. Source: PyTorch's own
lists (torch/testing/_internal/autocast_test_lists.py: AutocastTestLists for cuda, AutocastCPUTestLists
for cpu, checked op by op in tests/test_autocast_table.py) plus `scaled_dot_product_attention`, which
both run in the low dtype (aten/src/ATen/autocast_mode.cpp). Names are aten-level; a Tensor method or a
dunder maps to the same name (`__matmul__`/`__rmatmul__` → matmul).
"""

from __future__ import annotations

from typing import Any

__all__ = ["FP32", "LOW", "PROMOTE", "casting_devices", "op_name", "policy"]

LOW, FP32, PROMOTE = "low", "fp32", "promote"

_CONV = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "conv_tbc")
_MATMUL = ("addmm", "addbmm", "baddbmm", "bmm", "mm", "matmul", "linear", "prelu")
_LOSSES = (
    "poisson_nll_loss", "cosine_embedding_loss", "hinge_embedding_loss", "margin_ranking_loss",
    "triplet_margin_loss", "binary_cross_entropy_with_logits", "nll_loss", "nll_loss2d", "l1_loss",
    "smooth_l1_loss", "mse_loss", "multilabel_margin_loss", "soft_margin_loss", "multi_margin_loss",
)  # fmt: skip

CUDA: dict[str, str] = {
    **dict.fromkeys(
        (*_CONV, *_MATMUL, "_convolution", "convolution", "cudnn_convolution", "cudnn_convolution_transpose",
         "addmv", "addr", "einsum", "mv", "chain_matmul", "lstm_cell", "gru_cell", "rnn_tanh_cell",
         "rnn_relu_cell", "linalg_vecdot", "linalg_multi_dot", "scaled_dot_product_attention"),
        LOW,
    ),
    **dict.fromkeys(
        (*_LOSSES, "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
         "reciprocal", "rsqrt", "sinh", "tan", "pow", "softmax", "log_softmax", "layer_norm", "rms_norm",
         "group_norm", "norm", "cosine_similarity", "kl_div", "cumprod", "cumsum", "dist", "pdist", "cdist",
         "prod", "renorm", "sum", "logsumexp", "softplus"),
        FP32,
    ),
    **dict.fromkeys(
        ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
         "tensordot", "scatter_add"),
        PROMOTE,
    ),
}  # fmt: skip

CPU: dict[str, str] = {
    **dict.fromkeys(
        (
            *_CONV,
            *_MATMUL,
            "_addmm_activation",
            "_native_multi_head_attention",
            "scaled_dot_product_attention",
        ),
        LOW,
    ),
    **dict.fromkeys((*_LOSSES, "avg_pool3d", "binary_cross_entropy", "reflection_pad1d", "huber_loss"), FP32),
    **dict.fromkeys(("cat", "stack"), PROMOTE),
}

# device types whose autocast follows CUDA's lists (they share autocast_mode.cpp's lists); the other
# accelerators' autocast is only known to run matmul-like ops low (their fp32 lists are their own)
_CUDA_LIKE = frozenset({"cuda", "xpu", "mps"})
_OTHER = frozenset({"hpu", "mtia", "xla"})
_ALIASES = {"__matmul__": "matmul", "__rmatmul__": "matmul", "__pow__": "pow", "__rpow__": "pow"}


def op_name(func: Any) -> str:
    """The aten-level name of a torch function, Tensor method or functional."""
    name = getattr(func, "__name__", "") or ""
    return _ALIASES.get(name, name)


def policy(device_type: str, func_or_name: Any) -> str | None:
    """LOW, FP32, PROMOTE or None: what autocast on `device_type` does to this op."""
    name = func_or_name if isinstance(func_or_name, str) else op_name(func_or_name)
    if device_type == "cpu":
        return CPU.get(name)
    if device_type in _CUDA_LIKE:
        return CUDA.get(name)
    return LOW if device_type in _OTHER and CUDA.get(name) == LOW else None


def casting_devices(name: str, kind: str) -> frozenset[str]:
    """Device types whose autocast gives `name` the policy `kind` (a contract's `autocast` field)."""
    return frozenset(d for d in (*_CUDA_LIKE, *_OTHER, "cpu") if policy(d, name) == kind)
