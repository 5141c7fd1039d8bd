"""compare's keep-in-fp32 recommendation is measured: per-module-type sets are tried first, and a
set is recommended only when it lowers the error (both numbers shown); every emitted set is run."""

from __future__ import annotations

import torch

import numerics_zoo as zoo  # type: ignore[import-not-found]
from dtype_doctor.comparing import compare

NORMS = [f"blocks.{i}.norm" for i in range(4)]


def _x() -> torch.Tensor:
    return torch.randn(2, 8, zoo.D, generator=torch.Generator().manual_seed(0))


def _by_code(report, code):
    return [f for f in report.findings if f.code == code]


def test_every_norm_of_the_worst_type_is_kept_not_the_three_worst_modules():
    report = compare(zoo.make_norm_stack, [_x()], precisions=["fp32", "fp16"], repeats=3, warmup=1)
    (high,) = _by_code(report, "precision-error-high")
    search = high.data["keep_search"]
    assert search[0]["keep"] == NORMS and search[0]["helps"] and search[0]["error"] < 1e-2
    assert len(search[0]["keep"]) > 3  # top_k=3 alone would leave one norm wrong
    assert any(t["keep"] != NORMS and t["error"] > 0.1 for t in search[1:])  # the top-3 set, measured
    assert (
        "measured keeping blocks.0.norm, blocks.1.norm, blocks.2.norm, blocks.3.norm in fp32: error 9.1e-01 →"
        in (high.message)
    )
    # the emitted fix, executed: the error drops as measured
    (fix,) = [f for f in high.fixes if "keep_fp32=" in f.snippet]
    scope = {"model": zoo.make_norm_stack(), "torch": torch}
    exec(fix.snippet, scope)
    with torch.no_grad():
        got, want = scope["model"](_x().half()).float(), zoo.make_norm_stack()(_x())
    assert ((got - want).norm() / want.norm()).item() < 1e-2
    (rec,) = _by_code(report, "precision-recommendation")
    assert "also measured: keeping blocks.0.norm, blocks.1.norm, blocks.2.norm: 4.5e-01" in rec.message


def test_a_keep_set_that_does_not_lower_the_error_is_not_recommended():
    report = compare(
        zoo.make_norm_stack, [_x()], precisions=["fp32", "fp16"], keep_fp32=["head"], repeats=3, warmup=1
    )
    (high,) = _by_code(report, "precision-error-high")
    assert not high.data["keep_search"][0]["helps"]
    assert "(no lower: no keep-in-fp32 set is recommended)" in high.message
    assert not any("keep_fp32=" in (f.snippet or "") for f in high.fixes)
    (rec,) = _by_code(report, "precision-recommendation")
    assert rec.data["choice"] == "fp32"
    assert "keeping them does not lower the error, not recommended" in rec.message
