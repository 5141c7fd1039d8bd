"""explain on the real messages torch 2.13 raises on CPU: the bare message and the full traceback.

Each op runs for real; the test catches the exception and gives `str(exc)` and the formatted
traceback to explain, then checks the family and which operand is which.
"""

from __future__ import annotations

import traceback

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from dtype_doctor import explain  # noqa: E402

H, B = torch.float16, torch.bfloat16


def _linear_bias():
    return F.linear(torch.randn(2, 4), torch.randn(3, 4, dtype=H), torch.randn(3, dtype=H))


def _module_linear_no_bias():
    layer = nn.Linear(4, 3, bias=False).half()
    return layer(torch.randn(2, 4))


def _linear_odd_bias():
    layer = nn.Linear(4, 3).half()
    layer.bias.data = layer.bias.data.float()
    return layer(torch.randn(2, 4, dtype=H))


def _mm():
    a, b = torch.randn(2, 4, dtype=B), torch.randn(4, 3)
    return torch.mm(a, b)


def _bmm():
    return torch.bmm(torch.randn(1, 2, 4), torch.randn(1, 4, 3, dtype=H))


def _baddbmm():
    return torch.baddbmm(torch.randn(1, 2, 3), torch.randn(1, 2, 4, dtype=H), torch.randn(1, 4, 3, dtype=H))


def _conv_bias():
    return nn.Conv2d(3, 4, 3).half()(torch.randn(1, 3, 8, 8))


def _conv_no_bias():
    return nn.Conv2d(3, 4, 3, bias=False).half()(torch.randn(1, 3, 8, 8))


def _layer_norm():
    return nn.LayerNorm(4).half()(torch.randn(2, 4))


def _group_norm():
    return nn.GroupNorm(2, 4).half()(torch.randn(1, 4, 3, 3))


def _sdpa():
    q = torch.randn(1, 2, 4, 8, dtype=H)
    return F.scaled_dot_product_attention(q, torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8))


def _index_put():
    cache = torch.zeros(4, dtype=H)
    cache[torch.tensor([1])] = torch.ones(1)


def _grad_scaler_fp16_params():
    model = nn.Linear(4, 4).half()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    loss = model(torch.randn(2, 4, dtype=H)).float().sum()
    scaler.scale(loss).backward()
    scaler.step(opt)


def _fp16_model_under_bf16_autocast():
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)).half()

    @torch.autocast("cpu", dtype=torch.bfloat16)
    def forward(x):
        return model(x)

    return forward(torch.randn(2, 4))


# (op, family from the message alone, family with the traceback, {role: dtype} expected)
CASES = [
    (_linear_bias, "matmul-dtype-mismatch", "matmul-dtype-mismatch", {"input": "float32", "weight": "float16"}),
    (_module_linear_no_bias, "matmul-dtype-mismatch", "matmul-dtype-mismatch", {"input": "float32", "weight": "float16"}),
    (_linear_odd_bias, "matmul-dtype-mismatch", "matmul-dtype-mismatch", {"bias": "float32", "weight": "float16"}),
    (_mm, "matmul-dtype-mismatch", "matmul-dtype-mismatch", {"left": "bfloat16", "right": "float32"}),
    (_bmm, "scalar-type-mismatch", "matmul-dtype-mismatch", {"left": "float32", "right": "float16"}),
    (_baddbmm, "matmul-dtype-mismatch", "matmul-dtype-mismatch", {"input": "float32", "batch1": "float16", "batch2": "float16"}),
    (_conv_bias, "conv-bias-dtype-mismatch", "conv-bias-dtype-mismatch", {"input": "float32", "bias": "float16"}),
    (_conv_no_bias, "scalar-type-mismatch", "conv-weight-dtype-mismatch", {"input": "float32", "weight": "float16"}),
    (_layer_norm, "norm-dtype-mismatch", "norm-dtype-mismatch", {}),
    (_group_norm, "norm-dtype-mismatch", "norm-dtype-mismatch", {}),
    (_sdpa, "attention-dtype-mismatch", "attention-dtype-mismatch", {"query": "float16", "key": "float32", "value": "float32"}),
    (_index_put, "index-put-dtype-mismatch", "index-put-dtype-mismatch", {"destination": "float16", "source": "float32"}),
    (_grad_scaler_fp16_params, "fp16-gradient-unscale", "fp16-gradient-unscale", {}),
    (_fp16_model_under_bf16_autocast, "norm-dtype-mismatch", "autocast-half-conflict", {}),
]  # fmt: skip


def _raise(fn) -> BaseException:
    with pytest.raises((RuntimeError, ValueError)) as info:
        fn()
    return info.value


@pytest.fixture(scope="module")
def raised():
    return {fn.__name__: _raise(fn) for fn, *_ in CASES}


def _roles(finding) -> dict[str, str | None]:
    return {o.role: o.dtype for o in finding.operands}


@pytest.mark.parametrize(
    ("fn", "bare", "full", "roles"), CASES, ids=[c[0].__name__.strip("_") for c in CASES]
)
def test_bare_message(raised, fn, bare, full, roles):
    exc = raised[fn.__name__]
    finding = explain(str(exc)).findings[0]
    assert finding.code == bare, str(exc)
    if fn is _mm:  # the bare text cannot tell torch.mm from F.linear: read as F.linear (m1 input, m2 weight)
        roles = {"input": "bfloat16", "weight": "float32"}
    if bare == full and roles:
        assert _roles(finding) == roles


@pytest.mark.parametrize(
    ("fn", "bare", "full", "roles"), CASES, ids=[c[0].__name__.strip("_") for c in CASES]
)
def test_full_traceback(raised, fn, bare, full, roles):
    exc = raised[fn.__name__]
    report = explain("".join(traceback.format_exception(exc)))
    assert len(report.findings) == 1, report.codes()
    finding = report.findings[0]
    assert finding.code == full
    if roles:
        assert _roles(finding) == roles
    assert finding.location is not None
    assert finding.location.file == __file__  # the deepest frame outside torch: this test's op
    assert finding.fixes


def test_the_traceback_names_the_torch_op(raised):
    report = explain("".join(traceback.format_exception(raised["_conv_bias"])))
    assert report.findings[0].location.op == "conv._conv_forward"


def test_the_quoted_raise_line_is_not_a_second_error(raised):
    report = explain("".join(traceback.format_exception(raised["_grad_scaler_fp16_params"])))
    assert report.findings[0].count == 1


def test_autocast_conflict_fixes_name_both_precision_tools(raised):
    text = "".join(traceback.format_exception(raised["_fp16_model_under_bf16_autocast"]))
    finding = explain(text).findings[0]
    assert "autocast" in finding.fixes[0].title
    assert finding.data["refined_from"] == "norm-dtype-mismatch"
