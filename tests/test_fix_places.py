"""Every fix with code says where it is pasted (issue 29, item 3): the remedy processor places a
family's fixes at the user's line their snippet needs (where the odd tensor has the user's name,
after the model is built and converted, the op's line), from the places the producer saw. The
end-to-end cases run `dtype-doctor run`, paste the first fixes at the place they state, as a
user would, and run the patched script with plain python."""

from __future__ import annotations

import ast
import io
import json
import os
import re
import sys
import textwrap
from pathlib import Path

from rich.console import Console

from cli_process import python  # type: ignore[import-not-found]
from dtype_doctor import remedies
from dtype_doctor.remedies.model import FixTemplate
from dtype_doctor.remedies.places import CALL, INPUT, MODEL, Place, after_built, kind_of, statement_line
from dtype_doctor.render import console, registry
from dtype_doctor.report import Finding, Fix, Location, Report, Severity

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}

BUILT = """\
import torch

def train(net, data):
    \"\"\"A docstring.\"\"\"
    for x in data:
        net(x)

def make():
    return torch.nn.Linear(2, 2)

if True:
    net = make()
    net.half()
    stats = {"n": 1}
    for step in range(2):
        out = net(
            torch.zeros(1, 2, dtype=torch.float16),
        )
"""


def test_the_model_place_is_after_it_is_built_and_converted(tmp_path: Path) -> None:
    path = tmp_path / "built.py"
    path.write_text(BUILT)
    assert statement_line(str(path), 17) == 16  # a call written over lines starts at its first
    assert after_built(str(path), "net", 16) == 14  # after `net.half()`, in the block of the call
    assert after_built(str(path), "net", 6) == 5  # a parameter: from the function's first statement
    assert after_built(str(path), "other", 16) is None  # not made here: no place claimed


def test_the_kind_of_place_follows_the_names_a_snippet_reads() -> None:
    assert kind_of("{tensor} = {tensor}.to({dtype})") == INPUT
    assert kind_of("keep_in_fp32({model}, {modules})") == MODEL
    assert kind_of("model = model.float()  # or from_pretrained(...)") == MODEL
    assert kind_of("# a comment naming the model only") == ""


def test_ranked_places_each_fix_where_its_names_exist() -> None:
    templates = (
        FixTemplate("seam", "{tensor} = {tensor}.to({dtype})"),
        FixTemplate("whole", "{model} = {model}.float()"),
        FixTemplate("guess", "{array} = {array}.astype('float32')"),
    )
    places = {CALL: Place("s.py", 20), INPUT: Place("s.py", 14), MODEL: Place("s.py", 9)}
    fixes = remedies.ranked(templates, places=places, tensor="feats", model="net", dtype="torch.float16")
    assert [(f.title, f.file, f.line) for f in fixes] == [
        ("seam", "s.py", 14),
        ("whole", "s.py", 9),
        ("guess", None, None),  # `array` is not known: a placeholder is placed nowhere
    ]
    assert fixes[0].headline() == "seam (at s.py:14)"
    named = Fix(title="Cast at s.py:14", file="s.py", line=14)
    assert named.headline() == "Cast at s.py:14"  # a title that says the place is not repeated


def test_every_renderer_says_where_the_fix_is_pasted() -> None:
    report = Report(tool="run")
    fix = Fix(title="Cast `x`", snippet="x = x.to(torch.float16)", file="s.py", line=14)
    location = Location(module="head", op="F.linear")
    report.add(
        Finding(
            code="matmul-dtype-mismatch", title="T", severity=Severity.ERROR, location=location, fixes=[fix]
        )
    )
    shown = io.StringIO()
    console.render(report, Console(file=shown, width=120))
    outputs = {name: registry.render(name, report) for name in ("html", "sarif", "github")}
    for name, text in {"console": shown.getvalue(), **outputs}.items():
        assert "at s.py:14" in str(text), name


def _findings(tmp_path: Path, name: str, *flags: str) -> list[dict]:
    cmd = [sys.executable, "-m", "dtype_doctor", "run", *flags, "--json", "out.json", name]
    python(cmd, cwd=tmp_path, env=ENV, timeout=600)
    return json.loads((tmp_path / "out.json").read_text())["findings"]


def _paste(text: str, line: int, snippet: str) -> str:
    """`snippet` pasted at `line` as the user reads "at FILE:LINE": before the statement there,
    indented like it, or after it when the snippet re-assigns what that statement assigns."""
    lines = text.splitlines(keepends=True)
    indent = re.match(r"\s*", lines[line - 1]).group(0)
    body = "".join(indent + s + "\n" for s in snippet.splitlines())
    stmt = ast.parse(lines[line - 1].strip()).body[0] if not lines[line - 1].rstrip().endswith(":") else None
    first = ast.parse(snippet).body[0]
    same = (
        isinstance(stmt, ast.Assign)
        and isinstance(first, ast.Assign)
        and {ast.unparse(t) for t in stmt.targets} & {ast.unparse(t) for t in first.targets}
    )
    at = line if same else line - 1
    return "".join([*lines[:at], body, *lines[at:]])


