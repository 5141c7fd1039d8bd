"""`[tool.dtype-doctor]` in pyproject.toml: found by walking up from the working folder, its keys the
defaults of the options of the same name (flags override), bad values refused with one line, and
`dtype-doctor precommit` (the .pre-commit-hooks.yaml entry) running check/audit on its factories."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from dtype_doctor.cli import build_parser, main
from dtype_doctor.commands import COMMANDS, _config

ROOT = Path(__file__).resolve().parents[1]
MISMATCH = "RuntimeError: mat1 and mat2 must have the same dtype, but got Half and Float"
MODELS = textwrap.dedent(
    """
    from torch import nn

    def two_layers():
        return nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 2))
    """
)


def project(folder: Path, table: str) -> Path:
    (folder / "pyproject.toml").write_text(f"[project]\nname = 'x'\n\n[tool.dtype-doctor]\n{table}\n")
    return folder


def test_fail_on_and_ignore_from_the_config_and_the_flag_overrides(tmp_path, monkeypatch, capsys):
    project(tmp_path, 'fail-on = "error"')
    monkeypatch.chdir(tmp_path)
    assert main(["explain", MISMATCH]) == 1  # explain alone exits 0 on a diagnosis
    assert main(["explain", "--fail-on", "never", MISMATCH]) == 0
    project(tmp_path, 'fail-on = "error"\nignore = ["matmul-dtype-mismatch"]')
    capsys.readouterr()
    assert main(["explain", "--json", MISMATCH]) == 0
    assert [f["code"] for f in json.loads(capsys.readouterr().out)["findings"]] == []


def test_the_nearest_table_above_the_working_folder_counts(tmp_path, monkeypatch):
    project(tmp_path, 'mode = "strict"\nthresholds = { tolerance = 0.05, top-k = 2 }')
    inner = tmp_path / "pkg" / "sub"
    inner.mkdir(parents=True)
    (tmp_path / "pkg" / "pyproject.toml").write_text("[project]\nname = 'inner'\n")  # no table: walk on
    monkeypatch.chdir(inner)
    parser = build_parser()
    _config.apply(parser._subparsers._group_actions[0].choices["run"], _config.find())
    _config.apply(parser._subparsers._group_actions[0].choices["compare"], _config.find())
    assert parser.parse_args(["run", "x.py"]).mode == "strict"
    assert parser.parse_args(["run", "--mode", "observe", "x.py"]).mode == "observe"  # the flag wins
    args = parser.parse_args(["compare", "m.py:f", "-i", "2x2"])
    assert (args.tolerance, args.top_k) == (0.05, 2)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('fail-on = "sometimes"', "fail-on = 'sometimes': choose from error, warning, never"),
        ("colour = true", "has no key 'colour'"),
        ('ignore = "fp32-island"', "ignore is a list of family codes"),
        (
            'ignore = ["fp32-islands"]',
            "ignore: unknown family code 'fp32-islands' (did you mean fp32-island?)",
        ),
        ("thresholds = 3", "thresholds is a table ({ tolerance = 0.05 }), not 3"),
    ],
)
def test_a_bad_config_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, table, message):
    project(tmp_path, table)
    monkeypatch.chdir(tmp_path)
    assert main(["explain", MISMATCH]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_without_tomllib_the_config_is_skipped_with_a_note(tmp_path, monkeypatch, capsys):
    project(tmp_path, 'fail-on = "error"')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_config, "_toml", lambda: None)  # Python 3.10 without tomli
    assert main(["explain", MISMATCH]) == 0
    assert "has no tomllib (pip install tomli)" in capsys.readouterr().err


def test_python_3_10_gets_tomli_so_the_config_is_never_skipped():
    toml = _config._toml()  # tomllib, or on 3.10 the tomli this dependency installs
    assert toml is not None
    deps = toml.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert 'tomli>=1.1; python_version < "3.11"' in deps


def test_precommit_runs_check_and_audit_on_the_configured_factories(tmp_path, monkeypatch, capsys):
    (tmp_path / "models.py").write_text(MODELS)
    monkeypatch.chdir(tmp_path)
    project(tmp_path, 'audit = [{ target = "models.py:two_layers", dtype = "bfloat16" }]')
    assert main(["precommit"]) == 0
    assert "dtype-doctor precommit: audit models.py:two_layers --dtype bfloat16" in capsys.readouterr().err
    project(
        tmp_path,
        'check = [{ target = "models.py:two_layers", dtype = "float16", input = ["4x8:float32"] }]\n'
        'audit = [{ target = "models.py:two_layers", dtype = "bfloat16" }]',
    )
    assert main(["precommit", "models.py"]) == 1  # pre-commit's file names are ignored
    out = capsys.readouterr().out
    assert "ERROR matmul-dtype-mismatch" in out and "dtype-doctor audit: 1 info" in out


def _keys(yaml_text: str) -> dict[str, str]:
    """`key: value` lines of a hook's YAML, comments left out."""
    lines = (line.split("#", 1)[0].strip().removeprefix("- ") for line in yaml_text.splitlines())
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lines) if v.strip()}


def test_the_pre_commit_hook_runs_the_users_own_dtype_doctor():
    """language: system (the dtype-doctor beside the user's torch/transformers; `python` built an
    isolated env with torch alone), nothing installed for it, and the README's local hook the same."""
    hooks = (ROOT / ".pre-commit-hooks.yaml").read_text()
    keys = _keys(hooks)
    assert keys["entry"] == "dtype-doctor precommit" and "precommit" in COMMANDS
    assert keys["language"] == "system" and keys["pass_filenames"] == "false"
    assert "additional_dependencies" not in hooks
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Project config and pre-commit") :]
    local = _keys(section[section.index("```yaml") : section.index("```", section.index("```yaml") + 3)])
    assert {k: local[k] for k in ("id", "entry", "language", "pass_filenames", "types")} == {
        k: keys[k] for k in ("id", "entry", "language", "pass_filenames", "types")
    }


def test_the_readmes_config_passes_a_healthy_float16_model(tmp_path, monkeypatch, capsys):
    """The README's [tool.dtype-doctor] block, as written, on a model.py:build that is fine in
    float16: precommit exits 0 (with `input = ["2x16"]`, float32, its check failed)."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Project config and pre-commit") :]
    toml = section[section.index("```toml\n") + 8 : section.index("```", section.index("```toml") + 7)]
    (tmp_path / "pyproject.toml").write_text(toml)
    (tmp_path / "model.py").write_text(
        "from torch import nn\n\n\ndef build():\n"
        "    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["precommit"]) == 0, capsys.readouterr().out[-2000:]
    err = capsys.readouterr().err
    assert "precommit: check model.py:build" in err and "precommit: audit model.py:build" in err


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('numerics = "false"', "numerics = 'false': a boolean (true or false)"),  # a string is not false
        ('budget = "soon"', "budget = 'soon': expected a float"),
    ],
)
def test_a_config_value_of_the_wrong_type_is_refused_before_the_program_runs(
    tmp_path, monkeypatch, capsys, table, message
):
    project(tmp_path, table)
    (tmp_path / "x.py").write_text("open('ran', 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "x.py"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "ran").exists()


def test_an_unknown_ignore_code_on_the_command_line_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["explain", "--ignore", "matmul-dtype-mismach", MISMATCH])
    assert exc.value.code == 2
    assert (
        "unknown family code 'matmul-dtype-mismach' (did you mean matmul-dtype-mismatch?)"
        in capsys.readouterr().err
    )
