"""Output options that would lose a report are refused; `run` runs what `python` runs, as python does."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest

from cli_process import dtype_doctor
from dtype_doctor.cli import main

MSG = "mat1 and mat2 must have the same dtype, but got Float and Half"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["explain", "--json=", MSG], "--json needs a PATH"),
        (["explain", "--html", "", MSG], "--html needs a PATH"),
        (["explain", "--json=a.json", "--json=b.json", MSG], "--json given twice"),
    ],
)
def test_output_options_that_lose_a_report_are_usage_errors(tmp_path, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())  # nothing written


def test_json_and_html_to_one_file_is_refused(tmp_path, capsys):
    path = tmp_path / "same.out"
    assert main(["explain", f"--json={path}", "--html", str(path), MSG]) == 2
    assert "name the same file" in capsys.readouterr().err
    assert not path.exists()


def _script(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_run_a_package_directory_with_main(tmp_path, capsys):
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "helper.py").write_text("VALUE = 41\n")
    (pkg / "__main__.py").write_text("import sys\nfrom helper import VALUE\nprint(VALUE + 1)\nsys.exit(3)\n")
    assert main(["run", "--no-color", str(pkg)]) == 3
    assert capsys.readouterr().out.startswith("42\n")


@pytest.mark.parametrize("as_module", [False, True], ids=["script", "-m"])
def test_a_script_that_empties_sys_argv(tmp_path, monkeypatch, capsys, as_module):
    monkeypatch.chdir(tmp_path)  # `-m` finds modules in the current directory, as python does
    script = _script(tmp_path, "argv_clearer.py", "import sys\nsys.argv.clear()\nprint('done')\n")
    target = ["-m", "argv_clearer"] if as_module else [script]
    assert main(["run", "--no-color", *target]) == 0
    out, err = capsys.readouterr()
    assert "done" in out and "IndexError" not in err


def _cli(*argv: str, cwd, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return dtype_doctor(*argv, cwd=cwd, stdin=stdin, text=False, timeout=120)


def test_run_dev_stdin(tmp_path):
    done = _cli("run", "--json=out.json", "/dev/stdin", cwd=tmp_path, stdin=b"print('from stdin')\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"from stdin\n"
    assert json.loads((tmp_path / "out.json").read_text())["tool"] == "run"


def test_a_script_that_closes_stderr_still_gets_its_report(tmp_path):
    script = _script(tmp_path, "closes.py", "import sys\nprint('ran')\nsys.stderr.close()\n")
    done = _cli("run", "--json=out.json", "--no-color", script, cwd=tmp_path)
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert "lost sys.stderr" not in err and "I/O operation on closed file" not in err
    assert err.count("no problems found") == 1
    assert json.loads((tmp_path / "out.json").read_text())["tool"] == "run"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_that_exits_writes_no_second_report(tmp_path):
    script = _script(
        tmp_path,
        "forks.py",
        """
        import os, sys
        pid = os.fork()
        if pid == 0:
            print("child", flush=True)
            sys.exit(5)
        _, status = os.waitpid(pid, 0)
        print("parent saw", os.waitstatus_to_exitcode(status), flush=True)
        """,
    )
    done = _cli("run", "--json=out.json", "--no-color", script, cwd=tmp_path)
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert b"child\n" in done.stdout and b"parent saw 5\n" in done.stdout  # the child kept its exit code
    assert err.count("dtype-doctor run:") == 1, err
    assert json.loads((tmp_path / "out.json").read_text())["tool"] == "run"
