"""Fixes that are right when pasted: every snippet real scenarios produce has a language, Python
ones parse, device and names come from the run, and no seed case's text leaks into other cases."""

from __future__ import annotations

import ast
import contextlib
import copy
import logging
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import dtype_doctor as dd
import tiny_models
from dtype_doctor.causes import group_by_cause
from dtype_doctor.errors import DoctorError
from dtype_doctor.repair.policy import select
from dtype_doctor.report import Fix, Report

transformers = pytest.importorskip("transformers")
logging.getLogger("transformers").setLevel(logging.ERROR)

H = torch.float16
LOGS = Path(__file__).resolve().parents[1] / "examples" / "logs"


def _watched(model: nn.Module, run, mode: str = "observe") -> Report:
    with dd.watch(model=model, mode=mode) as s, contextlib.suppress(RuntimeError):
        run()
    return group_by_cause(s.report)


def _sequential_fp32_input() -> Report:
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2)).half().eval()
    with torch.no_grad():
        return _watched(model, lambda: model(torch.randn(3, 4)), mode="fix")


def _gpt2_fp32_prompt() -> Report:
    gpt = tiny_models.gpt2(head=False, n_layer=1, n_embd=32, n_head=2, vocab_size=64).eval().half()
    soft_prompt = torch.randn(1, 3, 32)  # fp32 soft prompt into an fp16 GPT-2
    with torch.no_grad():
        return _watched(gpt, lambda: gpt(inputs_embeds=soft_prompt), mode="fix")


def _promotion_in_user_code() -> Report:
    model = nn.Linear(4, 4).half()

    def run():
        pe = torch.zeros(2, 4)  # positional table left in fp32
        model(torch.randn(2, 4, dtype=H) + pe)

    return _watched(model, run)


def _audit_training_tuple() -> Report:
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)).half()
    model[1].float()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return group_by_cause(dd.audit((model, optimizer, torch.amp.GradScaler("cpu"))))


def _check_fp32_input() -> Report:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4), nn.Flatten(), nn.LazyLinear(2))
    model(torch.randn(1, 3, 8, 8))  # materialise the lazy layer
    return group_by_cause(dd.check(model, torch.randn(1, 3, 8, 8), dtype=H))


def _numerics_backward_overflow() -> Report:
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 8))
    with torch.no_grad():
        model[2].weight.mul_(300.0)
    model.half()
    with dd.monitor_numerics(model) as monitor:
        (model((torch.randn(4, 16) * 1e-2).half()).float().sum() * 1e4).backward()
    return group_by_cause(monitor.report)


def _explain_seed_logs() -> list[Report]:
    return [group_by_cause(dd.explain(p.read_text())) for p in sorted(LOGS.glob("*.log"))]


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    out = {
        "sequential": _sequential_fp32_input(),
        "gpt2": _gpt2_fp32_prompt(),
        "promotion": _promotion_in_user_code(),
        "audit": _audit_training_tuple(),
        "check": _check_fp32_input(),
        "numerics": _numerics_backward_overflow(),
    }
    for i, r in enumerate(_explain_seed_logs()):
        out[f"explain{i}"] = r
    return out


def _code(snippet: str) -> str:
    """The snippet without its comments."""
    return "\n".join(line.split("#")[0] for line in snippet.splitlines())


def _fixes(report: Report) -> list[Fix]:
    return [fix for f in report.findings for fix in f.fixes]


def test_the_scenarios_produce_fixes(reports):
    for name, report in reports.items():
        assert _fixes(report), name


def test_every_python_snippet_parses_and_every_fix_has_a_language(reports):
    for name, report in reports.items():
        for fix in _fixes(report):
            assert fix.language in ("python", "shell"), (name, fix)
            if fix.language == "python" and fix.snippet:
                try:
                    ast.parse(fix.snippet)
                except SyntaxError as exc:
                    pytest.fail(f"{name}: {fix.title!r} does not parse ({exc}):\n{fix.snippet}")


def test_cpu_runs_never_get_a_cuda_autocast_or_scaler(reports):
    for name in ("sequential", "gpt2", "promotion", "audit", "check", "numerics"):
        for fix in _fixes(reports[name]):
            assert '"cuda"' not in fix.snippet and "'cuda'" not in fix.snippet, (name, fix.snippet)


def test_snippets_use_names_the_user_has(reports):
    for fix in _fixes(reports["sequential"]):  # a plain nn.Sequential: no from_pretrained, no .device
        code = _code(fix.snippet)
        assert "from_pretrained" not in code and "model.device" not in code, fix.snippet
    # module paths that are not attributes ('1', 'h.0.ln_1') are reached with get_submodule
    gpt_snippets = [_code(fix.snippet) for fix in _fixes(reports["gpt2"])]
    assert not any(".h.0." in s and "get_submodule" not in s for s in gpt_snippets), gpt_snippets
    # the norm's input is `x` only inside GPT-2's own forward: a snippet reading it is advice without code
    gpt_fixes = [fix for f in reports["gpt2"].findings for fix in f.fixes]
    assert gpt_fixes and not any("x.float()" in s or "x = x.to" in s for s in gpt_snippets), gpt_snippets
    promo = next(f for f in reports["promotion"].findings if f.code == "silent-promotion")
    assert "pe = pe.to(torch.float16)" in [fix.snippet for fix in promo.fixes]


def test_seed_case_specific_text_stays_in_its_own_case(reports):
    for name, report in reports.items():
        for fix in _fixes(report):
            assert "cli_demo" not in fix.snippet, (name, fix.snippet)


# -- one keep-fp32 pattern language ---------------------------------------------------------------
_KEEP = re.compile(r"keep_fp32=[(\[]([^)\]]*)[)\]]|keep_in_fp32\(model, (\[[^\]]*\])\)")


