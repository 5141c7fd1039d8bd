"""A reduction that overflows float16 inside a module the user calls (a loss reduced over many
elements): the first fix computes it in float32 at the user's line, upcasting the module's
low-precision inputs where they are passed (an integer target is left as it is), and it runs:
finite, float32, the float32 result (issue 29: a fix with a place, never lowering precision)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import torch
from torch import nn

import dtype_doctor as dd

HERE = Path(__file__).resolve()


def _line(mark: str) -> int:
    lines = HERE.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith(f"# mark: {mark}"))


def _first_overflow_fix(report) -> dd.report.Fix:  # type: ignore[name-defined]
    (found,) = [f for f in report.errors if f.code == "fp16-overflow"]
    return found.fixes[0]


def _run(snippet: str, namespace: dict) -> dict:
    scope = {"torch": torch, "nn": nn, **namespace}
    exec(compile(textwrap.dedent(snippet), "<fix>", "exec"), scope)
    return scope


def test_a_loss_module_summed_in_float16_is_computed_in_float32_where_it_is_called():
    crit = nn.MSELoss(reduction="sum")
    torch.manual_seed(0)
    pred = (torch.randn(64, 256) * 8).half()
    target = torch.zeros(64, 256, dtype=torch.float16)
    with dd.watch(numerics=True) as s:
        err = crit(pred, target)  # mark: mse
    assert not torch.isfinite(err)
    fix = _first_overflow_fix(s.report)
    assert Path(fix.file).resolve() == HERE and fix.line == _line("mse")
    assert fix.snippet == "err = crit(pred.float(), target.float())"
    fixed = _run(fix.snippet, {"crit": crit, "pred": pred, "target": target})["err"]
    assert fixed.dtype == torch.float32 and torch.isfinite(fixed)
    torch.testing.assert_close(fixed, crit(pred.float(), target.float()))


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.criterion = nn.CrossEntropyLoss(reduction="sum")

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        total = self.criterion(logits.view(-1, 10), labels.view(-1))  # mark: ce
        return total


def test_only_the_low_precision_input_is_upcast_an_integer_target_is_kept():
    torch.manual_seed(0)
    logits = (torch.randn(40, 512, 10) * 4).half()
    labels = torch.randint(0, 10, (40, 512))
    with dd.watch(numerics=True) as s:
        Classifier().loss(logits, labels)
    fix = _first_overflow_fix(s.report)
    assert fix.line == _line("ce")
    assert fix.snippet == "total = self.criterion(logits.view(-1, 10).float(), labels.view(-1))"
    model = Classifier()
    fixed = _run(fix.snippet, {"self": model, "logits": logits, "labels": labels})["total"]
    assert fixed.dtype == torch.float32 and torch.isfinite(fixed)
    torch.testing.assert_close(fixed, model.criterion(logits.float().view(-1, 10), labels.view(-1)))


def test_an_operand_that_starts_with_a_parenthesis_is_upcast_whole(tmp_path):
    """`(q @ k) * 4.0 + mask`: the left operand is wrapped before `.float()`; `(q @ k) * 4.0.float()`
    would upcast the literal (an AttributeError when pasted)."""
    from dtype_doctor.numerics import opsource

    path = tmp_path / "scores.py"
    path.write_text("w = (q @ k) * 4.0 + mask\n")
    snippet = opsource.upcast(str(path), 1, "add")
    assert snippet == "w = ((q @ k) * 4.0).float() + mask"
    q, k = torch.randn(3, 4).half(), torch.randn(4, 3).half()
    w = _run(snippet, {"q": q, "k": k, "mask": torch.zeros(3, 3, dtype=torch.float16)})["w"]
    assert w.dtype == torch.float32
