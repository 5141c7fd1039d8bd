"""issue 13, item 5: under torchrun (2 CPU processes, gloo), one failing rank makes the healthy
rank neither raise a gloo error nor block for the process-group timeout in the report gather."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dtype_doctor.report import Report

sys.path.insert(0, str(Path(__file__).parent))
from test_distributed import _torchrun

SCRIPT = Path(__file__).parent / "data" / "ddp_failing_rank.py"


@pytest.fixture(scope="module")
def launch(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path_factory.mktemp("failing_rank")
    return _torchrun(out, SCRIPT), out


def test_both_ranks_run_to_the_end(launch):
    done, _ = launch
    # before: rank 0 sat in all_gather_object while rank 1 (which skipped it after its error)
    # waited at the next barrier: a gloo error or a hang until the process-group timeout
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0 done" in done.stdout and "rank 1 done" in done.stdout
    assert "rank 1 caught: " in done.stdout and "same dtype" in done.stdout
    assert "gloo" not in done.stderr.lower()


def test_the_failing_ranks_diagnosis_reaches_the_merged_report(launch):
    _, out = launch
    merged = Report.from_json((out / "caught" / "dtype-doctor.json").read_text())
    assert merged.meta["ranks"] == [0, 1]
    mismatch = [f for f in merged.findings if f.code == "matmul-dtype-mismatch"]
    assert mismatch and {f.location.rank for f in mismatch} == {1}
    assert mismatch[0].location.module == "0"


def test_a_rank_that_never_reports_is_named_not_waited_for(launch):
    done, out = launch
    merged = Report.from_json((out / "absent" / "dtype-doctor.json").read_text())
    assert merged.meta["missing_ranks"] == [1]
    assert "no report from rank(s) [1] within 1 s" in done.stderr
