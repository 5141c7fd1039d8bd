"""`merge` never writes over one of its inputs, and malformed reports are one clear line, exit 2."""

from __future__ import annotations

import json

import pytest

from dtype_doctor import catalog
from dtype_doctor.cli import main
from dtype_doctor.report import Location, Operand, Report


def _rank_files(tmp_path, ranks=2):
    paths = []
    for r in range(ranks):
        rep = Report(tool="run", meta={"rank": r})
        if r == 1:
            rep.add(
                catalog.finding(
                    "conv-bias-dtype-mismatch",
                    location=Location(module="proj", module_type="Conv2d", op="conv2d"),
                    operands=[Operand(role="input", dtype="float16"), Operand(role="bias", dtype="float32")],
                )
            )
        path = tmp_path / f"rep.rank{r}.json"
        path.write_text(rep.to_json())
        paths.append(path)
    return paths


def test_json_before_a_shell_glob_prints_the_merge_and_keeps_every_input(tmp_path, capsys):
    paths = _rank_files(tmp_path)
    before = [p.read_text() for p in paths]
    # what the shell makes of `merge --json rep.rank*.json`
    assert main(["merge", "--json", *map(str, paths)]) == 1
    merged = json.loads(capsys.readouterr().out)
    assert merged["meta"]["ranks"] == [0, 1]
    assert [p.read_text() for p in paths] == before


@pytest.mark.parametrize("option", ["--json={}", "-o{}", "--html={}"])
def test_an_output_that_is_an_input_is_refused(tmp_path, capsys, option):
    paths = _rank_files(tmp_path)
    before = paths[0].read_text()
    assert main(["merge", option.format(paths[0]), *map(str, paths)]) == 2
    err = capsys.readouterr().err
    assert "is one of the inputs" in err and err.count("\n") == 1
    assert paths[0].read_text() == before


@pytest.mark.parametrize(
    "finding_patch",
    [
        {"count": "<script>"},
        {"operands": [{"role": "input", "dtype": 123}]},
        {"location": {"rank": "x"}},
        {"data": {}, "related": []},
        {"confidence": "high"},
        {"fixes": [{"title": 5}]},
    ],
)
def test_a_malformed_report_is_one_line_exit_2(tmp_path, capsys, finding_patch):
    good = tmp_path / "rank0.json"
    good.write_text(Report(tool="run").to_json())
    bad = tmp_path / "rank1.json"
    finding = {"code": "matmul-dtype-mismatch", "title": "t", **finding_patch}
    text = json.dumps({"schema_version": 1, "tool": "run", "meta": {}, "findings": [finding]}, default=str)
    if "data" in finding_patch:  # 5000 levels of nesting: json.dumps itself cannot write them
        text = text.replace('"data": {}', '"data": ' + '{"x": ' * 5000 + "{}" + "}" * 5000)
    bad.write_text(text)
    assert main(["merge", str(good), str(bad), "--no-color"]) == 2
    err = capsys.readouterr().err
    assert "rank1.json is not a dtype-doctor JSON report" in err, err
    assert err.count("\n") == 1 and "internal error" not in err
