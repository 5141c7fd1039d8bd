"""Issue 38's "one of each": one set of cast names (tracing/casts.py), one answer to "is this call in
place" (tracing/inplace.py) and one to "whose file is it" (tracing/files.py); no other module keeps
its own copy."""

from __future__ import annotations

import ast
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from dtype_doctor.tracing import casts, files, inplace

SRC = Path(__file__).resolve().parents[1] / "src" / "dtype_doctor"
CAST_WORDS = {"to", "type", "half", "bfloat16", "float", "double", "type_as"}
DTYPE_NAME = re.compile(r"^(u?int|float|fp|bf|complex)\d+$|^(single|long|int|short|bool|bf16)$")


def _modules() -> list[Path]:
    return [p for p in SRC.rglob("*.py") if "tracing" not in p.parts]


def _literal_strings(node: ast.AST) -> set[str]:
    elts = getattr(node, "elts", None) or getattr(node, "keys", None) or []
    return {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}


def _cast_sets(tree: ast.AST) -> list[int]:
    """Lines of a set, tuple, list or dict literal naming two or more cast methods (a list of dtype
    names as a user writes them, `"float32"`, `"fp16"`, `"int"`, is not one)."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, (ast.Set, ast.Tuple, ast.List, ast.Dict))
        and len((words := _literal_strings(node)) & CAST_WORDS) >= 2
        and not any(DTYPE_NAME.match(w) for w in words)
    ]


def _package_markers(tree: ast.AST) -> list[int]:
    """Lines that test a path for "site-packages" in code (docstrings and messages aside)."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(
            isinstance(c, ast.Constant) and "-packages" in str(c.value)
            for c in [node.left, *node.comparators]
        )
    ]


def _hits(check: Callable[[ast.AST], list[int]]) -> list[str]:
    """`FILE:LINE` of every place outside tracing/ that `check` finds."""
    return [f"{p.relative_to(SRC)}:{line}" for p in _modules() for line in check(ast.parse(p.read_text()))]


def test_no_module_keeps_its_own_set_of_cast_names():
    found = _hits(_cast_sets)
    assert not found, "cast names listed outside tracing/casts.py:\n" + "\n".join(found)


def test_no_module_tests_for_site_packages_itself():
    found = _hits(_package_markers)
    assert not found, "library-file tests outside tracing/files.py:\n" + "\n".join(found)


def _in_place_tests(tree: ast.AST) -> list[int]:
    """Lines that test a name for an in-place dunder (`name.startswith("__i")`)."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "startswith"
        and any(isinstance(a, ast.Constant) and a.value == "__i" for a in node.args)
    ]


def test_no_module_tests_for_in_place_names_itself():
    found = _hits(_in_place_tests)
    assert not found, "in-place name tests outside tracing/inplace.py:\n" + "\n".join(found)


def test_in_place_names_their_twin():
    assert inplace.in_place("add_") == ("add", True)
    assert inplace.in_place("Tensor.__iadd__") == ("__add__", True)
    assert inplace.in_place("torch.add") == ("add", False)
    for dunder in ("__index__", "__int__", "__invert__", "__iter__", "__init__"):
        assert inplace.in_place(dunder) == (dunder, False)
    assert _in_place_tests(ast.parse('ok = name.startswith("__i")')) == [1]


def test_the_checks_bite():
    assert _cast_sets(ast.parse('X = ("to", "half", "bfloat16")')) == [1]
    assert _package_markers(ast.parse('ok = "site-packages" in path')) == [1]


def test_the_cast_subsets_answer_their_questions():
    assert {"half", "bfloat16", "to", "type", "type_as"} == casts.CAN_LOWER
    assert "type_as" not in casts.MODULE_CASTS and "float" not in casts.MODULE_LOWERING
    for method, dtype in casts.METHOD_DTYPE.items():  # the name is the dtype, as torch has it
        assert getattr(torch.ones(1), method)().dtype == getattr(torch, dtype)
    assert casts.cast_call(ast.parse("x.to(torch.half)").body[0].value)
    assert not casts.cast_call(ast.parse("x.float()").body[0].value, casts.CAN_LOWER)


def test_whose_file(tmp_path):
    mine = tmp_path / "train.py"
    mine.write_text("pass\n")
    assert files.user_file(str(mine))
    assert files.library_file(torch.__file__) and not files.user_file(torch.__file__)
    assert files.library_file(os.__file__)  # Python's own library
    assert files.tool_file(files.__file__) and not files.user_file(files.__file__)
    launcher = os.path.join(os.path.dirname(sys.executable), "dtype-doctor")
    assert files.library_file(launcher)  # the console script is never "your code"
    assert not files.user_file("<string>") and files.library_file("<frozen runpy>")


def test_whose_file_as_reports_show_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "unet.py").write_text("pass\n")
    assert files.shown_library_file("torch/nn/modules/linear.py")  # site-packages cut off
    assert not files.shown_library_file("models/unet.py")  # the user's, relative to the cwd
    assert not files.shown_library_file("no_such_package_here/x.py")
