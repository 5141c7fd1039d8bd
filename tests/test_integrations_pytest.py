"""The pytest plugin, driven through pytester: a failing test shows the finding, not only the raw error."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

# Loaded here, before pytester's in-process runs: each run restores sys.modules afterwards, and
# torch cannot be imported a second time in one process.
torch = pytest.importorskip("torch")

FAILING_TEST = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 3)

    def forward(self, x):
        return self.proj(x)

def test_half_model_float_input({args}):
    torch.manual_seed(0)
    model = Net().half()
    model(torch.randn(2, 4))
"""


def _plugin_args() -> list[str]:
    """`-p` the plugin unless the installed package already registers it through its entry point."""
    registered = any(ep.name == "dtype_doctor" for ep in importlib.metadata.entry_points(group="pytest11"))
    # hypothesis and xdist are not needed inside, and each in-process run would import them anew
    quiet = ["-p", "no:hypothesispytest", "-p", "no:xdist"]
    return quiet if registered else [*quiet, "-p", "dtype_doctor.integrations.pytest_plugin"]


def test_option_reports_the_finding_with_module_and_fix(pytester):
    pytester.makepyfile(FAILING_TEST.format(args=""))
    result = pytester.runpytest(*_plugin_args(), "--dtype-doctor", "-rf", "-vv")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "- dtype-doctor -" in text  # the report section
    assert "matmul-dtype-mismatch" in text
    assert "'proj'" in text and "float16" in text and "float32" in text
    # the one-line summary names the finding, then keeps the raw error (-vv: lines are not cut)
    result.stdout.fnmatch_lines(["FAILED *dtype-doctor matmul-dtype-mismatch*mat1 and mat2*"])


def test_fixture_runs_the_body_under_watch(pytester):
    pytester.makepyfile(
        FAILING_TEST.format(args="dtype_doctor")
        + """
def test_session_is_the_watch_session(dtype_doctor):
    assert hasattr(dtype_doctor, "report")
"""
    )
    result = pytester.runpytest(*_plugin_args(), "-rf", "-vv")  # -vv: summary lines are not cut
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["FAILED *test_half_model_float_input*dtype-doctor matmul-dtype-mismatch*"])


def test_without_option_or_fixture_nothing_changes(pytester):
    pytester.makepyfile(
        """
def test_plain():
    raise RuntimeError("mat1 and mat2 must have the same dtype, but got Float and Half")
"""
    )
    result = pytester.runpytest(*_plugin_args(), "-rf")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    # the header may list the installed plugin ("plugins: dtype-doctor-0.1.0"); no diagnosis may appear
    assert "matmul-dtype-mismatch" not in out
    assert not re.search(r"-+ dtype-doctor -+", out)


def test_option_is_registered_in_help(pytester):
    result = pytester.runpytest(*_plugin_args(), "--help")
    result.stdout.fnmatch_lines(["*--dtype-doctor*", "*--dtype-doctor-mode*"])


