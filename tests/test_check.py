"""check: the meta dry run finds what a real CPU run finds (same first failing op and module), lists
every mismatch in one pass, never touches the user's model, and fails cleanly on bad input."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")

from torch import nn  # noqa: E402

import dtype_doctor as dd  # noqa: E402
import tiny_models  # noqa: E402
from dtype_doctor.checking.check import mirror_on_meta, module_in_traceback  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def real_failure(model: nn.Module, *args, **kwargs) -> tuple[str, str]:
    """Run for real on CPU; return (message, qualified name of the innermost module that raised).

    The oracle reads the traceback (the deepest frame whose `self` is one of the model's modules).
    """
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    except RuntimeError as exc:
        return str(exc), module_in_traceback(exc.__traceback__, model)
    raise AssertionError("the real run did not fail")


def first_error(report):
    return next(f for f in report.findings if f.severity == dd.Severity.ERROR)


@pytest.fixture(scope="module")
def unet():
    return tiny_models.unet(sample_size=8).eval()


@pytest.fixture(scope="module")
def llama_config():
    return tiny_models.llama_config(num_hidden_layers=3)


def test_unet_fp16_fp32_sample_same_first_failure_as_real_run(unet):
    sample, t, ehs = torch.randn(1, 4, 8, 8), torch.tensor([10]), torch.randn(1, 7, 32)
    report = dd.check(unet, sample, t, encoder_hidden_states=ehs, dtype=torch.float16)
    message, module = real_failure(copy.deepcopy(unet).half(), sample, t, encoder_hidden_states=ehs)
    first = first_error(report)
    assert "mat1 and mat2" in message and module == "time_embedding.linear_1"
    assert first.code == "matmul-dtype-mismatch"
    assert first.location.module == module
    roles = {o.role: o.dtype for o in first.operands}
    assert roles["input"] == "float32" and roles["weight"] == "float16"
    # a plain meta run reports a later op in a different module (the conv_in bias check) instead
    meta = mirror_on_meta(unet).half()
    with pytest.raises(RuntimeError, match="bias type"):
        meta(sample.to("meta"), t.to("meta"), encoder_hidden_states=ehs.to("meta"))
    # one pass lists every mismatch: the fp32 encoder states reach every cross-attention to_k/to_v
    modules = {m for f in report.errors for m in f.data.get("modules", [f.location.module])}
    assert any(m.endswith("attn2.to_k") for m in modules) and "conv_in" in modules
    assert report.meta["first_error"]["module"] == "time_embedding.linear_1"


def test_unet_fp16_sample_fp32_encoder_states_names_to_k(unet):
    sample, t, ehs = torch.randn(1, 4, 8, 8).half(), torch.tensor([10]), torch.randn(1, 7, 32)
    report = dd.check(unet, sample, t, encoder_hidden_states=ehs, dtype="fp16")
    message, module = real_failure(copy.deepcopy(unet).half(), sample, t, encoder_hidden_states=ehs)
    assert "expected m1 and m2 to have the same dtype" in message
    first = first_error(report)
    assert first.location.module == module == "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k"
    origin = next(o for o in first.operands if o.role == "input").origin
    assert "encoder_hidden_states" in json.dumps(dd.Report(findings=[first]).to_dict())
    assert origin is not None


def test_llama_fp32_inputs_embeds_same_first_failure_and_plain_meta_misses_it(llama_config):
    with torch.device("meta"):
        meta_model = transformers.LlamaForCausalLM(llama_config)
    report = dd.check(meta_model, inputs_embeds=("1x8x64", "float32"), dtype=torch.float16)
    real = transformers.LlamaForCausalLM(llama_config).half().eval()
    message, module = real_failure(real, inputs_embeds=torch.randn(1, 8, 64))
    assert "float != c10::Half" in message
    first = first_error(report)
    assert module == first.location.module == "model.layers.0.self_attn.q_proj"
    assert first.count == 3  # folded: the same mismatch in each of the 3 layers
    assert first.data["modules"] == [f"model.layers.{i}.self_attn.q_proj" for i in range(3)]
    assert "also in 2 more: model.layers.*.self_attn.q_proj" in first.message
    plain = copy.deepcopy(meta_model).half()
    out = plain(inputs_embeds=torch.empty(1, 8, 64, device="meta"))  # a plain meta run: no error at all
    assert out.logits.is_meta


def test_user_model_is_never_modified_and_data_never_copied(llama_config):
    model = transformers.LlamaForCausalLM(llama_config)
    before = {n: (p.dtype, p.device, p.data_ptr()) for n, p in model.named_parameters()}
    mirror = mirror_on_meta(model)
    assert all(p.is_meta for p in mirror.parameters())
    assert [n for n, _ in mirror.named_parameters()] == list(before)
    report = dd.check(model, "1x8:int64", dtype="bfloat16")
    assert not report.errors
    assert {n: (p.dtype, p.device, p.data_ptr()) for n, p in model.named_parameters()} == before


def _same_graph(a, b, pairs=None, depth=0):
    """a and b are copies of one object graph made alike: same types, same values of atoms, the same
    sharing (an object met twice in one is the same object twice in the other)."""
    pairs = {} if pairs is None else pairs  # id of an object of a -> its twin in b, and back
    if ("a", id(a)) in pairs or ("b", id(b)) in pairs:
        assert pairs.get(("a", id(a))) is b and pairs.get(("b", id(b))) is a
        return
    pairs["a", id(a)], pairs["b", id(b)] = b, a
    assert type(a) is type(b) and depth < 200
    if isinstance(a, torch.Tensor):
        assert (a.shape, a.stride(), a.dtype, a.device, a.requires_grad) == (
            b.shape, b.stride(), b.dtype, b.device, b.requires_grad
        )  # fmt: skip
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same_graph(a[k], b[k], pairs, depth + 1)
    elif isinstance(a, (list, tuple)):
        for x, y in zip(a, b, strict=True):
            _same_graph(x, y, pairs, depth + 1)
    elif isinstance(a, (set, frozenset, int, float, str, type(None), torch.dtype)):
        assert a == b
    elif hasattr(a, "__dict__") and not callable(a):
        _same_graph(vars(a), vars(b), pairs, depth + 1)


def test_the_mirror_is_the_deep_copy_it_always_was(llama_config):
    """mirror_on_meta copies module trees itself (tree_copy.deepcopy_tree, faster than copy.deepcopy's generic
    path): the copy must be the one copy.deepcopy makes, sharing, hooks and odd attributes included."""
    from dtype_doctor.checking import check as checking

    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(4, 4)
            self.again = [self.shared, {"k": self.shared}]  # not a child: a plain reference
            self.blocks = nn.ModuleList([self.shared, nn.Linear(4, 4, bias=False)])
            self.names = {"a", "b"}
            self.table = {"x": [1, 2], "t": torch.ones(2)}
            self.register_buffer("steps", torch.arange(3), persistent=False)
            self.register_forward_hook(lambda m, i, o: o)

    with torch.device("meta"):
        meta_llama = transformers.LlamaForCausalLM(llama_config)
    models = [
        transformers.LlamaForCausalLM(llama_config),
        meta_llama,
        tiny_models.unet(sample_size=8),
        Odd(),
        nn.Sequential(nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)),
    ]
    for model in models:
        fast, slow = mirror_on_meta(model), None
        original = checking.deepcopy_tree
        checking.deepcopy_tree = copy.deepcopy
        try:
            slow = mirror_on_meta(model)
        finally:
            checking.deepcopy_tree = original
        _same_graph(fast, slow)
        assert all(p.is_meta for p in fast.parameters())
    odd = mirror_on_meta(models[3])
    assert (
        odd.again[0] is odd.shared is odd.blocks[0] is odd.again[1]["k"]
        and odd.shared is not models[3].shared
    )
    assert odd.table is not models[3].table and odd.table["t"] is not models[3].table["t"]
    assert odd.steps.tolist() == [0, 1, 2]  # an integer buffer stays real
    llama = mirror_on_meta(models[0])
    tied = models[0].lm_head.weight is models[0].model.embed_tokens.weight
    assert (
        llama.config is not models[0].config
        and (llama.lm_head.weight is llama.model.embed_tokens.weight) == tied
    )


def test_silent_promotion_of_an_fp32_mask_is_reported_with_its_origin():
    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(5, 4)

        def forward(self, latents):
            mask = torch.ones(*latents.shape[:-1], 1, device=latents.device)  # float32 by default
            return self.proj(torch.cat([latents, mask], dim=-1))

    report = dd.check(Masked(), ("2x4", "float16"), dtype=torch.float16)
    # watch's fix mode casts at the promotion in user code, so the root cause is what gets reported
    promo = report.findings[0]
    assert promo.code == "silent-promotion" and promo.location.op == "torch.cat"
    odd = next(o for o in promo.operands if o.dtype == "float32")
    assert odd.origin.kind == "op" and odd.origin.op == "torch.ones"
    assert odd.origin.file.endswith("test_check.py")  # the line that made the fp32 tensor


def test_mixed_weight_and_bias_found_at_the_op():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    model.half()
    model[1].bias.data = model[1].bias.data.float()
    report = dd.check(model, ("3x4", "float16"), dtype=None)
    first = first_error(report)
    assert first.location.module == "1"
    assert {o.role: o.dtype for o in first.operands}["bias"] == "float32"


def test_the_checked_dtypes_are_the_reports_dtype_map_section():
    from dtype_doctor.sections import DtypeMap

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    report = dd.check(model, ("3x4", "float16"), dtype="float16", keep_fp32=("1",))
    modules = report.section(DtypeMap).by_path()
    assert modules["0"].dtypes == {"float16": 20} and modules["1"].dtypes == {"float32": 10}
    assert modules[""].type == "Sequential" and set(modules[""].dtypes) == {"float16", "float32"}
    assert "dtype_map" not in report.meta and model[0].weight.dtype == torch.float32
    assert [s["type"] for s in json.loads(report.to_json())["sections"]] == ["dtype_map"]


def test_autocast_of_another_dtype_over_a_half_model_is_reported(llama_config):
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(llama_config)
    report = dd.check(model, ("1x8", "int64"), dtype="float16", autocast="bfloat16")
    assert "autocast-half-conflict" in report.codes()  # the one family of this set-up, as in watch
    # an autocast put around forward by accelerate is found without being named
    accelerate = pytest.importorskip("accelerate")
    real = transformers.LlamaForCausalLM(llama_config).half()
    wrapped = accelerate.Accelerator(mixed_precision="bf16", cpu=True).prepare(real)
    found = dd.check(wrapped, ("1x8", "int64"), dtype=None)
    assert found.meta["autocast"] == "bfloat16" and "autocast-half-conflict" in found.codes()
    # the same dtype is only redundant: no error from the emulated autocast
    same = dd.check(model, ("1x8", "int64"), dtype="float16", autocast="float16")
    assert not [f for f in same.errors if f.code != "low-precision-under-autocast"]


# ---------------------------------------------------------------- CLI


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "dtype_doctor", *args], capture_output=True, text=True, cwd=cwd, env=env
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "models.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn

            def two_layers():
                return nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 2))

            def broken():
                raise ValueError("no weights here")
            """
        )
    )
    (d / "llama.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "vocab_size": 128,
            }
        )
    )
    (d / "scheduler.json").write_text(json.dumps({"_class_name": "DDPMScheduler", "num_train_timesteps": 10}))
    return d


