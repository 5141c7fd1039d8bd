"""SARIF and GitHub annotations as code scanning and a pull request read them: rule text in general
words (no `{placeholder}` of the catalog's templates), every file relative to the repository's top
level (`%SRCROOT%`) wherever the command ran, and a file of an installed library never an artifact:
the user's frame that reached it instead, else no file. Every SARIF log checked against the schema."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cli_process import ENV, dtype_doctor
from dtype_doctor import catalog
from dtype_doctor.cli import main
from dtype_doctor.render import registry
from dtype_doctor.render.sarif import general, sarif_log
from dtype_doctor.report import Finding, Location, Operand, Origin, Report, Severity

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[1]
SARIF_SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
PLACEHOLDER = re.compile(r"\{[A-Za-z_][^{}\s]*\}")
LIBRARY = "/usr/lib/python3/dist-packages/transformers/models/llama/modeling_llama.py"
TRACEBACK = f"""Traceback (most recent call last):
  File "{LIBRARY}", line 300, in forward
    x = self.proj(x)
  File "/usr/local/lib/python3.10/site-packages/torch/nn/modules/linear.py", line 116, in forward
    return F.linear(input, self.weight, self.bias)
RuntimeError: mat1 and mat2 must have the same dtype, but got Float and Half
"""
FAKELIB = """import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        return self.proj(x)


def build():
    return Block().half()
"""
TRAIN = """import torch
import dd_fakelib41

model = dd_fakelib41.build()
x = torch.randn(2, 8)
out = model(x)
"""


def valid(log: dict) -> dict:
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(log)
    return log


def uris(log: dict) -> list[str]:
    """Every artifact URI in the log, wherever it sits (locations, related locations, fixes)."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("artifactLocation"), dict):
                found.append(node["artifactLocation"]["uri"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(log["runs"][0]["results"])
    return found


def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q", str(repo)], check=True, capture_output=True)
    else:
        (repo / ".git").mkdir()
    return repo


def test_the_rule_of_every_family_in_the_catalog_has_no_placeholder():
    report = Report(tool="run")
    for code in catalog.codes():
        report.add(Finding(code=code, title=code, severity=Severity.WARNING, message=code))
    log = valid(sarif_log(report))
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == catalog.codes()
    for rule in rules:
        for key in ("shortDescription", "fullDescription", "help"):
            text = rule[key]["text"]
            assert text.strip() and not PLACEHOLDER.search(text), (rule["id"], key, text)
    promotion = next(r for r in rules if r["id"] == "silent-promotion")
    assert promotion["fullDescription"]["text"].startswith("An op received tensors of different floating")


def test_a_template_in_general_words():
    cause = catalog.family("silent-promotion").cause
    assert cause.startswith("{op} received tensors of different floating dtypes ({dtype} and {other_dtype});")
    assert general(cause).startswith(
        "An op received tensors of different floating dtypes; PyTorch promotes the result"
    )
    assert (
        general("Cast at the seam: give '{module}' its own dtype")
        == "Cast at the seam: give a module its own dtype"
    )
    assert general("{forks} process(es) forked. {where} made it") == "Process(es) forked. A module made it"
    assert (
        general("Unscale: `{scaler}.unscale_({optimizer})` {at}.") == "Unscale: `scaler.unscale_(optimizer)`."
    )
    assert general("on {gpu} (sm{capability}) they raise; {{'a': 1}}") == "on this GPU they raise; {'a': 1}"


def test_a_run_in_a_subfolder_names_files_from_the_repository_root(tmp_path, monkeypatch):
    """`run --diff` from repo/src: locations, related locations and the fix's artifactChanges are
    `src/...` under %SRCROOT% = the repository's top level, and so is the GitHub annotation's file."""
    repo = repository(tmp_path)
    shutil.copy(ROOT / "tests" / "diff_zoo" / "head_after_half.py", repo / "src")
    monkeypatch.chdir(repo / "src")
    args = ["run", "--diff", "--no-color", "-o", "sarif=r.sarif", "-o", "github=gh.txt", "head_after_half.py"]
    assert main(args) == 0
    log = valid(json.loads((repo / "src" / "r.sarif").read_text()))
    (run,) = log["runs"]
    assert run["originalUriBaseIds"] == {"%SRCROOT%": {"uri": repo.resolve().as_uri() + "/"}}
    (result,) = run["results"]
    where = result["locations"][0]["physicalLocation"]
    assert where["artifactLocation"] == {"uri": "src/head_after_half.py", "uriBaseId": "%SRCROOT%"}
    assert where["region"] == {"startLine": 11}
    (change,) = result["fixes"][0]["artifactChanges"]
    assert change["artifactLocation"] == {"uri": "src/head_after_half.py", "uriBaseId": "%SRCROOT%"}
    assert set(uris(log)) == {"src/head_after_half.py"}
    (line,) = (repo / "src" / "gh.txt").read_text().splitlines()
    assert line.startswith("::error file=src/head_after_half.py,line=11,title=")


def test_a_failure_inside_an_installed_library_points_at_the_users_call(tmp_path, monkeypatch):
    """The op that raised is in site-packages (the report's short name `dd_fakelib41/__init__.py`):
    no SARIF artifact and no annotation names it; the user's line that called the model does."""
    repo = repository(tmp_path)
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "dd_fakelib41").mkdir(parents=True)
    (site / "dd_fakelib41" / "__init__.py").write_text(FAKELIB)
    (repo / "src" / "train.py").write_text(TRAIN)
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])  # run gives sys.path[0] to the program
    monkeypatch.chdir(repo / "src")
    try:
        main(["run", "--budget", "0", "--no-color", "-o", "sarif=r.sarif", "-o", "github=gh.txt", "train.py"])
    finally:
        sys.modules.pop("dd_fakelib41", None)
    log = valid(json.loads((repo / "src" / "r.sarif").read_text()))
    result = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "matmul-dtype-mismatch")
    where = result["locations"][0]["physicalLocation"]
    assert where["artifactLocation"] == {"uri": "src/train.py", "uriBaseId": "%SRCROOT%"}
    assert where["region"] == {"startLine": 6}  # out = model(x)
    assert "dd_fakelib41/__init__.py" in result["locations"][0]["message"]["text"]  # named, not linked
    assert uris(log) and all(u.startswith("src/train.py") for u in uris(log)), uris(log)
    annotations = (repo / "src" / "gh.txt").read_text().splitlines()
    assert annotations and all("dd_fakelib41" not in a.split("::")[1] for a in annotations)
    assert any(a.startswith("::error file=src/train.py,line=6,") for a in annotations)


