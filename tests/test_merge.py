"""dtype-doctor merge: per-rank reports → one report where the odd rank stands out."""

from __future__ import annotations

import json

import pytest

from dtype_doctor import catalog
from dtype_doctor.cli import main
from dtype_doctor.merge import merge_reports
from dtype_doctor.report import Location, Operand, Report
from dtype_doctor.sections import DtypeMap, ModuleDtypes


def _mismatch(module: str = "model.vision.patch_embed.proj") -> object:
    return catalog.finding(
        "conv-bias-dtype-mismatch",
        message="Input type (c10::Half) and bias type (float) should be the same",
        location=Location(module=module, module_type="Conv2d", op="conv2d"),
        operands=[Operand(role="input", dtype="float16"), Operand(role="bias", dtype="float32")],
    )


def _rank_report(rank: int, *findings, dtype_map=None) -> Report:
    report = Report(tool="run", meta={"rank": rank, "world_size": 4})
    for f in findings:
        report.add(f)
    if dtype_map is not None:
        report.sections.append(dtype_map)
    return report


def test_the_one_rank_that_fails_stands_out_first():
    # the CogVLM shape: 4 ranks, only rank 2 half-converts its input
    reports = [_rank_report(r, *([_mismatch()] if r == 2 else [])) for r in range(4)]
    merged = merge_reports(reports)
    first = merged.findings[0]
    assert first.code == "rank-divergence"
    assert first.location.rank == 2 and first.location.module == "model.vision.patch_embed.proj"
    assert first.message.startswith("rank 2 hit conv-bias-dtype-mismatch")
    assert "ranks 0, 1, 3 did not" in first.message
    assert [(o.role, o.dtype) for o in first.operands] == [("input", "float16"), ("bias", "float32")]
    assert "Rank(s) 2" in first.cause
    # the original finding is kept, tagged with the only rank that saw it
    original = merged.findings[1]
    assert original.code == "conv-bias-dtype-mismatch" and original.location.rank == 2
    assert original.data["ranks"] == [2]


def test_same_finding_on_every_rank_folds_without_divergence():
    merged = merge_reports([_rank_report(r, _mismatch()) for r in range(2)])
    assert merged.codes() == ["conv-bias-dtype-mismatch"]
    only = merged.findings[0]
    assert only.count == 2 and only.data["ranks"] == [0, 1] and only.location.rank is None
    assert merged.meta["ranks"] == [0, 1]


def test_rank_that_misses_a_shared_finding_is_named():
    reports = [_rank_report(r, *([] if r == 0 else [_mismatch()])) for r in range(3)]
    merged = merge_reports(reports)
    assert merged.findings[0].code == "rank-divergence"
    assert merged.findings[0].message.startswith("rank 0 did not hit conv-bias-dtype-mismatch")


def test_dtype_map_divergence_names_module_and_rank():
    same = DtypeMap([ModuleDtypes("lm.embed", "Embedding", {"float16": 1})])
    odd = DtypeMap([ModuleDtypes("lm.embed", "Embedding", {"float32": 1})])
    merged = merge_reports(
        [_rank_report(0, dtype_map=same), _rank_report(1, dtype_map=odd), _rank_report(2, dtype_map=same)]
    )
    (finding,) = merged.findings
    assert finding.code == "rank-divergence" and finding.location.rank == 1
    assert "module 'lm.embed' holds float32; ranks 0, 2: float16" in finding.message
    assert merged.section(DtypeMap).by_path()["lm.embed"].dtypes == {"float16": 1, "float32": 1}


def test_merge_command_reads_globs_writes_json_and_exit_1(tmp_path, capsys):
    for r in range(2):
        rep = _rank_report(r, *([_mismatch()] if r == 1 else []))
        rep.meta.pop("rank")  # the rank then comes from the file name
        (tmp_path / f"report.rank{r}.json").write_text(rep.to_json())
    out = tmp_path / "merged.json"
    code = main(["merge", str(tmp_path / "report.rank*.json"), "-o", str(out), "--no-color"])
    assert code == 1
    merged = Report.from_json(out.read_text())
    assert merged.findings[0].code == "rank-divergence" and merged.findings[0].location.rank == 1
    assert "rank-divergence" in capsys.readouterr().out
    assert main(["merge", str(tmp_path / "report.rank*.json"), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["findings"][0]["location"]["rank"] == 1


def test_merge_of_clean_ranks_exits_0(tmp_path):
    paths = []
    for r in range(2):
        p = tmp_path / f"r{r}.json"
        p.write_text(_rank_report(r).to_json())
        paths.append(str(p))
    assert main(["merge", *paths, "--no-color"]) == 0


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "cannot read"),
        ("{not json", "is not a dtype-doctor JSON report"),
        ('{"schema_version": 99}', "schema_version"),
    ],
)
def test_merge_bad_input_is_one_line_exit_2(tmp_path, capsys, content, needle):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    assert main(["merge", str(path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_merge_glob_without_match_and_duplicate_ranks(tmp_path, capsys):
    assert main(["merge", str(tmp_path / "none*.json")]) == 2
    assert "no file matches" in capsys.readouterr().err
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(_rank_report(0).to_json())
    assert main(["merge", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 2
    assert "same rank" in capsys.readouterr().err