def cli_in_process(capsys, monkeypatch, workdir: Path, *args: str) -> tuple[int, str, str]:
    """The same CLI entry point, in this process (torch already imported: fast)."""
    from dtype_doctor.cli import main

    monkeypatch.chdir(workdir)
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_check_finds_mismatch_exit_1_and_json(workdir, capsys, monkeypatch):
    code, out, err = cli_in_process(
        capsys, monkeypatch, workdir, "check", "models.py:two_layers", "--dtype", "float16",
        "--input", "4x8:float32", "--json",
    )  # fmt: skip
    assert code == 1, err
    first = json.loads(out)["findings"][0]
    assert first["code"] == "matmul-dtype-mismatch" and first["location"]["module"] == "0"


def test_cli_check_clean_exit_0(workdir, capsys, monkeypatch):
    args = ("check", "models.py:two_layers", "--dtype", "bf16", "--input", "4x8:bfloat16", "--no-color")
    code, out, err = cli_in_process(capsys, monkeypatch, workdir, *args)
    assert code == 0, out + err
    assert "no problems found" in out


def test_cli_check_hf_config(workdir, capsys, monkeypatch):
    code, out, err = cli_in_process(
        capsys, monkeypatch, workdir, "check", "--hf-config", "llama.json", "--dtype", "bfloat16", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["meta"]["model"] == "LlamaForCausalLM"
    code, out, err = cli_in_process(
        capsys, monkeypatch, workdir, "check", "--hf-config", "llama.json", "--dtype", "float16",
        "--input", "inputs_embeds=1x4x64", "--json",
    )  # fmt: skip
    assert code == 1
    assert json.loads(out)["meta"]["first_error"]["module"] == "model.layers.0.self_attn.q_proj"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("models.py:broken",), "factory raised ValueError: no weights here"),
        (("nowhere.py:build",), "no such file"),
        (("--hf-config", "models.py"), "not a JSON config"),
        (("models.py:two_layers", "--input", "4xx8:float32"), "cannot parse shape"),
        (("models.py:two_layers", "--input", "4x8:float99"), "unknown dtype"),
        (("models.py:two_layers", "--dtype", "half-ish"), "unknown dtype"),
        (("models.py:two_layers", "--dtype", "int64"), "--dtype must be a floating dtype, got int64"),
        (("models.py:two_layers", "--dtype", "bool"), "--dtype must be a floating dtype, got bool"),
        (("models.py:two_layers", "--dtype="), "--dtype needs a dtype, got an empty value"),
        (("models.py:two_layers", "--autocast", "int64"), "--autocast must be float16 or bfloat16"),
        (("models.py:two_layers", "--autocast", "float32"), "--autocast must be float16 or bfloat16"),
        (("models.py:two_layers", "--autocast="), "--autocast needs a dtype, got an empty value"),
        (
            ("models.py:two_layers", "--input", "4x8", "--dtype", "float16", "--keep-fp32", "nosuchmodule"),
            "keep_fp32: no module matches 'nosuchmodule'",
        ),
        (
            ("--hf-config", "llama.json", "models.py:two_layers"),
            "either PATH_OR_MODULE:FACTORY or --hf-config",
        ),
    ],
)
def test_cli_check_bad_input_is_one_clear_line(workdir, args, expected):
    run = cli("check", *args, cwd=workdir)
    assert run.returncode == 2
    assert expected in run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--dtype", "int64"), "--dtype must be a floating dtype, got int64"),
        (("--dtype", "bool"), "--dtype must be a floating dtype, got bool"),
        (("--dtype=",), "--dtype needs a dtype"),
        (("--autocast", "int64"), "--autocast must be float16 or bfloat16"),
        (
            ("--dtype", "float16", "--keep-fp32", "nosuchmodule"),
            "keep_fp32: no module matches 'nosuchmodule'",
        ),
    ],
)
def test_cli_audit_bad_options_are_one_clear_line(workdir, args, expected):
    run = cli("audit", "models.py:two_layers", *args, cwd=workdir)
    assert run.returncode == 2, run.stderr
    assert expected in run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_api_check_rejects_what_the_cli_rejects():
    with pytest.raises(dd.DoctorError, match="cannot parse shape '2xx4'"):
        dd.check(nn.Linear(4, 4), ("2xx4", "float32"))
    with pytest.raises(dd.DoctorError, match="dtype must be a floating dtype, got int64"):
        dd.check(nn.Linear(4, 4), ("2x4", "int64"), dtype="int64")
    with pytest.raises(dd.DoctorError, match="keep_fp32: no module matches 'nosuch'"):
        dd.check(nn.Sequential(nn.Linear(4, 4)), ("2x4", "float16"), keep_fp32=["nosuch"])
    # a pattern that matches keeps working, and a pair of plain strings is still a real input
    report = dd.check(nn.Sequential(nn.Linear(4, 4)), ("2x4", "float32"), keep_fp32=["Linear"])
    assert report.meta["kept_fp32"] == ["0"] and report.findings == []


