"""One remedy model (issue 29, item 3): a remedy is a catalog template made concrete by one processor,
`remedies/processor.py`, the only code that builds a `Fix` (report.py's JSON loader aside); a fix made
at a place the producer found says where its snippet goes, in its title and in `Fix.file`/`Fix.line`."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import pytest
import torch
from torch import nn

import tiny_models
from dtype_doctor import catalog, remedies, watch
from dtype_doctor.catalog import shared_remedies
from dtype_doctor.catalog.shared_remedies import CAST_HELD, KEEP_MODULE
from dtype_doctor.causes import group_by_cause
from dtype_doctor.report import Report

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "dtype_doctor"
HERE = "tests/test_remedies.py"
# where a Fix may be built: the processor, and the JSON loader (deserialisation, not a remedy)
ALLOWED = {("remedies/processor.py", None), ("report.py", "_finding_from_dict")}


def _fix_builders(tree: ast.Module) -> list[tuple[int, str | None]]:
    """(line, enclosing function) of every call that builds a `Fix`: `Fix(...)`, `report.Fix(...)`,
    or the class under another name (`from ..report import Fix as F`, `make = Fix`)."""
    aliases = {"Fix"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            aliases |= {a.asname for a in node.names if a.name == "Fix" and a.asname}
    renames = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)]
    for _ in renames:  # `a = Fix`, `b = a`: followed to the end, whatever their order
        for node in renames:
            if node.value.id in aliases:  # type: ignore[attr-defined]
                aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    found: list[tuple[int, str | None]] = []

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
            if isinstance(child, ast.Call):
                func = child.func
                if (isinstance(func, ast.Name) and func.id in aliases) or (
                    isinstance(func, ast.Attribute) and func.attr == "Fix"
                ):
                    found.append((child.lineno, function))
            visit(child, inner)

    visit(tree, None)
    return found


def test_the_fix_gate_sees_every_way_to_build_one():
    source = (
        "from ..report import Fix as F\nimport dtype_doctor.report as report\nmake = F\n"
        "def a():\n    return Fix(title='x')\n"
        "def b():\n    return report.Fix('x')\n"
        "def c():\n    return F('x'), make('y')\n"
        "def d():\n    return Fixed('x'), fix_it('y')\n"
    )
    assert _fix_builders(ast.parse(source)) == [(5, "a"), (7, "b"), (9, "c"), (9, "c")]


def test_fix_is_built_only_by_the_remedy_processor():
    outside = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        for line, function in _fix_builders(ast.parse(path.read_text(encoding="utf-8"))):
            if (name, None) not in ALLOWED and (name, function) not in ALLOWED:
                outside.append(f"{name}:{line} (in {function or 'the module'})")
    assert not outside, "Fix( built outside remedies/processor.py: give the producer's evidence to it\n" + (
        "\n".join(outside)
    )


def test_a_fix_at_the_callers_inputs_says_where_it_goes_and_runs_there():
    with watch() as s:
        model = tiny_models.gpt2(head=False).half()
        embeds = torch.randn(1, 5, 64)
        with pytest.raises(RuntimeError):
            model(inputs_embeds=embeds)
        called = inspect.currentframe().f_lineno - 1
    (finding,) = group_by_cause(s.report).errors
    first = finding.fixes[0]
    assert first.snippet == "embeds = embeds.to(torch.float16)"
    assert (first.file, first.line) == (HERE, called)
    assert f"({HERE}:{called})" in first.title
    again = Report.from_json(s.report.to_json()).errors[0].fixes[0]
    assert (again.file, again.line) == (HERE, called)
    assert json.loads(s.report.to_json())["findings"][0]["fixes"][0]["line"] == called
    scope = {"torch": torch, "embeds": embeds}
    exec(first.snippet, scope)  # pasted on its own line before the call, as the title says
    assert model(inputs_embeds=scope["embeds"]).last_hidden_state.dtype == torch.float16


def test_alternatives_give_the_first_the_evidence_meets_and_a_place_only_when_known():
    layer = nn.Linear(4, 4).half()
    layer.bias = nn.Parameter(torch.zeros(4))  # restored apart from its weight, in float32
    evidence = {"held": ["layer.bias"], "born": ["`layer.bias` float32 at load.py:3"], "want": "float16"}
    placed = remedies.make(CAST_HELD, file="train.py", line=12, **evidence)
    unplaced = remedies.make(CAST_HELD, **evidence)
    assert placed.title.endswith("before your call (train.py:12)")
    assert (placed.file, placed.line) == ("train.py", 12)
    assert unplaced.title.endswith("before the model is called")
    assert (unplaced.file, unplaced.line) == (None, None)
    assert placed.why == "made in another dtype: `layer.bias` float32 at load.py:3; the rest runs in float16"
    assert remedies.make(CAST_HELD, want="float16", held=[]) is None  # no odd tensor: no remedy
    exec(placed.snippet, {"torch": torch, "layer": layer})
    assert layer(torch.randn(2, 4, dtype=torch.float16)).dtype == torch.float16


def test_a_measured_number_is_evidence_even_when_it_is_zero():
    measured = remedies.make(KEEP_MODULE, path="blocks.0.norm", before=0.31, after=0.0)
    assert measured.title.endswith("(re-run with it: error vs float32 0.31 → 0)")
    assert "(not re-run)" in remedies.make(KEEP_MODULE, path="blocks.0.norm", before=0.31, after=None).title
    assert remedies.make(KEEP_MODULE, path="", before=0.31) is None


def test_a_family_remedy_for_a_context_comes_first_and_is_not_repeated():
    env = catalog.fixes_for("apex-conflict", ["env"])
    assert env[0].title == "Uninstall apex and use PyTorch's native AMP (the xDiT fix)"
    assert [f.snippet for f in env].count("pip uninstall -y apex") == 1
    assert catalog.fixes_for("apex-conflict")[0].title == "Uninstall apex and fall back to PyTorch native AMP"


EVIDENCE = {
    "command": "dtype-doctor run train.py",
    "name": "mask",
    "want": "float16",
    "have": "float32",
    "file": "train.py",
    "line": 3,
    "value": "torch.linspace(0.5, 1.0, 8)",
    "model": "model",
    "paths": ["encoder.proj", "blocks.0", "h.0.ln_1", "head"],
    "what": "`encoder.proj`",
    "made": "self.proj = nn.Linear(4, 4, dtype=torch.float16)",
    "passed": ["pixels", "mask"],
    "held": ["model.head.bias", 'model.get_parameter("h.0.w")'],
    "born": ["`model.head.bias` float32 at load.py:9"],
    "keep": ["blocks.0.norm"],
    "finite": True,
    "path": "blocks.0.norm",
    "before": 0.3,
    "after": 0.01,
    "where": "'blocks.0.norm'",
    "named": "'blocks.0.norm.weight'",
    "limit": "65504",
    "like": "q",
    "dest": "cache",
    "dtype": "bfloat16",
}


@pytest.mark.parametrize("name", [n for n in dir(shared_remedies) if n.isupper() and not n.startswith("_")])
def test_every_shared_remedy_is_made_from_evidence_and_its_python_parses(name):
    template = getattr(shared_remedies, name)
    for one in template if isinstance(template, tuple) else (template,):
        fix = remedies.make(one, **EVIDENCE)
        assert fix is not None and fix.title and "{" not in fix.title, name
        assert fix.language in ("python", "shell")
        if fix.language == "python":
            ast.parse(fix.snippet)
        assert remedies.make(one) is None  # no evidence: no remedy, never a placeholder
