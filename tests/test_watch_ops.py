"""watch on single torch ops and small nn modules: each contract, each mode, autocast, GradScaler."""

from __future__ import annotations

import inspect
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dtype_doctor import DtypeMismatchError, watch

H, B, F32 = torch.float16, torch.bfloat16, torch.float32


def here() -> int:
    """The line number of the caller: origins must point at the line that made the tensor."""
    return inspect.currentframe().f_back.f_lineno


def only(report, code):
    found = [f for f in report.findings if f.code == code]
    assert len(found) == 1, [(f.code, f.message) for f in report.findings]
    return found[0]


def roles(finding):
    return {o.role: o for o in finding.operands}


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes (PEP 678) are Python 3.11+")
def test_linear_fp32_input_into_fp16_layer_names_module_roles_and_origin():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).half()
    with pytest.raises(RuntimeError, match="mat1 and mat2") as err, watch(model=model) as s:
        x = torch.randn(3, 4)
        line = here()
        model(x)
    f = only(s.report, "matmul-dtype-mismatch")
    assert f.location.module == "0" and f.location.op == "F.linear"
    ops = roles(f)
    assert ops["input"].dtype == "float32" and ops["weight"].dtype == "float16"
    assert ops["input"].origin.kind == "input" and ops["input"].origin.name == "input"
    assert ops["input"].origin.file.endswith("test_watch_ops.py") and ops["input"].origin.line == line + 1
    assert ops["input"].origin.chain[0].op == "torch.randn" and ops["input"].origin.chain[0].line == line - 1
    assert ops["weight"].origin.kind == "parameter" and ops["weight"].origin.name == "0.weight"
    # the user's own exception, message unchanged, diagnosis as a note
    assert str(err.value) == "mat1 and mat2 must have the same dtype, but got Float and Half"
    assert any("dtype-doctor [matmul-dtype-mismatch]" in n and "'0.weight'" in n for n in err.value.__notes__)


def test_fp16_weight_with_fp32_bias_is_the_bias():
    lin = nn.Linear(4, 4).half()
    lin.bias.data = lin.bias.data.float()
    with pytest.raises(RuntimeError, match="self and mat2"), watch(model=lin) as s:
        lin(torch.randn(2, 4, dtype=H))
    f = only(s.report, "matmul-dtype-mismatch")
    odd = [o for o in f.operands if o.dtype == "float32"]
    assert [o.role for o in odd] == ["bias"] and odd[0].origin.name == "bias"
    assert f.data["expected_dtype"] == "float16"


@pytest.mark.parametrize(
    ("x_dtype", "bias_dtype", "code"),
    [(F32, H, "conv-bias-dtype-mismatch"), (H, F32, "conv-bias-dtype-mismatch")],
)
def test_conv_bias_is_checked_first(x_dtype, bias_dtype, code):
    conv = nn.Conv2d(2, 2, 3).half()
    conv.bias.data = conv.bias.data.to(bias_dtype)
    with pytest.raises(RuntimeError, match="bias type"), watch(model=conv) as s:
        conv(torch.randn(1, 2, 5, 5, dtype=x_dtype))
    assert only(s.report, code).location.op == "conv2d"


def test_conv_weight_mismatch_without_bias():
    conv = nn.Conv2d(2, 2, 3, bias=False).half()
    with pytest.raises(RuntimeError), watch() as s:
        conv(torch.randn(1, 2, 5, 5))
    f = only(s.report, "conv-weight-dtype-mismatch")
    assert roles(f)["input"].dtype == "float32" and roles(f)["weight"].dtype == "float16"


def test_norms_follow_the_cpu_rule():
    ln = nn.LayerNorm(8)  # fp32 params take a half input: allowed
    gn = nn.GroupNorm(2, 4)
    with watch() as s:
        ln(torch.randn(2, 8, dtype=H))
        gn(torch.randn(1, 4, 3, 3, dtype=B))
    assert s.report.findings == []
    ln16 = nn.LayerNorm(8).half()
    with pytest.raises(RuntimeError, match="mixed dtype"), watch(model=ln16) as s:
        ln16(torch.randn(2, 8))
    f = only(s.report, "norm-dtype-mismatch")
    assert roles(f)["input"].dtype == "float32" and f.data["expected_dtype"] == "float16"


def test_sdpa_mask_rule_and_qkv():
    q = torch.randn(1, 2, 4, 8, dtype=H)
    with watch() as s:
        F.scaled_dot_product_attention(q, q, q, attn_mask=torch.zeros(4, 4))  # fp32 mask is accepted
    assert s.report.findings == []
    with pytest.raises(RuntimeError, match="attn_mask"), watch() as s:
        F.scaled_dot_product_attention(q, q, q, attn_mask=torch.zeros(4, 4, dtype=B))
    assert [o.role for o in only(s.report, "attention-dtype-mismatch").operands][-1] == "mask"
    with pytest.raises(RuntimeError, match="query, key, and value"), watch() as s:
        F.scaled_dot_product_attention(q, q.float(), q.float())
    f = only(s.report, "attention-dtype-mismatch")
    assert {o.role for o in f.operands if o.dtype == "float32"} == {"key", "value"}