def test_cli_check_config_that_is_not_a_model(workdir, capsys, monkeypatch):
    code, _, err = cli_in_process(capsys, monkeypatch, workdir, "check", "--hf-config", "scheduler.json")
    assert code == 2
    assert "'DDPMScheduler' is not a diffusers model class" in err and len(err.strip().splitlines()) == 1


class ReadsValues(nn.Module):
    def __init__(self, strict: bool = False):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.strict = strict

    def forward(self, x):
        x = self.a(x)
        if self.strict:
            assert not torch.isfinite(x).all(), "this model wants a non-finite activation"
        if torch.isfinite(x).all():  # reads an activation's value: impossible on meta, assumed
            x = x * 2
        return self.b(x)


def test_a_value_read_from_a_meta_activation_is_assumed_recorded_and_the_check_goes_on():
    report = dd.check(ReadsValues(), ("2x4", "float32"), dtype="float16")
    assert report.codes() == ["matmul-dtype-mismatch"]
    (assumed,) = report.meta["assumptions"]
    assert assumed["file"].endswith("test_check.py") and assumed["op"] == "item() / bool(tensor)"
    assert "bool scalar computed on meta: assumed True" in assumed["what"]
    line = Path(assumed["file"]).read_text().splitlines()[assumed["line"] - 1]
    assert "if torch.isfinite(x).all()" in line


