"""The published JSON Schema of the JSON report (src/dtype_doctor/schema/report.schema.json): versioned
with the report's schema number and met by the real reports of explain, run, check, audit, compare,
env and merge (and refused for a report that breaks it)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from dtype_doctor.cli import main
from dtype_doctor.report import SCHEMA_VERSION, json_schema

jsonschema = pytest.importorskip("jsonschema")

TESTS = Path(__file__).resolve().parent
MISMATCH = "RuntimeError: mat1 and mat2 must have the same dtype, but got Half and Float"
MODELS = textwrap.dedent(
    """
    from torch import nn

    def two_layers():
        return nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 2))
    """
)
SCRIPT = textwrap.dedent(
    """
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)).half()
    try:
        model(torch.randn(2, 8))
    except RuntimeError:
        pass
    """
)


def validator():
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_schema_is_the_reports_version():
    schema = json_schema()
    assert schema["properties"]["schema_version"] == {"const": SCHEMA_VERSION}
    assert f"report-{SCHEMA_VERSION}.schema.json" in schema["$id"]


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("reports")
    (folder / "models.py").write_text(MODELS)
    (folder / "mix.py").write_text(SCRIPT)
    runs = {
        "explain": ["explain", MISMATCH],
        "check": [
            "check",
            f"{folder / 'models.py'}:two_layers",
            "--dtype",
            "float16",
            "--input",
            "4x8:float32",
        ],
        "audit": ["audit", f"{folder / 'models.py'}:two_layers", "--dtype", "float16"],
        "compare": [
            *("compare", f"{TESTS / 'compare_models.py'}:overflowing", "-i", "4x32", "-p", "fp32,fp16"),
            *("-n", "1", "--warmup", "0", "--no-keep", "--no-progress"),
        ],
        "env": ["env"],
        "run": ["run", str(folder / "mix.py")],
    }
    out = {}
    for name, argv in runs.items():
        path = folder / f"{name}.json"
        assert main([*argv[:1], "--output", f"json={path}", "--fail-on", "never", *argv[1:]]) == 0, name
        out[name] = json.loads(path.read_text())
    merged = folder / "merged.json"
    (folder / "a.rank0.json").write_text(json.dumps(out["run"]))
    (folder / "b.rank1.json").write_text(json.dumps(out["check"]))
    assert (
        main(["merge", "--fail-on", "never", "-o", str(merged), *map(str, folder.glob("*.rank*.json"))]) == 0
    )
    out["merge"] = json.loads(merged.read_text())
    return out


@pytest.mark.parametrize("command", ["explain", "run", "check", "audit", "compare", "env", "merge"])
def test_real_reports_meet_the_schema(reports, command):
    report = reports[command]
    validator().validate(report)
    assert report["tool"] == command
    if command in ("explain", "run", "check", "merge"):
        assert "matmul-dtype-mismatch" in [f["code"] for f in report["findings"]]


def test_a_report_that_breaks_it_is_refused(reports):
    broken = json.loads(json.dumps(reports["check"]))
    broken["findings"][0]["severity"] = "fatal"
    with pytest.raises(jsonschema.ValidationError, match="fatal"):
        validator().validate(broken)
    broken = json.loads(json.dumps(reports["compare"]))
    broken["sections"][0]["variants"] = "fp16"
    with pytest.raises(jsonschema.ValidationError):
        validator().validate(broken)
