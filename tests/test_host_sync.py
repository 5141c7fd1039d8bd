"""No host synchronisation in the hot paths: watch and numerics read no tensor value per op or module.

On a GPU each `.item()`, `.tolist()`, `bool(tensor)` or `float(tensor)` stalls the stream until every
queued kernel has run. The Tensor methods are patched to count the calls made during a real forward;
a watched forward makes exactly the calls the plain forward makes, and numerics monitoring adds one
read-back per step (its statistics, stacked), whatever the number of ops and modules.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import tiny_models
from dtype_doctor import watch
from dtype_doctor.numerics import NumericsMonitor

READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__")


@pytest.fixture
def host_reads(monkeypatch):
    counts: Counter = Counter()
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            counts[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return counts


def _forward_reads(counts: Counter, run) -> Counter:
    counts.clear()
    with torch.no_grad():
        run()
    return Counter(counts)


@pytest.mark.parametrize("mode", ["observe", "strict"])
def test_watch_reads_no_value_per_op_gpt2(host_reads, mode):
    model = tiny_models.gpt2(head=False).eval()
    ids = torch.randint(0, 100, (1, 8))
    plain = _forward_reads(host_reads, lambda: model(ids))

    def watched():
        with watch(model=model, mode=mode) as s:
            model(ids)
        assert s.report.findings == []

    assert _forward_reads(host_reads, watched) == plain


def test_watch_reads_no_value_per_op_unet(host_reads):
    model = tiny_models.unet(sample_size=8).eval()
    args = (torch.randn(1, 4, 8, 8), torch.tensor([10]))
    kwargs = {"encoder_hidden_states": torch.randn(1, 8, 32)}
    plain = _forward_reads(host_reads, lambda: model(*args, **kwargs))

    def watched():
        with watch(model=model):
            model(*args, **kwargs)

    assert _forward_reads(host_reads, watched) == plain


def test_numerics_reads_back_once_per_step(host_reads):
    model = tiny_models.gpt2(head=False).eval()
    ids = torch.randint(0, 100, (1, 8))
    plain = _forward_reads(host_reads, lambda: model(ids))
    steps = 3

    def monitored():
        with NumericsMonitor(model=model, backward=False, shadow=False) as mon:
            for _ in range(steps):
                model(ids)
        assert mon.tensors_measured >= 20 * steps  # every module output was measured

    extra = _forward_reads(host_reads, monitored) - Counter({k: v * steps for k, v in plain.items()})
    # one stacked read-back of the statistics per step, not one per op or module
    assert 1 <= sum(extra.values()) <= steps, extra  # (at least one: the counting works)