def test_an_op_that_cannot_run_stops_the_dry_run_with_what_was_found():
    report = dd.check(nn.Sequential(ReadsValues(strict=True)), ("2x4", "float32"), dtype="float16")
    assert report.codes() == ["matmul-dtype-mismatch", "check-incomplete"]
    stop = report.findings[1]
    assert stop.severity == dd.Severity.WARNING and "non-finite activation" in stop.message
    assert stop.location.file.endswith("test_check.py") and stop.location.module == "0"


def test_an_offloaded_model_is_checked_without_touching_its_weights(llama_config):
    accelerate = pytest.importorskip("accelerate")
    model = transformers.LlamaForCausalLM(llama_config).half()
    accelerate.cpu_offload(model, execution_device="cpu")  # parameters on meta, weights in the hooks
    report = dd.check(model, inputs_embeds=("1x4x64", "float32"), dtype=None)
    assert report.meta["first_error"]["module"] == "model.layers.0.self_attn.q_proj"
    out = model(inputs_embeds=torch.randn(1, 4, 64).half())  # the user's hooks still work
    assert out.logits.dtype == torch.float16 and not out.logits.is_meta


def test_a_model_that_cannot_be_mirrored_is_a_clear_error():
    import threading

    model = nn.Linear(2, 2)
    model.lock = threading.Lock()  # deepcopy cannot copy a lock
    with pytest.raises(dd.DoctorError, match=r"cannot mirror Linear on meta.*pass a factory"):
        dd.check(model, ("1x2", "float32"))


