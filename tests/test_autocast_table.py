"""check's autocast emulation gives every op in PyTorch's own autocast test lists the output dtype
real autocast gives it: cuda lists (AutocastTestLists) under float16, cpu lists (AutocastCPUTestLists)
under bfloat16. The emulated ops run on meta (no compute)."""

from __future__ import annotations

import sys
import types
import unittest

import pytest

torch = pytest.importorskip("torch")
try:
    import expecttest  # noqa: F401
except ImportError:  # torch's test utilities import it for TestCase only; the lists need none of it
    sys.modules["expecttest"] = types.SimpleNamespace(TestCase=unittest.TestCase)
lists = pytest.importorskip("torch.testing._internal.autocast_test_lists")

from torch.utils._pytree import tree_map  # noqa: E402

from dtype_doctor.checking.check import AutocastEmulation  # noqa: E402
from dtype_doctor.watching import autocast_table  # noqa: E402

_NAMESPACES = {"torch": torch, "nn": torch._C._nn, "linalg": torch._C._linalg, "methods": torch.Tensor}


def _cases(device: str):
    if device == "cuda":
        tl, low = lists.AutocastTestLists("cpu"), torch.float16
        named = [("torch", "torch_fp16", low), ("torch", "torch_fp32", torch.float32)]
        named += [("nn", "nn_fp16", low), ("nn", "nn_fp32", torch.float32), ("linalg", "linalg_fp16", low)]
        named += [("methods", "methods_fp16", low), ("methods", "methods_fp32", torch.float32)]
    else:
        tl, low = lists.AutocastCPUTestLists("cpu"), torch.bfloat16
        named = [("torch", "torch_16", low), ("torch", "torch_fp32", torch.float32)]
        named += [("nn", "nn_16", low), ("nn", "nn_fp32", torch.float32)]
    out = []
    for space, attr, want in named:
        for entry in getattr(tl, attr):
            kwargs = entry[2] if len(entry) > 2 and isinstance(entry[2], dict) else {}
            if isinstance(entry[1], str):  # einsum: (equation, operands); the list's 2-D operands
                entry = (entry[0], ("ij,jk->ik", *entry[2]))  # do not fit its 4-index equation
            if len(entry) > 2 and entry[2] is True:
                continue  # skipped on ROCm only; no flag here
            out.append(
                pytest.param(
                    device, space, entry[0], entry[1], kwargs, want, low, id=f"{device}-{attr}-{entry[0]}"
                )
            )
    for entry in tl.torch_need_autocast_promote:
        args = entry[1]
        out.append(
            pytest.param(
                device, "torch", entry[0], args, {}, torch.float32, low, id=f"{device}-promote-{entry[0]}"
            )
        )
    return out


def _run(func, args, kwargs):
    on_meta = tree_map(lambda x: x.to("meta") if isinstance(x, torch.Tensor) else x, (args, kwargs))
    try:
        return func(*on_meta[0], **on_meta[1])
    except (NotImplementedError, RuntimeError):  # no meta kernel: run the (small) op for real
        return func(*args, **kwargs)


@pytest.mark.parametrize(
    ("device", "space", "op", "args", "kwargs", "want", "low"), _cases("cuda") + _cases("cpu")
)
def test_emulated_autocast_output_dtype_matches_pytorch_lists(device, space, op, args, kwargs, want, low):
    func = getattr(_NAMESPACES[space], op, None)
    if func is None or op.startswith("cudnn"):
        pytest.skip(f"{op} has no CPU or meta kernel in this build")
    assert autocast_table.policy(device, func) is not None, f"{op} missing from the {device} table"
    with AutocastEmulation(low, device):
        out = _run(func, args, kwargs)
    out = out[0] if isinstance(out, (tuple, list)) else out
    assert out.dtype == want


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_ops_autocast_leaves_alone_keep_their_dtype(device):
    x = torch.randn(4, 4, dtype=torch.float16, device="meta")
    with AutocastEmulation(torch.bfloat16, device):
        assert torch.relu(x).dtype == torch.float16 and (x + x).dtype == torch.float16


def test_contracts_read_their_autocast_devices_from_the_table():
    from dtype_doctor.watching.contracts import CONTRACTS

    F = torch.nn.functional
    assert (
        "cpu" in CONTRACTS[torch.Tensor.__rmatmul__].autocast and "cuda" in CONTRACTS[torch.baddbmm].autocast
    )
    assert "cpu" not in CONTRACTS[F.layer_norm].autocast and "cuda" in CONTRACTS[F.layer_norm].autocast
    assert CONTRACTS[F.linear].autocast == autocast_table.casting_devices("linear", autocast_table.LOW)
    assert CONTRACTS[F.layer_norm].autocast == autocast_table.casting_devices(
        "layer_norm", autocast_table.FP32
    )
    assert "hpu" in CONTRACTS[F.linear].autocast and "hpu" not in CONTRACTS[F.group_norm].autocast
    assert CONTRACTS[torch.mv].autocast == autocast_table.casting_devices("mv", autocast_table.LOW)
