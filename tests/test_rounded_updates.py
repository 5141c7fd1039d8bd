"""Low-precision parameters and buffers whose updates round away (watching/rounded_updates.py): the
finding names the module, roots at the statement that gave the tensors their dtype, and its fix,
pasted there by `run --write`, leaves a script that trains."""

from __future__ import annotations

import json
import textwrap

from dtype_doctor.cli import main

TRAINABLE_CAST_LOOP = textwrap.dedent(
    """\
    import torch
    from torch import nn
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=16)
    model = BertModel(cfg).to(torch.bfloat16)
    model.requires_grad_(False)
    scale = nn.Parameter(torch.full((16,), 1.5))
    model.register_parameter("out_scale", scale)
    for name, param in model.named_parameters():
        if param.requires_grad:
            param.data = param.data.to(torch.bfloat16)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    before = model.out_scale.detach().float().clone()
    ids = torch.randint(0, 50, (2, 8))
    for _ in range(3):
        out = model(input_ids=ids).last_hidden_state * model.out_scale.to(torch.bfloat16)
        out.float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    assert (model.out_scale.detach().float() != before).float().mean() > 0.5, "never updated"
    """
)

LOADED_ASSIGN = textwrap.dedent(
    """\
    import io
    import torch
    from torch import nn

    def build():
        return nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))

    buf = io.BytesIO()
    torch.manual_seed(0)
    torch.save({k: (v + 1.0).to(torch.bfloat16) for k, v in build().state_dict().items()}, buf)
    buf.seek(0)

    def load(f):
        state = torch.load(f, weights_only=True)
        with torch.device("meta"):
            net = build()
        net.load_state_dict(state, assign=True)
        return net

    net = load(buf)
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    x = torch.randn(16, 8)
    before = net[0].weight.detach().float().clone()
    for _ in range(3):
        net(x.to(net[0].weight.dtype)).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    assert (net[0].weight.detach().float() != before).float().mean() > 0.9, "weights never move"
    """
)

RUNNING_STATS = textwrap.dedent(
    """\
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.BatchNorm1d(4)
            self.head = nn.Linear(4, 1)

        def forward(self, x):
            return self.head(self.norm(x))

    net = Net().to(torch.bfloat16)
    mean = torch.tensor([300.0, 120.0, 90.0, 200.0])
    for _ in range(60):
        net(torch.randn(128, 4).mul(4).add(mean).to(torch.bfloat16))
    error = ((net.norm.running_mean.float() - mean).abs() / mean).max().item()
    assert error < 0.01, f"running mean stalled: {error:.3f}"
    """
)


def _findings(path) -> list[dict]:
    return json.loads(path.read_text())["findings"]


def _run_and_patch(tmp_path, name: str, source: str) -> tuple[dict, str]:
    """The script's one severe finding under `run`, and the script as `run --write` patched it;
    the patched script runs with no finding and exits 0."""
    script = tmp_path / name
    script.write_text(source)
    report = tmp_path / "report.json"
    assert main(["run", "--json", str(report), str(script)]) == 1  # the script's own assert
    severe = [f for f in _findings(report) if f["severity"] in ("error", "warning")]
    assert len(severe) == 1, [f["code"] for f in severe]
    main(["run", "--write", "--no-backup", "--json", str(tmp_path / "w.json"), str(script)])
    patched = script.read_text()
    again = tmp_path / "again.json"
    assert main(["run", "--json", str(again), str(script)]) == 0, patched
    assert not [f for f in _findings(again) if f["severity"] in ("error", "warning")], patched
    return severe[0], patched


def test_a_trainable_parameter_cast_to_bfloat16_that_adamw_never_moves(tmp_path, capsys):
    finding, patched = _run_and_patch(tmp_path, "cast_loop.py", TRAINABLE_CAST_LOOP)
    capsys.readouterr()
    assert finding["code"] == "finite-but-wrong"
    assert finding["location"]["op"] == "AdamW.step"
    assert "out_scale" in finding["message"] and "cast_loop.py:14" in finding["message"]
    assert finding["operands"][0]["origin"]["line"] == 14
    fix = finding["fixes"][0]
    assert fix["snippet"] == (
        "param.data = param.data.float() if param.requires_grad else param.data.to(torch.bfloat16)"
    )
    assert "param.data = param.data.float() if param.requires_grad" in patched