def _tiny(name: str) -> tuple[nn.Module, dict]:
    T = transformers
    if name == "gpt2":
        model = tiny_models.gpt2(head=False, seed=None, n_layer=1, vocab_size=64, n_positions=16)
        return model, {"inputs_embeds": torch.randn(1, 6, 64)}
    if name == "bert":
        config = T.BertConfig(
            hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128, vocab_size=64
        )
        return T.BertModel(config), {"inputs_embeds": torch.randn(1, 6, 64)}
    if name == "clip-vision":
        model = tiny_models.clip_vision(
            seed=None, hidden_size=64, intermediate_size=128, num_attention_heads=4, image_size=32
        )
        return model, {"pixel_values": torch.randn(1, 3, 32, 32)}
    dit = diffusers.DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, num_layers=1, sample_size=8, patch_size=2,
        norm_num_groups=8, num_embeds_ada_norm=10,
    )  # fmt: skip
    return dit, {
        "hidden_states": torch.randn(1, 4, 8, 8),
        "timestep": torch.tensor([3]),
        "class_labels": torch.tensor([1]),
    }


@pytest.mark.parametrize("name", ["gpt2", "bert", "clip-vision", "dit"])
@pytest.mark.parametrize("state", ["fp32-inputs", "fp16-weights-fp32-biases"])
def test_first_error_matches_a_real_run_across_libraries(name, state):
    torch.manual_seed(0)
    model, inputs = _tiny(name)
    model.eval()
    if state == "fp32-inputs":  # the model loaded in fp16, the inputs left in fp32
        report = dd.check(model, dtype=torch.float16, **inputs)
        real = copy.deepcopy(model).half()
    else:  # the CogVLM state: checked as it is
        real = copy.deepcopy(model)
        for pname, p in real.named_parameters():
            if not pname.endswith("bias"):
                p.data = p.data.half()
        inputs = {k: v.half() if v.is_floating_point() else v for k, v in inputs.items()}
        report = dd.check(real, dtype=None, **inputs)
    try:
        _, module = real_failure(real, **inputs)
    except AssertionError:  # the real run succeeds (CLIP casts pixel_values itself): check must be clean
        assert not report.errors
        return
    assert report.meta["first_error"]["module"] == module