def test_indexed_writes():
    dst = torch.zeros(4, 3, dtype=H)
    idx = torch.tensor([0, 2])
    with watch() as s:
        dst[:, 0] = torch.ones(4)  # basic indexing casts: fine
        dst[dst > 1] = torch.tensor(2.0)  # masked_fill path: fine
    assert s.report.findings == []
    with pytest.raises(RuntimeError, match="Index put"), watch() as s:
        values = torch.ones(2, 3)
        line = here()
        dst[idx] = values
    f = only(s.report, "index-put-dtype-mismatch")
    assert roles(f)["value"].origin.line == line - 1 and roles(f)["destination"].dtype == "float16"
    for op in (
        lambda: dst.index_put_((idx,), torch.ones(2, 3)),
        lambda: dst.index_add_(0, idx, torch.ones(2, 3)),
        lambda: dst.scatter_(0, torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3)),
        lambda: torch.lerp(dst, torch.ones(4, 3), 0.5),
    ):
        with pytest.raises(RuntimeError), watch() as s:
            op()
        assert s.report.errors, "no finding for an indexed write that torch rejects"


def test_embedding_needs_integer_indices():
    emb = nn.Embedding(10, 4)
    with pytest.raises(RuntimeError, match="indices"), watch(model=emb) as s:
        emb(torch.zeros(3))
    assert roles(only(s.report, "scalar-type-mismatch"))["indices"].dtype == "float32"


def test_silent_promotion_in_user_code_is_reported_and_strict_raises():
    latents = torch.randn(1, 4, 8, 8, dtype=H)
    with watch() as s:
        latent_mask = torch.ones(1, 1, 8, 8)
        line = here()
        both = torch.cat([latents, latent_mask], dim=1)
        scaled = latents * torch.ones(8)
    assert both.dtype == F32 and scaled.dtype == F32  # observe changes nothing
    cat = next(f for f in s.report.findings if f.location.op == "torch.cat")
    assert cat.code == "silent-promotion" and cat.severity.value == "warning"
    mask = next(o for o in cat.operands if o.dtype == "float32")
    assert mask.origin.op == "torch.ones" and mask.origin.line == line - 1
    assert "latent_mask" in cat.fixes[0].title  # the fix names the user's variable
    assert any(f.location.op in ("Tensor.mul", "Tensor.__mul__") for f in s.report.findings)
    with pytest.raises(DtypeMismatchError) as err, watch(mode="strict"):
        torch.cat([latents, torch.zeros(1, 1, 8, 8)], dim=1)
    assert err.value.finding.code == "silent-promotion"


def test_zero_dim_and_same_dtype_do_not_promote():
    x = torch.randn(4, dtype=H)
    with watch() as s:
        y = x * torch.tensor(2.0) + x
        torch.cat([x, x])
    assert y.dtype == H and s.report.findings == []


def test_fix_mode_casts_every_odd_operand_and_lists_them_all():
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    model[0].half()  # fp32 input into it; its fp16 output passes the fp32 norm and meets fp32 '2'
    with watch(model=model, mode="fix") as s:
        out = model(torch.randn(3, 4))
    assert out.dtype == F32
    mods = [(f.location.module, roles(f)["input"].dtype) for f in s.report.findings]
    assert mods == [("0", "float32"), ("2", "float16")]
    assert all("fix mode" in f.message and f.data["action"] for f in s.report.findings)


def test_fix_mode_on_meta_tensors():
    with torch.device("meta"):
        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8), nn.Flatten(), nn.LazyLinear(4))
    model = model.half()
    with watch(model=model, mode="fix") as s:
        out = model(torch.empty(1, 3, 8, 8, device="meta"))
    assert out.is_meta and out.dtype == H
    assert [f.code for f in s.report.findings] == ["conv-bias-dtype-mismatch"]


def test_strict_stops_before_the_op():
    lin = nn.Linear(4, 4).half()
    with pytest.raises(DtypeMismatchError) as err, watch(model=lin, mode="strict"):
        lin(torch.randn(2, 4))
    assert err.value.finding.location.op == "F.linear" and "dtype-doctor" in str(err.value)


def test_autocast_casts_are_not_reported():
    lin = nn.Linear(4, 4).half()
    with watch() as s, torch.autocast("cpu", dtype=torch.float16):
        y = lin(torch.randn(2, 4)) + torch.randn(2, 4)  # autocast output meets fp32: normal
        torch.cat([y, torch.randn(2, 4)])
    assert s.report.findings == []


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes (PEP 678) are Python 3.11+")
def test_half_model_under_the_other_autocast_is_reported_before_the_norm_fails():
    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)).half()
    bf16_autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="mixed dtype") as err, watch(model=model) as s, bf16_autocast:
        model(torch.randn(2, 8))
    first = s.report.findings[0]
    assert first.code == "autocast-half-conflict" and first.location.module == "0"
    norm = s.report.findings[1]
    assert norm.code == "autocast-half-conflict" and norm.location.op == "layer_norm"
    assert roles(norm)["input"].origin.kind == "autocast"
    assert "autocast-half-conflict" in err.value.__notes__[0]


