"""audit: each finding is checked against what really happens when the set-up runs on CPU."""

from __future__ import annotations

import json
import textwrap

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")

from torch import nn  # noqa: E402

import dtype_doctor as dd  # noqa: E402
import tiny_models  # noqa: E402
from dtype_doctor.repair.fix import convert  # noqa: E402
from dtype_doctor.sections import DtypeMap  # noqa: E402


def by_code(report, code):
    return [f for f in report.findings if f.code == code]


@pytest.fixture(scope="module")
def llama_config():
    return tiny_models.llama_config(num_hidden_layers=4)


@pytest.fixture(scope="module")
def gpt2_config():
    return tiny_models.gpt2_config()


def test_public_names_stay_callable_whatever_was_imported_first():
    import dtype_doctor.checking.audit
    import dtype_doctor.checking.check
    import dtype_doctor.repair.fix  # noqa: F401

    assert dd.audit(nn.Linear(2, 2)).codes() == ["dtype-map"]
    assert dd.fix(nn.Linear(2, 2), "bf16").weight.dtype == torch.bfloat16


def test_dtype_map_folds_repeated_blocks_and_names_the_odd_one(llama_config):
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(llama_config)
    convert(model, torch.float16, keep_fp32=("norm",))
    model.model.layers[2].mlp.down_proj.float()  # an accidental fp32 island in block 2
    report = dd.audit(model)
    rows = report.section(DtypeMap).by_path()
    assert "model.layers.0-1" in rows and "model.layers.3" in rows and "model.layers.2" in rows
    folded = rows["model.layers.0-1"]
    assert folded.repeat == 2 and set(folded.dtypes) == {"float16", "float32"}
    assert rows["model.embed_tokens"].dtypes == {"float16": 128 * 64}
    assert len(rows) < 30  # fits on a screen
    # the map lives once, in the section: the info finding shows it as text and holds no copy
    (shown,) = by_code(report, "dtype-map")
    assert "dtype_map" not in shown.data and "  0-1 (LlamaDecoderLayer ×2)" in shown.message
    assert "dtype_map" not in json.dumps(report.to_dict()["findings"])
    islands = {f.location.module: f for f in by_code(report, "fp32-island")}
    accidental = islands["model.layers.2.mlp.down_proj"]
    assert accidental.severity == dd.Severity.WARNING and not accidental.data["deliberate"]
    norms = islands["model.layers.*.input_layernorm"]
    assert norms.severity == dd.Severity.INFO and norms.data["deliberate"] and norms.count == 4


def test_weight_bias_mismatch_is_an_error_and_really_fails(gpt2_config):
    model = transformers.GPT2LMHeadModel(gpt2_config)
    for name, p in model.named_parameters():
        if not name.endswith("bias"):
            p.data = p.data.half()  # the CogVLM state: weights converted, biases left in fp32
    report = dd.audit(model)
    mixed = by_code(report, "weight-bias-dtype-mismatch")
    errors = {f.location.module: f for f in mixed if f.severity == dd.Severity.ERROR}
    assert "transformer.h.*.ln_1" in errors  # LayerNorm, folded over the 2 blocks
    roles = {o.role: o.dtype for o in errors["transformer.h.*.ln_1"].operands}
    assert roles == {"weight": "float16", "bias": "float32"}
    assert errors["transformer.h.*.ln_1"].count == 2
    with pytest.raises(RuntimeError, match="expected scalar type Half but found Float"):
        model(torch.randint(0, 128, (1, 4)))  # what the audit predicted


