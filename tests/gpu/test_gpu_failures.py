"""GPU-only dtype failures seen live by `run`/`watch` on a real CUDA device: SDPA restricted to the
flash backend on fp32 inputs ("No available kernel"), and a float8 matmul without `_scaled_mm`."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device (tests/gpu runs on a GPU machine)", allow_module_level=True)

from torch.nn.attention import SDPBackend, sdpa_kernel

from dtype_doctor import watch


def test_flash_only_sdpa_on_fp32_is_flash_attention_dtype_with_the_operands():
    q, k, v = torch.randn(3, 1, 2, 16, 64, device="cuda").unbind()
    flash_only = sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    with pytest.raises(RuntimeError, match="No available kernel") as info, watch() as s, flash_only:
        F.scaled_dot_product_attention(q, k, v)
    (f,) = [f for f in s.report.findings if f.code == "flash-attention-dtype"]
    assert [(o.role, o.dtype) for o in f.operands] == [
        ("query", "float32"),
        ("key", "float32"),
        ("value", "float32"),
    ]
    assert "dtype-doctor [flash-attention-dtype]" in "\n".join(info.value.__notes__)
    with watch() as s, sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        F.scaled_dot_product_attention(q.half(), k.half(), v.half())  # what the fix says: it runs
    assert s.report.findings == []


def test_a_float8_matmul_without_scaled_mm_is_float8_dtype():
    a = torch.randn(16, 16, device="cuda").to(torch.float8_e4m3fn)
    try:
        with watch() as s:
            a @ a
    except RuntimeError as exc:
        assert s.report.findings[0].code == "float8-dtype", exc
        assert {o.dtype for o in s.report.findings[0].operands} == {"float8_e4m3fn"}
    else:
        pytest.skip("this torch/GPU runs a plain float8 matmul")