def test_integer_input_to_a_half_model_is_found_like_the_real_run(workdir, capsys, monkeypatch):
    model = nn.Linear(4, 4).half()
    message, _ = real_failure(model, torch.ones(2, 4, dtype=torch.int64))
    assert "Long and Half" in message
    (finding,) = dd.check(model, ("2x4", "int64")).findings
    assert finding.code == "matmul-dtype-mismatch" and "input int64" in finding.message
    code, out, err = cli_in_process(
        capsys, monkeypatch, workdir, "check", "models.py:two_layers", "--dtype", "float16",
        "--input", "4x8:int64", "--json",
    )  # fmt: skip
    assert code == 1, err
    first = json.loads(out)["findings"][0]
    assert first["code"] == "matmul-dtype-mismatch" and first["location"]["module"] == "0"


def test_integer_timesteps_of_a_diffusers_unet_stay_clean():
    from diffusers import UNet2DModel

    unet = UNet2DModel(
        sample_size=8, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(32, 32),
        down_block_types=("DownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "UpBlock2D"),
        norm_num_groups=8,
    )  # fmt: skip
    report = dd.check(unet, ("1x3x8x8", "float16"), ("1", "int64"))
    assert report.errors == [] and "check-incomplete" not in report.codes()


def test_cli_input_origin_names_the_flag_not_the_launcher(workdir, capsys, monkeypatch):
    args = ("check", "models.py:two_layers", "--dtype", "float16", "--input", "4x8:float32", "--json")
    _, out, _ = cli_in_process(capsys, monkeypatch, workdir, *args)
    report = json.loads(out)
    origin = report["findings"][0]["operands"][0]["origin"]
    assert origin["kind"] == "input" and origin["file"] == "--input 4x8:float32" and origin["line"] is None
    assert report["meta"]["loaded_as"] == "model.to(float16)"
    args = ("check", "models.py:two_layers", "--dtype", "float16", "--input", "4x8:float32", "--no-color")
    _code, out, _err = cli_in_process(capsys, monkeypatch, workdir, *args)
    assert "model input 'input' (--input 4x8:float32)" in out and "loaded as: model.to(float16)" in out
    assert "dtype-doctor:" not in out.replace("dtype-doctor check:", "")


def test_api_input_origin_is_the_line_that_called_check(llama_config):
    model = transformers.LlamaForCausalLM(llama_config)
    report = dd.check(model, inputs_embeds=("1x4x64", "float32"), dtype="float16")
    origin = first_error(report).operands[0].origin
    while origin.kind != "input" and origin.chain:
        origin = origin.chain[-1]
    assert origin.kind == "input" and origin.file.endswith("test_check.py")
    assert "dd.check(model" in Path(ROOT / "tests/test_check.py").read_text().splitlines()[origin.line - 1]
    assert report.meta["loaded_as"] == "transformers from_pretrained(dtype=float16)"


def test_moe_grouped_mm_meta_gap_is_a_note_not_the_users_bug():
    from zoo import models

    model = models.build("mixtral")
    report = dd.check(model, dtype=torch.float16, **models.inputs(model, torch.float16))
    assert report.findings == []
    (note,) = [n for n in report.meta["notes"] if "grouped_mm" in n]
    assert "its meta kernel rejects float16; checked as if it accepts it" in note and "moe.py:" in note


@pytest.mark.parametrize(
    "op",
    [
        lambda a, b: torch.mv(a, b[0]),
        lambda a, b: torch.cdist(a, b),
        lambda a, b: torch.cross(a, b, dim=1),
    ],
    ids=["mv", "cdist", "cross"],
)
def test_registered_contracts_catch_what_meta_kernels_let_through(op):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3, 3))

        def forward(self, x):
            return op(x, self.w)

    with pytest.raises(RuntimeError):  # the real CPU op fails ...
        op(torch.randn(3, 3), torch.randn(3, 3).half())
    op(torch.randn(3, 3, device="meta"), torch.randn(3, 3, device="meta").half())  # ... the meta one does not
    report = dd.check(M(), ("3x3", "float32"), dtype="float16")
    assert report.errors and report.errors[0].location.file.endswith("test_check.py")


