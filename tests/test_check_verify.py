"""check verifies its top fix: the dry run replayed on meta with the fix applied. The fix names only
what the user's factory has, and pasted into the factory (or after `model = build()`) the real model
runs on CPU: each test pastes the top fix and runs it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("transformers")

import dtype_doctor as dd  # noqa: E402
from dtype_doctor.checking.dry_replay import PASSES  # noqa: E402
from dtype_doctor.cli import main  # noqa: E402
from dtype_doctor.loading import load_object  # noqa: E402

LLAMA = """
import tiny_models
from torch import nn


def build():
    llm = tiny_models.llama(num_hidden_layers=1).eval().half()
    llm.lm_head = nn.Linear(llm.config.hidden_size, llm.config.vocab_size, bias=False)  # after .half()
    return llm


def build_wrapped():
    return _with_head(tiny_models.llama(num_hidden_layers=1).eval().half())


def _with_head(llm):
    llm.lm_head = nn.Linear(llm.config.hidden_size, llm.config.vocab_size, bias=False)
    return llm
"""

UNET = """
import tiny_models
from torch import nn


def build():
    unet = tiny_models.unet(sample_size=8).eval().half()
    unet.conv_out = nn.Conv2d(32, 4, 3, padding=1)  # replaced after .half(): float32
    return unet
"""


def _factory(tmp_path: Path, name: str, source: str, attr: str):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path, load_object(f"{path}:{attr}")


def _paste_before_return(path: Path, function: str, snippet: str):
    """The factory's file with the snippet pasted before the function's `return`, loaded again."""
    lines = path.read_text().splitlines()
    start = lines.index(next(x for x in lines if x.startswith(f"def {function}(")))
    ret = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("return "))
    indent = lines[ret][: len(lines[ret]) - len(lines[ret].lstrip())]
    lines[ret:ret] = [indent + x for x in snippet.splitlines()]
    pasted = path.with_name(path.stem + "_fixed.py")
    pasted.write_text("\n".join(lines) + "\n")
    return load_object(f"{pasted}:{function}")


def _top(report):
    first = next(f for f in report.findings if f.severity == dd.Severity.ERROR)
    return first.fixes[0]


def test_llama_head_after_half_top_fix_verified_names_the_factory_variable_and_runs(tmp_path):
    path, build = _factory(tmp_path, "llama_head", LLAMA, "build")
    ids = torch.tensor([[1, 2, 3, 4]])
    report = dd.check(build, dtype=None, input_ids=ids)
    fix = _top(report)
    assert fix.verified is True and fix.verification == PASSES
    assert "llm.lm_head.to(torch.float16)" in fix.snippet
    assert "in build(), before `return llm`" in fix.title
    fixed = _paste_before_return(path, "build", fix.snippet)
    with torch.no_grad():
        fixed()(input_ids=ids)  # the real model, on CPU: the pasted fix makes it run
    for other in report.errors[0].fixes[1:]:  # nothing after it pretends to be verified without a replay
        assert other.verified is not True or other.verification == PASSES


def test_a_factory_returning_an_expression_gets_fixes_for_model_at_the_call_site(tmp_path):
    _path, build = _factory(tmp_path, "llama_wrapped", LLAMA, "build_wrapped")
    ids = torch.tensor([[1, 2, 3, 4]])
    fix = _top(dd.check(build, dtype=None, input_ids=ids))
    assert fix.verified is True
    assert "where you call it: `model = build_wrapped()`" in fix.title
    scope = dict(build.__globals__)
    exec("model = build_wrapped()\n" + fix.snippet, scope)  # as pasted where the factory is called
    with torch.no_grad():
        scope["model"](input_ids=ids)


def test_unet_conv_out_replaced_after_half_cli_top_fix_runs(tmp_path, capsys, monkeypatch):
    path, _build = _factory(tmp_path, "unet_head", UNET, "build")
    monkeypatch.chdir(tmp_path)
    code = main(
        ["check", f"{path}:build", "--input", "sample=1x4x8x8:float16", "--input", "timestep=1:int64",
         "--input", "encoder_hidden_states=1x3x32:float16", "--no-color", "--json=r.json"]
    )  # fmt: skip
    assert code == 1
    report = dd.Report.from_json((tmp_path / "r.json").read_text())
    fix = _top(report)
    assert fix.verified is True, [(f.title, f.verification) for f in report.errors[0].fixes]
    assert "unet.conv_out.to(torch.float16)" in fix.snippet
    assert "verified: the dry run passes with this fix" in capsys.readouterr().out.replace("\n│ ", " ")
    fixed = _paste_before_return(path, "build", fix.snippet)
    with torch.no_grad():
        fixed()(torch.randn(1, 4, 8, 8).half(), torch.tensor([1]), torch.randn(1, 3, 32).half())


def test_a_fix_the_dry_run_shows_failing_is_not_offered_first(tmp_path):
    _path, build = _factory(tmp_path, "llama_head2", LLAMA, "build")
    report = dd.check(build, dtype=None, input_ids=torch.tensor([[1, 2]]))
    fixes = report.errors[0].fixes
    failing = [i for i, f in enumerate(fixes) if f.verified is False]
    passing = [i for i, f in enumerate(fixes) if f.verified is True]
    assert passing and all(i > max(passing) for i in failing)
    for f in fixes:
        assert f.verification, f.title  # each says verified, fails or not verified (why)


LLAMA_PLAIN = """
import tiny_models


