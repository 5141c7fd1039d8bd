"""A snippet names only what exists where it is pasted (issue 29): the optimizer, scaler and model it
touches are the user's own variables, at a stated line; a snippet naming what the script lacks there
is shown as advice, not code. Each fix is pasted where it says and the patched script is run."""

from __future__ import annotations

import json
import runpy
import textwrap
from pathlib import Path

import torch

from dtype_doctor import remedies
from dtype_doctor.cli import main
from dtype_doctor.editing.paste import paste
from dtype_doctor.report import Fix


def _run(tmp_path: Path, source: str, capsys, *flags: str) -> tuple[Path, list[dict]]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / "report.json"
    main(["run", *flags, "--json", str(out), str(script)])
    capsys.readouterr()
    return script, json.loads(out.read_text())["findings"]


def _first_fix(findings: list[dict], code: str) -> dict:
    (finding,) = [f for f in findings if f["code"] == code]
    return finding["fixes"][0]


def _pasted(script: Path, fix: dict) -> dict:
    """The fix pasted at the line it states, the patched script run: its globals."""
    assert fix["file"] == str(script), fix
    patched = script.with_name("patched.py")
    patched.write_text(paste(script.read_text(), fix["line"], fix["snippet"]))
    return runpy.run_path(str(patched))


def _code(snippet: str) -> str:
    return "\n".join(line.partition("#")[0] for line in snippet.splitlines())


HALF_SGD = """\
    import torch
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1)).half()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(16, 8).half()
    for _ in range(2):
        loss = (net(x) * 1e-3).float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    """


def test_an_sgd_named_opt_is_rebuilt_in_its_own_statement_over_float32_weights(tmp_path, capsys):
    script, findings = _run(tmp_path, HALF_SGD, capsys)
    fix = _first_fix(findings, "optimizer-state-dtype")
    assert fix["line"] == 6  # the statement that built the optimizer
    assert "`net`" in fix["title"] and "`opt`" in fix["title"] and "SGD" in fix["title"]
    assert fix["snippet"].endswith("opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)")
    assert "optimizer" not in _code(fix["snippet"]) and "model" not in _code(fix["snippet"])
    run = _pasted(script, fix)
    assert all(p.dtype == torch.float32 for p in run["net"].parameters())
    assert all(s["momentum_buffer"].dtype == torch.float32 for s in run["opt"].state.values())
    assert run["net"](run["x"]).dtype == torch.float16  # its inputs and outputs keep their dtype


def test_an_adamw_named_optim_built_in_a_function_is_fixed_there(tmp_path, capsys):
    script, findings = _run(
        tmp_path,
        """\
        import torch
        from torch import nn


        def train(model, data, steps=2):
            optim = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
            for _ in range(steps):
                loss = model(data).float().pow(2).mean()
                optim.zero_grad()
                loss.backward()
                optim.step()
            return optim


        net = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 1)).half()
        trained = train(net, torch.randn(4, 8, dtype=torch.float16))
        """,
        capsys,
    )
    fix = _first_fix(findings, "optimizer-state-dtype")
    assert fix["line"] == 6 and "AdamW" in fix["title"]
    assert fix["snippet"].startswith("model.float()")
    assert fix["snippet"].endswith("optim = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)")
    run = _pasted(script, fix)
    assert all(p.dtype == torch.float32 for p in run["net"].parameters())
    assert all(s["exp_avg_sq"].dtype == torch.float32 for s in run["trained"].state.values())


