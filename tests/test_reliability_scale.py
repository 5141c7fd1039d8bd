"""Thousands of findings: folding is linear (one index by Finding.key), the console is capped."""

from __future__ import annotations

import io

from rich.console import Console

from dtype_doctor import catalog
from dtype_doctor.processors import merge_ranks, tag_rank
from dtype_doctor.render.console import MAX_PANELS, render
from dtype_doctor.report import Finding, Location, Operand, Origin, Report


def _finding(i: int) -> Finding:
    return catalog.finding(
        "matmul-dtype-mismatch",
        message=f"mismatch {i}",
        location=Location(module=f"blocks.{i}.proj", module_type="Linear", op="linear"),
        operands=[Operand(role="input", dtype="float32"), Operand(role="weight", dtype="float16")],
    )


def _count_keys(monkeypatch) -> list[int]:
    calls = [0]
    original = Finding.key

    def counting(self):
        calls[0] += 1
        return original(self)

    monkeypatch.setattr(Finding, "key", counting)
    return calls


def test_merge_of_two_ranks_with_4000_findings_is_linear(monkeypatch):
    reports = [Report(tool="run", findings=[_finding(i) for i in range(4000)]) for _ in range(2)]
    reports[1].findings.append(_finding(4000))
    calls = _count_keys(monkeypatch)
    merged = merge_ranks(reports, [0, 1])
    n = 8001
    assert calls[0] <= 6 * n, f"{calls[0]} key computations for {n} findings: quadratic"
    assert len(merged.findings) == 4002  # 4001 folded findings + the divergence of rank 1
    assert merged.findings[0].code == "rank-divergence"
    assert {f.count for f in merged.findings[1:]} == {2, 1}


def test_add_folds_in_constant_key_computations(monkeypatch):
    report = Report(tool="run")
    calls = _count_keys(monkeypatch)
    for _ in range(2):
        for i in range(3000):
            report.add(_finding(i))
    assert len(report.findings) == 3000 and {f.count for f in report.findings} == {2}
    assert calls[0] <= 4 * 6000, calls[0]
    report.findings = report.findings[:10]  # replaced behind add()'s back: the index follows
    assert report.add(_finding(5)).count == 3 and report.add(_finding(2999)).count == 1


def test_tag_rank_folds_duplicates_and_is_pure():
    report = Report(tool="run", findings=[_finding(1), _finding(1), _finding(2)])
    folded = tag_rank(report, 3)
    assert [f.count for f in folded.findings] == [2, 1]
    assert {f.location.rank for f in folded.findings} == {3}
    assert len(report.findings) == 3 and report.findings[0].count == 1
    assert report.findings[0].location.rank is None


def _finding_with_own_cause(i: int) -> Finding:
    """A finding whose fp32 operand was made on its own line: one root cause each."""
    origin = Origin(kind="op", op="torch.ones", name=f"mask{i}", file="train.py", line=i + 1, dtype="float32")
    finding = _finding(i)
    finding.operands[0].origin = origin
    return finding


def test_console_shows_the_first_findings_and_counts_the_rest():
    report = Report(tool="merge")
    report.extend(_finding_with_own_cause(i) for i in range(4000))
    buf = io.StringIO()
    render(report, console=Console(file=buf, width=100, no_color=True))
    text = buf.getvalue()
    assert text.count("matmul-dtype-mismatch") == MAX_PANELS
    assert f"... and {4000 - MAX_PANELS:,} more: see --html" in text
    assert "dtype-doctor merge: 4000 errors" in text
