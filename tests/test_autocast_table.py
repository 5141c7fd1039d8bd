"""The autocast table is what torch does: the CPU table, measured by scripts/gen_autocast_table.py, matches
the installed torch (a slice regenerated here), and check's autocast emulation gives every op in
PyTorch's own autocast test lists the output dtype real autocast gives it: cuda lists (AutocastTestLists)
under float16, cpu lists (AutocastCPUTestLists) under bfloat16. The emulated ops run on meta."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
import unittest
from pathlib import Path

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
def test_emulated_autocast_output_dtype_matches_pytorch_lists(
    device, space, op, args, kwargs, want, low, request
):
    func = getattr(_NAMESPACES[space], op, None)
    if func is None or op.startswith("cudnn"):
        pytest.skip(f"{op} has no CPU or meta kernel in this build")
    if "promote" not in request.node.callspec.id:  # cat/stack promote on their own: no cast to measure
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
    assert CONTRACTS[F.linear].autocast == autocast_table.casting_devices("linear")
    assert CONTRACTS[F.layer_norm].autocast == autocast_table.casting_devices("layer_norm")
    assert "hpu" in CONTRACTS[F.linear].autocast and "hpu" not in CONTRACTS[F.group_norm].autocast
    assert (
        CONTRACTS[torch.mv].autocast
        == autocast_table.casting_devices("mv")
        == {"cuda", "xpu", "mps", "hpu", "mtia", "xla"}
    )  # CPU autocast leaves mv alone: mixed operands raise there (measured)
    # composites whose decomposition CPU autocast casts (issue 18): einsum runs low, cdist in float32
    assert "cpu" in CONTRACTS[torch.einsum].autocast and "cpu" in CONTRACTS[torch.cdist].autocast
    assert "cpu" not in CONTRACTS[torch.dot].autocast


# ---------------------------------------------------------------- the table is torch's own behaviour

_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gen_autocast_table.py"
_DATA = json.loads((Path(autocast_table.__file__).with_name("autocast_ops.json")).read_text())
# ops whose autocast behaviour the contracts and the zoo depend on: matmul-likes, the composites that
# reach one (einsum, tensordot), the fp32 list (cdist, losses), ops autocast leaves alone (dot, norms)
SLICE = ["mm", "einsum", "cdist", "conv2d", "linear", "tensordot", "dot", "mv", "layer_norm", "prod",
         "index_copy", "index_put", "scaled_dot_product_attention", "lstm_cell", "cat", "softmax"]  # fmt: skip


def _script():
    spec = importlib.util.spec_from_file_location("gen_autocast_table", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _slice(table: dict, names) -> dict:
    keys = ("policies", "varies", "mixed_raises", "no_sample_ran")
    return {
        low: {k: sorted(n for n in table[low][k] if n in names) if k != "policies" else
              {n: p for n, p in table[low][k].items() if n in names} for k in keys}
        for low in ("bfloat16", "float16")
    }  # fmt: skip


def test_the_cpu_table_is_stamped_with_the_installed_torch():
    cpu = _DATA["cpu"]
    assert cpu["measured"] is True and cpu["device"] == "cpu"
    # the release measured: its CPU policies are the same in every build of it (+cpu, +cu130, ...)
    release = str(torch.__version__).split("+")[0]
    assert cpu["torch"].split("+")[0] == release, "regenerate: python scripts/gen_autocast_table.py"


def test_the_cuda_table_was_measured_on_a_gpu_and_says_which_ops_came_from_the_lists():
    cuda = _DATA["cuda"]
    assert cuda["measured"] is True and cuda["device"] == "cuda" and "+cu" in cuda["torch"]
    from_lists = cuda["source"].split("); ")[1].split(" from torch's")[0].split(", ")
    assert from_lists and all(op in cuda["float16"]["policies"] for op in from_lists)
    # what the GPU measured agrees with torch's lists where both speak: matmuls low, softmax in fp32
    assert [cuda["float16"]["policies"][op] for op in ("mm", "conv2d", "softmax")] == ["low", "low", "fp32"]


def test_a_slice_regenerated_against_the_installed_torch_matches_the_table():
    fresh = _script().generate("cpu", set(SLICE))
    assert _slice(fresh, SLICE) == _slice(_DATA["cpu"], SLICE)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("DTYPE_DOCTOR_REGEN"), reason="~1 min: set DTYPE_DOCTOR_REGEN=1")
def test_the_whole_cpu_table_regenerates_the_same():
    fresh = _script().generate("cpu")
    assert {low: fresh[low] for low in ("bfloat16", "float16")} == {
        low: _DATA["cpu"][low] for low in ("bfloat16", "float16")
    }


def test_the_measured_cpu_table_holds_what_torch_does_to_composite_ops():
    # einsum reaches bmm, which CPU autocast casts: one float32 and one bf16 operand run (issue 18)
    a, b = torch.randn(3, 4), torch.randn(5, 4, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.einsum("ij,kj->ik", a, b).dtype == torch.bfloat16
        assert torch.cdist(a, b).dtype == torch.float32
        with pytest.raises(RuntimeError):
            torch.tensordot(a, b, dims=([1], [1]))  # checks dtypes before its mm
    assert autocast_table.policy("cpu", torch.einsum) == autocast_table.LOW
    assert autocast_table.policy("cpu", torch.cdist) == autocast_table.FP32
    assert autocast_table.casts_mixed("cpu", "einsum") and autocast_table.casts_mixed("cpu", "cdist")
    assert autocast_table.policy("cpu", torch.tensordot) == autocast_table.LOW
    assert not autocast_table.casts_mixed("cpu", "tensordot")
    assert (
        autocast_table.policy("cpu", torch.dot) is None and autocast_table.policy("cpu", "layer_norm") is None
    )


def test_the_emulation_leaves_mixed_operands_raising_where_torch_raises():
    a, b = torch.randn(3, 4, device="meta"), torch.randn(5, 4, dtype=torch.bfloat16, device="meta")
    with AutocastEmulation(torch.bfloat16, "cpu"):
        assert torch.einsum("ij,kj->ik", a, b).dtype == torch.bfloat16
        assert torch.tensordot(a, a, dims=([1], [1])).dtype == torch.bfloat16
        with pytest.raises(RuntimeError):
            torch.tensordot(a, b, dims=([1], [1]))


def test_the_cuda_table_regenerates_from_torchs_lists_which_agree_with_the_gpus(tmp_path, capsys):
    script = _script()
    out = tmp_path / "ops.json"
    assert script.main(["--device", "cuda", "--from-lists", "--out", str(out)]) == 0
    cuda = json.loads(out.read_text())["cuda"]
    assert cuda["torch"] == torch.__version__ and cuda["measured"] is False
    for low in ("bfloat16", "float16"):  # the lists and the GPU's measure agree where both speak
        listed, measured = cuda[low]["policies"], _DATA["cuda"][low]["policies"]
        assert {op: measured[op] for op in listed} == listed
    if not torch.cuda.is_available():  # measuring needs the GPU: one line, exit 2
        assert script.main(["--device", "cuda", "--out", str(out)]) == 2
        assert "no cuda device here" in capsys.readouterr().err


@pytest.mark.slow  # two worker processes, each loading torch's OpInfo database (~10 s of CPU each)
def test_an_op_that_kills_its_worker_costs_that_op_named_not_the_run(tmp_path):
    # a CUDA kernel's segfault, made on CPU: the worker aborts when it reaches `abs`
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DTYPE_DOCTOR_TABLE_ABORT_OP": "abs"}
    run = subprocess.run(
        [sys.executable, str(_SCRIPT), "--ops", "mm", "abs", "cdist", "--print"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "abs killed its measuring process (SIGABRT); left out of the table" in run.stderr
    table = json.loads(run.stdout)
    for low in ("bfloat16", "float16"):
        assert table[low]["policies"] == {"mm": "low", "cdist": "fp32"}  # measured before and after it
        assert table[low]["left_out"] == {"abs": "killed its measuring process (SIGABRT)"}