def test_a_check_that_fails_inside_a_library_points_at_the_factory(tmp_path):
    """check calls the model itself: no frame of the user's reached the library's forward that
    failed, so the result points at the factory the check built the model with (its `def` line)."""
    repo = repository(tmp_path)
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "dd_fakelib41").mkdir(parents=True)
    (site / "dd_fakelib41" / "__init__.py").write_text(FAKELIB)
    (repo / "src" / "model.py").write_text(
        "import dd_fakelib41\n\n\ndef build():\n    return dd_fakelib41.build()\n"
    )
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(site)])}
    cmd = ("check", "model.py:build", "--input", "2x8", "-o", "sarif=r.sarif", "-o", "github=gh.txt")
    code = dtype_doctor(*cmd, cwd=repo / "src", env=env).returncode  # a process of its own, as in CI
    assert code == 1
    log = valid(json.loads((repo / "src" / "r.sarif").read_text()))
    (result,) = log["runs"][0]["results"]
    where = result["locations"][0]
    assert where["physicalLocation"]["artifactLocation"] == {"uri": "src/model.py", "uriBaseId": "%SRCROOT%"}
    assert where["physicalLocation"]["region"] == {"startLine": 4}  # def build():
    assert (
        "(model.py:build)" in where["message"]["text"]
        and "dd_fakelib41/__init__.py" in where["message"]["text"]
    )
    assert uris(log) == ["src/model.py"]
    (line,) = (repo / "src" / "gh.txt").read_text().splitlines()
    assert line.startswith("::error file=src/model.py,line=4,title=dtype-doctor matmul-dtype-mismatch")


