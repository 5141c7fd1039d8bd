"""The shared CLI plumbing: `--json` never swallows the text, the script or the script's own flags."""

import json
from pathlib import Path

import pytest

from dtype_doctor.cli import build_parser, json_value_guard, main

MSG = "RuntimeError: mat1 and mat2 must have the same dtype, but got Float and Half"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["explain", "--json", MSG], ["explain", "--json", "-", MSG]),
        (["explain", "--json", "out.json", MSG], ["explain", "--json", "out.json", MSG]),
        (["explain", "--json", "-"], ["explain", "--json", "-", "-"]),
        (["explain", "--json=report.txt", MSG], ["explain", "--json=report.txt", MSG]),
        (["run", "--json", "train.py", "--lr", "1"], ["run", "--json", "-", "train.py", "--lr", "1"]),
        (
            ["run", "--mode", "strict", "train.py", "--json", "x"],
            ["run", "--mode", "strict", "train.py", "--json", "x"],
        ),
        (["check", "m.py:f", "--json"], ["check", "m.py:f", "--json"]),
    ],
)
def test_json_takes_a_path_only_when_it_is_one(argv, expected):
    assert json_value_guard(build_parser(), argv) == expected


def test_explain_json_before_the_text_prints_the_report(capsys):
    assert main(["explain", "--json", MSG]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["findings"][0]["code"] == "matmul-dtype-mismatch"


def test_a_misspelled_command_gets_a_did_you_mean(capsys):
    assert main(["chek", "model.py:make"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "dtype-doctor: error: unknown command 'chek': did you mean 'check'?"
    )


def test_dir_of_the_package_lists_the_lazy_public_functions():
    import dtype_doctor

    assert {"watch", "check", "fix", "guard", "explain", "compare", "audit"} <= set(dir(dtype_doctor))


def test_guard_documents_what_it_does_and_how_to_undo_it():
    from dtype_doctor import guard

    doc = guard.__doc__ or ""
    assert len(doc.splitlines()) > 5 and "remove()" in doc and "module-input-cast" in doc


def test_every_lazy_public_name_is_typed_for_type_checkers_as_what_it_imports():
    """The `if TYPE_CHECKING:` imports of dtype_doctor/__init__.py (what mypy and an editor see) name
    exactly the lazy public names, each the very object `dtype_doctor.NAME` gives at run time."""
    import ast
    import importlib

    import dtype_doctor

    tree = ast.parse(Path(dtype_doctor.__file__).read_text(encoding="utf-8"))
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"
    )
    typed = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert set(typed) == set(dtype_doctor._LAZY)
    for name, module in typed.items():
        imported = importlib.import_module(f".{module}", "dtype_doctor")
        assert getattr(imported, name) is getattr(dtype_doctor, name), name