def build():
    return tiny_models.llama(num_hidden_layers=2).eval()
"""


def test_an_fp32_input_gets_the_input_flag_in_the_model_dtype_verified_and_it_runs(tmp_path, monkeypatch):
    path, build = _factory(tmp_path, "llama_plain", LLAMA_PLAIN, "build")
    monkeypatch.chdir(tmp_path)
    target = f"{path}:build"
    code = main(
        ["check", target, "--dtype", "float16", "--input", "inputs_embeds=1x8x64:float32", "--json=r.json"]
    )
    assert code == 1
    fixes = dd.Report.from_json((tmp_path / "r.json").read_text()).errors[0].fixes
    fix = fixes[0]
    assert fix.verified is True and fix.language == "shell"
    assert fix.snippet == "--input inputs_embeds=1x8x64:float16"
    assert all("x = x." not in f.snippet for f in fixes)  # no placeholder variable the factory lacks
    assert main(["check", target, "--dtype", "float16", *fix.snippet.split(" ", 1), "--json=again.json"]) == 0
    with torch.no_grad():  # and for real, on CPU: the fp16 model takes the fp16 input
        build().half()(inputs_embeds=torch.randn(1, 8, 64).half())


def test_an_fp32_tensor_passed_to_check_from_python_gets_its_own_variable_cast_verified_and_it_runs():
    import tiny_models

    model = tiny_models.llama(num_hidden_layers=2).eval()
    embeds = torch.randn(1, 8, 64)  # float32 into a float16 model (check's dtype=)
    report = dd.check(model, inputs_embeds=embeds, dtype=torch.float16)
    fix = report.errors[0].fixes[0]
    assert fix.verified is True and fix.verification == PASSES
    assert fix.snippet == "embeds = embeds.to(torch.float16)"
    assert "`embeds`" in fix.title and "inputs_embeds=" in fix.title
    names = {"embeds": embeds, "torch": torch}  # the caller's own names, nothing else
    exec(fix.snippet, names)
    embeds = names["embeds"]
    assert not dd.check(model, inputs_embeds=embeds, dtype=torch.float16).errors
    with torch.no_grad():  # and for real, on CPU
        model.half()(inputs_embeds=embeds)


def test_a_positional_fp32_latent_passed_to_check_gets_its_variable_cast_verified_and_it_runs():
    import tiny_models

    unet = tiny_models.unet(sample_size=8).eval()
    latents = torch.randn(1, 4, 8, 8)
    text = torch.randn(1, 4, 32).half()
    report = dd.check(unet, latents, torch.tensor([10]), encoder_hidden_states=text, dtype=torch.float16)
    fix = report.errors[0].fixes[0]
    assert fix.verified is True and fix.snippet == "latents = latents.to(torch.float16)"
    assert "as input 0" in fix.title
    names = {"latents": latents, "torch": torch}
    exec(fix.snippet, names)
    latents = names["latents"]
    assert not dd.check(
        unet, latents, torch.tensor([10]), encoder_hidden_states=text, dtype=torch.float16
    ).errors
    with torch.no_grad():  # and for real, on CPU
        assert (
            unet.half()(latents, torch.tensor([10]), encoder_hidden_states=text).sample.dtype == torch.float16
        )


def test_no_title_quotes_a_placeholder_as_a_module_name():
    from dtype_doctor import catalog

    every = [t for ctx in ((), ("odd-module",), ("diffusers",), ("transformers",)) for t in ctx or ("",)]
    for code in catalog.codes():
        for ctx in every:
            for fix in catalog.fixes_for(code, {ctx} - {""}):
                assert "'the module'" not in fix.title, (code, fix.title)
            for fix in catalog.fixes_for(code, {ctx} - {""}, module="<root>", model="unet"):
                comments = [line.partition("#")[2] for line in fix.snippet.splitlines()]
                assert "<root>" not in fix.title + "".join(comments), (code, fix.title, fix.snippet)


def test_made_up_inputs_take_the_dtype_most_of_the_model_holds(tmp_path, monkeypatch):
    # no --input: the inputs check makes up must not manufacture a mismatch of their own; the one
    # fp32 module of the fp16 UNet is then the only error
    path, _build = _factory(tmp_path, "unet_head", UNET, "build")
    monkeypatch.chdir(tmp_path)
    assert main(["check", f"{path}:build", "--no-color", "--json=r.json"]) == 1
    report = dd.Report.from_json((tmp_path / "r.json").read_text())
    assert {k: v.rsplit(":", 1)[-1] for k, v in report.meta["inputs"].items()} == {
        "sample": "float16",
        "timestep": "int64",
        "encoder_hidden_states": "float16",
    }
    assert [(f.code, f.location.module) for f in report.errors] == [("conv-bias-dtype-mismatch", "conv_out")]
    assert "unet.conv_out.to(torch.float16)" in _top(report).snippet


def test_a_replay_strict_mode_stopped_at_a_warning_runs_again_whole_and_fails_at_the_error_after_it():
    # a replay runs in strict mode (a failing fix fails at its first error); strict also stops at a
    # silent promotion, a warning, and an error may come after it: then the whole replay runs in fix mode
    from dtype_doctor.checking.dry_replay import dry_outcome
    from dtype_doctor.report import Finding, Location, Severity
    from dtype_doctor.verifying.verifier import judge

    modes = []

    def dry_run(model, kw, report, mode):
        modes.append(mode)
        report.add(Finding(code="silent-promotion", severity=Severity.WARNING, title="promotion"))
        if mode == "strict":
            report.meta["raised"] = "DtypeMismatchError"
            return
        report.add(
            Finding(
                code="matmul-dtype-mismatch",
                severity=Severity.ERROR,
                title="mismatch",
                location=Location(module="head"),
            )
        )

    verdict = judge(dry_outcome(dry_run, torch.nn.Linear(2, 2), {}))
    verified, verification = verdict.passes, verdict.text
    assert modes == ["strict", "fix"]
    assert verified is False and "matmul-dtype-mismatch in 'head'" in verification


def test_past_the_replay_budget_only_the_first_fix_is_replayed_and_the_rest_say_so(tmp_path, monkeypatch):
    from dtype_doctor.checking import dry_replay as dry_run

    monkeypatch.setattr(dry_run, "BUDGET_S", 0.0)  # as on a huge model: one dry run's time is all
    _path, build = _factory(tmp_path, "llama_budget", LLAMA, "build")
    fixes = dd.check(build, dtype=None, input_ids=torch.tensor([[1, 2]])).errors[0].fixes
    assert fixes[0].verified is True and fixes[0].verification == PASSES
    budget = [f for f in fixes if f.verification.startswith("not verified (budget")]
    assert budget and all(f.verified is not True for f in budget)
    assert [f for f in fixes if f.verification == PASSES] == [fixes[0]]
