"""`dtype-doctor run` is `python`, on every supported Python (issue 30 item 3, defects 11-12; issue 31).

Each probe in tests/run_probes runs under plain python and under `run` (as a script, or with `-m`
as `python -m` runs it); what the program prints and its exit code must agree, stderr too apart
from the report.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PROBES = Path(__file__).parent / "run_probes"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": ""}
_REPORT = re.compile(r"dtype-doctor run: .*", re.DOTALL)


def _both(*target: str, cwd: Path = PROBES.parent) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """(exit code, stdout, stderr) under `python TARGET...` and under `dtype-doctor run TARGET...`."""
    runs = []
    for prefix in ([sys.executable], [sys.executable, "-m", "dtype_doctor", "run", "--no-color"]):
        p = subprocess.run([*prefix, *target], capture_output=True, text=True, env=ENV, cwd=cwd, timeout=300)
        runs.append((p.returncode, p.stdout, p.stderr))
    return runs[0], runs[1]


def _same(*target: str, cwd: Path = PROBES.parent) -> tuple[int, str, str]:
    py, run = _both(*target, cwd=cwd)
    assert (run[0], run[1], _REPORT.sub("", run[2])) == py
    return py


def test_torch_warnings_name_the_users_line_under_the_users_filters_and_registries():
    code, out, err = _same(str(PROBES / "warnings_registries.py"))
    # softmax without dim (a Python `stacklevel` warning) and a resized out= (a C++ warning)
    assert code == 0 and out.startswith("[('warnings_registries.py', 18), ('warnings_registries.py', 13)]\n")
    # after resetwarnings(): once per line, again for another line, once under "once"
    assert err.count("UserWarning: Implicit dimension choice for softmax") == 3
    assert "torch/nn/functional.py" not in err and "dtype_doctor" not in err


def test_dash_m_program_goes_on_after_a_cpp_warning():
    code, out, err = _same("-m", "run_probes.warnings_dash_m")
    assert (code, out) == (0, "ok __main__\n") and "warnings_dash_m.py:6: UserWarning" in err


def test_main_is_made_as_python_makes_it(tmp_path):
    real = tmp_path / "real"
    (real / "pkg").mkdir(parents=True)
    (real / "pkg" / "__init__.py").write_text("")
    probe = (PROBES / "main_namespace.py").read_text()
    for where in (real / "pkg" / "mod.py", real / "app" / "__main__.py", real / "script.py"):
        where.parent.mkdir(exist_ok=True)
        where.write_text(probe)
    for folder in (real, real / "app"):
        (folder / "sibling.py").write_text("NAME = 'sibling'\n")
    (real / "in_cwd.py").write_text("")
    (tmp_path / "link.py").symlink_to(real / "script.py")  # sys.path[0] is the real file's folder
    outs = []
    for target in (["-m", "pkg.mod"], [str(real / "app")], [str(tmp_path / "link.py")]):
        code, out, _ = _same(*target, "arg", cwd=real)
        assert code == 0 and "__annotations__ {}" in out and "sibling" in out, out
        outs.append(out)
    assert "__spec__ pkg.mod SourceFileLoader" in outs[0] and "sys.path: True" in outs[0]
    assert "__spec__ __main__ SourceFileLoader" in outs[1] and "sys.path: False" in outs[1]
    assert "__loader__ SourceFileLoader __main__" in outs[2] and "__spec__ None" in outs[2]


def test_a_failure_in_a_thread_still_running_at_the_end_is_in_the_report():
    py, run = _both(str(PROBES / "late_thread.py"))
    assert run[:2] == py[:2] == (0, "main done\n")
    assert run[2].startswith(py[2].rsplit("RuntimeError", 1)[0])  # the thread's traceback, as python's
    assert "matmul-dtype-mismatch" in run[2] and "no problems found" not in run[2]
