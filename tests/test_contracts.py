"""The contract registry: an op registered with `register(...)` is checked by watch with its family,
module and fix; declarations are checked against the ops' real signatures; the rules own autocast,
the module's dtype and the list ops' user-code test (real torch calls under watch)."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dtype_doctor import watch
from dtype_doctor.watching.contracts import CONTRACTS, register

H, B, F32 = torch.float16, torch.bfloat16, torch.float32


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.v = nn.Parameter(torch.ones(3, dtype=H))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.outer(x, self.v)


@pytest.fixture
def outer_contract():
    contract = register(torch.outer, code="matmul-dtype-mismatch", roles={"input": "input", "vec2": "other"})
    yield contract
    del CONTRACTS[torch.outer]


def test_an_op_registered_at_run_time_is_checked_with_its_family_module_and_fix(outer_contract):
    model = nn.Sequential(Outer())
    with watch(model=model) as s:
        out = model(torch.ones(2))  # torch promotes this one silently
    assert out.dtype == F32  # observe changes nothing
    (f,) = s.report.findings
    assert (f.code, f.location.op, f.location.module) == ("matmul-dtype-mismatch", "outer", "0")
    assert f.data["expected_dtype"] == "float16"  # the module's parameters decide
    assert [o.role for o in f.operands if o.dtype == "float32"] == ["input"]
    # the odd input was born in the call's own expression: the first fix makes it float16 there
    assert f.fixes[0].snippet == "out = model(torch.ones(2, dtype=torch.float16))"
    assert any("'0'" in x.title and "x.to(torch.float16)" in x.snippet for x in f.fixes)


def test_without_a_contract_the_same_call_is_a_silent_promotion():
    model = nn.Sequential(Outer())
    with watch(model=model) as s:
        model(torch.ones(2))
    assert [(f.code, f.location.op) for f in s.report.findings] == [("silent-promotion", "torch.outer")]


def test_register_refuses_an_unknown_rule_and_a_second_contract_for_one_op():
    linear = CONTRACTS[F.linear]
    with pytest.raises(ValueError, match="unknown contract rule 'nope'"):
        register(torch.outer, code="matmul-dtype-mismatch", roles={"input": "input"}, rule="nope")
    with pytest.raises(RuntimeError, match="duplicate contract"):
        register(F.linear, code="matmul-dtype-mismatch", roles={"input": "input"})
    assert torch.outer not in CONTRACTS and CONTRACTS[F.linear] is linear


def _signature(func):
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return None  # a builtin without a text signature
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None  # einsum(*args)
    return [p.name for p in params]


def test_declared_parameters_are_the_ops_own_in_positional_order():
    checked = 0
    for func, c in CONTRACTS.items():
        names = _signature(func)
        if names is None:
            continue
        declared = [p for p, _ in c.params]
        assert names[: len(declared)] == declared, (func, names, declared)
        checked += 1
    assert checked >= 8  # the functional norms, embeddings, einsum, cdist, __rmatmul__ at least


class MM(nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(3, 3, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(x, self.w)


def test_the_running_modules_dtype_names_the_odd_operand():
    model = nn.Sequential(MM(H))
    with pytest.raises(RuntimeError), watch(model=model) as s:
        model(torch.ones(2, 3))
    (f,) = s.report.findings
    assert f.data["expected_dtype"] == "float16" and f.location.module == "0"
    assert [o.role for o in f.operands if o.dtype == "float32"] == ["input"]
    with pytest.raises(RuntimeError), watch() as s:
        torch.mm(torch.ones(2, 3), torch.ones(3, 3, dtype=H))  # no module: the first operand's
    assert s.report.findings[0].data["expected_dtype"] == "float32"


def test_an_op_autocast_leaves_alone_is_a_half_conflict_under_the_other_half():
    with pytest.raises(RuntimeError), watch() as s, torch.autocast("cpu", dtype=B):
        torch.dot(torch.ones(3, dtype=H), torch.ones(3, dtype=B))  # dot is in no CPU autocast list
    (f,) = s.report.findings
    assert f.code == "autocast-half-conflict" and f.location.op == "dot"
    assert "autocast" in f.data["context"]


JOIN = "import torch\n\ndef {name}(a, b):\n    return torch.cat([a, b])\n"


def test_a_cat_that_promotes_in_library_code_is_counted_and_in_user_code_reported():
    lib: dict = {}
    exec(compile(JOIN.format(name="join"), "/opt/venv/lib/site-packages/somelib/join.py", "exec"), lib)
    user: dict = {}
    # another name: equal code objects share one entry in provenance's frame-kind cache
    exec(compile(JOIN.format(name="my_join"), __file__, "exec"), user)
    a, b = torch.ones(2, dtype=H), torch.ones(2)
    with watch() as s:
        out = lib["join"](a, b)
    assert out.dtype == F32 and s.report.findings == []
    assert s.report.meta["library_promotions"] == 1
    with watch() as s:
        user["my_join"](a, b)
    (f,) = s.report.findings
    assert (f.code, f.location.op) == ("silent-promotion", "torch.cat")


class Join(nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1, dtype=dtype))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.cat([a, b])


@pytest.mark.parametrize(("dtype", "name"), [(H, "float16"), (F32, "float32")])
def test_fix_mode_casts_a_cat_to_the_running_modules_dtype(dtype, name):
    model = Join(dtype)
    with watch(model=model, mode="fix") as s:
        out = model(torch.ones(2, dtype=H), torch.ones(2))
    assert out.dtype == dtype
    (f,) = s.report.findings
    assert f.code == "silent-promotion" and f.data["expected_dtype"] == name


def test_ops_cuda_autocast_promotes_are_not_mismatches_there():
    """dot, index_put and scatter_add are on CUDA autocast's promote list: autocast casts them itself.
    The in-place index_put_/scatter_add_ are not autocast ops, so they keep no autocast device."""
    for func in (torch.dot, torch.Tensor.index_put, torch.scatter_add):
        assert {"cuda", "xpu", "mps"} <= CONTRACTS[func].autocast, func.__name__
        assert "cpu" not in CONTRACTS[func].autocast, func.__name__
    for func in (torch.Tensor.index_put_, torch.Tensor.scatter_add_):
        assert not CONTRACTS[func].autocast, func.__name__