def test_pipeline_components_in_different_dtypes():
    unet = tiny_models.unet(sample_size=8, seed=None).half()
    text_encoder = transformers.CLIPTextModel(
        transformers.CLIPTextConfig(
            hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=4, vocab_size=100
        )
    )
    pipe = diffusers.StableDiffusionPipeline(
        vae=tiny_models.vae(seed=None).half(),
        text_encoder=text_encoder,  # left in fp32: its embeddings reach the fp16 UNet
        tokenizer=None,
        unet=unet,
        scheduler=diffusers.DDIMScheduler(),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    report = dd.audit(pipe)
    found = by_code(report, "pipeline-component-dtype-mismatch")
    assert [f.location.module for f in found] == ["text_encoder"]
    assert found[0].data["components"] == {"vae": "float16", "text_encoder": "float32", "unet": "float16"}
    assert "pipe.text_encoder.to(torch.float16)" in [x.snippet for x in found[0].fixes]
    # one map for the pipeline, each component under its name
    modules = report.section(DtypeMap).by_path()
    assert modules["text_encoder"].dtypes == {"float32": sum(p.numel() for p in text_encoder.parameters())}
    assert set(modules["vae"].dtypes) == {"float16"} and modules["unet"].type == "UNet2DConditionModel"
    # the embeddings it makes do fail in the UNet's first cross-attention
    embeds = text_encoder(torch.randint(0, 100, (1, 5))).last_hidden_state
    with pytest.raises(RuntimeError, match="same dtype"):
        unet(torch.randn(1, 4, 8, 8).half(), 1, encoder_hidden_states=embeds)


def test_grad_scaler_with_fp16_parameters_and_fp16_adam_state():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1)).half()
    opt = torch.optim.Adam(model.parameters())
    scaler = torch.amp.GradScaler("cpu")
    report = dd.audit((model, opt, scaler))
    unscale = by_code(report, "fp16-gradient-unscale")[0]
    assert unscale.severity == dd.Severity.ERROR and "0.weight" in unscale.message
    assert by_code(report, "optimizer-state-dtype")  # eps=1e-8 is 0 in fp16
    loss = scaler.scale(model(torch.randn(2, 4).half()).float().sum())
    loss.backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.unscale_(opt)  # what the audit predicted


def test_half_model_under_autocast_given_or_found_in_an_accelerate_wrapper(gpt2_config):
    accelerate = pytest.importorskip("accelerate")
    model = transformers.GPT2LMHeadModel(gpt2_config).half()
    given = by_code(dd.audit(model, autocast="bfloat16"), "autocast-half-conflict")
    assert given and given[0].severity == dd.Severity.ERROR
    wrapped = accelerate.Accelerator(mixed_precision="bf16", cpu=True).prepare(model)
    found = by_code(dd.audit(wrapped), "autocast-half-conflict")
    assert found and {o.role: o.dtype for o in found[0].operands}["autocast"] == "bfloat16"
    with pytest.raises(RuntimeError, match="mixed dtype"):
        wrapped(torch.randint(0, 128, (1, 4)))  # the OneDiff face of it on CPU
    same = by_code(dd.audit(model, autocast="float16"), "low-precision-under-autocast")
    assert same[0].severity == dd.Severity.WARNING  # redundant, not fatal


def test_cli_audit_factory_returning_a_training_setup(tmp_path, capsys, monkeypatch):
    (tmp_path / "setup.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn

            def training():
                model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)).half()
                return model, torch.optim.SGD(model.parameters(), lr=0.1), torch.amp.GradScaler("cpu")
            """
        )
    )
    from dtype_doctor.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["audit", "setup.py:training", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert "fp16-gradient-unscale" in [f["code"] for f in report["findings"]]


def test_cli_audit_hf_config_with_dtype(tmp_path, capsys, monkeypatch):
    config = {
        "model_type": "t5",
        "d_model": 32,
        "d_ff": 64,
        "num_layers": 2,
        "num_heads": 4,
        "vocab_size": 64,
    }
    (tmp_path / "config.json").write_text(
        json.dumps({**config, "architectures": ["T5ForConditionalGeneration"]})
    )
    from dtype_doctor.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["audit", "--hf-config", ".", "--dtype", "float16", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    islands = [f for f in report["findings"] if f["code"] == "fp32-island"]
    # T5 declares _keep_in_fp32_modules = ["wo"]: kept in fp32 on purpose, and said so
    assert islands and all(f["data"]["deliberate"] for f in islands)
    assert any(".wo" in m for f in islands for m in f["data"]["modules"])


def test_a_7b_llama_map_fits_on_one_screen():
    config = transformers.LlamaConfig(
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        vocab_size=32000,
    )
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    convert(model, torch.float16, keep_fp32=("norm",))
    found = by_code(dd.audit(model), "dtype-map")[0]
    lines = found.message.splitlines()
    assert len(lines) <= 15
    assert any(line.strip().startswith("0-31 (LlamaDecoderLayer ×32)") for line in lines)


def test_cli_audit_of_something_that_is_not_a_model(tmp_path, capsys, monkeypatch):
    (tmp_path / "odd.py").write_text("def build():\n    return 'a string'\n")
    from dtype_doctor.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["audit", "odd.py:build"]) == 2
    err = capsys.readouterr().err
    assert "gave a str, not a model, pipeline or optimizer" in err and len(err.strip().splitlines()) == 1