def test_a_trainer_s_self_optimizer_is_fixed_in_init_with_self_model(tmp_path, capsys):
    script, findings = _run(
        tmp_path,
        """\
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM


        class Trainer:
            def __init__(self, model):
                self.model = model
                self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)

            def step(self, ids):
                loss = self.model(input_ids=ids, labels=ids).loss
                loss.backward()
                self.optimizer.step()
                self.optimizer.zero_grad()


        config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=2)
        llm = LlamaForCausalLM(config).half()
        trainer = Trainer(llm)
        trainer.step(torch.randint(0, 64, (1, 6)))
        """,
        capsys,
    )
    fix = _first_fix(findings, "optimizer-state-dtype")
    assert fix["line"] == 8
    assert fix["snippet"].startswith("self.model.float()")
    assert fix["snippet"].endswith("self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)")
    run = _pasted(script, fix)
    assert all(p.dtype == torch.float32 for p in run["llm"].parameters())
    assert all(s["exp_avg"].dtype == torch.float32 for s in run["trainer"].optimizer.state.values())


def test_a_scaler_named_grad_scaler_is_unscaled_before_the_clip_in_the_user_s_names(tmp_path, capsys):
    script, findings = _run(
        tmp_path,
        """\
        import torch
        from torch import nn

        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        grad_scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        x = torch.randn(16, 8)
        for step in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = net(x).float().pow(2).mean()
            grad_scaler.scale(loss).backward()
            norm = torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            grad_scaler.step(opt)
            grad_scaler.update()
            opt.zero_grad()
        """,
        capsys,
        "--numerics",
    )
    (finding,) = [f for f in findings if f["code"] == "grad-scaler-misuse" and f["location"]["line"] == 13]
    fix = finding["fixes"][0]
    assert (fix["line"], _code(fix["snippet"]).strip()) == (13, "grad_scaler.unscale_(opt)")
    for other in finding["fixes"][1:]:  # the loop in order names what this script lacks: advice only
        assert not other["snippet"] or "optimizer" not in _code(other["snippet"])
    run = _pasted(script, fix)
    assert run["norm"] < 1e3  # the clip saw the true norm, not one `scale` times too large


def test_a_snippet_naming_what_its_place_lacks_is_advice_labelled_with_the_names(tmp_path):
    script = tmp_path / "loss.py"
    script.write_text(
        textwrap.dedent(
            """\
            import torch
            from torch import nn

            encoder = nn.Linear(4, 2).half()
            x = torch.randn(3, 4).half()
            loss = encoder(x).float().sum()
            loss.backward()
            """
        )
    )
    scaler_loop = Fix(
        title="Use GradScaler",
        snippet='scaler = torch.amp.GradScaler("cpu")\nscaler.scale(loss).backward()\nscaler.step(optimizer)',
        file=str(script),
        line=7,
    )
    advice = remedies.in_user_names(scaler_loop)
    assert advice.snippet == "" and advice.file is None and advice.verified is None
    assert "`optimizer`" in advice.verification and f"{script}:7" in advice.verification

    made_later = Fix(title="cast", snippet="loss = loss.float()", file=str(script), line=5)
    assert "`loss`" in remedies.in_user_names(made_later).verification  # made below line 5

    thrown_away = Fix(
        title="keep", snippet="layer = encoder.float()\ny = layer(x.float())", file=str(script), line=6
    )
    assert "`y`, assigned and never used" in remedies.in_user_names(thrown_away).verification

    in_names = Fix(title="keep", snippet="encoder.float()\nx = x.float()", file=str(script), line=6)
    assert remedies.in_user_names(in_names) is in_names
    unplaced = Fix(title="bf16", snippet="model.to(torch.bfloat16)")
    assert remedies.in_user_names(unplaced, str(script)).snippet == ""  # the script has no `model`
    assert remedies.in_user_names(unplaced) is unplaced  # no script known (explain): not judged
    exec(compile(in_names.snippet, "fix", "exec"), runpy.run_path(str(script)))  # runs where it says
    starred = script.with_name("starred.py")
    starred.write_text("from torch.nn import *\nlayer = Linear(4, 2)\n")
    anything = Fix(title="keep", snippet="model.float()", file=str(starred), line=2)
    assert remedies.in_user_names(anything) is anything  # `import *`: its names are not written there
