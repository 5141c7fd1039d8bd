"""GPU-only dtype failures seen live on a CPU machine: SDPA's backend selection refusing fp32 (the
kernel-selection check fed CUDA facts, and `run` on fake CUDA tensors), and cuBLAS/cuDNN/float8 errors
raised in a watched call named by family with the operands' dtypes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from dtype_doctor import watch
from dtype_doctor.cli import main
from dtype_doctor.watching.contracts.attention import sdpa_refusal

F32, H, B = torch.float32, torch.float16, torch.bfloat16


@pytest.mark.parametrize(
    ("device", "dtype", "enabled", "wanted"),
    [
        ("cuda", F32, {"flash"}, B),  # sdpa_kernel(FLASH_ATTENTION) on fp32: "No available kernel"
        ("cuda", F32, {"cudnn"}, B),
        ("cuda", torch.float64, {"flash", "efficient"}, B),
        ("cuda", F32, {"flash", "efficient"}, None),  # the memory-efficient kernel takes fp32
        ("cuda", F32, {"flash", "math"}, None),  # math takes every floating dtype
        ("cuda", H, {"flash"}, None),
        ("cpu", F32, {"flash"}, None),  # the CPU flash kernel takes fp32
        ("cpu", F32, {"efficient"}, None),  # no kernel whatever the dtype: not a dtype failure
    ],
)
def test_sdpa_backend_refusal_is_decided_from_the_enabled_backends(device, dtype, enabled, wanted):
    assert sdpa_refusal(device, dtype, enabled) == wanted


FLASH_ON_FP32 = textwrap.dedent(
    """\
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with FakeTensorMode():  # CUDA tensors without a GPU: torch's own SDPA checks do not run
        q, k, v = torch.randn(3, 1, 2, 16, 64, device="cuda", dtype={dtype}).unbind()
        with sdpa_kernel({backends}):
            out = F.scaled_dot_product_attention(q, k, v)
    print("ran", out.dtype)
    """
)


def _run(tmp_path: Path, capsys, dtype: str, backends: str) -> list[dict]:
    script = tmp_path / "attend.py"
    script.write_text(FLASH_ON_FP32.format(dtype=dtype, backends=backends))
    report = tmp_path / "report.json"
    assert main(["run", "--json", str(report), str(script)]) == 0
    assert "ran torch." in capsys.readouterr().out
    return json.loads(report.read_text())["findings"]


def test_run_names_a_flash_only_sdpa_on_fp32_cuda_inputs(tmp_path, capsys):
    (f,) = _run(tmp_path, capsys, "torch.float32", "SDPBackend.FLASH_ATTENTION")
    assert f["code"] == "flash-attention-dtype"
    assert f["location"]["line"] == 9 and f["location"]["file"].endswith("attend.py")
    assert [(o["role"], o["dtype"]) for o in f["operands"]] == [
        ("query", "float32"),
        ("key", "float32"),
        ("value", "float32"),
    ]
    fixes = " ".join(x["title"] + " " + x["snippet"] for x in f["fixes"])
    assert "torch.bfloat16" in fixes and "SDPBackend.MATH" in fixes


@pytest.mark.parametrize(
    ("dtype", "backends"),
    [
        ("torch.float16", "SDPBackend.FLASH_ATTENTION"),
        ("torch.float32", "[SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]"),
        ("torch.float32", "SDPBackend.EFFICIENT_ATTENTION"),
    ],
)
def test_run_is_silent_when_an_enabled_backend_takes_the_dtype(tmp_path, capsys, dtype, backends):
    assert _run(tmp_path, capsys, dtype, backends) == []


CUBLAS = (
    "CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, "
    "a, CUDA_R_16F, lda, b, CUDA_R_16F, ldb, &fbeta, c, CUDA_R_16F, ldc, CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`"
)
CUDNN = (
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
)
FLOAT8 = "\"addmm_cuda\" not implemented for 'Float8_e4m3fn'"
_raised = [""]


@torch.library.custom_op("dtype_doctor_test::gpu_kernel", mutates_args=())
def gpu_kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """An extension kernel that fails as cuBLAS/cuDNN/a float8 GEMM do on a GPU."""
    raise RuntimeError(_raised[0])


@pytest.mark.parametrize(
    ("text", "dtype", "code"),
    [
        (CUBLAS, H, "half-unsupported-kernel"),
        (CUDNN, B, "cudnn-half-unsupported"),
        (FLOAT8, torch.float8_e4m3fn, "float8-dtype"),
    ],
)
def test_a_gpu_library_refusal_in_a_watched_call_is_named_with_its_operands(text, dtype, code):
    _raised[0] = text
    a = torch.zeros(4, 4, dtype=dtype)
    with pytest.raises(RuntimeError) as info, watch() as s:
        gpu_kernel(a, a)
    assert str(info.value) == text  # the user's error, unchanged
    (f,) = s.report.findings
    assert f.code == code and f.severity.value == "error"
    assert [(o.role, o.dtype) for o in f.operands] == [
        ("operand0", str(dtype)[6:]),
        ("operand1", str(dtype)[6:]),
    ]
    assert f"dtype-doctor [{code}]" in info.value.__notes__[0]


def test_a_gpu_library_failure_on_fp32_operands_is_not_a_dtype_finding():
    _raised[0] = CUBLAS.replace("CUDA_R_16F", "CUDA_R_32F")
    a = torch.zeros(4, 4)
    with pytest.raises(RuntimeError), watch() as s:
        gpu_kernel(a, a)
    assert s.report.findings == []