def test_plugin_import_is_light():
    code = (
        "import sys, dtype_doctor.integrations.pytest_plugin; "
        "heavy = [m for m in ('torch', 'transformers', 'dtype_doctor.watching', 'rich') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# ------------------------------------------------------------------ assert_dtype_consistent (on check)


def _masked():
    """tests/data/masked_model.py: a float32 mask created inside forward (the OneTrainer shape)."""
    path = Path(__file__).parent / "data" / "masked_model.py"
    spec = importlib.util.spec_from_file_location("masked_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Masked()


def test_assert_dtype_consistent_names_the_leak_and_where_it_was_born():
    from dtype_doctor import assert_dtype_consistent

    with pytest.raises(AssertionError) as info:
        assert_dtype_consistent(_masked(), "2x4:float16", dtype=torch.float16)
    text = str(info.value)
    assert text.startswith("1 dtype problem in Masked: silent-promotion")
    flat = re.sub(r"[\s│]", "", text)  # the panel may wrap a long path
    assert "optorch.onesat" in flat and "masked_model.py:13" in flat  # where the mask was born
    assert "mask = mask.to(torch.float16)" in text
    # a float32 input into the fp16 model is an error at the Linear, named with its module
    with pytest.raises(AssertionError, match="matmul-dtype-mismatch in 'proj'"):
        assert_dtype_consistent(_masked(), torch.randn(2, 4), dtype=torch.float16, allow=["silent-promotion"])
    # errors only: the promotion alone passes
    assert assert_dtype_consistent(_masked(), "2x4:float16", dtype=torch.float16, min_severity="error")


def test_assert_dtype_consistent_passes_a_consistent_model():
    from dtype_doctor import assert_dtype_consistent

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    report = assert_dtype_consistent(model, "2x4:float16", dtype=torch.float16)
    assert report.tool == "check" and not report.errors
    with pytest.raises(AssertionError, match="matmul-dtype-mismatch"):
        assert_dtype_consistent(model, {"input": torch.randn(2, 4)}, dtype=torch.float16)


def test_unrelated_failure_is_not_blamed_on_a_warning(pytester):
    pytester.makepyfile(
        """
import torch

def test_other_bug(dtype_doctor):
    torch.cat([torch.ones(2, dtype=torch.float16), torch.ones(2)])  # a silent promotion, a warning
    assert 1 + 1 == 3
"""
    )
    result = pytester.runpytest(*_plugin_args(), "-rf", "-vv")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "- dtype-doctor -" in text and "silent-promotion" in text  # shown in the section
    result.stdout.fnmatch_lines(["FAILED *::test_other_bug - assert (1 + 1) == 3"])  # its own error leads


def test_error_no_op_saw_is_explained_from_its_text(pytester):
    # e.g. re-raised from a worker process or a C++ extension: watch saw no failing op
    pytester.makepyfile(
        """
def test_from_a_worker():
    raise RuntimeError("Input type (c10::Half) and bias type (float) should be the same")
"""
    )
    result = pytester.runpytest(*_plugin_args(), "--dtype-doctor", "-rf", "-vv")
    result.assert_outcomes(failed=1)
    assert "- dtype-doctor -" in result.stdout.str()
    result.stdout.fnmatch_lines(["FAILED *::test_from_a_worker - dtype-doctor conv-bias-dtype-mismatch*"])


ASSERT_ON_HALF = """
import torch

def test_value():
    lin = torch.nn.Linear(4, 4).half()
    torch.cat([lin(torch.ones(2, 4, dtype=torch.float16)), torch.ones(2, 4)])  # a silent promotion
    x = torch.ones(4, dtype=torch.float16)
    assert x.sum() == 5  # fails on its value; its repr says dtype=torch.float16
"""


def test_a_failing_assert_on_a_half_tensor_is_not_headlined_as_a_finding(pytester):
    """Issue 22 item 15: the assert's repr says `dtype=torch.float16`; the failure is the test's own."""
    pytester.makepyfile(ASSERT_ON_HALF)
    result = pytester.runpytest(*_plugin_args(), "--dtype-doctor", "-rf", "-vv")
    result.assert_outcomes(failed=1)
    summary = [line for line in result.stdout.lines if line.startswith("FAILED")]
    assert summary and "dtype-doctor" not in summary[0], summary
    assert "AssertionError" in summary[0] or "assert" in summary[0]


WARNING_FILTER_TEST = """
import pytest, torch

@pytest.mark.filterwarnings("error::UserWarning:test_warned")
def test_warned():
    torch.ones(2, 3, 4).T  # torch warns from C++: attributed to this module, so the filter raises
"""


def test_dtype_doctor_option_keeps_a_tests_warning_filter_result(tmp_path):
    """Issue 22 item 8: a C++ warning stays the test module's, so `module=` filters match as without
    the tool (a subprocess each: torch warns about `.T` once per process)."""
    (tmp_path / "test_warned.py").write_text(WARNING_FILTER_TEST)
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
    runs = [  # side by side: each mostly imports torch
        subprocess.Popen(
            [*base, *_plugin_args(), *extra, "test_warned.py"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for extra in ([], ["--dtype-doctor"])
    ]
    outcomes = [("1 failed" in p.communicate(timeout=300)[0], p.returncode) for p in runs]
    assert outcomes[0] == outcomes[1] == (True, 1)


def test_summary_names_the_code_assert_dtype_consistent_found_not_words_of_its_text(pytester):
    """Issue 32: the summary took its family from the words of the tool's own message and fix text
    (the watch around the test read the AssertionError as text); it is the finding's code."""
    masked = (Path(__file__).parent / "data" / "masked_model.py").read_text(encoding="utf-8")
    pytester.makepyfile(
        masked_model=masked,
        test_consistent="""
import torch
from dtype_doctor import assert_dtype_consistent
from masked_model import Masked

def test_masked_is_consistent():
    assert_dtype_consistent(Masked(), "2x4:float16", dtype=torch.float16)
""",
    )
    pytester.syspathinsert()
    result = pytester.runpytest(*_plugin_args(), "--dtype-doctor", "-rf", "-vv")
    result.assert_outcomes(failed=1)
    summary = [line for line in result.stdout.lines if line.startswith("FAILED")]
    assert summary and "dtype-doctor silent-promotion " in summary[0], summary
    section = result.stdout.str().split("- dtype-doctor -", 1)[1]
    assert "silent-promotion" in section and "scalar-type-mismatch" not in section
