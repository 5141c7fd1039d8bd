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


def _sections():
    from dtype_doctor.sections import CompareResult, DtypeMap, EnvFacts, ModuleDtypes, Plot, Table

    return [
        DtypeMap(
            [ModuleDtypes("", "Net"), ModuleDtypes("layers.*.proj", "Linear", {"float16": 2}, repeat=4)]
        ),
        EnvFacts(software={"torch": "2.13.0"}, cpu={"native_bf16": False}),
        CompareResult(settings={"device": "cpu", "repeats": 3}, variants=[{"name": "fp32", "status": "ok"}]),
        Table("facts", ["a", "b"], [["1", "2"]]),
        Plot("scale", kind="line", x=[0, 1], series={"scale": [65536.0, None]}, log=True),
    ]


def test_sections_round_trip_through_json_by_type():
    report = Report(tool="check", sections=_sections())
    report.add(_sample_finding())
    data = json.loads(report.to_json())
    assert [s["type"] for s in data["sections"]] == ["dtype_map", "env", "compare", "table", "plot"]
    assert Report.from_json(report.to_json()) == report


def test_schema_1_reports_still_read_their_meta_as_sections():
    from dtype_doctor.sections import CompareResult, DtypeMap, EnvFacts, Plot, Table

    old = {
        "schema_version": 1,
        "tool": "check",
        "meta": {
            "model": "Net",
            "dtype_map": {"": {"type": "Net"}, "fc": {"type": "Linear", "dtypes": {"float16": 2}}},
            "env": {"software": {"torch": "2.1"}, "gpus": []},
            "compare": {"device": "cpu", "variants": [{"name": "fp16", "status": "overflows"}]},
            "tables": [{"title": "t", "columns": ["x"], "rows": [["1"]]}],
            "plots": [{"title": "p", "kind": "bar", "x": ["a"], "series": {"s": [1.0]}}],
        },
        "findings": [],
    }
    report = Report.from_dict(old)
    assert report.meta == {"model": "Net"} and report.schema_version == SCHEMA_VERSION
    assert report.section(DtypeMap).by_path()["fc"].dtypes == {"float16": 2}
    assert report.section(EnvFacts).software == {"torch": "2.1"}
    assert report.section(CompareResult).settings == {"device": "cpu"}
    assert report.section(CompareResult).variants[0]["status"] == "overflows"
    assert report.section(Table).rows == [["1"]] and report.section(Plot).series == {"s": [1.0]}


def test_schema_1_audit_map_in_finding_data_reads_as_the_section():
    from dtype_doctor.sections import DtypeMap

    rows = [
        {
            "path": "<root>",
            "name": "<root>",
            "type": "Net",
            "depth": 0,
            "repeat": 1,
            "dtypes": {"float16": 8},
        },
        {"path": "h.0-1", "name": "0-1", "type": "Block", "depth": 1, "repeat": 2, "dtypes": {"float16": 4}},
    ]
    finding = catalog.finding("dtype-map", message="Net", data={"dtype_map": rows, "dominant": "float16"})
    old = Report(tool="audit", findings=[finding]).to_dict()
    old["schema_version"] = 1
    report = Report.from_dict(old)
    assert report.findings[0].data == {"dominant": "float16"}
    modules = report.section(DtypeMap).by_path()
    assert modules[""].type == "Net" and modules["h.0-1"].repeat == 2


@pytest.mark.parametrize(
    "section", [{"type": "nope"}, {"type": "table"}, {"type": "dtype_map", "modules": [{"x": 1}]}, 5]
)
def test_a_bad_section_is_a_value_error(section):
    with pytest.raises(ValueError, match="section"):
        Report.from_dict({"schema_version": SCHEMA_VERSION, "findings": [], "sections": [section]})
