"""Outputs as a registry: `--output FORMAT[=PATH]` on every command through one emit; SARIF 2.1.0
(validated against the official schema) and GitHub annotations from real runs; paths checked against
the inputs and written atomically; `--fail-on`; a renderer added by one file and one registry line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from dtype_doctor.cli import main
from dtype_doctor.render import registry

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[1]
SARIF_SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
MISMATCH = "RuntimeError: mat1 and mat2 must have the same dtype, but got Half and Float"


def valid_sarif(path: Path) -> dict:
    log = json.loads(path.read_text())
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(log)
    return log


@pytest.fixture(scope="module")
def head_run(tmp_path_factory) -> Path:
    """`run --diff` of a script whose head Linear is built in fp32 after `.half()`, with SARIF,
    GitHub annotations and JSON written in one go (in this process: the paths relative to its folder)."""
    folder = tmp_path_factory.mktemp("head")
    shutil.copy(ROOT / "tests" / "diff_zoo" / "head_after_half.py", folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        code = main(
            [
                *("run", "--diff", "--no-color", "-o", "sarif=r.sarif", "--output", "github=gh.txt"),
                *("-o", "r.json", "head_after_half.py"),
            ]
        )
    assert code == 0
    return folder


def test_sarif_of_a_real_run_validates_and_points_at_the_failing_line(head_run):
    folder = head_run
    log = valid_sarif(folder / "r.sarif")
    (run,) = log["runs"]
    (rule,) = run["tool"]["driver"]["rules"]
    assert rule["id"] == "matmul-dtype-mismatch"
    assert rule["shortDescription"]["text"] == "Matrix multiply operands have different dtypes"
    assert "Fixes, best first:\n1. " in rule["help"]["text"]
    (result,) = run["results"]
    assert result["level"] == "error" and result["ruleId"] == "matmul-dtype-mismatch"
    where = result["locations"][0]["physicalLocation"]
    assert where["artifactLocation"] == {"uri": "head_after_half.py", "uriBaseId": "%SRCROOT%"}
    assert where["region"] == {"startLine": 11}  # logits = model(x)
    origin = result["relatedLocations"][0]["physicalLocation"]
    assert (
        origin["region"]["startLine"] == 9
        and "torch.randn" in result["relatedLocations"][0]["message"]["text"]
    )
    first = json.loads((folder / "r.json").read_text())["findings"][0]["fixes"][0]
    assert first["verified"] is True and first["edits"]  # the experiment's cure, as edits
    assert f"Fix: {first['title']}" in result["message"]["text"]


def test_sarif_fixes_are_the_source_edit_and_apply_to_the_same_file_as_the_diff(head_run, tmp_path):
    folder = head_run
    (result,) = valid_sarif(folder / "r.sarif")["runs"][0]["results"]
    (fix,) = result["fixes"]
    (change,) = fix["artifactChanges"]
    assert change["artifactLocation"]["uri"] == "head_after_half.py"
    text = (folder / "head_after_half.py").read_text()
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    for edit in sorted(
        change["replacements"],
        key=lambda r: (-r["deletedRegion"]["startLine"], -r["deletedRegion"]["startColumn"]),
    ):
        region = edit["deletedRegion"]
        start = starts[region["startLine"] - 1] + region["startColumn"] - 1
        end = starts[region["endLine"] - 1] + region["endColumn"] - 1
        text = text[:start] + edit["insertedContent"]["text"] + text[end:]
    by_sarif = text
    report = json.loads((folder / "r.json").read_text())
    (patch,) = [s for s in report["sections"] if s["type"] == "source_patch"]
    shutil.copy(folder / "head_after_half.py", tmp_path)
    subprocess.run(
        ["patch", "-p1"], input=patch["diff"], cwd=tmp_path, text=True, check=True, capture_output=True
    )
    assert by_sarif == (tmp_path / "head_after_half.py").read_text()
    assert "nn.Linear(32, 4, dtype=torch.float16)" in by_sarif


def test_github_annotations_name_the_file_line_and_family(head_run):
    folder = head_run
    (line,) = (folder / "gh.txt").read_text().splitlines()
    assert line.startswith(
        "::error file=head_after_half.py,line=11,title=dtype-doctor matmul-dtype-mismatch%3A "
    )
    assert "::F.linear in 'head': input float16" in line and "%0Afix: Build `head` in float16" in line


def test_every_format_from_one_command_line(tmp_path, capsys):
    rc = main(
        [
            *("explain", "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")),
            *("-o", f"sarif={tmp_path / 'r.sarif'}", "--output", "github", MISMATCH),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert out.startswith(
        "::error title=dtype-doctor matmul-dtype-mismatch%3A"
    )  # stdout: the annotations only
    assert json.loads((tmp_path / "r.json").read_text())["findings"][0]["code"] == "matmul-dtype-mismatch"
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    (result,) = valid_sarif(tmp_path / "r.sarif")["runs"][0]["results"]
    assert "locations" not in result  # a pasted message points at no file


def test_an_output_path_that_is_an_input_is_refused_and_the_input_kept(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text(MISMATCH + "\n")
    rc = main(["explain", "--file", str(log), "--output", f"sarif={log}"])
    assert rc == 2 and "is one of the inputs" in capsys.readouterr().err
    assert log.read_text() == MISMATCH + "\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--json", "--output", "sarif"], "json and sarif both want stdout"),
        (["--output", "html"], "--output html needs a PATH"),
        (["--output", "yaml"], "not a format"),
    ],
)
def test_outputs_that_cannot_all_be_written_are_refused_up_front(argv, message, capsys):
    assert main(["explain", *argv, MISMATCH]) == 2
    assert message in capsys.readouterr().err


def test_a_report_replaces_the_old_file_whole_and_leaves_no_temporary_file(tmp_path, capsys):
    out = tmp_path / "r.sarif"
    out.write_text("old")
    os.link(out, tmp_path / "kept")  # a write in place would change this link too; a rename does not
    assert main(["explain", "--output", f"sarif={out}", MISMATCH]) == 0
    assert (tmp_path / "kept").read_text() == "old"
    valid_sarif(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "r.sarif"]


def test_fail_on_decides_the_exit_code(capsys):
    assert main(["explain", MISMATCH]) == 0  # explain: a diagnosis is a success
    assert main(["explain", "--fail-on", "error", MISMATCH]) == 1
    assert main(["explain", "--fail-on", "never", MISMATCH]) == 0
    assert main(["explain", "--fail-on", "error", "--ignore", "matmul-dtype-mismatch", MISMATCH]) == 0


def test_fail_on_in_run_the_scripts_own_failure_wins(tmp_path, capsys):
    script = tmp_path / "mix.py"
    script.write_text(
        "import sys, torch\n"
        "a = torch.ones(2, 2, dtype=torch.float16)\n"
        "try:\n    torch.mm(a, torch.ones(2, 2))\nexcept RuntimeError:\n    pass\n"
        "sys.exit(int(sys.argv[1]))\n"
    )
    assert main(["run", str(script), "0"]) == 0
    assert main(["run", "--fail-on", "error", str(script), "0"]) == 1
    assert main(["run", "--fail-on", "error", str(script), "3"]) == 3


CODES_RENDERER = """
class CodesRenderer:
    name = "codes"
    extension = ".codes"
    processors = ()
    to_stdout = True

    def render(self, report, options):
        return "".join(f.code + "\\n" for f in report.findings)
