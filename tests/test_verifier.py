"""The one verifier (issue 29 item 4): one contract for the three back-ends.

- a candidate that changes no code is never run, whatever the back-end;
- "verified" is never given over the threshold: the candidate runs, and the label says the error;
- a crashed re-run of a patched copy fails with its exit code and last words;
- a fix whose output is float32's own reports 0, even when the forward draws random numbers from
  Python's `random` or NumPy (the fp32 reference and the replay draw the same ones).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

import dtype_doctor as dd
from dtype_doctor.patching.verify import Patched, Replay, attempt
from dtype_doctor.report import Fix
from dtype_doctor.verifying.contract import NO_CODE, THRESHOLD
from dtype_doctor.verifying.verifier import Outcome, verify


class Recording:
    """A back-end that records what it was asked to run and returns a given outcome."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome, self.ran = outcome, []

    def edits(self, fix: Fix) -> list[tuple[str, str]]:
        return [("", fix.snippet)]

    def refuse(self, fix: Fix) -> str | None:
        return None

    def run(self, fix: Fix) -> Outcome:
        self.ran.append(fix)
        return self.outcome


@pytest.mark.parametrize("snippet", ["# upcast every operand with .float()", "pass", '"""a note"""', ""])
def test_a_fix_without_code_is_never_run(snippet: str) -> None:
    backend = Recording(Outcome(error=0.0))
    verdict = verify(Fix("a comment", snippet, ""), backend)
    assert backend.ran == [] and verdict.passes is None and verdict.text == NO_CODE


def test_over_the_threshold_it_runs_but_never_passes() -> None:
    verdict = verify(Fix("cast", "x = 1", ""), Recording(Outcome(error=THRESHOLD * 4)))
    assert verdict.passes is False and "over the threshold 5e-02" in verdict.text
    assert "passes" not in verdict.text
    within = verify(Fix("cast", "x = 1", ""), Recording(Outcome(error=0.0)))
    assert within.passes is True and "max rel. error 0e+00" in within.text


def test_a_crashed_rerun_fails_with_its_exit_code_and_last_words() -> None:
    crashed = Replay(code=1, errors=0, warnings=0, tail="Traceback ...\nZeroDivisionError: division by zero")
    seen = attempt({"train.py": "x = 1 / 0\n"}, Patched({"train.py": "x = 1\n"}, lambda files: crashed))
    assert not seen.passed
    assert (
        seen.describe() == "re-run of the patched copy: fails: exit 1 (ZeroDivisionError: division by zero)"
    )
    layout = attempt({"train.py": "x = 1  # one\n"}, Patched({"train.py": "x = 1\n"}, lambda f: crashed))
    assert not layout.passed and layout.describe().endswith(NO_CODE)  # the same syntax tree: not run


def test_a_clean_rerun_over_the_threshold_fails() -> None:
    far = Replay(code=0, errors=0, warnings=0, error_vs_fp32="max rel. error 3e-01 vs fp32", error=0.3)
    seen = attempt({"train.py": "x = 2\n"}, Patched({"train.py": "x = 1\n"}, lambda files: far))
    assert not seen.passed and "over the threshold" in seen.describe()
    near = Replay(code=0, errors=0, warnings=0, error_vs_fp32="max rel. error 2e-03 vs fp32", error=2e-3)
    seen = attempt({"train.py": "x = 2\n"}, Patched({"train.py": "x = 1\n"}, lambda files: near))
    assert seen.passed and seen.describe().endswith("2e-03 vs fp32, within the threshold 5e-02")


class Noisy(nn.Module):
    """A bfloat16 head behind a forward that adds noise drawn from NumPy and `random`."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.head = nn.Linear(8, 8).to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        noise = torch.from_numpy(np.random.randn(*x.shape).astype("float32")) * random.random()
        return self.head(self.body(x) + noise)


def test_a_fix_whose_output_is_fp32s_reports_zero_even_with_random_draws_in_forward() -> None:
    model, x = Noisy(), torch.randn(2, 8)
    with pytest.raises(RuntimeError, match="dtype"), dd.watch(model=model) as session:
        model(x)
    labels = [(f.snippet, f.verification) for f in session.report.errors[0].fixes]
    full = [t for s, t in labels if s.split("#")[0].strip() == "model = model.float()"]
    assert full == ["verified: passes, max rel. error 0e+00 vs fp32 (threshold 5e-02)"], labels