def test_a_bfloat16_checkpoint_loaded_with_assign_roots_at_the_load(tmp_path, capsys):
    finding, patched = _run_and_patch(tmp_path, "assign.py", LOADED_ASSIGN)
    capsys.readouterr()
    assert finding["code"] == "finite-but-wrong"
    assert finding["location"]["module"] == "0"
    assert finding["operands"][0]["origin"]["line"] == 17  # net.load_state_dict(state, assign=True)
    snippet = finding["fixes"][0]["snippet"]
    assert snippet.startswith("net.load_state_dict(state, assign=True)\nfor _p in net.parameters():")
    assert "_p.data = _p.data.float()" in patched


def test_batchnorm_running_stats_in_bfloat16_stall_and_the_norm_is_kept_float32(tmp_path, capsys):
    finding, patched = _run_and_patch(tmp_path, "stats.py", RUNNING_STATS)
    capsys.readouterr()
    assert finding["code"] == "finite-but-wrong"
    assert finding["location"]["module"] == "norm"
    assert finding["location"]["op"] == "BatchNorm1d.forward"
    assert "running_mean" in finding["message"] and "stats.py:15" in finding["message"]
    assert "keep_in_fp32(net, ['norm'], out_dtype=torch.bfloat16)" in finding["fixes"][0]["snippet"]
    assert "keep_in_fp32(net, ['norm'], out_dtype=torch.bfloat16)" in patched


def test_float32_training_and_eval_only_batchnorm_are_not_reported(tmp_path, capsys):
    script = tmp_path / "clean.py"
    script.write_text(
        RUNNING_STATS.replace("Net().to(torch.bfloat16)", "Net()").replace(".to(torch.bfloat16))", ")")
        + textwrap.dedent(
            """\
            opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
            net(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
            """
        )
    )
    report = tmp_path / "report.json"
    assert main(["run", "--json", str(report), str(script)]) == 0
    capsys.readouterr()
    assert not [f for f in _findings(report) if f["code"] == "finite-but-wrong"]


ADAPTER_THEN_HALF = textwrap.dedent(
    """\
    import torch
    from torch import nn

    class LoRA(nn.Module):
        def __init__(self, base):
            super().__init__()
            self.base = base
            self.down = nn.Linear(base.in_features, 2, bias=False)
            self.up = nn.Linear(2, base.out_features, bias=False)

        def forward(self, x):
            out = self.base(x)
            return (out + self.up(self.down(x.to(self.down.weight.dtype)))).to(out.dtype)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    model.requires_grad_(False)
    model[0] = LoRA(model[0])
    model.to(torch.float16)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")
    loss = model(torch.randn(4, 8, dtype=torch.float16)).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    """
)


def test_unscale_of_fp16_adapter_gradients_roots_at_the_cast_and_keeps_the_adapter_float32(tmp_path, capsys):
    script = tmp_path / "adapter.py"
    script.write_text(ADAPTER_THEN_HALF)
    report = tmp_path / "report.json"
    assert main(["run", "--json", str(report), str(script)]) == 1
    (finding,) = [f for f in _findings(report) if f["code"] == "fp16-gradient-unscale"]
    assert finding["operands"][0]["origin"]["line"] == 19  # model.to(torch.float16)
    assert "adapter.py:19" in finding["message"]
    assert finding["fixes"][0]["snippet"].startswith("model.to(torch.float16)\nfor _p in model.parameters():")
    main(["run", "--write", "--no-backup", "--json", str(tmp_path / "w.json"), str(script)])
    again = tmp_path / "again.json"
    assert main(["run", "--json", str(again), str(script)]) == 0, script.read_text()
    capsys.readouterr()
    assert not [f for f in _findings(again) if f["severity"] in ("error", "warning")], script.read_text()
