"""The data model: JSON round trip, folding, catalog lookups."""

import json

import pytest

from dtype_doctor import catalog
from dtype_doctor.report import SCHEMA_VERSION, Evidence, Location, Operand, Origin, Report


def _sample_finding():
    return catalog.finding(
        "matmul-dtype-mismatch",
        names={"module": "time_embedding.linear_1"},
        location=Location(module="time_embedding.linear_1", op="F.linear", file="train.py", line=12),
        operands=[
            Operand(
                "input",
                "float32",
                [2, 320],
                origin=Origin(
                    "op", op="torch.zeros", file="train.py", line=7, chain=[Origin("input", name="sample")]
                ),
            ),
            Operand(
                "weight",
                "float16",
                [1280, 320],
                origin=Origin("parameter", name="time_embedding.linear_1.weight"),
            ),
        ],
        evidence=[Evidence("mat1 and mat2 must have the same dtype, but got Float and Half", line=3)],
    )


def test_json_round_trip_is_lossless():
    report = Report(tool="watch", meta={"torch": "2.13.0"})
    report.add(_sample_finding())
    text = report.to_json()
    data = json.loads(text)
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["findings"][0]["operands"][0]["origin"]["chain"][0]["kind"] == "input"
    assert Report.from_json(text) == report


def test_identical_findings_fold_with_a_count():
    report = Report()
    report.add(_sample_finding())
    report.add(_sample_finding())
    assert len(report.findings) == 1
    assert report.findings[0].count == 2


def test_reader_rejects_other_schema_versions():
    with pytest.raises(ValueError, match="schema_version"):
        Report.from_dict({"schema_version": 999, "findings": []})


def test_fix_templates_are_made_concrete_with_names():
    fixes = catalog.fixes_for("matmul-dtype-mismatch", module="unet.conv_in")
    assert "unet.conv_in" in fixes[0].title
    with pytest.raises(KeyError):
        catalog.family("no-such-family")
