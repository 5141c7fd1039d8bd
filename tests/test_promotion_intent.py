"""A promotion is a silent-promotion warning only when the float32 it makes is not what the code
asked for: a module that upcasts on purpose and casts back before it returns (T5's RMSNorm takes its
variance in float32) reports nothing; a float32 raised from float16 data on purpose (`x.float()`) is
information once the run ends clean; a float32 table made from integers (`arange(...).float()`) next
to half activations stays a warning. A failing `assert` of the user's own is their check of the
symptom, not a dtype error to read as text."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import torch
from torch import nn

import dtype_doctor as dd
from dtype_doctor.cli import main


def _severe(report) -> list:
    return [f for f in report.findings if f.severity.value in ("error", "warning")]


class _RMSNorm(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + 1e-6)  # float32 for the division, on purpose
        return self.weight * x.to(self.weight.dtype)


def test_a_norm_that_upcasts_and_casts_back_reports_no_promotion() -> None:
    model = nn.Sequential(nn.Linear(8, 8), _RMSNorm(8), nn.Linear(8, 8)).half()
    with dd.watch(model) as session:
        out = model(torch.randn(2, 8).half())
    assert out.dtype == torch.float16
    assert session.report.findings == [], [f.message for f in session.report.findings]


class _Matcher(nn.Module):
    """Costs in float32 on purpose, from half scores: the float32 result is intended."""

    def forward(self, scores: torch.Tensor, bonus: torch.Tensor) -> torch.Tensor:
        precise = scores.float().sigmoid()
        return precise + bonus


def test_a_float32_raised_from_half_data_on_purpose_is_information_after_a_clean_run() -> None:
    matcher = _Matcher()
    with dd.watch(matcher) as session:
        matcher(torch.randn(4, 3).half(), torch.randn(4, 3).half())
    (finding,) = session.report.findings
    assert finding.code == "silent-promotion" and finding.severity.value == "info"
    assert "deliberate upcast" in finding.message and "test_promotion_intent.py" in finding.message


class _Grid(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        grid = torch.arange(y.shape[-1]).float()  # the default float, not an upcast
        return y + grid


def test_a_float32_table_made_from_integers_next_to_half_activations_stays_a_warning() -> None:
    model = _Grid().half()
    with dd.watch(model) as session:
        out = model(torch.rand(1, 3, 4, 4).half())
    assert out.dtype == torch.float32
    (finding,) = _severe(session.report)
    assert finding.code == "silent-promotion" and finding.severity.value == "warning"


def test_the_users_own_failing_assert_is_not_read_as_a_dtype_error(tmp_path: Path, capsys) -> None:
    script = tmp_path / "infer.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn

            class Head(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 4)

                def forward(self, x):
                    offsets = torch.arange(4).float()
                    return self.fc(x) + offsets

            model = Head().half()
            out = model(torch.randn(2, 4).half())
            assert out.dtype == torch.float16, "the half model returned float32"
            """
        )
    )
    report = tmp_path / "r.json"
    code = main(["run", "--json", str(report), str(script)])
    capsys.readouterr()
    findings = json.loads(report.read_text())["findings"]
    assert code != 0
    assert [f["code"] for f in findings if f["severity"] == "error"] == []
    (warning,) = [f for f in findings if f["severity"] == "warning"]
    assert warning["code"] == "silent-promotion" and warning["location"]["line"] == 12  # `+ offsets`
