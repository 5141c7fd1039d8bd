"""`dtype-doctor run script.py` behaves as `python script.py` (issue 22, items 3-11).

Each probe script runs under both; stdout, stderr (minus the report), exit code and what the script
prints about itself (__file__, annotations, excepthook, warnings' filename, recursion) must agree.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": ""}
_REPORT = re.compile(r"dtype-doctor run: .*", re.DOTALL)


def _both(
    tmp_path,
    source: str,
    *args: str,
    stdin: bytes | None = None,
    script_arg: str | None = None,
    options: tuple[str, ...] = (),
):
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(source))
    target = script_arg or str(script)
    runs = []
    for cmd in (
        [sys.executable, target, *args],
        [sys.executable, "-m", "dtype_doctor", "run", "--no-color", *options, target, *args],
    ):
        p = subprocess.run(cmd, capture_output=True, env=ENV, input=stdin, cwd=tmp_path, timeout=300)
        err = _REPORT.sub("", p.stderr.decode())
        runs.append((p.returncode if p.returncode >= 0 else 128 - p.returncode, p.stdout.decode(), err))
    return runs


def _same(tmp_path, source: str, *args: str, **kw):
    py, run = _both(tmp_path, source, *args, **kw)
    assert run == py
    return py


def test_annotations_are_not_strings_dont_inherit(tmp_path):
    code, out, _ = _same(
        tmp_path,
        """
        import dataclasses
        @dataclasses.dataclass
        class A:
            x: int
        def f(a: int) -> None: ...
        print(A.__dataclass_fields__["x"].type, f.__annotations__)
        def g(a: NotDefined): ...
        """,
    )
    assert code == 1 and "<class 'int'>" in out  # the NameError python raises happens under run too


def test_file_is_absolute_and_traceback_paths_too(tmp_path):
    _, out, err = _same(tmp_path, "print(__file__)\nraise ValueError('x')\n", script_arg="probe.py")
    assert out.strip() == str(tmp_path / "probe.py")
    assert f'File "{tmp_path / "probe.py"}"' in err


def test_the_scripts_excepthook_is_called(tmp_path):
    code, _, err = _same(
        tmp_path,
        """
        import sys
        def hook(t, e, tb):
            print("HOOK", t.__name__, e, file=sys.stderr)
        sys.excepthook = hook
        raise ValueError("boom")
        """,
    )
    assert code == 1 and err == "HOOK ValueError boom\n"


def test_builtins_is_the_module(tmp_path):
    _, out, _ = _same(tmp_path, "__builtins__.print('ok', type(__builtins__).__name__)\n")
    assert out == "ok module\n"


def test_keyboard_interrupt_shows_its_traceback_and_exits_130(tmp_path):
    code, _, err = _same(tmp_path, "import torch\ndef f():\n    raise KeyboardInterrupt\nf()\n")
    assert code == 130 and err.endswith("KeyboardInterrupt\n") and "line 3, in f" in err


@pytest.mark.parametrize("options", [(), ("--numerics",)], ids=["run", "numerics"])
def test_cpp_warning_is_attributed_to_the_users_line(tmp_path, options):
    # torch warns about `x.T` on a 3-d tensor from C++, once per process; under --numerics the
    # monitor's own modes call the op (H10)
    _, out, _ = _same(
        tmp_path,
        """
        import warnings, torch
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            torch.ones(2, 3, 4).T
        print([(m.filename.rsplit("/", 1)[-1], m.lineno) for m in w])
        """,
        options=options,
    )
    assert out == "[('probe.py', 5)]\n"
    _, out, _ = _same(
        tmp_path,
        """
        import warnings, torch
        warnings.filterwarnings("error", module="__main__")
        try:
            torch.ones(2, 3, 4).T  # the user's module= filter matches, as under python
        except UserWarning:
            print("raised")
        """,
        options=options,
    )
    assert out == "raised\n"


DEEP = """
import sys, torch
from torch import nn
class Wrap(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
    def forward(self, x):
        return self.inner(x)
model = nn.Linear(4, 4)
for _ in range(int(sys.argv[1]) if __name__ == "__main__" else DEPTH):
    model = Wrap(model)
"""


def test_a_model_nested_200_deep_runs_as_under_python(tmp_path):
    deep = DEEP + "print(tuple(model(torch.randn(2, 4)).shape))\n"
    code, out, _ = _same(tmp_path, deep, "200")
    assert (code, out) == (0, "(2, 4)\n")
    # unbounded recursion still stops with RecursionError (the tool's own frames are allowed for)
    py, run = _both(tmp_path, "def f(): f()\nf()\n")
    assert py[0] == run[0] == 1 and run[2].endswith("RecursionError: maximum recursion depth exceeded\n")


def test_run_dash_reads_the_script_from_stdin(tmp_path):
    _, out, _ = _same(
        tmp_path, "", "--flag", "x", stdin=b"import sys\nprint(__file__, sys.argv)\n", script_arg="-"
    )
    assert out == "<stdin> ['-', '--flag', 'x']\n"


def test_omp_num_threads_set_before_import_torch_takes_effect(tmp_path, monkeypatch):
    monkeypatch.delitem(ENV, "OMP_NUM_THREADS")  # torch's default (the cores) unless the script sets it
    _, out, _ = _same(
        tmp_path,
        """
        import os
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch
        print(torch.get_num_threads())
        """,
    )
    assert out == "1\n"


def test_run_json_with_stdout_closed_keeps_the_exit_code_and_the_report(tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("import torch\nraise SystemExit(0)\n")
    cmd = [sys.executable, "-m", "dtype_doctor", "run", "--json", str(script)]
    p = subprocess.run(cmd, capture_output=False, stderr=subprocess.PIPE, stdout=None, env=ENV,
                       close_fds=True, preexec_fn=lambda: os.close(1), timeout=300)  # fmt: skip
    assert p.returncode == 0
    err = p.stderr.decode()
    assert "stdout is closed" in err and '"tool": "run"' in err


def _python_runs_it_under_a_module_hook(tmp_path, n: int) -> bool:
    """check watches with global module hooks; under one, plain torch on Python 3.12 (whose C recursion
    limit is fixed at 1500) stops some 220 levels deep, whatever the Python limit: check cannot go
    deeper than that."""
    hooked = tmp_path / "hooked.py"
    # the Python limit raised as check raises it: only the interpreter's C stack limit is left
    hook = "sys.setrecursionlimit(100_000)\ntorch.nn.modules.module.register_module_forward_pre_hook(lambda m, a: None)\n"
    hooked.write_text(DEEP + hook + "model(torch.randn(2, 4))\n")
    cmd = [sys.executable, str(hooked), str(n)]
    return subprocess.run(cmd, capture_output=True, env=ENV, timeout=300).returncode == 0


@pytest.mark.parametrize("n", [200, 240])
def test_check_mirrors_models_nested_deep(tmp_path, n):
    if not _python_runs_it_under_a_module_hook(tmp_path, n):
        pytest.skip(f"python itself cannot run a model {n} deep under a module hook here")
    src = tmp_path / "deep.py"
    src.write_text(DEEP.replace("DEPTH", str(n)))
    cmd = [sys.executable, "-m", "dtype_doctor", "check", f"{src}:model", "--input", "2x4:float16",
           "--dtype", "float16", "--no-color"]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, env=ENV, timeout=300)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert "cannot mirror" not in p.stderr.decode() and "RecursionError" not in p.stdout.decode()
