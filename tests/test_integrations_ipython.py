"""IPython: %load_ext dtype_doctor and %%dtype_doctor in a real InteractiveShell."""

from __future__ import annotations

import pytest

pytest.importorskip("IPython", reason="IPython is not installed (extra: notebook)")
pytest.importorskip("torch")

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

SETUP = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 3)

    def forward(self, x):
        return self.proj(x)

model = Net().half()
"""


@pytest.fixture(scope="module")
def shell():
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "dtype_doctor")
    assert ip.run_cell(SETUP).success
    yield ip
    ip.run_line_magic("unload_ext", "dtype_doctor")
    InteractiveShell.clear_instance()


def _run(ip, cell: str):
    with capture_output() as cap:
        result = ip.run_cell(cell)
    html = [o.data["text/html"] for o in cap.outputs if "text/html" in o.data]
    return result, html, cap


def test_cell_magic_shows_the_finding_as_html_and_keeps_the_error(shell):
    result, html, _ = _run(shell, "%%dtype_doctor --model model\ny = model(torch.randn(2, 4))\n")
    # observe mode: the user's error still surfaces, with the diagnosis in its notes
    assert isinstance(result.error_in_exec, RuntimeError)
    assert "mat1 and mat2" in str(result.error_in_exec)
    assert any("matmul-dtype-mismatch" in note for note in getattr(result.error_in_exec, "__notes__", []))
    (page,) = html
    assert 'class="dtype-doctor"' in page and "<html" not in page
    assert "matmul-dtype-mismatch" in page and "in &#x27;proj&#x27; (Linear)" in page
    assert "parameter &#x27;proj.weight&#x27;" in page
    assert "x = x.to(torch.float16)" in page


def test_fix_mode_cell_runs_through_and_defines_names(shell, tmp_path):
    out = tmp_path / "cell.html"
    result, html, _ = _run(shell, f"%%dtype_doctor --mode fix --html {out}\ny = model(torch.randn(2, 4))\n")
    assert result.success and shell.user_ns["y"].dtype.is_floating_point
    assert "matmul-dtype-mismatch" in html[0]
    assert "<!DOCTYPE html>" in out.read_text() and "matmul-dtype-mismatch" in out.read_text()


def test_line_magic_and_clean_code(shell):
    result, html, _ = _run(shell, "%dtype_doctor --mode observe z = model(torch.randn(2, 4).half())")
    assert result.success and "z" in shell.user_ns
    assert "no problems found" in html[0]
    result, html, _ = _run(shell, "%dtype_doctor --quiet z = model(torch.randn(2, 4).half())")
    assert result.success and html == []


def test_bad_option_is_one_line_not_a_crash(shell):
    result, html, cap = _run(shell, "%%dtype_doctor --mode sometimes\nmodel\n")
    assert result.success and html == []
    assert "invalid choice: 'sometimes'" in cap.stdout


def test_report_repr_in_notebook_and_terminal(shell):
    from dtype_doctor import Report

    result, _, cap = _run(shell, "from dtype_doctor import Report\nReport(tool='check')")
    assert result.success and "dtype-doctor check: no problems found." in cap.stdout
    # what a notebook frontend asks for: the HTML fragment
    formatter = shell.display_formatter.formatters["text/html"]
    assert "no problems found" in formatter(Report(tool="check"))


def test_the_cells_own_value_error_is_not_swallowed(shell):
    result, _, _ = _run(shell, "%%dtype_doctor\nraise ValueError('from the cell')\n")
    assert isinstance(result.error_in_exec, ValueError) and "from the cell" in str(result.error_in_exec)
    result, _, cap = _run(shell, "%%dtype_doctor --model nothing_here\nmodel\n")
    assert result.success and "--model nothing_here: no such name" in cap.stdout