def test_repeated_meta_ops_get_the_kernels_answer_and_still_reach_the_contracts():
    """The hybrid remakes a repeated all-meta op's output from the first answer (hybrid._memo): the
    same metadata as the meta kernel's, keyed on what the output depends on (2 and 2.0 promote
    differently, strides differ from shapes), and each repeat is still checked."""
    from dtype_doctor.checking.dry_run_modes import hybrid

    ints = torch.empty(3, 4, dtype=torch.int64, device="meta")
    floats = torch.empty(4, 3, device="meta").t()  # non-contiguous
    ops = [
        lambda: ints * 2,
        lambda: ints * 2.0,
        lambda: ints / ints,  # the default dtype
        lambda: floats + 1,
        lambda: floats.contiguous() + 1,
        lambda: floats.half().sum(0),
        lambda: torch.cat([floats, floats]),
        lambda: torch.max(floats, 1),  # a tuple
    ]

    def meta(out):
        if isinstance(out, tuple):
            return tuple(meta(o) for o in out)
        return (out.shape, out.stride(), out.dtype, out.storage_offset(), out.is_meta)

    expected = [meta(op()) for op in ops]
    with hybrid():
        for _ in range(3):
            assert [meta(op()) for op in ops] == expected
        torch.set_default_dtype(torch.float64)
        try:
            assert (ints / ints).dtype == torch.float64
        finally:
            torch.set_default_dtype(torch.float32)
        # a real operand joins the meta ones (a KV cache started from torch.tensor([])): answered
        # once, then from the memo; a mask made like an activation stays real with its values
        for _ in range(3):
            joined = torch.cat([torch.zeros(0), floats.reshape(-1)])
            assert joined.is_meta and joined.shape == (12,) and joined.dtype == torch.float32
            ones = torch.ones_like(ints)
            assert not ones.is_meta and ones.shape == (3, 4) and bool((ones == 1).all())

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))

        def forward(self, x):
            for block in self.blocks:
                x = block(x.float())
            return x

    report = dd.check(Twice(), ("2x8", "float32"), dtype="float16")
    assert sum(f.count for f in report.errors) == 3  # every copy checked, folded into one finding


