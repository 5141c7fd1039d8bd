"""The shown fix is the written edit: one paste rule (editing/paste.py) puts a shown fix at the place
it states, the planner tries it with the structural edits in lineage order, never where it would lower
a deliberate float32 statement, and `run --numerics --write` writes it for a silent finding. Every
pasted text here is executed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from cli_process import python  # type: ignore[import-not-found]
from dtype_doctor.editing.paste import paste
from dtype_doctor.editing.source import Edit
from dtype_doctor.patching.plan import Candidate, Cause, Planner
from dtype_doctor.patching.search import patched, search
from dtype_doctor.patching.verify import Replay
from dtype_doctor.report import Report

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}

HALF_SUMS = """\
import torch

def totals(rows):
    acc = rows.sum(0)  # float16 sums
    return acc

rows = torch.full((8, 4), 9000.0, dtype=torch.float16)
"""


def _run(text: str) -> dict:
    scope: dict = {"__name__": "__main__"}
    exec(compile(text, "pasted.py", "exec"), scope)  # the pasted program runs
    return scope


def test_a_statement_making_the_same_name_replaces_the_line() -> None:
    text = paste(HALF_SUMS, 4, "acc = rows.float().sum(0)")
    assert "    acc = rows.float().sum(0)\n    return acc" in text
    assert "# float16 sums" not in text
    scope = _run(text + "out = totals(rows)\n")
    assert torch.isfinite(scope["out"]).all() and scope["out"].dtype == torch.float32


def test_a_cast_of_what_the_line_makes_goes_after_it() -> None:
    text = paste(HALF_SUMS, 4, "acc = acc.float()")
    assert "    acc = rows.sum(0)  # float16 sums\n    acc = acc.float()\n" in text
    assert _run(text + "out = totals(rows)\n")["out"].dtype == torch.float32


def test_a_cast_at_a_line_that_makes_x_from_x_goes_before_it() -> None:
    """`acc = acc.index_add(...)` reads acc: its cast belongs before the line, where the line reads it
    (after it, the index_add has already raised)."""
    text = (
        "import torch\n"
        "vals = torch.ones(4, dtype=torch.bfloat16)\n"
        "acc = torch.zeros(4)\n"
        "acc = acc.index_add(0, torch.arange(4), vals)\n"
    )
    try:
        _run(text)
        raise AssertionError("the unpatched program should raise")
    except RuntimeError:
        pass
    pasted = paste(text, 4, "acc = acc.to(torch.bfloat16)")
    assert "acc = acc.to(torch.bfloat16)\nacc = acc.index_add(" in pasted
    assert _run(pasted)["acc"].dtype == torch.bfloat16


def test_the_line_rewritten_around_its_own_call_replaces_it() -> None:
    text = paste(HALF_SUMS, 4, "acc = torch.sum(rows.float(), 0)")
    text = paste(text, 4, "acc = torch.sum(rows.double(), 0)")  # x = f(x.float()) at x = f(x)
    assert text.count("acc = ") == 1 and "torch.sum(rows.double(), 0)" in text
    assert _run(text + "out = totals(rows)\n")["out"].dtype == torch.float64


def test_a_snippet_showing_the_line_in_context_keeps_the_line_once() -> None:
    snippet = "rows = rows.float()\nacc = rows.sum(0)"
    text = paste(HALF_SUMS, 4, snippet)
    assert "    rows = rows.float()\n    acc = rows.sum(0)  # float16 sums\n    return acc" in text
    assert text.count("rows.sum(0)") == 1
    assert torch.isfinite(_run(text + "out = totals(rows)\n")["out"]).all()


def test_a_return_replaces_the_return_and_anything_else_goes_before() -> None:
    text = paste(HALF_SUMS, 5, "return acc.float()")
    assert "    return acc.float()\n" in text and "    return acc\n" not in text
    crlf = paste(HALF_SUMS.replace("\n", "\r\n"), 7, "torch.manual_seed(0)")
    assert "torch.manual_seed(0)\r\nrows = torch.full" in crlf
    assert _run(crlf)["rows"].dtype == torch.float16


def _report(path: Path, line: int, fixes: list[dict], severity: str = "warning") -> Report:
    finding = {
        "code": "fp16-overflow",
        "title": "overflow",
        "severity": severity,
        "location": {"file": str(path), "line": line, "op": "sum"},
        "fixes": fixes,
    }
    return Report.from_json(json.dumps({"schema_version": 2, "findings": [finding]}))


def test_a_shown_fix_is_a_candidate_at_its_place_and_never_lowers_a_float32_statement(tmp_path: Path) -> None:
    path = tmp_path / "sums.py"
    path.write_text(HALF_SUMS.replace("rows.sum(0)", "rows.sum(0, dtype=torch.float32)"))
    planner = Planner(lambda p: p == str(path))
    lowering = {"title": "Cast `acc` back", "snippet": "acc = acc.half()", "file": str(path), "line": 4}
    widening = {"title": "Return float32", "snippet": "return acc.double()", "file": "sums.py", "line": 5}
    unplaced = {"title": "Widen the rows", "snippet": "rows = rows.float()"}
    causes = planner.plan(_report(path, 4, [lowering, widening, unplaced]))
    titles = [c.title for cause in causes for c in cause.candidates]
    # the place it states, else (said so) the finding's line, after every fix that states one
    assert titles == [
        f"Return float32 ({path}:5)",
        f"Widen the rows (pasted at {path}:4: the fix states no place)",
    ]
    assert not [t for t in titles if "back" in t]  # `dtype=torch.float32` on that line is intent
    edits = causes[0].candidates[0].edits
    text = patched({str(path): path.read_text()}, edits)[str(path)]
    assert _run(text + "out = totals(rows)\n")["out"].dtype == torch.float64
    # info findings' fixes are not pasted
    assert not planner.plan(_report(path, 4, [widening], severity="info"))


def test_a_cause_left_unedited_when_only_the_other_fixes_the_program() -> None:
    text = "a = 1\nb = 2\n"
    wrong = Cause("first", [Candidate("break it", [Edit("p.py", 0, 0, "raise SystemExit(3)\n")])])
    right = Cause("second", [Candidate("set b", [Edit("p.py", 6, 12, "b = 3\n")])])

    def run(files: dict[str, str]) -> Replay:
        code = 3 if "SystemExit" in files["p.py"] else 0
        return Replay(code=code, errors=0, warnings=0, error=0.0)

    log: list = []
    chosen, files, result = search([wrong, right], {"p.py": text}, run, log=log)
    assert result is not None and result.passed
    assert [c.title for c in chosen] == ["set b"] and files["p.py"] == "a = 1\nb = 3\n"
    assert len(log) == 2 and not log[0][1].passed


def test_a_rerun_that_still_reports_the_same_family_fails() -> None:
    left = Replay(code=0, errors=0, warnings=1, left=("silent-promotion",))
    left.causes = frozenset({"silent-promotion", "matmul-dtype-mismatch"})
    assert not left.passed
    assert "still reported: silent-promotion" in left.describe()
    other = Replay(code=0, errors=0, warnings=1, left=("fp16-underflow",), error=0.0)
    other.causes = frozenset({"matmul-dtype-mismatch"})
    assert other.passed and "1 warning left" in other.describe()


ENERGY = """\
import torch
from torch import nn

torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(12, 12), nn.Tanh()).half()


def energy(v):
    return (v * 400.0).pow(2).sum(-1)


with torch.no_grad():
    z = encoder(torch.randn(6, 12).half())
    e = energy(z)
assert torch.isfinite(e).all(), "energy overflowed"
print("ok")
"""


def test_run_numerics_write_writes_the_shown_fix_for_a_silent_overflow(tmp_path: Path) -> None:
    script = tmp_path / "energy.py"
    script.write_text(ENERGY)
    cmd = [sys.executable, "-m", "dtype_doctor", "run", "--numerics", "--write", "--no-backup", "--no-color"]
    proc = python([*cmd, script.name], cwd=tmp_path, env=ENV, timeout=600)
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = script.read_text()
    assert "    return ((v * 400.0).float()).pow(2).sum(-1)\n" in after
    assert after.count("return") == 1
    assert "Compute `pow` in float32 at energy.py:9" in said
    assert "chosen: Compute `pow` in float32" in said and "whose re-run passed" in said
    done = python([sys.executable, script.name], cwd=tmp_path, env=ENV, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_no_edit_is_never_said_to_be_no_root_cause_in_your_files(tmp_path: Path, monkeypatch) -> None:
    from dtype_doctor.patching import propose, run_command

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "sums.py"
    path.write_text(HALF_SUMS)
    report = _report(path, 4, [{"title": "Use a wider accumulator", "snippet": ""}])
    section = propose(report, run_command(str(path), []), str(tmp_path)).section
    assert section.verified is None and not section.diff
    assert "no root cause lies in" not in section.outcome
    assert section.outcome.startswith(f"no edit of {path} could be derived from the findings")
