"""Strict watch and check under CPU autocast on real models whose composite ops autocast makes work
(issue 18): Mamba2's and Funnel's `torch.einsum` and diffusers VQModel's `torch.cdist` get one float32
and one low operand and run, because einsum reaches bmm (autocast runs it low) and cdist is in CPU
autocast's float32 list. The table is measured (autocast_ops.json), so strict lets them run and check
reports nothing; an op autocast does not cast is still stopped."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
diffusers = pytest.importorskip("diffusers")

import dtype_doctor as dd  # noqa: E402
from dtype_doctor.errors import DtypeMismatchError  # noqa: E402

DTYPES = pytest.mark.parametrize("low", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])


def _mamba2():
    config = transformers.Mamba2Config(
        vocab_size=64, hidden_size=16, num_hidden_layers=1, state_size=8, num_heads=4, head_dim=8,
        n_groups=1, expand=2, conv_kernel=4, chunk_size=8,
    )  # fmt: skip
    return transformers.Mamba2Model(config).eval(), {"input_ids": torch.randint(0, 64, (2, 8))}


def _funnel():
    config = transformers.FunnelConfig(
        vocab_size=64, d_model=16, n_head=2, d_head=8, d_inner=32, block_sizes=[1, 1], num_decoder_layers=1
    )
    return transformers.FunnelModel(config).eval(), {"input_ids": torch.randint(0, 64, (2, 8))}


def _vqmodel(low):
    model = diffusers.VQModel(
        block_out_channels=(8,), norm_num_groups=4, latent_channels=4, num_vq_embeddings=32, vq_embed_dim=4,
        sample_size=8, down_block_types=("DownEncoderBlock2D",), up_block_types=("UpDecoderBlock2D",),
    ).eval()  # fmt: skip
    return model, {"sample": torch.randn(1, 3, 8, 8, dtype=low)}  # a low input into the float32 model


MODELS = {"mamba2": lambda low: _mamba2(), "funnel": lambda low: _funnel(), "vqmodel": _vqmodel}


def _first(out):
    return out[0] if isinstance(out, tuple) else next(iter(out.values()))


@DTYPES
@pytest.mark.parametrize("name", list(MODELS))
def test_strict_lets_a_model_autocast_makes_work_run(name, low):
    torch.manual_seed(0)
    model, inputs = MODELS[name](low)
    with torch.no_grad(), torch.autocast("cpu", dtype=low):
        real = _first(model(**inputs))
    with torch.no_grad(), dd.watch(model, mode="strict") as session, torch.autocast("cpu", dtype=low):
        watched = _first(model(**inputs))
    assert session.report.errors == []
    assert watched.dtype == real.dtype and torch.equal(watched, real)


@DTYPES
@pytest.mark.parametrize("name", list(MODELS))
def test_check_with_the_cpu_autocast_finds_nothing_where_it_runs(name, low):
    model, inputs = MODELS[name](low)
    report = dd.check(model, dtype=torch.float32, autocast=torch.autocast("cpu", dtype=low), **inputs)
    assert report.meta["autocast_device"] == "cpu"
    assert [f.code for f in report.findings if f.severity == dd.Severity.ERROR] == []
    cuda = dd.check(model, dtype=torch.float32, autocast=low, **inputs)  # CUDA's lists cast them too
    assert [f.code for f in cuda.findings if f.severity == dd.Severity.ERROR] == []


class _Readout(torch.nn.Module):
    """A float32 vector read out of a low activation with mv: CPU autocast leaves mv alone."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.v = torch.nn.Parameter(torch.randn(4))

    def forward(self, x):
        return torch.mv(self.proj(x), self.v)  # proj runs low under autocast, v stays float32


@DTYPES
def test_strict_still_stops_an_op_cpu_autocast_does_not_cast(low):
    model, x = _Readout(), torch.randn(3, 4)
    with pytest.raises(RuntimeError), torch.autocast("cpu", dtype=low):
        model(x)  # the real run fails
    strict = dd.watch(model, mode="strict")
    with pytest.raises(DtypeMismatchError) as info, strict, torch.autocast("cpu", dtype=low):
        model(x)
    assert info.value.finding.code == "matmul-dtype-mismatch"
    assert "test_autocast_models.py" in str(info.value.finding.location.file)
    report = dd.check(model, x, dtype=torch.float32, autocast=torch.autocast("cpu", dtype=low))
    assert [f.code for f in report.findings if f.severity == dd.Severity.ERROR] == ["matmul-dtype-mismatch"]