def _suggested_patterns(report: Report) -> list[tuple[str, ...]]:
    found = []
    for fix in _fixes(report):
        for m in _KEEP.finditer(fix.snippet):
            text = m.group(1) if m.group(1) is not None else m.group(2).strip("[]")
            found.append(tuple(ast.literal_eval(f"[{text}]")))
    return found


def test_every_keep_pattern_a_report_suggests_matches_in_fix():
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)), nn.LayerNorm(4)).half()
    model[0][1].float()  # an accidental fp32 island at path "0.1" of the model the user holds
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    report = dd.audit((model, optimizer, torch.amp.GradScaler("cpu")))
    suggested = _suggested_patterns(report)
    assert ("0.1",) in suggested, suggested  # not "0.0.1": the tuple's index is not a module path
    numerics_model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 8))
    with torch.no_grad():
        numerics_model[2].weight.mul_(300.0)
    numerics_model.half()
    with dd.monitor_numerics(numerics_model) as monitor, torch.no_grad():
        numerics_model((torch.randn(4, 16) * 1000).half())
    suggested_n = _suggested_patterns(monitor.report)
    assert suggested_n, [x.snippet for x in _fixes(monitor.report)]
    for target, patterns_list in ((model, suggested), (numerics_model, suggested_n)):
        for patterns in patterns_list:
            fixed = dd.fix(copy.deepcopy(target), torch.float16, keep_fp32=patterns)
            assert fixed._dtype_doctor_fix.kept, patterns
            with dd.keep_in_fp32(copy.deepcopy(target), patterns) as handle:
                assert handle.paths == [n for n, _ in select(target, patterns)]


def test_fix_and_keep_in_fp32_raise_on_a_pattern_that_matches_nothing():
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    for bad in (("nope",), ("",)):
        with pytest.raises(DoctorError, match="keep_fp32"):
            dd.fix(copy.deepcopy(model), torch.float16, keep_fp32=bad)
        with pytest.raises(DoctorError, match="keep_fp32"):
            dd.keep_in_fp32(model, bad)


def test_one_pattern_means_the_same_modules_in_every_command():
    from dtype_doctor.comparing.attribution import select_modules

    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)))
    for patterns, expected in ((("1.*",), ["1.0", "1.1"]), (("LayerNorm",), ["1.1"]), (("1",), ["1"])):
        assert select_modules(model, patterns) == expected
        with dd.keep_in_fp32(copy.deepcopy(model), patterns) as handle:
            assert handle.paths == expected
        assert (
            dd.fix(copy.deepcopy(model), torch.float16, keep_fp32=patterns)._dtype_doctor_fix.kept == expected
        )


def test_find_fp32_set_never_answers_the_whole_model():
    from dtype_doctor.numerics import find_fp32_set

    class Scaled(nn.Module):  # the root's own forward overflows: no module set can fix it
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) * 1e5

    model = Scaled().half()
    chosen, _ = find_fp32_set(model, lambda m: m(torch.full((2, 4), 10.0, dtype=H)))
    assert "" not in chosen


def test_every_fix_of_every_scenario_is_accepted_by_torch(reports):
    """The static check watch applies: parses, no autocast torch refuses (CPU float32, meta, another
    device), no glob in get_submodule, no CUDA in a CPU run."""
    from dtype_doctor.watching.snippets import refusal

    for name in ("sequential", "gpt2", "promotion", "check"):
        for fix in _fixes(reports[name]):
            assert refusal(fix, "cpu", None) is None, (name, refusal(fix, "cpu", None), fix.snippet)


def test_verified_fixes_come_first_and_say_what_the_replay_found(reports):
    for name in ("sequential", "gpt2"):
        for f in reports[name].findings:
            marks = [x.verified for x in f.fixes]
            assert False not in marks[:1], (name, [(x.title, x.verification) for x in f.fixes])
            assert all(x.verification for x in f.fixes if x.verified is not None)


def test_a_conversion_to_the_dtype_the_model_has_is_refused_and_others_are_not():
    from dtype_doctor.watching.snippets import keep_acceptable, refusal

    half, mixed, empty = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)).half(), nn.Sequential(), nn.ReLU()
    mixed.add_module("a", nn.Linear(2, 2).half())
    mixed.add_module("b", nn.Linear(2, 2))

    def fix(snippet: str) -> Fix:
        return Fix(title="t", snippet=snippet, why="w", language="python")

    scope = {"model": half, "mixed": mixed, "empty": empty}
    assert refusal(fix("model.half()"), "cpu", None, scope) == "model is already float16"
    assert refusal(fix("model = model.to(torch.float16)"), "cpu", None, scope) == "model is already float16"
    for snippet in ("model.float()", "mixed.half()", "mixed.float()", "empty.half()", "model[0].bfloat16()"):
        assert refusal(fix(snippet), "cpu", None, scope) is None, snippet
    kept = keep_acceptable(
        [fix("model.half()"), fix("model.float()"), fix("mixed.half()")], "cpu", None, scope
    )
    assert [f.snippet for f in kept] == ["model.float()", "mixed.half()"]


def test_a_model_converted_after_a_watched_call_is_seen_converted_by_the_static_check():
    """Whole-model answers are kept only while a root call runs (watching/call_memo.py)."""
    from dtype_doctor import watch
    from dtype_doctor.watching.snippets import refusal

    model = nn.Linear(2, 2)
    scope = {"model": model}
    to_fp32 = Fix(title="t", snippet="model.float()", why="w", language="python")
    with watch(model=model):
        model(torch.randn(1, 2))
    assert refusal(to_fp32, "cpu", None, scope) == "model is already float32"
    model.half()
    assert refusal(to_fp32, "cpu", None, scope) is None