def test_cat_under_the_other_autocast_is_reported():
    bf16_autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="prioritize"), watch() as s, bf16_autocast:
        torch.cat([torch.ones(2, dtype=H), torch.ones(2, dtype=H)])
    assert s.report.findings[0].code == "autocast-half-conflict"


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r: int = 2) -> None:
        super().__init__()
        self.base = base
        # the bug: adapter weights created in the base model's dtype (fp16), not fp32
        self.lora_A = nn.Linear(base.in_features, r, bias=False, dtype=base.weight.dtype)
        self.lora_B = nn.Linear(r, base.out_features, bias=False, dtype=base.weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.lora_B(self.lora_A(x))


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes (PEP 678) are Python 3.11+")
def test_grad_scaler_fp16_gradients_names_the_adapter_parameters():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).half().requires_grad_(False)
    model[2] = LoRALinear(model[2])
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    with pytest.raises(ValueError, match="unscale FP16 gradients") as err, watch(model=model) as s:
        scaler.scale(model(torch.randn(2, 8, dtype=H)).float().sum()).backward()
        scaler.step(opt)
    f = only(s.report, "fp16-gradient-unscale")
    assert f.data["fp16_params"] == ["2.lora_A.weight", "2.lora_B.weight"]
    assert "LoRALinear at '2'" in f.message
    assert "2.lora_A.weight" in err.value.__notes__[0]
    assert torch.amp.GradScaler.unscale_.__name__ == "unscale_" and not hasattr(
        torch.amp.GradScaler.unscale_, "__wrapped__"
    )


def test_a_pipeline_of_components_gives_prefixed_names():
    text_encoder, unet = nn.Linear(4, 4), nn.Linear(4, 4).half()
    with pytest.raises(RuntimeError), watch(model={"text_encoder": text_encoder, "unet": unet}) as s:
        unet(text_encoder(torch.randn(1, 4)))
    f = only(s.report, "matmul-dtype-mismatch")
    assert f.location.module == "unet" and roles(f)["weight"].origin.name == "unet.weight"
    assert roles(f)["input"].origin.kind == "input" and roles(f)["input"].origin.module == "unet"


@pytest.mark.filterwarnings("ignore:Casting complex values to real")
@pytest.mark.parametrize("bad", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_non_floating_input_into_a_float_layer_is_a_mismatch_and_fix_mode_casts_it(bad):
    model = nn.Linear(4, 4).half()
    x = torch.ones(2, 4, dtype=bad)
    with pytest.raises(RuntimeError), torch.no_grad():  # the real run fails
        model(x)
    with pytest.raises(RuntimeError), watch(model=model) as s, torch.no_grad():
        model(x)
    f = only(s.report, "matmul-dtype-mismatch")
    assert roles(f)["input"].dtype == str(bad)[6:] and "it needs float16" in f.message
    with watch(model=model, mode="fix") as s, torch.no_grad():
        assert model(x).dtype == H  # the odd operand was cast to the weight dtype
    assert f"cast input {str(bad)[6:]} -> float16" in only(s.report, "matmul-dtype-mismatch").message


def test_integer_input_into_conv_and_norm_is_a_mismatch():
    conv, norm = nn.Conv1d(2, 2, 1), nn.LayerNorm(4)
    for module, x, code in (
        (conv, torch.ones(1, 2, 4, dtype=torch.int64), "conv-weight-dtype-mismatch"),
        (norm, torch.ones(2, 4, dtype=torch.int64), "norm-dtype-mismatch"),
    ):
        with pytest.raises(RuntimeError), torch.no_grad():
            module(x)
        with watch(model=module, mode="fix") as s, torch.no_grad():
            assert module(x).dtype == F32
        assert only(s.report, code).data["action"] == "cast input int64 -> float32"


def test_legitimate_integer_and_bool_operands_stay_clean():
    emb = nn.Embedding(10, 4).half()
    q = torch.randn(1, 2, 3, 4, dtype=H)
    with watch(model=emb) as s, torch.no_grad():
        emb(torch.tensor([[1, 2]]))  # integer indices
        F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(3, 3, dtype=torch.bool))
        torch.ones(2, 2, dtype=torch.int64) @ torch.ones(2, 2, dtype=torch.int64)  # same dtype
        torch.zeros(4, dtype=H).index_put_((torch.tensor([1]),), torch.ones(1, dtype=H))
    assert s.report.findings == []


def test_autocast_does_not_cast_an_integer_operand_so_it_is_still_reported():
    model, x = nn.Linear(4, 4), torch.ones(2, 4, dtype=torch.int64)
    with pytest.raises(RuntimeError), torch.autocast("cpu", dtype=B), torch.no_grad():
        model(x)
    with (
        pytest.raises(RuntimeError),
        watch(model=model) as s,
        torch.autocast("cpu", dtype=B),
        torch.no_grad(),
    ):
        model(x)
    assert roles(only(s.report, "matmul-dtype-mismatch"))["input"].dtype == "int64"