def _works_pasted(tmp_path: Path, name: str, fix: dict) -> None:
    script = tmp_path / name
    assert fix["file"] == name and fix["line"], fix
    patched = tmp_path / f"patched_{name}"
    patched.write_text(_paste(script.read_text(), fix["line"], fix["snippet"]))
    proc = python([sys.executable, patched.name], cwd=tmp_path, env=ENV, timeout=300)
    assert proc.returncode == 0, (fix, patched.read_text(), proc.stderr[-1500:])


SEAM = textwrap.dedent(
    """\
    import torch
    from torch import nn


    class Tower(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Conv1d(4, 8, 3)
            self.head = nn.Linear(8, 3)

        def forward(self, signal):
            return self.head(self.embed(signal).mean(-1))


    tower = Tower()
    tower.half()
    readings = torch.randn(2, 4, 16)  # float32 readings into a float16 model
    with torch.no_grad():
        scores = tower(readings)
    print(scores.dtype)
    """
)


def test_each_cast_is_placed_where_its_tensor_has_that_name(tmp_path: Path) -> None:
    (tmp_path / "tower.py").write_text(SEAM)
    error = next(f for f in _findings(tmp_path, "tower.py") if f["severity"] == "error")
    placed = {f["snippet"].split("#")[0].strip(): f for f in error["fixes"] if f.get("file")}
    passed = placed["readings = readings.to(torch.float16)"]
    assert passed["line"] == 19  # before the user's call that passes `readings`
    _works_pasted(tmp_path, "tower.py", passed)
    seam = placed["signal = signal.to(torch.float16)"]
    assert seam["line"] == 12  # inside forward, where the argument is called `signal`
    _works_pasted(tmp_path, "tower.py", seam)


OVERFLOW = textwrap.dedent(
    """\
    import torch
    from torch import nn


    class Squares(nn.Module):
        def forward(self, x):
            return (x * x).mean(-1).sqrt()


    class Scorer(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(16, 16)
            self.energy = Squares()

        def forward(self, x):
            return self.energy(self.proj(x) * 1000)


    torch.manual_seed(0)
    scorer = Scorer().half()
    batch = torch.randn(4, 16).half()
    with torch.no_grad():
        energy = scorer(batch)
    assert torch.isfinite(energy).all(), "energy overflowed float16"
    """
)


def test_a_keep_in_float32_fix_names_the_users_model_where_it_exists(tmp_path: Path) -> None:
    (tmp_path / "scorer.py").write_text(OVERFLOW)
    findings = _findings(tmp_path, "scorer.py", "--numerics")
    keeps = [x for f in findings for x in f["fixes"] if "keep_in_fp32(" in x["snippet"]]
    assert keeps, [f["fixes"] for f in findings]
    keep = keeps[0]
    assert "keep_in_fp32(scorer, " in keep["snippet"]  # the user's name, not a placeholder `model`
    assert keep["line"] == 22  # the line after `scorer = Scorer().half()`
    _works_pasted(tmp_path, "scorer.py", keep)


WRAPPED = textwrap.dedent(
    """\
    import torch
    from torch import nn


    class Forecaster:
        def __init__(self):
            self.net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2)).double()

        def predict(self, window):
            with torch.no_grad():
                return self.net(window)


    forecaster = Forecaster()
    print(forecaster.predict(torch.randn(3, 6)).shape)
    """
)


def test_a_model_a_plain_object_holds_is_named_through_it(tmp_path: Path) -> None:
    (tmp_path / "wrapped.py").write_text(WRAPPED)
    error = next(f for f in _findings(tmp_path, "wrapped.py") if f["severity"] == "error")
    fix = next(x for x in error["fixes"] if x["snippet"].strip() and x.get("file"))
    assert "forecaster.net" in fix["snippet"] or "self.net" in fix["snippet"], error["fixes"]
    _works_pasted(tmp_path, "wrapped.py", fix)


HALF_WEIGHTS_ONLY = textwrap.dedent(
    """\
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(64, 2))
    for name, p in model.named_parameters():
        if not name.endswith("bias"):
            p.data = p.data.half()  # a launcher that converted the weights only
    pixels = torch.randn(1, 3, 6, 6)
    with torch.no_grad():
        out = model(pixels.half())
    print(out.dtype)
    """
)


def test_an_input_cast_in_the_call_is_never_cast_again(tmp_path: Path) -> None:
    """`model(pixels.half())` passes float16 whatever `pixels` holds: the fix is the float32 bias
    (the whole model in one precision), never a cast of `pixels`, which would change nothing."""
    (tmp_path / "vlm.py").write_text(HALF_WEIGHTS_ONLY)
    error = next(f for f in _findings(tmp_path, "vlm.py") if f["severity"] == "error")
    assert error["code"] == "conv-bias-dtype-mismatch"
    assert not any("pixels" in (f.get("snippet") or "") for f in error["fixes"]), error["fixes"]
    first = error["fixes"][0]
    assert first["snippet"].startswith("model = model.to(torch.float16)"), first
    assert first["verified"] is True, first
    _works_pasted(tmp_path, "vlm.py", first)