"""


def test_a_renderer_is_one_file_and_one_registry_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "codes_renderer.py").write_text(CODES_RENDERER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry._RENDERERS, "codes", "codes_renderer:CodesRenderer")  # the one line
    assert main(["explain", "--output", "codes", MISMATCH]) == 0
    assert capsys.readouterr().out == "matmul-dtype-mismatch\n"
    assert main(["explain", "-o", str(tmp_path / "r.codes"), MISMATCH]) == 0  # its extension picks it
    assert (tmp_path / "r.codes").read_text() == "matmul-dtype-mismatch\n"
    assert isinstance(registry.get("codes"), registry.Renderer)


def test_sarif_is_that_one_file_and_line():
    src = ROOT / "src" / "dtype_doctor"
    naming = sorted(
        str(p.relative_to(src)) for p in src.rglob("*.py") if "SarifRenderer" in p.read_text(encoding="utf-8")
    )
    assert naming == ["render/registry.py", "render/sarif.py"]
    assert [
        line for line in (src / "render" / "registry.py").read_text().splitlines() if "sarif" in line
    ] == ['    "sarif": ".sarif:SarifRenderer",']


def test_a_bare_path_picks_the_format_with_the_longest_matching_extension():
    found = {p: registry.for_extension(p) for p in ("ci.github.txt", "notes.txt", "r.SARIF", "r.json", "r")}
    assert found == {
        "ci.github.txt": "github",
        "notes.txt": "text",
        "r.SARIF": "sarif",
        "r.json": "json",
        "r": None,
    }
