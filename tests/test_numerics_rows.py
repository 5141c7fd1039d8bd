"""Batched statistics rows (numerics/stats.Rows) equal the per-tensor rows, on both batch paths."""

from __future__ import annotations

import math

import pytest
import torch

from dtype_doctor.numerics import stats
from dtype_doctor.numerics.stats import Rows, tensor_stats


def _tensors() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [
        torch.tensor([0.0, 1e-6, 3.0, -5.0]),
        torch.tensor([0.0, 0.0]).half(),
        torch.tensor([2.0, -7.0]).half(),
        torch.full((70000,), 1.0).half(),  # counts beyond float16's range
        torch.tensor([1e-6, 7e-5, 6.103515625e-05, -3.0]).half(),  # the smallest normal is not tiny
        torch.tensor([[1.0, -2.0], [0.0, math.inf]]).bfloat16(),
        torch.randn(3, 4).t(),  # not contiguous
        torch.randn(2, 3, 4),
        torch.randn(80, 80),  # measured at once on the CPU
    ]


@pytest.mark.parametrize("path", ["matrix", "foreach"])
def test_batched_rows_equal_per_tensor_rows(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if path == "foreach":  # the accelerator path, run here on the CPU
        monkeypatch.setattr(stats, "_matrix_stats", stats._foreach_stats)
    xs = _tensors()
    rows = Rows(batch=3)
    expected = []
    for i, x in enumerate(xs):
        rows.add(x, signed=i % 2 == 0)
        expected.append(tensor_stats(x, signed=i % 2 == 0).tolist())
        if i == 2:
            rows.add_row(torch.ones(5))
            expected.append([1.0] * 5)
    assert rows.read() == expected


def test_rows_measure_the_value_at_add_time() -> None:
    x = torch.tensor([1.0, -70000.0])
    rows = Rows()
    rows.add(x)
    x.clamp_(-1, 1)  # the user's code changes it in place before the batch runs
    assert rows.read()[0][stats.ABSMAX] == 70000.0


def test_nan_rows() -> None:
    x = torch.tensor([0.0, 1e-6, float("nan")])
    row = Rows()
    row.add(x, signed=True)
    absmax, min_nonzero, n_tiny, n_zero, top = row.read()[0]
    assert math.isnan(absmax) and math.isnan(top)
    assert (n_tiny, n_zero) == (1.0, 1.0)
    assert min_nonzero == pytest.approx(1e-6) or min_nonzero == math.inf


def test_range_rows_give_the_per_tensor_abs_max_and_signed_max() -> None:
    """A range row (one `aminmax`) carries tensor_stats' abs-max and signed max; inf, -inf and NaN
    show there; the underflow columns are unknown (NaN), which `is_light` tells."""
    xs = [
        *_tensors(),
        torch.tensor([1.0, -math.inf]).half(),  # an additive mask: abs-max inf, max finite
        torch.tensor([2.0, math.nan, -3.0]).bfloat16(),
        torch.tensor([-70000.0, 3.0], dtype=torch.float64),
    ]
    rows = Rows()
    for x in xs:
        rows.add_range(x)
    got = rows.read()
    for x, row in zip(xs, got, strict=True):
        full = tensor_stats(x, signed=True).tolist()
        assert stats.is_light(row)
        for column in (stats.ABSMAX, stats.MAX):
            assert row[column] == full[column] or (math.isnan(row[column]) and math.isnan(full[column]))


def test_range_rows_measure_the_value_at_add_time_without_a_copy() -> None:
    x = torch.tensor([1.0, -70000.0])
    rows = Rows()
    first = rows.add_range(x)
    x.clamp_(-1, 1)
    alias = rows.alias(first)  # a view of all of x: the same row, no op
    for row in (rows.read()[first], rows.read()[alias]):
        assert (row[stats.ABSMAX], row[stats.MAX]) == (70000.0, 1.0)
