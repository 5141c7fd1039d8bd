"""Bad input and user code that misbehaves: one clear line, a non-zero exit, and clean JSON on stdout."""

from __future__ import annotations

import json
import textwrap

import pytest

import dtype_doctor as dd
from dtype_doctor.cli import main


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_run_json_on_stdout_stays_valid_when_the_script_prints(tmp_path, capsys):
    script = _write(tmp_path, "talk.py", 'print("script stdout")\n')
    assert main(["run", "--json", script]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["tool"] == "run"
    assert "script stdout" in err


def test_check_json_on_stdout_stays_valid_when_the_factory_prints(tmp_path, capsys):
    factory = _write(
        tmp_path,
        "noisy.py",
        """
        import torch
        print("loading model...")
        def build():
            print("building")
            return torch.nn.Linear(4, 4)
        """,
    )
    main(["check", f"{factory}:build", "--input", "2x4", "--json"])
    out, _ = capsys.readouterr()
    assert json.loads(out)["tool"] == "check"


def test_a_factory_calling_sys_exit_is_reported_not_obeyed(tmp_path, capsys):
    factory = _write(tmp_path, "quits.py", "import sys\ndef build():\n    sys.exit(5)\n")
    assert main(["check", f"{factory}:build", "--input", "2x4"]) == 2
    assert "sys.exit(5)" in capsys.readouterr().err


def test_run_of_a_script_that_does_not_compile_shows_only_the_users_error(tmp_path, capsys):
    script = _write(tmp_path, "broken.py", "print(1\n")
    assert main(["run", script]) == 1
    err = capsys.readouterr().err
    assert "SyntaxError" in err
    assert "dtype_doctor" not in err and "runpy" not in err
    assert "no problems found" not in err and "exited with code 1" in err


def test_run_of_a_binary_file_is_one_line(tmp_path, capsys):
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x00\x01binary")
    assert main(["run", str(blob)]) == 2
    assert "not a Python script" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('{"schema_version": 1, "meta": [], "findings": []}', "'meta' is not an object"),
        ('{"schema_version": 1, "findings": [1]}', "findings[0] is not an object"),
        ('{"schema_version": 1, "findings": [{"code": 5}]}', "findings[0].code"),
        ("[1, 2]", "a report is a JSON object"),
    ],
)
def test_merge_names_what_is_wrong_in_a_report(tmp_path, capsys, content, says):
    path = tmp_path / "r.json"
    path.write_text(content)
    assert main(["merge", str(path)]) == 2
    assert says in capsys.readouterr().err


def test_merge_of_a_binary_file(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_bytes(b"\xfa\xfb\x00")
    assert main(["merge", str(path)]) == 2
    assert "not UTF-8" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--tolerance", "nan"], "--tolerance must be a positive number"),
        (["--top-k", "-1"], "--top-k must be 0 or more"),
        (["--device", "meta"], "--device meta"),
    ],
)
def test_compare_rejects_bad_values_before_running(tmp_path, capsys, extra, says):
    factory = _write(tmp_path, "m.py", "import torch\ndef build():\n    return torch.nn.Linear(4, 4)\n")
    assert main(["compare", f"{factory}:build", "--input", "2x4", *extra]) == 2
    assert says in capsys.readouterr().err


def test_compare_plot_into_a_directory_is_refused_before_running(tmp_path, capsys):
    factory = _write(tmp_path, "m.py", "import torch\ndef build():\n    return torch.nn.Linear(4, 4)\n")
    assert main(["compare", f"{factory}:build", "--input", "2x4", "--plot", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda: dd.explain(None), "explain expects str or bytes"),
        (lambda: dd.fix(None), "fix expects a torch.nn.Module"),
        (lambda: dd.guard("model"), "guard expects a torch.nn.Module"),
    ],
)
def test_api_says_what_it_expects(call, says):
    with pytest.raises(TypeError, match=says):
        call()