FORKS = """import os

import torch

x = torch.ones(2)
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_run_finding_with_no_line_points_at_the_script(tmp_path):
    """child-process-unwatched is about the whole run (no op, no line): the result points at the
    script run ran, line 1, not at nothing (code scanning refuses a whole SARIF file holding a result
    without a location)."""
    repo = repository(tmp_path)
    (repo / "src" / "fork.py").write_text(FORKS)
    cmd = ("run", "-o", "sarif=r.sarif", "-o", "github=gh.txt", "fork.py")
    assert dtype_doctor(*cmd, cwd=repo / "src", env={**ENV, "PYTHONPATH": str(ROOT / "src")}).returncode == 0
    (result,) = valid(json.loads((repo / "src" / "r.sarif").read_text()))["runs"][0]["results"]
    assert result["ruleId"] == "child-process-unwatched"
    (where,) = result["locations"]
    assert where["physicalLocation"] == {
        "artifactLocation": {"uri": "src/fork.py", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 1},
    }
    assert where["message"]["text"] == "the program dtype-doctor run ran (fork.py)"
    (line,) = (repo / "src" / "gh.txt").read_text().splitlines()
    assert line.startswith("::notice file=src/fork.py,line=1,title=dtype-doctor child-process-unwatched")


def test_a_library_frame_with_no_user_frame_is_no_file(tmp_path, monkeypatch, capsys):
    """A pasted traceback whose frames are all site-packages/dist-packages: no physicalLocation (the
    module stays as a logical location) and an annotation without `file=`."""
    monkeypatch.chdir(repository(tmp_path))
    log_file = tmp_path / "train.log"
    log_file.write_text(TRACEBACK)
    out = tmp_path / "r.sarif"
    assert main(["explain", "--file", str(log_file), "-o", f"sarif={out}", "--output", "github"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("::error title=dtype-doctor matmul-dtype-mismatch%3A "), line
    (result,) = valid(json.loads(out.read_text()))["runs"][0]["results"]
    assert uris({"runs": [{"results": [result]}]}) == []
    assert all("physicalLocation" not in loc for loc in result.get("locations", []))


@pytest.mark.parametrize(
    "library",
    [
        LIBRARY,
        "C:\\Python310\\Lib\\site-packages\\diffusers\\models\\unet.py",
        "transformers/models/llama/modeling_llama.py",  # the short name a live run gives it
        torch.nn.modules.linear.__file__,  # there, in site-packages
        json.__file__,  # Python's own library
    ],
)
def test_library_files_and_files_outside_the_root_are_never_artifacts(library, tmp_path, monkeypatch):
    repo = repository(tmp_path)
    (repo / "train.py").write_text("x = 1\n" * 10)
    elsewhere = tmp_path / "elsewhere.py"
    elsewhere.write_text("y = 2\n")
    monkeypatch.chdir(repo)
    origin = Origin(
        kind="parameter",
        name="w",
        file=library,
        line=8,
        chain=[Origin(kind="input", file=str(elsewhere), line=1)],
    )
    reached = Finding(
        code="matmul-dtype-mismatch",
        title="T",
        location=Location(module="proj", op="F.linear", file=library, line=300),
        operands=[Operand(role="weight", dtype="float16", origin=origin)],
        data={"your_code": "train.py:7"},
    )
    alone = Finding(code="silent-promotion", title="T", location=Location(op="add", file=library, line=5))
    report = Report(tool="run", findings=[reached, alone])
    log = valid(sarif_log(report))
    first, second = log["runs"][0]["results"]
    assert first["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "train.py", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 7},
    }
    assert "relatedLocations" not in first  # the library's parameter and the file outside the root
    assert "locations" not in second
    assert uris(log) == ["train.py"]
    lines = registry.render("github", report).splitlines()
    assert lines[0].startswith("::error file=train.py,line=7,title=")
    assert lines[1].startswith("::error title=")


def test_explain_of_a_log_in_the_repository_points_at_the_line_it_rests_on(tmp_path, monkeypatch):
    """explain's findings have no line of the user's here (the traceback's files are another
    machine's): the SARIF result and the GitHub annotation point at the log's error line."""
    repo = repository(tmp_path)
    (repo / "logs").mkdir()
    (repo / "logs" / "train.log").write_text("step 1 loss 0.3\n" + TRACEBACK)
    monkeypatch.chdir(repo / "src")
    args = ["explain", "--file", "../logs/train.log", "-o", "sarif=r.sarif", "-o", "github=gh.txt"]
    assert main(args) == 0  # explain fails CI only with --fail-on (docs/ci.md)
    log = valid(json.loads((repo / "src" / "r.sarif").read_text()))
    (result,) = log["runs"][0]["results"]
    where = result["locations"][0]["physicalLocation"]
    assert where["artifactLocation"] == {"uri": "logs/train.log", "uriBaseId": "%SRCROOT%"}
    assert where["region"] == {"startLine": 7}  # the RuntimeError line, not the library's frame
    assert set(uris(log)) == {"logs/train.log"}
    (line,) = (repo / "src" / "gh.txt").read_text().splitlines()
    assert line.startswith("::error file=logs/train.log,line=7,title=")