def test_the_hybrid_sees_tensor_data_and_attention_before_the_watch_does():
    """torch.tensor(data, device=meta) never reaches dispatch and attention's meta decomposition
    would build its mask for real: the check's watch hands both to the hybrid first (hybrid.Fronts).
    Integer data the model reads stays real, attention runs on meta, and the watch still judges the
    call: a mask in a third dtype is reported with the line that made it."""
    import torch.nn.functional as F

    from dtype_doctor.checking.dry_run_modes import hybrid

    class Attend(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(8, 24)

        def forward(self, x):
            keep = torch.tensor([0, 1, 2], device=x.device)  # ids the model reads
            if keep.tolist() != [0, 1, 2]:
                raise ValueError("the ids' values were not kept")
            q, k, v = self.qkv(x[:, keep]).chunk(3, dim=-1)
            bias = torch.zeros(3, 3, dtype=torch.bfloat16, device=x.device)  # beside float16 q/k/v
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    report = dd.check(Attend(), ("1x4x8", "float16"), dtype=torch.float16)
    (finding,) = report.findings
    assert finding.code == "attention-dtype-mismatch" and "assumptions" not in report.meta
    mask = next(o for o in finding.operands if o.role == "mask")
    assert mask.origin.op == "torch.zeros" and mask.origin.file.endswith("test_check.py")

    with hybrid():  # outside a watch session the fronts are a mode of their own
        ids = torch.tensor([4, 5], device="meta")
        floats = torch.tensor([0.5], device="meta")
        q = torch.empty(1, 3, 8, device="meta")
        out = F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(3, 3, dtype=torch.bool).tril())
    assert not ids.is_meta and ids.tolist() == [4, 5] and floats.dtype == torch.float32
    assert out.is_meta and out.shape == (1, 3, 8)


def test_a_repeated_call_is_answered_from_the_memo_only_when_it_made_fresh_tensors(monkeypatch):
    """function_memo.CallMemo: a torch call met again in a dry run with the same meta operands gets
    its output from the first call's metadata, no aten op under it run again, unless that first
    call handed back an operand or a view, wrote into a tensor, or assumed a value read from meta."""
    from dtype_doctor.checking import hybrid as H

    ops: list[str] = []
    dispatch = H.HybridMode._dispatch
    monkeypatch.setattr(
        H.HybridMode, "_dispatch", lambda self, f, a, k: ops.append(str(f)) or dispatch(self, f, a, k)
    )

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x):
            if x.contiguous() is not x:  # an operand handed back must stay that operand
                raise AssertionError("contiguous() no longer returns its operand")
            y = self.proj(x)  # fresh: answered from the memo in the 2nd and 3rd block
            y.add_(1)  # a write: run each time
            picked = y[y > 0]  # a boolean index read from meta: assumed each time
            return y + picked.sum()

    report = dd.check(nn.Sequential(Block(), Block(), Block()), ("2x8", "float16"), dtype="float16")
    assert report.findings == []
    assert ops.count("aten.addmm.default") == 1 and ops.count("aten.add_.Tensor") == 3
    (assumed,) = [a for a in report.meta["assumptions"] if a["op"] == "boolean indexing"]
    assert assumed["count"] == 3
