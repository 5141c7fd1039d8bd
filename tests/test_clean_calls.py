"""Repeats of a root call seen clean check every op but tag no origins inside (watching/clean_calls):
a mismatch that appears only in a repeat is still found, and its origin is filled in by the next
call; a call with other dtypes, or a converted model, is watched in full again."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

import tiny_models
from dtype_doctor import watch
from dtype_doctor.watching import clean_calls
from dtype_doctor.watching.provenance import Provenance

B = torch.bfloat16


class Gate(nn.Module):
    """Mixes in a float32 tensor only when its activations are large: a value-dependent branch."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        if bool(h.abs().max() > 1e3):
            scale = torch.ones(4)  # float32 in a bfloat16 model
            h = h * scale
        return h


SCALE_LINE = inspect.getsourcelines(Gate.forward)[1] + 3  # `scale = torch.ones(4)`


@pytest.fixture(autouse=True)
def _fresh():
    clean_calls.forget_all()
    yield
    clean_calls.forget_all()


@pytest.fixture
def shares(monkeypatch):
    """How many outputs were given their operands' origin (the per-op tagging a repeat skips)."""
    calls = []
    original = Provenance.share

    def counted(self, srcs, out):
        calls.append(1)
        return original(self, srcs, out)

    monkeypatch.setattr(Provenance, "share", counted)
    return calls


def test_a_repeat_tags_nothing_inside_and_gives_the_same_outputs(shares):
    gpt = tiny_models.gpt2(head=False, n_layer=2, n_embd=32, n_head=2, vocab_size=64).eval()
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        plain = gpt(ids).last_hidden_state
        with watch(model=gpt) as first:
            out1 = gpt(ids).last_hidden_state
        tagged_first = len(shares)
        with watch(model=gpt) as second:
            out2 = gpt(ids).last_hidden_state
    assert tagged_first > 20
    assert len(shares) == tagged_first  # the repeat shared no origin
    assert first.report.findings == [] and second.report.findings == []
    assert torch.equal(out1, plain) and torch.equal(out2, plain)


def test_a_mismatch_only_a_repeat_meets_is_found_and_the_next_call_names_its_origin():
    model = Gate().to(B)
    small = torch.randn(2, 4, dtype=B)
    big = small * 1e5
    with torch.no_grad(), watch(model=model) as s:
        model(small)
        model(small)  # a repeat of a clean call
        model(big)  # same dtypes in, but the branch mixes in float32 now
        found = [f for f in s.report.findings if f.code == "silent-promotion"]
        assert len(found) == 1, [f.code for f in s.report.findings]
        model(big)  # the signature was forgotten: watched in full, origins and all
    assert found[0].count == 2
    odd = next(o for o in found[0].operands if o.dtype == "float32").origin
    assert (odd.kind, odd.line) == ("op", SCALE_LINE), odd
    assert "ones" in odd.op


def test_other_dtypes_in_or_a_converted_model_are_watched_in_full(shares):
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 2))
    x = torch.randn(3, 4)
    with torch.no_grad():
        with watch(model=model):
            model(x)
        n = len(shares)
        with watch(model=model):
            model(x)
        assert len(shares) == n  # a repeat
        model.to(B)
        with watch(model=model) as s:
            model(x.to(B))  # the model's dtypes changed: a new signature
        assert len(shares) > n
        with pytest.raises(RuntimeError), watch(model=model) as s:
            model(x)  # float32 into the bfloat16 model: a new signature, found with its origin
    error = s.report.errors[0]
    origin = next(o for o in error.operands if o.dtype == "float32").origin
    assert origin.kind == "input", origin


def test_fix_mode_watches_every_call_in_full(shares):
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU())
    x = torch.randn(1, 4)
    counts = []
    with torch.no_grad():
        for _ in range(3):
            with watch(model=model, mode="fix"):
                model(x)
            counts.append(len(shares))
    assert counts[0] > 0 and counts[2] - counts[1] == counts[0]


def test_a_replaced_weight_is_not_kept_alive_and_its_dtype_counts():
    import gc
    import weakref

    model = nn.Linear(4, 4)
    x = torch.randn(1, 4)
    with torch.no_grad():
        with watch(model=model):
            model(x)
        old = weakref.ref(model.weight)
        model.weight = nn.Parameter(model.weight.detach().to(B))  # a loader that assigns new weights
        gc.collect()
        assert old() is None
        with pytest.raises(RuntimeError), watch(model=model) as s:
            model(x)  # a new signature: watched in full
    assert s.report.errors and s.report.errors[0].operands
